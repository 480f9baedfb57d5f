/* Decentralized optimization: what local SGD, EASGD, D-PSGD, GoSGD and
 * TreeEASGD share. Every worker runs its own optimizer on its own replica
 * (w->model->params); a method only says how one step goes on a rank and
 * what its consensus model is. The driver (consensus.c) runs the epochs,
 * and at every evaluation puts the consensus into each rank's params,
 * evaluates it on a shard of the test set per rank, reports it (rank 0
 * checkpoints it) and puts the replica back. See docs/DECENTRALIZED.md. */
#ifndef DTRAIN_STRATEGY_DECENTRAL_H
#define DTRAIN_STRATEGY_DECENTRAL_H

#include "strategy/strategy.h"

int strategy_local_sgd(worker_t *w);      /* model averaging every tau steps (SparkNet, local SGD) */
int strategy_easgd(worker_t *w);          /* elastic averaging with a master rank, sync or async */
int strategy_dpsgd(worker_t *w);          /* D-PSGD: mix with the two ring neighbours every step */
int strategy_adpsgd(worker_t *w);         /* AD-PSGD: atomic pairwise averages, no barrier */
int strategy_gossip(worker_t *w);         /* GoSGD: sum-weighted gossip */
int strategy_tree_easgd(worker_t *w);     /* TreeEASGD: elastic exchanges along a tree */
int strategy_mpca(worker_t *w);           /* MPCA-SGD: penalty toward an extrapolated centre, overlapped rounds */
/* 1 when the axes select EASGD or MPCA-SGD, whose master is a rank of its own, else 0. */
int decentral_extra_ranks(const train_config_t *cfg);
/* Selection: --optimization decentral with this exchange and schedule. */
static inline int decentral_axes(const train_config_t *c, exchange_t e, schedule_t s) {
  return train_axes(c, OPTIMIZATION_DECENTRAL, e, s);
}
/* EASGD's elastic coefficients given: master + sync is EASGD, not averaging. */
static inline int elastic_given(const train_config_t *c) {
  return c->decentral.alpha > 0 || c->decentral.beta > 0 || c->decentral.rho > 0;
}
/* Workers and one master rank (EASGD, MPCA-SGD). */
static inline int decentral_with_master(const train_config_t *c) { return c->workers + 1; }
/* Values of --alpha/--beta/--rho (EASGD's stable range), --neighbor-weight. */
int decentral_check(const train_config_t *cfg);
int decentral_check_world(const train_config_t *cfg); /* TreeEASGD's periods fit the tree */

/* MPCA-SGD's rules (mpca.c). The coefficients after defaults (rho 1, beta
 * 0.9, gamma 1), refused with a line naming the option outside lr rho < 1,
 * 0 < beta <= 1. The extrapolated centre: target = c + gamma (c - c_prev).
 * The penalty's gradient: grad += rho (w - target). */
int mpca_coefficients(const train_config_t *cfg, double *rho, double *beta, double *gamma);
void mpca_extrapolate(size_t n, const float *centre, const float *previous, float gamma,
                      float *target);
void mpca_penalize(size_t n, const float *w, const float *target, float rho, float *grad);

/* TreeEASGD's tree of p workers with fan-out F: rank 0 is the root, the
 * parent of rank i is (i-1)/F. Level l >= 1 of the tree is the links
 * between depths l-1 and l; --tau-up and --tau-down give a period per
 * level from the root (train.h), the last value holding for deeper ones. */
int tree_depth(int rank, int fanout);
int tree_levels(int p, int fanout);   /* the depth of the deepest rank, p - 1 */
/* The period of level l >= 1 from a list of n >= 1 values. */
int tree_period(const int *periods, int n, int level);
/* Whether `rank` sends its model after its step-th step (counted from 1
 * over the run): *up to its parent (every tau_up of its level), *down to
 * its children (every tau_down of the level below it); 0 where it has none. */
void tree_exchanges(const train_config_t *cfg, int rank, int p, int64_t step, int *up, int *down);
/* More periods than the tree of p workers has levels (more than one value
 * where it has none) is refused, naming the option. */
