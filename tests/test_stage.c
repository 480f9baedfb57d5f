/* Pipeline stages (src/nn/stage.c): a model cut into stages and run stage
 * after stage computes what the whole model computes. One micro-batch:
 * the same bits as model_forward + model_loss + model_backward (loss,
 * logits, gradients, batch-norm running statistics) for every split of
 * mlp, lenet and two model files (conv, 1x1 conv, pools, batchnorm,
 * dropout, flattens at the start, middle and end). Several micro-batches:
 * accumulated gradients equal the whole batch's within rounding and are
 * reproducible; forwards of several micro-batches in flight (GPipe, 1F1B)
 * give the same bits as running them one at a time. A stage given
 * gradients of its own (Project Adam's worker threads) writes there the
 * model's gradient bit for bit and leaves model->grads alone, and its
 * layer inputs and output gradients are the model's. And the refusals. */
#include <string.h>

#include "dtrain/nn.h"
#include "test.h"

/* conv (pad), batchnorm, relu (not fused: it follows batchnorm), maxpool,
 * 1x1 conv (no columns: reads its input directly), conv, tanh, dropout,
 * avgpool, flatten (aliasing), fused dense+relu, batchnorm1d, dropout. */
static const char CONV_NET[] =
    "input shape=3x10x10\n"
    "conv2d filters=4 kernel=3 pad=1\n"
    "batchnorm\n"
    "relu\n"
    "maxpool kernel=2\n"
    "conv2d filters=5 kernel=1\n"
    "conv2d filters=6 kernel=3\n"
    "tanh\n"
    "dropout rate=0.3\n"
    "avgpool kernel=2 stride=1\n"
    "flatten\n"
    "dense units=16\n"
    "relu\n"
    "batchnorm\n"
    "dropout rate=0.5\n"
    "dense units=5\n";

/* A flatten of the model input (aliases it in the model, copied in a
 * stage), a flatten in the middle, and one as the last layer. */
static const char FLAT_NET[] =
    "input shape=2x4x4\n"
    "flatten\n"
    "dense units=12\n"
    "sigmoid\n"
    "dropout rate=0.2\n"
    "flatten\n"
    "dense units=5\n"
    "flatten\n";

typedef struct {
  const char *name;   /* builtin name, or a label for text */
  const char *text;   /* NULL: builtin */
  shape_t in;
  int classes;
  int has_bn_or_dropout;
} net_t;

static const net_t NETS[] = {
    {"mlp", NULL, {1, 28, 28}, 10, 0},
    {"lenet", NULL, {1, 28, 28}, 10, 0},
    {"conv-net", CONV_NET, {3, 10, 10}, 5, 1},
    {"flat-net", FLAT_NET, {2, 4, 4}, 5, 1},
};

static model_t *build_net(const net_t *net, int max_batch) {
  model_spec_t spec;
  model_t *m = NULL;
  int rc = net->text ? model_spec_parse(net->text, net->name, &spec)
                     : model_spec_builtin(net->name, &spec);
  CHECK_OK(rc);
  if (rc) return NULL;
  CHECK_OK(model_build(&spec, net->in, net->classes, max_batch, &m));
  model_spec_free(&spec);
  if (m) model_init_params(m, 42);
  return m;
}

static model_t *build_text(const char *text, shape_t in, int classes, int max_batch) {
  model_spec_t spec;
  model_t *m = NULL;
  CHECK_OK(model_spec_parse(text, "test.model", &spec));
  CHECK_OK(model_build(&spec, in, classes, max_batch, &m));
  model_spec_free(&spec);
  return m;
}

static void make_batch(const model_t *m, int n, uint64_t seed, float **x, int32_t **y) {
  size_t in = shape_size(m->input);
  rng_t r;
  rng_seed(&r, seed);
  *x = dt_alloc_floats((size_t)n * in);
  *y = malloc((size_t)n * sizeof **y);
  for (size_t i = 0; i < (size_t)n * in; i++) (*x)[i] = 2.0f * rng_uniform(&r) - 1.0f;
  for (int i = 0; i < n; i++) (*y)[i] = (int32_t)rng_below(&r, (uint32_t)m->nclasses);
}

/* What one run leaves: loss, logits, gradients, running statistics. */
typedef struct {
  double loss;
  double correct;
  float *logits, *grads, *buffers;
} result_t;

static void result_alloc(const model_t *m, int n, result_t *r) {
  r->loss = 0;
  r->correct = 0;
  r->logits = dt_alloc_floats((size_t)n * m->nclasses);
  r->grads = dt_alloc_floats(m->nparams);
  r->buffers = dt_alloc_floats(m->nbuffers);
}

static void result_free(result_t *r) {
  dt_free(r->logits);
  dt_free(r->grads);
  dt_free(r->buffers);
}

static void result_take(const model_t *m, result_t *r) {
  memcpy(r->grads, m->grads, m->nparams * sizeof(float));
  memcpy(r->buffers, m->buffers, m->nbuffers * sizeof(float));
}

