/* safetensors reader and writer (F32 tensors, string metadata). The JSON
 * header is parsed by a small recursive-descent parser that accepts the
 * subset the format uses: objects, strings, integers and arrays of them. */
#include "dtrain/safetensors.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing -------------------------------------------------------------- */

typedef struct {
  char *buf;
  size_t len, cap;
  int oom;
} strbuf_t;

static void sb_put(strbuf_t *sb, const char *s, size_t n) {
  if (sb->oom) return;
  if (sb->len + n + 1 > sb->cap) {
    size_t cap = (sb->cap ? sb->cap * 2 : 1024) + n;
    char *p = realloc(sb->buf, cap);
    if (!p) {
      sb->oom = 1;
      return;
    }
    sb->buf = p;
    sb->cap = cap;
  }
  memcpy(sb->buf + sb->len, s, n);
  sb->len += n;
  sb->buf[sb->len] = 0;
}

static void sb_printf(strbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf_t *sb, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  sb_put(sb, tmp, n < (int)sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json_string(strbuf_t *sb, const char *s) {
  sb_put(sb, "\"", 1);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sb_put(sb, "\\", 1);
    if ((unsigned char)*s < 0x20) {
      sb_printf(sb, "\\u%04x", (unsigned char)*s);
      continue;
    }
    sb_put(sb, s, 1);
  }
  sb_put(sb, "\"", 1);
}

int safetensors_write(const char *path, const st_tensor_t *t, int nt, const st_meta_t *meta,
                      int nmeta) {
  strbuf_t h = {0};
  sb_put(&h, "{\"__metadata__\":{", 17);
  for (int i = 0; i < nmeta; i++) {
    if (i) sb_put(&h, ",", 1);
    sb_json_string(&h, meta[i].key);
    sb_put(&h, ":", 1);
    sb_json_string(&h, meta[i].value);
  }
  sb_put(&h, "}", 1);
  size_t off = 0;
  for (int i = 0; i < nt; i++) {
    sb_put(&h, ",", 1);
    sb_json_string(&h, t[i].name);
    sb_put(&h, ":{\"dtype\":\"F32\",\"shape\":[", 25);
    for (int d = 0; d < t[i].ndim; d++) sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].dims[d]);
    sb_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].len * 4);
    off += t[i].len * 4;
  }
  sb_put(&h, "}", 1);
  while (!h.oom && (8 + h.len) % 8) sb_put(&h, " ", 1); /* keeps the data 8-byte aligned */
  if (h.oom) {
    free(h.buf);
    return dt_error("%s: out of memory building the header", path);
  }
  size_t total = 8 + h.len + off;
  uint8_t *file = malloc(total);
  if (!file) {
    free(h.buf);
    return dt_error("%s: out of memory (%zu bytes)", path, total);
  }
  uint64_t hl = h.len;
  for (int b = 0; b < 8; b++) file[b] = (uint8_t)(hl >> (8 * b)); /* little-endian */
  memcpy(file + 8, h.buf, h.len);
  uint8_t *p = file + 8 + h.len;
  for (int i = 0; i < nt; i++) {
    memcpy(p, t[i].data, t[i].len * 4);
    p += t[i].len * 4;
  }
  free(h.buf);
  int rc = file_write_atomic(path, file, total);
  free(file);
  return rc;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct {
  const char *p, *start, *end;
  const char *path;
} json_t;

static void skip_ws(json_t *j) {
  while (j->p < j->end && isspace((unsigned char)*j->p)) j->p++;
}

static int expect(json_t *j, char c) {
  skip_ws(j);
  if (j->p >= j->end || *j->p != c)
    return dt_error("%s: bad header JSON: expected '%c' at file offset %ld", j->path, c,
                    8 + (long)(j->p - j->start));
  j->p++;
  return 0;
}

