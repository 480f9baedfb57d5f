/* Checkpoints of sharded parameters.
 *
 * --checkpoint FILE: worker 0 gathers the shards (parameters and
 * optimizer state) and writes the same single safetensors file, with the
 * same tensor names, as every other mode (checkpoint.c); a server resuming
 * from it copies the part of each tensor that falls in its range.
 *
 * --checkpoint-dir DIR: every server writes its own range,
 *   DIR/shard-K-of-N.eE.safetensors   ("params", "optimizer.<state>": 1-D,
 *                                      metadata begin/end/epoch/step)
 * worker 0 writes the model's buffers (batch-norm statistics, if any) to
 * DIR/buffers.eE.safetensors, then DIR/manifest.json, atomically, naming
 * the files of epoch E; only then are epoch E-1's files removed. A crash
 * at any point leaves a manifest whose files all exist. A server resuming
 * from a folder reads whichever shard files overlap its range, so a run
 * may resume on another number of servers.
 *
 * Under --dc-asgd a:LAMBDA0 the servers' MeanSquare is saved beside the
 * optimizer state (FILE: "dc_asgd.mean_square.<tensor>", DIR: the shard's
 * "dc_asgd.mean_square"), so that a resumed run weighs its first delays
 * as the unbroken run does. A checkpoint without it (written by another
 * schedule) starts it from 0, with a warning. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/safetensors.h"
#include "strategy/ps/ps.h"

#define CHECKPOINT_FORMAT "dtrain-checkpoint-1"
#define SHARD_FORMAT "dtrain-ps-shard-1"
#define MANIFEST_FORMAT "dtrain-ps-manifest-1"
#define BUFFERS_FORMAT "dtrain-ps-buffers-1"
#define CHECKPOINT_MAX_EPOCH 1000000 /* --epochs takes at most this (as in checkpoint.c) */
#define MEAN_SQUARE_NAME "dc_asgd.mean_square" /* in a FILE: PS_MEAN_SQUARE_PREFIX<tensor> */

int ps_path_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- the manifest ------------------------------------------------------------ */

/* A small strict reader of the manifest's JSON: one object whose values
 * are strings, integers, null or (for "shards") an array of objects;
 * other members are skipped whatever their value. Positions in errors are
 * byte offsets. */
typedef struct {
  const char *p, *begin, *end, *path;
} jp_t;

static int jp_fail(jp_t *j, const char *what) {
  return dt_error("%s: offset %zu: %s (not a dtrain shard manifest?)", j->path,
                  (size_t)(j->p - j->begin), what);
}

static void jp_ws(jp_t *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static int jp_lit(jp_t *j, char c) {
  jp_ws(j);
  if (j->p >= j->end || *j->p != c) {
    char what[32];
    snprintf(what, sizeof what, "expected '%c'", c);
    return jp_fail(j, what);
  }
  j->p++;
  return 0;
}

static int jp_peek(jp_t *j, char c) {
  jp_ws(j);
  return j->p < j->end && *j->p == c;
}

/* A string into out (cap bytes with the NUL; out NULL: skipped). Escapes
 * other than \" \\ \/ are refused: the writer writes none. */
static int jp_string(jp_t *j, char *out, size_t cap, const char *key) {
  DT_TRY(jp_lit(j, '"'));
  size_t n = 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if ((unsigned char)c < 0x20) return jp_fail(j, "control character in a string");
    if (c == '\\') {
      if (j->p >= j->end || (*j->p != '"' && *j->p != '\\' && *j->p != '/'))
        return jp_fail(j, "unsupported escape in a string");
      c = *j->p++;
    }
    if (out) {
      if (n + 1 >= cap) {
        char what[96];
        snprintf(what, sizeof what, "\"%s\" is longer than %zu bytes", key, cap - 1);
        return jp_fail(j, what);
      }
      out[n++] = c;
    }
  }
  if (j->p >= j->end) return jp_fail(j, "unterminated string");
  j->p++;
  if (out) out[n] = 0;
  return 0;
}

/* A string or null (out = "") */
static int jp_string_or_null(jp_t *j, char *out, size_t cap, const char *key) {
  jp_ws(j);
  if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) {
    j->p += 4;
    out[0] = 0;
    return 0;
  }
  return jp_string(j, out, cap, key);
}

