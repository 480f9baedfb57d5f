/* Parameter servers (internal to src/strategy/ps/): the key-range split, the wire
 * protocol, the push/pull client and the server. docs/PARAMETER_SERVER.md
 * describes the design; this header is the contract between the files
 * ps_shard.c, ps_client.c, ps_server.c, ps_ckpt.c, ps_worker.c and
 * tests/test_ps.c. The server's own parts (its core, the rules, the
 * coordinator) talk through ps_server.h.
 *
 * Ranks: workers are 0..N-1, servers N..N+K-1 of the world communicator.
 * Server 0 (world rank N) is also the coordinator: it hands out batches of
 * the shared order, closes epochs, collects statistics and watches the
 * workers' liveness. */
#ifndef DTRAIN_STRATEGY_PS_H
#define DTRAIN_STRATEGY_PS_H

#include "strategy/strategy.h"

/* The workers' loop (needs w->world with the server ranks), and the whole
 * of one rank of such a run: ranks 0..N-1 are workers, N..N+K-1 servers
 * (ps_worker.c). */
int strategy_ps_worker(worker_t *w);
int ps_run_rank(comm_t *world, const train_config_t *cfg, const dataset_t *train,
                const dataset_t *test);
/* The step as data (ps_describe.c): per worker and per server rank, the
 * parts of its pulls and pushes with their headers. */
int ps_describe_step(const train_config_t *cfg, const model_t *m, step_desc_t *out);
/* Values of the parameter-server and Hogwild options (ps_config.c). */
int ps_check(const train_config_t *cfg);
/* Whether the workers draw batches from the coordinator's pool (async,
 * ssp:inf, value:V, backup:B), rather than each its slice of every clock. */
int ps_pool_schedule(const train_config_t *cfg);
int ps_check_world(const train_config_t *cfg);   /* under mpi, once the workers are known */
/* --tp T with parameter servers: the schedules and options a replica of T
 * ranks takes (tensor_check calls it). */
int ps_check_tp(const train_config_t *cfg);
/* The servers' optimizer: cfg's, its momentum lowered by 1 - 1/N under
 * --implicit-momentum on (worker 0's optimizer, which gathers the state
 * for checkpoints, is the same). */
optim_config_t ps_server_optim(const train_config_t *cfg, int nworkers);

/* ---- key ranges ------------------------------------------------------------
 * Keys are float offsets into the parameter arena. Server k holds the
 * contiguous range shards[k]; ranges are balanced by size, and cut at a
 * tensor boundary when one lies within 5% of a shard of the ideal cut
 * (always, for LARS, whose trust ratio is per tensor). */
typedef struct { size_t begin, end; } ps_range_t;

typedef struct {
  int nservers, nworkers;   /* nworkers: the workers (replicas) the servers count */
  int first_server;         /* world rank of shards[0]'s server */
  size_t nparams;
  ps_range_t *shards;
} ps_shard_map_t;

int ps_shard_plan(const model_t *m, int nservers, int whole_tensors, ps_shard_map_t *out);
/* The same, no cut inside any of the key spans [keep[i].begin, keep[i].end)
 * (--ps-push factors: a dense layer's weight and bias on one server). */
int ps_shard_plan_keep(const model_t *m, int nservers, int whole_tensors, const ps_range_t *keep,
                       int nkeep, ps_shard_map_t *out);
void ps_shard_free(ps_shard_map_t *map);
/* The tensors of the model cut to range r, as optimizer segments with
 * offsets relative to r.begin (the shard's own arenas). */
int ps_shard_segments(const model_t *m, ps_range_t r, optim_segment_t **segs, int *nsegs);
/* AdamW decays matrices and tables, not norms and biases: the shard's 1-D
 * tensors exempted on its optimizer, as the worker's (worker.c). */
int ps_shard_no_decay(const model_t *m, ps_range_t r, optimizer_t *opt);

