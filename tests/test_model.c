/* The model: builtin definitions, the text format and its errors, the
 * arena layout, a whole-model gradient check through fused and aliased
 * layers, seeded initialisation, and the safetensors round trip. */
#include <string.h>
#include <unistd.h>

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

/* A small conv net (fused conv+relu, a pool, an aliasing flatten, a fused
 * dense+relu), seeded; a batch of 3 samples for it (x: 3 x 72 floats, y: 3
 * labels); and a copy of its gradient on that batch (*grads, dt_free it). */
static model_t *small_net(float *x, int32_t *y, float **grads) {
  const char *text = "conv2d filters=3 kernel=3 pad=1\nrelu\nmaxpool kernel=2\nflatten\n"
                     "dense units=6\nrelu\ndense units=4\n";
  shape_t in = {2, 6, 6};
  model_t *m = build(text, in, 4, 3);
  CHECK(m != NULL);
  if (!m) return NULL;
  model_init_params(m, 5);
  rng_t r;
  rng_seed(&r, 9);
  for (int i = 0; i < 3 * 72; i++) x[i] = rng_normal(&r);
  int32_t labels[3] = {0, 3, 1};
  memcpy(y, labels, sizeof labels);
  model_forward(m, x, 3, 1, NULL);
  model_loss(m, y, 3, 3, NULL);
  model_backward(m, x, 3, NULL, NULL);
  *grads = dt_alloc_floats(m->nparams);
  memcpy(*grads, m->grads, m->nparams * sizeof(float));
  return m;
}

/* Finite differences of the summed loss over the whole model, through a
 * fused conv+relu, a pool, an aliasing flatten and a fused dense+relu. */
static void test_model_gradient(void) {
  int n = 3;
  float x[3 * 72];
  int32_t y[3];
  float *analytic;
  model_t *m = small_net(x, y, &analytic);
  if (!m) return;
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < m->nparams; i += 3) {
    float keep = m->params[i], h = 1e-3f;
    m->params[i] = keep + h;
    model_forward(m, x, n, 1, NULL);
    double lp = model_loss(m, y, n, n, NULL);
    m->params[i] = keep - h;
    model_forward(m, x, n, 1, NULL);
    double lm = model_loss(m, y, n, n, NULL);
    m->params[i] = keep;
    double numeric = (lp - lm) / (2 * h) / n, err = fabs(numeric - analytic[i]) / (fabs(numeric) + 1e-2);
    if (err > worst) worst = err;
    if (err > 2e-2) { bad++; printf("  param %zu: numeric %g analytic %g\n", i, numeric, analytic[i]); }
  }
  printf("  model gradient check: worst relative error %.2e\n", worst);
  CHECK(worst < 2e-2);
  dt_free(analytic);
  model_free(m);
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
  int n = 3;
  float x[3 * 72];
  int32_t y[3];
  float *plain;
  model_t *m = small_net(x, y, &plain);
  if (!m) return;
  model_forward(m, x, n, 1, NULL);
  model_loss(m, y, n, n, NULL);
  for (int i = 0; i < m->nlayers - 1; i++) m->layers[i].dout[0] = NAN; /* not written yet */
  ready_log_t log = {m, 0, 0};
  model_backward(m, x, n, log_ready, &log);
  CHECK(log.calls == 3);  /* conv2d and the two dense layers */
  CHECK(log.early == 2);  /* the dense layers, which have an input gradient to compute */
  CHECK(memcmp(plain, m->grads, m->nparams * sizeof(float)) == 0);
  dt_free(plain);
  model_free(m);
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

static void test_safetensors_round_trip(void) {
  char path[] = "/tmp/dtrain-st-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
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

int main(void) {
  RUN(test_builtin_sizes);
  RUN(test_parse_errors);
  RUN(test_model_gradient);
  RUN(test_ready_before_input_gradient);
  RUN(test_seeded_init);
  RUN(test_safetensors_round_trip);
  TEST_MAIN_END();
}
