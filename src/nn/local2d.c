/* Locally connected 2-D layer (Dean et al. 2012, DistBelief; the taxonomy
 * seed sec. 3.1.1): a convolution whose filters are not shared, one filter
 * bank per output position. Its point in DistBelief is the split it allows:
 * cut the image into bands of rows, one per machine, and only the edges
 * that cross a band's boundary (the input rows a window reaches past it)
 * travel between machines.
 *
 * Weight [out_h, out_w, filters, k·k·in_c] (the last axis (ky, kx, c), as a
 * conv2d's [out, kh, kw, in]); bias [out_h, out_w, filters]. Columns as a
 * conv2d makes them, [n, positions, k·k·in_c]; each position p is then one
 * GEMM over the batch, its rows strided by the positions:
 *   forward   out[:, p, :] = cols[:, p, :] · W_pᵀ + b_p
 *   backward  dW_p = dout[:, p, :]ᵀ · cols[:, p, :], db_p = Σ_n dout[:, p, :],
 *             dcols[:, p, :] = dout[:, p, :] · W_p (over the columns), col2im.
 *
 * Split by rows (SPLIT_ROWS, nn.h): tp rank t holds output rows
 * tp_block(out_h, T, t) and their weights. Its windows read input rows
 * [r0, r1). An input that is whole on every rank (the data, a replicated
 * layer) is read in place, and its gradient, partial on each rank, is
 * summed over the group (allreduce). An input that is banded (the output
 * of a split local2d, through relu, tanh, sigmoid) holds rows
 * tp_block(in_h, T, t): the rows of [r0, r1) beyond that band come from
 * neighbours t - 1 and t + 1 (the halo; a window reaching further is
 * refused at setup), and in backward their gradients go back and are added
 * where they belong. A halo of R rows is R·in_w·in_c floats a sample each
 * way of a boundary. */
#include "dtrain/nn.h"

#include <limits.h>
#include <math.h>
#include <string.h>

typedef struct {
  int H, W, C;        /* input; H the one-worker height */
  int OH, OW, F;      /* output; OH the one-worker height */
  int k, s, p, kdim;  /* kdim = k·k·C: one column row */
  int oy0, noy;       /* this rank's output rows */
  int r0, r1;         /* the input rows its windows read, inside [0, H) */
  int x0, xh;         /* the input rows x holds (its band, or all of them) */
} lgeom_t;

/* The neighbour exchanges of a banded input, in rows of the one-worker
 * input: forward sends rows [send0, send0 + nsend) of this rank's band to
 * peer and receives [recv0, recv0 + nrecv) of the peer's; backward the
 * reverse, with gradients. */
typedef struct {
  int peer, send0, nsend, recv0, nrecv;
} halo_t;

static void out_band(const layer_t *l, int OH, int q, int *oy0, int *noy) {
  if (l->spec.split == SPLIT_ROWS) tp_block(OH, l->tp->size, q, oy0, noy);
  else *oy0 = 0, *noy = OH;
}

/* The input rows [r0, r1) that output rows [oy0, oy0 + noy) read. */
static void rows_read(const lgeom_t *g, int oy0, int noy, int *r0, int *r1) {
  int lo = oy0 * g->s - g->p, hi = (oy0 + noy - 1) * g->s - g->p + g->k;
  *r0 = lo < 0 ? 0 : lo;
  *r1 = hi > g->H ? g->H : hi;
  if (*r1 < *r0) *r1 = *r0;
}

static int banded(const layer_t *l) { return l->in_hfull && l->in_hfull != l->in_shape.h; }

static lgeom_t geom_of(const layer_t *l) {
  lgeom_t g;
  g.H = l->in_hfull ? l->in_hfull : l->in_shape.h, g.W = l->in_shape.w, g.C = l->in_shape.c;
  g.OH = l->out_hfull, g.OW = l->out_shape.w, g.F = l->out_shape.c;
  g.k = l->spec.kernel, g.s = l->spec.stride, g.p = l->spec.pad, g.kdim = g.k * g.k * g.C;
  g.oy0 = l->out_hoff, g.noy = l->out_shape.h;
  rows_read(&g, g.oy0, g.noy, &g.r0, &g.r1);
  g.x0 = banded(l) ? l->in_hoff : 0, g.xh = l->in_shape.h;
  return g;
}

/* Up to two halos (t - 1, t + 1) of a split layer on a banded input;
 * returns how many. */
