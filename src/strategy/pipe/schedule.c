/* The schedule generators, their checker and a simulator (schedule.h).
 *
 * GPipe (Huang et al. 2019): every micro-batch forward, then every one
 * backward, then one synchronous update; stage s holds M activation sets.
 * 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs
 * min(P - s - 1, M) warm-up forwards, then alternates one forward and one
 * backward, then the remaining backwards; it holds at most P - s sets.
 * Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): rank s holds
 * chunks s, s + P, ..., and runs the forwards in groups of P micro-batches
 * through chunk 0, then chunk 1, ... (the backwards likewise from the last
 * chunk), (P - s - 1) x 2 + (V - 1) x P of them as warm-up, then one
 * forward one backward; Megatron requires M to be a multiple of P. The
 * three flush: the update of the step comes after every backward, so all
 * compute the gradient of the whole batch.
 *
 * The asynchronous schedules share one stream (schedule.h): PipeDream
 * (Narayanan et al. 2019) and DDG (Huo et al. 2018) update after every
 * unit's backward, PipeDream-2BW (Narayanan et al. 2021) after the M
 * units of a step; how the weights are chosen is the engine's. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/core.h"
#include "strategy/pipe/schedule.h"

static const char *const KIND_NAMES[PIPE_KIND_COUNT] = {"gpipe", "1f1b", "interleaved", "pipedream",
                                                        "2bw", "ddg"};

const char *pipe_kind_name(pipe_kind_t k) { return name_of(k, KIND_NAMES, PIPE_KIND_COUNT); }

int pipe_kind_async(pipe_kind_t k) { return k == PIPE_PIPEDREAM || k == PIPE_2BW || k == PIPE_DDG; }

int pipe_kind_parse(const char *name, pipe_kind_t *out, int *V) {
  const char *expected = "expected gpipe, 1f1b, interleaved:V, pipedream, 2bw or ddg";
  *V = 1;
  if (name && !strncmp(name, "interleaved:", 12)) {
    char *end;
    long v = strtol(name + 12, &end, 10);
    if (end == name + 12 || *end || v < 1 || v > 64)
      return dt_error("option --pipe-schedule: '%s' (interleaved:V takes V, the chunks per rank, "
                      "1 to 64: e.g. interleaved:2)", name);
    *out = PIPE_INTERLEAVED, *V = (int)v;
    return 0;
  }
  int k = name_index(name, KIND_NAMES, PIPE_KIND_COUNT);
  if (k == PIPE_INTERLEAVED)
    return dt_error("option --pipe-schedule: interleaved takes the chunks per rank: interleaved:V "
                    "(e.g. interleaved:2)");
  if (k >= 0) return *out = (pipe_kind_t)k, 0;
  return dt_error("option --pipe-schedule: '%s' (%s)", name ? name : "", expected);
}

int pipe_kind_check_m(pipe_kind_t k, int P, int M) {
  if (k == PIPE_INTERLEAVED && M % P)
    return dt_error("options --pipe-schedule interleaved and --micro-batches %d: Megatron's "
                    "interleaved schedule takes a multiple of --pp %d micro-batches (e.g. "
                    "--micro-batches %d)", M, P, (M / P + 1) * P);
  if ((k == PIPE_PIPEDREAM || k == PIPE_DDG) && M != 1)
    return dt_error("options --pipe-schedule %s and --micro-batches %d: %s streams whole batches, "
                    "one update each (give --micro-batches 1, or --pipe-schedule 2bw to "
                    "accumulate micro-batches)", pipe_kind_name(k), M, pipe_kind_name(k));
  if (k == PIPE_2BW && M < P - 1)
    return dt_error("options --pipe-schedule 2bw and --micro-batches %d: two weight versions "
                    "suffice only when a step has at least P - 1 micro-batches (give "
                    "--micro-batches %d or more)", M, P - 1);
  return 0;
}

typedef struct {
  pipe_instr_t *list;
  int n;
} prog_t;

static void emit(prog_t *p, pipe_op_t op, int mb, int chunk) {
  p->list[p->n++] = (pipe_instr_t){op, mb, chunk};
}

/* Chunk v of rank s is global stage g = v P + s of G = P V. */
static void emit_forward(prog_t *p, int s, int P, int V, int v, int mb) {
  int g = v * P + s;
  emit(p, g == 0 ? PIPE_LOAD : PIPE_RECV_ACT, mb, v);
  emit(p, PIPE_FORWARD, mb, v);
  if (g < P * V - 1) emit(p, PIPE_SEND_ACT, mb, v);
}

