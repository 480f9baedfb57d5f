/* The projection: the strategies' step at 8 ... 1024
 * workers on a described cluster (cluster_file.c), in the manner of the
 * simulator but closed-form where the simulator would walk every rank:
 *
 * - a worker's compute: each layer's forward and backward either measured
 *   here (perf_compute_measure) and divided by the group's speed, or
 *   projected from its multiply-adds (2 FLOPs each; backward twice the
 *   forward's) at the device's FLOP/s times its efficiency, or from the
 *   bytes it moves at the memory bandwidth where that takes longer (a
 *   roofline); the update from the bytes the optimizer moves;
 * - the exchange: the gradients fused into buckets (Horovod's tensor
 *   fusion) in backward order, each sent once its layers' backward has run
 *   and the previous bucket is done, so communication overlaps backward as
 *   Horovod's does -- or, with a cycle (--cycle-ms), as Horovod's loop
 *   runs them (horovod_sec) --; each bucket costs its algorithm's steps on
 *   the links they cross (perf_proj_exchange_sec) at the rate the links'
 *   frames and the library leave the payload (cluster_file.c); the
 *   parameter servers take the whole gradient after backward, as dtrain's
 *   synchronous ps does;
 * - GPipe across each host's ranks, the replicas' ring across hosts
 *   (pipeline_sec), and interleaved 1F1B with 2 chunks a rank: Megatron's
 *   bubble (p - 1) / (v m), v times the boundary messages;
 * - one asynchronous server, and one stale-synchronous (ssp:3): a
 *   worker's expected step (Yan et al.) from the pushes a second -- each
 *   worker's own loop of compute and round trip, at its own pace (async)
 *   or the slowest's (ssp's bound), at most the server's link and updates
 *   (ps_expected_sec);
 * - Megatron's tensor parallelism over a host's ranks (tp_sec): each
 *   layer's share of its products on tp rank 0's blocks (tensor_plan's
 *   pairs), its sums as ring allreduces inside the host, the replicas (one
 *   a host) ring-allreducing the rank's block across hosts after backward,
 *   every tp rank at once on the NIC; a replica's batch a step;
 * - Megatron's 3-D grid (Narayanan et al. 2021; tp inside a host, pp
 *   across hosts, their rank order tp, dp, pp): a stage a tp group of tp
 *   ranks of a host (tp a divisor of its ranks, 1 included) on its share
 *   of the layers (tp_sec's products and sums), pp stages on pp hosts cut
 *   by the tp rank's time, 1F1B's (m + pp - 1) slots (the bubble (pp - 1)
 *   / m, m = 4 pp) of the slowest stage or boundary (the activations
 *   across the NIC, Megatron's scatter/gather), then each rank's block
 *   ring-allreduced over the dp replicas; the (tp, pp of 2, 4, ... hosts)
 *   with the most samples/s that fits (grid_sec, grid_mem, grid_pick);
 * - local SGD: the ring's average of the parameters after every 4th
 *   step, not overlapped (a quarter of it a step); D-PSGD: each worker's
 *   parameters to both ring neighbours every step, one after the other on
 *   its link (across hosts for a host's first and last rank), after
 *   backward;
 * - data parallelism with a codec (fp16, int8, topk:0.01, powersgd:4,
 *   as train --compress runs them): the ring's buckets, each its codec's
 *   CPU (perf_codec_work: measured here, or each pass's bytes at a
 *   projected device's bandwidth) and its exchange (the bytes
 *   compress_exchange_bytes gives, on the links its pattern takes);
 * - a synchronous step waits for its slowest rank (a slower group, a
 *   --straggler);
 * - the memory of each strategy's fullest rank: data parallelism's
 *   layout (memory.c's), a codec's compressor arrays, a pipeline rank's
 *   chunks and the activations its schedule holds at once (the engine's
 *   own lists), a tp rank's blocks, a grid rank its stage's blocks and
 *   the micro-batches 1F1B holds on it.
 * Scaling efficiency: samples/s at n workers over n times one worker's
 * alone (no exchange). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "perf/project.h"
#include "strategy/pipe/schedule.h"
#include "strategy/tensor/tensor.h"
#include "strategy/worker.h"

static const char *const NAMES[PROJ_COUNT] = {
    "allreduce:ring", "allreduce:rhd", "allreduce:tree", "allreduce:hier", "ps:n (sharded on the workers)",
    "ps:1 (one server)", "ps:1 async (expected)", "ps:1 ssp:3 (expected)", "gpipe pp=host x dp (ring)", "interleaved:2 pp=host x dp", "tp=host x dp (ring)", "3d tp x pp=hosts x dp (ring)", "local sgd tau=4 (ring)",
    "d-psgd (ring of workers)", "compress fp16 (dp)", "compress int8 (dp)", "compress topk:0.01 (dp)",
    "compress powersgd:4 (dp)"};
static const char *const CODECS[PROJ_NCODECS] = {"fp16", "int8", "topk:0.01", "powersgd:4"};

const char *perf_proj_name(proj_strategy_t s) { return s >= 0 && s < PROJ_COUNT ? NAMES[s] : "?"; }
const char *perf_proj_codec(proj_strategy_t s) {
  return s >= PROJ_CODEC_FIRST && s < PROJ_COUNT ? CODECS[s - PROJ_CODEC_FIRST] : NULL;
}

static int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

/* One step of `bytes` on a link, `share` senders of a host crossing its
 * NIC at once. */
static double hop(perf_link_t l, double bytes, double share) { return l.alpha + bytes * share / l.beta; }

double perf_proj_exchange_sec(proj_strategy_t s, int P, int per_host, double S, perf_link_t intra,
                              perf_link_t inter) {
  if (P <= 1 && s != PROJ_PS_ONE) return 0;
  int g = per_host < P ? per_host : P, H = (P + g - 1) / g, multi = H > 1;
  perf_link_t far = multi ? inter : intra; /* the link a step between hosts takes */
  double t = 0;
  switch (s) {
  case PROJ_RING: /* 2(P - 1) steps of S / P; one rank of a host sends across at a time */
    return 2.0 * (P - 1) * hop(far, S / P, 1);
  case PROJ_RHD: { /* Rabenseifner: halving, then doubling; a fold in and out past 2^k */
    int pof2 = 1 << (ceil_lg(P + 1) - 1);
    if (pof2 < P) t += 2 * hop(far, S, 1);
    double part = S;
    for (int d = pof2 / 2; d >= 1; d /= 2) { /* partner at distance d: across hosts when d >= g */
      part /= 2;
      int across = multi && d >= g;
      t += 2 * hop(across ? inter : intra, part, across ? g : 1);
    }
    return t;
  }
  case PROJ_TREE: /* binomial reduce, then broadcast: the whole S each level, one sender a host */
    for (int d = 1; d < P; d *= 2) t += 2 * hop(multi && d >= g ? inter : intra, S, 1);
    return t;
  case PROJ_HIER: /* ring reduce-scatter in the host, g rings across hosts on one NIC, allgather */
    t = 2.0 * (g - 1) * hop(intra, S / g, 1);
    return t + 2.0 * (H - 1) * hop(inter, S / g / H, g);
  case PROJ_PS_SHARDED: { /* each rank serves 1/P: pushes and pulls the other P - 1 shares */
    double in_host = S * (g - 1) / P / intra.beta, across = multi ? g * S * (P - g) / P / inter.beta : 0;
    double a = (P - 1) * (multi ? inter.alpha : intra.alpha);
    return 2 * (a + (in_host > across ? in_host : across));
  }
  case PROJ_PS_ONE: /* the server's link takes P pushes, then sends P pulls, one at a time */
    return 2.0 * P * hop(multi || P >= per_host ? inter : intra, S, 1);
  case PROJ_GPIPE: /* not an exchange of its own: the ring across the replicas */
  default:
    return 0;
  }
}

