/* Layer tests: every kind's backward against central finite differences of
 * the scalar L = Σ out·r (so dout = r), conv2d forward against a direct
 * convolution, batchnorm statistics against hand-computed values, and the
 * setup errors. Layers are built here without a model: a small helper
 * allocates the views. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "dtrain/nn.h"
#include "test.h"

/* ---- a layer with its own buffers ---------------------------------------- */

typedef struct {
  layer_t l;
  int max_batch;
  float *params, *grads, *bufs;
} tlayer_t;

static layer_spec_t spec_of(layer_kind_t kind) {
  layer_spec_t s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.stride = 1;
  s.rate = 0.5f;
  s.eps = 1e-5f;
  s.momentum = 0.1f;
  s.input = -1;
  return s;
}

static int tl_setup(tlayer_t *t, layer_spec_t spec, shape_t in, int max_batch) {
  memset(t, 0, sizeof *t);
  t->max_batch = max_batch;
  t->l.spec = spec;
  t->l.ops = layer_ops_for(spec.kind);
  t->l.in_shape = in;
  return t->l.ops->setup(&t->l, max_batch);
}

/* setup, then allocate and assign every view. */
static int tl_make(tlayer_t *t, layer_spec_t spec, shape_t in, int max_batch, uint64_t seed) {
  if (tl_setup(t, spec, in, max_batch) != 0) return -1;
  layer_t *l = &t->l;
  size_t out_len = (size_t)max_batch * shape_size(l->out_shape);
  t->params = dt_alloc_floats(l->param_len + 1);
  t->grads = dt_alloc_floats(l->param_len + 1);
  t->bufs = dt_alloc_floats(l->buf_len + 1);
  l->scratch = dt_alloc_floats(l->scratch_len + 1);
  l->out = dt_alloc_floats(out_len);
  l->dout = dt_alloc_floats(out_len);
  /* Garbage where a layer must not read before writing. */
  for (size_t i = 0; i < l->scratch_len; i++) l->scratch[i] = NAN;
  for (size_t i = 0; i < out_len; i++) l->out[i] = NAN;
  l->w = t->params;
  l->b = t->params + l->nweight;
  l->dw = t->grads;
  l->db = t->grads + l->nweight;
  l->running_mean = t->bufs;
  l->running_var = t->bufs + l->buf_len / 2;
  rng_t rng;
  rng_seed(&rng, seed);
  l->ops->init(l, &rng);
  return 0;
}

static void tl_free(tlayer_t *t) {
  dt_free(t->params);
  dt_free(t->grads);
  dt_free(t->bufs);
  dt_free(t->l.scratch);
  dt_free(t->l.out);
  dt_free(t->l.dout);
}

static size_t in_len(const tlayer_t *t, int n) { return (size_t)n * shape_size(t->l.in_shape); }
static size_t out_len(const tlayer_t *t, int n) { return (size_t)n * shape_size(t->l.out_shape); }

static void fill_uniform(float *a, size_t n, float lo, float hi, rng_t *rng) {
  for (size_t i = 0; i < n; i++) a[i] = lo + (hi - lo) * rng_uniform(rng);
}

/* ---- finite-difference gradient check ----------------------------------- */

typedef struct {
  double dx, dw, db;  /* max relative error of each gradient */
  int skipped;        /* coordinates skipped because a ReLU kink was crossed */
} gerr_t;

/* Relative error with a floor, so that tiny gradients compare absolutely. */
static double rel_err(double a, double b) {
  double s = fmax(fmax(fabs(a), fabs(b)), 0.1);
  return fabs(a - b) / s;
}

typedef struct {
  tlayer_t *t;
  float *x;
  int n, train;
  rng_t rng;          /* the same state for every evaluation: same dropout mask */
  const float *r;
  unsigned char *sign; /* out > 0 at the unperturbed point, or NULL */
} objective_t;

/* L = Σ out·r in double; *kinked set when the ReLU pattern moved. */
static double objective(objective_t *o, int *kinked) {
  rng_t rng = o->rng;
  layer_t *l = &o->t->l;
  l->ops->forward(l, o->x, o->n, o->train, &rng);
  size_t len = out_len(o->t, o->n);
  double s = 0;
  for (size_t i = 0; i < len; i++) s += (double)l->out[i] * o->r[i];
  if (kinked) {
    *kinked = 0;
    if (o->sign)
      for (size_t i = 0; i < len; i++) *kinked |= (l->out[i] > 0.0f) != o->sign[i];
  }
  return s;
}

/* Central difference of the objective in one float, skipping kinks. */
static int numeric(objective_t *o, float *v, double eps, double *g) {
  float saved = *v;
  int k1, k2;
  *v = saved + (float)eps;
  double lp = objective(o, &k1);
  *v = saved - (float)eps;
  double lm = objective(o, &k2);
  *v = saved;
  double h = ((double)(saved + (float)eps) - (double)(saved - (float)eps)) / 2.0;
  *g = (lp - lm) / (2.0 * h);
  return !(k1 || k2);
}

/* Checks dx, dw, db of t's layer at x (n samples) against finite
 * differences. kink: skip coordinates whose perturbation changes which
 * outputs are positive (ReLU). Also checks that backward overwrites dw/db
 * and that dx == NULL gives the same parameter gradients. */
static gerr_t grad_check(tlayer_t *t, float *x, int n, int train, uint64_t seed, double eps,
                         int kink) {
  layer_t *l = &t->l;
  gerr_t e = {0, 0, 0, 0};
  size_t nx = in_len(t, n), ny = out_len(t, n), np = l->param_len;
  float *r = dt_alloc_floats(ny), *dx = dt_alloc_floats(nx + 1);
  float *dw = dt_alloc_floats(np + 1);
  unsigned char *sign = kink ? malloc(ny) : NULL;
  rng_t rng;
  rng_seed(&rng, seed);
  fill_uniform(r, ny, -1, 1, &rng);
  objective_t o = {t, x, n, train, rng, r, NULL};

  /* Analytic gradients, into buffers pre-filled with garbage. */
  objective(&o, NULL);
  if (sign)
    for (size_t i = 0; i < ny; i++) sign[i] = l->out[i] > 0.0f;
  memcpy(l->dout, r, ny * sizeof(float));
  for (size_t i = 0; i < nx; i++) dx[i] = 1e3f;
  for (size_t i = 0; i < np; i++) t->grads[i] = 1e3f;
  l->ops->backward(l, x, dx, n);
  memcpy(dw, t->grads, np * sizeof(float));

  /* Same parameter gradients without dx (first layer), and no accumulation. */
  objective(&o, NULL);
  memcpy(l->dout, r, ny * sizeof(float));
  for (size_t i = 0; i < np; i++) t->grads[i] = -7.0f;
  l->ops->backward(l, x, NULL, n);
  for (size_t i = 0; i < np; i++) CHECK(fabsf(t->grads[i] - dw[i]) <= 1e-6f * (1 + fabsf(dw[i])));

  o.sign = sign;
  for (size_t i = 0; i < nx; i++) {
    double g;
    if (!numeric(&o, &x[i], eps, &g)) {
      e.skipped++;
      continue;
    }
    e.dx = fmax(e.dx, rel_err(dx[i], g));
  }
  for (size_t i = 0; i < np; i++) {
    double g;
    if (!numeric(&o, &t->params[i], eps, &g)) {
      e.skipped++;
      continue;
    }
    double err = rel_err(dw[i], g);
    if (i < l->nweight) e.dw = fmax(e.dw, err);
    else e.db = fmax(e.db, err);
  }
  /* Skipping must stay the exception, or the check says nothing. */
  CHECK((size_t)e.skipped * 4 <= nx + np);
  dt_free(r);
  dt_free(dx);
  dt_free(dw);
  free(sign);
  return e;
}

static const double TOL = 1e-2;

static void report(const char *what, gerr_t e) {
  fprintf(stderr, "  %-34s max rel err  dx %.1e  dw %.1e  db %.1e%s", what, e.dx, e.dw, e.db,
          e.skipped ? "" : "\n");
  if (e.skipped) fprintf(stderr, "  (%d kink coords skipped)\n", e.skipped);
  CHECK(e.dx <= TOL);
  CHECK(e.dw <= TOL);
  CHECK(e.db <= TOL);
}

/* Builds a layer, draws x, checks the gradients, frees. */
static gerr_t check_layer(const char *what, layer_spec_t spec, shape_t in, int n, int train,
                          double eps, int kink, uint64_t seed) {
  tlayer_t t;
  gerr_t e = {1, 1, 1, 0};
  if (tl_make(&t, spec, in, n, seed) != 0) {
    fprintf(stderr, "  %s: setup failed: %s\n", what, dt_errmsg());
    CHECK(0);
    return e;
  }
  rng_t rng;
  rng_seed(&rng, seed + 1);
  /* Non-trivial gamma/beta for batchnorm (init gives 1 and 0); parameters
   * of the sequence layers away from their small initial values, so that
   * every gradient is large enough to compare. */
  if (spec.kind == LAYER_BATCHNORM || spec.kind == LAYER_LAYERNORM)
    fill_uniform(t.params, t.l.param_len, 0.5f, 1.5f, &rng);
  if (spec.kind == LAYER_ATTENTION || spec.kind == LAYER_LINEAR || spec.kind == LAYER_LMHEAD ||
      spec.kind == LAYER_POSEMBED)
    fill_uniform(t.params, t.l.param_len, -0.7f, 0.7f, &rng);
  float *x = dt_alloc_floats(in_len(&t, n));
  fill_uniform(x, in_len(&t, n), -1, 1, &rng);
  e = grad_check(&t, x, n, train, seed + 2, eps, kink);
  report(what, e);
  dt_free(x);
  tl_free(&t);
  return e;
}

/* ---- dense ---------------------------------------------------------------- */

