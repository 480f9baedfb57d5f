/* Checkpoints: the model's parameters and buffers, the optimizer state and
 * the position in training, as one safetensors file written atomically.
 * Every random choice of a run is a pure function of (seed, epoch, step,
 * rank), so the seed and the step are the whole RNG state. Under
 * --balance the ranks' speed estimates are saved too, so a resumed run
 * splits its first steps as the run it continues would have.
 *
 * Under tensor parallelism the group's blocks are gathered on its rank 0
 * into the whole model first (tensor_gather), so the file holds the same
 * tensors, names and shapes as one worker's; a resumed rank copies its
 * block out of each whole tensor, so a run may resume on another --tp.
 *
 * A checkpoint written mid-epoch (--checkpoint-every) says how many of the
 * epoch's samples are done ("epoch_samples", beside "epoch": the epochs
 * finished): the epoch's order is a function of (seed, epoch), so a resumed
 * run takes the rest of that order from there, in steps of its own global
 * batch, on any number of workers. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/worker.h"
#include "strategy/balance.h"
#include "strategy/tp_group.h"
#include "dtrain/safetensors.h"

#define CHECKPOINT_FORMAT "dtrain-checkpoint-1"
#define BALANCE_TENSOR "balance.samples_per_sec"
#define CHECKPOINT_MAX_EPOCH 1000000 /* --epochs takes at most this */

static void tensor_entry(st_tensor_t *t, const char *prefix, const tensor_info_t *ti,
                         const float *base) {
  snprintf(t->name, sizeof t->name, "%s%s", prefix, ti->name);
  t->ndim = ti->ndim;
  for (int d = 0; d < ti->ndim; d++) t->dims[d] = ti->dims[d];
  t->len = ti->len;
  t->data = base + ti->off;
}

static void meta(st_meta_t *m, int *n, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void meta(st_meta_t *m, int *n, const char *key, const char *fmt, ...) {
  va_list ap;
  snprintf(m[*n].key, sizeof m[*n].key, "%s", key);
  va_start(ap, fmt);
  vsnprintf(m[*n].value, sizeof m[*n].value, fmt, ap);
  va_end(ap);
  (*n)++;
}

/* The file for model m (the whole model) and its optimizer state, after
 * `epochs` finished epochs and `samples` samples of the next. */
static int write_checkpoint(worker_t *w, const model_t *m, float *const *state, int epochs,
                            size_t samples) {
  int cap = m->ntensors * (2 + w->opt->nstate) + m->nbuf_tensors + 1 +
            checkpoint_compressor_count(w), nt = 0, nm = 0;
  st_tensor_t *t = calloc((size_t)cap, sizeof *t);
  float *speeds = w->balance ? calloc((size_t)w->nranks, sizeof *speeds) : NULL;
  if (!t || (w->balance && !speeds)) {
    free(t);
    free(speeds);
    return dt_error("out of memory");
  }
  for (int i = 0; i < m->ntensors; i++) tensor_entry(&t[nt++], "", &m->tensors[i], m->params);
  for (int i = 0; i < m->nbuf_tensors; i++)
    tensor_entry(&t[nt++], "", &m->buf_tensors[i], m->buffers);
  for (int s = 0; s < w->opt->nstate; s++) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "optimizer.%s.", optim_state_name(w->opt, s));
    for (int i = 0; i < m->ntensors; i++)
      tensor_entry(&t[nt++], prefix, &m->tensors[i], state[s]);
  }
  for (int i = 0; w->ckpt_state && i < m->ntensors; i++)
    tensor_entry(&t[nt++], w->ckpt_state_prefix, &m->tensors[i], w->ckpt_state);
  if (w->balance) {
    balance_get_speeds(w->balance, speeds);
    st_tensor_t *b = &t[nt++];
    snprintf(b->name, sizeof b->name, "%s", BALANCE_TENSOR);
    b->ndim = 1;
    b->dims[0] = w->nranks;
    b->len = (size_t)w->nranks;
    b->data = speeds;
  }
  st_meta_t md[12];
  nt += checkpoint_compressor_entries(w, &t[nt], md, &nm);
  meta(md, &nm, "format", CHECKPOINT_FORMAT);
  meta(md, &nm, "epoch", "%d", epochs);
  if (samples) meta(md, &nm, "epoch_samples", "%zu", samples);
  meta(md, &nm, "step", "%" PRId64, w->step);
  meta(md, &nm, "seed", "%" PRIu64, w->cfg->seed);
  meta(md, &nm, "optimizer", "%s", optim_kind_name(w->cfg->optim.kind));
  meta(md, &nm, "model", "%s", w->cfg->model);
  meta(md, &nm, "rng", "all randomness derives from (seed, epoch, step, rank)");
  int rc = safetensors_write(w->cfg->checkpoint, t, nt, md, nm);
  free(t);
  free(speeds);
  if (rc != 0) return dt_error_prefix("--checkpoint: ");
  return 0;
}

int worker_save_checkpoint(worker_t *w, int epoch) { return worker_save_checkpoint_at(w, epoch, 0); }