/* ---- a worker's compute ----------------------------------------------- */

/* Multiply-adds a sample of layer l costs forward. */
static double layer_macs(const model_t *m, const layer_t *l) {
  double w = (double)l->nweight, T = m->positions > 0 ? m->positions : 1;
  switch (l->spec.kind) {
  case LAYER_DENSE: case LAYER_LOCAL2D: return w;
  case LAYER_CONV2D: return w * l->out_shape.h * l->out_shape.w;
  case LAYER_LINEAR: case LAYER_LMHEAD: case LAYER_LSTM: return w * T;
  case LAYER_ATTENTION: return w * T + 2.0 * T * (double)shape_size(l->out_shape); /* QK^T, AV */
  default: return 0;
  }
}

static int state_arenas(const optim_config_t *oc) {
  optimizer_t *o;
  if (!oc || optim_new(oc, 1, &o) != 0) return 1;
  int n = o->nstate;
  optim_free(o);
  return n;
}

/* A worker's forward, backward per layer and update on a device of group g. */
typedef struct {
  double *fwd, *bwd, update;
  double copy_byte;          /* seconds to copy a byte in the device's memory (read and write) */
} dev_times_t;

static void worker_times(const perf_group_t *g, model_t *m, const perf_compute_t *pc, int batch,
                         int nstate, dev_times_t *w) {
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    if (g->speed > 0) {
      w->fwd[i] = perf_layer_sec(pc, i, batch, 0) / g->speed;
      w->bwd[i] = perf_layer_sec(pc, i, batch, 1) / g->speed;
      continue;
    }
    double flop = 2.0 * layer_macs(m, l) * batch / (g->flops * g->efficiency);
    double bytes = 4.0 * ((double)(shape_size(l->in_shape) + shape_size(l->out_shape)) * batch +
                          (double)l->param_len);
    double mem = bytes / g->memory_bandwidth;
    w->fwd[i] = flop > mem ? flop : mem;
    w->bwd[i] = 2 * w->fwd[i];
  }
  if (g->speed > 0) w->update = pc->update_sec * (double)m->nparams / g->speed;
  else w->update = 4.0 * (3 + 2 * nstate) * (double)m->nparams / g->memory_bandwidth;
  w->copy_byte = g->speed > 0 ? pc->copy_sec / 4 / g->speed : 2.0 / g->memory_bandwidth;
}

/* ---- the step ----------------------------------------------------------- */

/* Tensor parallelism over a host's g ranks: what tp rank 0 of the model
 * holds and sums. */
typedef struct {
  int g;
  double *share;             /* [L] the layer's share of its whole work (params, or outputs) */
  double *sum_bytes;         /* [L] bytes the layer's sums allreduce, forward and backward */
  double *lay;               /* [4 L]: the rank's parameters, buffers, floats a sample holds from
                              * forward to backward (output, its gradient, scratch) and input
                              * floats a sample, layer by layer (tp_layers) */
  double params;             /* the rank's parameters */
  double mem;                /* the rank's bytes (memory_bytes of its blocks, the batch) */
} tp_proj_t;

typedef struct {
  double fwd, bwd, update;   /* the slowest rank's */
  double copy_byte;          /* its seconds to copy a byte (Horovod's fusion buffer) */
  double cycle, threshold;   /* Horovod's fusion cycle (0: fixed buckets) and buffer's bytes */
  const double *lf, *lb;     /* its layers' forward and backward */
  const model_t *m;
  double *ready;             /* [nbuckets] when a bucket's gradients are all computed */
  double *bytes;             /* [nbuckets] */
  size_t *off;               /* [nbuckets] where a bucket starts in the gradient arena (floats) */
  int nbuckets;
  const tp_proj_t *tp;       /* NULL: no tensor-parallel plan */
  double mult;               /* the slowest rank's slowdown (a --straggler) */
} plan_t;

/* Buckets in backward order: layers from the last, closed at bucket_bytes. */
static int make_buckets(const model_t *m, const double *bwd, double fwd_total, double bucket,
                        plan_t *p) {
  p->ready = calloc((size_t)m->nlayers + 1, sizeof *p->ready);
  p->bytes = calloc((size_t)m->nlayers + 1, sizeof *p->bytes);
  p->off = calloc((size_t)m->nlayers + 1, sizeof *p->off);
  if (!p->ready || !p->bytes || !p->off) return dt_error("out of memory");
  double t = fwd_total, acc = 0;
  size_t end = 0; /* the bucket's end in the arena: its last layer's */
  for (int i = m->nlayers - 1; i >= 0; i--) {
    const layer_t *l = &m->layers[i];
    t += bwd[i];
    if (acc == 0 && l->param_len) end = l->param_off + l->param_len;
    acc += 4.0 * (double)l->param_len;
    if (acc > 0 && (acc >= bucket || i == 0)) {
      p->ready[p->nbuckets] = t, p->bytes[p->nbuckets] = acc;
      p->off[p->nbuckets++] = end - (size_t)(acc / 4);
      acc = 0;
    }
  }
  return 0;
}

/* A pipeline over the g ranks of a host, V chunks a rank (GPipe: 1;
 * interleaved 1F1B: more) (M = 4g micro-batches of a replica's batch of g
 * workers' samples, so a rank sees a worker's samples a step), its layers
 * cut into g V chunks where the running time crosses each (g V)-th of the
 * total; a micro-batch's pass of a chunk takes its time x g / M (time
 * linear in samples); the boundary's activations and gradients on the
 * intra link; then the replicas (one a host) ring-allreduce the gradients
 * across hosts, every stage at once on the host's NIC, after backward;
 * each rank updates its stage. (V M + g - 1) slots of the slowest chunk or
 * boundary: the bubble (g - 1) / (V M) (Megatron's). */
/* The chunks of a pipeline of G: chunk c is layers [first[c], first[c + 1]),
 * cut where the running time crosses each G-th of the total. */
static void cut_layers(const double *t, int L, int G, int *first) {
  int cut = 1;
  double total = 0, run = 0;
  for (int i = 0; i < L; i++) total += t[i];
  first[0] = 0;
  for (int i = 0; i < L; i++) {
    if (i > 0 && cut < G && run + t[i] / 2 > total * cut / G) first[cut++] = i;
    run += t[i];
  }
  while (cut <= G) first[cut++] = L; /* a layer heavier than a chunk: the last ones empty */
}

static void pipeline_cuts(const plan_t *p, int G, int *first) {
  int L = p->m->nlayers;
  double t[L];
  for (int i = 0; i < L; i++) t[i] = p->lf[i] + p->lb[i];
  cut_layers(t, L, G, first);
}

