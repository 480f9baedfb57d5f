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

#include "dtrain/opt.h"
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
         (c->schedule == SCHEDULE_ASYNC || c->decentral.alpha > 0 || c->decentral.beta > 0 || c->decentral.rho > 0);
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
  return is_dpsgd(c) && c->compression.codec.kind != CODEC_NONE;
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
  return is_pipeline(c) && c->pipe.schedule == PIPE_PIPEDREAM;
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
static int compresses(const train_config_t *c) { return c->compression.codec.kind != CODEC_NONE; }
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

/* A row: how the option is read and the field it sets (dtrain/opt.h),
 * then which configurations use it. */
typedef struct {
  opt_t opt;
  int (*applies)(const train_config_t *); /* NULL: every configuration uses it */
  const char *where;                      /* the settings that use it */
  axis_t axis;
} option_t;

#define T train_config_t
#define INT(n, f, lo, hi) {n, OPT_INT, OPT_FIELD(T, f), lo, hi, 0, NULL, NULL, NULL}
#define KIB(n, f) {n, OPT_INT, OPT_FIELD(T, f), 1, 1 << 22, 1024, NULL, NULL, NULL}
#define FLT(n, f, lo, hi) {n, OPT_FLOAT, OPT_FIELD(T, f), lo, hi, 0, NULL, NULL, NULL}
#define ONOFF(n, f) {n, OPT_ONOFF, OPT_FIELD(T, f), 0, 0, 0, NULL, NULL, NULL}
#define PATH(n, f) {n, OPT_PATH, OPT_FIELD(T, f), 0, 0, 0, NULL, NULL, NULL}
#define FLAG(n, f, v) {n, OPT_FLAG, OPT_FIELD(T, f), v, v, 0, NULL, NULL, NULL}
#define WORDS(n, f, w, vals) {n, OPT_WORDS, OPT_FIELD(T, f), 0, 0, 0, w, vals, NULL}
#define FUNC(n, fn) {n, OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, fn}
#define MAX_WORKERS 4096

/* The values that are more than a number, a word or a path (below). */
static int set_optimizer(void *c, const char *val, void *st);
static int set_lr(void *c, const char *val, void *st);
static int set_lr_schedule(void *c, const char *val, void *st);
static int set_preset(void *c, const char *val, void *st);
static int set_schedule(void *c, const char *val, void *st);
static int set_exchange(void *c, const char *val, void *st);
static int set_bucket_mb(void *c, const char *val, void *st);
static int set_compress(void *c, const char *val, void *st);
static int set_pipe_schedule(void *c, const char *val, void *st);
static int set_partition(void *c, const char *val, void *st);
static int set_net(void *c, const char *val, void *st);
static int set_straggler(void *c, const char *val, void *st);
static int set_epoch_fraction(void *c, const char *val, void *st);
static int set_dc_asgd(void *c, const char *val, void *st);
static int set_kill(void *c, const char *val, void *st);
static int set_alpha_decay(void *c, const char *val, void *st);
static int set_tau_up(void *c, const char *val, void *st);
static int set_tau_down(void *c, const char *val, void *st);
static int set_trace_steps(void *c, const char *val, void *st);
static const int LAZY_EAGER[] = {1, 0};

