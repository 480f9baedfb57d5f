/* step: building and reading a step's task graph (step.h). */
#include <stdlib.h>

#include "dtrain/coll.h"
#include "dtrain/nn.h"
#include "strategy/step.h"

void step_desc_init(step_desc_t *d, int nranks) { *d = (step_desc_t){.nranks = nranks}; }

void step_desc_free(step_desc_t *d) {
  free(d->task);
  free(d->topo.host);
  *d = (step_desc_t){0};
}

/* coll_ctx.c's link and segment, comm/local.c's and comm/mpi.c's hosts
 * and link, for this machine. */
int step_desc_set_topology(step_desc_t *d, const comm_net_t *net, int mpi, int cores) {
  step_topology_t *t = &d->topo;
  int P = d->nranks;
  free(t->host);
  t->host = calloc((size_t)P + 1, sizeof *t->host);
  if (!t->host) return dt_error("out of memory");
  if (net && net->hosts > 1) DT_TRY(comm_net_hosts(net, P, t->host));
  t->nhosts = 1;
  for (int r = 0; r < P; r++)
    if (t->host[r] + 1 > t->nhosts) t->nhosts = t->host[r] + 1;
  t->oversubscribed = P > cores;
  if (mpi) { /* comm/mpi.c's estimate, 1 MiB segments (coll_ctx.c) */
    t->latency = t->oversubscribed ? 10e-6 : 3e-6, t->bandwidth = 5e9;
    t->seg = (1 << 20) / sizeof(float);
  } else {
    comm_net_link_estimate(net, P, t->oversubscribed, &t->latency, &t->bandwidth);
    t->seg = (size_t)-1; /* whole blocks: the receiver reads the sender's buffer */
  }
  return 0;
}

int step_add(step_desc_t *d, step_task_t t) {
  if (d->ntasks == d->cap) {
    int cap = d->cap ? 2 * d->cap : 64;
    step_task_t *grown = realloc(d->task, (size_t)cap * sizeof *grown);
    if (!grown) {
      dt_error("out of memory");
      return STEP_FAILED;
    }
    d->task = grown, d->cap = cap;
  }
  if (t.every < 1) t.every = 1;
  if (t.chance <= 0) t.chance = 1;
  d->task[d->ntasks] = t;
  return d->ntasks++;
}

static void add_task_bytes(step_bytes_t *b, const step_task_t *t, double times) {
  times *= t->chance;
  b->expected |= t->expected;
  b->sent += times * t->sent, b->received += times * t->received;
  b->sent_min += times * (t->bounded ? t->sent_min : t->sent);
  b->received_min += times * (t->bounded ? t->received_min : t->received);
}

void step_rank_bytes(const step_desc_t *d, int rank, step_bytes_t *out) {
  *out = (step_bytes_t){0};
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (t->rank == rank && t->kind == TASK_COMM && !t->until && !t->per_epoch)
      add_task_bytes(out, t, 1.0 / t->every);
  }
}

/* The steps k of [0, steps) in t's range with (k + 1) % every == 0. */
static int64_t task_runs(const step_task_t *t, int64_t steps) {
  int64_t end = t->until && t->until < steps ? t->until : steps;
  return end > t->from ? end / t->every - t->from / t->every : 0;
}

void step_rank_bytes_over(const step_desc_t *d, int rank, int64_t steps, step_bytes_t *out) {
  *out = (step_bytes_t){0};
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (t->rank == rank && t->kind == TASK_COMM && !t->per_epoch)
      add_task_bytes(out, t, (double)task_runs(t, steps));
  }
}

void step_rank_epoch_bytes(const step_desc_t *d, int rank, double *sent, double *received) {
  *sent = *received = 0;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (t->rank != rank || t->kind != TASK_COMM || !t->per_epoch) continue;
    *sent += t->sent;
    *received += t->received;
  }
}

int64_t step_warmup_steps(const step_desc_t *d) {
  int64_t w = 0;
  for (int i = 0; i < d->ntasks; i++)
    if (d->task[i].until > w) w = d->task[i].until;
  return w;
}

int step_exact(const step_desc_t *d) {
  for (int i = 0; i < d->ntasks; i++)
    if (d->task[i].bounded) return 0;
  return 1;
}