static double pipeline_sec(const plan_t *p, int P, int per_host, double batch, int V,
                           perf_link_t intra, perf_link_t inter) {
  int g = per_host < P ? per_host : P, L = p->m->nlayers, M = 4 * g, dp = P / g, G = g * V;
  if (g < 2 || L < G) return INFINITY; /* no pipeline to make */
  int first[G + 1];
  pipeline_cuts(p, G, first);
  double worst = 0, slot_bytes = 0;
  for (int c = 0; c < G; c++) {
    double stage = 0;
    for (int i = first[c]; i < first[c + 1]; i++) stage += p->lf[i] + p->lb[i];
    worst = stage > worst ? stage : worst;
    if (c > 0 && first[c] < L) { /* a boundary before chunk c's first layer */
      double b = 4.0 * (double)shape_size(p->m->layers[first[c]].in_shape) * batch * g / M;
      slot_bytes = b > slot_bytes ? b : slot_bytes;
    }
  }
  double slot = worst * g / M, move = 2 * hop(intra, slot_bytes, 1);
  double pipe = (V * M + g - 1) * (slot > move ? slot : move);
  double grads = 4.0 * (double)p->m->nparams; /* every stage's, through the host's one NIC */
  double ring = dp > 1 ? 2.0 * (dp - 1) * hop(inter, grads / dp, 1) : 0;
  return pipe + ring + p->update / g;
}

/* A chunk's floats a sample held from its forward to its backward: its
 * layers' outputs and their gradients, their scratch, and its input (the
 * activation received, or the samples loaded), as stage_new lays out a
 * micro-batch's slot. */
static double chunk_act_floats(const model_t *m, int a, int b) {
  if (a >= b) return 0;
  double n = (double)shape_size(m->layers[a].in_shape);
  for (int i = a; i < b; i++)
    n += 2.0 * (double)shape_size(m->layers[i].out_shape) +
         (double)m->layers[i].scratch_len / (m->max_batch > 0 ? m->max_batch : 1);
  return n;
}

/* The pipeline's rank holding most (pipeline_sec's cuts, g ranks of V
 * chunks, M micro-batches of mb samples): the parameters, gradients,
 * optimizer state and buffers of its own chunks (chunk v of rank s is
 * v g + s), and the most activations its schedule -- the engine's own
 * instruction lists (pipe_schedule_build) -- holds at once, each (chunk,
 * micro-batch) from its forward to its backward: GPipe all M, 1F1B's
 * P - s, interleaved's more; the last chunk's rank the loss's
 * probabilities for one micro-batch. The method's memory: dtrain's engine
 * builds the whole model on every rank (memory.c) and gives every chunk M
 * slots (stage_new: what GPipe holds). */
static double pipeline_mem(const plan_t *p, int P, int per_host, double batch, int V, int nstate) {
  int g = per_host < P ? per_host : P, L = p->m->nlayers, M = 4 * g, G = g * V;
  if (g < 2 || L < G) return NAN;
  int first[G + 1];
  pipeline_cuts(p, G, first);
  pipe_schedule_t sc;
  if (pipe_schedule_build(V > 1 ? PIPE_INTERLEAVED : PIPE_GPIPE, g, V, M, 1, &sc) != 0) {
    dt_error_clear();
    return NAN;
  }
  double mb = batch * g / M, most = 0;
  for (int r = 0; r < g; r++) {
    double params = 0, buffers = 0, act[V], live = 0, peak = 0;
    for (int v = 0; v < V; v++) {
      int c = v * g + r;
      act[v] = chunk_act_floats(p->m, first[c], first[c + 1]) * mb;
      for (int i = first[c]; i < first[c + 1]; i++)
        params += (double)p->m->layers[i].param_len, buffers += (double)p->m->layers[i].buf_len;
    }
    for (int i = 0; i < sc.len[r]; i++) {
      const pipe_instr_t *in = &sc.prog[r][i];
      if (in->op == PIPE_FORWARD && (live += act[in->chunk]) > peak) peak = live;
      if (in->op == PIPE_BACKWARD) live -= act[in->chunk];
    }
    double probs = r == g - 1 ? mb * (double)p->m->nclasses : 0; /* chunk G - 1 = (V - 1) g + g - 1 */
    double bytes = 4.0 * ((2.0 + nstate) * params + buffers + peak + probs);
    most = bytes > most ? bytes : most;
  }
  pipe_schedule_free(&sc);
  return most;
}

/* ---- the codecs ----------------------------------------------------------- */

/* A codec as `train --compress X` runs it over the ring (worker.c's
 * configuration): the model's tensors as its layout reads them, its passes
 * measured here (devices at a speed), the memory its compressor keeps:
 * the arrays it carries from step to step (compressor_state: error
 * feedback's residual, powersgd's Q) and its two work arrays of the
 * gradients' length; not its message buffers (a few encodings). */
typedef struct {
  compress_config_t cc;
  compress_matrix_t *mats;
  int nmats;
  perf_compute_t here;       /* seconds a value of each pass on this CPU, scaled as predict.c does */
  double memory;             /* bytes: its arrays of the gradients' length */
} codec_proj_t;

#define CODEC_STEADY_STEP 1000000 /* a step past any warm-up */

static int codec_setup(const model_t *m, proj_strategy_t s, const perf_compute_t *pc, int measured,
                       codec_proj_t *c) {
  char *argv[] = {"train", "--workers", "2", "--compress", (char *)perf_proj_codec(s), NULL};
  train_config_t cfg;
  DT_TRY(train_options_parse(5, argv, &cfg));
  c->cc = worker_compress_config(&cfg);
  c->cc.algo = ALLREDUCE_RING;
  c->nmats = m->ntensors;
  c->mats = calloc((size_t)m->ntensors + 1, sizeof *c->mats);
  if (!c->mats) return dt_error("out of memory");
  compress_model_matrices(m, c->mats);
  c->memory = perf_codec_memory_bytes(&c->cc, m->nparams);
  if (!measured) return 0;
  c->here.copy_sec = pc->copy_sec;
  return perf_codec_calibrate(&c->cc, m->nparams, c->mats, c->nmats, &c->here);
}

/* The codec's passes a value on a device of group g: measured here and
 * divided by its speed, or, projected, the bytes each pass moves at its
 * memory bandwidth (an encoding of E bytes a value: encode reads 4 and
 * writes E, decode_add reads E and adds into 4; top-k's selection reads
 * the values twice, its decode reads the pairs and adds where they point;
 * error feedback's compensate and update read two arrays and write one
 * each) and powersgd's products at its FLOP/s (6 rows cols k a matrix,
 * and 2 rows k^2 to orthogonalize) or their 16 bytes a value, whichever
 * takes longer. */
static perf_compute_t codec_on(const perf_group_t *g, const codec_proj_t *c, const model_t *m) {
  perf_compute_t p = c->here;
  if (g->speed > 0) {
    p.encode_sec /= g->speed, p.decode_sec /= g->speed, p.feedback_sec /= g->speed;
    p.factor_sec /= g->speed, p.copy_sec /= g->speed;
    return p;
  }
  const codec_spec_t *k = &c->cc.codec;
  double bw = g->memory_bandwidth, n = (double)m->nparams, E = (double)codec_bytes(k, m->nparams) / n;
  p = (perf_compute_t){.copy_sec = 8 / bw, .feedback_sec = c->cc.error_feedback ? 24 / bw : 0};
  if (k->kind == CODEC_POWERSGD) {
    p.codec_family = PERF_CODEC_FACTORS;
    for (int i = 0; i < c->nmats; i++) {
      double r = (double)c->mats[i].rows, q = (double)c->mats[i].cols, rank = powersgd_rank(k, &c->mats[i]);
      double flop = (6 * r * q * rank + 2 * r * rank * rank) / (g->flops * g->efficiency), mem = 16 * r * q / bw;
      p.factor_sec += (rank > 0 ? (flop > mem ? flop : mem) : 0) / n;
    }
  } else if (codec_sparse(k)) {
    p.codec_family = PERF_CODEC_SPARSE, p.encode_sec = (8 + E) / bw, p.decode_sec = 2 * E / bw;
  } else {
    p.codec_family = PERF_CODEC_DENSE, p.encode_sec = (4 + E) / bw, p.decode_sec = (E + 8) / bw;
  }
  return p;
}

