/* The step simulator, in the manner of FlexFlow's: the step's tasks
 * (describe_step) are the nodes of a graph whose edges are each task's
 * `after` and the previous task on its rank's thread; a task starts when
 * both have ended, and the simulation takes them in the order they become
 * ready. What each costs:
 *
 * - compute (a layer's pass, an update): its measured seconds of a core.
 *   The ranks share the machine's cores, with the other processes' b
 *   running threads (cluster.c): while n compute tasks run on c cores each
 *   advances at min(1, c / (n + b)) (the kernel's fair share), and a
 *   straggler then sleeps (slowdown - 1) times the task's
 *   time, as comm_compute_delay does, without holding a core;
 * - a message: it holds its sender's link for bytes / bandwidth from when
 *   the link is free (one message at a time, the emulator's rule), arrives
 *   latency later, and the receive ends at the later of its own readiness
 *   and the arrival (sends are eager, as isend is);
 * - a collective: it starts when every rank taking part has reached it
 *   and lasts its algorithm's alpha-beta time (coll_allreduce_cost: the
 *   messages and bytes in sequence), with the link the ranks share; a
 *   binomial tree's (broadcast, reduce, the tree allreduce) as its sends
 *   go, rank by rank (a parent's children one after the other on its
 *   link, a reduce's children each on its own); with more ranks than
 *   cores, every message of every rank a turn on the cores at the
 *   cluster's `crowd` cost, where its ranks, the threads computing and
 *   those in other collectives then outnumber the cores (crowded);
 *   allreduce:shm its barriers and its pass over the buffers;
 * - the transport's own cost (alpha per message, beta per byte: copying,
 *   summing) on top of every message's link time;
 * - a compressed exchange's codec (perf_codec_work: the encodings and
 *   decodings compress/exchange.c runs, each measured per value): seconds
 *   of a core before the rank reaches the exchange, on the cores the
 *   compute shares (the comm thread's encoding competes with the layers);
 * - link=shared, across hosts: the bytes' part of a collective's time is a
 *   flow on its hosts' links, which n flows share at 1/n each (the
 *   emulator sends one message at a time on a host's link, in turn), and
 *   the rest of its time follows.
 *
 * - an exchange (both sides send): when both sides have reached it; two
 *   computing ranks' sendrecv (D-PSGD's) both ways at once; a request and
 *   its reply (a parameter server's push and pull) the requester's message
 *   (the side on its compute thread) on its link, then the reply on the
 *   other's; a server's side of it (on its communication thread,
 *   after nothing) waits for no earlier request, as the server answers
 *   whichever comes, and its link serializes its replies; exchanges that
 *   wait for one task are under way together (D-PSGD's with both ring
 *   neighbours, a worker's pulls from every server), their sends one
 *   after the other on the rank's link: each waits for what the first of
 *   them waits for, and the task after them on their thread for them all.
 *
 * Ranks are matched by order: the k-th collective of a pattern and group
 * size on one rank meets the k-th on the others; the k-th message from a
 * to b meets the k-th from b's side. A task that runs once every `every`
 * steps, or with a chance, counts its expected share of a step.
 *
 * A steady step (perf_sim_options_t.steady_steps K: the parameter servers'
 * async and SSP schedules, where no worker waits for the others): K
 * copies of the step, each rank's threads running them one after the
 * other, read as (the end of all - the first half's end) / (K - K / 2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "perf/perf.h"

enum { N_NOW, N_CPU, N_COLL, N_SEND, N_RECV, N_PAIR, N_EXCHANGE };

typedef struct {
  int kind, rank, deps, inst; /* inst: the collective, or the matched task of a message */
  double work;                /* N_CPU: seconds of a core; others: their own duration */
  double ready, start, end, arrival;
  int done, parked, issued;   /* issued: a send's message is on its link */
  int coding;                 /* N_COLL: its codec's work (in `work`) is on the cores */
  int replying;               /* N_EXCHANGE: the reply side, until its request has arrived */
  int waiting;                /* N_EXCHANGE: ready, its partner not yet */
} node_t;

typedef struct {
  int members, arrived;
  int first;                  /* its members' keys: [first, first + members) of sim_t.keys */
  double ready, dur;
  double flow;                /* link=shared, across hosts: seconds of its hosts' links it holds
                               * (its share of dur; the rest, fixed, follows it) */
} inst_t;

typedef struct {
  const char *pattern;
  int group, kind, k, task, rank;
  int color;                  /* which of the collectives of its pattern and size (step.h) */
} coll_key_t;

typedef struct {
  const step_desc_t *d;
  const perf_cluster_t *cl;
  const perf_compute_t *pc;
  long long epoch_steps;      /* perf_sim_options_t's */
  unsigned char *cold;        /* [task] a pass from memory: its layer's parameters pushed out of
                               * the rank's share of the cache since it last touched them */
  node_t *n;
  inst_t *inst;
  int *succ, *succ_at;        /* CSR successors */
  int *run;                   /* the compute tasks on the cores */
  double *rem;
  int nrun;
  int *waiting;               /* [rank * 2 + comm thread]: its communication tasks under way */
  int polling;                /* the threads with one under way (on the cores where cl->polling) */
  int in_coll;                /* the threads inside a collective that has started */
  int *pend;                  /* tasks whose end time is fixed, not yet reached */
  int npend;
  double *link_free;          /* [rank * 2 + intra] */
  double *host_out, *host_in; /* link=shared: a host's one link each way */
  coll_key_t *keys;           /* the collectives' tasks, by instance (match_collectives) */
  int *flowing, nflowing;     /* instances holding their hosts' links now */
  double *flow_rem;           /* [instance] link seconds left */
  double *frate;              /* [k] flowing[k]'s rate until the next event */
  int *host_flows;            /* [host] instances holding its link now */
  double now;
  int ndone;
} sim_t;

static int active(const step_task_t *t) { return !t->per_epoch && !t->until; }

/* A step's share of a task: its chance, and for one every E steps, 1 / E
 * of an endless run, or the runs an epoch of S steps holds over S. */
static double share(const sim_t *s, const step_task_t *t) {
  long long S = s->epoch_steps;
  if (t->every <= 1 || S <= 0) return t->chance / t->every;
  return t->chance * (double)(S / t->every) / (double)S;
}

