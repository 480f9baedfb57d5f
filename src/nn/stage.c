/* A pipeline stage: a range of a model's layers run forward and backward
 * on its own, with the activations of several micro-batches in flight
 * (see nn.h). Each micro-batch has its own copies of the range's layer_t,
 * whose out, dout and scratch point into that micro-batch's part of one
 * arena; the copies share the model's parameter, gradient and buffer
 * views. The forward and backward loops are the model's own
 * (model_internal.h), so a stage computes exactly what the model does. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/nn.h"
#include "model_internal.h"

struct stage_mb {
  layer_t *layers;   /* indexed like model->layers; [first, last] are set */
  float *in;         /* [micro_batch, in_size] for the caller to fill */
  const float *x;    /* the input of the forward in flight */
  int n;             /* its samples; 0: none in flight */
  int has_loss;      /* stage_loss wrote the output gradient since that forward */
  const float *weights; /* the stage's parameters for this micro-batch; NULL: the model's */
  float *grads;      /* where its gradients go when not accumulating; NULL: the model's */
};

/* The first layer at or after c that reads across a cut before c (a layer
 * before c - 1, or the model input), or -1 when the cut is valid. */
static int crossing_reader(const model_t *m, int c) {
  if (c <= 0 || c >= m->nlayers) return -1;
  for (int j = c; j < m->nlayers; j++) {
    const layer_spec_t *s = &m->layers[j].spec;
    if (s->input < c - 1) return j;
    if (s->kind == LAYER_ADD && s->input2 < c - 1) return j;
  }
  return -1;
}

int model_stage_cuts(const model_t *m, int *cuts) {
  int k = 0;
  for (int c = 1; c < m->nlayers; c++)
    if (crossing_reader(m, c) < 0) cuts[k++] = c;
  return k;
}

/* "before layers 1, 2, 5" or "none: the model can only run as one stage",
 * for messages. */
static void cut_list(const model_t *m, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "before layers ");
  int any = 0;
  for (int c = 1; c < m->nlayers && len < cap; c++)
    if (crossing_reader(m, c) < 0)
      len += (size_t)snprintf(buf + len, cap - len, "%s%d", any++ ? ", " : "", c);
  if (!any) snprintf(buf, cap, "none: the model can only run as one stage");
}

static void describe_layer(const model_t *m, int i, char *buf, size_t cap) {
  if (i < 0) {
    snprintf(buf, cap, "the model input");
    return;
  }
  const layer_spec_t *s = &m->layers[i].spec;
  snprintf(buf, cap, "layer %d (%s, line %d)", i, layer_kind_name(s->kind), s->line);
}

static int check_cut(const model_t *m, int c, int first, int last) {
  int j = crossing_reader(m, c);
  if (j < 0) return 0;
  char at[96], reader[96], source[96], cuts[512];
  describe_layer(m, c, at, sizeof at);
  describe_layer(m, j, reader, sizeof reader);
  describe_layer(m, m->layers[j].spec.input, source, sizeof source);
  cut_list(m, cuts, sizeof cuts);
  return dt_error("stage_new: layers %d..%d: cannot cut before %s: %s reads %s across the cut "
                  "(only one activation may cross); valid cuts: %s",
                  first, last, at, reader, source, cuts);
}

/* Dense, conv2d and local2d layers add their gradients in place (a GEMM
 * with beta = 1 into the model's gradient), and so do the embedding and the
 * head (a tied head writes the embedding's gradient, outside its own empty
 * range: through the accumulator it would be lost); the others write into
 * the accumulator, which layer_done then adds. */
static int adds_in_place(const layer_t *l) {
  layer_kind_t k = l->spec.kind;
  return k == LAYER_DENSE || k == LAYER_CONV2D || k == LAYER_LOCAL2D || k == LAYER_EMBEDDING ||
         k == LAYER_LMHEAD;
}

/* The views into the model's arenas, taken afresh each call; dw/db into
 * the accumulator when the gradients are to be added by a layer that
 * cannot add them itself. */
