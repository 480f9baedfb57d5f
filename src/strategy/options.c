/* The options of `dtrain train` into a train_config_t. A preset's options
 * are applied first, then the user's, so explicit options override it;
 * then the values and the axes are checked (train_config_check), and last
 * every option the user gave must be one that the configuration uses: an
 * option that would be silently ignored is refused with the axis values
 * that would use it. Pure: no files are read or written (the fuzz target
 * fuzz/fuzz_options.c runs this on arbitrary argv). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/train.h"
#include "strategy/pipe/pipe.h"

/* ---- which options the configuration uses --------------------------------- */

static int is_decentral(const train_config_t *c) { return c->optimization == OPTIMIZATION_DECENTRAL; }
static int uses_tau(const train_config_t *c) {
  return is_decentral(c) && (c->exchange == EXCHANGE_ALLREDUCE || c->exchange == EXCHANGE_MASTER);
}
static int uses_elastic(const train_config_t *c) {
  return is_decentral(c) && (c->exchange == EXCHANGE_MASTER || c->exchange == EXCHANGE_TREE);
}
static int is_mpca(const train_config_t *c) {
  return is_decentral(c) && c->exchange == EXCHANGE_MASTER && c->schedule == SCHEDULE_SOFT;
}
static int is_easgd(const train_config_t *c) { /* a master rank of its own: decentral.h */
  return is_decentral(c) && c->exchange == EXCHANGE_MASTER && !is_mpca(c) &&
         (c->schedule == SCHEDULE_ASYNC || c->alpha > 0 || c->beta > 0 || c->rho > 0);
}
static int uses_alpha(const train_config_t *c) { return uses_elastic(c) && !is_mpca(c); }
static int uses_tree(const train_config_t *c) { return is_decentral(c) && c->exchange == EXCHANGE_TREE; }
static int uses_neighbors(const train_config_t *c) {
  return is_decentral(c) && c->exchange == EXCHANGE_NEIGHBORS;
}
static int is_dpsgd(const train_config_t *c) {
  return uses_neighbors(c) && c->schedule == SCHEDULE_SYNC;
}
static int uses_choco(const train_config_t *c) {
  return is_dpsgd(c) && c->compress.kind != CODEC_NONE;
}
static int is_ps(const train_config_t *c) { return c->exchange == EXCHANGE_PS; }
static int is_downpour(const train_config_t *c) {
  return is_ps(c) && (c->schedule == SCHEDULE_ASYNC ||
                      (c->schedule == SCHEDULE_SSP && isinf(c->schedule_param)));
}
static int is_async_ps(const train_config_t *c) {
  return is_downpour(c) || (is_ps(c) && c->schedule == SCHEDULE_VALUE);
}
static int is_value_ps(const train_config_t *c) { return is_ps(c) && c->schedule == SCHEDULE_VALUE; }
static int is_ssp_ps(const train_config_t *c) {
  return is_ps(c) && c->schedule == SCHEDULE_SSP && !isinf(c->schedule_param);
}
static int is_pipeline(const train_config_t *c) { return train_pipelined(c); }
static int is_pipedream(const train_config_t *c) {
  return is_pipeline(c) && c->pipe_schedule == PIPE_PIPEDREAM;
}
static int is_data_parallel(const train_config_t *c) {
  return !is_decentral(c) && c->exchange == EXCHANGE_ALLREDUCE && !is_pipeline(c);
}
static int is_sync_dp(const train_config_t *c) {
  return is_data_parallel(c) && c->schedule == SCHEDULE_SYNC;
}
static int takes_comm_order(const train_config_t *c) { return is_sync_dp(c) || is_ps(c); }
static int is_ps_priority(const train_config_t *c) { return is_ps(c) && c->comm_order != COLL_ORDER_FIFO; }
static int is_priority(const train_config_t *c) {
  return (is_sync_dp(c) || is_ps(c)) && c->comm_order != COLL_ORDER_FIFO;
}
static int is_balanceable(const train_config_t *c) {
  return !is_decentral(c) && c->schedule == SCHEDULE_SYNC &&
         (c->exchange == EXCHANGE_ALLREDUCE || c->exchange == EXCHANGE_SHARED);
}
static int compresses(const train_config_t *c) { return c->compress.kind != CODEC_NONE; }
static int compresses_ps(const train_config_t *c) {
  return compresses(c) && c->exchange == EXCHANGE_PS;
}
/* Whether gradients or models go on a wire (not one shared arena). */
static int on_a_wire(const train_config_t *c) { return c->exchange != EXCHANGE_SHARED; }
static int is_local(const train_config_t *c) { return c->comm == COMM_LOCAL; }
static int uses_momentum(const train_config_t *c) { return c->optim.kind != OPTIM_ADAM; }
static int is_adam(const train_config_t *c) { return c->optim.kind == OPTIM_ADAM; }
static int uses_eps(const train_config_t *c) {
  return c->optim.kind == OPTIM_ADAM || c->optim.kind == OPTIM_RMSPROP;
}
static int is_sgd(const train_config_t *c) { return c->optim.kind == OPTIM_SGD; }
static int is_async_ps_sgd(const train_config_t *c) { return is_async_ps(c) && is_sgd(c); }
static int is_step_schedule(const train_config_t *c) { return c->lr_schedule == LR_STEP; }
static int is_traced(const train_config_t *c) { return c->trace[0] != 0; }
/* Every rank evaluates in one collective (worker_epoch_figures), which
 * carries the decision to stop at --time-budget to all at once. */