/* A whole number in [0, hi]. */
static int jp_count(jp_t *j, long long hi, long long *v, const char *key) {
  jp_ws(j);
  const char *start = j->p;
  long long x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    int d = *j->p++ - '0';
    if (x > (hi - d) / 10) {
      char what[96];
      snprintf(what, sizeof what, "\"%s\" is more than %lld", key, hi);
      return jp_fail(j, what);
    }
    x = x * 10 + d;
  }
  if (j->p == start || (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))) {
    char what[96];
    snprintf(what, sizeof what, "\"%s\" is not a count", key);
    j->p = start;
    return jp_fail(j, what);
  }
  *v = x;
  return 0;
}

/* Any value, skipped (nesting at most `depth` deep). */
static int jp_skip(jp_t *j, int depth) {
  jp_ws(j);
  if (j->p >= j->end) return jp_fail(j, "expected a value");
  if (depth <= 0) return jp_fail(j, "nested too deeply");
  char c = *j->p;
  if (c == '"') return jp_string(j, NULL, 0, "");
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    if (jp_peek(j, close)) return j->p++, 0;
    for (;;) {
      if (c == '{') {
        DT_TRY(jp_string(j, NULL, 0, ""));
        DT_TRY(jp_lit(j, ':'));
      }
      DT_TRY(jp_skip(j, depth - 1));
      if (jp_peek(j, ',')) {
        j->p++;
        continue;
      }
      return jp_lit(j, close);
    }
  }
  const char *start = j->p; /* a number or a literal */
  while (j->p < j->end && (strchr("+-.eE", *j->p) || (*j->p >= '0' && *j->p <= '9') ||
                           (*j->p >= 'a' && *j->p <= 'z')))
    j->p++;
  size_t n = (size_t)(j->p - start);
  int literal = (n == 4 && (!memcmp(start, "null", 4) || !memcmp(start, "true", 4))) ||
                (n == 5 && !memcmp(start, "false", 5));
  int number = n > 0 && (*start == '-' || (*start >= '0' && *start <= '9'));
  for (size_t i = 0; number && i < n; i++) number = !(start[i] >= 'a' && start[i] <= 'z' && start[i] != 'e');
  if (!literal && !number) {
    j->p = start;
    return jp_fail(j, "expected a value");
  }
  return 0;
}

/* A file of the checkpoint folder: a plain name in it. */
static int plain_name(const char *name) {
  return name[0] && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/');
}

static int parse_shard(jp_t *j, ps_manifest_t *m) {
  if (m->nshards == PS_MANIFEST_MAX_SHARDS)
    return dt_error("%s: more than %d shards", j->path, PS_MANIFEST_MAX_SHARDS);
  ps_manifest_shard_t *s = &m->shards[m->nshards];
  long long b = -1, e = -1;
  int has_file = 0;
  DT_TRY(jp_lit(j, '{'));
  if (!jp_peek(j, '}'))
    for (;;) {
      char key[16];
      DT_TRY(jp_string(j, key, sizeof key, "a key"));
      DT_TRY(jp_lit(j, ':'));
      if (!strcmp(key, "file") && !has_file) {
        DT_TRY(jp_string(j, s->file, sizeof s->file, "file"));
        has_file = 1;
      } else if (!strcmp(key, "begin") && b < 0) {
        DT_TRY(jp_count(j, INT64_MAX, &b, "begin"));
      } else if (!strcmp(key, "end") && e < 0) {
        DT_TRY(jp_count(j, INT64_MAX, &e, "end"));
      } else if (!strcmp(key, "file") || !strcmp(key, "begin") || !strcmp(key, "end")) {
        return dt_error("%s: shard %d: \"%s\" given twice", j->path, m->nshards, key);
      } else {
        DT_TRY(jp_skip(j, 8));
      }
      if (!jp_peek(j, ',')) break;
      j->p++;
    }
  DT_TRY(jp_lit(j, '}'));
  if (!has_file || b < 0 || e < 0)
    return dt_error("%s: shard %d: needs \"file\", \"begin\" and \"end\"", j->path, m->nshards);
  size_t want = m->nshards ? m->shards[m->nshards - 1].end : 0;
  if (!plain_name(s->file))
    return dt_error("%s: shard %d: \"%s\" is not a file name of the folder", j->path,
                    m->nshards, s->file);
  if ((unsigned long long)b != want || b >= e)
    return dt_error("%s: shard %d (%s) covers keys [%lld, %lld): expected one starting at %zu "
                    "(the shards cover the keys in order, each at least one)", j->path,
                    m->nshards, s->file, b, e, want);
  s->begin = (size_t)b, s->end = (size_t)e;
  m->nshards++;
  return 0;
}

