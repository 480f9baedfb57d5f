/* Products in bfloat16 (--precision bf16): the operands rounded to bf16,
 * multiplied with fp32 accumulation and written as fp32, through oneDNN's
 * matmul, which runs the CPU's bf16 dot-product instructions (AVX512_BF16,
 * AMX). The parameters stay fp32 (the master copy the optimizer steps),
 * and so do activations between layers, the loss and every element-wise
 * layer: only what a GEMM reads is rounded, as the operands are converted
 * on their way in. Measured here (one core, lenet's shapes): oneDNN's bf16
 * matmul ran at 118-214 GFLOP/s where OpenBLAS's sgemm ran at 67-102.
 *
 * A convolution's input gradient is a product too, made here the same way
 * (kern_conv_dx_bf16): oneDNN's backward-data primitive, which needs no
 * columns, on the bf16 output gradient and the weights rounded by a
 * reorder into the layout it picked.
 *
 * One context per thread (the ranks of --comm local are threads): a oneDNN
 * engine and stream, the matmul primitives made so far (one per shape:
 * made once, reused every step: a plan), and the bf16 copies of the operands,
 * grown to the largest product and then reused.
 *
 * Debian's oneDNN 2.6 has AMX kernels that raise SIGILL on some shapes
 * (seen on a Xeon with AMX: 75 x 3 x 63 and 75 x 4 x 63, where 75 x 16 x 63,
 * 75 x 3 x 64 and every lenet and mlp shape run; its AVX512-BF16 kernels,
 * 2x slower on lenet here, run them all). The kernel a primitive runs
 * depends on its shape only, so each new primitive is run once on zeros
 * under a SIGILL handler (probe): a shape that faults goes to the fp32
 * path, counted as a fallback, and the rest keep AMX. Leaving the faulted
 * execute leaves what it had allocated (about 230 bytes, once a shape). */
#include "dtrain/core.h"

#include <string.h>
#ifdef __AVX512BF16__
#include <immintrin.h>
#endif

/* Round to nearest even (NaN kept a quiet NaN). */
static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

void kern_to_bf16(size_t n, const float *x, uint16_t *y) {
  size_t i = 0;
#ifdef __AVX512BF16__
  for (; i + 32 <= n; i += 32) {
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512((void *)(y + i), (__m512i)v);
  }
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((void *)(y + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
#endif
  for (; i < n; i++) y[i] = to_bf16(x[i]);
}

#ifdef DTRAIN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>

void omp_set_num_threads(int);
int omp_get_max_threads(void);

enum { MAX_PLANS = 64 };

/* A primitive made once for one shape and reused: a matmul, or a
 * convolution's backward-data with the reorder that rounds its fp32
 * weights into the bf16 layout oneDNN chose (kept in wbuf). */
enum { PLAN_MATMUL, PLAN_CONV_DX };
enum { KEY_LEN = 11 };

typedef struct {
  int key[KEY_LEN]; /* kind, then the shape */
  int faults;       /* its kernel raised SIGILL in the probe: not run */
  dnnl_primitive_t prim;
  int arg[3];           /* the execute argument of each memory object */
  dnnl_memory_t mem[3]; /* made with the primitive, pointed at each run's data */
  dnnl_primitive_t reorder; /* PLAN_CONV_DX: fp32 [oc][k][k][c] -> mem[1] */
  dnnl_memory_t wsrc;
  void *wbuf;
} plan_t;

typedef struct {
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  plan_t plan[MAX_PLANS];
  int nplans;
  uint16_t *a, *b; /* bf16 operands */
  size_t a_cap, b_cap;
} bf16_ctx_t;

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void drop_plan(plan_t *p) {
  for (int j = 0; j < 3; j++)
    if (p->mem[j]) dnnl_memory_destroy(p->mem[j]);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->wsrc) dnnl_memory_destroy(p->wsrc);
  if (p->reorder) dnnl_primitive_destroy(p->reorder);
  free(p->wbuf);
  memset(p, 0, sizeof *p);
}

static void drop_plans(bf16_ctx_t *x) {
  for (int i = 0; i < x->nplans; i++) drop_plan(&x->plan[i]);
  x->nplans = 0;
}

static void ctx_free(void *p) {
  bf16_ctx_t *x = p;
  if (!x) return;
  drop_plans(x);
  if (x->stream) dnnl_stream_destroy(x->stream);
  if (x->engine) dnnl_engine_destroy(x->engine);
  free(x->a), free(x->b), free(x);
}

/* The probing thread's way out of a faulting kernel (NULL: not probing). */
static _Thread_local sigjmp_buf *probe_exit;
static struct sigaction sigill_before;

static void on_sigill(int sig, siginfo_t *info, void *uc) {
  if (probe_exit) siglongjmp(*probe_exit, 1);
  /* not a probe: whatever handled SIGILL before does */
  sigaction(SIGILL, &sigill_before, NULL);
  if (sigill_before.sa_flags & SA_SIGINFO) sigill_before.sa_sigaction(sig, info, uc);
  else if (sigill_before.sa_handler != SIG_IGN && sigill_before.sa_handler != SIG_DFL)
    sigill_before.sa_handler(sig);
  else raise(sig);
}

/* Each thread keeps its own primitives (plan_for), so oneDNN's
 * process-wide primitive cache would only be shared state between ranks. */
static void make_key(void) {
  pthread_key_create(&ctx_key, ctx_free);
  dnnl_set_primitive_cache_capacity(0);
  struct sigaction sa = {.sa_sigaction = on_sigill, .sa_flags = SA_SIGINFO | SA_NODEFER};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGILL, &sa, &sigill_before);
}

