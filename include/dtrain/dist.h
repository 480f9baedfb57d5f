/* dist: the training run and its strategies. The taxonomy is the
 * configuration: each axis is a field of train_config_t, presets fill the
 * axes in, and train_config_check refuses combinations that do not exist.
 * A strategy is a small file (data_parallel.c, ...) that runs the epoch
 * loop of one rank with the worker helpers below, speaking comm_t and
 * coll only. */
#ifndef DTRAIN_DIST_H
#define DTRAIN_DIST_H

#include "dtrain/coll.h"
#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"

typedef enum { COMM_LOCAL, COMM_MPI } comm_kind_t;
typedef enum { OPTIMIZATION_CENTRAL, OPTIMIZATION_DECENTRAL } optimization_t;
typedef enum { SCHEDULE_SYNC, SCHEDULE_ASYNC, SCHEDULE_SSP, SCHEDULE_VALUE, SCHEDULE_BACKUP } schedule_t;
typedef enum { EXCHANGE_ALLREDUCE, EXCHANGE_PS, EXCHANGE_MASTER, EXCHANGE_NEIGHBORS,
               EXCHANGE_GOSSIP, EXCHANGE_TREE, EXCHANGE_SHARED } exchange_t;

typedef struct {
  /* what to train */
  char model[256], data[256];
  int epochs, batch;            /* batch per worker */
  uint64_t seed;
  int threads;                  /* BLAS threads per worker */
  /* optimizer and schedule */
  optim_config_t optim;
  double lr;
  lr_kind_t lr_schedule;
  double warmup_epochs, lr_step_epochs, lr_gamma;
  /* taxonomy axes */
  char preset[32];
  int workers;
  comm_kind_t comm;
  optimization_t optimization;
  schedule_t schedule;
  double schedule_param;        /* ssp:S, value:V, backup:B */
  exchange_t exchange;
  allreduce_algo_t algo;        /* for EXCHANGE_ALLREDUCE */
  int ps_servers;               /* ps:K (0 = ps:n, co-located) */
  double gossip_p;              /* gossip:p */
  int tree_fanout;              /* tree:F */
  size_t bucket_bytes;          /* gradient bucket size (0 = one bucket per layer) */
  int overlap;                  /* start bucket allreduces during backprop */
  coll_order_t comm_order;      /* FIFO, or PRIORITY: the next forward's layers first */
  size_t partition_bytes;       /* PRIORITY: buckets go out in parts of at most this */
  int shard_optimizer;          /* ZeRO-1: reduce-scatter, step this rank's blocks, allgather */
  int balance;                  /* split each synchronous step's batch by measured speed */
  /* parameter servers (issue: centralized optimization) */
  int fetch_every, push_every;  /* Downpour: pull / push every n steps [1, 1] */
  int staleness_lr;             /* divide the step by the staleness */
  double dc_asgd;               /* delay compensation lambda (0 = off) */
  int kill_rank;                /* --kill rank=R,at-step=S (local; -1 = none) */
  int64_t kill_step;
  char checkpoint_dir[256];     /* one file per shard + manifest */
  /* decentralized optimization */
  int tau;                      /* local steps between merges [1] */
  double alpha, beta, rho;      /* EASGD elastic coefficients (0 = the method's default) */
  int tau_up, tau_down;         /* TreeEASGD exchange periods */
  double neighbor_weight;       /* D-PSGD: weight of each ring neighbour [1/3] */
  /* emulated network (local) */
  comm_net_t net;
  double net_latency, net_bandwidth;
  int straggler_rank;           /* -1 = none */
  double straggler_slowdown;
  /* files and output */
  char metrics[256], checkpoint[256], resume[256];
  int progress;                 /* live progress line on stderr */
  int64_t max_steps;            /* stop after this many steps in total (0 = no limit; for tests and benches) */
  double max_loss;              /* a mean train or test loss above this is divergence [1e4] */
} train_config_t;

void train_config_default(train_config_t *cfg);
/* Refuses invalid values and combinations of axes with one line naming the
 * options and what exists. */
int train_config_check(const train_config_t *cfg);
/* The outputs (--checkpoint, --metrics) may be written: new, or dtrain's
 * own earlier output of that kind; distinct from each other and from
 * --resume where writing would destroy it (src/dist/outputs.c). */
int train_check_outputs(const train_config_t *cfg);
/* The options that name ranks (--straggler, --kill) against the number of
 * workers; under mpi called once -np has fixed it. */
int train_config_check_ranks(const train_config_t *cfg);
const char *schedule_name(schedule_t s);
const char *exchange_name(exchange_t e);

/* Parse --schedule and --exchange values into the config. */
int schedule_parse(const char *text, schedule_t *out, double *param);
int exchange_parse(const char *text, train_config_t *cfg);

/* The options of 'dtrain train' (argv[1..argc); argv[0] is not read) into
 * cfg: defaults, then the preset's options (--preset, at most once), then
 * the user's in order (a later one overrides an earlier one), then
 * train_config_check; last, every option the user gave must be one that
 * the resulting configuration uses. -1 with one line set (naming the
 * option) on a usage error. Reads and writes no file. */