/* Seconds one bucket's compressed exchange takes on the links, and the
 * bytes rank 0 sends (compress_exchange_bytes: the exchange's own
 * formula): an allreduce (the sparse past the break-even, or powersgd's
 * factors: two, P then Q) as the ring of the same bytes; the dense
 * encodings' scatter-reduce and allgather (two rounds) and the sparse
 * ones' allgather (one) as P - 1 messages a round, each its latency, the
 * bytes to the host's ranks on the intra link and the rest through the
 * host's NIC, which its g ranks cross at once. */
static double codec_link_sec(const codec_proj_t *c, int P, int per_host, size_t off, size_t len,
                             perf_link_t intra, perf_link_t inter, double *sent) {
  compress_bytes_t x;
  if (P < 2) return 0;
  if (compress_exchange_bytes(&c->cc, 0, P, off, len, CODEC_STEADY_STEP, c->mats, c->nmats, &x) != 0) {
    dt_error_clear();
    return NAN;
  }
  *sent += (double)x.sent;
  double S = (double)(x.sent > x.received ? x.sent : x.received);
  int g = per_host < P ? per_host : P, multi = P > g;
  perf_link_t far = multi ? inter : intra;
  if (!strncmp(x.pattern, "allreduce", 9)) {
    double t = perf_proj_exchange_sec(PROJ_RING, P, per_host, S * P / (2.0 * (P - 1)), intra, inter);
    return t + (strcmp(x.pattern, "allreduce") ? 2.0 * (P - 1) * far.alpha : 0);
  }
  int rounds = strstr(x.pattern, "scatter") ? 2 : 1;
  double in_host = S * (g - 1) / (P - 1) / intra.beta;
  double across = multi ? g * S * (P - g) / (P - 1) / inter.beta : 0;
  return rounds * (P - 1) * far.alpha + (in_host > across ? in_host : across);
}

/* A codec strategy's step: the buckets in backward order as the ring's,
 * each, once ready and the one before is done, its codec's passes
 * (perf_codec_work on the slowest rank's device) then its exchange; the
 * codec's seconds and the bytes sent into *codec, *sent. */
static double codec_step_sec(const plan_t *p, const codec_proj_t *c, const perf_compute_t *dev, int P,
                             int per_host, perf_link_t intra, perf_link_t inter, double *codec,
                             double *sent) {
  double compute_end = p->fwd + p->bwd, link_free = 0;
  *codec = *sent = 0;
  if (P == 1) return compute_end + p->update;
  for (int b = 0; b < p->nbuckets; b++) {
    double start = p->ready[b] > link_free ? p->ready[b] : link_free, len = p->bytes[b] / 4;
    double work = perf_codec_work(dev, len, P) * p->mult;
    link_free = start + work + codec_link_sec(c, P, per_host, p->off[b], (size_t)len, intra, inter, sent);
    *codec += work;
  }
  return (link_free > compute_end ? link_free : compute_end) + p->update;
}

/* Horovod's background loop (horovod/common/operations.cc, 2017-2018):
 * each cycle the ranks send the coordinator (rank 0) the names of the
 * tensors they have ready and it broadcasts the responses -- the tensors
 * ready on every rank, in the order they became ready, fused while their
 * bytes stay within the fusion buffer (a larger tensor goes alone) -- and
 * every rank runs them one after another: copy into the fusion buffer,
 * allreduce, copy out (a tensor alone needs no copy). The next cycle
 * starts a cycle after this one started, or when its work ends if that is
 * later; a cycle finding nothing ready waits for the next. The loop's
 * phase against the step is arbitrary: the first tensor waits half a
 * cycle. A tensor is a layer's gradients (ready at the end of its
 * backward). Returns when the last response's copy out ends. */
static double horovod_sec(const plan_t *p, proj_strategy_t s, int P, int per_host,
                          perf_link_t intra, perf_link_t inter) {
  const model_t *m = p->m;
  int g = per_host < P ? per_host : P;
  perf_link_t far = P > g ? inter : intra;
  /* gather to the coordinator and broadcast back: binomial trees */
  double negotiate = 2.0 * ceil_lg(P) * far.alpha;
  double ready = p->fwd, start = -1, end = 0;
  int i = m->nlayers - 1; /* the next layer in backward order */
  for (;;) {
    while (i >= 0 && !m->layers[i].param_len) ready += p->lb[i--];
    if (i < 0) break;
    double r = ready + p->lb[i]; /* layer i's gradients ready */
    double at = start < 0 ? r + p->cycle / 2 : start + p->cycle > end ? start + p->cycle : end;
    if (r > at) at += p->cycle * ceil((r - at) / p->cycle); /* idle cycles until it is ready */
    start = at, end = at + negotiate;
    while (i >= 0 && ready + p->lb[i] <= start) { /* this cycle's responses */
      double fused = 0;
      int n = 0;
      for (; i >= 0 && ready + p->lb[i] <= start; i--) {
        double b = 4.0 * (double)m->layers[i].param_len;
        if (n > 0 && b > 0 && fused + b > p->threshold) break;
        fused += b, n += b > 0, ready += p->lb[i];
      }
      end += perf_proj_exchange_sec(s, P, per_host, fused, intra, inter) +
             (n > 1 ? 2 * fused * p->copy_byte : 0);
    }
  }
  return end;
}

/* One step of a tp group (a replica's batch): each layer's share of its
 * passes, its sums (ring allreduces over the host's g ranks), the update of
 * the rank's block, then the replicas' ring across the P / g hosts, the g
 * tp ranks of a host on its NIC at once. */
static double tp_sec(const plan_t *p, int P, perf_link_t intra, perf_link_t inter) {
  const tp_proj_t *tp = p->tp;
  if (!tp || P < tp->g || P % tp->g) return INFINITY;
  int g = tp->g, H = P / g;
  double t = 0, whole = (double)p->m->nparams;
  for (int i = 0; i < p->m->nlayers; i++) {
    t += (p->lf[i] + p->lb[i]) * tp->share[i];
    if (tp->sum_bytes[i] > 0) t += 2.0 * (g - 1) * hop(intra, tp->sum_bytes[i] / g, 1);
  }
  t += p->update * tp->params / whole;
  if (H > 1) t += 2.0 * (H - 1) * hop(inter, 4.0 * tp->params / H, g);
  return t;
}

/* ---- Megatron's 3-D grid ------------------------------------------------ */

/* Narayanan et al. 2021, their rank order (tp, then dp, then pp): a stage
 * is a tp group of tp ranks of a host (tp divides the host's ranks; the
 * host's other ranks are the same stage of other replicas), the pp stages
 * of a replica on pp hosts (a boundary crosses the NIC), the dp replicas
 * over the rest; m = PROJ_GRID_MB pp micro-batches of a replica's batch (pp
 * workers' samples: a tp group runs a worker's batch, as the tp row's),
 * one micro-batch (no pipeline) when pp = 1. */
typedef struct {
  int tp, pp, dp, M;
  int host;                  /* a host's ranks: host / tp replicas' stage on each */
  double f;                  /* a micro-batch over a worker's batch: pp / M */
} grid_t;