static int is_collective(const step_task_t *t) {
  return (t->kind == TASK_COMM && t->peer < 0 && t->group > 1) ||
         (t->kind == TASK_SYNC && t->group > 1);
}

static int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) l++;
  return l;
}

static int cross_host(const sim_t *s, int a, int b) {
  return s->cl->multihost && s->cl->host[a] != s->cl->host[b];
}

/* The link from rank a to rank b: latency, seconds per byte. */
static void link_of(const sim_t *s, int a, int b, double *lat, double *per_byte) {
  const perf_cluster_t *cl = s->cl;
  int intra = cl->multihost && !cross_host(s, a, b);
  double bw = intra ? cl->intra_bandwidth : cl->bandwidth[a];
  *lat = intra ? cl->intra_latency : cl->latency[a];
  *per_byte = bw > 0 ? 1.0 / bw : 0;
}

static int low_bit(int v, int P) { return v == 0 ? P : (v & -v); }

/* A binomial broadcast of `bytes` over P ranks, as broadcast_tree.c sends
 * (a rank's children largest offset first, one after the other on its
 * link): when the last rank has it. */
static double tree_broadcast_sec(int P, double bytes, double lat, double pb) {
  double *at = calloc((size_t)P, sizeof *at), last = 0;
  if (!at) return 0;
  for (int vr = 1; vr < P; vr++) {
    int m = low_bit(vr, P), parent = vr - m, turn = 0;
    for (int k = 1; k < low_bit(parent, P); k *= 2) turn += k > m && parent + k < P; /* before it */
    at[vr] = at[parent] + (turn + 1) * bytes * pb + lat;
    if (at[vr] > last) last = at[vr];
  }
  free(at);
  return last;
}

/* A binomial reduce: a rank sends to its parent once its children's
 * sums are in, each child on its own link: when the root has them all. */
static double tree_reduce_sec(int P, double bytes, double lat, double pb) {
  double *ready = calloc((size_t)P, sizeof *ready), root = 0;
  if (!ready) return 0;
  for (int vr = P - 1; vr >= 1; vr--) { /* children have the larger numbers */
    int parent = vr - low_bit(vr, P);
    double arrive = ready[vr] + bytes * pb + lat;
    if (arrive > ready[parent]) ready[parent] = arrive;
  }
  root = ready[0];
  free(ready);
  return root;
}

/* The transport's own cost of a collective: its operation's calibrated fit
 * (the ring's where that operation was not measured). */
static int has_crowd(const perf_cluster_t *cl) { return cl->crowd.alpha > 0 || cl->crowd.beta > 0; }

/* A message's own cost: the crowded one wherever ranks outnumber cores. */
static const perf_link_t *p2p_own(const sim_t *s) {
  return s->cl->nranks > s->cl->cores && has_crowd(s->cl) ? &s->cl->crowd : &s->cl->op[PERF_OP_P2P];
}

static const perf_link_t *coll_own(const sim_t *s, const step_task_t *t, int crowded) {
  const perf_link_t *op = s->cl->op;
  if (crowded && has_crowd(s->cl)) return &s->cl->crowd;
  const char *p = t->pattern ? t->pattern : "";
  if (!strcmp(p, "allreduce") && t->algo && !strcmp(t->algo, "rhd")) return &op[PERF_OP_RHD];
  if (!strcmp(p, "allreduce") && t->algo && !strcmp(t->algo, "tree")) return &op[PERF_OP_TREE];
  if (!strcmp(p, "allreduce")) return &op[PERF_OP_RING];
  if (!strncmp(p, "allgather", 9)) return &op[PERF_OP_ALLGATHER];
  if (!strncmp(p, "reduce_scatter", 14) || !strncmp(p, "reduce-scatter", 14)) return &op[PERF_OP_REDUCE_SCATTER];
  if (!strcmp(p, "broadcast") || !strcmp(p, "reduce")) return &op[PERF_OP_BROADCAST];
  return &s->cl->own;
}

/* allreduce_shm's pass: its two barriers (2 ceil(lg P) empty messages
 * each), and a rank's block of every rank's buffer summed and written
 * back into every buffer: `count` values read and summed, `count`
 * written -- across cores as calibrated (shm_sec, shared sync's pass),
 * else one core's sum and copy a value. */
static double shm_allreduce_sec(const sim_t *s, int P, double count, double msg) {
  double per = s->cl->shm_sec > 0 ? s->cl->shm_sec : s->pc->sum_sec + s->pc->copy_sec;
  return 4.0 * ceil_lg(P) * msg + count * per;
}

/* A collective's seconds on the link (lat, per_byte) with the transport's
 * own cost: messages in sequence on the link, and (over: the threads at
 * work outnumber the cores) the turns they take on the shared cores. */
static double coll_link_sec(const sim_t *s, const step_task_t *t, double lat, double per_byte,
                            int over) {
  const perf_link_t *own = coll_own(s, t, over);
  double pb = per_byte + (own->beta > 0 ? 1.0 / own->beta : 0);
  int P = t->group;
  if (t->kind == TASK_SYNC) return 2.0 * ceil_lg(P) * (lat + own->alpha);
  allreduce_algo_t algo;
  double S = (double)t->count * sizeof(float);
  int tree = t->count && t->algo && !strcmp(t->algo, "tree");
  if (tree && !strcmp(t->pattern, "broadcast")) return tree_broadcast_sec(P, S, lat + own->alpha, pb);
  if (tree && !strcmp(t->pattern, "reduce")) return tree_reduce_sec(P, S, lat + own->alpha, pb);
  if (tree && !strcmp(t->pattern, "allreduce"))
    return tree_reduce_sec(P, S, lat + own->alpha, pb) + tree_broadcast_sec(P, S, lat + own->alpha, pb);
  if (!strcmp(t->pattern, "allreduce") && t->count && t->algo && !strcmp(t->algo, "shm"))
    return shm_allreduce_sec(s, P, (double)t->count, lat + own->alpha);
  if (!strcmp(t->pattern, "allreduce") && t->count && t->algo &&
      allreduce_algo_parse(t->algo, &algo) == 0) {
    double m, b, mc, bc;
    coll_allreduce_cost(algo, P, 1, 0, &m, &b);
    coll_allreduce_cost(algo, P, 1, over, &mc, &bc);
    return m * lat + mc * own->alpha + b * (double)t->count * sizeof(float) * pb;
  }
  double bytes = t->sent > t->received ? t->sent : t->received, m = P - 1;
  return m * (lat + own->alpha) + bytes * pb;
}

