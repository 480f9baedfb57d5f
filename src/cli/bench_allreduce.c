/* dtrain bench allreduce: time every allreduce algorithm over a range of
 * sizes, next to a yardstick measured in the same run: memcpy of the same
 * number of bytes on local, MPI's own MPI_Allreduce on mpi.
 *
 * Each (size, algorithm) is checked once for the right sum, then timed
 * back to back after one barrier; the row gives the median iteration on
 * rank 0.
 * Bus bandwidth = bytes x 2(P-1)/P / time, the traffic a bandwidth-optimal
 * allreduce puts on each rank's link, so that algorithms and rank counts
 * compare on one scale.
 *
 * Under an emulated network (--net, --latency, --bandwidth) two more
 * columns: model_us, the alpha-beta prediction from the links (ring and
 * hier, and auto when it picks one of them; the formulas of
 * allreduce_hier.c), and vs_ring, the flat ring's time measured in the
 * same run divided by this row's (above 1: faster than the ring). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dtrain/opt.h"
#include "dtrain/coll.h"

#define REF_MEMCPY (-1)
#define REF_MPI (-2)

typedef struct {
  int mpi, workers, step, iters, warmup, group;
  int algos[ALLREDUCE_COUNT], nalgos, all_algos; /* all_algos: from --algo all */
  size_t min_bytes, max_bytes, segment;
  const char *json;
  comm_net_t net;
  int net_given, link_given; /* --net; --latency or --bandwidth */
} opts_t;

typedef struct {
  const opts_t *o;
  FILE *json;         /* rank 0 only */
} bench_t;

static void usage(FILE *f) {
  fputs("usage: dtrain bench allreduce [OPTIONS]\n"
        "Times each allreduce algorithm (float32 sum) from --min-bytes to --max-bytes\n"
        "and compares it with memcpy (local) or MPI_Allreduce (mpi) measured in the same run.\n"
        "\n"
        "  --comm local|mpi      transport (default local; mpi: run under mpirun)\n"
        "  --workers N           ranks on local (default 4)\n"
        "  --algo LIST           comma-separated: auto,ring,rhd,tree,naive,hier,shm or all (default all;\n"
        "                        shm only on local without --latency/--bandwidth)\n"
        "  --min-bytes SIZE      smallest message (default 4KiB; suffixes KiB, MiB, GiB, K, M, G;\n"
        "                        sizes up to 4GiB)\n"
        "  --max-bytes SIZE      largest message (default 64MiB)\n"
        "  --step 2|4            size factor between rows (default 4)\n"
        "  --iters N             timed iterations per row (default: 5..200 by size)\n"
        "  --warmup N            untimed iterations first (default 2)\n"
        "  --group N             hier: groups of N consecutive ranks stand for hosts (default:\n"
        "                        the hosts of --net hosts=, or on one host ceil(sqrt(P)))\n"
        "  --segment SIZE        pipeline segment (default: transport's)\n"
        "  --net KEY=VALUE,...   emulated network (local), as dtrain train --net:\n"
        "                          latency=TIME, bandwidth=RATE  every link, or with hosts the\n"
        "                                                        links between hosts\n"
        "                          hosts=N | hosts=A+B+...       ranks on N hosts (consecutive,\n"
        "                                                        as even as possible), or A, B, ...\n"
        "                                                        ranks on each\n"
        "                          intra-latency=TIME, intra-bandwidth=RATE  links within a host\n"
        "                                                        (need hosts; default: no delay)\n"
        "                        e.g. hosts=2,intra-bandwidth=10Gbit,intra-latency=5us,\n"
        "                             bandwidth=1Gbit,latency=50us\n"
        "                        emulated rows add model_us (alpha-beta prediction, ring and\n"
        "                        hier) and vs_ring (ring's time / this row's, same run)\n"
        "  --latency TIME        emulated link latency (local; e.g. 50us; at most 10s)\n"
        "  --bandwidth RATE      emulated link bandwidth (local; e.g. 1Gbit; 1kbit..10Tbit)\n"
        "  --timeout TIME        give up a wait after this long (default 300s; 1ms..1e6s)\n"
        "  --json FILE           also write one JSON object per row (JSON Lines)\n"
        "  --help                this text\n",
        f);
}

