/* The rank grid (src/strategy/grid.c): coordinates in Megatron's order,
 * and each axis's sub-communicator holding exactly the ranks that differ
 * only along that axis, checked with an allreduce of world ranks on every
 * axis for many dp x pp x tp shapes. */
#include <string.h>

#include "dtrain/coll.h"
#include "strategy/grid.h"
#include "test.h"

typedef struct { int dp, pp, tp; } shape3_t;

/* Sum of the world ranks of the group along `axis` that holds `coord`. */
static int expected_axis_sum(const shape3_t *s, const int coord[GRID_AXES], int axis) {
  int c[GRID_AXES], sum = 0, n = axis == GRID_DP ? s->dp : axis == GRID_PP ? s->pp : s->tp;
  memcpy(c, coord, sizeof c);
  for (int i = 0; i < n; i++) {
    c[axis] = i;
    sum += rank_grid_rank(s->dp, s->pp, s->tp, c);
  }
  return sum;
}

static int rank_grid_check(comm_t *c, void *arg) {
  const shape3_t *s = arg;
  rank_grid_t g;
  RCHECK_OK(rank_grid_new(c, s->dp, s->pp, s->tp, &g));
  int rc = 0;
  RCHECK(rank_grid_rank(s->dp, s->pp, s->tp, g.coord) == comm_rank(c));
  for (int a = 0; a < GRID_AXES && rc == 0; a++) {
    int n = g.size[a];
    if (comm_size(g.axis[a]) != n || comm_rank(g.axis[a]) != g.coord[a]) {
      rc = dt_error("axis %s: size %d rank %d, expected %d and %d", rank_grid_axis_name(a),
                    comm_size(g.axis[a]), comm_rank(g.axis[a]), n, g.coord[a]);
      break;
    }
    coll_ctx_t *ctx = NULL;
    float v = (float)comm_rank(c);
    rc = coll_ctx_new(g.axis[a], &ctx);
    if (rc == 0) rc = allreduce(ctx, ALLREDUCE_RING, &v, 1);
    coll_ctx_free(ctx);
    if (rc == 0 && v != (float)expected_axis_sum(s, g.coord, a))
      rc = dt_error("axis %s of rank %d: sum of world ranks %g, expected %d", rank_grid_axis_name(a),
                    comm_rank(c), v, expected_axis_sum(s, g.coord, a));
  }
  rank_grid_free(&g);
  return rc;
}

static void test_grid_shapes(void) {
  static const shape3_t shapes[] = {{1, 1, 1}, {4, 1, 1}, {1, 4, 1}, {1, 1, 4}, {2, 2, 1},
                                    {2, 1, 2}, {1, 2, 2}, {2, 2, 2}, {3, 2, 1}, {2, 3, 2}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    shape3_t s = shapes[i];
    if (comm_local_run(s.dp * s.pp * s.tp, NULL, rank_grid_check, &s) != 0) {
      fprintf(stderr, "  dp %d pp %d tp %d: %s\n", s.dp, s.pp, s.tp, dt_errmsg());
      CHECK(0);
    }
  }
}

/* Megatron's order: tp fastest, then dp, pp outermost. */
static void test_grid_coords(void) {
  int c[GRID_AXES];
  rank_grid_coords(5, 2, 2, 2, c); /* 5 = (1*2 + 0)*2 + 1 */
  CHECK(c[GRID_PP] == 1 && c[GRID_DP] == 0 && c[GRID_TP] == 1);
  for (int r = 0; r < 24; r++) {
    rank_grid_coords(r, 3, 4, 2, c);
    CHECK(rank_grid_rank(3, 4, 2, c) == r);
    CHECK(c[GRID_TP] < 2 && c[GRID_DP] < 3 && c[GRID_PP] < 4);
  }
}

static int rank_grid_wrong_product(comm_t *c, void *arg) {
  rank_grid_t g;
  RCHECK_FAILS_WITH(rank_grid_new(c, 2, 2, 1, &g), "dp 2 x pp 2 x tp 1 = 4 ranks, but the run has 3");
  RCHECK_FAILS_WITH(rank_grid_new(c, 3, 0, 1, &g), "pp 0");
  return 0;
}

static void test_grid_refuses_wrong_product(void) {
  CHECK_OK(comm_local_run(3, NULL, rank_grid_wrong_product, NULL));
}

int main(void) {
  RUN(test_grid_coords);
  RUN(test_grid_shapes);
  RUN(test_grid_refuses_wrong_product);
  TEST_MAIN_END();
}