/* ... and a traced slice where --trace is on. */
static double coll_sec(const sim_t *s, const step_task_t *t, double lat, double per_byte, int over) {
  return coll_link_sec(s, t, lat, per_byte, over) + s->cl->trace_sec;
}

static void pend_at(sim_t *s, int i, double t) {
  s->n[i].end = t;
  s->pend[s->npend++] = i;
}

/* The instance's members end at t. */
static void end_collective(sim_t *s, int k, double t) {
  const inst_t *c = &s->inst[k];
  for (int j = c->first; j < c->first + c->members; j++) pend_at(s, s->keys[j].task, t);
}

/* Calls fn(s, h, arg) once for each host among instance k's members. */
static void each_host(sim_t *s, int k, void (*fn)(sim_t *, int, void *), void *arg) {
  const inst_t *c = &s->inst[k];
  for (int j = c->first; j < c->first + c->members; j++) {
    int h = s->cl->host[s->keys[j].rank], seen = 0;
    for (int q = c->first; q < j && !seen; q++) seen = s->cl->host[s->keys[q].rank] == h;
    if (!seen) fn(s, h, arg);
  }
}

static void host_join(sim_t *s, int h, void *arg) { s->host_flows[h] += *(int *)arg; }

static void host_busiest(sim_t *s, int h, void *arg) {
  if (s->host_flows[h] > *(int *)arg) *(int *)arg = s->host_flows[h];
}

static void inst_cost(sim_t *s, int c, int over);

/* Whether a collective starting now takes turns on the cores: its ranks,
 * the threads computing and those in other collectives outnumber them. A
 * rank blocked on a message sleeps on `local` (a pipeline stage waiting
 * while the next one's tensor-parallel pair sums has its cores to
 * itself); a polling transport's waits are all at work. */
static int crowded(const sim_t *s, const inst_t *c) {
  if (s->cl->nranks <= s->cl->cores) return 0;
  if (s->cl->polling) return 1;
  return c->members + s->in_coll + s->nrun > s->cl->cores;
}

/* The collective's members have all arrived: each ends after the longest.
 * One across hosts that share a link (link=shared) first holds its hosts'
 * links, as a flow that shares each with the others on it (advance). */
static void start_collective(sim_t *s, int k) {
  inst_t *c = &s->inst[k];
  inst_cost(s, k, crowded(s, c));
  s->in_coll += c->members;
  for (int j = c->first; j < c->first + c->members; j++)
    if (!s->n[s->keys[j].task].coding) s->n[s->keys[j].task].start = c->ready; /* else from its codec */
  if (c->flow <= 0) {
    end_collective(s, k, c->ready + c->dur);
    return;
  }
  int one = 1;
  each_host(s, k, host_join, &one);
  s->flow_rem[k] = c->flow;
  s->flowing[s->nflowing++] = k;
}

/* A flow's rate: the emulator sends one message at a time on a host's
 * link, in turn, so the n collectives on its busiest link each get 1 / n. */
static double flow_rate(sim_t *s, int k) {
  int n = 1;
  each_host(s, k, host_busiest, &n);
  return 1.0 / n;
}

/* An eager send on a's link to b: the link's turn, its arrival. */
static void start_send(sim_t *s, int i) {
  node_t *n = &s->n[i];
  const step_task_t *t = &s->d->task[i];
  int a = t->rank, b = t->peer;
  double lat, pb;
  link_of(s, a, b, &lat, &pb);
  double bytes = t->sent * share(s, t), len = bytes * pb;
  double start = s->now, *lf = &s->link_free[a * 2 + !cross_host(s, a, b)];
  if (s->cl->shared_link && cross_host(s, a, b)) {
    double *out = &s->host_out[s->cl->host[a]], *in = &s->host_in[s->cl->host[b]];
    if (*out > start) start = *out;
    if (*in > start) start = *in;
    *out = *in = start + len;
  } else {
    if (*lf > start) start = *lf;
    *lf = start + len;
  }
  const perf_link_t *own = p2p_own(s);
  double finish = start + len + own->alpha + (own->beta > 0 ? bytes / own->beta : 0);
  n->start = s->now;
  n->issued = 1;
  n->arrival = finish + lat;
  pend_at(s, i, finish);
  int r = n->inst;
  if (r >= 0 && s->n[r].parked) {
    s->n[r].parked = 0;
    pend_at(s, r, s->n[r].ready > n->arrival ? s->n[r].ready : n->arrival);
  }
}

/* One message of an exchange from rank a to b, of `bytes`, from `t` on:
 * its arrival (a's link's turn, the transport's own cost, the latency). */
static double exchange_leg(sim_t *s, int a, int b, double bytes, double t, double *sent_at) {
  double lat, pb;
  link_of(s, a, b, &lat, &pb);
  double *lf = &s->link_free[a * 2 + !cross_host(s, a, b)];
  double start = *lf > t ? *lf : t;
  *lf = start + bytes * pb;
  const perf_link_t *own = p2p_own(s);
  *sent_at = *lf + own->alpha + (own->beta > 0 ? bytes / own->beta : 0);
  return *sent_at + lat;
}

/* Both sides of an exchange are ready: two computing ranks' sendrecv goes
 * both ways at once; else the request, then the reply. */