static int stops_together(const train_config_t *c) {
  if (is_pipeline(c)) return 0;
  return is_decentral(c) || c->exchange == EXCHANGE_ALLREDUCE ||
         (c->exchange == EXCHANGE_SHARED && c->schedule == SCHEDULE_SYNC);
}

/* The setting that decides whether an option is used, named in the error. */
typedef enum { AX_STRATEGY = 0, AX_OPTIMIZER, AX_LR_SCHEDULE, AX_COMM, AX_COMM_ORDER } axis_t;

typedef struct {
  const char *name;
  int flag;                               /* takes no value */
  int (*applies)(const train_config_t *); /* NULL: every configuration uses it */
  const char *where;                      /* the settings that use it */
  axis_t axis;
} option_t;

static const option_t OPTIONS[] = {
    {"model", 0, NULL, NULL, AX_STRATEGY},
    {"data", 0, NULL, NULL, AX_STRATEGY},
    {"epochs", 0, NULL, NULL, AX_STRATEGY},
    {"batch", 0, NULL, NULL, AX_STRATEGY},
    {"seed", 0, NULL, NULL, AX_STRATEGY},
    {"threads", 0, NULL, NULL, AX_STRATEGY},
    {"precision", 0, NULL, NULL, AX_STRATEGY},
    {"max-steps", 0, NULL, NULL, AX_STRATEGY},
    {"time-budget", 0, stops_together,
     "--exchange allreduce:ALGO, --exchange shared --schedule sync, or --optimization decentral",
     AX_STRATEGY},
    {"max-loss", 0, NULL, NULL, AX_STRATEGY},
    {"optimizer", 0, NULL, NULL, AX_STRATEGY},
    {"lr", 0, NULL, NULL, AX_STRATEGY},
    {"momentum", 0, uses_momentum, "--optimizer sgd, rmsprop or lars", AX_OPTIMIZER},
    {"nesterov", 1, is_sgd, "--optimizer sgd", AX_OPTIMIZER},
    {"weight-decay", 0, NULL, NULL, AX_STRATEGY},
    {"beta1", 0, is_adam, "--optimizer adam", AX_OPTIMIZER},
    {"beta2", 0, is_adam, "--optimizer adam", AX_OPTIMIZER},
    {"eps", 0, uses_eps, "--optimizer adam or rmsprop", AX_OPTIMIZER},
    {"lr-schedule", 0, NULL, NULL, AX_STRATEGY},
    {"warmup-epochs", 0, NULL, NULL, AX_STRATEGY},
    {"lr-step-epochs", 0, is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE},
    {"lr-gamma", 0, is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE},
    {"preset", 0, NULL, NULL, AX_STRATEGY},
    {"workers", 0, NULL, NULL, AX_STRATEGY},
    {"comm", 0, NULL, NULL, AX_STRATEGY},
    {"optimization", 0, NULL, NULL, AX_STRATEGY},
    {"schedule", 0, NULL, NULL, AX_STRATEGY},
    {"exchange", 0, NULL, NULL, AX_STRATEGY},
    {"bucket-mb", 0, is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY},
    {"overlap", 0, is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY},
    {"comm-order", 0, takes_comm_order, "--optimization central --schedule sync --exchange allreduce:ALGO, or --exchange ps:K", AX_STRATEGY},
    {"partition-kb", 0, is_priority, "--comm-order priority or tictac", AX_COMM_ORDER},
    {"credit-kb", 0, is_ps_priority, "--exchange ps:K --comm-order priority or tictac", AX_COMM_ORDER},
    {"shard-optimizer", 0, is_data_parallel, "--optimization central --exchange allreduce:ring", AX_STRATEGY},
    {"balance", 0, is_balanceable,
     "--optimization central --schedule sync --exchange allreduce:ALGO or shared", AX_STRATEGY},
    {"compress", 0, on_a_wire, "--exchange allreduce:ALGO, ps:K, master or neighbors", AX_STRATEGY},
    {"error-feedback", 0, compresses, "--compress CODEC", AX_STRATEGY},
    {"momentum-correction", 0, compresses, "--compress CODEC", AX_STRATEGY},
    {"compress-pulls", 0, compresses_ps, "--exchange ps:K --compress CODEC", AX_STRATEGY},
    {"compress-warmup-steps", 0, compresses, "--compress CODEC", AX_STRATEGY},
    {"dgc-clip", 0, compresses, "--compress dgc:R", AX_STRATEGY},
    {"sufficient-factors", 0, is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO", AX_STRATEGY},
    {"pp", 0, NULL, NULL, AX_STRATEGY},
    {"micro-batches", 0, NULL, NULL, AX_STRATEGY},
    {"tp", 0, NULL, NULL, AX_STRATEGY},
    {"tp-conv", 0, is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY},
    {"sync-bn", 0, is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY},
    {"pipe-schedule", 0, is_pipeline, "--pp P > 1 or --micro-batches M > 1", AX_STRATEGY},
    {"partition", 0, is_pipeline, "--pp P > 1 or --micro-batches M > 1", AX_STRATEGY},
    {"vertical-sync", 0, is_pipedream, "--pipe-schedule pipedream", AX_STRATEGY},
    {"net", 0, is_local, "--comm local", AX_COMM},
    {"straggler", 0, NULL, NULL, AX_STRATEGY},
    {"comm-timeout", 0, NULL, NULL, AX_STRATEGY},
    {"stall-warning", 0, NULL, NULL, AX_STRATEGY},
    {"fetch-every", 0, is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    {"push-every", 0, is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    {"drop-stale", 0, is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    /* not backup:B: a pull there waits for the next step, which a cut epoch may never take */
    {"epoch-fraction", 0, is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {"ps-queue", 0, is_value_ps, "--exchange ps:K --schedule value:V (the queue of held pushes)",
     AX_STRATEGY},
    {"ps-refresh", 0, is_ssp_ps, "--exchange ps:K --schedule ssp:S (S finite)", AX_STRATEGY},
    {"staleness-lr", 1, is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {"dc-asgd", 0, is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {"implicit-momentum", 0, is_async_ps_sgd,
     "--exchange ps:K --schedule async or value:V with --optimizer sgd", AX_STRATEGY},
    {"kill", 0, is_ps, "--exchange ps:K", AX_STRATEGY},
    {"checkpoint-dir", 0, is_ps, "--exchange ps:K", AX_STRATEGY},
    {"tau", 0, uses_tau, "--optimization decentral with --exchange allreduce:ALGO or master", AX_STRATEGY},
    {"alpha", 0, uses_alpha, "--optimization decentral with --exchange master or tree:F (not --schedule soft: MPCA-SGD's pull is --rho)", AX_STRATEGY},
    {"beta", 0, uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY},
    {"rho", 0, uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY},
    {"extrapolation", 0, is_mpca, "MPCA-SGD: --optimization decentral --schedule soft --exchange master", AX_STRATEGY},
    {"alpha-decay", 0, is_easgd, "EASGD: --optimization decentral --exchange master with --schedule async or --alpha/--beta/--rho", AX_STRATEGY},
    {"tau-up", 0, uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY},
    {"tau-down", 0, uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY},
    {"neighbor-weight", 0, is_dpsgd, "--optimization decentral --schedule sync --exchange neighbors", AX_STRATEGY},
    {"consensus-step", 0, uses_choco, "--optimization decentral --exchange neighbors --compress CODEC", AX_STRATEGY},
    {"metrics", 0, NULL, NULL, AX_STRATEGY},
    {"checkpoint", 0, NULL, NULL, AX_STRATEGY},
    {"resume", 0, NULL, NULL, AX_STRATEGY},
    {"quiet", 1, NULL, NULL, AX_STRATEGY},
    {"trace", 0, NULL, NULL, AX_STRATEGY},
    {"trace-steps", 0, is_traced, "--trace FILE.json", AX_STRATEGY},
};
#define NOPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static int find_option(const char *name, size_t n) {
  for (int i = 0; i < NOPTIONS; i++)
    if (strlen(OPTIONS[i].name) == n && !strncmp(OPTIONS[i].name, name, n)) return i;
  return -1;
}

/* Edit distance of a[0..n) and b, capped: enough to suggest a near name. */
static int distance(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n > 64 || m > 64) return 99;
  int row[65];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[m];
}

/* The known option nearest to name[0..n), or NULL when none is near. */
static const char *nearest_option(const char *name, size_t n) {
  const char *best = NULL;
  int best_d = 99;
  for (int i = 0; i < NOPTIONS; i++) {
    int d = distance(name, n, OPTIONS[i].name);
    size_t len = strlen(OPTIONS[i].name);
    if (n >= 3 && n < len && !strncmp(OPTIONS[i].name, name, n)) d = 1; /* a prefix */
    if (d < best_d) best_d = d, best = OPTIONS[i].name;
  }
  int near = n <= 4 ? 1 : 2;
  return best_d <= near ? best : NULL;
}

static int unknown_option(const char *name, size_t n) {
  const char *near = nearest_option(name, n);
  int shown = n > 64 ? 64 : (int)n;
  if (near)
    return dt_error("unknown option --%.*s%s (did you mean --%s? see dtrain train --help)", shown,
                    name, shown < (int)n ? "..." : "", near);
  return dt_error("unknown option --%.*s%s (see dtrain train --help)", shown, name,
                  shown < (int)n ? "..." : "");
}

/* ---- values ------------------------------------------------------------------ */

static int copy_path(const char *opt, const char *val, char *dst, size_t cap) {
  if (strlen(val) >= cap) return dt_error("option --%s: path too long (max %zu)", opt, cap - 1);
  strcpy(dst, val);
  return 0;
}

static int parse_onoff(const char *opt, const char *val, int *out) {
  if (!strcmp(val, "on")) *out = 1; /* the words the help gives, no others */
  else if (!strcmp(val, "off")) *out = 0;
  else return dt_error("option --%s: '%s' (expected on or off)", opt, val);
  return 0;
}

/* "latency=50us,bandwidth=1Gbit", "hosts=2,intra-bandwidth=10Gbit,..." */
static int parse_net(const char *val, train_config_t *c) {
  DT_TRY(comm_net_parse(val, &c->net));
  c->net_latency = c->net.latency;
  c->net_bandwidth = c->net.bandwidth;
  return 0;
}

#define MAX_WORKERS 4096

/* "rank=2,slowdown=3" */
static int parse_straggler(const char *val, train_config_t *c) {
  static const char *const keys[] = {"rank", "slowdown"};
  const char *v[2];
  char buf[128];
  long r;
  double f;
  DT_TRY(parse_items("straggler", val, "rank=2,slowdown=3", buf, sizeof buf, keys, 2, v));
  if (!v[0] || !v[1]) return dt_error("option --straggler: needs rank=R,slowdown=F (both)");
  DT_TRY(parse_int("straggler rank", v[0], 0, MAX_WORKERS - 1, &r));
  DT_TRY(parse_float("straggler slowdown", v[1], 1, 1000, &f));
  c->straggler_rank = (int)r;
  c->straggler_slowdown = f;
  return 0;
}

/* "rank=3,at-step=200" */
static int parse_kill(const char *val, train_config_t *c) {
  static const char *const keys[] = {"rank", "at-step"};
  const char *v[2];
  char buf[128];
  long r, s;
  DT_TRY(parse_items("kill", val, "rank=3,at-step=200", buf, sizeof buf, keys, 2, v));
  if (!v[0] || !v[1]) return dt_error("option --kill: needs rank=R,at-step=S (both)");
  DT_TRY(parse_int("kill rank", v[0], 0, MAX_WORKERS - 1, &r));
  DT_TRY(parse_int("kill at-step", v[1], 0, 1L << 50, &s));
  c->kill_rank = (int)r;
  c->kill_step = s;
  return 0;
}

/* "2" or "2,4,8": TreeEASGD's period of each level of the tree, from the
 * root (--tau-up, --tau-down); the last value holds for deeper levels. */
static int parse_periods(const char *name, const char *val, int *out, int *n) {
  int got[TREE_LEVELS_MAX], k = 0;
  const char *p = val;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (k == TREE_LEVELS_MAX)
      return dt_error("option --%s: '%s' gives more than %d periods (one a level of the tree, "
                      "from the root)", name, val, TREE_LEVELS_MAX);
    if (len == 0 || len > 31)
      return dt_error("option --%s: '%s' is not a list of periods (expected T, or T1,T2,... one "
                      "a level of the tree from the root: integers >= 1)", name, val);
    char item[32];
    memcpy(item, p, len);
    item[len] = 0;
    long v;
    DT_TRY(parse_int(name, item, 1, 1000000, &v));
    got[k++] = (int)v;
    if (!comma) break;
    p = comma + 1;
  }
  memcpy(out, got, (size_t)k * sizeof *got);
  *n = k;
  return 0;
}

/* "LAMBDA" (DC-ASGD-c, 0 = off) or "a:LAMBDA0" (DC-ASGD-a) */
static int parse_dc_asgd(const char *val, train_config_t *c) {
  int adaptive = !strncmp(val, "a:", 2);
  double v;
  if (!adaptive && strchr(val, ':'))
    return dt_error("option --dc-asgd: '%s' (expected LAMBDA, or a:LAMBDA0 for DC-ASGD-a)", val);
  if (adaptive && !val[2])
    return dt_error("option --dc-asgd: 'a:' needs a value (example: a:2 for DC-ASGD-a with "
                    "lambda0 = 2)");
  if (parse_float("dc-asgd", adaptive ? val + 2 : val, 0, 1e3, &v) != 0) return -1;
  if (adaptive && !(v > 0))
    return dt_error("option --dc-asgd: a:%g: the adaptive lambda0 must be > 0 (--dc-asgd 0 "
                    "turns delay compensation off)", v);
  c->dc_asgd = v;
  c->dc_asgd_adaptive = adaptive;
  return 0;
}

/* "G,S" or "G,S,L": DeepSpark's moving-rate decay (train.h) */
static int parse_alpha_decay(const char *val, train_config_t *c) {
  char g[32];
  const char *comma = strchr(val, ',');
  if (!comma || (size_t)(comma - val) >= sizeof g)
    return dt_error("option --alpha-decay: '%s' (expected G,S or G,S,L: alpha times G every S "
                    "exchanges of a worker, at most L times; example 0.5,50,2)", val);
  memcpy(g, val, (size_t)(comma - val));
  g[comma - val] = 0;
  char s[32];
  const char *second = strchr(comma + 1, ',');
  size_t slen = second ? (size_t)(second - comma - 1) : strlen(comma + 1);
  if (slen >= sizeof s)
    return dt_error("option --alpha-decay: '%s' (expected G,S or G,S,L)", val);
  memcpy(s, comma + 1, slen);
  s[slen] = 0;
  double gamma;
  long every, limit = 0;
  if (parse_float("alpha-decay", g, 0, 1, &gamma) != 0 ||
      parse_int("alpha-decay", s, 1, 1L << 30, &every) != 0 ||
      (second && parse_int("alpha-decay", second + 1, 1, 1L << 30, &limit) != 0))
    return -1;
  if (!(gamma > 0))
    return dt_error("option --alpha-decay: factor %g (expected 0 < G <= 1: alpha only "
                    "decreases, so it stays in the stable range it starts in)", gamma);
  c->alpha_decay = gamma;
  c->alpha_decay_every = (int)every;
  c->alpha_decay_limit = (int)limit;
  return 0;
}

/* "A:B": global steps A to B-1 are traced */
static int parse_trace_steps(const char *val, train_config_t *c) {
  const char *colon = strchr(val, ':');
  char a[32];
  long from, to;
  if (!colon || (size_t)(colon - val) >= sizeof a)
    return dt_error("option --trace-steps: '%s' (expected A:B, the steps A to B-1)", val);
  snprintf(a, sizeof a, "%.*s", (int)(colon - val), val);
  DT_TRY(parse_int("trace-steps", a, 0, 1L << 50, &from));
  DT_TRY(parse_int("trace-steps", colon + 1, 1, 1L << 50, &to));
  if (to <= from) return dt_error("option --trace-steps: %s: B must be above A", val);
  c->trace_from = from;
  c->trace_to = to;
  return 0;
}

typedef struct {
  train_config_t *cfg;
  int saw_optimizer_constants;
  int given[NOPTIONS];        /* the user's options (a preset's do not count) */
  int exchange_set;           /* --exchange given by the user or the preset */
  const char *preset;
} parse_state_t;

/* Applies option OPTIONS[id] with value val (NULL for a flag). */
static int apply_option(parse_state_t *st, int id, const char *val) {
  train_config_t *c = st->cfg;
  const char *name = OPTIONS[id].name;
  long iv;
  double fv;
  if (!strcmp(name, "nesterov")) return c->optim.nesterov = 1, 0;
  if (!strcmp(name, "quiet")) return c->progress = 0, 0;
  if (!strcmp(name, "staleness-lr")) return c->staleness_lr = 1, 0;
  if (!strcmp(name, "model")) return copy_path(name, val, c->model, sizeof c->model);
  if (!strcmp(name, "data")) return copy_path(name, val, c->data, sizeof c->data);
  if (!strcmp(name, "metrics")) return copy_path(name, val, c->metrics, sizeof c->metrics);
  if (!strcmp(name, "checkpoint")) return copy_path(name, val, c->checkpoint, sizeof c->checkpoint);
  if (!strcmp(name, "resume")) return copy_path(name, val, c->resume, sizeof c->resume);
  if (!strcmp(name, "epochs")) return parse_int(name, val, 1, 1000000, &iv) ? -1 : (c->epochs = (int)iv, 0);
  if (!strcmp(name, "batch")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->batch = (int)iv, 0);
  if (!strcmp(name, "workers")) return parse_int(name, val, 1, MAX_WORKERS, &iv) ? -1 : (c->workers = (int)iv, 0);
  if (!strcmp(name, "threads")) return parse_int(name, val, 1, 256, &iv) ? -1 : (c->threads = (int)iv, 0);
  if (!strcmp(name, "seed")) return parse_int(name, val, 0, 1L << 62, &iv) ? -1 : (c->seed = (uint64_t)iv, 0);
  if (!strcmp(name, "time-budget")) return parse_float(name, val, 0.001, 1e9, &c->time_budget);
  if (!strcmp(name, "max-loss")) return parse_float(name, val, 1e-3, 1e30, &c->max_loss);
  if (!strcmp(name, "max-steps")) return parse_int(name, val, 1, 1L << 50, &iv) ? -1 : (c->max_steps = iv, 0);
  if (!strcmp(name, "lr")) {
    if (parse_float(name, val, -1e9, 1e9, &fv) != 0) return -1;
    if (fv < 0) return dt_error("option --lr: %g is negative (expected a learning rate >= 0)", fv);
    c->lr = fv;
    return 0;
  }
  if (!strcmp(name, "momentum")) return parse_float(name, val, 0, 0.9999, &fv) ? -1 : (c->optim.momentum = (float)fv, 0);
  if (!strcmp(name, "weight-decay")) return parse_float(name, val, 0, 10, &fv) ? -1 : (c->optim.weight_decay = (float)fv, 0);
  if (!strcmp(name, "beta1")) return parse_float(name, val, 0, 0.99999, &fv) ? -1 : (c->optim.beta1 = (float)fv, 0);
  if (!strcmp(name, "beta2")) return parse_float(name, val, 0, 0.99999999, &fv) ? -1 : (c->optim.beta2 = (float)fv, 0);
  if (!strcmp(name, "eps")) return parse_float(name, val, 1e-20, 1, &fv) ? -1 : (c->optim.eps = (float)fv, 0);
  if (!strcmp(name, "warmup-epochs")) return parse_float(name, val, 0, 1e6, &c->warmup_epochs);
  if (!strcmp(name, "lr-step-epochs")) return parse_float(name, val, 1e-6, 1e6, &c->lr_step_epochs);
  if (!strcmp(name, "lr-gamma")) return parse_float(name, val, 0, 1, &c->lr_gamma);
  if (!strcmp(name, "lr-schedule")) return lr_kind_parse(val, &c->lr_schedule) ? dt_error_prefix("option --lr-schedule: ") : 0;
  if (!strcmp(name, "optimizer")) {
    optim_kind_t k;
    if (optim_kind_parse(val, &k) != 0) return dt_error_prefix("option --optimizer: ");
    optim_config_t keep = c->optim; /* momentum etc. given before --optimizer survive */
    optim_config_default(k, &c->optim);
    if (st->saw_optimizer_constants) {
      c->optim.momentum = keep.momentum;
      c->optim.weight_decay = keep.weight_decay;
      c->optim.nesterov = keep.nesterov;
    }
    return 0;
  }
  if (!strcmp(name, "precision")) {
    if (!strcmp(val, "fp32")) c->bf16 = 0;
    else if (!strcmp(val, "bf16")) c->bf16 = 1;
    else return dt_error("option --precision: '%s' (expected fp32 or bf16)", val);
    return 0;
  }
  if (!strcmp(name, "comm")) {
    if (!strcmp(val, "local")) c->comm = COMM_LOCAL;
    else if (!strcmp(val, "mpi")) c->comm = COMM_MPI;
    else return dt_error("option --comm: '%s' (expected local or mpi)", val);
    return 0;
  }
  if (!strcmp(name, "optimization")) {
    if (!strcmp(val, "central")) c->optimization = OPTIMIZATION_CENTRAL;
    else if (!strcmp(val, "decentral")) c->optimization = OPTIMIZATION_DECENTRAL;
    else return dt_error("option --optimization: '%s' (expected central or decentral)", val);
    return 0;
  }
  if (!strcmp(name, "schedule")) return schedule_parse(val, &c->schedule, &c->schedule_param);
  if (!strcmp(name, "exchange")) return st->exchange_set = 1, exchange_parse(val, c);
  if (!strcmp(name, "bucket-mb")) return parse_megabytes(name, val, &c->bucket_bytes);
  if (!strcmp(name, "overlap")) return parse_onoff(name, val, &c->overlap);
  if (!strcmp(name, "comm-order")) {
    if (!strcmp(val, "fifo")) c->comm_order = COLL_ORDER_FIFO;
    else if (!strcmp(val, "priority")) c->comm_order = COLL_ORDER_PRIORITY;
    else if (!strcmp(val, "tictac")) c->comm_order = COLL_ORDER_TICTAC;
    else return dt_error("option --comm-order: '%s' (expected fifo, priority or tictac)", val);
    return 0;
  }
  if (!strcmp(name, "credit-kb"))
    return parse_int(name, val, 1, 1 << 22, &iv) ? -1 : (c->credit_bytes = (size_t)iv << 10, 0);
  if (!strcmp(name, "partition-kb"))
    return parse_int(name, val, 1, 1 << 22, &iv) ? -1 : (c->partition_bytes = (size_t)iv << 10, 0);
  if (!strcmp(name, "shard-optimizer")) return parse_onoff(name, val, &c->shard_optimizer);
  if (!strcmp(name, "balance")) return parse_onoff(name, val, &c->balance);
  if (!strcmp(name, "compress")) return codec_parse(val, &c->compress);
  if (!strcmp(name, "error-feedback")) return parse_onoff(name, val, &c->error_feedback);
  if (!strcmp(name, "momentum-correction")) {
    if (!strcmp(val, "off")) return c->momentum_correction = MC_OFF, 0;
    if (!strcmp(val, "velocity")) return c->momentum_correction = MC_VELOCITY, 0;
    if (!strcmp(val, "shared")) return c->momentum_correction = MC_SHARED, 0;
    return dt_error("option --momentum-correction: '%s' (expected off, velocity or shared)", val);
  }
  if (!strcmp(name, "compress-pulls")) return parse_onoff(name, val, &c->compress_pulls);
  if (!strcmp(name, "compress-warmup-steps"))
    return parse_int(name, val, 0, 1L << 40, &iv) ? -1 : (c->compress_warmup_steps = iv, 0);
  if (!strcmp(name, "sufficient-factors")) return parse_onoff(name, val, &c->sufficient_factors);
  if (!strcmp(name, "dgc-clip")) return parse_float(name, val, 1e-9, 1e9, &c->dgc_clip);
  if (!strcmp(name, "pp")) return parse_int(name, val, 1, 1024, &iv) ? -1 : (c->pp = (int)iv, 0);
  if (!strcmp(name, "tp-conv")) {
    if (strcmp(val, "split") && strcmp(val, "data"))
      return dt_error("option --tp-conv: '%s' (expected split or data)", val);
    c->tp_conv_data = !strcmp(val, "data");
    return 0;
  }
  if (!strcmp(name, "sync-bn")) return parse_onoff(name, val, &c->sync_bn);
  if (!strcmp(name, "tp")) return parse_int(name, val, 1, 1024, &iv) ? -1 : (c->tp = (int)iv, 0);
  if (!strcmp(name, "micro-batches"))
    return parse_int(name, val, 1, 1 << 16, &iv) ? -1 : (c->micro_batches = (int)iv, 0);
  if (!strcmp(name, "pipe-schedule")) {
    pipe_kind_t k;
    return pipe_kind_parse(val, &k, &c->pipe_chunks) ? -1 : (c->pipe_schedule = (int)k, 0);
  }
  if (!strcmp(name, "vertical-sync")) return parse_onoff(name, val, &c->vertical_sync);
  if (!strcmp(name, "partition")) {
    if (!strcmp(val, "balanced")) return c->partition[0] = 0, 0;
    if (!strcmp(val, "macs")) return copy_path(name, val, c->partition, sizeof c->partition);
    return pipe_partition_parse(val, NULL, 0) < 0 ? -1 : copy_path(name, val, c->partition, sizeof c->partition);
  }
  if (!strcmp(name, "net")) return parse_net(val, c);
  if (!strcmp(name, "straggler")) return parse_straggler(val, c);
  if (!strcmp(name, "comm-timeout")) return parse_float(name, val, 0.001, 1e6, &c->net.timeout);
  if (!strcmp(name, "stall-warning")) return parse_float(name, val, 0.001, 1e6, &c->net.stall_warning);
  if (!strcmp(name, "fetch-every")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->fetch_every = (int)iv, 0);
  if (!strcmp(name, "push-every")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->push_every = (int)iv, 0);
  if (!strcmp(name, "dc-asgd")) return parse_dc_asgd(val, c);
  if (!strcmp(name, "drop-stale"))
    return parse_int(name, val, 0, 1L << 40, &iv) ? -1 : (c->drop_stale = iv, 0);
  if (!strcmp(name, "epoch-fraction")) {
    if (parse_float(name, val, 0, 1, &c->epoch_fraction) != 0) return -1;
    if (c->epoch_fraction == 0)
      return dt_error("option --epoch-fraction: 0: an epoch must take some of its batches "
                      "(0 < F <= 1; Project Adam: 0.75)");
    return 0;
  }
  if (!strcmp(name, "ps-queue")) {
    if (strcmp(val, "fifo") && strcmp(val, "staleness"))
      return dt_error("option --ps-queue: '%s' (expected fifo or staleness)", val);
    c->ps_queue_staleness = !strcmp(val, "staleness");
    return 0;
  }
  if (!strcmp(name, "ps-refresh")) {
    if (strcmp(val, "lazy") && strcmp(val, "eager"))
      return dt_error("option --ps-refresh: '%s' (expected lazy or eager)", val);
    c->ps_refresh_lazy = !strcmp(val, "lazy");
    return 0;
  }
  if (!strcmp(name, "implicit-momentum")) return parse_onoff(name, val, &c->implicit_momentum);
  if (!strcmp(name, "kill")) return parse_kill(val, c);
  if (!strcmp(name, "checkpoint-dir")) return copy_path(name, val, c->checkpoint_dir, sizeof c->checkpoint_dir);
  if (!strcmp(name, "tau")) return parse_int(name, val, -1000000, 1000000, &iv) ? -1 : (c->tau = (int)iv, 0);
  if (!strcmp(name, "tau-up")) return parse_periods(name, val, c->tau_up, &c->tau_up_levels);
  if (!strcmp(name, "tau-down")) return parse_periods(name, val, c->tau_down, &c->tau_down_levels);
  if (!strcmp(name, "alpha")) return parse_float(name, val, 0, 1e3, &c->alpha);
  if (!strcmp(name, "beta")) return parse_float(name, val, 0, 1e3, &c->beta);
  if (!strcmp(name, "rho")) return parse_float(name, val, 0, 1e6, &c->rho);
  if (!strcmp(name, "alpha-decay")) return parse_alpha_decay(val, c);
  if (!strcmp(name, "extrapolation")) return parse_float(name, val, 0, 2, &c->extrapolation);
  if (!strcmp(name, "consensus-step")) return parse_float(name, val, 1e-6, 1, &c->consensus_step);
  if (!strcmp(name, "neighbor-weight")) return parse_float(name, val, 0, 0.5, &c->neighbor_weight);
  if (!strcmp(name, "trace")) return copy_path(name, val, c->trace, sizeof c->trace);
  if (!strcmp(name, "trace-steps")) return parse_trace_steps(val, c);
  if (!strcmp(name, "preset")) return 0; /* applied before the other options */
  return dt_error("option --%s: not handled (a bug)", name);
}

/* Parses argv[1..argc) (from the user when user != 0, else a preset's
 * words) and applies each option. */
static int parse_args(parse_state_t *st, int argc, char **argv, int user) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) {
      if (a[0] == '-' && a[1] && find_option(a + 1, strlen(a + 1)) >= 0)
        return dt_error("unexpected argument '%s' (did you mean -%s?)", a, a);
      return dt_error("unexpected argument '%s' (options start with --)", a);
    }
    const char *eq = strchr(a, '='), *val;
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    int id = find_option(a + 2, n);
    if (id < 0) return unknown_option(a + 2, n);
    const char *name = OPTIONS[id].name;
    if (OPTIONS[id].flag) {
      if (eq) return dt_error("option --%s takes no value (got '%s')", name, eq + 1);
      val = NULL;
    } else if (eq) {
      val = eq + 1;
    } else {
      if (i + 1 >= argc) return dt_error("option --%s: missing value", name);
      val = argv[++i];
      if (!strncmp(val, "--", 2))
        return dt_error("option --%s: missing value (found the option %s; write --%s=VALUE for "
                        "a value that starts with --)", name, val, name);
    }
    if (val && !*val) return dt_error("option --%s: empty value", name);
    if (!strcmp(name, "preset")) {
      if (!user) return dt_error("option --preset: a preset cannot name another");
      if (st->preset)
        return dt_error("option --preset: given twice ('%s', then '%s'): give one preset and "
                        "override its options", st->preset, val);
      st->preset = val;
    }
    if (user) st->given[id] = 1;
  }
  return 0;
}

/* The second pass: the same words, now applied (parse_args has checked them). */
static int apply_args(parse_state_t *st, int argc, char **argv) {
  st->saw_optimizer_constants = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    int id = find_option(a + 2, n);
    const char *val = OPTIONS[id].flag ? NULL : eq ? eq + 1 : argv[++i];
    const char *name = OPTIONS[id].name;
    if (!strcmp(name, "momentum") || !strcmp(name, "weight-decay") || !strcmp(name, "nesterov"))
      st->saw_optimizer_constants = 1;
    DT_TRY(apply_option(st, id, val));
  }
  return 0;
}

