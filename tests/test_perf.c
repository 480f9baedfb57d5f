/* The performance model (src/perf/): the simulator against the formulas
 * it must reproduce exactly when its inputs are set by hand -- the ring's
 * alpha-beta time, a straggler's sleep, cores shared by more ranks than
 * they hold, an eager message, and the pipelines' bubbles (GPipe and 1F1B:
 * (M + P - 1)(f + b); interleaved 1F1B: (V M + P - 1)(f + b) with f and b
 * a chunk's) from the same instruction lists the engine runs -- and the
 * profile's reader. */
#include <math.h>
#include <unistd.h>

#include "dtrain/coll.h"
#include "perf/perf.h"
#include "strategy/pipe/schedule.h"
#include "strategy/strategy.h"
#include "test.h"

#define F 1e-3 /* a layer's forward, seconds */
#define B 2e-3 /* its backward */

/* Every layer F forward and B backward at `samples`; no update cost. */
static void hand_compute(perf_compute_t *pc, int nlayers, int samples, double *fwd, double *bwd) {
  *pc = (perf_compute_t){.nlayers = nlayers, .nsizes = 1, .fwd = fwd, .bwd = bwd};
  pc->size[0] = samples;
  for (int i = 0; i < nlayers; i++) fwd[i] = F, bwd[i] = B;
}

/* n ranks on `cores` cores, links of latency lat and bandwidth bw, no
 * transport cost of its own, nothing else running. */
static void hand_cluster(perf_cluster_t *cl, int n, int cores, double lat, double bw,
                         int *host, double *l, double *b, double *slow) {
  *cl = (perf_cluster_t){.nranks = n, .cores = cores, .host = host, .latency = l,
                         .bandwidth = b, .slowdown = slow};
  for (int r = 0; r < n; r++) host[r] = 0, l[r] = lat, b[r] = bw, slow[r] = 1;
}

/* Each rank: layer 0 forward, backward, a ring allreduce of `count`
 * floats after it, the update. */
static void ring_step(step_desc_t *d, int P, size_t count) {
  step_desc_init(d, P);
  for (int r = 0; r < P; r++) {
    int f = step_add(d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    int b = step_add(d, (step_task_t){TASK_BACKWARD, r, 0, 10, 8, .peer = -1, .after = f});
    int a = step_add_allreduce(d, r, r, P, 1, ALLREDUCE_RING, count, b, THREAD_COMPUTE, 1);
    step_add(d, (step_task_t){TASK_UPDATE, r, -1, 10, 8, .peer = -1, .after = a});
  }
}

static void test_ring_alpha_beta(void) {
  int P = 4, host[4];
  double fwd[1], bwd[1], l[4], bw[4], slow[4];
  size_t count = 250000; /* 1 MB */
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, P, 4, 50e-6, 125e6, host, l, bw, slow);
  step_desc_t d;
  ring_step(&d, P, count);
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  /* 2 (P - 1) messages, 2 (P - 1) / P x S in sequence */
  double ring = 2.0 * (P - 1) * 50e-6 + 2.0 * (P - 1) / P * 4.0 * count / 125e6;
  CHECK_NEAR(sim.step_sec, F + B + ring, 1e-12);
  CHECK_NEAR(ring, coll_allreduce_time(ALLREDUCE_RING, P, 4 * count, 1, 0, 50e-6, 125e6), 1e-12);
  /* a straggler at 3x: every rank waits for its compute at the allreduce */
  slow[2] = 3;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 3 * (F + B) + ring, 1e-12);
  /* 4 ranks on 2 cores: the compute takes twice as long */
  slow[2] = 1;
  cl.cores = 2;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * (F + B) + ring, 1e-12);
  /* and with 2 threads of other processes on them: 4 / 6 of a core each */
  cl.background = 2;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 3 * (F + B) + ring, 1e-12);
  step_desc_free(&d);
}

/* An allreduce every 8 steps: 1/8 of it a step in an endless run; in an
 * epoch of 12 steps, the one run the epoch holds, over its 12 steps (as
 * local SGD averages at its 8th step and not at its 12th). */
static void test_periodic_share(void) {
  int P = 2, host[2];
  double fwd[1], bwd[1], l[2], bw[2], slow[2];
  size_t count = 250000;
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, P, P, 50e-6, 125e6, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, P);
  for (int r = 0; r < P; r++) {
    int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    step_add_allreduce(&d, r, r, P, 1, ALLREDUCE_RING, count, f, THREAD_COMPUTE, 8);
  }
  double ring = coll_allreduce_time(ALLREDUCE_RING, P, 4 * count, 1, 0, 50e-6, 125e6);
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + ring / 8, 1e-12);
  perf_sim_options_t o = {.epoch_steps = 12};
  CHECK_OK(perf_simulate_with(&d, &pc, &cl, &o, &sim));
  CHECK_NEAR(sim.step_sec, F + ring / 12, 1e-12);
  o.epoch_steps = 16;
  CHECK_OK(perf_simulate_with(&d, &pc, &cl, &o, &sim));
  CHECK_NEAR(sim.step_sec, F + ring / 8, 1e-12);
  step_desc_free(&d);
}

static void test_eager_message(void) {
  int host[2];
  double fwd[1], bwd[1], l[2], bw[2], slow[2];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, 2, 2, 1e-3, 1e6, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 2);
  /* rank 0 sends 1000 bytes at once; rank 1 computes, then receives */
  step_add(&d, (step_task_t){TASK_COMM, 0, -1, .pattern = "send", .peer = 1, .group = 2,
                             .sent = 1000, .after = -1});
  int f = step_add(&d, (step_task_t){TASK_FORWARD, 1, 0, 10, 8, .peer = -1, .after = -1});
  step_add(&d, (step_task_t){TASK_COMM, 1, -1, .pattern = "recv", .peer = 0, .group = 2,
                             .received = 1000, .after = f});
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 1000 / 1e6 + 1e-3, 1e-12); /* arrives after the forward ends */
  fwd[0] = 5e-3;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 5e-3, 1e-12); /* already there when the receive starts */
  step_desc_free(&d);
}

/* A waiting rank that polls (mpi's progress loop) takes its share of the
 * cores: two ranks on one core, rank 0 computes F then sends, rank 1
 * receives at once. Sleeping waits (local): the forward has the core, F
 * and the message. Polling: rank 1's wait shares the core for all of F,
 * so the forward takes 2F. */
