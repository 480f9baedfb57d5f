/* The taxonomy axes as configuration: defaults, parsing of --schedule and
 * --exchange, and the check that refuses combinations that do not exist. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/strategy.h"

void train_config_default(train_config_t *c) {
  memset(c, 0, sizeof *c);
  strcpy(c->model, "mlp");
  strcpy(c->data, "fashion-mnist");
  c->epochs = 1;
  c->batch = 64;
  c->seq_len = 128;
  c->seed = 1;
  c->threads = 1;
  optim_config_default(OPTIM_SGD, &c->optim);
  c->lr = 0.05;
  c->lr_schedule = LR_CONSTANT;
  c->lr_step_epochs = 1;
  c->lr_gamma = 0.1;
  c->max_loss = 1e4;
  c->trace_to = 1LL << 62;
  c->workers = 1;
  c->comm = COMM_LOCAL;
  c->optimization = OPTIMIZATION_CENTRAL;
  c->schedule = SCHEDULE_SYNC;
  c->exchange = EXCHANGE_ALLREDUCE;
  c->algo = ALLREDUCE_AUTO;
  c->bucket_bytes = 25u << 20; /* PyTorch DDP's bucket_cap_mb */
  c->overlap = 1;
  c->comm_order = COLL_ORDER_FIFO;
  c->partition_bytes = 1u << 20;
  c->ps.credit_bytes = 16000000; /* ByteScheduler's default credit: 4 M parameters */
  c->straggler_rank = -1;
  c->ps.fetch_every = c->ps.push_every = 1;
  c->kill_rank = -1;
  c->pipe.stages = c->pipe.micro_batches = c->pipe.chunks = 1;
  c->tensor.ranks = 1;
  c->tensor.owt_scheme = OWT_SCHEME_UNSET; /* b under the one weird trick (tensor_model_options) */
  c->ps.drop_stale = -1;
  c->ps.replicas = 1;
  c->ps.server_threads = 1;
  c->ps.worker_threads = 1;
  c->ps.kill_server = -1;
  c->ps.kill_server2 = -1;
  c->ps.epoch_fraction = 1;
  c->decentral.tau = 1;
  c->decentral.extrapolation = -1;
  c->decentral.tau_up[0] = c->decentral.tau_down[0] = 1;
  c->decentral.tau_up_levels = c->decentral.tau_down_levels = 1;
  c->decentral.neighbor_weight = 1.0 / 3.0;
  c->decentral.alpha_decay = 1;
  c->straggler_slowdown = 1;
  c->progress = 1;
  c->compression.error_feedback = -1;
  c->compression.momentum_correction = -1;
  c->decentral.consensus_step = 1;
}

const char *schedule_name(schedule_t s) {
  static const char *names[] = {"sync", "async", "ssp", "value", "backup", "soft"};
  return names[s];
}

void schedule_format(const train_config_t *c, char *buf, size_t cap) {
  if (c->schedule == SCHEDULE_SSP || c->schedule == SCHEDULE_VALUE || c->schedule == SCHEDULE_BACKUP) {
    if (isinf(c->schedule_param)) snprintf(buf, cap, "%s:inf", schedule_name(c->schedule));
    else snprintf(buf, cap, "%s:%g", schedule_name(c->schedule), c->schedule_param);
  } else {
    snprintf(buf, cap, "%s", schedule_name(c->schedule));
  }
}

const char *exchange_name(exchange_t e) {
  static const char *names[] = {"allreduce", "ps", "master", "neighbors", "gossip", "tree", "shared"};
  return names[e];
}

void exchange_spec(const train_config_t *c, char *buf, size_t cap) {
  if (c->exchange == EXCHANGE_ALLREDUCE)
    snprintf(buf, cap, "allreduce:%s", allreduce_algo_name(c->algo));
  else if (c->exchange == EXCHANGE_PS && c->ps.servers == 0) snprintf(buf, cap, "ps:n");
  else if (c->exchange == EXCHANGE_PS) snprintf(buf, cap, "ps:%d", c->ps.servers);
  else if (c->exchange == EXCHANGE_GOSSIP) snprintf(buf, cap, "gossip:%g", c->decentral.gossip_p);
  else if (c->exchange == EXCHANGE_TREE) snprintf(buf, cap, "tree:%d", c->decentral.tree_fanout);
  else snprintf(buf, cap, "%s", exchange_name(c->exchange));
}

