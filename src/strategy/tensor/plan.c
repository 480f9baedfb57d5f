/* Which layers tensor parallelism splits (tensor.h): Megatron's pairing.
 * Walking the model, a dense layer followed, through element-wise layers
 * only (relu, tanh, sigmoid, dropout: they run on a shard as on the
 * whole), by another dense layer makes a pair: the first split by columns
 * (its outputs), the second by rows (its inputs), so that the shard flows
 * from one to the other with no communication and the pair costs one sum
 * forward and one backward. Two convolutions pair the same way, by output
 * channels then input channels, with pooling allowed between them too (it
 * works channel by channel). Anything else between two layers (batch norm,
 * a flatten, a layer of the other kind) ends the chain; a layer left
 * without a partner stays whole on every rank (replicated). On a
 * transformer (issue 34) two linear layers pair the same way through a
 * gelu (the MLP), and an attention layer is a pair of its own, split by
 * heads (its fused QKV by columns, its projection by rows); embeddings,
 * layer norms, adds and the head stay replicated. */
#include <stdlib.h>
#include <string.h>

#include "strategy/tensor/tensor.h"

static int elementwise(layer_kind_t k, layer_kind_t pair) {
  return k == LAYER_RELU || k == LAYER_TANH || k == LAYER_SIGMOID || k == LAYER_DROPOUT ||
         (pair == LAYER_CONV2D && (k == LAYER_MAXPOOL || k == LAYER_AVGPOOL)) ||
         (pair == LAYER_LINEAR && k == LAYER_GELU);
}

static int width(const layer_spec_t *l) { return l->kind == LAYER_CONV2D ? l->filters : l->units; }

/* What width() counts, in the number's grammar. */
static const char *width_unit(const layer_spec_t *l) {
  if (l->kind != LAYER_CONV2D) return width(l) == 1 ? "output feature" : "output features";
  return width(l) == 1 ? "filter" : "filters";
}

static int split_rows(model_spec_t *spec, int i, int file);

/* Megatron's attention: split by heads (each rank its heads' columns of
 * q, k and v, those rows of the projection), so tp must divide them. */
static int split_heads(model_spec_t *spec, layer_spec_t *l, int tp) {
  if (tp <= 1) return 0;
  if (l->heads % tp != 0) {
    char fits[96] = "";
    for (int d = 1; d <= l->heads; d++)
      if (l->heads % d == 0)
        snprintf(fits + strlen(fits), sizeof fits - strlen(fits), "%s%d", fits[0] ? ", " : "", d);
    return dt_error("option --tp %d: the attention layer on line %d of %s has %d heads, which "
                    "%d ranks cannot share (tensor parallelism splits attention by heads: use "
                    "--tp %s)", tp, l->line, spec->source, l->heads, tp, fits);
  }
  l->split = SPLIT_COLUMN;
  return 0;
}