static void start_exchange(sim_t *s, int i, int j) {
  const step_task_t *ti = &s->d->task[i], *tj = &s->d->task[j];
  if (ti->thread == THREAD_COMPUTE && tj->thread == THREAD_COMPUTE) { /* a sendrecv: both at once */
    double si, sj;
    double ai = exchange_leg(s, ti->rank, tj->rank, ti->sent * share(s, ti), s->now, &si);
    double aj = exchange_leg(s, tj->rank, ti->rank, tj->sent * share(s, tj), s->now, &sj);
    s->n[i].start = s->n[j].start = s->now;
    pend_at(s, i, si > aj ? si : aj);
    pend_at(s, j, sj > ai ? sj : ai);
    return;
  }
  int req = ti->thread == THREAD_COMPUTE || (tj->thread != THREAD_COMPUTE && ti->rank < tj->rank)
                ? i : j;
  int rep = req == i ? j : i;
  const step_task_t *tq = &s->d->task[req];
  double sent;
  double arrived = exchange_leg(s, tq->rank, s->d->task[rep].rank, tq->sent * share(s, tq), s->now, &sent);
  s->n[rep].start = s->n[req].start = s->now;
  s->n[rep].replying = 1; /* its link is taken when the request is there, not before */
  pend_at(s, rep, arrived);
}

/* The request has arrived: the reply on the replier's link from now. */
static void reply(sim_t *s, int rep) {
  int req = s->n[rep].inst;
  const step_task_t *tq = &s->d->task[req], *tp = &s->d->task[rep];
  double sent, replied = exchange_leg(s, tp->rank, tq->rank, tp->sent * share(s, tp), s->now, &sent);
  s->n[rep].replying = 0;
  pend_at(s, rep, sent);
  pend_at(s, req, replied);
}

/* A collective's member has reached it: the last one starts it. */
static void arrive(sim_t *s, int i) {
  inst_t *c = &s->inst[s->n[i].inst];
  if (s->now > c->ready) c->ready = s->now;
  if (++c->arrived == c->members) start_collective(s, s->n[i].inst);
}

static int communicates(const node_t *n) { return n->kind != N_CPU && n->kind != N_NOW; }

/* A thread's communication under way (a polling transport's waits take
 * the cores' time): from when it starts to its end. */
static void wait_begins(sim_t *s, int i) {
  if (s->waiting[s->n[i].rank * 2 + (s->d->task[i].thread == THREAD_COMM)]++ == 0) s->polling++;
}

static void wait_ends(sim_t *s, int i) {
  if (--s->waiting[s->n[i].rank * 2 + (s->d->task[i].thread == THREAD_COMM)] == 0) s->polling--;
}

static void make_ready(sim_t *s, int i) {
  node_t *n = &s->n[i];
  n->ready = n->start = s->now;
  if (communicates(n) && !(n->kind == N_COLL && n->work > 0)) wait_begins(s, i);
  switch (n->kind) {
  case N_CPU:
    s->run[s->nrun] = i, s->rem[s->nrun++] = n->work;
    return;
  case N_COLL:
    if (n->work > 0) { /* its codec first, a compute task on the cores (encode, decode: see build) */
      n->coding = 1;
      s->run[s->nrun] = i, s->rem[s->nrun++] = n->work;
      return;
    }
    arrive(s, i);
    return;
  case N_SEND: start_send(s, i); return;
  case N_EXCHANGE:
    if (s->n[n->inst].waiting) {
      s->n[n->inst].waiting = 0;
      start_exchange(s, i, n->inst);
    } else n->waiting = 1;
    return;
  case N_RECV: {
    node_t *snd = n->inst >= 0 ? &s->n[n->inst] : NULL;
    if (snd && !snd->issued) {
      n->parked = 1; /* its message is not sent yet */
      return;
    }
    double at = snd ? snd->arrival : s->now + n->work;
    pend_at(s, i, at > s->now ? at : s->now);
    return;
  }
  default: pend_at(s, i, s->now + n->work); return;
  }
}

static void finish(sim_t *s, int i) {
  node_t *n = &s->n[i];
  if (communicates(n)) wait_ends(s, i);
  if (n->kind == N_COLL) s->in_coll--;
  n->done = 1;
  if (n->end < s->now) n->end = s->now;
  s->ndone++;
  for (int k = s->succ_at[i]; k < s->succ_at[i + 1]; k++)
    if (--s->n[s->succ[k]].deps == 0) make_ready(s, s->succ[k]);
}

/* A compute task has had its core time: a straggler sleeps the rest. */
static void cpu_done(sim_t *s, int i) {
  node_t *n = &s->n[i];
  if (n->kind == N_COLL) { /* its codec's work is done: now the exchange */
    wait_begins(s, i);
    arrive(s, i);
    return;
  }
  double slow = s->cl->slowdown[n->rank];
  if (slow > 1) pend_at(s, i, s->now + (slow - 1) * (s->now - n->start));
  else finish(s, i);
}

/* Advances to the next end: of a compute task at the cores' shared rate,
 * or of a task whose end is fixed. */
static int advance(sim_t *s) {
  /* the other processes' threads share the cores, and polling waits */
  double want = s->nrun + s->cl->background + (s->cl->polling ? s->polling : 0);
  double rate = s->nrun && want > s->cl->cores ? (double)s->cl->cores / want : 1;
  double t = INFINITY;
  for (int k = 0; k < s->nrun; k++)
    if (s->now + s->rem[k] / rate < t) t = s->now + s->rem[k] / rate;
  double *frate = s->frate;
  for (int k = 0; k < s->nflowing; k++) {
    frate[k] = flow_rate(s, s->flowing[k]);
    if (s->now + s->flow_rem[s->flowing[k]] / frate[k] < t) t = s->now + s->flow_rem[s->flowing[k]] / frate[k];
  }
  for (int k = 0; k < s->npend; k++)
    if (s->n[s->pend[k]].end < t) t = s->n[s->pend[k]].end;
  if (t == INFINITY) return dt_error("perf: the step's tasks wait for each other (a task graph "
                                     "with a cycle, or a message no rank sends)");
  for (int k = 0; k < s->nrun; k++) s->rem[k] -= (t - s->now) * rate;
  for (int k = 0; k < s->nflowing; k++) s->flow_rem[s->flowing[k]] -= (t - s->now) * frate[k];
  s->now = t;
  for (int k = 0; k < s->nflowing;) /* ended flows free their links; the fixed part follows */
    if (s->flow_rem[s->flowing[k]] <= 1e-12) {
      int c = s->flowing[k], minus = -1;
      s->flowing[k] = s->flowing[--s->nflowing];
      each_host(s, c, host_join, &minus);
      end_collective(s, c, s->now + s->inst[c].dur - s->inst[c].flow);
    } else k++;
  for (int k = 0; k < s->nrun;) /* ended compute tasks leave the cores */
    if (s->rem[k] <= 1e-12) {
      int i = s->run[k];
      s->run[k] = s->run[--s->nrun], s->rem[k] = s->rem[s->nrun];
      cpu_done(s, i);
    } else k++;
  for (int k = 0; k < s->npend;)
    if (s->n[s->pend[k]].end <= s->now) {
      int i = s->pend[k];
      s->pend[k] = s->pend[--s->npend];
      if (s->n[i].replying) reply(s, i);
      else finish(s, i);
    } else k++;
  return 0;
}

