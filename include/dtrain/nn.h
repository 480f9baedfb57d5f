/* nn: layers and the model, a graph of layers over one flat parameter
 * arena and one gradient arena of the same layout (as llm.c does).
 *
 * Activations are NHWC: sample n, row y, column x, channel c is at
 * ((n*H + y)*W + x)*C + c. A convolution is then one GEMM for the whole
 * batch with no transposes. Weights:
 *   dense   weight [out, in] (as PyTorch), bias [out]
 *   conv2d  weight [out_c, kh, kw, in_c], bias [out_c]
 *   local2d weight [out_h, out_w, out_c, kh·kw·in_c], bias [out_h, out_w, out_c]
 *           (locally connected: a filter bank per output position)
 *   batchnorm gamma [c], beta [c]; running mean/var live in the buffer arena
 * Gradients are written (not accumulated) by backward, so no zeroing pass
 * is needed between steps. */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include "dtrain/core.h"

typedef struct { int c, h, w; } shape_t;  /* per sample */
static inline size_t shape_size(shape_t s) { return (size_t)s.c * s.h * s.w; }

typedef enum {
  LAYER_DENSE,
  LAYER_CONV2D,
  LAYER_MAXPOOL,
  LAYER_AVGPOOL,
  LAYER_FLATTEN,
  LAYER_RELU,
  LAYER_TANH,
  LAYER_SIGMOID,
  LAYER_DROPOUT,
  LAYER_BATCHNORM,
  LAYER_ALLGATHER,   /* tensor parallelism's gather of channel shards (inserted, not written) */
  /* sequence models: a sample is T positions of c features, shape {c, 1, T}
   * (NHWC: [T, c] contiguous), so that batch x sequence x features is
   * [n, T, c] and a position-wise product is one GEMM over n·T rows */
  LAYER_EMBEDDING,   /* token ids [n, T] (floats holding integers) -> rows of a [vocab, units] table */
  LAYER_POSEMBED,    /* + a learned [positions, c] table, row t at position t */
  LAYER_LAYERNORM,   /* per position over c features; weight, bias [c] */
  LAYER_GELU,        /* tanh form (GPT-2's, PyTorch's approximate='tanh') */
  LAYER_ATTENTION,   /* causal multi-head self-attention: fused QKV, softmax, projection */
  LAYER_ADD,         /* residual add of two inputs of one shape */
  LAYER_LINEAR,      /* position-wise dense: [n·T, in] -> [n·T, units], weight [units, in] */
  LAYER_LMHEAD,      /* logits [n, T, vocab] = x · Wᵀ, W its own or the embedding's (tied) */
  LAYER_LSTM,        /* torch.nn.LSTM (batch_first): layers stacked, every h_t out */
  LAYER_LOCAL2D,     /* locally connected: a convolution whose filters differ at every position */
  LAYER_ROWGATHER,   /* the bands of split=rows local2d layers gathered whole (inserted) */
  LAYER_KIND_COUNT
} layer_kind_t;

/* Activation fused into a dense or conv2d layer (the model builder fuses
 * "dense; relu" into one layer so bias, ReLU and their backward are one
 * pass over the output). */
typedef enum { ACT_NONE = 0, ACT_RELU } fused_act_t;

/* Tensor parallelism (Megatron-LM's split layers; src/strategy/tensor/):
 * a dense layer split over the tp ranks of a group by its neurons.
 * COLUMN: its output features are split (each rank holds a block of the
 * weight's rows and of the bias); forward needs no communication, backward
 * sums the input gradient over the group (Megatron's "f": identity forward,
 * allreduce backward). ROW: its input features are split (a block of the
 * weight's columns; the bias whole on every rank); forward sums the partial
 * products over the group and then adds the bias and the activation once
 * ("g": allreduce forward, identity backward). Element-wise layers between
 * a COLUMN and a ROW layer run on the shard. NONE: the layer is whole on
 * every rank (replicated; its gradients come out the same on every rank). */
typedef enum { SPLIT_NONE = 0, SPLIT_COLUMN, SPLIT_ROW,
  /* local2d (DistBelief's spatial partition): rank t holds a band of the
   * output rows and the filters of those positions; the input rows its
   * windows reach beyond its own band come from the neighbours (a halo,
   * tp_link_t.exchange), their gradients go back in backward */
  SPLIT_ROWS } split_t;

