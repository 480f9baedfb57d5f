/* Optimizers: SGD (momentum, Nesterov), Adam, RMSProp, LARS, with the update
 * rules of PyTorch 1.13 torch.optim (weight decay as L2 added to the
 * gradient). State arenas have the layout of the parameter arena, so a
 * segment [off, off + len) indexes params, grads and state alike. */
#include "dtrain/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[OPTIM_KIND_COUNT] = {"sgd", "adam", "rmsprop", "lars", "adamw"};

const char *optim_kind_name(optim_kind_t kind) { return name_of(kind, kind_names, OPTIM_KIND_COUNT); }

int optim_kind_parse(const char *name, optim_kind_t *out) {
  int k = name_index(name, kind_names, OPTIM_KIND_COUNT);
  if (k >= 0) return *out = (optim_kind_t)k, 0;
  return dt_error("unknown optimizer '%s' (expected sgd, adam, adamw, rmsprop, lars)", name ? name : "");
}

/* PyTorch's defaults, except LARS (not in torch.optim), which takes the
 * momentum and trust coefficient of You et al. 2017. */
void optim_config_default(optim_kind_t kind, optim_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind;
  cfg->beta1 = 0.9f;
  cfg->beta2 = 0.999f;
  cfg->alpha = 0.99f;
  cfg->eps = 1e-8f;
  cfg->trust = 0.001f;
  if (kind == OPTIM_LARS) cfg->momentum = 0.9f;
  if (kind == OPTIM_ADAMW) cfg->weight_decay = 0.01f; /* torch.optim.AdamW's */
}

/* lo <= v < hi (or <= hi when hi_inclusive), and finite. */
static int check_range(const optim_config_t *cfg, const char *field, float v, double lo,
                       double hi, int hi_inclusive) {
  int ok = isfinite(v) && v >= lo && (hi_inclusive ? v <= hi : v < hi);
  if (ok) return 0;
  return dt_error("optimizer %s: %s = %g is out of range (expected %g <= %s %s %g)",
                  optim_kind_name(cfg->kind), field, (double)v, lo, field,
                  hi_inclusive ? "<=" : "<", hi);
}

static int config_check(const optim_config_t *c) {
  if (c->kind < 0 || c->kind >= OPTIM_KIND_COUNT)
    return dt_error("optimizer: unknown kind %d (expected sgd, adam, adamw, rmsprop, lars)", (int)c->kind);
  DT_TRY(check_range(c, "weight_decay", c->weight_decay, 0, INFINITY, 1));
  /* sgd's may be negative (asynchronous training: --implicit-momentum) */
  if (c->kind == OPTIM_SGD && !(isfinite(c->momentum) && c->momentum > -1 && c->momentum < 1))
    return dt_error("optimizer sgd: momentum = %g is out of range (expected -1 < momentum < 1)",
                    (double)c->momentum);
  int adam = c->kind == OPTIM_ADAM || c->kind == OPTIM_ADAMW;
  if (!adam && c->kind != OPTIM_SGD)
    DT_TRY(check_range(c, "momentum", c->momentum, 0, 1, 0));
  if (c->nesterov && (c->kind != OPTIM_SGD || c->momentum <= 0))
    return dt_error("optimizer %s: nesterov needs sgd with momentum > 0",
                    optim_kind_name(c->kind));
  if (adam) {
    DT_TRY(check_range(c, "beta1", c->beta1, 0, 1, 0));
    DT_TRY(check_range(c, "beta2", c->beta2, 0, 1, 0));
  }
  if (c->kind == OPTIM_RMSPROP) DT_TRY(check_range(c, "alpha", c->alpha, 0, 1, 0));
  if (adam || c->kind == OPTIM_RMSPROP)
    DT_TRY(check_range(c, "eps", c->eps, 0, INFINITY, 1));
  if (c->kind == OPTIM_LARS) DT_TRY(check_range(c, "trust", c->trust, 0, INFINITY, 1));
  return 0;
}

/* How many state arenas a rule keeps: momentum-free SGD keeps none, as in
 * PyTorch, so its checkpoints carry no state either. */
static int state_count(const optim_config_t *c) {
  switch (c->kind) {
  case OPTIM_SGD: return c->momentum != 0 ? 1 : 0;
  case OPTIM_ADAM: return 2;
  case OPTIM_ADAMW: return 2;
  case OPTIM_RMSPROP: return c->momentum > 0 ? 2 : 1;
  case OPTIM_LARS: return 1;
  default: return 0;
  }
}

