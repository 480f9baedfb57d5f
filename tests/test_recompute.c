/* --recompute in the nn library: a small GPT's loss and gradients are the
 * same bits under none, blocks and full, on the model and on pipeline
 * stages with micro-batches in flight (forwards of several before their
 * backwards, so the shared workspace must be rebuilt); the arenas shrink
 * as they should; blocks finds one segment per transformer block; and
 * --precision bf16 makes every product of the sequence layers (linear,
 * attention's five, the head, the LSTM's) a bf16 one, close to fp32. */
#include <string.h>

#include "dtrain/nn.h"
#include "test.h"

enum { T = 16, V = 256, B = 4 };

/* embedding, posembed, `blocks` pre-norm blocks of width 32 (2 heads), a
 * final norm and an untied head. */
static const char *gpt_text(int blocks, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "embedding vocab=%d units=32\nposembed positions=%d name=x0\n", V, T);
  for (int b = 0; b < blocks; b++)
    n += (size_t)snprintf(buf + n, cap - n,
                          "layernorm\nattention heads=2\nadd with=x%d name=a%d\nlayernorm\n"
                          "linear units=128\ngelu\nlinear units=32\nadd with=a%d name=x%d\n",
                          b, b, b, b + 1);
  snprintf(buf + n, cap - n, "layernorm\nlmhead vocab=%d\n", V);
  return buf;
}

static model_t *build(const char *text, int mode, int batch) {
  model_spec_t spec;
  model_t *m = NULL;
  if (model_spec_parse(text, "test", &spec) != 0) return NULL;
  spec.recompute = mode;
  if (model_build(&spec, (shape_t){1, 1, T}, V, batch, &m) != 0) m = NULL;
  model_spec_free(&spec);
  if (m) model_init_params(m, 5);
  return m;
}

static void batch_of(float *x, int32_t *y, int n, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed);
  for (int i = 0; i < n * T; i++) x[i] = (float)(rng_next(&r) % V), y[i] = (int32_t)(rng_next(&r) % V);
}

static void test_model_same_bits(void) {
  char text[4096];
  gpt_text(3, text, sizeof text);
  float x[B * T];
  int32_t y[B * T];
  batch_of(x, y, B, 1);
  model_t *m[3];
  double loss[3];
  for (int k = 0; k < 3; k++) {
    m[k] = build(text, k, B);
    CHECK(m[k] != NULL);
    if (!m[k]) return;
    for (int s = 0; s < 2; s++) { /* two steps: the second finds the workspace used */
      model_forward(m[k], x, B, 1, NULL);
      loss[k] = model_loss(m[k], y, B, B, NULL);
      model_backward(m[k], x, B, NULL, NULL);
    }
  }
  for (int k = 1; k < 3; k++) {
    CHECK(loss[k] == loss[0]);
    CHECK(!memcmp(m[k]->grads, m[0]->grads, m[0]->nparams * sizeof(float)));
  }
  /* blocks: 3 segments (each block's last add ends one); full: one */
  int segs[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < m[k]->nlayers; i++) segs[k] += m[k]->layers[i].recompute_from != 0;
  CHECK(segs[0] == 0 && segs[1] == 3 && segs[2] == 1);
  printf("  activation arena: none %zu, blocks %zu, full %zu bytes\n", m[0]->act_bytes,
         m[1]->act_bytes, m[2]->act_bytes);
  CHECK(m[1]->act_bytes * 3 < m[0]->act_bytes * 2); /* width 32: the vocabulary-wide head dominates */
  CHECK(m[2]->act_bytes <= m[0]->act_bytes);
  for (int k = 0; k < 3; k++) model_free(m[k]);
}

/* Two stages of micro-batches of 2: forwards of mb 0, 1, then backwards
 * 1, 0 (the workspace holds mb 1's last segment, so mb 0's is rebuilt),
 * gradients accumulated; the same bits in every mode. */
static void stages_step(model_t *m, const float *x, const int32_t *y, float *grads) {
  int cut = 0, cuts[64], nc = model_stage_cuts(m, cuts);
  for (int k = 0; k < nc; k++)
    if (m->layers[cuts[k]].spec.kind == LAYER_LAYERNORM && cuts[k] > m->nlayers / 2) {
      cut = cuts[k];
      break;
    }
  stage_t *s0, *s1;
  CHECK_OK(stage_new(m, 0, cut - 1, 2, 2, &s0));
  CHECK_OK(stage_new(m, cut, m->nlayers - 1, 2, 2, &s1));
  const float *h;
  float dh[2 * T * 32];
  for (int mb = 0; mb < 2; mb++) {
    CHECK_OK(stage_forward(s0, mb, x + mb * 2 * T, 2, 1, NULL, &h));
    memcpy(stage_input(s1, mb), h, 2 * s0->out_size * sizeof(float));
    CHECK_OK(stage_forward(s1, mb, stage_input(s1, mb), 2, 1, NULL, NULL));
  }
  for (int mb = 1; mb >= 0; mb--) {
    CHECK_OK(stage_loss(s1, mb, y + mb * 2 * T, B, NULL, NULL));
    CHECK_OK(stage_backward(s1, mb, NULL, dh, mb == 0, NULL, NULL));
    CHECK_OK(stage_backward(s0, mb, dh, NULL, mb == 0, NULL, NULL));
  }
  memcpy(grads, m->grads, m->nparams * sizeof(float));
  stage_free(s0);
  stage_free(s1);
}