int tree_check_periods(const train_config_t *cfg, int p);

/* AD-PSGD's rules (adpsgd.c). The passive side of an average: reply =
 * x, then x <- (x + request)/2. The active side, once the reply to the
 * model `sent` has come: x <- x + (reply - sent)/2. */
void adpsgd_passive_average(size_t n, float *x, const float *request, float *reply);
void adpsgd_active_average(size_t n, float *x, const float *sent, const float *reply);
/* The neighbours of `rank` among p workers (its ring neighbours of the
 * other parity: odd ranks are active, even ones passive); returns 0..2. */
int adpsgd_neighbours(int rank, int p, int nb[2]);

/* Message tags of the methods (below COLL_TAG_BASE). */
enum {
  TAG_EASGD_REQUEST = 5001, TAG_EASGD_REPLY, /* asynchronous EASGD: worker <-> master */
  TAG_EASGD_CENTRE, TAG_EASGD_MODEL,         /* synchronous EASGD, compressed */
  TAG_DPSGD_LEFT = 5101, TAG_DPSGD_RIGHT,    /* D-PSGD: models to the ring neighbours */
  TAG_ADPSGD_REQUEST = 5151, TAG_ADPSGD_REPLY, TAG_ADPSGD_END, /* AD-PSGD: active <-> passive */
  TAG_GOSSIP_MODEL = 5201, TAG_GOSSIP_END,   /* GoSGD: <alpha, w>, end-of-epoch counts */
  TAG_TREE_MODEL = 5301, TAG_TREE_END,       /* TreeEASGD: models, end-of-epoch counts */
};

typedef struct decentral decentral_t;

typedef struct {
  const char *consensus;                       /* "average", "centre", "root", ... */
  int (*setup)(decentral_t *d);                /* optional: the method's state, once d is set up */
  void (*teardown)(decentral_t *d);            /* optional: called whether setup ran or not */
  int (*step)(decentral_t *d, int64_t k);      /* step k of the epoch on this rank */
  int (*before_eval)(decentral_t *d);          /* optional: drain messages, serve requests */
  int (*consensus_params)(decentral_t *d, float *out); /* the consensus, on every rank */
  int (*extra_json)(decentral_t *d, char *buf, size_t cap); /* optional; collective */
} decentral_ops_t;

struct decentral {
  worker_t *w;
  const decentral_ops_t *ops;
  int nworkers;           /* ranks 0 .. nworkers-1 train a replica */
  int is_worker;          /* 0 on a rank that holds no replica (the EASGD master) */
  allreduce_algo_t algo;  /* for decentral_weighted_sum [ring; local SGD: its own] */
  float *consensus;       /* nparams */
  float *replica;         /* this rank's params while the consensus is swapped in */
  void *method;           /* the method's own state */
  int swapped;            /* the consensus is in params for the report */
  char extra[512];        /* the report's method fields */
};

/* A method's whole run on w: `masters` ranks after the workers hold no
 * replica; `method` is its state (zeroed; d->method in the hooks). Counts
 * workers from the communicator (mpi: -np), checks them against
 * --workers, redoes the step schedule for nworkers replicas, then setup,
 * every epoch (steps, evaluation of the consensus, reports), teardown. */
int decentral_strategy(worker_t *w, const decentral_ops_t *ops, int masters, void *method);

/* This worker's gradient for step k: its slice of the step, averaged over
 * its own samples (every replica takes a mean-gradient step). *count: its
 * samples; *global: the samples of all workers in step k (may be NULL). */
int decentral_gradient(decentral_t *d, int64_t k, size_t *count, size_t *global);
/* Gradient and optimizer step. */
int decentral_local_step(decentral_t *d, int64_t k, size_t *count, size_t *global);

/* out = sum over ranks of scale * params (the EASGD master gives 0). */
int decentral_weighted_sum(decentral_t *d, float scale, float *out);
/* sums[j] = sum over ranks of mine[j], j < n <= 8, exactly in double (the
 * values travel as bytes; the sum is taken in rank order). */