static grid_t grid_of(int P, int per_host, int tp, int pp) {
  grid_t g = {.tp = tp, .pp = pp, .dp = P / (tp * pp), .M = pp > 1 ? PROJ_GRID_MB * pp : 1, .host = per_host};
  g.f = (double)pp / g.M;
  return g;
}

/* Layer i's forward and backward on a tp rank for a micro-batch: its
 * share of the passes (tp_sec's), its sums' ring allreduces in the host. */
static double grid_layer_sec(const plan_t *p, const tp_proj_t *tp, int i, double f, perf_link_t intra) {
  double t = (p->lf[i] + p->lb[i]) * tp->share[i] * f;
  if (tp->g > 1 && tp->sum_bytes[i] > 0) t += 2.0 * (tp->g - 1) * hop(intra, tp->sum_bytes[i] * f / tp->g, 1);
  return t;
}

/* A boundary's activations forward and their gradients back for a
 * micro-batch of mb samples: Megatron's scatter/gather -- each of the
 * stage's tp ranks sends 1/tp across the NIC, all the host's ranks at
 * once (its host / tp replicas' stages), the next stage's all-gather the
 * pieces in its host (a ring of tp - 1 steps). */
static double grid_boundary_sec(const model_t *m, int first, grid_t g, double mb, perf_link_t intra,
                                perf_link_t inter) {
  double b = 4.0 * (double)shape_size(m->layers[first].in_shape) * mb;
  double gather = g.tp > 1 ? (g.tp - 1) * hop(intra, b / g.tp, 1) : 0;
  return 2 * (hop(inter, b / g.tp, g.host) + gather);
}

/* The grid's layers cut into pp stages where the running tp rank's time
 * crosses each pp-th of the total. */
static void grid_cuts(const plan_t *p, const tp_proj_t *tp, grid_t g, perf_link_t intra, int *first) {
  int L = p->m->nlayers;
  double t[L];
  for (int i = 0; i < L; i++) t[i] = grid_layer_sec(p, tp, i, g.f, intra);
  cut_layers(t, L, g.pp, first);
}

/* The step: (M + pp - 1) slots of the slowest stage's micro-batch or
 * boundary (the bubble (pp - 1) / M, pipeline_sec's), then each rank's
 * block ring-allreduced across the dp replicas -- host / tp of them in a
 * host, the ring's steps across hosts when there are more (tp rings, one
 * a tp rank, on the NIC at once, tp_sec's) -- and updated: the stage with
 * the largest block last. */
static double grid_sec(const plan_t *p, const tp_proj_t *tp, grid_t g, double batch, perf_link_t intra,
                       perf_link_t inter) {
  int L = p->m->nlayers, first[g.pp + 1];
  grid_cuts(p, tp, g, intra, first);
  double slot = 0, move = 0, tail = 0;
  for (int c = 0; c < g.pp; c++) {
    double stage = 0, block = 0;
    for (int i = first[c]; i < first[c + 1]; i++) stage += grid_layer_sec(p, tp, i, g.f, intra), block += tp->lay[i];
    slot = stage > slot ? stage : slot;
    if (c > 0 && first[c] < L) {
      double b = grid_boundary_sec(p->m, first[c], g, batch * g.f, intra, inter);
      move = b > move ? b : move;
    }
    int across = g.dp > g.host / g.tp;
    double ring = g.dp > 1 ? 2.0 * (g.dp - 1) * hop(across ? inter : intra, 4.0 * block / g.dp, across ? g.tp : 1) : 0;
    double end = ring + p->update * block / (double)p->m->nparams;
    tail = end > tail ? end : tail;
  }
  return (g.M + g.pp - 1) * (slot > move ? slot : move) + tail;
}

/* The grid's fullest rank: its stage's blocks (parameters, gradients,
 * optimizer state, buffers) and the micro-batches Megatron's 1F1B holds
 * on it at once (the engine's lists: pp - s on stage s), each its layers'
 * activations and the stage's input; the last stage the probabilities and
 * labels. pp = 1: the tp row's rank to the byte. */
static double grid_mem(const plan_t *p, const tp_proj_t *tp, grid_t g, double batch, int nstate,
                       perf_link_t intra) {
  int L = p->m->nlayers, first[g.pp + 1];
  grid_cuts(p, tp, g, intra, first);
  pipe_schedule_t sc = {0};
  if (g.pp > 1 && pipe_schedule_build(PIPE_1F1B, g.pp, 1, g.M, 1, &sc) != 0) {
    dt_error_clear();
    return NAN;
  }
  double mb = batch * g.f, most = 0;
  for (int c = 0; c < g.pp; c++) {
    double params = 0, buffers = 0, acts = first[c] < L ? tp->lay[3 * L + first[c]] : 0;
    for (int i = first[c]; i < first[c + 1]; i++)
      params += tp->lay[i], buffers += tp->lay[L + i], acts += tp->lay[2 * L + i];
    if (c == g.pp - 1) acts += (double)p->m->nclasses + 1;
    double live = g.pp > 1 ? pipe_schedule_peak_live(&sc, c) : 1;
    double bytes = 4.0 * ((2.0 + nstate) * params + buffers + live * mb * acts);
    most = bytes > most ? bytes : most;
  }
  if (g.pp > 1) pipe_schedule_free(&sc);
  return most;
}

/* The grid a row shows: of tp (tps[k].g, the divisors of a host's ranks
 * the model splits over; o->grid_tp fixes it) and pp (2, 4, ... hosts
 * dividing P's hosts, at most the layers; o->grid_pp fixes it), the most
 * samples/s (P / tp batches a step) whose rank fits the memory (the most
 * of all where none fits). A grid of pp 0: none to make. */
static grid_t grid_pick(const plan_t *p, const tp_proj_t *tps, int ntp, int P, int per_host,
                        const perf_proj_opts_t *o, int nstate, double limit, perf_link_t intra,
                        perf_link_t inter, double *sec, double *mem) {
  grid_t best = {0};
  *sec = INFINITY, *mem = NAN;
  if (P % per_host) return best;
  int best_fits = 0, H = P / per_host;
  for (int k = 0; k < ntp; k++) {
    const tp_proj_t *tp = &tps[k];
    if (o->grid_tp > 0 && tp->g != o->grid_tp) continue;
    for (int pp = o->grid_pp > 0 ? o->grid_pp : 2; pp <= p->m->nlayers && pp <= H; pp *= 2) {
      if (H % pp == 0) {
        grid_t g = grid_of(P, per_host, tp->g, pp);
        double t = grid_sec(p, tp, g, o->batch, intra, inter), b = grid_mem(p, tp, g, o->batch, nstate, intra);
        int fits = !(limit > 0 && b > limit);
        if (!best.pp || fits > best_fits || (fits == best_fits && t * g.tp < *sec * best.tp))
          best = g, best_fits = fits, *sec = t, *mem = b;
      }
      if (o->grid_pp > 0) break;
    }
  }
  return best;
}