static int plan(model_spec_t *spec, int tp, int dense_only, int *pairs) {
  int col = -1, n = 0;
  for (int i = 0; i < spec->nlayers; i++) {
    layer_spec_t *l = &spec->layers[i];
    l->split = SPLIT_NONE;
    int chained = l->input == i - 1;
    if (l->kind == LAYER_LOCAL2D && !dense_only) { /* DistBelief's bands of rows */
      if (tp > 1 && (i = split_rows(spec, i, 0)) < 0) return -1;
      n++, col = -1;
      continue;
    }
    if (l->kind == LAYER_ATTENTION && !dense_only) {
      if (split_heads(spec, l, tp) != 0) return -1;
      n++, col = -1;
      continue;
    }
    if (l->kind == LAYER_DENSE || (!dense_only && (l->kind == LAYER_CONV2D || l->kind == LAYER_LINEAR))) {
      if (col >= 0 && chained && spec->layers[col].kind == l->kind) {
        const layer_spec_t *c = &spec->layers[col];
        if (width(c) < tp)
          return dt_error("option --tp %d: the %s layer on line %d of %s has %d %s, too few to "
                          "split over %d ranks (use --tp %d or fewer)", tp,
                          layer_kind_name(c->kind), c->line, spec->source, width(c),
                          width_unit(c), tp, width(c));
        spec->layers[col].split = SPLIT_COLUMN;
        l->split = SPLIT_ROW;
        n++, col = -1;
      } else {
        col = i;
      }
    } else if (col < 0 || !chained || !elementwise(l->kind, spec->layers[col].kind)) {
      col = -1;
    }
  }
  if (pairs) *pairs = n;
  if (n == 0 && tp > 1 && dense_only)
    return dt_error("option --tp %d: %s has no pair of dense layers, and with --tp-conv data (the "
                    "one weird trick) or parameter servers' workers (Project Adam) tensor "
                    "parallelism splits only those (a dense layer followed, through relu, tanh, "
                    "sigmoid or dropout only, by another): use --tp 1, or --exchange allreduce "
                    "with --tp-conv split (Megatron's pairs of linear layers, attention by "
                    "heads)", tp, spec->source);
  if (n == 0 && tp > 1)
    return dt_error("option --tp %d: %s has no pair of layers to split (tensor parallelism "
                    "splits a dense layer followed, through relu, tanh, sigmoid or dropout only, "
                    "by another, and likewise two conv2d layers, pooling allowed between, two "
                    "linear layers, gelu allowed between, attention by heads, and local2d "
                    "layers by rows; batchnorm and flatten layers are not split): use "
                    "--tp 1", tp, spec->source);
  return 0;
}

int tensor_plan(model_spec_t *spec, int tp, int *pairs) { return plan(spec, tp, 0, pairs); }
int tensor_plan_dense(model_spec_t *spec, int tp, int *pairs) { return plan(spec, tp, 1, pairs); }

int tensor_plan_for(const train_config_t *cfg, model_spec_t *spec, int tp) {
  if (tensor_file_split_line(spec, FILE_SPLIT_UNSET)) return tensor_plan_file(spec, tp);
  if (cfg->tensor.conv_data || cfg->exchange == EXCHANGE_PS) return tensor_plan_dense(spec, tp, NULL);
  return tensor_plan(spec, tp, NULL);
}

/* ---- the model file's own choice: split= on its dense and conv2d layers ------- */

static int splittable(const layer_spec_t *l) { return l->kind == LAYER_DENSE || l->kind == LAYER_CONV2D; }

/* Layers that run on a band of rows as on the whole image. */
static int keeps_band(layer_kind_t k) { return k == LAYER_RELU || k == LAYER_TANH || k == LAYER_SIGMOID; }

int tensor_file_split_line(const model_spec_t *spec, file_split_t which) {
  for (int i = 0; i < spec->nlayers; i++) {
    file_split_t f = spec->layers[i].file_split;
    if (which == FILE_SPLIT_UNSET ? f != FILE_SPLIT_UNSET : f == which) return spec->layers[i].line;
  }
  return 0;
}

/* A split=column layer `c` meets layer l (chained or not): l must be its
 * row partner or an element-wise layer that keeps the shard. */
static int check_in_pair(const model_spec_t *spec, const layer_spec_t *c, const layer_spec_t *l,
                         int chained) {
  const char *src = spec->source, *ck = layer_kind_name(c->kind), *lk = layer_kind_name(l->kind);
  if (splittable(l) && chained && l->kind == c->kind && l->file_split == FILE_SPLIT_ROW) return 0;
  if (!splittable(l) && chained && elementwise(l->kind, c->kind)) return 0;
  return dt_error("%s:%d: %s split=column needs a split=row %s layer after it, through relu, "
                  "tanh, sigmoid, dropout%s only; line %d is a %s%s%s (give it split=row, or "
                  "line %d split=none)", src, c->line, ck, ck, c->kind == LAYER_CONV2D ? " or pooling" : "",
                  l->line, lk, l->kind == c->kind ? " without split=row" : "",
                  chained ? "" : " that reads another layer", c->line);
}