static int same_bits(const result_t *a, const result_t *b, const model_t *m, int n) {
  return a->loss == b->loss && a->correct == b->correct &&
         !memcmp(a->logits, b->logits, (size_t)n * m->nclasses * sizeof(float)) &&
         !memcmp(a->grads, b->grads, m->nparams * sizeof(float)) &&
         !memcmp(a->buffers, b->buffers, m->nbuffers * sizeof(float));
}

/* Back to the state before a run: the running statistics as initialised,
 * the gradients poisoned (every one must be written). */
static void reset(model_t *m, const float *buffers0) {
  memcpy(m->buffers, buffers0, m->nbuffers * sizeof(float));
  for (size_t i = 0; i < m->nparams; i++) m->grads[i] = 1e30f;
}

static void reference(model_t *m, const float *x, const int32_t *y, int n, int train,
                      uint64_t seed, result_t *r) {
  rng_t rng;
  rng_seed(&rng, seed);
  const float *logits = model_forward(m, x, n, train, &rng);
  memcpy(r->logits, logits, (size_t)n * m->nclasses * sizeof(float));
  r->loss = model_loss(m, y, n, n, &r->correct);
  model_backward(m, x, n, NULL, NULL);
  result_take(m, r);
}

/* ---- a small pipeline executor ---------------------------------------------
 * Stage p runs its own list of operations (forward or backward of a
 * micro-batch); the executor goes round the stages and runs each stage's
 * next operation once what it depends on has run (the forward of the same
 * micro-batch on the stage before; the backward on the stage after), as
 * the ranks of a pipeline would. Activations go from stage to stage by
 * pointer or, with copy = 1, through stage_input (forward) and a separate
 * dy buffer (backward). rng: one stream per (stage, micro-batch), or, with
 * one_rng, one stream for all forwards in the order they run (equal to
 * model_forward's when the stages run one micro-batch in sequence). */
enum { MAXP = 16, MAXM = 8, MAXOPS = 2 * MAXM };

typedef struct {
  int nops[MAXP];
  int ops[MAXP][MAXOPS];   /* k + 1: forward of micro-batch k; -(k + 1): its backward */
} schedule_t;

static void sched_sequential(schedule_t *s, int P, int M) {
  for (int p = 0; p < P; p++) {
    s->nops[p] = 0;
    for (int k = 0; k < M; k++) {
      s->ops[p][s->nops[p]++] = k + 1;
      s->ops[p][s->nops[p]++] = -(k + 1);
    }
  }
}

static void sched_gpipe(schedule_t *s, int P, int M) {
  for (int p = 0; p < P; p++) {
    s->nops[p] = 0;
    for (int k = 0; k < M; k++) s->ops[p][s->nops[p]++] = k + 1;
    for (int k = 0; k < M; k++) s->ops[p][s->nops[p]++] = -(k + 1);
  }
}

/* 1F1B (PipeDream-flush): P - p - 1 warm-up forwards, then one forward and
 * one backward in turn, then the remaining backwards. With P = 2, M = 3
 * the first stage runs F0 F1 B0 F2 B1 B2. */
static void sched_1f1b(schedule_t *s, int P, int M) {
  for (int p = 0; p < P; p++) {
    int warm = P - p - 1 < M ? P - p - 1 : M, f = 0, b = 0;
    s->nops[p] = 0;
    while (f < warm) s->ops[p][s->nops[p]++] = ++f;
    while (f < M) {
      s->ops[p][s->nops[p]++] = ++f;
      s->ops[p][s->nops[p]++] = -++b;
    }
    while (b < M) s->ops[p][s->nops[p]++] = -++b;
  }
}

typedef struct {
  model_t *m;
  stage_t *st[MAXP];
  int P, M;
  int copy, one_rng, train;
  uint64_t seed;
} pipe_t;

/* The stages of a split (first[p] = first layer of stage p). */
static int pipe_open(pipe_t *pp, model_t *m, const int *first, int P, int M, int micro_batch) {
  memset(pp, 0, sizeof *pp);
  pp->m = m;
  pp->P = P;
  pp->M = M;
  for (int p = 0; p < P; p++) {
    int last = p + 1 < P ? first[p + 1] - 1 : m->nlayers - 1;
    if (stage_new(m, first[p], last, M, micro_batch, &pp->st[p]) != 0) {
      fprintf(stderr, "  stage_new(%d..%d): %s\n", first[p], last, dt_errmsg());
      return -1;
    }
  }
  return 0;
}

static void pipe_close(pipe_t *pp) {
  for (int p = 0; p < pp->P; p++) stage_free(pp->st[p]);
}

/* Runs the schedule over x[n] split into M micro-batches (sizes as even
 * as possible, the first ones one larger); the loss's denom is n, so the
 * summed gradient is the batch mean. Fills r (logits, loss, gradients,
 * buffers). Returns 0, or -1 after printing why. */
