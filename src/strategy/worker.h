/* The worker: what every strategy composes (internal to src/strategy/).
 * A strategy is a small file in its family's folder (dp/, ps/,
 * decentral/) that runs the steps of one rank with the helpers below,
 * speaking comm_t and coll only. */
#ifndef DTRAIN_STRATEGY_WORKER_H
#define DTRAIN_STRATEGY_WORKER_H

#include "dtrain/coll.h"
#include "dtrain/safetensors.h"
#include "dtrain/train.h"

typedef struct {
  double compute, comm, comm_exposed;   /* seconds in this epoch */
  /* of comm_exposed, the time spent waiting for slower ranks (synchronous
   * schedules, measured at the epoch's end by worker_epoch_figures; -1:
   * not measured) */
  double wait;
  /* of comm_exposed, the time a pipeline stage sat idle waiting for its
   * neighbours' units (the bubble: its receives' waits less the link's
   * time for their bytes); 0 outside pipelines */
  double bubble;
  /* payload bytes this rank sent and received while training in this
   * epoch (comm_bytes; evaluation's exchanges are not included) */
  uint64_t bytes_sent, bytes_received;
  /* the epoch's training passes by layer kind (model_t.cost): part of
   * compute and comm above, and of the bytes where a layer sums */
  layer_cost_t layers[LAYER_KIND_COUNT];
} step_timers_t;

/* Declared here because their headers include this one (balance.h,
 * tp_group.h); a repeated identical typedef is legal C11. */
typedef struct balance balance_t;
typedef struct tensor_par tensor_par_t;
typedef struct sync_bn sync_bn_t;

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
  float *rank_compute;          /* [ranks of comm]: each rank's epoch compute (wait_sec) */
  int64_t steps_per_epoch;
  int64_t step;                 /* global steps done */
  int first_epoch;              /* 0, or the epoch after the resumed one */
  int64_t first_step;           /* 0, or the resumed checkpoint's step (a run can stop mid-epoch) */
  size_t resume_samples;        /* a mid-epoch checkpoint's samples done in first_epoch, else 0 */
  size_t epoch_offset;          /* samples of this epoch done before its step 0 (resume_samples
                                   in the resumed epoch, else 0); steps_per_epoch counts the rest */
  FILE *metrics;                /* rank 0 only */
  step_timers_t timers;
  double epoch_loss_sum;        /* summed over this rank's samples */
  int64_t epoch_samples;
  double epoch_correct; /* a sequence model's sample counts the share of its positions right */
  double step_compute;          /* seconds of the last worker_compute_gradient */
  double last_grad_norm;        /* --clip-grad-norm: the last step's norm before clipping */
  coll_ctx_t *clip_stages;      /* --clip-grad-norm under a pipeline: the stages of this replica,
                                 * whose squared norms the global one sums (NULL: one stage) */
  balance_t *balance;           /* --balance on (sync data parallelism), else NULL */
  double run_start;
  uint64_t run_bytes_sent, run_bytes_received;  /* the epochs' bytes_sent/_received summed */
  void *strategy;               /* the strategy's own state */
  comm_t *world;                /* every rank of the run (parameter servers too); else == comm */
  /* --tp T > 1: the model's dense pairs are split over this rank's group,
   * and comm is this rank's slice (the ranks with its tp coordinate) */
  tensor_par_t *tp;
  int tp_rank;                  /* 0 without tensor parallelism */
  sync_bn_t *bn_sync;           /* --sync-bn on: batch norm over comm's ranks, else NULL */
  int progress_rank;            /* the rank of comm that prints the progress line: the one
                                   whose loss it shows (0; the last stage under a pipeline) */
  /* A strategy's state kept beside the optimizer's in --checkpoint, laid
   * out like the parameters and saved per tensor as "<prefix><tensor>"
   * (parameter servers: DC-ASGD-a's MeanSquare); NULL: none */
  const float *ckpt_state;
  const char *ckpt_state_prefix;
  /* --compress under the reducer: its compressor, whose state --checkpoint
   * keeps for every rank (checkpoint_memory.c); NULL: none */
  compressor_t *ckpt_cx;
  float *ckpt_cx_all;           /* rank 0: every rank's per-rank arrays, gathered */
  uint64_t *ckpt_cx_lens;       /* rank 0 on a grid (--tp, --pp): each world rank's arena length */
} worker_t;

/* The one rank that prints, writes the metrics and the checkpoint: rank 0
 * of the worker's comm and, under tensor parallelism, of its group. */
static inline int worker_reports(const struct worker *w) { return w->rank == 0 && w->tp_rank == 0; }

int worker_init(worker_t *w, const train_config_t *cfg, comm_t *comm, const dataset_t *train,
                const dataset_t *test);
