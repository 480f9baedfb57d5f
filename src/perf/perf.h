/* perf: the performance model (issue 33). A step is the strategy's own
 * description (describe_step, strategy/step.h), timed by a simulator in
 * FlexFlow's manner: compute tasks on each rank's cores, messages on each
 * rank's links, collectives when their ranks have all arrived, run in the
 * order they become ready. What a task costs comes from measurements on
 * this machine (compute.c: each layer's forward and backward at the sizes
 * the step runs; profile.c: the transport's alpha and beta) and from the
 * network a run is given (cluster.c: --net, --straggler as train takes
 * them). One concept per file: compute, profile, cluster, simulate,
 * memory, predict. */
#ifndef DTRAIN_PERF_PERF_H
#define DTRAIN_PERF_PERF_H

#include <stdio.h>

#include "dtrain/optim.h"
#include "dtrain/train.h"
#include "strategy/step.h"

struct perf_cluster_file; /* project.h: a cluster file (plan --cluster) */

/* ---- compute.c: what a layer and an update cost on this machine -------- */

#define PERF_MAX_SIZES 32 /* distinct sample counts measured (micro-batch sizes) */

typedef struct {
  int nlayers, nsizes;
  int size[PERF_MAX_SIZES];  /* the sample counts measured, ascending */
  double *fwd, *bwd;         /* [nsizes * nlayers] seconds a pass of one layer */
  double *fwd_cold, *bwd_cold; /* the same from memory: the caches emptied before the pass, the
                              * backward adding to the gradients (NULL: not measured, a graph) */
  size_t cache_bytes;        /* the last-level cache the passes were timed with */
  int state_floats;          /* the optimizer's state, floats a parameter (0 to 2) */
  size_t *params;            /* [nlayers] each layer's parameters in the model measured */
  double update_sec;         /* the optimizer's seconds per parameter */
  double sum_sec, copy_sec;  /* seconds per float: summing one more array, copying one */
  /* --compress, measured here per value of the gradient (perf_codec_measure):
   * the codec's encode and decode_add, error feedback's two passes
   * (compensate, update; 0 without feedback), and PowerSGD's products and
   * orthogonalization over the model's matrices; which exchange runs them */
  int codec_family;          /* PERF_CODEC_* */
  double encode_sec, decode_sec, feedback_sec, factor_sec;
  double codec_scale;        /* the exchange's measured CPU over those passes' (0: 1) */
} perf_compute_t;

enum { PERF_CODEC_NONE, PERF_CODEC_DENSE, PERF_CODEC_SPARSE, PERF_CODEC_FACTORS };

/* Times every layer of m (built for at least the largest size) forward and
 * backward on each of the `nsizes` sample counts, the optimizer `oc` per
 * parameter, and summing and copying per float: the least of a few runs
 * after a warm-up. The model's parameters and buffers are left as found. */
int perf_compute_measure(model_t *m, const optim_config_t *oc, const int *sizes, int nsizes,
                         perf_compute_t *out);
/* The codec's costs per value into p (codec_family, encode_sec, ...):
 * codec_encode and codec_decode_add on n values of a gradient-like
 * buffer, error feedback's compensate and update where feedback is on;
 * for powersgd, its products (P = M Q, Q = M^T P, M = P Q^T) and the
 * orthogonalization of P, timed on each of the model's `nmats` matrices. */
int perf_codec_measure(const codec_spec_t *spec, int feedback, size_t n,
                       const compress_matrix_t *mats, int nmats, perf_compute_t *p);
/* One rank's seconds of a core for the codec's part of an exchange of
 * `coded` values among P ranks, as compress/exchange.c runs it: dense
 * codecs encode every block and then the block it owns summed, and decode
 * the P contributions to its block and the P sums (and its own encoding
 * for the memory); sparse ones encode once, decode each rank's message,
 * and pack, clear and unpack the buffer; powersgd its products. */
double perf_codec_work(const perf_compute_t *p, double coded, int P);
/* codec_exchange.c: the compressed exchange's own CPU seconds per value of
 * a buffer of n (at most 2^20) values, compressor_allreduce run by two
 * local ranks (0 for no codec). */
int perf_codec_exchange_cpu(const compress_config_t *cc, size_t n, const compress_matrix_t *mats,
                            int nmats, double *sec_per_value);