enum { M_FORMAT, M_EPOCH, M_STEP, M_NPARAMS, M_OPTIMIZER, M_MODEL, M_BUFFERS, M_SHARDS, M_KEYS };

int ps_manifest_parse(const char *text, size_t len, const char *path, ps_manifest_t *m) {
  static const char *const keys[M_KEYS] = {"format",    "epoch", "step",    "nparams",
                                           "optimizer", "model", "buffers", "shards"};
  jp_t j = {text, text, text + len, path};
  int seen[M_KEYS] = {0};
  char fmt[64];
  long long v;
  memset(m, 0, offsetof(ps_manifest_t, shards)); /* each shard is written whole as it is read */
  DT_TRY(jp_lit(&j, '{'));
  if (!jp_peek(&j, '}'))
    for (;;) {
      char key[32];
      DT_TRY(jp_string(&j, key, sizeof key, "a key"));
      DT_TRY(jp_lit(&j, ':'));
      int k = 0;
      while (k < M_KEYS && strcmp(key, keys[k])) k++;
      if (k < M_KEYS && seen[k]) return dt_error("%s: \"%s\" given twice", path, key);
      if (k < M_KEYS) seen[k] = 1;
      switch (k) {
      case M_FORMAT: DT_TRY(jp_string(&j, fmt, sizeof fmt, key)); break;
      case M_EPOCH: DT_TRY(jp_count(&j, INT32_MAX, &v, key)); m->epoch = (int)v; break;
      case M_STEP: DT_TRY(jp_count(&j, INT64_MAX, &v, key)); m->step = v; break;
      case M_NPARAMS: DT_TRY(jp_count(&j, (long long)1 << 40, &v, key)); m->nparams = (size_t)v; break;
      case M_OPTIMIZER: DT_TRY(jp_string_or_null(&j, m->optimizer, sizeof m->optimizer, key)); break;
      case M_MODEL: DT_TRY(jp_string_or_null(&j, m->model, sizeof m->model, key)); break;
      case M_BUFFERS: DT_TRY(jp_string_or_null(&j, m->buffers, sizeof m->buffers, key)); break;
      case M_SHARDS:
        DT_TRY(jp_lit(&j, '['));
        if (!jp_peek(&j, ']'))
          for (;;) {
            DT_TRY(parse_shard(&j, m));
            if (!jp_peek(&j, ',')) break;
            j.p++;
          }
        DT_TRY(jp_lit(&j, ']'));
        break;
      default: DT_TRY(jp_skip(&j, 8));
      }
      if (!jp_peek(&j, ',')) break;
      j.p++;
    }
  DT_TRY(jp_lit(&j, '}'));
  jp_ws(&j);
  if (j.p != j.end) return jp_fail(&j, "text after the object");
  for (int k = 0; k < M_KEYS; k++)
    if (!seen[k]) return dt_error("%s: no \"%s\" (not a dtrain shard manifest?)", path, keys[k]);
  if (strcmp(fmt, MANIFEST_FORMAT) != 0)
    return dt_error("%s: format '%s', expected '%s'", path, fmt, MANIFEST_FORMAT);
  if (m->buffers[0] && !plain_name(m->buffers))
    return dt_error("%s: \"buffers\" '%s' is not a file name of the folder", path, m->buffers);
  if (m->nshards == 0) return dt_error("%s: no shards listed", path);
  if (m->shards[m->nshards - 1].end != m->nparams)
    return dt_error("%s: the shards cover keys [0, %zu) of %zu", path,
                    m->shards[m->nshards - 1].end, m->nparams);
  return 0;
}

static int manifest_path(const char *dir, char *out, size_t cap) {
  if ((size_t)snprintf(out, cap, "%s/manifest.json", dir) >= cap)
    return dt_error("%s: path too long", dir);
  return 0;
}

