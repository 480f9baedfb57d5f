/* The model: builtin definitions, the text format and its errors, the
 * arena layout, a whole-model gradient check through fused and aliased
 * layers, seeded initialisation, and the safetensors round trip. */
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrain/nn.h"
#include "dtrain/safetensors.h"
#include "test.h"

static model_t *build(const char *text, shape_t in, int classes, int batch) {
  model_spec_t spec;
  model_t *m = NULL;
  if (model_spec_parse(text, "test.model", &spec) != 0) return NULL;
  if (model_build(&spec, in, classes, batch, &m) != 0) m = NULL;
  model_spec_free(&spec);
  return m;
}

static void test_builtin_sizes(void) {
  model_spec_t s;
  model_t *m = NULL;
  shape_t in = {1, 28, 28};
  CHECK_OK(model_spec_builtin("mlp", &s));
  CHECK_OK(model_build(&s, in, 10, 64, &m));
  model_spec_free(&s);
  /* PyTorch: sum(p.numel() for p in mlp.parameters()) == 535818 */
  if (m) CHECK(m->nparams == 535818 && m->ntensors == 6);
  if (m) CHECK(m->nlayers == 3); /* dense+relu fused twice */
  model_free(m);
  CHECK_OK(model_spec_builtin("lenet", &s));
  CHECK_OK(model_build(&s, in, 10, 64, &m));
  model_spec_free(&s);
  if (m) CHECK(m->nparams == 431080);
  if (m) {
    CHECK(!strcmp(m->tensors[0].name, "layers.0.weight"));
    CHECK(m->tensors[0].ndim == 4 && m->tensors[0].dims[0] == 20 && m->tensors[0].dims[3] == 1);
    CHECK(!strcmp(m->tensors[4].name, "layers.7.weight") && m->tensors[4].dims[1] == 800);
  }
  model_free(m);
  CHECK_FAILS_WITH(model_spec_builtin("resnet", &s), "unknown builtin model 'resnet'");
}