/* Whether the head tied to embedding i runs in the stage: if not (the
 * pipeline puts it on a later stage), the embedding writes its gradient
 * itself, no head having written it first. */
static int head_in_stage(const stage_t *s, int i) {
  for (int j = s->first; j <= s->last; j++) {
    const layer_spec_t *h = &s->model->layers[j].spec;
    if (h->kind == LAYER_LMHEAD && h->tie - 1 == i) return 1;
  }
  return 0;
}

static void bind_params(stage_t *s, stage_mb_t *b, int accumulate) {
  for (int i = s->first; i <= s->last; i++) {
    const layer_t *ml = &s->model->layers[i];
    layer_t *l = &b->layers[i];
    l->w = ml->w, l->b = ml->b;
    l->tied = ml->tied && head_in_stage(s, i);
    if (b->weights) { /* the same offsets in the micro-batch's copy of the range */
      float *copy = (float *)b->weights;
      const float *range = s->model->params + s->param_off;
      if (ml->w) l->w = copy + (ml->w - range);
      if (ml->b) l->b = copy + (ml->b - range);
    }
    l->running_mean = ml->running_mean, l->running_var = ml->running_var;
    l->rng_skip = ml->rng_skip; /* dropout: this micro-batch's place in the stream */
    int in_place = accumulate && adds_in_place(l);
    l->grad_beta = in_place ? 1.0f : 0.0f;
    l->dw = accumulate && !in_place ? s->gacc : ml->dw;
    l->db = accumulate && !in_place ? s->gacc + l->nweight : ml->db;
    if (b->grads && !accumulate) { /* the same offsets in the micro-batch's own gradient */
      const float *range = s->model->grads + s->param_off;
      if (ml->dw) l->dw = b->grads + (ml->dw - range);
      if (ml->db) l->db = b->grads + (ml->db - range);
    }
  }
}

static layer_range_t range_of(stage_t *s, const stage_mb_t *b) {
  int base = (int)(b - s->mb) * s->model->nlayers;
  return (layer_range_t){b->layers, s->first, s->last, s->model->nlayers - 1, 0, s->cost,
                         s->model->recompute ? &s->ws_owner : NULL, base};
}