/* ---- building the graph ------------------------------------------------ */

static int key_cmp(const void *a, const void *b) {
  const coll_key_t *x = a, *y = b;
  int c = strcmp(x->pattern, y->pattern);
  if (c) return c;
  if (x->group != y->group) return x->group - y->group;
  if (x->kind != y->kind) return x->kind - y->kind;
  if (x->color != y->color) return x->color - y->color;
  if (x->k != y->k) return x->k - y->k;
  return x->rank - y->rank;
}

/* Instance c's link and duration: within a host unless its ranks span
 * hosts, then the slowest member's link. Across hosts that share a link,
 * the part of its time that is bandwidth (its time less its time on a
 * link of no cost per byte) is a flow on its hosts' links. */
static void inst_cost(sim_t *s, int c, int over) {
  inst_t *in = &s->inst[c];
  const coll_key_t *key = s->keys + in->first;
  int spans = 0;
  double lat = 0, pb = 0;
  for (int j = 1; j < in->members; j++) spans |= cross_host(s, key[0].rank, key[j].rank);
  for (int j = 0; j < in->members; j++) {
    int r = key[j].rank;
    double l, b;
    if (spans || !s->cl->multihost) l = s->cl->latency[r], b = s->cl->bandwidth[r];
    else l = s->cl->intra_latency, b = s->cl->intra_bandwidth;
    if (l > lat) lat = l;
    if (b > 0 && 1.0 / b > pb) pb = 1.0 / b;
  }
  for (int j = 0; j < in->members; j++) {
    const step_task_t *t = &s->d->task[key[j].task];
    double sec = coll_sec(s, t, lat, pb, over) * share(s, t);
    double flow = spans && s->cl->shared_link ? sec - coll_sec(s, t, lat, 0, over) * share(s, t) : 0;
    if (sec > in->dur) in->dur = sec;
    if (flow > in->flow) in->flow = flow;
  }
}

/* The k-th collective of a (pattern, group) on each rank: one instance. */
static int match_collectives(sim_t *s) {
  const step_desc_t *d = s->d;
  coll_key_t *keys = calloc((size_t)d->ntasks + 1, sizeof *keys);
  s->inst = calloc((size_t)d->ntasks + 1, sizeof *s->inst);
  if (!keys || !s->inst) {
    free(keys);
    return dt_error("out of memory");
  }
  int nk = 0;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (s->n[i].kind != N_COLL) continue;
    int k = 0; /* earlier ones of its kind on its rank */
    for (int j = 0; j < nk; j++)
      if (keys[j].rank == t->rank && keys[j].group == t->group && keys[j].kind == (int)t->kind &&
          keys[j].color == t->color && !strcmp(keys[j].pattern, t->pattern ? t->pattern : "sync"))
        k++;
    keys[nk++] = (coll_key_t){t->pattern ? t->pattern : "sync", t->group, (int)t->kind, k, i, t->rank,
                              t->color};
  }
  qsort(keys, (size_t)nk, sizeof *keys, key_cmp);
  s->keys = keys;
  int ninst = -1;
  for (int j = 0; j < nk; j++) {
    if (j == 0 || key_cmp(&(coll_key_t){keys[j].pattern, keys[j].group, keys[j].kind, keys[j].k, 0, 0,
                                        keys[j].color},
                          &(coll_key_t){keys[j - 1].pattern, keys[j - 1].group, keys[j - 1].kind,
                                   keys[j - 1].k, 0, 0, keys[j - 1].color}))
      s->inst[++ninst].first = j;
    s->n[keys[j].task].inst = ninst;
    s->inst[ninst].members++;
  }
  s->flow_rem = calloc((size_t)ninst + 2, sizeof *s->flow_rem);
  s->flowing = calloc((size_t)ninst + 2, sizeof *s->flowing);
  s->frate = calloc((size_t)ninst + 2, sizeof *s->frate);
  if (!s->flow_rem || !s->flowing || !s->frate) return dt_error("out of memory");
  return 0;
}

/* The k-th exchange of a with b meets the k-th of b with a. */
static void match_exchanges(sim_t *s) {
  const step_desc_t *d = s->d;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (s->n[i].kind != N_PAIR || s->n[i].inst >= 0 || t->rank > t->peer) continue;
    int k = 0;
    for (int j = 0; j < i; j++)
      if (s->n[j].kind == N_PAIR && d->task[j].rank == t->rank && d->task[j].peer == t->peer) k++;
    for (int j = 0; j < d->ntasks; j++) {
      const step_task_t *u = &d->task[j];
      if (s->n[j].kind != N_PAIR || u->rank != t->peer || u->peer != t->rank) continue;
      if (k-- == 0) {
        s->n[i].inst = j, s->n[j].inst = i;
        s->n[i].kind = s->n[j].kind = N_EXCHANGE;
        break;
      }
    }
  }
}

/* The k-th receive at b from a meets the (k - lag)-th message from a to b
 * (lag: a stream's messages that cross steps, sent a message earlier);
 * one whose message was sent before the steps simulated is there at the
 * start (an asynchronous pipeline's first gradient in steady state). */
static void match_messages(sim_t *s) {
  const step_desc_t *d = s->d;
  for (int j = d->ntasks - 1; j >= 0; j--) { /* from the last: an earlier one is still N_RECV */
    if (s->n[j].kind != N_RECV) continue;
    const step_task_t *u = &d->task[j];
    int k = -u->lag;
    for (int i = 0; i < j; i++)
      if (s->n[i].kind == N_RECV && d->task[i].rank == u->rank && d->task[i].peer == u->peer) k++;
    if (k < 0) {
      s->n[j].kind = N_NOW, s->n[j].work = 0;
      continue;
    }
    for (int i = 0; i < d->ntasks; i++) {
      const step_task_t *t = &d->task[i];
      if (s->n[i].kind != N_SEND || t->rank != u->peer || t->peer != u->rank) continue;
      if (k-- == 0) {
        s->n[i].inst = j, s->n[j].inst = i;
        break;
      }
    }
  }
}