static void emit_backward(prog_t *p, int s, int P, int V, int v, int mb) {
  int g = v * P + s;
  if (g < P * V - 1) emit(p, PIPE_RECV_GRAD, mb, v);
  emit(p, PIPE_BACKWARD, mb, v);
  if (g > 0) emit(p, PIPE_SEND_GRAD, mb, v);
}

static void gen_gpipe(prog_t *p, int s, int P, int M) {
  for (int m = 0; m < M; m++) emit_forward(p, s, P, 1, 0, m);
  for (int m = 0; m < M; m++) emit_backward(p, s, P, 1, 0, m);
}

static void gen_1f1b(prog_t *p, int s, int P, int M) {
  int warmup = P - s - 1 < M ? P - s - 1 : M, f = 0, b = 0;
  for (; f < warmup; f++) emit_forward(p, s, P, 1, 0, f);
  for (; f < M; f++, b++) {
    emit_forward(p, s, P, 1, 0, f);
    emit_backward(p, s, P, 1, 0, b);
  }
  for (; b < M; b++) emit_backward(p, s, P, 1, 0, b);
}

/* Megatron's order: the k-th forward is micro-batch (k / PV) P + k % P of
 * chunk (k % PV) / P; the k-th backward the same micro-batch of chunk
 * V - 1 - that. A short last step whose M is not a multiple of P runs all
 * forwards first (GPipe over the chunks). */
static void interleaved_at(int k, int P, int V, int *v, int *mb) {
  *v = (k % (P * V)) / P;
  *mb = k / (P * V) * P + k % P;
}

static void gen_interleaved(prog_t *p, int s, int P, int V, int M) {
  int total = M * V, warmup = (P - s - 1) * 2 + (V - 1) * P, v, mb;
  if (M % P || warmup > total) warmup = total;
  int f = 0, b = 0;
  for (; f < warmup; f++) {
    if (M % P) v = f / M, mb = f % M;
    else interleaved_at(f, P, V, &v, &mb);
    emit_forward(p, s, P, V, v, mb);
  }
  for (; f < total; f++, b++) {
    interleaved_at(f, P, V, &v, &mb);
    emit_forward(p, s, P, V, v, mb);
    interleaved_at(b, P, V, &v, &mb);
    emit_backward(p, s, P, V, V - 1 - v, mb);
  }
  for (; b < total; b++) {
    if (M % P) v = b / M, mb = b % M;
    else interleaved_at(b, P, V, &v, &mb);
    emit_backward(p, s, P, V, V - 1 - v, mb);
  }
}

/* ---- asynchronous: the stream ------------------------------------------------ */

static int updates_after(pipe_kind_t kind, int M, int unit) { return kind != PIPE_2BW || unit % M == M - 1; }

static void async_backward(prog_t *p, pipe_kind_t kind, int s, int P, int M, int unit) {
  emit_backward(p, s, P, 1, 0, unit);
  if (updates_after(kind, M, unit)) {
    emit(p, PIPE_REDUCE, unit, 0);
    emit(p, PIPE_STEP, unit, 0);
  }
}

int pipe_async_max_len(int P, int M) { return M * 10 + P * 10 + 4; }

int pipe_async_step(pipe_kind_t kind, int P, int M, int s, int j, pipe_instr_t *out) {
  prog_t p = {out, 0};
  int d = P - 1 - s;
  for (int m = 0; m < M; m++) {
    int unit = j * M + m;
    emit_forward(&p, s, P, 1, 0, unit);
    if (unit - d >= 0) async_backward(&p, kind, s, P, M, unit - d);
  }
  return p.n;
}

int pipe_async_drain(pipe_kind_t kind, int P, int M, int s, int steps, pipe_instr_t *out) {
  prog_t p = {out, 0};
  int d = P - 1 - s, end = steps * M;
  for (int unit = end - d < 0 ? 0 : end - d; unit < end; unit++) async_backward(&p, kind, s, P, M, unit);
  return p.n;
}

/* ---- building ---------------------------------------------------------------- */