static void test_polling_waits(void) {
  int host[2];
  double fwd[1], bwd[1], l[2], bw[2], slow[2];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, 2, 1, 1e-4, 1e9, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 2);
  int f = step_add(&d, (step_task_t){TASK_FORWARD, 0, 0, 10, 8, .peer = -1, .after = -1});
  step_add(&d, (step_task_t){TASK_COMM, 0, -1, .pattern = "send", .peer = 1, .group = 2,
                             .sent = 1000, .after = f});
  step_add(&d, (step_task_t){TASK_COMM, 1, -1, .pattern = "recv", .peer = 0, .group = 2,
                             .received = 1000, .after = -1});
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + 1000 / 1e9 + 1e-4, 1e-12);
  cl.polling = 1;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * F + 1000 / 1e9 + 1e-4, 1e-12);
  step_desc_free(&d);
}

/* mpi's ranks poll while they wait; with more ranks than cores and no
 * calibration, its link is the oversubscribed estimate; local's waits
 * sleep. */
static void test_mpi_cluster(void) {
  train_config_t cfg;
  train_config_default(&cfg);
  cfg.comm = COMM_MPI;
  perf_profile_t prof;
  perf_profile_default(&prof);
  prof.load_given = 1; /* no /proc/loadavg read */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  perf_cluster_t cl;
  CHECK_OK(perf_cluster_from_config(&cfg, (int)cores + 1, &prof, &cl));
  CHECK(cl.polling && cl.own.alpha == prof.mpi_oversubscribed.alpha &&
        cl.own.beta == prof.mpi_oversubscribed.beta);
  perf_cluster_free(&cl);
  CHECK_OK(perf_cluster_from_config(&cfg, 1, &prof, &cl));
  CHECK(cl.polling && cl.own.alpha == prof.mpi.alpha);
  perf_cluster_free(&cl);
  cfg.comm = COMM_LOCAL;
  CHECK_OK(perf_cluster_from_config(&cfg, 1, &prof, &cl));
  CHECK(!cl.polling);
  perf_cluster_free(&cl);
}

/* Two hosts of two ranks; ranks 0 and 2, and 1 and 3, each allreduce S
 * bytes (a ring of 2: two messages, S in sequence) at once across the
 * hosts. With link=shared both pairs cross on one link each way, as the
 * emulator sends them (one message at a time on a host's link): twice the
 * bytes' time; with a link of each rank's own, once. */
static void test_shared_host_link(void) {
  int host[4];
  double fwd[1], bwd[1], l[4], bw[4], slow[4], S = 1e6, lat = 50e-6, T = S / 125e6;
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, 4, 4, lat, 125e6, host, l, bw, slow);
  host[2] = host[3] = 1;
  cl.multihost = 1;
  perf_sim_t sim;
  for (int late = 0; late < 2; late++) { /* late: the pair {1, 3} a forward after {0, 2} */
    step_desc_t d;
    step_desc_init(&d, 4);
    for (int r = 0; r < 4; r++) {
      int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
      if (late && r % 2) f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = f});
      int a = step_add_allreduce(&d, r, r / 2, 2, 2, ALLREDUCE_RING, (size_t)(S / 4), f, THREAD_COMPUTE, 1);
      d.task[a].color = 1 + r % 2; /* the pair across the hosts: {0, 2} or {1, 3} */
    }
    cl.shared_link = 0;
    CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
    CHECK_NEAR(sim.step_sec, (1 + late) * F + 2 * lat + T, 1e-12); /* own links */
    cl.shared_link = 1; /* one link, busy from the first pair's start to both pairs' bytes sent */
    CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
    CHECK_NEAR(sim.step_sec, F + 2 * T + 2 * lat, 1e-12);
    step_desc_free(&d);
  }
}

/* A compressed exchange's codec: the passes compress/exchange.c runs, per
 * value (dense: every block and the owned sum encoded, P contributions
 * and P sums and the memory's own decoded; sparse: one encoding, P
 * messages decoded), charged as core time before the exchange, on the
 * cores the compute shares. */
static void test_codec_work(void) {
  perf_compute_t pc = {.codec_family = PERF_CODEC_DENSE, .encode_sec = 1e-9, .decode_sec = 2e-9,
                       .feedback_sec = 3e-9, .copy_sec = 5e-10};
  CHECK_NEAR(perf_codec_work(&pc, 1e6, 4), 1e6 * (1.25e-9 + 3 * 2e-9 + 3e-9), 1e-15);
  pc.feedback_sec = 0; /* no memory: its decode and passes go */
  CHECK_NEAR(perf_codec_work(&pc, 1e6, 2), 1e6 * (1.5e-9 + 2 * 2e-9), 1e-15);
  pc.codec_family = PERF_CODEC_SPARSE;
  CHECK_NEAR(perf_codec_work(&pc, 1e6, 2), 1e6 * (1e-9 + 2 * 2e-9 + 3 * 5e-10), 1e-15);
  pc.codec_scale = 1.5; /* the exchange measured 1.5x the passes: the same shape in P, 1.5x */
  CHECK_NEAR(perf_codec_work(&pc, 1e6, 2), 1.5e6 * (1e-9 + 2 * 2e-9 + 3 * 5e-10), 1e-15);
  pc.codec_scale = 0;
  /* two ranks: a forward, then an exchange whose codec takes W of a core */
  int host[2];
  double fwd[1], bwd[1], l[2], bw[2], slow[2], W = 4e-3;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  pc.codec_family = PERF_CODEC_DENSE, pc.encode_sec = W / 1.5e6, pc.decode_sec = pc.feedback_sec = 0;
  hand_cluster(&cl, 2, 2, 0, 0, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 2);
  for (int r = 0; r < 2; r++) {
    int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    step_add(&d, (step_task_t){TASK_COMM, r, -1, .pattern = "scatter-reduce+allgather", .algo = "ring",
                               .peer = -1, .group = 2, .sent = 1000, .received = 1000,
                               .coded = 1000000, .after = f, .thread = THREAD_COMM});
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + W, 1e-12);
  cl.cores = 1; /* one core: both ranks' forwards, then both codecs, in turn */
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * F + 2 * W, 1e-12);
  step_desc_free(&d);
}