int schedule_parse(const char *text, schedule_t *out, double *param) {
  const char *colon = strchr(text, ':');
  size_t n = colon ? (size_t)(colon - text) : strlen(text);
  for (int s = SCHEDULE_SYNC; s <= SCHEDULE_SOFT; s++) {
    if (strlen(schedule_name(s)) != n || strncmp(text, schedule_name(s), n) != 0) continue;
    int needs = s == SCHEDULE_SSP || s == SCHEDULE_VALUE || s == SCHEDULE_BACKUP;
    if (needs != (colon != NULL))
      return dt_error("option --schedule: '%s': %s", text,
                      needs ? "needs a parameter (ssp:S, value:V, backup:B)"
                            : "takes no parameter");
    *out = s;
    *param = 0;
    if (colon) {
      if (s == SCHEDULE_SSP && !strcmp(colon + 1, "inf")) *param = INFINITY;
      else if (parse_float("schedule", colon + 1, 0, 1e9, param) != 0) return -1;
    }
    return 0;
  }
  return dt_error("option --schedule: unknown schedule '%s' (expected sync, async, ssp:S, "
                  "value:V, backup:B, soft)", text);
}

static int exchange_parse_param(const char *text, exchange_t *out, double *gossip_p, int *fanout);

int exchange_parse(const char *text, train_config_t *c) {
  exchange_t *out = &c->exchange;
  allreduce_algo_t *algo = &c->algo;
  int *servers = &c->ps.servers;
  int with_param = exchange_parse_param(text, out, &c->decentral.gossip_p, &c->decentral.tree_fanout);
  if (with_param != 0) return with_param < 0 ? -1 : 0;
  if (!strcmp(text, "allreduce") || !strncmp(text, "allreduce:", 10)) {
    *out = EXCHANGE_ALLREDUCE;
    *algo = ALLREDUCE_AUTO;
    if (text[9] == ':' && allreduce_algo_parse(text + 10, algo) != 0)
      return dt_error_prefix("option --exchange: ");
    return 0;
  }
  if (!strncmp(text, "ps:", 3)) {
    long k;
    *out = EXCHANGE_PS;
    if (!strcmp(text + 3, "n")) {
      *servers = 0;
      return 0;
    }
    if (parse_int("exchange", text + 3, 1, 1024, &k) != 0) return -1;
    *servers = (int)k;
    return 0;
  }
  static const struct { const char *name; exchange_t e; } plain[] = {
      {"master", EXCHANGE_MASTER}, {"neighbors", EXCHANGE_NEIGHBORS}, {"shared", EXCHANGE_SHARED}};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (!strcmp(text, plain[i].name)) {
      *out = plain[i].e;
      return 0;
    }
  return dt_error("option --exchange: unknown exchange '%s' (expected allreduce:ring|rhd|tree|"
                  "naive|hier|shm|auto, ps:K, ps:n, master, neighbors, gossip:p, tree:F, shared)", text);
}

/* gossip:p and tree:F carry a parameter; parsed here so that their errors
 * name the option. */
static int exchange_parse_param(const char *text, exchange_t *out, double *gossip_p, int *fanout) {
  if (!strncmp(text, "gossip:", 7)) {
    double p;
    char *end;
    p = strtod(text + 7, &end);
    if (end == text + 7 || *end || !(p > 0 && p <= 1))
      return dt_error("option --exchange %s: the gossip probability must be in (0, 1]", text);
    *out = EXCHANGE_GOSSIP;
    *gossip_p = p;
    return 1;
  }
  if (!strncmp(text, "tree:", 5)) {
    long f;
    char *end;
    f = strtol(text + 5, &end, 10);
    if (end == text + 5 || *end || f < 1 || f > 1024)
      return dt_error("option --exchange %s: the tree fan-out must be an integer >= 1", text);
    *out = EXCHANGE_TREE;
    *fanout = (int)f;
    return 1;
  }
  if (!strcmp(text, "gossip") || !strcmp(text, "tree"))
    return dt_error("option --exchange %s: needs a parameter (gossip:p, tree:F)", text);
  return 0;
}