/* What a model file's split= key asks of a dense or conv2d layer under
 * tensor parallelism (docs/MODEL_FORMAT.md; the planner in
 * src/strategy/tensor/plan.c checks and applies it): UNSET, no key; NONE,
 * whole on every rank of the group; COLUMN, ROW, as split_t; DATA,
 * data-parallel, the batch exchanged after it (the one weird trick);
 * CHANNELS, below. */
typedef enum {
  FILE_SPLIT_UNSET = 0, FILE_SPLIT_NONE, FILE_SPLIT_COLUMN, FILE_SPLIT_ROW, FILE_SPLIT_DATA,
  FILE_SPLIT_CHANNELS, /* conv2d: COLUMN, its shard allgathered where a layer needs every channel */
  FILE_SPLIT_ROWS      /* local2d: SPLIT_ROWS, the bands gathered where a layer needs every row */
} file_split_t;

/* One point-to-point message of a halo exchange (tp_link_t.exchange):
 * count floats sent to (send 1) or received from (send 0) tp rank peer. */
typedef struct {
  int peer, send;
  float *buf;
  size_t count;
} tp_msg_t;

/* A group of ranks a layer sums over: the tensor-parallel group of a split
 * layer, or the data-parallel group of a synchronized batch norm. Its
 * size, this rank's place in it, and the sum over it (a callback, since nn
 * sits below the collectives). A failed sum is sticky: `failed` is set,
 * later sums are skipped, and the caller checks it after the forward or
 * backward pass. */
typedef struct tp_link tp_link_t;
struct tp_link {
  int rank, size;
  int (*allreduce)(tp_link_t *t, float *buf, size_t count);
  /* in place: rank r's block r (count / size floats, count a multiple of
   * size) to every rank; NULL where no layer gathers (batch norm's) */
  int (*allgather)(tp_link_t *t, float *buf, size_t count);
  /* point to point: every message posted at once, then all waited for
   * (a halo exchange with the neighbours); NULL where no layer exchanges */
  int (*exchange)(tp_link_t *t, const tp_msg_t *msgs, int n);
  void *ctx;
  int failed;
  /* What the sums have cost so far, added by the owner's allreduce: the
   * seconds in them and the payload bytes sent and received over the
   * group (model.c charges the differences to the layer that summed). */
  double sec;
  uint64_t sent, received;
};
/* t->allreduce unless a sum has failed before; records a failure. */
void tp_allreduce(tp_link_t *t, float *buf, size_t count);
/* t->allgather likewise. */
void tp_allgather(tp_link_t *t, float *buf, size_t count);
/* t->exchange likewise. */
void tp_exchange(tp_link_t *t, const tp_msg_t *msgs, int n);
/* Block `i` of `count` split into `parts`: the first count % parts blocks
 * hold one more (the same blocks as coll_block). */
void tp_block(int count, int parts, int i, int *off, int *len);
/* U(±bound) values of one worker's [rows, mid, cols] tensor drawn in order
 * from rng, of which rows [r0, r0 + nr) x every mid x cols [c0, c0 + nc)
 * are kept into out ([nr, mid, nc]): a split layer starts as its block of
 * one worker's initial values. */
void layer_uniform_block(rng_t *rng, float bound, size_t rows, size_t mid, size_t cols, size_t r0,
                         size_t nr, size_t c0, size_t nc, float *out);

typedef struct {
  layer_kind_t kind;
  int units;                  /* dense: output features */
  int filters;                /* conv2d: output channels */
  int kernel, stride, pad;    /* conv2d, pools */
  float rate;                 /* dropout: probability of zeroing */
  float eps, momentum;        /* batchnorm (PyTorch meaning: running = (1-m) running + m batch) */
  fused_act_t act;
  char name[32];              /* optional node name (for input= references) */
  int input;                  /* index of the node feeding this one; -1 = model input */
  int line;                   /* line in the model file (for messages) */
  int index;                  /* position in the model file: tensors are layers.<index>.* */
  int input2;                 /* add: the second input's node (with=NAME); -1 = model input */
  int heads;                  /* attention: heads (dividing the width) */
  int num_layers;             /* lstm: layers stacked (layers=N) */
  int vocab;                  /* embedding, lmhead: tokens */
  int positions;              /* posembed: rows of the table (the longest sequence) */
  int tie;                    /* lmhead: 1 + the node of the embedding whose table it reads
                               * (tie=NAME, weight tying); 0: a table of its own */
  split_t split;              /* tensor parallelism: set by the planner */
  file_split_t file_split;    /* the file's split= key, which the planner follows */
} layer_spec_t;

