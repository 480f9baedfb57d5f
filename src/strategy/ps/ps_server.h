/* A parameter server's parts and how they talk (internal to the server side
 * of src/strategy/ps/). A server is three parts, each owning its fields:
 *
 *   ps_server.c   the core: the shard, its optimizer, the request loop and
 *                 the replies, the table of workers, the pool epochs;
 *   rule_*.c      the synchronisation rule of --schedule, one ops table
 *                 each: rule_ssp.c (sync and ssp:S), rule_async.c (async,
 *                 ssp:inf), rule_value.c (value:V), rule_backup.c
 *                 (backup:B);
 *   ps_coord.c    server 0's second role, the coordinator: batches,
 *                 epochs, statistics, liveness.
 *
 * The rules and the coordinator may read the server's fields; they change
 * the shard, answer requests and move epochs only through the ps_server_*
 * functions below, and write only their own groups of ps_worker_state_t. */
#ifndef DTRAIN_STRATEGY_PS_SERVER_H
#define DTRAIN_STRATEGY_PS_SERVER_H

#include "strategy/ps/ps.h"

typedef struct ps_server ps_server_t;
typedef struct ps_coord ps_coord_t;
typedef struct ps_coord_repl ps_coord_repl_t;

/* What a server knows of one worker (s->workers[w]). */
typedef struct {
  /* ps_server.c: the shard as the worker last pulled it whole. The pull's
   * reply is sent from this copy, so updates need not wait for the worker
   * to take it; DC-ASGD and the value bound compare against it. Under
   * --compress-pulls it is the mirror (compress.h): the copy the worker
   * holds, which a pull's encoded change (pull_enc, sent from there)
   * moves; a pull with PS_PULL_DENSE sets it to the shard. */
  float *snapshot;
  uint8_t *pull_enc;
  int64_t pulls;             /* encoded pulls answered (their codec's seed) */
  int64_t pulled_version;
  /* sync/ssp: steps that applied this worker's pushes, in all and as of its
   * last pull: those since are in its cache under --ps-refresh lazy */
  int64_t own_steps, own_steps_at_pull;
  int dead;                  /* written off by the coordinator */
  /* ps_server.c: a push arriving in parts (PS_PUSH_PART, --comm-order
   * priority or tictac), gathered until they cover the shard */
  struct {
    float *buf;              /* [len], allocated on the first part */
    size_t got;              /* keys received of the push being gathered */
    int64_t clock, epoch;    /* its clock (or first batch) and epoch */
  } part;
  /* The worker's gradient received and not yet applied. ps_server_store_push
   * fills grad and what it was computed on; the rule does the rest. */
  struct {
    float *grad;             /* [len], allocated on its first push */
    int64_t version, batch, epoch; /* batch: the clock under sync/ssp */
    int held;                /* waiting for its clock, queued (value), accepted (backup) */
    int64_t clock;           /* sync/ssp: pushes received, the next push's clock */
    int64_t queued;          /* value: arrival number of the held push (-1: none) */
    /* sync/ssp on a shard taken over from a dead primary: the worker's
     * push of the clock after the held one (rule_ssp.c), kept apart until
     * the held one is applied */
    float *ahead;            /* [len], allocated on first use */
    int64_t ahead_version, ahead_batch, ahead_epoch;
    int ahead_held;
  } push;
  /* ps_replica.c (--ps-replicas 2): the last push taken from the worker
   * (its clock: a resent push at or below it is a duplicate), and the
   * worker's acknowledgement while it waits for the backup */
  struct {
    int64_t seen;            /* clock of the last push received (-1: none) */
    int waiting;             /* its ack waits for the backup's REPL_ACK */
    ps_req_t req;            /* that push, as the worker sent it */
    ps_req_t fwd;            /* ... as forwarded */
    float *buf;              /* [len] its values, as forwarded */
    comm_req_t *req_send, *data_send;
  } chain;
  /* ps_coord.c (server 0 only) */
  struct {
    double last_heard, interval; /* the lease */
    int pushed;              /* a push is in: its interval has seen a step's compute */
    int bye;
    int64_t drawn, settled;  /* batches of the epoch: handed out; pushed or lost */
    ps_worker_stats_t stats;
    int64_t counted;         /* clock of the last push counted (a resend is counted once) */
    int64_t asked, answer_batch, answer_epoch; /* its last NEXT answered: number, answer */
    /* ps_coord_repl.c: the answer, held until the standby has the state it
     * comes from (held_seq: that copy; -1: the copy is yet to be sent) */
    int held;
    int64_t held_seq;
    ps_req_t held_req;
    ps_reply_t held_rep;
  } coord;
} ps_worker_state_t;