/* Synchronous data parallelism with one replica (one worker, or one
 * tensor-parallel group) sums no gradients: --compress would be ignored. */
static int compress_check_replicas(const train_config_t *c) {
  const strategy_t *st = strategy_match(c); /* the gradients' sum: data parallelism's */
  if (c->compression.codec.kind == CODEC_NONE || !st || st->compress != COMPRESS_GRADIENTS ||
      train_pipelined(c) || c->workers != c->tensor.ranks)
    return 0;
  char name[48], tp[32] = "";
  codec_format(&c->compression.codec, name, sizeof name);
  if (c->tensor.ranks > 1) snprintf(tp, sizeof tp, " and --tp %d", c->tensor.ranks);
  if (c->comm == COMM_MPI)
    return dt_error("option --compress %s: mpirun -np %d%s leaves one data-parallel replica, so "
                    "no gradients are summed and nothing would be compressed: use mpirun -np %d "
                    "for two replicas, or drop --compress", name, c->workers, tp, 2 * c->workers);
  if (c->tensor.ranks > 1)
    return dt_error("option --compress %s: --tp %d on %d workers is one tensor-parallel group, "
                    "no data-parallel replica, so no gradients are summed (the split layers' sums "
                    "go as they are): use --workers %d for two replicas", name, c->tensor.ranks, c->workers,
                    2 * c->tensor.ranks);
  return dt_error("option --compress %s: one worker sums no gradients, so nothing would be "
                  "compressed: use --workers 2 or more, or drop --compress", name);
}

/* --sync-bn and --balance act between data-parallel replicas: with one
 * (one worker, or one tensor-parallel group) they would change nothing. */
static int replica_options_check(const train_config_t *c) {
  if ((!c->sync_bn && !c->balance) || train_pipelined(c) || c->workers != c->tensor.ranks) return 0;
  const char *opt = c->sync_bn ? "--sync-bn on" : "--balance on";
  const char *what = c->sync_bn ? "no other replica's batch statistics to add"
                                : "no other replica to move samples to";
  if (c->tensor.ranks > 1)
    return dt_error("option %s: --tp %d on %d workers is one data-parallel replica, %s: use "
                    "--workers %d for two, or drop the option", opt, c->tensor.ranks, c->workers,
                    what, 2 * c->tensor.ranks);
  return dt_error("option %s: %s is one data-parallel replica, %s: use %s, or drop the option",
                  opt, c->comm == COMM_MPI ? "mpirun -np 1" : "one worker", what,
                  c->comm == COMM_MPI ? "mpirun -np 2 or more" : "--workers 2 or more");
}

int train_config_check_ranks(const train_config_t *c) {
  if (c->straggler_rank >= c->workers)
    return dt_error("option --straggler: rank %d does not exist with %d workers",
                    c->straggler_rank, c->workers);
  if (c->kill_rank >= c->workers)
    return dt_error("option --kill: rank %d does not exist with %d workers", c->kill_rank,
                    c->workers);
  if (strategy_check_world(c) != 0) return -1;
  if (replica_options_check(c) != 0) return -1;
  return compress_check_replicas(c);
}

/* A sharded step keeps the ring's reduce-scatter layout: rank r owns block
 * r of every bucket. */
static int shard_check(const train_config_t *c) {
  if (!c->shard_optimizer) return 0;
  if (c->exchange != EXCHANGE_ALLREDUCE || c->optimization != OPTIMIZATION_CENTRAL)
    return dt_error("option --shard-optimizer: applies to synchronous data parallelism "
                    "(--optimization central --exchange allreduce:ring)");
  if (c->algo != ALLREDUCE_RING && c->algo != ALLREDUCE_AUTO)
    return dt_error("option --shard-optimizer: needs --exchange allreduce:ring (a rank steps "
                    "its block of the ring's reduce-scatter), not allreduce:%s",
                    allreduce_algo_name(c->algo));
  if (c->optim.kind == OPTIM_LARS)
    return dt_error("options --shard-optimizer and --optimizer lars do not combine: LARS needs "
                    "whole tensors, a rank steps a block");
  return 0;
}