static int pipe_run(pipe_t *pp, const schedule_t *sc, const float *x, const int32_t *y, int n,
                    result_t *r) {
  model_t *m = pp->m;
  int P = pp->P, M = pp->M, off[MAXM + 1], pos[MAXP] = {0};
  int fdone[MAXP][MAXM] = {{0}}, bdone[MAXP][MAXM] = {{0}}, backwards[MAXP] = {0};
  off[0] = 0;
  for (int k = 0; k < M; k++) off[k + 1] = off[k] + n / M + (k < n % M);
  size_t in0 = shape_size(m->input);
  /* dybuf[p][k]: the gradient of stage p's output for micro-batch k */
  float *dybuf[MAXP][MAXM] = {{0}};
  for (int p = 0; p < P; p++)
    for (int k = 0; k < M; k++)
      dybuf[p][k] = dt_alloc_floats((size_t)pp->st[p]->micro_batch * pp->st[p]->out_size);
  rng_t one;
  rng_seed(&one, pp->seed);
  double losses[MAXM] = {0};
  double corrects[MAXM] = {0};
  int rc = 0;
  for (int progress = 1; progress;) {
    progress = 0;
    for (int p = 0; p < P; p++) {
      if (pos[p] == sc->nops[p]) continue;
      int op = sc->ops[p][pos[p]], k = (op > 0 ? op : -op) - 1, nk = off[k + 1] - off[k];
      stage_t *s = pp->st[p];
      if (op > 0) {
        if (p > 0 && !fdone[p - 1][k]) continue;
        const float *in = x + (size_t)off[k] * in0;
        if (p > 0) {
          in = stage_output(pp->st[p - 1], k);
          if (pp->copy) {
            float *buf = stage_input(s, k);
            memcpy(buf, in, (size_t)nk * s->in_size * sizeof(float));
            in = buf;
          }
        }
        rng_t own, *rng = &one;
        if (!pp->one_rng) {
          rng_seed(&own, rng_derive(pp->seed, (uint64_t)p, (uint64_t)k));
          rng = &own;
        }
        const float *out;
        if (stage_forward(s, k, in, nk, pp->train, rng, &out) != 0) goto fail;
        if (s->ends_model) {
          if (stage_loss(s, k, y + off[k], n, &losses[k], &corrects[k]) != 0) goto fail;
          memcpy(r->logits + (size_t)off[k] * m->nclasses, out,
                 (size_t)nk * m->nclasses * sizeof(float));
        }
        fdone[p][k] = 1;
      } else {
        if (p + 1 < P && !bdone[p + 1][k]) continue;
        const float *dy = NULL;
        if (p + 1 < P && pp->copy) dy = dybuf[p][k];
        float *dx = NULL;
        if (p > 0) dx = pp->copy ? dybuf[p - 1][k] : stage_output_grad(pp->st[p - 1], k);
        if (stage_backward(s, k, dy, dx, backwards[p]++ > 0, NULL, NULL) != 0) goto fail;
        bdone[p][k] = 1;
      }
      pos[p]++;
      progress = 1;
    }
  }
  for (int p = 0; p < P; p++)
    if (pos[p] != sc->nops[p]) {
      fprintf(stderr, "  the schedule is stuck at stage %d, operation %d\n", p, pos[p]);
      rc = -1;
      goto out;
    }
  r->loss = 0;
  r->correct = 0;
  for (int k = 0; k < M; k++) r->loss += losses[k], r->correct += corrects[k];
  result_take(m, r);
  goto out;
fail:
  fprintf(stderr, "  %s\n", dt_errmsg());
  rc = -1;
out:
  for (int p = 0; p < P; p++)
    for (int k = 0; k < M; k++) dt_free(dybuf[p][k]);
  return rc;
}

/* Runs the split with one micro-batch, checks the stages' shapes and
 * ranges and that the result is the reference, bit for bit. */
static int check_split(model_t *m, const int *first, int P, const float *x, const int32_t *y,
                       int n, const float *buffers0, const result_t *ref, int copy) {
  pipe_t pp;
  schedule_t sc;
  result_t r;
  int ok = 0;
  result_alloc(m, n, &r);
  if (pipe_open(&pp, m, first, P, 1, n) == 0) {
    pp.copy = copy;
    pp.one_rng = 1;
    pp.train = 1;
    pp.seed = 7;
    sched_sequential(&sc, P, 1);
    reset(m, buffers0);
    ok = pipe_run(&pp, &sc, x, y, n, &r) == 0 && same_bits(&r, ref, m, n);
    size_t end = 0;
    for (int p = 0; p < P; p++) {
      const stage_t *s = pp.st[p];
      ok = ok && s->param_off == end && s->first == first[p] &&
           (p == 0 || s->in_size == pp.st[p - 1]->out_size) && s->ends_model == (p == P - 1);
      end = s->param_off + s->param_len;
    }
    ok = ok && end == m->nparams && pp.st[0]->in_size == shape_size(m->input) &&
         pp.st[P - 1]->out_size == (size_t)m->nclasses;
  }
  pipe_close(&pp);
  result_free(&r);
  if (!ok) {
    fprintf(stderr, "  split");
    for (int p = 0; p < P; p++) fprintf(stderr, " %d", first[p]);
    fprintf(stderr, " differs from the whole model\n");
  }
  return ok;
}

