/* The schedule generators and their checker (schedule.h).
 *
 * GPipe (Huang et al. 2019): every micro-batch forward, then every one
 * backward, then one synchronous update; stage s holds M activation sets.
 * 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs
 * min(P - s - 1, M) warm-up forwards, then alternates one forward and one
 * backward, then the remaining backwards; it holds at most P - s sets.
 * Both flush: the update of the step comes after every backward, so both
 * compute the gradient of the whole batch. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/core.h"
#include "strategy/pipe/schedule.h"

static const char *const KIND_NAMES[PIPE_KIND_COUNT] = {"gpipe", "1f1b"};

const char *pipe_kind_name(pipe_kind_t k) { return name_of(k, KIND_NAMES, PIPE_KIND_COUNT); }

int pipe_kind_parse(const char *name, pipe_kind_t *out) {
  int k = name_index(name, KIND_NAMES, PIPE_KIND_COUNT);
  if (k >= 0) return *out = (pipe_kind_t)k, 0;
  return dt_error("option --pipe-schedule: '%s' (expected gpipe or 1f1b)", name ? name : "");
}

typedef struct {
  pipe_instr_t *list;
  int n;
} prog_t;

static void emit(prog_t *p, pipe_op_t op, int mb) { p->list[p->n++] = (pipe_instr_t){op, mb}; }

static void emit_forward(prog_t *p, int s, int P, int mb) {
  emit(p, s == 0 ? PIPE_LOAD : PIPE_RECV_ACT, mb);
  emit(p, PIPE_FORWARD, mb);
  if (s < P - 1) emit(p, PIPE_SEND_ACT, mb);
}

static void emit_backward(prog_t *p, int s, int P, int mb) {
  if (s < P - 1) emit(p, PIPE_RECV_GRAD, mb);
  emit(p, PIPE_BACKWARD, mb);
  if (s > 0) emit(p, PIPE_SEND_GRAD, mb);
}

static void gen_gpipe(prog_t *p, int s, int P, int M) {
  for (int m = 0; m < M; m++) emit_forward(p, s, P, m);
  for (int m = 0; m < M; m++) emit_backward(p, s, P, m);
}

static void gen_1f1b(prog_t *p, int s, int P, int M) {
  int warmup = P - s - 1 < M ? P - s - 1 : M, f = 0, b = 0;
  for (; f < warmup; f++) emit_forward(p, s, P, f);
  for (; f < M; f++, b++) {
    emit_forward(p, s, P, f);
    emit_backward(p, s, P, b);
  }
  for (; b < M; b++) emit_backward(p, s, P, b);
}

int pipe_schedule_build(pipe_kind_t kind, int P, int M, pipe_schedule_t *out) {
  memset(out, 0, sizeof *out);
  if (P < 1 || M < 1) return dt_error("pipeline schedule: %d stages, %d micro-batches (each >= 1)", P, M);
  if (kind < 0 || kind >= PIPE_KIND_COUNT) return dt_error("pipeline schedule: unknown kind %d", kind);
  out->kind = kind, out->P = P, out->M = M;
  out->len = calloc((size_t)P, sizeof *out->len);
  out->prog = calloc((size_t)P, sizeof *out->prog);
  if (!out->len || !out->prog) return pipe_schedule_free(out), dt_error("out of memory");
  for (int s = 0; s < P; s++) {
    prog_t p = {calloc((size_t)M * 6 + 2, sizeof(pipe_instr_t)), 0};
    if (!p.list) return pipe_schedule_free(out), dt_error("out of memory");
    if (kind == PIPE_GPIPE) gen_gpipe(&p, s, P, M);
    else gen_1f1b(&p, s, P, M);
    emit(&p, PIPE_REDUCE, -1);
    emit(&p, PIPE_STEP, -1);
    out->prog[s] = p.list;
    out->len[s] = p.n;
  }
  return 0;
}

void pipe_schedule_free(pipe_schedule_t *s) {
  for (int i = 0; s->prog && i < s->P; i++) free(s->prog[i]);
  free(s->prog);
  free(s->len);
  memset(s, 0, sizeof *s);
}

/* Per micro-batch, the phase it has reached on a stage (the order of
 * pipe_op_t from LOAD/RECV_ACT to SEND_GRAD). */
