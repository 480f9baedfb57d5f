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
} layer_range_t;

/* Whether layer i is a flatten that aliases its input's out and dout
 * (flatten only reinterprets NHWC memory) instead of having its own. */
int layer_range_is_alias(const layer_range_t *r, int i);
/* Floats of out, dout and scratch (each layer's scratch_len as set) that
 * the range needs for batch samples. */
size_t layer_range_act_floats(const layer_range_t *r, int batch);
/* Points out, dout and scratch of the range's layers into p, which holds
 * layer_range_act_floats(r, batch) floats; returns p past them. */
float *layer_range_assign(const layer_range_t *r, int batch, float *p);
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