/* ---- a tensor-parallel group as one worker (ps_group.c) ------------------------
 * Project Adam: under --tp T the T adjacent ranks of a tensor-parallel
 * group are one worker, a replica. Tensor-parallel rank t has keys of its
 * own, packed in tensor order: the blocks of the split tensors it holds,
 * and, for t = 0 only, the replicated tensors; so every parameter of the
 * one-worker model is held once. The K servers are cut into T slices of
 * K / T, slice t serving rank t's keys: a slice sees the R replicas as R
 * workers, exactly as without tensor parallelism. Server 0 (slice 0) is
 * the coordinator; only tp rank 0 of a group talks to it. */
#define PS_NO_KEY ((size_t)-1)
typedef struct {
  int t, T;          /* this rank's tp coordinate and the group's size (1: none) */
  size_t nkeys;
  size_t *key;       /* per tensor of the rank's model: its first key, or PS_NO_KEY */
  int packed;        /* the keys are not the arena itself (t > 0 drops replicated tensors) */
} ps_keys_t;

/* The tensor-parallel group size of a parameter-server run (1: none). */
int ps_group_size(const train_config_t *cfg);
int ps_keys_plan(const model_t *m, int t, int T, ps_keys_t *k);
void ps_keys_free(ps_keys_t *k);
/* arena -> keys and back (only the tensors that have keys move). */
void ps_keys_pack(const ps_keys_t *k, const model_t *m, const float *arena, float *keys);
void ps_keys_unpack(const ps_keys_t *k, const model_t *m, const float *keys, float *arena);
/* The table of rank t's keys as a model: its tensors at their keys, the
 * initial values packed into params; no layers (a server's view). */
int ps_keys_table(const train_config_t *cfg, const dataset_t *train, int t, int T, model_t **out);
/* The same table from rank t's model m and its keys k (m's parameters
 * packed as they are). */
int ps_keys_table_of(const model_t *m, const ps_keys_t *k, model_t **out);

/* ---- --ps-server-threads T: a server's update over T threads (ps_apply.c) ----
 * The shard's segments cut into T slices once (whole segments under LARS);
 * ps_apply_step is optim_step with each slice written by its own thread.
 * T <= 1: *out = NULL (the caller steps on its own). */
typedef struct ps_apply ps_apply_t;
int ps_apply_new(int T, const optim_segment_t *segs, int nsegs, size_t len, int whole_segments,
                 ps_apply_t **out);
void ps_apply_free(ps_apply_t *a);
void ps_apply_step(ps_apply_t *a, optimizer_t *o, float *params, const float *grads, float lr);

/* ---- --worker-threads T: Project Adam's threads on a worker (ps_worker_threads.c) ----
 * T threads, each on its share of the batch against the worker's one
 * parameter arena, each applying -lr g_t to it without locks (racy by
 * design); model->grads gets the threads' gradients summed (the push).
 * T <= 1: *out = NULL (the worker computes on its own thread). */
typedef struct ps_wthreads ps_wthreads_t;
int ps_wthreads_new(worker_t *w, int T, ps_wthreads_t **out);
void ps_wthreads_free(ps_wthreads_t *pool);
/* worker_compute_gradient's contract (the epoch's sums, the timers), by
 * the threads, each of which has also stepped the weights at lr. */
int ps_wthreads_gradient(ps_wthreads_t *pool, size_t begin, size_t count, int denom, float lr);

/* ---- --ps-push factors: dense layers pushed as sufficient factors (ps_factors.c) ----
 * Per dense layer whose weight this rank has keys for: its keys
 * [wkey, end) (weight, then the bias when held: bkey, else PS_NO_KEY)
 * and its local shape. */
typedef struct {
  int layer;
  size_t in, out;
  size_t wkey, bkey, end;
} ps_factor_t;
typedef struct {
  int n;
  ps_factor_t *f;
} ps_factor_plan_t;
int ps_factor_plan(const model_t *m, const ps_keys_t *k, ps_factor_plan_t *out);
void ps_factor_plan_free(ps_factor_plan_t *p);
/* The shard map with each factored layer's keys on one server. */
int ps_shard_plan_factors(const model_t *m, int nservers, int whole_tensors,
                          const ps_factor_plan_t *fp, ps_shard_map_t *out);