static int halos(const layer_t *l, const lgeom_t *g, halo_t out[2]) {
  if (l->spec.split != SPLIT_ROWS || !banded(l)) return 0;
  int T = l->tp->size, t = l->tp->rank, n = 0, end = g->x0 + g->xh;
  for (int q = t - 1; q <= t + 1; q += 2) {
    if (q < 0 || q >= T) continue;
    int qy0, qny, q0, q1;
    out_band(l, g->OH, q, &qy0, &qny);
    rows_read(g, qy0, qny, &q0, &q1);
    halo_t h = {q, 0, 0, 0, 0};
    if (q < t) { /* above: it reads my first rows, I read its last */
      h.send0 = g->x0, h.nsend = (q1 < end ? q1 : end) - g->x0;
      h.recv0 = g->r0, h.nrecv = g->x0 - g->r0;
    } else {
      h.send0 = q0 > g->x0 ? q0 : g->x0, h.nsend = end - h.send0;
      h.recv0 = end, h.nrecv = g->r1 - end;
    }
    if (h.nsend < 0) h.nsend = 0;
    if (h.nrecv < 0) h.nrecv = 0;
    if (h.nsend || h.nrecv) out[n++] = h;
  }
  return n;
}

/* Floats of a sample's row of the input. */
static size_t row_len(const lgeom_t *g) { return (size_t)g->W * g->C; }

/* The scratch: columns, then (banded) the input rows [r0, r1), then each
 * halo's two buffers (what this rank's band gives, what it takes). */
static size_t cols_len(const lgeom_t *g, int n) { return (size_t)n * g->noy * g->OW * g->kdim; }
static size_t ext_len(const layer_t *l, const lgeom_t *g, int n) {
  return banded(l) ? (size_t)n * (g->r1 - g->r0) * row_len(g) : 0;
}

static int local_setup(layer_t *l, int max_batch) {
  const layer_spec_t *s = &l->spec;
  if (s->filters <= 0 || s->kernel <= 0 || s->stride <= 0 || s->pad < 0)
    return dt_error("local2d: filters, kernel and stride must be > 0 and pad >= 0 (got %d, %d, "
                    "%d, %d)", s->filters, s->kernel, s->stride, s->pad);
  if (l->in_full == 0) l->in_full = l->in_shape.c; /* a layer set up on its own: whole */
  if (l->in_hfull == 0) l->in_hfull = l->in_shape.h;
  if (l->in_full != l->in_shape.c)
    return dt_error("local2d: reads a tensor-parallel shard of channels (split its input by rows)");
  if (s->split != SPLIT_NONE && s->split != SPLIT_ROWS)
    return dt_error("local2d: splits by rows only (split=rows)");
  if (s->split == SPLIT_ROWS && !l->tp) return dt_error("local2d: split=rows but given no group");
  if (banded(l) && s->split != SPLIT_ROWS)
    return dt_error("local2d: reads a band of rows of a split=rows layer: give it split=rows too");
  int H = l->in_hfull, ph = H + 2 * s->pad, pw = l->in_shape.w + 2 * s->pad;
  if (s->kernel > ph || s->kernel > pw)
    return dt_error("local2d: kernel %d larger than the padded input %dx%d (use kernel=%d or "
                    "less, or more pad)", s->kernel, ph, pw, ph < pw ? ph : pw);
  int OH = (ph - s->kernel) / s->stride + 1, OW = (pw - s->kernel) / s->stride + 1;
  if (s->split == SPLIT_ROWS && OH < l->tp->size)
    return dt_error("local2d split=rows: %d output row%s cannot be split over %d tensor-parallel "
                    "ranks (use --tp %d or fewer)", OH, OH == 1 ? "" : "s", l->tp->size, OH);
  l->out_hfull = OH, l->out_full = s->filters, l->out_off = 0;
  out_band(l, OH, s->split == SPLIT_ROWS ? l->tp->rank : 0, &l->out_hoff, &l->out_shape.h);
  l->out_shape.w = OW, l->out_shape.c = s->filters;
  lgeom_t g = geom_of(l);
  if (banded(l)) { /* every rank's halo must lie in its neighbours' bands */
    for (int q = 0; q < l->tp->size; q++) {
      int qy0, qny, q0, q1, a0, an, b0, bn;
      out_band(l, OH, q, &qy0, &qny);
      rows_read(&g, qy0, qny, &q0, &q1);
      tp_block(H, l->tp->size, q > 0 ? q - 1 : q, &a0, &an);
      tp_block(H, l->tp->size, q + 1 < l->tp->size ? q + 1 : q, &b0, &bn);
      if (q0 < a0 || q1 > b0 + bn)
        return dt_error("local2d split=rows: tp rank %d's windows read input rows %d..%d, past "
                        "its neighbours' bands (%d..%d): bands of %d rows are too thin for "
                        "kernel %d (use fewer ranks)", q, q0, q1 - 1, a0, b0 + bn - 1, an, s->kernel);
    }
  }
  size_t pos = (size_t)g.noy * OW, rows = (size_t)max_batch * pos;
  if (rows > INT_MAX || pos * g.kdim > INT_MAX || (size_t)g.F * g.kdim > INT_MAX)
    return dt_error("local2d: batch %d of %dx%d outputs is too large", max_batch, g.noy, OW);
  l->nweight = pos * g.F * g.kdim;
  l->param_len = l->nweight + pos * g.F;
  l->buf_len = 0;
  l->scratch_len = cols_len(&g, max_batch) + ext_len(l, &g, max_batch);
  halo_t h[2];
  int nh = halos(l, &g, h);
  for (int i = 0; i < nh; i++)
    l->scratch_len += (size_t)max_batch * (h[i].nsend + h[i].nrecv) * row_len(&g);
  return 0;
}

