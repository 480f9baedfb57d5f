/* Tensor parallelism (src/strategy/tensor/, the split dense layers in
 * src/nn/dense.c): Megatron's pairing of a model's dense layers, the blocks
 * each rank holds, and the split layers' arithmetic - on 3 threads, a
 * model with an odd split (7 features over 3 ranks) gives each rank the
 * block of one worker's initial weights, its logits and its gradients;
 * so does a pair of convolutions (5 filters over 3) with pooling and
 * dropout on the channel shard between them. */
#include <string.h>

#include "dtrain/coll.h"
#include "strategy/tensor/tensor.h"
#include "test.h"

static void test_plan_pairs_dense_layers(void) {
  model_spec_t s;
  int pairs;
  CHECK_OK(model_spec_builtin("mlp", &s)); /* dense relu dense relu dense */
  CHECK_OK(tensor_plan(&s, 2, &pairs));
  CHECK(pairs == 1 && s.layers[0].split == SPLIT_COLUMN && s.layers[2].split == SPLIT_ROW &&
        s.layers[4].split == SPLIT_NONE);
  model_spec_free(&s);
  CHECK_OK(model_spec_builtin("deep", &s)); /* 8 dense layers: 4 pairs */
  CHECK_OK(tensor_plan(&s, 4, &pairs));
  CHECK(pairs == 4);
  for (int i = 0; i < s.nlayers; i++)
    if (s.layers[i].kind == LAYER_DENSE) CHECK(s.layers[i].split == (i % 4 == 0 ? SPLIT_COLUMN : SPLIT_ROW));
  model_spec_free(&s);
  CHECK_OK(model_spec_builtin("lenet", &s)); /* conv relu pool conv relu pool flatten dense relu dense */
  CHECK_OK(tensor_plan(&s, 2, &pairs));
  CHECK(pairs == 2 && s.layers[0].split == SPLIT_COLUMN && s.layers[3].split == SPLIT_ROW &&
        s.layers[7].split == SPLIT_COLUMN && s.layers[9].split == SPLIT_ROW);
  model_spec_free(&s);
  /* batch norm between two dense layers ends the chain: the next two pair */
  CHECK_OK(model_spec_parse("dense units=8\nbatchnorm\ndense units=8\ndropout\ndense units=3\n", "t", &s));
  CHECK_OK(tensor_plan(&s, 2, &pairs));
  CHECK(pairs == 1 && s.layers[0].split == SPLIT_NONE && s.layers[2].split == SPLIT_COLUMN &&
        s.layers[4].split == SPLIT_ROW);
  model_spec_free(&s);
}

static void test_plan_refusals(void) {
  model_spec_t s;
  CHECK_OK(model_spec_parse("dense units=3\nrelu\ndense units=10\n", "narrow", &s));
  CHECK_FAILS_WITH(tensor_plan(&s, 4, NULL), "option --tp 4: the dense layer on line 1 of narrow has 3 output features");
  CHECK_OK(tensor_plan(&s, 3, NULL));
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("conv2d filters=4 kernel=3\nflatten\ndense units=10\n", "convnet", &s));
  CHECK_FAILS_WITH(tensor_plan(&s, 2, NULL), "option --tp 2: convnet has no pair of layers to split");
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("conv2d filters=2 kernel=3\nmaxpool kernel=2\nconv2d filters=8 kernel=1\n", "c", &s));
  CHECK_FAILS_WITH(tensor_plan(&s, 3, NULL), "the conv2d layer on line 1 of c has 2 filters");
  model_spec_free(&s);
}

/* The model file's split= keys: Megatron's pairs and the one weird
 * trick's data-parallel front, as the file says, each error naming the
 * file and line. */
