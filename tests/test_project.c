/* The projection (src/perf/project.c, cluster_file.c) and the model's
 * exact formulas (issue 33):
 *
 * - the taxonomy's costs (sec. 3.4.1) with only bandwidth (alpha 0, no
 *   compute), T_w = S / beta: naive parameter server 2 n T_w (its link
 *   takes n pushes, then n pulls), binomial tree 2 ceil(log2(n + 1)) T_w
 *   (n workers and the server as its root: n + 1 ranks), ring
 *   2 (n - 1) / n T_w, and the parameter server sharded over the workers
 *   (k = n, the taxonomy's Fig. 13 left) 2 (n - 1) / n T_w. The
 *   taxonomy's scatter-reduce/broadcast through a master, (2 + 2 (n - 1) /
 *   n) T_w, is not an algorithm dtrain has: its nearest, the sharded
 *   server, has no master to go through and costs the 2 (n - 1) / n T_w
 *   asserted. Both the projection's costs and the simulator's (perf_simulate
 *   on describe_step's tasks) are checked; the simulator's binomial reduce
 *   lets children send on their own links at once, so at n + 1 not a power
 *   of two its tree is faster than the formula: its own depth is asserted.
 * - Megatron's pipeline bubble: (p - 1) / m of the ideal time for GPipe
 *   and 1F1B, (p - 1) / (m v) interleaved with v chunks a stage, from the
 *   instruction lists the engine runs, simulated with equal layers.
 * - the projection's overlap: a step is its compute when the exchange is
 *   free, and one worker's efficiency is 1; its GPipe across a host:
 *   (M + p - 1) / M of the compute;
 * - the cluster file's reader: each malformed file names its key; and the
 *   simulator's cluster filled from it (--predict --cluster). */
#include <math.h>
#include <string.h>

#include "dtrain/coll.h"
#include "perf/project.h"
#include "strategy/pipe/schedule.h"
#include "strategy/strategy.h"
#include "test.h"

static const double S = 4e6, BW = 1e8; /* bytes, bytes/s: T_w = 40 ms */

static int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

static void test_taxonomy_projection(void) {
  perf_link_t l = {0, BW};
  double T = S / BW;
  int ns[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 100, 1000};
  for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
    int n = ns[k], one_host = 1 << 20;
    CHECK_NEAR(perf_proj_exchange_sec(PROJ_PS_ONE, n, one_host, S, l, l), 2.0 * n * T, 1e-12);
    CHECK_NEAR(perf_proj_exchange_sec(PROJ_TREE, n + 1, one_host, S, l, l), 2.0 * ceil_lg(n + 1) * T, 1e-12);
    CHECK_NEAR(perf_proj_exchange_sec(PROJ_RING, n, one_host, S, l, l), 2.0 * (n - 1) / n * T, 1e-12);
    CHECK_NEAR(perf_proj_exchange_sec(PROJ_PS_SHARDED, n, one_host, S, l, l), 2.0 * (n - 1) / n * T, 1e-12);
    /* Rabenseifner at a power of two: the ring's bandwidth term too */
    if ((n & (n - 1)) == 0)
      CHECK_NEAR(perf_proj_exchange_sec(PROJ_RHD, n, one_host, S, l, l), 2.0 * (n - 1) / n * T, 1e-12);
  }
  /* across hosts: the ring crosses each host's NIC once a step; the tree's
   * levels past the host's ranks take the NIC; hier's g rings share it */
  perf_link_t in = {0, 4 * BW};
  CHECK_NEAR(perf_proj_exchange_sec(PROJ_RING, 16, 4, S, in, l), 2.0 * 15 / 16 * T, 1e-12);
  CHECK_NEAR(perf_proj_exchange_sec(PROJ_TREE, 16, 4, S, in, l), 2 * (2 * T / 4 + 2 * T), 1e-12);
  CHECK_NEAR(perf_proj_exchange_sec(PROJ_HIER, 16, 4, S, in, l),
             2.0 * 3 / 4 * T / 4 + 2.0 * 3 / 4 * T, 1e-12);
}

/* The simulator: one collective of S bytes over P ranks, free links but
 * bandwidth, nothing else. */
static double simulated(allreduce_algo_t algo, int P) {
  int host[64];
  double fwd[1] = {0}, bwd[1] = {0}, lat[64], bw[64], slow[64];
  perf_compute_t pc = {.nlayers = 1, .nsizes = 1, .fwd = fwd, .bwd = bwd};
  pc.size[0] = 8;
  perf_cluster_t cl = {.nranks = P, .cores = P, .host = host, .latency = lat, .bandwidth = bw,
                       .slowdown = slow};
  for (int r = 0; r < P; r++) host[r] = 0, lat[r] = 0, bw[r] = BW, slow[r] = 1;
  step_desc_t d;
  step_desc_init(&d, P);
  for (int r = 0; r < P; r++) {
    if (algo == ALLREDUCE_TREE) {
      int x = step_add_tree(&d, r, 1, P, 0, (size_t)(S / 4), -1, THREAD_COMPUTE, 1);
      step_add_tree(&d, r, 0, P, 0, (size_t)(S / 4), x, THREAD_COMPUTE, 1);
    } else {
      step_add_allreduce(&d, r, r, P, 1, algo, (size_t)(S / 4), -1, THREAD_COMPUTE, 1);
    }
  }
  perf_sim_t sim;
  double t = perf_simulate(&d, &pc, &cl, 0, &sim) == 0 ? sim.step_sec : -1;
  step_desc_free(&d);
  return t;
}

static int max_popcount_below(int P) {
  int best = 0;
  for (int v = 1; v < P; v++) best = __builtin_popcount(v) > best ? __builtin_popcount(v) : best;
  return best;
}

static void test_taxonomy_simulator(void) {
  double T = S / BW;
  for (int n = 1; n <= 31; n++) {
    int P = n + 1; /* the workers and the server (rank 0: naive's gather root, the tree's root) */
    CHECK_NEAR(simulated(ALLREDUCE_NAIVE, P), 2.0 * n * T, 1e-9);
    CHECK_NEAR(simulated(ALLREDUCE_RING, n), n > 1 ? 2.0 * (n - 1) / n * T : 0, 1e-9);
    double tree = simulated(ALLREDUCE_TREE, P);
    if ((P & (P - 1)) == 0) CHECK_NEAR(tree, 2.0 * ceil_lg(P) * T, 1e-9);
    /* ours: the reduce as deep as the most set bits of a rank below P */
    CHECK_NEAR(tree, (double)(ceil_lg(P) + max_popcount_below(P)) * T, 1e-9);
    CHECK(tree <= 2.0 * ceil_lg(P) * T + 1e-9);
  }
}

