/* The compressor's state in checkpoints: what error feedback has not sent
 * yet (and DGC's velocity, PowerSGD's warm-started Q) is state of the run
 * like the optimizer's momentum, and each rank holds its own. Without it a
 * resumed compressed run starts with an empty memory and is not the run it
 * continues (the DGC reference saves it too, beside the model).
 *
 * Before a checkpoint every rank sends its per-rank arrays to rank 0
 * (gather_to_root: (P - 1) n floats into rank 0 per array, once an epoch,
 * not counted as training traffic: the epoch's bytes are taken before);
 * rank 0 saves them as "compress.<name>.rank<r>" and the arrays the same
 * on every rank once, as "compress.<name>", with a metadata line naming
 * the codec and the number of ranks. A resumed rank takes its own back
 * only from a file with the same line.
 *
 * On a grid (--tp, --pp: the compressor's ranks are one axis of a larger
 * run) each rank's arrays are its own: a tensor-parallel rank's are of its
 * block, a pipeline stage's are used on its range only. There every rank
 * of the run sends all its arrays to world rank 0 (point to point, its
 * arena's length first), saved as "compress.<name>.rank<world rank>", and
 * the line names the grid ("int8 over 4 ranks as dp 2 x pp 2 x tp 1"): a
 * resume onto another grid starts empty and says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/worker.h"

#define META_KEY "compress"
enum { TAG_CX_GATHER = 5604 };

/* The compressor's group is one axis of a larger run (tensor or pipeline
 * parallelism): its ranks are fewer than the run's. */
static int on_grid(const worker_t *w) { return comm_size(w->world) != w->nranks; }

/* "dgc:0.001 over 4 ranks": the state is only meaningful to that run */
static void describe(const worker_t *w, char *buf, size_t cap) {
  char name[48];
  codec_format(&w->cfg->compression.codec, name, sizeof name);
  if (!on_grid(w)) {
    snprintf(buf, cap, "%s over %d ranks", name, w->nranks);
    return;
  }
  int world = comm_size(w->world), tp = w->cfg->tensor.ranks > 1 ? w->cfg->tensor.ranks : 1;
  int pp = w->cfg->pipe.stages > 1 ? w->cfg->pipe.stages : 1;
  snprintf(buf, cap, "%s over %d ranks as dp %d x pp %d x tp %d", name, world, world / (pp * tp),
           pp, tp);
}

/* Rank `rank`'s copy of s (on a grid every array is per rank). */
static void entry_name(char *buf, size_t cap, const compress_state_t *s, int rank, int grid) {
  if (s->per_rank || grid) snprintf(buf, cap, "compress.%s.rank%d", s->name, rank);
  else snprintf(buf, cap, "compress.%s", s->name);
}

static int restore(worker_t *w, const safetensors_t *st, const compress_state_t *s, int n) {
  size_t len = w->model->nparams;
  for (int i = 0; i < n; i++) {
    char name[128];
    entry_name(name, sizeof name, &s[i], on_grid(w) ? comm_rank(w->world) : w->rank, on_grid(w));
    const st_tensor_t *t = safetensors_find(st, name);
    if (!t)
      return dt_error("--resume %s: no tensor '%s', though the file says it holds the state of "
                      "%s (a damaged checkpoint?)", st->path, name, safetensors_meta(st, META_KEY));
    if (t->len != len)
      return dt_error("--resume %s: tensor '%s' has %zu values but the model has %zu", st->path,
                      name, t->len, len);
    if (!kern_all_finite(len, t->data))
      return dt_error("--resume %s: tensor '%s' holds NaN or infinity; refusing to resume from it",
                      st->path, name);
    memcpy(s[i].data, t->data, len * sizeof(float));
  }
  return 0;
}

static int restore_from(worker_t *w, const char *path, const compress_state_t *s, int n) {
  safetensors_t st;
  if (safetensors_read(path, &st) != 0) return dt_error_prefix("--resume: ");
  char want[160];
  describe(w, want, sizeof want);
  const char *had = safetensors_meta(&st, META_KEY);
  int rc = 0;
  if (had && !strcmp(had, want)) rc = restore(w, &st, s, n);
  else if (had && comm_rank(w->world) == 0) /* another codec or grid: its memory does not fit */
    fprintf(stderr, "dtrain train: --resume %s holds the compression state of %s, not of %s: "
            "this run starts with an empty memory (it trains on, but not bit for bit as the run "
            "it continues)\n", path, had, want);
  safetensors_free(&st);
  return rc;
}

int worker_keep_compressor(worker_t *w, compressor_t *cx) {
  compress_state_t s[COMPRESS_MAX_STATE];
  int n = compressor_state(cx, s), per_rank = 0;
  if (!n) return 0;
  for (int i = 0; i < n; i++) per_rank += s[i].per_rank;
  if (w->cfg->resume[0] && restore_from(w, w->cfg->resume, s, n) != 0) return -1;
  if (!w->cfg->checkpoint[0]) return 0;
  w->ckpt_cx = cx;
  if (on_grid(w)) return 0; /* rank 0 sizes its buffer when the others' lengths arrive */
  if (w->rank == 0 && per_rank &&
      !(w->ckpt_cx_all = dt_alloc_floats((size_t)per_rank * w->nranks * w->model->nparams)))
    return -1;
  return 0;
}