static void test_plan_from_file(void) {
  model_spec_t s;
  const char *owt = "conv2d filters=4 kernel=3 split=data\nrelu\nmaxpool kernel=2\n"
                    "conv2d filters=6 kernel=3 split=data\nflatten\ndense units=8 split=column\n"
                    "relu\ndropout\ndense units=5 split=row\ndense units=3\n";
  CHECK_OK(model_spec_parse(owt, "owt", &s));
  CHECK(tensor_file_split_line(&s, FILE_SPLIT_DATA) == 1 && tensor_file_split_line(&s, FILE_SPLIT_UNSET) == 1);
  CHECK_OK(tensor_plan_file(&s, 2));
  for (int i = 0; i < s.nlayers; i++)
    CHECK(s.layers[i].split == (i == 5 ? SPLIT_COLUMN : i == 8 ? SPLIT_ROW : SPLIT_NONE));
  CHECK_OK(tensor_plan_file(&s, 1)); /* one rank: checked, nothing split */
  for (int i = 0; i < s.nlayers; i++) CHECK(s.layers[i].split == SPLIT_NONE);
  model_spec_free(&s);
  /* a choice the planner would not make: the convolutions whole, a conv pair later */
  CHECK_OK(model_spec_parse("conv2d filters=4 kernel=3 split=none\nconv2d filters=6 kernel=1 split=column\n"
                            "avgpool kernel=2\nconv2d filters=3 kernel=1 split=row\ndense units=3\n", "c", &s));
  CHECK_OK(tensor_plan_file(&s, 3));
  CHECK(s.layers[0].split == SPLIT_NONE && s.layers[1].split == SPLIT_COLUMN &&
        s.layers[3].split == SPLIT_ROW && s.layers[4].split == SPLIT_NONE);
  model_spec_free(&s);
  static const struct { const char *text, *error; int tp; } BAD[] = {
      {"dense units=8 split=row\ndense units=3\n", "bad:1: dense split=row needs a split=column dense layer before it", 2},
      {"dense units=8 split=column\nrelu\ndense units=3\n", "bad:1: dense split=column needs a split=row dense layer after it, through relu, tanh, sigmoid, dropout only; line 3 is a dense without split=row", 2},
      {"conv2d filters=8 kernel=1 split=column\nflatten\ndense units=3 split=row\n",
       "bad:1: conv2d split=column needs a split=row conv2d layer after it, through relu, tanh, sigmoid, dropout or pooling only; line 2 is a flatten", 2},
      {"dense units=8 split=column\nbatchnorm\ndense units=3 split=row\n", "line 2 is a batchnorm", 2},
      {"dense units=8 split=column\nrelu\n", "bad:1: dense split=column needs a split=row dense layer after it, and the model ends", 2},
      {"dense units=3 split=column\ndense units=3 split=row\n", "bad:1: dense split=column has 3 output features, too few to split over --tp 4 (use --tp 3 or fewer)", 4},
      {"conv2d filters=4 kernel=1 split=data\ndense units=3\n", "bad:1: split=data needs split=column and split=row layers after it", 2},
      {"conv2d filters=4 kernel=1\nconv2d filters=4 kernel=1 split=data\ndense units=8 split=column\ndense units=3 split=row\n",
       "bad:1: conv2d has no split=data but line 2 does", 2},
      {"conv2d filters=4 kernel=1 split=data\ndense units=8 split=column\ndense units=3 split=row\ndense units=3 split=data\n",
       "bad:4: split=data after the split layers (line 2)", 2},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
    CHECK_OK(model_spec_parse(BAD[i].text, "bad", &s));
    CHECK_FAILS_WITH(tensor_plan_file(&s, BAD[i].tp), BAD[i].error);
    model_spec_free(&s);
  }
  CHECK_FAILS_WITH(model_spec_parse("dense units=8 split=diagonal\n", "p", &s),
                   "p:1: split=diagonal: expected none, column, row, data, channels (conv2d) or rows (local2d)");
  CHECK_FAILS_WITH(model_spec_parse("dense units=8 split=channels\n", "p", &s),
                   "p:1: split=channels splits a conv2d (use split=column)");
  /* split=channels: the shard runs through relu and pooling, an allgather before the flatten */
  CHECK_OK(model_spec_parse("conv2d filters=5 kernel=3 split=channels\nrelu\nmaxpool kernel=2\n"
                            "flatten\ndense units=3\n", "ch", &s));
  CHECK_OK(tensor_plan_file(&s, 1));
  CHECK(s.nlayers == 5 && s.layers[0].split == SPLIT_NONE); /* one rank: nothing to gather */
  CHECK_OK(tensor_plan_file(&s, 2));
  CHECK(s.nlayers == 6 && s.layers[0].split == SPLIT_COLUMN && s.layers[3].kind == LAYER_ALLGATHER &&
        s.layers[3].input == 2 && s.layers[3].line == 3 && s.layers[4].kind == LAYER_FLATTEN &&
        s.layers[4].input == 3 && s.layers[5].input == 4 && s.layers[5].index == 4);
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("conv2d filters=3 kernel=3 split=channels\ndense units=3\n", "ch", &s));
  CHECK_FAILS_WITH(tensor_plan_file(&s, 4), "ch:1: conv2d split=channels has 3 filters, too few to split over --tp 4");
  model_spec_free(&s);
  /* split=rows: the bands run through relu and a second split local2d, a rowgather before the
   * first layer that is neither; under the planner (no split= keys) every local2d splits so */
  CHECK_OK(model_spec_parse("local2d filters=2 kernel=3 split=rows\nrelu\nlocal2d filters=2 kernel=3 "
                            "split=rows\ntanh\nlocal2d filters=2 kernel=1\ndense units=3\n", "rows", &s));
  CHECK_OK(tensor_plan_file(&s, 1));
  CHECK(s.nlayers == 6 && s.layers[0].split == SPLIT_NONE); /* one rank: nothing to gather */
  CHECK_OK(tensor_plan_file(&s, 3));
  CHECK(s.nlayers == 7 && s.layers[0].split == SPLIT_ROWS && s.layers[2].split == SPLIT_ROWS &&
        s.layers[4].kind == LAYER_ROWGATHER && s.layers[4].input == 3 && s.layers[5].input == 4 &&
        s.layers[5].split == SPLIT_NONE && s.layers[5].index == 4);
  model_spec_free(&s);
  CHECK_OK(model_spec_parse("local2d filters=2 kernel=3\nrelu\ndense units=3\n", "auto", &s));
  CHECK_OK(tensor_plan(&s, 2, NULL));
  CHECK(s.nlayers == 4 && s.layers[0].split == SPLIT_ROWS && s.layers[2].kind == LAYER_ROWGATHER);
  model_spec_free(&s);
  CHECK_FAILS_WITH(model_spec_parse("conv2d filters=2 kernel=3 split=rows\n", "p", &s),
                   "p:1: split=rows splits a local2d (a conv2d takes none, column, row or data)");
  CHECK_FAILS_WITH(model_spec_parse("local2d filters=2 kernel=3 split=column\n", "p", &s),
                   "p:1: split=column: a local2d splits by rows (split=rows or split=none)");
  CHECK_FAILS_WITH(model_spec_parse("rowgather\n", "p", &s), "unknown layer kind 'rowgather'");
  CHECK_FAILS_WITH(model_spec_parse("allgather\n", "p", &s), "unknown layer kind 'allgather'");
  CHECK_FAILS_WITH(model_spec_parse("dense units=8\nrelu split=column\n", "p", &s),
                   "p:2: relu takes no key 'split'");
}

