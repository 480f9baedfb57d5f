/* safetensors reader and writer (F32 tensors, string metadata). The JSON
 * header is parsed by a small recursive-descent parser that accepts the
 * subset the format uses: objects, strings, integers and arrays of them. */
#include "dtrain/safetensors.h"

#include "core/strbuf.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing -------------------------------------------------------------- */

/* A JSON string, quoted and escaped. */
static void sb_json_string(strbuf_t *sb, const char *s) {
  sb_put(sb, "\"", 1);
  sb_json_str(sb, s);
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
  while (!h.failed && (8 + h.len) % 8) sb_put(&h, " ", 1); /* keeps the data 8-byte aligned */
  if (h.failed) {
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

/* ---- reading -------------------------------------------------------------
 * The rules are those of the reference implementation (Hugging Face's
 * safetensors crate, which PyTorch uses): the header is one JSON object;
 * shapes times the dtype size must not overflow and must equal each
 * tensor's byte range; the byte ranges, sorted, must tile the data section
 * exactly -- the first starts at 0, each starts where the previous one
 * ends (no overlap, no gap) and the last ends at the end of the file (no
 * trailing bytes). On top of that dtrain refuses duplicate names and keys,
 * names too long for its fixed buffers (rather than truncating them into
 * collisions) and dtypes other than F32. The parser never reads outside
 * the header: every step checks the end pointer. */

#define ST_MAX_HEADER 100000000u /* the reference implementation's limit */

typedef struct {
  const char *p, *start, *end;
  const char *path;
} json_t;

static long json_offset(const json_t *j) { return 8 + (long)(j->p - j->start); }

static void skip_ws(json_t *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int expect(json_t *j, char c) {
  skip_ws(j);
  if (j->p >= j->end || *j->p != c)
    return dt_error("%s: bad header JSON: expected '%c' at file offset %ld", j->path, c,
                    json_offset(j));
  j->p++;
  return 0;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* A JSON string into out (cap bytes with the NUL). Too long for out is an
 * error, not a truncation: two long names cut short could collide. A
 * \uXXXX escape other than ASCII becomes '?'; \u0000 is refused, since a
 * C string cannot hold it. */
static int parse_string(json_t *j, char *out, size_t cap, const char *what) {
  if (expect(j, '"') != 0) return -1;
  size_t n = 0;
  for (;;) {
    if (j->p >= j->end) return dt_error("%s: bad header JSON: unterminated string", j->path);
    char c = *j->p++;
    if (c == '"') break;
    if ((unsigned char)c < 0x20)
      return dt_error("%s: bad header JSON: control character in a string at file offset %ld",
                      j->path, json_offset(j) - 1);
    if (c == '\\') {
      if (j->p >= j->end) return dt_error("%s: bad header JSON: unterminated string", j->path);
      c = *j->p++;
      switch (c) {
        case '"': case '\\': case '/': break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'n': c = '\n'; break;
        case 'r': c = '\r'; break;
        case 't': c = '\t'; break;
        case 'u': {
          unsigned v = 0;
          for (int k = 0; k < 4; k++) {
            int d = j->p < j->end ? hex_digit(*j->p) : -1;
            if (d < 0)
              return dt_error("%s: bad header JSON: bad \\u escape at file offset %ld", j->path,
                              json_offset(j));
            v = v * 16 + (unsigned)d;
            j->p++;
          }
          if (v == 0)
            return dt_error("%s: bad header JSON: \\u0000 in a string at file offset %ld",
                            j->path, json_offset(j) - 6);
          c = v < 0x80 ? (char)v : '?';
          break;
        }
        default:
          return dt_error("%s: bad header JSON: unknown escape '\\%c' at file offset %ld",
                          j->path, c, json_offset(j) - 2);
      }
    }
    if (n + 1 >= cap)
      return dt_error("%s: %s too long at file offset %ld (at most %zu bytes)", j->path, what,
                      json_offset(j), cap - 1);
    out[n++] = c;
  }
  out[n] = 0;
  return 0;
}

/* A non-negative JSON integer (no sign, no fraction, no leading zeros),
 * checked against overflow. */
static int parse_count(json_t *j, uint64_t *v) {
  skip_ws(j);
  const char *first = j->p;
  uint64_t x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    unsigned d = (unsigned)(*j->p - '0');
    if (x > (UINT64_MAX - d) / 10)
      return dt_error("%s: bad header: integer at file offset %ld overflows 64 bits", j->path,
                      8 + (long)(first - j->start));
    x = x * 10 + d;
    j->p++;
  }
  if (j->p == first)
    return dt_error("%s: bad header JSON: expected a non-negative integer at file offset %ld",
                    j->path, json_offset(j));
  if (j->p - first > 1 && *first == '0')
    return dt_error("%s: bad header JSON: leading zero at file offset %ld", j->path,
                    8 + (long)(first - j->start));
  *v = x;
  return 0;
}

static int parse_count_array(json_t *j, uint64_t *vals, int cap, int *count, const char *what) {
  if (expect(j, '[') != 0) return -1;
  *count = 0;
  skip_ws(j);
  if (j->p < j->end && *j->p == ']') {
    j->p++;
    return 0;
  }
  for (;;) {
    uint64_t v = 0;
    if (parse_count(j, &v) != 0) return -1;
    if (*count >= cap) return dt_error("%s: %s has more than %d entries", j->path, what, cap);
    vals[(*count)++] = v;
    skip_ws(j);
    if (j->p < j->end && *j->p == ',') {
      j->p++;
      continue;
    }
    return expect(j, ']');
  }
}

/* After a member: ',' (more follow) or '}' (the object ends). */
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

/* '{' then either '}' (*empty = 1) or the first member. */
static int open_object(json_t *j, int *empty) {
  if (expect(j, '{') != 0) return -1;
  skip_ws(j);
  *empty = j->p < j->end && *j->p == '}';
  if (*empty) j->p++;
  return 0;
}

static int parse_metadata(json_t *j, safetensors_t *st) {
  int empty, cap = 0;
  if (open_object(j, &empty) != 0) return -1;
  for (int more = !empty; more;) {
    st_meta_t m;
    if (parse_string(j, m.key, sizeof m.key, "metadata key") != 0 || expect(j, ':') != 0 ||
        parse_string(j, m.value, sizeof m.value, "metadata value") != 0)
      return -1;
    if (st->nmeta == cap) {
      cap = cap ? cap * 2 : 8;
      st_meta_t *grown = realloc(st->meta, (size_t)cap * sizeof *grown);
      if (!grown) return dt_error("%s: out of memory", st->path);
      st->meta = grown;
    }
    st->meta[st->nmeta++] = m;
    if (next_member(j, &more) != 0) return -1;
  }
  return 0;
}

/* What the header says of one tensor, before it is checked against the file. */
typedef struct {
  uint64_t dims[4];
  uint64_t offs[2];
} st_entry_t;

/* {"dtype":"F32","shape":[...],"data_offsets":[a,b]} */
static int parse_tensor(json_t *j, st_tensor_t *t, st_entry_t *e) {
  char key[32], dtype[16] = "";
  int have_dtype = 0, have_shape = 0, have_offs = 0, empty;
  if (open_object(j, &empty) != 0) return -1;
  for (int more = !empty; more;) {
    if (parse_string(j, key, sizeof key, "key") != 0 || expect(j, ':') != 0) return -1;
    int cnt, *have;
    if (!strcmp(key, "dtype")) have = &have_dtype;
    else if (!strcmp(key, "shape")) have = &have_shape;
    else if (!strcmp(key, "data_offsets")) have = &have_offs;
    else return dt_error("%s: tensor %s: unexpected key '%s'", j->path, t->name, key);
    if (*have) return dt_error("%s: tensor %s: key '%s' appears twice", j->path, t->name, key);
    *have = 1;
    if (have == &have_dtype) {
      if (parse_string(j, dtype, sizeof dtype, "dtype") != 0) return -1;
    } else if (have == &have_shape) {
      if (parse_count_array(j, e->dims, 4, &cnt, "shape") != 0) return -1;
      t->ndim = cnt;
    } else {
      if (parse_count_array(j, e->offs, 2, &cnt, "data_offsets") != 0) return -1;
      if (cnt != 2) return dt_error("%s: tensor %s: data_offsets needs 2 numbers", j->path, t->name);
    }
    if (next_member(j, &more) != 0) return -1;
  }
  if (!have_dtype || !have_shape || !have_offs)
    return dt_error("%s: tensor %s: missing %s", j->path, t->name,
                    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
  if (strcmp(dtype, "F32") != 0)
    return dt_error("%s: tensor %s: dtype '%s' is not supported (dtrain reads F32)", j->path,
                    t->name, dtype);
  return 0;
}

/* The shape against the byte range; the range inside the data section. */
static int check_tensor(const safetensors_t *st, st_tensor_t *t, const st_entry_t *e,
                        size_t data_start) {
  uint64_t elems = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (e->dims[d] > INT64_MAX ||
        (e->dims[d] && elems > UINT64_MAX / 4 / e->dims[d]))
      return dt_error("%s: tensor %s: shape overflows (dimension %d is %llu)", st->path,
                      t->name, d, (unsigned long long)e->dims[d]);
    elems *= e->dims[d];
    t->dims[d] = (int64_t)e->dims[d];
  }
  size_t data_len = st->file_len - data_start;
  uint64_t b = e->offs[0], end = e->offs[1];
  if (end < b || end > data_len)
    return dt_error("%s: tensor %s: byte range [%llu, %llu) lies outside the %zu data bytes "
                    "(file truncated?)",
                    st->path, t->name, (unsigned long long)b, (unsigned long long)end, data_len);
  if (end - b != elems * 4)
    return dt_error("%s: tensor %s: %llu bytes for %llu floats", st->path, t->name,
                    (unsigned long long)(end - b), (unsigned long long)elems);
  if ((data_start + b) % 4)
    return dt_error("%s: tensor %s: data not 4-byte aligned", st->path, t->name);
  t->len = (size_t)elems;
  t->data = (const float *)(st->file + data_start + b);
  return 0;
}

static int parse_header(safetensors_t *st, const char *hdr, size_t hlen, size_t data_start) {
  json_t j = {hdr, hdr, hdr + hlen, st->path};
  int empty, cap = 0, seen_meta = 0;
  if (open_object(&j, &empty) != 0) return -1;
  for (int more = !empty; more;) {
    char name[sizeof st->tensors[0].name];
    if (parse_string(&j, name, sizeof name, "tensor name") != 0 || expect(&j, ':') != 0)
      return -1;
    if (!strcmp(name, "__metadata__")) {
      if (seen_meta++) return dt_error("%s: __metadata__ appears twice", st->path);
      if (parse_metadata(&j, st) != 0) return -1;
    } else {
      if (st->ntensors == cap) {
        cap = cap ? cap * 2 : 16;
        st_tensor_t *grown = realloc(st->tensors, (size_t)cap * sizeof *grown);
        if (!grown) return dt_error("%s: out of memory", st->path);
        st->tensors = grown;
      }
      st_tensor_t *t = &st->tensors[st->ntensors];
      st_entry_t e = {{0}, {0}};
      memset(t, 0, sizeof *t);
      memcpy(t->name, name, sizeof name);
      if (parse_tensor(&j, t, &e) != 0 || check_tensor(st, t, &e, data_start) != 0) return -1;
      st->ntensors++;
    }
    if (next_member(&j, &more) != 0) return -1;
  }
  skip_ws(&j);
  if (j.p != j.end)
    return dt_error("%s: bad header JSON: data after the closing '}' at file offset %ld",
                    st->path, json_offset(&j));
  return 0;
}

/* Tensors sorted by byte range (then name), for the tiling check. */
static int by_range(const void *a, const void *b) {
  const st_tensor_t *x = *(const st_tensor_t *const *)a, *y = *(const st_tensor_t *const *)b;
  if (x->data != y->data) return x->data < y->data ? -1 : 1;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const st_tensor_t *const *)a)->name, (*(const st_tensor_t *const *)b)->name);
}