/* A synchronisation rule: what a push does, when a pull may be answered,
 * what is applied as the workers move on and when an epoch ends, and
 * whether the run may go on without a worker. NULL: nothing to do (pull
 * always ready as far as the rule goes; the run goes on without any
 * worker). */
typedef struct {
  int pool; /* workers draw batches from the coordinator, epochs end with FLUSH;
             * else each takes its slice of every clock */
  /* Sets up s->rule_state (one block: the server free()s it) and the
   * rule's part of s->workers[w].push, after a resume too. */
  int (*init)(ps_server_t *s);
  /* A push that has passed the server's checks: the rule's own checks,
   * ps_server_store_push, ps_server_ack, and maybe ps_server_step. */
  int (*push)(ps_server_t *s, int src, const ps_req_t *req);
  int (*pull_ready)(const ps_server_t *s, int src, const ps_req_t *req);
  void (*progress)(ps_server_t *s);  /* applies what has become applicable */
  void (*epoch_end)(ps_server_t *s); /* every push of the epoch is here: apply the held */
  /* Worker w silent for `silent` s, `lost` written off before it, `over`:
   * every batch handed out. 0: go on without it; -1: the run stops (why). */
  int (*may_lose)(const ps_server_t *s, int w, double silent, int lost, int over);
  /* What a held pull waits for, in words (the stall line: "for worker 1
   * (3 clocks pushed) to push clock 4"); NULL: the line names the pull only. */
  void (*held_for)(const ps_server_t *s, const ps_req_t *req, char *buf, size_t cap);
} ps_rule_ops_t;

extern const ps_rule_ops_t ps_rule_ssp, ps_rule_async, ps_rule_value, ps_rule_backup;
/* async's update of worker w's held gradient (staleness counted, the push
 * no longer held); value:V applies the same. */
void ps_rule_apply_async(ps_server_t *s, int w);
/* The step alone: nothing counted, the push left as it is; DC-ASGD's
 * corrected gradient goes to out (len floats: the push's own slot, or a
 * scratch array that leaves the push untouched). */
void ps_rule_step_async(ps_server_t *s, int w, float *out);
/* value:V's queue: the held pushes in the order the rule tries them
 * (arrival, or least stale first under --ps-queue staleness); their count. */
int ps_rule_value_queue(const ps_server_t *s, int *order);
/* DC-ASGD-a's MeanSquare (s->dc_mean_square), when the run uses it. */
int ps_rule_async_init(ps_server_t *s);

typedef struct ps_out ps_out_t;
typedef struct ps_deferred ps_deferred_t;