/* One worker and two servers (ranks 1, 2): its pulls from both go at
 * once (two servers' links), then its forward, then its pushes one after
 * the other on its own link. */
static void test_pulls_from_servers(void) {
  int host[3];
  double fwd[1], bwd[1], l[3], bw[3], slow[3];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, 3, 3, 0, 1e6, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 3);
  int p = -1, f = -1;
  for (int k = 1; k <= 2; k++) {
    p = step_add(&d, (step_task_t){TASK_COMM, 0, -1, .pattern = "pull", .peer = k, .group = 2,
                                   .sent = 100, .received = 1e6, .after = -1});
    step_add(&d, (step_task_t){TASK_COMM, k, -1, .pattern = "pull", .peer = 0, .group = 2,
                               .sent = 1e6, .received = 100, .thread = THREAD_COMM, .after = -1});
  }
  f = step_add(&d, (step_task_t){TASK_FORWARD, 0, 0, 10, 8, .peer = -1, .after = p});
  for (int k = 1; k <= 2; k++) {
    step_add(&d, (step_task_t){TASK_COMM, 0, -1, .pattern = "push", .peer = k, .group = 2,
                               .sent = 1e6, .received = 100, .after = f});
    step_add(&d, (step_task_t){TASK_COMM, k, -1, .pattern = "push", .peer = 0, .group = 2,
                               .sent = 100, .received = 1e6, .thread = THREAD_COMM, .after = -1});
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  /* both requests on its link (2e-4 s), both replies at once (1 s), the
   * forward, both pushes in turn (2 s), the replies */
  CHECK_NEAR(sim.step_sec, 2e-4 + 1 + F + 2 + 1e-4, 1e-9);
  step_desc_free(&d);
}

/* A binomial broadcast, then a reduce, of S bytes over P ranks from root
 * 1, free of latency: the broadcast's root sends to its children one
 * after the other, the reduce's children send at once. */
static double tree_step(int P, double S, double bw) {
  int host[8];
  double fwd[1], bwd[1], l[8], b[8], slow[8];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, P, P, 0, bw, host, l, b, slow);
  step_desc_t d;
  step_desc_init(&d, P);
  for (int r = 0; r < P; r++) {
    int x = step_add_tree(&d, r, 0, P, 1, (size_t)(S / 4), -1, THREAD_COMPUTE, 1);
    step_add_tree(&d, r, 1, P, 1, (size_t)(S / 4), x, THREAD_COMPUTE, 1);
  }
  perf_sim_t sim;
  double t = perf_simulate(&d, &pc, &cl, 0, &sim) == 0 ? sim.step_sec : -1;
  step_desc_free(&d);
  return t;
}

static void test_tree_collectives(void) {
  double S = 1e6, bw = 1e8, T = S / bw;
  CHECK_NEAR(tree_step(4, S, bw), 2 * T + 2 * T, 1e-12); /* depth 2 both ways */
  CHECK_NEAR(tree_step(3, S, bw), 2 * T + T, 1e-12);     /* the root's 2 sends; 2 leaves at once */
  CHECK_NEAR(tree_step(8, S, bw), 3 * T + 3 * T, 1e-12);
  CHECK_NEAR(tree_step(5, S, bw), 3 * T + 2 * T, 1e-12); /* root: 3 sends; reduce depth 2 */
}

/* A parameter server (rank 2) and two workers: each pulls (a 100-byte
 * request, the model's 1e6 bytes back), computes, pushes (1e6 bytes, a
 * 100-byte reply). The server answers whichever request comes, and its
 * one link sends the two pulls one after the other. */
static void test_server_exchanges(void) {
  int host[3];
  double fwd[1], bwd[1], l[3], bw[3], slow[3];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  bwd[0] = 0;
  hand_cluster(&cl, 3, 3, 0, 1e6, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 3);
  for (int w = 0; w < 2; w++) {
    int p = step_add(&d, (step_task_t){TASK_COMM, w, -1, .pattern = "pull", .peer = 2, .group = 2,
                                       .sent = 100, .received = 1e6, .after = -1});
    step_add(&d, (step_task_t){TASK_COMM, 2, -1, .pattern = "pull", .peer = w, .group = 2,
                               .sent = 1e6, .received = 100, .thread = THREAD_COMM, .after = -1});
    int f = step_add(&d, (step_task_t){TASK_FORWARD, w, 0, 10, 8, .peer = -1, .after = p});
    step_add(&d, (step_task_t){TASK_COMM, w, -1, .pattern = "push", .peer = 2, .group = 2,
                               .sent = 1e6, .received = 100, .after = f});
    step_add(&d, (step_task_t){TASK_COMM, 2, -1, .pattern = "push", .peer = w, .group = 2,
                               .sent = 100, .received = 1e6, .thread = THREAD_COMM, .after = -1});
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  /* worker 1: its request (1e-4 s), the server's link busy with worker 0's
   * pull (1 s) then its own (1 s), its forward, its push (1 s), the reply */
  CHECK_NEAR(sim.step_sec, 1e-4 + 1 + 1 + F + 1 + 1e-4, 1e-9);
  /* asynchronous (no worker waits for the other's step), steady: the
   * server's link sends a pull to each a step (2 s), the pushes go on the
   * workers' own links meanwhile; a worker's own round is a pull, its
   * request, the pull, its forward, its push, the reply (2 s + F + 2e-4):
   * the step is that, not 3 s + F */
  perf_sim_options_t o = {.steady_steps = 8};
  CHECK_OK(perf_simulate_with(&d, &pc, &cl, &o, &sim));
  CHECK_NEAR(sim.step_sec, 2 + F + 2e-4, 1e-9);
  step_desc_free(&d);
}

/* SSP (or async) over two servers (ranks 2, 3) and two workers, as
 * ps_describe.c describes it: each worker pulls a shard from each server
 * at the step's start (a 100-byte request, 1e6 bytes back: 1 s), computes
 * once it has both, pushes a shard to each (1 s each on its own link, a
 * 100-byte reply). One step from the start: both workers ask both servers
 * at once, each server's link sends one worker's shard, then the other's,
 * so a worker has both 2 s after its requests (2e-4 s on its link); its
 * forward; its pushes in turn (2 s), the second's reply: 4 s + F + 3e-4 s.
 * Steady, by hand: a worker's own round is its requests, both shards at
 * once (1 s), its forward, its pushes (2 s), the reply: 3 s + F + 3e-4 s,
 * each server's link busy 2 s of it, so the workers settle a second apart
 * and neither waits for the other. The copies of the step the steady
 * reading simulates must each wait for the one before: a copy's second
 * pull (which goes together with its first) once waited for nothing, so
 * every copy's requests went at the start, the servers' links were booked
 * with them ahead of the pushes, and the second half ended with the first. */
static void test_two_servers_steady(void) {
  int host[4];
  double fwd[1], bwd[1], l[4], bw[4], slow[4];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  bwd[0] = 0;
  hand_cluster(&cl, 4, 4, 0, 1e6, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 4);
  for (int w = 0; w < 2; w++) {
    int p = -1;
    for (int k = 2; k <= 3; k++) {
      p = step_add(&d, (step_task_t){TASK_COMM, w, -1, .pattern = "pull", .peer = k, .group = 2,
                                     .sent = 100, .received = 1e6, .after = -1});
      step_add(&d, (step_task_t){TASK_COMM, k, -1, .pattern = "pull", .peer = w, .group = 2,
                                 .sent = 1e6, .received = 100, .thread = THREAD_COMM, .after = -1});
    }
    int f = step_add(&d, (step_task_t){TASK_FORWARD, w, 0, 10, 8, .peer = -1, .after = p});
    for (int k = 2; k <= 3; k++) {
      step_add(&d, (step_task_t){TASK_COMM, w, -1, .pattern = "push", .peer = k, .group = 2,
                                 .sent = 1e6, .received = 100, .after = f});
      step_add(&d, (step_task_t){TASK_COMM, k, -1, .pattern = "push", .peer = w, .group = 2,
                                 .sent = 100, .received = 1e6, .thread = THREAD_COMM, .after = -1});
    }
  }
  perf_sim_t one, sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &one));
  CHECK_NEAR(one.step_sec, 4 + F + 3e-4, 1e-9); /* one step from the start: the same round */
  /* worker 0 communicates all of it but its forward: its two pulls (and
   * its two pushes) under way together count once, not 6 s */
  CHECK_NEAR(one.comm_sec, one.step_sec - F, 1e-3);
  perf_sim_options_t o = {.steady_steps = 8};
  CHECK_OK(perf_simulate_with(&d, &pc, &cl, &o, &sim));
  CHECK(sim.step_sec > 0);
  CHECK_NEAR(sim.step_sec, 3 + F + 3e-4, 1e-6);
  o.steady_steps = 16; /* the reading does not hang on how many copies */
  CHECK_OK(perf_simulate_with(&d, &pc, &cl, &o, &sim));
  CHECK_NEAR(sim.step_sec, 3 + F + 3e-4, 1e-6);
  step_desc_free(&d);
}

