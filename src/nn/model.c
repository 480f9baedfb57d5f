/* The model: layers over one parameter arena, one gradient arena of the
 * same layout, one buffer arena (batch-norm running statistics) and one
 * activation arena sized once for max_batch. Nothing is allocated after
 * model_build. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/nn.h"
#include "model_internal.h"

/* "dense; relu" and "conv2d; relu" become one layer with a fused ReLU when
 * nothing else reads the dense output. Returns the fused spec list. */
static int fuse_activations(const model_spec_t *spec, layer_spec_t **out, int *count) {
  int n = spec->nlayers;
  layer_spec_t *ls = malloc((size_t)n * sizeof *ls);
  int *newidx = malloc((size_t)n * sizeof *newidx), *consumers = calloc((size_t)n, sizeof(int));
  if (!ls || !newidx || !consumers) {
    free(ls), free(newidx), free(consumers);
    return dt_error("out of memory");
  }
  for (int i = 0; i < n; i++)
    if (spec->layers[i].input >= 0) consumers[spec->layers[i].input]++;
  int k = 0;
  for (int i = 0; i < n; i++) {
    const layer_spec_t *s = &spec->layers[i];
    if (s->kind == LAYER_RELU && k > 0 && s->input == i - 1 && consumers[i - 1] == 1 &&
        (ls[k - 1].kind == LAYER_DENSE || ls[k - 1].kind == LAYER_CONV2D ||
         ls[k - 1].kind == LAYER_LOCAL2D) &&
        ls[k - 1].act == ACT_NONE) {
      ls[k - 1].act = ACT_RELU;
      newidx[i] = k - 1;
      continue;
    }
    ls[k] = *s;
    ls[k].input = s->input < 0 ? -1 : newidx[s->input];
    if (s->kind == LAYER_ADD) ls[k].input2 = s->input2 < 0 ? -1 : newidx[s->input2];
    if (s->kind == LAYER_LMHEAD && s->tie) ls[k].tie = 1 + newidx[s->tie - 1];
    newidx[i] = k++;
  }
  free(newidx);
  free(consumers);
  *out = ls;
  *count = k;
  return 0;
}

/* A tensor whose block is rows [row0, row0 + rows) x every mid x cols
 * [col0, col0 + cols) of the one-worker tensor seen as [dims[0], mid,
 * full_cols]. */
typedef struct { size_t row0, rows, mid, col0, cols, full_cols; } block_t;

static void add_tensor(tensor_info_t *t, const layer_t *l, int li, const char *what, size_t off,
                       int ndim, const int *dims, block_t b) {
  snprintf(t->name, sizeof t->name, "layers.%d.%s", l->spec.index, what);
  t->off = off;
  t->len = b.rows * b.mid * b.cols;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->dims[d] = dims[d];
  t->row0 = b.row0, t->rows = b.rows, t->mid = b.mid;
  t->col0 = b.col0, t->cols = b.cols, t->full_cols = b.full_cols;
  t->layer = li;
}

/* The whole tensor of `len` floats as one block. */
static block_t whole_block(size_t len) { return (block_t){0, len, 1, 0, 1, 1}; }

/* The product of the one-worker dims (a block's view [rows, mid,
 * full_cols] may group them otherwise: attention's qkv.weight [3c, c] split
 * by heads is seen as [3, 1, c·c]). */
size_t tensor_full_len(const tensor_info_t *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->dims[d];
  return n;
}

void tensor_block_copy(const tensor_info_t *t, float *full, float *block, int to_full) {
  for (size_t r = 0; r < t->rows; r++)
    for (size_t m = 0; m < t->mid; m++) {
      float *f = full + ((t->row0 + r) * t->mid + m) * t->full_cols + t->col0;
      float *b = block + (r * t->mid + m) * t->cols;
      memcpy(to_full ? f : b, to_full ? b : f, t->cols * sizeof(float));
    }
}

/* The weight's block: rows are output features (dense) or filters (conv),
 * split when the layer is column-split; columns are input features or
 * input channels (runs of them, one per kernel position, for a conv),
 * split when it is row-split. */