static void test_parse_errors(void) {
  model_spec_t s;
  shape_t in = {1, 8, 8};
  model_t *m;
  CHECK_FAILS_WITH(model_spec_parse("dense units=4\nconv3d filters=2\n", "f.model", &s),
                   "f.model:2: unknown layer kind 'conv3d'");
  CHECK_FAILS_WITH(model_spec_parse("\n# c\ndense\n", "f.model", &s), "f.model:3: dense needs units=N");
  CHECK_FAILS_WITH(model_spec_parse("dense units=4 colour=red\n", "f.model", &s),
                   "f.model:1: unknown key 'colour'");
  CHECK_FAILS_WITH(model_spec_parse("dense units=-4\n", "f.model", &s), "f.model:1:");
  CHECK_FAILS_WITH(model_spec_parse("dense units=4 input=nowhere\n", "f.model", &s),
                   "no earlier layer is named 'nowhere'");
  CHECK_FAILS_WITH(model_spec_parse("# nothing\n", "f.model", &s), "f.model: no layers");
  /* shapes are checked when the model is built */
  CHECK_OK(model_spec_parse("conv2d filters=2 kernel=9\ndense units=3\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, in, 3, 4, &m), "f.model:1: conv2d");
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("dense units=5\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, in, 3, 4, &m), "f.model:1: the last layer gives 5 outputs but the data has 3 classes");
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("input shape=3x8x8\ndense units=3\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, in, 3, 4, &m), "expects input 3x8x8 but the data is 1x8x8");
  model_spec_free(&s);
}

/* Sloppy model files are refused with one line, FILE:LINE, saying how to fix. */
static void test_parse_refuses_sloppy_input(void) {
  model_spec_t s;
  static const struct { const char *text, *needle; } cases[] = {
      {"input shape=1x28x28junk\ndense units=10\n", "f.model:1: shape=1x28x28junk: expected CxHxW"},
      {"input shape=1x99999999999x28\ndense units=10\n", "f.model:1: shape=1x99999999999x28: expected CxHxW"},
      {"input shape=1x28\ndense units=10\n", "f.model:1: shape=1x28: expected CxHxW"},
      {"input shape=1x28x28x3\ndense units=10\n", "expected CxHxW"},
      {"input shape=0x28x28\ndense units=10\n", "expected CxHxW"},
      {"input shape=-1x28x28\ndense units=10\n", "expected CxHxW"},
      {"input shape=65536x65536x1\ndense units=10\n", "more than 1073741824 values per sample"},
      {"input shape=1x8x8 shape=1x8x8\ndense units=3\n", "f.model:1: shape given twice"},
      {"input shape=1x8x8 colour=red\ndense units=3\n", "f.model:1: input takes only shape=CxHxW"},
      {"input\ndense units=3\n", "f.model:1: expected 'input shape=CxHxW'"},
      {"dense units=10\ninput shape=1x8x8\n", "f.model:2: 'input' comes after a layer: move it before line 1"},
      {"input shape=1x8x8\ninput shape=1x8x8\ndense units=3\n", "f.model:2: a second 'input' line (the first is line 1)"},
      {"dense units=99999999999999999999\n", "f.model:1: units=99999999999999999999: out of range"},
      {"dense units=16777217\n", "units=16777217: out of range (expected a whole number 1..16777216)"},
      {"dense units=12x\n", "f.model:1: units=12x: not a whole number"},
      {"dense units=+4\n", "units=+4: not a whole number"},
      {"dense units=4.0\n", "units=4.0: not a whole number"},
      {"dense units=\n", "units=: not a whole number"},
      {"conv2d filters=2 kernel=3 pad=-1\n", "pad=-1: not a whole number"},
      {"relu units=5\n", "f.model:1: relu takes no key 'units' (its keys: name, input): remove it"},
      {"maxpool kernel=2 pad=1\n", "maxpool takes no key 'pad'"},
      {"dense units=4 kernel=3\n", "dense takes no key 'kernel' (its keys: units, name, input, split)"},
      {"batchnorm rate=0.1\n", "batchnorm takes no key 'rate'"},
      {"dense units=4 units=5\n", "f.model:1: key 'units' given twice: keep one"},
      {"dropout rate=0.5 rate=0.2\n", "key 'rate' given twice"},
      {"dropout rate=1e999\n", "rate=1e999: expected a number in 0..0.999"},
      {"dropout rate=0.5x\n", "rate=0.5x: expected a number"},
      {"batchnorm eps=nan\n", "eps=nan: expected a number"},
      {"dense units=4 name=a\nrelu name=a\n", "f.model:2: name 'a' is already used by line 1: pick another"},
      {"dense units=4 name=\n", "name=: a name takes 1..31 characters"},
      {"dense units=4 input=\n", "input=: no earlier layer is named ''"},
      {"dense units=4 colour=red\n", "unknown key 'colour' (dense takes units, name, input, split)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK_FAILS_WITH(model_spec_parse(cases[i].text, "f.model", &s), cases[i].needle);
  /* and the good forms still parse */
  CHECK_OK(model_spec_parse("input shape=3x32x32 # colour\nconv2d filters=8 kernel=3 stride=1 pad=1 "
                            "name=c\nrelu\nmaxpool kernel=2 stride=2\nbatchnorm eps=1e-3 momentum=0.2\n"
                            "dropout rate=0.25\ndense units=10 input=c\n",
                            "f.model", &s));
  CHECK(s.nlayers == 6 && s.input.c == 3 && s.input.h == 32 && s.layers[5].input == 0);
  model_spec_free(&s);
}

/* A forward pass of the n samples x in training mode, and their summed
 * loss (labels y). */
static double batch_loss(model_t *m, const float *x, const int32_t *y, int n) {
  model_forward(m, x, n, 1, NULL);
  return model_loss(m, y, n, n, NULL);
}

/* A small conv net (fused conv+relu, a pool, an aliasing flatten, a fused
 * dense+relu), seeded; a batch of SMALL_N = 3 samples for it (x: 3 x 72
 * floats, y: 3 labels); and a copy of its gradient on that batch. */
enum { SMALL_N = 3 };
typedef struct {
  model_t *m;
  float x[SMALL_N * 72];
  int32_t y[SMALL_N];
  float *grads;
} small_net_t;

/* Returns 1 when the net is built (then small_net_close frees it). */
static int small_net_open(small_net_t *s) {
  const char *text = "conv2d filters=3 kernel=3 pad=1\nrelu\nmaxpool kernel=2\nflatten\n"
                     "dense units=6\nrelu\ndense units=4\n";
  shape_t in = {2, 6, 6};
  model_t *m = s->m = build(text, in, 4, 3);
  CHECK(m != NULL);
  if (!m) return 0;
  model_init_params(m, 5);
  rng_t r;
  rng_seed(&r, 9);
  for (int i = 0; i < 3 * 72; i++) s->x[i] = rng_normal(&r);
  int32_t labels[3] = {0, 3, 1};
  memcpy(s->y, labels, sizeof labels);
  batch_loss(m, s->x, s->y, SMALL_N);
  model_backward(m, s->x, SMALL_N, NULL, NULL);
  s->grads = dt_alloc_floats(m->nparams);
  memcpy(s->grads, m->grads, m->nparams * sizeof(float));
  return 1;
}

static void small_net_close(small_net_t *s) {
  dt_free(s->grads);
  model_free(s->m);
}

/* Finite differences of the summed loss over the whole model, through a
 * fused conv+relu, a pool, an aliasing flatten and a fused dense+relu. */
static void test_model_gradient(void) {
  small_net_t s;
  if (!small_net_open(&s)) return;
  model_t *m = s.m;
  const float *analytic = s.grads;
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < m->nparams; i += 3) {
    float keep = m->params[i], h = 1e-3f;
    m->params[i] = keep + h;
    double lp = batch_loss(m, s.x, s.y, SMALL_N);
    m->params[i] = keep - h;
    double lm = batch_loss(m, s.x, s.y, SMALL_N);
    m->params[i] = keep;
    double numeric = (lp - lm) / (2 * h) / SMALL_N, err = fabs(numeric - analytic[i]) / (fabs(numeric) + 1e-2);
    if (err > worst) worst = err;
    if (err > 2e-2) { bad++; printf("  param %zu: numeric %g analytic %g\n", i, numeric, analytic[i]); }
  }
  printf("  model gradient check: worst relative error %.2e\n", worst);
  CHECK(worst < 2e-2);
  small_net_close(&s);
}

/* A tiny GPT in the model file format: token and position embeddings,
 * two pre-norm blocks (attention and MLP, each with a residual add whose
 * second input is read by a layer norm too), a final norm and the head
 * tied to the token table. */
static const char *TINY_GPT =
    "embedding vocab=7 units=8 name=tok\nposembed positions=6 name=x0\n"
    "layernorm\nattention heads=2\nadd with=x0 name=a0\n"
    "layernorm\nlinear units=12\ngelu\nlinear units=8\nadd with=a0 name=x1\n"
    "layernorm\nattention heads=2\nadd with=x1 name=a1\n"
    "layernorm\nlinear units=12\ngelu\nlinear units=8\nadd with=a1 name=x2\n"
    "layernorm\nlmhead vocab=7 tie=tok\n";

/* Finite differences of the per-token loss through the whole sequence
 * model: every parameter, the tied table (read by the head and the
 * embedding) and the residual stream's summed gradients included. */
static void test_sequence_model_gradient(void) {
  enum { N = 2, T = 5 };
  model_t *m = build(TINY_GPT, (shape_t){1, 1, T}, 7, N);
  CHECK(m != NULL);
  if (!m) return;
  CHECK(m->positions == T && m->ntensors == 2 + 2 * (2 + 4 + 2 + 2 + 2) + 2);
  model_init_params(m, 3);
  rng_t r;
  rng_seed(&r, 4);
  for (size_t i = 0; i < m->nparams; i++) m->params[i] += 0.3f * rng_normal(&r); /* beyond init */
  float x[N * T];
  int32_t y[N * T];
  for (int i = 0; i < N * T; i++) x[i] = (float)rng_below(&r, 7), y[i] = (int32_t)rng_below(&r, 7);
  batch_loss(m, x, y, N);
  model_backward(m, x, N, NULL, NULL);
  float *analytic = dt_alloc_floats(m->nparams);
  memcpy(analytic, m->grads, m->nparams * sizeof(float));
  double worst = 0;
  for (size_t i = 0; i < m->nparams; i++) {
    float keep = m->params[i], h = 1e-2f;
    m->params[i] = keep + h;
    double lp = batch_loss(m, x, y, N);
    m->params[i] = keep - h;
    double lm = batch_loss(m, x, y, N);
    m->params[i] = keep;
    double numeric = (lp - lm) / (2 * h) / N, err = fabs(numeric - analytic[i]) / (fabs(numeric) + 1e-2);
    if (err > worst) worst = err;
    if (err > 2e-2) printf("  param %zu: numeric %g analytic %g\n", i, numeric, analytic[i]);
  }
  printf("  sequence model gradient check (%zu parameters): worst relative error %.2e\n", m->nparams, worst);
  CHECK(worst < 2e-2);
  dt_free(analytic);
  model_free(m);
}

/* gpt's stated size, and the refusals that need the model's shapes. */
static void test_sequence_model_sizes_and_refusals(void) {
  model_spec_t s;
  model_t *m = NULL;
  CHECK_OK(model_spec_builtin("gpt", &s));
  CHECK_OK(model_build(&s, (shape_t){1, 1, 128}, 256, 2, &m));
  model_spec_free(&s);
  /* 4 blocks x (2 norms 1024 + qkv 197376 + proj 65792 + mlp 525568) + tables 98304 + norm 512 */
  if (m) CHECK(m->nparams == 3257856 && m->positions == 128);
  model_free(m);
  m = NULL;
  CHECK_OK(model_spec_builtin("gpt", &s));
  CHECK_FAILS_WITH(model_build(&s, (shape_t){1, 1, 200}, 256, 2, &m),
                   "builtin:gpt:3: posembed: sequences of 200 tokens are longer than the position table "
                   "(positions=128): use --seq-len 128 or less");
  model_spec_free(&s);
  /* gpt-deep: 8 blocks of 789,760 + tables 98,304 + norm 512; lstm: embedding 65,536, two
   * layers of 4·256·(256 + 256) + 2·1024 = 526,336, head 65,536 (torch.nn.LSTM's count) */
  const char *names[2] = {"gpt-deep", "lstm"};
  const size_t counts[2] = {6416896, 1183744};
  for (int k = 0; k < 2; k++) {
    CHECK_OK(model_spec_builtin(names[k], &s));
    CHECK_OK(model_build(&s, (shape_t){1, 1, 128}, 256, 2, &m));
    model_spec_free(&s);
    if (m) CHECK(m->nparams == counts[k]);
    if (m && k == 1) CHECK(!strcmp(m->tensors[3].name, "layers.1.bias_ih_l0") && m->ntensors == 10);
    model_free(m);
    m = NULL;
  }
  CHECK_OK(model_spec_parse("embedding vocab=5 units=6\nattention heads=4\nlmhead vocab=5\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, (shape_t){1, 1, 3}, 5, 2, &m), "f.model:2: attention: heads=4 does not divide the width 6");
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("embedding vocab=5 units=6 name=e\nlinear units=4\nadd with=e\nlmhead vocab=5\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, (shape_t){1, 1, 3}, 5, 2, &m), "f.model:3: add: its inputs differ in shape");
  model_spec_free(&s);
  CHECK_FAILS_WITH(model_spec_parse("embedding vocab=5 units=6\nadd\n", "f.model", &s), "f.model:2: add needs with=NAME");
  CHECK_OK(model_spec_parse("embedding vocab=5 units=6 name=e\nlmhead vocab=6 tie=e\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, (shape_t){1, 1, 3}, 6, 2, &m), "f.model:2: lmhead tie=: the embedding (line 1) is 5x6");
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("embedding vocab=5 units=6\nlmhead vocab=5\n", "f.model", &s));
  CHECK_FAILS_WITH(model_build(&s, (shape_t){1, 1, 3}, 7, 2, &m), "lmhead predicts 5 tokens but the data has 7");
  model_spec_free(&s);
}

/* With a ready callback, a layer's parameter gradients leave before its
 * input gradient is computed (data parallelism starts sending them), and
 * the gradients are the same bits as without one. */
typedef struct {
  model_t *m;
  int calls, early;
} ready_log_t;

static void log_ready(void *ctx, int layer) {
  ready_log_t *log = ctx;
  const layer_t *l = &log->m->layers[layer];
  log->calls++;
  if (l->spec.input >= 0 && isnan(log->m->layers[l->spec.input].dout[0])) log->early++;
}

static void test_ready_before_input_gradient(void) {
  small_net_t s;
  if (!small_net_open(&s)) return;
  model_t *m = s.m;
  batch_loss(m, s.x, s.y, SMALL_N);
  for (int i = 0; i < m->nlayers - 1; i++) m->layers[i].dout[0] = NAN; /* not written yet */
  ready_log_t log = {m, 0, 0};
  model_backward(m, s.x, SMALL_N, log_ready, &log);
  CHECK(log.calls == 3);  /* conv2d and the two dense layers */
  CHECK(log.early == 2);  /* the dense layers, which have an input gradient to compute */
  CHECK(memcmp(s.grads, m->grads, m->nparams * sizeof(float)) == 0);
  small_net_close(&s);
}

static void test_seeded_init(void) {
  shape_t in = {1, 4, 4};
  model_t *a = build("dense units=8\nrelu\ndense units=3\n", in, 3, 2);
  model_t *b = build("dense units=8\nrelu\ndense units=3\n", in, 3, 2);
  if (!a || !b) {
    CHECK(0);
    return;
  }
  model_init_params(a, 11);
  model_init_params(b, 11);
  CHECK(memcmp(a->params, b->params, a->nparams * sizeof(float)) == 0);
  model_init_params(b, 12);
  CHECK(memcmp(a->params, b->params, a->nparams * sizeof(float)) != 0);
  /* PyTorch's default bound: |w| <= 1/sqrt(fan_in) */
  CHECK(kern_maxabs(16 * 8, a->params) <= 0.25f);
  model_free(a);
  model_free(b);
}

/* Creates an empty file named after the template `path` (mkstemp). */
static void make_temp_file(char *path) {
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
}

static void test_safetensors_round_trip(void) {
  char path[] = "/tmp/dtrain-st-XXXXXX";
  make_temp_file(path);
  float a[6] = {1, -2, 3.5f, 4, 5, 6}, b[2] = {0.25f, -0.5f};
  st_tensor_t t[2] = {{.name = "w", .ndim = 2, .dims = {2, 3}, .len = 6, .data = a},
                      {.name = "b", .ndim = 1, .dims = {2}, .len = 2, .data = b}};
  st_meta_t meta[1] = {{"epoch", "3 \"quoted\""}};
  CHECK_OK(safetensors_write(path, t, 2, meta, 1));
  safetensors_t st;
  CHECK_OK(safetensors_read(path, &st));
  const st_tensor_t *w = safetensors_find(&st, "w");
  CHECK(w && w->ndim == 2 && w->dims[1] == 3 && memcmp(w->data, a, sizeof a) == 0);
  CHECK(safetensors_find(&st, "b") && safetensors_find(&st, "b")->data[1] == -0.5f);
  CHECK(safetensors_meta(&st, "epoch") && !strcmp(safetensors_meta(&st, "epoch"), "3 \"quoted\""));
  size_t len = st.file_len;
  safetensors_free(&st);
  /* truncations: in the length, in the header, in the data */
  CHECK(truncate(path, 5) == 0);
  CHECK_FAILS_WITH(safetensors_read(path, &st), "header length missing");
  CHECK_OK(safetensors_write(path, t, 2, meta, 1));
  CHECK(truncate(path, 40) == 0);
  CHECK_FAILS_WITH(safetensors_read(path, &st), "does not fit");
  CHECK_OK(safetensors_write(path, t, 2, meta, 1));
  CHECK(truncate(path, (off_t)len - 4) == 0);
  CHECK_FAILS_WITH(safetensors_read(path, &st), "tensor b: byte range");
  unlink(path);
}

/* Names and values at their longest, and a header of many of them, come
 * back whole: the header is built in the growable string (core/strbuf). */
static void test_safetensors_long_strings(void) {
  char path[] = "/tmp/dtrain-st-XXXXXX";
  make_temp_file(path);
  float a[1] = {7};
  st_tensor_t t[1] = {{.ndim = 1, .dims = {1}, .len = 1, .data = a}};
  memset(t[0].name, 'n', sizeof t[0].name - 1);
  st_meta_t meta[8];
  for (int k = 0; k < 8; k++) {
    snprintf(meta[k].key, sizeof meta[k].key, "key%d", k);
    memset(meta[k].value, 'a' + k, sizeof meta[k].value - 1);
    meta[k].value[sizeof meta[k].value - 1] = 0;
  }
  CHECK_OK(safetensors_write(path, t, 1, meta, 8));
  safetensors_t st;
  CHECK_OK(safetensors_read(path, &st));
  CHECK(st.ntensors == 1 && !strcmp(st.tensors[0].name, t[0].name));
  for (int k = 0; k < 8; k++)
    CHECK(safetensors_meta(&st, meta[k].key) && !strcmp(safetensors_meta(&st, meta[k].key), meta[k].value));
  safetensors_free(&st);
  unlink(path);
}

/* A model file is plain text: a gzip-compressed one is refused, not
 * decompressed (no reader but the IDX one inflates its input). */
static void test_model_file_gzip_refused(void) {
  char path[] = "/tmp/dtrain-model-XXXXXX";
  make_temp_file(path);
  gzFile g = gzopen(path, "wb");
  CHECK(g != NULL);
  if (g) {
    gzputs(g, "dense units=10\n");
    gzclose(g);
  }
  model_spec_t s;
  CHECK_FAILS_WITH(model_spec_load(path, &s), "not a text file");
  unlink(path);
}

/* An in-memory safetensors file: the 8-byte length, `header` (padded with
 * spaces to a multiple of 8 bytes when pad, as writers do, so that the data
 * is aligned), then `data_len` zero bytes, in a buffer of exactly that size
 * (so that under AddressSanitizer any read past the end is caught). */
static int parse_st_pad(const char *header, int pad, size_t data_len, safetensors_t *st) {
  size_t hl = strlen(header), padded = pad ? (hl + 7) / 8 * 8 : hl, len = 8 + padded + data_len;
  uint8_t *f = calloc(1, len);
  if (!f) return dt_error("out of memory");
  for (int b = 0; b < 8; b++) f[b] = (uint8_t)((uint64_t)padded >> (8 * b));
  memcpy(f + 8, header, hl);
  memset(f + 8 + hl, ' ', padded - hl);
  return safetensors_parse("h.st", f, len, st);
}
static int parse_st(const char *header, size_t data_len, safetensors_t *st) {
  return parse_st_pad(header, 1, data_len, st);
}

#define T(name, off) "\"" name "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" off "}"

/* Headers that PyTorch's reader refuses (and a few dtrain refuses on top):
 * each must fail with one line naming what is wrong. */
static void test_safetensors_hostile_headers(void) {
  safetensors_t st;
  /* the header ends inside a number: nothing past it may be read */
  CHECK_FAILS_WITH(parse_st_pad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4", 0, 0, &st),
                   "h.st: bad header JSON");
  CHECK_FAILS_WITH(parse_st_pad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1", 0, 0, &st), "bad header JSON");
  CHECK_FAILS_WITH(parse_st_pad("{\"\\u12", 0, 0, &st), "bad \\u escape");
  CHECK_FAILS_WITH(parse_st_pad("{\"a\\", 0, 0, &st), "unterminated string");
  /* 2^40 x 2^22 floats: 2^64 bytes, which wrapped to 0 */
  CHECK_FAILS_WITH(parse_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,4194304],"
                            "\"data_offsets\":[0,0]}}", 0, &st),
                   "tensor a: shape overflows");
  CHECK_FAILS_WITH(parse_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
                            "\"data_offsets\":[0,0]}}", 0, &st),
                   "overflows 64 bits");
  CHECK_FAILS_WITH(parse_st("{" T("a", "[-4,0]") "}", 0, &st), "expected a non-negative integer");
  /* the byte ranges must tile the data: no overlap, no gap, no trailing bytes */
  CHECK_FAILS_WITH(parse_st("{" T("a", "[0,4]") "," T("b", "[0,4]") "}", 4, &st),
                   "tensor b's bytes [0, 4) overlap tensor a's");
  CHECK_FAILS_WITH(parse_st("{" T("a", "[0,4]") "," T("b", "[8,12]") "}", 12, &st),
                   "data bytes [4, 8) belong to no tensor");
  CHECK_FAILS_WITH(parse_st("{" T("a", "[4,8]") "}", 8, &st), "data bytes [0, 4) belong to no tensor");
  CHECK_FAILS_WITH(parse_st("{" T("a", "[0,4]") "}", 8, &st),
                   "4 bytes of trailing data after the last tensor");
  CHECK_FAILS_WITH(parse_st("{}", 4, &st), "4 data bytes but no tensors");
  /* names and keys: unique, and not cut short */
  CHECK_FAILS_WITH(parse_st("{" T("a", "[0,4]") "," T("a", "[4,8]") "}", 8, &st),
                   "tensor a appears twice");
  CHECK_FAILS_WITH(parse_st("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                            "\"data_offsets\":[0,4]}}", 4, &st),
                   "tensor a: key 'dtype' appears twice");
  CHECK_FAILS_WITH(parse_st("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, &st),
                   "metadata 'k' appears twice");
  CHECK_FAILS_WITH(parse_st("{\"__metadata__\":{},\"__metadata__\":{}}", 0, &st),
                   "__metadata__ appears twice");
  char longname[400];
  snprintf(longname, sizeof longname, "{\"%0200d\":{}}", 7);
  CHECK_FAILS_WITH(parse_st(longname, 0, &st), "tensor name too long");
  CHECK_FAILS_WITH(parse_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, &st),
                   "tensor a: missing data_offsets");
  CHECK_FAILS_WITH(parse_st("{} x", 0, &st), "data after the closing '}'");
  CHECK_FAILS_WITH(parse_st("{\"a\\u0000b\":{}}", 0, &st), "\\u0000");
  /* good: ranges listed out of order, an empty tensor, padding spaces */
  CHECK_OK(parse_st("{" T("b", "[4,8]") ",\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],"
                    "\"data_offsets\":[8,8]}," T("a", "[0,4]") ",\"__metadata__\":{\"step\":\"12\"}}  ",
                    8, &st));
  CHECK(st.ntensors == 3 && safetensors_find(&st, "e") && safetensors_find(&st, "e")->len == 0);
  safetensors_free(&st);
}

/* Integer metadata (epoch, step): present, decimal, in range. */
static void test_safetensors_meta_int(void) {
  safetensors_t st;
  long long v = -7;
  CHECK_OK(parse_st("{\"__metadata__\":{\"e\":\"\",\"big\":\"99999999999999999999\",\"neg\":\"-1\","
                    "\"sp\":\" 1\",\"plus\":\"+1\",\"junk\":\"12x\",\"ok\":\"42\",\"max\":"
                    "\"9223372036854775807\"}}",
                    0, &st));
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "e", 0, 100, &v), "h.st: metadata 'e' = '' is not an integer in 0..100");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "big", 0, INT64_MAX, &v), "metadata 'big'");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "neg", 0, 100, &v), "metadata 'neg' = '-1'");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "sp", 0, 100, &v), "metadata 'sp'");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "plus", 0, 100, &v), "metadata 'plus'");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "junk", 0, 100, &v), "metadata 'junk'");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "ok", 0, 41, &v), "'42' is not an integer in 0..41");
  CHECK_FAILS_WITH(safetensors_meta_int(&st, "absent", 0, 41, &v), "metadata 'absent' missing");
  CHECK(v == -7);
  CHECK_OK(safetensors_meta_int(&st, "ok", 0, 100, &v));
  CHECK(v == 42);
  CHECK_OK(safetensors_meta_int(&st, "max", 0, INT64_MAX, &v));
  CHECK(v == INT64_MAX);
  CHECK_OK(safetensors_meta_int(&st, "neg", -5, 5, &v));
  CHECK(v == -1);
  safetensors_free(&st);
}

int main(void) {
  RUN(test_builtin_sizes);
  RUN(test_parse_errors);
  RUN(test_parse_refuses_sloppy_input);
  RUN(test_model_gradient);
  RUN(test_sequence_model_gradient);
  RUN(test_sequence_model_sizes_and_refusals);
  RUN(test_ready_before_input_gradient);
  RUN(test_seeded_init);
  RUN(test_model_file_gzip_refused);
  RUN(test_safetensors_round_trip);
  RUN(test_safetensors_long_strings);
  RUN(test_safetensors_hostile_headers);
  RUN(test_safetensors_meta_int);
  TEST_MAIN_END();
}