static int manifest_read(const char *dir, ps_manifest_t *m) {
  char path[512];
  DT_TRY(manifest_path(dir, path, sizeof path));
  uint8_t *data;
  size_t len;
  if (file_read_all(path, 0, &data, &len) != 0) return -1;
  int rc = ps_manifest_parse((const char *)data, len, path, m);
  free(data);
  return rc;
}

/* ---- loading a shard ------------------------------------------------------------- */

/* Copies the part of src (covering keys [sb, se)) that falls in r into dst (covering r). */
static void copy_overlap(const float *src, size_t sb, size_t se, float *dst, ps_range_t r) {
  size_t lo = sb > r.begin ? sb : r.begin, hi = se < r.end ? se : r.end;
  if (lo < hi) memcpy(dst + (lo - r.begin), src + (lo - sb), (hi - lo) * sizeof(float));
}

static int check_optimizer(const char *path, const char *found, const optimizer_t *opt) {
  if (found && !strcmp(found, optim_kind_name(opt->cfg.kind))) return 0;
  return dt_error("%s: written with --optimizer %s but this run uses %s", path,
                  found ? found : "?", optim_kind_name(opt->cfg.kind));
}

/* A single-file checkpoint's epoch and step, range-checked. */
static int read_position(const safetensors_t *st, long long *epoch, long long *step) {
  DT_TRY(safetensors_meta_int(st, "epoch", 0, CHECKPOINT_MAX_EPOCH, epoch));
  return safetensors_meta_int(st, "step", 0, INT64_MAX, step);
}

static void no_mean_square(const char *path) {
  dt_log(DT_LOG_WARN, "--resume %s: no DC-ASGD-a MeanSquare in it (written without --dc-asgd "
         "a:LAMBDA0); it starts from 0", path);
}

/* The part in r of the tensor `name` (ti's copy) of a whole-model file;
 * under --tp, ti is a block of it (ps_group.c's key table), cut out of the
 * whole tensor first. 1: copied; 0: absent, and optional; -1: error. */
static int load_tensor_part(const safetensors_t *st, const char *path, const char *name,
                            const tensor_info_t *ti, float *dst, ps_range_t r, int optional) {
  const st_tensor_t *t = safetensors_find(st, name);
  if (!t && optional) return 0;
  if (!t || t->len != tensor_full_len(ti))
    return dt_error("%s: tensor '%s' %s", path, name, t ? "has another size (different model?)"
                                                      : "is missing (different model?)");
  if (t->len == ti->len) {
    copy_overlap(t->data, ti->off, ti->off + ti->len, dst, r);
    return 1;
  }
  float *block = dt_alloc_floats(ti->len);
  if (!block) return -1;
  tensor_block_copy(ti, (float *)t->data, block, 0);
  copy_overlap(block, ti->off, ti->off + ti->len, dst, r);
  dt_free(block);
  return 1;
}

static int load_from_file(const char *path, const model_t *m, optimizer_t *opt, ps_range_t r,
                          float *params, float *mean_square, int *epoch, int64_t *step) {
  safetensors_t st;
  DT_TRY(safetensors_read(path, &st));
  int rc = -1;
  const char *fmt = safetensors_meta(&st, "format");
  long long e, s;
  if (!fmt || strcmp(fmt, CHECKPOINT_FORMAT) != 0) {
    dt_error("%s: not a dtrain checkpoint", path);
    goto done;
  }
  if (read_position(&st, &e, &s) != 0) goto done;
  if (check_optimizer(path, safetensors_meta(&st, "optimizer"), opt) != 0) goto done;
  int have_ms = mean_square != NULL;
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *ti = &m->tensors[i];
    if (ti->off + ti->len <= r.begin || ti->off >= r.end) continue;
    for (int k = -1; k <= opt->nstate; k++) {
      char name[200];
      if (k < 0) snprintf(name, sizeof name, "%s", ti->name);
      else if (k < opt->nstate)
        snprintf(name, sizeof name, "optimizer.%s.%s", optim_state_name(opt, k), ti->name);
      else if (have_ms) snprintf(name, sizeof name, PS_MEAN_SQUARE_PREFIX "%s", ti->name);
      else break;
      float *dst = k < 0 ? params : k < opt->nstate ? opt->state[k] : mean_square;
      int got = load_tensor_part(&st, path, name, ti, dst, r, k == opt->nstate);
      if (got < 0) goto done;
      if (k == opt->nstate && !got) have_ms = 0;
    }
  }
  if (mean_square && !have_ms) {
    memset(mean_square, 0, (r.end - r.begin) * sizeof(float));
    no_mean_square(path);
  }
  *epoch = (int)e;
  *step = s;
  rc = 0;