struct ps_server {
  comm_t *world;
  const train_config_t *cfg;
  int N, K, index, rank;     /* workers, servers, this server, its world rank */
  /* Under --tp T (ps_group.c) a worker is a replica of T ranks and this
   * server serves slice `slice` of the servers: worker w is world rank
   * w * T + slice of the nranks worker ranks. Else T = 1, nranks = N. */
  int nranks, T, slice;
  model_t *model;            /* tensor table and initial parameters */
  ps_shard_map_t map;
  ps_range_t r;
  size_t len;
  float *params;             /* [len] this shard's parameters */
  optimizer_t *opt;          /* state of [len] */
  optim_segment_t *segs;
  int nsegs;
  ps_apply_t *apply;         /* --ps-server-threads T > 1: the step's threads (NULL: this one) */
  ps_factor_plan_t fplan;    /* --ps-push factors: the dense layers that come as factors */
  int64_t version;           /* updates applied */
  int first_epoch;
  lr_schedule_t lr;
  int64_t steps_per_epoch;   /* synchronous steps (global batch N x batch) */
  int64_t batches_per_epoch; /* batches of the shared order (pool rules) */
  ps_worker_state_t *workers; /* [N] */
  const ps_rule_ops_t *rule;
  void *rule_state;
  float *dc_mean_square;     /* rule_async.c: DC-ASGD-a's MeanSquare of the shard, [len] */
  ps_coord_t *coord;         /* server 0 only */
  ps_coord_repl_t *crepl;    /* ps_coord_repl.c: the coordinator's copies to its standby, or the
                              * standby's last copy of them (rank's own instance) */
  /* Epochs of the pool rules: the coordinator says that epoch `flush` had
   * `flush_pushes` pushes; it is closed here once they have all come. */
  struct { int64_t pushes, flush, flush_pushes, flushed; } epoch;
  ps_deferred_t *deferred;   /* requests that wait (pulls, NEXT) */
  int ndeferred, cap_deferred;
  ps_out_t *out;             /* replies in flight */
  int cap_out;
  float *drain;              /* pushes that are dropped or rejected land here */
  uint8_t *encoded;          /* --compress: a push's encoding, decoded from here */
  size_t encoded_cap;
  float *mirror_scratch;     /* --compress-pulls: 2 len floats (mirror_encode's) */
  /* ps_replica.c: chain replication. Shard k's primary is server k, its
   * backup server k + 1 (mod K), so a server rank runs at least two
   * instances: its own shard, and in `hosted` the backup copy of the shard
   * before it, which replays the pushes its primary forwards and takes
   * over when that primary dies; after a death a rank may be made the
   * backup of more shards (a copy of the primary's state, appended). */
  struct {
    ps_server_t **hosted;    /* the rank's own instance: its other instances [nhosted] */
    int nhosted, cap_hosted;
    ps_server_t *home;       /* the rank's own instance (itself, or the one hosting this) */
    const dataset_t *train;  /* what a new instance is built from */
    int copying;             /* a primary: its state is on its way to a new backup; acks wait */
    uint8_t *copy_buf;       /* ... the state as sent (kept until the next copy) */
    comm_req_t *copy_req[2];
    ps_req_t copy_msg;
    int *owner, *backup;     /* the coordinator: [K] each shard's primary and backup server (-1: none) */
    uint8_t *ready;          /* the coordinator: [K] the shard's backup holds its copy (COPY_ACK) */
    int primary_failed;      /* a backup: a forward's values never came; its primary is taken as dead */
    int coord_rank;          /* the rank's own instance: the coordinator's world rank (server 0's,
                              * then its standby's once it has died) */
    double coord_heard;      /* ... when the coordinator last pinged this rank */
    int is_backup;           /* this instance is a backup copy, not serving workers */
    int took_over;           /* a backup that became the primary: its dead primary's last pushes come again */
    int backup_rank;         /* a primary: its backup's world rank (-1: none, or lost) */
    int primary_rank;        /* a backup: its primary's world rank */
    int replaying;           /* a forwarded push is being handled: acks go to the primary */
    int data_from;           /* world rank the push's values come from (-1: the worker) */
    int stored;              /* the push being handled was received (forward it) */
    int64_t received, duplicates, kill_count;
    uint64_t bytes_sent;     /* forwards and acknowledgements, as the transport counted them */
    uint64_t copy_bytes;     /* state copies to new backups (after deaths only), as counted */
    uint8_t *server_dead;    /* the coordinator: [K] servers found dead */
    double *server_heard;    /* the coordinator: [K] when each last answered a ping */
    double next_ping;
    comm_req_t **ping_req;   /* the coordinator: [K] its ping in flight to each */
    comm_req_t *pong_req;    /* a server: its answer in flight */
    ps_req_t ping, pong;
  } repl;
  ps_req_t in;               /* the request being received */
  comm_req_t *in_req;
  int stop;
  double rejected;
};

/* A push whose parts have all come (server-internal, refused on the wire):
 * its values are in the worker's part buffer, not on the wire. */
#define PS_PUSH_GATHERED (1 << 30)

/* ---- ps_server.c: for the rules ---------------------------------------------- */
/* Receives worker src's push into its gradient slot (or, dropped, into
 * nothing) and records what it was computed on. 1: stored; 0: lost
 * (logged; the server goes on). */
