/* report.html: one self-contained page (inline CSS and SVG, no script, no
 * network): the task, a table of the presets' figures, each preset's
 * verdict, and the charts. Each table cell carries the number it shows
 * (data-preset, data-key, data-value as report.json writes it), so a test
 * can check the page against report.json. Also the same table as text. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/core.h"
#include "report/report.h"
#include "report/svg.h"

static const char *CSS =
    "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px}"
    "p.meta{color:#555;font-size:13px;margin:2px 0}code{font-size:12px}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #ddd;"
    "text-align:right;vertical-align:top}th{background:#f4f4f4}td.name,th.name,td.verdict{text-align:left}td.name{white-space:nowrap}"
    "td.verdict{max-width:420px}tr.failed td{color:#a00}"
    ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}"
    ".legend span{margin-right:16px;font-size:13px;white-space:nowrap}"
    ".charts{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0}"
    "svg .title{font-size:14px;font-weight:bold}svg .tick{font-size:11px;fill:#333}"
    "svg .label{font-size:12px;fill:#333}svg .grid{stroke:#eee}svg .axis{stroke:#888}"
    "p.note{font-size:12px;color:#555;max-width:1100px}";

/* A table cell showing `text` for the number v. */
static void cell(strbuf_t *sb, const char *preset, const char *key, double v, const char *text) {
  sb_puts(sb, "<td data-preset=\"");
  sb_html(sb, preset);
  sb_printf(sb, "\" data-key=\"%s\" data-value=\"", key);
  sb_num(sb, v);
  sb_puts(sb, "\">");
  sb_html(sb, text);
  sb_puts(sb, "</td>");
}

/* The table's figures as text, shared by the page and the terminal. */
typedef struct { char ok[32], ttt[32], acc[32], sps[32], mb[32], bps[32], hidden[32]; } row_text_t;

static void row_text(const report_t *rep, const preset_summary_t *p, row_text_t *t) {
  snprintf(t->ok, sizeof t->ok, "%d/%d", p->ok, p->runs);
  if (!isfinite(rep->target_acc)) snprintf(t->ttt, sizeof t->ttt, "no target");
  else if (isfinite(p->time_to_target))
    snprintf(t->ttt, sizeof t->ttt, "%.1f s%s", p->time_to_target,
             p->reached < p->ok ? " (some runs)" : "");
  else snprintf(t->ttt, sizeof t->ttt, "not reached");
  snprintf(t->acc, sizeof t->acc, isfinite(p->final_acc) ? "%.2f%%" : "n/a", 100 * p->final_acc);
  snprintf(t->sps, sizeof t->sps, isfinite(p->samples_per_sec) ? "%.0f" : "n/a", p->samples_per_sec);
  snprintf(t->mb, sizeof t->mb, isfinite(p->bytes_sent) ? "%.2f" : "n/a", p->bytes_sent / 1e6);
  snprintf(t->bps, sizeof t->bps, isfinite(p->bytes_per_step) ? "%.0f" : "n/a", p->bytes_per_step);
  snprintf(t->hidden, sizeof t->hidden, isfinite(p->comm_hidden_frac) ? "%.0f%%" : "n/a",
           100 * p->comm_hidden_frac);
}

static void verdict_text(const preset_summary_t *p, char *buf, size_t cap) {
  buf[0] = 0;
  for (int i = 0; i < p->nverdict; i++) {
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", i ? "; " : "", p->verdict[i].text);
  }
}

static void table(const report_t *rep, strbuf_t *sb) {
  sb_puts(sb, "<table id=\"figures\"><tr><th class=\"name\">preset</th><th>runs ok</th>"
              "<th>time to target</th><th>final test acc</th><th>samples/s</th>"
              "<th>MB sent (rank 0)</th><th>bytes/step</th><th>comm hidden</th>"
              "<th class=\"name\">verdict</th></tr>\n");
  for (int i = 0; i < rep->npresets; i++) {
    const preset_summary_t *p = &rep->presets[i];
    row_text_t t;
    row_text(rep, p, &t);
    char verdict[VERDICT_CLAUSES_MAX * 200 + 8];
    sb_printf(sb, "<tr class=\"%s\"><td class=\"name\"><span class=\"swatch\" style=\"background:%s\">"
                  "</span>", p->ok ? "ok" : "failed", svg_color(i));
    sb_html(sb, p->name);
    sb_puts(sb, "</td>");
    cell(sb, p->name, "ok", p->ok, t.ok);
    cell(sb, p->name, "time_to_target", p->time_to_target, t.ttt);
    cell(sb, p->name, "final_acc", p->final_acc, t.acc);
    cell(sb, p->name, "samples_per_sec", p->samples_per_sec, t.sps);
    cell(sb, p->name, "bytes_sent", p->bytes_sent, t.mb);
    cell(sb, p->name, "bytes_per_step", p->bytes_per_step, t.bps);
    cell(sb, p->name, "comm_hidden_frac", p->comm_hidden_frac, t.hidden);
    verdict_text(p, verdict, sizeof verdict);
    sb_puts(sb, "<td class=\"verdict\" data-preset=\"");
    sb_html(sb, p->name);
    sb_puts(sb, "\" data-key=\"verdict\">");
    sb_html(sb, verdict);
    sb_puts(sb, "</td></tr>\n");
  }
  sb_puts(sb, "</table>\n");
}