int train_options_parse(int argc, char **argv, train_config_t *cfg);

/* Presets: named systems of the literature as settings of the axes. */
typedef struct {
  const char *name;
  const char *axes;             /* human-readable: which axes it sets */
  const char *source;           /* paper or system */
  const char *options;          /* the equivalent command-line options */
} preset_t;
const preset_t *preset_list(int *count);
const preset_t *preset_find(const char *name);

/* Runs the whole training: loads the data once, starts the ranks on the
 * chosen transport, and returns 0 when every rank finished. With
 * COMM_MPI, argc/argv are handed to MPI_Init. */
int train_run(train_config_t *cfg, int *argc, char ***argv);

/* ---- the worker: what every strategy composes ----------------------------- */

typedef struct {
  double compute, comm, comm_exposed, wait;   /* seconds in this epoch */
  size_t bytes_sent;
} step_timers_t;

/* Load-balanced synchronous steps (balance.c): each step's global batch
 * split over ranks in proportion to their measured speed. */
typedef struct {
  int nranks, lo, hi;           /* bounds of one rank's share of a step */
  double *speed;                /* samples/s of each rank, smoothed (0 = not yet measured) */
  double *want;                 /* scratch: each rank's exact share */
  int *count;                   /* this step's samples of each rank */
  int64_t *epoch_samples;       /* each rank's samples this epoch */
} balance_t;
/* Shares within [batch/8, max_share] (what a rank's buffers hold). */
int balance_new(int nranks, int batch, int max_share, balance_t **out);
void balance_free(balance_t *b);
/* This step's split of `in_step` samples; the slice [off, off+len) of `rank`. */
void balance_split(balance_t *b, size_t in_step, int rank, size_t *off, size_t *len);
/* Every rank's compute seconds in the step just split (the same on every rank). */
void balance_observe(balance_t *b, const float *sec);
void balance_begin_epoch(balance_t *b);
/* The epoch's split, as a JSON field for the metrics ("batch_per_rank":[...]). */
void balance_json(const balance_t *b, int64_t steps, char *buf, size_t cap);
/* The speed estimates as floats, for a checkpoint (out: nranks values), and
 * back from one: -1 (error set) unless every value is finite and >= 0. */
void balance_get_speeds(const balance_t *b, float *out);
int balance_set_speeds(balance_t *b, const float *speeds, const char *where);

typedef struct worker {
  const train_config_t *cfg;
  comm_t *comm;
  coll_ctx_t *coll;
  int rank, nranks;
  const dataset_t *train, *test;
  model_t *model;
  optimizer_t *opt;
  optim_segment_t *segs;        /* one per parameter tensor (LARS) */
  int nsegs;
  lr_schedule_t sched;
  float *x;                     /* batch buffer [batch, dim] */
  int32_t *y;
  uint32_t *order;              /* this epoch's permutation */
  uint32_t *eval_idx;           /* [batch] test indices being evaluated */
  int64_t steps_per_epoch;
  int64_t step;                 /* global steps done */
  int first_epoch;              /* 0, or the epoch after the resumed one */
  int64_t first_step;           /* 0, or the resumed checkpoint's step (a run can stop mid-epoch) */
  FILE *metrics;                /* rank 0 only */
  step_timers_t timers;
  double epoch_loss_sum;        /* summed over this rank's samples */
  int64_t epoch_samples, epoch_correct;
  double step_compute;          /* seconds of the last worker_compute_gradient */
  balance_t *balance;           /* --balance on (sync data parallelism), else NULL */
  double run_start;
  void *strategy;               /* the strategy's own state */
  comm_t *world;                /* every rank of the run (parameter servers too); else == comm */
} worker_t;

int worker_init(worker_t *w, const train_config_t *cfg, comm_t *comm, const dataset_t *train,
                const dataset_t *test);
void worker_free(worker_t *w);
/* A resumed run's position (from a checkpoint file or folder `from`): it
 * continues after `epoch` epochs and `step` steps. Fails if --epochs asks
 * for no more. */
int worker_resume_at(worker_t *w, const char *from, long long epoch, int64_t step);
/* Steps per epoch and the LR schedule for `nworkers` data-parallel workers
 * (worker_init plans for every rank of the comm; a strategy with master
 * or server ranks plans again for its workers). Sets w->nranks. */
void worker_plan_steps(worker_t *w, int nworkers);
/* Clears the epoch's timers and sums, and computes its sample order. */
void worker_begin_epoch(worker_t *w, int epoch);
/* This rank's slice of global step `k` of the epoch, under synchronous data
 * parallelism with per-worker batch cfg->batch: samples [begin, begin+count)
 * of the epoch order, out of `global` in the step. Even, or by w->balance. */