#define F 1e-3
#define B 2e-3

/* A pipeline of P stages, M micro-batches (batch 8 M), `layers` equal
 * layers (F forward, B backward each), free links, simulated from the
 * engine's instruction lists (strategy_describe). */
static double pipeline(const char *schedule, int P, int M, int layers) {
  char sched[32], part[64] = "", pp[8], mb[8], batch[8];
  snprintf(sched, sizeof sched, "%s", schedule);
  for (int i = 0; i < layers; i++) snprintf(part + strlen(part), sizeof part - strlen(part), "%s%d", i ? "," : "", i);
  snprintf(pp, sizeof pp, "%d", P), snprintf(mb, sizeof mb, "%d", M), snprintf(batch, sizeof batch, "%d", 8 * M);
  char *argv[] = {"train", "--data", "synthetic", "--workers", pp, "--pp", pp, "--micro-batches", mb,
                  "--batch", batch, "--partition", part, "--pipe-schedule", sched, NULL};
  train_config_t cfg;
  if (train_options_parse(15, argv, &cfg) != 0) {
    fprintf(stderr, "  %s\n", dt_errmsg());
    return -1;
  }
  char text[512] = "";
  for (int i = 0; i + 1 < layers; i++) strcat(text, "dense units=8\nrelu\n");
  strcat(text, "dense units=4\n");
  model_spec_t spec;
  if (model_spec_parse(text, "test", &spec) != 0) return -1;
  model_t *m = NULL;
  int rc = model_build(&spec, (shape_t){1, 1, 16}, 4, 8 * M, &m);
  model_spec_free(&spec);
  double step = -1;
  step_desc_t d;
  if (rc == 0 && (rc = strategy_describe(&cfg, m, &d)) == 0) {
    int host[8];
    double fwd[16], bwd[16], lat[8], bw[8], slow[8];
    perf_compute_t pc = {.nlayers = m->nlayers, .nsizes = 1, .fwd = fwd, .bwd = bwd};
    pc.size[0] = 8;
    for (int i = 0; i < m->nlayers; i++) fwd[i] = F, bwd[i] = B;
    perf_cluster_t cl = {.nranks = P, .cores = P, .host = host, .latency = lat, .bandwidth = bw,
                         .slowdown = slow};
    for (int r = 0; r < P; r++) host[r] = 0, lat[r] = 0, bw[r] = 0, slow[r] = 1;
    perf_sim_t sim;
    if (perf_simulate(&d, &pc, &cl, 0, &sim) == 0) step = sim.step_sec;
    step_desc_free(&d);
  }
  if (rc != 0) fprintf(stderr, "  %s\n", dt_errmsg());
  if (m) model_free(m);
  return step;
}

static void test_megatron_bubble(void) {
  int Ps[] = {2, 4}, Ms[] = {4, 8};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      int P = Ps[a], M = Ms[b];
      double ideal = M * P * (F + B) / P; /* a stage's M micro-batches of one layer each */
      for (int s = 0; s < 2; s++) {
        double t = pipeline(s ? "1f1b" : "gpipe", P, M, P);
        CHECK_NEAR((t - ideal) / ideal, (double)(P - 1) / M, 1e-9);
      }
      /* interleaved: v = 2 chunks a stage of one layer each; the ideal is
       * the stage's 2 M chunk passes */
      int V = 2;
      double t = pipeline("interleaved:2", P, M, V * P), ideal_v = (double)V * M * (F + B);
      CHECK_NEAR((t - ideal_v) / ideal_v, (double)(P - 1) / (M * V), 1e-9);
    }
}

/* mlp projected on a device of 1 TFLOP/s: with a link too fast to see the
 * exchange hides nothing and costs nothing: the step is the compute. */
static void test_projection_overlap(void) {
  const char *text =
      "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":64,\"ranks_per_host\":4,"
      "\"device\":{\"flops\":1e12,\"efficiency\":0.5,\"memory_bandwidth\":1e11}}],"
      "\"intra\":{\"latency\":0,\"bandwidth\":1e15},\"inter\":{\"latency\":0,\"bandwidth\":1e15}}";
  perf_cluster_file_t c;
  CHECK_OK(perf_cluster_file_parse(text, strlen(text), "t", &c));
  CHECK(c.nranks == 256 && c.nhosts == 64);
  optim_config_t oc;
  char *argv[] = {"train", NULL};
  train_config_t cfg;
  CHECK_OK(train_options_parse(1, argv, &cfg));
  oc = cfg.optim;
  perf_proj_opts_t o = {.model = "mlp", .batch = 32, .input = {1, 28, 28}, .bucket_bytes = 1 << 20,
                        .straggler_rank = -1, .optim = &oc};
  perf_projection_t p;
  CHECK_OK(perf_project(&o, &c, 1, 256, &p));
  CHECK(p.nrows == 9 && p.projected);
  CHECK_NEAR(p.row[0].efficiency[PROJ_RING], 1.0, 1e-12);
  for (int k = 0; k < p.nrows; k++) CHECK(p.row[k].efficiency[PROJ_RING] > 0.99);
  /* a slow network: the ring's share grows with the workers, never past 1 */
  c.inter.beta = 1e8;
  CHECK_OK(perf_project(&o, &c, 8, 256, &p));
  for (int k = 0; k + 1 < p.nrows; k++)
    CHECK(p.row[k + 1].efficiency[PROJ_RING] <= p.row[k].efficiency[PROJ_RING] + 1e-12 &&
          p.row[k].efficiency[PROJ_RING] < 1);
  /* a straggler at 2x: every strategy's step at least twice the compute */
  o.straggler_rank = 3, o.straggler_slowdown = 2;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  for (int s = 0; s < PROJ_COUNT; s++) CHECK(p.row[0].step_sec[s] >= 2 * p.compute_sec - 1e-12);
}

/* The projection from..to of a model file holding model_text on hosts of
 * per_host ranks of a 1 GFLOP/s device (memory at 1e16 bytes/s: the
 * layers are their FLOPs, the update below 1e-10 s), links of intra and
 * inter bytes/s and no latency; batch 32, 64 classes, 1 MiB buckets. */
static double proj_memory; /* project_text's --memory-per-rank (0: none) */
static int proj_grid_tp, proj_grid_pp; /* project_text's 3-D grid's tp and pp (0: the best) */

/* A model file at path holding model_text, the cluster file's text parsed
 * into c, and the projection's options: batch 32, 64 classes, 1 MiB
 * buckets, no straggler. */