/* "64MiB", "4KiB", "1M", "4096" -> bytes, at most MAX_BYTES. */
#define MAX_BYTES ((size_t)4 << 30)
static int parse_size(const char *opt, const char *text, size_t *out) {
  char *end;
  double v = text ? strtod(text, &end) : -1;
  if (!text || end == text || !(v >= 0) || !isfinite(v)) goto bad;
  static const struct { const char *unit; double scale; } units[] = {
      {"", 1}, {"b", 1}, {"k", 1024}, {"kib", 1024}, {"kb", 1e3}, {"m", 1 << 20},
      {"mib", 1 << 20}, {"mb", 1e6}, {"g", 1 << 30}, {"gib", 1 << 30}, {"gb", 1e9}};
  char u[8] = {0};
  if (strlen(end) >= sizeof u) goto bad;
  for (size_t i = 0; end[i] && i + 1 < sizeof u; i++) u[i] = (char)tolower((unsigned char)end[i]);
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcmp(u, units[i].unit)) {
      double bytes = v * units[i].scale;
      if (bytes > (double)MAX_BYTES)
        return dt_error("option --%s: '%s' is more than 4 GiB", opt, text);
      *out = (size_t)bytes;
      return 0;
    }
bad:
  return dt_error("option --%s: '%s' is not a size (examples: 4096, 4KiB, 64MiB)", opt,
                  text ? text : "");
}

static int parse_algos(const char *text, opts_t *o) {
  char list[256];
  size_t len = strlen(text);
  if (len >= sizeof list) return dt_error("option --algo: list too long");
  if (!len || text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,"))
    return dt_error("option --algo: empty item in '%s' (example: ring,rhd)", text);
  memcpy(list, text, len + 1);
  o->nalgos = o->all_algos = 0;
  for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "all")) {
      for (int a = 0; a < ALLREDUCE_COUNT; a++) o->algos[a] = a;
      o->nalgos = ALLREDUCE_COUNT;
      o->all_algos = 1;
      continue;
    }
    allreduce_algo_t a;
    if (allreduce_algo_parse(t, &a) != 0) return dt_error_prefix("option --algo: ");
    if (o->nalgos < ALLREDUCE_COUNT) o->algos[o->nalgos++] = (int)a;
  }
  return o->nalgos ? 0 : dt_error("option --algo: empty list");
}

/* shm needs ranks in one process and no emulated network: left out of
 * "all" there, refused when named. */
static int drop_shm_unless_shared(opts_t *o) {
  if (!o->mpi && !comm_net_emulated(&o->net, o->workers)) return 0;
  int n = 0;
  for (int i = 0; i < o->nalgos; i++) {
    if (o->algos[i] != ALLREDUCE_SHM) o->algos[n++] = o->algos[i];
    else if (!o->all_algos)
      return dt_error("option --algo shm: needs --comm local without --latency/--bandwidth "
                      "(shm reads the other ranks' memory and sends no messages)");
  }
  o->nalgos = n;
  return 0;
}

static int set_algos(void *o, const char *v, void *ctx) { return parse_algos(v, o); }
static int set_min_bytes(void *o, const char *v, void *ctx) {
  return parse_size("min-bytes", v, &((opts_t *)o)->min_bytes);
}
static int set_max_bytes(void *o, const char *v, void *ctx) {
  return parse_size("max-bytes", v, &((opts_t *)o)->max_bytes);
}
static int set_segment(void *o, const char *v, void *ctx) {
  return parse_size("segment", v, &((opts_t *)o)->segment);
}
static int set_json(void *o, const char *v, void *ctx) { return ((opts_t *)o)->json = v, 0; }

static int set_net(void *ov, const char *v, void *ctx) {
  opts_t *o = ov;
  o->net_given = 1;
  return comm_net_parse(v, &o->net);
}

static int set_latency(void *ov, const char *v, void *ctx) {
  opts_t *o = ov;
  o->link_given = 1;
  DT_TRY(parse_duration("latency", v, &o->net.latency));
  if (!(o->net.latency <= COMM_NET_LATENCY_MAX))
    return dt_error("option --latency: %s is out of range (expected 0 to %g s)", v,
                    COMM_NET_LATENCY_MAX);
  return 0;
}

