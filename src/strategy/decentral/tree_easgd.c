/* TreeEASGD (Zhang 2016, the taxonomy's Fig. 16): the workers form a tree
 * of fan-out F (--exchange tree:F; rank 0 is the root, the parent of rank
 * i is (i-1)/F). Every tau_up of its steps a worker sends its model to its
 * parent, every tau_down steps to its children, each period set per node by
 * its depth in the tree (the taxonomy: "for each worker based on its depth
 * in the hierarchy"; --tau-up/--tau-down give one a level, from the root);
 * a model that arrives is consumed before the next step by the elastic
 * pull of EASGD, each node being the centre of its children:
 *
 *   from the parent:   w <- w - alpha (w - w_parent)
 *   from a child:      w <- w + (beta/F) (w_child - w)
 *
 * Asynchronous and bounded: a node sends from one snapshot and waits,
 * serving its own receives, until its previous snapshot has been taken,
 * so it runs at most one exchange period ahead of its neighbours
 * (peer_mail.c). Runs may differ. The consensus model is the root's.
 *
 * --compress CODEC: a node sends its model as the encoded change since the
 * receiver last heard it, a mirror a link as EASGD's (easgd.c): one for its
 * parent, one for its children (they get the same messages at the same
 * times, so they hold the same copy); and it merges a neighbour's message
 * by decoding it into its copy of that neighbour's model and pulling toward
 * the copy. Messages from one rank arrive in the order sent, so the copies
 * stay the same bits at both ends. Memory: (3 + F) n floats a node (two
 * mirrors, the parent's copy and F children's). fp32 goes the plain way. */
#include <stdio.h>
#include <stdlib.h>

#include "strategy/decentral/decentral.h"

enum { TO_PARENT, TO_CHILDREN };

/* --compress: the links' mirrors and copies (see the header). */
typedef struct {
  codec_spec_t codec;        /* CODEC_NONE: models go whole */
  float *mirror[2];          /* this model as the parent / the children hold it */
  float *parent;             /* the parent's model as this node holds it */
  float **children;          /* [F]: each child's model as this node holds it */
  float *scratch;            /* 2 n floats (mirror_encode's) */
  uint64_t seed;
} tree_codec_t;

typedef struct {
  decentral_t *d;
  peer_mail_t mail;
  tree_codec_t z;
  double alpha, beta;
  int parent, first_child, last_child;   /* -1 / empty range when absent */
  int64_t sent_up, sent_down;            /* models sent since the start */
} tree_t;

int tree_depth(int rank, int fanout) {
  int d = 0;
  for (; rank > 0; rank = (rank - 1) / fanout) d++;
  return d;
}

int tree_levels(int p, int fanout) { return p > 1 ? tree_depth(p - 1, fanout) : 0; }

int tree_period(const int *periods, int n, int level) {
  return periods[(level < n ? level : n) - 1];
}

void tree_exchanges(const train_config_t *c, int rank, int p, int64_t step, int *up, int *down) {
  int depth = tree_depth(rank, c->decentral.tree_fanout);
  int has_parent = rank > 0, has_children = (int64_t)c->decentral.tree_fanout * rank + 1 < p;
  *up = has_parent && step % tree_period(c->decentral.tau_up, c->decentral.tau_up_levels, depth) == 0;
  *down = has_children && step % tree_period(c->decentral.tau_down, c->decentral.tau_down_levels, depth + 1) == 0;
}

int tree_check_periods(const train_config_t *c, int p) {
  int levels = tree_levels(p, c->decentral.tree_fanout);
  const char *names[2] = {"tau-up", "tau-down"};
  int given[2] = {c->decentral.tau_up_levels, c->decentral.tau_down_levels};
  for (int i = 0; i < 2; i++)
    if (given[i] > 1 && given[i] > levels)
      return dt_error("option --%s: %d periods given, one a level of the tree from the root, but "
                      "the tree of %d workers with fan-out %d has %d level%s: give at most %d "
                      "(or one for every level)", names[i], given[i], p, c->decentral.tree_fanout, levels,
                      levels == 1 ? "" : "s", levels > 1 ? levels : 1);
  return 0;
}