static int project_setup(const char *path, const char *model_text, const char *cluster_text,
                         perf_cluster_file_t *c, train_config_t *cfg, perf_proj_opts_t *o) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(model_text, f);
  fclose(f);
  char *argv[] = {"train", NULL};
  if (perf_cluster_file_parse(cluster_text, strlen(cluster_text), "t", c) != 0 ||
      train_options_parse(1, argv, cfg) != 0)
    return -1;
  *o = (perf_proj_opts_t){.model = path, .batch = 32, .nclasses = 64, .bucket_bytes = 1 << 20,
                          .straggler_rank = -1, .optim = &cfg->optim};
  return 0;
}

/* A cluster file's text: hosts of per_host ranks of a 1 GFLOP/s device
 * with memory at membw bytes/s, links of intra and inter bytes/s, no
 * latency. */
static void cluster_text(char *text, size_t cap, int hosts, int per_host, double membw, double intra,
                         double inter) {
  snprintf(text, cap,
           "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":%d,\"ranks_per_host\":%d,"
           "\"device\":{\"flops\":1e9,\"efficiency\":1,\"memory_bandwidth\":%g}}],"
           "\"intra\":{\"latency\":0,\"bandwidth\":%g},\"inter\":{\"latency\":0,\"bandwidth\":%g}}",
           hosts, per_host, membw, intra, inter);
}

static int project_text(const char *model_text, int hosts, int per_host, double intra, double inter,
                        int from, int to, perf_projection_t *p) {
  const char *path = "/tmp/dtrain-test-project.model";
  char text[512];
  cluster_text(text, sizeof text, hosts, per_host, 1e16, intra, inter);
  perf_cluster_file_t c;
  train_config_t cfg;
  perf_proj_opts_t o;
  int rc = project_setup(path, model_text, text, &c, &cfg, &o);
  o.memory_per_rank = proj_memory;
  o.grid_tp = proj_grid_tp, o.grid_pp = proj_grid_pp;
  if (rc == 0) rc = perf_project(&o, &c, from, to, p);
  remove(path);
  return rc;
}

#define FOUR_DENSE "input shape=1x1x64\ndense units=64\ndense units=64\ndense units=64\ndense units=64\n"
#define EIGHT_DENSE FOUR_DENSE "dense units=64\ndense units=64\ndense units=64\ndense units=64\n"

/* GPipe across a host of 4 ranks: 4 equal layers, links too fast to
 * see: (M + p - 1) / M of the compute with M = 4p micro-batches (the
 * bubble (p - 1) / M). */
static void test_projection_gpipe(void) {
  perf_projection_t p;
  CHECK_OK(project_text(FOUR_DENSE, 1, 4, 1e15, 1e15, 4, 4, &p));
  int g = 4, M = 4 * g;
  CHECK(p.one_worker_sec > 1e-3); /* 4 equal layers' forward and backward */
  CHECK_NEAR(p.row[0].step_sec[PROJ_GPIPE], (double)(M + g - 1) / M * p.one_worker_sec, 1e-9);
  CHECK_NEAR(p.row[0].efficiency[PROJ_GPIPE], (double)M / (M + g - 1), 1e-6);
}

/* Interleaved 1F1B with 2 chunks a rank across a host of 4 ranks, 8
 * equal layers: (V M + p - 1) / (V M) of the compute (Megatron's bubble
 * (p - 1) / (V M), M = 4p); then local SGD (the ring's average every 4th
 * step), D-PSGD (the parameters to both neighbours in turn) and one
 * asynchronous server on 2 hosts of 2 ranks joined by a slow link. */
static void test_projection_more_strategies(void) {
  perf_projection_t p;
  CHECK_OK(project_text(EIGHT_DENSE, 2, 4, 1e15, 1e15, 4, 4, &p));
  int g = 4, V = PROJ_INTERLEAVE_V, M = 4 * g;
  CHECK_NEAR(p.row[0].step_sec[PROJ_INTERLEAVED], (double)(V * M + g - 1) / (V * M) * p.one_worker_sec, 1e-9);
  CHECK(p.row[0].step_sec[PROJ_INTERLEAVED] < p.row[0].step_sec[PROJ_GPIPE]); /* a smaller bubble */
  /* links too fast to see: local SGD, D-PSGD and the async server are the compute */
  CHECK_NEAR(p.row[0].step_sec[PROJ_LOCAL_SGD], p.one_worker_sec, 1e-9);
  CHECK_NEAR(p.row[0].step_sec[PROJ_DPSGD], p.one_worker_sec, 1e-9);
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_ASYNC], p.one_worker_sec, 1e-9); /* nobody waits */
  /* 2 hosts of 2 ranks, 1e8 bytes/s between them */
  CHECK_OK(project_text(EIGHT_DENSE, 2, 2, 1e15, 1e8, 4, 4, &p));
  double model = p.grad_bytes;
  perf_link_t intra = {0, 1e15}, inter = {0, 1e8};
  CHECK_NEAR(p.row[0].step_sec[PROJ_DPSGD], p.one_worker_sec + 2 * model / 1e8, 1e-9);
  CHECK_NEAR(p.row[0].step_sec[PROJ_LOCAL_SGD],
             p.one_worker_sec + perf_proj_exchange_sec(PROJ_RING, 4, 2, model, intra, inter) / PROJ_LOCAL_SGD_TAU, 1e-9);
  /* the one async server's link takes 4 pushes and 4 pulls a round: more than a worker's own
   * compute and round trip */
  CHECK(8 * model / 1e8 > p.one_worker_sec + 2 * model / 1e8);
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_ASYNC], 8 * model / 1e8, 1e-6);
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_SSP], 8 * model / 1e8, 1e-6); /* alike workers: as async */
}

/* Megatron's tensor parallelism over a host of 4 ranks (4 dense layers:
 * two pairs): on links too fast to see, a quarter-ish of the compute (the
 * split layers' blocks); the sums' time inversely proportional to the
 * link inside the host; a model with no pair says why. */