void worker_step_slice(worker_t *w, int64_t k, size_t *begin, size_t *count, size_t *global);
/* What a strategy does inside a step's compute (NULL members: nothing). */
typedef struct {
  param_wait_fn wait;           /* forward, before a layer reads its parameters */
  grad_ready_fn ready;          /* backward, once a layer's gradients are final */
  void *ctx;
} step_hooks_t;
/* Forward, loss and backward on `count` samples of the epoch order starting
 * at `begin`; the gradient is averaged over `denom` samples (the global
 * batch). hooks may be NULL (see model_forward_waiting, model_backward);
 * time spent in hooks->wait counts as exposed communication, not compute.
 * Fails on a NaN/inf loss. */
int worker_compute_gradient(worker_t *w, size_t begin, size_t count, int denom,
                            const step_hooks_t *hooks);
void worker_apply_update(worker_t *w);     /* optimizer step at the scheduled lr */
/* The same on some segments of the arena only (a sharded optimizer). */
void worker_apply_update_segs(worker_t *w, const optim_segment_t *segs, int nsegs);
/* The same step in parts, the same bits (data parallelism that applies
 * each bucket's update during the next forward pass): worker_begin_update
 * once (it advances w->step and returns the step's lr), then
 * worker_update_part on each part; parts are whole tensors. */
float worker_begin_update(worker_t *w);
void worker_update_part(worker_t *w, const optim_segment_t *segs, int nsegs, float lr);
/* Summed test loss and correct count of this worker's model over test
 * samples [begin, end) (strategies shard the test set over ranks). */
void worker_evaluate(worker_t *w, size_t begin, size_t end, double *loss_sum, int64_t *correct);
/* Epoch bookkeeping on rank 0: the live progress line (stderr), the epoch
 * summary (stdout), the metrics line and the checkpoint. */
typedef struct {
  int epoch;
  double train_loss, train_acc, test_loss, test_acc;
  double epoch_sec, eval_sec, samples_per_sec, lr;  /* epoch_sec: training only */
  step_timers_t timers;
  const char *extra_json;       /* strategy-specific fields, without braces, or NULL */
} epoch_report_t;
void worker_progress(worker_t *w, int epoch, int64_t k, int64_t steps_in_epoch);
int worker_report_epoch(worker_t *w, const epoch_report_t *r);
/* The error of a run stopped by SIGINT/SIGTERM, saying what it keeps. */
int worker_interrupted(const worker_t *w);
int worker_report_done(worker_t *w, const epoch_report_t *last, double total_sec);
int worker_save_checkpoint(worker_t *w, int epoch);
int worker_load_checkpoint(worker_t *w, const char *path);

/* Strategies: each runs the epochs of one rank. */
typedef int (*strategy_fn)(worker_t *w);
int strategy_data_parallel(worker_t *w);
/* The synchronous epoch loop of data parallelism (data_parallel.c):
 * step(state, k) runs global step k of the epoch on this rank; test metrics
 * sharded over ranks, progress, reports. */
typedef int (*sync_step_fn)(void *state, int64_t k);
int sync_run_epochs(worker_t *w, sync_step_fn step, void *state);
/* Synchronous data parallelism through shared memory (local): one
 * parameter arena, each rank reduces and steps its block (shared_sync.c). */
int strategy_shared_sync(worker_t *w);
/* Parameter servers (docs/PARAMETER_SERVER.md): the workers' loop (needs
 * w->world with the server ranks), and the whole of one rank of such a run:
 * ranks 0..N-1 are workers, N..N+K-1 servers (ps_worker.c). */
int strategy_ps_worker(worker_t *w);
int ps_run_rank(comm_t *world, const train_config_t *cfg, const dataset_t *train,
                const dataset_t *test);
/* Hogwild: lock-free updates of one shared arena by worker threads (local). */
int strategy_hogwild(worker_t *w);
/* Values of the parameter-server and Hogwild options (ps_config.c). */
int ps_check(const train_config_t *cfg);
int ps_check_world(const train_config_t *cfg);   /* under mpi, once the workers are known */
/* Decentralized optimization (docs/DECENTRALIZED.md): every worker trains
 * its own replica; the replicas are merged from time to time. */
int strategy_local_sgd(worker_t *w);      /* model averaging every tau steps (SparkNet, local SGD) */
int strategy_easgd(worker_t *w);          /* elastic averaging with a master rank, sync or async */
int strategy_dpsgd(worker_t *w);          /* D-PSGD: mix with the two ring neighbours every step */
int strategy_gossip(worker_t *w);         /* GoSGD: sum-weighted gossip */
int strategy_tree_easgd(worker_t *w);     /* TreeEASGD: elastic exchanges along a tree */
/* 1 when the axes select EASGD, whose master is a rank of its own, else 0. */
int decentral_extra_ranks(const train_config_t *cfg);
/* Values of --alpha/--beta/--rho (EASGD's stable range), --neighbor-weight. */
int decentral_check(const train_config_t *cfg);
/* The strategy the configuration's axes select, and how many ranks it
 * needs in all (workers plus any server ranks). */
int strategy_select(const train_config_t *cfg, strategy_fn *fn, const char **name);
int strategy_total_ranks(const train_config_t *cfg);
#endif