done:
  safetensors_free(&st);
  return rc;
}

/* have_ms: in, whether to look for the MeanSquare; out, whether it was there. */
static int load_shard_file(const char *dir, const ps_manifest_shard_t *ms, optimizer_t *opt,
                           ps_range_t r, float *params, float *mean_square, int *have_ms) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, ms->file);
  safetensors_t st;
  DT_TRY(safetensors_read(path, &st));
  int rc = 0;
  for (int k = -1; rc == 0 && k <= opt->nstate; k++) {
    char name[96];
    if (k < 0) snprintf(name, sizeof name, "params");
    else if (k < opt->nstate) snprintf(name, sizeof name, "optimizer.%s", optim_state_name(opt, k));
    else if (*have_ms) snprintf(name, sizeof name, MEAN_SQUARE_NAME);
    else break;
    const st_tensor_t *t = safetensors_find(&st, name);
    if (!t && k == opt->nstate) *have_ms = 0;
    else if (!t || t->len != ms->end - ms->begin)
      rc = dt_error("%s: tensor '%s' is %s (expected %zu values)", path, name,
                    t ? "of another size" : "missing", ms->end - ms->begin);
    else copy_overlap(t->data, ms->begin, ms->end,
                      k < 0 ? params : k < opt->nstate ? opt->state[k] : mean_square, r);
  }
  safetensors_free(&st);
  return rc;
}

static int load_from_dir(const char *dir, const model_t *m, optimizer_t *opt, ps_range_t r,
                         float *params, float *mean_square, int *epoch, int64_t *step) {
  ps_manifest_t *mf = malloc(sizeof *mf);
  if (!mf) return dt_error("out of memory");
  int rc = manifest_read(dir, mf);
  if (rc == 0 && mf->nparams != m->nparams)
    rc = dt_error("%s: the checkpoint has %zu parameters but the model has %zu (different "
                  "model?)", dir, mf->nparams, m->nparams);
  if (rc == 0) rc = check_optimizer(dir, mf->optimizer, opt);
  size_t covered = 0;
  int have_ms = mean_square != NULL;
  for (int i = 0; rc == 0 && i < mf->nshards; i++) {
    const ps_manifest_shard_t *ms = &mf->shards[i];
    if (ms->end <= r.begin || ms->begin >= r.end) continue;
    rc = load_shard_file(dir, ms, opt, r, params, mean_square, &have_ms);
    size_t lo = ms->begin > r.begin ? ms->begin : r.begin, hi = ms->end < r.end ? ms->end : r.end;
    covered += hi - lo;
  }
  if (rc == 0 && covered != r.end - r.begin)
    rc = dt_error("%s: the shards listed cover %zu of keys [%zu, %zu)", dir, covered, r.begin,
                  r.end);
  if (rc == 0 && mean_square && !have_ms) {
    memset(mean_square, 0, (r.end - r.begin) * sizeof(float));
    no_mean_square(dir);
  }
  if (rc == 0) *epoch = mf->epoch, *step = mf->step;
  free(mf);
  return rc;
}

int ps_ckpt_load_shard(const char *path, const model_t *m, optimizer_t *opt, ps_range_t r,
                       float *params, float *mean_square, int *epoch, int64_t *step) {
  return ps_path_is_dir(path) ? load_from_dir(path, m, opt, r, params, mean_square, epoch, step)
                              : load_from_file(path, m, opt, r, params, mean_square, epoch, step);
}

int ps_ckpt_position(const char *path, int *epoch, int64_t *step) {
  if (!ps_path_is_dir(path)) {
    safetensors_t st;
    DT_TRY(safetensors_read(path, &st));
    long long e, s;
    int rc = read_position(&st, &e, &s);
    if (rc == 0) *epoch = (int)e, *step = s;
    safetensors_free(&st);
    return rc;
  }
  ps_manifest_t *mf = malloc(sizeof *mf);
  if (!mf) return dt_error("out of memory");
  int rc = manifest_read(path, mf);
  if (rc == 0) *epoch = mf->epoch, *step = mf->step;
  free(mf);
  return rc;
}