static int set_bandwidth(void *ov, const char *v, void *ctx) {
  opts_t *o = ov;
  o->link_given = 1;
  DT_TRY(parse_bandwidth("bandwidth", v, &o->net.bandwidth));
  if (!(o->net.bandwidth >= COMM_NET_BANDWIDTH_MIN && o->net.bandwidth <= COMM_NET_BANDWIDTH_MAX))
    return dt_error("option --bandwidth: %s is out of range (expected 1 kbit/s to 10 Tbit/s)", v);
  return 0;
}

static int set_timeout(void *o, const char *v, void *ctx) {
  double d;
  DT_TRY(parse_duration("timeout", v, &d));
  if (!(d >= 0.001 && d <= 1e6))
    return dt_error("option --timeout: %s is out of range (expected 1ms to 1e6 s)", v);
  ((opts_t *)o)->net.timeout = d;
  return 0;
}

static const int STEPS[] = {2, 4};
#define O opts_t
static const opt_t OPTS[] = {
    {"comm", OPT_WORDS, OPT_FIELD(O, mpi), 0, 0, 0, "local|mpi", NULL, NULL},
    {"workers", OPT_INT, OPT_FIELD(O, workers), 1, 1024, 0, NULL, NULL, NULL},
    {"algo", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_algos},
    {"min-bytes", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_min_bytes},
    {"max-bytes", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_max_bytes},
    {"step", OPT_WORDS, OPT_FIELD(O, step), 0, 0, 0, "2|4", STEPS, NULL},
    {"iters", OPT_INT, OPT_FIELD(O, iters), 1, 1000000, 0, NULL, NULL, NULL},
    {"warmup", OPT_INT, OPT_FIELD(O, warmup), 0, 1000, 0, NULL, NULL, NULL},
    {"group", OPT_INT, OPT_FIELD(O, group), 1, 1 << 20, 0, NULL, NULL, NULL},
    {"segment", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_segment},
    {"net", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_net},
    {"latency", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_latency},
    {"bandwidth", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_bandwidth},
    {"timeout", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_timeout},
    {"json", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_json},
};
#undef O
static const opt_table_t TABLE = {OPTS, (int)(sizeof OPTS / sizeof OPTS[0]), sizeof OPTS[0],
                                  "dtrain bench allreduce"};

/* Returns 0, 2 for a usage error (message set), or 1 when --help was shown. */
static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.workers = 4, .step = 4, .warmup = 2, .min_bytes = 4 << 10, .max_bytes = 64 << 20};
  parse_algos("all", o);
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  for (int i = 1; i < argc; i++) {
    int id;
    const char *v;
    if (opt_next(&TABLE, argc, argv, &i, &id, &v) != 0 || opt_set(&OPTS[id], o, v, NULL) != 0)
      return 2;
  }
  if (o->min_bytes < sizeof(float) || o->min_bytes > o->max_bytes)
    return dt_error("options --min-bytes/--max-bytes: need 4 <= min <= max (got %zu, %zu)",
                    o->min_bytes, o->max_bytes), 2;
  if (o->net_given && o->link_given)
    return dt_error("options --net and --latency/--bandwidth: give the links once (--net "
                    "latency=TIME,bandwidth=RATE)"), 2;
  if (o->mpi && o->net_given)
    return dt_error("option --net: emulates a network on --comm local only (on mpi the hosts "
                    "are the nodes MPI finds)"), 2;
  if (o->mpi && (o->net.latency > 0 || o->net.bandwidth > 0))
    return dt_error("options --latency/--bandwidth emulate a network on --comm local only"), 2;
  if (!o->mpi && o->net.hosts > 1) {
    int *host = malloc((size_t)o->workers * sizeof(int));
    int rc = host ? comm_net_hosts(&o->net, o->workers, host) : dt_error("out of memory");
    free(host);
    if (rc) return dt_error_prefix("option --"), 2;
  }
  return drop_shm_unless_shared(o) ? 2 : 0;
}

/* ---- timing ----------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int iterations(const opts_t *o, size_t bytes) {
  if (o->iters) return o->iters;
  size_t n = ((size_t)256 << 20) / bytes;
  return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}

typedef struct {
  coll_ctx_t *ctx;
  int algo;           /* an allreduce_algo_t, REF_MEMCPY or REF_MPI */
  float *buf, *src, *dst;
  size_t count;
} op_t;