/* The plan's layer spans as shard-plan keeps (`keep`: p->n ranges). */
void ps_factor_spans(const ps_factor_plan_t *p, ps_range_t *keep);
/* Bytes of the payload of keys [lo, hi) over `rows` rows. */
size_t ps_factor_bytes(const ps_factor_plan_t *p, size_t lo, size_t hi, size_t rows);
/* Worker: the payload of keys [lo, hi) into buf (ps_factor_bytes of it):
 * the factored layers' dout and inputs (x: the batch) from the model
 * after its backward pass, the other keys from grads (indexed by key). */
size_t ps_factor_pack(const ps_factor_plan_t *p, const model_t *m, const float *x, size_t rows,
                      const float *grads, size_t lo, size_t hi, void *buf);
/* The same from a batch computed in parts (--worker-threads): get(ctx, k,
 * layer, which, &rows) gives part k's rows of the layer's dout (which 0)
 * or input (which 1), and with layer -1 its row count alone; the parts'
 * rows go one after another, one payload of their sum. */
typedef const float *(*ps_factor_rows_fn)(void *ctx, int part, int layer, int which, size_t *rows);
size_t ps_factor_pack_parts(const ps_factor_plan_t *p, int nparts, ps_factor_rows_fn get, void *ctx,
                            const float *grads, size_t lo, size_t hi, void *buf);
/* --worker-threads: ps_factor_pack of the last batch, the threads' rows
 * one after another. */
size_t ps_wthreads_factor_pack(ps_wthreads_t *pool, const ps_factor_plan_t *p, const float *grads,
                               size_t lo, size_t hi, void *buf);
/* Server: a payload of keys [lo, hi) checked and expanded into the
 * gradient dst[hi - lo]. */
int ps_factor_expand(const ps_factor_plan_t *p, size_t lo, size_t hi, size_t max_rows,
                     const void *buf, size_t bytes, float *dst);
/* The server's factor plan and key table at once: the key table of
 * ps_keys_table (T > 1) or the model (T = 1), and its factor plan
 * (--ps-push factors; else empty). */
int ps_keys_table_factors(const train_config_t *cfg, const dataset_t *train, int t, int T,
                          model_t **out, ps_factor_plan_t *fp);
/* Server k's slice and its index within the slice (K servers, T slices). */
int ps_server_slice(int k, int K, int T);

/* ---- wire protocol -----------------------------------------------------------
 * A request is one ps_req_t on PS_TAG_REQ (servers receive it from any
 * source); a push's values follow on PS_TAG_DATA. Every request gets one
 * ps_reply_t on its reply tag (the client's slot), then, for a pull or
 * stats, the values on reply tag + 1. Tags [PS_TAG_BASE, PS_TAG_END) are
 * the parameter servers'. */
#define PS_TAG_BASE 0x60000
#define PS_TAG_REQ (PS_TAG_BASE)
#define PS_TAG_DATA (PS_TAG_BASE + 1)
#define PS_TAG_FAILOVER (PS_TAG_BASE + 2) /* coordinator to workers: int32s, the dead server
                                          * then each shard's server now (1 + K) */
#define PS_TAG_REPLY (PS_TAG_BASE + 16)
#define PS_MAX_INFLIGHT 256
#define PS_TAG_END (PS_TAG_REPLY + 2 * PS_MAX_INFLIGHT)
/* --ps-replicas 2: after a death one server may serve several shards of
 * one request, whose replies would share a tag and cross (a shard's values
 * are not another's size); each shard's part then has its own reply tags:
 * request ts's shard k answers on PS_TAG_REPLY_SHARD + 2 (ts' * 64 + k % 64)
 * (ts' = ts mod PS_MAX_INFLIGHT), distinct for up to 64 shards a server. */
