/* Recomputation (--recompute): which layers keep their activations for
 * the backward pass and which are rebuilt there (GPipe's
 * re-materialisation; Chen et al. 2016, "Training deep nets with
 * sublinear memory cost").
 *
 * A segment [s, e] is a run of layers that only its input (the output of
 * s - 1, or the range's input) enters and only e's output leaves: it
 * starts and ends at valid pipeline cuts. Its layers but e (and dropout,
 * whose mask is its own draw) hold their out, dout and scratch in one
 * workspace that every segment shares; the forward pass overwrites it
 * segment after segment, and the backward pass runs a segment's forward
 * again from its kept input before the segment's backward. The same code
 * on the same inputs gives the same bits, so recomputation changes no
 * result.
 *
 * BLOCKS: a segment per transformer block (the cut-to-cut pieces from one
 * holding an attention layer through the pieces after it that end in a
 * residual add: attention's half and the MLP's half), so what stays is
 * the residual stream at each block's input. FULL: one segment, the whole
 * range (the model, or a pipeline stage, whose input each micro-batch
 * keeps): everything is recomputed, and the workspace is one micro-batch's
 * activations however many are in flight. Chen's √n segments sit between
 * the two; for a transformer the block boundary is the cheap place to cut
 * (one [T, C] tensor against some 30 [T, C] tensors and the attention
 * matrix inside a block), so BLOCKS is the √n choice at depths like gpt's. */
#include <string.h>

#include "dtrain/nn.h"
#include "model_internal.h"

int recompute_parse(const char *s, int *out) {
  static const char *names[] = {"none", "blocks", "full"};
  for (int k = 0; k < 3; k++)
    if (!strcmp(s, names[k])) return *out = k, 0;
  return -1;
}

const char *recompute_name(int mode) {
  return mode == RECOMPUTE_BLOCKS ? "blocks" : mode == RECOMPUTE_FULL ? "full" : "none";
}

/* Per thread: each rank of the local transport is one. */
static _Thread_local size_t act_live, act_peak;

void nn_activation_count(size_t bytes, int add) {
  if (add) {
    act_live += bytes;
    if (act_live > act_peak) act_peak = act_live;
  } else {
    act_live = bytes <= act_live ? act_live - bytes : 0;
  }
}

size_t nn_activation_peak_bytes(void) { return act_peak; }

void nn_activation_reset_peak(void) { act_peak = act_live; }

/* Whether a segment could start at layer c of the n layers: no activation
 * from before c - 1 is read from c on (stage.c's rule, on a layer array,
 * less its tied head: the table it reads is a parameter, which the
 * backward pass has at hand). */
static int valid_cut(const layer_t *L, int n, int c) {
  for (int j = c; j < n; j++) {
    const layer_spec_t *s = &L[j].spec;
    if (s->input < c - 1) return 0;
    if (s->kind == LAYER_ADD && s->input2 < c - 1) return 0;
  }
  return 1;
}

/* The end of the cut-to-cut piece starting at layer c. */
static int piece_end(const layer_t *L, int n, int c) {
  int e = c;
  while (e + 1 < n && !valid_cut(L, n, e + 1)) e++;
  return e;
}

static int piece_has_attention(const layer_t *L, int c, int e) {
  for (int i = c; i <= e; i++)
    if (L[i].spec.kind == LAYER_ATTENTION) return 1;
  return 0;
}

/* The transformer block that layer c starts, if it starts one: *end = its
 * last layer. */
static int block_at(const layer_t *L, int n, int c, int *end) {
  int e = piece_end(L, n, c);
  if (!piece_has_attention(L, c, e)) return 0;
  while (e + 1 < n) {
    int e2 = piece_end(L, n, e + 1);
    if (piece_has_attention(L, e + 1, e2) || L[e2].spec.kind != LAYER_ADD) break;
    e = e2;
  }
  *end = e;
  return 1;
}

/* Layers s..e of the range as one segment (nothing when it is one layer). */
static int mark_segment(const layer_range_t *r, int s, int e) {
  if (s < r->first) s = r->first;
  if (e > r->last) e = r->last;
  if (e <= s) return 0;
  for (int i = s; i < e; i++) {
    layer_t *l = &r->layers[i];
    if (l->spec.kind == LAYER_BATCHNORM)
      return dt_error("--recompute: line %d: a batchnorm inside a recomputed segment would "
                      "update its running statistics twice; use --recompute none", l->spec.line);
    l->in_workspace = l->spec.kind != LAYER_DROPOUT && !layer_range_is_alias(r, i);
  }
  r->layers[e].recompute_from = 1 + s;
  return 0;
}

int layer_range_plan_recompute(const layer_range_t *r, const layer_t *all, int mode) {
  for (int i = r->first; i <= r->last; i++) r->layers[i].recompute_from = r->layers[i].in_workspace = 0;
  if (mode == RECOMPUTE_NONE) return 0;
  if (mode == RECOMPUTE_FULL) return mark_segment(r, r->first, r->last);
  int n = r->model_last + 1, blocks = 0;
  for (int c = 0; c < n;) {
    int e;
    if (!(c == 0 || valid_cut(all, n, c)) || !block_at(all, n, c, &e)) {
      c++;
      continue;
    }
    blocks++;
    if (e >= r->first && c <= r->last) DT_TRY(mark_segment(r, c, e));
    c = e + 1;
  }
  if (!blocks)
    return dt_error("--recompute blocks: the model has no transformer block (an attention layer "
                    "between residual adds) to recompute; use --recompute full or none");
  return 0;
}