static block_t weight_block(const layer_t *l) {
  size_t in = shape_size(l->in_shape), rows = (size_t)l->out_shape.c;
  if (l->spec.kind == LAYER_DENSE) { /* a flat input: pos positions of in_full channels */
    size_t pos = in / (size_t)l->in_shape.c;
    return (block_t){(size_t)l->out_off, rows, 1, pos * (size_t)l->in_off, in, pos * (size_t)l->in_full};
  }
  size_t kk = (size_t)l->spec.kernel * (size_t)l->spec.kernel;
  return (block_t){(size_t)l->out_off, rows, kk, (size_t)l->in_off, (size_t)l->in_shape.c,
                   (size_t)l->in_full};
}

/* The sequence layers' tensors (docs/MODEL_FORMAT.md maps them to
 * PyTorch's): tables and matrices 2-D, norms and biases 1-D. Returns 0
 * for a kind described by describe_tensors itself. */
/* A whole [rows, cols] matrix as one block (what a checkpoint's shape
 * check reads: dims[0] x mid x full_cols floats). */
static block_t matrix_block(int rows, int cols) {
  return (block_t){0, (size_t)rows, 1, 0, (size_t)cols, (size_t)cols};
}

static int describe_sequence_tensors(model_t *m, const layer_t *l, int i) {
  int c = l->in_shape.c, o = l->out_shape.c;
  size_t off = l->param_off;
  tensor_info_t *t = m->tensors + m->ntensors;
  switch (l->spec.kind) {
    case LAYER_EMBEDDING:
    case LAYER_POSEMBED:
    case LAYER_LMHEAD: {
      int rows = l->spec.kind == LAYER_POSEMBED ? l->spec.positions : l->spec.vocab;
      int d[2] = {rows, l->spec.kind == LAYER_LMHEAD ? c : o};
      add_tensor(t, l, i, "weight", off, 2, d, matrix_block(d[0], d[1]));
      m->ntensors += 1;
      return 1;
    }
    case LAYER_ATTENTION: { /* split by heads: columns [c0, c0 + cl) of q, k, v and of proj's input */
      int qw[2] = {3 * c, c}, qb[1] = {3 * c}, pw[2] = {c, c}, pb[1] = {c};
      size_t C = (size_t)c, cl = (l->param_len - C) / (4 * C + 3), q = 3 * cl * C, c0 = 0;
      if (l->spec.split == SPLIT_COLUMN) {
        int h0, nh;
        tp_block(l->spec.heads, l->tp->size, l->tp->rank, &h0, &nh);
        c0 = (size_t)h0 * (C / (size_t)l->spec.heads);
      }
      add_tensor(t + 0, l, i, "qkv.weight", off, 2, qw, (block_t){0, 3, 1, c0 * C, cl * C, C * C});
      add_tensor(t + 1, l, i, "qkv.bias", off + q, 1, qb, (block_t){0, 3, 1, c0, cl, C});
      add_tensor(t + 2, l, i, "proj.weight", off + q + 3 * cl, 2, pw, (block_t){0, C, 1, c0, cl, C});
      add_tensor(t + 3, l, i, "proj.bias", off + q + 3 * cl + C * cl, 1, pb, whole_block(C));
      m->ntensors += 4;
      return 1;
    }
    case LAYER_LSTM: {
      size_t p = off, H = (size_t)o, H4 = 4 * H;
      for (int k = 0; k < l->spec.num_layers; k++) {
        int in = k == 0 ? c : o, wi[2] = {(int)H4, in}, wh[2] = {(int)H4, o}, b[1] = {(int)H4};
        char name[4][24];
        snprintf(name[0], 24, "weight_ih_l%d", k), snprintf(name[1], 24, "weight_hh_l%d", k);
        snprintf(name[2], 24, "bias_ih_l%d", k), snprintf(name[3], 24, "bias_hh_l%d", k);
        add_tensor(t++, l, i, name[0], p, 2, wi, matrix_block((int)H4, in)), p += H4 * in;
        add_tensor(t++, l, i, name[1], p, 2, wh, matrix_block((int)H4, o)), p += H4 * H;
        add_tensor(t++, l, i, name[2], p, 1, b, whole_block(H4)), p += H4;
        add_tensor(t++, l, i, name[3], p, 1, b, whole_block(H4)), p += H4;
      }
      m->ntensors += 4 * l->spec.num_layers;
      return 1;
    }
    case LAYER_LINEAR: { /* COLUMN: rows [out_off, ..) of both; ROW: columns [in_off, ..) */
      int wd[2] = {l->out_full, l->in_full}, bd[1] = {l->out_full};
      size_t r0 = (size_t)l->out_off, rows = (size_t)o, c0 = (size_t)l->in_off;
      add_tensor(t, l, i, "weight", off, 2, wd, (block_t){r0, rows, 1, c0, (size_t)c, (size_t)l->in_full});
      add_tensor(t + 1, l, i, "bias", off + l->nweight, 1, bd, (block_t){r0, rows, 1, 0, 1, 1});
      m->ntensors += 2;
      return 1;
    }
    default: return 0;
  }
}

