/* optim: optimizers and learning-rate schedules. Optimizer state lives in
 * arenas of the same layout as the parameters, so a parameter-server shard
 * or a pipeline stage steps a range of them with the same code.
 * Update rules follow PyTorch's torch.optim exactly (weight decay as L2
 * added to the gradient; AdamW's decoupled, w *= 1 - lr·wd first), so
 * results can be compared with it. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include "dtrain/core.h"

typedef enum { OPTIM_SGD, OPTIM_ADAM, OPTIM_RMSPROP, OPTIM_LARS, OPTIM_ADAMW, OPTIM_KIND_COUNT } optim_kind_t;

typedef struct {
  optim_kind_t kind;
  float momentum;       /* sgd, rmsprop, lars */
  int nesterov;         /* sgd */
  float weight_decay;
  float beta1, beta2;   /* adam, adamw (0.9, 0.999) */
  float alpha;          /* rmsprop smoothing (0.99) */
  float eps;            /* adam 1e-8, rmsprop 1e-8 */
  float trust;          /* lars trust coefficient eta (0.001) */
} optim_config_t;

void optim_config_default(optim_kind_t kind, optim_config_t *cfg);
int optim_kind_parse(const char *name, optim_kind_t *out);   /* error lists the choices */
const char *optim_kind_name(optim_kind_t kind);

/* A contiguous range of the arena treated as one tensor (LARS computes its
 * trust ratio per segment). */
typedef struct { size_t off, len; } optim_segment_t;

typedef struct {
  optim_config_t cfg;
  size_t n;                 /* arena length the state covers */
  int nstate;               /* state arenas in use (0..2) */
  float *state[2];          /* sgd/lars: velocity; adam: m, v; rmsprop: square avg, momentum buf */
  float *state_own[2];      /* the optimizer's arenas; state may point elsewhere */
  int64_t steps;            /* steps taken (Adam's bias correction) */
  /* AdamW: ranges of the arena its weight decay skips (norms, biases),
   * sorted by offset; none: it decays everything */
  optim_segment_t *no_decay;
  int nno_decay;
} optimizer_t;

int optim_new(const optim_config_t *cfg, size_t n, optimizer_t **out);
void optim_free(optimizer_t *o);
/* Keeps the state in `arena` (nstate x n floats, owned by the caller;
 * ranks sharing memory step one copy), or back in the optimizer's own
 * arenas with NULL. */
void optim_use_state(optimizer_t *o, float *arena);
const char *optim_state_name(const optimizer_t *o, int i);
/* AdamW's exemptions from weight decay: the ranges (sorted by offset, not
 * overlapping) are copied; the other rules ignore them. */
int optim_set_no_decay(optimizer_t *o, const optim_segment_t *ranges, int n);   /* "momentum_buffer", "exp_avg", ... */

/* One step over the given segments of params/grads (offsets index the
 * whole arena, and so the state). Increments o->steps once per call. */
void optim_step(optimizer_t *o, float *params, const float *grads,
                const optim_segment_t *segs, int nsegs, float lr);
/* The same step in parts, the same bits: optim_begin_step once, then
 * optim_step_segments on each part (an update applied layer by layer while
 * the next forward pass runs). LARS needs each segment to be a whole
 * tensor, in parts as in one call. */
void optim_begin_step(optimizer_t *o);
void optim_step_segments(optimizer_t *o, float *params, const float *grads,
                         const optim_segment_t *segs, int nsegs, float lr);

/* Learning-rate schedules, per step. */
typedef enum { LR_CONSTANT, LR_STEP, LR_COSINE, LR_KIND_COUNT } lr_kind_t;

typedef struct {
  lr_kind_t kind;
  double base;
  int64_t total_steps;      /* cosine reaches 0 here */
  int64_t warmup_steps;     /* linear warm-up from base/warmup_steps to base */
  int64_t step_size;        /* step: multiply by gamma every step_size steps */
  double gamma;
} lr_schedule_t;

int lr_kind_parse(const char *name, lr_kind_t *out);
const char *lr_kind_name(lr_kind_t kind);
double lr_at(const lr_schedule_t *s, int64_t step);   /* step counts from 0 */
#endif
