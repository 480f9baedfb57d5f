/* The description of a network (comm_net_t): the --net option's parser,
 * and the hosts it puts the ranks on. Both transports read it: local
 * emulates the links and the hosts, mpi takes the hosts (for tests) and the
 * timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"

#define NET_EXAMPLE "hosts=2,intra-bandwidth=10Gbit,bandwidth=1Gbit,latency=50us"
#define MAX_HOSTS 4096 /* as many as local's ranks */

static int parse_latency(const char *key, const char *text, double *out) {
  char opt[32];
  snprintf(opt, sizeof opt, "net %s", key);
  DT_TRY(parse_duration(opt, text, out));
  if (!(*out <= COMM_NET_LATENCY_MAX))
    return dt_error("option --net: %s %s is out of range (expected 0 to %g s)", key, text,
                    COMM_NET_LATENCY_MAX);
  return 0;
}

static int parse_rate(const char *key, const char *text, double *out) {
  char opt[32];
  snprintf(opt, sizeof opt, "net %s", key);
  DT_TRY(parse_bandwidth(opt, text, out));
  if (!(*out >= COMM_NET_BANDWIDTH_MIN && *out <= COMM_NET_BANDWIDTH_MAX))
    return dt_error("option --net: %s %s is out of range (expected 1 kbit/s to 10 Tbit/s)", key,
                    text);
  return 0;
}

/* A positive decimal integer of at most 4 digits' worth (1..MAX_HOSTS), the
 * whole of [s, end). */
static long small_count(const char *s, const char *end) {
  long v = 0;
  if (s == end) return -1;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
    if (v > MAX_HOSTS) return MAX_HOSTS + 1;
  }
  return v;
}

/* "2" (two hosts, ranks split evenly) or "3+2" (3 ranks on host 0, 2 on host 1). */
static int parse_hosts(const char *text, comm_net_t *net) {
  int list = strchr(text, '+') != NULL, n = 0;
  int sizes[COMM_NET_MAX_HOST_LIST];
  for (const char *s = text;;) {
    const char *end = strchr(s, '+');
    if (!end) end = s + strlen(s);
    long v = small_count(s, end);
    if (v < 0)
      return dt_error("option --net: hosts=%s is not a number of hosts or a list of ranks per "
                      "host (examples: hosts=2, hosts=3+2)", text);
    if (v == 0)
      return dt_error("option --net: hosts=%s: %s", text,
                      list ? "every host needs at least one rank" : "expected at least 1 host");
    if (v > MAX_HOSTS)
      return dt_error("option --net: hosts=%s: %s %d", text,
                      list ? "a host holds at most" : "at most", MAX_HOSTS);
    if (list && n == COMM_NET_MAX_HOST_LIST)
      return dt_error("option --net: hosts=%s: at most %d hosts in a list (hosts=N takes any "
                      "number, split evenly)", text, COMM_NET_MAX_HOST_LIST);
    if (list) sizes[n] = (int)v;
    n = list ? n + 1 : (int)v;
    if (!*end) break;
    s = end + 1;
  }
  memset(net->host_ranks, 0, sizeof net->host_ranks);
  if (list) memcpy(net->host_ranks, sizes, (size_t)n * sizeof(int));
  net->hosts = n;
  return 0;
}

int comm_net_parse(const char *text, comm_net_t *net) {
  static const char *const keys[] = {"latency", "bandwidth", "hosts", "intra-latency",
                                     "intra-bandwidth", "link"};
  const char *v[6];
  char buf[512];
  comm_net_t n = *net;
  n.latency = n.bandwidth = n.intra_latency = n.intra_bandwidth = 0;
  n.hosts = n.shared_link = 0;
  memset(n.host_ranks, 0, sizeof n.host_ranks);
  DT_TRY(parse_items("net", text, NET_EXAMPLE, buf, sizeof buf, keys, 6, v));
  if (v[0]) DT_TRY(parse_latency("latency", v[0], &n.latency));
  if (v[1]) DT_TRY(parse_rate("bandwidth", v[1], &n.bandwidth));
  if (v[2]) DT_TRY(parse_hosts(v[2], &n));
  if (v[3]) DT_TRY(parse_latency("intra-latency", v[3], &n.intra_latency));
  if (v[4]) DT_TRY(parse_rate("intra-bandwidth", v[4], &n.intra_bandwidth));
  if ((v[3] || v[4]) && n.hosts < 2)
    return dt_error("option --net: %s is the link within a host: it needs hosts=N with N >= 2 "
                    "(example: %s)", v[3] ? "intra-latency" : "intra-bandwidth", NET_EXAMPLE);
  if (v[5] && strcmp(v[5], "shared") && strcmp(v[5], "own"))
    return dt_error("option --net: link=%s (expected link=shared, a host's ranks sharing its link "
                    "to the other hosts, or link=own, a link per rank)", v[5]);
  if (v[5] && n.hosts < 2)
    return dt_error("option --net: link=%s is how a host's ranks reach the other hosts: it needs "
                    "hosts=N with N >= 2 (example: hosts=2,bandwidth=1Gbit,link=shared)", v[5]);
  /* a real host's ranks share its NIC: the default with hosts (measured
   * against the namespace cluster's TCP: 0.94 of its step, own 0.53) */
  n.shared_link = n.hosts >= 2 && (!v[5] || !strcmp(v[5], "shared"));
  *net = n;
  return 0;
}

