/* core: errors, logging, memory, RNG, BLAS kernels, option parsing.
 * Every other module includes this and nothing below it. */
#ifndef DTRAIN_CORE_H
#define DTRAIN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- errors ------------------------------------------------------------
 * Fallible functions return 0 on success and -1 on failure, after writing
 * one line (what was wrong and where) into a per-thread buffer with
 * dt_error(). Callers that add context use dt_error_prefix(). Thread-local
 * because the local transport runs ranks as threads of one process. */
int dt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int dt_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *dt_errmsg(void);
void dt_error_clear(void);

#define DT_TRY(expr) do { if ((expr) != 0) return -1; } while (0)

/* ---- logging (stderr) -------------------------------------------------- */
enum { DT_LOG_ERROR = 0, DT_LOG_WARN = 1, DT_LOG_INFO = 2, DT_LOG_DEBUG = 3 };
extern int dt_log_level;
void dt_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- memory -------------------------------------------------------------
 * 64-byte aligned, zeroed allocations. dt_alloc returns NULL after setting
 * the error message. */
void *dt_alloc(size_t bytes);
void dt_free(void *p);
float *dt_alloc_floats(size_t n);
float *dt_dup_floats(const float *x, size_t n); /* a new copy of x[0..n) */
/* n zero floats, page-aligned, whose pages the kernel maps on first touch:
 * for arenas a rank may use only a part of (a pipeline stage's range of
 * the model's gradients, ZeRO-1's blocks of the optimizer's state), so
 * that the part it never touches takes no memory -- not for what a step
 * touches whole at once (its first pass would take the faults). Freed
 * with dt_unmap_floats(p, n). */
float *dt_map_floats(size_t n);
void dt_unmap_floats(float *p, size_t n);

/* ---- interruption (src/core/interrupt.c) ---------------------------------
 * dt_catch_interrupts installs the SIGINT/SIGTERM handler (the CLI, once);
 * long loops poll dt_interrupted (the signal caught, or 0) and stop cleanly. */
void dt_catch_interrupts(void);
int dt_interrupted(void);
const char *dt_signal_name(int signo);
/* SIGUSR1 to one rank's thread: that rank alone stops at its next step, a
 * lost rank (dtrain launch's fault); dt_rank_signalled: the signal this
 * thread took, or 0. */
void dt_catch_rank_signal(void);
int dt_rank_signalled(void);

/* ---- time ---------------------------------------------------------------- */
double dt_now(void);               /* monotonic seconds */
void dt_sleep_until(double t);     /* monotonic deadline */

/* ---- timeline traces (src/core/trace.c) ------------------------------------
 * One trace per rank; dt_trace is the calling thread's (NULL: not tracing,
 * and then a caller records nothing: `if (dt_trace) trace_slice(...)`).
 * Times are dt_now() seconds; the file shows microseconds since `origin`,
 * the run's common start. Names must outlive the trace (string literals,
 * layer kind names). */
typedef struct dt_trace dt_trace_t;
extern _Thread_local dt_trace_t *dt_trace;
enum { TRACE_COMPUTE = 1, TRACE_COMM, TRACE_WAIT, TRACE_PS, TRACE_OPTIM, TRACE_EVAL, TRACE_STEP,
       TRACE_BUBBLE,   /* a pipeline stage idle, waiting for its neighbour's unit */
       TRACE_TRACKS };
/* Records steps [from, to) (--trace-steps); at most cap events. */
dt_trace_t *trace_new(int rank, double origin, long long from, long long to, size_t cap);
void trace_free(dt_trace_t *t);
void trace_set_step(dt_trace_t *t, long long step);
/* A slice [t0, t1] on a track; an asynchronous one (it may overlap the
 * track's others: a collective beside backprop), arg = its bytes. */
void trace_slice(dt_trace_t *t, int track, const char *name, long long arg, double t0, double t1);
void trace_async(dt_trace_t *t, int track, const char *name, long long arg, double t0, double t1);
/* A collective's bytes start (delta > 0) or stop (< 0) being in flight:
 * a sample of the rank's "bytes in flight" counter; returns the total. */