/* The one weird trick's schemes (b) and (c) step the split layers once a
 * pass, K times a step, and the front once: Adam's bias correction counts
 * steps, which would then mean two things. */
static int owt_check(const train_config_t *c) {
  owt_scheme_t s = c->tensor.owt_scheme == OWT_SCHEME_UNSET ? OWT_SCHEME_B : c->tensor.owt_scheme;
  if (!c->tensor.conv_data || s == OWT_SCHEME_A || c->optim.kind != OPTIM_ADAM) return 0;
  return dt_error("option --owt-scheme %c: the fully connected layers step once per worker's "
                  "batch and Adam's bias correction counts steps: use --owt-scheme a, or "
                  "--optimizer sgd|rmsprop|lars", 'a' + (int)s);
}

/* Priority order applies each bucket's update during the next forward
 * pass, which needs the buckets of synchronous data parallelism started
 * during backprop, each whole on every rank. */
static int comm_order_check(const train_config_t *c) {
  if (c->comm_order == COLL_ORDER_FIFO) return 0;
  if (c->exchange == EXCHANGE_PS && c->optimization == OPTIMIZATION_CENTRAL)
    return 0; /* ps_config.c checks the parameter servers' */
  if (c->comm_order == COLL_ORDER_TICTAC)
    return dt_error("option --comm-order tictac: orders the transfers to and from parameter "
                    "servers (--exchange ps:K); for allreduce use --comm-order priority");
  if (c->exchange != EXCHANGE_ALLREDUCE || c->optimization != OPTIMIZATION_CENTRAL ||
      c->schedule != SCHEDULE_SYNC)
    return dt_error("option --comm-order priority: applies to synchronous data parallelism "
                    "(--optimization central --schedule sync --exchange allreduce:ALGO) and to "
                    "parameter servers (--exchange ps:K)");
  if (!c->overlap)
    return dt_error("options --comm-order priority and --overlap off do not combine: priority "
                    "orders the allreduces that run during compute (use --overlap on)");
  if (c->shard_optimizer || c->balance)
    return dt_error("option --comm-order priority: does not combine with --%s on (the update "
                    "is applied bucket by bucket during the next forward pass)",
                    c->shard_optimizer ? "shard-optimizer" : "balance");
  return 0;
}

/* Compression is a stage of synchronous data parallelism's reducer: it
 * needs gradients that go on a wire, bucket by bucket. */
int train_error_feedback(const train_config_t *c) {
  return c->compression.error_feedback < 0 ? codec_default_feedback(&c->compression.codec) : c->compression.error_feedback;
}

int train_momentum_correction(const train_config_t *c) {
  if (c->compression.momentum_correction >= 0) return c->compression.momentum_correction;
  return c->compression.codec.kind == CODEC_DGC ? MC_VELOCITY : MC_OFF;
}

