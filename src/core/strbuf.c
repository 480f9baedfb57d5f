/* A growable string (strbuf.h): no length limit, one failure flag. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"

static int grow(strbuf_t *sb, size_t more) {
  if (sb->failed) return -1;
  if (sb->len + more + 1 <= sb->cap) return 0;
  size_t cap = sb->cap ? sb->cap : 4096;
  while (cap < sb->len + more + 1) cap *= 2;
  char *p = realloc(sb->buf, cap);
  if (!p) return sb->failed = 1, -1;
  sb->buf = p;
  sb->cap = cap;
  return 0;
}

void sb_printf(strbuf_t *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || grow(sb, (size_t)n) != 0) return;
  va_start(ap, fmt);
  vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

void sb_put(strbuf_t *sb, const char *s, size_t n) {
  if (grow(sb, n) != 0) return;
  memcpy(sb->buf + sb->len, s, n);
  sb->len += n;
  sb->buf[sb->len] = 0;
}

void sb_puts(strbuf_t *sb, const char *s) { sb_put(sb, s, strlen(s)); }

void sb_json_str(strbuf_t *sb, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') sb_printf(sb, "\\%c", c);
    else if (c < 0x20) sb_printf(sb, "\\u%04x", c);
    else sb_printf(sb, "%c", c);
  }
}

void sb_html(strbuf_t *sb, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': sb_puts(sb, "&lt;"); break;
    case '>': sb_puts(sb, "&gt;"); break;
    case '&': sb_puts(sb, "&amp;"); break;
    case '"': sb_puts(sb, "&quot;"); break;
    default: sb_printf(sb, "%c", *s);
    }
  }
}

/* %.10g: the same text in report.json and in the page's data-value
 * attributes, so that a test compares them as strings. */
void sb_num(strbuf_t *sb, double v) {
  if (!isfinite(v)) sb_puts(sb, "null");
  else sb_printf(sb, "%.10g", v);
}

void sb_free(strbuf_t *sb) {
  free(sb->buf);
  *sb = (strbuf_t){0};
}
