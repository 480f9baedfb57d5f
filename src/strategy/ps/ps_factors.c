/* Project Adam's pushes of the fully connected layers (Chilimbi et al.
 * 2014; the taxonomy's table: gradient computation for fully connected
 * layers moved into the parameter servers; the Chinese notes: activations
 * and errors sent instead of the parameters): under --ps-push
 * factors a worker sends, for each dense layer, its rows of error terms
 * dY (n x out, after the fused ReLU's mask) and of inputs X (n x in), and
 * the server holding the layer computes dW = dY^T X and db = the column
 * sums of dY itself (the gradient's sufficient factors, the same outer
 * products compress/sufficient_factors.c sums for allreduce). Every
 * other tensor (convolutions, norms, embeddings) goes as its gradient.
 *
 * The paper sends factors for every fully connected layer, whatever the
 * batch; so does this: a layer's factors are n (in + out) floats against
 * in out + out for its gradient, fewer while n < in out / (in + out)
 * (about 312 rows for mlp's 784 x 512; a 10-way output layer of 256
 * inputs gains only below 9 rows: describe_step and the metrics show the
 * bytes as they are).
 *
 * A part's payload, for server range [lo, hi) of the rank's keys:
 *   uint64 rows; then per factored layer in the range, in key order,
 *   dY (rows x out) and X (rows x in); then the gradient of every key of
 *   the range no factored layer covers, in key order.
 * A layer's weight and bias (when this rank holds the bias: under --tp a
 * row-split layer's whole bias is tensor-parallel rank 0's) must lie on
 * one server: ps_shard_plan_keep keeps each layer's span whole.
 *
 * The expansion runs the worker's own products (dense.c's dW GEMM, its
 * column sums in row order), so a factored push equals the gradient push
 * bit for bit on the same kernel. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

int ps_factor_plan(const model_t *m, const ps_keys_t *k, ps_factor_plan_t *out) {
  memset(out, 0, sizeof *out);
  out->f = calloc((size_t)m->nlayers + 1, sizeof *out->f);
  if (!out->f) return dt_error("out of memory");
  for (int li = 0; li < m->nlayers; li++) {
    const layer_t *l = &m->layers[li];
    if (l->spec.kind != LAYER_DENSE) continue;
    int wt = -1, bt = -1;
    for (int i = 0; i < m->ntensors; i++) {
      if (m->tensors[i].layer != li) continue;
      if (wt < 0) wt = i;
      else if (bt < 0) bt = i;
    }
    if (wt < 0 || k->key[wt] == PS_NO_KEY) continue;
    ps_factor_t *f = &out->f[out->n++];
    f->layer = li;
    f->in = shape_size(l->in_shape);
    f->out = (size_t)l->out_shape.c;
    f->wkey = k->key[wt];
    f->bkey = bt >= 0 ? k->key[bt] : PS_NO_KEY;
    f->end = f->wkey + f->in * f->out;
    if (f->bkey != PS_NO_KEY) {
      if (f->bkey != f->end)
        return dt_error("--ps-push factors: layer %d's bias does not follow its weight in the "
                        "keys (a bug)", li);
      f->end += f->out;
    }
  }
  return 0;
}

void ps_factor_plan_free(ps_factor_plan_t *p) {
  free(p->f);
  memset(p, 0, sizeof *p);
}

/* The factored layers wholly inside [lo, hi): their index range [*a, *b). */
static void layers_in(const ps_factor_plan_t *p, size_t lo, size_t hi, int *a, int *b) {
  *a = p->n, *b = p->n;
  for (int i = 0; i < p->n; i++)
    if (p->f[i].wkey >= lo && p->f[i].wkey < hi) {
      if (*a == p->n) *a = i;
      *b = i + 1;
    }
}

size_t ps_factor_bytes(const ps_factor_plan_t *p, size_t lo, size_t hi, size_t rows) {
  int a, b;
  layers_in(p, lo, hi, &a, &b);
  size_t raw = hi - lo, fac = 0;
  for (int i = a; i < b; i++) {
    raw -= p->f[i].end - p->f[i].wkey;
    fac += rows * (p->f[i].in + p->f[i].out);
  }
  return sizeof(uint64_t) + (fac + raw) * sizeof(float);
}

/* The gradient of keys [from, to) (keys[0] is key `base`): copied into
 * the payload at `at` (pack) or out of it. */
static size_t raw_run(float *payload, size_t at, float *keys, size_t base, size_t from, size_t to,
                      int pack) {
  size_t n = to - from;
  if (!n) return at;
  if (pack) memcpy(payload + at, keys + (from - base), n * sizeof(float));
  else memcpy(keys + (from - base), payload + at, n * sizeof(float));
  return at + n;
}

typedef struct {
  const model_t *m;
  const float *x;
  size_t rows;
} model_rows_t;