void step_color_since(step_desc_t *d, int from, int color) {
  for (int i = from; color && i < d->ntasks; i++)
    if (d->task[i].kind == TASK_COMM && d->task[i].peer < 0 && !d->task[i].color) d->task[i].color = color;
}

static int add_group_sum(step_desc_t *d, int rank, const step_group_t *grp, layer_sum_t s,
                         int after);

/* One collective a layer calls itself, over its group in g, in its group's color. */
static int add_layer_sum(step_desc_t *d, int rank, const step_groups_t *g, layer_sum_t s,
                         int after) {
  const step_group_t *grp = s.bn ? &g->bn : &g->tp;
  int from = d->ntasks, last = add_group_sum(d, rank, grp, s, after);
  if (last != STEP_FAILED) step_color_since(d, from, grp->color);
  return last;
}

static int add_group_sum(step_desc_t *d, int rank, const step_group_t *grp, layer_sum_t s,
                         int after) {
  if (s.halo) /* a message each way with a neighbour; tp ranks are adjacent world ranks */
    return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = "halo",
                                     .peer = rank - grp->rank + s.peer, .group = 2,
                                     .sent = (double)s.count * sizeof(float),
                                     .received = (double)s.received * sizeof(float),
                                     .after = after});
  if (s.gather)
    return step_add_ring_half(d, rank, grp->rank, grp->size, 1, s.count, after, THREAD_COMPUTE);
  return step_add_allreduce(d, rank, grp->rank, grp->size, grp->stride, grp->algo, s.count, after,
                            THREAD_COMPUTE, 1);
}

int step_add_layer(step_desc_t *d, const model_t *m, int rank, int i, int samples, int backward,
                   int first, int range_dx, const step_groups_t *g, int after, int *compute) {
  int prev = step_add(d, (step_task_t){backward ? TASK_BACKWARD : TASK_FORWARD, rank, i,
                                       m->layers[i].param_len, samples, .peer = -1, .after = after});
  if (compute) *compute = prev;
  layer_sum_t sum[LAYER_MAX_SUMS];
  int n = g ? model_layer_sums(m, i, samples, backward, first, range_dx, sum) : 0;
  for (int k = 0; k < n && prev != STEP_FAILED; k++) prev = add_layer_sum(d, rank, g, sum[k], prev);
  return prev;
}

int step_add_passes_summed(step_desc_t *d, const model_t *m, int rank, int samples,
                           const step_groups_t *g, int *bwd) {
  int prev = -1;
  for (int i = 0; i < m->nlayers && prev != STEP_FAILED; i++)
    prev = step_add_layer(d, m, rank, i, samples, 0, 0, 0, g, prev, NULL);
  for (int i = m->nlayers - 1; i >= 0 && prev != STEP_FAILED; i--)
    prev = step_add_layer(d, m, rank, i, samples, 1, 0, 0, g, prev, bwd ? &bwd[i] : NULL);
  return prev;
}

int step_add_passes(step_desc_t *d, const model_t *m, int rank, int samples, int *bwd) {
  return step_add_passes_summed(d, m, rank, samples, NULL, bwd);
}

int step_add_local_step(step_desc_t *d, const model_t *m, int rank, int samples) {
  int prev = step_add_passes(d, m, rank, samples, NULL);
  if (prev == STEP_FAILED) return prev;
  return step_add(d, (step_task_t){TASK_UPDATE, rank, -1, m->nparams, samples, .peer = -1,
                                   .after = prev});
}

int step_allreduce_algo(int algo, int P, int *out) {
  *out = algo == ALLREDUCE_AUTO && P <= 2 ? ALLREDUCE_RHD : algo;
  return 0;
}

int step_add_clip_sums(step_desc_t *d, int rank, int tp_rank, int T, int stage, int P, int after) {
  if (T > 1) after = step_add_allreduce(d, rank, tp_rank, T, 1, ALLREDUCE_RING, 1, after, THREAD_COMPUTE, 1);
  if (P > 1 && after != STEP_FAILED)
    after = step_add_allreduce(d, rank, stage, P, 0, ALLREDUCE_RING, 1, after, THREAD_COMPUTE, 1);
  return after;
}