static double step_sec(const plan_t *p, proj_strategy_t s, int P, int per_host, double batch,
                       perf_link_t intra, perf_link_t inter) {
  double compute_end = p->fwd + p->bwd, link_free = 0; /* when the last bucket's exchange ends */
  if (P == 1) return compute_end + p->update;
  if (s == PROJ_GPIPE) return pipeline_sec(p, P, per_host, batch, 1, intra, inter);
  if (s == PROJ_INTERLEAVED) return pipeline_sec(p, P, per_host, batch, PROJ_INTERLEAVE_V, intra, inter);
  if (s == PROJ_TP) return tp_sec(p, P, intra, inter);
  double model = 4.0 * (double)p->m->nparams;
  if (s == PROJ_LOCAL_SGD) /* the parameters' ring average every tau steps, after the update */
    return compute_end + p->update + perf_proj_exchange_sec(PROJ_RING, P, per_host, model, intra, inter) /
                                         PROJ_LOCAL_SGD_TAU;
  if (s == PROJ_DPSGD) { /* the parameters to both neighbours, one after the other on the link */
    perf_link_t far = P > per_host ? inter : intra;
    return compute_end + (P > 2 ? 2 : 1) * hop(far, model, 1) + p->update;
  }
  if (s == PROJ_PS_SHARDED || s == PROJ_PS_ONE) {
    double total = 0;
    for (int b = 0; b < p->nbuckets; b++) total += p->bytes[b];
    return compute_end + perf_proj_exchange_sec(s, P, per_host, total, intra, inter) + p->update;
  }
  if (p->cycle > 0) {
    link_free = horovod_sec(p, s, P, per_host, intra, inter);
    return (link_free > compute_end ? link_free : compute_end) + p->update;
  }
  for (int b = 0; b < p->nbuckets; b++) {
    double start = p->ready[b] > link_free ? p->ready[b] : link_free;
    link_free = start + perf_proj_exchange_sec(s, P, per_host, p->bytes[b], intra, inter);
  }
  return (link_free > compute_end ? link_free : compute_end) + p->update;
}

/* The workers' computes among the first P ranks: a class a group, the
 * straggler one of its own (forward and backward, no update). */
typedef struct {
  int n, count[PERF_MAX_GROUPS + 1];
  double compute[PERF_MAX_GROUPS + 1];
} worker_classes_t;

/* One server, asynchronous or stale-synchronous: Yan et al.'s expected
 * step, their best case (a worker's computation and its round trip, the
 * server's link and its updates overlapped across workers). A worker's
 * own loop: its forward and backward, then a push and a pull of the whole
 * gradient on the server's link (the server on a host of its own). The
 * server takes one push and its pull at a time on its link and applies
 * each push (an update): at most 1 / (2 hop + update) pushes a second.
 * Async: every worker at its own pace, the pushes a second the sum of
 * their rates. ssp:S: no worker more than S clocks ahead of the slowest,
 * so over many clocks every worker runs at the slowest's pace (Ho et
 * al.: the bound absorbs a worker's occasional delay, not a slower
 * worker's every step); alike workers run as under async (predict.c,
 * rule_ssp.c). The expected step: P over the pushes a second. */
static double ps_expected_sec(const plan_t *p, proj_strategy_t s, const worker_classes_t *wc,
                              double server_update, int P, int per_host, perf_link_t intra,
                              perf_link_t inter) {
  double total = 0, rate = 0, slowest = 0;
  for (int b = 0; b < p->nbuckets; b++) total += p->bytes[b];
  perf_link_t link = P >= per_host ? inter : intra;
  double trip = 2 * hop(link, total, 1);
  for (int k = 0; k < wc->n; k++) {
    rate += wc->count[k] / (wc->compute[k] + trip);
    if (wc->count[k] > 0 && wc->compute[k] > slowest) slowest = wc->compute[k];
  }
  if (s == PROJ_PS_SSP) rate = P / (slowest + trip);
  double served = 1 / (trip + server_update);
  return P / (rate < served ? rate : served);
}

/* The model's input: its file's `input shape=`, a sequence model's
 * 1x1xT, or the options' shape. */
static shape_t model_input(const perf_proj_opts_t *o, const model_spec_t *spec) {
  if (spec->nlayers > 0 && spec->layers[0].kind == LAYER_EMBEDDING) return (shape_t){1, 1, o->seq_len};
  return spec->input.c > 0 ? spec->input : o->input;
}

static int build(const perf_proj_opts_t *o, int batch, model_t **m) {
  model_spec_t spec;
  DT_TRY(model_spec_load(o->model, &spec));
  int seq = spec.nlayers > 0 && spec.layers[0].kind == LAYER_EMBEDDING;
  int classes = o->nclasses > 0 ? o->nclasses : seq ? 256 : 10; /* bytes; the image sets' */
  int rc = model_build(&spec, model_input(o, &spec), classes, batch, m);
  model_spec_free(&spec);
  return rc;
}

/* tp rank 0's model over g ranks (the model file's split= keys, else
 * Megatron's pairs of tensor_plan), beside m: each layer's share of its
 * work and its sums' bytes on o->batch samples (a sum's floats are its
 * samples' times a sample's: counted on one). A model with nothing to
 * split over g says why in why. */
static void memory_bytes(const model_t *m, int nstate, double *fixed, double *per_sample);

/* tp->lay from the rank's model tm (floats a sample: tm built for
 * max_batch samples). */
static int tp_layers(const model_t *tm, tp_proj_t *tp) {
  int L = tm->nlayers;
  double per = tm->max_batch > 0 ? tm->max_batch : 1;
  if (!(tp->lay = calloc(4 * (size_t)L + 1, sizeof *tp->lay))) return dt_error("out of memory");
  for (int i = 0; i < L; i++) {
    const layer_t *l = &tm->layers[i];
    tp->lay[i] = (double)l->param_len, tp->lay[L + i] = (double)l->buf_len;
    tp->lay[2 * L + i] = 2.0 * (double)shape_size(l->out_shape) + (double)l->scratch_len / per;
    tp->lay[3 * L + i] = (double)shape_size(l->in_shape);
  }
  return 0;
}

/* A "tp group" of one rank (nothing split, nothing summed): the 3-D
 * grid's stages of whole layers at tp = 1. */
static int tp_single(const model_t *m, tp_proj_t *tp) {
  *tp = (tp_proj_t){.g = 1, .params = (double)m->nparams};
  tp->share = calloc((size_t)m->nlayers + 1, sizeof *tp->share);
  tp->sum_bytes = calloc((size_t)m->nlayers + 1, sizeof *tp->sum_bytes);
  if (!tp->share || !tp->sum_bytes) return dt_error("out of memory");
  for (int i = 0; i < m->nlayers; i++) tp->share[i] = 1;
  return tp_layers(m, tp);
}

static int tp_build(const perf_proj_opts_t *o, const model_t *m, int g, int nstate, tp_proj_t *tp,
                    char *why, size_t why_cap) {
  model_spec_t spec;
  DT_TRY(model_spec_load(o->model, &spec));
  tp_link_t link = {.rank = 0, .size = g}; /* nobody runs the model: only its shapes are read */
  int rc = g < 2 ? dt_error("a host of one rank") :
           tensor_file_split_line(&spec, FILE_SPLIT_UNSET) ? tensor_plan_file(&spec, g) : tensor_plan(&spec, g, NULL);
  model_t *tm = NULL;
  if (rc == 0) {
    spec.tp = &link;
    rc = model_build(&spec, model_input(o, &spec), m->nclasses, 1, &tm);
  }
  model_spec_free(&spec);
  if (rc == 0 && tm->nlayers != m->nlayers) rc = dt_error("its tp model has other layers");
  if (rc != 0) {
    snprintf(why, why_cap, "%s", dt_errmsg());
    if (tm) model_free(tm);
    dt_error_clear();
    return 0; /* not an error of the projection: the row says why */
  }
  *tp = (tp_proj_t){.g = g, .params = (double)tm->nparams};
  double fixed, per_sample;
  memory_bytes(tm, nstate, &fixed, &per_sample);
  tp->mem = fixed + per_sample * o->batch; /* its blocks, its shards of the activations */
  tp->share = calloc((size_t)m->nlayers + 1, sizeof *tp->share);
  tp->sum_bytes = calloc((size_t)m->nlayers + 1, sizeof *tp->sum_bytes);
  if (!tp->share || !tp->sum_bytes) rc = dt_error("out of memory");
  for (int i = 0; rc == 0 && i < m->nlayers; i++) {
    const layer_t *a = &m->layers[i], *b = &tm->layers[i];
    double whole = a->param_len ? (double)a->param_len : (double)shape_size(a->out_shape);
    double part = a->param_len ? (double)b->param_len : (double)shape_size(b->out_shape);
    tp->share[i] = whole > 0 ? part / whole : 1;
    for (int bw = 0; bw < 2; bw++) {
      layer_sum_t sums[LAYER_MAX_SUMS];
      int n = model_layer_sums(tm, i, 1, bw, 0, 0, sums); /* layer 0: no input gradient */
      for (int k = 0; k < n; k++)
        if (!sums[k].bn && !sums[k].halo) tp->sum_bytes[i] += 4.0 * (double)sums[k].count * o->batch;
    }
  }
  if (rc == 0) rc = tp_layers(tm, tp);
  model_free(tm);
  return rc;
}