/* A message task's own seconds where it has no partner: both ways on its link. */
static double lone_message_sec(const sim_t *s, const step_task_t *t) {
  double lat, pb;
  link_of(s, t->rank, t->peer, &lat, &pb);
  const perf_link_t *own = p2p_own(s);
  double bytes = t->sent > t->received ? t->sent : t->received;
  return (lat + own->alpha + bytes * (pb + (own->beta > 0 ? 1.0 / own->beta : 0))) * share(s, t);
}

static double cpu_work(const step_task_t *t, const perf_compute_t *pc, const perf_cluster_t *cl,
                       int nranks, int shared_update, int cold) {
  switch (t->kind) {
  case TASK_FORWARD:
  case TASK_BACKWARD: {
    double sec = perf_layer_sec_at(pc, t->layer, t->samples, t->kind == TASK_BACKWARD, cold);
    size_t whole = pc->params && t->layer >= 0 && t->layer < pc->nlayers ? pc->params[t->layer] : 0;
    /* a tensor-parallel rank's block of the layer: its share of the products */
    return whole > 0 && t->params < whole ? sec * (double)t->params / (double)whole : sec;
  }
  case TASK_UPDATE:
    if (shared_update) /* its block of every rank's gradients summed, pushed to every rank:
                        * across cores as calibrated, else one core's sum and copy */
      return (double)t->params * (pc->update_sec + nranks * (cl->shm_sec > 0 ? cl->shm_sec
                                                             : pc->sum_sec + pc->copy_sec));
    return (double)t->params * pc->update_sec;
  default: return (double)t->params * 2 * pc->copy_sec; /* a local mix of models */
  }
}

/* Task i's node: its kind and its own work. */
static void build_node(sim_t *s, const perf_compute_t *pc, int shared_update, int i) {
  const step_task_t *t = &s->d->task[i];
  node_t *n = &s->n[i];
  n->rank = t->rank, n->inst = -1;
  if (!active(t)) n->kind = N_NOW;
  else if (t->kind != TASK_COMM && t->kind != TASK_SYNC) n->kind = N_CPU;
  else if (is_collective(t)) n->kind = N_COLL;
  else if (t->kind == TASK_COMM && t->peer >= 0 && t->sent > 0 && t->received == 0) n->kind = N_SEND;
  else if (t->kind == TASK_COMM && t->peer >= 0 && t->received > 0 && t->sent == 0) n->kind = N_RECV;
  else if (t->kind == TASK_COMM && t->peer >= 0) n->kind = N_PAIR;
  else n->kind = t->kind == TASK_SYNC ? N_CPU : N_NOW;
  if (n->kind == N_CPU) /* a traced slice each, where --trace is on */
    n->work = (cpu_work(t, pc, s->cl, s->d->nranks, shared_update, s->cold[i]) +
               s->cl->trace_sec) * share(s, t);
  if (n->kind == N_PAIR) n->work = lone_message_sec(s, t);
  /* a compressed exchange's encoding and decoding: seconds of a core,
   * charged before it (the sum is what holds the step; the cores are
   * shared with the compute as the comm thread shares them) */
  if (n->kind == N_COLL && t->coded) n->work = perf_codec_work(pc, (double)t->coded, t->group) * share(s, t);
}

/* The graph's edges, growing. */
typedef struct {
  int (*e)[2]; /* [k]: {from, to} */
  int n, cap;
} edges_t;

static int edge_add(edges_t *g, int from, int to) {
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 256;
    int(*grown)[2] = realloc(g->e, (size_t)cap * sizeof *grown);
    if (!grown) return dt_error("out of memory");
    g->e = grown, g->cap = cap;
  }
  g->e[g->n][0] = from, g->e[g->n][1] = to;
  g->n++;
  return 0;
}

/* Edges into i from the group of tasks its thread ran last, the one that
 * ends at p (p, and the ones before it that p goes together with), but
 * from `after` once only. */
static int edges_from_group(edges_t *g, const int *prev, const char *together, int p, int after,
                            int i) {
  for (int q = p; q >= 0; q = together[q] ? prev[q] : -1)
    if (q != after) DT_TRY(edge_add(g, q, i));
  return 0;
}

/* The edges: each task's `after`, and its rank's thread's previous task;
 * but a server's handler (a pair on its communication thread, after
 * nothing) waits for no earlier one, as it answers whichever request
 * comes; and exchanges after one task go together (D-PSGD's two
 * neighbours; a worker's pulls from every server, at the step's start):
 * each waits for what the first of them waits for, and the task after
 * them on their thread for all of them (a worker computes once it has
 * every server's part, and starts its next step once every push is
 * answered). */
static int build_edges(sim_t *s, edges_t *g) {
  const step_desc_t *d = s->d;
  int N = d->ntasks, R = d->nranks, rc = 0;
  int *last = malloc((size_t)R * 2 * sizeof *last), *prev = malloc((size_t)N * sizeof *prev + 1);
  int *head = malloc((size_t)N * sizeof *head + 1);
  char *together = calloc((size_t)N + 1, 1);
  if (!last || !prev || !head || !together) rc = dt_error("out of memory");
  for (int k = 0; rc == 0 && k < R * 2; k++) last[k] = -1;
  for (int i = 0; rc == 0 && i < N; i++) {
    const step_task_t *t = &d->task[i];
    const node_t *n = &s->n[i];
    int *lt = &last[t->rank * 2 + (t->thread == THREAD_COMM)], p = *lt;
    int after = t->after >= 0 && t->after < i ? t->after : -1;
    prev[i] = p, head[i] = i, *lt = i;
    if (after >= 0) rc = edge_add(g, after, i);
    if (rc != 0 || p < 0 || (n->kind == N_PAIR && t->thread == THREAD_COMM && t->after < 0))
      continue; /* a server's handler: it answers whichever request comes */
    together[i] = n->kind == N_PAIR && s->n[p].kind == N_PAIR &&
                  (t->after >= 0 || t->thread == THREAD_COMPUTE) && d->task[p].after == t->after;
    if (together[i]) head[i] = head[p];
    int from = prev[head[i]]; /* the group before i's own */
    if (from >= 0) rc = edges_from_group(g, prev, together, from, after, i);
  }
  free(last), free(prev), free(head), free(together);
  return rc;
}

