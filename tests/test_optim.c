/* optim: each update rule over 3 steps on a 3-element tensor against the
 * arithmetic written out here in double, and against numbers produced by
 * PyTorch 1.13; a step in parts against the whole; LR schedules at chosen
 * steps; parse and config errors. */
#include <stdint.h>
#include <string.h>

#include "dtrain/optim.h"
#include "test.h"

#define N 3
#define STEPS 3
static const double W0[N] = {0.5, -1.0, 2.0};
static const double G[STEPS][N] = {{0.1, -0.2, 0.3}, {-0.05, 0.4, 0.1}, {0.2, 0.0, -0.3}};

/* Runs `cfg` for the first `steps` steps of G on W0 as one segment. */
static optimizer_t *run_steps(const optim_config_t *cfg, int steps, float lr, float w[N]) {
  optimizer_t *o = NULL;
  CHECK_OK(optim_new(cfg, N, &o));
  if (!o) return NULL;
  optim_segment_t seg = {0, N};
  for (int i = 0; i < N; i++) w[i] = (float)W0[i];
  for (int s = 0; s < steps; s++) {
    float g[N];
    for (int i = 0; i < N; i++) g[i] = (float)G[s][i];
    optim_step(o, w, g, &seg, 1, lr);
  }
  return o;
}

static optimizer_t *run_rule(const optim_config_t *cfg, float lr, float w[N]) {
  return run_steps(cfg, STEPS, lr, w);
}

static void check_vec(const float got[N], const double want[N], double tol) {
  for (int i = 0; i < N; i++) CHECK_NEAR(got[i], want[i], tol);
}

/* The defaults of `kind` but momentum mu, nesterov and weight decay wd. */
static optim_config_t config(optim_kind_t kind, float mu, int nesterov, float wd) {
  optim_config_t cfg;
  optim_config_default(kind, &cfg);
  cfg.momentum = mu;
  cfg.nesterov = nesterov;
  cfg.weight_decay = wd;
  return cfg;
}

/* Runs cfg over the STEPS steps of G at lr: w must be want to 1e-6.
 * Returns the optimizer, whose state the caller checks and frees. */
static optimizer_t *run_and_check(const optim_config_t *cfg, float lr, const double want[N]) {
  float w[N];
  optimizer_t *o = run_rule(cfg, lr, w);
  check_vec(w, want, 1e-6);
  return o;
}

/* o keeps nstate arenas, and arena i is called `name`. */
static int has_state(const optimizer_t *o, int nstate, int i, const char *name) {
  return o && o->nstate == nstate && strcmp(optim_state_name(o, i), name) == 0;
}

/* ---- SGD ------------------------------------------------------------------ */

static void test_sgd_plain_weight_decay(void) {
  optim_config_t cfg = config(OPTIM_SGD, 0, 0, 0.01f);
  float w[N];
  optimizer_t *o = run_rule(&cfg, 0.1f, w);
  CHECK(o && o->nstate == 0);
  /* by hand, first element: w <- w - 0.1 (g + 0.01 w) */
  double w0 = 0.5;
  w0 -= 0.1 * (0.1 + 0.01 * w0);    /* 0.4895 */
  w0 -= 0.1 * (-0.05 + 0.01 * w0);  /* 0.4940105 */
  w0 -= 0.1 * (0.2 + 0.01 * w0);    /* 0.4735164895 */
  CHECK_NEAR(w0, 0.4735164895, 1e-12);
  CHECK_NEAR(w[0], w0, 1e-6);
  optim_free(o);
}

static void sgd_reference(double mu, int nesterov, double wd, double lr, double w[N]) {
  double buf[N] = {0};
  for (int i = 0; i < N; i++) w[i] = W0[i];
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < N; i++) {
      double d = G[s][i] + wd * w[i];
      buf[i] = s == 0 ? d : mu * buf[i] + d; /* PyTorch: buffer starts as a copy of g */
      w[i] -= lr * (nesterov ? d + mu * buf[i] : buf[i]);
    }
}

static void test_sgd_momentum(void) {
  optim_config_t cfg = config(OPTIM_SGD, 0.9f, 0, 0.01f);
  double want[N];
  sgd_reference(0.9, 0, 0.01, 0.1, want);
  optimizer_t *o = run_and_check(&cfg, 0.1f, want);
  /* The buffer after step 1 is exactly g1 + wd w0. */
  CHECK(has_state(o, 1, 0, "momentum_buffer"));
  optim_free(o);
}