/* The codec's costs into pc: its passes (perf_codec_measure; pc->copy_sec,
 * which the sparse ones use, is the caller's), and codec_scale, the
 * exchange's own CPU over perf_codec_work's per value at P = 2. */
int perf_codec_calibrate(const compress_config_t *cc, size_t n, const compress_matrix_t *mats,
                         int nmats, perf_compute_t *pc);
void perf_compute_free(perf_compute_t *p);
/* Layer i's seconds for `samples` (backward or forward): the measured size,
 * or linear between the two nearest (proportional past the ends). A task
 * of a layer with fewer parameters than the one measured (a tensor-parallel
 * rank's block) takes its share of the time (simulate.c). */
double perf_layer_sec(const perf_compute_t *p, int i, int samples, int backward);
/* The same with cold: the pass from memory (fwd_cold, bwd_cold) where
 * measured, for a rank whose working set outgrows its share of the cache. */
double perf_layer_sec_at(const perf_compute_t *p, int i, int samples, int backward, int cold);
/* This machine's last-level cache in bytes (sysfs; at most 64 MiB). */
size_t perf_cache_bytes(void);

/* ---- gemm_fit.c: Yan et al.'s GEMM model, ln t = c0 + c1 ln m + c2 ln n +
 * c3 ln k, fitted to kern_gemm timed here -------------------------------- */

typedef struct {
  double c[4];
  int points;                /* shapes timed */
  double max_error;          /* the fit's largest relative error over them */
  int fitted;
} perf_gemm_fit_t;

/* Least squares over npoints timed GEMMs (m x k by k x n, sec each). */
int perf_gemm_fit(const double *m, const double *n, const double *k, const double *sec, int npoints,
                  perf_gemm_fit_t *out);
/* kern_gemm timed over m, n, k in {8, 32, 128, 512, 2048} (to 512 with
 * quick), fitted. */
int perf_gemm_fit_measure(int quick, perf_gemm_fit_t *out);
double perf_gemm_sec(const perf_gemm_fit_t *f, double m, double n, double k);
/* Layer i's pass on `samples` from its GEMMs (dense, linear, conv2d:
 * forward one, backward two, the first layer's input gradient skipped);
 * -1 for a layer that is not a GEMM or without a fit. */
double perf_gemm_layer_sec(const perf_gemm_fit_t *f, const model_t *m, int i, int samples,
                           int backward);
/* p's GEMM layers' times replaced by the fit's (--compute-model gemm). */
void perf_gemm_apply(const perf_gemm_fit_t *f, const model_t *m, perf_compute_t *p);

/* ---- profile.c: the transport's own costs, calibrated or assumed ------- */

typedef struct {
  double alpha;              /* seconds a message costs the transport itself */
  double beta;               /* bytes per second it moves (copies, sums) */
} perf_link_t;

/* The operations calibrated one by one, each fitted to its own formula
 * (calibrate.c): the three allreduces, the ring's halves, the binomial
 * broadcast, and one message there and back (ping-pong: its alpha is the
 * cost of one message). */
typedef enum {
  PERF_OP_RING, PERF_OP_RHD, PERF_OP_TREE, PERF_OP_ALLGATHER, PERF_OP_REDUCE_SCATTER,
  PERF_OP_BROADCAST, PERF_OP_P2P, PERF_NOPS
} perf_op_t;
extern const char *const perf_op_name[PERF_NOPS];

typedef struct {
  perf_link_t local, local_oversubscribed, mpi;   /* the ring allreduce's fit: any operation's */
  perf_link_t local_op[PERF_NOPS], mpi_op[PERF_NOPS]; /* each operation's own fit ... */
  unsigned local_ops, mpi_ops;                    /* ... where bit op is set (measured) */
  int local_op_ranks, mpi_op_ranks;               /* the ranks they were measured over */
  double shm_sec;            /* the shared-memory exchange: seconds a value, its block summed
                              * from every rank and pushed to every rank, across cores (0: not
                              * measured: one core's sum and copy stand in) */
  int shm_ranks;             /* the threads it was measured with */
  double trace_slice_sec;    /* one traced slice (--trace); 0: not measured */
  int calibrated;            /* measured here (a profile), or the transports' own estimates */
  int mpi_measured;          /* the mpi row measured under mpirun, or its estimate */
  perf_link_t mpi_oversubscribed; /* mpi with more ranks than cores: an estimate only (a rank
                                   * waits for its partner's turn on a core at every hop) */
  char cpu[128], gemm[128];  /* what the profile was taken with */
  perf_gemm_fit_t gemm_fit;  /* the GEMM model (optional in a profile) */
  int use_gemm_fit;          /* plan --compute-model gemm: GEMM layers costed by the fit */
  int load_given;            /* plan --load: the other processes' threads assumed ... */
  double load;               /* ... instead of /proc/loadavg's (not in the file) */
} perf_profile_t;

