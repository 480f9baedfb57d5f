/* The codecs by name: --compress parsed, and encode/decode dispatched to
 * the file of each family (codec_float16.c: fp16, bf16; codec_int8.c;
 * codec_onebit.c; codec_qsgd.c; codec_terngrad.c; codec_sparse.c: top-k,
 * random-k, threshold, and DGC's selection). fp32 is the identity here. */
#include <stdio.h>
#include <stdlib.h>

#include "compress/codec_internal.h"

/* The codecs: one row each, the one place a codec is registered (its
 * encode and decode live in a file of their own, codec_<family>.c). */
extern const codec_ops_t codec_fp32_ops, codec_fp16_ops, codec_bf16_ops, codec_int8_ops,
    codec_onebit_ops, codec_qsgd_ops, codec_terngrad_ops, codec_topk_ops, codec_randomk_ops,
    codec_threshold_ops, codec_strom_ops;

static const struct {
  const char *name;
  codec_kind_t kind;
  const codec_ops_t *ops;
  const char *form;     /* as --compress takes it, for the list of codecs */
  int needs;            /* 0: no parameter; 1: required; 2: optional ":sr"; 3: optional */
  double lo, hi;        /* the parameter's range (lo excluded when lo_open) */
  int lo_open, integral;
  const char *expect;
} CODECS[] = {
    {"none", CODEC_NONE, &codec_fp32_ops, "none", 0, 0, 0, 0, 0, ""},
    {"fp32", CODEC_FP32, &codec_fp32_ops, "fp32", 0, 0, 0, 0, 0, ""},
    {"fp16", CODEC_FP16, &codec_fp16_ops, "fp16[:sr]", 2, 0, 0, 0, 0, "fp16 or fp16:sr (stochastic rounding)"},
    {"bf16", CODEC_BF16, &codec_bf16_ops, "bf16[:sr]", 2, 0, 0, 0, 0, "bf16 or bf16:sr (stochastic rounding)"},
    {"int8", CODEC_INT8, &codec_int8_ops, "int8[:sr]", 2, 0, 0, 0, 0, "int8 or int8:sr (stochastic rounding)"},
    {"onebit", CODEC_ONEBIT, &codec_onebit_ops, "onebit", 0, 0, 0, 0, 0, ""},
    {"qsgd", CODEC_QSGD, &codec_qsgd_ops, "qsgd:S", 1, 1, 32767, 0, 1, "qsgd:S with S levels, an integer in [1, 32767]"},
    {"terngrad", CODEC_TERNGRAD, &codec_terngrad_ops, "terngrad[:C]", 3, 0, 1000, 1, 0,
     "terngrad, or terngrad:C clipping at C standard deviations, 0 < C <= 1000 (the paper's 2.5)"},
    {"terngrad-chunked", CODEC_TERNGRAD_CHUNKED, &codec_terngrad_ops, "terngrad-chunked[:C]", 3, 0,
     1000, 1, 0, "terngrad-chunked, or terngrad-chunked:C clipping at C standard deviations, "
     "0 < C <= 1000"},
    {"topk", CODEC_TOPK, &codec_topk_ops, "topk:R", 1, 0, 1, 1, 0, "topk:R with a ratio R in (0, 1]"},
    {"randomk", CODEC_RANDOMK, &codec_randomk_ops, "randomk:R", 1, 0, 1, 1, 0, "randomk:R with a ratio R in (0, 1]"},
    {"threshold", CODEC_THRESHOLD, &codec_threshold_ops, "threshold:T", 1, 0, 1e30, 1, 0, "threshold:T with T > 0"},
    {"strom", CODEC_STROM, &codec_strom_ops, "strom:T", 1, 0, 1e30, 1, 0, "strom:T with T > 0"},
    {"dgc", CODEC_DGC, &codec_topk_ops, "dgc:R", 1, 0, 1, 1, 0, "dgc:R with a ratio R in (0, 1]"},
    {"powersgd", CODEC_POWERSGD, &codec_fp32_ops, "powersgd:R", 1, 1, 1024, 0, 1,
     "powersgd:R with a rank R, an integer in [1, 1024]"},
};
#define NCODECS ((int)(sizeof CODECS / sizeof CODECS[0]))