/* On a grid: every rank's arrays to world rank 0, each rank's length
 * first (rank 0 keeps them in ckpt_cx_lens, its buffer sized once). */
static int gather_grid(worker_t *w, const compress_state_t *s, int n) {
  int me = comm_rank(w->world), P = comm_size(w->world);
  uint64_t len = w->model->nparams;
  if (me != 0) {
    DT_TRY(comm_send(w->world, 0, TAG_CX_GATHER, &len, sizeof len));
    for (int i = 0; i < n; i++)
      DT_TRY(comm_send(w->world, 0, TAG_CX_GATHER, s[i].data, len * sizeof(float)));
    return 0;
  }
  if (!w->ckpt_cx_lens && !(w->ckpt_cx_lens = calloc((size_t)P, sizeof *w->ckpt_cx_lens)))
    return dt_error("out of memory");
  size_t total = 0;
  w->ckpt_cx_lens[0] = len;
  for (int q = 1; q < P; q++) {
    DT_TRY(comm_recv(w->world, q, TAG_CX_GATHER, &w->ckpt_cx_lens[q], sizeof len));
    total += w->ckpt_cx_lens[q] * (size_t)n;
  }
  if (!w->ckpt_cx_all && !(w->ckpt_cx_all = dt_alloc_floats(total + 1))) return -1;
  float *at = w->ckpt_cx_all;
  for (int q = 1; q < P; q++)
    for (int i = 0; i < n; i++, at += w->ckpt_cx_lens[q])
      DT_TRY(comm_recv(w->world, q, TAG_CX_GATHER, at, w->ckpt_cx_lens[q] * sizeof(float)));
  return 0;
}

int worker_gather_compressor(worker_t *w) {
  if (!w->ckpt_cx) return 0;
  compress_state_t s[COMPRESS_MAX_STATE];
  if (on_grid(w)) {
    int n = compressor_state(w->ckpt_cx, s);
    if (gather_grid(w, s, n) != 0) return dt_error_prefix("--checkpoint: gathering the compressor's memory: ");
    return 0;
  }
  int n = compressor_state(w->ckpt_cx, s);
  size_t len = w->model->nparams, at = 0;
  for (int i = 0; i < n; i++) {
    if (!s[i].per_rank) continue;
    float *out = w->ckpt_cx_all ? w->ckpt_cx_all + at : NULL;
    if (gather_to_root(w->coll, 0, s[i].data, out, len) != 0)
      return dt_error_prefix("--checkpoint: gathering the compressor's memory: ");
    at += (size_t)w->nranks * len;
  }
  return 0;
}

int checkpoint_compressor_count(const worker_t *w) {
  if (!w->ckpt_cx) return 0;
  compress_state_t s[COMPRESS_MAX_STATE];
  int n = compressor_state(w->ckpt_cx, s), count = 0;
  if (on_grid(w)) return n * comm_size(w->world);
  for (int i = 0; i < n; i++) count += s[i].per_rank ? w->nranks : 1;
  return count;
}

/* On a grid: rank 0's own arrays, then each other rank's as gathered. */
static int grid_entries(const worker_t *w, const compress_state_t *s, int n, st_tensor_t *t) {
  int nt = 0;
  const float *at = w->ckpt_cx_all;
  for (int q = 0; q < comm_size(w->world); q++)
    for (int i = 0; i < n; i++) {
      st_tensor_t *e = &t[nt++];
      size_t len = w->ckpt_cx_lens[q];
      entry_name(e->name, sizeof e->name, &s[i], q, 1);
      e->ndim = 1;
      e->dims[0] = (int64_t)len;
      e->len = len;
      e->data = q == 0 ? s[i].data : at;
      if (q > 0) at += len;
    }
  return nt;
}

int checkpoint_compressor_entries(const worker_t *w, st_tensor_t *t, st_meta_t *md, int *nmeta) {
  if (!w->ckpt_cx) return 0;
  compress_state_t s[COMPRESS_MAX_STATE];
  int n = compressor_state(w->ckpt_cx, s), nt = 0;
  size_t len = w->model->nparams, at = 0;
  if (on_grid(w)) nt = grid_entries(w, s, n, t);
  for (int i = 0; !on_grid(w) && i < n; i++)
    for (int r = 0; r < (s[i].per_rank ? w->nranks : 1); r++) {
      st_tensor_t *e = &t[nt++];
      entry_name(e->name, sizeof e->name, &s[i], r, 0);
      e->ndim = 1;
      e->dims[0] = (int64_t)len;
      e->len = len;
      e->data = s[i].per_rank ? w->ckpt_cx_all + at + (size_t)r * len : s[i].data;
      if (s[i].per_rank && r == w->nranks - 1) at += (size_t)w->nranks * len;
    }
  snprintf(md[*nmeta].key, sizeof md[*nmeta].key, "%s", META_KEY);
  describe(w, md[*nmeta].value, sizeof md[*nmeta].value);
  (*nmeta)++;
  return nt;
}