/* The transports' own estimates (local.c's link_estimate) where no
 * profile is given. */
void perf_profile_default(perf_profile_t *p);
/* Reads a calibration profile (JSON, perf_profile_write's) from the text
 * [s, s + len) read from `source`: a malformed one is one line naming the
 * key or the offset. */
int perf_profile_parse(const char *s, size_t len, const char *source, perf_profile_t *p);
/* perf_profile_parse of a file; then, unless force, a profile taken on
 * another CPU or with other kernels is refused, naming both. */
int perf_profile_load(const char *path, int force, perf_profile_t *p);
/* The profile as JSON (the format string first, then the CPU, kernels,
 * library versions, then each transport's alpha and beta). */
int perf_profile_write(const perf_profile_t *p, FILE *out);
/* calibrate.c: the transports' alpha and beta measured here (the ring
 * allreduce from 4 KiB to 64 MiB, to 1 MiB with quick; a fit line each on
 * log): local over 2 ranks and over twice the cores; then each operation
 * (perf_op_t) on its own over a rank a core (2 to 8), the shared-memory
 * exchange's cost a value and a traced slice's. The mpi rows are left at
 * their estimate: perf_calibrate_mpi measures the ring and each operation
 * under mpirun into out (is_root: this process is rank 0, which holds
 * the fits). */
int perf_calibrate(int quick, perf_profile_t *out, FILE *log);
int perf_calibrate_mpi(int *argc, char ***argv, int quick, perf_profile_t *out, int *is_root,
                       FILE *log);
/* The median of v[0..n) (v is sorted in place). */
double perf_median(double *v, int n);
/* calibrate_shm.c: shared sync's sum and push (strategy/dp/shared_sync.c)
 * over `ranks` threads, each a core: seconds a value of the arena. */
int perf_calibrate_shm(int ranks, int quick, double *sec_per_value);
/* This machine: the CPU's model name and the kernels in use. */
void perf_machine(char *cpu, size_t cpu_cap, char *gemm, size_t gemm_cap);

/* ---- cluster.c: the ranks, their links and speeds --------------------- */

typedef struct {
  int nranks, cores;
  int *host;                 /* each rank's host (0 with one) */
  double *latency, *bandwidth;  /* each rank's link to the other hosts (bandwidth 0: unlimited) */
  double intra_latency, intra_bandwidth; /* between two ranks of one host, with hosts > 1 */
  int multihost, shared_link;
  double *slowdown;          /* compute slow-down per rank (--straggler) */
  double background;         /* threads of other processes running on the cores (measured
                              * when the plan is made: a shared machine) */
  perf_link_t own;           /* the transport's own cost, added to every message ... */
  perf_link_t op[PERF_NOPS]; /* ... each operation's, where calibrated (else own) */
  perf_link_t crowd;         /* a message's own cost while the threads at work outnumber the
                              * cores (local's oversubscribed calibration; zero: own and op) */
  double shm_sec;            /* shared sync's sum and push a value (0: one core's sum, copy) */
  double trace_sec;          /* a traced slice a task (--trace; else 0) */
  int polling;               /* a thread waiting on the transport polls it (mpi: Open MPI's
                              * progress loop), taking a share of the cores as compute does */
  int cache_ranks;           /* the most ranks that share one last-level cache (a machine's) */
} perf_cluster_t;

/* The cluster a `dtrain train` run with cfg would see on this machine:
 * cfg->net's hosts and links, --straggler, this machine's cores and the
 * load other processes put on them now (perf_background_load), and the
 * transport's own costs from the profile. */