static void test_dense_gradients(void) {
  layer_spec_t s = spec_of(LAYER_DENSE);
  s.units = 4;
  check_layer("dense 2x3x1 -> 4", s, (shape_t){1, 2, 3}, 3, 1, 1e-2, 0, 11);
  s.act = ACT_RELU;
  s.units = 7;
  check_layer("dense 6 -> 7 fused relu", s, (shape_t){6, 1, 1}, 3, 1, 1e-2, 1, 12);
}

static void test_dense_forward(void) {
  /* 2 inputs -> 2 units by hand: w = [[1,2],[3,-4]], b = [0.5, -1]. */
  tlayer_t t;
  layer_spec_t s = spec_of(LAYER_DENSE);
  s.units = 2;
  s.act = ACT_RELU;
  CHECK_OK(tl_make(&t, s, (shape_t){2, 1, 1}, 2, 1));
  CHECK(t.l.nweight == 4 && t.l.param_len == 6);
  float w[6] = {1, 2, 3, -4, 0.5f, -1}, x[4] = {1, 1, 2, -1};
  memcpy(t.params, w, sizeof w);
  t.l.ops->forward(&t.l, x, 2, 1, NULL);
  CHECK_NEAR(t.l.out[0], 3.5, 1e-6);   /* 1+2+0.5 */
  CHECK_NEAR(t.l.out[1], 0.0, 1e-6);   /* 3-4-1 < 0 */
  CHECK_NEAR(t.l.out[2], 0.5, 1e-6);   /* 2-2+0.5 */
  CHECK_NEAR(t.l.out[3], 9.0, 1e-6);   /* 6+4-1 */
  tl_free(&t);
}

/* PyTorch's defaults: U(±1/√fan_in) for weight and bias. */
static void test_init_bounds(void) {
  tlayer_t t;
  layer_spec_t s = spec_of(LAYER_DENSE);
  s.units = 50;
  CHECK_OK(tl_make(&t, s, (shape_t){16, 1, 1}, 1, 5));
  float lo = 1, hi = -1;
  for (size_t i = 0; i < t.l.param_len; i++) {
    lo = fminf(lo, t.params[i]);
    hi = fmaxf(hi, t.params[i]);
  }
  CHECK(lo >= -0.25f && hi <= 0.25f && lo < -0.2f && hi > 0.2f);
  tl_free(&t);
  s = spec_of(LAYER_CONV2D);
  s.filters = 8;
  s.kernel = 3;
  CHECK_OK(tl_make(&t, s, (shape_t){4, 6, 6}, 1, 5));   /* fan_in 36: bound 1/6 */
  lo = 1, hi = -1;
  for (size_t i = 0; i < t.l.param_len; i++) {
    lo = fminf(lo, t.params[i]);
    hi = fmaxf(hi, t.params[i]);
  }
  CHECK(lo >= -1.0f / 6 && hi <= 1.0f / 6 && lo < -0.15f && hi > 0.15f);
  tl_free(&t);
}

/* ---- conv2d --------------------------------------------------------------- */

/* Direct convolution, NHWC, weight [oc][k][k][ic], zero padding. */
static void conv_naive(const tlayer_t *t, const float *x, int n, float *y) {
  const layer_t *l = &t->l;
  int H = l->in_shape.h, W = l->in_shape.w, C = l->in_shape.c;
  int OH = l->out_shape.h, OW = l->out_shape.w, OC = l->out_shape.c;
  int k = l->spec.kernel, s = l->spec.stride, p = l->spec.pad;
  for (int b = 0; b < n; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int oc = 0; oc < OC; oc++) {
          double acc = l->b[oc];
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
              int iy = oy * s - p + ky, ix = ox * s - p + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int c = 0; c < C; c++)
                acc += (double)l->w[((oc * k + ky) * k + kx) * C + c] *
                       x[((b * H + iy) * W + ix) * C + c];
            }
          if (l->spec.act == ACT_RELU && acc < 0) acc = 0;
          y[((b * OH + oy) * OW + ox) * OC + oc] = (float)acc;
        }
}

typedef struct {
  int h, w, c, filters, k, s, p, relu, oh, ow;
} conv_case_t;

static const conv_case_t conv_cases[] = {
    {5, 5, 2, 3, 3, 1, 0, 0, 3, 3},  {5, 5, 2, 3, 3, 1, 1, 0, 5, 5},
    {5, 5, 2, 3, 3, 2, 0, 0, 2, 2},  {5, 5, 2, 3, 3, 2, 1, 1, 3, 3},
    {6, 4, 3, 2, 2, 2, 1, 0, 4, 3},  {4, 5, 3, 4, 1, 1, 0, 1, 4, 5},   /* pointwise */
    {3, 3, 1, 2, 3, 1, 0, 0, 1, 1},  {3, 4, 2, 2, 1, 2, 1, 0, 3, 3},   /* pad ≥ kernel */
    /* Longer kernel rows (21 and 36 floats: the other copy paths), and more
     * filters than one bias tile. */
    {5, 5, 7, 3, 3, 1, 1, 0, 5, 5},  {4, 4, 12, 2, 3, 2, 1, 1, 2, 2},
    {3, 3, 1, 260, 2, 1, 0, 0, 2, 2},
};

static layer_spec_t conv_spec(const conv_case_t *c) {
  layer_spec_t s = spec_of(LAYER_CONV2D);
  s.filters = c->filters;
  s.kernel = c->k;
  s.stride = c->s;
  s.pad = c->p;
  s.act = c->relu ? ACT_RELU : ACT_NONE;
  return s;
}

static void test_conv_forward_matches_direct(void) {
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
    const conv_case_t *c = &conv_cases[i];
    tlayer_t t;
    int n = 3;
    if (tl_make(&t, conv_spec(c), (shape_t){c->c, c->h, c->w}, n, 100 + i) != 0) {
      CHECK(0);
      continue;
    }
    CHECK(t.l.out_shape.h == c->oh && t.l.out_shape.w == c->ow && t.l.out_shape.c == c->filters);
    rng_t rng;
    rng_seed(&rng, 200 + i);
    float *x = dt_alloc_floats(in_len(&t, n)), *y = dt_alloc_floats(out_len(&t, n));
    fill_uniform(x, in_len(&t, n), -1, 1, &rng);
    t.l.ops->forward(&t.l, x, n, 1, NULL);
    conv_naive(&t, x, n, y);
    float worst = 0;
    for (size_t j = 0; j < out_len(&t, n); j++) worst = fmaxf(worst, fabsf(y[j] - t.l.out[j]));
    if (worst > 1e-5f) fprintf(stderr, "  conv case %zu: max |direct - im2col| %g\n", i, worst);
    CHECK(worst <= 1e-5f);
    /* A smaller batch than max_batch must give the first samples' rows. */
    t.l.ops->forward(&t.l, x, 1, 1, NULL);
    for (size_t j = 0; j < out_len(&t, 1); j++) CHECK(fabsf(y[j] - t.l.out[j]) <= 1e-5f);
    dt_free(x);
    dt_free(y);
    tl_free(&t);
  }
}

static void test_conv_gradients(void) {
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
    const conv_case_t *c = &conv_cases[i];
    char what[80];
    snprintf(what, sizeof what, "conv2d %dx%dx%d f%d k%d s%d p%d%s", c->h, c->w, c->c, c->filters,
             c->k, c->s, c->p, c->relu ? " relu" : "");
    check_layer(what, conv_spec(c), (shape_t){c->c, c->h, c->w}, 2, 1, 1e-2, c->relu, 300 + i);
  }
}

/* ---- local2d -------------------------------------------------------------- */

/* Direct locally connected layer, NHWC, weight [oh][ow][f][k][k][c], bias
 * [oh][ow][f], zero padding: a conv whose filters are those of the
 * output position. */
static void local_naive(const tlayer_t *t, const float *x, int n, float *y) {
  const layer_t *l = &t->l;
  int H = l->in_shape.h, W = l->in_shape.w, C = l->in_shape.c;
  int OH = l->out_shape.h, OW = l->out_shape.w, F = l->out_shape.c;
  int k = l->spec.kernel, s = l->spec.stride, p = l->spec.pad;
  for (int b = 0; b < n; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int f = 0; f < F; f++) {
          size_t pos = ((size_t)oy * OW + ox) * F + f;
          double acc = l->b[pos];
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
              int iy = oy * s - p + ky, ix = ox * s - p + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int c = 0; c < C; c++)
                acc += (double)l->w[((pos * k + ky) * k + kx) * C + c] *
                       x[((b * H + iy) * W + ix) * C + c];
            }
          if (l->spec.act == ACT_RELU && acc < 0) acc = 0;
          y[((size_t)(b * OH + oy) * OW + ox) * F + f] = (float)acc;
        }
}

static const conv_case_t local_cases[] = {
    {5, 5, 2, 3, 3, 1, 0, 0, 3, 3}, {5, 5, 2, 3, 3, 1, 1, 1, 5, 5}, {6, 4, 3, 2, 2, 2, 1, 0, 4, 3},
    {5, 5, 2, 3, 3, 2, 1, 1, 3, 3}, {4, 5, 3, 4, 1, 1, 0, 0, 4, 5},
};

static layer_spec_t local_spec(const conv_case_t *c) {
  layer_spec_t s = conv_spec(c);
  s.kind = LAYER_LOCAL2D;
  return s;
}