/* Names and shapes of the parameter and buffer tensors, PyTorch style:
 * the one-worker shapes, and the block of them this rank holds (a layer
 * split by tensor parallelism holds rows or columns of its weight). */
static int describe_tensors(model_t *m) {
  size_t cap = 1;
  for (int i = 0; i < m->nlayers; i++)
    cap += m->layers[i].spec.kind == LAYER_LSTM ? 4 * (size_t)m->layers[i].spec.num_layers : 4;
  m->tensors = calloc(cap, sizeof *m->tensors);
  m->buf_tensors = calloc((size_t)m->nlayers * 2 + 1, sizeof *m->buf_tensors);
  if (!m->tensors || !m->buf_tensors) return dt_error("out of memory");
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    if (l->param_len == 0) continue;
    if (describe_sequence_tensors(m, l, i)) continue;
    int wd[4], nd = 1;
    size_t nb = l->param_len - l->nweight;
    block_t wb = whole_block(l->nweight), bb = whole_block(nb);
    switch (l->spec.kind) {
      case LAYER_DENSE:
      case LAYER_CONV2D:
        wb = weight_block(l);
        if (l->spec.kind == LAYER_DENSE) wd[0] = l->out_full, wd[1] = (int)wb.full_cols, nd = 2;
        else wd[0] = l->out_full, wd[1] = wd[2] = l->spec.kernel, wd[3] = l->in_full, nd = 4;
        bb = (block_t){(size_t)l->out_off, nb, 1, 0, 1, 1};
        break;
      case LAYER_LOCAL2D: /* [out_h, out_w, filters, k·k·in_c]; a split layer holds rows */
        wd[0] = l->out_hfull, wd[1] = l->out_shape.w, wd[2] = l->out_shape.c, nd = 4;
        wd[3] = l->spec.kernel * l->spec.kernel * l->in_shape.c;
        wb = (block_t){(size_t)l->out_hoff, (size_t)l->out_shape.h, 1, 0, l->nweight / l->out_shape.h,
                       l->nweight / l->out_shape.h};
        bb = (block_t){(size_t)l->out_hoff, (size_t)l->out_shape.h, 1, 0, nb / l->out_shape.h,
                       nb / l->out_shape.h};
        break;
      default:
        wd[0] = (int)l->nweight;
    }
    add_tensor(&m->tensors[m->ntensors++], l, i, "weight", l->param_off, nd, wd, wb);
    int bd[3] = {l->spec.kind == LAYER_DENSE || l->spec.kind == LAYER_CONV2D ? l->out_full : (int)nb};
    int bnd = 1;
    if (l->spec.kind == LAYER_LOCAL2D) /* [out_h, out_w, filters] */
      bd[0] = l->out_hfull, bd[1] = l->out_shape.w, bd[2] = l->out_shape.c, bnd = 3;
    if (nb) add_tensor(&m->tensors[m->ntensors++], l, i, "bias", l->param_off + l->nweight, bnd, bd, bb);
    if (l->buf_len) {
      int cd[1] = {(int)(l->buf_len / 2)};
      add_tensor(&m->buf_tensors[m->nbuf_tensors++], l, i, "running_mean", l->buf_off, 1, cd,
                 whole_block(l->buf_len / 2));
      add_tensor(&m->buf_tensors[m->nbuf_tensors++], l, i, "running_var",
                 l->buf_off + l->buf_len / 2, 1, cd, whole_block(l->buf_len / 2));
    }
  }
  return 0;
}

/* The whole model as a range: a flatten of the model input aliases x. */
static layer_range_t whole(model_t *m) {
  return (layer_range_t){m->layers, 0, m->nlayers - 1, m->nlayers - 1, 1, m->cost,
                         m->recompute ? &m->ws_owner : NULL, 0};
}

/* Flatten only reinterprets NHWC memory: it aliases its input, except as
 * the model's last layer, whose dout the loss writes, and, in a stage, as a
 * reader of the stage's input (the stage keeps its output and input
 * gradient in storage of its own). */