static void test_projection_tp(void) {
  const char *pairs = "input shape=1x1x64\ndense units=256\nrelu\ndense units=64\ndense units=256\nrelu\n"
                      "dense units=64\n";
  perf_projection_t p;
  CHECK_OK(project_text(pairs, 1, 4, 1e15, 1e15, 4, 4, &p));
  double fast = p.row[0].step_sec[PROJ_TP];
  CHECK(fast > p.one_worker_sec / 8 && fast < p.one_worker_sec / 2);
  CHECK(!p.tp_why[0]);
  CHECK_NEAR(p.row[0].efficiency[PROJ_TP], p.one_worker_sec / 4 / fast, 1e-9); /* 4 ranks, one batch */
  CHECK_OK(project_text(pairs, 1, 4, 1e8, 1e15, 4, 4, &p));
  double slow = p.row[0].step_sec[PROJ_TP];
  CHECK_OK(project_text(pairs, 1, 4, 2e8, 1e15, 4, 4, &p));
  double slow2 = p.row[0].step_sec[PROJ_TP];
  CHECK_OK(project_text(pairs, 1, 4, 4e8, 1e15, 4, 4, &p));
  double slow4 = p.row[0].step_sec[PROJ_TP];
  CHECK(slow > slow2 && slow2 > slow4 && slow4 > fast);
  /* the sums' time halves as the link doubles (the fast link's own share
   * of it left out of the difference) */
  CHECK_NEAR(slow - slow2, 2 * (slow2 - slow4), 1e-9 * slow);
  /* and it is the batch's: three sums of 32 samples x 64 floats, each a
   * ring of 4 (2 x 3 steps of a quarter) at 1e8 bytes/s: 0.37 ms, where
   * one sample's would be 11.5 us */
  CHECK_NEAR(slow - fast, 3 * 6 * (32 * 64 * 4.0 / 4) / 1e8, 1e-6);
  CHECK_OK(project_text("input shape=1x1x64\nrelu\n", 1, 4, 1e9, 1e9, 4, 4, &p));
  CHECK(isinf(p.row[0].step_sec[PROJ_TP]) && p.tp_why[0]);
}

/* The default optimizer's state arenas (plain SGD: none). */
static int default_nstate(void) {
  char *argv[] = {"train", NULL};
  train_config_t cfg;
  optimizer_t *o;
  if (train_options_parse(1, argv, &cfg) != 0 || optim_new(&cfg.optim, 1, &o) != 0) return -1;
  int n = o->nstate;
  optim_free(o);
  return n;
}

#define PAIRS "input shape=1x1x64\ndense units=256\nrelu\ndense units=64\ndense units=256\nrelu\ndense units=64\n"

/* Megatron's 3-D grid by hand: tp = 2 (a host's ranks), pp = 2 (hosts),
 * dp = 2 on 4 hosts of 2 ranks, PAIRS (two Megatron pairs; 64 classes,
 * batch 32), no latency, intra I and inter E bytes/s. Every dense layer
 * is 64 x 256 multiply-adds a sample: forward 2 x 16384 x 32 / 1e9 s,
 * backward twice that (tA = 3 x forward). tp rank 0 holds half of a
 * column layer (share 1/2) and half a row layer's weights with its whole
 * bias (share 8256 / 16448). m = 4 pp = 8 micro-batches of a replica's
 * 2 x 32 samples: 8 samples. The stages cut at layer 2: {col, row},
 * {col, row}; stage 1 the slower (two sums: the row layer's forward and
 * the column layer's input gradient backward; stage 0's column layer is
 * layer 0, no input gradient), each sum a ring of 2 on a micro-batch's 8
 * x 64 floats: 2 x (2048 / 2) / I. A boundary: 8 x 64 floats (2048
 * bytes) each way, each tp rank sending half through the NIC at once,
 * then the halves all-gathered in the host: 2 (2048 / E + 1024 / I).
 * (m + pp - 1) slots of the larger; then the rank's block (16576
 * parameters) ring-allreduced over dp = 2, both tp ranks on the NIC:
 * 2 x (4 x 16576 / 2) x 2 / E. Then tp = 1 (a divisor of the host's 2),
 * pp = 2, dp = 4, two replicas' stage on a host: whole layers (a stage 2
 * x tA / 4 a micro-batch), the boundary's whole 2048 bytes from both of a
 * host's ranks on its NIC at once (2 x 2 x 2048 / E), the block (16640 +
 * 16448 parameters) ringed over 4 replicas on 2 hosts, the ring's steps
 * across the NIC (2 x 3 x 33088 / E); and the best grid: the most
 * samples/s of every (tp, pp), the tp rank's P / tp batches a step. */
static void test_projection_grid(void) {
  double fwd = 2 * 16384 * 32 / 1e9, tA = 3 * fwd, sRow = 8256.0 / 16448, block = 16576;
  double E[2] = {1e7, 1e6}, I = 1e8;
  perf_projection_t p;
  proj_grid_tp = 2, proj_grid_pp = 2;
  for (int k = 0; k < 2; k++) {
    CHECK_OK(project_text(PAIRS, 4, 2, I, E[k], 8, 8, &p));
    const perf_proj_row_t *r = &p.row[0];
    CHECK(r->grid_tp == 2 && r->grid_pp == 2 && r->grid_dp == 2);
    double slot = (tA / 2 + tA * sRow) / 4 + 2 * 2 * (2048.0 / 2) / I;
    double move = 2 * (2048 / E[k] + 1024 / I);
    double ring = 2 * (4 * block / 2) * 2 / E[k];
    double update = p.update_sec * block / (p.grad_bytes / 4);
    CHECK(k == 0 ? slot > move : move > slot); /* both sides of the slot's max */
    CHECK_NEAR(r->step_sec[PROJ_GRID], 9 * (slot > move ? slot : move) + ring + update, 1e-12);
    /* a tp group runs a worker's batch: 8 / 2 = 4 replicas' worth of batches */
    CHECK_NEAR(r->samples_per_sec[PROJ_GRID], 32 * 4 / r->step_sec[PROJ_GRID], 1e-6);
  }
  /* memory: stage 0's rank holds its block and 1F1B's 2 micro-batches of 8 samples, each
   * the input 64 and each layer's half of its output (128, then the row layer's sum 64)
   * with their gradients; stage 1 holds 1 (and the probabilities and labels) */
  int ns = default_nstate();
  pipe_schedule_t sc;
  CHECK_OK(pipe_schedule_build(PIPE_1F1B, 2, 1, 8, 1, &sc));
  CHECK(pipe_schedule_peak_live(&sc, 0) == 2 && pipe_schedule_peak_live(&sc, 1) == 1);
  pipe_schedule_free(&sc);
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_GRID], 4.0 * ((2 + ns) * block + 2 * 8 * (64 + 2 * (128 + 64))), 1e-6);
  proj_grid_tp = 1;
  CHECK_OK(project_text(PAIRS, 4, 2, I, E[0], 8, 8, &p));
  CHECK(p.row[0].grid_tp == 1 && p.row[0].grid_pp == 2 && p.row[0].grid_dp == 4);
  double slot1 = 2 * tA / 4, move1 = 2 * 2 * 2048 / E[0], ring1 = 2 * 3 * 33088 / E[0];
  CHECK(slot1 > move1);
  CHECK_NEAR(p.row[0].step_sec[PROJ_GRID], 9 * slot1 + ring1 + p.update_sec * 33088 / (p.grad_bytes / 4), 1e-12);
  /* the best of tp 1, 2 x pp 2, 4 by samples/s */
  proj_grid_tp = proj_grid_pp = 0;
  CHECK_OK(project_text(PAIRS, 4, 2, I, E[0], 8, 8, &p));
  double best = p.row[0].samples_per_sec[PROJ_GRID], seen = 0;
  for (int tp = 1; tp <= 2; tp++)
    for (int pp = 2; pp <= 4; pp *= 2) {
      proj_grid_tp = tp, proj_grid_pp = pp;
      CHECK_OK(project_text(PAIRS, 4, 2, I, E[0], 8, 8, &p));
      CHECK(best >= p.row[0].samples_per_sec[PROJ_GRID] - 1e-9);
      seen = p.row[0].samples_per_sec[PROJ_GRID] > seen ? p.row[0].samples_per_sec[PROJ_GRID] : seen;
    }
  CHECK_NEAR(best, seen, 1e-9);
  /* at tp = 2, the fastest pp that fits: 4 hosts of 2 make pp 2 or 4 (4 layers) */
  proj_grid_tp = 2, proj_grid_pp = 0;
  CHECK_OK(project_text(PAIRS, 4, 2, I, 1e15, 8, 8, &p));
  CHECK(p.row[0].grid_pp == 2 || p.row[0].grid_pp == 4);
  double t_best = p.row[0].step_sec[PROJ_GRID], t[5], mem[5];
  for (int pp = 2; pp <= 4; pp *= 2) {
    proj_grid_pp = pp;
    CHECK_OK(project_text(PAIRS, 4, 2, I, 1e15, 8, 8, &p));
    t[pp] = p.row[0].step_sec[PROJ_GRID], mem[pp] = p.row[0].memory_bytes[PROJ_GRID];
    CHECK(t_best <= t[pp] + 1e-15);
  }
  /* pp = 2 the faster (a smaller bubble), pp = 4 the smaller rank (a layer a stage): a memory
   * between them turns the pick to pp = 4 */
  CHECK(t[2] < t[4] && mem[4] < mem[2] && t_best == t[2]);
  proj_grid_pp = 0, proj_memory = (mem[2] + mem[4]) / 2;
  CHECK_OK(project_text(PAIRS, 4, 2, I, 1e15, 8, 8, &p));
  CHECK(p.row[0].grid_pp == 4 && p.row[0].fits[PROJ_GRID] && p.row[0].grid_dp == 1);
  proj_memory = 0, proj_grid_tp = 0;
}