/* A split from a subset of the valid cuts (bit i: cut i). */
static int split_of(const int *cuts, int ncuts, unsigned mask, int *first) {
  int P = 1;
  first[0] = 0;
  for (int i = 0; i < ncuts; i++)
    if (mask >> i & 1u) first[P++] = cuts[i];
  return P;
}

/* Every split of every model, one micro-batch, train mode: the same bits
 * as the whole model. Models with up to 9 cuts: every subset of the cuts;
 * more: every number of stages from model_split_stages, every single cut,
 * every layer a stage, and 200 random subsets. */
static void test_one_microbatch_is_the_model(void) {
  for (size_t t = 0; t < sizeof NETS / sizeof *NETS; t++) {
    const net_t *net = &NETS[t];
    int n = 7;
    model_t *m = build_net(net, 16);
    if (!m) continue;
    float *x, *buffers0 = dt_alloc_floats(m->nbuffers);
    int32_t *y;
    make_batch(m, n, 100 + t, &x, &y);
    memcpy(buffers0, m->buffers, m->nbuffers * sizeof(float));
    result_t ref;
    result_alloc(m, n, &ref);
    reset(m, buffers0);
    reference(m, x, y, n, 1, 7, &ref);
    int cuts[64], first[64], ncuts = model_stage_cuts(m, cuts), runs = 0, bad = 0;
    CHECK(ncuts == m->nlayers - 1); /* chains: every cut is valid */
    for (int P = 1; P <= ncuts + 1; P++) {
      CHECK_OK(model_split_stages(m, P, first));
      bad += !check_split(m, first, P, x, y, n, buffers0, &ref, P & 1), runs++;
    }
    if (ncuts <= 9) {
      for (unsigned mask = 0; mask < 1u << ncuts; mask++) {
        int P = split_of(cuts, ncuts, mask, first);
        bad += !check_split(m, first, P, x, y, n, buffers0, &ref, mask & 1), runs++;
      }
    } else {
      for (int i = 0; i < ncuts; i++) {
        int P = split_of(cuts, ncuts, 1u << i, first);
        bad += !check_split(m, first, P, x, y, n, buffers0, &ref, i & 1), runs++;
      }
      rng_t r;
      rng_seed(&r, 5);
      for (int i = 0; i < 200; i++) {
        unsigned mask = (unsigned)rng_next(&r) & ((1u << ncuts) - 1);
        int P = split_of(cuts, ncuts, mask, first);
        bad += !check_split(m, first, P, x, y, n, buffers0, &ref, i & 1), runs++;
      }
    }
    printf("  %s: %d layers, %d splits, %d differ\n", net->name, m->nlayers, runs, bad);
    CHECK(bad == 0);
    result_free(&ref);
    dt_free(x);
    dt_free(buffers0);
    free(y);
    model_free(m);
  }
}

/* Worst |a - b| over each layer's gradients, relative to the largest
 * |b| of that layer. */
static double worst_layer_error(const model_t *m, const float *a, const float *b) {
  double worst = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    if (!l->param_len) continue;
    const float *pa = a + l->param_off, *pb = b + l->param_off;
    double scale = kern_maxabs(l->param_len, pb), err = 0;
    for (size_t j = 0; j < l->param_len; j++) {
      double d = fabs((double)pa[j] - pb[j]);
      if (d > err) err = d;
    }
    if (scale > 0 && err / scale > worst) worst = err / scale;
  }
  return worst;
}

/* M = 2, 3, 4 micro-batches of a batch of 10 (not divisible by 3 or 4),
 * gradients accumulated over them: the whole batch's gradients within
 * 1e-5 of each layer's largest gradient (GEMMs over fewer rows sum in
 * another order), the loss within 1e-6 relative, and the same bits on a
 * second run. mlp and lenet in training mode; the two model files in
 * evaluation mode (dropout masks and batch statistics are per micro-batch,
 * so training there is not the whole-batch computation). */
