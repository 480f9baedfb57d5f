/* Sparse codecs: a set of (index, value) pairs, sent as
 *   u32 count | count x u32 index (strictly increasing) | count x f32 value
 * so 4 + 8k bytes for k values. Which values:
 *   topk:R      the k = ceil(R n) largest magnitudes (Aji & Heafield 2017;
 *               ties by lowest index, so the choice is deterministic);
 *               DGC's selection too (its memory does the rest, memory.c);
 *   randomk:R   k indices uniformly at random without replacement, values
 *               not rescaled (biased; with error feedback: Stich et al.
 *               2018's memory);
 *   threshold:T every value with |x| >= T (Strom 2015), so k varies.
 * Decoding checks the count against n and the size, and every index
 * against n and its predecessor, before it writes anything. */
#include <stddef.h>

#include "compress/codec_internal.h"

size_t codec_keep(double ratio, size_t n) {
  if (n == 0) return 0;
  double k = ceil(ratio * (double)n);
  return k < 1 ? 1 : k > (double)n ? n : (size_t)k;
}

static size_t pairs_message_bytes(const uint8_t *in, size_t avail) {
  return avail < 4 ? avail + 1 : 4 + 8 * (size_t)get_u32(in);
}

static size_t sparse_max_bytes(const codec_spec_t *s, size_t n) { (void)s; return 4 + 8 * n; }
static size_t keep_bytes(const codec_spec_t *s, size_t n) { return 4 + 8 * codec_keep(s->param, n); }
static size_t variable_bytes(const codec_spec_t *s, size_t n) { (void)s, (void)n; return 0; }

/* The k-th largest of a[0..n) (1 <= k <= n), reordering a: Hoare's
 * selection, partitioning in descending order. */
static float kth_largest(float *a, size_t n, size_t k) {
  ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)k - 1;
  while (lo < hi) {
    float pivot = a[lo + (hi - lo) / 2];
    ptrdiff_t i = lo, j = hi;
    while (i <= j) {
      while (a[i] > pivot) i++;
      while (a[j] < pivot) j--;
      if (i <= j) {
        float t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    if (want <= j) hi = j;
    else if (want >= i) lo = i;
    else break;
  }
  return a[want];
}

static size_t put_pairs(uint8_t *out, size_t k) {
  put_u32(out, (uint32_t)k);
  return 4 + 8 * k;
}

static void put_pair(uint8_t *out, size_t k_total, size_t j, size_t index, float v) {
  put_u32(out + 4 + 4 * j, (uint32_t)index);
  put_f32(out + 4 + 4 * k_total + 4 * j, v);
}

static size_t topk_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                          uint8_t *out, float *scratch) {
  (void)seed;
  size_t k = codec_keep(s->param, n);
  if (k == 0) return put_pairs(out, 0);
  for (size_t i = 0; i < n; i++) scratch[i] = fabsf(x[i]);
  float thr = kth_largest(scratch, n, k);
  size_t above = 0;
  for (size_t i = 0; i < n; i++) above += fabsf(x[i]) > thr;
  size_t ties = k - above, j = 0; /* values equal to the threshold, lowest index first */
  for (size_t i = 0; i < n && j < k; i++) {
    float a = fabsf(x[i]);
    if (a > thr || (a == thr && ties && ties--)) put_pair(out, k, j++, i, x[i]);
  }
  return put_pairs(out, k);
}

/* Knuth's selection sampling (Algorithm S): indices come out in order. */
static size_t randomk_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                             uint8_t *out, float *scratch) {
  (void)scratch;
  size_t k = codec_keep(s->param, n), j = 0;
  for (size_t i = 0; i < n && j < k; i++)
    if ((double)codec_uniform(seed, i) * (double)(n - i) < (double)(k - j)) put_pair(out, k, j++, i, x[i]);
  return put_pairs(out, k);
}

static size_t threshold_encode(const codec_spec_t *s, const float *x, size_t n, uint64_t seed,
                               uint8_t *out, float *scratch) {
  (void)seed, (void)scratch;
  float t = (float)s->param;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += fabsf(x[i]) >= t;
  size_t j = 0;
  for (size_t i = 0; i < n; i++)
    if (fabsf(x[i]) >= t) put_pair(out, k, j++, i, x[i]);
  return put_pairs(out, k);
}

static int sparse_decode(const char *name, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  if (bytes < 4) return codec_size_error(name, bytes, 4);
  size_t k = get_u32(in);
  if (k > n) return dt_error("malformed %s message: %zu values for a buffer of %zu", name, k, n);
  if (bytes != 4 + 8 * k) return codec_size_error(name, bytes, 4 + 8 * k);
  for (size_t j = 0; j < k; j++) {
    uint32_t i = get_u32(in + 4 + 4 * j);
    if (i >= n || (j && i <= get_u32(in + 4 * j)))
      return dt_error("malformed %s message: index %u at position %zu (expected increasing "
                      "indices below %zu)", name, i, j, n);
  }
  for (size_t j = 0; j < k; j++) acc[get_u32(in + 4 + 4 * j)] += get_f32(in + 4 + 4 * k + 4 * j);
  return 0;
}

static int topk_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  return sparse_decode(s->kind == CODEC_DGC ? "dgc" : "topk", in, bytes, n, acc);
}
static int randomk_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n, float *acc) {
  (void)s;
  return sparse_decode("randomk", in, bytes, n, acc);
}
static int threshold_decode(const codec_spec_t *s, const uint8_t *in, size_t bytes, size_t n,
                            float *acc) {
  (void)s;
  return sparse_decode("threshold", in, bytes, n, acc);
}

const codec_ops_t codec_topk_ops = {"topk", 1, 1, keep_bytes, keep_bytes, topk_encode, topk_decode, NULL};
const codec_ops_t codec_randomk_ops = {"randomk", 1, 1, keep_bytes, keep_bytes, randomk_encode,
                                       randomk_decode, NULL};
const codec_ops_t codec_threshold_ops = {"threshold", 1, 1, variable_bytes, sparse_max_bytes,
                                         threshold_encode, threshold_decode,
                                         pairs_message_bytes};
