/* report.json: every number the page shows (the presets' figures, curves
 * and verdicts) and each run's metrics lines as they are in its file. */
#include <math.h>
#include <string.h>

#include "dtrain/core.h"
#include "report/report.h"

static void key_num(strbuf_t *sb, const char *key, double v, int comma) {
  sb_printf(sb, "%s\"%s\":", comma ? "," : "", key);
  sb_num(sb, v);
}

static void key_str(strbuf_t *sb, const char *key, const char *s, int comma) {
  sb_printf(sb, "%s\"%s\":\"", comma ? "," : "", key);
  sb_json_str(sb, s);
  sb_puts(sb, "\"");
}

static void array(strbuf_t *sb, const char *key, const double *v, int n) {
  sb_printf(sb, ",\"%s\":[", key);
  for (int i = 0; i < n; i++) {
    if (i) sb_puts(sb, ",");
    sb_num(sb, v[i]);
  }
  sb_puts(sb, "]");
}

static void preset_json(strbuf_t *sb, const preset_summary_t *p) {
  key_str(sb, "name", p->name, 0);
  sb_printf(sb, ",\"runs\":%d,\"ok\":%d,\"reached\":%d", p->runs, p->ok, p->reached);
  if (p->error[0]) key_str(sb, "error", p->error, 1);
  else sb_puts(sb, ",\"error\":null");
  key_num(sb, "final_acc", p->final_acc, 1);
  key_num(sb, "time_to_target", p->time_to_target, 1);
  key_num(sb, "samples_per_sec", p->samples_per_sec, 1);
  key_num(sb, "bytes_sent", p->bytes_sent, 1);
  key_num(sb, "bytes_per_step", p->bytes_per_step, 1);
  key_num(sb, "total_sec", p->total_sec, 1);
  key_num(sb, "train_sec", p->train_sec, 1);
  key_num(sb, "compute_sec", p->compute_sec, 1);
  key_num(sb, "comm_sec", p->comm_sec, 1);
  key_num(sb, "comm_exposed_sec", p->comm_exposed_sec, 1);
  key_num(sb, "eval_sec", p->eval_sec, 1);
  key_num(sb, "other_sec", p->other_sec, 1);
  key_num(sb, "wait_sec", p->wait_sec, 1);
  key_num(sb, "bubble_sec", p->bubble_sec, 1);
  key_num(sb, "comm_hidden_frac", p->comm_hidden_frac, 1);
  key_num(sb, "staleness_mean", p->staleness_mean, 1);
  sb_puts(sb, ",\"series\":{");
  sb_printf(sb, "\"points\":%d", p->npoints);
  array(sb, "wall_sec", p->wall_sec, p->npoints);
  array(sb, "samples", p->samples, p->npoints);
  array(sb, "test_acc", p->test_acc, p->npoints);
  array(sb, "train_loss", p->train_loss, p->npoints);
  array(sb, "step", p->step, p->npoints);
  sb_puts(sb, "},\"verdict\":[");
  for (int i = 0; i < p->nverdict; i++) {
    sb_puts(sb, i ? ",{" : "{");
    key_str(sb, "kind", p->verdict[i].kind, 0);
    key_num(sb, "value", p->verdict[i].value, 1);
    key_str(sb, "text", p->verdict[i].text, 1);
    sb_puts(sb, "}");
  }
  sb_puts(sb, "]");
  if (!p->pred_text[0]) return;
  sb_puts(sb, ",\"prediction\":{");
  sb_printf(sb, "\"predicted\":%s", p->predicted ? "true" : "false");
  if (p->predicted) {
    key_num(sb, "step_sec", p->pred_step_sec, 1);
    key_num(sb, "measured_step_sec", p->meas_step_sec, 1);
    key_num(sb, "error", p->pred_error, 1);
    key_num(sb, "compute_sec", p->pred_compute_sec, 1);
    key_num(sb, "measured_compute_sec", p->meas_compute_sec, 1);
    if (p->pred_off) key_str(sb, "off", p->pred_off, 1);
    else sb_puts(sb, ",\"off\":null");
  }
  key_str(sb, "text", p->pred_text, 1);
  sb_puts(sb, "}");
}

static void run_json(strbuf_t *sb, const run_log_t *r) {
  key_str(sb, "preset", r->preset, 0);
  sb_printf(sb, ",\"seed\":%lld", r->seed);
  key_str(sb, "file", r->file, 1);
  sb_printf(sb, ",\"ok\":%s", r->ok ? "true" : "false");
  if (r->error[0]) key_str(sb, "error", r->error, 1);
  else sb_puts(sb, ",\"error\":null");
  sb_puts(sb, ",\"metrics\":[");
  const char *l = r->lines;
  for (int first = 1; *l; first = 0) {
    const char *nl = strchr(l, '\n');
    sb_printf(sb, "%s\n%.*s", first ? "" : ",", (int)(nl - l), l);
    l = nl + 1;
  }
  sb_puts(sb, "]");
}

int report_json(const report_t *rep, strbuf_t *sb) {
  sb_puts(sb, "{\"format\":\"dtrain-compare-1\"");
  key_str(sb, "command", rep->command, 1);
  key_str(sb, "task", rep->task, 1);
  key_num(sb, "target_acc", rep->target_acc, 1);
  sb_puts(sb, ",\n\"presets\":[");
  for (int i = 0; i < rep->npresets; i++) {
    sb_puts(sb, i ? ",\n{" : "\n{");
    preset_json(sb, &rep->presets[i]);
    sb_puts(sb, "}");
  }
  sb_puts(sb, "],\n\"runs\":[");
  for (int i = 0; i < rep->nruns; i++) {
    sb_puts(sb, i ? ",\n{" : "\n{");
    run_json(sb, &rep->runs[i]);
    sb_puts(sb, "}");
  }
  sb_puts(sb, "]}\n");
  return sb->failed ? dt_error("report.json: out of memory") : 0;
}
