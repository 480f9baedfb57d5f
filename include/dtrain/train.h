/* train: running a training, the public API. The taxonomy is the
 * configuration: each axis is a field of train_config_t, presets fill the
 * axes in, and train_config_check refuses combinations that do not exist.
 * train_run starts the ranks and runs the strategy the axes select (the
 * strategies live in src/strategy/, a folder per family; their internals
 * in src/strategy/worker.h). */
#ifndef DTRAIN_TRAIN_H
#define DTRAIN_TRAIN_H

#include "dtrain/coll.h"
#include "dtrain/comm.h"
#include "dtrain/compress.h"
#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"

#define TREE_LEVELS_MAX 16      /* --tau-up, --tau-down: at most this many values */

typedef enum { COMM_LOCAL, COMM_MPI } comm_kind_t;
typedef enum { OPTIMIZATION_CENTRAL, OPTIMIZATION_DECENTRAL } optimization_t;
/* SCHEDULE_SOFT: soft-bounded asynchronous (MPCA-SGD): a round's exchange
 * overlaps the next tau local steps, at most one round in flight */
typedef enum { SCHEDULE_SYNC, SCHEDULE_ASYNC, SCHEDULE_SSP, SCHEDULE_VALUE, SCHEDULE_BACKUP,
               SCHEDULE_SOFT } schedule_t;
typedef enum { EXCHANGE_ALLREDUCE, EXCHANGE_PS, EXCHANGE_MASTER, EXCHANGE_NEIGHBORS,
               EXCHANGE_GOSSIP, EXCHANGE_TREE, EXCHANGE_SHARED } exchange_t;

enum { MC_OFF = 0, MC_VELOCITY = 1, MC_SHARED = 2 };

/* The families' settings, one struct each: plain data that the options
 * fill in and the family's code reads. */

/* Gradient compression (src/compress/), in the reducer of synchronous
 * data parallelism and the decentralized exchanges. */
typedef struct {
  codec_spec_t codec;           /* CODEC_NONE: the plain exchange */
  int error_feedback;           /* -1: the codec's default (on for biased codecs), 0, 1 */
  /* SGD's momentum under compression (the optimizer then steps without
   * it): MC_VELOCITY, each rank's velocity in the memory (DGC); MC_SHARED,
   * the momentum step itself compressed, its decoded sum the new momentum
   * (1-bit Adam's); -1: velocity for dgc, else off */
  int momentum_correction;
  int pulls;                    /* --exchange ps:K: pulls sent as the encoded change too [off] */
  int64_t warmup_steps;         /* dense steps first; DGC: its sparsity warm-up */
  double dgc_clip;              /* DGC: local gradient clipping norm (0 = off) */
  int sufficient_factors;       /* dense layers' gradients as their factors where fewer bytes */
  int sparse_collective;        /* sparse_coll_t: what sums a sparse codec's pairs [allgather] */
} compression_config_t;

/* Pipeline parallelism (src/strategy/pipe/): workers = dp x stages x tp. */
typedef struct {
  int stages;                   /* --pp [1] */
  int micro_batches;            /* micro-batches per step of one replica [1] */
  int schedule;                 /* pipe_kind_t: gpipe, 1f1b, interleaved, pipedream, 2bw, ddg */
  int chunks;                   /* interleaved:V: model chunks per rank [1] */
  int vertical_sync;            /* pipedream: a unit runs every stage on stage 0's weight version */
  char partition[256];          /* "balanced" (empty) or the first layer of each stage: "0,3,5" */
} pipe_config_t;

/* The one weird trick's schemes for its split layers (Krizhevsky 2014,
 * sec. 4): (a) all K batches at once, (b) one worker's batch at a time,
 * (c) a K-th of every worker's batch at a time; (b) and (c) step the split
 * layers after each. */
typedef enum { OWT_SCHEME_UNSET = -1, OWT_SCHEME_A, OWT_SCHEME_B, OWT_SCHEME_C } owt_scheme_t;

/* Tensor parallelism (src/strategy/tensor/). */
typedef struct {
  int ranks;                    /* --tp: ranks a dense layer pair is split over [1] */
  int conv_data;                /* one weird trick: convolutions data-parallel, dense layers split over all workers */
  int data_line;                /* > 0: the model file's split=data on this line set conv_data */
  owt_scheme_t owt_scheme;      /* conv_data: the paper's scheme for the split layers [b, once the model file is read] */
} tensor_config_t;