static int flat_allreduce(step_desc_t *d, int rank, int group_rank, int group, int algo,
                          size_t count, int after, step_thread_t thread, int every, int color) {
  size_t sent, received;
  if (coll_allreduce_bytes((allreduce_algo_t)algo, group, group_rank, count, &sent, &received) != 0)
    return STEP_FAILED;
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = "allreduce",
                                   .algo = allreduce_algo_name((allreduce_algo_t)algo),
                                   .peer = -1, .group = group, .sent = (double)sent,
                                   .received = (double)received, .count = count,
                                   .thread = thread, .after = after, .every = every,
                                   .color = color});
}

/* A group of the step's ranks: `size` world ranks `stride` apart from
 * `first`, and their hosts numbered 0, 1, ... in the order of each one's
 * first member (comm_hosts_set, as the run's communicator has them). */
typedef struct {
  int first, stride, size, nhosts;
  int *host;                  /* [size], or NULL: no hosts known */
} step_members_t;

static int members_of(const step_desc_t *d, int rank, int group_rank, int group, int stride,
                      step_members_t *g) {
  *g = (step_members_t){rank - group_rank * (stride > 0 ? stride : 1), stride > 0 ? stride : 1, group, 1, NULL};
  if (!d->topo.host) return 0;
  int *label = malloc((size_t)d->topo.nhosts * sizeof *label);
  g->host = malloc((size_t)group * sizeof *g->host);
  if (!label || !g->host) {
    free(label);
    return dt_error("out of memory");
  }
  for (int h = 0; h < d->topo.nhosts; h++) label[h] = -1;
  g->nhosts = 0;
  for (int k = 0; k < group; k++) {
    int h = d->topo.host[g->first + k * g->stride];
    if (label[h] < 0) label[h] = g->nhosts++;
    g->host[k] = label[h];
  }
  free(label);
  return 0;
}

static int member_rank(const step_members_t *g, int k) { return g->first + k * g->stride; }

/* hier's phases' colors: 1 + a host, 1 + H + an index in a group of every
 * rank of the step; in a smaller group, apart for each group (its first
 * member), where several groups sum at once (the replicas of each tp rank) */
static int hier_color_base(const step_desc_t *d, const step_members_t *g) {
  return g->size == d->nranks ? 0 : (3 << 16) + g->first * 1024;
}

/* allreduce_choose: hier with more than one host and at least two ranks
 * on each; otherwise the cheapest flat algorithm for this size. */
static int decide_auto(const step_desc_t *d, const step_members_t *g, size_t count, int *algo) {
  const step_topology_t *t = &d->topo;
  if (!g->host)
    return dt_error("--exchange allreduce:auto over %d ranks: the algorithm is picked from the "
                    "hosts and the link, and this description was given neither", g->size);
  int worth = g->nhosts > 1;
  for (int h = 0; worth && h < g->nhosts; h++) {
    int n = 0;
    for (int k = 0; k < g->size; k++) n += g->host[k] == h;
    worth = n >= 2;
  }
  *algo = worth ? ALLREDUCE_HIER
                : (int)coll_allreduce_pick(g->size, count, t->seg, t->oversubscribed, t->latency,
                                           t->bandwidth);
  return 0;
}

static int set_color(step_desc_t *d, int task, int color, int every) {
  if (task >= 0) d->task[task].color = color, d->task[task].every = every;
  return task;
}

static int hier_message(step_desc_t *d, int rank, int peer, int send, size_t count, int after,
                        step_thread_t thread, int every) {
  double bytes = (double)count * sizeof(float);
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = send ? "send" : "recv",
                                   .peer = peer, .group = 2, .sent = send ? bytes : 0,
                                   .received = send ? 0 : bytes, .thread = thread, .after = after,
                                   .every = every});
}

/* allreduce_hier's phases for one member of a group (on one host hier
 * takes groups of ceil(sqrt P) consecutive members as its hosts). */