/* "3+2" or "2", as the user wrote it. */
static void hosts_text(const comm_net_t *net, char *buf, size_t cap) {
  if (net->host_ranks[0] <= 0) {
    snprintf(buf, cap, "%d", net->hosts);
    return;
  }
  buf[0] = 0;
  for (int i = 0; i < net->hosts && i < COMM_NET_MAX_HOST_LIST; i++) {
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%d", i ? "+" : "", net->host_ranks[i]);
  }
}

int comm_net_hosts(const comm_net_t *net, int size, int *host) {
  for (int r = 0; r < size; r++) host[r] = 0;
  if (!net || net->hosts <= 1) return 0;
  char text[COMM_NET_MAX_HOST_LIST * 6];
  hosts_text(net, text, sizeof text);
  if (net->host_ranks[0] > 0) {
    long sum = 0;
    for (int i = 0; i < net->hosts && i < COMM_NET_MAX_HOST_LIST; i++) sum += net->host_ranks[i];
    if (sum != size)
      return dt_error("net hosts=%s: the hosts hold %ld ranks but the run has %d ranks", text, sum, size);
    for (int i = 0, r = 0; i < net->hosts; i++)
      for (int k = 0; k < net->host_ranks[i]; k++) host[r++] = i;
    return 0;
  }
  if (net->hosts > size)
    return dt_error("net hosts=%s: more hosts than the %d ranks of the run", text, size);
  /* as even as possible: the first size mod hosts hosts one rank more */
  int base = size / net->hosts, extra = size % net->hosts;
  for (int i = 0, r = 0; i < net->hosts; i++)
    for (int k = 0; k < base + (i < extra); k++) host[r++] = i;
  return 0;
}

static int any_nonzero(const double *a, int n) {
  for (int i = 0; a && i < n; i++)
    if (a[i] != 0) return 1;
  return 0;
}

double comm_net_timeout(const comm_net_t *net) {
  return net && net->timeout > 0 ? net->timeout : COMM_TIMEOUT;
}

int comm_net_emulated(const comm_net_t *net, int size) {
  if (!net) return 0;
  int intra = net->hosts > 1 && (net->intra_latency > 0 || net->intra_bandwidth > 0);
  return net->latency > 0 || net->bandwidth > 0 || intra ||
         any_nonzero(net->rank_latency, size) || any_nonzero(net->rank_bandwidth, size);
}

/* The link allreduce:auto reads on local: measured here without an
 * emulated network (~5 us a hop, ~20 us when threads share cores, memory
 * speed); with one, its slowest link (the latency and bandwidth between
 * hosts, inside a host, and each rank's own). */
void comm_net_link_estimate(const comm_net_t *net, int size, int oversubscribed, double *latency,
                            double *bandwidth) {
  if (!comm_net_emulated(net, size)) {
    *latency = oversubscribed ? 20e-6 : 5e-6;
    *bandwidth = 10e9;
    return;
  }
  double lat = net->latency, bw = net->bandwidth > 0 ? net->bandwidth : 1e12;
  if (net->hosts > 1) {
    if (net->intra_latency > lat) lat = net->intra_latency;
    if (net->intra_bandwidth > 0 && net->intra_bandwidth < bw) bw = net->intra_bandwidth;
  }
  for (int i = 0; i < size; i++) {
    double l = net->rank_latency ? net->rank_latency[i] : net->latency;
    double b = net->rank_bandwidth ? net->rank_bandwidth[i] : net->bandwidth;
    if (l > lat) lat = l;
    if (b > 0 && b < bw) bw = b;
  }
  *latency = lat;
  *bandwidth = bw;
}