int pipe_schedule_build(pipe_kind_t kind, int P, int V, int M, int steps, pipe_schedule_t *out) {
  memset(out, 0, sizeof *out);
  if (P < 1 || M < 1 || V < 1) return dt_error("pipeline schedule: %d stages, %d chunks, %d micro-batches (each >= 1)", P, V, M);
  if (kind < 0 || kind >= PIPE_KIND_COUNT) return dt_error("pipeline schedule: unknown kind %d", kind);
  if (kind != PIPE_INTERLEAVED && V != 1) return dt_error("pipeline schedule %s: one chunk per rank", pipe_kind_name(kind));
  int async = pipe_kind_async(kind);
  if (async && steps < 1) return dt_error("pipeline schedule %s: %d steps (>= 1)", pipe_kind_name(kind), steps);
  out->kind = kind, out->P = P, out->V = V, out->M = M;
  out->steps = async ? steps : 1;
  out->units = async ? steps * M : M;
  out->len = calloc((size_t)P, sizeof *out->len);
  out->prog = calloc((size_t)P, sizeof *out->prog);
  if (!out->len || !out->prog) return pipe_schedule_free(out), dt_error("out of memory");
  size_t cap = async ? (size_t)(steps + 1) * pipe_async_max_len(P, M) : (size_t)M * V * 6 + 2;
  for (int s = 0; s < P; s++) {
    prog_t p = {calloc(cap, sizeof(pipe_instr_t)), 0};
    if (!p.list) return pipe_schedule_free(out), dt_error("out of memory");
    if (async) {
      for (int j = 0; j < steps; j++) p.n += pipe_async_step(kind, P, M, s, j, p.list + p.n);
      p.n += pipe_async_drain(kind, P, M, s, steps, p.list + p.n);
    } else {
      if (kind == PIPE_GPIPE) gen_gpipe(&p, s, P, M);
      else if (kind == PIPE_1F1B) gen_1f1b(&p, s, P, M);
      else gen_interleaved(&p, s, P, V, M);
      emit(&p, PIPE_REDUCE, -1, 0);
      emit(&p, PIPE_STEP, -1, 0);
    }
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

/* ---- checking ---------------------------------------------------------------- */

/* Per (chunk, micro-batch), the phase it has reached on its rank (the
 * order of pipe_op_t from LOAD/RECV_ACT to SEND_GRAD); g is the global
 * stage, G their count. */
static int expected_next(int g, int G, int done) {
  static const pipe_op_t order[] = {PIPE_RECV_ACT, PIPE_FORWARD, PIPE_SEND_ACT, PIPE_RECV_GRAD,
                                    PIPE_BACKWARD, PIPE_SEND_GRAD};
  for (int k = done;; k++) { /* skip the phases this chunk does not have */
    if (k >= 6) return -1;
    pipe_op_t op = order[k];
    if ((op == PIPE_SEND_ACT || op == PIPE_RECV_GRAD) && g == G - 1) continue;
    if (op == PIPE_SEND_GRAD && g == 0) continue;
    return op == PIPE_RECV_ACT && g == 0 ? PIPE_LOAD : (int)op;
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

static int check_rank(const pipe_schedule_t *sc, int s, int *phase) {
  int P = sc->P, V = sc->V, U = sc->units, n = sc->len[s], async = pipe_kind_async(sc->kind);
  if (n < 1 || sc->prog[s][n - 1].op != PIPE_STEP)
    return dt_error("stage %d: the %s does not end with REDUCE, STEP", s, async ? "epoch" : "step");
  for (int i = 0; i < n; i++) {
    pipe_instr_t in = sc->prog[s][i];
    if (in.op == PIPE_REDUCE || in.op == PIPE_STEP) {
      int pair = in.op == PIPE_REDUCE ? i + 1 < n && sc->prog[s][i + 1].op == PIPE_STEP
                                      : i > 0 && sc->prog[s][i - 1].op == PIPE_REDUCE;
      if (!pair || (!async && i < n - 2))
        return dt_error("stage %d, instruction %d: REDUCE and STEP %s", s, i,
                        async ? "must come in pairs" : "end the step, once");
      continue;
    }
    if (in.mb < 0 || in.mb >= U || in.chunk < 0 || in.chunk >= V)
      return dt_error("stage %d, instruction %d: micro-batch %d (chunk %d) out of range", s, i, in.mb, in.chunk);
    int *ph = &phase[in.chunk * U + in.mb];
    int want = expected_next(in.chunk * P + s, P * V, *ph);
    if ((int)in.op != want)
      return dt_error("stage %d, instruction %d: op %d on micro-batch %d (chunk %d) out of order", s, i,
                      in.op, in.mb, in.chunk);
    *ph = phase_index(in.op) + 1;
  }
  for (int v = 0; v < V; v++)
    for (int m = 0; m < U; m++)
      if (expected_next(v * P + s, P * V, phase[v * U + m]) != -1)
        return dt_error("stage %d: micro-batch %d (chunk %d) unfinished", s, m, v);
  return 0;
}

/* The micro-batches global stage g's sends (or receives) of `op` carry, in order. */
static int channel(const pipe_schedule_t *sc, int g, pipe_op_t op, int *mbs) {
  int n = 0, s = g % sc->P, v = g / sc->P;
  for (int i = 0; i < sc->len[s]; i++)
    if (sc->prog[s][i].op == op && sc->prog[s][i].chunk == v) mbs[n++] = sc->prog[s][i].mb;
  return n;
}

static int check_channels(const pipe_schedule_t *sc, int *a, int *b) {
  for (int g = 0; g + 1 < sc->P * sc->V; g++) {
    int na = channel(sc, g, PIPE_SEND_ACT, a), nb = channel(sc, g + 1, PIPE_RECV_ACT, b);
    if (na != nb || memcmp(a, b, (size_t)na * sizeof *a))
      return dt_error("activations from stage %d are not received in the order they are sent", g);
    na = channel(sc, g + 1, PIPE_SEND_GRAD, a), nb = channel(sc, g, PIPE_RECV_GRAD, b);
    if (na != nb || memcmp(a, b, (size_t)na * sizeof *a))
      return dt_error("gradients from stage %d are not received in the order they are sent", g + 1);
  }
  return 0;
}

/* The simulated run: per tick, every rank first runs what takes no time
 * (loads, sends, receives whose message was sent, REDUCE, STEP), then the
 * forward or backward it has reached takes the tick; messages are free. */
int pipe_schedule_simulate(const pipe_schedule_t *sc, int *total, int *idle_rank0) {
  int P = sc->P, G = P * sc->V;
  int *pc = calloc((size_t)P, sizeof *pc), *sent = calloc((size_t)G * 2, sizeof *sent),
      *got = calloc((size_t)G * 2, sizeof *got);
  int rc = pc && sent && got ? 0 : dt_error("out of memory"), ticks = 0, idle = 0;
  for (;;) {
    int moved = 1, done = 0, busy = 0;
    while (rc == 0 && moved) {
      moved = 0;
      for (int s = 0; s < P; s++)
        while (pc[s] < sc->len[s]) {
          pipe_instr_t in = sc->prog[s][pc[s]];
          int g = in.chunk * P + s;
          if (in.op == PIPE_FORWARD || in.op == PIPE_BACKWARD) break;
          if (in.op == PIPE_RECV_ACT && sent[g - 1] <= got[g - 1]) break;
          if (in.op == PIPE_RECV_GRAD && sent[G + g] <= got[G + g]) break;
          if (in.op == PIPE_RECV_ACT) got[g - 1]++;
          if (in.op == PIPE_RECV_GRAD) got[G + g]++;
          if (in.op == PIPE_SEND_ACT) sent[g]++;
          if (in.op == PIPE_SEND_GRAD) sent[G + g - 1]++;
          pc[s]++, moved = 1;
        }
    }
    for (int s = 0; s < P; s++) done += pc[s] == sc->len[s];
    if (rc || done == P) break;
    for (int s = 0; s < P; s++)
      if (pc[s] < sc->len[s]) {
        pipe_op_t op = sc->prog[s][pc[s]].op;
        if (op == PIPE_FORWARD || op == PIPE_BACKWARD) pc[s]++, busy++;
        else if (s == 0) idle++;
      }
    if (!busy) {
      rc = dt_error("the schedule hangs: no stage can proceed (stage 0 at instruction %d of %d)", pc[0],
                    sc->len[0]);
      break;
    }
    ticks++;
  }
  free(pc), free(sent), free(got);
  if (total) *total = ticks;
  if (idle_rank0) *idle_rank0 = idle;
  return rc;
}

int pipe_schedule_check(const pipe_schedule_t *sc) {
  size_t n = (size_t)sc->units * sc->V;
  int *phase = calloc(n, sizeof *phase), *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
  int rc = phase && a && b ? 0 : dt_error("out of memory");
  for (int s = 0; rc == 0 && s < sc->P; s++) {
    memset(phase, 0, n * sizeof *phase);
    rc = check_rank(sc, s, phase);
  }
  if (rc == 0) rc = check_channels(sc, a, b);
  if (rc == 0) rc = pipe_schedule_simulate(sc, NULL, NULL);
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
      if (in.op != PIPE_FORWARD && in.op != PIPE_BACKWARD) continue;
      fprintf(f, " %c%d", in.op == PIPE_FORWARD ? 'F' : 'B', in.mb);
      if (in.chunk) fprintf(f, ".%d", in.chunk);
    }
    fputc('\n', f);
  }
}
