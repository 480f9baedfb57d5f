/* Project Adam's replicas (Chilimbi et al. 2014): a tensor-parallel group
 * of T ranks is one parameter-server worker (ps.h). Here: which keys a
 * tensor-parallel rank owns, their packing out of its arena, the key
 * table a server of slice t is built from, and where the servers' slices
 * lie.
 *
 * Keys of rank t: its blocks of the split tensors, and for t = 0 the
 * replicated tensors too, in tensor order. Rank 0's keys are then its
 * whole arena (nothing to pack); a rank t > 0 packs its blocks before a
 * push and unpacks after a pull, and takes the replicated tensors from
 * rank 0 of its group (ps_worker.c), so every parameter of the one-worker
 * model lives on one server and is pushed once per replica.
 *
 * The seeds (the Chinese notes sec. 6) say Project Adam splits each layer
 * by neurons across a replica's machines (the paper's vertical
 * partitioning). Followed for the dense layers: a column layer's block is
 * output neurons, a row layer's input neurons. Not for the convolutions,
 * which stay whole on every rank here (tp rank 0 holds their keys); the
 * paper splits them by feature maps too. docs/FEATURES.md says so. */
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"
#include "strategy/tensor/tensor.h"

int ps_group_size(const train_config_t *cfg) {
  return cfg->exchange == EXCHANGE_PS && cfg->tensor.ranks > 1 ? cfg->tensor.ranks : 1;
}

static int split_tensor(const tensor_info_t *ti) { return ti->len != tensor_full_len(ti); }

int ps_keys_plan(const model_t *m, int t, int T, ps_keys_t *k) {
  memset(k, 0, sizeof *k);
  k->t = t, k->T = T;
  k->key = malloc(((size_t)m->ntensors + 1) * sizeof *k->key);
  if (!k->key) return dt_error("out of memory");
  size_t next = 0;
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *ti = &m->tensors[i];
    int owned = t == 0 || split_tensor(ti);
    k->key[i] = owned ? next : PS_NO_KEY;
    if (owned && next != ti->off) k->packed = 1;
    if (owned) next += ti->len;
  }
  k->nkeys = next;
  if (next != m->nparams) k->packed = 1;
  if (next == 0)
    return dt_error("option --tp %d: tensor-parallel rank %d holds no split tensor of this model "
                    "(use --tp 1)", T, t);
  return 0;
}

void ps_keys_free(ps_keys_t *k) {
  free(k->key);
  k->key = NULL;
}

void ps_keys_pack(const ps_keys_t *k, const model_t *m, const float *arena, float *keys) {
  for (int i = 0; i < m->ntensors; i++)
    if (k->key[i] != PS_NO_KEY)
      memcpy(keys + k->key[i], arena + m->tensors[i].off, m->tensors[i].len * sizeof(float));
}

void ps_keys_unpack(const ps_keys_t *k, const model_t *m, const float *keys, float *arena) {
  for (int i = 0; i < m->ntensors; i++)
    if (k->key[i] != PS_NO_KEY)
      memcpy(arena + m->tensors[i].off, keys + k->key[i], m->tensors[i].len * sizeof(float));
}

/* Rank t's split model, built as its worker builds it (the link only
 * says which block; nothing is summed while building). */
static int build_rank_model(const train_config_t *cfg, const dataset_t *train, int t, int T,
                            model_t **out) {
  model_spec_t spec;
  DT_TRY(model_spec_load(cfg->model, &spec));
  tp_link_t link = {.rank = t, .size = T};
  int rc = tensor_plan_for(cfg, &spec, T);
  spec.tp = &link;
  shape_t in = {train->c, train->h, train->w};
  if (rc == 0) rc = model_build(&spec, in, train->nclasses, 1, out);
  model_spec_free(&spec);
  if (rc != 0) return -1;
  model_init_params(*out, cfg->seed);
  (*out)->tp = NULL; /* the link was this function's */
  return 0;
}

int ps_keys_table(const train_config_t *cfg, const dataset_t *train, int t, int T, model_t **out) {
  return ps_keys_table_factors(cfg, train, t, T, out, NULL);
}

int ps_keys_table_of(const model_t *m, const ps_keys_t *k, model_t **out) {
  model_t *tab = calloc(1, sizeof *tab);
  int rc = tab ? 0 : dt_error("out of memory");
  if (rc == 0) {
    tab->tensors = calloc((size_t)m->ntensors + 1, sizeof *tab->tensors);
    tab->params = dt_alloc_floats(k->nkeys);
    if (!tab->tensors || !tab->params) rc = dt_error("out of memory");
  }
  for (int i = 0; rc == 0 && i < m->ntensors; i++) {
    if (k->key[i] == PS_NO_KEY) continue;
    tensor_info_t *ti = &tab->tensors[tab->ntensors++];
    *ti = m->tensors[i];
    ti->off = k->key[i];
  }
  if (rc != 0) {
    model_free(tab);
    return -1;
  }
  tab->nparams = k->nkeys;
  tab->input = m->input;
  tab->nclasses = m->nclasses;
  ps_keys_pack(k, m, m->params, tab->params);
  *out = tab;
  return 0;
}

int ps_keys_table_factors(const train_config_t *cfg, const dataset_t *train, int t, int T,
                          model_t **out, ps_factor_plan_t *fp) {
  model_t *m;
  if (fp) memset(fp, 0, sizeof *fp);
  DT_TRY(build_rank_model(cfg, train, t, T, &m));
  ps_keys_t k;
  int rc = ps_keys_plan(m, t, T, &k);
  if (rc == 0 && fp && cfg->ps.push_factors) rc = ps_factor_plan(m, &k, fp);
  if (rc == 0) rc = ps_keys_table_of(m, &k, out);
  ps_keys_free(&k);
  model_free(m);
  return rc;
}

int ps_server_slice(int k, int K, int T) { return k / (K / T); }