static void test_microbatches_sum_to_the_batch(void) {
  for (size_t t = 0; t < sizeof NETS / sizeof *NETS; t++) {
    const net_t *net = &NETS[t];
    int n = 10, train = !net->has_bn_or_dropout;
    model_t *m = build_net(net, 16);
    if (!m) continue;
    float *x, *buffers0 = dt_alloc_floats(m->nbuffers);
    int32_t *y;
    make_batch(m, n, 200 + t, &x, &y);
    memcpy(buffers0, m->buffers, m->nbuffers * sizeof(float));
    result_t ref, r1, r2;
    result_alloc(m, n, &ref);
    result_alloc(m, n, &r1);
    result_alloc(m, n, &r2);
    reset(m, buffers0);
    reference(m, x, y, n, train, 7, &ref);
    int cuts[64], ncuts = model_stage_cuts(m, cuts);
    int Ps[3] = {1, 2, ncuts + 1};
    double worst = 0;
    for (int M = 2; M <= 4; M++)
      for (int pi = 0; pi < 3; pi++) {
        int P = Ps[pi], first[64];
        CHECK_OK(model_split_stages(m, P, first));
        pipe_t pp;
        schedule_t sc;
        if (pipe_open(&pp, m, first, P, M, (n + M - 1) / M) != 0) {
          CHECK(0);
          continue;
        }
        pp.train = train;
        pp.seed = 7;
        pp.copy = M & 1;
        sched_sequential(&sc, P, M);
        reset(m, buffers0);
        CHECK(pipe_run(&pp, &sc, x, y, n, &r1) == 0);
        reset(m, buffers0);
        CHECK(pipe_run(&pp, &sc, x, y, n, &r2) == 0);
        CHECK(same_bits(&r1, &r2, m, n));
        double err = worst_layer_error(m, r1.grads, ref.grads);
        if (err > worst) worst = err;
        CHECK(err <= 1e-5);
        CHECK_NEAR(r1.loss, ref.loss, 1e-6 * fabs(ref.loss));
        CHECK(r1.correct == ref.correct);
        for (int i = 0; i < n * m->nclasses; i++)
          if (fabsf(r1.logits[i] - ref.logits[i]) > 1e-5f * (1.0f + fabsf(ref.logits[i]))) {
            CHECK(!"logits differ");
            break;
          }
        pipe_close(&pp);
      }
    printf("  %s (%s): worst gradient error %.2e of the layer's largest\n", net->name,
           train ? "train" : "eval", worst);
    result_free(&ref);
    result_free(&r1);
    result_free(&r2);
    dt_free(x);
    dt_free(buffers0);
    free(y);
    model_free(m);
  }
}

/* Forwards of several micro-batches in flight before their backwards
 * (GPipe: all forwards first; 1F1B: on the first of two stages F0 F1 B0 F2
 * B1 B2) give the same bits as one micro-batch at a time: loss, logits,
 * gradients and running statistics, in training mode with dropout and
 * batch norm (each micro-batch keeps its own masks and batch statistics).
 * Dropout draws from one stream per (stage, micro-batch), as a pipeline
 * would. */
static void test_microbatches_in_flight(void) {
  for (size_t t = 0; t < sizeof NETS / sizeof *NETS; t++) {
    const net_t *net = &NETS[t];
    int n = 11, M = 3;
    model_t *m = build_net(net, 16);
    if (!m) continue;
    float *x, *buffers0 = dt_alloc_floats(m->nbuffers);
    int32_t *y;
    make_batch(m, n, 300 + t, &x, &y);
    memcpy(buffers0, m->buffers, m->nbuffers * sizeof(float));
    result_t seq, r;
    result_alloc(m, n, &seq);
    result_alloc(m, n, &r);
    int cuts[64], ncuts = model_stage_cuts(m, cuts);
    int Ps[3] = {2, 3, ncuts + 1 < MAXP ? ncuts + 1 : MAXP};
    for (int pi = 0; pi < 3; pi++) {
      int P = Ps[pi], first[64];
      CHECK_OK(model_split_stages(m, P, first));
      pipe_t pp;
      schedule_t sc;
      if (pipe_open(&pp, m, first, P, M, (n + M - 1) / M) != 0) {
        CHECK(0);
        continue;
      }
      pp.train = 1;
      pp.seed = 11;
      sched_sequential(&sc, P, M);
      reset(m, buffers0);
      CHECK(pipe_run(&pp, &sc, x, y, n, &seq) == 0);
      for (int which = 0; which < 2; which++) {
        if (which == 0) sched_gpipe(&sc, P, M);
        else sched_1f1b(&sc, P, M);
        if (P == 2 && which == 1) {
          static const int want[6] = {1, 2, -1, 3, -2, -3};
          CHECK(sc.nops[0] == 6 && !memcmp(sc.ops[0], want, sizeof want));
        }
        for (int copy = 0; copy < 2; copy++) {
          pp.copy = copy;
          reset(m, buffers0);
          CHECK(pipe_run(&pp, &sc, x, y, n, &r) == 0);
          if (!same_bits(&r, &seq, m, n)) {
            fprintf(stderr, "  %s, %d stages, %s, copy %d: differs from one at a time\n",
                    net->name, P, which ? "1F1B" : "GPipe", copy);
            CHECK(0);
          }
        }
      }
      pipe_close(&pp);
    }
    result_free(&seq);
    result_free(&r);
    dt_free(x);
    dt_free(buffers0);
    free(y);
    model_free(m);
  }
}

/* ready(ctx, i) comes once per layer with parameters, last layer first,
 * when the layer's gradients in model->grads are final (accumulated). */
typedef struct {
  const model_t *m;
  const float *want;  /* the gradients expected once accumulated */
  int calls, last, order_ok, final_ok;
} ready_log_t;