int perf_cluster_from_config(const train_config_t *cfg, int nranks, const perf_profile_t *prof,
                             perf_cluster_t *out);
/* The same from a cluster file (cluster_file.c): its first nranks ranks'
 * hosts, links (--net's latency or bandwidth in place of the file's link
 * between hosts) and speeds (a slow-down of 1 / speed, with --straggler's),
 * a core each, the transport's mpi costs. Refused: more ranks than the
 * file has, a projected device or a speed above 1 (the layers are
 * measured here and the simulator slows a rank, it cannot speed one up). */
int perf_cluster_from_file(const struct perf_cluster_file *f, const train_config_t *cfg,
                           int nranks, const perf_profile_t *prof, perf_cluster_t *out);
void perf_cluster_free(perf_cluster_t *c);
/* The transport's costs: `any` for every operation, op[i] in its place
 * where bit i of measured is set. */
void perf_cluster_own(perf_cluster_t *c, const perf_link_t *any, const perf_link_t *op,
                      unsigned measured);
/* The other processes' threads running on this machine's cores: the
 * kernel's one-minute load average less this process (a moment's spin
 * measured as much, but a run lasts longer than a moment), capped. A
 * thread of a run then gets cores / (ranks running + this) of a core. */
double perf_background_load(int cores);

/* ---- simulate.c: the step as a task graph, run in readiness order ------ */

typedef struct {
  double step_sec;           /* the last task's end */
  double compute_sec;        /* rank 0's compute (layers and updates, its slow-down included) */
  double comm_sec;           /* rank 0's communication tasks' durations */
  double exposed_sec;        /* of them, those on rank 0's compute thread (its waits for a
                              * partner included): what the step cannot hide */
} perf_sim_t;

/* Simulates one steady-state step of d. shared_update: the update reads
 * every rank's gradient block and writes every rank's parameters (shared
 * memory's synchronous step). */
int perf_simulate(const step_desc_t *d, const perf_compute_t *pc, const perf_cluster_t *cl,
                  int shared_update, perf_sim_t *out);

typedef struct {
  int shared_update;         /* as perf_simulate's */
  /* > 0: a task that runs every E steps is charged the runs an epoch of
   * this many steps holds (floor(steps / E), as the strategy counts them),
   * spread over its steps; 0: 1 / E a step (an endless run's mean) */
  long long epoch_steps;
  /* > 1: the step repeated this many times, each rank's tasks after its
   * own of the step before and nothing else joining them (the parameter
   * servers' async and SSP schedules, where no rank waits for the others'
   * step): the step is the mean of the second half's, once the ranks have
   * fallen out of step with each other, as they do in a run */
  int steady_steps;
} perf_sim_options_t;

#define PERF_STEADY_STEPS 8 /* predict.c's steady_steps for the async schedules */
int perf_simulate_with(const step_desc_t *d, const perf_compute_t *pc, const perf_cluster_t *cl,
                       const perf_sim_options_t *o, perf_sim_t *out);

/* ---- memory.c: the memory a rank holds --------------------------------- */

/* Bytes rank 0 holds for training (m: its model, a tensor-parallel rank's
 * blocks): parameters, gradients, buffers, the optimizer's state (ZeRO-1's
 * share), the compressor's arrays, its activations for the batch, its
 * batch's inputs and the epoch's order of the ntrain samples. */
double perf_memory_bytes(const train_config_t *cfg, const model_t *m, size_t ntrain);
/* The compressor's arrays of the gradient's length (cc's codec over
 * nparams values): the state it carries and its two work arrays; 0
 * without a codec. */
double perf_codec_memory_bytes(const compress_config_t *cc, size_t nparams);
/* A pipeline rank's bytes: the whole model's parameters, its chunks'
 * (own[layer] set: the layers it runs) gradients, optimizer state, weight
 * versions and activation slots of `micro` samples, and the model's own
 * activation arena. */
double perf_pipeline_memory_bytes(const train_config_t *cfg, const model_t *m,
                                  const unsigned char *own, int micro, size_t ntrain);

/* ---- predict.c: one configuration's step, predicted ------------------- */