static int compress_check(const train_config_t *c) {
  const codec_spec_t *k = &c->compression.codec;
  if (c->compression.sufficient_factors && c->tensor.ranks > 1)
    return dt_error("option --sufficient-factors on: not with --tp %d (a split layer's factors "
                    "are its block's; use --tp 1)", c->tensor.ranks);
  if (c->compression.sufficient_factors && c->tensor.conv_data) /* else nothing would be factored */
    return dt_error("option --sufficient-factors on: not with --tp-conv data (the one weird "
                    "trick splits every dense layer, whose gradients then never go on the wire); "
                    "drop the option");
  if (c->compression.sufficient_factors && (k->kind != CODEC_NONE || c->shard_optimizer || c->balance ||
                                c->comm_order == COLL_ORDER_PRIORITY))
    return dt_error("option --sufficient-factors on: does not combine with %s (it sends a dense "
                    "layer's factors instead of its gradient, a bucket a layer)",
                    k->kind != CODEC_NONE ? "--compress" : c->shard_optimizer ? "--shard-optimizer on"
                    : c->balance ? "--balance on" : "--comm-order priority");
  if (k->kind == CODEC_NONE) {
    if (c->compression.error_feedback == 1 || c->compression.warmup_steps || c->compression.dgc_clip > 0)
      return dt_error("option --%s: needs --compress CODEC", c->compression.error_feedback == 1 ? "error-feedback"
                      : c->compression.warmup_steps ? "compress-warmup-steps" : "dgc-clip");
    return 0;
  }
  char name[48];
  codec_format(k, name, sizeof name);
  if ((c->pipe.stages > 1 || c->pipe.micro_batches > 1) && c->comm != COMM_MPI && c->workers == c->pipe.stages * c->tensor.ranks)
    return dt_error("option --compress %s: this pipeline has one replica of each stage, so no "
                    "gradients are summed (activations go stage to stage as they are): use "
                    "--workers %d for two replicas", name, 2 * c->pipe.stages * c->tensor.ranks);
  /* what the strategy sends, from its descriptor (none matching: the
   * selection's own message comes last, in train_config_check) */
  const strategy_t *st = strategy_match(c);
  strategy_compress_t how = st ? st->compress : COMPRESS_NOT_BUILT;
  if (how == COMPRESS_REFUSED)
    return dt_error("option --compress %s: %s", name, st->no_compress);
  const char *method = st && st->short_name ? st->short_name : st ? st->name : "";
  int central = c->optimization == OPTIMIZATION_CENTRAL;
  int dp = how == COMPRESS_GRADIENTS;
  if (how == COMPRESS_MIRRORS &&
      (!codec_fixed_size(k) || k->kind == CODEC_POWERSGD || k->kind == CODEC_DGC))
    return dt_error("option --compress %s: %s sends messages of a fixed size: use fp16, bf16, "
                    "int8, onebit, qsgd:S, terngrad, topk:R or randomk:R", name, method);
  /* on or off: the mirrors are the memory, and neither value would change it */
  if (how == COMPRESS_MIRRORS && c->compression.error_feedback != -1)
    return dt_error("option --error-feedback %s: %s keeps copies of what each end holds, which "
                    "carry what was not sent (always, whatever the option); drop the option",
                    c->compression.error_feedback ? "on" : "off", method);
  if (how == COMPRESS_NOT_BUILT)
    return dt_error("option --compress %s: built for synchronous data parallelism (--optimization "
                    "central --schedule sync --exchange allreduce:ALGO), parameter-server pushes and pulls "
                    "(--exchange ps:K), model averaging (--optimization decentral --exchange "
                    "allreduce:ALGO or master), EASGD (master), MPCA-SGD (soft), TreeEASGD (tree:F), "
                    "GoSGD (gossip:p) and D-PSGD (neighbors); not yet for --optimization %s "
                    "--exchange %s", name,
                    c->optimization == OPTIMIZATION_CENTRAL ? "central" : "decentral",
                    exchange_name(c->exchange));
  /* the dense warm-up lives in the summed-gradient reducer (reducer.c,
   * pipe/engine.c): pushes, averages and mirrors would compress from step 0 */
  if (c->compression.warmup_steps && how != COMPRESS_GRADIENTS)
    return dt_error("option --compress-warmup-steps: no dense warm-up under %s, every %s is "
                    "compressed from the first step (only synchronous allreduce and a "
                    "pipeline's replicas have one): drop the option", method,
                    how == COMPRESS_PUSHES ? "push" : how == COMPRESS_AVERAGES ? "average"
                                                                               : "model change");
  if (c->exchange == EXCHANGE_PS && (k->kind == CODEC_POWERSGD || k->kind == CODEC_DGC))
    return dt_error("option --compress %s: with --exchange ps:K a push is one worker's gradient "
                    "to each server; %s needs the synchronous allreduce (use topk:R there)", name,
                    k->kind == CODEC_POWERSGD ? "PowerSGD sums its factors by allreduce and"
                                              : "DGC's momentum correction");
  if (c->shard_optimizer || c->comm_order != COLL_ORDER_FIFO || c->balance)
    return dt_error("option --compress %s: does not combine with %s (use the default FIFO, "
                    "unsharded, even reducer)", name, c->shard_optimizer ? "--shard-optimizer on"
                    : c->balance ? "--balance on" : c->comm_order == COLL_ORDER_TICTAC
                    ? "--comm-order tictac" : "--comm-order priority");
  if (c->compression.error_feedback == 1 && !codec_biased(k))
    return dt_error("option --error-feedback on: %s is unbiased, and error feedback is for biased "
                    "codecs (fp16, bf16, int8, onebit, topk, randomk, threshold, dgc, powersgd); "
                    "drop the option", name);
  if (k->kind == CODEC_DGC && !central)
    return dt_error("option --compress %s: DGC compresses gradients (its momentum correction); "
                    "model averaging sends model changes: use topk:R", name);
  if (k->kind == CODEC_DGC && c->optim.kind != OPTIM_SGD)
    return dt_error("option --compress %s: DGC's momentum correction takes the place of SGD's "
                    "momentum: use --optimizer sgd (not %s)", name, optim_kind_name(c->optim.kind));
  if (c->compression.momentum_correction != -1 && c->compression.momentum_correction != MC_VELOCITY &&
      k->kind == CODEC_DGC)
    return dt_error("option --momentum-correction %s: DGC is top-k with its velocity corrected "
                    "(velocity); for top-k without it use --compress topk:R",
                    c->compression.momentum_correction ? "shared" : "off");
  if (c->compression.momentum_correction == MC_SHARED && (codec_sparse(k) || k->kind == CODEC_POWERSGD))
    return dt_error("option --momentum-correction shared: the decoded sum becomes the momentum, "
                    "and %s would drop the momentum of what it does not send: use velocity "
                    "(DGC's)", name);
  if (c->compression.momentum_correction == MC_VELOCITY && k->kind != CODEC_DGC && c->compression.warmup_steps)
    return dt_error("option --compress-warmup-steps: its dense steps would go without momentum "
                    "under --momentum-correction velocity (only dgc ramps its sparsity instead): "
                    "use shared, or no warm-up");
  if (c->compression.momentum_correction > 0) {
    if (!central || !dp)
      return dt_error("option --momentum-correction: corrects the momentum of synchronous "
                      "data parallelism's gradients (--exchange allreduce:ALGO --schedule sync)");
    if (!train_error_feedback(c))
      return dt_error("option --momentum-correction: the error-feedback memory carries what "
                      "was not sent, and %s has none: use a biased codec with --error-feedback on",
                      name);
    if (c->optim.kind != OPTIM_SGD || c->optim.nesterov) /* --momentum 0: the gradient alone */
      return dt_error("option --momentum-correction: corrects SGD's momentum (--momentum M): use "
                      "--optimizer sgd, without --nesterov");
    /* u = 0 u + g: the velocity is the gradient, the memory plain error feedback */
    if (c->compression.momentum_correction == MC_VELOCITY && !(c->optim.momentum > 0))
      return dt_error("option --momentum-correction velocity: corrects SGD's momentum, and "
                      "--momentum is 0 (the velocity would be the gradient, as without the "
                      "option): give --momentum M > 0, or drop the option");
  }
  if (c->compression.dgc_clip > 0 && k->kind != CODEC_DGC)
    return dt_error("option --dgc-clip: applies to --compress dgc:R, not %s", name);
  if (c->compression.pulls && c->schedule == SCHEDULE_VALUE)
    return dt_error("option --compress-pulls on: not with --schedule value:V, whose bound counts "
                    "a pulled model as the servers' own; a compressed pull's copy lags it by "
                    "what the codec has not sent yet");
  if (c->compression.pulls && !codec_fixed_size(k))
    return dt_error("option --compress-pulls on: a pull's reply has the size of its codec's "
                    "encoding, and %s's varies with the values: use topk:R", name);
  return 0;
}