static void log_ready(void *ctx, int i) {
  ready_log_t *log = ctx;
  const layer_t *l = &log->m->layers[i];
  log->calls++;
  if (log->last >= 0 && i >= log->last) log->order_ok = 0;
  log->last = i;
  if (memcmp(log->m->grads + l->param_off, log->want + l->param_off,
             l->param_len * sizeof(float)))
    log->final_ok = 0;
}

static void test_ready_after_accumulation(void) {
  const net_t *net = &NETS[1]; /* lenet: conv and dense split their backward */
  int n = 4;
  model_t *m = build_net(net, 4);
  if (!m) return;
  float *x, *want = dt_alloc_floats(m->nparams);
  int32_t *y;
  make_batch(m, n, 400, &x, &y);
  stage_t *s = NULL;
  CHECK_OK(stage_new(m, 0, m->nlayers - 1, 2, 2, &s));
  if (!s) return;
  /* without a callback: the expected sums */
  for (int k = 0; k < 2; k++) {
    CHECK_OK(stage_forward(s, k, x + (size_t)k * 2 * 784, 2, 1, NULL, NULL));
    CHECK_OK(stage_loss(s, k, y + 2 * k, n, NULL, NULL));
    CHECK_OK(stage_backward(s, k, NULL, NULL, k > 0, NULL, NULL));
  }
  memcpy(want, m->grads, m->nparams * sizeof(float));
  int params = 0;
  for (int i = 0; i < m->nlayers; i++) params += m->layers[i].param_len > 0;
  for (int k = 0; k < 2; k++) {
    CHECK_OK(stage_forward(s, k, x + (size_t)k * 2 * 784, 2, 1, NULL, NULL));
    CHECK_OK(stage_loss(s, k, y + 2 * k, n, NULL, NULL));
    if (k == 0) {
      CHECK_OK(stage_backward(s, k, NULL, NULL, 0, NULL, NULL));
      continue;
    }
    ready_log_t log = {m, want, 0, -1, 1, 1};
    CHECK_OK(stage_backward(s, k, NULL, NULL, 1, log_ready, &log));
    CHECK(log.calls == params && log.order_ok && log.final_ok);
  }
  CHECK(!memcmp(want, m->grads, m->nparams * sizeof(float)));
  stage_free(s);
  dt_free(x);
  dt_free(want);
  free(y);
  model_free(m);
}

/* model_split_stages balances multiply-adds: lenet's second convolution
 * (1.6 M of its 2.3 M per sample) gets a stage of its own at P = 3. */
static void test_split_balance(void) {
  model_t *m = build_net(&NETS[1], 4);
  if (!m) return;
  int first[8];
  CHECK_OK(model_split_stages(m, 2, first));
  CHECK(first[0] == 0 && first[1] == 3);
  CHECK_OK(model_split_stages(m, 3, first));
  CHECK(first[0] == 0 && first[1] == 2 && first[2] == 3);
  CHECK_OK(model_split_stages(m, 7, first));
  for (int p = 0; p < 7; p++) CHECK(first[p] == p);
  CHECK_FAILS_WITH(model_split_stages(m, 8, first),
                   "cannot split a model of 7 layers into 8 stages: it has 6 valid cuts "
                   "(before layers 1, 2, 3, 4, 5, 6), so 1 to 7 stages");
  CHECK_FAILS_WITH(model_split_stages(m, 0, first), "into 0 stages");
  model_free(m);
  m = build_net(&NETS[0], 4);
  if (!m) return;
  CHECK_OK(model_split_stages(m, 2, first));
  CHECK(first[0] == 0 && first[1] == 1); /* 784x512 alone, then the rest */
  model_free(m);
}