int optim_new(const optim_config_t *cfg, size_t n, optimizer_t **out) {
  *out = NULL;
  DT_TRY(config_check(cfg));
  optimizer_t *o = calloc(1, sizeof *o);
  if (!o) return dt_error("optimizer %s: out of memory", optim_kind_name(cfg->kind));
  o->cfg = *cfg;
  o->n = n;
  o->nstate = state_count(cfg);
  for (int i = 0; i < o->nstate; i++)
    /* mapped: a rank stepping only its blocks (--shard-optimizer, ZeRO-1)
     * holds only their state, as the method means */
    if (!(o->state[i] = o->state_own[i] = dt_map_floats(n))) {
      optim_free(o);
      return dt_error_prefix("optimizer %s state: ", optim_kind_name(cfg->kind));
    }
  *out = o;
  return 0;
}

void optim_free(optimizer_t *o) {
  if (!o) return;
  for (int i = 0; i < 2; i++) dt_unmap_floats(o->state_own[i], o->n);
  free(o->no_decay);
  free(o);
}

void optim_use_state(optimizer_t *o, float *arena) {
  for (int i = 0; i < o->nstate; i++) o->state[i] = arena ? arena + (size_t)i * o->n : o->state_own[i];
}

const char *optim_state_name(const optimizer_t *o, int i) {
  if (!o || i < 0 || i >= o->nstate) return NULL;
  switch (o->cfg.kind) {
  case OPTIM_ADAM:
  case OPTIM_ADAMW: return i == 0 ? "exp_avg" : "exp_avg_sq";
  case OPTIM_RMSPROP: return i == 0 ? "square_avg" : "momentum_buffer";
  default: return "momentum_buffer";
  }
}

/* ---- the rules, one segment each ----------------------------------------
 * Written element-wise in PyTorch's operation order so that float results
 * agree with it to rounding; restrict lets the compiler vectorise. */

/* PyTorch creates the momentum buffer as a copy of g on the first step;
 * with a zeroed buffer and no dampening, mu*0 + g is that same copy. */
static void sgd_segment(const optim_config_t *c, size_t n, float *restrict w,
                        const float *restrict g, float *restrict buf, float lr) {
  const float wd = c->weight_decay, mu = c->momentum;
  if (!buf) {
    for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
    return;
  }
  if (c->nesterov) {
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * w[i];
      buf[i] = buf[i] * mu + d;
      w[i] -= lr * (d + mu * buf[i]);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      buf[i] = buf[i] * mu + (g[i] + wd * w[i]);
      w[i] -= lr * buf[i];
    }
  }
}

/* Bias corrections in double, as PyTorch computes them in Python. */
static void adam_segment(const optim_config_t *c, int64_t t, size_t n, float *restrict w,
                         const float *restrict g, float *restrict m, float *restrict v,
                         float lr) {
  const float wd = c->weight_decay, b1 = c->beta1, b2 = c->beta2, eps = c->eps;
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
  const double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
  const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    m[i] = m[i] * b1 + one_b1 * d;
    v[i] = v[i] * b2 + one_b2 * d * d;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * m[i] / denom;
  }
}

/* torch.optim.AdamW (1.13, _single_tensor_adamw): the decay first and
 * apart from the gradient, w *= 1 - lr·wd, then Adam's step on g alone.
 * wd is 0 on the ranges the optimizer exempts. */
static void adamw_run(const optim_config_t *c, int64_t t, float wd, size_t n, float *restrict w,
                      const float *restrict g, float *restrict m, float *restrict v, float lr) {
  const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
  const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2, keep = 1.0f - lr * wd;
  const double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
  const float step_size = (float)((double)lr / bc1), bc2_sqrt = (float)sqrt(bc2);
  for (size_t i = 0; i < n; i++) {
    w[i] *= keep;
    m[i] = m[i] * b1 + one_b1 * g[i];
    v[i] = v[i] * b2 + one_b2 * g[i] * g[i];
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * m[i] / denom;
  }
}

/* [p, end) cut where the exemptions begin and end: the end of the run
 * from p with one decay, and whether that run is exempt. */