/* The grid's degenerate cases. pp = 1: the tp row (tp = host x dp) to
 * the last bit of its step and memory. tp = 1 (hosts of one rank, the
 * stages across hosts on a link of X bytes/s) and dp = 1: GPipe across
 * one host of as many ranks on an intra link of X -- the same stages,
 * bubble, boundary messages and update. Not at dp > 1: GPipe's replicas
 * ring every stage's gradients through their host's one NIC, the grid's
 * each rank its own stage's through its own. Nor their memory: the grid
 * runs Megatron's 1F1B (stage s holds pp - s micro-batches), the gpipe
 * row GPipe (all m). */
static void test_projection_grid_degenerate(void) {
  perf_projection_t p;
  proj_grid_tp = 2, proj_grid_pp = 1;
  double E[2] = {1e15, 1e7};
  for (int k = 0; k < 2; k++) {
    CHECK_OK(project_text(PAIRS, 4, 2, 1e8, E[k], 8, 8, &p));
    const perf_proj_row_t *r = &p.row[0];
    CHECK(r->grid_tp == 2 && r->grid_pp == 1 && r->grid_dp == 4);
    CHECK_NEAR(r->step_sec[PROJ_GRID], r->step_sec[PROJ_TP], 1e-12 * r->step_sec[PROJ_TP]);
    CHECK_NEAR(r->memory_bytes[PROJ_GRID], r->memory_bytes[PROJ_TP], 1e-9);
    CHECK_NEAR(r->efficiency[PROJ_GRID], r->efficiency[PROJ_TP], 1e-12);
  }
  proj_grid_tp = 0, proj_grid_pp = 4;
  double X[2] = {1e15, 1e6}, gpipe[2];
  for (int k = 0; k < 2; k++) {
    CHECK_OK(project_text(FOUR_DENSE, 1, 4, X[k], 1e15, 4, 4, &p));
    gpipe[k] = p.row[0].step_sec[PROJ_GPIPE];
    CHECK_OK(project_text(FOUR_DENSE, 4, 1, 1e15, X[k], 4, 4, &p));
    const perf_proj_row_t *r = &p.row[0];
    CHECK(r->grid_tp == 1 && r->grid_pp == 4 && r->grid_dp == 1);
    CHECK_NEAR(r->step_sec[PROJ_GRID], gpipe[k], 1e-12 * gpipe[k]);
    if (k == 0) CHECK_NEAR(r->efficiency[PROJ_GRID], 16.0 / 19, 1e-7); /* Megatron's bubble (pp - 1) / m */
  }
  CHECK(gpipe[1] > 1.5 * gpipe[0]); /* the slow link's boundaries are seen */
  proj_grid_pp = 0;
}

/* Memory per rank (FOUR_DENSE, EIGHT_DENSE: 64 -> 64 dense layers of 4160
 * parameters, 64 classes, batch 32, a host of 4 ranks, M = 16
 * micro-batches of 32 x 4 / 16 = 8 samples; equal layers: a chunk a
 * layer). A chunk's floats a sample: its input 64, its output and its
 * gradient 128; the last rank the probabilities of a micro-batch, 8 x 64.
 * GPipe holds all 16 micro-batches: the last rank 16 x 8 x 192 + 512
 * floats, the engine's own slots for the stage (stage_new: M of them,
 * what GPipe holds) to the byte. Interleaved (2
 * chunks a rank) holds Megatron's warm-up on rank 0, (p - 1) 2 + (v - 1) p
 * + 1 = 11 chunk micro-batches of 192 floats, its two chunks' 8320
 * parameters. Data parallelism: every layer, every sample. */