/* D-PSGD's step on 3 ranks: after its forward, each rank exchanges its
 * model (S bytes) with both ring neighbours at once; its two sends share
 * its link. */
static void test_neighbour_exchanges(void) {
  int host[3];
  double fwd[1], bwd[1], l[3], bw[3], slow[3], S = 1e6;
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, 3, 3, 0, 1e8, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 3);
  for (int r = 0; r < 3; r++) {
    int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    for (int k = 0; k < 2; k++) /* the neighbours in opposite orders on adjacent ranks */
      step_add(&d, (step_task_t){TASK_COMM, r, -1, .pattern = "sendrecv",
                                 .peer = (r + (k == r % 2 ? 1 : 2)) % 3, .group = 2, .sent = S,
                                 .received = S, .after = f});
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + 2 * S / 1e8, 1e-12);
  step_desc_free(&d);
}

/* A pipeline's step on a model of `layers` equal layers, every layer F
 * forward and B backward, links of bandwidth bw (0: free): the
 * instruction lists the engine runs (strategy_describe), simulated. */
static double pipeline_step_on(const char *schedule, int layers, const char *partition, double bw) {
  char sched[64], part[64], micro[8];
  snprintf(sched, sizeof sched, "%s", schedule);
  snprintf(part, sizeof part, "%s", partition);
  snprintf(micro, sizeof micro, "%d", strcmp(schedule, "pipedream") && strcmp(schedule, "ddg") ? 4 : 1);
  char *argv[] = {"train", "--data", "synthetic", "--workers", "2", "--pp", "2",
                  "--micro-batches", micro, "--batch", "16", "--partition", part,
                  "--pipe-schedule", sched, NULL};
  train_config_t cfg;
  double step = -1;
  if (train_options_parse(15, argv, &cfg) != 0) {
    fprintf(stderr, "  %s\n", dt_errmsg());
    return -1;
  }
  model_spec_t spec;
  char text[256] = "";
  for (int i = 0; i + 1 < layers; i++) strcat(text, "dense units=8\nrelu\n");
  strcat(text, "dense units=4\n");
  if (model_spec_parse(text, "test", &spec) != 0) return -1;
  model_t *m = NULL;
  shape_t in = {1, 1, 16};
  int rc = model_build(&spec, in, 4, 16, &m);
  model_spec_free(&spec);
  step_desc_t d;
  if (rc == 0 && (rc = strategy_describe(&cfg, m, &d)) == 0) {
    int host[2];
    double fwd[8], bwd[8], l[2], bws[2], slow[2];
    perf_compute_t pc;
    perf_cluster_t cl;
    hand_compute(&pc, m->nlayers, 4, fwd, bwd);
    hand_cluster(&cl, 2, 2, 0, bw, host, l, bws, slow);
    perf_sim_t sim;
    perf_sim_options_t so = {.steady_steps = pipe_kind_async((pipe_kind_t)cfg.pipe.schedule) ? 8 : 0};
    if (perf_simulate_with(&d, &pc, &cl, &so, &sim) == 0) step = sim.step_sec;
    step_desc_free(&d);
  }
  if (rc != 0) fprintf(stderr, "  %s\n", dt_errmsg());
  if (m) model_free(m);
  return step;
}

static double pipeline_step(const char *schedule, int layers, const char *partition) {
  return pipeline_step_on(schedule, layers, partition, 0);
}

static void test_pipeline_bubbles(void) {
  int P = 2, M = 4, V = 2;
  CHECK_NEAR(pipeline_step("gpipe", 2, "0,1"), (M + P - 1) * (F + B), 1e-12);
  CHECK_NEAR(pipeline_step("1f1b", 2, "0,1"), (M + P - 1) * (F + B), 1e-12);
  CHECK_NEAR(pipeline_step("interleaved:2", 4, "0,1,2,3"), (V * M + P - 1) * (F + B), 1e-12);
}