int ps_server_store_push(ps_server_t *s, int src, const ps_req_t *req);
int ps_server_drop_push(ps_server_t *s, int src, const ps_req_t *req);
int ps_server_ack(ps_server_t *s, int src, const ps_req_t *req);
/* The one place where the shard changes: an optimizer step with g. */
void ps_server_step(ps_server_t *s, const float *g, double lr);
/* What steps change, kept aside and put back (value:V tries an update and
 * undoes it when the bound refuses it). The arrays are the caller's, len
 * floats each: params, state[0..opt->nstate), and mean_square when the
 * run has DC-ASGD-a's. */
typedef struct {
  float *params, *state[2], *mean_square;
  int64_t version, steps;
} ps_shard_copy_t;
void ps_server_keep(const ps_server_t *s, ps_shard_copy_t *c);
void ps_server_put_back(ps_server_t *s, const ps_shard_copy_t *c);
double ps_server_lr_of_step(const ps_server_t *s, int64_t step);
double ps_server_lr_of_batch(const ps_server_t *s, int64_t batch);
/* Statistics, kept by the coordinator (server 0's shard only): the
 * staleness of a push stepped now (computed on version computed_on), or
 * of one stepped earlier. */
void ps_server_staleness(ps_server_t *s, int64_t epoch, int64_t computed_on);
void ps_server_staleness_was(ps_server_t *s, int64_t epoch, int64_t staleness);
void ps_server_dropped(ps_server_t *s, int64_t epoch);

/* ---- ps_server.c: for the rules and the coordinator --------------------------- */
ps_reply_t ps_server_header(const ps_server_t *s, int64_t epoch);
/* sync/ssp: the least of the workers' clocks (pushes received). */
int64_t ps_server_slowest_clock(const ps_server_t *s);
int ps_server_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep,
                    const void *vals, size_t nbytes, int into_state);
int ps_server_reject(ps_server_t *s, int src, const ps_req_t *req, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ps_server_defer(ps_server_t *s, int src, const ps_req_t *req);
int ps_server_waiting(const ps_server_t *s, int w); /* w has a deferred request */
/* The stall inspector for held pulls (the coordinator, while it polls):
 * a pull held past --stall-warning, and each period after, gets one line
 * naming the worker and what the rule holds it for (held_for): the slow
 * workers themselves, where a worker's own stall line can only name the
 * server it waits on. */
void ps_server_report_held(ps_server_t *s);
/* w has a deferred pull of this whole shard's parameters (flags none but
 * PS_PULL_OWN): once ready it is answered from the shard as it then is,
 * before the server reads another request. */
int ps_server_pull_deferred(const ps_server_t *s, int w);
/* A control request (FLUSH, DEAD, STOP) to servers 1..K-1; failures logged. */
void ps_server_tell_servers(ps_server_t *s, int op, int64_t epoch, int64_t clock);
void ps_server_flush(ps_server_t *s, int64_t epoch, int64_t pushes);
void ps_server_set_dead(ps_server_t *s, int w, int dead);
void ps_server_stop_all(ps_server_t *s);

/* ---- ps_replica.c: chain replication ------------------------------------------------ */
int ps_chain_setup(ps_server_t *s, ps_server_t *hosted, const dataset_t *train);
void ps_chain_teardown(ps_server_t *s);
/* The rank's chain requests (REPL, REPL_ACK, PING, PONG, TAKEOVER,
 * LOST_BACKUP); src: the server's source id. */
int ps_chain_handle(ps_server_t *s, int src, const ps_req_t *req);
/* A push this instance has stored is acknowledged: forwarded to the
 * backup (the worker's ack then waits), or, replaying, acknowledged to
 * the primary. 1: handled here; 0: acknowledge the worker as usual. */
int ps_chain_ack(ps_server_t *s, int src, const ps_req_t *req);
/* A forward's values from the primary, waited for at most REPL_DATA_WAIT:
 * a primary killed between the request and its values (a large message
 * needs the sender alive under mpi) must not hold this server for the
 * whole --comm-timeout. */
int ps_chain_recv_values(ps_server_t *b, void *dst, size_t bytes);
/* The same from server rank `from` (the coordinator's state). */
int ps_chain_recv_from(ps_server_t *s, int from, void *dst, size_t bytes);
/* The backup instance becomes the shard's primary (why: for the log). */
void ps_chain_take_over(ps_server_t *b, const char *why);
/* The backup of s's shard is dead: the waiting acks go now. */
void ps_chain_lost_backup(ps_server_t *s);
/* The coordinator: pings the servers, and when one has died hands its
 * shard to its backup and tells the workers. -1: the run cannot go on. */
int ps_chain_watch(ps_server_t *s);
void ps_chain_report(const ps_server_t *s);
/* The rank's instance that coordinates (NULL: none); whether the rank
 * polls (it coordinates, or stands by to); the standby's watch: server 0
 * silent, it takes over as the coordinator. */
ps_server_t *ps_chain_coordinator(ps_server_t *s);
int ps_chain_polls(ps_server_t *s);
int ps_chain_watch_coordinator(ps_server_t *s);
/* Every instance of this rank: its own (i = 0), then those it hosts. */
ps_server_t *ps_chain_instance(ps_server_t *s, int i);
int ps_chain_ninstances(const ps_server_t *s);
/* ps_server.c, for ps_replica.c: a new instance of shard `index` on this
 * rank, built as at the start (its state is then copied over it). */
int ps_server_new_instance(const ps_server_t *s, int index, ps_server_t **out);
void ps_server_free_instance(ps_server_t *b);
int ps_server_send_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep);
int ps_server_rank_of(const ps_server_t *s, int id);