static int run_op(op_t *op) {
  comm_t *c = coll_ctx_comm(op->ctx);
  if (op->algo == REF_MPI) return comm_mpi_allreduce_sum_float(c, op->buf, op->count);
  if (op->algo == REF_MEMCPY) {
    if (c->rank == 0) memcpy(op->dst, op->src, op->count * sizeof(float));
    return 0;
  }
  return allreduce(op->ctx, (allreduce_algo_t)op->algo, op->buf, op->count);
}

/* Median seconds of one op on rank 0. One barrier, then the iterations run
 * back to back and each is timed from the end of the previous one: a
 * barrier before each would add its exit skew (a whole latency on an
 * emulated network) to the time. */
static int time_op(op_t *op, int warmup, int iters, double *times, double *median) {
  comm_t *c = coll_ctx_comm(op->ctx);
  DT_TRY(comm_barrier(c));
  for (int i = 0; i < warmup; i++) DT_TRY(run_op(op));
  double prev = dt_now();
  for (int i = 0; i < iters; i++) {
    DT_TRY(run_op(op));
    double t = dt_now();
    times[i] = t - prev;
    prev = t;
  }
  qsort(times, (size_t)iters, sizeof *times, cmp_double);
  *median = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
  return 0;
}

/* Each rank holds rank+1 everywhere; the sum is exact in float. */
static int verify(op_t *op) {
  comm_t *c = coll_ctx_comm(op->ctx);
  int P = c->size;
  for (size_t i = 0; i < op->count; i++) op->buf[i] = (float)(c->rank + 1);
  DT_TRY(run_op(op));
  float want = (float)P * (float)(P + 1) / 2;
  for (size_t i = 0; i < op->count; i++)
    if (op->buf[i] != want)
      return dt_error("element %zu is %g, expected %g", i, (double)op->buf[i], (double)want);
  memset(op->buf, 0, op->count * sizeof(float)); /* sums of zeros stay zero while timing */
  return 0;
}

/* ---- output ----------------------------------------------------------------- */

static const char *algo_label(int algo) {
  return algo == REF_MPI ? "MPI_Allreduce" : algo == REF_MEMCPY ? "memcpy"
                                                                : allreduce_algo_name((allreduce_algo_t)algo);
}

static void print_header(const opts_t *o, comm_t *c) {
  printf("dtrain bench allreduce: %s, %d ranks, float32 sum, median of timed iterations%s\n",
         o->mpi ? "mpi" : "local", c->size, c->emulated ? ", EMULATED network" : "");
  if (c->emulated) {
    const comm_net_t *n = &o->net;
    if (n->hosts > 1) {
      printf("hosts:");
      for (int h = 0; h < comm_nhosts(c); h++) {
        int k = 0;
        for (int r = 0; r < c->size; r++) k += comm_host(c, r) == h;
        printf("%s%d", h ? "+" : " ", k);
      }
      printf(" ranks; inside a host %g us, %g Gbit/s; between hosts %g us, %g Gbit/s\n",
             n->intra_latency * 1e6, n->intra_bandwidth * 8e-9, n->latency * 1e6,
             n->bandwidth * 8e-9);
    } else {
      printf("every link: %g us, %g Gbit/s\n", n->latency * 1e6, n->bandwidth * 8e-9);
    }
    printf("(a bandwidth of 0 Gbit/s is not delayed; model_us: alpha-beta prediction; vs_ring: "
           "ring's time / this row's)\n");
  }
  printf("%12s  %-18s %6s %12s %12s %12s %7s", "bytes", "algorithm", "iters", "time_us",
         "busbw_GB/s", o->mpi ? "mpi_GB/s" : "memcpy_GB/s", "ratio");
  if (c->emulated) printf(" %10s %7s  net", "model_us", "vs_ring");
  printf("\n");
}

typedef struct {
  size_t bytes;
  int algo, chosen, iters, ranks, emulated, mpi;
  double sec, bw, ref_bw;
  double model, vs_ring; /* seconds; ring's time / sec (0 = none) */
} row_t;