static void test_projection_memory(void) {
  int ns = default_nstate();
  CHECK(ns == 0);
  perf_projection_t p;
  CHECK_OK(project_text(FOUR_DENSE, 1, 4, 1e15, 1e15, 4, 4, &p));
  /* a sample: its input 64, 4 outputs and their gradients, the probabilities 64, the label */
  double dp = 4.0 * ((2 + ns) * 16640.0 + 32 * (64 + 4 * 128 + 64 + 1));
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_RING], dp, 1e-6);
  double acts = 16 * 8 * 192 + 8 * 64;
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_GPIPE], 4.0 * ((2 + ns) * 4160.0 + acts), 1e-6);
  model_spec_t spec;
  model_t *m = NULL;
  stage_t *st = NULL;
  CHECK_OK(model_spec_parse(FOUR_DENSE, "four", &spec));
  CHECK_OK(model_build(&spec, spec.input, 64, 8, &m));
  model_spec_free(&spec);
  if (m && stage_new(m, 3, 3, 16, 8, &st) == 0) {
    CHECK_NEAR((double)st->act_bytes, 4.0 * acts, 0);
    stage_free(st);
  }
  if (m) model_free(m);
  CHECK_OK(project_text(EIGHT_DENSE, 1, 4, 1e15, 1e15, 4, 4, &p));
  pipe_schedule_t sc;
  CHECK_OK(pipe_schedule_build(PIPE_INTERLEAVED, 4, 2, 16, 1, &sc));
  CHECK(pipe_schedule_peak_live(&sc, 0) == 11); /* the engine's lists: Megatron's warm-up + 1 */
  pipe_schedule_free(&sc);
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_INTERLEAVED], 4.0 * ((2 + ns) * 8320.0 + 11 * 8 * 192), 1e-6);
  CHECK(p.row[0].memory_bytes[PROJ_INTERLEAVED] < p.row[0].memory_bytes[PROJ_RING]);
}

/* Memory per rank, tp over a host of 4 (Megatron's pairs: 64 -> 256
 * column-split, 256 -> 64 row-split, twice; relu is the dense layer's
 * own): a rank holds a quarter of each pair's weights, 64 x 64 + 64 x 64,
 * with the column layer's quarter of its bias (64) and the row layer's
 * whole bias (64), and its shards of the activations; data parallelism
 * the whole 2 (64 x 256 + 256 + 256 x 64 + 64). A memory per rank between
 * the two: tp fits, the others do not. */
static void test_projection_memory_tp(void) {
  const char *pairs = "input shape=1x1x64\ndense units=256\nrelu\ndense units=64\ndense units=256\nrelu\n"
                      "dense units=64\n";
  int ns = default_nstate();
  perf_projection_t p;
  CHECK_OK(project_text(pairs, 1, 4, 1e15, 1e15, 4, 4, &p));
  double params = 2 * (64 * 64 + 64 + 64 * 64 + 64.0);
  /* a sample: the input 64; each pair's 64 of 256 outputs and its sum's 64, twice, with their
   * gradients; the probabilities 64 and the label */
  double acts = 64 + 2 * 2 * (64 + 64) + 64 + 1, tp = 4.0 * ((2 + ns) * params + 32 * acts);
  double dp = 4.0 * ((2 + ns) * 2 * (64 * 256 + 256 + 256 * 64 + 64.0) + 32 * (64 + 2 * 2 * (256 + 64) + 64 + 1));
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_TP], tp, 1e-6);
  CHECK_NEAR(p.row[0].memory_bytes[PROJ_RING], dp, 1e-6);
  CHECK(p.row[0].fits[PROJ_TP] && p.row[0].fits[PROJ_RING]); /* no memory given: no bound */
  proj_memory = (tp + dp) / 2;
  CHECK_OK(project_text(pairs, 1, 4, 1e15, 1e15, 4, 4, &p));
  proj_memory = 0;
  CHECK(p.row[0].fits[PROJ_TP] && !p.row[0].fits[PROJ_RING] && !p.row[0].fits[PROJ_FP16]);
  CHECK(p.row[0].mem_limit == (tp + dp) / 2);
}

/* The codecs: one dense layer (64 x 64 weights and 64 biases: n = 4160
 * values) on 2 hosts of 2 ranks of a device at 1e9 bytes/s, 1e8 bytes/s
 * between hosts, no latency. Bytes (rank 0, P = 4, blocks of 1040, the
 * last cut in two pieces where the biases start): fp16 2 bytes a value,
 * scatter-reduce 3 blocks + allgather 3 x its own, 6 x 2080 = 12480;
 * int8 a value a byte and 4 of scale a piece: 3 x 1044 + 1044 + 1044 +
 * 1048 = 6268. The link: the host's 2 ranks send 2/3 of it across the NIC
 * at once. The codec's passes (fp16, error feedback on: biased): encode
 * reads 4 and writes 2 bytes a value, decode reads 2 and adds into 4 (8),
 * compensate and update 24: n ((1 + 1/4) 6 + (2 + 1) 10 + 24) / 1e9. */
static void test_projection_codecs(void) {
  const char *path = "/tmp/dtrain-test-project-codec.model";
  char text[512];
  cluster_text(text, sizeof text, 2, 2, 1e9, 1e15, 1e8);
  perf_cluster_file_t c;
  train_config_t cfg;
  perf_proj_opts_t o;
  CHECK_OK(project_setup(path, "input shape=1x1x64\ndense units=64\n", text, &c, &cfg, &o));
  perf_projection_t p;
  CHECK_OK(perf_project(&o, &c, 4, 4, &p));
  const perf_proj_row_t *r = &p.row[0];
  double n = 4160;
  CHECK_NEAR(r->bytes_sent[PROJ_FP16], 12480, 1e-9);
  CHECK_NEAR(r->bytes_sent[PROJ_INT8], 6268, 1e-9);
  CHECK_NEAR(r->codec_sec[PROJ_FP16], n * (1.25 * 6 + 3 * 10 + 24) / 1e9, 1e-12);
  /* the step: the compute, then (one bucket) the codec and the exchange, the update */
  double across = 2 * 12480 * (2.0 / 3) / 1e8;
  CHECK_NEAR(r->step_sec[PROJ_FP16] - p.one_worker_sec, r->codec_sec[PROJ_FP16] + across, 1e-12);
  /* fewer bytes than the ring's 2 (P - 1) / P 4 n; powersgd's factors fewer still */
  CHECK(r->bytes_sent[PROJ_POWERSGD] > 0 && r->bytes_sent[PROJ_POWERSGD] < r->bytes_sent[PROJ_INT8]);
  CHECK(r->bytes_sent[PROJ_FP16] < 1.5 * 4 * n && r->bytes_sent[PROJ_TOPK] > 0);
  /* the compressor's arrays of n floats: error feedback's residual, its tmp and scratch */
  CHECK_NEAR(r->memory_bytes[PROJ_FP16] - r->memory_bytes[PROJ_RING], 3 * 4 * n, 1e-9);
  CHECK(r->codec_sec[PROJ_RING] == 0 && r->bytes_sent[PROJ_RING] == 0);
  remove(path);
}

/* One server, async and ssp:3, expected (one dense layer of 4160
 * parameters on a host of 4 ranks at 1e9 bytes/s, the server on a host of
 * its own): a worker's loop is its compute c and a push and a pull of
 * 16640 bytes. Alike workers: both c + trip. Rank 1 three times slower:
 * async's pushes a second are 3 / (c + trip) + 1 / (3c + trip), the
 * step 4 over that; ssp's bound paces everybody to the straggler's 3c +
 * trip. The server (an update a push) is far from the bottleneck. */