static void test_local2d_forward_matches_direct(void) {
  for (size_t i = 0; i < sizeof local_cases / sizeof *local_cases; i++) {
    const conv_case_t *c = &local_cases[i];
    tlayer_t t;
    int n = 3;
    if (tl_make(&t, local_spec(c), (shape_t){c->c, c->h, c->w}, n, 400 + i) != 0) {
      CHECK(0);
      continue;
    }
    CHECK(t.l.out_shape.h == c->oh && t.l.out_shape.w == c->ow && t.l.out_shape.c == c->filters);
    /* unshared: a weight and a bias a position */
    CHECK(t.l.nweight == (size_t)c->oh * c->ow * c->filters * c->k * c->k * c->c);
    CHECK(t.l.param_len == t.l.nweight + (size_t)c->oh * c->ow * c->filters);
    rng_t rng;
    rng_seed(&rng, 500 + i);
    float *x = dt_alloc_floats(in_len(&t, n)), *y = dt_alloc_floats(out_len(&t, n));
    fill_uniform(x, in_len(&t, n), -1, 1, &rng);
    t.l.ops->forward(&t.l, x, n, 1, NULL);
    local_naive(&t, x, n, y);
    float worst = 0;
    for (size_t j = 0; j < out_len(&t, n); j++) worst = fmaxf(worst, fabsf(y[j] - t.l.out[j]));
    if (worst > 1e-5f) fprintf(stderr, "  local2d case %zu: max |direct - layer| %g\n", i, worst);
    CHECK(worst <= 1e-5f);
    dt_free(x);
    dt_free(y);
    tl_free(&t);
  }
}

static void test_local2d_gradients(void) {
  for (size_t i = 0; i < sizeof local_cases / sizeof *local_cases; i++) {
    const conv_case_t *c = &local_cases[i];
    char what[80];
    snprintf(what, sizeof what, "local2d %dx%dx%d f%d k%d s%d p%d%s", c->h, c->w, c->c, c->filters,
             c->k, c->s, c->p, c->relu ? " relu" : "");
    check_layer(what, local_spec(c), (shape_t){c->c, c->h, c->w}, 2, 1, 1e-2, c->relu, 600 + i);
  }
}

/* PyTorch's Conv2d of the same fan-in: U(±1/√(k·k·c)) for weights and biases. */
static void test_local2d_init_bound(void) {
  const conv_case_t c = {6, 6, 4, 5, 3, 1, 0, 0, 4, 4};
  tlayer_t t;
  CHECK_OK(tl_make(&t, local_spec(&c), (shape_t){c.c, c.h, c.w}, 1, 7));
  float bound = 1.0f / sqrtf(3 * 3 * 4), lo = 0, hi = 0;
  for (size_t i = 0; i < t.l.param_len; i++) lo = fminf(lo, t.params[i]), hi = fmaxf(hi, t.params[i]);
  CHECK(lo >= -bound && hi <= bound && lo < -0.9f * bound && hi > 0.9f * bound);
  tl_free(&t);
}

/* ---- pools ---------------------------------------------------------------- */

/* Maxpool inputs must have no near-ties (a finite difference across a tie
 * is meaningless): a shuffle of well-separated values. */
static void check_maxpool(const char *what, int h, int w, int c, int k, int s, int n) {
  layer_spec_t spec = spec_of(LAYER_MAXPOOL);
  spec.kernel = k;
  spec.stride = s;
  tlayer_t t;
  CHECK_OK(tl_make(&t, spec, (shape_t){c, h, w}, n, 7));
  size_t len = in_len(&t, n);
  uint32_t *perm = malloc(len * sizeof *perm);
  float *x = dt_alloc_floats(len);
  for (size_t i = 0; i < len; i++) perm[i] = (uint32_t)i;
  rng_t rng;
  rng_seed(&rng, 8);
  rng_shuffle_u32(&rng, perm, len);
  for (size_t i = 0; i < len; i++) x[i] = 0.05f * (float)perm[i] - 1.0f;
  gerr_t e = grad_check(&t, x, n, 1, 9, 1e-2, 0);
  report(what, e);
  /* The forward is the max of each window. */
  int OH = t.l.out_shape.h, OW = t.l.out_shape.w;
  for (int b = 0; b < n; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int ch = 0; ch < c; ch++) {
          float m = -1e30f;
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++)
              m = fmaxf(m, x[((b * h + oy * s + ky) * w + ox * s + kx) * c + ch]);
          CHECK(t.l.out[((b * OH + oy) * OW + ox) * c + ch] == m);
        }
  free(perm);
  dt_free(x);
  tl_free(&t);
}

static void test_maxpool(void) {
  check_maxpool("maxpool 4x4x2 k2 s2", 4, 4, 2, 2, 2, 3);
  check_maxpool("maxpool 5x5x3 k3 s1 (overlapping)", 5, 5, 3, 3, 1, 2);
  check_maxpool("maxpool 5x4x1 k2 s2 (ragged)", 5, 4, 1, 2, 2, 2);
}

static void test_avgpool(void) {
  layer_spec_t s = spec_of(LAYER_AVGPOOL);
  s.kernel = 2;
  s.stride = 2;
  check_layer("avgpool 4x5x2 k2 s2", s, (shape_t){2, 4, 5}, 3, 1, 1e-2, 0, 21);
  s.kernel = 3;
  s.stride = 1;
  check_layer("avgpool 5x5x3 k3 s1", s, (shape_t){3, 5, 5}, 2, 1, 1e-2, 0, 22);
  /* By hand: 2x2 window over 1,2,3,4. */
  tlayer_t t;
  s.kernel = 2;
  s.stride = 2;
  CHECK_OK(tl_make(&t, s, (shape_t){1, 2, 2}, 1, 1));
  float x[4] = {1, 2, 3, 4};
  t.l.ops->forward(&t.l, x, 1, 0, NULL);
  CHECK_NEAR(t.l.out[0], 2.5, 1e-6);
  tl_free(&t);
}

/* ---- flatten, activations ------------------------------------------------- */

static void test_flatten(void) {
  layer_spec_t s = spec_of(LAYER_FLATTEN);
  tlayer_t t;
  CHECK_OK(tl_make(&t, s, (shape_t){3, 2, 4}, 2, 1));
  CHECK(t.l.out_shape.c == 24 && t.l.out_shape.h == 1 && t.l.out_shape.w == 1);
  tl_free(&t);
  check_layer("flatten 2x4x3", s, (shape_t){3, 2, 4}, 2, 1, 1e-2, 0, 31);
}

static void test_activations(void) {
  check_layer("relu 3x3x2", spec_of(LAYER_RELU), (shape_t){2, 3, 3}, 2, 1, 1e-2, 1, 41);
  check_layer("tanh 3x3x2", spec_of(LAYER_TANH), (shape_t){2, 3, 3}, 2, 1, 1e-2, 0, 42);
  check_layer("sigmoid 3x3x2", spec_of(LAYER_SIGMOID), (shape_t){2, 3, 3}, 2, 1, 1e-2, 0, 43);
  /* Saturation: no NaN or inf for extreme inputs. */
  tlayer_t t;
  CHECK_OK(tl_make(&t, spec_of(LAYER_SIGMOID), (shape_t){4, 1, 1}, 1, 1));
  float x[4] = {-1000, -90, 90, 1000};
  t.l.ops->forward(&t.l, x, 1, 1, NULL);
  CHECK(t.l.out[0] == 0.0f && t.l.out[3] == 1.0f && kern_all_finite(4, t.l.out));
  tl_free(&t);
}

/* ---- sequence layers (batch x T x features) ------------------------------ */

static layer_spec_t seq_spec(layer_kind_t kind) {
  layer_spec_t s = spec_of(kind);
  s.input2 = -1;
  return s;
}

static void test_sequence_layer_gradients(void) {
  shape_t seq = {6, 1, 5}; /* 5 positions of 6 features */
  check_layer("layernorm 5x6", seq_spec(LAYER_LAYERNORM), seq, 3, 1, 1e-2, 0, 61);
  check_layer("gelu 5x6", seq_spec(LAYER_GELU), seq, 3, 1, 1e-2, 0, 62);
  layer_spec_t s = seq_spec(LAYER_LINEAR);
  s.units = 7;
  check_layer("linear 5x6 -> 5x7", s, seq, 3, 1, 1e-2, 0, 63);
  s = seq_spec(LAYER_POSEMBED);
  s.positions = 8; /* rows 5..7 unused: their gradient must be 0 */
  check_layer("posembed 5x6 (table 8)", s, seq, 3, 1, 1e-2, 0, 64);
  s = seq_spec(LAYER_LMHEAD);
  s.vocab = 9;
  check_layer("lmhead 5x6 -> 5x9", s, seq, 3, 1, 1e-2, 0, 65);
  s = seq_spec(LAYER_ATTENTION);
  s.heads = 2;
  check_layer("attention 5x6, 2 heads", s, seq, 3, 1, 1e-2, 0, 66);
  s.heads = 3;
  check_layer("attention 5x6, 3 heads", s, seq, 2, 1, 1e-2, 0, 67);
  s.heads = 1;
  check_layer("attention 1x6, 1 head", s, (shape_t){6, 1, 1}, 2, 1, 1e-2, 0, 68);
  /* 69 positions: attention.c's causal blocks of 32, two whole and a part */
  s.heads = 2;
  check_layer("attention 69x4, 2 heads", s, (shape_t){4, 1, 69}, 1, 1, 1e-2, 0, 71);
  s = seq_spec(LAYER_LSTM);
  s.units = 3, s.num_layers = 1;
  check_layer("lstm 5x4 -> 5x3", s, (shape_t){4, 1, 5}, 2, 1, 1e-2, 0, 69);
  s.num_layers = 3; /* backpropagation through time and through the stack */
  check_layer("lstm 6x4 -> 6x3, 3 layers", s, (shape_t){4, 1, 6}, 3, 1, 1e-2, 0, 70);
}

