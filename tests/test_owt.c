/* The one weird trick's three schemes (src/strategy/tensor/one_weird_trick.c,
 * Krizhevsky 2014 sec. 4), each against its update rule computed here by
 * hand on one whole model: a run of the real strategy on K threads (its
 * split layers over the K workers, the features exchanged) writes a
 * checkpoint, and the rule - (a) one step on the mean over the K·b
 * samples; (b) and (c) the fully connected layers stepped after each pass
 * on its mean (a worker's batch in (b), a K-th of every worker's in (c)),
 * the data-parallel front once on the mean over all K·b, its gradient
 * taken at the fully connected weights of each pass - gives the same
 * weights to float rounding. Uneven shards (5 samples over 3 workers) and a
 * short last step are in the cases. */
#include <fcntl.h>
#include <unistd.h>

#include "dtrain/optim.h"
#include "dtrain/safetensors.h"
#include "dtrain/train.h"
#include "strategy/worker.h"
#include "test.h"

static char dir[64], model_path[96];

static void write_u32(FILE *f, uint32_t v) {
  unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                        (unsigned char)v};
  fwrite(b, 1, 4, f);
}

/* An IDX pair of n 4x4 images and their labels (0..9, every class present). */
static void write_split(const char *split, int n, uint64_t seed) {
  char path[160];
  rng_t r;
  rng_seed(&r, seed);
  snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte", dir, split);
  FILE *f = fopen(path, "wb");
  write_u32(f, 0x803), write_u32(f, (uint32_t)n), write_u32(f, 4), write_u32(f, 4);
  for (int i = 0; i < n * 16; i++) fputc((int)(rng_next(&r) & 0xff), f);
  fclose(f);
  snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte", dir, split);
  f = fopen(path, "wb");
  write_u32(f, 0x801), write_u32(f, (uint32_t)n);
  for (int i = 0; i < n; i++) fputc(i < 10 ? i : (int)(rng_next(&r) % 10), f);
  fclose(f);
}

static void setup_files(void) {
  snprintf(dir, sizeof dir, "/tmp/dtrain-owt-XXXXXX");
  if (!mkdtemp(dir)) abort();
  write_split("train", 40, 1);
  write_split("t10k", 20, 2);
  snprintf(model_path, sizeof model_path, "%s/model.txt", dir);
  FILE *f = fopen(model_path, "w");
  fputs("dense units=12 split=data\nrelu\ndense units=9 split=column\nrelu\ndense units=10 split=row\n", f);
  fclose(f);
}

/* The samples of pass j of a step (positions in the epoch order), in the
 * order the strategy lays them out: worker by worker. */
static size_t pass_samples(owt_scheme_t scheme, int K, size_t start, size_t in_step, int j,
                           uint32_t *pos) {
  size_t n = 0;
  for (int i = 0; i < K; i++) {
    size_t off, cnt, so = 0, len = 0;
    data_shard(in_step, i, K, &off, &cnt);
    if (scheme == OWT_SCHEME_A) so = 0, len = cnt;
    else if (scheme == OWT_SCHEME_B) so = 0, len = i == j ? cnt : 0;
    else data_shard(cnt, j, K, &so, &len);
    for (size_t k = 0; k < len; k++) pos[n++] = (uint32_t)(start + off + so + k);
  }
  return n;
}

/* The rule, on one whole model: returns it trained (caller frees). */
static model_t *by_hand(const train_config_t *c, int K) {
  dataset_t d;
  model_t *m = NULL;
  optimizer_t *opt = NULL;
  if (dataset_load(c->data, 1, c->seed, &d) != 0) return NULL;
  d.nclasses = 10;
  shape_t in = {d.c, d.h, d.w};
  train_config_t big = *c; /* one model for a pass of up to K·b samples */
  big.batch = K * c->batch;
  if (worker_build_model(&big, in, 10, NULL, NULL, &m) != 0 || optim_new(&c->optim, m->nparams, &opt) != 0)
    return NULL;
  model_init_params(m, c->seed);
  size_t front = m->layers[0].param_len, all = m->nparams, b = (size_t)c->batch;
  optim_segment_t split = {front, all - front}, first = {0, front}, whole = {0, all};
  uint32_t *order = malloc(d.n * sizeof *order), pos[64], idx[64];
  float *acc = calloc(front, sizeof *acc), *x = malloc(64 * 16 * sizeof *x);
  int32_t y[64];
  data_epoch_order(c->seed, 0, order, d.n);
  int S = c->tensor.owt_scheme == OWT_SCHEME_A ? 1 : K;
  double correct;
  for (size_t start = 0; start < d.n; start += (size_t)K * b) {
    size_t in_step = d.n - start < K * b ? d.n - start : K * b;
    optim_begin_step(opt);
    memset(acc, 0, front * sizeof *acc);
    for (int j = 0; j < S; j++) {
      size_t n = pass_samples(c->tensor.owt_scheme, K, start, in_step, j, pos);
      if (n == 0) continue;
      for (size_t k = 0; k < n; k++) idx[k] = order[pos[k]];
      data_gather(&d, idx, n, x, y);
      model_forward(m, x, (int)n, 1, NULL);
      model_loss(m, y, (int)n, (int)n, &correct);
      model_backward(m, x, (int)n, NULL, NULL);
      for (size_t k = 0; k < front; k++) acc[k] += m->grads[k] * (float)((double)n / (double)in_step);
      if (S > 1) optim_step_segments(opt, m->params, m->grads, &split, 1, (float)c->lr);
    }
    memcpy(m->grads, acc, front * sizeof *acc);
    optim_step_segments(opt, m->params, m->grads, S > 1 ? &first : &whole, 1, (float)c->lr);
  }
  free(order), free(acc), free(x);
  optim_free(opt);
  dataset_free(&d);
  return m;
}

