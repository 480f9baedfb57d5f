/* The values of the parameter-server and Hogwild options, and the options
 * that only make sense with them: one line naming the option and what
 * would work. Called by train_config_check, and (ps_check_world) again
 * once mpirun has fixed the number of workers. */
#include <math.h>
#include <string.h>

#include "strategy/ps/ps.h"

#define SSP_MAX 1000 /* clocks of slots a server keeps; beyond, use ssp:inf */

static int is_async_ps(const train_config_t *c) {
  int pool_async = c->schedule == SCHEDULE_ASYNC || c->schedule == SCHEDULE_VALUE ||
                   (c->schedule == SCHEDULE_SSP && isinf(c->schedule_param));
  return c->exchange == EXCHANGE_PS && pool_async;
}

int ps_pool_schedule(const train_config_t *c) {
  return c->schedule == SCHEDULE_ASYNC || c->schedule == SCHEDULE_VALUE ||
         c->schedule == SCHEDULE_BACKUP ||
         (c->schedule == SCHEDULE_SSP && isinf(c->schedule_param));
}

/* Under mpi the number of workers is known only once mpirun has started
 * the ranks (train.c calls ps_check_world then). */
static int check_schedule(const train_config_t *c, int workers_known) {
  double v = c->schedule_param;
  if (c->schedule == SCHEDULE_SSP && !isinf(v) && (v != floor(v) || v > SSP_MAX))
    return dt_error("option --schedule ssp:%g: the bound is a whole number of clocks up to %d "
                    "(ssp:inf for none)", v, SSP_MAX);
  if (c->schedule == SCHEDULE_BACKUP && (v != floor(v) || (workers_known && v >= c->workers)))
    return dt_error("option --schedule backup:%g: needs a whole number 0 <= B < --workers %d "
                    "(each step takes the first N - B gradients)", v, c->workers);
  if (c->schedule == SCHEDULE_VALUE && !(v > 0))
    return dt_error("option --schedule value:%g: the bound must be > 0", v);
  return 0;
}

static int check_async_options(const train_config_t *c) {
  if (c->ps.refresh_lazy && !(c->exchange == EXCHANGE_PS && c->schedule == SCHEDULE_SSP &&
                              !isinf(c->schedule_param)))
    return dt_error("option --ps-refresh lazy: the SSP cache's rule needs a bound: use "
                    "--exchange ps:K --schedule ssp:S");
  if ((c->ps.fetch_every != 1 || c->ps.push_every != 1) &&
      !(c->exchange == EXCHANGE_PS && (c->schedule == SCHEDULE_ASYNC ||
                                       (c->schedule == SCHEDULE_SSP && isinf(c->schedule_param)))))
    return dt_error("options --fetch-every and --push-every apply to Downpour (--exchange ps:K "
                    "--schedule async)");
  if (c->ps.implicit_momentum && !is_async_ps(c))
    return dt_error("option --implicit-momentum on: the momentum asynchrony implies comes from "
                    "updates applied one by one: use it with --exchange ps:K --schedule async "
                    "(or value:V)");
  if (c->ps.implicit_momentum && c->optim.kind != OPTIM_SGD)
    return dt_error("option --implicit-momentum on: lowers the servers' sgd momentum by 1 - 1/N: "
                    "use --optimizer sgd");
  if (c->ps.implicit_momentum && c->optim.nesterov)
    return dt_error("option --implicit-momentum on: the servers' momentum may be 0 or negative, "
                    "which --nesterov does not take");
  if ((c->ps.staleness_lr || c->ps.dc_asgd > 0) && !is_async_ps(c))
    return dt_error("options --staleness-lr and --dc-asgd mitigate stale asynchronous updates: "
                    "use them with --exchange ps:K --schedule async (or value:V)");
  return 0;
}

static int check_faults(const train_config_t *c) {
  if (c->kill_rank >= 0 && c->exchange != EXCHANGE_PS)
    return dt_error("option --kill: needs --exchange ps:K (the parameter servers go on without "
                    "a stopped worker under --schedule async or backup:B)");
  if (c->kill_rank >= 0 && c->comm != COMM_LOCAL)
    return dt_error("option --kill: fault injection is for --comm local (under mpi, kill the "
                    "process)");
  if (c->kill_rank == 0)
    return dt_error("option --kill: worker 0 reports the run; stop another worker (rank=1..%d)",
                    c->workers - 1);
  if (c->checkpoint_dir[0] && c->exchange != EXCHANGE_PS)
    return dt_error("option --checkpoint-dir: one file per server shard needs --exchange ps:K "
                    "(use --checkpoint FILE)");
  if (c->resume[0] && ps_path_is_dir(c->resume) && c->exchange != EXCHANGE_PS)
    return dt_error("option --resume %s: a folder of shards needs --exchange ps:K (resume a "
                    "--checkpoint FILE otherwise)", c->resume);
  return 0;
}

