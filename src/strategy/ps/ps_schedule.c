/* The order of a worker's transfers to and from the parameter servers
 * under --comm-order priority and tictac: which layer's parameters go
 * first. A pure function, so that the order can be checked by hand.
 *
 * priority (ByteScheduler, Peng et al. 2019): layer order. The next
 * forward pass runs layer 0 first, so layer 0's parameters are the most
 * urgent and the last layer's the least.
 *
 * tictac (TicTac's TAC, Hashemi et al. 2019): each transfer gets the time
 * at which the forward pass first needs it, start(i) = the measured
 * forward seconds of the layers before i, and the earliest goes first;
 * equal starts go the smaller transfer first (TAC prefers the transfer
 * that unblocks compute soonest, i.e. the one that takes the link for
 * the least time), then in layer order. TAC's other input, the
 * communication a compute op still waits on, is the same for every layer
 * here: a layer needs its own parameters only.
 *
 * On a chain model run in layer order (every model of dtrain: a layer
 * reads an earlier layer's output, and the forward runs layers 0..n-1),
 * start(i) grows with i as soon as each layer's forward has been timed
 * at more than 0, so TAC's order is layer order: the two differ only
 * where starts tie, i.e. before the first forward pass has been timed
 * (every start 0: smallest transfer first) or after layers whose forward
 * costs nothing (a flatten that aliases its input is never timed). On a
 * graph whose branches can run in either order, which TicTac schedules,
 * the two would differ; dtrain's engine has no such graph. */
#include "strategy/ps/ps.h"

/* a goes before b */
static int earlier(const double *start, const size_t *bytes, int a, int b) {
  if (start[a] != start[b]) return start[a] < start[b];
  if (bytes[a] != bytes[b]) return bytes[a] < bytes[b];
  return a < b;
}

int ps_transfer_order(coll_order_t order, const double *fwd_sec, const size_t *bytes, int nlayers,
                      double *start, int *out) {
  double t = 0;
  for (int i = 0; i < nlayers; i++) { /* when the forward reaches layer i */
    start[i] = order == COLL_ORDER_TICTAC ? t : (double)i;
    t += fwd_sec[i] > 0 ? fwd_sec[i] : 0;
  }
  int n = 0;
  for (int i = 0; i < nlayers; i++) { /* insertion sort: a handful of layers, no allocation */
    if (!bytes[i]) continue;
    int j = n++;
    for (; j > 0 && earlier(start, bytes, i, out[j - 1]); j--) out[j] = out[j - 1];
    out[j] = i;
  }
  return n;
}
