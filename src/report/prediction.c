/* The performance model beside the measurement: each preset's predicted
 * step (dtrain plan --predict of its command line, given by the caller)
 * and the step its runs took (their training time over their steps). Where
 * the two differ by more than 15%, the part of the step the model got most
 * wrong is named: compute, or the rest of the step -- a pipeline's bubble,
 * waiting for slower ranks, or exposed communication, whichever of them
 * the runs measured most of. */
#include <math.h>
#include <string.h>

#include "report/report.h"

#define OFF_BY 0.15

/* The mean steps of the preset's runs that ended well (their last epoch
 * line's step: steps are counted over the run). */
static double mean_steps(const report_t *rep, const char *name) {
  double steps = 0;
  int k = 0;
  for (int i = 0; i < rep->nruns; i++) {
    const run_log_t *r = &rep->runs[i];
    if (!r->ok || strcmp(r->preset, name) != 0 || r->nepochs < 1) continue;
    steps += r->epochs[r->nepochs - 1].step, k++;
  }
  return k ? steps / k : NAN;
}

/* Of the measured rest of the step, the part that is most of it. */
static const char *rest_part(const preset_summary_t *p) {
  double bubble = isfinite(p->bubble_sec) ? p->bubble_sec : 0;
  double wait = isfinite(p->wait_sec) ? p->wait_sec : 0;
  double comm = fmax(0, p->train_sec - p->compute_sec - bubble - wait);
  if (bubble >= wait && bubble >= comm && bubble > 0) return "bubble";
  if (wait >= comm && wait > 0) return "waiting";
  return "communication";
}

static void predict_one(preset_summary_t *p, const report_prediction_t *pr, double steps) {
  p->predicted = 0, p->pred_off = NULL, p->pred_error = NAN;
  if (!pr->ok) {
    snprintf(p->pred_text, sizeof p->pred_text, "not predicted: %s", pr->why);
    return;
  }
  if (!p->ok || !(steps > 0) || !(p->train_sec > 0)) {
    snprintf(p->pred_text, sizeof p->pred_text, "predicted %.2f ms a step; no run measured it",
             1e3 * pr->step_sec);
    return;
  }
  p->predicted = 1;
  p->pred_step_sec = pr->step_sec, p->pred_compute_sec = pr->compute_sec;
  p->meas_step_sec = p->train_sec / steps, p->meas_compute_sec = p->compute_sec / steps;
  p->pred_error = (p->pred_step_sec - p->meas_step_sec) / p->meas_step_sec;
  int n = snprintf(p->pred_text, sizeof p->pred_text, "predicted %.2f ms a step, measured %.2f ms (%+.0f%%)",
                   1e3 * p->pred_step_sec, 1e3 * p->meas_step_sec, 100 * p->pred_error);
  if (fabs(p->pred_error) <= OFF_BY) return;
  double dc = p->pred_compute_sec - p->meas_compute_sec;
  double pr_rest = p->pred_step_sec - p->pred_compute_sec, me_rest = p->meas_step_sec - p->meas_compute_sec;
  int compute = fabs(dc) >= fabs(pr_rest - me_rest);
  p->pred_off = compute ? "compute" : rest_part(p);
  snprintf(p->pred_text + n, sizeof p->pred_text - (size_t)n,
           ": over 15%%, most off on %s (predicted %.2f ms, measured %.2f ms a step)", p->pred_off,
           1e3 * (compute ? p->pred_compute_sec : pr_rest), 1e3 * (compute ? p->meas_compute_sec : me_rest));
}

void report_predictions(report_t *rep) {
  for (int i = 0; i < rep->npresets; i++) {
    preset_summary_t *p = &rep->presets[i];
    if (!rep->predictions) {
      p->predicted = 0, p->pred_error = NAN, p->pred_text[0] = 0, p->pred_off = NULL;
      continue;
    }
    predict_one(p, &rep->predictions[i], mean_steps(rep, p->name));
  }
}