void worker_free(worker_t *w);
/* A resumed run's position (from a checkpoint file or folder `from`): it
 * continues after `epoch` epochs and `step` steps. Fails if --epochs asks
 * for no more. */
int worker_resume_at(worker_t *w, const char *from, long long epoch, int64_t step);
/* The one place a run's schedule is planned: steps per epoch of
 * synchronous data parallelism over `nworkers` (the last step takes what is
 * left), and the learning-rate schedule over the run's steps. */
int64_t train_steps_per_epoch(const train_config_t *cfg, size_t nsamples, int nworkers);
lr_schedule_t train_lr_schedule(const train_config_t *cfg, int64_t steps_per_epoch);
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
/* --compress for the gradients a data-parallel group sums (the reducer, a
 * pipeline's replicas): the compressor of rank `rank` of `nranks` over the
 * model's arena, configured by the options; under DGC the optimizer then
 * steps without momentum (the memory's momentum correction carries it). */
int worker_compressor_new(worker_t *w, int rank, int nranks, compressor_t **out);
/* Its configuration, from the options alone (a step's description reads it). */
compress_config_t worker_compress_config(const train_config_t *cfg);
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
void worker_evaluate(worker_t *w, size_t begin, size_t end, double *loss_sum, double *correct);
/* Epoch bookkeeping on rank 0: the live progress line (stderr), the epoch
 * summary (stdout), the metrics line and the checkpoint. */
typedef struct {
  int epoch;
  int64_t steps;                /* steps this rank took in the epoch */
  double train_loss, train_acc, test_loss, test_acc;
  double epoch_sec, eval_sec, samples_per_sec, lr;  /* epoch_sec: training only */
  double samples;               /* trained on in the epoch, all replicas (samples_per_sec's) */
  step_timers_t timers;
  const char *extra_json;       /* strategy-specific fields, without braces, or NULL */
  int budget_spent;             /* --time-budget: every rank ends the run after this epoch */
} epoch_report_t;
/* Collective over w->comm: the test metrics of this rank's model on its
 * shard of the test set, and the epoch's train loss and accuracy, summed
 * over ranks in one small allreduce into r; `nextra` (<= 8) more floats
 * summed along (in place). A rank that trains nothing adds zeros. */
int worker_epoch_figures(worker_t *w, epoch_report_t *r, float *extra, int nextra);
void worker_progress(worker_t *w, int epoch, int64_t k, int64_t steps_in_epoch);
int worker_report_epoch(worker_t *w, const epoch_report_t *r);
/* A step's training loss is NaN or infinite: the `diverged` record (from
 * the rank whose loss the progress line shows) and the error that stops. */
int worker_step_diverged(worker_t *w, double loss);
/* The error of a run stopped by SIGINT/SIGTERM, saying what it keeps. */
int worker_interrupted(const worker_t *w);
/* Before a step: the run asked to stop (SIGINT, SIGTERM) or this rank's
 * thread lost (SIGUSR1, the fault dtrain launch restarts from) is an
 * error naming the step; 0 to go on. Every strategy's step checks it. */
int worker_stopped(const worker_t *w);
/* The error of a rank that took the lost-rank signal at `step`, in the
 * words dtrain launch reads (launch_child.c: ": this rank is lost"). */
int worker_rank_lost(int64_t step);
/* The run's summary: its reported epochs' samples over total_sec. */
int worker_report_done(worker_t *w, const epoch_report_t *last, double samples, double total_sec);
int worker_save_checkpoint(worker_t *w, int epoch);
/* The same mid-epoch: `samples` of epoch `epoch` done (0: the epoch is). */
int worker_save_checkpoint_at(worker_t *w, int epoch, size_t samples);
/* --checkpoint-every: the samples of the epoch done once its step k is,
 * and whether a checkpoint follows step k once `steps` global steps are
 * taken (every STEPS steps, but not at the epoch's end or the --max-steps
 * stop, which the epoch's report checkpoints). */
size_t worker_epoch_samples_done(const worker_t *w, int64_t k);
int worker_step_checkpoint_due(const worker_t *w, int64_t k, int64_t steps);
/* The mid-epoch checkpoint after step k, on every rank (a collective where
 * the checkpoint gathers: the compressor's state, a tp group's blocks):
 * rank 0 checks the values and writes, with a "checkpoint" metrics line. */
int worker_checkpoint_step(worker_t *w, int epoch, int64_t k);
int worker_load_checkpoint(worker_t *w, const char *path);
/* --checkpoint keeps cx's state (compressor_state: the error-feedback
 * memory, DGC's velocity, PowerSGD's Q) for every rank of w->comm: it is
 * gathered to rank 0 before each checkpoint (worker_gather_compressor, a
 * collective) and saved as "compress.<name>.rank<r>", or "compress.<name>"
 * for state the same on every rank. Under --resume from a file that holds
 * it for the same codec and number of ranks, each rank restores its own,
 * so the run continues bit for bit; from any other file the compressor
 * starts empty (rank 0 says so when the file held another's). On a grid
 * (--tp, --pp: w->comm's ranks are fewer than the run's) every rank of
 * the run sends all its arrays to world rank 0, saved by world rank.
 * Call on every rank, once cx exists. */