typedef struct layer layer_t;

/* One collective a layer calls itself in a training pass: tensor
 * parallelism's sums and gathers over its group (tp), synchronized batch
 * norm's sums over the data-parallel group (bn): an allreduce, or an
 * allgather (allgather_ring), of `count` floats. The layers' own code asks
 * for these before it calls them, so a step's description reads the same
 * numbers the layer sends. */
typedef struct {
  int bn;      /* 1: over the batch norm's group, 0: over the tensor-parallel group */
  int gather;  /* 1: an allgather, 0: an allreduce */
  size_t count;
  /* halo 1: not a collective but a message each way with tp rank peer of
   * the group: count floats sent to it, received floats from it */
  int halo, peer;
  size_t received;
} layer_sum_t;
enum { LAYER_MAX_SUMS = 2 };

/* What a layer kind implements. setup() checks the input shape, sets the
 * output shape (in_shape -> out_shape), the parameter/buffer/scratch sizes; the model then assigns
 * the views (w, b, dw, db, running_*, scratch, out, dout) before any
 * other call. */
typedef struct {
  const char *name;
  int (*setup)(layer_t *l, int max_batch);
  void (*init)(layer_t *l, rng_t *rng);        /* parameters (PyTorch's defaults) */
  /* x: [n, in]; writes l->out [n, out]. train != 0: batch statistics,
   * dropout masks drawn from rng. */
  void (*forward)(layer_t *l, const float *x, int n, int train, rng_t *rng);
  /* Reads l->dout [n, out] (and l->out, x as needed); writes dw/db and, when
   * dx != NULL, dx [n, in]. May overwrite l->dout. */
  void (*backward)(layer_t *l, const float *x, float *dx, int n);
  /* Optional: dx alone, after backward(l, x, NULL, n) has written dw/db, so
   * that the parameter gradients can leave (model_backward's ready) while
   * dx is computed. NULL: backward does both. */
  void (*backward_input)(layer_t *l, float *dx, int n);
  /* Optional: the collectives of a training forward (backward 0) or
   * backward (backward 1; has_dx: its input gradient is computed) on n
   * samples, in the order the layer calls them, into out (room for
   * LAYER_MAX_SUMS); returns how many. NULL: none. */
  int (*sums)(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out);
} layer_ops_t;

struct layer {
  layer_spec_t spec;
  const layer_ops_t *ops;
  shape_t in_shape, out_shape;     /* per-sample shapes */
  size_t param_off, param_len;     /* range in the parameter arena */
  size_t nweight;                  /* first nweight params are w, the rest b */
  size_t buf_off, buf_len;         /* range in the buffer arena */
  size_t scratch_len;              /* floats of per-layer scratch for max_batch */
  float *w, *b, *dw, *db;          /* views into params / grads */
  float grad_beta;                 /* dense, conv2d: 1 adds the gradients to dw, db (the
                                    * weight GEMM's beta), 0 writes them; others write */
  float *running_mean, *running_var;
  float *scratch;
  float *out, *dout;               /* [max_batch, out] */
  /* Tensor parallelism: the channels (c) of the input and output in the
   * one-worker model and where this rank's shard of them begins; in_shape
   * and out_shape are the shard's. Unsplit: full == c, off == 0. */
  int in_full, in_off, out_full, out_off;
  /* The same for rows (split=rows local2d layers): the height of the input
   * and output in the one-worker model and where this rank's band of rows
   * begins; in_shape.h and out_shape.h are the band's. Unsplit: hfull == h,
   * hoff == 0. */
  int in_hfull, in_hoff, out_hfull, out_hoff;
  tp_link_t *tp;                   /* the group (NULL: no tensor parallelism) */
  tp_link_t *bn_sync;              /* batchnorm: statistics over this group (NULL: local) */
  int tp_partial_dx;               /* COLUMN: leave the input gradient partial, the caller
                                    * sums it (the one weird trick's reduce-scatter) */
  int cols_bf16;                   /* conv2d: the last forward left its columns in bf16 */
  double forward_sec;              /* seconds its forward passes took since it was built
                                    * (TicTac's timings: src/strategy/ps/ps_schedule.c) */
  uint64_t rng_skip;               /* dropout: draws of the stream to pass before the next
                                    * training forward's mask (a pipeline micro-batch takes
                                    * its place in one worker's stream); 0: none */
  /* A graph, not only a chain: add's second input (x2, read in forward)
   * and where its gradient goes (dx2), set by the model before each call.
   * A node read by two layers gets its gradient from both: the later
   * reader (first in backward) writes it, the earlier adds to it (dx_add
   * for the input, dx2_add for the second input), as layers that support
   * it (the sequence layers, layer_kind_adds_dx) do. */
  const float *x2;
  float *dx2;
  shape_t in2_shape;
  int dx_add, dx2_add;
  int tied;                        /* embedding: an lmhead reads its table and writes its
                                    * gradient first, so backward adds to dw */
  /* Recomputation (--recompute; src/nn/recompute.c): a segment [s, e] of
   * the layers keeps only its input and the output of e. On e,
   * recompute_from = 1 + s (0: no segment ends here); the layers of the
   * segment in_workspace hold out, dout and scratch in a workspace that
   * every segment shares, rebuilt by a forward before the segment's
   * backward. */
  int recompute_from, in_workspace;
};

