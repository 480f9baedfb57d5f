/* A growable string: text built in memory, then written in one atomic
 * write (reports, safetensors headers). An allocation failure marks the
 * buffer failed, and the writer checks once at the end instead of at
 * every call. */
#ifndef DTRAIN_CORE_STRBUF_H
#define DTRAIN_CORE_STRBUF_H

#include <stddef.h>

typedef struct {
  char *buf;
  size_t len, cap;
  int failed;                   /* an allocation failed: the text is cut */
} strbuf_t;
void sb_printf(strbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_puts(strbuf_t *sb, const char *s);
void sb_put(strbuf_t *sb, const char *s, size_t n);
/* s as the inside of a JSON string, or as HTML text (escaped) */
void sb_json_str(strbuf_t *sb, const char *s);
void sb_html(strbuf_t *sb, const char *s);
/* A number as JSON and data-value attributes write it ("null" when not finite). */
void sb_num(strbuf_t *sb, double v);
void sb_free(strbuf_t *sb);

#endif