static void legend(const report_t *rep, strbuf_t *sb) {
  sb_puts(sb, "<p class=\"legend\">");
  for (int i = 0; i < rep->npresets; i++) {
    sb_printf(sb, "<span><span class=\"swatch\" style=\"background:%s\"></span>", svg_color(i));
    sb_html(sb, rep->presets[i].name);
    sb_puts(sb, "</span>");
  }
  sb_puts(sb, "</p>\n");
}

static void line(const report_t *rep, strbuf_t *sb, svg_series_t *s, const char *id,
                 const char *title, const char *xl, const char *yl, size_t xf, size_t yf, double yscale,
                 double *tmp) {
  for (int i = 0; i < rep->npresets; i++) {
    const preset_summary_t *p = &rep->presets[i];
    double *y = tmp + (size_t)i * REPORT_SERIES_MAX;
    const double *src = *(double *const *)((const char *)p + yf);
    for (int k = 0; k < p->npoints; k++) y[k] = src[k] * yscale;
    s[i] = (svg_series_t){p->name, i, *(double *const *)((const char *)p + xf), y, p->npoints};
  }
  svg_line_chart(sb, id, title, xl, yl, s, rep->npresets);
}
#define CURVE(f) offsetof(preset_summary_t, f)

static void charts(const report_t *rep, strbuf_t *sb, svg_series_t *s, double *tmp) {
  int n = rep->npresets;
  sb_puts(sb, "<div class=\"charts\">\n");
  line(rep, sb, s, "acc_time", "Test accuracy against wall time", "wall time (s)",
       "test accuracy (%)", CURVE(wall_sec), CURVE(test_acc), 100, tmp);
  line(rep, sb, s, "acc_samples", "Test accuracy against samples seen", "samples seen",
       "test accuracy (%)", CURVE(samples), CURVE(test_acc), 100, tmp);
  line(rep, sb, s, "loss_step", "Training loss against step", "step", "train loss",
       CURVE(step), CURVE(train_loss), 1, tmp);
  double *one = tmp, *split = tmp + n;
  for (int i = 0; i < n; i++) {
    one[i] = rep->presets[i].samples_per_sec;
    s[i] = (svg_series_t){rep->presets[i].name, i, NULL, &one[i], 1};
  }
  svg_bar_chart(sb, "samples_per_sec", "Throughput", "samples/s", s, n);
  static const char *const PARTS[] = {"compute", "exposed comm", "waiting for peers", "pipeline bubble",
                                      "evaluation", "other"};
  for (int i = 0; i < n; i++) {
    const preset_summary_t *p = &rep->presets[i];
    double *y = split + 6 * i, wait = isfinite(p->wait_sec) ? p->wait_sec : 0;
    double bubble = isfinite(p->bubble_sec) ? p->bubble_sec : 0;
    y[0] = p->compute_sec, y[1] = p->comm_exposed_sec - wait - bubble, y[2] = wait, y[3] = bubble;
    y[4] = p->eval_sec, y[5] = p->other_sec;
    s[i] = (svg_series_t){p->name, i, NULL, y, 6};
  }
  svg_stacked_chart(sb, "time_split", "Where the time went (rank 0)", "s", s, n, PARTS, 6);
  for (int i = 0; i < n; i++) {
    one[i] = rep->presets[i].bytes_per_step;
    s[i] = (svg_series_t){rep->presets[i].name, i, NULL, &one[i], 1};
  }
  svg_bar_chart(sb, "bytes_per_step", "Bytes sent per step (rank 0)", "bytes/step", s, n);
  int ns = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(rep->presets[i].staleness_mean)) {
      one[ns] = rep->presets[i].staleness_mean;
      s[ns] = (svg_series_t){rep->presets[i].name, i, NULL, &one[ns], 1};
      ns++;
    }
  if (ns) svg_bar_chart(sb, "staleness", "Mean staleness (schedules that have it)", "updates", s, ns);
  sb_puts(sb, "</div>\n");
}