/* A rank's bytes as memory.c counts them (parameters, gradients, the
 * optimizer's state, buffers; each layer's output and its gradient, its
 * scratch, the batch's inputs), as fixed + per_sample x batch. */
static void memory_bytes(const model_t *m, int nstate, double *fixed, double *per_sample) {
  double acts = (double)m->nclasses;
  for (int i = 0; i < m->nlayers; i++)
    acts += 2.0 * (double)shape_size(m->layers[i].out_shape) +
            (double)m->layers[i].scratch_len / (m->max_batch > 0 ? m->max_batch : 1);
  acts += (double)shape_size(m->input) + 1;
  *fixed = 4.0 * ((2.0 + nstate) * (double)m->nparams + (double)m->nbuffers);
  *per_sample = 4.0 * acts;
}

/* The memory bounding the first P ranks: --memory-per-rank, else the
 * least of their groups' (0: none limited). */
static double memory_limit(const perf_cluster_file_t *c, const perf_proj_opts_t *o, int P) {
  if (o->memory_per_rank > 0) return o->memory_per_rank;
  double least = 0;
  for (int r = 0, g = 0; g < c->ngroups && r < P; r += c->group[g].hosts * c->group[g].ranks_per_host, g++)
    if (c->group[g].memory > 0 && (least == 0 || c->group[g].memory < least)) least = c->group[g].memory;
  return least;
}

/* The slowest rank among the first P: its compute, and its group's. */
static void slowest(const perf_cluster_file_t *c, const double *group_step, int P,
                    const perf_proj_opts_t *o, int *gi, double *mult) {
  *gi = 0, *mult = 1;
  double worst = -1;
  for (int g = 0, first = 0; g < c->ngroups && first < P; g++) {
    double t = group_step[g];
    if (t > worst) worst = t, *gi = g;
    first += c->group[g].hosts * c->group[g].ranks_per_host;
  }
  if (o->straggler_rank >= 0 && o->straggler_rank < P && o->straggler_slowdown > 1) {
    const perf_group_t *sg = perf_cluster_file_group(c, o->straggler_rank);
    int k = (int)(sg - c->group);
    if (group_step[k] * o->straggler_slowdown > worst) *gi = k, *mult = o->straggler_slowdown;
  }
}