static void print_row(const bench_t *b, const row_t *r) {
  char label[40];
  if (r->algo == ALLREDUCE_AUTO) snprintf(label, sizeof label, "auto(%s)", algo_label(r->chosen));
  else snprintf(label, sizeof label, "%s", algo_label(r->algo));
  int is_ref = r->algo < 0;
  char ratio[16] = "-", model[24] = "-", vs[16] = "-";
  if (!is_ref && r->ref_bw > 0) snprintf(ratio, sizeof ratio, "%.2f", r->bw / r->ref_bw);
  if (r->model > 0) snprintf(model, sizeof model, "%.1f", r->model * 1e6);
  if (r->vs_ring > 0) snprintf(vs, sizeof vs, "%.2f", r->vs_ring);
  printf("%12zu  %-18s %6d %12.1f %12.3f %12.3f %7s", r->bytes, label, r->iters, r->sec * 1e6,
         r->bw / 1e9, r->ref_bw / 1e9, ratio);
  if (r->emulated) printf(" %10s %7s  emulated", model, vs);
  printf("\n");
  fflush(stdout);
  if (!b->json) return;
  fprintf(b->json,
          "{\"bench\":\"allreduce\",\"comm\":\"%s\",\"ranks\":%d,\"algo\":\"%s\",\"chosen\":\"%s\","
          "\"bytes\":%zu,\"iters\":%d,\"median_us\":%.3f,\"%s\":%.4f,\"ref\":\"%s\","
          "\"ref_gbs\":%.4f",
          r->mpi ? "mpi" : "local", r->ranks, algo_label(r->algo),
          algo_label(r->algo == ALLREDUCE_AUTO ? r->chosen : r->algo), r->bytes, r->iters,
          r->sec * 1e6, is_ref && !r->mpi ? "copy_gbs" : "busbw_gbs", r->bw / 1e9,
          algo_label(r->mpi ? REF_MPI : REF_MEMCPY), r->ref_bw / 1e9);
  if (!is_ref && r->ref_bw > 0) fprintf(b->json, ",\"ratio\":%.4f", r->bw / r->ref_bw);
  if (r->model > 0) fprintf(b->json, ",\"model_us\":%.3f", r->model * 1e6);
  if (r->vs_ring > 0) fprintf(b->json, ",\"vs_ring\":%.4f", r->vs_ring);
  fprintf(b->json, ",\"emulated\":%s}\n", r->emulated ? "true" : "false");
  fflush(b->json);
}

/* ---- the alpha-beta model (emulated links) ------------------------------------ */

typedef struct {
  double a, b; /* latency (s), bandwidth (bytes/s; 0 = not delayed) */
} link_t;

/* One message of `bytes` over the link. */
static double hop(link_t l, double bytes) { return l.a + (l.b > 0 ? bytes / l.b : 0); }

/* The link from rank r to rank q under the emulated network. */
static link_t link_between(const opts_t *o, const comm_t *c, int r, int q) {
  if (o->net.hosts > 1 && comm_host(c, r) == comm_host(c, q))
    return (link_t){o->net.intra_latency, o->net.intra_bandwidth};
  return (link_t){o->net.latency, o->net.bandwidth};
}

/* A flat algorithm on P ranks over link l: ring 2(P-1) steps of S/P; rhd
 * halving and doubling, steps of S/2, S/4, ..., S/P' each way (P' =
 * 2^floor(lg P); +2 whole-vector steps folding the other P - P' ranks);
 * tree 2 ceil(lg P) steps of S. */
static double flat_model(allreduce_algo_t a, int P, double S, link_t l) {
  int lg = 0, pof2 = 1;
  while (2 * pof2 <= P) pof2 *= 2, lg++;
  if (P <= 1 || S == 0) return 0;
  switch (a) {
  case ALLREDUCE_RING: return 2.0 * (P - 1) * hop(l, S / P);
  case ALLREDUCE_RHD: {
    double t = P != pof2 ? 2 * hop(l, S) : 0;
    for (int k = 1; k <= lg; k++) t += 2 * hop(l, S / (double)(1 << k));
    return t;
  }
  case ALLREDUCE_TREE: return 2.0 * (lg + (P != pof2)) * hop(l, S);
  default: return 0;
  }
}