int stage_new(model_t *m, int first, int last, int max_micro, int micro_batch, stage_t **out) {
  *out = NULL;
  if (!m) return dt_error("stage_new: no model");
  if (first < 0 || last < first || last >= m->nlayers)
    return dt_error("stage_new: layers %d..%d are not a range of the model's %d layers (need "
                    "0 <= first <= last <= %d)", first, last, m->nlayers, m->nlayers - 1);
  if (max_micro < 1)
    return dt_error("stage_new: max_micro must be >= 1 (got %d)", max_micro);
  if (micro_batch < 1)
    return dt_error("stage_new: micro_batch must be >= 1 (got %d)", micro_batch);
  DT_TRY(check_cut(m, first, first, last));
  DT_TRY(check_cut(m, last + 1, first, last));

  stage_t *s = calloc(1, sizeof *s);
  if (!s) return dt_error("out of memory");
  s->model = m;
  s->cost = m->cost;
  s->first = first, s->last = last;
  s->ends_model = last == m->nlayers - 1;
  s->max_micro = max_micro, s->micro_batch = micro_batch;
  s->in_size = shape_size(m->layers[first].in_shape);
  s->out_size = shape_size(m->layers[last].out_shape);
  s->param_off = m->layers[first].param_off;
  s->param_len = m->layers[last].param_off + m->layers[last].param_len - s->param_off;
  s->buf_off = m->layers[first].buf_off;
  s->buf_len = m->layers[last].buf_off + m->layers[last].buf_len - s->buf_off;
  size_t nl = (size_t)m->nlayers, gmax = 0;
  s->mb = calloc((size_t)max_micro, sizeof *s->mb);
  layer_t *copies = s->mb ? calloc((size_t)max_micro * nl, sizeof *copies) : NULL;
  if (!copies) {
    free(s->mb);
    free(s);
    return dt_error("out of memory");
  }
  /* Copies of the range's layers for each micro-batch, their scratch
   * sized for micro_batch (setup is a pure function of spec and input). */
  for (int k = 0; k < max_micro; k++) {
    stage_mb_t *b = &s->mb[k];
    b->layers = copies + (size_t)k * nl;
    for (int i = first; i <= last; i++) {
      layer_t *l = &b->layers[i];
      *l = m->layers[i];
      if (l->ops->setup(l, micro_batch) != 0) {
        dt_error_prefix("stage_new: micro_batch %d: line %d: ", micro_batch, l->spec.line);
        stage_free(s);
        return -1;
      }
      if (l->param_len > gmax) gmax = l->param_len;
    }
    layer_range_t rk = range_of(s, b); /* the stage's own segments (a cut may split a block) */
    if (layer_range_plan_recompute(&rk, m->layers, m->recompute) != 0) {
      stage_free(s);
      return -1;
    }
  }
  s->ws_owner = -1;
  layer_range_t r = range_of(s, &s->mb[0]);
  size_t per_mb = layer_range_act_floats(&r, micro_batch) + (size_t)micro_batch * s->in_size;
  size_t ws = layer_range_ws_floats(&r, micro_batch);
  size_t total = per_mb * (size_t)max_micro + ws + gmax;
  if (s->ends_model) total += (size_t)micro_batch * (size_t)m->nclasses * (size_t)m->positions;
  float *p = s->arena = dt_alloc_floats(total);
  if (!p) {
    stage_free(s);
    return -1;
  }
  s->act_bytes = (total - gmax) * sizeof(float);
  s->gacc = p, p += gmax;
  s->ws = p, p += ws;
  if (s->ends_model) s->probs = p, p += (size_t)micro_batch * (size_t)m->nclasses * (size_t)m->positions;
  for (int k = 0; k < max_micro; k++) {
    stage_mb_t *b = &s->mb[k];
    b->in = p, p += (size_t)micro_batch * s->in_size;
    r = range_of(s, b);
    p = layer_range_assign(&r, micro_batch, p, s->ws);
  }
  *out = s;
  return 0;
}

void stage_free(stage_t *s) {
  if (!s) return;
  if (s->mb) free(s->mb[0].layers);
  free(s->mb);
  dt_free(s->arena);
  if (s->act_counted) nn_activation_count(s->act_bytes, 0);
  free(s);
}

static stage_mb_t *micro(const stage_t *s, int mb, const char *fn) {
  if (mb < 0 || mb >= s->max_micro) {
    dt_error("%s: micro-batch %d is outside 0..%d (max_micro %d)", fn, mb, s->max_micro - 1,
             s->max_micro);
    return NULL;
  }
  return &s->mb[mb];
}

int stage_forward(stage_t *s, int mb, const float *x, int n, int train, rng_t *rng,
                  const float **y) {
  stage_mb_t *b = micro(s, mb, "stage_forward");
  if (!b) return -1;
  if (n < 1 || n > s->micro_batch)
    return dt_error("stage_forward: %d samples; a micro-batch of this stage holds 1 to %d", n,
                    s->micro_batch);
  if (!x) return dt_error("stage_forward: micro-batch %d: no input", mb);
  bind_params(s, b, 0);
  layer_range_t r = range_of(s, b);
  if (train && !s->act_counted) nn_activation_count(s->act_bytes, s->act_counted = 1);
  layer_range_forward(&r, x, n, train, rng, NULL, NULL);
  if (s->model->tp && s->model->tp->failed)
    return dt_error_prefix("stage forward, tensor-parallel sum: ");
  b->x = x;
  b->n = n;
  b->has_loss = 0;
  if (y) *y = b->layers[s->last].out;
  return 0;
}