/* The engine's sends are isends, waited for at REDUCE: a stage computes
 * on while its link carries the last micro-batch. GPipe, 2 stages of one
 * layer, 4 micro-batches of 4 samples: 128 bytes a message, L = 4 ms on
 * the link (> F, B). Stage 0's forwards end at F, 2F, ...; its messages
 * follow each other on the link, the last there at F + 4L; stage 1's
 * last forward and first backward, then its gradients 4L on its link;
 * stage 0's last backward: 2F + 8L + 2B (a blocking send, 4F + 8L + 3B
 * + ...: 47 ms, not 38). */
/* The streams without flush, in steady state: 2BW (4 units of 4 samples
 * a step) and PipeDream and DDG (one of 16) on 2 stages of one layer
 * each, free links (the layers' times in proportion to the samples).
 * Stage 0 runs F of unit u then B of u - 1, whose gradient stage 1 sent
 * the moment its F and B of u - 1 ended: no stage waits, a unit takes
 * F + B of each. Stage 0's first backward of a step takes the gradient
 * stage 1 sent in the step before (the receive's lag). */
static void test_pipeline_streams(void) {
  CHECK_NEAR(pipeline_step("2bw", 2, "0,1"), 4 * (F + B), 1e-12);
  CHECK_NEAR(pipeline_step("pipedream", 2, "0,1"), 4 * (F + B), 1e-12); /* a unit of 16 samples */
  CHECK_NEAR(pipeline_step("ddg", 2, "0,1"), 4 * (F + B), 1e-12);       /* the same */
}

static void test_pipeline_sends_overlap(void) {
  double L = 4e-3;
  CHECK_NEAR(pipeline_step_on("gpipe", 2, "0,1", 128 / L), 2 * F + 8 * L + 2 * B, 1e-9);
}

/* Four ranks on two cores, a collective's own cost 1 ms a message calm
 * and 5 ms crowded (local's oversubscribed calibration): ranks 0 and 1
 * sum (rhd over 2: 2 messages) while ranks 2 and 3 sleep, then while they
 * compute; then all four sum together. */
static void test_crowded_collectives(void) {
  int host[4];
  double fwd[1] = {F}, bwd[1] = {B}, l[4], bw[4], slow[4];
  perf_compute_t pc = {.nlayers = 1, .nsizes = 1, .fwd = fwd, .bwd = bwd};
  pc.size[0] = 8;
  perf_cluster_t cl;
  hand_cluster(&cl, 4, 2, 0, 0, host, l, bw, slow);
  cl.own = (perf_link_t){1e-3, 0};
  for (int k = 0; k < PERF_NOPS; k++) cl.op[k] = cl.own;
  cl.crowd = (perf_link_t){5e-3, 0};
  for (int busy = 0; busy < 2; busy++) {
    step_desc_t d;
    step_desc_init(&d, 4);
    for (int r = 0; r < 2; r++) {
      int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
      step_add_allreduce(&d, r, r, 2, 1, ALLREDUCE_RHD, 100, f, THREAD_COMPUTE, 1);
    }
    for (int r = 2; busy && r < 4; r++) /* a long forward each, beside the sum */
      for (int k = 0; k < 20; k++) step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    perf_sim_t sim;
    CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
    double msgs, bytes;
    coll_allreduce_cost(ALLREDUCE_RHD, 2, 1, busy, &msgs, &bytes);
    /* calm: ranks 0 and 1 a core each; busy: four forwards share the two
     * cores (2F), then the sum crowded beside ranks 2 and 3's (which end
     * at 21F: F of their work done in the first 2F) */
    CHECK_NEAR(sim.step_sec, busy ? 2 * F + msgs * 5e-3 : F + msgs * 1e-3, 1e-9);
    step_desc_free(&d);
  }
  step_desc_t d;
  ring_step(&d, 4, 100); /* all four sum: crowded, every message a turn (ring over 4: 24) */
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  double msgs, bytes;
  coll_allreduce_cost(ALLREDUCE_RING, 4, 1, 1, &msgs, &bytes);
  CHECK_NEAR(sim.step_sec, 2 * (F + B) + msgs * 5e-3, 1e-9);
  step_desc_free(&d);
}

/* allreduce_shm on 2 ranks, 10^6 floats: its two barriers (2 empty
 * messages each, 1 us of the transport's own) and the pass over the
 * buffers, one core's sum and copy a value (1 + 0.5 ns) or shared
 * sync's calibrated pass (2 ns). */