static size_t decay_run(const optimizer_t *o, size_t p, size_t end, int *exempt) {
  *exempt = 0;
  for (int i = 0; i < o->nno_decay; i++) {
    size_t lo = o->no_decay[i].off, hi = lo + o->no_decay[i].len;
    if (p >= lo && p < hi) {
      *exempt = 1;
      return hi < end ? hi : end;
    }
    if (lo > p) return lo < end ? lo : end;
  }
  return end;
}

static void adamw_segment(const optimizer_t *o, size_t off, size_t len, float *params,
                          const float *grads, float *m, float *v, float lr) {
  for (size_t p = off, end = off + len; p < end;) {
    int exempt;
    size_t q = decay_run(o, p, end, &exempt);
    adamw_run(&o->cfg, o->steps, exempt ? 0.0f : o->cfg.weight_decay, q - p, params + p,
              grads + p, m + p, v + p, lr);
    p = q;
  }
}

int optim_set_no_decay(optimizer_t *o, const optim_segment_t *ranges, int n) {
  free(o->no_decay);
  o->no_decay = NULL;
  o->nno_decay = 0;
  if (n <= 0) return 0;
  o->no_decay = malloc((size_t)n * sizeof *ranges);
  if (!o->no_decay) return dt_error("optimizer: out of memory");
  memcpy(o->no_decay, ranges, (size_t)n * sizeof *ranges);
  o->nno_decay = n;
  return 0;
}

static void rmsprop_segment(const optim_config_t *c, size_t n, float *restrict w,
                            const float *restrict g, float *restrict sq,
                            float *restrict buf, float lr) {
  const float wd = c->weight_decay, a = c->alpha, one_a = 1.0f - c->alpha, eps = c->eps;
  const float mu = c->momentum;
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    sq[i] = sq[i] * a + one_a * d * d;
    float avg = sqrtf(sq[i]) + eps;
    if (buf) {
      buf[i] = buf[i] * mu + d / avg;
      w[i] -= lr * buf[i];
    } else {
      w[i] -= lr * d / avg;
    }
  }
}

/* The trust ratio scales each tensor's step by ||w|| / ||g + wd w||
 * (bounded as in You et al. 2017); with a zero norm there is nothing to
 * scale against, so the plain rate applies. */
static float lars_local_lr(const optim_config_t *c, size_t n, const float *w, const float *g) {
  double wn = sqrt(kern_sumsq(n, w)), gn = sqrt(kern_sumsq(n, g));
  if (wn == 0 || gn == 0) return 1.0f;
  return (float)((double)c->trust * wn / (gn + (double)c->weight_decay * wn));
}

static void lars_segment(const optim_config_t *c, size_t n, float *restrict w,
                         const float *restrict g, float *restrict vel, float lr) {
  const float wd = c->weight_decay, mu = c->momentum;
  const float scaled_lr = lr * lars_local_lr(c, n, w, g);
  for (size_t i = 0; i < n; i++) {
    vel[i] = mu * vel[i] + scaled_lr * (g[i] + wd * w[i]);
    w[i] -= vel[i];
  }
}

void optim_begin_step(optimizer_t *o) { o->steps++; }

void optim_step(optimizer_t *o, float *params, const float *grads,
                const optim_segment_t *segs, int nsegs, float lr) {
  optim_begin_step(o);
  optim_step_segments(o, params, grads, segs, nsegs, lr);
}

void optim_step_segments(optimizer_t *o, float *params, const float *grads,
                         const optim_segment_t *segs, int nsegs, float lr) {
  const optim_config_t *c = &o->cfg;
  for (int s = 0; s < nsegs; s++) {
    size_t off = segs[s].off, len = segs[s].len;
    float *w = params + off;
    const float *g = grads + off;
    float *s0 = o->nstate > 0 ? o->state[0] + off : NULL;
    float *s1 = o->nstate > 1 ? o->state[1] + off : NULL;
    switch (c->kind) {
    case OPTIM_SGD: sgd_segment(c, len, w, g, s0, lr); break;
    case OPTIM_ADAM: adam_segment(c, o->steps, len, w, g, s0, s1, lr); break;
    case OPTIM_RMSPROP: rmsprop_segment(c, len, w, g, s0, s1, lr); break;
    case OPTIM_LARS: lars_segment(c, len, w, g, s0, lr); break;
    case OPTIM_ADAMW:
      adamw_segment(o, off, len, params, grads, o->state[0], o->state[1], lr);
      break;
    default: break;
    }
  }
}
