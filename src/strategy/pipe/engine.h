/* The pipeline engine's shared core (engine.c, report.c), internal to
 * pipe/: one rank runs one stage of one replica -- V chunks of the model,
 * each a stage of the stage seam (nn/stage.c) -- and executes instruction
 * lists (schedule.h) on them: LOAD, FORWARD and BACKWARD of its chunks,
 * activations and gradients sent to and received from the neighbouring
 * stages (sends are non-blocking, waited for once a list has run), REDUCE
 * over the replicas of the stage, STEP.
 *
 * What the two engines do differently is a table of hooks (pipe_ops_t):
 * which lists a step runs, which weights a forward and a backward read,
 * what REDUCE waits for and what STEP does. sync.c runs the flush
 * schedules (GPipe, 1F1B, interleaved), async.c the stream of PipeDream,
 * 2BW and DDG with its weight versions.
 *
 * Ranks form a dp x pp grid (grid.h): the stages of a replica talk over
 * the pipeline axis, the replicas of a stage sum their gradients over the
 * data-parallel axis, and every stage steps its own range of the parameter
 * arena. A step takes replica r's slice of the global batch (batch x dp
 * samples), cut into M micro-batches; the loss of each is averaged over
 * the global batch, so the summed gradient is the one of plain training
 * on that batch, up to the order of float sums. */
#ifndef DTRAIN_STRATEGY_PIPE_ENGINE_H
#define DTRAIN_STRATEGY_PIPE_ENGINE_H

#include "strategy/grid.h"
#include "strategy/pipe/pipe.h"

/* Activations leaving chunk g carry tag TAG_PIPE_ACT0 + g, gradients
 * coming back to it TAG_PIPE_GRAD0 + g: a channel per pair of chunks;
 * the model's ranges go to rank 0 on TAG_PIPE_GATHER (report.c). */
enum { TAG_PIPE_GATHER = 5403, TAG_PIPE_TIED = 5404, TAG_PIPE_ACT0 = 6000, TAG_PIPE_GRAD0 = 8100 };

typedef struct pipe_engine pipe_engine_t;

typedef struct {
  int (*setup)(pipe_engine_t *e);            /* the engine's own state, once the core's is set up */
  void (*teardown)(pipe_engine_t *e);        /* called whether setup ran or not */
  void (*begin_epoch)(pipe_engine_t *e);     /* optional */
  /* Step k of the epoch; m: this replica's micro-batches in it (fewer than
   * M in a short last step, 0 when it has no sample), cut by the core. */
  int (*step)(pipe_engine_t *e, int64_t k, int m);
  int (*end_epoch)(pipe_engine_t *e);        /* optional: what is still in flight */
  /* Optional: point a unit's slot at the weights its FORWARD (BACKWARD)
   * reads; without them both read the model's. */
  int (*forward_weights)(pipe_engine_t *e, int unit, int slot);
  int (*backward_weights)(pipe_engine_t *e, int chunk, int slot);
  int (*reduce)(pipe_engine_t *e);           /* REDUCE: pipe_reduce, and what it waits for */
  void (*update)(pipe_engine_t *e, int unit);  /* STEP: the optimizer on e->segs */
  /* Optional: the most weight versions the rank has held at once, reported
   * as stage_weight_versions (one version, and no figure, without it). */
  int (*peak_versions)(const pipe_engine_t *e);
} pipe_ops_t;

/* One of the rank's chunks: global stage g = v P + s of G = P V. */
typedef struct {
  stage_t *st;
  float *dx;        /* [slots][micro_batch x in_size]: the input gradients it sends back */
  int nback;        /* backwards into its gradients since the last STEP */
  int mat, nmat;    /* --compress: its tensors, mats[mat .. mat + nmat) */
} pipe_chunk_t;