const layer_ops_t *layer_ops_for(layer_kind_t kind);
const char *layer_kind_name(layer_kind_t kind);
/* Whether the kind's backward honours dx_add (and add's dx2_add). */
int layer_kind_adds_dx(layer_kind_t kind);
int layer_kind_parse(const char *name, layer_kind_t *out);

/* A named tensor inside an arena (a parameter or a buffer). dims is the
 * one-worker shape (what a checkpoint holds); under tensor parallelism the
 * arena holds a block of it: seen as [R, mid, full_cols] (R = the dims'
 * product / (mid·full_cols), usually dims[0]), rows [row0, row0 + rows)
 * and, of each of their mid runs, columns [col0, col0 + cols), stored as
 * [rows, mid, cols] (a conv weight [out, kh, kw, in] split by input
 * channels is mid = kh·kw runs of in; attention's qkv.weight [3c, c] split
 * by heads is R = 3 rows of c·c, each rank's heads a run of columns in
 * each of q, k and v). Unsplit: the whole tensor, len = rows x mid x cols. */
typedef struct {
  char name[48];            /* "layers.0.weight", PyTorch style */
  size_t off, len;          /* the range in the arena (this rank's block) */
  int ndim, dims[4];
  int layer;
  size_t row0, rows, mid, col0, cols, full_cols;
} tensor_info_t;
/* Floats of the whole (one-worker) tensor. */
size_t tensor_full_len(const tensor_info_t *t);
/* Copies t's block between the whole tensor `full` and the arena block
 * `block`: to_full != 0 writes full's block from block, else block from full. */
void tensor_block_copy(const tensor_info_t *t, float *full, float *block, int to_full);

typedef struct {
  int nlayers;
  layer_spec_t *layers;
  shape_t input;            /* c = h = w = 0: taken from the data */
  char source[256];         /* file name or "builtin:mlp" for messages */
  tp_link_t *tp;            /* layers with split != SPLIT_NONE talk to it (NULL: none) */
  tp_link_t *bn_sync;       /* --sync-bn: batch norm's statistics summed over it (NULL: local) */
  int recompute;            /* recompute_t: what the backward pass recomputes */
} model_spec_t;

/* --recompute (GPipe's re-materialisation, Chen et al. 2016): NONE keeps
 * every activation for the backward pass; BLOCKS keeps each transformer
 * block's input (the residual stream) and recomputes the block; FULL keeps
 * only the input of the model or of each pipeline stage (per micro-batch)
 * and recomputes the rest. Recomputation changes no bit. */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_BLOCKS, RECOMPUTE_FULL } recompute_t;
/* "none", "blocks", "full" -> *out; -1 (no message) otherwise. */
int recompute_parse(const char *s, int *out);
const char *recompute_name(int mode);
/* Bytes of activation arenas (out, dout, scratch, the loss's
 * probabilities, a stage's inputs) this thread's training passes have
 * held at once at the most: an arena counts from its first training
 * forward until it is freed. (Each rank of the local transport is a
 * thread.) */
size_t nn_activation_peak_bytes(void);
/* The peak from now: what is held now (after a profiling pass's stages
 * are freed). */