/* The bytes of its layer's parameters a compute task touches: a forward
 * reads the weights, a backward the weights and the gradients (adding to
 * them), an update the parameters, gradients and optimizer state of the
 * range it steps. */
static double task_bytes(const step_task_t *t, const perf_compute_t *pc) {
  double n = t->params > 0 ? (double)t->params
             : pc->params && t->layer >= 0 && t->layer < pc->nlayers ? (double)pc->params[t->layer] : 0;
  if (t->kind == TASK_FORWARD) return 4.0 * n;
  if (t->kind == TASK_BACKWARD) return 8.0 * n;
  return t->kind == TASK_UPDATE ? 4.0 * (2.0 + pc->state_floats) * n : 0;
}

static int is_pass(const step_task_t *t) { return t->kind == TASK_FORWARD || t->kind == TASK_BACKWARD; }

/* Which passes run from memory: a pass whose layer's parameters were
 * pushed out of the rank's share of the last-level cache (cl->cache_ranks
 * ranks split it) since the rank last touched them -- an LRU cache's
 * reuse distance: the distinct bytes the rank's own compute touched in
 * between (each layer's weights once, its gradients once, an update's
 * whole range), walking back through its tasks in the order it runs them
 * and round into the step before (the steady state). A pipeline stage of
 * the deep model (5.7 M parameters) streams its weights between two
 * micro-batches' forwards, an interleaved chunk of it (2.9 M) may not; an
 * mlp replica (0.5 M, 6.4 MB with momentum) keeps them from step to step. */
static int cold_passes(sim_t *s, const perf_compute_t *pc) {
  const step_desc_t *d = s->d;
  int N = d->ntasks, R = d->nranks, L = pc->nlayers > 0 ? pc->nlayers : 1;
  s->cold = calloc((size_t)N + 1, 1);
  int *seq = malloc(((size_t)N + 1) * sizeof *seq);
  unsigned char *seen = malloc(2 * (size_t)L + 1); /* [layer * 2 + grads] */
  if (!s->cold || !seq || !seen) {
    free(seq), free(seen);
    return dt_error("out of memory");
  }
  int sharing = s->cl->cache_ranks > 0 ? s->cl->cache_ranks : R;
  double share = pc->cache_bytes > 0 ? (double)pc->cache_bytes / sharing : 0;
  for (int r = 0; r < R && pc->fwd_cold && share > 0; r++) {
    int n = 0; /* the rank's compute tasks, in the order its thread runs them */
    for (int i = 0; i < N; i++)
      if (d->task[i].rank == r && (is_pass(&d->task[i]) || d->task[i].kind == TASK_UPDATE)) seq[n++] = i;
    for (int k = 0; k < n; k++) {
      const step_task_t *t = &d->task[seq[k]];
      if (!is_pass(t) || t->layer < 0 || t->layer >= L) continue;
      memset(seen, 0, 2 * (size_t)L);
      double dist = task_bytes(t, pc);
      for (int back = 1; back < n && dist <= share; back++) {
        const step_task_t *u = &d->task[seq[(k - back + n) % n]];
        if (u->kind == TASK_UPDATE) { /* it swept this layer too, somewhere in its range */
          dist += task_bytes(u, pc) / 2;
          break;
        }
        if (u->layer == t->layer) break;
        if (u->layer < 0 || u->layer >= L) continue;
        int g = u->kind == TASK_BACKWARD;
        if (!seen[u->layer * 2]) seen[u->layer * 2] = 1, dist += task_bytes(u, pc) / (g ? 2 : 1);
        if (g && !seen[u->layer * 2 + 1]) seen[u->layer * 2 + 1] = 1, dist += task_bytes(u, pc) / 2;
      }
      s->cold[seq[k]] = dist > share;
    }
  }
  free(seq), free(seen);
  return 0;
}

static int build(sim_t *s, const perf_compute_t *pc, int shared_update) {
  const step_desc_t *d = s->d;
  int N = d->ntasks;
  DT_TRY(cold_passes(s, pc));
  for (int i = 0; i < N; i++) build_node(s, pc, shared_update, i);
  edges_t g = {0};
  int rc = build_edges(s, &g);
  s->succ_at = calloc((size_t)N + 2, sizeof *s->succ_at);
  s->succ = calloc((size_t)g.n + 1, sizeof *s->succ);
  if (rc == 0 && (!s->succ_at || !s->succ)) rc = dt_error("out of memory");
  for (int k = 0; rc == 0 && k < g.n; k++) s->succ_at[g.e[k][0] + 1]++, s->n[g.e[k][1]].deps++;
  for (int i = 0; rc == 0 && i < N; i++) s->succ_at[i + 1] += s->succ_at[i];
  int *at = rc == 0 ? malloc((size_t)N * sizeof *at + 1) : NULL;
  if (rc == 0 && !at) rc = dt_error("out of memory");
  for (int i = 0; rc == 0 && i < N; i++) at[i] = s->succ_at[i];
  for (int k = 0; rc == 0 && k < g.n; k++) s->succ[at[g.e[k][0]]++] = g.e[k][1];
  free(at), free(g.e);
  if (rc == 0) rc = match_collectives(s);
  if (rc == 0) match_messages(s), match_exchanges(s);
  for (int i = 0; rc == 0 && i < N; i++) /* a message with no partner takes its own time */
    if ((s->n[i].kind == N_SEND || s->n[i].kind == N_RECV) && s->n[i].inst < 0)
      s->n[i].kind = N_PAIR, s->n[i].work = lone_message_sec(s, &d->task[i]);
  return rc;
}

static void sim_free(sim_t *s) {
  free(s->n), free(s->inst), free(s->succ), free(s->succ_at), free(s->run), free(s->rem);
  free(s->pend), free(s->link_free), free(s->host_out), free(s->host_in), free(s->waiting);
  free(s->keys), free(s->flow_rem), free(s->flowing), free(s->frate), free(s->host_flows);
  free(s->cold);
}