int layer_range_is_alias(const layer_range_t *r, int i) {
  const layer_t *l = &r->layers[i];
  return l->spec.kind == LAYER_FLATTEN && i != r->model_last &&
         (r->alias_x || l->spec.input >= r->first);
}

static size_t layer_floats(const layer_range_t *r, int i, int batch) {
  const layer_t *l = &r->layers[i];
  size_t own = layer_range_is_alias(r, i) ? 0 : 2 * (size_t)batch * shape_size(l->out_shape);
  return own + l->scratch_len;
}

size_t layer_range_act_floats(const layer_range_t *r, int batch) {
  size_t total = 0;
  for (int i = r->first; i <= r->last; i++)
    if (!r->layers[i].in_workspace) total += layer_floats(r, i, batch);
  return total;
}

size_t layer_range_ws_floats(const layer_range_t *r, int batch) {
  size_t most = 0, seg = 0;
  for (int i = r->first; i <= r->last; i++) {
    if (r->layers[i].in_workspace) seg += layer_floats(r, i, batch);
    if (r->layers[i].recompute_from) most = seg > most ? seg : most, seg = 0;
  }
  return most;
}

float *layer_range_assign(const layer_range_t *r, int batch, float *p, float *ws) {
  float *w = ws;
  for (int i = r->first; i <= r->last; i++) {
    layer_t *l = &r->layers[i];
    float **at = l->in_workspace ? &w : &p;
    if (layer_range_is_alias(r, i)) {
      const layer_t *src = l->spec.input < r->first ? NULL : &r->layers[l->spec.input];
      l->out = src ? src->out : NULL;
      l->dout = src ? src->dout : NULL;
    } else {
      size_t sz = (size_t)batch * shape_size(l->out_shape);
      l->out = *at, *at += sz;
      l->dout = *at, *at += sz;
    }
    l->scratch = l->scratch_len ? *at : NULL;
    *at += l->scratch_len;
    if (l->recompute_from) w = ws; /* the next segment overlays this one */
  }
  return p;
}

/* After a layer's setup: a layer that keeps its input's channels keeps
 * its shard of them; one that changes them (flatten, dense, conv2d) gives
 * a whole output, unless it splits it itself. A layer that changes the
 * channels of a split input would mix shards: refused. */
static int set_shard(layer_t *l) {
  int split_in = l->in_full != l->in_shape.c;
  layer_kind_t k = l->spec.kind;
  if (l->in_hfull != l->in_shape.h && k != LAYER_LOCAL2D && k != LAYER_ROWGATHER &&
      k != LAYER_RELU && k != LAYER_TANH && k != LAYER_SIGMOID)
    return dt_error("%s cannot read a band of rows (%d of %d) of a split=rows local2d layer: only "
                    "local2d, relu, tanh and sigmoid run on a band", layer_kind_name(k),
                    l->in_shape.h, l->in_hfull);
  if (k != LAYER_LOCAL2D && k != LAYER_ROWGATHER && l->out_shape.h != l->in_shape.h)
    l->out_hfull = l->out_shape.h, l->out_hoff = 0; /* a new height: whole */
  if (l->spec.kind == LAYER_DENSE || l->spec.kind == LAYER_CONV2D || l->spec.kind == LAYER_ALLGATHER ||
      l->spec.kind == LAYER_LINEAR)
    return 0; /* set their own */
  if (l->out_shape.c == l->in_shape.c) return 0;
  if (split_in)
    return dt_error("%s cannot read a tensor-parallel shard (%d of %d channels): it mixes them",
                    layer_kind_name(l->spec.kind), l->in_shape.c, l->in_full);
  l->out_full = l->out_shape.c, l->out_off = 0;
  return 0;
}

/* add's second input: an earlier node of the same shape (checked once
 * both are set up, in add's setup through x2's shape). */
static int check_second_input(model_t *m, layer_t *l, int i, const char *source) {
  if (l->spec.kind != LAYER_ADD) return 0;
  int j = l->spec.input2;
  if (j >= i || j < 0)
    return dt_error("%s:%d: add: with= must name an earlier layer (the residual stream)", source,
                    l->spec.line);
  l->x2 = NULL;
  l->in2_shape = m->layers[j].out_shape;
  return 0;
}