#define PS_REPLY_SHARDS 64
#define PS_TAG_REPLY_SHARD (PS_TAG_BASE + 0x1000)
#define PS_TAG_REPLY_SHARD_END (PS_TAG_REPLY_SHARD + 2 * PS_MAX_INFLIGHT * PS_REPLY_SHARDS)
#define PS_MAGIC 0x70737231u /* "psr1" */

typedef enum {
  PS_OP_PUSH = 1, /* gradient of keys [begin, begin+count): count floats follow */
  PS_OP_PULL,     /* reply: parameters (which 0) or optimizer state which-1 of the keys */
  PS_OP_NEXT,     /* coordinator: the next batch of the shared order */
  PS_OP_STATS,    /* coordinator: statistics of epoch `epoch` */
  PS_OP_SAVE,     /* write this shard's checkpoint file for epoch `epoch` */
  PS_OP_BYE,      /* the worker has finished */
  PS_OP_FLUSH,    /* coordinator to servers: epoch `epoch` closed after `clock` pushes */
  PS_OP_DEAD,     /* coordinator to servers: worker `clock` stopped (epoch 1: is back) */
  PS_OP_STOP,     /* coordinator to servers: every worker has finished */
  /* chain replication (--ps-replicas 2, ps_replica.c) */
  PS_OP_REPL,     /* primary to backup: worker `worker`'s push to replay; its values follow */
  PS_OP_REPL_ACK, /* backup to primary: worker `worker`'s push of clock `clock` is held here */
  PS_OP_PING,     /* coordinator to servers: are you alive? */
  PS_OP_PONG,     /* server to coordinator: alive */
  PS_OP_TAKEOVER, /* coordinator to a backup: server `clock` is dead, shard `epoch` is now
                   * yours, its new backup server `version` (-1: none) */
  PS_OP_LOST_BACKUP, /* coordinator to a primary: shard `epoch`'s backup, server `clock`, is
                      * dead; its new backup is server `version` (-1: none) */
  PS_OP_SERVER_GONE, /* coordinator to the other servers: server `clock` is dead */
  PS_OP_COPY,     /* primary to a new backup: shard `epoch`'s whole state, `encoded` bytes, follows */
  PS_OP_COPY_ACK, /* new backup to primary: shard `epoch`'s copy is in place */
  PS_OP_COORD,    /* a new coordinator to the servers: server `clock` coordinates now */
  PS_OP_COORD_STATE, /* coordinator to its standby: its state, copy `clock`, `encoded` bytes
                      * follow (ps_coord_repl.c) */
  PS_OP_COORD_ACK,   /* standby to coordinator: copy `clock` of its state is held here */
  PS_OP_COUNT
} ps_op_t;

#define PS_WHICH_MEAN_SQUARE 64

/* PULL flags */
#define PS_PULL_OWN 1     /* wait until this worker's own pushes are applied */
#define PS_PULL_FLUSHED 2 /* wait until epoch `epoch` is flushed here */
#define PS_PULL_NEWER 16  /* wait for a version newer than this worker's last pull */
#define PS_PULL_DENSE 32  /* --compress-pulls: send the shard whole, and make it the mirror */
/* PUSH flags */
#define PS_PUSH_PART 64   /* one part of a push: the server gathers the parts of its
                           * range (one clock, one epoch) and applies them as one push */
#define PS_PUSH_FACTORS 128 /* --ps-push factors: `encoded` bytes of sufficient factors
                             * follow (ps_factors.c), expanded into the gradient here */
/* NEXT flags */
#define PS_NEXT_WAIT 4     /* nothing left to push: wait for the next epoch */
#define PS_NEXT_REPORTED 8 /* worker 0 has reported epoch `epoch` */

/* NEXT replies (reply.batch) other than a batch number */
#define PS_BATCH_NONE (-1) /* the epoch has no batch left: push, then ask with WAIT */
#define PS_BATCH_END (-2)  /* to worker 0: the epoch is closed; report it */
#define PS_BATCH_DONE (-3) /* training is over */

