/* TreeEASGD (Zhang 2016, the taxonomy's Fig. 16): the workers form a tree
 * of fan-out F (--exchange tree:F; rank 0 is the root, the parent of rank
 * i is (i-1)/F). Every tau_up of its steps a worker sends its model to its
 * parent, every tau_down steps to its children; a model that arrives is
 * consumed before the next step by the elastic pull of EASGD, each node
 * being the centre of its children:
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
  int64_t sent;
} tree_t;

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
  for (int c = t->first_child; down && c <= t->last_child; c++)
    if (mail_send(&t->mail, c) != 0) return -1;
  t->sent++;
  return 0;
}

static int step(decentral_t *d, int64_t k) {
  tree_t *t = d->method;
  worker_t *w = d->w;
  if (mail_poll_then_step(&t->mail, d, k) != 0) return -1;
  int up = t->parent >= 0 && w->step % w->cfg->tau_up == 0;
  int down = t->first_child <= t->last_child && w->step % w->cfg->tau_down == 0;
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

static int extra_json(decentral_t *d, char *buf, size_t cap) {
  tree_t *t = d->method;
  const train_config_t *c = d->w->cfg;
  snprintf(buf, cap, ",\"fanout\":%d,\"tau_up\":%d,\"tau_down\":%d,\"alpha\":%.6g,\"beta\":%.6g",
           c->tree_fanout, c->tau_up, c->tau_down, t->alpha, t->beta);
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