int ps_ckpt_load_buffers(const char *dir, model_t *m) {
  ps_manifest_t *mf = malloc(sizeof *mf);
  if (!mf) return dt_error("out of memory");
  int rc = manifest_read(dir, mf);
  if (rc == 0 && m->nbuf_tensors && !mf->buffers[0])
    rc = dt_error("%s: the model has buffers but the checkpoint does not", dir);
  safetensors_t st;
  if (rc != 0 || !m->nbuf_tensors) {
    free(mf);
    return rc;
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, mf->buffers);
  free(mf);
  DT_TRY(safetensors_read(path, &st));
  for (int i = 0; rc == 0 && i < m->nbuf_tensors; i++) {
    const tensor_info_t *ti = &m->buf_tensors[i];
    const st_tensor_t *t = safetensors_find(&st, ti->name);
    if (!t || t->len != ti->len) rc = dt_error("%s: buffer '%s' missing or resized", path, ti->name);
    else memcpy(m->buffers + ti->off, t->data, ti->len * sizeof(float));
  }
  safetensors_free(&st);
  return rc;
}

/* ---- writing ------------------------------------------------------------------------ */

static void put_meta(st_meta_t *md, int *n, const char *key, const char *value) {
  snprintf(md[*n].key, sizeof md[*n].key, "%s", key);
  snprintf(md[*n].value, sizeof md[*n].value, "%s", value);
  (*n)++;
}

static void shard_name(char *out, size_t cap, int index, int nservers, int epoch) {
  snprintf(out, cap, "shard-%d-of-%d.e%d.safetensors", index, nservers, epoch);
}

int ps_ckpt_save_shard(const train_config_t *cfg, int index, int nservers, ps_range_t r,
                       const float *params, const optimizer_t *opt, const float *mean_square,
                       int epoch, int64_t step) {
  size_t len = r.end - r.begin;
  st_tensor_t t[4];
  int nt = 0, nm = 0;
  for (int k = -1; k < opt->nstate + (mean_square != NULL); k++, nt++) {
    memset(&t[nt], 0, sizeof t[nt]);
    if (k < 0) snprintf(t[nt].name, sizeof t[nt].name, "params");
    else if (k < opt->nstate)
      snprintf(t[nt].name, sizeof t[nt].name, "optimizer.%s", optim_state_name(opt, k));
    else snprintf(t[nt].name, sizeof t[nt].name, MEAN_SQUARE_NAME);
    t[nt].ndim = 1;
    t[nt].dims[0] = (int64_t)len;
    t[nt].len = len;
    t[nt].data = k < 0 ? params : k < opt->nstate ? opt->state[k] : mean_square;
  }
  st_meta_t md[8];
  char v[6][64];
  snprintf(v[0], sizeof v[0], "%zu", r.begin);
  snprintf(v[1], sizeof v[1], "%zu", r.end);
  snprintf(v[2], sizeof v[2], "%d", epoch + 1);
  snprintf(v[3], sizeof v[3], "%" PRId64, step);
  put_meta(md, &nm, "format", SHARD_FORMAT);
  put_meta(md, &nm, "begin", v[0]);
  put_meta(md, &nm, "end", v[1]);
  put_meta(md, &nm, "epoch", v[2]);
  put_meta(md, &nm, "step", v[3]);
  put_meta(md, &nm, "optimizer", optim_kind_name(opt->cfg.kind));
  char name[96], path[512];
  shard_name(name, sizeof name, index, nservers, epoch + 1);
  if ((size_t)snprintf(path, sizeof path, "%s/%s", cfg->checkpoint_dir, name) >= sizeof path)
    return dt_error("--checkpoint-dir %s: path too long", cfg->checkpoint_dir);
  if (mkdir(cfg->checkpoint_dir, 0777) != 0 && errno != EEXIST)
    return dt_error("--checkpoint-dir %s: cannot create it: %s", cfg->checkpoint_dir,
                    strerror(errno));
  if (safetensors_write(path, t, nt, md, nm) != 0) return dt_error_prefix("--checkpoint-dir: ");
  return 0;
}

