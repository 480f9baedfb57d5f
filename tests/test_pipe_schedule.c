/* Pipeline schedules as data (src/strategy/pipe/schedule.c): every
 * generated schedule is well formed for P = 1..6 stages and M = 1..9
 * micro-batches (pipe_schedule_check), holds the activation sets its paper
 * says (GPipe: M on every stage; 1F1B: min(P - s, M) on stage s), has the
 * instruction count of its definition, and the checker refuses broken
 * ones (a backward before its forward, sends out of order, a missing
 * step). */
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
  for (int k = 0; k < PIPE_KIND_COUNT; k++)
    for (int P = 1; P <= 6; P++)
      for (int M = 1; M <= 9; M++) {
        pipe_schedule_t sc;
        CHECK_OK(pipe_schedule_build((pipe_kind_t)k, P, M, &sc));
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

/* The orders of the papers, written out. */
static void test_known_orders(void) {
  pipe_schedule_t sc;
  char buf[256];
  CHECK_OK(pipe_schedule_build(PIPE_1F1B, 2, 3, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 B0 F2 B1 B2\n") == 0);
  program_of(&sc, 1, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 B0 F1 B1 F2 B2\n") == 0);
  pipe_schedule_free(&sc);
  CHECK_OK(pipe_schedule_build(PIPE_1F1B, 4, 8, &sc));
  program_of(&sc, 0, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n") == 0);
  pipe_schedule_free(&sc);
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 3, 2, &sc));
  program_of(&sc, 2, buf, sizeof buf);
  CHECK(strcmp(buf, " F0 F1 B0 B1\n") == 0);
  pipe_schedule_free(&sc);
}

static void test_check_refuses_broken(void) {
  pipe_schedule_t sc;
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 2, 2, &sc));
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
  CHECK_OK(pipe_schedule_build(PIPE_GPIPE, 2, 2, &sc));
  p = sc.prog[1];
  CHECK(p[0].op == PIPE_RECV_ACT && p[2].op == PIPE_RECV_ACT);
  p[0].mb = p[1].mb = 1, p[2].mb = p[3].mb = 0;
  CHECK_FAILS_WITH(pipe_schedule_check(&sc), "not received in the order they are sent");
  pipe_schedule_free(&sc);
  CHECK_FAILS_WITH(pipe_schedule_build(PIPE_GPIPE, 0, 2, &sc), "stages");
  CHECK_FAILS_WITH(pipe_schedule_build(PIPE_1F1B, 2, 0, &sc), "micro-batches");
  pipe_kind_t k;
  CHECK_FAILS_WITH(pipe_kind_parse("pipedream", &k), "expected gpipe or 1f1b");
}

int main(void) {
  RUN(test_schedules_well_formed);
  RUN(test_known_orders);
  RUN(test_check_refuses_broken);
  TEST_MAIN_END();
}