static const float *model_rows(void *ctx, int part, int layer, int which, size_t *rows) {
  const model_rows_t *mr = ctx;
  *rows = mr->rows;
  if (layer < 0) return NULL; /* the count alone */
  return which ? model_layer_input(mr->m, layer, mr->x) : mr->m->layers[layer].dout;
}

size_t ps_factor_pack(const ps_factor_plan_t *p, const model_t *m, const float *x, size_t rows,
                      const float *grads, size_t lo, size_t hi, void *buf) {
  model_rows_t mr = {m, x, rows};
  return ps_factor_pack_parts(p, 1, model_rows, &mr, grads, lo, hi, buf);
}

/* Each factored layer's dY, then its X, each the parts' rows one after
 * another: the rows of one batch computed in parts (--worker-threads). */
size_t ps_factor_pack_parts(const ps_factor_plan_t *p, int nparts, ps_factor_rows_fn get, void *ctx,
                            const float *grads, size_t lo, size_t hi, void *buf) {
  int a, b;
  layers_in(p, lo, hi, &a, &b);
  uint64_t r = 0;
  for (int k = 0; k < nparts; k++) {
    size_t rows;
    get(ctx, k, -1, 0, &rows);
    r += rows;
  }
  memcpy(buf, &r, sizeof r);
  float *v = (float *)((char *)buf + sizeof r);
  size_t at = 0;
  for (int i = a; i < b; i++) {
    const ps_factor_t *f = &p->f[i];
    for (int which = 0; which < 2; which++) { /* dY (out wide), then X (in wide) */
      size_t width = which ? f->in : f->out;
      for (int k = 0; k < nparts; k++) {
        size_t rows;
        const float *src = get(ctx, k, f->layer, which, &rows);
        if (rows) memcpy(v + at, src, rows * width * sizeof(float));
        at += rows * width;
      }
    }
  }
  size_t next = lo;
  for (int i = a; i < b; i++) {
    at = raw_run(v, at, (float *)grads, 0, next, p->f[i].wkey, 1);
    next = p->f[i].end;
  }
  at = raw_run(v, at, (float *)grads, 0, next, hi, 1);
  return sizeof r + at * sizeof(float);
}

int ps_factor_expand(const ps_factor_plan_t *p, size_t lo, size_t hi, size_t max_rows,
                     const void *buf, size_t bytes, float *dst) {
  uint64_t rows;
  if (bytes < sizeof rows) return dt_error("a factored push of %zu bytes has no row count", bytes);
  memcpy(&rows, buf, sizeof rows);
  if (rows > max_rows)
    return dt_error("a factored push of %llu rows (at most %zu: the batch)", (unsigned long long)rows,
                    max_rows);
  if (bytes != ps_factor_bytes(p, lo, hi, rows))
    return dt_error("a factored push of %zu bytes for %llu rows (expected %zu)", bytes,
                    (unsigned long long)rows, ps_factor_bytes(p, lo, hi, rows));
  int a, b;
  layers_in(p, lo, hi, &a, &b);
  float *v = (float *)((char *)buf + sizeof rows);
  size_t at = 0, n = rows;
  for (int i = a; i < b; i++) {
    const ps_factor_t *f = &p->f[i];
    const float *dy = v + at, *xs = v + at + n * f->out;
    at += n * (f->in + f->out);
    float *dw = dst + (f->wkey - lo);
    if (n) kern_gemm(1, 0, (int)f->out, (int)f->in, (int)n, 1.0f, dy, (int)f->out, xs, (int)f->in,
                     0.0f, dw, (int)f->in);
    else memset(dw, 0, f->in * f->out * sizeof(float));
    if (f->bkey == PS_NO_KEY) continue;
    float *db = dst + (f->bkey - lo);
    memset(db, 0, f->out * sizeof(float));
    for (size_t r = 0; r < n; r++) /* row by row, as dense.c's mask_and_sum */
      for (size_t j = 0; j < f->out; j++) db[j] += dy[r * f->out + j];
  }
  size_t next = lo;
  for (int i = a; i < b; i++) {
    at = raw_run(v, at, dst, lo, next, p->f[i].wkey, 0);
    next = p->f[i].end;
  }
  raw_run(v, at, dst, lo, next, hi, 0);
  return 0;
}

void ps_factor_spans(const ps_factor_plan_t *p, ps_range_t *keep) {
  for (int i = 0; i < p->n; i++) keep[i] = (ps_range_t){p->f[i].wkey, p->f[i].end};
}

int ps_shard_plan_factors(const model_t *m, int nservers, int whole_tensors,
                          const ps_factor_plan_t *fp, ps_shard_map_t *out) {
  ps_range_t keep[fp->n + 1];
  ps_factor_spans(fp, keep);
  int rc = ps_shard_plan_keep(m, nservers, whole_tensors, keep, fp->n, out);
  if (rc != 0 && fp->n)
    return dt_error_prefix("option --ps-push factors keeps each dense layer on one server: ");
  return rc;
}
