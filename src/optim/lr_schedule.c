/* Learning-rate schedules as a function of the step: a resumed run only
 * needs the step count to continue on the same curve. */
#include "dtrain/optim.h"

#include <math.h>
#include <string.h>

static const char *const lr_names[LR_KIND_COUNT] = {"constant", "step", "cosine"};

const char *lr_kind_name(lr_kind_t kind) { return name_of(kind, lr_names, LR_KIND_COUNT); }

int lr_kind_parse(const char *name, lr_kind_t *out) {
  int k = name_index(name, lr_names, LR_KIND_COUNT);
  if (k >= 0) return *out = (lr_kind_t)k, 0;
  return dt_error("unknown learning-rate schedule '%s' (expected constant, step, cosine)",
                  name ? name : "");
}

/* Cosine from base at the end of warm-up to exactly 0 at total_steps, and
 * 0 after it (or at once when warm-up takes all the steps). */
static double cosine_at(const lr_schedule_t *s, int64_t step) {
  int64_t span = s->total_steps - s->warmup_steps;
  if (span <= 0 || step >= s->total_steps) return 0.0;
  double progress = (double)(step - s->warmup_steps) / (double)span;
  return s->base * 0.5 * (1.0 + cos(M_PI * progress));
}

/* Step decay counted from the end of warm-up; step_size <= 0 never decays. */
static double step_decay_at(const lr_schedule_t *s, int64_t step) {
  if (s->step_size <= 0) return s->base;
  int64_t drops = (step - s->warmup_steps) / s->step_size;
  return s->base * pow(s->gamma, (double)drops);
}

double lr_at(const lr_schedule_t *s, int64_t step) {
  if (step < 0) step = 0;
  /* Warm-up starts at base/warmup (not 0) so the first step moves. */
  if (step < s->warmup_steps) return s->base * (double)(step + 1) / (double)s->warmup_steps;
  switch (s->kind) {
  case LR_STEP: return step_decay_at(s, step);
  case LR_COSINE: return cosine_at(s, step);
  default: return s->base;
  }
}