/* Causality: changing position t's input changes no output before t. */
static void test_attention_is_causal(void) {
  layer_spec_t s = seq_spec(LAYER_ATTENTION);
  s.heads = 2;
  tlayer_t t;
  CHECK_OK(tl_make(&t, s, (shape_t){4, 1, 6}, 1, 5));
  rng_t rng;
  rng_seed(&rng, 6);
  float x[24], y[24];
  fill_uniform(x, 24, -1, 1, &rng);
  t.l.ops->forward(&t.l, x, 1, 1, NULL);
  memcpy(y, t.l.out, sizeof y);
  x[3 * 4 + 1] += 0.5f; /* position 3 */
  t.l.ops->forward(&t.l, x, 1, 1, NULL);
  for (int i = 0; i < 24; i++) CHECK(i < 12 ? t.l.out[i] == y[i] : 1);
  int moved = 0;
  for (int i = 12; i < 24; i++) moved |= t.l.out[i] != y[i];
  CHECK(moved);
  tl_free(&t);
}

/* The forward against attention written out in double from the
 * definition (full T x T scores, the mask, libm's exp) on 69 positions,
 * more than two of attention.c's causal blocks: the block products, the
 * softmax's vectorised e^x and its zeros to the block's end. */
static void test_attention_matches_direct(void) {
  enum { T = 69, C = 8, H = 2, HS = C / H, N = 2 };
  layer_spec_t s = seq_spec(LAYER_ATTENTION);
  s.heads = H;
  tlayer_t t;
  CHECK_OK(tl_make(&t, s, (shape_t){C, 1, T}, N, 9));
  rng_t rng;
  rng_seed(&rng, 10);
  static float x[N * T * C];
  fill_uniform(x, N * T * C, -2, 2, &rng);
  fill_uniform(t.params, t.l.param_len, -0.5f, 0.5f, &rng); /* biases too, and scores far from 0 */
  t.l.ops->forward(&t.l, x, N, 1, NULL);
  const float *wq = t.params, *bq = wq + 3 * C * C, *wp = bq + 3 * C, *bp = wp + C * C;
  static double qkv[T][3 * C], y[T][C], p[T];
  double worst = 0;
  for (int b = 0; b < N; b++) {
    const float *xb = x + b * T * C;
    for (int i = 0; i < T; i++)
      for (int o = 0; o < 3 * C; o++) {
        double a = bq[o];
        for (int c = 0; c < C; c++) a += (double)xb[i * C + c] * wq[o * C + c];
        qkv[i][o] = a;
      }
    for (int h = 0; h < H; h++)
      for (int i = 0; i < T; i++) {
        double m = -1e300, sum = 0;
        for (int j = 0; j <= i; j++) {
          double d = 0;
          for (int e = 0; e < HS; e++) d += qkv[i][h * HS + e] * qkv[j][C + h * HS + e];
          p[j] = d / sqrt((double)HS), m = p[j] > m ? p[j] : m;
        }
        for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - m);
        for (int e = 0; e < HS; e++) {
          double a = 0;
          for (int j = 0; j <= i; j++) a += p[j] / sum * qkv[j][2 * C + h * HS + e];
          y[i][h * HS + e] = a;
        }
      }
    for (int i = 0; i < T; i++)
      for (int o = 0; o < C; o++) {
        double a = bp[o];
        for (int c = 0; c < C; c++) a += y[i][c] * wp[o * C + c];
        double err = fabs(t.l.out[(b * T + i) * C + o] - a) / fmax(1.0, fabs(a));
        worst = err > worst ? err : worst;
      }
  }
  printf("  attention 69 positions vs direct (double): %.1e\n", worst);
  CHECK(worst < 1e-5);
  tl_free(&t);
}

/* GELU's vectorised e^x against libm: the output and the input gradient
 * over [-30, 30] (both tails: tanh saturating to ±1, and the clamp of
 * e^x) close to GELU in double: 1e-6 relative (output), 3e-6 absolute
 * (gradient; 1 − tanh² loses digits near ±1 in float). A polynomial
 * coefficient off by 1e-4 gives 1.4e-6 and 3.3e-6 here. */
static void test_gelu_matches_libm(void) {
  enum { N = 601 };
  tlayer_t t;
  CHECK_OK(tl_make(&t, seq_spec(LAYER_GELU), (shape_t){N, 1, 1}, 1, 7));
  static float x[N], dx[N];
  for (int i = 0; i < N; i++) x[i] = -30.0f + 0.1f * (float)i;
  t.l.ops->forward(&t.l, x, 1, 1, NULL);
  for (int i = 0; i < N; i++) t.l.dout[i] = 1.0f;
  t.l.ops->backward(&t.l, x, dx, 1);
  double worst_y = 0, worst_g = 0, k = sqrt(2.0 / M_PI);
  for (int i = 0; i < N; i++) {
    double v = x[i], u = k * (v + 0.044715 * v * v * v), th = tanh(u);
    double y = 0.5 * v * (1 + th);
    double g = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * k * (1 + 3 * 0.044715 * v * v);
    double ey = fabs(t.l.out[i] - y) / fmax(1.0, fabs(y)), eg = fabs(dx[i] - g);
    worst_y = ey > worst_y ? ey : worst_y, worst_g = eg > worst_g ? eg : worst_g;
  }
  printf("  gelu vs libm over [-30, 30]: output %.1e, gradient %.1e\n", worst_y, worst_g);
  CHECK(worst_y < 1e-6 && worst_g < 3e-6);
  tl_free(&t);
}

/* The token table's gradient against finite differences (token ids have
 * none: their gradient, where asked for, is zero), a repeated token's
 * rows summed, and a tied table added to, not overwritten. */
static void test_embedding_gradients(void) {
  layer_spec_t s = seq_spec(LAYER_EMBEDDING);
  s.vocab = 5, s.units = 3;
  tlayer_t t;
  CHECK_OK(tl_make(&t, s, (shape_t){1, 1, 4}, 2, 71));
  float x[8] = {0, 4, 2, 4, 1, 1, 3, 0}, dx[8];
  size_t ny = out_len(&t, 2), np = t.l.param_len;
  float *r = dt_alloc_floats(ny), *dw = dt_alloc_floats(np);
  rng_t rng;
  rng_seed(&rng, 72);
  fill_uniform(r, ny, -1, 1, &rng);
  objective_t o = {&t, x, 2, 1, rng, r, NULL};
  objective(&o, NULL);
  memcpy(t.l.dout, r, ny * sizeof(float));
  for (size_t i = 0; i < np; i++) t.grads[i] = 1e3f;
  t.l.ops->backward(&t.l, x, dx, 2);
  memcpy(dw, t.grads, np * sizeof(float));
  for (int i = 0; i < 8; i++) CHECK(dx[i] == 0.0f);
  double err = 0;
  for (size_t i = 0; i < np; i++) {
    double g;
    numeric(&o, &t.params[i], 1e-2, &g);
    err = fmax(err, rel_err(dw[i], g));
  }
  fprintf(stderr, "  %-34s max rel err  dw %.1e\n", "embedding 4 tokens of 5 -> 4x3", err);
  CHECK(err <= TOL);
  CHECK(fabsf(dw[1 * 3 + 0] - (r[4 * 3 + 0] + r[5 * 3 + 0])) < 1e-6f); /* token 1 twice */
  t.l.tied = 1; /* a head wrote the table's gradient first: added to */
  for (size_t i = 0; i < np; i++) t.grads[i] = 1.0f;
  t.l.ops->backward(&t.l, x, NULL, 2);
  for (size_t i = 0; i < np; i++) CHECK(fabsf(t.grads[i] - (1.0f + dw[i])) < 1e-5f);
  dt_free(r);
  dt_free(dw);
  tl_free(&t);
}

/* add: out = x + x2, and both inputs' gradients are dout, written or
 * added (dx_add, dx2_add: a node read by two layers). */
static void test_add_and_gradient_sums(void) {
  layer_spec_t s = seq_spec(LAYER_ADD);
  tlayer_t t;
  t.l.in2_shape = (shape_t){0, 0, 0};
  CHECK_OK(tl_setup(&t, s, (shape_t){2, 1, 3}, 1) == 0 ? -1 : 0); /* shapes differ: refused */
  CHECK(strstr(dt_errmsg(), "add: its inputs differ in shape") != NULL);
  memset(&t, 0, sizeof t);
  t.l.spec = s, t.l.ops = layer_ops_for(LAYER_ADD);
  t.l.in_shape = t.l.in2_shape = (shape_t){2, 1, 3};
  CHECK_OK(t.l.ops->setup(&t.l, 1));
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60}, out[6], dout[6] = {1, 1, 2, 2, 3, 3};
  float dx[6] = {0}, dx2[6] = {5, 5, 5, 5, 5, 5};
  t.l.out = out, t.l.dout = dout, t.l.x2 = b, t.l.dx2 = dx2;
  t.l.ops->forward(&t.l, a, 1, 1, NULL);
  for (int i = 0; i < 6; i++) CHECK(out[i] == a[i] + b[i]);
  t.l.dx2_add = 1;
  t.l.ops->backward(&t.l, a, dx, 1);
  for (int i = 0; i < 6; i++) CHECK(dx[i] == dout[i] && dx2[i] == 5 + dout[i]);

  /* a layer norm told to add its input gradient adds exactly what it writes */
  tlayer_t n;
  CHECK_OK(tl_make(&n, seq_spec(LAYER_LAYERNORM), (shape_t){4, 1, 3}, 2, 81));
  float x[24], g1[24], g2[24];
  rng_t rng;
  rng_seed(&rng, 82);
  fill_uniform(x, 24, -1, 1, &rng);
  n.l.ops->forward(&n.l, x, 2, 1, NULL);
  fill_uniform(n.l.dout, 24, -1, 1, &rng);
  n.l.ops->backward(&n.l, x, g1, 2);
  for (int i = 0; i < 24; i++) g2[i] = 0.25f;
  n.l.dx_add = 1;
  n.l.ops->backward(&n.l, x, g2, 2);
  for (int i = 0; i < 24; i++) CHECK(fabsf(g2[i] - (0.25f + g1[i])) < 1e-6f);
  tl_free(&n);
}