static const option_t OPTIONS[] = {
    {PATH("model", model), NULL, NULL, AX_STRATEGY},
    {PATH("data", data), NULL, NULL, AX_STRATEGY},
    {INT("epochs", epochs, 1, 1000000), NULL, NULL, AX_STRATEGY},
    {INT("batch", batch, 1, 1 << 20), NULL, NULL, AX_STRATEGY},
    {INT("seed", seed, 0, 1L << 62), NULL, NULL, AX_STRATEGY},
    {INT("threads", threads, 1, 256), NULL, NULL, AX_STRATEGY},
    {WORDS("precision", bf16, "fp32|bf16", NULL), NULL, NULL, AX_STRATEGY},
    {INT("max-steps", max_steps, 1, 1L << 50), NULL, NULL, AX_STRATEGY},
    {FLT("time-budget", time_budget, 0.001, 1e9), stops_together,
     "--exchange allreduce:ALGO, --exchange shared --schedule sync, or --optimization decentral",
     AX_STRATEGY},
    {FLT("max-loss", max_loss, 1e-3, 1e30), NULL, NULL, AX_STRATEGY},
    {FUNC("optimizer", set_optimizer), NULL, NULL, AX_STRATEGY},
    {FUNC("lr", set_lr), NULL, NULL, AX_STRATEGY},
    {FLT("momentum", optim.momentum, 0, 0.9999), uses_momentum, "--optimizer sgd, rmsprop or lars", AX_OPTIMIZER},
    {FLAG("nesterov", optim.nesterov, 1), is_sgd, "--optimizer sgd", AX_OPTIMIZER},
    {FLT("weight-decay", optim.weight_decay, 0, 10), NULL, NULL, AX_STRATEGY},
    {FLT("beta1", optim.beta1, 0, 0.99999), is_adam, "--optimizer adam", AX_OPTIMIZER},
    {FLT("beta2", optim.beta2, 0, 0.99999999), is_adam, "--optimizer adam", AX_OPTIMIZER},
    {FLT("eps", optim.eps, 1e-20, 1), uses_eps, "--optimizer adam or rmsprop", AX_OPTIMIZER},
    {FUNC("lr-schedule", set_lr_schedule), NULL, NULL, AX_STRATEGY},
    {FLT("warmup-epochs", warmup_epochs, 0, 1e6), NULL, NULL, AX_STRATEGY},
    {FLT("lr-step-epochs", lr_step_epochs, 1e-6, 1e6), is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE},
    {FLT("lr-gamma", lr_gamma, 0, 1), is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE},
    {FUNC("preset", set_preset), NULL, NULL, AX_STRATEGY},
    {INT("workers", workers, 1, MAX_WORKERS), NULL, NULL, AX_STRATEGY},
    {WORDS("comm", comm, "local|mpi", NULL), NULL, NULL, AX_STRATEGY},
    {WORDS("optimization", optimization, "central|decentral", NULL), NULL, NULL, AX_STRATEGY},
    {FUNC("schedule", set_schedule), NULL, NULL, AX_STRATEGY},
    {FUNC("exchange", set_exchange), NULL, NULL, AX_STRATEGY},
    {FUNC("bucket-mb", set_bucket_mb), is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY},
    {ONOFF("overlap", overlap), is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY},
    {WORDS("comm-order", comm_order, "fifo|priority|tictac", NULL), takes_comm_order, "--optimization central --schedule sync --exchange allreduce:ALGO, or --exchange ps:K", AX_STRATEGY},
    {KIB("partition-kb", partition_bytes), is_priority, "--comm-order priority or tictac", AX_COMM_ORDER},
    {KIB("credit-kb", ps.credit_bytes), is_ps_priority, "--exchange ps:K --comm-order priority or tictac", AX_COMM_ORDER},
    {ONOFF("shard-optimizer", shard_optimizer), is_data_parallel, "--optimization central --exchange allreduce:ring", AX_STRATEGY},
    {ONOFF("balance", balance), is_balanceable,
     "--optimization central --schedule sync --exchange allreduce:ALGO or shared", AX_STRATEGY},
    {FUNC("compress", set_compress), on_a_wire, "--exchange allreduce:ALGO, ps:K, master or neighbors", AX_STRATEGY},
    {ONOFF("error-feedback", compression.error_feedback), compresses, "--compress CODEC", AX_STRATEGY},
    {WORDS("momentum-correction", compression.momentum_correction, "off|velocity|shared", NULL), compresses, "--compress CODEC", AX_STRATEGY},
    {ONOFF("compress-pulls", compression.pulls), compresses_ps, "--exchange ps:K --compress CODEC", AX_STRATEGY},
    {INT("compress-warmup-steps", compression.warmup_steps, 0, 1L << 40), compresses, "--compress CODEC", AX_STRATEGY},
    {FLT("dgc-clip", compression.dgc_clip, 1e-9, 1e9), compresses, "--compress dgc:R", AX_STRATEGY},
    {ONOFF("sufficient-factors", compression.sufficient_factors), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO", AX_STRATEGY},
    {INT("pp", pipe.stages, 1, 1024), NULL, NULL, AX_STRATEGY},
    {INT("micro-batches", pipe.micro_batches, 1, 1 << 16), NULL, NULL, AX_STRATEGY},
    {INT("tp", tensor.ranks, 1, 1024), NULL, NULL, AX_STRATEGY},
    {WORDS("tp-conv", tensor.conv_data, "split|data", NULL), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY},
    {ONOFF("sync-bn", sync_bn), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY},
    {FUNC("pipe-schedule", set_pipe_schedule), is_pipeline, "--pp P > 1 or --micro-batches M > 1", AX_STRATEGY},
    {FUNC("partition", set_partition), is_pipeline, "--pp P > 1 or --micro-batches M > 1", AX_STRATEGY},
    {ONOFF("vertical-sync", pipe.vertical_sync), is_pipedream, "--pipe-schedule pipedream", AX_STRATEGY},
    {FUNC("net", set_net), is_local, "--comm local", AX_COMM},
    {FUNC("straggler", set_straggler), NULL, NULL, AX_STRATEGY},
    {FLT("comm-timeout", net.timeout, 0.001, 1e6), NULL, NULL, AX_STRATEGY},
    {FLT("stall-warning", net.stall_warning, 0.001, 1e6), NULL, NULL, AX_STRATEGY},
    {INT("fetch-every", ps.fetch_every, 1, 1 << 20), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    {INT("push-every", ps.push_every, 1, 1 << 20), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    {INT("drop-stale", ps.drop_stale, 0, 1L << 40), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY},
    /* not backup:B: a pull there waits for the next step, which a cut epoch may never take */
    {FUNC("epoch-fraction", set_epoch_fraction), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {WORDS("ps-queue", ps.queue_staleness, "fifo|staleness", NULL), is_value_ps, "--exchange ps:K --schedule value:V (the queue of held pushes)",
     AX_STRATEGY},
    {WORDS("ps-refresh", ps.refresh_lazy, "lazy|eager", LAZY_EAGER), is_ssp_ps, "--exchange ps:K --schedule ssp:S (S finite)", AX_STRATEGY},
    {FLAG("staleness-lr", ps.staleness_lr, 1), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {FUNC("dc-asgd", set_dc_asgd), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY},
    {ONOFF("implicit-momentum", ps.implicit_momentum), is_async_ps_sgd,
     "--exchange ps:K --schedule async or value:V with --optimizer sgd", AX_STRATEGY},
    {FUNC("kill", set_kill), is_ps, "--exchange ps:K", AX_STRATEGY},
    {PATH("checkpoint-dir", checkpoint_dir), is_ps, "--exchange ps:K", AX_STRATEGY},
    {INT("tau", decentral.tau, -1000000, 1000000), uses_tau, "--optimization decentral with --exchange allreduce:ALGO or master", AX_STRATEGY},
    {FLT("alpha", decentral.alpha, 0, 1e3), uses_alpha, "--optimization decentral with --exchange master or tree:F (not --schedule soft: MPCA-SGD's pull is --rho)", AX_STRATEGY},
    {FLT("beta", decentral.beta, 0, 1e3), uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY},
    {FLT("rho", decentral.rho, 0, 1e6), uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY},
    {FLT("extrapolation", decentral.extrapolation, 0, 2), is_mpca, "MPCA-SGD: --optimization decentral --schedule soft --exchange master", AX_STRATEGY},
    {FUNC("alpha-decay", set_alpha_decay), is_easgd, "EASGD: --optimization decentral --exchange master with --schedule async or --alpha/--beta/--rho", AX_STRATEGY},
    {FUNC("tau-up", set_tau_up), uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY},
    {FUNC("tau-down", set_tau_down), uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY},
    {FLT("neighbor-weight", decentral.neighbor_weight, 0, 0.5), is_dpsgd, "--optimization decentral --schedule sync --exchange neighbors", AX_STRATEGY},
    {FLT("consensus-step", decentral.consensus_step, 1e-6, 1), uses_choco, "--optimization decentral --exchange neighbors --compress CODEC", AX_STRATEGY},
    {PATH("metrics", metrics), NULL, NULL, AX_STRATEGY},
    {PATH("checkpoint", checkpoint), NULL, NULL, AX_STRATEGY},
    {PATH("resume", resume), NULL, NULL, AX_STRATEGY},
    {FLAG("quiet", progress, 0), NULL, NULL, AX_STRATEGY},
    {PATH("trace", trace), NULL, NULL, AX_STRATEGY},
    {FUNC("trace-steps", set_trace_steps), is_traced, "--trace FILE.json", AX_STRATEGY},
};
#define NOPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))
static const opt_table_t TABLE = {OPTIONS, NOPTIONS, sizeof OPTIONS[0], "dtrain train"};

/* ---- values ------------------------------------------------------------------ */

/* "latency=50us,bandwidth=1Gbit", "hosts=2,intra-bandwidth=10Gbit,..." */
static int set_net(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  DT_TRY(comm_net_parse(val, &c->net));
  c->net_latency = c->net.latency;
  c->net_bandwidth = c->net.bandwidth;
  return 0;
}

/* "rank=2,slowdown=3" */
static int set_straggler(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
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
static int set_kill(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
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
static int set_dc_asgd(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
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
  c->ps.dc_asgd = v;
  c->ps.dc_asgd_adaptive = adaptive;
  return 0;
}

/* "G,S" or "G,S,L": DeepSpark's moving-rate decay (train.h) */
static int set_alpha_decay(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
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
  c->decentral.alpha_decay = gamma;
  c->decentral.alpha_decay_every = (int)every;
  c->decentral.alpha_decay_limit = (int)limit;
  return 0;
}

/* "A:B": global steps A to B-1 are traced */
static int set_trace_steps(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
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

/* ---- the values that are more than a number, a word or a path ---------- */

static int set_lr(void *c, const char *val, void *st) {
  double v;
  if (parse_float("lr", val, -1e9, 1e9, &v) != 0) return -1;
  if (v < 0) return dt_error("option --lr: %g is negative (expected a learning rate >= 0)", v);
  ((train_config_t *)c)->lr = v;
  return 0;
}

static int set_optimizer(void *cv, const char *val, void *stv) {
  train_config_t *c = cv;
  optim_kind_t k;
  if (optim_kind_parse(val, &k) != 0) return dt_error_prefix("option --optimizer: ");
  optim_config_t keep = c->optim; /* momentum etc. given before --optimizer survive */
  optim_config_default(k, &c->optim);
  if (((parse_state_t *)stv)->saw_optimizer_constants) {
    c->optim.momentum = keep.momentum;
    c->optim.weight_decay = keep.weight_decay;
    c->optim.nesterov = keep.nesterov;
  }
  return 0;
}

static int set_lr_schedule(void *c, const char *val, void *st) {
  return lr_kind_parse(val, &((train_config_t *)c)->lr_schedule) ? dt_error_prefix("option --lr-schedule: ") : 0;
}

static int set_preset(void *c, const char *val, void *st) { return 0; } /* applied before the others */

static int set_schedule(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  return schedule_parse(val, &c->schedule, &c->schedule_param);
}

static int set_exchange(void *c, const char *val, void *st) {
  ((parse_state_t *)st)->exchange_set = 1;
  return exchange_parse(val, c);
}

static int set_bucket_mb(void *c, const char *val, void *st) {
  return parse_megabytes("bucket-mb", val, &((train_config_t *)c)->bucket_bytes);
}

static int set_compress(void *c, const char *val, void *st) {
  return codec_parse(val, &((train_config_t *)c)->compression.codec);
}

static int set_pipe_schedule(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  pipe_kind_t k;
  return pipe_kind_parse(val, &k, &c->pipe.chunks) ? -1 : (c->pipe.schedule = (int)k, 0);
}

static int set_partition(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  if (!strcmp(val, "balanced")) return c->pipe.partition[0] = 0, 0;
  if (strcmp(val, "macs") && pipe_partition_parse(val, NULL, 0) < 0) return -1;
  if (strlen(val) >= sizeof c->pipe.partition)
    return dt_error("option --partition: path too long (max %zu)", sizeof c->pipe.partition - 1);
  strcpy(c->pipe.partition, val);
  return 0;
}


static int set_tau_up(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  return parse_periods("tau-up", val, c->decentral.tau_up, &c->decentral.tau_up_levels);
}

static int set_tau_down(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  return parse_periods("tau-down", val, c->decentral.tau_down, &c->decentral.tau_down_levels);
}

static int set_epoch_fraction(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  if (parse_float("epoch-fraction", val, 0, 1, &c->ps.epoch_fraction) != 0) return -1;
  if (c->ps.epoch_fraction == 0)
    return dt_error("option --epoch-fraction: 0: an epoch must take some of its batches "
                    "(0 < F <= 1; Project Adam: 0.75)");
  return 0;
}

/* Parses argv[1..argc) (from the user when user != 0, else a preset's
 * words) and applies each option. */
static int parse_args(parse_state_t *st, int argc, char **argv, int user) {
  for (int i = 1; i < argc; i++) {
    int id;
    const char *val;
    DT_TRY(opt_next(&TABLE, argc, argv, &i, &id, &val));
    if (!strcmp(OPTIONS[id].opt.name, "preset")) {
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
    int id = opt_find(&TABLE, a + 2, n);
    const opt_t *o = &OPTIONS[id].opt;
    const char *val = o->kind == OPT_FLAG ? NULL : eq ? eq + 1 : argv[++i];
    if (!strcmp(o->name, "momentum") || !strcmp(o->name, "weight-decay") || !strcmp(o->name, "nesterov"))
      st->saw_optimizer_constants = 1;
    DT_TRY(opt_set(o, st->cfg, val, st));
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
  flat.pipe.stages = flat.pipe.micro_batches = 1;
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
                      "without --pp and --micro-batches it applies to %s", o->opt.name, c->pipe.stages,
                      c->pipe.micro_batches, o->where);
    return dt_error("option --%s: not used with %s (it applies to %s)", o->opt.name, now, o->where);
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
      c->optim.kind == OPTIM_LARS || st->given[opt_find(&TABLE, "net", 3)] || c->tensor.ranks > 1 ||
      c->tensor.conv_data || c->sync_bn)
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