/* Balancing splits the batch of a synchronous step of data parallelism. */
static int balance_check(const train_config_t *c) {
  if (!c->balance) return 0;
  if (c->optimization != OPTIMIZATION_CENTRAL || c->schedule != SCHEDULE_SYNC ||
      (c->exchange != EXCHANGE_ALLREDUCE && c->exchange != EXCHANGE_SHARED))
    return dt_error("option --balance: applies to synchronous data parallelism (--optimization "
                    "central --schedule sync --exchange allreduce:ALGO or shared), not --schedule "
                    "%s --exchange %s", schedule_name(c->schedule), exchange_name(c->exchange));
  return 0;
}

/* allreduce:shm reads the other ranks' buffers: threads of one process,
 * and no messages for an emulated network to delay. */
static int shm_check(const train_config_t *c) {
  if (c->algo != ALLREDUCE_SHM) return 0;
  if (c->comm != COMM_LOCAL)
    return dt_error("option --exchange allreduce:shm needs shared memory: use --comm local "
                    "(ranks of --comm mpi are separate processes; ring, rhd and auto work on both)");
  if (c->net_latency > 0 || c->net_bandwidth > 0 || comm_net_emulated(&c->net, 0))
    return dt_error("options --exchange allreduce:shm and --net do not combine: shm sends no "
                    "messages for the emulated network to delay (use ring, rhd or auto)");
  return 0;
}

