/* A preset's figures from its runs: the curves (per evaluated epoch, the
 * mean over the runs) on one time axis, and the totals (the mean over the
 * runs that ended well). The epochs' own figures are used as they are:
 * wall time is the sum of the epochs' training and evaluation time,
 * samples seen the sum of samples/s times training time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/core.h"
#include "report/report.h"

static double sum_epochs(const run_log_t *r, size_t field) {
  double s = 0;
  for (int e = 0; e < r->nepochs; e++) s += *(const double *)((const char *)&r->epochs[e] + field);
  return s;
}
#define SUM(r, f) sum_epochs(r, offsetof(epoch_line_t, f))

/* The wall time at which run r first reached `target`, or NAN. */
static double run_time_to(const run_log_t *r, double target) {
  double t = 0;
  for (int e = 0; e < r->nepochs; e++) {
    t += r->epochs[e].epoch_sec + r->epochs[e].eval_sec;
    if (r->epochs[e].test_acc >= target) return t;
  }
  return NAN;
}

static double mean_staleness(const run_log_t *r) {
  double s = 0;
  int n = 0;
  for (int e = 0; e < r->nepochs; e++)
    if (isfinite(r->epochs[e].staleness_mean)) s += r->epochs[e].staleness_mean, n++;
  return n ? s / n : NAN;
}

/* The epochs' waiting (or a pipeline's bubble: field), NAN when no epoch
 * has it. */
static double sum_present(const run_log_t *r, size_t field) {
  double s = 0;
  int n = 0;
  for (int e = 0; e < r->nepochs; e++) {
    double v = *(const double *)((const char *)&r->epochs[e] + field);
    if (isfinite(v)) s += v, n++;
  }
  return n ? s : NAN;
}
static double sum_wait(const run_log_t *r) { return sum_present(r, offsetof(epoch_line_t, wait_sec)); }
static double sum_bubble(const run_log_t *r) { return sum_present(r, offsetof(epoch_line_t, bubble_sec)); }

static int alloc_curves(preset_summary_t *p, int n) {
  double **c[] = {&p->wall_sec, &p->samples, &p->test_acc, &p->train_loss, &p->step};
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
    if (!(*c[i] = calloc((size_t)n + 1, sizeof(double)))) return dt_error("report: out of memory");
  p->npoints = n;
  return 0;
}

/* The curves: the mean over the runs that have epochs, as far as the
 * shortest of them goes. */
static int curves(preset_summary_t *p, const run_log_t **runs, int n) {
  int points = REPORT_SERIES_MAX, have = 0;
  for (int i = 0; i < n; i++)
    if (runs[i]->nepochs > 0) {
      have++;
      if (runs[i]->nepochs < points) points = runs[i]->nepochs;
    }
  DT_TRY(alloc_curves(p, have ? points : 0));
  for (int i = 0; i < n; i++) {
    const run_log_t *r = runs[i];
    if (r->nepochs == 0) continue;
    double t = 0, s = 0;
    for (int e = 0; e < p->npoints; e++) {
      const epoch_line_t *l = &r->epochs[e];
      t += l->epoch_sec + l->eval_sec;
      s += l->samples_per_sec * l->epoch_sec;
      p->wall_sec[e] += t / have;
      p->samples[e] += s / have;
      p->test_acc[e] += l->test_acc / have;
      p->train_loss[e] += l->train_loss / have;
      p->step[e] += l->step / have;
    }
  }
  return 0;
}

/* The totals: the mean over the runs that ended well. */
static void totals(preset_summary_t *p, const run_log_t **runs, int n, double target) {
  double acc = 0, ttt = 0, sps = 0, bytes = 0, bps = 0, total = 0, train = 0, compute = 0,
         comm = 0, exposed = 0, eval = 0, stale = 0, wait = 0, bubble = 0;
  int nstale = 0, nwait = 0, nbubble = 0;
  for (int i = 0; i < n; i++) {
    const run_log_t *r = runs[i];
    if (!r->ok) continue;
    acc += r->test_acc;
    sps += r->samples_per_sec;
    bytes += r->bytes_sent;
    bps += r->nepochs ? SUM(r, bytes_sent_per_step) / r->nepochs : 0;
    total += r->total_sec;
    train += SUM(r, epoch_sec);
    compute += SUM(r, compute_sec);
    comm += SUM(r, comm_sec);
    exposed += SUM(r, comm_exposed_sec);
    eval += SUM(r, eval_sec);
    double wt = sum_wait(r);
    if (isfinite(wt)) wait += wt, nwait++;
    double bu = sum_bubble(r);
    if (isfinite(bu)) bubble += bu, nbubble++;
    double t = run_time_to(r, target);
    if (isfinite(t)) ttt += t, p->reached++;
    double st = mean_staleness(r);
    if (isfinite(st)) stale += st, nstale++;
  }
  int k = p->ok;
  double nan = NAN;
  p->final_acc = k ? acc / k : nan;
  p->time_to_target = p->reached ? ttt / p->reached : nan;
  p->samples_per_sec = k ? sps / k : nan;
  p->bytes_sent = k ? bytes / k : nan;
  p->bytes_per_step = k ? bps / k : nan;
  p->total_sec = k ? total / k : nan;
  p->train_sec = k ? train / k : nan;
  p->compute_sec = k ? compute / k : nan;
  p->comm_sec = k ? comm / k : nan;
  p->comm_exposed_sec = k ? exposed / k : nan;
  p->eval_sec = k ? eval / k : nan;
  p->other_sec = k ? fmax(0, p->train_sec - p->compute_sec - p->comm_exposed_sec) : nan;
  p->comm_hidden_frac = k && comm > 0 ? fmax(0, (comm - exposed) / comm) : nan;
  p->staleness_mean = nstale ? stale / nstale : nan;
  p->wait_sec = nwait ? wait / nwait : nan;
  p->bubble_sec = nbubble ? bubble / nbubble : nan;
}

int report_summarize(report_t *rep, const char *const *presets, int npresets) {
  rep->presets = calloc((size_t)npresets, sizeof *rep->presets);
  const run_log_t **mine = calloc((size_t)rep->nruns + 1, sizeof *mine);
  if (!rep->presets || !mine) {
    free(mine);
    return dt_error("report: out of memory");
  }
  rep->npresets = npresets;
  int rc = 0;
  for (int i = 0; i < npresets && rc == 0; i++) {
    preset_summary_t *p = &rep->presets[i];
    snprintf(p->name, sizeof p->name, "%s", presets[i]);
    int n = 0;
    for (int j = 0; j < rep->nruns; j++) {
      if (strcmp(rep->runs[j].preset, presets[i]) != 0) continue;
      mine[n++] = &rep->runs[j];
      p->ok += rep->runs[j].ok;
      if (!rep->runs[j].ok && !p->error[0]) snprintf(p->error, sizeof p->error, "%s", rep->runs[j].error);
    }
    p->runs = n;
    rc = curves(p, mine, n);
    totals(p, mine, n, rep->target_acc);
  }
  free(mine);
  return rc;
}

void report_free(report_t *rep) {
  for (int i = 0; i < rep->npresets; i++) {
    preset_summary_t *p = &rep->presets[i];
    free(p->wall_sec);
    free(p->samples);
    free(p->test_acc);
    free(p->train_loss);
    free(p->step);
  }
  free(rep->presets);
  rep->presets = NULL;
  rep->npresets = 0;
}