void nn_activation_reset_peak(void);

/* What the layers of one kind cost in forward and backward passes: the
 * seconds they computed, and the seconds and bytes of the sums over their
 * groups (tensor parallelism's, synchronized batch norm's), which are not
 * compute. */
typedef struct {
  double compute_sec, comm_sec;
  uint64_t bytes_sent, bytes_received;
} layer_cost_t;

typedef struct {
  int nlayers;
  layer_t *layers;
  shape_t input;
  int nclasses;
  int positions;            /* predictions a sample: T for a sequence model (the last layer
                             * gives [T, nclasses]), else 1 */
  int max_batch;
  size_t nparams, nbuffers;
  float *params, *grads, *buffers;
  int ntensors, nbuf_tensors;
  tensor_info_t *tensors, *buf_tensors;
  float *probs;             /* softmax of the logits [max_batch, nclasses] */
  void *act_arena;          /* one allocation for all activations and scratch */
  size_t act_bytes;         /* its size */
  int act_counted;          /* counted in nn_activation_peak_bytes (a training forward ran) */
  int recompute;            /* recompute_t */
  int ws_owner;             /* the segment whose activations the workspace holds (its last
                             * layer), -1: none */
  tp_link_t *tp;            /* tensor parallelism's group (from the spec), or NULL */
  tp_link_t *bn_sync;       /* synchronized batch norm's group (from the spec), or NULL */
  layer_cost_t cost[LAYER_KIND_COUNT]; /* by layer kind, every pass of the model and of its
                                        * stages since it was built (callers take differences
                                        * or clear it) */
} model_t;

/* Model text format (docs/MODEL_FORMAT.md): one layer a line,
 * "kind key=value ...", '#' comments. */
int model_spec_parse(const char *text, const char *source, model_spec_t *spec);
int model_spec_builtin(const char *name, model_spec_t *spec);   /* mlp, lenet */
/* name_or_path: a builtin name or a file path. */
int model_spec_load(const char *name_or_path, model_spec_t *spec);
void model_spec_free(model_spec_t *spec);

/* Builds the layers, checks the shapes, allocates the arenas once. */
int model_build(const model_spec_t *spec, shape_t input, int nclasses, int max_batch,
                model_t **out);
void model_free(model_t *m);
void model_init_params(model_t *m, uint64_t seed);

/* Forward pass; returns the logits [n, nclasses] (the last layer's out). */
const float *model_forward(model_t *m, const float *x, int n, int train, rng_t *rng);
/* The same, calling wait(ctx, i) before layer i reads its parameters
 * (data parallelism that applies a step's update during the next forward
 * pass waits there for layer i's gradients to be summed). */
typedef void (*param_wait_fn)(void *ctx, int layer);
const float *model_forward_waiting(model_t *m, const float *x, int n, int train, rng_t *rng,
                                   param_wait_fn wait, void *ctx);
/* Softmax cross-entropy of the last forward's logits: returns the summed
 * loss over the n samples, and writes d(loss_sum / denom)/d(logits) into the
 * last layer's dout. denom is the number of samples the gradient is
 * averaged over (n for one worker; the global batch for data parallelism).
 * A sequence model (positions T > 1) predicts every position: labels are
 * [n, T], a sample's loss is the mean over its T positions (nats per
 * token), the gradient the mean over the denom·T tokens, and *correct the
 * correct predictions / T (rounded down). */
double model_loss(model_t *m, const int32_t *labels, int n, int denom, double *correct);
/* A rank with no sample in a step, under synchronized batch norm: the
 * group's sums with nothing added, in the order a forward and a backward
 * pass would call them, so the others do not wait. */
void model_bn_sync_idle(model_t *m);
/* The collectives layer i calls itself in a training pass on n samples
 * (layer_ops_t.sums), in a pass over layers first.. of m whose caller
 * wants the gradient of their input (range_dx) or not: what
 * layer_range_backward hands each layer decides whether it computes its
 * input gradient. Returns how many (out: room for LAYER_MAX_SUMS). */
int model_layer_sums(const model_t *m, int i, int n, int backward, int first, int range_dx,
                     layer_sum_t *out);
/* Backward pass. After layer i's parameter gradients are final, calls
 * ready(ctx, i) if given (data parallelism starts bucket allreduces there),
 * before its input gradient where the layer computes that apart. */