typedef struct {
  uint32_t magic;
  int32_t op;
  int32_t worker;        /* the sender's worker index (its world rank) */
  int32_t reply_tag;
  int32_t which;         /* PULL: 0 = parameters, 1 + s = optimizer state s,
                          * PS_WHICH_MEAN_SQUARE: DC-ASGD-a's MeanSquare */
  int32_t flags;
  uint64_t begin, count; /* key range */
  uint64_t nvalues;      /* PUSH: floats that follow */
  uint64_t encoded;      /* PUSH under --compress: the bytes of their encoding that follow
                          * instead (0: nvalues plain floats); with PS_PUSH_FACTORS the
                          * bytes of the sufficient factors that follow */
  int64_t clock;         /* PUSH: clock (sync/ssp) or first batch (pool); PULL: minimum version;
                          * NEXT: the worker's count of its NEXTs (sent again: the same) */
  int64_t version;       /* PUSH: this shard's version the gradient was computed on */
  int64_t epoch;
  int64_t nbatches;      /* PUSH: batches summed into this push */
  /* PUSH: the batches' loss and the worker's running totals (metrics) */
  double loss_sum, samples, correct;
  double bytes_pushed, bytes_pulled, blocked_sec;
} ps_req_t;

typedef struct {
  uint32_t magic;
  int32_t status;       /* 0, or -1: rejected (error says why) */
  int64_t version;      /* the shard's version (updates applied) */
  int64_t opt_steps;    /* the shard optimizer's step count */
  int64_t batch;        /* NEXT: batch number or PS_BATCH_* */
  int64_t epoch;
  int64_t clock;        /* sync/ssp: the slowest worker's clock; every push of a clock
                         * below it is in the parameters a pull returns */
  char error[200];
} ps_reply_t;

/* The messages' sizes on the wire, one place for the client, the server
 * and describe_step: a request and a reply are their structs, values are
 * floats (a codec's encoding under --compress, its own size). */
#define PS_REQ_BYTES sizeof(ps_req_t)
#define PS_REPLY_BYTES sizeof(ps_reply_t)
static inline size_t ps_values_bytes(size_t count) { return count * sizeof(float); }
/* One part of a request (a push or pull of one shard's keys, a call), as
 * the worker's side counts it: sent, the request and a push's `values`
 * bytes; received, the reply and a pull's or a call's values. */
void ps_part_bytes(int op, size_t values, size_t *sent, size_t *received);
/* One copy of the coordinator's state (--ps-replicas 2, ps_coord.c) with
 * `nworkers` workers: its head and a record per worker. */
size_t ps_coord_state_size(int nworkers);

/* STATS values: one ps_epoch_stats_t, then nworkers ps_worker_stats_t. */
typedef struct {
  double loss_sum, samples, correct;
  double staleness_sum, staleness_n, staleness_max; /* at server 0, in updates */
  double dropped;       /* backup: gradients that came too late */
  double rejected;      /* malformed requests */
} ps_epoch_stats_t;

typedef struct {
  double bytes_pushed, bytes_pulled, blocked_sec; /* running totals */
  double batches;       /* running total */
  double dead;          /* 1 once the coordinator has given up on the worker */
} ps_worker_stats_t;

/* ---- client: ps-lite style, non-blocking ------------------------------------
 * ps_push / ps_pull split a key range over the servers that hold it and
 * return a timestamp at once; ps_wait(ts) blocks until every server has
 * answered. The buffers must stay untouched until the wait. A rejected
 * request makes the wait fail with the server's message. */
typedef struct ps_client ps_client_t;

int ps_client_new(comm_t *world, int worker, const ps_shard_map_t *map, ps_client_t **out);
void ps_client_free(ps_client_t *c);
/* tmpl: the push's clock, epoch, nbatches and statistics (the rest is
 * filled in). Returns a timestamp >= 0, or -1. */