static bf16_ctx_t *ctx_get(void) {
  pthread_once(&ctx_once, make_key);
  bf16_ctx_t *x = pthread_getspecific(ctx_key);
  if (x) return x;
  if (!(x = calloc(1, sizeof *x))) return NULL;
  omp_set_num_threads(kern_get_threads()); /* oneDNN's threads: --threads, as BLAS's */
  if (dnnl_engine_create(&x->engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&x->stream, x->engine, dnnl_stream_default_flags) != dnnl_success) {
    ctx_free(x);
    return NULL;
  }
  pthread_setspecific(ctx_key, x);
  return x;
}

void kern_bf16_release(void) {
  pthread_once(&ctx_once, make_key);
  ctx_free(pthread_getspecific(ctx_key));
  pthread_setspecific(ctx_key, NULL);
}

/* rows x cols of x (leading dimension ld) into a packed bf16 copy. */
static int pack(const float *x, int rows, int cols, int ld, uint16_t **buf, size_t *cap) {
  size_t need = (size_t)rows * cols;
  if (need > *cap) {
    uint16_t *p = realloc(*buf, need * sizeof *p);
    if (!p) return -1;
    *buf = p, *cap = need;
  }
  if (ld == cols) kern_to_bf16(need, x, *buf); /* packed already: one run, no short rows */
  else
    for (int r = 0; r < rows; r++) kern_to_bf16((size_t)cols, x + (size_t)r * ld, *buf + (size_t)r * cols);
  return 0;
}

/* One execute of p's primitive on data[j] for its memory object j. */
static int run(bf16_ctx_t *x, const plan_t *p, void *const data[3]) {
  dnnl_exec_arg_t args[3];
  for (int j = 0; j < 3; j++) {
    if (dnnl_memory_set_data_handle(p->mem[j], data[j]) != dnnl_success) return -1;
    args[j] = (dnnl_exec_arg_t){p->arg[j], p->mem[j]};
  }
  return dnnl_primitive_execute(p->prim, x->stream, 3, args) == dnnl_success &&
                 dnnl_stream_wait(x->stream) == dnnl_success ? 0 : -1;
}

/* The primitive's memory objects (arguments arg, in the order run takes
 * their data), data pointers set by each run. */
static int make_memory(bf16_ctx_t *x, plan_t *p, const int arg[3]) {
  const_dnnl_primitive_desc_t pd;
  if (dnnl_primitive_get_primitive_desc(p->prim, &pd) != dnnl_success) return -1;
  for (int j = 0; j < 3; j++) {
    p->arg[j] = arg[j];
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg[j]);
    if (!md || dnnl_memory_create(&p->mem[j], md, x->engine, DNNL_MEMORY_NONE) != dnnl_success)
      return -1;
  }
  return 0;
}

/* The header's probe: one run of p's primitive on zeros in this thread
 * alone (so a fault is raised here, where the handler can return); 1 when
 * it faulted. */
static int faults(bf16_ctx_t *x, const plan_t *p) {
  void *zero[3] = {NULL, NULL, NULL};
  int ok = 1;
  for (int j = 0; j < 3; j++) {
    const dnnl_memory_desc_t *md;
    ok = ok && dnnl_memory_get_memory_desc(p->mem[j], &md) == dnnl_success &&
         (zero[j] = calloc(1, dnnl_memory_desc_get_size(md) + 64)) != NULL;
  }
  volatile int faulted = 0;
  if (ok) {
    sigjmp_buf out;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    probe_exit = &out;
    if (sigsetjmp(out, 1) == 0) run(x, p, zero);
    else faulted = 1;
    probe_exit = NULL;
    omp_set_num_threads(threads);
  }
  for (int j = 0; j < 3; j++) free(zero[j]);
  return faulted;
}