static int by_key(const void *a, const void *b) {
  return strcmp((*(const st_meta_t *const *)a)->key, (*(const st_meta_t *const *)b)->key);
}

/* Sorted, so that a header with many keys costs n log n, not n^2. */
static int check_meta_unique(const safetensors_t *st) {
  if (st->nmeta < 2) return 0;
  const st_meta_t **v = malloc((size_t)st->nmeta * sizeof *v);
  if (!v) return dt_error("%s: out of memory", st->path);
  for (int i = 0; i < st->nmeta; i++) v[i] = &st->meta[i];
  qsort(v, (size_t)st->nmeta, sizeof *v, by_key);
  int rc = 0;
  for (int i = 1; i < st->nmeta && rc == 0; i++)
    if (!strcmp(v[i]->key, v[i - 1]->key))
      rc = dt_error("%s: metadata '%s' appears twice", st->path, v[i]->key);
  free(v);
  return rc;
}

/* Names are unique, and the byte ranges tile the data section: sorted, the
 * first starts at 0, each starts where the previous ends, the last ends at
 * the end of the file. */
static int check_layout(const safetensors_t *st, size_t data_start) {
  int n = st->ntensors, rc = 0;
  size_t data_len = st->file_len - data_start;
  if (n == 0)
    return data_len ? dt_error("%s: %zu data bytes but no tensors", st->path, data_len) : 0;
  const st_tensor_t **v = malloc((size_t)n * sizeof *v);
  if (!v) return dt_error("%s: out of memory", st->path);
  for (int i = 0; i < n; i++) v[i] = &st->tensors[i];
  qsort(v, (size_t)n, sizeof *v, by_name);
  for (int i = 1; i < n && rc == 0; i++)
    if (!strcmp(v[i]->name, v[i - 1]->name))
      rc = dt_error("%s: tensor %s appears twice", st->path, v[i]->name);
  if (rc == 0) qsort(v, (size_t)n, sizeof *v, by_range);
  size_t at = 0; /* the end of the bytes covered so far */
  const st_tensor_t *prev = NULL;
  for (int i = 0; i < n && rc == 0; i++) {
    size_t b = (size_t)((const uint8_t *)v[i]->data - st->file) - data_start;
    if (b < at)
      rc = dt_error("%s: tensor %s's bytes [%zu, %zu) overlap tensor %s's (ending at %zu)",
                    st->path, v[i]->name, b, b + v[i]->len * 4, prev->name, at);
    else if (b > at)
      rc = dt_error("%s: data bytes [%zu, %zu) belong to no tensor (a gap before tensor %s)",
                    st->path, at, b, v[i]->name);
    at = b + v[i]->len * 4;
    prev = v[i];
  }
  if (rc == 0 && at != data_len)
    rc = dt_error("%s: %zu bytes of trailing data after the last tensor (%s ends at data byte "
                  "%zu of %zu)", st->path, data_len - at, prev->name, at, data_len);
  free(v);
  return rc;
}