static void test_sequence_setup_errors(void) {
  tlayer_t t;
  layer_spec_t s = seq_spec(LAYER_ATTENTION);
  s.heads = 3;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){8, 1, 4}, 2), "heads=3 does not divide the width 8");
  s = seq_spec(LAYER_POSEMBED);
  s.positions = 4;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){8, 1, 6}, 2),
                   "sequences of 6 tokens are longer than the position table (positions=4)");
  s = seq_spec(LAYER_EMBEDDING);
  s.vocab = 10, s.units = 4;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){3, 1, 6}, 2), "embedding: reads token ids");
  s = seq_spec(LAYER_LINEAR);
  s.units = 3;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){3, 2, 6}, 2), "linear: expects a sequence");
}

/* Per position: the mean over positions of the plain softmax
 * cross-entropy, and its gradient averaged over all denom·T tokens. */
static void test_softmax_xent_per_position(void) {
  float z[2 * 3 * 4], g1[24], g2[24];
  int32_t y[6] = {0, 3, 2, 1, 1, 0};
  rng_t rng;
  rng_seed(&rng, 91);
  fill_uniform(z, 24, -2, 2, &rng);
  double whole = softmax_xent(z, y, 6, 4, 6, NULL, g1, NULL);
  double seq = softmax_xent_seq(z, y, 2, 3, 4, 2, NULL, g2, NULL);
  CHECK(fabs(seq - whole / 3) < 1e-9);
  for (int i = 0; i < 24; i++) CHECK(g1[i] == g2[i]);
}

/* ---- dropout -------------------------------------------------------------- */

static void test_dropout(void) {
  layer_spec_t s = spec_of(LAYER_DROPOUT);
  s.rate = 0.4f;
  check_layer("dropout p=0.4 (fixed mask)", s, (shape_t){5, 2, 2}, 3, 1, 1e-2, 0, 51);

  tlayer_t t;
  s.rate = 0.5f;
  int n = 100;
  CHECK_OK(tl_make(&t, s, (shape_t){100, 1, 1}, n, 1));
  size_t len = in_len(&t, n);
  float *x = dt_alloc_floats(len);
  for (size_t i = 0; i < len; i++) x[i] = 1.0f + (float)(i % 7);
  rng_t rng;
  rng_seed(&rng, 3);
  t.l.ops->forward(&t.l, x, n, 1, &rng);
  size_t zeros = 0, bad = 0;
  for (size_t i = 0; i < len; i++) {
    if (t.l.out[i] == 0.0f) zeros++;
    else if (t.l.out[i] != 2.0f * x[i]) bad++;
  }
  CHECK(bad == 0);
  CHECK(zeros > 4700 && zeros < 5300);   /* 10000 draws at p = 0.5: ±6σ */
  /* Evaluation: identity, and backward passes dout through. */
  t.l.ops->forward(&t.l, x, n, 0, &rng);
  CHECK(memcmp(t.l.out, x, len * sizeof(float)) == 0);
  float *dx = dt_alloc_floats(len);
  memcpy(t.l.dout, x, len * sizeof(float));
  t.l.ops->backward(&t.l, x, dx, n);
  CHECK(memcmp(dx, x, len * sizeof(float)) == 0);
  dt_free(dx);
  dt_free(x);
  tl_free(&t);
}

/* ---- batchnorm ------------------------------------------------------------ */

static void test_batchnorm_gradients(void) {
  layer_spec_t s = spec_of(LAYER_BATCHNORM);
  check_layer("batchnorm train 2x2x3 (conv)", s, (shape_t){3, 2, 2}, 3, 1, 1e-2, 0, 61);
  check_layer("batchnorm train 5 (dense)", s, (shape_t){5, 1, 1}, 4, 1, 1e-2, 0, 62);
  check_layer("batchnorm eval 2x2x3", s, (shape_t){3, 2, 2}, 2, 0, 1e-2, 0, 63);
}

/* Two channels, 2 samples of 1x2 pixels: 4 values per channel. */
static void test_batchnorm_values(void) {
  layer_spec_t s = spec_of(LAYER_BATCHNORM);
  s.momentum = 0.25f;
  s.eps = 1e-3f;
  tlayer_t t;
  CHECK_OK(tl_make(&t, s, (shape_t){2, 1, 2}, 2, 1));
  CHECK(t.l.param_len == 4 && t.l.nweight == 2 && t.l.buf_len == 4);
  CHECK(t.params[0] == 1 && t.params[1] == 1 && t.params[2] == 0 && t.params[3] == 0);
  CHECK(t.bufs[0] == 0 && t.bufs[1] == 0 && t.bufs[2] == 1 && t.bufs[3] == 1);
  float gamma[2] = {2.0f, 0.5f}, beta[2] = {1.0f, -1.0f};
  memcpy(t.l.w, gamma, sizeof gamma);
  memcpy(t.l.b, beta, sizeof beta);
  /* channel 0: 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14/3);
   * channel 1: 4, 4, 8, 0 (mean 4, biased var 8, unbiased 32/3). */
  float x[8] = {1, 4, 2, 4, 3, 8, 6, 0};
  double mean[2] = {3, 4}, var[2] = {3.5, 8}, uvar[2] = {14.0 / 3, 32.0 / 3};
  t.l.ops->forward(&t.l, x, 2, 1, NULL);
  for (int i = 0; i < 8; i++) {
    int c = i % 2;
    double want = gamma[c] * (x[i] - mean[c]) / sqrt(var[c] + 1e-3) + beta[c];
    CHECK_NEAR(t.l.out[i], want, 1e-5);
  }
  for (int c = 0; c < 2; c++) {
    CHECK_NEAR(t.l.running_mean[c], 0.25 * mean[c], 1e-6);
    CHECK_NEAR(t.l.running_var[c], 0.75 + 0.25 * uvar[c], 1e-6);
  }
  /* A second training step moves them again. */
  t.l.ops->forward(&t.l, x, 2, 1, NULL);
  for (int c = 0; c < 2; c++) {
    CHECK_NEAR(t.l.running_mean[c], 0.75 * 0.25 * mean[c] + 0.25 * mean[c], 1e-6);
    CHECK_NEAR(t.l.running_var[c], 0.75 * (0.75 + 0.25 * uvar[c]) + 0.25 * uvar[c], 1e-5);
  }
  /* Eval uses the running statistics and leaves them alone. */
  float rm[2] = {t.l.running_mean[0], t.l.running_mean[1]};
  float rv[2] = {t.l.running_var[0], t.l.running_var[1]};
  t.l.ops->forward(&t.l, x, 2, 0, NULL);
  for (int i = 0; i < 8; i++) {
    int c = i % 2;
    double want = gamma[c] * (x[i] - rm[c]) / sqrt(rv[c] + 1e-3) + beta[c];
    CHECK_NEAR(t.l.out[i], want, 1e-5);
  }
  CHECK(t.l.running_mean[0] == rm[0] && t.l.running_var[1] == rv[1]);
  tl_free(&t);
}

/* ---- softmax cross-entropy ------------------------------------------------ */

static void test_softmax_xent(void) {
  /* Hand-computed: logits (0, ln 2, ln 5) -> p = (1/8, 2/8, 5/8). */
  float z[6] = {0, logf(2), logf(5), 1000, 0, -1000};   /* second row: overflow guard */
  int32_t y[2] = {1, 0};
  float p[6], g[6];
  int correct = -1;
  double loss = softmax_xent(z, y, 2, 3, 4, p, g, &correct);
  CHECK_NEAR(loss, log(4.0) + 0.0, 1e-5);    /* -log(2/8) + -log(1) */
  CHECK_NEAR(p[0], 0.125, 1e-6);
  CHECK_NEAR(p[2], 0.625, 1e-6);
  CHECK_NEAR(g[1], (0.25 - 1) / 4, 1e-6);
  CHECK_NEAR(g[2], 0.625 / 4, 1e-6);
  CHECK_NEAR(p[3], 1.0, 1e-6);
  CHECK_NEAR(g[3], 0.0, 1e-6);
  CHECK(correct == 1);                        /* row 0 predicts 2, row 1 predicts 0 */
  CHECK(kern_all_finite(6, p) && kern_all_finite(6, g));
  /* Evaluation: no probs, no gradient, same loss. */
  int c2 = -1;
  CHECK_NEAR(softmax_xent(z, y, 2, 3, 4, NULL, NULL, &c2), loss, 1e-9);
  CHECK(c2 == 1);
  CHECK_NEAR(softmax_xent(z, y, 2, 3, 4, NULL, g, NULL), loss, 1e-9);
  CHECK_NEAR(g[1], (0.25 - 1) / 4, 1e-6);
  /* Bad labels are ignored, not read out of bounds. */
  int32_t bad[2] = {3, -1};
  CHECK(softmax_xent(z, bad, 2, 3, 4, p, g, &c2) == 0.0 && c2 == 0);
  for (int j = 0; j < 6; j++) CHECK(g[j] == 0.0f);

  /* Finite differences of loss/denom against dlogits. */
  enum { N = 3, K = 5, DENOM = 7 };
  float logits[N * K], dl[N * K], probs[N * K];
  int32_t labels[N] = {4, 0, 2};
  rng_t rng;
  rng_seed(&rng, 71);
  fill_uniform(logits, N * K, -3, 3, &rng);
  softmax_xent(logits, labels, N, K, DENOM, probs, dl, NULL);
  double worst = 0, eps = 1e-2;
  for (int i = 0; i < N * K; i++) {
    float v = logits[i];
    logits[i] = v + (float)eps;
    double lp = softmax_xent(logits, labels, N, K, DENOM, NULL, NULL, NULL);
    logits[i] = v - (float)eps;
    double lm = softmax_xent(logits, labels, N, K, DENOM, NULL, NULL, NULL);
    logits[i] = v;
    worst = fmax(worst, rel_err(dl[i], (lp - lm) / (2 * eps) / DENOM));
  }
  fprintf(stderr, "  %-34s max rel err  dlogits %.1e\n", "softmax_xent 3x5", worst);
  CHECK(worst <= TOL);
}

