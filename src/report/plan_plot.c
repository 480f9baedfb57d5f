/* The projection's page (`dtrain plan --project ... --plot FILE`): one
 * self-contained HTML page as the compare report writes (inline CSS and
 * SVG, no script, no network): the cluster, a table of every worker
 * count's figures per strategy (each cell carries its number: data-key,
 * data-value), and two charts against log2(workers), one line a strategy:
 * predicted samples/s and scaling efficiency. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "dtrain/core.h"
#include "perf/project.h"
#include "report/svg.h"

static const char *CSS =
    "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px}p.meta{color:#555;font-size:13px}"
    "table{border-collapse:collapse;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid #ddd;"
    "text-align:right}th{background:#f4f4f4}td.name{text-align:left}"
    ".charts{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0}"
    ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}"
    ".legend span{margin-right:16px;font-size:13px;white-space:nowrap}"
    "svg .title{font-size:14px;font-weight:bold}svg .tick{font-size:11px;fill:#333}"
    "svg .label{font-size:12px;fill:#333}svg .grid{stroke:#eee}svg .axis{stroke:#888}";

static void table(const perf_projection_t *p, strbuf_t *sb) {
  sb_puts(sb, "<table><tr><th>workers</th><th class=\"name\">strategy</th><th>step ms</th>"
              "<th>samples/s</th><th>efficiency</th><th>memory MiB</th></tr>\n");
  for (int k = 0; k < p->nrows; k++)
    for (int s = 0; s < PROJ_COUNT; s++) {
      const perf_proj_row_t *r = &p->row[k];
      if (!isfinite(r->step_sec[s])) continue; /* not made: fewer layers than a host's ranks */
      sb_printf(sb, "<tr><td>%d</td><td class=\"name\">", r->workers);
      sb_html(sb, perf_proj_name(s));
      sb_printf(sb, "</td><td>%.3f</td><td data-key=\"samples_per_sec\" data-value=\"", 1e3 * r->step_sec[s]);
      sb_num(sb, r->samples_per_sec[s]);
      sb_printf(sb, "\">%.1f</td><td data-key=\"efficiency\" data-value=\"", r->samples_per_sec[s]);
      sb_num(sb, r->efficiency[s]);
      sb_printf(sb, "\">%.1f%%</td><td>%.1f%s</td></tr>\n", 100 * r->efficiency[s],
                r->memory_bytes[s] / (1024.0 * 1024.0), r->fits[s] ? "" : " (does not fit)");
    }
  sb_puts(sb, "</table>\n");
}

int perf_projection_html(const perf_projection_t *p, const perf_cluster_file_t *c,
                         const char *model, const char *path) {
  strbuf_t sb = {0};
  double x[16], y[2][PROJ_COUNT][16];
  svg_series_t s[2][PROJ_COUNT];
  for (int k = 0; k < p->nrows; k++) x[k] = log2(p->row[k].workers);
  for (int q = 0; q < PROJ_COUNT; q++)
    for (int k = 0; k < p->nrows; k++)
      y[0][q][k] = p->row[k].samples_per_sec[q], y[1][q][k] = 100 * p->row[k].efficiency[q];
  for (int c2 = 0; c2 < 2; c2++)
    for (int q = 0; q < PROJ_COUNT; q++)
      s[c2][q] = (svg_series_t){perf_proj_name(q), q, x, y[c2][q], p->nrows};
  sb_printf(&sb, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<title>dtrain plan: projection</title><style>%s</style></head><body>\n"
                 "<h1>dtrain plan: projection</h1>\n<p class=\"meta\">model ", CSS);
  sb_html(&sb, model);
  sb_puts(&sb, " on ");
  sb_html(&sb, c->name);
  sb_printf(&sb, " (%d hosts, %d ranks); a worker's step alone %.4g s, %s</p>\n", c->nhosts,
            c->nranks, p->one_worker_sec,
            p->projected ? "<b>projected</b> (a device's FLOP/s x efficiency, not measured)"
                         : "measured here and divided by each device's speed");
  sb_puts(&sb, "<h2>Charts</h2>\n<p class=\"legend\">");
  for (int q = 0; q < PROJ_COUNT; q++) {
    sb_printf(&sb, "<span><i class=\"swatch\" style=\"background:%s\"></i>", svg_color(q));
    sb_html(&sb, perf_proj_name(q));
    sb_puts(&sb, "</span>");
  }
  sb_puts(&sb, "</p>\n<div class=\"charts\">");
  svg_line_chart(&sb, "throughput", "Predicted throughput", "log2(workers)", "samples/s", s[0], PROJ_COUNT);
  svg_line_chart(&sb, "efficiency", "Scaling efficiency", "log2(workers)", "% of linear", s[1], PROJ_COUNT);
  sb_puts(&sb, "</div>\n<h2>Figures</h2>\n");
  table(p, &sb);
  sb_puts(&sb, "<p class=\"meta\">Scaling efficiency: samples/s at n workers over n times one "
               "worker's alone. Data parallelism with each exchange; allreduce buckets overlap "
               "backward (tensor fusion), the parameter servers take the whole gradient after it; "
               "the codecs' rows add each bucket's codec CPU before its compressed exchange. Memory: "
               "the fullest rank of each strategy (a pipeline stage, a tp rank: their own share). "
               "docs/CLUSTER_FILE.md says how each is costed.</p>\n</body></html>\n");
  int rc = sb.failed ? dt_error("--plot: out of memory") : file_write_atomic(path, sb.buf, sb.len);
  sb_free(&sb);
  return rc;
}