int decentral_sum_doubles(decentral_t *d, const double *mine, int n, double *sums);
/* out = root's params, on every rank. */
int decentral_broadcast_params(decentral_t *d, int root, float *out);

/* Elastic coefficients after defaults (Zhang et al. 2015 notation):
 * alpha moves a worker toward its centre per exchange, beta is the
 * centre's moving-average rate over its p pullers (per exchange the centre
 * moves by beta/p). Fails with a line naming the option if unstable. */
int elastic_coefficients(const train_config_t *cfg, int p, double *alpha, double *beta);
/* DeepSpark's adaptive moving rate (--alpha-decay G,S,L): the factor on
 * alpha and beta at a worker's k-th exchange (k from 0), G^min(k/S, L). */
double elastic_decay(const train_config_t *cfg, int64_t k);

/* ---- asynchronous model messages between peers (GoSGD, TreeEASGD, AD-PSGD) --
 * One receive from any rank is always posted and is polled between steps;
 * a model goes out from a snapshot's buffers (one, or one per kind of
 * peer: TreeEASGD's compressed parent and children) to one or more peers,
 * and a new snapshot waits (serving receives meanwhile) until the previous
 * one has been taken. drain() is collective: every rank tells every other
 * how many models it sent it, then receives until it has them all, so that
 * nothing is in flight at an evaluation or at the end. A merge that fails
 * (a malformed message) makes the poll fail. */
typedef int (*mail_merge_fn)(void *ctx, int src, const void *msg);

#define MAIL_MAX_BUFS 2
typedef struct {
  comm_t *comm;
  int tag, end_tag;
  size_t bytes;           /* per message */
  void *rbuf;
  void *sbuf[MAIL_MAX_BUFS];
  int nbufs;
  comm_req_t *rreq;       /* the posted receive */
  comm_req_t **sreq;      /* sends of the current snapshot */
  int *sdst;              /* and their destinations */
  int nsreq;
  double *sent_to;        /* models sent to each rank, since the start */
  double received;        /* models received */
  double *end_counts;     /* drain: what each rank says it sent here */
  mail_merge_fn merge;
  void *ctx;
  double wait_sec;        /* time spent waiting for a snapshot buffer */
  double timeout;         /* seconds without progress before failing (--comm-timeout) */
} peer_mail_t;

/* Messages of `bytes`, snapshots of nbufs (1..MAIL_MAX_BUFS) buffers;
 * timeout: --comm-timeout (0 = 300 s) */
int mail_open(peer_mail_t *m, comm_t *c, int tag, int end_tag, size_t bytes, int nbufs,
              double timeout, mail_merge_fn merge, void *ctx);
void mail_close(peer_mail_t *m);
/* Merges every model that has arrived; *n (may be NULL) counts them. */
int mail_poll(peer_mail_t *m, int *n);
/* Tests the posted receive and the snapshot's sends, taking nothing: under
 * mpi a large message moves only while both ranks are inside MPI, so a
 * method calls this between the layers of its step (step_hooks_t). */
void mail_progress(peer_mail_t *m);
/* A step of a message-passing method: mail_poll, then the local step. */
int mail_poll_then_step(peer_mail_t *m, decentral_t *d, int64_t k);
/* The snapshot's buffers (m->sbuf), once the previous snapshot has been
 * taken by all; mail_send sends buffer `which` of it to dst. */
int mail_snapshot(peer_mail_t *m);
int mail_send(peer_mail_t *m, int dst, int which);
int mail_drain(peer_mail_t *m);
/* A model as a message: its floats, or under a lossy --compress its
 * encoding (a fixed-size codec's: the change since the receiver last
 * heard, compress/mirror.c). */
size_t mail_model_bytes(const codec_spec_t *codec, size_t nparams);
/* What mail_drain moves on a rank of nranks, each way: its count to
 * every other rank. And that as rank's task once an epoch (none on one
 * rank); STEP_FAILED when it cannot be added. */
size_t mail_drain_bytes(int nranks);
int mail_describe_drain(step_desc_t *d, int rank, int nranks);
#endif