/* PyTorch's nn.Conv2d of the same fan-in: U(±1/√(k·k·in_c)), bias likewise;
 * a split layer keeps its rows of the one-worker values. */
static void local_init(layer_t *l, rng_t *rng) {
  lgeom_t g = geom_of(l);
  float bound = 1.0f / sqrtf((float)g.kdim);
  size_t wrow = (size_t)g.OW * g.F * g.kdim, brow = (size_t)g.OW * g.F;
  layer_uniform_block(rng, bound, (size_t)g.OH, 1, wrow, (size_t)g.oy0, (size_t)g.noy, 0, wrow, l->w);
  layer_uniform_block(rng, bound, (size_t)g.OH, 1, brow, (size_t)g.oy0, (size_t)g.noy, 0, brow, l->b);
}

/* Rows [r0, r0 + rows) of n samples from src (holding rows [s0, s0 + sh)
 * of each sample) into dst (rows [d0, d0 + dh)), added when add. A packed
 * halo buffer [n, rows, w, c] is the window of its own rows. */
static void copy_rows(const lgeom_t *g, float *dst, int d0, int dh, const float *src, int s0, int sh,
                      int r0, int rows, int n, int add) {
  size_t rl = row_len(g), len = (size_t)rows * rl;
  for (int b = 0; rows > 0 && b < n; b++) {
    float *d = dst + ((size_t)b * dh + (r0 - d0)) * rl;
    const float *q = src + ((size_t)b * sh + (r0 - s0)) * rl;
    if (add)
      for (size_t i = 0; i < len; i++) d[i] += q[i];
    else
      memcpy(d, q, len * sizeof *d);
  }
}

/* Where halo i's two buffers lie past the columns and the input rows:
 * what this rank's band gives (nsend rows a sample), then what it takes
 * (nrecv rows). */
static void halo_buffers(const lgeom_t *g, const halo_t *h, int i, int n, float *base, float **give,
                         float **take) {
  size_t rl = (size_t)n * row_len(g);
  for (int k = 0; k < i; k++) base += rl * (h[k].nsend + h[k].nrecv);
  *give = base;
  *take = base + rl * h[i].nsend;
}

/* One column row per output position of this rank's band, from x holding
 * rows [x0, x0 + xh) of each sample; rows outside [0, H) and columns
 * outside the image are the padding's zeros. */
static void im2col(const lgeom_t *g, const float *x, int x0, int xh, int n, float *cols) {
  size_t rl = row_len(g), run = (size_t)g->k * g->C;
  for (int b = 0; b < n; b++)
    for (int oy = g->oy0; oy < g->oy0 + g->noy; oy++)
      for (int ox = 0; ox < g->OW; ox++) {
        float *row = cols + (((size_t)b * g->noy + (oy - g->oy0)) * g->OW + ox) * g->kdim;
        int ix0 = ox * g->s - g->p;
        for (int ky = 0; ky < g->k; ky++) {
          float *dst = row + ky * run;
          int iy = oy * g->s - g->p + ky;
          if (iy < 0 || iy >= g->H) {
            memset(dst, 0, run * sizeof *dst);
            continue;
          }
          const float *src = x + ((size_t)b * xh + (iy - x0)) * rl;
          for (int kx = 0; kx < g->k; kx++) {
            int ix = ix0 + kx;
            if (ix < 0 || ix >= g->W) memset(dst + kx * g->C, 0, (size_t)g->C * sizeof *dst);
            else memcpy(dst + kx * g->C, src + (size_t)ix * g->C, (size_t)g->C * sizeof *dst);
          }
        }
      }
}