int worker_keep_compressor(worker_t *w, compressor_t *cx);
int worker_gather_compressor(worker_t *w);
/* The tensors and the metadata line of the gathered state (rank 0), into
 * t and md (room for checkpoint_compressor_count(w) tensors); returns the
 * number of tensors. */
int checkpoint_compressor_count(const worker_t *w);
int checkpoint_compressor_entries(const worker_t *w, st_tensor_t *t, st_meta_t *md, int *nmeta);

/* --trace (strategy/trace.c): every rank of the run starts its timeline
 * after a common barrier (NULL when not tracing). Under mpi it ends it by
 * sending its events to rank 0, which writes the file; a failed run
 * (SIGINT, divergence, a lost rank) cannot gather, and run_trace_dropped
 * frees the trace and adds to the run's error that it is not written.
 * Under local the ranks leave their traces in a table (kept[rank]) and
 * run_trace_write_kept writes them after every rank has ended, the run
 * failed (`failed`: its error says where the trace is) or not. */
int run_trace_start(comm_t *world, const train_config_t *cfg, dt_trace_t **out);
int run_trace_finish(comm_t *world, const train_config_t *cfg, dt_trace_t *t);
int run_trace_dropped(const train_config_t *cfg, dt_trace_t *t);
int run_trace_write_kept(const train_config_t *cfg, dt_trace_t **kept, int n, int failed);

/* Seconds since t0 counted as communication, all of it exposed (a
 * blocking exchange that nothing overlaps); returns them. */
double worker_comm_since(worker_t *w, double t0);

/* ---- the epoch/step driver (driver.c): the one loop of every strategy ----
 * Per epoch: worker_begin_epoch, begin_epoch, steps k = 0, 1, ... up to
 * steps_per_epoch and --max-steps (unless open_ended), end_epoch,
 * evaluate, report (worker_report_epoch unless given), after_report; at
 * the end end_run and worker_report_done. Hooks return 0 or -1; step
 * returns one of these. EPOCH_END and RUN_END mean step k was not taken. */
enum {
  DRIVE_NEXT = 0,       /* step taken, go on */
  DRIVE_EPOCH_END = 1,  /* no more steps in this epoch */
  DRIVE_RUN_END = 2,    /* no more steps at all: report this epoch and end */
  DRIVE_STOPPED = 3,    /* this rank leaves now, without a report (--kill) */
  DRIVE_SKIP = 4,       /* evaluate: this rank reports nothing for this epoch */
};
typedef struct {
  int (*begin_epoch)(void *st, int epoch);          /* optional */
  int (*step)(void *st, int epoch, int64_t k);
  int (*end_epoch)(void *st, int epoch);            /* optional: drain, flush; may return DRIVE_RUN_END */
  /* The epoch's figures into r: the driver has set epoch, epoch_sec,
   * timers, lr and samples_per_sec (as for synchronous steps of the global
   * batch); eval_sec is timed around this hook unless it sets it. Returns
   * 0, -1, or DRIVE_SKIP (no report from this rank for this epoch). */
  int (*evaluate)(void *st, epoch_report_t *r);
  int (*report)(void *st, const epoch_report_t *r); /* optional: instead of worker_report_epoch */
  void (*after_report)(void *st);                   /* optional; runs whether the report failed or not */
  int (*end_run)(void *st);                         /* optional: before worker_report_done */
  /* The step hook ends each epoch and the run itself (DRIVE_EPOCH_END,
   * DRIVE_RUN_END: steps handed out by a shared counter or a server), and
   * shows its progress: the driver applies neither steps_per_epoch nor
   * --max-steps. */
  int open_ended;
} driver_ops_t;
/* The most samples a rank computes in a step: --batch, twice it under
 * --balance (balance.c); the model's and the batch buffers' size. */
int worker_max_batch(const train_config_t *cfg);
/* The model a worker of cfg builds for inputs of shape `in` and nclasses
 * classes: the model file, the tensor-parallel plan for tp's group (NULL:
 * none, the file's split= keys checked all the same), batch norm
 * synchronized over bn (NULL: local). Its parameters are not yet drawn. A
 * step's description builds each rank's so. */
int worker_build_model(const train_config_t *cfg, shape_t in, int nclasses, tp_link_t *tp,
                       tp_link_t *bn, model_t **out);

/* 0, -1 (error set), or DRIVE_STOPPED. */
int driver_run(worker_t *w, const driver_ops_t *ops, void *st);

#endif