long long trace_in_flight(dt_trace_t *t, long long delta, double now);
/* The rank's events as JSON objects separated by commas (malloc'd). */
int trace_json(const dt_trace_t *t, char **out, size_t *len);

/* ---- RNG: xoshiro256**, seeded by splitmix64. The state is four words so
 * it can be saved in a checkpoint and restored bit for bit. */
typedef struct { uint64_t s[4]; } rng_t;
void rng_seed(rng_t *r, uint64_t seed);
uint64_t rng_next(rng_t *r);
uint32_t rng_below(rng_t *r, uint32_t n);  /* uniform in [0, n) */
float rng_uniform(rng_t *r);               /* uniform in [0, 1) */
float rng_normal(rng_t *r);                /* standard normal (Box-Muller) */
/* n standard normals by the ziggurat, ~10x rng_normal: for bulk data (a
 * different stream of values than n calls of rng_normal). */
void rng_fill_normal(rng_t *r, size_t n, float *out);
void rng_shuffle_u32(rng_t *r, uint32_t *a, size_t n);
/* A seed derived from (seed, stream, index): independent streams for
 * epochs, ranks and layers without storing generators. */
uint64_t rng_derive(uint64_t seed, uint64_t stream, uint64_t index);

/* ---- kernels -------------------------------------------------------------
 * Row-major single-precision GEMM through CBLAS:
 *   C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C
 * with op = transpose when ta/tb is nonzero. */
void kern_gemm(int ta, int tb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *b, int ldb,
               float beta, float *c, int ldc);
/* The same product in plain C loops: the reference that the library's
 * kernels are checked against (kern_gemm_check), and the path kern_gemm
 * takes after kern_use_reference(1) (process-wide; set before any thread). */
void kern_gemm_ref(int ta, int tb, int m, int n, int k, float alpha,
                   const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);
void kern_use_reference(int on);
int kern_using_reference(void);
/* The library behind kern_gemm's fp32 products (src/core/gemm_onednn.c):
 * OpenBLAS, or oneDNN's sgemm where dtrain was built with it (the CLI's
 * default, DTRAIN_GEMM). Process-wide, set before any thread.
 * kern_sgemm_onednn: one product, -1 when oneDNN failed (kern_gemm then
 * runs OpenBLAS's). */
typedef enum { GEMM_OPENBLAS, GEMM_ONEDNN } gemm_lib_t;
void kern_set_gemm_lib(gemm_lib_t lib);
gemm_lib_t kern_gemm_lib(void);
int kern_onednn_available(void);
int kern_sgemm_onednn(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                      const float *b, int ldb, float beta, float *c, int ldc);
void kern_onednn_describe(char *buf, size_t cap); /* "onednn avx512_core_bf16" */
/* --precision bf16 (src/core/gemm_bf16.c): kern_gemm rounds its operands to
 * bfloat16 and multiplies them with fp32 accumulation (oneDNN's matmul on
 * the CPU's bf16 instructions); C stays fp32. Process-wide, set before any
 * thread. kern_bf16_available: built with oneDNN and the CPU has
 * AVX512_BF16 or AMX-BF16. kern_bf16_active: bf16 set and the reference
 * path not. kern_gemm_bf16: one product (alpha 1, beta 0 or 1); -1 when
 * oneDNN failed (kern_gemm then computes it in fp32 and counts it,
 * kern_bf16_fallbacks; a caller that went round kern_gemm counts its own
 * with kern_bf16_note_fallback). kern_gemm_bf16_made: the same with A
 * and/or B (KERN_A_BF16, KERN_B_BF16 in made) given in bf16 already,
 * packed (ld = row length): an operand read by several products rounded
 * once (a convolution's columns: its forward and its weight gradient).
 * kern_to_bf16 rounds n floats to nearest even. kern_bf16_release frees
 * the calling thread's oneDNN state (other threads' is freed when they
 * end). */