/* The plan of this key made before, or NULL. */
static plan_t *plan_find(bf16_ctx_t *x, const int key[KEY_LEN]) {
  for (int i = 0; i < x->nplans; i++)
    if (memcmp(x->plan[i].key, key, sizeof x->plan[i].key) == 0) return &x->plan[i];
  return NULL;
}

/* A new plan's slot (shapes beyond a model's few: start over). */
static plan_t *plan_slot(bf16_ctx_t *x, const int key[KEY_LEN]) {
  if (x->nplans == MAX_PLANS) drop_plans(x);
  plan_t *p = &x->plan[x->nplans];
  memset(p, 0, sizeof *p);
  memcpy(p->key, key, sizeof p->key);
  return p;
}

/* Made, probed and kept (prim set), or dropped: NULL. */
static const plan_t *plan_keep(bf16_ctx_t *x, plan_t *p, const int arg[3]) {
  if (make_memory(x, p, arg) != 0) {
    drop_plan(p);
    return NULL;
  }
  p->faults = faults(x, p);
  x->nplans++;
  return p;
}

/* The matmul of this shape: op(A) [m,k] bf16 packed, op(B) [k,n] bf16
 * packed, C [m,n] fp32 with leading dimension ldc, overwritten or, when
 * accumulate, added to (oneDNN's sum post-op: a weight gradient summed
 * over micro-batches stays in bf16 products). */
static const plan_t *plan_for(bf16_ctx_t *x, int ta, int tb, int m, int n, int k, int ldc,
                              int accumulate) {
  const int key[KEY_LEN] = {PLAN_MATMUL, m, n, k, ta, tb, ldc, accumulate};
  const plan_t *found = plan_find(x, key);
  if (found) return found;
  dnnl_memory_desc_t a, b, c;
  dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
  dnnl_dims_t sa = {ta ? 1 : k, ta ? m : 1}, sb = {tb ? 1 : n, tb ? k : 1}, sc = {ldc, 1};
  dnnl_matmul_desc_t md;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  int ok = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb) == dnnl_success &&
           dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc) == dnnl_success &&
           dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) == dnnl_success;
  if (ok && accumulate)
    ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
         dnnl_post_ops_create(&ops) == dnnl_success &&
         dnnl_post_ops_append_sum(ops, 1.0f) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
  ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, x->engine, NULL) == dnnl_success;
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (!ok) return NULL;
  plan_t *p = plan_slot(x, key);
  dnnl_status_t s = dnnl_primitive_create(&p->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success) return NULL;
  return plan_keep(x, p, (const int[3]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST});
}

/* A convolution's backward-data of this geometry: dout [n,oh,ow,oc] bf16
 * NHWC, dx [n,h,w,c] fp32 NHWC (overwritten), weights in the bf16 layout
 * oneDNN picks for them (a plain [oc][k][k][c] makes it take its
 * reference kernel, 100x slower), made from the fp32 ones by a reorder. */