/* Every dense and conv2d layer before the first split=column one says
 * split=data once one does, and none after it: the one weird trick runs
 * a data-parallel front, then the split layers on the exchanged batch. */
static int check_data_front(const model_spec_t *spec, int first_col) {
  int data = tensor_file_split_line(spec, FILE_SPLIT_DATA);
  if (!data) return 0;
  if (first_col < 0)
    return dt_error("%s:%d: split=data needs split=column and split=row layers after it (the one "
                    "weird trick splits the layers after the data-parallel ones)", spec->source, data);
  for (int i = 0; i < spec->nlayers; i++) {
    const layer_spec_t *l = &spec->layers[i];
    if (!splittable(l)) continue;
    if (i < first_col && l->file_split != FILE_SPLIT_DATA)
      return dt_error("%s:%d: %s has no split=data but line %d does: every dense and conv2d layer "
                      "before the first split=column one (line %d) runs data-parallel, say "
                      "split=data", spec->source, l->line, layer_kind_name(l->kind), data,
                      spec->layers[first_col].line);
    if (i > first_col && l->file_split == FILE_SPLIT_DATA)
      return dt_error("%s:%d: split=data after the split layers (line %d): the data-parallel "
                      "layers come first, before the batch is exchanged", spec->source, l->line,
                      spec->layers[first_col].line);
  }
  return 0;
}

/* An allgather (or rowgather) layer at position `at` of the spec, reading
 * layer at - 1 (the last layer of a split=channels convolution's shard, or
 * of split=rows local2d layers' bands); every reader of that layer reads
 * the gathered whole instead. */
static int insert_gather(model_spec_t *spec, int at, layer_kind_t kind) {
  layer_spec_t *more = realloc(spec->layers, ((size_t)spec->nlayers + 1) * sizeof *more);
  if (!more) return dt_error("out of memory");
  spec->layers = more;
  memmove(&more[at + 1], &more[at], (size_t)(spec->nlayers - at) * sizeof *more);
  spec->nlayers++;
  for (int i = at + 1; i < spec->nlayers; i++)
    more[i].input = more[i].input == at - 1 ? at : more[i].input >= at ? more[i].input + 1 : more[i].input;
  layer_spec_t *g = &more[at];
  const layer_spec_t *from = &more[at - 1];
  *g = (layer_spec_t){.kind = kind, .input = at - 1, .line = from->line, .index = from->index};
  return 0;
}

static int insert_allgather(model_spec_t *spec, int at) { return insert_gather(spec, at, LAYER_ALLGATHER); }

/* A split=rows local2d at i (file: as the model file says; else, the
 * planner's choice, every local2d): it and the local2d layers that follow
 * it through relu, tanh and sigmoid run on bands of rows (the halos between
 * them), and a rowgather follows the last of them. Returns the index of
 * the rowgather, or -1 on error. */
static int split_rows(model_spec_t *spec, int i, int file) {
  int end = i;
  while (end < spec->nlayers && (end == i || spec->layers[end].input == end - 1)) {
    layer_spec_t *l = &spec->layers[end];
    if (l->kind == LAYER_LOCAL2D && (!file || l->file_split == FILE_SPLIT_ROWS)) l->split = SPLIT_ROWS;
    else if (!keeps_band(l->kind)) break;
    end++;
  }
  return insert_gather(spec, end, LAYER_ROWGATHER) == 0 ? end : -1;
}

/* A split=channels convolution at i: split by filters, and the layers
 * after it that work channel by channel (relu, tanh, sigmoid, dropout,
 * pooling) run on the shard; an allgather follows the last of them.
 * Returns the index of the allgather, or -1 on error. */