/* Negative momentum (asynchronous training, --implicit-momentum): sgd
 * keeps the buffer and follows the same rule; -1 and below, and negative
 * momentum for the other rules, are refused. */
static void test_sgd_negative_momentum(void) {
  optim_config_t cfg = config(OPTIM_SGD, -0.25f, 0, 0.01f);
  double want[N];
  sgd_reference(-0.25, 0, 0.01, 0.1, want);
  optimizer_t *o = run_and_check(&cfg, 0.1f, want);
  CHECK(has_state(o, 1, 0, "momentum_buffer"));
  optim_free(o);
  cfg.momentum = -1;
  CHECK_FAILS_WITH(optim_new(&cfg, N, &o), "expected -1 < momentum < 1");
  cfg = config(OPTIM_RMSPROP, -0.25f, 0, 0);
  CHECK_FAILS_WITH(optim_new(&cfg, N, &o), "momentum = -0.25 is out of range");
}

static void test_sgd_nesterov(void) {
  optim_config_t cfg = config(OPTIM_SGD, 0.9f, 1, 0.01f);
  double want[N];
  float w[N];
  sgd_reference(0.9, 1, 0.01, 0.1, want);
  optim_free(run_and_check(&cfg, 0.1f, want));
  /* by hand, first step of element 0: d = 0.1 + 0.01 * 0.5, buf = d,
   * w = 0.5 - 0.1 (d + 0.9 d) */
  optim_free(run_steps(&cfg, 1, 0.1f, w));
  CHECK_NEAR(w[0], 0.5 - 0.1 * (0.105 + 0.9 * 0.105), 1e-7);
}

/* ---- Adam ----------------------------------------------------------------- */

