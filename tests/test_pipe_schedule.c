/* Pipeline schedules as data (src/strategy/pipe/schedule.c): every
 * generated schedule is well formed and runs to its end on the simulated
 * network for P = 1..6 stages and M = 1..9 micro-batches
 * (pipe_schedule_check; interleaved with V = 1..4 chunks, the
 * asynchronous ones over 1..5 steps), holds the activation sets its paper
 * says (GPipe: M on every stage; 1F1B: min(P - s, M) on stage s), has the
 * instruction count of its definition and, simulated with unit-time
 * chunks, the bubble of its formula (GPipe: 2(P - 1) idle ticks of
 * 2(M + P - 1); interleaved: 2(P - 1) chunk ticks beside 2 M V of work,
 * Megatron's (P - 1) / (V M) of the ideal time); the checker refuses
 * broken ones (a backward before its forward, sends out of order, a
 * missing step, a hang). */
#include <string.h>

#include "strategy/pipe/schedule.h"
#include "test.h"

/* Instructions of stage s: LOAD or RECV + FORWARD (+ SEND) and (RECV +)
 * BACKWARD (+ SEND) per micro-batch, then REDUCE and STEP. */
static int expected_len(int s, int P, int M) {
  int per = 2 + (s < P - 1) + (s < P - 1) + 1 + (s > 0);
  return per * M + 2;
}

static void test_schedules_well_formed(void) {
  for (int k = 0; k <= PIPE_1F1B; k++)
    for (int P = 1; P <= 6; P++)
      for (int M = 1; M <= 9; M++) {
        pipe_schedule_t sc;
        CHECK_OK(pipe_schedule_build((pipe_kind_t)k, P, 1, M, 0, &sc));
        CHECK_OK(pipe_schedule_check(&sc));
        for (int s = 0; s < P; s++) {
          CHECK(sc.len[s] == expected_len(s, P, M));
          int peak = pipe_schedule_peak_live(&sc, s);
          int want = k == PIPE_GPIPE ? M : (P - s < M ? P - s : M);
          if (peak != want) {
            fprintf(stderr, "  %s P=%d M=%d stage %d: peak %d, expected %d\n",
                    pipe_kind_name((pipe_kind_t)k), P, M, s, peak, want);
            CHECK(0);
          }
        }
        pipe_schedule_free(&sc);
      }
}

static void program_of(const pipe_schedule_t *sc, int s, char *buf, size_t cap) {
  FILE *f = fmemopen(buf, cap, "w");
  pipe_schedule_t one = *sc;
  one.P = s + 1; /* print stages 0..s, keep the last line */
  pipe_schedule_print(&one, f);
  fclose(f);
  char *last = strrchr(buf, ':');
  memmove(buf, last + 1, strlen(last + 1) + 1);
}

/* Interleaved: every P, V, M well formed (M not a multiple of P: the
 * all-forwards fallback of a short last step), at most 2(P - 1) idle
 * chunk ticks on rank 0 whatever V, and 2(P - 1) exactly when M is a
 * multiple of P: the bubble over the ideal time is (P - 1) / (V M). */
