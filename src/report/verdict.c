/* Each preset's verdict in words, from the figures of all the presets:
 * whether and when it reached the target (against the fastest), how much
 * of its communication was hidden or exposed, its bytes against the
 * heaviest preset's, its throughput, its staleness. Every clause keeps
 * the number it cites (report.json's "verdict"), so a test can check it
 * against the figures. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "report/report.h"

#define TIMES "\xc3\x97"  /* U+00D7, the multiplication sign */

static void add(preset_summary_t *p, const char *kind, double value, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(preset_summary_t *p, const char *kind, double value, const char *fmt, ...) {
  if (p->nverdict == VERDICT_CLAUSES_MAX) return;
  verdict_clause_t *c = &p->verdict[p->nverdict++];
  c->kind = kind;
  c->value = value;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->text, sizeof c->text, fmt, ap);
  va_end(ap);
}

/* The preset (among those that ended well) with the least (sign +1) or
 * most (sign -1) of a figure, NULL when none has it. */
static const preset_summary_t *extreme(const report_t *rep, size_t field, int sign) {
  const preset_summary_t *best = NULL;
  for (int i = 0; i < rep->npresets; i++) {
    const preset_summary_t *p = &rep->presets[i];
    double v = *(const double *)((const char *)p + field);
    if (!p->ok || !isfinite(v)) continue;
    double b = best ? *(const double *)((const char *)best + field) : 0;
    if (!best || sign * v < sign * b) best = p;
  }
  return best;
}
#define LEAST(rep, f) extreme(rep, offsetof(preset_summary_t, f), 1)
#define MOST(rep, f) extreme(rep, offsetof(preset_summary_t, f), -1)

static void target_clause(const report_t *rep, preset_summary_t *p) {
  double pct = 100 * rep->target_acc;
  const preset_summary_t *first = LEAST(rep, time_to_target);
  if (!isfinite(p->time_to_target)) {
    add(p, "not_reached", p->final_acc, "did not reach %.4g%% (final %.2f%%)", pct, 100 * p->final_acc);
  } else if (first == p) {
    add(p, "first", p->time_to_target, "reached %.4g%% first, at %.1f s", pct, p->time_to_target);
  } else {
    add(p, "reached", p->time_to_target, "reached %.4g%% at %.1f s, %.1f" TIMES " the fastest (%s)",
        pct, p->time_to_target, p->time_to_target / first->time_to_target, first->name);
  }
}

static void accuracy_clause(const report_t *rep, preset_summary_t *p) {
  const preset_summary_t *best = MOST(rep, final_acc);
  if (best == p) add(p, "best_final", p->final_acc, "best final accuracy, %.2f%%", 100 * p->final_acc);
  else add(p, "final", p->final_acc, "final accuracy %.2f%%, %.2f points below %s",
           100 * p->final_acc, 100 * (best->final_acc - p->final_acc), best->name);
}

static void comm_clauses(preset_summary_t *p) {
  if (!(p->comm_sec > 0) || !(p->train_sec > 0)) return;
  int waits = isfinite(p->wait_sec);
  double wait = waits ? p->wait_sec / p->train_sec : 0;
  double bubble = isfinite(p->bubble_sec) ? p->bubble_sec / p->train_sec : 0;
  double exposed = p->comm_exposed_sec / p->train_sec - wait - bubble;
  if (p->comm_hidden_frac >= 0.5)
    add(p, "hidden", p->comm_hidden_frac, "communication %.0f%% hidden", 100 * p->comm_hidden_frac);
  if (wait >= 0.1)
    add(p, "waiting", wait, "waited for slower ranks %.0f%% of training time", 100 * wait);
  if (bubble >= 0.1) /* a pipeline's idle stages: the schedule's, not the link's */
    add(p, "bubble", bubble, "pipeline bubble %.0f%% of training time", 100 * bubble);
  if (exposed >= 0.2)
    add(p, "exposed", exposed, "exposed communication%s %.0f%% of training time",
        waits ? "" : " and waiting", 100 * exposed);
}

static void bytes_clause(const report_t *rep, preset_summary_t *p) {
  const preset_summary_t *most = MOST(rep, bytes_per_step);
  if (!most || !(most->bytes_per_step > 0)) return;
  if (p->bytes_per_step == 0) {
    add(p, "no_bytes", 0, "no bytes on the wire");
    return;
  }
  double ratio = most->bytes_per_step / p->bytes_per_step;
  if (ratio >= 1.5)
    add(p, "bytes", ratio, "%.1f" TIMES " fewer bytes per step than %s", ratio, most->name);
}

void report_verdicts(report_t *rep) {
  for (int i = 0; i < rep->npresets; i++) {
    preset_summary_t *p = &rep->presets[i];
    p->nverdict = 0;
    if (!p->ok) {
      add(p, "failed", NAN, "failed: %s", p->error[0] ? p->error : "no run ended");
      continue;
    }
    if (isfinite(rep->target_acc)) target_clause(rep, p);
    else accuracy_clause(rep, p);
    comm_clauses(p);
    bytes_clause(rep, p);
    if (MOST(rep, samples_per_sec) == p && rep->npresets > 1)
      add(p, "throughput", p->samples_per_sec, "highest throughput, %.0f samples/s", p->samples_per_sec);
    if (isfinite(p->staleness_mean))
      add(p, "staleness", p->staleness_mean, "mean staleness %.2f", p->staleness_mean);
  }
}