/* The slower of two links for a message of `bytes`. */
static link_t slower(link_t x, link_t y, double bytes) { return hop(y, bytes) > hop(x, bytes) ? y : x; }

/* hier (allreduce_hier.c), from its plan and its hosts: hosts as hier takes
 * them (--group's groups of consecutive ranks, else the network's hosts,
 * else groups of ceil(sqrt P)), m ranks of each taking part. Time: the
 * fold, S each way over the slowest folded rank's link (when hosts differ
 * in size); 2(m-1) ring steps of S/m inside a host, at the pace of the
 * slowest edge of the hosts' rings; the inter-host algorithm on S/m among
 * the H ranks with one index, over the slowest link between two of them. */
static double hier_model(const opts_t *o, coll_ctx_t *ctx, size_t count) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = c->size, g = o->group;
  double S = (double)count * sizeof(float);
  hier_plan_t plan;
  int *hh = malloc((size_t)P * sizeof(int)), *local = calloc((size_t)P, sizeof(int));
  int *seen = calloc((size_t)P, sizeof(int));
  if (!hh || !local || !seen || allreduce_hier_plan(ctx, count, &plan) != 0) {
    free(hh), free(local), free(seen);
    return 0;
  }
  if (g <= 0 && comm_nhosts(c) <= 1)
    for (g = 1; g * g < P; g++) {}
  for (int r = 0; r < P; r++) hh[r] = g > 0 ? r / g : comm_host(c, r);
  for (int r = 0; r < P; r++) local[r] = seen[hh[r]]++;
  int m = plan.per_host, H = plan.hosts;
  double s = S / m, fold = 0, step = 0;
  link_t across = {0, 0};
  for (int r = 0; r < P; r++) {
    if (local[r] >= m) { /* folds into the rank of its host with index local mod m */
      for (int q = 0; q < P; q++)
        if (hh[q] == hh[r] && local[q] == local[r] % m)
          fold = fmax(fold, hop(link_between(o, c, r, q), S));
      continue;
    }
    for (int q = 0; q < P; q++) {
      if (hh[q] == hh[r] && local[q] == (local[r] + 1) % m && m > 1) /* its ring's next rank */
        step = fmax(step, hop(link_between(o, c, r, q), s));
      if (hh[q] != hh[r] && local[q] == local[r]) across = slower(across, link_between(o, c, r, q), s);
    }
  }
  free(hh), free(local), free(seen);
  return 2 * fold + 2.0 * (m - 1) * step + flat_model(plan.inter, H, s, across);
}

/* The prediction for algo on count floats (0: none): ring in rank order
 * runs at the pace of its slowest edge, 2(P-1) steps of S/P; hier as
 * hier_model; auto as what it picks. Collective (hier's plan). */
static double model(const opts_t *o, coll_ctx_t *ctx, int algo, size_t count) {
  comm_t *c = coll_ctx_comm(ctx);
  int P = c->size;
  double S = (double)count * sizeof(float);
  if (!c->emulated || P < 2) return 0;
  if (algo == ALLREDUCE_AUTO) algo = (int)allreduce_choose(ctx, count);
  if (algo == ALLREDUCE_HIER) return hier_model(o, ctx, count);
  if (algo != ALLREDUCE_RING) return 0;
  double step = 0;
  for (int r = 0; r < P; r++) step = fmax(step, hop(link_between(o, c, r, (r + 1) % P), S / P));
  return 2.0 * (P - 1) * step;
}

/* ---- the run ------------------------------------------------------------------ */