int safetensors_parse(const char *path, uint8_t *file, size_t len, safetensors_t *st) {
  memset(st, 0, sizeof *st);
  snprintf(st->path, sizeof st->path, "%s", path);
  st->file = file;
  st->file_len = len;
  uint64_t hl = 0;
  if (len < 8) {
    dt_error("%s: not a safetensors file (%zu bytes, header length missing)", path, len);
    goto fail;
  }
  for (int b = 0; b < 8; b++) hl |= (uint64_t)file[b] << (8 * b);
  if (hl > len - 8 || hl < 2) {
    dt_error("%s: header length %llu does not fit the %zu-byte file (truncated or not "
             "safetensors)", path, (unsigned long long)hl, len);
    goto fail;
  }
  if (hl > ST_MAX_HEADER) {
    dt_error("%s: header length %llu is more than %u bytes (not safetensors?)", path,
             (unsigned long long)hl, ST_MAX_HEADER);
    goto fail;
  }
  if (parse_header(st, (const char *)file + 8, (size_t)hl, 8 + (size_t)hl) != 0 ||
      check_meta_unique(st) != 0 || check_layout(st, 8 + (size_t)hl) != 0)
    goto fail;
  return 0;
fail:
  safetensors_free(st);
  return -1;
}

int safetensors_read(const char *path, safetensors_t *st) {
  uint8_t *file;
  size_t len;
  memset(st, 0, sizeof *st);
  if (file_read_all(path, 0, &file, &len) != 0) return -1;
  return safetensors_parse(path, file, len, st);
}

int safetensors_meta_int(const safetensors_t *st, const char *key, long long lo, long long hi,
                         long long *out) {
  const char *s = safetensors_meta(st, key);
  if (!s) return dt_error("%s: metadata '%s' missing (not a dtrain checkpoint?)", st->path, key);
  const char *p = s + (*s == '-');
  long long v = 0;
  int ok = *p != 0;
  for (; ok && *p; p++) {
    int d = *p - '0';
    if (d < 0 || d > 9 || v > (LLONG_MAX - d) / 10) ok = 0;
    else v = v * 10 + d;
  }
  if (*s == '-') v = -v;
  if (!ok || v < lo || v > hi)
    return dt_error("%s: metadata '%s' = '%s' is not an integer in %lld..%lld", st->path, key, s,
                    lo, hi);
  *out = v;
  return 0;
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