/* Splits the preset's option string into an argv and applies it. */
static int apply_preset(parse_state_t *st, const char *name) {
  const preset_t *p = preset_find(name);
  if (!p) return dt_error("option --preset: unknown preset '%s' (run 'dtrain presets' for the list)", name);
  char buf[512], *words[64];
  int n = 1;
  snprintf(buf, sizeof buf, "%s", p->options);
  words[0] = "preset";
  char *save = NULL;
  for (char *w = strtok_r(buf, " ", &save); w && n < 64; w = strtok_r(NULL, " ", &save)) words[n++] = w;
  snprintf(st->cfg->preset, sizeof st->cfg->preset, "%s", name);
  if (parse_args(st, n, words, 0) != 0 || apply_args(st, n, words) != 0)
    return dt_error_prefix("preset %s: ", name);
  return 0;
}

static const char *optimization_name(optimization_t o) {
  return o == OPTIMIZATION_DECENTRAL ? "decentral" : "central";
}

/* Whether the pipeline alone keeps option o from applying (the same axes
 * without --pp and --micro-batches would use it): then the refusal names
 * the pipeline, not axes that the option's own text names too. */
static int pipeline_excludes(const train_config_t *c, const option_t *o) {
  if (!is_pipeline(c)) return 0;
  train_config_t flat = *c;
  flat.pp = flat.micro_batches = 1;
  return o->applies(&flat);
}

