/* A language-model head tied to the token embedding (GPT-2's, Press &
 * Wolf 2017) when the pipeline puts the two on different stages: as
 * Megatron-LM does with its embedding group, the head's stage keeps a
 * copy of the table (every rank builds the whole model from one seed, so
 * the copies start equal), reads it in forward and writes the table's
 * gradient into it in backward. The gradient of the whole table is the
 * sum of the head's and the embedding's: before REDUCE the head's stage
 * sends its part to the table's stage, which adds it (the replicas' sum
 * then covers both), and after STEP the table's stage, the only one that
 * steps the table, sends it back, so both copies hold one worker's table.
 * Two messages of the table a step (vocab x width floats each way), only
 * under the flush schedules: PipeDream, 2BW and DDG keep weight versions
 * per stage that a table shared by two stages would break. */
#include <stdlib.h>

#include "strategy/pipe/engine.h"

static int stage_of(const int *first, int G, int P, int layer) {
  for (int g = 0; g < G; g++)
    if (layer >= first[g] && layer < first[g + 1]) return g % P;
  return -1;
}

int pipe_tied_stages(const model_t *m, const int *first, int G, int P, int *table, int *head,
                     size_t *len, size_t *off) {
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    if (l->spec.kind != LAYER_LMHEAD || !l->spec.tie) continue;
    const layer_t *e = &m->layers[l->spec.tie - 1];
    *table = stage_of(first, G, P, l->spec.tie - 1), *head = stage_of(first, G, P, i);
    *len = e->param_len, *off = e->param_off;
    return *table != *head;
  }
  return 0;
}

int pipe_tied_plan(pipe_engine_t *e) {
  const train_config_t *cfg = e->w->cfg;
  if (!pipe_tied_stages(e->w->model, e->first, e->G, e->P, &e->tie_table, &e->tie_head,
                        &e->tie_len, &e->tie_off)) {
    e->tie_len = 0;
    return 0;
  }
  if (cfg->pipe.schedule > PIPE_INTERLEAVED)
    return dt_error("option --pipe-schedule: the head tied to the embedding sits on stage %d, the "
                    "embedding on stage %d, and only gpipe, 1f1b and interleaved:V share the "
                    "table between stages (use one of them, or untie the head)", e->tie_head,
                    e->tie_table);
  if (e->s == e->tie_table && !(e->tie_buf = dt_alloc_floats(e->tie_len))) return -1;
  return 0;
}

void pipe_tied_free(pipe_engine_t *e) {
  dt_free(e->tie_buf);
  e->tie_buf = NULL;
}

int pipe_tied_grads(pipe_engine_t *e) {
  if (!e->tie_len || (e->s != e->tie_table && e->s != e->tie_head)) return 0;
  float *g = e->w->model->grads + e->tie_off;
  size_t bytes = e->tie_len * sizeof(float);
  if (e->s == e->tie_head) return comm_send(e->pipe, e->tie_table, TAG_PIPE_TIED, g, bytes);
  DT_TRY(comm_recv(e->pipe, e->tie_head, TAG_PIPE_TIED, e->tie_buf, bytes));
  kern_add(e->tie_len, e->tie_buf, g);
  return 0;
}

int pipe_tied_params(pipe_engine_t *e) {
  if (!e->tie_len || (e->s != e->tie_table && e->s != e->tie_head)) return 0;
  float *p = e->w->model->params + e->tie_off;
  size_t bytes = e->tie_len * sizeof(float);
  if (e->s == e->tie_table) return comm_send(e->pipe, e->tie_head, TAG_PIPE_TIED, p, bytes);
  return comm_recv(e->pipe, e->tie_table, TAG_PIPE_TIED, p, bytes);
}