/* ---- setup errors, kind table --------------------------------------------- */

static void test_setup_errors(void) {
  tlayer_t t;
  layer_spec_t s = spec_of(LAYER_CONV2D);
  s.filters = 4;
  s.kernel = 5;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 3, 3}, 2),
                   "conv2d: kernel 5 larger than padded input 3x3");
  s.pad = 1;
  CHECK_OK(tl_setup(&t, s, (shape_t){1, 3, 3}, 2));   /* 5x5 padded: fits */
  s.filters = 0;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 8, 8}, 2), "filters must be > 0");
  s.filters = 2;
  s.stride = 0;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 8, 8}, 2), "stride must be > 0");

  s = spec_of(LAYER_LOCAL2D);
  s.filters = 2;
  s.kernel = 5;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 3, 4}, 2),
                   "local2d: kernel 5 larger than the padded input 3x4");
  s.split = SPLIT_ROWS;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 8, 8}, 2), "split=rows but given no group");

  s = spec_of(LAYER_DENSE);
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){10, 1, 1}, 2), "dense: units must be > 0");

  s = spec_of(LAYER_MAXPOOL);
  s.kernel = 3;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 2, 2}, 2),
                   "maxpool: kernel 3 larger than input 2x2");
  s.kernel = 2;
  s.pad = 1;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 4, 4}, 2), "pad=1 is not supported");
  s = spec_of(LAYER_AVGPOOL);
  s.kernel = 0;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 4, 4}, 2), "avgpool: kernel must be > 0");

  s = spec_of(LAYER_DROPOUT);
  s.rate = 1.0f;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){1, 4, 4}, 2), "dropout: rate must be in [0, 1)");
  s = spec_of(LAYER_BATCHNORM);
  s.eps = 0;
  CHECK_FAILS_WITH(tl_setup(&t, s, (shape_t){3, 4, 4}, 2), "batchnorm: eps must be > 0");
  CHECK_FAILS_WITH(tl_setup(&t, spec_of(LAYER_RELU), (shape_t){0, 4, 4}, 2),
                   "relu: empty input");

  /* Output shapes. */
  s = spec_of(LAYER_CONV2D);
  s.filters = 6;
  s.kernel = 5;
  s.pad = 2;
  CHECK_OK(tl_setup(&t, s, (shape_t){1, 28, 28}, 2));
  CHECK(t.l.out_shape.c == 6 && t.l.out_shape.h == 28 && t.l.out_shape.w == 28);
  CHECK(t.l.scratch_len == 2u * 28 * 28 * 25);
  s = spec_of(LAYER_MAXPOOL);
  s.kernel = 2;
  s.stride = 2;
  CHECK_OK(tl_setup(&t, s, (shape_t){6, 28, 28}, 2));
  CHECK(t.l.out_shape.c == 6 && t.l.out_shape.h == 14 && t.l.out_shape.w == 14);
}

static void test_kind_table(void) {
  for (int k = 0; k < LAYER_KIND_COUNT; k++) {
    layer_kind_t back;
    const layer_ops_t *ops = layer_ops_for((layer_kind_t)k);
    CHECK(ops && ops->setup && ops->init && ops->forward && ops->backward);
    if (k == LAYER_ALLGATHER || k == LAYER_ROWGATHER) { /* the planner inserts them; no file names them */
      CHECK_FAILS_WITH(layer_kind_parse(layer_kind_name((layer_kind_t)k), &back), "unknown layer kind");
      continue;
    }
    CHECK_OK(layer_kind_parse(layer_kind_name((layer_kind_t)k), &back));
    CHECK(back == (layer_kind_t)k);
  }
  CHECK(strcmp(layer_kind_name(LAYER_CONV2D), "conv2d") == 0);
  layer_kind_t k;
  CHECK_FAILS_WITH(layer_kind_parse("convolution", &k), "unknown layer kind 'convolution'");
  CHECK(layer_ops_for(LAYER_KIND_COUNT) == NULL);
}

/* Four inputs of mixed signs and magnitudes 2^0 .. 2^15 apart, so that
 * a different summation order changes the bits. */
static void fill_sum_inputs(float *x[4], size_t n) {
  for (int q = 0; q < 4; q++)
    for (size_t i = 0; i < n; i++)
      x[q][i] = (float)((i * 7919 + (size_t)q * 104729) % 1000) * 0x1p-7f * (q & 1 ? -1.0f : 1.0f) *
                (float)(1 << (q * 5));
}

/* kern_sum adds in input order, chunk by chunk, so the output may be one
 * of the inputs (shared-memory data parallelism sums into its own
 * gradients): the same bits as a plain left-to-right sum. */
static void test_kern_sum_in_order(void) {
  size_t sizes[] = {0, 1, 511, 512, 513, 2000};
  float *x[4], *ref = dt_alloc_floats(2000), *sep = dt_alloc_floats(2000);
  for (int q = 0; q < 4; q++) x[q] = dt_alloc_floats(2000);
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (int k = 1; k <= 4; k++) {
      size_t n = sizes[si];
      fill_sum_inputs(x, n);
      for (size_t i = 0; i < n; i++) {
        float s = x[0][i];
        for (int q = 1; q < k; q++) s += x[q][i];
        ref[i] = s;
      }
      /* y apart from the inputs, or the same pointer as the first, the
       * second or the last (each path of kern_sum) */
      float *outs[4] = {sep, x[0], k > 1 ? x[1] : x[0], x[k - 1]};
      for (int o = 0; o < 4; o++) {
        float *save = dt_alloc_floats(4 * 2000);
        for (int q = 0; q < 4; q++) memcpy(save + q * 2000, x[q], n * sizeof(float));
        kern_sum(n, k, (const float *const *)x, outs[o]);
        CHECK(n == 0 || memcmp(outs[o], ref, n * sizeof(float)) == 0);
        for (int q = 0; q < 4; q++) memcpy(x[q], save + q * 2000, n * sizeof(float));
        dt_free(save);
      }
    }
  for (int q = 0; q < 4; q++) dt_free(x[q]);
  dt_free(ref), dt_free(sep);
}

/* kern_allsum: every input becomes the sum, in the order 0..k-1, bit for
 * bit what kern_sum gives. */
static void test_kern_allsum_in_order(void) {
  size_t sizes[] = {0, 1, 511, 512, 513, 2000};
  float *x[4], *ref = dt_alloc_floats(2000);
  for (int q = 0; q < 4; q++) x[q] = dt_alloc_floats(2000);
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (int k = 1; k <= 4; k++) {
      size_t n = sizes[si];
      fill_sum_inputs(x, n);
      kern_sum(n, k, (const float *const *)x, ref);
      kern_allsum(n, k, x);
      for (int q = 0; q < k; q++) CHECK(n == 0 || memcmp(x[q], ref, n * sizeof(float)) == 0);
    }
  for (int q = 0; q < 4; q++) dt_free(x[q]);
  dt_free(ref);
}

/* The reference GEMM against OpenBLAS on every transpose, alpha and beta,
 * odd sizes and leading dimensions wider than the matrix. */
static void test_gemm_reference_matches_blas(void) {
  rng_t r;
  rng_seed(&r, 9);
  enum { M = 13, N = 21, K = 34, PAD = 3 };
  float a[(K + PAD) * (K + PAD)], b[(K + PAD) * (K + PAD)], c[M * (N + PAD)], ref[M * (N + PAD)];
  for (size_t i = 0; i < sizeof a / sizeof *a; i++) a[i] = rng_uniform(&r) - 0.5f;
  for (size_t i = 0; i < sizeof b / sizeof *b; i++) b[i] = rng_uniform(&r) - 0.5f;
  for (int t = 0; t < 8; t++) {
    int ta = t & 1, tb = (t >> 1) & 1;
    float alpha = t & 4 ? 0.5f : 1.0f, beta = t & 4 ? 0.25f : 0.0f;
    int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
    for (int i = 0; i < M * ldc; i++) c[i] = ref[i] = (float)(i % 5);
    kern_gemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    kern_gemm_ref(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, ref, ldc);
    double worst = 0;
    for (int i = 0; i < M; i++)
      for (int j = 0; j < ldc; j++) {
        double e = fabs((double)c[i * ldc + j] - ref[i * ldc + j]);
        if (j >= N) CHECK(c[i * ldc + j] == (float)((i * ldc + j) % 5)); /* past n: untouched */
        worst = e > worst ? e : worst;
      }
    CHECK_NEAR(worst, 0, 1e-5);
  }
  CHECK_OK(kern_gemm_check());
}

/* bf16 products (when this build and CPU have them): within bf16's
 * rounding of the reference, |error| <= 2^-7 sum |a||b| for every
 * transpose; alpha other than 1, or beta other than 0 and 1, go through fp32. */
/* LeakSanitizer (make test SAN=1): a probe that faults leaves what oneDNN's
 * execute had allocated (about 230 bytes a faulting shape, gemm_bf16.c's
 * header); this binary runs such shapes on purpose. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libdnnl.so\n"; }

/* Shapes whose oneDNN bf16 kernel faulted with SIGILL on a Xeon with AMX
 * (gemm_bf16.c's probe): the product must come back, in bf16 or through
 * the fp32 fallback, and close to the reference either way. */
