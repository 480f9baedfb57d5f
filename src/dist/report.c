/* What a run tells its user: a live progress line with rate and ETA on
 * stderr, one summary line per epoch on stdout, and JSON Lines metrics. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/dist.h"

static void format_eta(double sec, char *buf, size_t cap) {
  if (!isfinite(sec) || sec < 0) sec = 0;
  long s = (long)(sec + 0.5);
  if (s >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

/* Throttled: every 0.25 s on a terminal (redrawn in place), every 10 s
 * otherwise (one line each, for logs). */
void worker_progress(worker_t *w, int epoch, int64_t k, int64_t steps_in_epoch) {
  static _Thread_local double last;
  if (w->rank != 0 || !w->cfg->progress) return;
  int tty = isatty(2);
  double now = dt_now();
  if (now - last < (tty ? 0.25 : 10.0) && k + 1 < steps_in_epoch) return;
  last = now;
  double elapsed = now - w->run_start;
  int64_t end = (int64_t)w->cfg->epochs * w->steps_per_epoch; /* --max-steps counts from 0 */
  if (w->cfg->max_steps && end > w->cfg->max_steps) end = w->cfg->max_steps;
  int64_t done = w->step - w->first_step, total = end - w->first_step;
  double rate = elapsed > 0 ? (double)done * w->cfg->batch * w->nranks / elapsed : 0;
  char eta[32];
  format_eta(done > 0 ? elapsed * (double)(total - done) / (double)done : 0, eta, sizeof eta);
  double loss = w->epoch_samples ? w->epoch_loss_sum / (double)w->epoch_samples : 0;
  fprintf(stderr, "%sepoch %d/%d  batch %lld/%lld  loss %.4f  %.0f samples/s  ETA %s%s",
          tty ? "\r\033[K" : "", epoch + 1, w->cfg->epochs, (long long)(k + 1),
          (long long)steps_in_epoch, loss, rate, eta, tty ? "" : "\n");
  fflush(stderr);
}

static void end_progress_line(const worker_t *w) {
  if (w->cfg->progress && isatty(2)) fputs("\r\033[K", stderr);
}

int worker_report_epoch(worker_t *w, const epoch_report_t *r) {
  if (w->rank != 0) return 0;
  end_progress_line(w);
  const char *emu = w->comm && w->comm->emulated ? " (emulated network)" : "";
  printf("epoch %d/%d: train loss %.4f, test loss %.4f, test acc %.2f%%, %.0f samples/s, "
         "%.2f s%s\n",
         r->epoch + 1, w->cfg->epochs, r->train_loss, r->test_loss, 100 * r->test_acc,
         r->samples_per_sec, r->epoch_sec, emu);
  fflush(stdout);
  if (w->metrics) {
    fprintf(w->metrics,
            "{\"event\":\"epoch\",\"epoch\":%d,\"train_loss\":%.6f,\"train_acc\":%.6f,"
            "\"test_loss\":%.6f,\"test_acc\":%.6f,\"samples_per_sec\":%.1f,\"epoch_sec\":%.4f,"
            "\"eval_sec\":%.4f,"
            "\"lr\":%.6g,\"step\":%lld,\"workers\":%d,\"compute_sec\":%.4f,\"comm_sec\":%.4f,"
            "\"comm_exposed_sec\":%.4f,\"comm_hidden_sec\":%.4f%s%s%s}\n",
            r->epoch + 1, r->train_loss, r->train_acc, r->test_loss, r->test_acc,
            r->samples_per_sec, r->epoch_sec, r->eval_sec, r->lr, (long long)w->step, w->nranks,
            r->timers.compute, r->timers.comm, r->timers.comm_exposed,
            r->timers.comm > r->timers.comm_exposed ? r->timers.comm - r->timers.comm_exposed : 0.0,
            w->comm && w->comm->emulated ? ",\"emulated\":true" : "",
            r->extra_json ? "," : "", r->extra_json ? r->extra_json : "");
    fflush(w->metrics);
  }
  if (w->cfg->checkpoint[0] && worker_save_checkpoint(w, r->epoch) != 0) return -1;
  return 0;
}

int worker_report_done(worker_t *w, const epoch_report_t *last, double total_sec) {
  if (w->rank != 0) return 0;
  end_progress_line(w);
  int64_t steps = w->step - w->first_step;
  double samples = (double)steps * w->cfg->batch * w->nranks; /* short last steps overcount */
  if (last && samples > (double)(last->epoch + 1 - w->first_epoch) * (double)w->train->n)
    samples = (double)(last->epoch + 1 - w->first_epoch) * (double)w->train->n;
  double sps = total_sec > 0 ? samples / total_sec : 0;
  printf("done: %d epochs, test acc %.2f%%, %.1f s, %.0f samples/s\n", last ? last->epoch + 1 : 0,
         last ? 100 * last->test_acc : 0, total_sec, sps);
  if (w->metrics) {
    fprintf(w->metrics,
            "{\"event\":\"done\",\"epochs\":%d,\"steps\":%lld,\"test_loss\":%.6f,"
            "\"test_acc\":%.6f,\"total_sec\":%.4f,\"samples_per_sec\":%.1f,\"workers\":%d%s}\n",
            last ? last->epoch + 1 : 0, (long long)w->step, last ? last->test_loss : 0,
            last ? last->test_acc : 0, total_sec, sps, w->nranks,
            w->comm && w->comm->emulated ? ",\"emulated\":true" : "");
    fflush(w->metrics);
  }
  return 0;
}