static const plan_t *conv_dx_plan(bf16_ctx_t *x, const kern_conv_t *g) {
  const int key[KEY_LEN] = {PLAN_CONV_DX, g->n, g->h, g->w, g->c, g->oh, g->ow, g->oc, g->k, g->s, g->p};
  const plan_t *found = plan_find(x, key);
  if (found) return found;
  /* right padding so that (h + p + pr - k) / s + 1 = oh, as oneDNN checks;
   * where the last rows of the input are never read it goes below zero */
  int prh = (g->oh - 1) * g->s + g->k - g->h - g->p, prw = (g->ow - 1) * g->s + g->k - g->w - g->p;
  dnnl_dims_t dsrc = {g->n, g->c, g->h, g->w}, dwei = {g->oc, g->c, g->k, g->k};
  dnnl_dims_t ddst = {g->n, g->oc, g->oh, g->ow}, st = {g->s, g->s}, pl = {g->p, g->p};
  dnnl_dims_t pr = {prh > 0 ? prh : 0, prw > 0 ? prw : 0};
  dnnl_memory_desc_t src16, src32, wany, dst16, dst32, wuser;
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t hint = NULL, pd = NULL, rpd = NULL;
  int ok = dnnl_memory_desc_init_by_tag(&src16, 4, dsrc, dnnl_bf16, dnnl_nhwc) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&src32, 4, dsrc, dnnl_f32, dnnl_nhwc) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wany, 4, dwei, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&wuser, 4, dwei, dnnl_f32, dnnl_ohwi) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&dst16, 4, ddst, dnnl_bf16, dnnl_nhwc) == dnnl_success &&
           dnnl_memory_desc_init_by_tag(&dst32, 4, ddst, dnnl_f32, dnnl_nhwc) == dnnl_success &&
           dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                              &src16, &wany, NULL, &dst32, st, pl, pr) == dnnl_success &&
           dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &src32, &wany, &dst16,
                                                    st, pl, pr) == dnnl_success &&
           dnnl_primitive_desc_create(&hint, &fd, NULL, x->engine, NULL) == dnnl_success &&
           dnnl_primitive_desc_create(&pd, &bd, NULL, x->engine, hint) == dnnl_success;
  const dnnl_memory_desc_t *wmd = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
  ok = wmd && dnnl_reorder_primitive_desc_create(&rpd, &wuser, x->engine, wmd, x->engine, NULL) == dnnl_success;
  plan_t *p = ok ? plan_slot(x, key) : NULL;
  ok = p && dnnl_primitive_create(&p->prim, pd) == dnnl_success &&
       dnnl_primitive_create(&p->reorder, rpd) == dnnl_success &&
       dnnl_memory_create(&p->wsrc, &wuser, x->engine, DNNL_MEMORY_NONE) == dnnl_success &&
       (p->wbuf = malloc(dnnl_memory_desc_get_size(wmd))) != NULL;
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  if (!ok) {
    if (p) drop_plan(p);
    return NULL;
  }
  return plan_keep(x, p, (const int[3]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC});
}

int kern_conv_dx_bf16(const kern_conv_t *g, const uint16_t *dout, const float *w, float *dx) {
  bf16_ctx_t *x = ctx_get();
  const plan_t *p = x ? conv_dx_plan(x, g) : NULL;
  if (!p || p->faults) return -1;
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->wsrc}, {DNNL_ARG_TO, p->mem[1]}};
  if (dnnl_memory_set_data_handle(p->wsrc, (void *)w) != dnnl_success ||
      dnnl_memory_set_data_handle(p->mem[1], p->wbuf) != dnnl_success ||
      dnnl_primitive_execute(p->reorder, x->stream, 2, args) != dnnl_success)
    return -1;
  return run(x, p, (void *const[3]){(void *)dout, p->wbuf, dx});
}

/* An operand as the matmul reads it: made in bf16 by the caller already
 * (packed: ld is its row length), or rounded now into buf. */
static const uint16_t *operand(const void *p, int made, int rows, int cols, int ld, uint16_t **buf,
                               size_t *cap) {
  if (made) return ld == cols ? p : NULL;
  return pack(p, rows, cols, ld, buf, cap) == 0 ? *buf : NULL;
}

int kern_gemm_bf16_made(int made, int ta, int tb, int m, int n, int k, const void *a, int lda,
                        const void *b, int ldb, float beta, float *c, int ldc) {
  if (beta != 0.0f && beta != 1.0f) return -1;
  bf16_ctx_t *x = ctx_get();
  if (!x) return -1;
  const plan_t *plan = plan_for(x, ta, tb, m, n, k, ldc, beta != 0.0f);
  if (!plan || plan->faults) return -1;
  const uint16_t *pa = operand(a, made & KERN_A_BF16, ta ? k : m, ta ? m : k, lda, &x->a, &x->a_cap);
  const uint16_t *pb = operand(b, made & KERN_B_BF16, tb ? n : k, tb ? k : n, ldb, &x->b, &x->b_cap);
  if (!pa || !pb) return -1;
  return run(x, plan, (void *const[3]){(void *)pa, (void *)pb, c});
}

int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc) {
  return kern_gemm_bf16_made(0, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

int kern_bf16_available(void) { return cpu_has(CPU_AVX512_BF16) || cpu_has(CPU_AMX_BF16); }
#else
int kern_gemm_bf16_made(int made, int ta, int tb, int m, int n, int k, const void *a, int lda,
                        const void *b, int ldb, float beta, float *c, int ldc) {
  return -1;
}
int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc) {
  return -1;
}

int kern_conv_dx_bf16(const kern_conv_t *g, const uint16_t *dout, const float *w, float *dx) {
  return -1;
}
void kern_bf16_release(void) {}
int kern_bf16_available(void) { return 0; }
#endif