/* The largest |difference| between the checkpoint's tensors and m's. */
static double max_diff(const char *ckpt, const model_t *m) {
  safetensors_t st;
  if (safetensors_read(ckpt, &st) != 0) return INFINITY;
  double worst = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const st_tensor_t *t = safetensors_find(&st, m->tensors[i].name);
    if (!t || t->len != m->tensors[i].len) {
      worst = INFINITY;
      break;
    }
    const float *v = (const float *)t->data;
    for (size_t k = 0; k < t->len; k++) {
      double e = fabs((double)v[k] - m->params[m->tensors[i].off + k]);
      if (e > worst) worst = e;
    }
  }
  safetensors_free(&st);
  return worst;
}

static void check_scheme(const char *scheme, int K, int batch) {
  char ckpt[128], workers[8], b[8];
  snprintf(ckpt, sizeof ckpt, "%s/%s%d.st", dir, scheme, K);
  snprintf(workers, sizeof workers, "%d", K);
  snprintf(b, sizeof b, "%d", batch);
  char *argv[] = {"train", "--data", dir, "--model", model_path, "--workers", workers, "--tp", workers, "--batch", b,
                  "--lr", "0.1", "--momentum", "0.9", "--seed", "5", "--epochs", "1", "--quiet",
                  "--owt-scheme", (char *)scheme, "--checkpoint", ckpt};
  int argc = (int)(sizeof argv / sizeof argv[0]);
  char **av = argv;
  train_config_t c;
  train_config_default(&c);
  CHECK_OK(train_options_parse(argc, argv, &c));
  fflush(stdout);
  int saved = dup(1), null = open("/dev/null", O_WRONLY);
  if (null >= 0) dup2(null, 1);
  int rc = train_run(&c, &argc, &av);
  fflush(stdout);
  if (saved >= 0) dup2(saved, 1), close(saved);
  if (null >= 0) close(null);
  CHECK_OK(rc);
  model_t *m = by_hand(&c, K);
  CHECK(m != NULL);
  if (!m) return;
  double e = max_diff(ckpt, m);
  if (!(e <= 1e-5)) printf("  scheme %s, %d workers, batch %d: max |difference| %g\n", scheme, K, batch, e);
  CHECK(e <= 1e-5);
  model_free(m);
}

/* 40 samples: batch 4 over 2 workers is 5 steps of 8; batch 5 over 3 is
 * two steps of 15 and one of 10 (4, 3, 3), slices 2, 2, 1 in (c); batch 13
 * over 3 is a step of 39 and one of 1 (1, 0, 0: empty passes). */
static void test_scheme_a(void) { check_scheme("a", 2, 4), check_scheme("a", 3, 5); }
static void test_scheme_b(void) { check_scheme("b", 2, 4), check_scheme("b", 3, 5), check_scheme("b", 3, 13); }
static void test_scheme_c(void) { check_scheme("c", 2, 4), check_scheme("c", 3, 5), check_scheme("c", 3, 13); }

/* The rule by hand must see what each scheme changes: (b) is not (a). */
static void test_schemes_differ(void) {
  char a[128], bb[128];
  snprintf(a, sizeof a, "%s/a2.st", dir);
  snprintf(bb, sizeof bb, "%s/b2.st", dir);
  safetensors_t sa, sb;
  CHECK_OK(safetensors_read(a, &sa));
  CHECK_OK(safetensors_read(bb, &sb));
  const st_tensor_t *ta = safetensors_find(&sa, "layers.0.weight"), *tb = safetensors_find(&sb, "layers.0.weight");
  CHECK(ta && tb && ta->len == tb->len && memcmp(ta->data, tb->data, ta->len * 4) != 0);
  safetensors_free(&sa);
  safetensors_free(&sb);
}

int main(void) {
  setup_files();
  RUN(test_scheme_a);
  RUN(test_scheme_b);
  RUN(test_scheme_c);
  RUN(test_schemes_differ);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  TEST_MAIN_END();
}