static int parse_string(json_t *j, char *out, size_t cap) {
  if (expect(j, '"') != 0) return -1;
  size_t n = 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if (c == '\\') {
      if (j->p >= j->end) break;
      c = *j->p++;
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
      else if (c == 'u') { /* keep it simple: \\uXXXX -> '?' */
        j->p += 4;
        c = '?';
      }
    }
    if (n + 1 < cap) out[n++] = c;
  }
  if (j->p >= j->end) return dt_error("%s: bad header JSON: unterminated string", j->path);
  j->p++;
  out[n] = 0;
  return 0;
}

static int parse_int64(json_t *j, int64_t *v) {
  skip_ws(j);
  char *e;
  long long x = strtoll(j->p, &e, 10);
  if (e == j->p || e > j->end) return dt_error("%s: bad header JSON: expected an integer", j->path);
  j->p = e;
  *v = x;
  return 0;
}

static int parse_int_array(json_t *j, int64_t *vals, int cap, int *count) {
  if (expect(j, '[') != 0) return -1;
  *count = 0;
  skip_ws(j);
  if (j->p < j->end && *j->p == ']') {
    j->p++;
    return 0;
  }
  for (;;) {
    int64_t v = 0;
    if (parse_int64(j, &v) != 0) return -1;
    if (*count >= cap) return dt_error("%s: header array too long (at most %d)", j->path, cap);
    vals[(*count)++] = v;
    skip_ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    return expect(j, ']');
  }
}

static int next_member(json_t *j, int *more) {
  skip_ws(j);
  if (j->p < j->end && *j->p == ',') {
    j->p++;
    *more = 1;
    return 0;
  }
  *more = 0;
  return expect(j, '}');
}

static int parse_metadata(json_t *j, safetensors_t *st) {
  if (expect(j, '{') != 0) return -1;
  skip_ws(j);
  if (j->p < j->end && *j->p == '}') {
    j->p++;
    return 0;
  }
  for (int more = 1; more;) {
    st_meta_t m;
    if (parse_string(j, m.key, sizeof m.key) != 0 || expect(j, ':') != 0 ||
        parse_string(j, m.value, sizeof m.value) != 0)
      return -1;
    st_meta_t *grown = realloc(st->meta, (size_t)(st->nmeta + 1) * sizeof *grown);
    if (!grown) return dt_error("out of memory");
    st->meta = grown;
    st->meta[st->nmeta++] = m;
    if (next_member(j, &more) != 0) return -1;
  }
  return 0;
}

/* {"dtype":"F32","shape":[...],"data_offsets":[a,b]} */
static int parse_tensor(json_t *j, st_tensor_t *t, int64_t offs[2]) {
  char key[32], dtype[16] = "";
  int have_shape = 0, have_offs = 0;
  if (expect(j, '{') != 0) return -1;
  for (int more = 1; more;) {
    if (parse_string(j, key, sizeof key) != 0 || expect(j, ':') != 0) return -1;
    int cnt;
    if (!strcmp(key, "dtype")) {
      if (parse_string(j, dtype, sizeof dtype) != 0) return -1;
    } else if (!strcmp(key, "shape")) {
      if (parse_int_array(j, t->dims, 4, &cnt) != 0) return -1;
      t->ndim = cnt;
      have_shape = 1;
    } else if (!strcmp(key, "data_offsets")) {
      if (parse_int_array(j, offs, 2, &cnt) != 0) return -1;
      if (cnt != 2) return dt_error("%s: tensor %s: data_offsets needs 2 numbers", j->path, t->name);
      have_offs = 1;
    } else {
      return dt_error("%s: tensor %s: unexpected key '%s'", j->path, t->name, key);
    }
    if (next_member(j, &more) != 0) return -1;
  }
  if (strcmp(dtype, "F32") != 0)
    return dt_error("%s: tensor %s: dtype '%s' is not supported (dtrain reads F32)", j->path,
                    t->name, dtype);
  if (!have_shape || !have_offs)
    return dt_error("%s: tensor %s: missing shape or data_offsets", j->path, t->name);
  return 0;
}

