/* The rank grid: coordinates and one sub-communicator per axis (grid.h). */
#include <string.h>

#include "strategy/grid.h"

const char *rank_grid_axis_name(grid_axis_t a) {
  static const char *names[GRID_AXES] = {"dp", "pp", "tp"};
  return a >= 0 && a < GRID_AXES ? names[a] : "?";
}

void rank_grid_coords(int rank, int dp, int pp, int tp, int coord[GRID_AXES]) {
  coord[GRID_TP] = rank % tp;
  coord[GRID_DP] = rank / tp % dp;
  coord[GRID_PP] = rank / (tp * dp);
  (void)pp;
}

int rank_grid_rank(int dp, int pp, int tp, const int coord[GRID_AXES]) {
  (void)pp;
  return (coord[GRID_PP] * dp + coord[GRID_DP]) * tp + coord[GRID_TP];
}

/* The colour of the group along `axis`: the rank with that coordinate
 * zeroed, the same for every rank that differs only along it. */
static int axis_color(const rank_grid_t *g, grid_axis_t axis) {
  int c[GRID_AXES];
  memcpy(c, g->coord, sizeof c);
  c[axis] = 0;
  return rank_grid_rank(g->size[GRID_DP], g->size[GRID_PP], g->size[GRID_TP], c);
}

int rank_grid_new(comm_t *c, int dp, int pp, int tp, rank_grid_t *out) {
  memset(out, 0, sizeof *out);
  if (dp < 1 || pp < 1 || tp < 1 || (long long)dp * pp * tp != comm_size(c))
    return dt_error("rank grid: dp %d x pp %d x tp %d = %lld ranks, but the run has %d; "
                    "choose sizes whose product is the number of workers",
                    dp, pp, tp, (long long)dp * pp * tp, comm_size(c));
  out->size[GRID_DP] = dp, out->size[GRID_PP] = pp, out->size[GRID_TP] = tp;
  rank_grid_coords(comm_rank(c), dp, pp, tp, out->coord);
  for (int a = 0; a < GRID_AXES; a++) {
    if (comm_split(c, axis_color(out, (grid_axis_t)a), out->coord[a], &out->axis[a]) != 0) {
      rank_grid_free(out);
      return dt_error_prefix("rank grid, %s axis: ", rank_grid_axis_name((grid_axis_t)a));
    }
    static const char *labels[GRID_AXES] = {"dp group", "pp group", "tp group"};
    out->axis[a]->label = labels[a]; /* its messages say which group */
  }
  return 0;
}

void rank_grid_free(rank_grid_t *g) {
  for (int a = 0; a < GRID_AXES; a++) {
    if (g->axis[a]) comm_free(g->axis[a]);
    g->axis[a] = NULL;
  }
}

int rank_grid_split_tp(comm_t *c, int tp, comm_t **group, comm_t **slice) {
  *group = *slice = NULL;
  int r = comm_rank(c);
  if (tp < 1 || comm_size(c) % tp != 0)
    return dt_error("rank grid: %d ranks do not split into tensor-parallel groups of %d",
                    comm_size(c), tp);
  if (comm_split(c, r / tp, r % tp, group) != 0) return dt_error_prefix("rank grid, tp axis: ");
  if (comm_split(c, r % tp, r / tp, slice) != 0) {
    comm_free(*group);
    *group = NULL;
    return dt_error_prefix("rank grid, tp slice: ");
  }
  (*group)->label = "tp group";
  (*slice)->label = "tp slice";
  return 0;
}