/* Parameter servers (src/strategy/ps/). */
typedef struct {
  int servers;                  /* ps:K (0 = ps:n, co-located) */
  int fetch_every, push_every;  /* Downpour: pull / push every n steps [1, 1] */
  int staleness_lr;             /* divide the step by the staleness */
  double dc_asgd;               /* delay compensation lambda (0 = off); DC-ASGD-a: lambda0 */
  int dc_asgd_adaptive;         /* DC-ASGD-a: lambda_t = lambda0 / sqrt(MeanSquare_t + eps) */
  int implicit_momentum;        /* the servers' momentum is --momentum - (1 - 1/N) */
  int64_t drop_stale;           /* async: drop a push more than this many updates stale (-1: off) */
  double epoch_fraction;        /* pool schedules: an epoch ends once this part of its batches is pushed [1] */
  int queue_staleness;          /* value:V: held pushes tried least stale first (else in arrival order) */
  int refresh_lazy;             /* ssp:S: Bosen's SSP cache, pulled only when older than S clocks
                                 * (else ESSP's eager refresh every clock) */
  size_t credit_bytes;          /* PRIORITY / TICTAC: bytes in flight each way at most
                                 * (ByteScheduler's credit) */
  int replicas;                 /* --ps-replicas: copies of each shard, chain replicated [1] */
  int kill_server;              /* --kill-server index=K,at-push=P: server K stops abruptly (-1: none) */
  int64_t kill_server_at;       /* ... on receiving its P-th push */
  int64_t kill_server_lose;     /* ... lose-forwards=N: its N pushes before the P-th never reach
                                 * its backup (lost on the way) [0] */
  int push_factors;             /* --ps-push factors: dense layers pushed as sufficient factors
                                 * (Project Adam), their gradient computed at the server */
  int server_threads;           /* --ps-server-threads: threads applying a server's updates [1] */
  int kill_server2;             /* ... index2=J,at-push2=Q: then server J too (-1: none) */
  int64_t kill_server2_at;
  int worker_threads;           /* --worker-threads: threads training on each worker, sharing
                                 * its weights without locks (Project Adam) [1] */
} ps_config_t;

/* Decentralized optimization (src/strategy/decentral/). */
typedef struct {
  int tau;                      /* local steps between merges [1] */
  double alpha, beta, rho;      /* EASGD elastic coefficients (0 = the method's default);
                                   MPCA-SGD: rho the penalty, beta the centre's rate */
  double extrapolation;         /* MPCA-SGD: gamma, c^ = c + gamma (c - c_prev) (-1: default 1) */
  /* EASGD, DeepSpark's adaptive moving rate: alpha and beta are multiplied
   * by alpha_decay every alpha_decay_every exchanges of a worker, at most
   * alpha_decay_limit times (0: no limit) [1, 0, 0: constant] */
  double alpha_decay;
  int alpha_decay_every, alpha_decay_limit;
  /* TreeEASGD exchange periods per level of the tree, from the root: level
   * l >= 1 is the links between depths l-1 and l; a node at depth l sends
   * its model to its parent every tau_up[l-1] of its steps, and a node at
   * depth l-1 to its children every tau_down[l-1] steps. Levels past the
   * last value given take the last one (one value: every level). */
  int tau_up[TREE_LEVELS_MAX], tau_down[TREE_LEVELS_MAX];
  int tau_up_levels, tau_down_levels; /* values given, 1 .. TREE_LEVELS_MAX */
  double neighbor_weight;       /* D-PSGD: weight of each ring neighbour [1/3] */
  double consensus_step;        /* D-PSGD with --compress (CHOCO-SGD): gossip step gamma [1] */
  double gossip_p;              /* gossip:p */
  int tree_fanout;              /* tree:F */
} decentral_config_t;