enum { KERN_A_BF16 = 1, KERN_B_BF16 = 2 };
int kern_bf16_available(void);
void kern_set_bf16(int on);
int kern_using_bf16(void);
int kern_bf16_active(void);
long kern_bf16_fallbacks(void);
void kern_bf16_note_fallback(void);
/* kern_gemm's products since the start while bf16 was set: *bf16 made in
 * bf16, *fp32 left to fp32 (alpha != 1, beta not 0 or 1, a fallback). */
void kern_bf16_products(long *bf16, long *fp32);
int kern_gemm_bf16(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                   int ldb, float beta, float *c, int ldc);
int kern_gemm_bf16_made(int made, int ta, int tb, int m, int n, int k, const void *a, int lda,
                        const void *b, int ldb, float beta, float *c, int ldc);
void kern_to_bf16(size_t n, const float *x, uint16_t *y);
void kern_bf16_release(void);
/* A convolution's input gradient in bf16 (oneDNN's backward-data, no
 * columns): dx [n,h,w,c] fp32 NHWC, overwritten, from dout [n,oh,ow,oc]
 * bf16 NHWC and weights w [oc][k][k][c] fp32 (rounded here); stride s,
 * padding p on each side. -1 when oneDNN failed or faults on the shape
 * (the caller takes its own path and counts a fallback). */
typedef struct {
  int n, h, w, c, oh, ow, oc, k, s, p;
} kern_conv_t;
int kern_conv_dx_bf16(const kern_conv_t *g, const uint16_t *dout, const float *w, float *dx);
void kern_set_threads(int n);   /* BLAS thread count (process-wide) */
int kern_get_threads(void);
void kern_axpy(size_t n, float a, const float *x, float *y);   /* y += a x */
void kern_scale(size_t n, float a, float *x);                  /* x *= a */
void kern_add(size_t n, const float *x, float *y);             /* y += x */
/* y = x[0] + x[1] + ... + x[k-1], summed in that order; y may be one of x. */
void kern_sum(size_t n, int k, const float *const *x, float *y);
/* Every x[q] (q < k) becomes x[0] + x[1] + ... + x[k-1], summed in that order. */
void kern_allsum(size_t n, int k, float *const *x);
void kern_copy(size_t n, const float *x, float *y);
void kern_zero(size_t n, float *x);
double kern_dot(size_t n, const float *x, const float *y);
double kern_sumsq(size_t n, const float *x);
float kern_maxabs(size_t n, const float *x);
int kern_all_finite(size_t n, const float *x);

/* ---- CPU features and the BLAS kernels (src/core/cpu.c, blas_check.c) ----
 * cpu_has: the CPU executes it and the OS saves its registers; the
 * environment variable DTRAIN_CPU_DISABLE=name,name,... hides features
 * (tests take the paths of an older CPU with it). */
typedef enum {
  CPU_AVX, CPU_AVX2, CPU_FMA, CPU_AVX512F, CPU_AVX512_BF16, CPU_AMX_BF16, CPU_NFEATURES
} cpu_feature_t;
int cpu_has(cpu_feature_t feature);
const char *cpu_feature_name(cpu_feature_t feature);
void cpu_describe(char *buf, size_t cap);   /* "avx avx2 fma avx512f ..." */

/* Which OpenBLAS kernels run, against what the CPU can do. Tiers: 0 SSE,
 * 1 AVX, 2 AVX2 + FMA, 3 AVX-512. */
typedef struct {
  char core[32];      /* openblas_get_corename() */
  int core_tier;      /* of those kernels */
  int cpu_tier;       /* of this CPU */
  const char *best;   /* the core type for this CPU (NULL: none known) */
  int dynamic;        /* a DYNAMIC_ARCH build, which reads OPENBLAS_CORETYPE */
  const char *set_by; /* who chose the core: "openblas", "user" or "dtrain" */
} blas_info_t;
void kern_blas_info(blas_info_t *info);
/* 0 when the fp32 library's sgemm (kern_gemm_lib) agrees with
 * kern_gemm_ref on a few products of every transpose (error within 1e-4
 * of sum |a||b|); else -1 with the worst disagreement in the error line. */