/* lmhead tie=NAME: the embedding's table [vocab, width] as its weight,
 * no parameters of its own; the embedding's backward then adds to the
 * gradient the head wrote. */
static int tie_head(model_t *m, layer_t *l, const char *source) {
  layer_t *e = &m->layers[l->spec.tie - 1];
  if (e->spec.kind != LAYER_EMBEDDING)
    return dt_error("%s:%d: lmhead tie= names line %d, a %s: it must name an embedding", source,
                    l->spec.line, e->spec.line, layer_kind_name(e->spec.kind));
  if (e->spec.vocab != l->spec.vocab || e->out_shape.c != l->in_shape.c)
    return dt_error("%s:%d: lmhead tie=: the embedding (line %d) is %dx%d but the head needs "
                    "%dx%d: give both the same vocab and width", source, l->spec.line,
                    e->spec.line, e->spec.vocab, e->out_shape.c, l->spec.vocab, l->in_shape.c);
  l->param_len = l->nweight = 0;
  e->tied = 1;
  return 0;
}

/* A node read by two layers (the residual stream: a layer norm and an
 * add) gets its gradient from both: in backward the later reader writes
 * it and the earlier adds to it, which the earlier must support. */
static int plan_gradient_sums(model_t *m, const char *source) {
  char *written = calloc((size_t)m->nlayers + 1, 1);
  if (!written) return dt_error("out of memory");
  int rc = 0;
  for (int i = m->nlayers - 1; i >= 0 && rc == 0; i--) {
    layer_t *l = &m->layers[i];
    int ins[2] = {l->spec.input, l->spec.kind == LAYER_ADD ? l->spec.input2 : -2};
    for (int k = 0; k < 2 && rc == 0; k++) {
      int p = ins[k];
      if (p < -1) continue;
      if (!written[p + 1]) { written[p + 1] = 1; continue; }
      if (!layer_kind_adds_dx(l->spec.kind))
        rc = dt_error("%s:%d: %s reads a node a later layer reads too, and cannot add its "
                      "gradient to the later one's: read it through a layernorm or add", source,
                      l->spec.line, layer_kind_name(l->spec.kind));
      if (k == 0) l->dx_add = 1;
      else l->dx2_add = 1;
    }
  }
  free(written);
  return rc;
}

static int setup_layers(model_t *m, const char *source) {
  size_t poff = 0, boff = 0;
  for (int i = 0; i < m->nlayers; i++) {
    layer_t *l = &m->layers[i];
    if (l->spec.input >= i) return dt_error("%s:%d: a layer can only read an earlier one", source, l->spec.line);
    for (int j = 0; j < i; j++)
      if (m->layers[j].spec.input == l->spec.input)
        return dt_error("%s:%d: two layers read the same input; branching with several "
                        "consumers is not supported yet", source, l->spec.line);
    l->ops = layer_ops_for(l->spec.kind);
    if (check_second_input(m, l, i, source) != 0) return -1;
    const layer_t *src = l->spec.input < 0 ? NULL : &m->layers[l->spec.input];
    l->in_shape = src ? src->out_shape : m->input;
    l->in_full = src ? src->out_full : m->input.c;
    l->in_off = src ? src->out_off : 0;
    l->out_full = l->in_full, l->out_off = l->in_off; /* dense and conv2d set their own */
    l->in_hfull = src ? src->out_hfull : m->input.h;
    l->in_hoff = src ? src->out_hoff : 0;
    l->out_hfull = l->in_hfull, l->out_hoff = l->in_hoff; /* local2d, rowgather set their own */
    l->tp = m->tp;
    l->bn_sync = m->bn_sync;
    if (l->ops->setup(l, m->max_batch) != 0)
      return dt_error_prefix("%s:%d: ", source, l->spec.line);
    if (set_shard(l) != 0) return dt_error_prefix("%s:%d: ", source, l->spec.line);
    if (l->spec.kind == LAYER_LMHEAD && l->spec.tie) DT_TRY(tie_head(m, l, source));
    l->param_off = poff;
    l->buf_off = boff;
    poff += l->param_len;
    boff += l->buf_len;
  }
  m->nparams = poff;
  m->nbuffers = boff;
  DT_TRY(plan_gradient_sums(m, source));
  const layer_t *last = &m->layers[m->nlayers - 1];
  m->positions = 1;
  if (last->spec.kind == LAYER_LMHEAD) { /* a prediction at every position */
    if (last->out_shape.c != m->nclasses)
      return dt_error("%s:%d: lmhead predicts %d tokens but the data has %d (set vocab=%d)", source,
                      last->spec.line, last->out_shape.c, m->nclasses, m->nclasses);
    m->positions = last->out_shape.h * last->out_shape.w;
  } else if (shape_size(last->out_shape) != (size_t)m->nclasses) {
    int builtin = strncmp(source, "builtin:", 8) == 0; /* its text is not the user's to edit */
    return dt_error("%s:%d: the last layer gives %zu outputs but the data has %d classes (%s units=%d "
                    "on it%s)", source, last->spec.line, shape_size(last->out_shape), m->nclasses,
                    builtin ? "copy the model from docs/MODEL_FORMAT.md into a file with" : "set",
                    m->nclasses, builtin ? ", and give --model that file" : "");
  }
  return 0;
}

