/* strategy: one description per strategy, and the table of them.
 *
 * Each family registers, in its own folder, one strategy_t per strategy
 * (next to the code that runs it), and registry.c lists them: that list is
 * the only place above the families that names them. Everything that
 * must know which strategy a configuration is, or what it costs, asks the
 * descriptors: selection (matches), the rank count (ranks), the family's
 * refusals (check), the message when nothing matches (refuse, axes),
 * where compression applies (compress), running a rank (run, run_rank),
 * and the step as data for byte tests and the performance model
 * (describe_step).
 *
 * Adding a strategy: write its file in the family's folder with its
 * strategy_t, and add one line to registry.c. */
#ifndef DTRAIN_STRATEGY_STRATEGY_H
#define DTRAIN_STRATEGY_STRATEGY_H

#include "strategy/step.h"
#include "strategy/worker.h"

/* A worker rank's epochs of one strategy. */
typedef int (*strategy_fn)(worker_t *w);

/* What --compress sends under a strategy. */
typedef enum {
  COMPRESS_NOT_BUILT = 0,  /* not (yet) for this strategy */
  COMPRESS_GRADIENTS,      /* the summed gradients (synchronous allreduce, a pipeline's replicas) */
  COMPRESS_PUSHES,         /* parameter-server pushes (and, with --compress-pulls, pulls) */
  COMPRESS_AVERAGES,       /* model averaging's averages */
  COMPRESS_MIRRORS,        /* models along links, each the change since the other end last
                            * heard: fixed-size codecs only */
  COMPRESS_REFUSED,        /* never: check says why */
} strategy_compress_t;

typedef struct strategy {
  const char *name;        /* "data-parallel allreduce" */
  const char *paper;       /* the method it follows */
  const char *axes;        /* the options that select it, for the message when none matches */
  const char *short_name;  /* in messages about it ("EASGD"); NULL: name */
  optimization_t optimization;   /* for the message listing what exists */
  strategy_compress_t compress;
  const char *no_compress; /* COMPRESS_REFUSED: why, after "option --compress CODEC: " */
  /* The one place that decides whether this strategy runs cfg. The
   * descriptors' matches are exclusive: at most one accepts a config. */
  int (*matches)(const train_config_t *cfg);
  /* Ranks it needs in all (workers, servers, a master); NULL: the workers. */
  int (*ranks)(const train_config_t *cfg);
  /* When no strategy matches: a descriptor whose axes cfg nearly names
   * says why not (one line, error set, -1); 0: not about me. May be NULL. */
  int (*refuse)(const train_config_t *cfg);
  /* A worker rank's epochs (run_rank NULL: train.c makes the worker). */
  strategy_fn run;
  /* The whole rank, servers included, when it is not one worker. */
  int (*run_rank)(comm_t *world, const train_config_t *cfg, const dataset_t *train,
                  const dataset_t *test);
  /* One step as data: per rank its compute and communication tasks, the
   * bytes each sends and receives (what the transport counts). NULL: not
   * described yet (strategy_describe says so). */
  int (*describe_step)(const train_config_t *cfg, const model_t *m, step_desc_t *out);
} strategy_t;

/* The strategy the configuration selects; NULL with the error set (one
 * line: why not, and what exists). */
const strategy_t *strategy_select(const train_config_t *cfg);
/* The same without an error: NULL when none matches. */
const strategy_t *strategy_match(const train_config_t *cfg);
int strategy_total_ranks(const train_config_t *cfg);
/* The step as data (describe_step), or an error naming the strategy. */
int strategy_describe(const train_config_t *cfg, const model_t *m, step_desc_t *out);
/* The families' own checks of their options, in registry order; and of
 * the values that depend on the number of workers (under mpi known only
 * once the world is). */
int strategy_check_families(const train_config_t *cfg);
int strategy_check_world(const train_config_t *cfg);
/* The families' hooks around the checks (registry.c): options a model
 * file sets, before train_config_check; and, before any rank starts, the
 * model's spec and the model built for one sample checked against the
 * options (model_check.c). */
int strategy_prepare(train_config_t *cfg);
int strategy_check_spec(const train_config_t *cfg, model_spec_t *spec);
/* The layers a worker's model splits over its tensor-parallel group of tp
 * ranks (0: none; a model file's split= keys are still checked). */
int strategy_plan_model(const train_config_t *cfg, model_spec_t *spec, int tp);
int strategy_check_model(const train_config_t *cfg, const model_t *m);
/* The registry (registry.c). */
extern const strategy_t *const STRATEGIES[];
extern const int NSTRATEGIES;
typedef int (*family_check_fn)(const train_config_t *cfg);
extern const family_check_fn FAMILY_CHECKS[], FAMILY_WORLD_CHECKS[];
extern const int NFAMILY_CHECKS, NFAMILY_WORLD_CHECKS;
#endif
