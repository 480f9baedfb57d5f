/* What a run tells its user: a live progress line with rate and ETA on
 * stderr, one summary line per epoch on stdout, and JSON Lines metrics. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "strategy/grid.h"
#include "strategy/worker.h"
#include "strategy/tp_group.h"

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
  if (w->rank != w->progress_rank || w->tp_rank != 0 || !w->cfg->progress) return;
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

/* One JSON Lines record, checked: on a failed write (a full disk) the file
 * is cut back to its last complete line and the run fails, instead of
 * ending with half a line and exit 0. */
static int metrics_line(worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int metrics_line(worker_t *w, const char *fmt, ...) {
  if (!w->metrics) return 0;
  long at = ftell(w->metrics);
  va_list ap;
  va_start(ap, fmt);
  int n = vfprintf(w->metrics, fmt, ap);
  va_end(ap);
  if (n >= 0 && fflush(w->metrics) == 0 && !ferror(w->metrics)) return 0;
  int err = errno;
  if (at >= 0 && ftruncate(fileno(w->metrics), at) == 0) clearerr(w->metrics);
  fclose(w->metrics); /* the buffer's rest is not written again */
  w->metrics = NULL;
  return dt_error("--metrics %s: write failed: %s (the file ends with the last complete line)",
                  w->cfg->metrics, strerror(err ? err : EIO));
}

/* The model as it stands is worth keeping: finite parameters and buffers,
 * and losses that have not blown up. Otherwise the run stops here, before
 * a checkpoint would replace the last good one. */
static int check_diverged(worker_t *w, const epoch_report_t *r) {
  const model_t *m = w->model;
  double lim = w->cfg->max_loss;
  const char *what = NULL;
  double v = 0;
  if (!isfinite(r->train_loss) || r->train_loss > lim) what = "train loss", v = r->train_loss;
  else if (!isfinite(r->test_loss) || r->test_loss > lim) what = "test loss", v = r->test_loss;
  else if (!kern_all_finite(m->nparams, m->params)) what = "parameters";
  else if (!kern_all_finite(m->nbuffers, m->buffers)) what = "batch-norm statistics";
  if (!what) return 0;
  char val[48] = "";
  if (!strcmp(what, "train loss") || !strcmp(what, "test loss"))
    snprintf(val, sizeof val, " is %g%s", v, isfinite(v) ? " (above --max-loss)" : "");
  else snprintf(val, sizeof val, " hold NaN or infinity");
  char kept[300] = "";
  if (w->cfg->checkpoint[0])
    snprintf(kept, sizeof kept, access(w->cfg->checkpoint, F_OK) == 0 ? "; %s keeps the last good epoch"
                                : "; no checkpoint written to %s", w->cfg->checkpoint);
  metrics_line(w, "{\"event\":\"diverged\",\"epoch\":%d,\"what\":\"%s\"}\n", r->epoch + 1, what);
  return dt_error("epoch %d: the %s%s: training diverged%s (lower --lr, add --warmup-epochs or "
                  "--weight-decay)", r->epoch + 1, what, val, kept);
}

/* The loss is found where it is computed: on the reporting rank, which
 * holds the metrics file, or under a pipeline on the last stage, which
 * appends to the file rank 0 opened (the record is the run's last line:
 * rank 0 writes nothing more once a stage has failed). */
static void step_diverged_record(worker_t *w, int epoch) {
  if (w->rank != w->progress_rank || w->tp_rank != 0 || !w->cfg->metrics[0]) return;
  char line[160];
  int n = snprintf(line, sizeof line, "{\"event\":\"diverged\",\"epoch\":%d,\"step\":%lld,"
                   "\"what\":\"train loss\"}\n", epoch, (long long)w->step);
  if (w->metrics) {
    metrics_line(w, "%s", line);
    return;
  }
  int fd = open(w->cfg->metrics, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return; /* not on this host's file system: the error line still says it */
  if (write(fd, line, (size_t)n) != n) { /* best effort: the run stops either way */ }
  close(fd);
}

int worker_step_diverged(worker_t *w, double loss) {
  int epoch = w->steps_per_epoch > 0 ? (int)(w->step / w->steps_per_epoch) + 1 : 1;
  step_diverged_record(w, epoch);
  return dt_error("step %lld: the training loss is %s; stopping (lower --lr, or add "
                  "--warmup-epochs)", (long long)w->step, isnan(loss) ? "NaN" : "infinite");
}

/* Every value a checkpoint holds is finite, or it is not written. */
static int check_optimizer_finite(const worker_t *w, int epoch) {
  for (int s = 0; s < w->opt->nstate; s++)
    if (!kern_all_finite(w->opt->n, w->opt->state[s]))
      return dt_error("epoch %d: optimizer state '%s' holds NaN or infinity: training diverged; "
                      "no checkpoint written (lower --lr)", epoch + 1, optim_state_name(w->opt, s));
  return 0;
}

static void end_progress_line(const worker_t *w) {
  if (w->cfg->progress && isatty(2)) fputs("\r\033[K", stderr);
}

static double per_step(uint64_t bytes, int64_t steps) {
  return steps > 0 ? (double)bytes / (double)steps : 0;
}

/* ",\"wait_sec\":X" where the schedule measured it, and a pipeline's
 * ",\"bubble_sec\":X" (both parts of comm_exposed_sec), else "". */
static const char *wait_json(const epoch_report_t *r, char *buf, size_t cap) {
  int n = 0;
  buf[0] = 0;
  if (r->timers.wait >= 0) n = snprintf(buf, cap, ",\"wait_sec\":%.4f", r->timers.wait);
  if (r->timers.bubble > 0 && n >= 0 && (size_t)n < cap)
    snprintf(buf + n, cap - (size_t)n, ",\"bubble_sec\":%.4f", r->timers.bubble);
  return buf;
}

/* ",\"layers\":{KIND:{...},...}": the epoch's costs of each layer kind the
 * model has. */
static const char *layers_json(const model_t *m, const layer_cost_t *cost, char *buf, size_t cap) {
  int has[LAYER_KIND_COUNT] = {0};
  for (int i = 0; i < m->nlayers; i++) has[m->layers[i].spec.kind] = 1;
  size_t n = (size_t)snprintf(buf, cap, ",\"layers\":{");
  const char *sep = "";
  for (int k = 0; k < LAYER_KIND_COUNT && n < cap; k++) {
    if (!has[k]) continue;
    const layer_cost_t *c = &cost[k];
    n += (size_t)snprintf(buf + n, cap - n,
                          "%s\"%s\":{\"compute_sec\":%.4f,\"comm_sec\":%.4f,\"bytes_sent\":%llu,"
                          "\"bytes_received\":%llu}", sep, layer_kind_name((layer_kind_t)k),
                          c->compute_sec, c->comm_sec, (unsigned long long)c->bytes_sent,
                          (unsigned long long)c->bytes_received);
    sep = ",";
  }
  if (n < cap) snprintf(buf + n, cap - n, "}");
  return buf;
}

/* Tensor-parallel runs with --metrics: every rank's epoch, its totals and
 * its layer kinds, goes to world rank 0 (the reporting rank), which
 * writes a "rank" line for each after the epoch line. */
enum { TAG_RANK_COSTS = 5602 };
typedef struct {
  double compute, comm;
  uint64_t sent, received;
  uint64_t act_peak; /* nn_activation_peak_bytes on that rank */
  layer_cost_t layers[LAYER_KIND_COUNT];
} rank_costs_t;

/* (Not under parameter servers: only replica 0 reports there, and the
 * world holds the servers; its "ps" figures give the bytes per tp rank.) */
static int per_rank_lines(const worker_t *w) {
  return w->tp && w->cfg->metrics[0] && w->cfg->exchange != EXCHANGE_PS;
}

static rank_costs_t rank_costs(const epoch_report_t *r) {
  rank_costs_t c = {.compute = r->timers.compute, .comm = r->timers.comm,
                    .sent = r->timers.bytes_sent, .received = r->timers.bytes_received,
                    .act_peak = nn_activation_peak_bytes()};
  memcpy(c.layers, r->timers.layers, sizeof c.layers);
  return c;
}

static int send_rank_costs(worker_t *w, const epoch_report_t *r) {
  rank_costs_t c = rank_costs(r);
  return comm_send(w->world, 0, TAG_RANK_COSTS, &c, sizeof c);
}

static int write_rank_lines(worker_t *w, const epoch_report_t *r) {
  int P = comm_size(w->world), tp = tensor_size(w->tp), pp = w->cfg->pipe.stages > 1 ? w->cfg->pipe.stages : 1;
  char layers[2048];
  for (int q = 0; q < P; q++) {
    rank_costs_t c = rank_costs(r);
    if (q > 0) DT_TRY(comm_recv(w->world, q, TAG_RANK_COSTS, &c, sizeof c));
    int at[GRID_AXES];
    rank_grid_coords(q, P / (pp * tp), pp, tp, at);
    if (metrics_line(w,
                     "{\"event\":\"rank\",\"epoch\":%d,\"rank\":%d,\"dp_rank\":%d,\"pp_rank\":%d,\"tp_rank\":%d,"
                     "\"compute_sec\":%.4f,\"comm_sec\":%.4f,\"bytes_sent\":%llu,"
                     "\"bytes_received\":%llu,\"activation_peak_bytes\":%llu%s}\n",
                     r->epoch + 1, q, at[GRID_DP], at[GRID_PP], at[GRID_TP], c.compute, c.comm,
                     (unsigned long long)c.sent, (unsigned long long)c.received,
                     (unsigned long long)c.act_peak,
                     layers_json(w->model, c.layers, layers, sizeof layers)) != 0)
      return -1;
  }
  return 0;
}

/* The samples of the epoch a checkpoint after r stands at: 0 for a whole
 * epoch; with --checkpoint-every, a run stopped mid-epoch (--max-steps)
 * is kept where it stopped, so that it resumes there. */
static size_t report_samples(const worker_t *w, const epoch_report_t *r) {
  if (!w->cfg->checkpoint_every || r->steps <= 0 || r->steps >= w->steps_per_epoch) return 0;
  size_t done = worker_epoch_samples_done(w, r->steps - 1);
  return done < w->train->n ? done : 0;
}

/* --checkpoint-every: a line for each checkpoint written, so that the
 * progress a restart loses can be read from the metrics. */
static int checkpoint_line(worker_t *w, int epoch, size_t samples, double sec) {
  if (!w->cfg->checkpoint_every) return 0;
  return metrics_line(w, "{\"event\":\"checkpoint\",\"epochs_done\":%d,\"epoch_samples\":%zu,"
                      "\"step\":%lld,\"workers\":%d,\"write_sec\":%.4f}\n",
                      samples ? epoch : epoch + 1, samples, (long long)w->step, w->nranks, sec);
}

int worker_checkpoint_step(worker_t *w, int epoch, int64_t k) {
  DT_TRY(worker_gather_compressor(w)); /* every rank, first */
  if (w->rank != 0) return 0;
  size_t samples = worker_epoch_samples_done(w, k);
  if (!worker_reports(w)) return worker_save_checkpoint_at(w, epoch, samples); /* its blocks */
  const model_t *m = w->model;
  if (!kern_all_finite(m->nparams, m->params) || !kern_all_finite(m->nbuffers, m->buffers))
    return dt_error("step %lld: the parameters hold NaN or infinity: training diverged; no "
                    "checkpoint written (lower --lr)", (long long)w->step);
  DT_TRY(check_optimizer_finite(w, epoch));
  double t0 = dt_now();
  DT_TRY(worker_save_checkpoint_at(w, epoch, samples));
  return checkpoint_line(w, epoch, samples, dt_now() - t0);
}

int worker_report_epoch(worker_t *w, const epoch_report_t *r) {
  char wait[96], layers[2048];
  if (w->cfg->checkpoint[0]) DT_TRY(worker_gather_compressor(w)); /* every rank, first */
  if (per_rank_lines(w) && comm_rank(w->world) != 0) DT_TRY(send_rank_costs(w, r));
  if (w->rank != 0) return 0;
  if (!worker_reports(w)) { /* the group's others: their blocks for the checkpoint */
    if (!w->cfg->checkpoint[0]) return 0;
    DT_TRY(check_diverged(w, r)); /* the same losses as rank 0: stop where it stops */
    return worker_save_checkpoint_at(w, r->epoch, report_samples(w, r));
  }
  end_progress_line(w);
  DT_TRY(check_diverged(w, r));
  DT_TRY(check_optimizer_finite(w, r->epoch));
  const char *emu = w->comm && w->comm->emulated ? " (emulated network)" : "";
  char tp_json[32] = ""; /* tensor parallelism: workers counts the ranks of one slice */
  if (w->tp) snprintf(tp_json, sizeof tp_json, ",\"tp\":%d", tensor_size(w->tp));
  char text_json[160] = "", text_line[64] = ""; /* text: a sample's loss is nats per token */
  if (w->train->text) {
    double tokens = r->samples_per_sec * (double)w->model->positions;
    snprintf(text_json, sizeof text_json,
             ",\"test_nats_per_token\":%.6f,\"test_bits_per_byte\":%.6f,\"tokens_per_sec\":%.1f",
             r->test_loss, r->test_loss / log(2.0), tokens);
    snprintf(text_line, sizeof text_line, " (%.4f bits/byte), %.0f tokens/s", r->test_loss / log(2.0),
             tokens);
  }
  printf("epoch %d/%d: train loss %.4f, test loss %.4f%s, test acc %.2f%%, %.0f samples/s, "
         "%.2f s%s\n",
         r->epoch + 1, w->cfg->epochs, r->train_loss, r->test_loss, text_line, 100 * r->test_acc,
         r->samples_per_sec, r->epoch_sec, emu);
  fflush(stdout);
  if (w->metrics &&
      metrics_line(w,
            "{\"event\":\"epoch\",\"epoch\":%d,\"train_loss\":%.6f,\"train_acc\":%.6f,"
            "\"test_loss\":%.6f,\"test_acc\":%.6f,\"samples_per_sec\":%.1f,\"epoch_sec\":%.4f,"
            "\"eval_sec\":%.4f,"
            "\"lr\":%.6g,\"step\":%lld,\"workers\":%d,\"compute_sec\":%.4f,\"comm_sec\":%.4f,"
            "\"comm_exposed_sec\":%.4f,\"comm_hidden_sec\":%.4f,\"bytes_sent\":%llu,"
            "\"bytes_received\":%llu,\"bytes_sent_per_step\":%.1f,\"bytes_received_per_step\":%.1f,"
            "\"activation_peak_bytes\":%zu%s%s%s%s%s%s%s}\n",
            r->epoch + 1, r->train_loss, r->train_acc, r->test_loss, r->test_acc,
            r->samples_per_sec, r->epoch_sec, r->eval_sec, r->lr, (long long)w->step, w->nranks,
            r->timers.compute, r->timers.comm, r->timers.comm_exposed,
            r->timers.comm > r->timers.comm_exposed ? r->timers.comm - r->timers.comm_exposed : 0.0,
            (unsigned long long)r->timers.bytes_sent, (unsigned long long)r->timers.bytes_received,
            per_step(r->timers.bytes_sent, r->steps), per_step(r->timers.bytes_received, r->steps),
            nn_activation_peak_bytes(), wait_json(r, wait, sizeof wait),
            w->comm && w->comm->emulated ? ",\"emulated\":true" : "",
            r->extra_json ? "," : "", r->extra_json ? r->extra_json : "", tp_json, text_json,
            layers_json(w->model, r->timers.layers, layers, sizeof layers)) != 0)
    return -1;
  if (per_rank_lines(w) && write_rank_lines(w, r) != 0) return -1;
  if (!w->cfg->checkpoint[0]) return 0;
  size_t samples = report_samples(w, r);
  double t0 = dt_now();
  DT_TRY(worker_save_checkpoint_at(w, r->epoch, samples));
  return checkpoint_line(w, r->epoch, samples, dt_now() - t0);
}

int worker_report_done(worker_t *w, const epoch_report_t *last, double samples, double total_sec) {
  if (!worker_reports(w)) return 0;
  end_progress_line(w);
  double sps = total_sec > 0 ? samples / total_sec : 0;
  char exchange[64], gemm[96], products[80] = "";
  exchange_spec(w->cfg, exchange, sizeof exchange);
  kern_gemm_describe(gemm, sizeof gemm);
  if (kern_using_bf16()) { /* this process's products under bf16: proof none was left to fp32 */
    long in_bf16, in_fp32;
    kern_bf16_products(&in_bf16, &in_fp32);
    snprintf(products, sizeof products, ",\"bf16_products\":%ld,\"fp32_products\":%ld", in_bf16,
             in_fp32);
  }
  printf("done: %d epochs, test acc %.2f%%, %.1f s, %.0f samples/s\n", last ? last->epoch + 1 : 0,
         last ? 100 * last->test_acc : 0, total_sec, sps);
  if (w->metrics &&
      metrics_line(w,
            "{\"event\":\"done\",\"epochs\":%d,\"steps\":%lld,\"test_loss\":%.6f,"
            "\"test_acc\":%.6f,\"total_sec\":%.4f,\"samples_per_sec\":%.1f,\"workers\":%d,"
            "\"params\":%zu,\"bytes_sent\":%llu,\"bytes_received\":%llu,"
            "\"exchange\":\"%s\",\"schedule\":\"%s\",\"gemm\":\"%s\"%s%s}\n",
            last ? last->epoch + 1 : 0, (long long)w->step, last ? last->test_loss : 0,
            last ? last->test_acc : 0, total_sec, sps, w->nranks,
            w->tp ? tensor_full_params(w->model) : w->model->nparams,
            (unsigned long long)w->run_bytes_sent,
            (unsigned long long)w->run_bytes_received, exchange, schedule_name(w->cfg->schedule), gemm,
            products, w->comm && w->comm->emulated ? ",\"emulated\":true" : "") != 0)
    return -1;
  return 0;
}