typedef void (*grad_ready_fn)(void *ctx, int layer);
void model_backward(model_t *m, const float *x, int n, grad_ready_fn ready, void *ctx);
/* What layer i read in the last forward pass: the batch x, or the output
 * of the layer it follows (sufficient factors need a dense layer's X). */
const float *model_layer_input(const model_t *m, int i, const float *x);

/* ---- pipeline stages (src/nn/stage.c) -------------------------------------
 * A stage is the layers [first, last] of a model (indices into
 * model_t.layers, after fusion: "dense; relu" is one layer), run forward
 * and backward on their own: forward takes the stage's input activation
 * and gives its output; backward takes the gradient of that output and
 * gives the gradient of the input. The loss belongs to the stage that ends
 * the model. Each layer runs the model's own per-layer code, so stages run
 * in sequence over one micro-batch give model_forward + model_loss +
 * model_backward bit for bit.
 *
 * Activations: a stage keeps up to max_micro micro-batches of up to
 * micro_batch samples in flight, each with its own copy of the layers'
 * out, dout and scratch (dropout masks, pooling argmax, batch statistics,
 * im2col columns), and an input buffer: one allocation in stage_new, none
 * after. So a schedule may run the forwards of several micro-batches
 * before their backwards (GPipe, 1F1B), in any order, as long as each
 * backward follows a forward of the same micro-batch. The stage never
 * touches the model's own activations: model_forward and several stages
 * of one model may be used side by side.
 *
 * Parameters, gradients and buffers stay in the model's arenas; a stage's
 * are the contiguous ranges [param_off, param_off + param_len) of
 * params/grads and [buf_off, buf_off + buf_len) of buffers (batch-norm
 * running statistics, which each training forward updates), so a pipeline
 * allreduces or steps exactly that range.
 *
 * Gradients over micro-batches: layers write their gradients, so
 * stage_backward takes `accumulate`: 0 writes the stage's gradients (the
 * first backward of a step), 1 adds to them (the others, in a fixed order
 * for bitwise reproducibility; dense and conv2d add in place, a GEMM with
 * beta = 1, the other layers through one layer's accumulator). The
 * average is the loss's: pass the whole
 * batch (the sum of the micro-batch sizes) as stage_loss's denom, and the
 * summed gradient is the batch mean.
 *
 * Cuts: a stage boundary before layer c (0 < c < nlayers) is valid when one
 * activation crosses it: every layer from c on reads layer c - 1 or a later
 * one, never an earlier layer or the model input. */
typedef struct stage_mb stage_mb_t;   /* per micro-batch state (private) */
typedef struct {
  model_t *model;
  int first, last;             /* layers [first, last] of model->layers */
  int ends_model;              /* last is the model's last layer: stage_loss applies */
  int max_micro, micro_batch;  /* micro-batches in flight, samples in each */
  size_t in_size, out_size;    /* floats per sample of the input and output activation */
  size_t param_off, param_len; /* the stage's range of model->params and model->grads */
  size_t buf_off, buf_len;     /* the stage's range of model->buffers */
  /* private */
  stage_mb_t *mb;
  float *arena;                /* activations, scratch and inputs of every micro-batch */
  float *probs;                /* [micro_batch, nclasses] when ends_model */
  float *gacc;                 /* one layer's gradients, while accumulating */
  layer_cost_t *cost;          /* where its passes are metered [LAYER_KIND_COUNT]:
                                * model->cost, or a thread's own (stage_meter_into) */
  size_t act_bytes;            /* the arena less gacc: activations (nn_activation_peak_bytes) */
  int act_counted;
  float *ws;                   /* --recompute: the workspace the micro-batches share */
  int ws_owner;                /* mb x nlayers + the segment's last layer it holds; -1: none */
} stage_t;

/* Refuses an invalid cut with a line naming the layer that reads across it
 * and the valid cuts. */
int stage_new(model_t *m, int first, int last, int max_micro, int micro_batch, stage_t **out);
void stage_free(stage_t *s);
/* Forward of n samples (1..micro_batch) of micro-batch mb (0..max_micro-1)
 * from x [n, in_size]; *y (if y != NULL) = its output [n, out_size], which
 * stays valid until the next forward of mb. x must stay unchanged until
 * the backward of mb (stage_input(s, mb) is a buffer for it). A forward
 * replaces whatever mb held. train and rng as model_forward. */
