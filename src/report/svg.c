/* The report's charts as inline SVG: lines (one polyline a preset), bars
 * (one bar a preset) and stacked bars (one bar a preset, a segment a
 * part). Each preset's marks are one <g class="series" data-preset=NAME>,
 * so a reader (or a test) finds a chart's series by name; each point and
 * bar carries its value in a <title> (shown on hover). */
#include <math.h>
#include <string.h>

#include "report/svg.h"

#define W 560
#define H 300
#define ML 64
#define MR 16
#define MT 34
#define MB 46

static const char *const PALETTE[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NPALETTE ((int)(sizeof PALETTE / sizeof PALETTE[0]))

const char *svg_color(int i) { return PALETTE[i % NPALETTE]; }
/* Past ten presets, the colours repeat with a dashed line. */
static const char *dash(int i) { return i / NPALETTE % 2 ? " stroke-dasharray=\"6 3\"" : ""; }

/* A step of 1, 2 or 5 times a power of ten giving about five ticks. */
static double nice_step(double range) {
  if (!(range > 0)) return 1;
  double raw = range / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static void open_chart(strbuf_t *sb, const char *id, const char *title, int h) {
  sb_printf(sb, "<figure><svg class=\"chart\" data-chart=\"%s\" viewBox=\"0 0 %d %d\" "
                "width=\"%d\" height=\"%d\" role=\"img\" xmlns=\"http://www.w3.org/2000/svg\">"
                "<text class=\"title\" x=\"%d\" y=\"20\">", id, W, h, W, h, ML);
  sb_html(sb, title);
  sb_puts(sb, "</text>");
}

/* A tick's text, with as many decimals as the step between ticks needs. */
static void label(double v, double step, char *buf, size_t cap) {
  int dec = step > 0 ? (int)ceil(-log10(step) - 1e-9) : 2;
  if (dec < 0) dec = 0;
  if (dec > 6) dec = 6;
  if (fabs(v) >= 1e6) snprintf(buf, cap, "%.3gM", v / 1e6);
  else if (fabs(v) >= 1e4) snprintf(buf, cap, "%.3gk", v / 1e3);
  else snprintf(buf, cap, "%.*f", dec, v);
}

typedef struct { double x0, x1, y0, y1; } range_t;

static double px(const range_t *r, double x) { return ML + (x - r->x0) / (r->x1 - r->x0) * (W - ML - MR); }
static double py(const range_t *r, double y) { return H - MB - (y - r->y0) / (r->y1 - r->y0) * (H - MT - MB); }

static void axes(strbuf_t *sb, const range_t *r, const char *xlabel, const char *ylabel) {
  char b[32];
  double sx = nice_step(r->x1 - r->x0), sy = nice_step(r->y1 - r->y0);
  for (double v = ceil(r->x0 / sx) * sx; v <= r->x1 + sx * 1e-9; v += sx) {
    label(v, sx, b, sizeof b);
    sb_printf(sb, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
                  "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>",
              px(r, v), MT, px(r, v), H - MB, px(r, v), H - MB + 16, b);
  }
  for (double v = ceil(r->y0 / sy) * sy; v <= r->y1 + sy * 1e-9; v += sy) {
    label(v, sy, b, sizeof b);
    sb_printf(sb, "<line class=\"grid\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>"
                  "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
              ML, py(r, v), W - MR, py(r, v), ML - 6, py(r, v) + 4, b);
  }
  sb_printf(sb, "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>"
                "<line class=\"axis\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/>",
            ML, H - MB, W - MR, H - MB, ML, MT, ML, H - MB);
  sb_printf(sb, "<text class=\"label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (ML + W - MR) / 2, H - 8);
  sb_html(sb, xlabel);
  sb_printf(sb, "</text><text class=\"label\" transform=\"translate(14 %d) rotate(-90)\" "
                "text-anchor=\"middle\">", (MT + H - MB) / 2);
  sb_html(sb, ylabel);
  sb_puts(sb, "</text>");
}

static range_t line_range(const svg_series_t *s, int ns) {
  range_t r = {0, 0, INFINITY, -INFINITY};
  for (int i = 0; i < ns; i++)
    for (int k = 0; k < s[i].n; k++) {
      if (!isfinite(s[i].x[k]) || !isfinite(s[i].y[k])) continue;
      if (s[i].x[k] > r.x1) r.x1 = s[i].x[k];
      if (s[i].y[k] < r.y0) r.y0 = s[i].y[k];
      if (s[i].y[k] > r.y1) r.y1 = s[i].y[k];
    }
  if (!(r.x1 > 0)) r.x1 = 1;
  if (!isfinite(r.y0)) r.y0 = 0, r.y1 = 1;
  double pad = (r.y1 - r.y0) * 0.05;
  if (!(pad > 0)) pad = fabs(r.y1) * 0.05 + 1e-3;
  r.y0 -= pad;
  r.y1 += pad;
  r.x1 *= 1.02;
  return r;
}

void svg_line_chart(strbuf_t *sb, const char *id, const char *title, const char *xlabel,
                    const char *ylabel, const svg_series_t *s, int ns) {
  range_t r = line_range(s, ns);
  open_chart(sb, id, title, H);
  axes(sb, &r, xlabel, ylabel);
  for (int i = 0; i < ns; i++) {
    sb_puts(sb, "<g class=\"series\" data-preset=\"");
    sb_html(sb, s[i].name);
    sb_printf(sb, "\" stroke=\"%s\" fill=\"%s\"><polyline fill=\"none\" stroke-width=\"2\"%s points=\"",
              svg_color(s[i].color), svg_color(s[i].color), dash(s[i].color));
    for (int k = 0; k < s[i].n; k++)
      if (isfinite(s[i].x[k]) && isfinite(s[i].y[k]))
        sb_printf(sb, "%s%.1f,%.1f", k ? " " : "", px(&r, s[i].x[k]), py(&r, s[i].y[k]));
    sb_puts(sb, "\"/>");
    for (int k = 0; k < s[i].n; k++) {
      if (!isfinite(s[i].x[k]) || !isfinite(s[i].y[k])) continue;
      sb_printf(sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"><title>", px(&r, s[i].x[k]), py(&r, s[i].y[k]));
      sb_html(sb, s[i].name);
      sb_printf(sb, ": %.4g, %.4g</title></circle>", s[i].x[k], s[i].y[k]);
    }
    sb_puts(sb, "</g>");
  }
  sb_puts(sb, "</svg></figure>\n");
}

static int bar_height(int n) { return MT + n * 24 + 30; }

void svg_bar_chart(strbuf_t *sb, const char *id, const char *title, const char *unit,
                   const svg_series_t *s, int ns) {
  double max = 0;
  for (int i = 0; i < ns; i++)
    if (isfinite(s[i].y[0]) && s[i].y[0] > max) max = s[i].y[0];
  if (!(max > 0)) max = 1;
  int h = bar_height(ns), left = 150, right = W - 90;
  open_chart(sb, id, title, h);
  for (int i = 0; i < ns; i++) {
    double v = s[i].y[0], y = MT + i * 24;
    double w = isfinite(v) ? v / max * (right - left) : 0;
    char b[32];
    if (isfinite(v)) label(v, fabs(v) / 1000, b, sizeof b);
    else snprintf(b, sizeof b, "n/a");
    sb_puts(sb, "<g class=\"series\" data-preset=\"");
    sb_html(sb, s[i].name);
    sb_printf(sb, "\"><text class=\"tick\" x=\"%d\" y=\"%.0f\" text-anchor=\"end\">", left - 6, y + 15);
    sb_html(sb, s[i].name);
    sb_printf(sb, "</text><rect x=\"%d\" y=\"%.0f\" width=\"%.1f\" height=\"18\" fill=\"%s\">"
                  "<title>%s %s</title></rect><text class=\"tick\" x=\"%.1f\" y=\"%.0f\">%s</text></g>",
              left, y, w, svg_color(s[i].color), b, unit, left + w + 4, y + 15, b);
  }
  sb_printf(sb, "<text class=\"label\" x=\"%d\" y=\"%d\">", left, h - 8);
  sb_html(sb, unit);
  sb_puts(sb, "</text></svg></figure>\n");
}

void svg_stacked_chart(strbuf_t *sb, const char *id, const char *title, const char *unit,
                       const svg_series_t *s, int ns, const char *const *parts, int nparts) {
  static const char *const PART_COLORS[] = {"#4e79a7", "#e15759", "#b07aa1", "#edc948", "#f28e2b", "#bab0ac"};
  double max = 0;
  for (int i = 0; i < ns; i++) {
    double t = 0;
    for (int k = 0; k < nparts; k++) t += isfinite(s[i].y[k]) ? s[i].y[k] : 0;
    if (t > max) max = t;
  }
  if (!(max > 0)) max = 1;
  int h = bar_height(ns) + 20, left = 150, right = W - 70;
  open_chart(sb, id, title, h);
  for (int i = 0; i < ns; i++) {
    double y = MT + i * 24, x = left, total = 0;
    sb_puts(sb, "<g class=\"series\" data-preset=\"");
    sb_html(sb, s[i].name);
    sb_printf(sb, "\"><text class=\"tick\" x=\"%d\" y=\"%.0f\" text-anchor=\"end\">", left - 6, y + 15);
    sb_html(sb, s[i].name);
    sb_puts(sb, "</text>");
    for (int k = 0; k < nparts; k++) {
      double v = isfinite(s[i].y[k]) ? s[i].y[k] : 0, w = v / max * (right - left);
      total += v;
      sb_printf(sb, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"18\" fill=\"%s\"><title>%s: "
                    "%.3g %s</title></rect>", x, y, w, PART_COLORS[k % 6], parts[k], v, unit);
      x += w;
    }
    sb_printf(sb, "<text class=\"tick\" x=\"%.1f\" y=\"%.0f\">%.3g %s</text></g>", x + 4, y + 15, total, unit);
  }
  double lx = 16; /* the legend under the bars, from the chart's left edge */
  for (int k = 0; k < nparts; k++) {
    sb_printf(sb, "<rect x=\"%.0f\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                  "<text class=\"tick\" x=\"%.0f\" y=\"%d\">%s</text>",
              lx, h - 20, PART_COLORS[k % 6], lx + 14, h - 11, parts[k]);
    lx += 14 + 6.4 * (double)strlen(parts[k]) + 12;
  }
  sb_puts(sb, "</svg></figure>\n");
}
