/* The rank grid (grid.c): the ranks of a run as a dp x pp x tp grid, for
 * data, pipeline and tensor parallelism combined. A rank's coordinates
 * follow Megatron-LM's order: tensor-parallel ranks are adjacent (they
 * exchange the most, every layer), then data-parallel, and pipeline stages
 * outermost: rank = (pp_i * dp + dp_i) * tp + tp_i. Each axis has its
 * sub-communicator, built with comm_split: the ranks that differ only in
 * that coordinate, ordered by it. */
#ifndef DTRAIN_STRATEGY_GRID_H
#define DTRAIN_STRATEGY_GRID_H

#include "dtrain/comm.h"

typedef enum { GRID_DP = 0, GRID_PP, GRID_TP, GRID_AXES } grid_axis_t;

typedef struct {
  int size[GRID_AXES];       /* dp, pp, tp */
  int coord[GRID_AXES];      /* this rank's position along each axis */
  comm_t *axis[GRID_AXES];   /* the ranks that differ only along that axis */
} rank_grid_t;

/* Coordinates of `rank` in a dp x pp x tp grid (no communication). */
void rank_grid_coords(int rank, int dp, int pp, int tp, int coord[GRID_AXES]);
/* The rank at `coord`. */
int rank_grid_rank(int dp, int pp, int tp, const int coord[GRID_AXES]);
/* Collective over c: fails unless comm_size(c) == dp * pp * tp (each >= 1),
 * naming the product and how to fix it. */
int rank_grid_new(comm_t *c, int dp, int pp, int tp, rank_grid_t *out);
void rank_grid_free(rank_grid_t *g);
/* Tensor parallelism's cut of c (tp innermost): *group, the tp adjacent
 * ranks of this rank's tensor-parallel group, ordered by tp coordinate; and
 * *slice, the ranks with this rank's tp coordinate, in rank order - a
 * dp x pp grid of their own, in the same layout. Collective over c. */
int rank_grid_split_tp(comm_t *c, int tp, comm_t **group, comm_t **slice);
const char *rank_grid_axis_name(grid_axis_t a);
#endif
