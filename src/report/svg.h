/* Inline SVG charts for the comparison report (svg.c). */
#ifndef DTRAIN_REPORT_SVG_H
#define DTRAIN_REPORT_SVG_H

#include "report/report.h"

typedef struct {
  const char *name;             /* the preset: <g class="series" data-preset=NAME> */
  int color;                    /* its index: the same colour in every chart */
  const double *x, *y;          /* n points (bars: y[0]; stacked: y[0..nparts)) */
  int n;
} svg_series_t;

const char *svg_color(int i);
void svg_line_chart(strbuf_t *sb, const char *id, const char *title, const char *xlabel,
                    const char *ylabel, const svg_series_t *s, int ns);
void svg_bar_chart(strbuf_t *sb, const char *id, const char *title, const char *unit,
                   const svg_series_t *s, int ns);
void svg_stacked_chart(strbuf_t *sb, const char *id, const char *title, const char *unit,
                       const svg_series_t *s, int ns, const char *const *parts, int nparts);

#endif