static void adam_reference(double lr, double b1, double b2, double eps, double wd, double w[N]) {
  double m[N] = {0}, v[N] = {0};
  for (int i = 0; i < N; i++) w[i] = W0[i];
  for (int s = 0; s < STEPS; s++) {
    int t = s + 1;
    for (int i = 0; i < N; i++) {
      double d = G[s][i] + wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * d;
      v[i] = b2 * v[i] + (1 - b2) * d * d;
      double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
      w[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
  }
}

static void test_adam(void) {
  optim_config_t cfg = config(OPTIM_ADAM, 0, 0, 0.01f);
  double want[N];
  adam_reference(0.01, 0.9, 0.999, 1e-8, 0.01, want);
  optimizer_t *o = run_and_check(&cfg, 0.01f, want);
  CHECK(o && o->steps == STEPS && o->nstate == 2);
  CHECK(o && strcmp(optim_state_name(o, 0), "exp_avg") == 0);
  CHECK(o && strcmp(optim_state_name(o, 1), "exp_avg_sq") == 0);
  CHECK(o && optim_state_name(o, 2) == NULL);
  optim_free(o);
}

/* With bias correction, the first step is lr * sign(g): m^ = g, v^ = g^2.
 * Without it, it would be lr * (1-b1)/sqrt(1-b2) = 3.16 lr. */
static void test_adam_first_step_bias_correction(void) {
  optim_config_t cfg = config(OPTIM_ADAM, 0, 0, 0);
  optimizer_t *o = NULL;
  CHECK_OK(optim_new(&cfg, N, &o));
  if (!o) return;
  float w[N] = {0.5f, -1.0f, 2.0f}, g[N] = {0.1f, -0.2f, 3.0f};
  optim_segment_t seg = {0, N};
  optim_step(o, w, g, &seg, 1, 0.01f);
  CHECK_NEAR(w[0], 0.5 - 0.01, 1e-6);
  CHECK_NEAR(w[1], -1.0 + 0.01, 1e-6);
  CHECK_NEAR(w[2], 2.0 - 0.01, 1e-6);
  optim_free(o);
}

/* ---- RMSProp -------------------------------------------------------------- */

static void rmsprop_reference(double lr, double alpha, double eps, double mu, double wd,
                              double w[N]) {
  double sq[N] = {0}, buf[N] = {0};
  for (int i = 0; i < N; i++) w[i] = W0[i];
  for (int s = 0; s < STEPS; s++)
    for (int i = 0; i < N; i++) {
      double d = G[s][i] + wd * w[i];
      sq[i] = alpha * sq[i] + (1 - alpha) * d * d;
      double step = d / (sqrt(sq[i]) + eps);
      if (mu > 0) {
        buf[i] = mu * buf[i] + step;
        step = buf[i];
      }
      w[i] -= lr * step;
    }
}

static void test_rmsprop(void) {
  optim_config_t cfg = config(OPTIM_RMSPROP, 0, 0, 0.01f);
  double want[N];
  float w[N];
  rmsprop_reference(0.01, 0.99, 1e-8, 0, 0.01, want);
  optimizer_t *o = run_and_check(&cfg, 0.01f, want);
  CHECK(has_state(o, 1, 0, "square_avg"));
  optim_free(o);

  cfg.momentum = 0.9f;
  rmsprop_reference(0.01, 0.99, 1e-8, 0.9, 0.01, want);
  o = run_and_check(&cfg, 0.01f, want);
  CHECK(has_state(o, 2, 1, "momentum_buffer"));
  optim_free(o);
  /* by hand, first step: sq = (1 - 0.99) d^2, so d / sqrt(sq) = 10 sign(d)
   * and w moves by lr * 10 whatever the size of g */
  optim_free(run_steps(&cfg, 1, 0.01f, w));
  CHECK_NEAR(w[0], 0.5 - 0.1, 1e-6);
  CHECK_NEAR(w[1], -1.0 + 0.1, 1e-6);
  CHECK_NEAR(w[2], 2.0 - 0.1, 1e-6);
}

/* ---- LARS ----------------------------------------------------------------- */

/* LARS with momentum 0.9 at lr 1, weight decay 0.01, trust 0.001; checks
 * the first step's trust ratio on the way. */
static void lars_reference(double ww[N]) {
  double v[N] = {0}, lr = 1.0, wd = 0.01, eta = 0.001;
  for (int i = 0; i < N; i++) ww[i] = W0[i];
  for (int s = 0; s < STEPS; s++) {
    double wn = 0, gn = 0;
    for (int i = 0; i < N; i++) wn += ww[i] * ww[i], gn += G[s][i] * G[s][i];
    wn = sqrt(wn), gn = sqrt(gn);
    double local = eta * wn / (gn + wd * wn);
    if (s == 0) /* ||w0|| = sqrt(5.25), ||g1|| = sqrt(0.14) */
      CHECK_NEAR(local, 0.001 * sqrt(5.25) / (sqrt(0.14) + 0.01 * sqrt(5.25)), 1e-12);
    for (int i = 0; i < N; i++) {
      v[i] = 0.9 * v[i] + lr * local * (G[s][i] + wd * ww[i]);
      ww[i] -= v[i];
    }
  }
}

static void test_lars_trust_ratio(void) {
  optim_config_t cfg = config(OPTIM_LARS, 0.9f, 0, 0.01f);
  cfg.trust = 0.001f;
  double want[N];
  lars_reference(want);
  optimizer_t *o = run_and_check(&cfg, 1.0f, want);
  CHECK(has_state(o, 1, 0, "momentum_buffer"));
  optim_free(o);
}

/* Each segment gets its own trust ratio; a zero gradient leaves w alone
 * and a zero weight takes the plain rate. */
static void test_lars_per_segment(void) {
  optim_config_t cfg = config(OPTIM_LARS, 0, 0, 0);
  cfg.trust = 0.5f;
  optimizer_t *o = NULL;
  CHECK_OK(optim_new(&cfg, 6, &o));
  if (!o) return;
  float w[6] = {3, 4, 0, 0, 1, 1}, g[6] = {0.6f, 0.8f, 0.5f, 0.5f, 0, 0};
  optim_segment_t segs[3] = {{0, 2}, {2, 2}, {4, 2}};
  optim_step(o, w, g, segs, 3, 0.1f);
  /* segment 0: local = 0.5 * 5 / 1 = 2.5, step = 0.1 * 2.5 * g */
  CHECK_NEAR(w[0], 3 - 0.25 * 0.6, 1e-6);
  CHECK_NEAR(w[1], 4 - 0.25 * 0.8, 1e-6);
  /* segment 1: ||w|| = 0, local = 1 */
  CHECK_NEAR(w[2], -0.05, 1e-7);
  CHECK_NEAR(w[3], -0.05, 1e-7);
  CHECK(w[4] == 1 && w[5] == 1);
  optim_free(o);
}

/* ---- PyTorch 1.13 cross-check ---------------------------------------------
 * Final weights after the 3 steps of G from W0, printed by:
 *
 * /usr/bin/python3 - <<'EOF'
 * import torch
 * W0 = [0.5, -1.0, 2.0]
 * G = [[0.1, -0.2, 0.3], [-0.05, 0.4, 0.1], [0.2, 0.0, -0.3]]
 * def run(make):
 *     w = torch.tensor(W0, dtype=torch.float32, requires_grad=True)
 *     opt = make([w])
 *     for g in G:
 *         w.grad = torch.tensor(g, dtype=torch.float32)
 *         opt.step()
 *     return ", ".join("%.9gf" % x for x in w.detach().tolist())
 * O = torch.optim
 * print("sgd_nesterov", run(lambda p: O.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)))
 * print("sgd_momentum", run(lambda p: O.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)))
 * print("adam", run(lambda p: O.Adam(p, lr=0.01, weight_decay=0.01)))
 * print("rmsprop_mom", run(lambda p: O.RMSprop(p, lr=0.01, momentum=0.9, weight_decay=0.01)))
 * print("rmsprop", run(lambda p: O.RMSprop(p, lr=0.01, weight_decay=0.01)))
 * EOF
 *
 * (torch 1.13.0a0, Debian's python3-torch) */
static void check_torch(optim_kind_t kind, float mu, int nesterov, float lr,
                        const float want[N]) {
  optim_config_t cfg = config(kind, mu, nesterov, 0.01f);
  float w[N];
  optim_free(run_rule(&cfg, lr, w));
  /* float32 on both sides; the difference is rounding order (PyTorch's
   * vector kernels use FMA), a few ulp after 3 steps. */
  for (int i = 0; i < N; i++) CHECK_NEAR(w[i], want[i], 4e-7);
}

static void test_matches_pytorch(void) {
  static const float sgd_nesterov[N] = {0.437227309f, -1.03164637f, 1.91100466f};
  static const float sgd_momentum[N] = {0.45963037f, -1.0162307f, 1.91861355f};
  static const float adam[N] = {0.479990721f, -0.995845556f, 1.97985649f};
  static const float rmsprop_mom[N] = {0.218244284f, -0.894537568f, 1.72655571f};
  static const float rmsprop[N] = {0.352885574f, -0.985956788f, 1.92894375f};
  check_torch(OPTIM_SGD, 0.9f, 1, 0.1f, sgd_nesterov);
  check_torch(OPTIM_SGD, 0.9f, 0, 0.1f, sgd_momentum);
  check_torch(OPTIM_ADAM, 0, 0, 0.01f, adam);
  check_torch(OPTIM_RMSPROP, 0.9f, 0, 0.01f, rmsprop_mom);
  check_torch(OPTIM_RMSPROP, 0, 0, 0.01f, rmsprop);
}

/* torch.optim.AdamW (1.13), lr 0.01, 3 steps of G: decoupled weight decay
 * 0.1 on every element, and with element 1 exempt (a norm or a bias) it
 * follows weight decay 0 there and 0.1 elsewhere. */
static void test_adamw_matches_pytorch(void) {
  static const float decayed[N] = {0.479279667f, -0.993510425f, 1.97484028f};
  static const float plain[N] = {0.480755508f, -0.996491015f, 1.98080552f};
  optim_config_t cfg;
  optim_config_default(OPTIM_ADAMW, &cfg);
  CHECK(fabsf(cfg.weight_decay - 0.01f) < 1e-9f); /* PyTorch's default */
  cfg.weight_decay = 0.1f;
  float w[N];
  optimizer_t *o = run_rule(&cfg, 0.01f, w);
  for (int i = 0; i < N; i++) CHECK_NEAR(w[i], decayed[i], 4e-7);
  CHECK(o && o->nstate == 2 && strcmp(optim_state_name(o, 1), "exp_avg_sq") == 0);
  optim_free(o);
  CHECK_OK(optim_new(&cfg, N, &o));
  optim_segment_t exempt = {1, 1}, seg = {0, N};
  CHECK_OK(optim_set_no_decay(o, &exempt, 1));
  for (int i = 0; i < N; i++) w[i] = (float)W0[i];
  for (int s = 0; s < STEPS; s++) {
    float g[N];
    for (int i = 0; i < N; i++) g[i] = (float)G[s][i];
    optim_step(o, w, g, &seg, 1, 0.01f);
  }
  CHECK_NEAR(w[0], decayed[0], 4e-7);
  CHECK_NEAR(w[1], plain[1], 4e-7);
  CHECK_NEAR(w[2], decayed[2], 4e-7);
  optim_free(o);
  optim_kind_t k;
  CHECK_OK(optim_kind_parse("adamw", &k));
  CHECK(k == OPTIM_ADAMW);
}

/* ---- segments and state layout -------------------------------------------- */

/* Stepping [0,2) then [2,4) in separate calls equals stepping [0,4) in
 * one, and an unlisted range is untouched (params and state): what a
 * parameter-server shard relies on. */
static void test_segments_index_state(void) {
  optim_config_t cfg = config(OPTIM_SGD, 0.9f, 0, 0);
  optimizer_t *a = NULL, *b = NULL;
  CHECK_OK(optim_new(&cfg, 6, &a));
  CHECK_OK(optim_new(&cfg, 6, &b));
  if (!a || !b) goto out;
  float wa[6] = {1, 2, 3, 4, 5, 6}, wb[6] = {1, 2, 3, 4, 5, 6};
  const float g[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  optim_segment_t both = {0, 4}, lo = {0, 2}, hi = {2, 2};
  for (int s = 0; s < 2; s++) {
    optim_step(a, wa, g, &both, 1, 0.1f);
    optim_step(b, wb, g, &lo, 1, 0.1f);
    optim_step(b, wb, g, &hi, 1, 0.1f);
  }
  for (int i = 0; i < 4; i++) CHECK_NEAR(wa[i], wb[i], 0);
  CHECK(wa[4] == 5 && wa[5] == 6 && a->state[0][4] == 0);
  /* buf = 0.9 g + g after two steps */
  CHECK_NEAR(a->state[0][3], 1.9 * 0.4, 1e-6);
out:
  optim_free(a);
  optim_free(b);
}

/* One step taken in parts of any size (optim_begin_step once, then
 * optim_step_segments on each part) gives the bits of the whole segment
 * stepped at once: shared sync steps its block a cache-sized chunk at a
 * time. Parts of odd sizes at odd offsets, so that the vectorised loops'
 * heads and tails fall elsewhere than in the whole. */
static void test_parts_same_bits(void) {
  enum { LEN = 1000, OFF = 5, SPAN = 990 };
  const optim_config_t cfgs[] = {config(OPTIM_SGD, 0, 0, 1e-3f), config(OPTIM_SGD, 0.9f, 0, 1e-4f),
                                 config(OPTIM_SGD, 0.9f, 1, 1e-4f), config(OPTIM_ADAM, 0, 0, 1e-4f),
                                 config(OPTIM_RMSPROP, 0, 0, 0), config(OPTIM_RMSPROP, 0.5f, 0, 1e-4f)};
  const size_t parts[] = {1, 7, 64, 333};
  static float w0[LEN], g[LEN], wa[LEN], wb[LEN];
  uint32_t x = 12345;
  for (int i = 0; i < LEN; i++) {
    x = x * 1664525u + 1013904223u;
    w0[i] = (float)(x >> 8) / (float)(1 << 24) - 0.5f;
    g[i] = w0[i] * 0.3f - 0.01f * (float)(i % 7);
  }
  for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++)
    for (size_t p = 0; p < sizeof parts / sizeof *parts; p++) {
      optimizer_t *a = NULL, *b = NULL;
      CHECK_OK(optim_new(&cfgs[c], LEN, &a));
      CHECK_OK(optim_new(&cfgs[c], LEN, &b));
      if (!a || !b) goto next;
      memcpy(wa, w0, sizeof wa);
      memcpy(wb, w0, sizeof wb);
      optim_segment_t whole = {OFF, SPAN};
      for (int s = 0; s < 3; s++) {
        optim_step(a, wa, g, &whole, 1, 0.01f);
        optim_begin_step(b);
        for (size_t off = OFF; off < OFF + SPAN; off += parts[p]) {
          optim_segment_t part = {off, OFF + SPAN - off < parts[p] ? OFF + SPAN - off : parts[p]};
          optim_step_segments(b, wb, g, &part, 1, 0.01f);
        }
      }
      CHECK(memcmp(wa, wb, sizeof wa) == 0);
      for (int i = 0; i < a->nstate; i++)
        CHECK(memcmp(a->state[i], b->state[i], LEN * sizeof(float)) == 0);
    next:
      optim_free(a);
      optim_free(b);
    }
}

/* ---- configuration and parsing -------------------------------------------- */

static void test_parse_and_config_errors(void) {
  optim_kind_t k;
  CHECK_OK(optim_kind_parse("rmsprop", &k));
  CHECK(k == OPTIM_RMSPROP && strcmp(optim_kind_name(k), "rmsprop") == 0);
  CHECK_FAILS_WITH(optim_kind_parse("adamax", &k),
                   "unknown optimizer 'adamax' (expected sgd, adam, adamw, rmsprop, lars)");
  lr_kind_t l;
  CHECK_OK(lr_kind_parse("cosine", &l));
  CHECK(l == LR_COSINE && strcmp(lr_kind_name(l), "cosine") == 0);
  CHECK_FAILS_WITH(lr_kind_parse("linear", &l), "(expected constant, step, cosine)");

  optim_config_t cfg;
  optimizer_t *o = NULL;
  optim_config_default(OPTIM_SGD, &cfg);
  cfg.nesterov = 1;
  CHECK_FAILS_WITH(optim_new(&cfg, 4, &o), "nesterov needs sgd with momentum > 0");
  optim_config_default(OPTIM_ADAM, &cfg);
  cfg.beta2 = 1.0f;
  CHECK_FAILS_WITH(optim_new(&cfg, 4, &o), "optimizer adam: beta2 = 1 is out of range");
  optim_config_default(OPTIM_SGD, &cfg);
  cfg.weight_decay = -0.1f;
  CHECK_FAILS_WITH(optim_new(&cfg, 4, &o), "weight_decay");
  optim_config_default(OPTIM_LARS, &cfg);
  cfg.momentum = NAN;
  CHECK_FAILS_WITH(optim_new(&cfg, 4, &o), "momentum");
  CHECK(o == NULL);
}

/* ---- learning-rate schedules ---------------------------------------------- */

static void test_lr_warmup_and_constant(void) {
  lr_schedule_t s = {.kind = LR_CONSTANT, .base = 0.1, .warmup_steps = 10};
  CHECK_NEAR(lr_at(&s, 0), 0.01, 1e-15);
  CHECK_NEAR(lr_at(&s, 4), 0.05, 1e-15);
  CHECK_NEAR(lr_at(&s, 9), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 10), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 100000), 0.1, 1e-15);
  s.warmup_steps = 0;
  CHECK_NEAR(lr_at(&s, 0), 0.1, 1e-15);
}