/* --compress: pushes go encoded by cc's codec (each shard's part one
 * message), with the client's error-feedback memory over the model's keys.
 * pulls (--compress-pulls on): a pull of a shard's parameters, whole, comes
 * as the encoded change since the last one (the server's mirror of this
 * worker, compress.h), added to a copy the client holds; the first dense. */
int ps_client_set_codec(ps_client_t *c, const compress_config_t *cc, int pulls);
int ps_push(ps_client_t *c, size_t begin, size_t count, const float *vals, const ps_req_t *tmpl);
/* --ps-push factors: a push of the whole model whose part for shard k is
 * payload[k] (bytes[k]: ps_factor_pack's, sent as PS_PUSH_FACTORS);
 * grads: the rank's gradient keys (only to mark the parts as a push). */
int ps_push_factors(ps_client_t *c, const void *const *payload, const size_t *bytes,
                    const float *grads, const ps_req_t *tmpl);
int ps_pull(ps_client_t *c, size_t begin, size_t count, int which, float *vals,
            const ps_req_t *tmpl);
/* A request to one server (NEXT, STATS, SAVE, BYE); extra: the values that
 * answer it (STATS), extra_len bytes. */
int ps_call(ps_client_t *c, int server, const ps_req_t *req, void *extra, size_t extra_len);
/* reply: the first server's answer (may be NULL). */
int ps_wait(ps_client_t *c, int ts, ps_reply_t *reply);
/* Whether every server has answered ts, without blocking (then ps_wait
 * returns at once). 1: yes, 0: not yet, -1: failed. */
int ps_test(ps_client_t *c, int ts);
int64_t ps_client_version(const ps_client_t *c, int server);
/* --ps-replicas 2: a shard whose primary dies is served by its backup.
 * The client listens for the coordinator's notices (PS_TAG_FAILOVER, from
 * whichever server coordinates: each shard's server now) while it waits
 * on a shard's answer, and sends again to the shard's new server what the
 * dead one did not answer: same request, same clock, so a push already
 * held is taken only once. Its calls to the coordinator follow shard 0
 * (the coordinator's standby takes both over). timeout:
 * how long a part may go unanswered (--comm-timeout). */
int ps_client_set_failover(ps_client_t *c, double timeout);
/* Takes the coordinator's notices that have come (a worker's last look,
 * before the run ends). */
int ps_client_notices(ps_client_t *c);
/* Pushes acknowledged (every part answered), parts sent again. */
void ps_client_chain_counts(const ps_client_t *c, int64_t *acked, int64_t *resent);
/* sync/ssp: the clock of the parameters last pulled whole, the least over
 * the shards (ps_reply_t.clock); 0 before the first pull. */
int64_t ps_client_clock(const ps_client_t *c);
/* Bosen's SSP read rule (--ps-refresh lazy): a worker at clock `clock`
 * may compute on its cached parameters of clock `cached` if they hold
 * every push of the clocks below clock - S, i.e. cached >= clock - S;
 * else it pulls. */
int ps_cache_fresh(int64_t cached, int64_t clock, int staleness);
void ps_client_totals(const ps_client_t *c, double *pushed, double *pulled, double *blocked);

/* ---- the order of a worker's transfers (ps_schedule.c) -------------------------
 * --comm-order priority or tictac: the layers that hold parameters
 * (bytes[i] > 0), most urgent first, into out; returns their count.
 * priority: layer order. tictac: by the forward's start time of the layer
 * (the sum of fwd_sec over the layers before it), ties by the smaller
 * transfer, then layer order. start: nlayers doubles of scratch. Pure. */
int ps_transfer_order(coll_order_t order, const double *fwd_sec, const size_t *bytes, int nlayers,
                      double *start, int *out);