static void test_gemm_bf16_faulting_shapes_come_back(void) {
  if (!kern_bf16_available()) {
    printf("  (no bf16 here)\n");
    return;
  }
  static const int shapes[][3] = {{75, 3, 63}, {75, 4, 63}, {75, 16, 63}, {75, 3, 64}};
  rng_t r;
  rng_seed(&r, 12);
  static float a[75 * 64], b[64 * 16], c[75 * 16], ref[75 * 16];
  for (size_t i = 0; i < sizeof a / sizeof *a; i++) a[i] = rng_uniform(&r) - 0.5f;
  for (size_t i = 0; i < sizeof b / sizeof *b; i++) b[i] = rng_uniform(&r) - 0.5f;
  kern_set_bf16(1);
  long before = kern_bf16_fallbacks();
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    kern_gemm(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    kern_gemm_ref(0, 1, m, n, k, 1.0f, a, k, b, k, 0.0f, ref, n);
    for (int j = 0; j < m * n; j++) CHECK_NEAR(c[j], ref[j], 0.05); /* |sum| <= 16: bf16's 2^-8 */
  }
  printf("  %ld of %zu shapes on the fp32 fallback here\n", kern_bf16_fallbacks() - before,
         sizeof shapes / sizeof *shapes);
  kern_set_bf16(0);
  kern_bf16_release();
}

static void test_gemm_bf16_close_to_reference(void) {
  if (!kern_bf16_available()) {
    printf("  (no bf16 here: the refusal is tested by e2e_kernels.sh)\n");
    return;
  }
  rng_t r;
  rng_seed(&r, 11);
  enum { M = 19, N = 45, K = 70 };
  static float a[K * K], b[K * K], c[M * N], ref[M * N], mag[M * N];
  float absa[K * K], absb[K * K];
  for (int i = 0; i < K * K; i++) a[i] = rng_uniform(&r) - 0.5f, absa[i] = fabsf(a[i]);
  for (int i = 0; i < K * K; i++) b[i] = rng_uniform(&r) - 0.5f, absb[i] = fabsf(b[i]);
  for (int t = 0; t < 4; t++) {
    int ta = t & 1, tb = t >> 1, lda = ta ? M : K, ldb = tb ? K : N;
    CHECK_OK(kern_gemm_bf16(ta, tb, M, N, K, a, lda, b, ldb, 0.0f, c, N));
    kern_gemm_ref(ta, tb, M, N, K, 1, a, lda, b, ldb, 0, ref, N);
    kern_gemm_ref(ta, tb, M, N, K, 1, absa, lda, absb, ldb, 0, mag, N);
    double worst = 0, nonzero = 0;
    for (int i = 0; i < M * N; i++) {
      double e = fabs((double)c[i] - ref[i]) / mag[i];
      worst = e > worst ? e : worst;
      nonzero += c[i] != ref[i];
    }
    CHECK(worst <= 1.0 / 128);
    CHECK(nonzero > 0); /* rounded to bf16 indeed: not the fp32 product */
  }
  kern_set_bf16(1);
  kern_gemm(0, 0, M, N, K, 0.5f, a, K, b, N, 0, c, N); /* alpha 0.5: fp32 */
  kern_gemm_ref(0, 0, M, N, K, 0.5f, a, K, b, N, 0, ref, N);
  for (int i = 0; i < M * N; i++) CHECK_NEAR(c[i], ref[i], 1e-5);
  CHECK(kern_bf16_fallbacks() == 0);
  kern_set_bf16(0);
  kern_bf16_release();
}

/* The test's own columns [n·oh·ow, k·k·c] of x, zeros for padding. */
static void naive_cols(const layer_t *l, const float *x, int n, float *cols) {
  int H = l->in_shape.h, W = l->in_shape.w, C = l->in_shape.c, OH = l->out_shape.h;
  int OW = l->out_shape.w, k = l->spec.kernel, s = l->spec.stride, p = l->spec.pad;
  for (int b = 0; b < n; b++)
    for (int oy = 0; oy < OH; oy++)
      for (int ox = 0; ox < OW; ox++)
        for (int ky = 0; ky < k; ky++)
          for (int kx = 0; kx < k; kx++)
            for (int c = 0; c < C; c++) {
              int iy = oy * s - p + ky, ix = ox * s - p + kx, in = iy >= 0 && iy < H && ix >= 0 && ix < W;
              *cols++ = in ? x[((b * H + iy) * W + ix) * C + c] : 0.0f;
            }
}

/* --precision bf16: a convolution makes its columns in bf16 once and reads
 * them in the forward and the weight gradient (beta 0 and, summed over
 * micro-batches, 1); bit for bit the products kern_gemm_bf16 makes of the
 * fp32 columns, which it rounds the same way. */
static void test_conv_bf16_columns(void) {
  if (!kern_bf16_available()) {
    printf("  (no bf16 here)\n");
    return;
  }
  kern_set_bf16(1);
  long fallbacks = kern_bf16_fallbacks();
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
    const conv_case_t *c = &conv_cases[i];
    tlayer_t t;
    int n = 3;
    CHECK_OK(tl_make(&t, conv_spec(c), (shape_t){c->c, c->h, c->w}, n, 100 + i));
    layer_t *l = &t.l;
    int rows = n * c->oh * c->ow, kdim = c->k * c->k * c->c, oc = c->filters;
    rng_t rng;
    rng_seed(&rng, 400 + i);
    float *x = dt_alloc_floats(in_len(&t, n)), *cols = dt_alloc_floats((size_t)rows * kdim);
    float *want = dt_alloc_floats(out_len(&t, n)), *dw = dt_alloc_floats(l->nweight);
    float *dout = dt_alloc_floats(out_len(&t, n));
    fill_uniform(x, in_len(&t, n), -1, 1, &rng);
    fill_uniform(dout, out_len(&t, n), -1, 1, &rng);
    naive_cols(l, x, n, cols);
    l->ops->forward(l, x, n, 1, NULL);
    int pointwise = c->k == 1 && c->s == 1 && c->p == 0;
    if (kern_gemm_bf16(0, 1, rows, oc, kdim, cols, kdim, l->w, kdim, 0.0f, want, oc) != 0) {
      /* the probe found oneDNN's kernel for this shape faulting: fp32 */
      printf("  (case %zu: the bf16 kernel of %d x %d x %d faults here; the fp32 path runs)\n", i,
             rows, oc, kdim);
      CHECK(!l->cols_bf16);
      CHECK(kern_bf16_fallbacks() > fallbacks);
      fallbacks = kern_bf16_fallbacks();
      dt_free(x), dt_free(cols), dt_free(want), dt_free(dw), dt_free(dout);
      tl_free(&t);
      continue;
    }
    CHECK(l->cols_bf16 == !pointwise);
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < oc; j++) {
        float v = want[r * oc + j] + l->b[j];
        want[r * oc + j] = c->relu && v <= 0.0f ? 0.0f : v;
      }
    CHECK(memcmp(want, l->out, out_len(&t, n) * sizeof(float)) == 0);
    for (int beta = 0; beta <= 1; beta++) { /* written, then added to */
      if (beta) l->ops->forward(l, x, n, 1, NULL);
      memcpy(l->dout, dout, out_len(&t, n) * sizeof(float));
      if (c->relu)
        for (size_t j = 0; j < out_len(&t, n); j++) dout[j] = l->out[j] > 0.0f ? dout[j] : 0.0f;
      l->grad_beta = (float)beta;
      l->ops->backward(l, x, NULL, n);
      CHECK_OK(kern_gemm_bf16(1, 0, oc, kdim, rows, dout, oc, cols, kdim, (float)beta, dw, kdim));
      CHECK(memcmp(dw, l->dw, l->nweight * sizeof(float)) == 0);
    }
    dt_free(x), dt_free(cols), dt_free(want), dt_free(dw), dt_free(dout);
    tl_free(&t);
  }
  CHECK(kern_bf16_fallbacks() == fallbacks);
  kern_set_bf16(0);
  kern_bf16_release();
}