static void test_projection_ssp(void) {
  const char *path = "/tmp/dtrain-test-project-ssp.model";
  char text[512];
  cluster_text(text, sizeof text, 1, 4, 1e16, 1e9, 1e9);
  perf_cluster_file_t c;
  train_config_t cfg;
  perf_proj_opts_t o;
  CHECK_OK(project_setup(path, "input shape=1x1x64\ndense units=64\n", text, &c, &cfg, &o));
  perf_projection_t p;
  CHECK_OK(perf_project(&o, &c, 4, 4, &p));
  double cw = p.one_worker_sec - p.update_sec, trip = 2 * 16640 / 1e9;
  CHECK_NEAR(cw, 3 * 2 * 4096 * 32 / 1e9, 1e-12); /* forward 2 FLOPs a multiply-add, backward twice */
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_ASYNC], cw + trip, 1e-12);
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_SSP], cw + trip, 1e-12);
  o.straggler_rank = 1, o.straggler_slowdown = 3;
  CHECK_OK(perf_project(&o, &c, 4, 4, &p));
  double async = 4 / (3 / (cw + trip) + 1 / (3 * cw + trip));
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_ASYNC], async, 1e-12);
  CHECK_NEAR(p.row[0].step_sec[PROJ_PS_SSP], 3 * cw + trip, 1e-12);
  CHECK_NEAR(p.row[0].samples_per_sec[PROJ_PS_SSP], 32 * 4 / (3 * cw + trip), 1e-6);
  remove(path);
}

/* Horovod's loop (--cycle-ms): two equal dense layers on a slow device,
 * their gradients of S bytes each; the step is the loop's own arithmetic:
 * the last layer's gradients ready after forward and its backward (4 f of
 * the 6 f a worker's pass takes), the first cycle half a cycle later, the
 * coordinator's gather and broadcast (2 ceil(log2 P) messages), then the
 * responses one after another: fused (copied in and out) within the
 * buffer, alone past it; a tensor not ready at a cycle goes in the next,
 * which starts when the work before it ends. */
static void test_projection_horovod_loop(void) {
  const char *path = "/tmp/dtrain-test-project-hvd.model";
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("input shape=1x1x64\ndense units=64\ndense units=64\n", f);
  fclose(f);
  /* memory at 1e16 bytes/s: the layers are their FLOPs alone, the update
   * and the buffer's copies below 1e-10 s (the copies: below, at 1e9) */
  char text[512];
  const char *fmt =
      "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":2,\"ranks_per_host\":4,"
      "\"device\":{\"flops\":1e9,\"efficiency\":1,\"memory_bandwidth\":%s}}],"
      "\"intra\":{\"latency\":0,\"bandwidth\":1e15},\"inter\":{\"latency\":1e-3,\"bandwidth\":1e6}}";
  snprintf(text, sizeof text, fmt, "1e16");
  perf_cluster_file_t c;
  CHECK_OK(perf_cluster_file_parse(text, strlen(text), "t", &c));
  char *argv[] = {"train", NULL};
  train_config_t cfg;
  CHECK_OK(train_options_parse(1, argv, &cfg));
  perf_proj_opts_t o = {.model = path, .batch = 32, .nclasses = 64, .bucket_bytes = 1 << 20,
                        .cycle_sec = 1.0, .straggler_rank = -1, .optim = &cfg.optim};
  perf_projection_t p;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  int P = 8, g = 4;
  double Sg = p.grad_bytes / 2, neg = 2.0 * ceil_lg(P) * c.inter.alpha;
  double fl = p.one_worker_sec / 6; /* a layer's forward; its backward twice that */
  double ring1 = perf_proj_exchange_sec(PROJ_RING, P, g, Sg, c.intra, c.inter);
  double ring2 = perf_proj_exchange_sec(PROJ_RING, P, g, 2 * Sg, c.intra, c.inter);
  CHECK(fl > 1e-4 && Sg > 16000 && Sg < 17000);
  /* a cycle of 1 s: both ready at the first; fused */
  double fused = p.row[0].step_sec[PROJ_RING];
  CHECK_NEAR(fused, 4 * fl + 0.5 + neg + ring2, 1e-9);
  /* a buffer for one: two responses in the cycle */
  o.bucket_bytes = 1.5 * Sg;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  double apart = p.row[0].step_sec[PROJ_RING];
  CHECK_NEAR(apart, 4 * fl + 0.5 + neg + 2 * ring1, 1e-9);
  /* a cycle shorter than the first layer's backward (2 f): it finds the
   * last layer alone; the first goes at the next cycle, when the first
   * response's exchange (seconds on a 1 MB/s link) ends */
  o.cycle_sec = fl / 2, o.bucket_bytes = 1 << 20;
  CHECK(ring1 > 10 * fl);
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  CHECK_NEAR(p.row[0].step_sec[PROJ_RING], 4 * fl + fl / 4 + 2 * (neg + ring1), 1e-9);
  /* without the loop (cycle 0): one fixed bucket sent when backward ends */
  o.cycle_sec = 0;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  CHECK_NEAR(p.row[0].step_sec[PROJ_RING], 6 * fl + ring2, 1e-9);
  /* memory at 1e9 bytes/s: the fused response copies its bytes in and out (a
   * read and a write a byte each way); the two apart copy nothing. The
   * layers' own times change too, the same in both: compare differences. */
  snprintf(text, sizeof text, fmt, "1e9");
  CHECK_OK(perf_cluster_file_parse(text, strlen(text), "t", &c));
  o.cycle_sec = 1.0;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  double fused_slow = p.row[0].step_sec[PROJ_RING];
  o.bucket_bytes = 1.5 * Sg;
  CHECK_OK(perf_project(&o, &c, 8, 8, &p));
  double apart_slow = p.row[0].step_sec[PROJ_RING];
  CHECK_NEAR((fused_slow - apart_slow) - (fused - apart), 2 * (2 * Sg) * 2.0 / 1e9, 1e-9);
  remove(path);
}

/* A link's frames and efficiency: the payload gets line x payload /
 * (payload + overhead) x efficiency. */