static void test_stages_same_bits(void) {
  char text[4096];
  gpt_text(3, text, sizeof text);
  float x[B * T];
  int32_t y[B * T];
  batch_of(x, y, B, 2);
  float *g[3];
  size_t np = 0;
  for (int k = 0; k < 3; k++) {
    model_t *m = build(text, k, B);
    CHECK(m != NULL);
    if (!m) return;
    np = m->nparams;
    g[k] = malloc(np * sizeof(float));
    stages_step(m, x, y, g[k]);
    model_free(m);
  }
  CHECK(!memcmp(g[1], g[0], np * sizeof(float)));
  CHECK(!memcmp(g[2], g[0], np * sizeof(float)));
  for (int k = 0; k < 3; k++) free(g[k]);
}

static void test_blocks_refused_without_blocks(void) {
  model_spec_t spec;
  model_t *m = NULL;
  CHECK_OK(model_spec_parse("embedding vocab=256 units=16\nlstm units=16 layers=1\nlmhead vocab=256\n",
                            "test", &spec));
  spec.recompute = RECOMPUTE_BLOCKS;
  CHECK_FAILS_WITH(model_build(&spec, (shape_t){1, 1, T}, V, 2, &m), "no transformer block");
  spec.recompute = RECOMPUTE_FULL; /* one segment: allowed */
  CHECK_OK(model_build(&spec, (shape_t){1, 1, T}, V, 2, &m));
  model_free(m);
  model_spec_free(&spec);
}

/* One training step's loss and gradients under the current precision. */
static double grads_of(const char *text, float *grads, long *made, long *fp32) {
  float x[B * T];
  int32_t y[B * T];
  batch_of(x, y, B, 3);
  model_t *m = build(text, RECOMPUTE_NONE, B);
  if (!m) return NAN;
  long b0, f0, b1, f1;
  kern_bf16_products(&b0, &f0);
  model_forward(m, x, B, 1, NULL);
  double loss = model_loss(m, y, B, B, NULL) / B;
  model_backward(m, x, B, NULL, NULL);
  kern_bf16_products(&b1, &f1);
  *made = b1 - b0, *fp32 = f1 - f0;
  memcpy(grads, m->grads, m->nparams * sizeof(float));
  model_free(m);
  return loss;
}

static void bf16_case(const char *name, const char *text, size_t np) {
  float *g32 = malloc(np * sizeof(float)), *g16 = malloc(np * sizeof(float));
  long made, fp32;
  double l32 = grads_of(text, g32, &made, &fp32);
  kern_set_bf16(1);
  double l16 = grads_of(text, g16, &made, &fp32);
  kern_set_bf16(0);
  kern_bf16_release();
  double num = 0, den = 0;
  int differ = 0;
  for (size_t i = 0; i < np; i++) {
    num += (double)(g16[i] - g32[i]) * (g16[i] - g32[i]), den += (double)g32[i] * g32[i];
    differ += g16[i] != g32[i];
  }
  double rel = sqrt(num / den);
  printf("  %s: %ld products in bf16, %ld in fp32; loss fp32 %.6f bf16 %.6f; gradient rel. "
         "error %.2e\n", name, made, fp32, l32, l16, rel);
  CHECK(made > 0 && fp32 == 0);          /* every product bf16, attention's scaled ones too */
  CHECK(differ > 0);                     /* rounded indeed */
  CHECK(fabs(l16 - l32) < 1e-2 * l32);   /* bf16's 8 bits: 2^-8 a product, averaged */
  CHECK(rel < 5e-2);
  free(g32);
  free(g16);
}

static void test_bf16_sequence_layers(void) {
  if (!kern_bf16_available()) {
    printf("  (no bf16 here: the refusal is tested by e2e_kernels.sh)\n");
    return;
  }
  char text[4096];
  gpt_text(2, text, sizeof text);
  model_t *m = build(text, 0, 1);
  size_t np = m ? m->nparams : 0;
  model_free(m);
  bf16_case("gpt", text, np);
  const char *lstm = "embedding vocab=256 units=16\nlstm units=24 layers=2\nlmhead vocab=256\n";
  m = build(lstm, 0, 1);
  np = m ? m->nparams : 0;
  model_free(m);
  bf16_case("lstm", lstm, np);
}

int main(void) {
  RUN(test_model_same_bits);
  RUN(test_stages_same_bits);
  RUN(test_blocks_refused_without_blocks);
  RUN(test_bf16_sequence_layers);
  TEST_MAIN_END();
}