/* --net hosts=... must fit the ranks of the run (workers, and servers). */
static int net_hosts_check(const train_config_t *c) {
  if (c->net.hosts <= 1) return 0;
  int n = strategy_total_ranks(c);
  int *host = malloc((size_t)n * sizeof(int));
  if (!host) return dt_error("out of memory");
  int rc = comm_net_hosts(&c->net, n, host);
  free(host);
  if (rc == 0) return 0;
  return dt_error_prefix("option --");
}

/* Values first, then whether the axes combine (strategy_select). */
int train_config_check(const train_config_t *c) {
  if (c->epochs < 1) return dt_error("option --epochs: must be at least 1");
  if (c->batch < 1) return dt_error("option --batch: must be at least 1");
  if (!(c->lr >= 0)) return dt_error("option --lr: %g is negative (expected >= 0)", c->lr);
  if (c->workers < 1) return dt_error("option --workers: %d (expected at least 1)", c->workers);
  if (c->threads < 1) return dt_error("option --threads: %d (expected at least 1)", c->threads);
  if (c->decentral.tau < 1) return dt_error("option --tau: %d (expected at least 1 local step)", c->decentral.tau);
  if (c->optim.nesterov && c->optim.kind == OPTIM_SGD && !(c->optim.momentum > 0)) /* else every rank fails */
    return dt_error("option --nesterov: looks ahead along the momentum, and --momentum is 0: "
                    "give --momentum M > 0, or drop --nesterov");
  if (c->bf16 && !kern_bf16_available())
    return dt_error("option --precision bf16: %s (use --precision fp32)",
                    cpu_has(CPU_AVX512_BF16) || cpu_has(CPU_AMX_BF16)
                        ? "dtrain was built without oneDNN (libdnnl-dev)"
                        : "this CPU has no bf16 instructions (AVX512_BF16 or AMX-BF16)");
  if (c->checkpoint_every && !c->checkpoint[0])
    return dt_error("option --checkpoint-every %lld: needs --checkpoint FILE (where the checkpoints "
                    "are written)", (long long)c->checkpoint_every);
  if (strategy_check_families(c) != 0) return -1;
  if (shard_check(c) != 0) return -1;
  if (owt_check(c) != 0) return -1;
  if (shm_check(c) != 0) return -1;
  if (balance_check(c) != 0) return -1;
  if (comm_order_check(c) != 0) return -1;
  if (compress_check(c) != 0) return -1;
  /* under mpi the number of workers comes from -np: checked once it is known */
  if (c->comm != COMM_MPI && train_config_check_ranks(c) != 0) return -1;
  if (c->comm != COMM_MPI && net_hosts_check(c) != 0) return -1;
  return strategy_select(c) ? 0 : -1;
}