/* One allocation for every layer's out, dout and scratch, and the
 * recompute workspace. */
static int allocate_activations(model_t *m) {
  layer_range_t r = whole(m);
  m->ws_owner = -1;
  DT_TRY(layer_range_plan_recompute(&r, m->layers, m->recompute));
  size_t probs = (size_t)m->max_batch * (size_t)m->nclasses * (size_t)m->positions;
  size_t kept = layer_range_act_floats(&r, m->max_batch), ws = layer_range_ws_floats(&r, m->max_batch);
  /* zeroed here, not mapped on first touch: a step's first pass would take
   * the faults of its activations (gpt's 659 MB: 0.3-0.4 s) */
  float *p = dt_alloc_floats(probs + kept + ws);
  if (!p) return -1;
  m->act_arena = p;
  m->act_bytes = (probs + kept + ws) * sizeof(float);
  m->probs = p;
  p += probs;
  layer_range_assign(&r, m->max_batch, p, p + kept);
  return 0;
}

static void assign_views(model_t *m) {
  for (int i = 0; i < m->nlayers; i++) {
    layer_t *l = &m->layers[i];
    l->w = m->params + l->param_off;
    l->dw = m->grads + l->param_off;
    l->b = l->w + l->nweight;
    l->db = l->dw + l->nweight;
    l->running_mean = l->buf_len ? m->buffers + l->buf_off : NULL;
    l->running_var = l->buf_len ? m->buffers + l->buf_off + l->buf_len / 2 : NULL;
  }
  for (int i = 0; i < m->nlayers; i++) { /* a tied head reads and writes the embedding's table */
    layer_t *l = &m->layers[i];
    if (l->spec.kind == LAYER_LMHEAD && l->spec.tie) {
      l->w = m->layers[l->spec.tie - 1].w;
      l->dw = m->layers[l->spec.tie - 1].dw;
    }
  }
}

int model_build(const model_spec_t *spec, shape_t input, int nclasses, int max_batch,
                model_t **out) {
  if (spec->input.c) {
    if (spec->input.c != input.c || spec->input.h != input.h || spec->input.w != input.w)
      return dt_error("%s: the model expects input %dx%dx%d but the data is %dx%dx%d",
                      spec->source, spec->input.c, spec->input.h, spec->input.w, input.c,
                      input.h, input.w);
  }
  model_t *m = calloc(1, sizeof *m);
  if (!m) return dt_error("out of memory");
  m->input = input;
  m->tp = spec->tp;
  m->bn_sync = spec->bn_sync;
  m->recompute = spec->recompute;
  m->nclasses = nclasses;
  m->max_batch = max_batch;
  layer_spec_t *ls = NULL;
  if (fuse_activations(spec, &ls, &m->nlayers) != 0) goto fail;
  m->layers = calloc((size_t)m->nlayers, sizeof *m->layers);
  if (!m->layers) { dt_error("out of memory"); goto fail; }
  for (int i = 0; i < m->nlayers; i++) m->layers[i].spec = ls[i];
  free(ls);
  ls = NULL;
  if (setup_layers(m, spec->source) != 0) goto fail;
  /* mapped: a pipeline stage touches its own range of them */
  m->params = dt_map_floats(m->nparams);
  m->grads = dt_map_floats(m->nparams);
  m->buffers = dt_alloc_floats(m->nbuffers);
  if (!m->params || !m->grads || !m->buffers) goto fail;
  assign_views(m);
  if (allocate_activations(m) != 0 || describe_tensors(m) != 0) goto fail;
  *out = m;
  return 0;
fail:
  free(ls);
  model_free(m);
  return -1;
}