/* ---- a worker's transfers layer by layer, most urgent first (ps_prio.c) ----------
 * --comm-order priority / tictac. Pushes: push_layer from backprop's
 * ready hook (tmpl: the push's clock, epoch and statistics; the parts go
 * as PS_PUSH_PART), flush_pushes after backprop starts what the credit
 * held back, finish_pushes waits for every answer. Pulls: pull asks for
 * the whole model layer by layer (cond: the pull's template), wait_layer
 * (from the forward pass's param_wait hook) waits for one layer's parts. A hook's failure is kept and
 * reported by ps_prio_failed. */
typedef struct ps_prio ps_prio_t;
int ps_prio_new(ps_client_t *client, model_t *m, const train_config_t *cfg, ps_prio_t **out);
void ps_prio_free(ps_prio_t *p);
int ps_prio_pull(ps_prio_t *p, const ps_req_t *cond);
void ps_prio_wait_layer(ps_prio_t *p, int layer);
void ps_prio_push_layer(ps_prio_t *p, int layer, const ps_req_t *tmpl);
int ps_prio_flush_pushes(ps_prio_t *p);
int ps_prio_finish_pushes(ps_prio_t *p);
int ps_prio_finish(ps_prio_t *p);   /* every push and pull answered */
int ps_prio_failed(const ps_prio_t *p);

/* ---- server -------------------------------------------------------------------
 * Runs server `index` of cfg's parameter servers on world rank
 * nworkers + index until the coordinator stops it. The model (tensor
 * table, initial parameters) comes from cfg and the data's shape. */
int ps_server_run(comm_t *world, const train_config_t *cfg, int nworkers, const dataset_t *train);
int ps_nservers(const train_config_t *cfg, int nworkers);

/* ---- checkpoints (ps_ckpt.c) --------------------------------------------------- */
/* The shard's tensors from a whole-model checkpoint (FILE) or a shard
 * folder (DIR with manifest.json): parameters, optimizer state,
 * DC-ASGD-a's MeanSquare (mean_square NULL: the run has none; zeroed when
 * the checkpoint has none), and the epoch and step it was written at. */
int ps_ckpt_load_shard(const char *path, const model_t *m, optimizer_t *opt, ps_range_t r,
                       float *params, float *mean_square, int *epoch, int64_t *step);
/* Writes DIR/shard-K-of-N.eE.safetensors atomically (mean_square: NULL or
 * DC-ASGD-a's). */
int ps_ckpt_save_shard(const train_config_t *cfg, int index, int nservers, ps_range_t r,
                       const float *params, const optimizer_t *opt, const float *mean_square,
                       int epoch, int64_t step);
/* DC-ASGD-a's MeanSquare in a --checkpoint FILE: this prefix + the tensor's name */
#define PS_MEAN_SQUARE_PREFIX "dc_asgd.mean_square."
/* Worker 0, after every server has saved epoch E: the buffers file, then
 * manifest.json (atomic), then the previous epoch's files are removed. */
int ps_ckpt_write_manifest(const train_config_t *cfg, const model_t *m,
                           const ps_shard_map_t *map, int epoch, int64_t step);
/* Epoch and step of a checkpoint (FILE or DIR); the buffers of a DIR. */
int ps_ckpt_position(const char *path, int *epoch, int64_t *step);
int ps_ckpt_load_buffers(const char *dir, model_t *m);
int ps_path_is_dir(const char *path);
/* DIR/manifest.json as read: the epoch files' names, the keys each shard
 * covers (in order, together [0, nparams)). */
#define PS_MANIFEST_MAX_SHARDS 1024
typedef struct {
  char file[160];
  size_t begin, end;
} ps_manifest_shard_t;
typedef struct {
  int epoch, nshards;
  int64_t step;
  size_t nparams;
  char optimizer[32], model[512], buffers[160];  /* "" for null; model JSON-unescaped */
  ps_manifest_shard_t shards[PS_MANIFEST_MAX_SHARDS];
} ps_manifest_t;
/* Parses a manifest's `len` bytes (not NUL-terminated; `path` names it in
 * errors). Pure: reads nothing else. */
int ps_manifest_parse(const char *text, size_t len, const char *path, ps_manifest_t *m);
#endif
