/* Tensor parallelism (Megatron-LM): the dense layers of a model split by
 * neurons over a group of tp adjacent ranks, each rank holding only its
 * block of their parameters, gradients and optimizer state.
 *
 * Composition: a run of dp x pp x tp ranks is cut into tp "slices" (the
 * ranks with the same tp coordinate, a dp x pp grid of their own) and, across
 * them, the tensor-parallel groups (grid.h: rank_grid_split_tp). The worker
 * runs on its slice (w->comm) as if tp were 1 - data parallelism sums the
 * gradients over the slice's dp axis, which holds exactly the ranks with
 * the same block of the parameters; a pipeline runs its stages on it - and
 * the split layers sum over the group through the model's tp_link_t.
 *
 * The plan (plan.c) pairs the model's dense layers as Megatron does: a
 * COLUMN layer, element-wise layers on its shard, a ROW layer; layers
 * outside a pair (convolutions, an odd last dense layer) are replicated. */
#ifndef DTRAIN_STRATEGY_TENSOR_H
#define DTRAIN_STRATEGY_TENSOR_H

#include "strategy/strategy.h"
#include "strategy/tp_group.h"

/* Marks the pairs (layer_spec_t.split) of spec for a group of tp ranks;
 * refuses, naming --tp and what would work, a model with no pair to split
 * or a split layer with fewer features than tp. Writes the number of
 * pairs into *pairs if given. */
int tensor_plan(model_spec_t *spec, int tp, int *pairs);
/* The same, splitting dense layers only (convolutions stay whole: the one
 * weird trick runs them data-parallel). */
int tensor_plan_dense(model_spec_t *spec, int tp, int *pairs);
/* The plan a run of cfg uses for a group of tp ranks: the model file's
 * split= keys where it has them; else dense layers only under the one
 * weird trick and under parameter servers (Project Adam keeps its
 * convolutions whole), Megatron's pairs of dense and conv layers
 * otherwise. */
int tensor_plan_for(const train_config_t *cfg, model_spec_t *spec, int tp);
/* The model file's own plan (its split= keys, docs/MODEL_FORMAT.md):
 * checks that the split=column and split=row layers make Megatron's pairs
 * (element-wise layers between, of one kind) and that split=data, where
 * given, marks every dense and conv2d layer before the first pair and none
 * after; sets the split of each pair for a group of tp ranks (tp 1: checks
 * only). Refuses, naming the file and line, a layer that breaks them. */
int tensor_plan_file(model_spec_t *spec, int tp);
/* The line of the first layer whose split= key is `which` (UNSET: any
 * split= key); 0 when none is. */
int tensor_file_split_line(const model_spec_t *spec, file_split_t which);
/* Before the configuration is checked: a model file with split=data
 * layers makes a tensor-parallel run (--tp T) the one weird trick, as
 * --tp-conv data does (then --tp must be the workers, and --pp 1); a file
 * that says how its layers split refuses --tp-conv data. */
int tensor_model_options(train_config_t *c);
/* The options that combine with --tp (config check), and, once the number
 * of workers is known, that it is a multiple of pp x tp. */
int tensor_check(const train_config_t *c);
int tensor_check_world(const train_config_t *c);
int tensor_check_spec(const train_config_t *c, model_spec_t *spec);
/* The model (one worker's, unsplit) as each tp rank would build it, where
 * it has local2d layers (their bands of rows). */
int tensor_check_model(const train_config_t *c, const model_t *m);

/* ---- a step's description (describe.c) --------------------------------------- */
/* The models the ranks of cfg's run build, one per tensor-parallel
 * coordinate (each its blocks of the split layers; worker_build_model),
 * for a description: nobody runs them, and their links only carry a
 * group's size and a rank's place. T: the group's ranks (1: m's layers,
 * unsplit); bn: the data-parallel group's ranks that batch norm sums over
 * under --sync-bn (1: none). */
typedef struct tensor_desc tensor_desc_t;
int tensor_desc_new(const train_config_t *cfg, const model_t *m, int T, int bn, tensor_desc_t **out);
/* The model tp rank t builds (t < T). */
model_t *tensor_desc_model(const tensor_desc_t *d, int t);
/* on: the models' sums and halo exchanges do nothing, so that a layer can
 * be timed on its block alone (a pipeline's --partition balanced); off:
 * refused again, as a description runs none. */
void tensor_desc_time_alone(tensor_desc_t *d, int on);
void tensor_desc_free(tensor_desc_t *d);

/* The one weird trick (one_weird_trick.c, Krizhevsky 2014): the layers
 * before the first dense pair data-parallel over all workers, the dense
 * layers split over all of them, the batch exchanged between. */
int strategy_one_weird_trick(worker_t *w);
#endif