int stage_loss(stage_t *s, int mb, const int32_t *labels, int denom, double *loss_sum,
               double *correct) {
  stage_mb_t *b = micro(s, mb, "stage_loss");
  if (!b) return -1;
  if (!s->ends_model)
    return dt_error("stage_loss: layers %d..%d do not end the model (its last layer is %d): "
                    "the loss belongs to the last stage", s->first, s->last,
                    s->model->nlayers - 1);
  if (!b->n) return dt_error("stage_loss: micro-batch %d has no forward in flight", mb);
  if (denom < 1) return dt_error("stage_loss: denom must be >= 1 (got %d)", denom);
  layer_t *last = &b->layers[s->last];
  double loss = softmax_xent_seq(last->out, labels, b->n, s->model->positions, s->model->nclasses, denom, s->probs,
                             last->dout, correct);
  if (loss_sum) *loss_sum = loss;
  b->has_loss = 1;
  return 0;
}

typedef struct {
  stage_t *s;
  int accumulate;
  grad_ready_fn ready;
  void *ctx;
} backward_ctx_t;

/* After layer i's gradients are written: add them to the model's when
 * accumulating, then tell the caller. */
static void layer_done(void *ctx, int i) {
  backward_ctx_t *c = ctx;
  const layer_t *ml = &c->s->model->layers[i];
  if (c->accumulate && !adds_in_place(ml)) kern_add(ml->param_len, c->s->gacc, ml->dw);
  if (c->ready) c->ready(c->ctx, i);
}

int stage_backward(stage_t *s, int mb, const float *dy, float *dx, int accumulate,
                   grad_ready_fn ready, void *ctx) {
  stage_mb_t *b = micro(s, mb, "stage_backward");
  if (!b) return -1;
  if (!b->n)
    return dt_error("stage_backward: micro-batch %d has no forward in flight (each backward "
                    "needs a forward of its own)", mb);
  if (!dy && s->ends_model && !b->has_loss)
    return dt_error("stage_backward: micro-batch %d has no output gradient: call stage_loss "
                    "first or pass dy", mb);
  layer_t *last = &b->layers[s->last];
  if (dy && dy != last->dout) kern_copy((size_t)b->n * s->out_size, dy, last->dout);
  bind_params(s, b, accumulate);
  layer_range_t r = range_of(s, b);
  if (accumulate) {
    backward_ctx_t c = {s, 1, ready, ctx};
    layer_range_backward(&r, b->x, dx, b->n, layer_done, &c);
  } else {
    layer_range_backward(&r, b->x, dx, b->n, ready, ctx);
  }
  if (s->model->tp && s->model->tp->failed)
    return dt_error_prefix("stage backward, tensor-parallel sum: ");
  b->n = 0;
  b->has_loss = 0;
  return 0;
}

int stage_use_weights(stage_t *s, int mb, const float *w) {
  stage_mb_t *b = micro(s, mb, "stage_use_weights");
  if (!b) return -1;
  b->weights = w;
  return 0;
}

int stage_use_grads(stage_t *s, int mb, float *g) {
  stage_mb_t *b = micro(s, mb, "stage_use_grads");
  if (!b) return -1;
  b->grads = g;
  return 0;
}

void stage_meter_into(stage_t *s, layer_cost_t *cost) { s->cost = cost ? cost : s->model->cost; }

const float *stage_layer_input(const stage_t *s, int mb, int i) {
  stage_mb_t *b = micro(s, mb, "stage_layer_input");
  if (!b) return NULL;
  if (i < s->first || i > s->last) {
    dt_error("stage_layer_input: layer %d is outside the stage's %d..%d", i, s->first, s->last);
    return NULL;
  }
  int from = b->layers[i].spec.input;
  return from < s->first ? b->x : b->layers[from].out;
}

const float *stage_layer_dout(const stage_t *s, int mb, int i) {
  stage_mb_t *b = micro(s, mb, "stage_layer_dout");
  if (!b) return NULL;
  if (i < s->first || i > s->last) {
    dt_error("stage_layer_dout: layer %d is outside the stage's %d..%d", i, s->first, s->last);
    return NULL;
  }
  return b->layers[i].dout;
}