/* Refusals: each with one line saying what is wrong. */
static void test_refusals(void) {
  model_t *m = build_net(&NETS[0], 8); /* mlp: 3 layers */
  if (!m) return;
  stage_t *s = NULL, *tail = NULL;
  CHECK_FAILS_WITH(stage_new(NULL, 0, 0, 1, 1, &s), "stage_new: no model");
  CHECK_FAILS_WITH(stage_new(m, 2, 1, 1, 1, &s),
                   "stage_new: layers 2..1 are not a range of the model's 3 layers "
                   "(need 0 <= first <= last <= 2)");
  CHECK_FAILS_WITH(stage_new(m, 0, 3, 1, 1, &s), "layers 0..3 are not a range");
  CHECK_FAILS_WITH(stage_new(m, -1, 0, 1, 1, &s), "layers -1..0 are not a range");
  CHECK_FAILS_WITH(stage_new(m, 0, 0, 0, 1, &s), "max_micro must be >= 1 (got 0)");
  CHECK_FAILS_WITH(stage_new(m, 0, 0, 1, 0, &s), "micro_batch must be >= 1 (got 0)");
  CHECK(s == NULL);

  CHECK_OK(stage_new(m, 0, 1, 2, 4, &s));
  CHECK_OK(stage_new(m, 2, 2, 2, 4, &tail));
  if (!s || !tail) return;
  float x[5 * 784] = {0};
  int32_t y[4] = {0, 1, 2, 3};
  CHECK_FAILS_WITH(stage_forward(s, 2, x, 4, 1, NULL, NULL),
                   "stage_forward: micro-batch 2 is outside 0..1 (max_micro 2)");
  CHECK_FAILS_WITH(stage_forward(s, -1, x, 4, 1, NULL, NULL), "micro-batch -1 is outside 0..1");
  CHECK_FAILS_WITH(stage_forward(s, 0, x, 5, 1, NULL, NULL),
                   "stage_forward: 5 samples; a micro-batch of this stage holds 1 to 4");
  CHECK_FAILS_WITH(stage_forward(s, 0, x, 0, 1, NULL, NULL), "0 samples");
  CHECK_FAILS_WITH(stage_forward(s, 0, NULL, 4, 1, NULL, NULL), "micro-batch 0: no input");
  CHECK_FAILS_WITH(stage_backward(s, 0, NULL, NULL, 0, NULL, NULL),
                   "stage_backward: micro-batch 0 has no forward in flight");
  const float *h;
  CHECK_OK(stage_forward(s, 0, x, 4, 1, NULL, &h));
  CHECK(h == stage_output(s, 0));
  CHECK_FAILS_WITH(stage_loss(s, 0, y, 4, NULL, NULL),
                   "stage_loss: layers 0..1 do not end the model (its last layer is 2)");
  CHECK_FAILS_WITH(stage_loss(tail, 1, y, 4, NULL, NULL),
                   "stage_loss: micro-batch 1 has no forward in flight");
  CHECK_OK(stage_forward(tail, 1, h, 4, 1, NULL, NULL));
  CHECK_FAILS_WITH(stage_backward(tail, 1, NULL, NULL, 0, NULL, NULL),
                   "stage_backward: micro-batch 1 has no output gradient: call stage_loss "
                   "first or pass dy");
  CHECK_FAILS_WITH(stage_loss(tail, 1, y, 0, NULL, NULL), "denom must be >= 1 (got 0)");
  CHECK_OK(stage_loss(tail, 1, y, 4, NULL, NULL));
  CHECK_OK(stage_backward(tail, 1, NULL, stage_output_grad(s, 0), 0, NULL, NULL));
  CHECK_FAILS_WITH(stage_backward(tail, 1, NULL, NULL, 0, NULL, NULL),
                   "micro-batch 1 has no forward in flight (each backward needs a forward of "
                   "its own)");
  CHECK_OK(stage_backward(s, 0, NULL, NULL, 0, NULL, NULL));
  CHECK_FAILS_WITH(stage_output(s, 2) ? 0 : -1, "stage_output: micro-batch 2 is outside");
  CHECK_FAILS_WITH(stage_input(s, 2) ? 0 : -1, "stage_input: micro-batch 2 is outside");
  CHECK_FAILS_WITH(stage_output_grad(s, -1) ? 0 : -1, "stage_output_grad: micro-batch -1");
  stage_free(s);
  stage_free(tail);
  stage_free(NULL);
  model_free(m);

  /* A micro-batch too large for one convolution GEMM: lenet's first
   * layer's setup refuses it, before anything is allocated. */
  m = build_net(&NETS[1], 4);
  if (m)
    CHECK_FAILS_WITH(stage_new(m, 0, 1, 1, 4000000, &s),
                     "stage_new: micro_batch 4000000: line 2: conv2d: batch 4000000 of 24x24 "
                     "outputs is too large for one GEMM");
  model_free(m);
}

/* Cuts that more than one activation crosses. The model builder accepts
 * only chains today (a second reader of a layer is refused), so the
 * graph is edited after building to stand for a skip connection. */