int kern_gemm_check(void);
/* What kern_gemm runs, for the metrics: "onednn avx512_core_bf16",
 * "openblas Haswell (set by user)", "bf16 onednn" or "reference". */
void kern_gemm_describe(char *buf, size_t cap);

/* ---- option parsing helpers -------------------------------------------
 * Each parses text for the option named `opt` and on failure writes
 * "option --opt: 'text' is not ..." into the error buffer. */
int parse_int(const char *opt, const char *text, long lo, long hi, long *out);
int parse_float(const char *opt, const char *text, double lo, double hi, double *out);
/* "50us", "2ms", "1s" -> seconds */
int parse_duration(const char *opt, const char *text, double *seconds);
/* "1Gbit", "100Mbit", "10GB", "500MB" (per second) -> bytes per second */
int parse_bandwidth(const char *opt, const char *text, double *bytes_per_sec);
/* "25", "0.5" megabytes -> bytes */
/* The index of `name` in names[0..n), or -1 (no error set); and the
 * name of index k, or "unknown". For the enums an option names. */
int name_index(const char *name, const char *const *names, int n);
const char *name_of(int k, const char *const *names, int n);
int parse_megabytes(const char *opt, const char *text, size_t *bytes);
/* "key=value,key=value" of option --opt (example: a valid value, for the
 * error line): each item a known key (keys[], nkeys of them) given at most
 * once with a non-empty value; vals[i] is the value of keys[i] or NULL.
 * The values point into buf (cap bytes), a copy of val. */
int parse_items(const char *opt, const char *val, const char *example, char *buf, size_t cap,
                const char *const *keys, int nkeys, const char **vals);

/* ---- files --------------------------------------------------------------- */
/* Write `len` bytes to `path` atomically: temp file PATH.dtrain-tmp (a
 * leftover one is removed, and it is created anew: mode 0666 & ~umask),
 * fsync, rename, fsync of the folder. On failure nothing is left behind.
 * `path` must be a regular file or not exist (a device or symlink is refused). */
int file_write_atomic(const char *path, const void *data, size_t len);
/* Removes the temporary file of an atomic write in progress (async-signal-safe:
 * for a signal handler). */
void file_remove_pending(void);
/* 0 when `path` does not exist or is a regular file (lstat: a symlink is not). */
int file_check_regular(const char *path);
/* 0 when `path` may be written as an output: it does not exist, is empty,
 * or is a regular file whose first 4 KiB contain `own_magic` (dtrain wrote it). */
int file_check_output(const char *path, const char *own_magic);
/* 1 when the two paths name the same file (existing or not). */
int file_same(const char *a, const char *b);
/* 0 when the folder that would hold `path` exists and a file can be made
 * in it (tried: PATH.dtrain-probe-PID, made and removed). */
int file_check_writable_dir(const char *path);
/* Opens an output stream, refusing what is not a regular file: appending
 * to the file as it is, or else a new file (an old one is removed first)
 * with mode 0666 & ~umask; NULL after setting the error. */
FILE *file_open_output(const char *path, int append);
/* Read a whole file (gzip-transparent when gz != 0; else the bytes as they
 * are on disk). Caller frees. */
int file_read_all(const char *path, int gz, uint8_t **data, size_t *len);

/* A gzip-transparent stream (plain files pass through unchanged), for
 * formats whose header says how much to read: the reader reads the header,
 * checks it, then reads exactly what it declares, so a damaged or hostile
 * file (a gzip bomb) costs no more memory than its header claims. */
typedef struct {
  void *gz;               /* gzFile */
  const char *path;       /* for messages; not copied */
  size_t consumed;        /* decompressed bytes delivered so far */
} file_in_t;
int file_in_open(file_in_t *f, const char *path);
/* Reads up to n bytes; *got < n only at the end of the data. A corrupt or
 * truncated gzip stream is an error naming the file and the offset. */
int file_in_read(file_in_t *f, void *buf, size_t n, size_t *got);
/* 1 at the end of the data, 0 if more follows (one byte is consumed), -1 on error. */
int file_in_at_end(file_in_t *f);
void file_in_close(file_in_t *f);

#endif