static int save_buffers(const train_config_t *cfg, const model_t *m, const char *name) {
  st_tensor_t *t = calloc((size_t)m->nbuf_tensors, sizeof *t);
  if (!t) return dt_error("out of memory");
  for (int i = 0; i < m->nbuf_tensors; i++) {
    const tensor_info_t *ti = &m->buf_tensors[i];
    snprintf(t[i].name, sizeof t[i].name, "%s", ti->name);
    t[i].ndim = ti->ndim;
    for (int d = 0; d < ti->ndim; d++) t[i].dims[d] = ti->dims[d];
    t[i].len = ti->len;
    t[i].data = m->buffers + ti->off;
  }
  st_meta_t md[1];
  int nm = 0;
  put_meta(md, &nm, "format", BUFFERS_FORMAT); /* marks the file as dtrain's own */
  char path[512];
  snprintf(path, sizeof path, "%s/%s", cfg->checkpoint_dir, name);
  int rc = safetensors_write(path, t, m->nbuf_tensors, md, nm);
  free(t);
  return rc == 0 ? 0 : dt_error_prefix("--checkpoint-dir: ");
}

static void remove_epoch_files(const train_config_t *cfg, int nservers, int epoch) {
  char name[96], path[512];
  for (int k = 0; k <= nservers; k++) {
    if (k < nservers) shard_name(name, sizeof name, k, nservers, epoch);
    else snprintf(name, sizeof name, "buffers.e%d.safetensors", epoch);
    snprintf(path, sizeof path, "%s/%s", cfg->checkpoint_dir, name);
    unlink(path); /* absent (no buffers, first epoch) is fine */
  }
}

int ps_ckpt_write_manifest(const train_config_t *cfg, const model_t *m, const ps_shard_map_t *map,
                           int epoch, int64_t step) {
  int done = epoch + 1;
  char buffers[96] = "";
  if (m->nbuf_tensors) {
    snprintf(buffers, sizeof buffers, "buffers.e%d.safetensors", done);
    DT_TRY(save_buffers(cfg, m, buffers));
  }
  char model[2 * sizeof cfg->model]; /* a JSON string: \" and \\ escaped, control characters '?' */
  size_t mn = 0;
  for (const char *c = cfg->model; *c && mn + 2 < sizeof model; c++) {
    if (*c == '"' || *c == '\\') model[mn++] = '\\';
    model[mn++] = (unsigned char)*c < 0x20 ? '?' : *c;
  }
  model[mn] = 0;
  size_t cap = 1024 + sizeof model + (size_t)map->nservers * 256;
  char *text = malloc(cap);
  if (!text) return dt_error("out of memory");
  size_t n = (size_t)snprintf(text, cap,
                              "{\"format\":\"%s\",\"epoch\":%d,\"step\":%" PRId64 ",\"seed\":%" PRIu64
                              ",\"model\":\"%s\",\"optimizer\":\"%s\",\"nparams\":%zu,"
                              "\"servers\":%d,\"buffers\":%s%s%s,\n \"shards\":[",
                              MANIFEST_FORMAT, done, step, cfg->seed, model,
                              optim_kind_name(cfg->optim.kind), map->nparams, map->nservers,
                              buffers[0] ? "\"" : "null", buffers, buffers[0] ? "\"" : "");
  for (int k = 0; k < map->nservers && n < cap; k++) {
    char name[96];
    shard_name(name, sizeof name, k, map->nservers, done);
    n += (size_t)snprintf(text + n, cap - n, "%s\n  {\"file\":\"%s\",\"begin\":%zu,\"end\":%zu}",
                          k ? "," : "", name, map->shards[k].begin, map->shards[k].end);
  }
  if (n < cap) n += (size_t)snprintf(text + n, cap - n, "]}\n");
  char path[512];
  int rc = manifest_path(cfg->checkpoint_dir, path, sizeof path);
  if (rc == 0 && n >= cap) rc = dt_error("--checkpoint-dir: manifest too long");
  if (rc == 0) rc = file_write_atomic(path, text, n);
  free(text);
  if (rc != 0) return dt_error_prefix("--checkpoint-dir: ");
  if (done > 1) remove_epoch_files(cfg, map->nservers, done - 1);
  return 0;
}