struct pipe_engine {
  worker_t *w;
  const pipe_ops_t *ops;
  rank_grid_t grid;
  comm_t *pipe;               /* the stages of this replica, ranked by stage */
  coll_ctx_t *dp;             /* the replicas of this stage (NULL: dp = 1) */
  int P, V, G, M, s, ndp, r;  /* ranks, chunks per rank, chunks, micro-batches, this rank, replicas, this replica */
  pipe_kind_t kind;
  int *first;                 /* [G + 1]: first layer of each chunk; first[G] = nlayers */
  double *layer_sec;          /* [nlayers]: --partition balanced's measured seconds (else 0) */
  pipe_chunk_t *chunk;        /* [V] */
  /* units (micro-batches) in flight: unit u's activations in slot u % slots */
  int slots;
  int32_t *labels;            /* [slots][micro_batch]: each unit's labels (the last chunk) */
  int *slot_n;                /* [slots]: each unit's samples (0: an empty unit) */
  optim_segment_t *segs;      /* the rank's tensors, for its optimizer step */
  int nsegs;
  comm_req_t **sends;         /* non-blocking sends not yet waited for */
  int nsends, max_sends;
  size_t begin, *mb_off, *mb_len;  /* the step's micro-batches: [M] each */
  int global;                 /* samples in the step, over all replicas */
  /* --compress: the replicas' sums through the compressor (dp > 1) */
  compressor_t *cx;
  compress_matrix_t *mats;    /* every parameter tensor as a matrix */
  int64_t reduces;            /* REDUCEs run: seeds the codecs, counts the dense warm-up */
  /* this epoch's figures */
  int live, peak_live;        /* activation sets held (over the run) */
  double compute, idle;       /* seconds computing, waiting on the pipeline */
  char *extra;                /* [extra_cap]: the report's pipeline fields */
  size_t extra_cap;
  /* a head tied to an embedding on another stage (tied.c): the table's
   * range of the arenas, the two stages, the received gradient */
  size_t tie_off, tie_len;    /* tie_len 0: no tie crosses stages */
  int tie_table, tie_head;    /* the stages holding the embedding and the head */
  float *tie_buf;
};

/* The whole run of one engine on w: e (zeroed, inside the engine's own
 * state) is set up with `slots` activation sets per chunk, then ops->setup,
 * every epoch through the driver, ops->teardown, and the core's teardown. */
int pipe_engine_run(pipe_engine_t *e, worker_t *w, const pipe_ops_t *ops, int slots);

/* Instructions, run in order; a fault is prefixed with the stage. */
int pipe_run_list(pipe_engine_t *e, const pipe_instr_t *list, int n);
int pipe_execute(pipe_engine_t *e, pipe_instr_t in);
/* Waits for the sends still in flight (time counted as idle). */
int pipe_wait_sends(pipe_engine_t *e);
/* The rank's gradients summed over the replicas (through the compressor
 * under --compress), the communication counted from t0. */
int pipe_reduce(pipe_engine_t *e, double t0);

/* A head tied to an embedding on another stage (tied.c, Megatron's
 * embedding group): after the partition, which stages hold the two, and
 * a refusal under the schedules without a flush; before REDUCE the head's
 * stage sends the table's gradient it computed to the table's stage, which
 * adds it; after STEP the table's stage sends the updated table back. */
int pipe_tied_plan(pipe_engine_t *e);
int pipe_tied_grads(pipe_engine_t *e);
int pipe_tied_params(pipe_engine_t *e);
void pipe_tied_free(pipe_engine_t *e);
/* The stages holding a model's tied embedding (*table) and head (*head)
 * under the partition first[G + 1] over P ranks, and the table's floats;
 * 0 when no tie crosses stages (describe.c counts the two messages). */
int pipe_tied_stages(const model_t *m, const int *first, int G, int P, int *table, int *head,
                     size_t *len, size_t *off);

/* The driver's evaluate (report.c): train figures summed over the
 * replicas' last stages, the whole model gathered to rank 0 and evaluated
 * there, the pipeline's fields in the report. */
int pipe_evaluate(void *engine, epoch_report_t *r);

/* The two engines (sync.c, async.c). */
int pipe_sync_run(worker_t *w);
int pipe_async_run(worker_t *w);

#endif