/* The model that came from src: the message itself, or, compressed, this
 * node's copy of src's model with the message's change added. */
static const float *peer_model(tree_t *t, int src, const void *msg) {
  tree_codec_t *z = &t->z;
  if (z->codec.kind == CODEC_NONE) return msg;
  float *copy = src == t->parent ? z->parent : z->children[src - t->first_child];
  size_t n = t->d->w->model->nparams;
  if (mirror_decode(&z->codec, msg, t->mail.bytes, n, copy) != 0) {
    dt_error_prefix("TreeEASGD: the model from rank %d: ", src);
    return NULL;
  }
  return copy;
}

static int merge(void *ctx, int src, const void *msg) {
  tree_t *t = ctx;
  model_t *m = t->d->w->model;
  const float *x = peer_model(t, src, msg);
  if (!x) return -1;
  double pull = src == t->parent ? t->alpha : t->beta / t->d->w->cfg->decentral.tree_fanout;
  float keep = (float)(1 - pull), take = (float)pull;
  for (size_t i = 0; i < m->nparams; i++) m->params[i] = keep * m->params[i] + take * x[i];
  return 0;
}

/* Buffer `to` of the snapshot: the model, or its change since the
 * parent / the children last heard it, the count-th such message. */
static void fill(tree_t *t, int to, int64_t count) {
  tree_codec_t *z = &t->z;
  const model_t *m = t->d->w->model;
  if (z->codec.kind == CODEC_NONE) {
    kern_copy(m->nparams, m->params, t->mail.sbuf[to]);
    return;
  }
  mirror_encode(&z->codec, m->params, z->mirror[to], m->nparams,
                mirror_seed(z->seed, t->d->w->rank, to, count, 0), t->mail.sbuf[to], z->scratch);
}

/* Uncompressed, one buffer holds the model for all. */
static int send_model(tree_t *t, int up, int down) {
  if (mail_snapshot(&t->mail) != 0) return -1;
  int nchildren = t->last_child - t->first_child + 1;
  int down_buf = t->z.codec.kind == CODEC_NONE ? TO_PARENT : TO_CHILDREN;
  if (up) fill(t, TO_PARENT, t->sent_up);
  if (down && (down_buf != TO_PARENT || !up)) fill(t, down_buf, t->sent_down / nchildren);
  if (up && mail_send(&t->mail, t->parent, TO_PARENT) != 0) return -1;
  t->sent_up += up;
  for (int c = t->first_child; down && c <= t->last_child; c++) {
    if (mail_send(&t->mail, c, down_buf) != 0) return -1;
    t->sent_down++;
  }
  return 0;
}

static int step(decentral_t *d, int64_t k) {
  tree_t *t = d->method;
  worker_t *w = d->w;
  if (mail_poll_then_step(&t->mail, d, k) != 0) return -1;
  int up, down;
  tree_exchanges(w->cfg, w->rank, d->nworkers, w->step, &up, &down);
  if (!up && !down) return 0;
  double t0 = dt_now();
  int rc = send_model(t, up, down);
  worker_comm_since(w, t0);
  return rc;
}

static int drain(decentral_t *d) {
  tree_t *t = d->method;
  double t0 = dt_now();
  int rc = mail_drain(&t->mail);
  worker_comm_since(d->w, t0);
  return rc;
}

static int root_params(decentral_t *d, float *out) { return decentral_broadcast_params(d, 0, out); }

