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
 * (peer_mail.c). Runs may differ. The consensus model is the root's. */
#include <stdio.h>

#include "strategy/decentral/decentral.h"

typedef struct {
  decentral_t *d;
  peer_mail_t mail;
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
  int depth = tree_depth(rank, c->tree_fanout);
  int has_parent = rank > 0, has_children = (int64_t)c->tree_fanout * rank + 1 < p;
  *up = has_parent && step % tree_period(c->tau_up, c->tau_up_levels, depth) == 0;
  *down = has_children && step % tree_period(c->tau_down, c->tau_down_levels, depth + 1) == 0;
}

int tree_check_periods(const train_config_t *c, int p) {
  int levels = tree_levels(p, c->tree_fanout);
  const char *names[2] = {"tau-up", "tau-down"};
  int given[2] = {c->tau_up_levels, c->tau_down_levels};
  for (int i = 0; i < 2; i++)
    if (given[i] > 1 && given[i] > levels)
      return dt_error("option --%s: %d periods given, one a level of the tree from the root, but "
                      "the tree of %d workers with fan-out %d has %d level%s: give at most %d "
                      "(or one for every level)", names[i], given[i], p, c->tree_fanout, levels,
                      levels == 1 ? "" : "s", levels > 1 ? levels : 1);
  return 0;
}

static void merge(void *ctx, int src, const float *msg) {
  tree_t *t = ctx;
  model_t *m = t->d->w->model;
  double pull = src == t->parent ? t->alpha : t->beta / t->d->w->cfg->tree_fanout;
  float keep = (float)(1 - pull), take = (float)pull;
  for (size_t i = 0; i < m->nparams; i++) m->params[i] = keep * m->params[i] + take * msg[i];
}

static int send_model(tree_t *t, int up, int down) {
  worker_t *w = t->d->w;
  float *buf;
  if (mail_snapshot(&t->mail, &buf) != 0) return -1;
  kern_copy(w->model->nparams, w->model->params, buf);
  if (up && mail_send(&t->mail, t->parent) != 0) return -1;
  t->sent_up += up;
  for (int c = t->first_child; down && c <= t->last_child; c++) {
    if (mail_send(&t->mail, c) != 0) return -1;
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
  int levels = tree_levels(d->nworkers, c->tree_fanout);
  char up[TREE_LEVELS_MAX * 12 + 8], down[TREE_LEVELS_MAX * 12 + 8];
  if (levels > TREE_LEVELS_MAX) levels = TREE_LEVELS_MAX; /* deeper levels: the last value */
  periods_json(up, sizeof up, c->tau_up, c->tau_up_levels, levels);
  periods_json(down, sizeof down, c->tau_down, c->tau_down_levels, levels);
  snprintf(buf, cap, ",\"fanout\":%d,\"levels\":%d,\"tau_up\":%s,\"tau_down\":%s,\"alpha\":%.6g,"
           "\"beta\":%.6g,\"messages_up\":%lld,\"messages_down\":%lld", c->tree_fanout,
           tree_levels(d->nworkers, c->tree_fanout), up, down, t->alpha, t->beta,
           (long long)sums[0], (long long)sums[1]);
  return 0;
}

static void place_in_tree(tree_t *t, int rank, int p, int fanout) {
  t->parent = rank > 0 ? (rank - 1) / fanout : -1;
  t->first_child = fanout * rank + 1;
  t->last_child = fanout * rank + fanout < p - 1 ? fanout * rank + fanout : p - 1;
}

static int setup(decentral_t *d) {
  tree_t *t = d->method;
  worker_t *w = d->w;
  t->d = d;
  place_in_tree(t, w->rank, d->nworkers, w->cfg->tree_fanout);
  if (tree_check_periods(w->cfg, d->nworkers) != 0) return -1;
  if (elastic_coefficients(w->cfg, w->cfg->tree_fanout, &t->alpha, &t->beta) != 0) return -1;
  return mail_open(&t->mail, w->comm, TAG_TREE_MODEL, TAG_TREE_END, w->model->nparams,
                   w->cfg->net.timeout, merge, t);
}

static void teardown(decentral_t *d) {
  tree_t *t = d->method;
  mail_close(&t->mail);
}

static const decentral_ops_t TREE = {
    .consensus = "root", .setup = setup, .teardown = teardown, .step = step, .before_eval = drain,
    .consensus_params = root_params, .extra_json = extra_json};

int strategy_tree_easgd(worker_t *w) {
  tree_t t = {0};
  return decentral_strategy(w, &TREE, 0, &t);
}