float *stage_input(stage_t *s, int mb) {
  stage_mb_t *b = micro(s, mb, "stage_input");
  return b ? b->in : NULL;
}

const float *stage_output(const stage_t *s, int mb) {
  stage_mb_t *b = micro(s, mb, "stage_output");
  return b ? b->layers[s->last].out : NULL;
}

float *stage_output_grad(stage_t *s, int mb) {
  stage_mb_t *b = micro(s, mb, "stage_output_grad");
  return b ? b->layers[s->last].dout : NULL;
}

/* Multiply-adds per sample for dense, local2d and conv2d, the output size for the
 * rest: a rough cost of a layer's forward (backward is about twice). */
static double layer_cost(const layer_t *l) {
  switch (l->spec.kind) {
    case LAYER_DENSE:
    case LAYER_LOCAL2D: return (double)l->nweight; /* each weight once a sample */
    case LAYER_CONV2D: return (double)l->nweight * l->out_shape.h * l->out_shape.w;
    default: return (double)shape_size(l->out_shape);
  }
}

int model_split_stages(const model_t *m, int P, int *first) { return model_split_costs(m, P, NULL, first); }

int model_split_costs(const model_t *m, int P, const double *cost, int *first) {
  int n = m->nlayers;
  int *bounds = malloc((size_t)(n + 1) * sizeof *bounds);
  if (!bounds) return dt_error("out of memory");
  /* bounds[0] = 0, the valid cuts, bounds[nb - 1] = n */
  int nb = 1 + model_stage_cuts(m, bounds + 1);
  bounds[nb++] = n;
  bounds[0] = 0;
  int ncuts = nb - 2;
  if (P < 1 || P > ncuts + 1) {
    char cuts[512];
    cut_list(m, cuts, sizeof cuts);
    free(bounds);
    return dt_error("model_split_stages: cannot split a model of %d layer%s into %d stage%s: it "
                    "has %d valid cut%s (%s), so 1 to %d stage%s", n, n == 1 ? "" : "s", P,
                    P == 1 ? "" : "s", ncuts, ncuts == 1 ? "" : "s", cuts, ncuts + 1,
                    ncuts ? "s" : "");
  }
  double *pre = malloc((size_t)(n + 1) * sizeof *pre);
  /* best[k * nb + j]: the smallest largest cost of k + 1 stages over the
   * layers before bounds[j]; from[...]: where the last of them starts. */
  double *best = malloc((size_t)P * nb * sizeof *best);
  int *from = malloc((size_t)P * nb * sizeof *from);
  if (!pre || !best || !from) {
    free(bounds), free(pre), free(best), free(from);
    return dt_error("out of memory");
  }
  pre[0] = 0;
  for (int i = 0; i < n; i++) pre[i + 1] = pre[i] + (cost ? cost[i] : layer_cost(&m->layers[i]));
  for (int j = 0; j < nb; j++) {
    best[j] = j ? pre[bounds[j]] : -1; /* -1: no stage can end at layer 0 */
    from[j] = 0;
  }
  for (int k = 1; k < P; k++)
    for (int j = 0; j < nb; j++) {
      double *bj = &best[k * nb + j];
      *bj = -1;
      from[k * nb + j] = -1;
      for (int i = 1; i < j; i++) {
        double prev = best[(k - 1) * nb + i];
        if (prev < 0) continue;
        double last = pre[bounds[j]] - pre[bounds[i]];
        double v = prev > last ? prev : last;
        if (*bj < 0 || v < *bj) *bj = v, from[k * nb + j] = i;
      }
    }
  /* Walk back from the end: stage k starts at bounds[from[k][j]]. */
  int j = nb - 1;
  for (int k = P - 1; k >= 0; k--) {
    int i = from[k * nb + j];
    first[k] = bounds[i];
    j = i;
  }
  free(bounds), free(pre), free(best), free(from);
  return 0;
}