/* ---- ps_coord.c: server 0's other role ------------------------------------------ */
int ps_coord_init(ps_server_t *s, ps_coord_t **out);
void ps_coord_free(ps_coord_t *c);
void ps_coord_heard(ps_server_t *s, int src, const ps_req_t *req); /* every worker request */
int ps_coord_request(ps_server_t *s, int src, const ps_req_t *req); /* NEXT, STATS, BYE */
int ps_coord_ready(const ps_server_t *s, int src, const ps_req_t *req);
int ps_coord_answer(ps_server_t *s, int src, const ps_req_t *req);
int ps_coord_check(ps_server_t *s); /* epochs, liveness, the end */
void ps_coord_staleness(ps_coord_t *c, int64_t epoch, double staleness);
void ps_coord_dropped(ps_coord_t *c, int64_t epoch);
/* Its state as the standby keeps it (not the leases): bytes, pack, unpack. */
size_t ps_coord_state_bytes(const ps_server_t *s);
void ps_coord_pack(const ps_server_t *s, uint8_t *out);
void ps_coord_unpack(ps_server_t *s, const uint8_t *in);
/* The heir, once it holds the state: an epoch the dead coordinator closed
 * is told to the servers again (FLUSH is idempotent). */
void ps_coord_resume(ps_server_t *s);

/* ---- ps_coord_repl.c: the coordinator's state on its standby -------------------- */
/* After any change of the coordinator's state: a copy to the standby
 * (shard 0's backup), when it differs from the last one sent. */
int ps_coord_repl_sync(ps_server_t *s);
/* A coordinator's answer (NEXT, BYE): sent once the standby holds the
 * state it comes from, at once when there is no standby. */
int ps_coord_repl_reply(ps_server_t *s, int src, const ps_req_t *req, const ps_reply_t *rep);
/* The standby is gone: every held answer goes now; the next copy goes
 * whole to the new one (force). */
void ps_coord_repl_lost(ps_server_t *s);
int ps_coord_repl_holds(const ps_server_t *s); /* an answer is held */
void ps_coord_repl_force(ps_server_t *s);
/* COORD_STATE (on any server rank) and COORD_ACK (on the coordinator's). */
int ps_coord_repl_take(ps_server_t *rank, int src, const ps_req_t *req);
void ps_coord_repl_acked(ps_server_t *rank, const ps_req_t *req);
/* A standby's acknowledgement of the newest copy it holds, if not yet sent
 * (every rank calls it as it advances). */
void ps_coord_repl_poll(ps_server_t *rank);
/* The heir's new coordinator b takes the last copy this rank holds (0:
 * none came); its copy number for the log. */
int ps_coord_repl_adopt(ps_server_t *rank, ps_server_t *b, int64_t *seq);
uint64_t ps_coord_repl_bytes(const ps_server_t *s);
uint64_t ps_coord_repl_ack_bytes(const ps_server_t *s); /* a standby's acks */
void ps_coord_repl_free(ps_server_t *s);
#endif