static void test_lr_step(void) {
  lr_schedule_t s = {.kind = LR_STEP, .base = 0.1, .step_size = 30, .gamma = 0.1};
  CHECK_NEAR(lr_at(&s, 0), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 29), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 30), 0.01, 1e-15);
  CHECK_NEAR(lr_at(&s, 65), 0.001, 1e-15);
  s.warmup_steps = 5; /* decay counts from the end of warm-up */
  CHECK_NEAR(lr_at(&s, 2), 0.06, 1e-15);
  CHECK_NEAR(lr_at(&s, 34), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 35), 0.01, 1e-15);
}

static void test_lr_cosine(void) {
  lr_schedule_t s = {.kind = LR_COSINE, .base = 0.1, .total_steps = 110, .warmup_steps = 10};
  CHECK_NEAR(lr_at(&s, 9), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 10), 0.1, 1e-15);
  CHECK_NEAR(lr_at(&s, 35), 0.1 * 0.5 * (1 + cos(M_PI / 4)), 1e-15);
  CHECK_NEAR(lr_at(&s, 60), 0.05, 1e-15);
  CHECK(lr_at(&s, 110) == 0.0);
  CHECK(lr_at(&s, 500) == 0.0);
  CHECK(lr_at(&s, 109) > 0.0 && lr_at(&s, 109) < 1e-4);
}

int main(void) {
  RUN(test_sgd_plain_weight_decay);
  RUN(test_sgd_momentum);
  RUN(test_sgd_negative_momentum);
  RUN(test_sgd_nesterov);
  RUN(test_adam);
  RUN(test_adam_first_step_bias_correction);
  RUN(test_rmsprop);
  RUN(test_lars_trust_ratio);
  RUN(test_lars_per_segment);
  RUN(test_matches_pytorch);
  RUN(test_adamw_matches_pytorch);
  RUN(test_segments_index_state);
  RUN(test_parts_same_bits);
  RUN(test_parse_and_config_errors);
  RUN(test_lr_warmup_and_constant);
  RUN(test_lr_step);
  RUN(test_lr_cosine);
  TEST_MAIN_END();
}
