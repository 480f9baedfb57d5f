/* Internal to src/nn: the per-layer code that the model (model.c) and a
 * pipeline stage (stage.c) share, so that a stage runs exactly the
 * model's arithmetic over its range of layers.
 *
 * A range is layers [first, last] of an array indexed like
 * model_t.layers: the model's own layers, or a stage's copies of them for
 * one micro-batch (each copy with its own out, dout and scratch). A layer
 * whose input lies before first (the model input, or the layer before the
 * cut) reads the range's input x; any other reads layers[input].out. */
#ifndef DTRAIN_NN_MODEL_INTERNAL_H
#define DTRAIN_NN_MODEL_INTERNAL_H

#include "dtrain/nn.h"

typedef struct {
  layer_t *layers;   /* indexed like model_t.layers */
  int first, last;   /* the layers walked, inclusive */
  int model_last;    /* the model's last layer: never an alias (the loss writes its dout) */
  int alias_x;       /* 1: a flatten reading x aliases it (the model); 0: it copies x into
                      * storage of its own (a stage, whose output and input gradient must
                      * live in the stage) */
  layer_cost_t *cost; /* each layer's time and sums are added to cost[kind] */
  int *ws_owner;     /* --recompute: which segment the shared workspace holds (owner_base +
                      * its last layer; -1 none); NULL: no recomputation */
  int owner_base;
} layer_range_t;

/* Whether layer i is a flatten that aliases its input's out and dout
 * (flatten only reinterprets NHWC memory) instead of having its own. */
int layer_range_is_alias(const layer_range_t *r, int i);
/* Floats of out, dout and scratch (each layer's scratch_len as set) that
 * the range's layers outside the recompute workspace need for batch
 * samples (all of them without recomputation). */
size_t layer_range_act_floats(const layer_range_t *r, int batch);
/* Floats of the shared workspace: the largest segment's in_workspace
 * layers (0 without recomputation). */
size_t layer_range_ws_floats(const layer_range_t *r, int batch);
/* Points out, dout and scratch of the range's layers into p, which holds
 * layer_range_act_floats(r, batch) floats, and of the in_workspace layers
 * into ws (each segment from ws on); returns p past them. */
float *layer_range_assign(const layer_range_t *r, int batch, float *p, float *ws);
/* recompute.c: marks the segments of the range's layers under mode
 * (recompute_t), the model's blocks found in all (the model's layers,
 * every one set up): sets recompute_from and in_workspace on layers [first,
 * last]. Refuses (a line naming --recompute) a model with no transformer
 * block under BLOCKS, or a batch norm inside a segment (its running
 * statistics would be updated twice). */
int layer_range_plan_recompute(const layer_range_t *r, const layer_t *all, int mode);
/* recompute.c: an arena of bytes starts or stops counting in
 * nn_activation_peak_bytes. */
void nn_activation_count(size_t bytes, int add);
/* model_forward_waiting over the range: wait(ctx, i) before layer i reads
 * its parameters. */
void layer_range_forward(const layer_range_t *r, const float *x, int n, int train, rng_t *rng,
                         param_wait_fn wait, void *ctx);
/* model_backward over the range: reads layers[last].dout, writes dw/db of
 * every layer and, when dx != NULL, the gradient of the range's input x
 * into dx. ready(ctx, i) after layer i's parameter gradients are written,
 * before its input gradient where the layer computes that apart. */
void layer_range_backward(const layer_range_t *r, const float *x, float *dx, int n,
                          grad_ready_fn ready, void *ctx);

/* batchnorm.c: a synchronized batch norm's sums with nothing added (a
 * rank with no sample), for its forward (backward = 0) or its backward
 * (has_dx: where it computes its input gradient). */
void bn_sync_idle(layer_t *l, int backward, int has_dx);

#endif