static void test_shm_allreduce(void) {
  int host[2];
  double fwd[1] = {F}, bwd[1] = {B}, l[2], bw[2], slow[2];
  perf_compute_t pc = {.nlayers = 1, .nsizes = 1, .fwd = fwd, .bwd = bwd, .sum_sec = 1e-9,
                       .copy_sec = 0.5e-9};
  pc.size[0] = 8;
  perf_cluster_t cl;
  hand_cluster(&cl, 2, 2, 0, 0, host, l, bw, slow);
  cl.own = (perf_link_t){1e-6, 0};
  for (int k = 0; k < PERF_NOPS; k++) cl.op[k] = cl.own;
  step_desc_t d;
  step_desc_init(&d, 2);
  for (int r = 0; r < 2; r++) {
    int f = step_add(&d, (step_task_t){TASK_FORWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    int b = step_add(&d, (step_task_t){TASK_BACKWARD, r, 0, 10, 8, .peer = -1, .after = f});
    step_add_allreduce(&d, r, r, 2, 1, ALLREDUCE_SHM, 1000000, b, THREAD_COMPUTE, 1);
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + B + 4e-6 + 1.5e-3, 1e-9);
  cl.shm_sec = 2e-9;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + B + 4e-6 + 2e-3, 1e-9);
  step_desc_free(&d);
}

/* dp 2 x tp 2 on mlp: rank 0's tp group {0, 1} and its replicas {0, 2}
 * have one lowest rank, and their collectives each their own color, so
 * that the simulator matches rank 0's tp sum with rank 1's (not with rank
 * 2's bucket) and the step is one sum of each bucket: at compute 0, the
 * buckets' bytes over the 1 Gbit/s link (the tp sum and the buckets one
 * after another on rank 0, each an rhd over 2: 2 lat + S / bw). */
static void test_grid_groups_apart(void) {
  char *argv[] = {"train", "--data", "synthetic", "--workers", "4", "--tp", "2", "--batch", "16",
                  "--exchange", "allreduce:rhd", NULL};
  train_config_t cfg;
  CHECK_OK(train_options_parse(11, argv, &cfg));
  model_spec_t spec;
  CHECK_OK(model_spec_builtin("mlp", &spec));
  model_t *m = NULL;
  CHECK_OK(model_build(&spec, (shape_t){1, 28, 28}, 10, 16, &m));
  model_spec_free(&spec);
  step_desc_t d;
  CHECK_OK(strategy_describe(&cfg, m, &d));
  int tp_color = -1, dp_color = -1;
  double sent = 0, lat = 1e-4, bwps = 1.25e8;
  int ncoll = 0;
  for (int i = 0; i < d.ntasks; i++) {
    const step_task_t *t = &d.task[i];
    if (t->rank != 0 || t->kind != TASK_COMM || t->peer >= 0) continue;
    if (t->thread == THREAD_COMPUTE && tp_color < 0) tp_color = t->color;
    else dp_color = t->color;
    sent += t->sent, ncoll++;
  }
  CHECK(tp_color > 0 && dp_color > 0 && tp_color != dp_color);
  int host[4];
  double fwd[4] = {0}, bwd[4] = {0}, l[4], bw[4], slow[4];
  perf_compute_t pc = {.nlayers = m->nlayers, .nsizes = 1, .fwd = fwd, .bwd = bwd};
  pc.size[0] = 16;
  perf_cluster_t cl;
  hand_cluster(&cl, 4, 4, lat, bwps, host, l, bw, slow);
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * ncoll * lat + sent / bwps, 1e-9); /* rhd's two halves a sum */
  step_desc_free(&d);
  model_free(m);
}

/* A pass runs from memory when the rank's own work since it last touched
 * its layer's parameters -- each layer's weights once, its gradients once,
 * an update's range (half of it: it swept the layer somewhere in it) --
 * outgrows its share of the last-level cache. One rank: forward of layers
 * 0 and 1, their backwards, the update (two layers of 100,000 parameters,
 * momentum: 2.4 MB of update). Reuse distances: forward 0, 0.4 MB + 1.2
 * from the step before's update = 1.6 MB; forward 1, 2.0 MB; backward 1,
 * 0.8 MB (its forward just before); backward 0, 0.8 + 0.8 MB. */
static void test_cold_passes(void) {
  int host[1];
  double fwd[2], bwd[2], fc[2], bc[2], l[1], bw[1], slow[1];
  size_t params[2] = {100000, 100000};
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 2, 8, fwd, bwd);
  for (int i = 0; i < 2; i++) fc[i] = 3 * F, bc[i] = 3 * B;
  pc.fwd_cold = fc, pc.bwd_cold = bc, pc.params = params;
  pc.cache_bytes = 3000000, pc.state_floats = 1;
  hand_cluster(&cl, 1, 1, 0, 0, host, l, bw, slow);
  step_desc_t d;
  step_desc_init(&d, 1);
  int f0 = step_add(&d, (step_task_t){TASK_FORWARD, 0, 0, params[0], 8, .peer = -1, .after = -1});
  int f1 = step_add(&d, (step_task_t){TASK_FORWARD, 0, 1, params[1], 8, .peer = -1, .after = f0});
  int b1 = step_add(&d, (step_task_t){TASK_BACKWARD, 0, 1, params[1], 8, .peer = -1, .after = f1});
  int b0 = step_add(&d, (step_task_t){TASK_BACKWARD, 0, 0, params[0], 8, .peer = -1, .after = b1});
  step_add(&d, (step_task_t){TASK_UPDATE, 0, -1, 200000, 8, .peer = -1, .after = b0});
  perf_sim_t sim;
  cl.cache_ranks = 2; /* 1.5 MB: both forwards and backward 0 cold, backward 1 warm */
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 3 * F + 3 * F + B + 3 * B, 1e-12);
  cl.cache_ranks = 1; /* 3 MB: every distance fits */
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * (F + B), 1e-12);
  cl.cache_ranks = 2;
  pc.fwd_cold = pc.bwd_cold = NULL; /* not measured (a graph model): warm */
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2 * (F + B), 1e-12);
  step_desc_free(&d);
  CHECK(perf_cache_bytes() >= 1u << 20 && perf_cache_bytes() <= 64u << 20);
}

/* Each operation's own calibrated cost, where the cluster has one: an rhd
 * allreduce takes the rhd fit's alpha (its messages as its formula counts
 * them), the ring's step stays free of it; a message takes the
 * ping-pong's; shared sync's update its cost a value across cores; and
 * --trace a slice a task. */
static void test_calibrated_operations(void) {
  int P = 4, host[4];
  double fwd[1], bwd[1], l[4], bw[4], slow[4];
  perf_compute_t pc;
  perf_cluster_t cl;
  hand_compute(&pc, 1, 8, fwd, bwd);
  hand_cluster(&cl, P, 4, 0, 0, host, l, bw, slow);
  cl.op[PERF_OP_RHD] = (perf_link_t){1e-3, 1e30};
  step_desc_t d;
  step_desc_init(&d, P);
  for (int r = 0; r < P; r++) {
    int b = step_add(&d, (step_task_t){TASK_BACKWARD, r, 0, 10, 8, .peer = -1, .after = -1});
    step_add_allreduce(&d, r, r, P, 1, ALLREDUCE_RHD, 1000, b, THREAD_COMPUTE, 1);
  }
  perf_sim_t sim;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  double m, b;
  coll_allreduce_cost(ALLREDUCE_RHD, P, 1, 0, &m, &b);
  CHECK_NEAR(sim.step_sec, B + m * 1e-3, 1e-9);
  step_desc_free(&d);
  ring_step(&d, P, 1000);
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + B, 1e-9); /* the ring's own fit is still free */
  /* a traced slice on each of the ring step's four tasks of a rank */
  cl.trace_sec = 1e-4;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, F + B + 4e-4, 1e-9);
  cl.trace_sec = 0;
  /* shared sync's update of 10 values: 4 ranks' blocks at 1e-6 s a value */
  cl.shm_sec = 1e-6;
  CHECK_OK(perf_simulate(&d, &pc, &cl, 1, &sim));
  CHECK_NEAR(sim.step_sec, F + B + 10 * 4 * 1e-6, 1e-9);
  step_desc_free(&d);
  /* one message: the ping-pong's alpha, not the ring's */
  hand_cluster(&cl, 2, 2, 0, 0, host, l, bw, slow);
  cl.op[PERF_OP_P2P] = (perf_link_t){2e-3, 1e30};
  cl.own = cl.op[PERF_OP_RING] = (perf_link_t){7e-3, 1e30};
  step_desc_init(&d, 2);
  step_add(&d, (step_task_t){TASK_COMM, 0, -1, .pattern = "send", .peer = 1, .group = 2,
                             .sent = 1000, .after = -1});
  step_add(&d, (step_task_t){TASK_COMM, 1, -1, .pattern = "recv", .peer = 0, .group = 2,
                             .received = 1000, .after = -1});
  CHECK_OK(perf_simulate(&d, &pc, &cl, 0, &sim));
  CHECK_NEAR(sim.step_sec, 2e-3, 1e-9);
  step_desc_free(&d);
}