static float bf16_value(float f) {
  uint16_t h;
  kern_to_bf16(1, &f, &h);
  uint32_t u = (uint32_t)h << 16;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* --precision bf16: a convolution's input gradient (oneDNN's
 * backward-data on the bf16 masked dout and the weights rounded to bf16,
 * no columns) equals the transposed convolution of the rounded operands
 * summed in double, to fp32 accumulation's rounding; every input pixel
 * written (padding, strides that skip the last rows, the shapes of
 * lenet's second convolution). */
static void test_conv_bf16_input_gradient(void) {
  if (!kern_bf16_available()) {
    printf("  (no bf16 here)\n");
    return;
  }
  static const conv_case_t more[] = {{12, 12, 20, 50, 5, 1, 0, 1, 8, 8},
                                     {9, 8, 16, 32, 3, 2, 1, 0, 5, 4},
                                     {10, 10, 8, 24, 4, 3, 0, 1, 3, 3}};
  enum { NCONV = sizeof conv_cases / sizeof *conv_cases, NMORE = sizeof more / sizeof *more };
  kern_set_bf16(1);
  for (size_t i = 0; i < NCONV + NMORE; i++) {
    const conv_case_t *c = i < NCONV ? &conv_cases[i] : &more[i - NCONV];
    if (c->k == 1 && c->s == 1 && c->p == 0) continue; /* pointwise: a plain product */
    tlayer_t t;
    int n = 3;
    CHECK_OK(tl_make(&t, conv_spec(c), (shape_t){c->c, c->h, c->w}, n, 500 + i));
    layer_t *l = &t.l;
    rng_t rng;
    rng_seed(&rng, 600 + i);
    size_t nin = in_len(&t, n), nout = out_len(&t, n);
    float *x = dt_alloc_floats(nin), *dout = dt_alloc_floats(nout), *dx = dt_alloc_floats(nin);
    double *want = calloc(nin, sizeof *want);
    fill_uniform(x, nin, -1, 1, &rng);
    fill_uniform(dout, nout, -1, 1, &rng);
    for (size_t j = 0; j < nin; j++) dx[j] = NAN; /* every element must be written */
    long fallbacks = kern_bf16_fallbacks();
    l->ops->forward(l, x, n, 1, NULL);
    memcpy(l->dout, dout, nout * sizeof(float));
    l->ops->backward(l, x, dx, n);
    /* a shape whose forward product faults (gemm_bf16.c's probe) makes
     * no bf16 columns, and its input gradient goes by kern_gemm: compared
     * with the unrounded operands, to bf16's precision */
    int bf16 = kern_bf16_fallbacks() == fallbacks;
    int H = c->h, W = c->w, C = c->c, k = c->k;
    for (int b = 0; b < n; b++)
      for (int oy = 0; oy < c->oh; oy++)
        for (int ox = 0; ox < c->ow; ox++)
          for (int o = 0; o < c->filters; o++) {
            size_t at = (((size_t)b * c->oh + oy) * c->ow + ox) * c->filters + o;
            if (c->relu && l->out[at] <= 0.0f) continue;
            double d = bf16 ? bf16_value(dout[at]) : dout[at];
            for (int ky = 0; ky < k; ky++)
              for (int kx = 0; kx < k; kx++) {
                int iy = oy * c->s - c->p + ky, ix = ox * c->s - c->p + kx;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                for (int ch = 0; ch < C; ch++)
                  want[(((size_t)b * H + iy) * W + ix) * C + ch] +=
                      d * (bf16 ? bf16_value(l->w[((o * k + ky) * k + kx) * C + ch])
                                : l->w[((o * k + ky) * k + kx) * C + ch]);
              }
          }
    double tol = bf16 ? 1e-4 : 1e-2; /* the fallback's products may still be bf16's */
    for (size_t j = 0; j < nin; j++) CHECK_NEAR(dx[j], want[j], tol * (1 + fabs(want[j])));
    dt_free(x), dt_free(dout), dt_free(dx), free(want);
    tl_free(&t);
  }
  /* the direct product ran (not the columns' path) on lenet's shape */
  kern_conv_t lenet2 = {3, 12, 12, 20, 8, 8, 50, 5, 1, 0};
  float *w = dt_alloc_floats(50 * 25 * 20), *dx = dt_alloc_floats(3 * 12 * 12 * 20);
  uint16_t *d16 = calloc(3 * 8 * 8 * 50, sizeof *d16);
  for (int j = 0; j < 50 * 25 * 20; j++) w[j] = 0.5f;
  int rc = kern_conv_dx_bf16(&lenet2, d16, w, dx);
  if (rc != 0) printf("  (oneDNN's backward-data faults or fails here: the columns' path ran)\n");
  else for (int j = 0; j < 3 * 12 * 12 * 20; j++) CHECK(dx[j] == 0.0f);
  dt_free(w), dt_free(dx), free(d16);
  kern_set_bf16(0);
  kern_bf16_release();
}

/* The layer tests whose products go through kern_gemm, run again on the
 * reference path: every layer is right on both. */
static void run_on_reference_path(void) {
  kern_use_reference(1);
  test_run("test_dense_forward_reference", test_dense_forward);
  test_run("test_dense_gradients_reference", test_dense_gradients);
  test_run("test_conv_forward_matches_direct_reference", test_conv_forward_matches_direct);
  test_run("test_conv_gradients_reference", test_conv_gradients);
  test_run("test_local2d_gradients_reference", test_local2d_gradients);
  test_run("test_batchnorm_gradients_reference", test_batchnorm_gradients);
  test_run("test_softmax_xent_reference", test_softmax_xent);
  test_run("test_sequence_layer_gradients_reference", test_sequence_layer_gradients);
  test_run("test_attention_matches_direct_reference", test_attention_matches_direct);
  kern_use_reference(0);
}

/* oneDNN's generated f32 GEMM kernels (jit_avx_gemm_f32 and its AVX-512
 * twin, up to oneDNN 3.11: uxlfoundation/oneDNN#4845) point rsp at their
 * workspace on the heap while they run, so a signal taken there has its
 * frame written into the heap: dtrain launch's lost-rank SIGUSR1 to an
 * AD-PSGD rank killed the whole run with "free(): invalid next size
 * (fast)". kern_sgemm_onednn holds the asynchronous signals for the
 * product: a thread doing products under a storm of SIGUSR1 takes every
 * one on its own stack. */
static char *storm_stack_lo, *storm_stack_hi;
static atomic_int storm_ready, storm_stop, storm_taken, storm_off_stack, storm_failed;

static void storm_handler(int signo) {
  char *frame = __builtin_frame_address(0); /* the real frame, not ASan's fake stack */
  (void)signo;
  if (frame < storm_stack_lo || frame >= storm_stack_hi) atomic_store(&storm_off_stack, 1);
  atomic_fetch_add(&storm_taken, 1);
}

static void *storm_products(void *arg) {
  (void)arg;
  pthread_attr_t attr;
  void *base = NULL;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
  }
  storm_stack_lo = base, storm_stack_hi = (char *)base + size;
  enum { M = 16, N = 256, K = 784 }; /* a batch of 16 through mlp's first layer, and back */
  float *a = calloc((size_t)M * K, sizeof *a), *b = calloc((size_t)N * K, sizeof *b);
  float *c = calloc((size_t)M * N, sizeof *c), *g = calloc((size_t)N * K, sizeof *g);
  for (size_t i = 0; a && b && i < (size_t)M * K; i++) a[i] = (float)(i % 7) - 3;
  for (size_t i = 0; b && i < (size_t)N * K; i++) b[i] = (float)(i % 5) - 2;
  atomic_store(&storm_ready, 1);
  while (a && b && c && g && !atomic_load(&storm_stop)) {
    if (kern_sgemm_onednn(0, 1, M, N, K, 1, a, K, b, K, 0, c, N) != 0 ||     /* forward */
        kern_sgemm_onednn(1, 0, N, K, M, 1, c, N, a, K, 0, g, K) != 0 ||     /* weights' gradient */
        kern_sgemm_onednn(0, 0, M, K, N, 1, c, N, b, K, 0, a, K) != 0)       /* input's gradient */
      atomic_store(&storm_failed, 1);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) - 3;
  }
  if (!a || !b || !c || !g) atomic_store(&storm_failed, 1);
  free(a), free(b), free(c), free(g);
  return NULL;
}

static void test_onednn_products_take_signals_on_the_stack(void) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = storm_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
  atomic_store(&storm_ready, 0), atomic_store(&storm_stop, 0), atomic_store(&storm_taken, 0);
  atomic_store(&storm_off_stack, 0), atomic_store(&storm_failed, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, storm_products, NULL) == 0);
  while (!atomic_load(&storm_ready)) dt_sleep_until(dt_now() + 1e-4);
  int sent = 0;
  for (double end = dt_now() + 0.5; dt_now() < end && !atomic_load(&storm_off_stack); sent++) {
    pthread_kill(t, SIGUSR1);
    dt_sleep_until(dt_now() + 50e-6);
  }
  atomic_store(&storm_stop, 1);
  pthread_join(t, NULL);
  sigaction(SIGUSR1, &old, NULL);
  printf("  %d signals sent, %d taken\n", sent, atomic_load(&storm_taken));
  CHECK(!atomic_load(&storm_failed));
  CHECK(atomic_load(&storm_taken) > 0);
  CHECK(!atomic_load(&storm_off_stack)); /* a frame outside the thread's stack: in the heap */
}

/* The same on oneDNN's sgemm, the CLI's default library where built. */
static void run_on_onednn_path(void) {
  if (!kern_onednn_available()) {
    printf("  (built without oneDNN: OpenBLAS and the reference only)\n");
    return;
  }
  kern_set_gemm_lib(GEMM_ONEDNN);
  CHECK_OK(kern_gemm_check());
  test_run("test_dense_forward_onednn", test_dense_forward);
  test_run("test_dense_gradients_onednn", test_dense_gradients);
  test_run("test_conv_forward_matches_direct_onednn", test_conv_forward_matches_direct);
  test_run("test_conv_gradients_onednn", test_conv_gradients);
  test_run("test_batchnorm_gradients_onednn", test_batchnorm_gradients);
  test_run("test_softmax_xent_onednn", test_softmax_xent);
  test_run("test_sequence_layer_gradients_onednn", test_sequence_layer_gradients);
  test_run("test_attention_matches_direct_onednn", test_attention_matches_direct);
  test_run("test_onednn_products_take_signals_on_the_stack",
           test_onednn_products_take_signals_on_the_stack);
  kern_set_gemm_lib(GEMM_OPENBLAS);
}

int main(void) {
  RUN(test_gemm_reference_matches_blas);
  RUN(test_gemm_bf16_close_to_reference);
  RUN(test_conv_bf16_columns);
  RUN(test_conv_bf16_input_gradient);
  RUN(test_gemm_bf16_faulting_shapes_come_back);
  RUN(test_kern_sum_in_order);
  RUN(test_kern_allsum_in_order);
  RUN(test_kind_table);
  RUN(test_setup_errors);
  RUN(test_init_bounds);
  RUN(test_dense_forward);
  RUN(test_dense_gradients);
  RUN(test_conv_forward_matches_direct);
  RUN(test_conv_gradients);
  RUN(test_local2d_forward_matches_direct);
  RUN(test_local2d_gradients);
  RUN(test_local2d_init_bound);
  RUN(test_maxpool);
  RUN(test_avgpool);
  RUN(test_flatten);
  RUN(test_activations);
  RUN(test_dropout);
  RUN(test_batchnorm_gradients);
  RUN(test_batchnorm_values);
  RUN(test_softmax_xent);
  RUN(test_sequence_layer_gradients);
  RUN(test_attention_is_causal);
  RUN(test_attention_matches_direct);
  RUN(test_gelu_matches_libm);
  RUN(test_embedding_gradients);
  RUN(test_add_and_gradient_sums);
  RUN(test_sequence_setup_errors);
  RUN(test_softmax_xent_per_position);
  run_on_reference_path();
  run_on_onednn_path();
  TEST_MAIN_END();
}