int perf_project(const perf_proj_opts_t *o, const perf_cluster_file_t *c, int from, int to,
                 perf_projection_t *out) {
  double t0 = dt_now();
  memset(out, 0, sizeof *out);
  int measured = 0;
  for (int g = 0; g < c->ngroups; g++) measured |= c->group[g].speed > 0;
  for (int g = 0; g < c->ngroups; g++) out->projected |= !(c->group[g].speed > 0);
  model_t *m = NULL;
  DT_TRY(build(o, measured ? o->batch : 1, &m));
  int nstate = state_arenas(o->optim), L = m->nlayers, rc = 0;
  tp_proj_t tp = {0};
  rc = tp_build(o, m, c->group[0].ranks_per_host, nstate, &tp, out->tp_why, sizeof out->tp_why);
  /* the grid's tp groups: tp = 1, and each divisor of a host's ranks the model splits over */
  tp_proj_t grid_tp[PROJ_GRID_MAX_TP] = {{0}};
  int ngrid_tp = 0;
  if (rc == 0) rc = tp_single(m, &grid_tp[ngrid_tp++]);
  for (int d = 2, g = c->group[0].ranks_per_host; rc == 0 && d <= g && ngrid_tp < PROJ_GRID_MAX_TP; d++) {
    char why[160]; /* a degree the model does not split over: not tried */
    if (g % d) continue;
    if (d == g) grid_tp[ngrid_tp] = tp; /* the tp row's own (freed as it) */
    else rc = tp_build(o, m, d, nstate, &grid_tp[ngrid_tp], why, sizeof why);
    if (rc == 0 && grid_tp[ngrid_tp].g) ngrid_tp++;
  }
  perf_compute_t pc = {0};
  if (measured) {
    model_init_params(m, 1);
    if (rc == 0) rc = perf_compute_measure(m, o->optim, &o->batch, 1, &pc);
  }
  codec_proj_t codec[PROJ_NCODECS] = {0};
  for (int k = 0; rc == 0 && k < PROJ_NCODECS; k++)
    rc = codec_setup(m, PROJ_CODEC_FIRST + k, &pc, measured, &codec[k]);
  /* per group: forward and backward per layer; then each group's step; then
   * the slowest rank's backward and forward per layer, scaled */
  double *buf = calloc((size_t)(2 * L * c->ngroups + c->ngroups + 2 * L) + 1, sizeof *buf);
  dev_times_t *w = calloc((size_t)c->ngroups, sizeof *w);
  if (rc == 0 && (!buf || !w)) rc = dt_error("out of memory");
  double *group_step = buf ? buf + 2 * L * c->ngroups : NULL;
  double *bw = buf ? group_step + c->ngroups : NULL, *fw = bw ? bw + L : NULL;
  for (int g = 0; rc == 0 && g < c->ngroups; g++) {
    w[g].fwd = buf + 2 * L * g, w[g].bwd = buf + 2 * L * g + L;
    worker_times(&c->group[g], m, &pc, o->batch, nstate, &w[g]);
    for (int i = 0; i < L; i++) group_step[g] += w[g].fwd[i] + w[g].bwd[i];
    group_step[g] += w[g].update;
  }
  perf_link_t inter = c->inter;
  if (o->net_bandwidth > 0) inter.beta = o->net_bandwidth;
  if (o->net_latency > 0) inter.alpha = o->net_latency;
  out->grad_bytes = 4.0 * (double)m->nparams;
  out->inter_beta = inter.beta;
  out->one_worker_sec = rc == 0 ? group_step[0] : 0;
  out->compute_sec = out->one_worker_sec;
  out->update_sec = rc == 0 ? w[0].update : 0;
  memory_bytes(m, nstate, &out->mem_fixed, &out->mem_per_sample);
  double mem = out->mem_fixed + out->mem_per_sample * o->batch;
  out->mem_limit = o->memory_per_rank > 0 ? o->memory_per_rank : perf_cluster_file_memory(c);
  int per_host = c->group[0].ranks_per_host;
  for (int P = from; rc == 0 && P <= to && out->nrows < 16; P *= 2) {
    perf_proj_row_t *row = &out->row[out->nrows++];
    row->workers = P;
    double limit = row->mem_limit = memory_limit(c, o, P);
    int gi;
    double mult;
    slowest(c, group_step, P, o, &gi, &mult);
    double fwd = 0, bwd = 0;
    for (int i = 0; i < L; i++) fwd += w[gi].fwd[i] * mult, bwd += w[gi].bwd[i] * mult;
    for (int i = 0; i < L; i++) bw[i] = w[gi].bwd[i] * mult;
    for (int i = 0; i < L; i++) fw[i] = w[gi].fwd[i] * mult;
    plan_t p = {.fwd = fwd, .bwd = bwd, .update = w[gi].update * mult, .lf = fw, .lb = bw, .m = m,
                .copy_byte = w[gi].copy_byte * mult, .cycle = o->cycle_sec,
                .threshold = o->bucket_bytes, .tp = tp.g ? &tp : NULL, .mult = mult};
    rc = make_buckets(m, bw, fwd, o->bucket_bytes, &p);
    worker_classes_t wc = {0};
    for (int g = 0, first = 0; g < c->ngroups && first < P; g++) {
      int n = c->group[g].hosts * c->group[g].ranks_per_host;
      wc.count[wc.n] = P - first < n ? P - first : n, first += n;
      wc.compute[wc.n++] = group_step[g] - w[g].update;
    }
    if (o->straggler_rank >= 0 && o->straggler_rank < P && o->straggler_slowdown > 1) {
      int k = (int)(perf_cluster_file_group(c, o->straggler_rank) - c->group);
      wc.count[k]--, wc.count[wc.n] = 1, wc.compute[wc.n++] = wc.compute[k] * o->straggler_slowdown;
    }
    for (int s = 0; rc == 0 && s < PROJ_COUNT; s++) {
      double t;
      row->memory_bytes[s] = mem;
      if (s == PROJ_GRID) {
        grid_t g = grid_pick(&p, grid_tp, ngrid_tp, P, per_host, o, nstate, limit, c->intra, inter, &t,
                             &row->memory_bytes[s]);
        row->grid_tp = g.tp, row->grid_pp = g.pp, row->grid_dp = g.dp;
      } else if (s == PROJ_PS_ASYNC || s == PROJ_PS_SSP) {
        t = ps_expected_sec(&p, s, &wc, w[0].update, P, per_host, c->intra, inter);
      } else if (s >= PROJ_CODEC_FIRST) {
        const codec_proj_t *k = &codec[s - PROJ_CODEC_FIRST];
        perf_compute_t dev = codec_on(&c->group[gi], k, m);
        t = codec_step_sec(&p, k, &dev, P, per_host, c->intra, inter, &row->codec_sec[s], &row->bytes_sent[s]);
        row->memory_bytes[s] += k->memory;
      } else {
        t = step_sec(&p, s, P, per_host, o->batch, c->intra, inter);
      }
      if (s == PROJ_GPIPE || s == PROJ_INTERLEAVED)
        row->memory_bytes[s] = pipeline_mem(&p, P, per_host, o->batch, s == PROJ_GPIPE ? 1 : PROJ_INTERLEAVE_V, nstate);
      if (s == PROJ_TP) row->memory_bytes[s] = tp.g ? tp.mem : NAN;
      row->fits[s] = !(limit > 0 && row->memory_bytes[s] > limit);
      row->step_sec[s] = t;
      double replicas = s == PROJ_TP ? (double)P / tp.g /* a tp group runs one batch */
                        : s == PROJ_GRID && row->grid_tp ? (double)P / row->grid_tp : P;
      row->samples_per_sec[s] = isfinite(t) ? (double)o->batch * replicas / t : NAN;
      row->efficiency[s] = isfinite(t) ? out->one_worker_sec * replicas / P / t : NAN;
    }
    free(p.ready), free(p.bytes), free(p.off);
  }
  for (int k = 0; k < PROJ_NCODECS; k++) free(codec[k].mats);
  free(buf), free(w);
  for (int k = 0; k < ngrid_tp; k++)
    if (grid_tp[k].share != tp.share) /* the tp row's own is freed as it */
      free(grid_tp[k].share), free(grid_tp[k].sum_bytes), free(grid_tp[k].lay);
  free(tp.share), free(tp.sum_bytes), free(tp.lay);
  perf_compute_free(&pc);
  model_free(m);
  out->seconds = dt_now() - t0;
  return rc;
}

void perf_projection_print(const perf_projection_t *p, const perf_cluster_file_t *c, FILE *out) {
  fprintf(out, "# %s: %d hosts, %d ranks; a worker's step alone %.4g s (%s); gradients %.4g MB\n",
          c->name, c->nhosts, c->nranks, p->one_worker_sec,
          p->projected ? "projected: FLOP/s x efficiency, not measured" : "measured here / speed",
          p->grad_bytes / 1e6);
  fprintf(out, "# the payload's rate (the line's x frames' payload share x the library's efficiency): "
          "in a host %.4g GB/s (%.3f of the line), between hosts %.4g GB/s a NIC (%s %.3f)\n",
          c->intra.beta / 1e9, c->intra_share, p->inter_beta / 1e9,
          p->inter_beta == c->inter.beta ? "of the line:" : "--net's rate as given; the file's share",
          c->inter_share);
  fprintf(out, "%-8s %-30s %12s %14s %11s %10s\n", "workers", "strategy", "step_ms", "samples/s",
          "efficiency", "mem_MiB");
  const double MiB = 1024.0 * 1024.0;
  for (int k = 0; k < p->nrows; k++)
    for (int s = 0; s < PROJ_COUNT; s++) {
      const perf_proj_row_t *r = &p->row[k];
      if (!isfinite(r->step_sec[s])) { /* a pipeline or tp group the host's ranks cannot make */
        fprintf(out, "%-8d %-30s %12s %14s %11s %10s  %s\n", r->workers, perf_proj_name(s), "-", "-",
                "-", "-", s >= PROJ_CODEC_FIRST ? "the compressed exchange's bytes could not be counted"
                : s == PROJ_GRID ? "no pp of 2, 4, ... hosts (at most the layers) divides the hosts"
                : s != PROJ_TP && s != PROJ_GRID ? "fewer layers than a host's ranks x chunks"
                : p->tp_why[0] ? p->tp_why : "fewer workers than a host's ranks");
        continue;
      }
      fprintf(out, "%-8d %-30s %12.3f %14.1f %10.1f%% %10.1f", r->workers, perf_proj_name(s),
              1e3 * r->step_sec[s], r->samples_per_sec[s], 100 * r->efficiency[s],
              r->memory_bytes[s] / MiB);
      if (!r->fits[s])
        fprintf(out, "  does not fit: %.1f MiB over", (r->memory_bytes[s] - r->mem_limit) / MiB);
      if (s == PROJ_GRID)
        fprintf(out, "  tp=%d pp=%d dp=%d m=%d", r->grid_tp, r->grid_pp, r->grid_dp,
                r->grid_pp > 1 ? PROJ_GRID_MB * r->grid_pp : 1);
      if (s == PROJ_PS_ASYNC || s == PROJ_PS_SSP) /* each push finds the others' since its pull */
        fprintf(out, "  staleness %d expected", r->workers - 1);
      if (s >= PROJ_CODEC_FIRST)
        fprintf(out, "  codec %.3f ms, %.4g MB sent", 1e3 * r->codec_sec[s], r->bytes_sent[s] / 1e6);
      fputc('\n', out);
    }
}