/* --comm-order priority / tictac with parameter servers: a worker pushes
 * each layer's keys in parts as backprop readies them and pulls them
 * back layer by layer (ps_prio.c). What needs a push or a pull whole is
 * refused, with why. */
static int check_comm_order(const train_config_t *c) {
  if (c->comm_order == COLL_ORDER_FIFO || c->exchange != EXCHANGE_PS) return 0;
  const char *name = c->comm_order == COLL_ORDER_TICTAC ? "tictac" : "priority";
  if (c->schedule == SCHEDULE_VALUE || c->schedule == SCHEDULE_BACKUP)
    return dt_error("option --comm-order %s: not with --schedule %s, whose servers keep each "
                    "worker's model as it pulled it whole (the value bound's snapshots, backup's "
                    "wait for a newer version); use sync, ssp:S or async", name,
                    schedule_name(c->schedule));
  const char *other = c->ps.dc_asgd > 0           ? "--dc-asgd (it compensates against the model a worker pulled whole)"
                      : c->ps.refresh_lazy      ? "--ps-refresh lazy (its cache decides whether to pull the whole model)"
                      : c->ps.push_every > 1       ? "--push-every (a push sums several batches; the layers go as one batch's backprop readies them)"
                      : c->tensor.ranks > 1               ? "--tp (a replica's keys are packed blocks, not layer ranges)"
                      : c->compression.codec.kind != CODEC_NONE ? "--compress (a codec encodes a shard's push as one message)"
                                                : NULL;
  if (other) return dt_error("option --comm-order %s: not with %s", name, other);
  return 0;
}

/* --ps-replicas and --kill-server (ps_replica.c): a shard on a primary and
 * its backup. What the backup could not replay as the primary applied it
 * is refused, with why. K may be unknown yet (ps:n under mpi): then
 * ps_check_world checks again. */
static int check_replicas(const train_config_t *c, int workers_known) {
  if (c->exchange != EXCHANGE_PS) return 0;
  int K = c->ps.servers > 0 ? c->ps.servers : workers_known ? c->workers : 0;
  int R = c->ps.replicas;
  if (R > 2)
    return dt_error("option --ps-replicas %d: a shard has a primary and one backup (chain of "
                    "two): use --ps-replicas 2", R);
  if (K > 0 && R > K)
    return dt_error("option --ps-replicas %d: above the %d server%s of --exchange ps:%d (each copy "
                    "of a shard lives on its own server): use ps:%d or more", R, K, K == 1 ? "" : "s",
                    K, R);
  for (int i = 0; i < 2; i++) {
    int k = i ? c->ps.kill_server2 : c->ps.kill_server;
    const char *key = i ? "index2" : "index";
    if (k == 0 && R < 2)
      return dt_error("option --kill-server %s=0: server 0 is the coordinator, replicated only "
                      "with --ps-replicas 2; stop a server 1..%d", key, K > 1 ? K - 1 : 1);
    if (k == 0 && (i == 1 || c->ps.kill_server2 >= 0))
      return dt_error("option --kill-server: index=0 with index2: the coordinator's standby "
                      "takes over from server 0 only as the first death; kill server 0 alone");
    if (K > 0 && k >= K)
      return dt_error("option --kill-server %s=%d: --exchange ps:%d has servers 0..%d", key, k, K, K - 1);
  }
  if (c->ps.kill_server_lose > 0 && R < 2)
    return dt_error("option --kill-server lose-forwards=%lld: a server forwards pushes only to a "
                    "backup; add --ps-replicas 2", (long long)c->ps.kill_server_lose);
  if (R < 2) return 0;
  if (c->schedule == SCHEDULE_VALUE || c->schedule == SCHEDULE_BACKUP)
    return dt_error("option --ps-replicas %d: not with --schedule %s (its servers keep per-worker "
                    "state the backup does not replay); use sync, ssp:S or async", R,
                    schedule_name(c->schedule));
  const char *other = c->comm_order != COLL_ORDER_FIFO          ? "--comm-order priority|tictac (pushes in parts)"
                      : c->compression.codec.kind != CODEC_NONE ? "--compress (encoded pushes)"
                      : c->ps.dc_asgd > 0                        ? "--dc-asgd (it corrects against per-worker snapshots)"
                      : c->ps.drop_stale >= 0                    ? "--drop-stale"
                      : c->tensor.ranks > 1                      ? "--tp"
                      : c->checkpoint_dir[0]                     ? "--checkpoint-dir (use --checkpoint FILE)"
                                                                 : NULL;
  if (other) return dt_error("option --ps-replicas %d: not with %s", R, other);
  return 0;
}

/* --ps-push factors: a push carries one batch's rows of a dense layer,
 * whole, as plain floats to the server holding the layer. */