/* Every option the user gave must be one that the configuration uses. */
static int check_used(const parse_state_t *st) {
  const train_config_t *c = st->cfg;
  for (int i = 0; i < NOPTIONS; i++) {
    const option_t *o = &OPTIONS[i];
    if (!st->given[i] || !o->applies || o->applies(c)) continue;
    char now[160];
    switch (o->axis) {
    case AX_OPTIMIZER: snprintf(now, sizeof now, "--optimizer %s", optim_kind_name(c->optim.kind)); break;
    case AX_LR_SCHEDULE: snprintf(now, sizeof now, "--lr-schedule %s", lr_kind_name(c->lr_schedule)); break;
    case AX_COMM: snprintf(now, sizeof now, "--comm %s", c->comm == COMM_MPI ? "mpi" : "local"); break;
    case AX_COMM_ORDER:
      snprintf(now, sizeof now, "--comm-order %s",
               c->comm_order == COLL_ORDER_PRIORITY ? "priority"
               : c->comm_order == COLL_ORDER_TICTAC ? "tictac" : "fifo");
      break;
    default:
      snprintf(now, sizeof now, "--optimization %s --schedule %s --exchange %s",
               optimization_name(c->optimization), schedule_name(c->schedule),
               exchange_name(c->exchange));
    }
    if (pipeline_excludes(c, o))
      return dt_error("option --%s: not used by a pipeline (--pp %d --micro-batches %d); "
                      "without --pp and --micro-batches it applies to %s", o->name, c->pp,
                      c->micro_batches, o->where);
    return dt_error("option --%s: not used with %s (it applies to %s)", o->name, now, o->where);
  }
  return 0;
}