static int check_tensor(const safetensors_t *st, st_tensor_t *t, const int64_t offs[2],
                        size_t data_start) {
  int64_t elems = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->dims[d] < 0 || t->dims[d] > (1ll << 40))
      return dt_error("%s: tensor %s: bad dimension %lld", st->path, t->name, (long long)t->dims[d]);
    elems *= t->dims[d];
  }
  size_t data_len = st->file_len - data_start;
  if (offs[0] < 0 || offs[1] < offs[0] || (size_t)offs[1] > data_len)
    return dt_error("%s: tensor %s: byte range [%lld, %lld) lies outside the %zu data bytes "
                    "(file truncated?)",
                    st->path, t->name, (long long)offs[0], (long long)offs[1], data_len);
  if (offs[1] - offs[0] != elems * 4)
    return dt_error("%s: tensor %s: %lld bytes for %lld floats", st->path, t->name,
                    (long long)(offs[1] - offs[0]), (long long)elems);
  if ((data_start + (size_t)offs[0]) % 4)
    return dt_error("%s: tensor %s: data not 4-byte aligned", st->path, t->name);
  t->len = (size_t)elems;
  t->data = (const float *)(st->file + data_start + offs[0]);
  return 0;
}

static int parse_header(safetensors_t *st, const char *hdr, size_t hlen, size_t data_start) {
  json_t j = {hdr, hdr, hdr + hlen, st->path};
  if (expect(&j, '{') != 0) return -1;
  skip_ws(&j);
  if (j.p < j.end && *j.p == '}') return 0;
  for (int more = 1; more;) {
    char name[128];
    if (parse_string(&j, name, sizeof name) != 0 || expect(&j, ':') != 0) return -1;
    if (!strcmp(name, "__metadata__")) {
      if (parse_metadata(&j, st) != 0) return -1;
    } else {
      st_tensor_t t = {0};
      int64_t offs[2];
      snprintf(t.name, sizeof t.name, "%s", name);
      if (parse_tensor(&j, &t, offs) != 0 || check_tensor(st, &t, offs, data_start) != 0) return -1;
      st_tensor_t *grown = realloc(st->tensors, (size_t)(st->ntensors + 1) * sizeof *grown);
      if (!grown) return dt_error("out of memory");
      st->tensors = grown;
      st->tensors[st->ntensors++] = t;
    }
    if (next_member(&j, &more) != 0) return -1;
  }
  return 0;
}

int safetensors_read(const char *path, safetensors_t *st) {
  memset(st, 0, sizeof *st);
  snprintf(st->path, sizeof st->path, "%s", path);
  if (file_read_all(path, 0, &st->file, &st->file_len) != 0) return -1;
  uint64_t hl = 0;
  if (st->file_len < 8) {
    dt_error("%s: not a safetensors file (%zu bytes, header length missing)", path, st->file_len);
    goto fail;
  }
  for (int b = 0; b < 8; b++) hl |= (uint64_t)st->file[b] << (8 * b);
  if (hl > st->file_len - 8 || hl < 2) {
    dt_error("%s: header length %llu does not fit the %zu-byte file (truncated or not "
             "safetensors)", path, (unsigned long long)hl, st->file_len);
    goto fail;
  }
  if (parse_header(st, (const char *)st->file + 8, hl, 8 + hl) != 0) goto fail;
  return 0;
fail:
  safetensors_free(st);
  return -1;
}

const st_tensor_t *safetensors_find(const safetensors_t *st, const char *name) {
  for (int i = 0; i < st->ntensors; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}

const char *safetensors_meta(const safetensors_t *st, const char *key) {
  for (int i = 0; i < st->nmeta; i++)
    if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
  return NULL;
}

void safetensors_free(safetensors_t *st) {
  free(st->file);
  free(st->tensors);
  free(st->meta);
  memset(st, 0, sizeof *st);
}