static int expected_next(int s, int P, int done) {
  static const pipe_op_t order[] = {PIPE_RECV_ACT, PIPE_FORWARD, PIPE_SEND_ACT, PIPE_RECV_GRAD,
                                    PIPE_BACKWARD, PIPE_SEND_GRAD};
  int k = done;
  /* skip the phases this stage does not have */
  for (;;) {
    if (k >= 6) return -1;
    pipe_op_t op = order[k];
    if ((op == PIPE_SEND_ACT || op == PIPE_RECV_GRAD) && s == P - 1) { k++; continue; }
    if (op == PIPE_SEND_GRAD && s == 0) { k++; continue; }
    return op == PIPE_RECV_ACT && s == 0 ? PIPE_LOAD : (int)op;
  }
}

static int phase_index(pipe_op_t op) {
  switch (op) {
  case PIPE_LOAD: case PIPE_RECV_ACT: return 0;
  case PIPE_FORWARD: return 1;
  case PIPE_SEND_ACT: return 2;
  case PIPE_RECV_GRAD: return 3;
  case PIPE_BACKWARD: return 4;
  case PIPE_SEND_GRAD: return 5;
  default: return -1;
  }
}

static int check_stage(const pipe_schedule_t *sc, int s, int *phase) {
  int P = sc->P, M = sc->M, n = sc->len[s];
  if (n < 2 || sc->prog[s][n - 2].op != PIPE_REDUCE || sc->prog[s][n - 1].op != PIPE_STEP)
    return dt_error("stage %d: the step does not end with REDUCE, STEP", s);
  for (int i = 0; i < n - 2; i++) {
    pipe_instr_t in = sc->prog[s][i];
    if (in.mb < 0 || in.mb >= M) return dt_error("stage %d, instruction %d: micro-batch %d out of range", s, i, in.mb);
    int want = expected_next(s, P, phase[in.mb]);
    if ((int)in.op != want)
      return dt_error("stage %d, instruction %d: op %d on micro-batch %d out of order", s, i, in.op, in.mb);
    phase[in.mb] = phase_index(in.op) + 1;
  }
  for (int m = 0; m < M; m++)
    if (expected_next(s, P, phase[m]) != -1) return dt_error("stage %d: micro-batch %d unfinished", s, m);
  return 0;
}

/* The micro-batches a stage's sends (or receives) of `op` carry, in order. */
static int channel(const pipe_schedule_t *sc, int s, pipe_op_t op, int *mbs) {
  int n = 0;
  for (int i = 0; i < sc->len[s]; i++)
    if (sc->prog[s][i].op == op) mbs[n++] = sc->prog[s][i].mb;
  return n;
}

int pipe_schedule_check(const pipe_schedule_t *sc) {
  int *phase = calloc((size_t)sc->M, sizeof *phase), *a = calloc((size_t)sc->M, sizeof *a),
      *b = calloc((size_t)sc->M, sizeof *b);
  int rc = phase && a && b ? 0 : dt_error("out of memory");
  for (int s = 0; rc == 0 && s < sc->P; s++) {
    memset(phase, 0, (size_t)sc->M * sizeof *phase);
    rc = check_stage(sc, s, phase);
  }
  for (int s = 0; rc == 0 && s + 1 < sc->P; s++) {
    int na = channel(sc, s, PIPE_SEND_ACT, a), nb = channel(sc, s + 1, PIPE_RECV_ACT, b);
    if (na != nb || memcmp(a, b, (size_t)na * sizeof *a))
      rc = dt_error("activations from stage %d are not received in the order they are sent", s);
    na = channel(sc, s + 1, PIPE_SEND_GRAD, a), nb = channel(sc, s, PIPE_RECV_GRAD, b);
    if (rc == 0 && (na != nb || memcmp(a, b, (size_t)na * sizeof *a)))
      rc = dt_error("gradients from stage %d are not received in the order they are sent", s + 1);
  }
  free(phase), free(a), free(b);
  return rc;
}

int pipe_schedule_peak_live(const pipe_schedule_t *sc, int stage) {
  int live = 0, peak = 0;
  for (int i = 0; i < sc->len[stage]; i++) {
    if (sc->prog[stage][i].op == PIPE_FORWARD && ++live > peak) peak = live;
    if (sc->prog[stage][i].op == PIPE_BACKWARD) live--;
  }
  return peak;
}

void pipe_schedule_print(const pipe_schedule_t *sc, FILE *f) {
  for (int s = 0; s < sc->P; s++) {
    fprintf(f, "stage %d:", s);
    for (int i = 0; i < sc->len[s]; i++) {
      pipe_instr_t in = sc->prog[s][i];
      if (in.op == PIPE_FORWARD) fprintf(f, " F%d", in.mb);
      if (in.op == PIPE_BACKWARD) fprintf(f, " B%d", in.mb);
    }
    fputc('\n', f);
  }
}