static int split_channels(model_spec_t *spec, int i) {
  int end = i + 1;
  while (end < spec->nlayers && spec->layers[end].input == end - 1 &&
         !splittable(&spec->layers[end]) && elementwise(spec->layers[end].kind, LAYER_CONV2D))
    end++;
  spec->layers[i].split = SPLIT_COLUMN;
  return insert_allgather(spec, end) == 0 ? end : -1;
}

int tensor_plan_file(model_spec_t *spec, int tp) {
  int col = -1, first_col = -1;
  for (int i = 0; i < spec->nlayers; i++) {
    layer_spec_t *l = &spec->layers[i];
    int chained = l->input == i - 1;
    l->split = SPLIT_NONE;
    if (col >= 0) {
      layer_spec_t *c = &spec->layers[col];
      DT_TRY(check_in_pair(spec, c, l, chained));
      if (splittable(l)) { /* the pair is whole */
        if (tp > 1) c->split = SPLIT_COLUMN, l->split = SPLIT_ROW;
        col = -1;
      }
      continue;
    }
    if (l->file_split == FILE_SPLIT_ROW)
      return dt_error("%s:%d: %s split=row needs a split=column %s layer before it, through relu, "
                      "tanh, sigmoid, dropout%s only (give one split=column, or this one "
                      "split=none)", spec->source, l->line, layer_kind_name(l->kind),
                      layer_kind_name(l->kind), l->kind == LAYER_CONV2D ? " or pooling" : "");
    if (l->file_split == FILE_SPLIT_ROWS) {
      if (tp > 1 && (i = split_rows(spec, i, 1)) < 0) return -1;
      continue;
    }
    if (l->file_split != FILE_SPLIT_COLUMN && l->file_split != FILE_SPLIT_CHANNELS) continue;
    if (width(l) < tp)
      return dt_error("%s:%d: %s split=%s has %d %s, too few to split over --tp %d (use --tp "
                      "%d or fewer)", spec->source, l->line, layer_kind_name(l->kind),
                      l->file_split == FILE_SPLIT_CHANNELS ? "channels" : "column", width(l),
                      width_unit(l), tp, width(l));
    if (l->file_split == FILE_SPLIT_CHANNELS) {
      if (tp > 1 && (i = split_channels(spec, i)) < 0) return -1;
      continue;
    }
    col = i;
    if (first_col < 0) first_col = i;
  }
  if (col >= 0)
    return dt_error("%s:%d: %s split=column needs a split=row %s layer after it, and the model "
                    "ends (give a later layer split=row, or this one split=none)", spec->source,
                    spec->layers[col].line, layer_kind_name(spec->layers[col].kind),
                    layer_kind_name(spec->layers[col].kind));
  return check_data_front(spec, first_col);
}

/* Before any rank starts (model_check.c, through the registry): the
 * file's split= keys and the planner, as one rank of the group would
 * apply them (build_model in worker.c), and --sync-bn's batch norm. */
int tensor_check_spec(const train_config_t *c, model_spec_t *spec) {
  int file_split = tensor_file_split_line(spec, FILE_SPLIT_UNSET) != 0;
  int tp = c->tensor.conv_data ? c->workers : c->tensor.ranks; /* tensor_group_size */
  /* under mpi the one weird trick's group is -np, known once the ranks start */
  int known = !(c->tensor.conv_data && c->comm == COMM_MPI);
  int rows = tensor_file_split_line(spec, FILE_SPLIT_ROWS);
  if (rows && tp > 1 && c->exchange == EXCHANGE_PS)
    return dt_error("%s:%d: split=rows does not combine with --exchange ps:K (the servers hold "
                    "no band of rows; use --exchange allreduce:ring, or split=none)", spec->source, rows);
  if (known && (tp > 1 || file_split)) DT_TRY(tensor_plan_for(c, spec, tp > 1 ? tp : 1));
  if (c->sync_bn) DT_TRY(sync_bn_check_model(spec));
  return 0;
}
