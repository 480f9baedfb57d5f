/* step: building and reading a step's task graph (step.h). */
#include <stdlib.h>

#include "dtrain/coll.h"
#include "dtrain/nn.h"
#include "strategy/step.h"

void step_desc_init(step_desc_t *d, int nranks) { *d = (step_desc_t){.nranks = nranks}; }

void step_desc_free(step_desc_t *d) {
  free(d->task);
  *d = (step_desc_t){0};
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
  d->task[d->ntasks] = t;
  return d->ntasks++;
}

void step_rank_bytes(const step_desc_t *d, int rank, double *sent, double *received) {
  *sent = *received = 0;
  for (int i = 0; i < d->ntasks; i++) {
    const step_task_t *t = &d->task[i];
    if (t->rank != rank || t->kind != TASK_COMM) continue;
    *sent += t->sent / t->every;
    *received += t->received / t->every;
  }
}

/* One collective a layer calls itself, over its group in g. */
static int add_layer_sum(step_desc_t *d, int rank, const step_groups_t *g, layer_sum_t s,
                         int after) {
  const step_group_t *grp = s.bn ? &g->bn : &g->tp;
  if (s.gather)
    return step_add_ring_half(d, rank, grp->rank, grp->size, 1, s.count, after, THREAD_COMPUTE);
  return step_add_allreduce(d, rank, grp->rank, grp->size, grp->algo, s.count, after,
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
  if (P > 1 && (*out == ALLREDUCE_AUTO || *out == ALLREDUCE_HIER))
    return dt_error("--exchange allreduce:%s over %d ranks: the algorithm is picked at run time "
                    "from the hosts and the link; describe_step needs ring, rhd, tree, naive or "
                    "shm", allreduce_algo_name((allreduce_algo_t)algo), P);
  return 0;
}

int step_add_allreduce(step_desc_t *d, int rank, int group_rank, int group, int algo, size_t count,
                       int after, step_thread_t thread, int every) {
  size_t sent, received;
  if (coll_allreduce_bytes((allreduce_algo_t)algo, group, group_rank, count, &sent, &received) != 0)
    return STEP_FAILED;
  return step_add(d, (step_task_t){TASK_COMM, rank, -1, .pattern = "allreduce",
                                   .algo = allreduce_algo_name((allreduce_algo_t)algo),
                                   .peer = -1, .group = group, .sent = (double)sent,
                                   .received = (double)received, .every = every,
                                   .thread = thread, .after = after});
}

int step_add_ring_half(step_desc_t *d, int rank, int group_rank, int group, int gather,
                       size_t count, int after, step_thread_t thread) {
  size_t sent, received;
  if (gather) coll_allgather_bytes(group, group_rank, count, &sent, &received);
  else coll_reduce_scatter_bytes(group, group_rank, count, &sent, &received);
  return step_add(d, (step_task_t){TASK_COMM, rank, -1,
                                   .pattern = gather ? "allgather" : "reduce_scatter",
                                   .algo = "ring", .peer = -1, .group = group, .sent = (double)sent,
                                   .received = (double)received, .thread = thread, .after = after});
}

static const char *kind_name(step_task_kind_t k) {
  static const char *names[] = {"forward", "backward", "update", "comm", "sync"};
  return names[k];
}

int step_desc_json(const step_desc_t *d, const char *strategy, FILE *out) {
  fprintf(out, "{\"strategy\":\"%s\",\"ranks\":%d,\"bytes_per_step\":[", strategy, d->nranks);
  for (int r = 0; r < d->nranks; r++) {
    double s, v;
    step_rank_bytes(d, r, &s, &v);
    fprintf(out, "%s{\"rank\":%d,\"sent\":%.17g,\"received\":%.17g}", r ? "," : "", r, s, v);
  }
  fprintf(out, "],\"tasks\":[");
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
    if (t->every > 1) fprintf(out, ",\"every\":%d", t->every);
    fputc('}', out);
  }
  fprintf(out, "]}\n");
  return ferror(out) ? dt_error("writing the step description: %s", "write error") : 0;
}