typedef struct {
  /* what to train */
  char model[256], data[256];
  int epochs, batch;            /* batch per worker */
  int seq_len;                  /* --seq-len: tokens per sample of text data [128] */
  double clip_grad_norm;        /* --clip-grad-norm: the summed gradient's global L2 norm
                                 * is scaled down to at most this before a step (0 = off) */
  uint64_t seed;
  int threads;                  /* BLAS threads per worker */
  int bf16;                     /* --precision bf16: products in bfloat16 (kern_set_bf16) */
  int recompute;                /* --recompute: recompute_t (nn.h) */
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
  size_t bucket_bytes;          /* gradient bucket size (0 = one bucket per layer) */
  int overlap;                  /* start bucket allreduces during backprop */
  coll_order_t comm_order;      /* FIFO, or PRIORITY: the next forward's layers first */
  size_t partition_bytes;       /* PRIORITY: buckets go out in parts of at most this */
  int shard_optimizer;          /* ZeRO-1: reduce-scatter, step this rank's blocks, allgather */
  int balance;                  /* split each synchronous step's batch by measured speed */
  int sync_bn;                  /* batch norm's statistics over the data-parallel ranks */
  /* the families' settings (each read only by its family and its options) */
  compression_config_t compression;
  pipe_config_t pipe;
  tensor_config_t tensor;
  ps_config_t ps;
  decentral_config_t decentral;
  int kill_rank;                /* --kill rank=R,at-step=S (local; -1 = none) */
  int64_t kill_step;
  char checkpoint_dir[256];     /* parameter servers: one file per shard + manifest */
  /* emulated network (local) */
  comm_net_t net;
  double net_latency, net_bandwidth;
  int straggler_rank;           /* -1 = none */
  double straggler_slowdown;
  /* files and output */
  char metrics[256], checkpoint[256], resume[256];
  int metrics_append;           /* --metrics-append: continue --metrics (as --resume does) */
  char trace[256];              /* --trace FILE.json: a timeline of every rank ("" = off) */
  long long trace_from, trace_to;  /* --trace-steps A:B: global steps [A, B) */
  int progress;                 /* live progress line on stderr */
  int64_t max_steps;            /* stop after this many steps in total (0 = no limit; for tests and benches) */
  int64_t checkpoint_every;     /* --checkpoint-every STEPS: a checkpoint each STEPS global steps (0 = epochs only) */
  double time_budget;           /* --time-budget SEC: end at the first epoch end past SEC (0 = none) */
  double max_loss;              /* a mean train or test loss above this is divergence [1e4] */
} train_config_t;

/* The axes a strategy is selected by (its descriptor's matches). */
static inline int train_axes(const train_config_t *c, optimization_t o, exchange_t e, schedule_t s) {
  return c->optimization == o && c->exchange == e && c->schedule == s;
}
/* Synchronous data parallelism over allreduce, no pipeline: the runs that
 * checkpoint and resume mid-epoch (--checkpoint-every, dtrain launch). */
static inline int train_sync_data_parallel(const train_config_t *c) {
  return train_axes(c, OPTIMIZATION_CENTRAL, EXCHANGE_ALLREDUCE, SCHEDULE_SYNC) &&
         !(c->pipe.stages > 1 || c->pipe.micro_batches > 1);
}
/* A pipeline: stages (--pp) or micro-batches (--micro-batches). */
static inline int train_pipelined(const train_config_t *c) { return c->pipe.stages > 1 || c->pipe.micro_batches > 1; }

void train_config_default(train_config_t *cfg);
/* Refuses invalid values and combinations of axes with one line naming the
 * options and what exists. */
int train_config_check(const train_config_t *cfg);
/* --error-feedback and --momentum-correction as they apply: when not given,
 * the codec's default (error feedback on for biased codecs; the velocity
 * corrected for dgc, else off). */
int train_error_feedback(const train_config_t *cfg);
int train_momentum_correction(const train_config_t *cfg);
/* The outputs (--checkpoint, --metrics) may be written: new, or dtrain's
 * own earlier output of that kind; distinct from each other and from
 * --resume where writing would destroy it (src/strategy/outputs.c). */
int train_check_outputs(const train_config_t *cfg);
/* The step the configuration's strategy runs, as JSON on out: per rank the
 * bytes it sends and receives in a step, and the task graph (compute per
 * layer, communication with its pattern, peers and start) -- the
 * strategy's describe_step, without starting any rank. */
int train_describe_step(train_config_t *cfg, FILE *out);
/* The options that name ranks (--straggler, --kill) against the number of
 * workers; under mpi called once -np has fixed it. */
int train_config_check_ranks(const train_config_t *cfg);
/* Under mpi the world size comes from mpirun -np: sets the workers to what
 * is left after the strategy's other ranks (servers, a master), and checks
 * them (the grid, train_config_check_ranks); an error where -np cannot fit. */
int train_config_fit_world(train_config_t *cfg, int size);
const char *schedule_name(schedule_t s);
/* The schedule as --schedule spells it ("sync", "ssp:2", "ssp:inf", "backup:1"). */
void schedule_format(const train_config_t *cfg, char *buf, size_t cap);
const char *exchange_name(exchange_t e);
/* The exchange as --exchange spells it ("allreduce:auto", "ps:2", "shared"). */
void exchange_spec(const train_config_t *cfg, char *buf, size_t cap);

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
/* The options' part of 'dtrain train --help', from the same rows the
 * parser reads: each option's value, description and default. */
void train_options_help(FILE *out);

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
 * chosen transport, and returns 0 when every rank finished, -1 when the
 * run failed, or TRAIN_REFUSED when the configuration was refused before
 * any rank started (it does not fit the model, the model file or the
 * machine's memory: a usage error). With COMM_MPI, argc/argv are handed
 * to MPI_Init. */
#define TRAIN_REFUSED (-2)
int train_run(train_config_t *cfg, int *argc, char ***argv);

#endif