void model_free(model_t *m) {
  if (!m) return;
  dt_unmap_floats(m->params, m->nparams);
  dt_unmap_floats(m->grads, m->nparams);
  dt_free(m->buffers);
  dt_free(m->act_arena);
  if (m->act_counted) nn_activation_count(m->act_bytes, 0);
  free(m->layers);
  free(m->tensors);
  free(m->buf_tensors);
  free(m);
}

void model_init_params(model_t *m, uint64_t seed) {
  for (int i = 0; i < m->nlayers; i++) {
    layer_t *l = &m->layers[i];
    rng_t rng;
    rng_seed(&rng, rng_derive(seed, 0x1417, (uint64_t)l->spec.index));
    if (l->ops->init) l->ops->init(l, &rng);
  }
}

/* One layer call's cost: the clock and its group's counters before it. */
typedef struct {
  double t0, sec;
  uint64_t sent, received;
} layer_meter_t;

/* The group a layer sums over, if any (a split layer's or a synchronized
 * batch norm's). */
static const tp_link_t *layer_link(const layer_t *l) {
  if (l->spec.kind == LAYER_BATCHNORM) return l->bn_sync;
  return l->spec.split != SPLIT_NONE || l->spec.kind == LAYER_ALLGATHER ||
                 l->spec.kind == LAYER_ROWGATHER ? l->tp : NULL;
}

static layer_meter_t meter_start(const layer_t *l) {
  const tp_link_t *g = layer_link(l);
  layer_meter_t m = {dt_now(), 0, 0, 0};
  if (g) m.sec = g->sec, m.sent = g->sent, m.received = g->received;
  return m;
}

/* Charges the call to its kind: its sums as communication, the rest as
 * compute. Returns the time it ended. */
static double meter_stop(const layer_range_t *r, const layer_t *l, const layer_meter_t *m) {
  double t1 = dt_now(), comm = 0;
  layer_cost_t *c = &r->cost[l->spec.kind];
  const tp_link_t *g = layer_link(l);
  if (g) {
    comm = g->sec - m->sec;
    c->bytes_sent += g->sent - m->sent;
    c->bytes_received += g->received - m->received;
  }
  c->comm_sec += comm;
  c->compute_sec += t1 - m->t0 - comm;
  return t1;
}

static const float *layer_input(const layer_range_t *r, const layer_t *l, const float *x) {
  return l->spec.input < r->first ? x : r->layers[l->spec.input].out;
}

/* add's second input, as layer_input reads the first. */
static const float *layer_input2(const layer_range_t *r, const layer_t *l, const float *x) {
  return l->spec.input2 < r->first ? x : r->layers[l->spec.input2].out;
}

static void forward_layer(const layer_range_t *r, int i, const float *x, int n, int train,
                          rng_t *rng, const char *what) {
  layer_t *l = &r->layers[i];
  if (l->spec.kind == LAYER_ADD) l->x2 = layer_input2(r, l, x);
  layer_meter_t mt = meter_start(l);
  l->ops->forward(l, layer_input(r, l, x), n, train, rng);
  double t1 = meter_stop(r, l, &mt);
  if (!what) l->forward_sec += t1 - mt.t0;
  if (dt_trace) trace_slice(dt_trace, TRACE_COMPUTE, what ? what : l->ops->name, i, mt.t0, t1);
}

void layer_range_forward(const layer_range_t *r, const float *x, int n, int train, rng_t *rng,
                         param_wait_fn wait, void *ctx) {
  for (int i = r->first; i <= r->last; i++) {
    layer_t *l = &r->layers[i];
    if (layer_range_is_alias(r, i)) {
      /* Every forward: a chain of flattens over the input aliases x. */
      l->out = (float *)layer_input(r, l, x);
      continue;
    }
    if (wait && l->param_len) wait(ctx, i);
    forward_layer(r, i, x, n, train, rng, NULL);
    if (l->recompute_from && r->ws_owner) *r->ws_owner = r->owner_base + i;
  }
}

/* Before the backward of the segment ending at layer e: its workspace
 * layers' forward again from its kept input, unless the workspace still
 * holds them (the last segment a forward ran). Layers outside the
 * workspace (dropout: its mask) kept theirs. The backward then dirties
 * the workspace. */