static void failures(const report_t *rep, strbuf_t *sb) {
  for (int i = 0; i < rep->nruns; i++) {
    const run_log_t *r = &rep->runs[i];
    if (r->ok) continue;
    sb_puts(sb, "<p class=\"error\">");
    sb_html(sb, r->preset);
    sb_printf(sb, " (seed %lld) failed: ", r->seed);
    sb_html(sb, r->error);
    sb_puts(sb, "</p>\n");
  }
}

/* The performance model's step beside the measured one (prediction.c). */
static void predictions(const report_t *rep, strbuf_t *sb) {
  if (!rep->predictions) return;
  sb_puts(sb, "<h2>Predicted and measured</h2>\n<p class=\"note\">Each preset's step as "
              "<code>dtrain plan --predict</code> predicts it for the same command line, beside "
              "its runs' training time over their steps; over 15% apart, the part of the step "
              "the model is most off on.</p>\n<ul>\n");
  for (int i = 0; i < rep->npresets; i++) {
    const preset_summary_t *p = &rep->presets[i];
    sb_printf(sb, "<li class=\"prediction\" data-preset=\"%s\"><b>", p->name);
    sb_html(sb, p->name);
    sb_puts(sb, "</b>: ");
    sb_html(sb, p->pred_text);
    sb_puts(sb, "</li>\n");
  }
  sb_puts(sb, "</ul>\n");
}

int report_html(const report_t *rep, strbuf_t *sb) {
  int n = rep->npresets;
  svg_series_t *s = calloc((size_t)n + 1, sizeof *s);
  double *tmp = calloc((size_t)(n + 1) * REPORT_SERIES_MAX, sizeof *tmp);
  if (!s || !tmp) {
    free(s);
    free(tmp);
    return dt_error("report.html: out of memory");
  }
  sb_printf(sb, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<title>dtrain compare</title><style>%s</style></head><body>\n"
                "<h1>dtrain compare</h1>\n<p class=\"meta\">task: ", CSS);
  sb_html(sb, rep->task);
  sb_puts(sb, "</p>\n<p class=\"meta\">command: <code>");
  sb_html(sb, rep->command);
  sb_puts(sb, "</code></p>\n");
  if (isfinite(rep->target_acc))
    sb_printf(sb, "<p class=\"meta\">target test accuracy: %.4g%%</p>\n", 100 * rep->target_acc);
  sb_puts(sb, "<h2>Figures</h2>\n");
  table(rep, sb);
  failures(rep, sb);
  predictions(rep, sb);
  sb_puts(sb, "<h2>Charts</h2>\n");
  legend(rep, sb);
  charts(rep, sb, s, tmp);
  sb_puts(sb, "<p class=\"note\">Wall time is the sum of each epoch's training and evaluation "
              "time; samples seen, the sum of samples/s times training time. With several seeds "
              "a curve is their mean, as far as the shortest run goes. The time split is rank 0's: "
              "compute includes batches and optimizer steps (but for shared sync, which steps its "
              "block inside its exchange); waiting for peers is measured for "
              "synchronous schedules (the slowest rank's epoch compute less rank 0's); elsewhere "
              "it is inside exposed communication, with waits for a staleness bound; other is "
              "what training time leaves. Figures measured under an emulated network are "
              "emulated.</p>\n</body></html>\n");
  free(s);
  free(tmp);
  return sb->failed ? dt_error("report.html: out of memory") : 0;
}

void report_table(const report_t *rep, FILE *f) {
  fprintf(f, "%-16s %7s %14s %9s %10s %10s %11s %7s  %s\n", "preset", "runs", "to target",
          "final acc", "samples/s", "MB sent", "bytes/step", "hidden", "verdict");
  for (int i = 0; i < rep->npresets; i++) {
    const preset_summary_t *p = &rep->presets[i];
    row_text_t t;
    row_text(rep, p, &t);
    char verdict[VERDICT_CLAUSES_MAX * 200 + 8];
    verdict_text(p, verdict, sizeof verdict);
    fprintf(f, "%-16s %7s %14s %9s %10s %10s %11s %7s  %s\n", p->name, t.ok, t.ttt, t.acc, t.sps,
            t.mb, t.bps, t.hidden, verdict);
  }
  for (int i = 0; rep->predictions && i < rep->npresets; i++)
    fprintf(f, "%-16s %s\n", rep->presets[i].name, rep->presets[i].pred_text);
}