/* "none, fp32, fp16[:sr], ...": every codec's form, from the table. */
static const char *known_codecs(void) {
  static char buf[512];
  size_t len = 0;
  for (int i = 0; i < NCODECS && len < sizeof buf; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", i ? ", " : "", CODECS[i].form);
  return buf;
}

int codec_parse(const char *text, codec_spec_t *out) {
  const char *colon = strchr(text, ':');
  size_t n = colon ? (size_t)(colon - text) : strlen(text);
  for (int i = 0; i < NCODECS; i++) {
    if (strlen(CODECS[i].name) != n || strncmp(CODECS[i].name, text, n)) continue;
    codec_spec_t s = {.kind = CODECS[i].kind};
    const char *arg = colon ? colon + 1 : NULL;
    if (CODECS[i].needs == 0 && arg)
      return dt_error("option --compress: '%s': %s takes no parameter", text, CODECS[i].name);
    if (CODECS[i].needs == 2) {
      if (arg && strcmp(arg, "sr"))
        return dt_error("option --compress: '%s' (expected %s)", text, CODECS[i].expect);
      s.stochastic = arg != NULL;
    }
    if (CODECS[i].needs == 1 || (CODECS[i].needs == 3 && arg)) {
      char *end;
      double v = arg && *arg ? strtod(arg, &end) : NAN;
      if (isnan(v) || *end || (CODECS[i].integral && v != floor(v)) || v > CODECS[i].hi ||
          (CODECS[i].lo_open ? !(v > CODECS[i].lo) : v < CODECS[i].lo))
        return dt_error("option --compress: '%s' (expected %s)", text, CODECS[i].expect);
      s.param = v;
    }
    *out = s;
    return 0;
  }
  return dt_error("option --compress: unknown codec '%s' (expected one of %s)", text, known_codecs());
}

void codec_format(const codec_spec_t *s, char *buf, size_t cap) {
  const char *name = "none";
  int needs = 0;
  for (int i = 0; i < NCODECS; i++)
    if (CODECS[i].kind == s->kind) name = CODECS[i].name, needs = CODECS[i].needs;
  if (needs == 1 || (needs == 3 && s->param > 0)) snprintf(buf, cap, "%s:%g", name, s->param);
  else snprintf(buf, cap, "%s%s", name, s->stochastic ? ":sr" : "");
}

static const codec_ops_t *ops_of(const codec_spec_t *s) {
  for (int i = 0; i < NCODECS; i++)
    if (CODECS[i].kind == s->kind) return CODECS[i].ops;
  return &codec_fp32_ops;
}

int codec_biased(const codec_spec_t *s) {
  if (s->kind == CODEC_NONE || s->kind == CODEC_FP32) return 0;
  if (s->kind == CODEC_POWERSGD) return 1;
  if (s->kind == CODEC_TERNGRAD || s->kind == CODEC_TERNGRAD_CHUNKED)
    return s->param > 0; /* clipped: biased past C sigma */
  return ops_of(s)->biased && !s->stochastic;
}

int codec_default_feedback(const codec_spec_t *s) {
  return codec_biased(s) && s->kind != CODEC_TERNGRAD && s->kind != CODEC_TERNGRAD_CHUNKED;
}

int codec_sparse(const codec_spec_t *s) {
  return s->kind != CODEC_POWERSGD && ops_of(s)->sparse;
}

int codec_small_dense(const codec_spec_t *s) {
  return codec_sparse(s) || s->kind == CODEC_ONEBIT;
}

int codec_by_column(const codec_spec_t *s) { return s->kind == CODEC_ONEBIT; }

int codec_lossless(const codec_spec_t *s) { return s->kind == CODEC_FP32; }

size_t codec_bytes(const codec_spec_t *s, size_t n) { return ops_of(s)->bytes(s, n); }
size_t codec_max_bytes(const codec_spec_t *s, size_t n) { return ops_of(s)->max_bytes(s, n); }

int codec_fixed_size(const codec_spec_t *s) { return ops_of(s)->message_bytes == NULL; }

size_t codec_message_bytes(const codec_spec_t *s, const void *in, size_t avail, size_t n) {
  size_t b = codec_bytes(s, n);
  return b ? b : ops_of(s)->message_bytes(in, avail);
}

size_t codec_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed, void *out,
                    float *scratch) {
  return ops_of(s)->encode(s, x, n, seed, out, scratch);
}

int codec_decode_add(const codec_spec_t *s, const void *in, size_t bytes, size_t n, float *acc) {
  return ops_of(s)->decode_add(s, in, bytes, n, acc);
}

int codec_size_error(const char *codec, size_t bytes, size_t want) {
  return dt_error("malformed %s message: %zu bytes where an encoding of this buffer takes %zu",
                  codec, bytes, want);
}

/* ---- fp32: the identity ---------------------------------------------------- */

static size_t fp32_bytes(const codec_spec_t *s, size_t n) { (void)s; return 4 * n; }

static size_t fp32_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)s, (void)seed, (void)scratch;
  memcpy(out, x, 4 * n);
  return 4 * n;
}

static int fp32_decode_add(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n,
                           float *acc) {
  (void)s;
  if (bytes != 4 * n) return codec_size_error("fp32", bytes, 4 * n);
  for (size_t i = 0; i < n; i++) acc[i] += get_f32(in + 4 * i);
  return 0;
}

const codec_ops_t codec_fp32_ops = {"fp32", 0, 0, fp32_bytes, fp32_bytes, fp32_encode,
                                    fp32_decode_add, NULL};