static void recompute_segment(const layer_range_t *r, int e, const float *x, int n) {
  int s = r->layers[e].recompute_from - 1;
  if (*r->ws_owner != r->owner_base + e)
    for (int i = s; i < e; i++)
      if (r->layers[i].in_workspace) forward_layer(r, i, x, n, 1, NULL, "recompute");
  *r->ws_owner = -1;
}

/* The input gradient layer_range_backward hands layer l: the caller's dx
 * to a reader of the range's input, else its input layer's dout (NULL for
 * a flatten that aliases the model's input). */
static float *input_gradient(const layer_t *layers, int first, const layer_t *l, float *dx) {
  return l->spec.input < first ? dx : layers[l->spec.input].dout;
}

void layer_range_backward(const layer_range_t *r, const float *x, float *dx, int n,
                          grad_ready_fn ready, void *ctx) {
  for (int i = r->last; i >= r->first; i--) {
    layer_t *l = &r->layers[i];
    if (layer_range_is_alias(r, i)) continue;
    if (l->recompute_from && r->ws_owner) recompute_segment(r, i, x, n);
    float *ldx = input_gradient(r->layers, r->first, l, dx);
    if (l->spec.kind == LAYER_ADD)
      l->dx2 = l->spec.input2 < r->first ? dx : r->layers[l->spec.input2].dout;
    int early = ready && l->param_len && ldx && l->ops->backward_input;
    layer_meter_t mt = meter_start(l);
    l->ops->backward(l, layer_input(r, l, x), early ? NULL : ldx, n);
    double t1 = meter_stop(r, l, &mt);
    if (dt_trace) trace_slice(dt_trace, TRACE_COMPUTE, "backward", i, mt.t0, t1);
    if (ready && l->param_len) ready(ctx, i);
    if (early) {
      mt = meter_start(l);
      l->ops->backward_input(l, ldx, n);
      t1 = meter_stop(r, l, &mt);
      if (dt_trace) trace_slice(dt_trace, TRACE_COMPUTE, "backward input", i, mt.t0, t1);
    }
  }
}

const float *model_forward(model_t *m, const float *x, int n, int train, rng_t *rng) {
  return model_forward_waiting(m, x, n, train, rng, NULL, NULL);
}

const float *model_forward_waiting(model_t *m, const float *x, int n, int train, rng_t *rng,
                                   param_wait_fn wait, void *ctx) {
  layer_range_t r = whole(m);
  if (train && !m->act_counted) nn_activation_count(m->act_bytes, m->act_counted = 1);
  layer_range_forward(&r, x, n, train, rng, wait, ctx);
  return m->layers[m->nlayers - 1].out;
}

double model_loss(model_t *m, const int32_t *labels, int n, int denom, double *correct) {
  layer_t *last = &m->layers[m->nlayers - 1];
  return softmax_xent_seq(last->out, labels, n, m->positions, m->nclasses, denom, m->probs,
                          last->dout, correct);
}

const float *model_layer_input(const model_t *m, int i, const float *x) {
  int from = m->layers[i].spec.input;
  return from < 0 ? x : m->layers[from].out;
}

void model_bn_sync_idle(model_t *m) {
  if (!m->bn_sync) return;
  for (int i = 0; i < m->nlayers; i++)
    if (m->layers[i].spec.kind == LAYER_BATCHNORM) bn_sync_idle(&m->layers[i], 0, 0);
  for (int i = m->nlayers - 1; i >= 0; i--) {
    layer_t *l = &m->layers[i];
    if (l->spec.kind == LAYER_BATCHNORM)
      bn_sync_idle(l, 1, input_gradient(m->layers, 0, l, NULL) != NULL);
  }
}

int model_layer_sums(const model_t *m, int i, int n, int backward, int first, int range_dx,
                     layer_sum_t *out) {
  const layer_t *l = &m->layers[i];
  float given; /* stands for the caller's dx: only whether there is one matters */
  int has_dx = input_gradient(m->layers, first, l, range_dx ? &given : NULL) != NULL;
  return l->ops->sums ? l->ops->sums(l, n, backward, has_dx, out) : 0;
}

void model_backward(model_t *m, const float *x, int n, grad_ready_fn ready, void *ctx) {
  layer_range_t r = whole(m);
  layer_range_backward(&r, x, NULL, n, ready, ctx);
}