/* With no --exchange (from the user or a preset), synchronous data
 * parallelism on --comm local goes through shared memory: the ranks are
 * threads of one process, and shared sync's one pass over the gradients
 * (each rank sums and steps its block, then writes it into the others'
 * parameters) made 1.9-2.0x one worker on two cores where allreduce:auto
 * made 1.7-1.9x (docs/BENCHMARKS.md). Allreduce stays where shared memory
 * does not fit the rest: mpi, one worker (nothing to exchange), a
 * pipeline, --net (shared memory sends no messages for the emulated
 * network to delay), LARS (whole tensors), tensor parallelism and sync
 * batch norm (their sums are collectives), and an option that only the
 * allreduce path uses (--bucket-mb, --overlap, --comm-order,
 * --shard-optimizer, ...). */
static void pick_default_exchange(const parse_state_t *st, train_config_t *c) {
  if (st->exchange_set || c->comm != COMM_LOCAL || c->optimization != OPTIMIZATION_CENTRAL ||
      c->schedule != SCHEDULE_SYNC || is_pipeline(c) || c->workers < 2 ||
      c->optim.kind == OPTIM_LARS || st->given[find_option("net", 3)] || c->tp > 1 ||
      c->tp_conv_data || c->sync_bn)
    return;
  train_config_t shared = *c;
  shared.exchange = EXCHANGE_SHARED;
  for (int i = 0; i < NOPTIONS; i++)
    if (st->given[i] && OPTIONS[i].applies && OPTIONS[i].applies(c) &&
        !OPTIONS[i].applies(&shared))
      return;
  c->exchange = EXCHANGE_SHARED;
}

int train_options_parse(int argc, char **argv, train_config_t *cfg) {
  train_config_default(cfg);
  parse_state_t st;
  memset(&st, 0, sizeof st);
  st.cfg = cfg;
  DT_TRY(parse_args(&st, argc, argv, 1)); /* names and values present; the preset */
  if (st.preset) DT_TRY(apply_preset(&st, st.preset));
  DT_TRY(apply_args(&st, argc, argv));
  pick_default_exchange(&st, cfg);
  DT_TRY(train_config_check(cfg));
  return check_used(&st);
}