static int bench_size(const bench_t *b, op_t *op, double *times) {
  comm_t *c = coll_ctx_comm(op->ctx);
  const opts_t *o = b->o;
  int P = c->size, iters = iterations(o, op->count * sizeof(float));
  double bus = (double)op->count * sizeof(float) * 2.0 * (P - 1) / P, sec;
  row_t rows[ALLREDUCE_COUNT + 1];
  row_t r = {op->count * sizeof(float), 0, 0, iters, P, c->emulated, o->mpi, 0, 0, 0, 0, 0};
  /* the yardstick first */
  op->algo = o->mpi ? REF_MPI : REF_MEMCPY;
  if (o->mpi && verify(op) != 0) return dt_error_prefix("MPI_Allreduce at %zu bytes: ", r.bytes);
  DT_TRY(time_op(op, o->warmup, iters, times, &sec));
  r.algo = op->algo, r.sec = sec;
  r.ref_bw = o->mpi ? bus / sec : (double)r.bytes / sec;
  r.bw = r.ref_bw;
  rows[0] = r;
  double ring_sec = 0;
  for (int i = 0; i < o->nalgos; i++) {
    op->algo = o->algos[i];
    if (verify(op) != 0)
      return dt_error_prefix("allreduce %s at %zu bytes: ", algo_label(op->algo), r.bytes);
    DT_TRY(time_op(op, o->warmup, iters, times, &sec));
    r.algo = op->algo, r.sec = sec, r.bw = P > 1 ? bus / sec : 0;
    r.chosen = op->algo == ALLREDUCE_AUTO ? (int)allreduce_choose(op->ctx, op->count) : op->algo;
    r.model = model(o, op->ctx, op->algo, op->count); /* collective: every rank */
    if (op->algo == ALLREDUCE_RING) ring_sec = sec;
    rows[1 + i] = r;
  }
  /* printed once the ring is measured, whatever its place in --algo */
  for (int i = 0; c->rank == 0 && i <= o->nalgos; i++) {
    if (i > 0 && c->emulated && ring_sec > 0) rows[i].vs_ring = ring_sec / rows[i].sec;
    print_row(b, &rows[i]);
  }
  return 0;
}

static int bench_rank(comm_t *c, void *arg) {
  bench_t *b = arg;
  const opts_t *o = b->o;
  /* an output: dtrain's own earlier JSON Lines, or new */
  if (c->rank == 0 && o->json &&
      (file_check_output(o->json, "{\"") != 0 || !(b->json = file_open_output(o->json, 0))))
    return dt_error_prefix("--json: ");
  size_t max_count = o->max_bytes / sizeof(float);
  op_t op = {0};
  int rc = coll_ctx_new(c, &op.ctx);
  double *times = malloc((size_t)(o->iters > 200 ? o->iters : 200) * sizeof(double));
  if (rc == 0 && !times) rc = dt_error("out of memory");
  if (rc == 0) {
    coll_ctx_set_group_size(op.ctx, o->group);
    if (o->segment) coll_ctx_set_segment(op.ctx, o->segment);
    /* allocated (and so touched) once: fresh pages would be timed otherwise */
    op.buf = dt_alloc_floats(max_count);
    if (!o->mpi && c->rank == 0) op.src = dt_alloc_floats(max_count), op.dst = dt_alloc_floats(max_count);
    if (!op.buf || (!o->mpi && c->rank == 0 && (!op.src || !op.dst))) rc = -1;
  }
  if (rc == 0 && c->rank == 0) print_header(o, c);
  for (size_t bytes = o->min_bytes; rc == 0 && bytes <= o->max_bytes; bytes *= (size_t)o->step) {
    op.count = bytes / sizeof(float);
    rc = bench_size(b, &op, times);
  }
  dt_free(op.buf), dt_free(op.src), dt_free(op.dst);
  free(times);
  coll_ctx_free(op.ctx);
  /* rank 0 alone: the others finishing first must not close its file */
  if (c->rank == 0 && b->json) {
    if (fclose(b->json) != 0 && rc == 0) rc = dt_error("writing %s failed", o->json);
    if (rc != 0) remove(o->json); /* no partial table */
    b->json = NULL;
  }
  return rc;
}

int cmd_bench_allreduce(int argc, char **argv) {
  opts_t o;
  int prc = parse_opts(argc, argv, &o);
  if (prc == 1) {
    usage(stdout);
    return 0;
  }
  if (prc) {
    fprintf(stderr, "dtrain bench allreduce: %s\n", dt_errmsg());
    return 2;
  }
  bench_t b = {&o, NULL};
  int rc = o.mpi ? comm_mpi_run(&argc, &argv, &o.net, bench_rank, &b)
                 : comm_local_run(o.workers, &o.net, bench_rank, &b);
  if (rc != 0) {
    fprintf(stderr, "dtrain bench allreduce: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