static void test_blocks(void) {
  int off, len, total = 0;
  for (int i = 0; i < 3; i++) {
    tp_block(7, 3, i, &off, &len);
    CHECK(off == total && len == (i == 0 ? 3 : 2));
    total += len;
  }
  CHECK(total == 7);
  /* a 2 x 3 block at (1, 2) of a 4 x 6 tensor, there and back */
  tensor_info_t t = {.ndim = 2, .dims = {4, 6}, .row0 = 1, .rows = 2, .mid = 1, .col0 = 2, .cols = 3, .full_cols = 6};
  float full[24], block[6] = {1, 2, 3, 4, 5, 6}, back[6];
  memset(full, 0, sizeof full);
  tensor_block_copy(&t, full, block, 1);
  CHECK(full[8] == 1 && full[10] == 3 && full[14] == 4 && full[16] == 6 && full[7] == 0 && full[11] == 0);
  tensor_block_copy(&t, full, back, 0);
  CHECK(memcmp(back, block, sizeof back) == 0);
  CHECK(tensor_full_len(&t) == 24);
  /* a conv weight [2, 2 positions, 3 channels], channels 1..2 of each run */
  tensor_info_t c = {.ndim = 2, .dims = {2, 6}, .row0 = 0, .rows = 2, .mid = 2, .col0 = 1, .cols = 2, .full_cols = 3};
  float cf[12] = {0}, cb[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  tensor_block_copy(&c, cf, cb, 1);
  CHECK(cf[0] == 0 && cf[1] == 1 && cf[2] == 2 && cf[3] == 0 && cf[4] == 3 && cf[11] == 8);
  CHECK(tensor_full_len(&c) == 12);
}

/* ---- the split arithmetic on 3 threads ------------------------------------------ */

#define TP 3
#define N 5
typedef struct { const char *spec; shape_t in; int vocab; } split_case_t; /* vocab: a GPT's */
/* split= in the spec: the file's plan; else the planner's */
static const split_case_t CASES[] = {
    {"dense units=7\nrelu\ndropout rate=0.25\ndense units=6\ntanh\ndense units=3\n", {4, 1, 1}, 0},
    {"conv2d filters=5 kernel=3 pad=1\nrelu\nmaxpool kernel=2\ndropout rate=0.2\nconv2d filters=4 "
     "kernel=3\nrelu\nflatten\ndense units=3\n", {2, 6, 6}, 0},
    /* one convolution by output channels (2, 2, 1 of 5), its shard through relu, pooling
     * and dropout, then allgathered for the dense layer */
    {"conv2d filters=5 kernel=3 pad=1 split=channels\nrelu\nmaxpool kernel=2\ndropout rate=0.2\n"
     "dense units=3\n", {2, 6, 6}, 0},
    /* the same after a whole convolution (its input gradient summed), gathered for a
     * convolution that needs every channel */
    {"conv2d filters=3 kernel=3 pad=1\ntanh\nconv2d filters=5 kernel=3 split=channels\navgpool "
     "kernel=2\nconv2d filters=4 kernel=2\nflatten\ndense units=3\n", {2, 6, 6}, 0},
    /* a GPT block (Megatron): attention by heads (one of 3 a rank: its columns of q,
     * k, v and those rows of the projection), the MLP's linears by columns then rows,
     * norms, adds, embeddings and the tied head whole */
    {"embedding vocab=7 units=12 name=tok\nposembed positions=4 name=x0\nlayernorm\n"
     "attention heads=3\nadd with=x0 name=a0\nlayernorm\nlinear units=24\ngelu\n"
     "linear units=12\nadd with=a0\nlayernorm\nlmhead vocab=7 tie=tok\n", {1, 1, 4}, 7},
};

typedef struct { coll_ctx_t *coll; } ring_link_t;

static int ring_allreduce(tp_link_t *t, float *buf, size_t count) {
  return allreduce(((ring_link_t *)t->ctx)->coll, ALLREDUCE_RING, buf, count);
}

static int ring_allgather(tp_link_t *t, float *buf, size_t count) {
  return allgather_ring(((ring_link_t *)t->ctx)->coll, buf, count);
}

/* The whole model's forward, loss and backward on a fixed batch. */
static int run_model(model_t *m, const float *x, const int32_t *y) {
  rng_t rng;
  rng_seed(&rng, 42);
  model_forward(m, x, N, 1, &rng); /* a GPT's labels: [N, T] */
  model_loss(m, y, N, N, NULL);
  model_backward(m, x, N, NULL, NULL);
  return m->tp && m->tp->failed ? -1 : 0;
}

static int split_rank(comm_t *c, void *arg) {
  const split_case_t *k = arg;
  shape_t in = k->in;
  float x[N * 72];
  int32_t y[N * 4] = {0, 1, 2, 1, 0};
  int classes = k->vocab ? k->vocab : 3, outs = N * (k->vocab ? in.w : 1) * classes;
  for (int i = 0; i < N * (int)shape_size(in); i++)
    x[i] = k->vocab ? (float)((i * 3) % k->vocab) : (float)((i * 7) % 11) / 11.0f - 0.4f;
  for (int i = 0; k->vocab && i < N * in.w; i++) y[i] = (i * 5) % k->vocab;
  model_spec_t s;
  model_t *whole = NULL, *part = NULL;
  ring_link_t rl = {NULL};
  tp_link_t link = {.rank = comm_rank(c), .size = TP, .allreduce = ring_allreduce,
                    .allgather = ring_allgather, .ctx = &rl};
  RCHECK_OK(coll_ctx_new(c, &rl.coll));
  RCHECK_OK(model_spec_parse(k->spec, "t", &s));
  RCHECK_OK(model_build(&s, in, classes, N, &whole));
  RCHECK_OK(tensor_file_split_line(&s, FILE_SPLIT_UNSET) ? tensor_plan_file(&s, TP) : tensor_plan(&s, TP, NULL));
  if (k->vocab) /* attention by heads; linear 24 by columns, linear 12 by rows */
    RCHECK(s.layers[3].split == SPLIT_COLUMN && s.layers[6].split == SPLIT_COLUMN &&
           s.layers[8].split == SPLIT_ROW && s.layers[11].split == SPLIT_NONE);
  s.tp = &link;
  RCHECK_OK(model_build(&s, in, classes, N, &part));
  model_spec_free(&s);
  model_init_params(whole, 9);
  model_init_params(part, 9);
  RCHECK(part->nparams < whole->nparams && part->ntensors == whole->ntensors);
  /* the block of one worker's initial values, bit for bit */
  float *blk = dt_alloc_floats(whole->nparams);
  for (int i = 0; i < part->ntensors; i++) {
    const tensor_info_t *p = &part->tensors[i], *w = &whole->tensors[i];
    RCHECK(!strcmp(p->name, w->name) && tensor_full_len(p) == w->len);
    tensor_block_copy(p, whole->params + w->off, blk, 0);
    RCHECK(memcmp(blk, part->params + p->off, p->len * sizeof(float)) == 0);
  }
  RCHECK_OK(run_model(whole, x, y));
  RCHECK_OK(run_model(part, x, y));
  const float *lw = whole->layers[whole->nlayers - 1].out, *lp = part->layers[part->nlayers - 1].out;
  for (int i = 0; i < outs; i++) RCHECK(fabsf(lw[i] - lp[i]) < 1e-5f);
  for (int i = 0; i < part->ntensors; i++) {
    const tensor_info_t *p = &part->tensors[i], *w = &whole->tensors[i];
    tensor_block_copy(p, whole->grads + w->off, blk, 0);
    for (size_t j = 0; j < p->len; j++)
      if (!(fabsf(blk[j] - part->grads[p->off + j]) < 1e-5f))
        return dt_error("rank %d, %s[%zu]: gradient %g, one worker's %g", comm_rank(c), p->name, j,
                        part->grads[p->off + j], blk[j]);
  }
  dt_free(blk);
  model_free(whole);
  model_free(part);
  coll_ctx_free(rl.coll);
  return 0;
}

static void test_split_model_equals_whole(void) {
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
    CHECK_OK(comm_local_run(TP, NULL, split_rank, (void *)&CASES[i]));
}

/* ---- what the layers cost, by kind ------------------------------------------------ */

/* Bytes rank r of P sends in a ring allreduce of S floats
 * (src/coll/allreduce_ring.c): 2S - |b_r| - |b_{r+1}| floats. */
static uint64_t ring_sent(int S, int P, int r) {
  int off, br, bn;
  tp_block(S, P, r, &off, &br);
  tp_block(S, P, (r + 1) % P, &off, &bn);
  return 4 * (uint64_t)(2 * S - br - bn);
}

typedef struct { coll_ctx_t *coll; } group_link_t;

static int group_sum(tp_link_t *t, float *buf, size_t count) {
  return tensor_link_sum(t, ((group_link_t *)t->ctx)->coll, ALLREDUCE_RING, buf, count);
}

/* A Megatron MLP block (dense 7 by columns, relu, dense 6 by rows) after
 * a dense layer and batch norm, over 3 ranks: forward sums the row layer's
 * N x 6 outputs, backward the column layer's N x 4 input gradient, and
 * model_t.cost charges those bytes, and no others, to the dense kind; a
 * step's description says the same. */
static int costs_rank(comm_t *c, void *arg) {
  (void)arg;
  float x[N * 4];
  int32_t y[N] = {0, 1, 2, 1, 0};
  for (int i = 0; i < N * 4; i++) x[i] = (float)((i * 5) % 7) / 7.0f - 0.5f;
  comm_t *g;
  group_link_t gl;
  RCHECK_OK(comm_split(c, 0, comm_rank(c), &g));
  RCHECK_OK(coll_ctx_new(g, &gl.coll));
  tp_link_t link = {.rank = comm_rank(c), .size = TP, .allreduce = group_sum, .ctx = &gl};
  model_spec_t s;
  model_t *m;
  RCHECK_OK(model_spec_parse("dense units=4\nbatchnorm\ndense units=7\nrelu\ndense units=6\ndense units=3\n", "t", &s));
  RCHECK_OK(tensor_plan(&s, TP, NULL));
  RCHECK(s.layers[2].split == SPLIT_COLUMN && s.layers[4].split == SPLIT_ROW);
  s.tp = &link;
  RCHECK_OK(model_build(&s, (shape_t){4, 1, 1}, 3, N, &m));
  model_spec_free(&s);
  model_init_params(m, 9);
  RCHECK_OK(run_model(m, x, y));
  const layer_cost_t *d = &m->cost[LAYER_DENSE], *bn = &m->cost[LAYER_BATCHNORM];
  uint64_t want = ring_sent(N * 6, TP, comm_rank(c)) + ring_sent(N * 4, TP, comm_rank(c));
  comm_bytes_t own = comm_bytes_own(g);
  RCHECK(d->bytes_sent == want && own.sent == want && d->bytes_received == own.received);
  RCHECK(d->comm_sec > 0 && d->comm_sec == link.sec && d->compute_sec > 0);
  RCHECK(bn->bytes_sent == 0 && bn->comm_sec == 0 && bn->compute_sec > 0);
  /* the step's description (model_layer_sums): the same two sums, each
   * right after its layer's pass (the fused model's layers 3 and 2), with the
   * bytes the layers sent */
  step_desc_t sd;
  step_desc_init(&sd, TP);
  step_groups_t groups = {{TP, comm_rank(c), ALLREDUCE_RING, 0, 1}, {1, 0, ALLREDUCE_RING, 0, 1}};
  RCHECK(step_add_passes_summed(&sd, m, comm_rank(c), N, &groups, NULL) >= 0);
  int sums = 0;
  double said = 0;
  for (int i = 0; i < sd.ntasks; i++) {
    const step_task_t *t = &sd.task[i];
    if (t->kind != TASK_COMM) continue;
    const step_task_t *a = &sd.task[t->after];
    RCHECK(sums ? a->kind == TASK_BACKWARD && a->layer == 2 : a->kind == TASK_FORWARD && a->layer == 3);
    said += t->sent, sums++;
  }
  step_desc_free(&sd);
  RCHECK(sums == 2 && said == (double)want);
  model_free(m);
  coll_ctx_free(gl.coll);
  comm_free(g);
  return 0;
}

static void test_layer_costs_by_kind(void) { CHECK_OK(comm_local_run(TP, NULL, costs_rank, NULL)); }

int main(void) {
  RUN(test_plan_pairs_dense_layers);
  RUN(test_plan_refusals);
  RUN(test_plan_from_file);
  RUN(test_blocks);
  RUN(test_split_model_equals_whole);
  RUN(test_layer_costs_by_kind);
  TEST_MAIN_END();
}
