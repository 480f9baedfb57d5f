/* Which strategy the taxonomy axes select: the descriptor whose matches
 * accepts the configuration (registry.c lists them). When none does, a
 * descriptor that the axes nearly name says why, or the message lists
 * what exists, from the descriptors' own axes. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "strategy/strategy.h"

const strategy_t *strategy_match(const train_config_t *c) {
  for (int i = 0; i < NSTRATEGIES; i++)
    if (STRATEGIES[i]->matches(c)) return STRATEGIES[i];
  return NULL;
}

/* "AXES = NAME, ..." of the strategies of one optimization. */
static void what_exists(optimization_t o, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < NSTRATEGIES && n < cap; i++) {
    const strategy_t *s = STRATEGIES[i];
    if (s->optimization != o) continue;
    int k = snprintf(buf + n, cap - n, "%s%s = %s", n ? ", " : "", s->axes, s->name);
    if (k > 0) n += (size_t)k;
  }
}

const strategy_t *strategy_select(const train_config_t *c) {
  const strategy_t *s = strategy_match(c);
  if (s) return s;
  for (int i = 0; i < NSTRATEGIES; i++)
    if (STRATEGIES[i]->refuse && STRATEGIES[i]->refuse(c) != 0) return NULL;
  char exist[1536];
  int decentral = c->optimization == OPTIMIZATION_DECENTRAL;
  what_exists(c->optimization, exist, sizeof exist);
  dt_error("options --optimization %s --schedule %s --exchange %s do not combine (what exists "
           "with %s: %s)", decentral ? "decentral" : "central", schedule_name(c->schedule),
           exchange_name(c->exchange), decentral ? "decentral" : "central", exist);
  return NULL;
}

int strategy_total_ranks(const train_config_t *c) {
  const strategy_t *s = strategy_match(c);
  return s && s->ranks ? s->ranks(c) : c->workers;
}

int strategy_describe(const train_config_t *c, const model_t *m, step_desc_t *out) {
  const strategy_t *s = strategy_select(c);
  if (!s) return -1;
  /* Under mpi, train checks what depends on the workers once -np is known
   * (train_config_fit_world). A description takes --workers for that world,
   * so it checks here: a grid -np cannot run (--pp 2 on 3 ranks) is refused
   * as train refuses it, not described with an idle rank. */
  if (c->comm == COMM_MPI && train_config_check_ranks(c) != 0) return -1;
  if (!s->describe_step)
    return dt_error("%s: its step is not described yet (describe_step)", s->name);
  step_desc_init(out, strategy_total_ranks(c));
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (step_desc_set_topology(out, &c->net, c->comm == COMM_MPI, cores > 0 ? (int)cores : 1) == 0 &&
      s->describe_step(c, m, out) == 0)
    return 0;
  step_desc_free(out);
  return -1;
}

static int run_checks(const family_check_fn *checks, int n, const train_config_t *c) {
  for (int i = 0; i < n; i++)
    if (checks[i](c) != 0) return -1;
  return 0;
}

int strategy_check_families(const train_config_t *c) {
  return run_checks(FAMILY_CHECKS, NFAMILY_CHECKS, c);
}

int strategy_check_world(const train_config_t *c) {
  return run_checks(FAMILY_WORLD_CHECKS, NFAMILY_WORLD_CHECKS, c);
}