int worker_save_checkpoint_at(worker_t *w, int epoch, size_t samples) {
  int epochs = samples ? epoch : epoch + 1;
  if (!w->tp) return write_checkpoint(w, w->model, w->opt->state, epochs, samples);
  model_t *full;
  float **state;
  DT_TRY(tensor_gather(w->tp, w, &full, &state));
  if (!full) return 0; /* this rank sent its blocks */
  int rc = 0;
  if (!kern_all_finite(full->nparams, full->params))
    rc = dt_error("epoch %d: the parameters of another tensor-parallel rank hold NaN or "
                  "infinity: training diverged; no checkpoint written (lower --lr)", epoch + 1);
  if (rc == 0) rc = write_checkpoint(w, full, state, epochs, samples);
  tensor_gather_free(full, state, w->opt->nstate);
  return rc;
}

/* "[784,512]": a shape as the messages print it */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *dims) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && at < cap; d++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "," : "", (long long)dims[d]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* Copies one tensor from the file after checking its shape. */
static int restore_tensor(const safetensors_t *st, const char *prefix, const tensor_info_t *ti,
                          float *base) {
  char name[160];
  snprintf(name, sizeof name, "%s%s", prefix, ti->name);
  const st_tensor_t *t = safetensors_find(st, name);
  if (!t) return dt_error("%s: no tensor '%s' (was the checkpoint written for another model?)",
                          st->path, name);
  int same = t->ndim == ti->ndim;
  for (int d = 0; same && d < ti->ndim; d++) same = t->dims[d] == ti->dims[d];
  if (!same || t->len != tensor_full_len(ti)) {
    int64_t model_dims[4];
    for (int d = 0; d < ti->ndim; d++) model_dims[d] = ti->dims[d];
    char in_file[96], in_model[96];
    format_shape(in_file, sizeof in_file, t->ndim, t->dims);
    format_shape(in_model, sizeof in_model, ti->ndim, model_dims);
    return dt_error("%s: tensor '%s' has shape %s in the file but %s in the model "
                    "(different model?)", st->path, name, in_file, in_model);
  }
  tensor_block_copy(ti, (float *)t->data, base + ti->off, 0); /* the block this rank holds */
  if (!kern_all_finite(ti->len, base + ti->off))
    return dt_error("%s: tensor '%s' holds NaN or infinity (written by a run that diverged?); "
                    "refusing to resume from it", st->path, name);
  return 0;
}

/* --balance: the saved speeds, if the file has them for as many ranks as
 * this run (a run with another --workers starts measuring afresh). */
static int restore_balance(worker_t *w, const safetensors_t *st) {
  const st_tensor_t *t = w->balance ? safetensors_find(st, BALANCE_TENSOR) : NULL;
  if (!t || t->len != (size_t)w->nranks) return 0;
  char where[600];
  snprintf(where, sizeof where, "%s: tensor '%s'", st->path, BALANCE_TENSOR);
  return balance_set_speeds(w->balance, t->data, where);
}

/* "epoch_samples": where in its epoch a mid-epoch checkpoint stands (0:
 * at an epoch's start). Only synchronous data parallelism steps through
 * an epoch by worker_step_slice from there. */
static int restore_epoch_samples(worker_t *w, const safetensors_t *st) {
  long long samples = 0;
  if (!safetensors_meta(st, "epoch_samples")) return 0;
  if (safetensors_meta_int(st, "epoch_samples", 1, (long long)w->train->n - 1, &samples) != 0)
    return -1;
  if (!train_sync_data_parallel(w->cfg))
    return dt_error("--resume %s: written mid-epoch (--checkpoint-every, %lld samples into the "
                    "epoch); only synchronous data parallelism (--exchange allreduce:ALGO "
                    "--schedule sync, no --pp) resumes mid-epoch", st->path, samples);
  w->resume_samples = (size_t)samples;
  return 0;
}

int worker_load_checkpoint(worker_t *w, const char *path) {
  safetensors_t st;
  if (safetensors_read(path, &st) != 0) return dt_error_prefix("--resume: ");
  model_t *m = w->model;
  int rc = -1;
  long long epoch = 0, step = 0;
  const char *fmt = safetensors_meta(&st, "format"), *opt = safetensors_meta(&st, "optimizer");
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0) {
    dt_error("--resume %s: not a dtrain checkpoint (format '%s', expected '%s')", path,
             fmt ? fmt : "none", CHECKPOINT_FORMAT);
    goto done;
  }
  if (!opt || strcmp(opt, optim_kind_name(w->cfg->optim.kind)) != 0) {
    dt_error("--resume %s: written with --optimizer %s but this run uses %s", path,
             opt ? opt : "?", optim_kind_name(w->cfg->optim.kind));
    goto done;
  }
  if (safetensors_meta_int(&st, "epoch", 0, CHECKPOINT_MAX_EPOCH, &epoch) != 0 ||
      safetensors_meta_int(&st, "step", 0, INT64_MAX, &step) != 0)
    goto done;
  for (int i = 0; i < m->ntensors; i++)
    if (restore_tensor(&st, "", &m->tensors[i], m->params) != 0) goto done;
  for (int i = 0; i < m->nbuf_tensors; i++)
    if (restore_tensor(&st, "", &m->buf_tensors[i], m->buffers) != 0) goto done;
  for (int s = 0; s < w->opt->nstate; s++) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "optimizer.%s.", optim_state_name(w->opt, s));
    for (int i = 0; i < m->ntensors; i++)
      if (restore_tensor(&st, prefix, &m->tensors[i], w->opt->state[s]) != 0) goto done;
  }
  if (restore_balance(w, &st) != 0) goto done;
  if (restore_epoch_samples(w, &st) != 0) goto done;
  rc = worker_resume_at(w, path, epoch, step);
done:
  safetensors_free(&st);
  return rc;
}