/* One configuration's figures, as a run's metrics carry them (rank 0's
 * bytes a step, the step's and an epoch's seconds, samples a second over
 * every replica) and the model's: memory a rank, rank 0's compute and
 * communication, the machine's other load. */
typedef struct {
  const char *strategy;      /* the descriptor's name (static) */
  int ranks, exact, emulated, calibrated;
  double step_sec, samples_per_sec, epoch_sec;
  int64_t steps_per_epoch;
  double bytes_sent, bytes_received, memory_bytes, compute_sec, comm_sec, background;
  /* asynchronous parameter servers (async, ssp:S): the step is an
   * expectation; Yan et al.'s (2015) bounds beside it -- best, a worker's
   * communication hidden behind its compute (max), worst, none of it
   * (sum) -- and the expected staleness of a gradient (updates applied
   * since the parameters it was computed on, workers at an equal pace) */
  /* the step split (search --explain): compute + exposed + bubble + waiting = step.
   * bubble: a pipeline's, Megatron's (P - 1)/(V M) of the compute (at most
   * what the step has beyond compute); exposed: the communication not
   * hidden, at most the rest; waiting: what remains */
  double exposed_sec, bubble_sec, waiting_sec;
  int asynchronous;
  double step_best_sec, step_worst_sec, staleness_expected;
  /* a pipeline without a flush (PipeDream, 2BW, DDG): the step is the
   * steady one, and a stage's gradient is computed on weights older than
   * those it updates -- other numerics than a flushed pipeline's */
  int stale_weights;
} perf_plan_t;

/* What predictions of one model on one data set share (the search's):
 * the layers' times at the sizes measured so far, and the data set's
 * shapes (read once: loading it is most of a prediction's time). */
typedef struct {
  perf_compute_t compute;
  const struct perf_cluster_file *cluster; /* the ranks' hosts, links and speeds from a
                                            * cluster file (NULL: this machine's, from --net) */
  int have_data;
  char data[256];
  int seq_len;               /* text data: its windows' length (the shapes depend on it) */
  int c, h, w, nclasses;
  size_t ntrain;
} perf_cache_t;
void perf_cache_free(perf_cache_t *c);

/* `dtrain plan --predict`: the step `dtrain train` with cfg would run
 * (describe_step), simulated with compute measured here and the network
 * of cfg. prof: the transport's costs (perf_profile_default without a
 * profile). cache (or NULL): what earlier predictions of the same model,
 * optimizer and data set measured, used where it covers this step and
 * grown otherwise. */
int perf_predict(train_config_t *cfg, const perf_profile_t *prof, perf_cache_t *cache,
                 perf_plan_t *out);
/* The plan as one JSON object (no newline): {"event":"plan","step_sec",
 * "samples_per_sec","epoch_sec","bytes_sent_per_step","memory_bytes",...}. */
int perf_plan_json(const perf_plan_t *p, FILE *out);

/* PipeDream's partition of cfg's model over `machines` (partition.c, with
 * stage replication): each layer's forward and backward at the batch
 * (cache's times, measured where missing), its output and parameters as
 * bytes, cfg->net's bandwidth between machines. */
struct partition_s;
int perf_pipedream(train_config_t *cfg, perf_cache_t *cache, int machines, struct partition_s *out);

/* ---- search.c: the strategies for a model and workers, ranked -------- */

typedef struct {
  double memory_per_rank;    /* bytes a rank may hold (0: no limit) ... */
  const char *memory_from;   /* ... and where that came from, for the refusal (NULL:
                              * --memory-per-rank) */
  const struct perf_cluster_file *cluster; /* the ranks' hosts, links and speeds (NULL: this
                                            * machine's, from --net) */
  int explain;               /* the best few candidates' steps split into compute, exposed
                              * communication and the rest (a pipeline's bubble, or waiting) */
  FILE *json;                /* each row as a JSON line too (NULL: none) */
} perf_search_opts_t;

/* Each candidate of the search's table appended to the train options
 * argv[0..argc) (argv[0] is not read), predicted; a table ranked by
 * samples a second on out. Fails, after the table, when no candidate
 * could be predicted or none fits the memory per rank. */
int perf_search(int argc, char **argv, const perf_profile_t *prof, const perf_search_opts_t *o,
                FILE *out);

#endif