static int hier_allreduce(step_desc_t *d, int rank, int group_rank, const step_members_t *g,
                          size_t count, int after, step_thread_t thread, int every) {
  const step_topology_t *t = &d->topo;
  int group = g->size, base = hier_color_base(d, g);
  int *host = malloc((size_t)group * sizeof *host), *folded = malloc((size_t)group * sizeof *folded);
  hier_place_t pl;
  int prev = host && folded ? after : (dt_error("out of memory"), STEP_FAILED);
  if (prev != STEP_FAILED) {
    coll_hier_hosts(group, g->nhosts > 1 ? g->host : NULL, g->nhosts, 0, host);
    if (coll_hier_place(group, host, group_rank, folded, &pl) != 0) prev = STEP_FAILED;
  }
  if (prev != STEP_FAILED && pl.partner >= 0) { /* folded: its vector there and back */
    int partner = member_rank(g, pl.partner);
    prev = hier_message(d, rank, partner, 1, count, prev, thread, every);
    if (prev != STEP_FAILED) prev = hier_message(d, rank, partner, 0, count, prev, thread, every);
  } else if (prev != STEP_FAILED) {
    int m = pl.per_host, H = pl.hosts;
    for (int k = 0; k < pl.nfolded && prev != STEP_FAILED; k++)
      prev = hier_message(d, rank, member_rank(g, folded[k]), 0, count, prev, thread, every);
    if (prev != STEP_FAILED && m > 1)
      prev = set_color(d, step_add_ring_half(d, rank, pl.local, m, 0, count, prev, thread),
                       base + 1 + pl.host, every);
    size_t off, len;
    coll_block(count, m, pl.local, &off, &len);
    if (prev != STEP_FAILED && H > 1 && len > 0) {
      int inter = (int)coll_allreduce_pick(H, len, t->seg, t->oversubscribed, t->latency, t->bandwidth);
      prev = flat_allreduce(d, rank, pl.host, H, inter, len, prev, thread, every, base + 1 + H + pl.local);
    }
    if (prev != STEP_FAILED && m > 1)
      prev = set_color(d, step_add_ring_half(d, rank, pl.local, m, 1, count, prev, thread),
                       base + 1 + pl.host, every);
    for (int k = 0; k < pl.nfolded && prev != STEP_FAILED; k++)
      prev = hier_message(d, rank, member_rank(g, folded[k]), 1, count, prev, thread, every);
  }
  free(host), free(folded);
  return prev;
}

int step_add_allreduce(step_desc_t *d, int rank, int group_rank, int group, int stride, int algo,
                       size_t count, int after, step_thread_t thread, int every) {
  if (algo == ALLREDUCE_AUTO && group <= 2) algo = ALLREDUCE_RHD;
  if (algo != ALLREDUCE_AUTO && (algo != ALLREDUCE_HIER || group <= 1))
    return flat_allreduce(d, rank, group_rank, group, algo, count, after, thread, every, 0);
  step_members_t g;
  if (members_of(d, rank, group_rank, group, stride, &g) != 0) return STEP_FAILED;
  int rc = algo == ALLREDUCE_AUTO ? decide_auto(d, &g, count, &algo) : 0;
  if (rc == 0 && algo == ALLREDUCE_HIER && !g.host)
    rc = dt_error("--exchange allreduce:hier: its hosts are not known to this description");
  int last = rc != 0 ? STEP_FAILED
             : algo == ALLREDUCE_HIER ? hier_allreduce(d, rank, group_rank, &g, count, after, thread, every)
                                      : flat_allreduce(d, rank, group_rank, group, algo, count, after, thread, every, 0);
  free(g.host);
  return last;
}

int step_add_tree(step_desc_t *d, int rank, int reduce, int group, int root, size_t count,
                  int after, step_thread_t thread, int every) {
  size_t sent, received;
  coll_tree_bytes(reduce, group, root, rank, count, &sent, &received);
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = reduce ? "reduce" : "broadcast",
                                   .algo = "tree", .peer = -1, .group = group, .sent = (double)sent,
                                   .received = (double)received, .count = count, .every = every,
                                   .thread = thread,
                                   .after = after});
}

int step_add_compressed(step_desc_t *d, int rank, int group_rank, int group, const step_buffer_t *b,
                        int64_t from, int64_t until, int after, step_thread_t thread, int every) {
  compress_bytes_t x;
  if (compress_exchange_bytes(b->cc, group_rank, group, b->off, b->len, from, b->mats, b->nmats,
                              &x) != 0)
    return STEP_FAILED;
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = x.pattern,
                                   .algo = allreduce_algo_name(b->cc->algo), .peer = -1,
                                   .group = group, .sent = (double)x.sent,
                                   .received = (double)x.received, .every = every,
                                   .thread = thread, .after = after, .from = from, .until = until,
                                   .coded = b->len, .bounded = !x.exact,
                                   .sent_min = (double)x.sent_min,
                                   .received_min = (double)x.received_min});
}