typedef struct { double start, end; } span_t;

static int span_cmp(const void *a, const void *b) {
  double x = ((const span_t *)a)->start, y = ((const span_t *)b)->start;
  return (x > y) - (x < y);
}

/* The time covered by n spans (sorted here): exchanges under way together
 * (a worker's pushes to two servers) count once. */
static double covered(span_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, span_cmp);
  double sum = 0, from = 0, to = -INFINITY;
  for (int k = 0; k < n; k++) {
    if (v[k].start > to) {
      if (to > from) sum += to - from;
      from = v[k].start, to = v[k].end;
    } else if (v[k].end > to) to = v[k].end;
  }
  return to > from ? sum + to - from : sum;
}

/* The step's end; rank 0's compute, and the time its communication (all,
 * and on its compute thread: exposed) was under way. spans: room for
 * 2 ntasks. */
static void summarize(const sim_t *s, perf_sim_t *out, span_t *spans) {
  *out = (perf_sim_t){0};
  int ncomm = 0, nexposed = 0;
  span_t *exposed = spans + s->d->ntasks;
  for (int i = 0; i < s->d->ntasks; i++) {
    const node_t *n = &s->n[i];
    if (n->end > out->step_sec) out->step_sec = n->end;
    if (n->rank != 0) continue;
    if (n->kind == N_CPU) out->compute_sec += n->end - n->start;
    else if (n->kind != N_NOW) {
      spans[ncomm++] = (span_t){n->start, n->end};
      if (s->d->task[i].thread == THREAD_COMPUTE) exposed[nexposed++] = (span_t){n->start, n->end};
    }
  }
  out->comm_sec = covered(spans, ncomm), out->exposed_sec = covered(exposed, nexposed);
}

/* Simulates d; *first_end: when the last of its tasks [0, first) ended. */
static int run(const step_desc_t *d, const perf_compute_t *pc, const perf_cluster_t *cl,
               const perf_sim_options_t *o, int first, perf_sim_t *out, double *first_end) {
  if (cl->nranks < d->nranks)
    return dt_error("perf: the cluster has %d ranks, the step %d", cl->nranks, d->nranks);
  size_t N = (size_t)d->ntasks + 1, R = (size_t)d->nranks;
  sim_t s = {.d = d, .cl = cl, .pc = pc, .epoch_steps = o->epoch_steps};
  s.n = calloc(N, sizeof *s.n);
  s.run = calloc(N, sizeof *s.run), s.rem = calloc(N, sizeof *s.rem);
  s.pend = calloc(N, sizeof *s.pend);
  s.link_free = calloc(R * 2, sizeof *s.link_free);
  s.host_out = calloc(R, sizeof *s.host_out), s.host_in = calloc(R, sizeof *s.host_in);
  s.host_flows = calloc(R, sizeof *s.host_flows);
  s.waiting = calloc(R * 2, sizeof *s.waiting);
  int rc = s.n && s.run && s.rem && s.pend && s.link_free && s.host_out && s.host_in && s.host_flows &&
                   s.waiting
               ? build(&s, pc, o->shared_update)
               : dt_error("out of memory");
  for (int i = 0; rc == 0 && i < d->ntasks; i++)
    if (s.n[i].deps == 0) make_ready(&s, i);
  while (rc == 0 && s.ndone < d->ntasks) rc = advance(&s);
  span_t *spans = rc == 0 ? malloc(2 * N * sizeof *spans) : NULL;
  if (rc == 0 && !spans) rc = dt_error("out of memory");
  if (rc == 0) summarize(&s, out, spans);
  free(spans);
  *first_end = 0;
  /* the first half's end on the workers' compute threads: a server's
   * side (its communication thread) may answer a later copy's request */
  for (int i = 0; rc == 0 && i < first && i < d->ntasks; i++)
    if (d->task[i].thread == THREAD_COMPUTE && s.n[i].end > *first_end) *first_end = s.n[i].end;
  sim_free(&s);
  return rc;
}

/* d's tasks K times over, copy k's `after` moved to copy k's own tasks:
 * each rank's thread runs its copies one after the other. */
static int repeat_step(const step_desc_t *d, int K, step_desc_t *out) {
  step_desc_init(out, d->nranks);
  out->topo = d->topo;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < d->ntasks; i++) {
      step_task_t t = d->task[i];
      if (t.after >= 0) t.after += k * d->ntasks;
      if (step_add(out, t) == STEP_FAILED) return -1;
    }
  return 0;
}

int perf_simulate_with(const step_desc_t *d, const perf_compute_t *pc, const perf_cluster_t *cl,
                       const perf_sim_options_t *o, perf_sim_t *out) {
  double first_end;
  int K = o->steady_steps;
  if (K <= 1) return run(d, pc, cl, o, 0, out, &first_end);
  step_desc_t many;
  int rc = repeat_step(d, K, &many);
  if (rc == 0) rc = run(&many, pc, cl, o, (K / 2) * d->ntasks, out, &first_end);
  many.topo = (step_topology_t){0}; /* d's, not its own */
  step_desc_free(&many);
  if (rc != 0) return rc;
  /* every compute-thread task of a copy waits for its rank's thread's
   * tasks of the copy before (build_edges: the thread's order, exchanges
   * that go together waiting as their first does), so the second half
   * ends after the first by its copies' time: none only where the step
   * takes none */
  out->step_sec = out->step_sec > first_end ? (out->step_sec - first_end) / (K - K / 2) : 0;
  out->compute_sec /= K, out->comm_sec /= K, out->exposed_sec /= K;
  /* the window's edge: a copy's first tasks may start before the copy
   * before has ended on another rank, so the window can come out a hair
   * shorter than rank 0's mean compute; in a steady state it is not */
  if (out->compute_sec > out->step_sec) out->step_sec = out->compute_sec;
  return 0;
}

int perf_simulate(const step_desc_t *d, const perf_compute_t *pc, const perf_cluster_t *cl,
                  int shared_update, perf_sim_t *out) {
  perf_sim_options_t o = {.shared_update = shared_update};
  return perf_simulate_with(d, pc, cl, &o, out);
}