static void test_interleaved(void) {
  for (int P = 1; P <= 6; P++)
    for (int V = 1; V <= 4; V++)
      for (int M = 1; M <= 9; M++) {
        pipe_schedule_t sc;
        CHECK_OK(pipe_schedule_build(PIPE_INTERLEAVED, P, V, M, 0, &sc));
        CHECK_OK(pipe_schedule_check(&sc));
        int total, idle;
        CHECK_OK(pipe_schedule_simulate(&sc, &total, &idle));
        if (M % P == 0 && (idle != 2 * (P - 1) || total != 2 * M * V + 2 * (P - 1))) {
          fprintf(stderr, "  interleaved P=%d V=%d M=%d: %d ticks, %d idle\n", P, V, M, total, idle);
          CHECK(0);
        }
        for (int s = 0; s < P; s++) {
          int per = 0;
          for (int v = 0; v < V; v++) {
            int g = v * P + s, G = P * V;
            per += 2 + (g < G - 1) + (g < G - 1) + 1 + (g > 0);
          }
          CHECK(sc.len[s] == per * M + 2);
        }
        pipe_schedule_free(&sc);
      }
  /* GPipe's bubble: (P - 1) / (M + P - 1) of the total */
  for (int P = 1; P <= 5; P++)
    for (int M = 1; M <= 8; M++) {
      pipe_schedule_t sc;
      int total, idle;
      CHECK_OK(pipe_schedule_build(PIPE_GPIPE, P, 1, M, 0, &sc));
      CHECK_OK(pipe_schedule_simulate(&sc, &total, &idle));
      CHECK(total == 2 * (M + P - 1) && idle == 2 * (P - 1));
      pipe_schedule_free(&sc);
    }
  /* Megatron's order for P = 2, V = 2, M = 4 (.1: the second chunk) */
  pipe_schedule_t sc;
  char buf[256];
  CHECK_OK(pipe_schedule_build(PIPE_INTERLEAVED, 2, 2, 4, 0, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3\n") == 0);
  program_of(&sc, 1, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3\n") == 0);
  pipe_schedule_free(&sc);
}

/* The asynchronous stream: each stage forwards a unit, then backwards the
 * one P - 1 - s behind it (1F1B without a flush), an update after every
 * unit (pipedream, ddg) or after the M of a step (2bw); well formed over
 * any number of steps with the drain; in flight on stage s: P - s. */
static void test_async(void) {
  pipe_kind_t kinds[3] = {PIPE_PIPEDREAM, PIPE_2BW, PIPE_DDG};
  for (int k = 0; k < 3; k++)
    for (int P = 1; P <= 5; P++)
      for (int M = 1; M <= 4; M++)
        for (int J = 1; J <= 5; J++) {
          pipe_schedule_t sc;
          CHECK_OK(pipe_schedule_build(kinds[k], P, 1, M, J, &sc));
          CHECK_OK(pipe_schedule_check(&sc));
          for (int s = 0; s < P; s++) {
            int steps = 0, U = J * M;
            for (int i = 0; i < sc.len[s]; i++) steps += sc.prog[s][i].op == PIPE_STEP;
            CHECK(steps == (kinds[k] == PIPE_2BW ? J : U));
            int want = P - s < U ? P - s : U;
            CHECK(pipe_schedule_peak_live(&sc, s) == want);
          }
          pipe_schedule_free(&sc);
        }
  pipe_schedule_t sc;
  char buf[256];
  CHECK_OK(pipe_schedule_build(PIPE_PIPEDREAM, 3, 1, 1, 4, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 F2 B0 F3 B1 B2 B3\n") == 0);
  program_of(&sc, 2, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 B0 F1 B1 F2 B2 F3 B3\n") == 0);
  pipe_schedule_free(&sc);
  CHECK_FAILS_WITH(pipe_kind_check_m(PIPE_INTERLEAVED, 3, 4), "multiple of --pp 3");
  CHECK_FAILS_WITH(pipe_kind_check_m(PIPE_PIPEDREAM, 2, 2), "--micro-batches 1");
  CHECK_FAILS_WITH(pipe_kind_check_m(PIPE_2BW, 4, 2), "--micro-batches 3 or more");
  CHECK_OK(pipe_kind_check_m(PIPE_2BW, 4, 3));
}

/* The orders of the papers, written out. */
static void test_known_orders(void) {
  pipe_schedule_t sc;
  char buf[256];
  CHECK_OK(pipe_schedule_build(PIPE_1F1B, 2, 1, 3, 0, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 B0 F2 B1 B2\n") == 0);
  program_of(&sc, 1, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 B0 F1 B1 F2 B2\n") == 0);
  pipe_schedule_free(&sc);
  CHECK_OK(pipe_schedule_build(PIPE_1F1B, 4, 1, 8, 0, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n") == 0);
  pipe_schedule_free(&sc);
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 3, 1, 2, 0, &sc));
  program_of(&sc, 2, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 B0 B1\n") == 0);
  pipe_schedule_free(&sc);
}

static void test_check_refuses_broken(void) {
  pipe_schedule_t sc;
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 2, 1, 2, 0, &sc));
  /* stage 1: B0 before F0 */
  pipe_instr_t *p = sc.prog[1], t = p[0];
  p[0] = p[3], p[3] = t;
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "out of order");
  p[3] = p[0], p[0] = t;
  CHECK_OK(pipe_schedule_check(&sc));
  /* stage 0 sends micro-batch 1's activation before 0's */
  p = sc.prog[0];
  CHECK(p[2].op == PIPE_SEND_ACT && p[5].op == PIPE_SEND_ACT);
  p[2].mb = 1, p[5].mb = 0;
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "stage 0");
  p[2].mb = 0, p[5].mb = 1;
  sc.len[0]--; /* no STEP */
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "REDUCE, STEP");
  sc.len[0]++;
  p[1].mb = 7;
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "out of range");
  pipe_schedule_free(&sc);
  /* each stage well formed alone, but stage 1 receives micro-batch 1 first */
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 2, 1, 2, 0, &sc));
  p = sc.prog[1];
  CHECK(p[0].op == PIPE_RECV_ACT && p[2].op == PIPE_RECV_ACT);
  p[0].mb = p[1].mb = 1, p[2].mb = p[3].mb = 0;
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "not received in the order they are sent");
  pipe_schedule_free(&sc);
  CHECK_FAILS_WITH(pipe_schedule_build(PIPE_GPIPE, 0, 1, 2, 0, &sc), "stages");
  CHECK_FAILS_WITH(pipe_schedule_build(PIPE_1F1B, 2, 1, 0, 0, &sc), "micro-batches");
  /* a hang, each list in order and the channels matched: stage 0 waits
   * for gradient 0 before it sends activation 1 (1F1B's order), stage 1
   * for activation 1 before it sends gradient 0 (GPipe's) */
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 2, 1, 2, 0, &sc));
  pipe_instr_t f1b1[] = {{PIPE_LOAD, 0, 0}, {PIPE_FORWARD, 0, 0}, {PIPE_SEND_ACT, 0, 0},
                         {PIPE_RECV_GRAD, 0, 0}, {PIPE_BACKWARD, 0, 0},
                         {PIPE_LOAD, 1, 0}, {PIPE_FORWARD, 1, 0}, {PIPE_SEND_ACT, 1, 0},
                         {PIPE_RECV_GRAD, 1, 0}, {PIPE_BACKWARD, 1, 0}};
  CHECK(sc.len[0] == 12);
  memcpy(sc.prog[0], f1b1, sizeof f1b1);
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "hangs");
  pipe_schedule_free(&sc);
  pipe_kind_t k;
  int V;
  CHECK_FAILS_WITH(pipe_kind_parse("pipedreamer", &k, &V), "expected gpipe, 1f1b, interleaved:V");
  CHECK_FAILS_WITH(pipe_kind_parse("interleaved", &k, &V), "interleaved:V");
  CHECK_FAILS_WITH(pipe_kind_parse("interleaved:x", &k, &V), "1 to 64");
  CHECK_OK(pipe_kind_parse("interleaved:3", &k, &V));
  CHECK(k == PIPE_INTERLEAVED && V == 3);
  CHECK_OK(pipe_kind_parse("2bw", &k, &V));
  CHECK(k == PIPE_2BW && V == 1);
}

int main(void) {
  RUN(test_schedules_well_formed);
  RUN(test_known_orders);
  RUN(test_interleaved);
  RUN(test_async);
  RUN(test_check_refuses_broken);
  TEST_MAIN_END();
}