static void test_profile_reader(void) {
  perf_profile_t p;
  const char *good = "{\"format\":\"dtrain-profile 1\",\"cpu\":\"c\",\"gemm\":\"g\","
                     "\"local\":{\"alpha\":1e-6,\"beta\":1e9},"
                     "\"local_oversubscribed\":{\"alpha\":2e-6,\"beta\":1e9},"
                     "\"mpi\":{\"alpha\":3e-6,\"beta\":2e9},\"mpi_measured\":1}";
  CHECK_OK(perf_profile_parse(good, strlen(good), "p", &p));
  CHECK(p.calibrated && p.mpi_measured && p.mpi.alpha == 3e-6 && p.mpi.beta == 2e9);
  const char *no_mpi = "{\"format\":\"dtrain-profile 1\",\"cpu\":\"c\",\"gemm\":\"g\","
                       "\"local\":{\"alpha\":1e-6,\"beta\":1e9},"
                       "\"local_oversubscribed\":{\"alpha\":2e-6,\"beta\":1e9}}";
  CHECK_FAILS_WITH(perf_profile_parse(no_mpi, strlen(no_mpi), "p", &p), "key \"mpi\" is missing");
  const char *neg = "{\"format\":\"dtrain-profile 1\",\"local\":{\"alpha\":-1,\"beta\":1}}";
  CHECK_FAILS_WITH(perf_profile_parse(neg, strlen(neg), "p", &p), "key \"local.alpha\"");
  CHECK_FAILS_WITH(perf_profile_parse(good, 40, "p", &p), "does not end");
  /* the GEMM model: signed coefficients, then the fit's points and error */
  char with_fit[512];
  snprintf(with_fit, sizeof with_fit, "%.*s,\"gemm_fit\":{\"c0\":-20.5,\"c1\":0.8,\"c2\":0.7,"
           "\"c3\":0.75,\"points\":64,\"max_error\":1.5}}", (int)strlen(good) - 1, good);
  CHECK_OK(perf_profile_parse(with_fit, strlen(with_fit), "p", &p));
  CHECK(p.gemm_fit.fitted && p.gemm_fit.c[0] == -20.5 && p.gemm_fit.c[3] == 0.75 && p.gemm_fit.points == 64);
  snprintf(with_fit, sizeof with_fit, "%.*s,\"gemm_fit\":{\"c0\":-20.5,\"c1\":0.8,\"c2\":0.7,"
           "\"points\":64,\"max_error\":1.5}}", (int)strlen(good) - 1, good);
  CHECK_FAILS_WITH(perf_profile_parse(with_fit, strlen(with_fit), "p", &p), "needs c0, c1, c2, c3");
  snprintf(with_fit, sizeof with_fit, "%.*s,\"gemm_fit\":{\"c9\":1}}", (int)strlen(good) - 1, good);
  CHECK_FAILS_WITH(perf_profile_parse(with_fit, strlen(with_fit), "p", &p), "unknown key \"gemm_fit.c9\"");
  /* each operation's fit, the shared-memory exchange and a traced slice:
   * written, read back the same */
  perf_profile_t w;
  perf_profile_default(&w);
  snprintf(w.cpu, sizeof w.cpu, "c"), snprintf(w.gemm, sizeof w.gemm, "g");
  for (int i = 0; i < PERF_NOPS; i++) w.local_op[i] = (perf_link_t){1e-6 * (i + 1), 1e9 * (i + 1)};
  w.local_ops = (1u << PERF_NOPS) - 1, w.local_op_ranks = 4;
  w.mpi_op[PERF_OP_P2P] = (perf_link_t){3e-6, 2e9};
  w.mpi_ops = 1u << PERF_OP_P2P, w.mpi_op_ranks = 2;
  w.shm_sec = 2.5e-10, w.shm_ranks = 4, w.trace_slice_sec = 1e-7;
  char text[2048];
  FILE *f = fmemopen(text, sizeof text, "w");
  CHECK_OK(perf_profile_write(&w, f));
  fclose(f);
  CHECK_OK(perf_profile_parse(text, strlen(text), "p", &p));
  CHECK(p.local_ops == w.local_ops && p.local_op_ranks == 4 && p.mpi_ops == w.mpi_ops);
  CHECK(p.local_op[PERF_OP_TREE].alpha == 3e-6 && p.local_op[PERF_OP_P2P].beta == 7e9);
  CHECK(p.mpi_op[PERF_OP_P2P].alpha == 3e-6 && p.shm_sec == 2.5e-10 && p.shm_ranks == 4);
  CHECK(p.trace_slice_sec == 1e-7);
  const char *bad[][2] = {
    {",\"local_ops\":{\"ranks\":2,\"ring2\":{\"alpha\":1,\"beta\":1}}}", "unknown key \"local_ops.ring2\""},
    {",\"local_ops\":{\"ranks\":2,\"p2p\":{\"alpha\":1,\"beta\":1},\"p2p\":{\"alpha\":1,\"beta\":1}}}", "\"local_ops.p2p\" appears twice"},
    {",\"mpi_ops\":{\"rhd\":{\"alpha\":1,\"beta\":1}}}", "key \"mpi_ops.ranks\" is missing"},
    {",\"local_ops\":{\"ranks\":1.5}}", "key \"local_ops.ranks\" is 1.5"},
    {",\"local_ops\":{\"ranks\":2,\"tree\":{\"alpha\":1}}}", "\"local_ops.tree\" needs both"},
    {",\"shm_sec\":3}", "key \"shm_sec\" is 3 s"},
    {",\"shm_ranks\":0}", "key \"shm_ranks\" is 0"},
    {",\"shm_sec\":1e-9}", "key \"shm_ranks\" is missing"},
    {",\"trace_slice_sec\":-1}", "key \"trace_slice_sec\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char t[512];
    snprintf(t, sizeof t, "%.*s%s", (int)strlen(good) - 1, good, bad[i][0]);
    CHECK_FAILS_WITH(perf_profile_parse(t, strlen(t), "p", &p), bad[i][1]);
  }
}

/* The GEMM model's least squares gives back the coefficients of times
 * made by the model itself, and its prediction of a dense layer's passes
 * is the sum of its GEMMs' (forward: n x units x in; backward: the
 * weights' units x in x n and the input's n x in x units). */
static void test_gemm_fit(void) {
  perf_gemm_fit_t truth = {{-21.0, 0.9, 0.8, 0.95}, 0, 0, 1}, got;
  double m[27], n[27], k[27], t[27];
  int np = 0;
  for (int a = 8; a <= 512; a *= 8)
    for (int b = 8; b <= 512; b *= 8)
      for (int c = 8; c <= 512; c *= 8, np++)
        m[np] = a, n[np] = b, k[np] = c, t[np] = perf_gemm_sec(&truth, a, b, c);
  CHECK_OK(perf_gemm_fit(m, n, k, t, np, &got));
  for (int i = 0; i < 4; i++) CHECK(fabs(got.c[i] - truth.c[i]) < 1e-9);
  CHECK(got.points == 27 && got.max_error < 1e-9);
  CHECK_FAILS_WITH(perf_gemm_fit(m, n, k, t, 3, &got), "do not determine");
  t[5] = 0;
  CHECK_FAILS_WITH(perf_gemm_fit(m, n, k, t, np, &got), "point 5");
  model_spec_t spec;
  model_t *mod;
  CHECK_OK(model_spec_builtin("mlp", &spec));
  CHECK_OK(model_build(&spec, (shape_t){1, 28, 28}, 10, 8, &mod));
  double fwd = perf_gemm_layer_sec(&truth, mod, 0, 8, 0), bwd = perf_gemm_layer_sec(&truth, mod, 0, 8, 1);
  CHECK(fabs(fwd - perf_gemm_sec(&truth, 8, 512, 784)) < 1e-15);
  CHECK(fabs(bwd - perf_gemm_sec(&truth, 512, 784, 8)) < 1e-15); /* the first layer: no input gradient */
  int second = -1, other = -1; /* the 512 -> 256 dense layer; a layer that is not a GEMM */
  for (int i = 1; i < mod->nlayers; i++) {
    if (mod->layers[i].spec.kind == LAYER_DENSE && second < 0) second = i;
    if (mod->layers[i].spec.kind != LAYER_DENSE && other < 0) other = i;
  }
  CHECK(second > 0);
  double bwd2 = perf_gemm_layer_sec(&truth, mod, second, 8, 1);
  CHECK(fabs(bwd2 - perf_gemm_sec(&truth, 256, 512, 8) - perf_gemm_sec(&truth, 8, 512, 256)) < 1e-15);
  CHECK(other < 0 || perf_gemm_layer_sec(&truth, mod, other, 8, 0) == -1);
  model_free(mod);
  model_spec_free(&spec);
}

/* The compressed exchange's own CPU, measured by running it on two local
 * ranks: at least its encoding of every value (the passes measured one at
 * a time; not for top-k, whose selection's cost depends on the values it
 * meets), at most what a run's exchange could cost at all (10 us a value);
 * nothing for no codec. */
static void test_codec_exchange_cpu(void) {
  enum { N = 1 << 16 };
  compress_matrix_t mats[2] = {{0, 256, 192}, {256 * 192, 1, N - 256 * 192}};
  const char *codecs[] = {"fp16", "int8", "topk:0.01", "powersgd:2"};
  for (int i = 0; i < 4; i++) {
    compress_config_t cc = {.algo = ALLREDUCE_RING, .error_feedback = i == 2};
    CHECK_OK(codec_parse(codecs[i], &cc.codec));
    perf_compute_t pc = {0};
    CHECK_OK(perf_codec_measure(&cc.codec, cc.error_feedback, N, mats, 2, &pc));
    double sec = 0;
    CHECK_OK(perf_codec_exchange_cpu(&cc, N, mats, 2, &sec));
    printf("  %-10s exchange %.3g ns a value, its encoding alone %.3g\n", codecs[i], sec * 1e9,
           (pc.encode_sec + pc.factor_sec) * 1e9);
    CHECK(sec > 0 && sec < 1e-5);
    if (i != 2) CHECK(sec >= pc.encode_sec + pc.factor_sec);
  }
  compress_config_t none = {.algo = ALLREDUCE_RING};
  double sec = 1;
  CHECK_OK(perf_codec_exchange_cpu(&none, N, mats, 2, &sec));
  CHECK(sec == 0);
}

int main(void) {
  RUN(test_ring_alpha_beta);
  RUN(test_codec_exchange_cpu);
  RUN(test_eager_message);
  RUN(test_polling_waits);
  RUN(test_mpi_cluster);
  RUN(test_periodic_share);
  RUN(test_shared_host_link);
  RUN(test_codec_work);
  RUN(test_tree_collectives);
  RUN(test_server_exchanges);
  RUN(test_pulls_from_servers);
  RUN(test_two_servers_steady);
  RUN(test_neighbour_exchanges);
  RUN(test_pipeline_bubbles);
  RUN(test_pipeline_sends_overlap);
  RUN(test_pipeline_streams);
  RUN(test_crowded_collectives);
  RUN(test_shm_allreduce);
  RUN(test_cold_passes);
  RUN(test_grid_groups_apart);
  RUN(test_calibrated_operations);
  RUN(test_profile_reader);
  RUN(test_gemm_fit);
  TEST_MAIN_END();
}