static int check_factors(const train_config_t *c) {
  if (!c->ps.push_factors || c->exchange != EXCHANGE_PS) return 0;
  const char *other = c->ps.push_every > 1                        ? "--push-every (a push sums several batches' gradients; factors are one batch's rows)"
                      : c->comm_order != COLL_ORDER_FIFO          ? "--comm-order priority|tictac (pushes in parts)"
                      : c->compression.codec.kind != CODEC_NONE ? "--compress (a codec encodes gradients)"
                      : c->ps.replicas > 1                       ? "--ps-replicas 2 (the backup replays gradients)"
                                                                 : NULL;
  if (other) return dt_error("option --ps-push factors: not with %s", other);
  return 0;
}

/* --worker-threads T > 1: the threads run the model on their own, so no
 * collective inside a pass (--tp) and no per-layer hooks. */
static int check_worker_threads(const train_config_t *c) {
  int T = c->ps.worker_threads;
  if (T <= 1 || c->exchange != EXCHANGE_PS) return 0;
  const char *other = c->tensor.ranks > 1                 ? "--tp (a tensor-parallel pass sums over the group's ranks, one pass at a time)"
                      : c->comm_order != COLL_ORDER_FIFO ? "--comm-order priority|tictac (pushes and pulls layer by layer inside one pass)"
                                                        : NULL;
  if (other) return dt_error("option --worker-threads %d: not with %s; use --worker-threads 1", T, other);
  return 0;
}

int ps_check(const train_config_t *c) {
  DT_TRY(check_worker_threads(c));
  DT_TRY(check_factors(c));
  DT_TRY(check_comm_order(c));
  DT_TRY(check_replicas(c, c->comm == COMM_LOCAL));
  if (c->exchange == EXCHANGE_SHARED && c->comm != COMM_LOCAL)
    return dt_error("option --exchange shared needs shared memory: use --comm local (ranks of "
                    "--comm mpi are separate processes; --exchange allreduce works on both)");
  if (c->exchange == EXCHANGE_PS && c->optimization != OPTIMIZATION_CENTRAL)
    return dt_error("option --exchange ps:K: parameter servers are centralized optimization "
                    "(use --optimization central)");
  if (c->exchange == EXCHANGE_PS || c->exchange == EXCHANGE_SHARED)
    DT_TRY(check_schedule(c, c->comm == COMM_LOCAL));
  DT_TRY(check_async_options(c));
  return check_faults(c);
}

/* Asynchrony begets momentum (Mitliagkas et al. 2016): N workers whose
 * updates are applied one by one act as momentum 1 - 1/N on top of the
 * optimizer's. With --implicit-momentum on, --momentum is the total and
 * the servers step with --momentum - (1 - 1/N), negative when N is large. */
optim_config_t ps_server_optim(const train_config_t *c, int nworkers) {
  optim_config_t o = c->optim;
  if (c->ps.implicit_momentum)
    o.momentum = (float)((double)c->optim.momentum - (1.0 - 1.0 / (double)nworkers));
  return o;
}

int ps_check_tp(const train_config_t *c) {
  int T = c->tensor.ranks;
  if (c->tensor.conv_data)
    return dt_error("option --tp-conv data: not with --exchange ps:K (the one weird trick "
                    "exchanges the batch between its layers; with servers, --tp T splits the "
                    "dense layers of each replica)");
  if (c->schedule == SCHEDULE_VALUE || c->schedule == SCHEDULE_BACKUP)
    return dt_error("option --schedule %s: not with --tp %d (the servers of a replica's ranks "
                    "would bound or drop its parts apart); use sync, ssp:S or async",
                    schedule_name(c->schedule), T);
  if (c->pipe.stages > 1)
    return dt_error("options --tp %d and --pp %d: a parameter-server replica is a "
                    "tensor-parallel group only (use --pp 1)", T, c->pipe.stages);
  if (c->ps.servers > 0 && c->ps.servers % T != 0)
    return dt_error("option --exchange ps:%d: with --tp %d each tensor-parallel rank has servers "
                    "of its own, so K must be a multiple of %d (e.g. ps:%d)", c->ps.servers, T, T,
                    (c->ps.servers / T + 1) * T);
  if (c->checkpoint_dir[0] || (c->resume[0] && ps_path_is_dir(c->resume)))
    return dt_error("option %s: shard folders hold one-worker key ranges; with --tp %d use "
                    "--checkpoint FILE (any --tp resumes from it)",
                    c->checkpoint_dir[0] ? "--checkpoint-dir" : "--resume DIR", T);
  const char *other = c->compression.codec.kind != CODEC_NONE ? "--compress"
                      : c->ps.dc_asgd > 0              ? "--dc-asgd"
                      : c->kill_rank >= 0           ? "--kill"
                      : c->ps.refresh_lazy          ? "--ps-refresh lazy"
                                                    : NULL;
  if (other)
    return dt_error("option %s: not with --tp %d and --exchange ps:K (a replica is a "
                    "tensor-parallel group; use --tp 1)", other, T);
  return 0;
}

int ps_check_world(const train_config_t *c) {
  if (c->exchange == EXCHANGE_PS) DT_TRY(check_replicas(c, 1));
  return c->exchange == EXCHANGE_PS ? check_schedule(c, 1) : 0;
}