/* dx += im2col's adjoint of dcols (dx holds rows [x0, x0 + xh)). */
static void col2im(const lgeom_t *g, const float *cols, int x0, int xh, int n, float *dx) {
  size_t rl = row_len(g), run = (size_t)g->k * g->C;
  for (int b = 0; b < n; b++)
    for (int oy = g->oy0; oy < g->oy0 + g->noy; oy++)
      for (int ox = 0; ox < g->OW; ox++) {
        const float *row = cols + (((size_t)b * g->noy + (oy - g->oy0)) * g->OW + ox) * g->kdim;
        int ix0 = ox * g->s - g->p;
        for (int ky = 0; ky < g->k; ky++) {
          int iy = oy * g->s - g->p + ky;
          if (iy < 0 || iy >= g->H) continue;
          float *dst = dx + ((size_t)b * xh + (iy - x0)) * rl;
          for (int kx = 0; kx < g->k; kx++) {
            int ix = ix0 + kx;
            if (ix < 0 || ix >= g->W) continue;
            const float *s = row + ky * run + kx * g->C;
            float *d = dst + (size_t)ix * g->C;
            for (int c = 0; c < g->C; c++) d[c] += s[c];
          }
        }
      }
}

/* The halos' messages: forward sends the band's rows and takes the
 * neighbours'; backward sends the gradients of the rows it took and takes
 * those of the rows it gave. */
static int halo_msgs(const lgeom_t *g, const halo_t *h, int nh, int n, int backward, float *base,
                     tp_msg_t *msgs) {
  int m = 0;
  size_t rl = (size_t)n * row_len(g);
  for (int i = 0; i < nh; i++) {
    float *give, *take;
    halo_buffers(g, h, i, n, base, &give, &take);
    if (h[i].nsend) msgs[m++] = (tp_msg_t){h[i].peer, !backward, give, rl * h[i].nsend};
    if (h[i].nrecv) msgs[m++] = (tp_msg_t){h[i].peer, backward, take, rl * h[i].nrecv};
  }
  return m;
}

/* The halo messages of a pass as sums (one each way with a neighbour), or
 * a whole input's gradient summed over the group. */
static int local_sums(const layer_t *l, int n, int backward, int has_dx, layer_sum_t *out) {
  if (l->spec.split != SPLIT_ROWS || (backward && !has_dx)) return 0;
  lgeom_t g = geom_of(l);
  if (!banded(l)) {
    if (!backward) return 0;
    out[0] = (layer_sum_t){.count = (size_t)n * shape_size(l->in_shape)};
    return 1;
  }
  halo_t h[2];
  int nh = halos(l, &g, h);
  size_t rl = (size_t)n * row_len(&g);
  for (int i = 0; i < nh; i++) {
    size_t give = rl * h[i].nsend, take = rl * h[i].nrecv;
    out[i] = (layer_sum_t){.halo = 1, .peer = h[i].peer, .count = backward ? take : give,
                           .received = backward ? give : take};
  }
  return nh;
}

/* The rows [r0, r1) of a banded input: the band's own, and the halos the
 * neighbours send; returns where they lie (n x (r1 - r0) rows). */
static float *assemble_rows(layer_t *l, const lgeom_t *g, const float *x, int n) {
  float *ext = l->scratch + cols_len(g, n), *base = ext + ext_len(l, g, n), *give, *take;
  int eh = g->r1 - g->r0, own0 = g->r0 > g->x0 ? g->r0 : g->x0;
  int own1 = g->r1 < g->x0 + g->xh ? g->r1 : g->x0 + g->xh;
  halo_t h[2];
  tp_msg_t msgs[4];
  int nh = halos(l, g, h), m = halo_msgs(g, h, nh, n, 0, base, msgs);
  for (int i = 0; i < nh; i++) { /* what the neighbours read of this band */
    halo_buffers(g, h, i, n, base, &give, &take);
    copy_rows(g, give, h[i].send0, h[i].nsend, x, g->x0, g->xh, h[i].send0, h[i].nsend, n, 0);
  }
  tp_exchange(l->tp, msgs, m);
  copy_rows(g, ext, g->r0, eh, x, g->x0, g->xh, own0, own1 - own0, n, 0);
  for (int i = 0; i < nh; i++) {
    halo_buffers(g, h, i, n, base, &give, &take);
    copy_rows(g, ext, g->r0, eh, take, h[i].recv0, h[i].nrecv, h[i].recv0, h[i].nrecv, n, 0);
  }
  return ext;
}