int stage_forward(stage_t *s, int mb, const float *x, int n, int train, rng_t *rng,
                  const float **y);
/* Only for a stage that ends the model: model_loss for mb's logits, with
 * d(loss_sum / denom)/d(logits) into stage_output_grad(s, mb). *loss_sum
 * (summed over mb's samples) and *correct may be NULL. */
int stage_loss(stage_t *s, int mb, const int32_t *labels, int denom, double *loss_sum,
               double *correct);
/* Backward of micro-batch mb, which must have had a forward since its last
 * backward. dy [n, out_size]: the gradient of the stage's output; NULL
 * when stage_output_grad(s, mb) already holds it (stage_loss wrote it, or
 * it was received there). dx [n, in_size]: where the gradient of the
 * stage's input goes; NULL: not computed (the first stage). accumulate: 0
 * writes the stage's range of model->grads, 1 adds to it. ready(ctx, i),
 * if given, after layer i's gradients in model->grads are final for this
 * call, before its input gradient where the layer computes that apart. */
int stage_backward(stage_t *s, int mb, const float *dy, float *dx, int accumulate,
                   grad_ready_fn ready, void *ctx);
/* mb's buffers: input [micro_batch, in_size] (for the caller to fill and
 * pass as x), output [micro_batch, out_size] of its last forward, and the
 * gradient of that output (stage_loss writes it; a pipeline may receive
 * into it). NULL with dt_error set when mb is out of range. */
/* Weight versions (PipeDream's stashing, 2BW's two buffers): from now
 * on, mb's forward and backward read the stage's parameters from w, a copy
 * of its range [param_off, param_off + param_len) of model->params; NULL:
 * from the model (the default). Gradients still go to model->grads. */
int stage_use_weights(stage_t *s, int mb, const float *w);
/* Per-thread gradients (Project Adam's worker threads): from now on, a
 * backward of mb with accumulate 0 writes the stage's gradients into g, a
 * copy of its range [param_off, param_off + param_len) of model->grads,
 * not into model->grads; NULL: the model's (the default). */
int stage_use_grads(stage_t *s, int mb, float *g);
/* The stage's passes metered into cost[LAYER_KIND_COUNT] instead of
 * model->cost (a thread's own: the model's meters are not shared). */
void stage_meter_into(stage_t *s, layer_cost_t *cost);
/* Layer i's input and output gradient in mb's activations (i in the
 * stage's range), as model_layer_input and layer.dout are the model's;
 * valid after mb's forward (input) and backward (dout) until the next. */
const float *stage_layer_input(const stage_t *s, int mb, int i);
const float *stage_layer_dout(const stage_t *s, int mb, int i);
float *stage_input(stage_t *s, int mb);
const float *stage_output(const stage_t *s, int mb);
float *stage_output_grad(stage_t *s, int mb);

/* The valid cuts of a model: writes each c (a stage may start at layer c,
 * 0 < c < nlayers) into cuts (room for nlayers - 1) in increasing order;
 * returns their number. */
int model_stage_cuts(const model_t *m, int *cuts);
/* Splits the model into P stages at valid cuts, balanced by a cost per
 * sample: multiply-adds of dense and local2d (weights) and conv2d (weights × output
 * pixels) layers, output size for the others. The largest stage cost is
 * the smallest possible (among equal splits, each cut from the last back
 * as early as it can be). first[p] = the first
 * layer of stage p (first[0] = 0; stage p ends at first[p+1] - 1, the last at
 * nlayers - 1). P must be 1 .. number of valid cuts + 1. */
int model_split_stages(const model_t *m, int P, int *first);
/* The same with a cost of each layer given (cost[nlayers], e.g. measured
 * seconds); NULL: the multiply-add model above. */
int model_split_costs(const model_t *m, int P, const double *cost, int *first);

/* Softmax cross-entropy on its own (used by model_loss and its test):
 * logits [n,k] -> probs, returns summed loss; dlogits = (p - onehot)/denom. */
/* The same over a sequence model's [n, positions] predictions: returns the
 * summed per-sample means (model_loss's convention); dlogits may be NULL. */
double softmax_xent_seq(const float *logits, const int32_t *labels, int n, int positions, int k,
                        int denom, float *probs, float *dlogits, double *correct);
double softmax_xent(const float *logits, const int32_t *labels, int n, int k, int denom,
                    float *probs, float *dlogits, int *correct);
#endif