int step_add_ring_half(step_desc_t *d, int rank, int group_rank, int group, int gather,
                       size_t count, int after, step_thread_t thread) {
  size_t sent, received;
  if (gather) coll_allgather_bytes(group, group_rank, count, &sent, &received);
  else coll_reduce_scatter_bytes(group, group_rank, count, &sent, &received);
  return step_add(d, (step_task_t){TASK_COMM, rank, -1,
                                   .pattern = gather ? "allgather" : "reduce_scatter",
                                   .algo = "ring", .peer = -1, .group = group, .sent = (double)sent,
                                   .received = (double)received, .count = count, .thread = thread,
                                   .after = after});
}

static const char *kind_name(step_task_kind_t k) {
  static const char *names[] = {"forward", "backward", "update", "comm", "sync"};
  return names[k];
}

static void bytes_json(const step_bytes_t *b, int rank, int exact, FILE *out) {
  fprintf(out, "%s{\"rank\":%d,\"sent\":%.17g,\"received\":%.17g", rank ? "," : "", rank, b->sent,
          b->received);
  if (!exact) fprintf(out, ",\"sent_min\":%.17g,\"received_min\":%.17g", b->sent_min, b->received_min);
  if (b->expected) fputs(",\"expected\":true", out);
  fputc('}', out);
}

int step_desc_json(const step_desc_t *d, const char *strategy, FILE *out) {
  int exact = step_exact(d);
  int64_t warmup = step_warmup_steps(d);
  step_bytes_t b;
  fprintf(out, "{\"strategy\":\"%s\",\"ranks\":%d,\"exact\":%s,\"bytes_per_step\":[", strategy,
          d->nranks, exact ? "true" : "false");
  for (int r = 0; r < d->nranks; r++) {
    step_rank_bytes(d, r, &b);
    bytes_json(&b, r, exact, out);
  }
  fprintf(out, "],\"bytes_per_epoch\":[");
  for (int r = 0; r < d->nranks; r++) {
    double s, v;
    step_rank_epoch_bytes(d, r, &s, &v);
    fprintf(out, "%s{\"rank\":%d,\"sent\":%.17g,\"received\":%.17g}", r ? "," : "", r, s, v);
  }
  fputc(']', out);
  if (warmup) {
    fprintf(out, ",\"warmup_steps\":%lld,\"warmup_bytes\":[", (long long)warmup);
    for (int r = 0; r < d->nranks; r++) {
      step_rank_bytes_over(d, r, warmup, &b);
      bytes_json(&b, r, exact, out);
    }
    fputc(']', out);
  }
  fprintf(out, ",\"tasks\":[");
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    fprintf(out, "%s{\"kind\":\"%s\",\"rank\":%d,\"thread\":\"%s\",\"after\":%d", i ? "," : "",
            kind_name(t->kind), t->rank, t->thread == THREAD_COMM ? "comm" : "compute", t->after);
    if (t->kind == TASK_COMM)
      fprintf(out, ",\"pattern\":\"%s\",\"algo\":\"%s\",\"peer\":%d,\"group\":%d,\"sent\":%.17g,"
              "\"received\":%.17g", t->pattern ? t->pattern : "", t->algo ? t->algo : "", t->peer,
              t->group, t->sent, t->received);
    else
      fprintf(out, ",\"layer\":%d,\"params\":%zu,\"samples\":%d", t->layer, t->params, t->samples);
    if (t->bounded)
      fprintf(out, ",\"bounded\":true,\"sent_min\":%.17g,\"received_min\":%.17g", t->sent_min,
              t->received_min);
    if (t->every > 1) fprintf(out, ",\"every\":%d", t->every);
    if (t->expected) fprintf(out, ",\"expected\":true,\"chance\":%.17g", t->chance);
    if (t->per_epoch) fprintf(out, ",\"per_epoch\":true");
    if (t->from) fprintf(out, ",\"from\":%lld", (long long)t->from);
    if (t->until) fprintf(out, ",\"until\":%lld", (long long)t->until);
    fputc('}', out);
  }
  fprintf(out, "]}\n");
  return ferror(out) ? dt_error("writing the step description: %s", "write error") : 0;
}
