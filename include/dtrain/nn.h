/* nn: layers and the model, a graph of layers over one flat parameter
 * arena and one gradient arena of the same layout (as llm.c does).
 *
 * Activations are NHWC: sample n, row y, column x, channel c is at
 * ((n*H + y)*W + x)*C + c. A convolution is then one GEMM for the whole
 * batch with no transposes. Weights:
 *   dense   weight [out, in] (as PyTorch), bias [out]
 *   conv2d  weight [out_c, kh, kw, in_c], bias [out_c]
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
  LAYER_KIND_COUNT
} layer_kind_t;

/* Activation fused into a dense or conv2d layer (the model builder fuses
 * "dense; relu" into one layer so bias, ReLU and their backward are one
 * pass over the output). */
typedef enum { ACT_NONE = 0, ACT_RELU } fused_act_t;

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
} layer_spec_t;

typedef struct layer layer_t;

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
  float *running_mean, *running_var;
  float *scratch;
  float *out, *dout;               /* [max_batch, out] */
};

const layer_ops_t *layer_ops_for(layer_kind_t kind);
const char *layer_kind_name(layer_kind_t kind);
int layer_kind_parse(const char *name, layer_kind_t *out);

/* A named tensor inside an arena (a parameter or a buffer). */
typedef struct {
  char name[48];            /* "layers.0.weight", PyTorch style */
  size_t off, len;
  int ndim, dims[4];
  int layer;
} tensor_info_t;

typedef struct {
  int nlayers;
  layer_spec_t *layers;
  shape_t input;            /* c = h = w = 0: taken from the data */
  char source[256];         /* file name or "builtin:mlp" for messages */
} model_spec_t;

typedef struct {
  int nlayers;
  layer_t *layers;
  shape_t input;
  int nclasses;
  int max_batch;
  size_t nparams, nbuffers;
  float *params, *grads, *buffers;
  int ntensors, nbuf_tensors;
  tensor_info_t *tensors, *buf_tensors;
  float *probs;             /* softmax of the logits [max_batch, nclasses] */
  void *act_arena;          /* one allocation for all activations and scratch */
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
 * averaged over (n for one worker; the global batch for data parallelism). */
double model_loss(model_t *m, const int32_t *labels, int n, int denom, int *correct);
/* Backward pass. After layer i's parameter gradients are final, calls
 * ready(ctx, i) if given (data parallelism starts bucket allreduces there),
 * before its input gradient where the layer computes that apart. */
typedef void (*grad_ready_fn)(void *ctx, int layer);
void model_backward(model_t *m, const float *x, int n, grad_ready_fn ready, void *ctx);

/* Softmax cross-entropy on its own (used by model_loss and its test):
 * logits [n,k] -> probs, returns summed loss; dlogits = (p - onehot)/denom. */
double softmax_xent(const float *logits, const int32_t *labels, int n, int k, int denom,
                    float *probs, float *dlogits, int *correct);
#endif