static void local_forward(layer_t *l, const float *x, int n, int train, rng_t *rng) {
  lgeom_t g = geom_of(l);
  float *cols = l->scratch;
  const float *src = x;
  int s0 = g.x0, sh = g.xh;
  if (banded(l)) src = assemble_rows(l, &g, x, n), s0 = g.r0, sh = g.r1 - g.r0;
  im2col(&g, src, s0, sh, n, cols);
  int P = g.noy * g.OW;
  for (int p = 0; p < P; p++) /* one GEMM per position over the batch */
    kern_gemm(0, 1, n, g.F, g.kdim, 1.0f, cols + (size_t)p * g.kdim, P * g.kdim,
              l->w + (size_t)p * g.F * g.kdim, g.kdim, 0.0f, l->out + (size_t)p * g.F, P * g.F);
  size_t per = (size_t)P * g.F;
  for (int b = 0; b < n; b++) {
    float *o = l->out + (size_t)b * per;
    if (l->spec.act == ACT_RELU)
      for (size_t i = 0; i < per; i++) {
        float v = o[i] + l->b[i];
        o[i] = v > 0.0f ? v : 0.0f;
      }
    else
      for (size_t i = 0; i < per; i++) o[i] += l->b[i];
  }
}

/* dx from the masked dout that local_backward left: dcols over the
 * columns, col2im, and the group's part (the halos' gradients sent back
 * and added, or a whole input's summed). */
static void local_backward_input(layer_t *l, float *dx, int n) {
  lgeom_t g = geom_of(l);
  int P = g.noy * g.OW;
  float *cols = l->scratch, *ext = cols + cols_len(&g, n);
  for (int p = 0; p < P; p++)
    kern_gemm(0, 0, n, g.kdim, g.F, 1.0f, l->dout + (size_t)p * g.F, P * g.F,
              l->w + (size_t)p * g.F * g.kdim, g.kdim, 0.0f, cols + (size_t)p * g.kdim, P * g.kdim);
  kern_zero((size_t)n * g.xh * row_len(&g), dx);
  if (!banded(l)) {
    col2im(&g, cols, 0, g.H, n, dx);
    layer_sum_t sum;
    if (local_sums(l, n, 1, 1, &sum)) tp_allreduce(l->tp, dx, sum.count);
    return;
  }
  int eh = g.r1 - g.r0, own0 = g.r0 > g.x0 ? g.r0 : g.x0;
  int own1 = g.r1 < g.x0 + g.xh ? g.r1 : g.x0 + g.xh;
  kern_zero((size_t)n * eh * row_len(&g), ext);
  col2im(&g, cols, g.r0, eh, n, ext);
  copy_rows(&g, dx, g.x0, g.xh, ext, g.r0, eh, own0, own1 - own0, n, 0);
  float *base = ext + ext_len(l, &g, n), *give, *take;
  halo_t h[2];
  tp_msg_t msgs[4];
  int nh = halos(l, &g, h), m = halo_msgs(&g, h, nh, n, 1, base, msgs);
  for (int i = 0; i < nh; i++) { /* the gradients of the rows taken, to their owner */
    halo_buffers(&g, h, i, n, base, &give, &take);
    copy_rows(&g, take, h[i].recv0, h[i].nrecv, ext, g.r0, eh, h[i].recv0, h[i].nrecv, n, 0);
  }
  tp_exchange(l->tp, msgs, m);
  for (int i = 0; i < nh; i++) { /* and the neighbours' for the rows given, added */
    halo_buffers(&g, h, i, n, base, &give, &take);
    copy_rows(&g, dx, g.x0, g.xh, give, h[i].send0, h[i].nsend, h[i].send0, h[i].nsend, n, 1);
  }
}

static void local_backward(layer_t *l, const float *x, float *dx, int n) {
  lgeom_t g = geom_of(l);
  int P = g.noy * g.OW;
  size_t per = (size_t)P * g.F;
  if (l->spec.act == ACT_RELU)
    for (size_t i = 0; i < (size_t)n * per; i++)
      if (l->out[i] <= 0.0f) l->dout[i] = 0.0f;
  if (l->grad_beta == 0.0f) kern_zero(per, l->db);
  for (int b = 0; b < n; b++)
    for (size_t i = 0; i < per; i++) l->db[i] += l->dout[(size_t)b * per + i];
  for (int p = 0; p < P; p++)
    kern_gemm(1, 0, g.F, g.kdim, n, 1.0f, l->dout + (size_t)p * g.F, P * g.F,
              l->scratch + (size_t)p * g.kdim, P * g.kdim, l->grad_beta,
              l->dw + (size_t)p * g.F * g.kdim, g.kdim);
  if (dx) local_backward_input(l, dx, n);
}

const layer_ops_t layer_local2d_ops = {"local2d", local_setup, local_init, local_forward,
                                       local_backward, local_backward_input, local_sums};