/* "[2,4]": the period of each level of this tree, from the root. */
static size_t periods_json(char *buf, size_t cap, const int *periods, int n, int levels) {
  size_t k = (size_t)snprintf(buf, cap, "[");
  for (int l = 1; l <= levels && k < cap; l++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%d", l > 1 ? "," : "", tree_period(periods, n, l));
  if (k < cap) k += (size_t)snprintf(buf + k, cap - k, "]");
  return k;
}

/* Collective: the models sent up and down by every rank are summed. */
static int extra_json(decentral_t *d, char *buf, size_t cap) {
  tree_t *t = d->method;
  const train_config_t *c = d->w->cfg;
  double mine[2] = {(double)t->sent_up, (double)t->sent_down}, sums[2];
  if (decentral_sum_doubles(d, mine, 2, sums) != 0) return -1;
  int levels = tree_levels(d->nworkers, c->decentral.tree_fanout);
  char up[TREE_LEVELS_MAX * 12 + 8], down[TREE_LEVELS_MAX * 12 + 8];
  if (levels > TREE_LEVELS_MAX) levels = TREE_LEVELS_MAX; /* deeper levels: the last value */
  periods_json(up, sizeof up, c->decentral.tau_up, c->decentral.tau_up_levels, levels);
  periods_json(down, sizeof down, c->decentral.tau_down, c->decentral.tau_down_levels, levels);
  snprintf(buf, cap, ",\"fanout\":%d,\"levels\":%d,\"tau_up\":%s,\"tau_down\":%s,\"alpha\":%.6g,"
           "\"beta\":%.6g,\"messages_up\":%lld,\"messages_down\":%lld", c->decentral.tree_fanout,
           tree_levels(d->nworkers, c->decentral.tree_fanout), up, down, t->alpha, t->beta,
           (long long)sums[0], (long long)sums[1]);
  return 0;
}

/* rank's parent (-1 at the root) and children first..last (an empty
 * range for a leaf) in the tree of p workers. */
static void tree_links(int rank, int p, int fanout, int *parent, int *first, int *last) {
  *parent = rank > 0 ? (rank - 1) / fanout : -1;
  *first = fanout * rank + 1;
  *last = fanout * rank + fanout < p - 1 ? fanout * rank + fanout : p - 1;
}

static void place_in_tree(tree_t *t, int rank, int p, int fanout) {
  tree_links(rank, p, fanout, &t->parent, &t->first_child, &t->last_child);
}

static float *copy_of(const model_t *m) { return dt_dup_floats(m->params, m->nparams); }

/* --compress: every mirror and copy starts as the model, which all ranks
 * hold alike at the start (seeded, or the checkpoint resumed). */
static int setup_codec(tree_t *t) {
  tree_codec_t *z = &t->z;
  const train_config_t *cfg = t->d->w->cfg;
  const model_t *m = t->d->w->model;
  z->codec = cfg->compression.codec;
  z->seed = cfg->seed ^ 0x7472656565617367ull;
  if (!(z->scratch = dt_alloc_floats(2 * m->nparams))) return -1;
  int nchildren = t->last_child - t->first_child + 1;
  if (t->parent >= 0 && (!(z->mirror[TO_PARENT] = copy_of(m)) || !(z->parent = copy_of(m))))
    return -1;
  if (nchildren > 0 && !(z->mirror[TO_CHILDREN] = copy_of(m))) return -1;
  if (nchildren > 0 && !(z->children = calloc((size_t)nchildren, sizeof *z->children)))
    return dt_error("out of memory (TreeEASGD)");
  for (int c = 0; c < nchildren; c++)
    if (!(z->children[c] = copy_of(m))) return -1;
  return 0;
}

static void free_codec(tree_t *t) {
  tree_codec_t *z = &t->z;
  for (int c = 0; z->children && c <= t->last_child - t->first_child; c++) dt_free(z->children[c]);
  free(z->children);
  dt_free(z->mirror[0]), dt_free(z->mirror[1]), dt_free(z->parent), dt_free(z->scratch);
}

static int setup(decentral_t *d) {
  tree_t *t = d->method;
  worker_t *w = d->w;
  t->d = d;
  place_in_tree(t, w->rank, d->nworkers, w->cfg->decentral.tree_fanout);
  if (tree_check_periods(w->cfg, d->nworkers) != 0) return -1;
  if (elastic_coefficients(w->cfg, w->cfg->decentral.tree_fanout, &t->alpha, &t->beta) != 0) return -1;
  const codec_spec_t *k = &w->cfg->compression.codec;
  int compressed = k->kind != CODEC_NONE && !codec_lossless(k);
  if (compressed && setup_codec(t) != 0) return -1;
  return mail_open(&t->mail, w->comm, TAG_TREE_MODEL, TAG_TREE_END,
                   mail_model_bytes(k, w->model->nparams), compressed ? 2 : 1,
                   w->cfg->net.timeout, merge, t);
}

static void teardown(decentral_t *d) {
  tree_t *t = d->method;
  mail_close(&t->mail);
  free_codec(t);
}

static const decentral_ops_t TREE = {
    .consensus = "root", .setup = setup, .teardown = teardown, .step = step, .before_eval = drain,
    .consensus_params = root_params, .extra_json = extra_json};

int strategy_tree_easgd(worker_t *w) {
  tree_t t = {0};
  return decentral_strategy(w, &TREE, 0, &t);
}

/* A model message of `bytes` on a link, one way, every `every` steps. */
static int add_link(step_desc_t *out, int rank, int peer, int to_peer, double bytes, int every,
                    int after) {
  return step_add(out, (step_task_t){TASK_COMM, rank, -1, .pattern = to_peer ? "send" : "recv",
                                     .peer = peer, .group = 2, .sent = to_peer ? bytes : 0,
                                     .received = to_peer ? 0 : bytes, .every = every,
                                     .after = after});
}

/* Per worker: its local step; then its model to its parent every tau_up
 * of its own level, and to each child every tau_down of the level below;
 * what it receives is its neighbours' sends (the parent's every tau_down
 * of this level, each child's every tau_up of the level below). The drain
 * leaves nothing in flight at an epoch's end, so the counts are exact;
 * the drain's own counts once an epoch. */
static int tree_easgd_describe_step(const train_config_t *c, const model_t *m, step_desc_t *out) {
  int p = c->workers, F = c->decentral.tree_fanout;
  DT_TRY(tree_check_periods(c, p));
  double S = (double)mail_model_bytes(&c->compression.codec, m->nparams);
  for (int r = 0; r < p; r++) {
    int parent, first, last, depth = tree_depth(r, F);
    tree_links(r, p, F, &parent, &first, &last);
    int prev = step_add_local_step(out, m, r, c->batch), step = prev;
    if (parent >= 0 && prev != STEP_FAILED) {
      prev = add_link(out, r, parent, 1, S, tree_period(c->decentral.tau_up, c->decentral.tau_up_levels, depth), step);
      if (prev != STEP_FAILED)
        prev = add_link(out, r, parent, 0, S, tree_period(c->decentral.tau_down, c->decentral.tau_down_levels, depth),
                        step);
    }
    for (int ch = first; ch <= last && prev != STEP_FAILED; ch++) {
      prev = add_link(out, r, ch, 1, S, tree_period(c->decentral.tau_down, c->decentral.tau_down_levels, depth + 1),
                      step);
      if (prev != STEP_FAILED)
        prev = add_link(out, r, ch, 0, S, tree_period(c->decentral.tau_up, c->decentral.tau_up_levels, depth + 1),
                        step);
    }
    if (prev == STEP_FAILED || mail_describe_drain(out, r, p) == STEP_FAILED) return -1;
  }
  return 0;
}

static int tree_easgd_matches(const train_config_t *c) {
  return decentral_axes(c, EXCHANGE_TREE, SCHEDULE_ASYNC);
}

const strategy_t STRATEGY_TREE_EASGD = {
    .name = "TreeEASGD",
    .paper = "Zhang 2016 (EASGD along a tree), as the taxonomy describes it",
    .axes = "tree:F + async",
    .short_name = "TreeEASGD",
    .optimization = OPTIMIZATION_DECENTRAL,
    .compress = COMPRESS_MIRRORS,
    .matches = tree_easgd_matches,
    .run = strategy_tree_easgd,
    .describe_step = tree_easgd_describe_step,
};

int decentral_check_world(const train_config_t *c) {
  if (!decentral_axes(c, EXCHANGE_TREE, c->schedule)) return 0;
  return tree_check_periods(c, c->workers);
}