static void test_invalid_cuts(void) {
  shape_t in = {1, 4, 4};
  model_t *m = build_text("dense units=8\ntanh\ndense units=8\ntanh\ndense units=5\n", in, 5, 4);
  if (!m) return;
  m->layers[3].spec.input = 1; /* tanh (line 4) reads tanh (line 2) */
  m->layers[4].spec.input = 2; /* dense (line 5) reads dense (line 3) */
  int cuts[8], first[8];
  CHECK(model_stage_cuts(m, cuts) == 2 && cuts[0] == 1 && cuts[1] == 2);
  stage_t *s = NULL;
  CHECK_FAILS_WITH(stage_new(m, 3, 4, 1, 4, &s),
                   "stage_new: layers 3..4: cannot cut before layer 3 (tanh, line 4): layer 3 "
                   "(tanh, line 4) reads layer 1 (tanh, line 2) across the cut (only one "
                   "activation may cross); valid cuts: before layers 1, 2");
  CHECK_FAILS_WITH(stage_new(m, 0, 3, 1, 4, &s),
                   "cannot cut before layer 4 (dense, line 5): layer 4 (dense, line 5) reads "
                   "layer 2 (dense, line 3) across the cut");
  CHECK(s == NULL);
  /* Layers 2 and 3 both read layer 1: one activation crosses the cut
   * before 2, and the stage gives both of them its input. */
  CHECK_OK(stage_new(m, 2, 4, 1, 4, &s));
  stage_free(s);
  CHECK_OK(model_split_stages(m, 3, first));
  CHECK(first[0] == 0 && first[1] == 1 && first[2] == 2);
  CHECK_FAILS_WITH(model_split_stages(m, 4, first),
                   "it has 2 valid cuts (before layers 1, 2), so 1 to 3 stages");
  /* A later layer reading the model input crosses every cut before it. */
  m->layers[3].spec.input = 2;
  m->layers[4].spec.input = 3;
  m->layers[2].spec.input = -1;
  CHECK(model_stage_cuts(m, cuts) == 2 && cuts[0] == 3 && cuts[1] == 4);
  CHECK_FAILS_WITH(stage_new(m, 1, 4, 1, 4, &s),
                   "cannot cut before layer 1 (tanh, line 2): layer 2 (dense, line 3) reads "
                   "the model input across the cut (only one activation may cross); valid cuts: "
                   "before layers 3, 4");
  model_free(m);

  /* One layer: no cut at all. */
  m = build_text("dense units=5\n", in, 5, 4);
  if (!m) return;
  CHECK(model_stage_cuts(m, cuts) == 0);
  CHECK_OK(model_split_stages(m, 1, first));
  CHECK(first[0] == 0);
  CHECK_FAILS_WITH(model_split_stages(m, 2, first),
                   "it has 0 valid cuts (none: the model can only run as one stage), so 1 to 1");
  model_free(m);
}

/* stage_use_grads: a whole-model stage's backward into an arena of its
 * own equals model_backward's gradient, model->grads untouched; the
 * stage's layer inputs and output gradients are the model's. */
static void test_grads_of_their_own(void) {
  for (size_t t = 0; t < sizeof NETS / sizeof *NETS; t++) {
    int n = 5;
    model_t *m = build_net(&NETS[t], 8);
    if (!m) continue;
    float *x, *buffers0 = dt_alloc_floats(m->nbuffers), *own = dt_alloc_floats(m->nparams);
    int32_t *y;
    make_batch(m, n, 300 + t, &x, &y);
    memcpy(buffers0, m->buffers, m->nbuffers * sizeof(float));
    result_t ref;
    result_alloc(m, n, &ref);
    reset(m, buffers0);
    reference(m, x, y, n, 1, 7, &ref);
    stage_t *s = NULL;
    CHECK_OK(stage_new(m, 0, m->nlayers - 1, 1, 8, &s));
    CHECK_OK(stage_use_grads(s, 0, own));
    reset(m, buffers0);
    for (size_t i = 0; i < m->nparams; i++) own[i] = 1e30f; /* every one must be written */
    rng_t rng;
    rng_seed(&rng, 7);
    double loss, correct;
    CHECK_OK(stage_forward(s, 0, x, n, 1, &rng, NULL));
    CHECK_OK(stage_loss(s, 0, y, n, &loss, &correct));
    CHECK_OK(stage_backward(s, 0, NULL, NULL, 0, NULL, NULL));
    CHECK(loss == ref.loss);
    CHECK(!memcmp(own, ref.grads, m->nparams * sizeof(float)));
    int untouched = 1, same_io = 1;
    for (size_t i = 0; i < m->nparams; i++) untouched &= m->grads[i] == 1e30f;
    CHECK(untouched);
    CHECK(stage_layer_input(s, 0, 0) == x);
    for (int l = 1; l < m->nlayers; l++) { /* the model's activations are still the reference's */
      size_t in = (size_t)n * shape_size(m->layers[l].in_shape);
      same_io &= !memcmp(stage_layer_input(s, 0, l), model_layer_input(m, l, x), in * sizeof(float));
    }
    const layer_t *last = &m->layers[m->nlayers - 1];
    size_t out = (size_t)n * shape_size(last->out_shape);
    same_io &= !memcmp(stage_layer_dout(s, 0, m->nlayers - 1), last->dout, out * sizeof(float));
    CHECK(same_io);
    CHECK(stage_layer_input(s, 0, m->nlayers) == NULL); /* outside the stage: refused */
    printf("  %s: own gradients equal the model's, model->grads untouched\n", NETS[t].name);
    stage_free(s);
    result_free(&ref);
    dt_free(x);
    dt_free(own);
    dt_free(buffers0);
    free(y);
    model_free(m);
  }
}

int main(void) {
  kern_set_threads(1); /* OpenBLAS threads are not instrumented: ThreadSanitizer would flag their writes */
  RUN(test_one_microbatch_is_the_model);
  RUN(test_microbatches_sum_to_the_batch);
  RUN(test_microbatches_in_flight);
  RUN(test_ready_after_accumulation);
  RUN(test_split_balance);
  RUN(test_grads_of_their_own);
  RUN(test_refusals);
  RUN(test_invalid_cuts);
  TEST_MAIN_END();
}