static void test_cluster_link_frames(void) {
  const char *head = "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":2,\"ranks_per_host\":2,"
                     "\"device\":{\"speed\":1}}],\"intra\":{\"bandwidth\":1e9},";
  char buf[512];
  perf_cluster_file_t c;
  snprintf(buf, sizeof buf, "%s\"inter\":{\"bandwidth\":3.125e9,\"frame_payload\":1024,"
           "\"frame_overhead\":82,\"efficiency\":0.966}}", head);
  CHECK_OK(perf_cluster_file_parse(buf, strlen(buf), "c", &c));
  CHECK_NEAR(c.inter.beta, 3.125e9 * 1024 / 1106 * 0.966, 1e-3);
  CHECK_NEAR(c.inter_share, 1024.0 / 1106 * 0.966, 1e-12);
  CHECK(c.intra.beta == 1e9 && c.intra_share == 1);
  struct {
    const char *inter, *needle;
  } bad[] = {
      {"{\"bandwidth\":1e9,\"frame_overhead\":82}", "inter.frame_payload\" is missing"},
      {"{\"bandwidth\":1e9,\"efficiency\":1.5}", "inter.efficiency"},
      {"{\"bandwidth\":1e9,\"frame_payload\":0}", "inter.frame_payload"},
      {"{\"bandwidth\":1e9,\"mtu\":1500}", "unknown key \"inter.mtu\""},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    snprintf(buf, sizeof buf, "%s\"inter\":%s}", head, bad[k].inter);
    CHECK_FAILS_WITH(perf_cluster_file_parse(buf, strlen(buf), "c", &c), bad[k].needle);
  }
}

static void test_cluster_reader(void) {
  perf_cluster_file_t c;
  const char *head = "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":2,\"ranks_per_host\":2,";
  const char *tail = "\"intra\":{\"bandwidth\":1e9},\"inter\":{\"bandwidth\":1e8}}";
  struct {
    const char *group, *needle;
  } bad[] = {
      {"\"device\":{\"speed\":0}}],", "groups[0].device.speed"},
      {"\"device\":{\"speed\":1,\"flops\":1e12}}],", "not both"},
      {"\"device\":{\"flops\":1e12,\"efficiency\":0.5}}],", "groups[0].device.memory_bandwidth\" is missing"},
      {"\"device\":{\"speed\":1},\"gpus\":4}],", "unknown key \"groups[0].gpus\""},
      {"\"device\":{}}],", "groups[0].device\" is missing or empty"},
      {"\"hosts\":1.5,\"device\":{\"speed\":1}}],", "groups[0].hosts"},
      {"\"memory_per_rank\":\"16GB\",\"device\":{\"speed\":1}}],", "groups[0].memory_per_rank"},
  };
  char buf[512];
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    snprintf(buf, sizeof buf, "%s%s%s", head, bad[k].group, tail);
    CHECK_FAILS_WITH(perf_cluster_file_parse(buf, strlen(buf), "c", &c), bad[k].needle);
  }
  snprintf(buf, sizeof buf, "%s\"device\":{\"speed\":2}}],%s", head, tail);
  CHECK_OK(perf_cluster_file_parse(buf, strlen(buf), "c", &c));
  CHECK(c.nranks == 4 && c.group[0].speed == 2 && c.inter.beta == 1e8);
  const char *no_inter = "{\"format\":\"dtrain-cluster 1\",\"groups\":[{\"hosts\":1,\"ranks_per_host\":1,"
                         "\"device\":{\"speed\":1}}],\"intra\":{\"bandwidth\":1e9}}";
  CHECK_FAILS_WITH(perf_cluster_file_parse(no_inter, strlen(no_inter), "c", &c), "key \"inter\" is missing");
  const char *fmt = "{\"format\":\"dtrain-cluster 2\"}";
  CHECK_FAILS_WITH(perf_cluster_file_parse(fmt, strlen(fmt), "c", &c), "key \"format\"");
  CHECK_FAILS_WITH(perf_cluster_file_parse(buf, 30, "c", &c), "does not end");
  CHECK_FAILS_WITH(perf_cluster_file_parse(buf, 47, "c", &c), "expected ':'");
}

/* --predict --cluster: the simulator's cluster filled from the file:
 * hosts group by group, links, 1 / speed with the straggler's on top. */
static void test_cluster_for_simulator(void) {
  const char *text =
      "{\"format\":\"dtrain-cluster 1\",\"groups\":["
      "{\"hosts\":2,\"ranks_per_host\":2,\"device\":{\"speed\":1}},"
      "{\"hosts\":1,\"ranks_per_host\":3,\"device\":{\"speed\":0.5}}],"
      "\"intra\":{\"latency\":1e-6,\"bandwidth\":1e10},\"inter\":{\"latency\":1e-5,\"bandwidth\":1e9}}";
  perf_cluster_file_t f;
  CHECK_OK(perf_cluster_file_parse(text, strlen(text), "t", &f));
  char *argv[] = {"train", "--workers", "7", "--straggler", "rank=1,slowdown=3", "--comm", "mpi", NULL};
  train_config_t cfg;
  CHECK_OK(train_options_parse(7, argv, &cfg));
  perf_profile_t prof;
  perf_profile_default(&prof);
  perf_cluster_t cl;
  CHECK_OK(perf_cluster_from_file(&f, &cfg, 7, &prof, &cl));
  int want_host[7] = {0, 0, 1, 1, 2, 2, 2};
  double want_slow[7] = {1, 3, 1, 1, 2, 2, 2};
  for (int r = 0; r < 7; r++) {
    CHECK(cl.host[r] == want_host[r]);
    CHECK_NEAR(cl.slowdown[r], want_slow[r], 1e-12);
    CHECK(cl.latency[r] == 1e-5 && cl.bandwidth[r] == 1e9);
  }
  CHECK(cl.multihost && cl.cores == 7 && cl.intra_bandwidth == 1e10 && cl.own.alpha == prof.mpi.alpha);
  perf_cluster_free(&cl);
  CHECK_OK(perf_cluster_from_file(&f, &cfg, 2, &prof, &cl)); /* one host: no link between hosts */
  CHECK(!cl.multihost);
  perf_cluster_free(&cl);
  CHECK_FAILS_WITH(perf_cluster_from_file(&f, &cfg, 8, &prof, &cl), "has 7 ranks");
  f.group[1].speed = 2;
  CHECK_FAILS_WITH(perf_cluster_from_file(&f, &cfg, 7, &prof, &cl), "faster than this machine");
}

int main(void) {
  RUN(test_taxonomy_projection);
  RUN(test_taxonomy_simulator);
  RUN(test_megatron_bubble);
  RUN(test_projection_overlap);
  RUN(test_projection_gpipe);
  RUN(test_projection_more_strategies);
  RUN(test_projection_tp);
  RUN(test_projection_memory);
  RUN(test_projection_memory_tp);
  RUN(test_projection_grid);
  RUN(test_projection_grid_degenerate);
  RUN(test_projection_codecs);
  RUN(test_projection_ssp);
  RUN(test_projection_horovod_loop);
  RUN(test_cluster_link_frames);
  RUN(test_cluster_reader);
  RUN(test_cluster_for_simulator);
  TEST_MAIN_END();
}
