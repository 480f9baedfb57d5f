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
/* A partition needs two stages to place layers in: with --pp 1 (micro-batches
 * alone) every layer is on every rank whatever it says. */
static int is_staged(const train_config_t *c) { return is_pipeline(c) && c->pipe.stages > 1; }
static int is_pipedream(const train_config_t *c) {
  return is_pipeline(c) && c->pipe.schedule == PIPE_PIPEDREAM;
}
static int is_data_parallel(const train_config_t *c) {
  return !is_decentral(c) && c->exchange == EXCHANGE_ALLREDUCE && !is_pipeline(c);
}
/* --tp T may be the one weird trick too, when the model file says split=data
 * (tensor_model_options decides, once it has read the file). */
static int is_owt(const train_config_t *c) { return c->tensor.conv_data || c->tensor.ranks > 1; }
static int is_sync_dp(const train_config_t *c) {
  return is_data_parallel(c) && c->schedule == SCHEDULE_SYNC;
}
static int has_metrics(const train_config_t *c) { return c->metrics[0] != 0; }
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
/* A sparse codec's pairs summed by a collective (--sparse-collective). */
static int sparse_allreduce(const train_config_t *c) {
  return is_sync_dp(c) && compresses(c) && codec_sparse(&c->compression.codec);
}
/* Whether gradients or models go on a wire (not one shared arena). */
static int on_a_wire(const train_config_t *c) { return c->exchange != EXCHANGE_SHARED; }
static int is_local(const train_config_t *c) { return c->comm == COMM_LOCAL; }
static int uses_momentum(const train_config_t *c) {
  return c->optim.kind != OPTIM_ADAM && c->optim.kind != OPTIM_ADAMW;
}
static int is_adam(const train_config_t *c) {
  return c->optim.kind == OPTIM_ADAM || c->optim.kind == OPTIM_ADAMW;
}
static int uses_eps(const train_config_t *c) {
  return is_adam(c) || c->optim.kind == OPTIM_RMSPROP;
}
static int is_text(const train_config_t *c) { return data_is_text(c->data); }
/* Clipping by the global norm needs the whole summed gradient before the
 * step: synchronous allreduce with the update after the sum (not deferred
 * into the next forward, not sharded), or a flush pipeline (GPipe, 1F1B,
 * interleaved), each tensor-parallel group and each pipeline's stages
 * summing their squared norms (worker.c). */
static int clips_globally(const train_config_t *c) {
  int flush = is_pipeline(c) && c->pipe.schedule <= PIPE_INTERLEAVED && !c->shard_optimizer;
  return flush || (is_sync_dp(c) && c->comm_order == COLL_ORDER_FIFO && !c->shard_optimizer &&
                   !c->tensor.conv_data);
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
  const char *section;                    /* --help: a heading before this row */
  /* --help: "METAVAR\tdescription", more lines after '\n' (a line with a
   * '\t' is a sub-item: "key=VALUE\tdescription"); NULL: the option is
   * named in the help of a row before it (--beta2 in --beta1's) */
  const char *help;
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
static int set_sparse_collective(void *c, const char *val, void *st);
static int set_pipe_schedule(void *c, const char *val, void *st);
static int set_partition(void *c, const char *val, void *st);
static int set_net(void *c, const char *val, void *st);
static int set_straggler(void *c, const char *val, void *st);
static int set_epoch_fraction(void *c, const char *val, void *st);
static int set_dc_asgd(void *c, const char *val, void *st);
static int set_kill(void *c, const char *val, void *st);
static int set_kill_server(void *c, const char *val, void *st);
static int set_alpha_decay(void *c, const char *val, void *st);
static int set_tau_up(void *c, const char *val, void *st);
static int set_tau_down(void *c, const char *val, void *st);
static int set_trace_steps(void *c, const char *val, void *st);
static const int LAZY_EAGER[] = {1, 0};
static const int FACTORS_GRADIENTS[] = {1, 0};

static const option_t OPTIONS[] = {
    {PATH("model", model), NULL, NULL, AX_STRATEGY,
     .section = "what to train",
     .help = "mlp|lenet|FILE\tbuilt-in model or a model file (docs/MODEL_FORMAT.md) [mlp]"},
    {PATH("data", data), NULL, NULL, AX_STRATEGY,
     .help = "fashion-mnist|synthetic|DIR|fortunes|text:FILE\tdata set; text: any file\n"
             "as bytes (vocabulary 256) in windows of --seq-len, the last\n"
             "10% held out for validation; fortunes: the Debian package's\n"
             "43 plain files [fashion-mnist]"},
    {INT("seq-len", seq_len, 1, 1 << 20), is_text, "--data text:FILE or fortunes", AX_STRATEGY,
     .help = "T\ttext: tokens a sample (its targets are the next T bytes) [128]"},
    {INT("epochs", epochs, 1, 1000000), NULL, NULL, AX_STRATEGY,
     .help = "N\tepochs in total (with --resume: up to N) [1]"},
    {INT("batch", batch, 1, 1 << 20), NULL, NULL, AX_STRATEGY,
     .help = "N\tbatch size per worker [64]"},
    {INT("seed", seed, 0, 1L << 62), NULL, NULL, AX_STRATEGY,
     .help = "N\tseed of initialisation, shuffling, dropout [1]"},
    {INT("threads", threads, 1, 256), NULL, NULL, AX_STRATEGY,
     .help = "N\tBLAS threads per worker [1]"},
    {WORDS("precision", bf16, "fp32|bf16", NULL), NULL, NULL, AX_STRATEGY,
     .help = "fp32|bf16\tbf16: every product's operands rounded to bfloat16, fp32\n"
             "accumulation and results (oneDNN on AVX512_BF16 or AMX);\n"
             "parameters, optimizer state, activations between layers\n"
             "and the loss stay fp32; refused on a CPU without bf16 [fp32]"},
    {WORDS("recompute", recompute, "none|blocks|full", NULL), NULL, NULL, AX_STRATEGY,
     .help = "none|blocks|full\tactivations the backward pass recomputes instead of\n"
             "keeping (GPipe's re-materialisation): blocks keeps each\n"
             "transformer block's input, full only the model's (or each\n"
             "pipeline stage's, per micro-batch); no result changes [none]"},
    {INT("max-steps", max_steps, 1, 1L << 50), NULL, NULL, AX_STRATEGY,
     .help = "N\tstop after N optimizer steps in total (smoke tests)"},
    {FLT("time-budget", time_budget, 0.001, 1e9), stops_together,
     "--exchange allreduce:ALGO, --exchange shared --schedule sync, or --optimization decentral",
     AX_STRATEGY,
     .help = "SEC\tend the run at the first epoch end past SEC seconds (rank 0's\n"
             "clock; allreduce, shared sync and decentralized strategies)"},
    {FLT("max-loss", max_loss, 1e-3, 1e30), NULL, NULL, AX_STRATEGY,
     .help = "X\ta mean train or test loss above X (or NaN) stops the run as\n"
             "diverged, keeping the last good checkpoint [1e4]"},
    {FUNC("optimizer", set_optimizer), NULL, NULL, AX_STRATEGY,
     .section = "optimizer",
     .help = "sgd|adam|adamw|rmsprop|lars\tadamw: decoupled weight decay (default\n"
             "0.01), not applied to 1-D tensors (norms, biases) [sgd]"},
    {FUNC("lr", set_lr), NULL, NULL, AX_STRATEGY,
     .help = "X\tbase learning rate [0.05]"},
    {FLT("momentum", optim.momentum, 0, 0.9999), uses_momentum, "--optimizer sgd, rmsprop or lars", AX_OPTIMIZER,
     .help = "X\tmomentum (sgd, rmsprop, lars) [0]"},
    {FLAG("nesterov", optim.nesterov, 1), is_sgd, "--optimizer sgd", AX_OPTIMIZER,
     .help = "\tNesterov momentum (sgd)"},
    {FLT("weight-decay", optim.weight_decay, 0, 10), NULL, NULL, AX_STRATEGY,
     .help = "X\tL2 weight decay; adamw: decoupled [0; adamw 0.01]"},
    {FLT("clip-grad-norm", clip_grad_norm, 1e-12, 1e30), clips_globally,
     "--exchange allreduce:ALGO --schedule sync (fifo order, no --shard-optimizer), with --tp and "
     "with --pp under --pipe-schedule gpipe, 1f1b or interleaved:V",
     AX_STRATEGY,
     .help = "X\tscale the summed gradient to a global L2 norm of at most X\n"
             "before each step (as torch.nn.utils.clip_grad_norm_) [off]"},
    {FLT("beta1", optim.beta1, 0, 0.99999), is_adam, "--optimizer adam", AX_OPTIMIZER,
     .help = "X --beta2 X --eps X\tAdam / RMSProp constants"},
    {FLT("beta2", optim.beta2, 0, 0.99999999), is_adam, "--optimizer adam", AX_OPTIMIZER, NULL, NULL},
    {FLT("eps", optim.eps, 1e-20, 1), uses_eps, "--optimizer adam or rmsprop", AX_OPTIMIZER, NULL, NULL},
    {FUNC("lr-schedule", set_lr_schedule), NULL, NULL, AX_STRATEGY,
     .help = "constant|step|cosine\tper-step schedule; cosine decays to 0 [constant]"},
    {FLT("warmup-epochs", warmup_epochs, 0, 1e6), NULL, NULL, AX_STRATEGY,
     .help = "X\tlinear warm-up length [0]"},
    {FLT("lr-step-epochs", lr_step_epochs, 1e-6, 1e6), is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE,
     .help = "X --lr-gamma X\tstep schedule: multiply by gamma every X epochs [1, 0.1]"},
    {FLT("lr-gamma", lr_gamma, 0, 1), is_step_schedule, "--lr-schedule step", AX_LR_SCHEDULE, NULL, NULL},
    {FUNC("preset", set_preset), NULL, NULL, AX_STRATEGY,
     .section = "distribution (the taxonomy axes; see 'dtrain presets')",
     .help = "NAME\tfill the axes from a named system (at most one); the other\n"
             "options override the preset's, wherever they stand"},
    {INT("workers", workers, 1, MAX_WORKERS), NULL, NULL, AX_STRATEGY,
     .help = "N\tworkers (ranks) on --comm local [1]"},
    {WORDS("comm", comm, "local|mpi", NULL), NULL, NULL, AX_STRATEGY,
     .help = "local|mpi\ttransport: threads in this process, or MPI processes [local]"},
    {WORDS("optimization", optimization, "central|decentral", NULL), NULL, NULL, AX_STRATEGY,
     .help = "central|decentral\t[central]"},
    {FUNC("schedule", set_schedule), NULL, NULL, AX_STRATEGY,
     .help = "sync|async|ssp:S|value:V|backup:B|soft\t[sync]; soft: MPCA-SGD's\n"
             "soft-bounded rounds (decentral, --exchange master)"},
    {FUNC("exchange", set_exchange), NULL, NULL, AX_STRATEGY,
     .help = "allreduce:ring|rhd|tree|naive|hier|shm|auto|ps:K|...\t\n"
             "[shared with --comm local, --schedule sync and 2+ workers,\n"
             "where no option given needs allreduce (--bucket-mb,\n"
             "--overlap, --comm-order, --shard-optimizer, --net, a\n"
             "pipeline, lars): the fastest one-machine path; otherwise\n"
             "allreduce:auto, which picks ring, rhd, tree or hier by\n"
             "size, ranks and link (docs/COLLECTIVES.md)]\n"
             "allreduce:shm: one pass over the ranks' buffers in shared\n"
             "memory (--comm local, no --net)\n"
             "allreduce:hier: by host (reduce-scatter inside a host,\n"
             "allreduce across hosts, allgather); auto picks it when the\n"
             "ranks are on >1 host with >=2 each (mpi: the nodes MPI finds;\n"
             "local: --net hosts=)\n"
             "shared: one machine's shared memory (--comm local); with\n"
             "--schedule sync a sharded optimizer, with async Hogwild"},
    {FUNC("bucket-mb", set_bucket_mb), is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY,
     .help = "X\tgradient bucket size; 0 = one bucket per layer [25]"},
    {ONOFF("overlap", overlap), is_data_parallel, "--optimization central --exchange allreduce:ALGO", AX_STRATEGY,
     .help = "on|off\tstart bucket allreduces during backprop [on]"},
    {WORDS("comm-order", comm_order, "fifo|priority|tictac", NULL), takes_comm_order, "--optimization central --schedule sync --exchange allreduce:ALGO, or --exchange ps:K", AX_STRATEGY,
     .help = "fifo|priority|tictac\tfifo: buckets' allreduces in the order backprop\n"
             "readies them; priority: the first layers' first, each\n"
             "bucket's update applied as the next forward pass reaches\n"
             "it (ByteScheduler, P3) [fifo]. With --exchange ps:K\n"
             "(sync, ssp:S, async): each layer pushed in parts as\n"
             "backprop readies it, the model pulled back layer by layer\n"
             "(--credit-kb in flight), the forward waiting per layer;\n"
             "priority: first layer first (ByteScheduler); tictac: by\n"
             "when the forward first needs each layer, from its measured\n"
             "times, ties the smaller first (TicTac's TAC)"},
    {KIB("partition-kb", partition_bytes), is_priority, "--comm-order priority or tictac", AX_COMM_ORDER,
     .help = "N\tpriority, tictac: transfers in parts of at most N KiB [1024]"},
    {KIB("credit-kb", ps.credit_bytes), is_ps_priority, "--exchange ps:K --comm-order priority or tictac", AX_COMM_ORDER,
     .help = "N\tps:K with priority, tictac: at most N KiB of parts in flight\n"
             "each way, the rest queued most urgent first (ByteScheduler's\n"
             "credit) [15625: its 4 M parameters]"},
    {ONOFF("shard-optimizer", shard_optimizer), is_data_parallel, "--optimization central --exchange allreduce:ring", AX_STRATEGY,
     .help = "on|off\tallreduce:ring: each rank steps 1/N of the parameters with\n"
             "1/N of the optimizer work (ZeRO stage 1) [off]"},
    {ONOFF("balance", balance), is_balanceable,
     "--optimization central --schedule sync --exchange allreduce:ALGO or shared", AX_STRATEGY,
     .help = "on|off\tsplit each synchronous step's batch by the ranks' measured\n"
             "speed (same global batch; not bitwise repeatable) [off]"},
    {FUNC("compress", set_compress), on_a_wire, "--exchange allreduce:ALGO, ps:K, master or neighbors", AX_STRATEGY,
     .help = "CODEC\tcompression of what goes on the wire (sync allreduce,\n"
             "ps pushes, local SGD, EASGD, TreeEASGD, GoSGD, D-PSGD)\n"
             "[none]: fp32, fp16[:sr], bf16[:sr], int8[:sr] (:sr =\n"
             "stochastic rounding), onebit, qsgd:S (S levels), terngrad,\n"
             "terngrad:C (clipped at C sigma; a scaler a tensor, shared\n"
             "by the ranks: the paper's), terngrad-chunked[:C] (a scale a\n"
             "512 values, not shared), topk:R, randomk:R\n"
             "(fraction R of the values), threshold:T (each |x| >= T sent\n"
             "exact), strom:T (those sent as +-T, 4 bytes each: Strom 2015),\n"
             "dgc:R (Deep Gradient Compression), powersgd:R (rank R)"},
    {ONOFF("error-feedback", compression.error_feedback), compresses, "--compress CODEC", AX_STRATEGY,
     .help = "on|off\tkeep what a biased codec did not send for the next step\n"
             "[on for biased codecs; refused for unbiased ones]"},
    {WORDS("momentum-correction", compression.momentum_correction, "off|velocity|shared", NULL), compresses, "--compress CODEC", AX_STRATEGY,
     .help = "off|velocity|shared\tSGD's momentum under compression:\n"
             "velocity: each rank's in the memory (DGC's); shared: the\n"
             "momentum step compressed, its sum the new momentum\n"
             "(1-bit Adam's; dense codecs) [velocity for dgc, else off]"},
    {ONOFF("compress-pulls", compression.pulls), compresses_ps, "--exchange ps:K --compress CODEC", AX_STRATEGY,
     .help = "on|off\t--exchange ps:K: pulls too, as the change since the\n"
             "worker's last pull, the server keeping the copy each\n"
             "worker holds (N copies of a shard a server) [off]"},
    {INT("compress-warmup-steps", compression.warmup_steps, 0, 1L << 40), compresses, "--compress CODEC", AX_STRATEGY,
     .help = "N\tthe first N steps dense; dgc: its sparsity ramps from 75%\n"
             "to 1 - R over them instead [0]"},
    {FLT("dgc-clip", compression.dgc_clip, 1e-9, 1e9), compresses, "--compress dgc:R", AX_STRATEGY,
     .help = "NORM\tdgc: clip each rank's gradient to NORM / sqrt(workers) [off]"},
    {FUNC("sparse-collective", set_sparse_collective), sparse_allreduce, "--schedule sync --exchange allreduce:ALGO --compress topk:R, randomk:R, threshold:T, strom:T or dgc:R", AX_STRATEGY,
     .help = "NAME\tthe collective that sums a sparse codec's pairs [allgather]:\n"
             "allgather (every rank's pairs to every rank), sparcml:rd\n"
             "(SparCML's recursive doubling, pairs merged at each stage,\n"
             "dense past the break-even), sparcml:split (its split\n"
             "allgather), sparcml (the cheaper of the two), kylix (Kylix's\n"
             "butterfly, index then value), auto (the cheapest by the\n"
             "alpha-beta cost with the expected union of the sets)"},
    {ONOFF("sufficient-factors", compression.sufficient_factors), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO", AX_STRATEGY,
     .help = "on|off\tsync allreduce: each dense layer's gradient sent as its\n"
             "factors (the layer's inputs and output errors) where they are\n"
             "fewer bytes than the matrix (Poseidon's SFB) [off]"},
    {FLT("consensus-step", decentral.consensus_step, 1e-6, 1), uses_choco, "--optimization decentral --exchange neighbors --compress CODEC", AX_STRATEGY,
     .help = "G\tD-PSGD with --compress (CHOCO-SGD): the gossip step, in\n"
             "(0, 1]; sparse codecs need a small one (0.2) [1]"},
    {FUNC("net", set_net), is_local, "--comm local", AX_COMM,
     .help = "latency=50us,bandwidth=1Gbit\temulated network on --comm local; either key\n"
             "or both; latency 0 to 10 s, bandwidth 1 kbit/s to 10 Tbit/s\n"
             "hosts=N | hosts=A+B+...\tthe ranks (servers too) on N hosts, consecutive and as\n"
             "even as possible, or A, B, ... ranks on each; latency and\n"
             "bandwidth are then the links between hosts, and\n"
             "intra-latency=TIME,intra-bandwidth=RATE\tthe links within a host (need hosts;\n"
             "default: not delayed; a link per rank).\n"
             "link=shared|own\twith hosts: a host's ranks share one link to\n"
             "the other hosts each way, as a machine's NIC, or each rank has\n"
             "its own (own: every rank a machine's bandwidth) [shared].\n"
             "e.g. --net hosts=2,intra-bandwidth=10Gbit,intra-latency=5us,\n"
             "           bandwidth=1Gbit,latency=50us"},
    {WORDS("bind", net.bind_cores, "none|core", NULL), is_local, "--comm local", AX_COMM,
     .help = "none|core\tcore: each rank's thread pinned to a CPU of its own (rank r to\n"
             "the r-th this process may use, modulo their count), as mpirun's\n"
             "--bind-to core; under --comm mpi, bind with mpirun [none]"},
    {FUNC("straggler", set_straggler), NULL, NULL, AX_STRATEGY,
     .help = "rank=R,slowdown=F\tslow down one rank's compute F times (1..1000)"},
    {FLT("comm-timeout", net.timeout, 0.001, 1e6), NULL, NULL, AX_STRATEGY,
     .help = "SEC\ta rank waiting longer than this on a peer fails [300]"},
    {FLT("stall-warning", net.stall_warning, 0.001, 1e6), NULL, NULL, AX_STRATEGY,
     .help = "SEC\ta collective waiting longer than this prints one line naming\n"
             "it, the ranks that joined and those that have not; again at\n"
             "every period; the timeout's error names the same [60]"},
    {INT("pp", pipe.stages, 1, 1024), NULL, NULL, AX_STRATEGY,
     .section = "pipeline parallelism (workers = dp x pp; a stage per rank, --batch per replica)",
     .help = "P\tpipeline stages, each a range of layers [1]"},
    {INT("micro-batches", pipe.micro_batches, 1, 1 << 16), NULL, NULL, AX_STRATEGY,
     .help = "M\tmicro-batches of batch/M samples per step [1]"},
    {FUNC("pipe-schedule", set_pipe_schedule), is_pipeline, "--pp P > 1 or --micro-batches M > 1", AX_STRATEGY,
     .help = "gpipe|1f1b|interleaved:V|pipedream|2bw|ddg\tall forwards then all\n"
             "backwards (GPipe); one forward one backward (PipeDream-Flush);\n"
             "that with V chunks per rank (Megatron; M a multiple of P);\n"
             "no flush: PipeDream (weight stashing, M 1), PipeDream-2BW (two\n"
             "weight versions, one step of delay), DDG (delayed gradients,\n"
             "M 1) [gpipe]"},
    {ONOFF("vertical-sync", pipe.vertical_sync), is_pipedream, "--pipe-schedule pipedream", AX_STRATEGY,
     .help = "on|off\tpipedream: every stage runs a batch on stage 0's weight\n"
             "version [off]"},
    {FUNC("partition", set_partition), is_staged, "--pp P > 1", AX_STRATEGY,
     .help = "balanced|macs|L0,L1,...\tstages of even measured time (each layer's\n"
             "forward + backward timed first), of even multiply-adds, or\n"
             "the first layer of each (counted after dense+relu fusion)\n"
             "[balanced]"},
    {INT("tp", tensor.ranks, 1, 1024), NULL, NULL, AX_STRATEGY,
     .section = "tensor parallelism (workers = dp x pp x tp; Megatron's split dense layers)",
     .help = "T\tsplit each pair of dense layers (the first by output\n"
             "features, the second by input features) over T adjacent\n"
             "ranks, and on a transformer attention by heads (T must\n"
             "divide them) and the MLP's two linear layers likewise;\n"
             "other layers replicated [1]; with --exchange ps:K\n"
             "each group of T ranks is one worker, its convolutions\n"
             "whole (Project Adam; K a multiple of T)"},
    {WORDS("tp-conv", tensor.conv_data, "split|data", NULL), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY,
     .help = "split|data\tconvolutions split in pairs like dense layers, or data-\n"
             "parallel with the dense layers split over all workers and\n"
             "the batch exchanged between (one weird trick) [split]\n"
             "A model file may choose per layer instead: split=column|\n"
             "row|none|data on its dense and conv2d lines, channels on a\n"
             "conv2d (its shard allgathered for the next layer) (T\n"
             "ranks; with split=data, --tp = the workers: the one weird\n"
             "trick; docs/MODEL_FORMAT.md)"},
    {WORDS("owt-scheme", tensor.owt_scheme, "a|b|c", NULL), is_owt, "--tp-conv data (the one weird trick)", AX_STRATEGY,
     .help = "a|b|c\tthe one weird trick's pass through the split layers\n"
             "(Krizhevsky 2014, sec. 4): a, every worker's batch at once\n"
             "(one step of K x batch); b, one worker's batch at a time,\n"
             "broadcast while the previous one computes, the split\n"
             "layers stepping after each (K steps of batch, the\n"
             "convolutions one of K x batch: the paper's runs); c, a\n"
             "K-th of every worker's batch at a time, as b [b]"},
    {ONOFF("sync-bn", sync_bn), is_sync_dp, "--optimization central --schedule sync --exchange allreduce:ALGO (no pipeline)", AX_STRATEGY,
     .help = "on|off\tbatch norm's statistics over all data-parallel ranks\n"
             "(synchronous allreduce) [off]"},
    {INT("fetch-every", ps.fetch_every, 1, 1 << 20), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY,
     .section = "parameter servers (--exchange ps:K | ps:n)",
     .help = "N --push-every N\tDownpour: pull / push every N steps [1]"},
    {INT("push-every", ps.push_every, 1, 1 << 20), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY, NULL, NULL},
    {FLAG("staleness-lr", ps.staleness_lr, 1), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY,
     .help = "\tdivide each update by its staleness (async)"},
    {INT("drop-stale", ps.drop_stale, 0, 1L << 40), is_downpour, "--exchange ps:K --schedule async (Downpour)", AX_STRATEGY,
     .help = "S\tasync: drop a push more than S updates stale instead of\n"
             "applying it (a delay bound kept by rejection, not waiting)"},
    /* not backup:B: a pull there waits for the next step, which a cut epoch may never take */
    {FUNC("epoch-fraction", set_epoch_fraction), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY,
     .help = "F\tasync, value:V: an epoch ends once F of its\n"
             "batches are pushed; the rest, stragglers' included, are\n"
             "dropped (Project Adam: 0.75) [1]"},
    {WORDS("ps-refresh", ps.refresh_lazy, "lazy|eager", LAZY_EAGER), is_ssp_ps, "--exchange ps:K --schedule ssp:S (S finite)", AX_STRATEGY,
     .help = "eager|lazy\tssp:S: the model every clock (ESSP), or only once the model\n"
             "held is more than S clocks old (Bosen's SSP cache) [eager]"},
    {WORDS("ps-queue", ps.queue_staleness, "fifo|staleness", NULL), is_value_ps, "--exchange ps:K --schedule value:V (the queue of held pushes)",
     AX_STRATEGY,
     .help = "fifo|staleness\tvalue:V: held pushes tried in arrival order, or the\n"
             "least stale first (the taxonomy's priority queue) [fifo]"},
    {FUNC("dc-asgd", set_dc_asgd), is_async_ps, "--exchange ps:K --schedule async or value:V", AX_STRATEGY,
     .help = "LAMBDA | a:LAMBDA0\tdelay-compensated ASGD (async, value:V): g + lambda\n"
             "g*g*(w_now - w_pulled) on the worker's mini-batch gradient;\n"
             "a:LAMBDA0 is DC-ASGD-a, lambda = LAMBDA0 / sqrt(MeanSquare)"},
    {ONOFF("implicit-momentum", ps.implicit_momentum), is_async_ps_sgd,
     "--exchange ps:K --schedule async or value:V with --optimizer sgd", AX_STRATEGY,
     .help = "on|off\tasync, value:V, sgd: --momentum is the total; the\n"
             "servers use --momentum - (1 - 1/N), asynchrony's implicit\n"
             "momentum taken out, negative for large N (Mitliagkas) [off]"},
    {FUNC("kill", set_kill), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "rank=R,at-step=S\tstop worker R at step S (fault injection, local)"},
    {INT("ps-replicas", ps.replicas, 1, 1 << 20), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "R\tcopies of each server shard, chain replicated: a push is\n"
             "acknowledged once the shard's primary and its backup (the\n"
             "next server) hold it; when a server dies its backup takes\n"
             "over (1 or 2, at most K; sync, ssp:S, async) [1]"},
    {WORDS("ps-push", ps.push_factors, "factors|gradients", FACTORS_GRADIENTS), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "gradients|factors\tfactors: each dense layer's push is its sufficient\n"
             "factors, the batch's error terms and inputs (n (in + out)\n"
             "floats), and its server computes dW = dY^T X, db = sum dY\n"
             "(Project Adam); other layers push gradients [gradients]"},
    {INT("ps-server-threads", ps.server_threads, 1, 64), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "T\tthreads applying each update of a server's shard, each\n"
             "its own slice, without locks (Project Adam) [1]"},
    {INT("worker-threads", ps.worker_threads, 1, 64), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "T\tthreads training on each worker, each on its share of\n"
             "the batch, each applying its update to the worker's one\n"
             "weight copy without locks (racy by design); the summed\n"
             "gradient is pushed (Project Adam) [1]"},
    {FUNC("kill-server", set_kill_server), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "index=K,at-push=P\tserver K stops abruptly at its P-th push\n"
             "(fault injection: a thread's end on local, SIGKILL on mpi);\n"
             "index2=J,at-push2=Q added: server J too, at its Q-th; K = 0,\n"
             "the coordinator: with --ps-replicas 2, alone; lose-forwards=N\n"
             "added: K's N pushes before the P-th never reach its backup\n"
             "(with --ps-replicas 2; N below the workers, or P never comes)"},
    {PATH("checkpoint-dir", checkpoint_dir), is_ps, "--exchange ps:K", AX_STRATEGY,
     .help = "DIR\tone checkpoint file per server shard plus a manifest"},
    {INT("tau", decentral.tau, -1000000, 1000000), uses_tau, "--optimization decentral with --exchange allreduce:ALGO or master", AX_STRATEGY,
     .section = "decentralized (--optimization decentral)",
     .help = "T\tlocal steps between merges [1]"},
    {FLT("alpha", decentral.alpha, 0, 1e3), uses_alpha, "--optimization decentral with --exchange master or tree:F (not --schedule soft: MPCA-SGD's pull is --rho)", AX_STRATEGY,
     .help = "X --beta X | --rho X\tEASGD elastic coefficients"},
    {FLT("beta", decentral.beta, 0, 1e3), uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY, NULL, NULL},
    {FLT("rho", decentral.rho, 0, 1e6), uses_elastic, "--optimization decentral with --exchange master or tree:F", AX_STRATEGY,
     .help = "X --beta X --extrapolation G\tMPCA-SGD (--schedule soft --exchange master):\n"
             "each step's gradient gets rho (w - c^), c^ = c + G (c -\n"
             "c_prev) the centre extrapolated one round; every --tau\n"
             "steps a round (tree reduce to the master, broadcast back,\n"
             "overlapping the next tau steps) makes c = (1 - beta) c +\n"
             "beta mean(w) [rho 1, beta 0.9, G 1]"},
    {FLT("extrapolation", decentral.extrapolation, 0, 2), is_mpca, "MPCA-SGD: --optimization decentral --schedule soft --exchange master", AX_STRATEGY, NULL, NULL},
    {FUNC("alpha-decay", set_alpha_decay), is_easgd, "EASGD: --optimization decentral --exchange master with --schedule async or --alpha/--beta/--rho", AX_STRATEGY,
     .help = "G,S[,L]\tEASGD: alpha and beta times G (0 < G <= 1) every S exchanges\n"
             "of a worker, at most L times (DeepSpark's adaptive moving\n"
             "rate) [constant]"},
    {FUNC("tau-up", set_tau_up), uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY,
     .help = "T1,T2,... --tau-down T1,T2,...\tTreeEASGD exchange periods, one a level\n"
             "of the tree from the root (level l: the links between\n"
             "depths l-1 and l): a node at depth l sends its model to its\n"
             "parent every --tau-up Tl steps, to its children every\n"
             "--tau-down T(l+1); deeper levels take the last value, so\n"
             "one value is one period for the whole tree [1]"},
    {FUNC("tau-down", set_tau_down), uses_tree, "--optimization decentral --exchange tree:F", AX_STRATEGY, NULL, NULL},
    {FLT("neighbor-weight", decentral.neighbor_weight, 0, 0.5), is_dpsgd, "--optimization decentral --schedule sync --exchange neighbors", AX_STRATEGY,
     .help = "W\tD-PSGD weight of each ring neighbour [1/3]\n"
             "(--schedule async --exchange neighbors is AD-PSGD: each\n"
             "step an odd rank averages with a random even ring\n"
             "neighbour, 1/2 each, without a barrier)"},
    {PATH("metrics", metrics), NULL, NULL, AX_STRATEGY,
     .section = "files and output",
     .help = "FILE.jsonl\tone JSON object per epoch and a final 'done' line"},
    {ONOFF("metrics-append", metrics_append), has_metrics, "--metrics FILE", AX_STRATEGY,
     .help = "on|off\tcontinue --metrics after what it holds, as --resume does,\n"
             "instead of starting it anew (dtrain launch's restarts from\n"
             "the start, after their restart record) [off]"},
    {PATH("checkpoint", checkpoint), NULL, NULL, AX_STRATEGY,
     .help = "FILE\tsafetensors checkpoint, written atomically after every epoch"},
    {INT("checkpoint-every", checkpoint_every, 1, 1L << 50), is_sync_dp,
     "synchronous data parallelism (--exchange allreduce:ALGO --schedule sync, no --pp)", AX_STRATEGY,
     .help = "STEPS\t--checkpoint also every STEPS global steps, mid-epoch: a\n"
             "resume (on any number of workers) continues at that step,\n"
             "the same samples in the same order (dtrain launch) [off]"},
    {PATH("resume", resume), NULL, NULL, AX_STRATEGY,
     .help = "FILE\tcontinue from a checkpoint up to --epochs"},
    {FLAG("quiet", progress, 0), NULL, NULL, AX_STRATEGY,
     .help = "\tno live progress line"},
    {PATH("trace", trace), NULL, NULL, AX_STRATEGY,
     .help = "FILE.json\ta timeline of every rank in the Chrome trace-event format\n"
             "(Perfetto, chrome://tracing): compute per layer, each\n"
             "collective, waits, parameter-server pushes and pulls,\n"
             "optimizer steps, evaluation; one clock (a barrier at start)"},
    {FUNC("trace-steps", set_trace_steps), is_traced, "--trace FILE.json", AX_STRATEGY,
     .help = "A:B\ttrace global steps A to B-1 only [all]"},
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

/* "index=1,at-push=40" or "index=1,at-push=40,index2=2,at-push2=90", and
 * ",lose-forwards=3" */
static int set_kill_server(void *cv, const char *val, void *st) {
  train_config_t *c = cv;
  static const char *const keys[] = {"index", "at-push", "index2", "at-push2", "lose-forwards"};
  const char *v[5];
  char buf[160];
  long k, p, k2 = -1, p2 = 0, lose = 0;
  DT_TRY(parse_items("kill-server", val, "index=1,at-push=40", buf, sizeof buf, keys, 5, v));
  if (!v[0] || !v[1]) return dt_error("option --kill-server: needs index=K,at-push=P (both)");
  if (!v[2] != !v[3]) return dt_error("option --kill-server: index2=J needs at-push2=Q (both, or neither)");
  DT_TRY(parse_int("kill-server index", v[0], 0, MAX_WORKERS - 1, &k));
  DT_TRY(parse_int("kill-server at-push", v[1], 1, 1L << 50, &p));
  if (v[2]) DT_TRY(parse_int("kill-server index2", v[2], 0, MAX_WORKERS - 1, &k2));
  if (v[3]) DT_TRY(parse_int("kill-server at-push2", v[3], 1, 1L << 50, &p2));
  if (v[4]) DT_TRY(parse_int("kill-server lose-forwards", v[4], 1, 1L << 50, &lose));
  if (lose >= p)
    return dt_error("option --kill-server: lose-forwards=%ld: the pushes before at-push=%ld are "
                    "%ld; lose fewer", lose, p, p - 1);
  if (k2 == k) return dt_error("option --kill-server: index2=%ld is index=%ld: name another server", k2, k);
  c->ps.kill_server = (int)k;
  c->ps.kill_server_at = p;
  c->ps.kill_server_lose = lose;
  c->ps.kill_server2 = (int)k2;
  c->ps.kill_server2_at = p2;
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

static int set_sparse_collective(void *c, const char *val, void *st) {
  sparse_coll_t a;
  if (sparse_coll_parse(val, &a) != 0) return -1;
  ((train_config_t *)c)->compression.sparse_collective = (int)a;
  return 0;
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

/* --help's option lines, from the rows: a heading where a row starts a
 * section, then "  --name METAVAR" with the description at column 28 and
 * its further lines under it. */
#define HELP_COLUMN 28
static void print_help_line(FILE *out, const char *line, size_t len, int indent_left) {
  const char *tab = memchr(line, '\t', len);
  if (!tab) {
    fprintf(out, "%*s%.*s\n", HELP_COLUMN, "", (int)len, line);
    return;
  }
  int left = fprintf(out, "%*s%.*s", indent_left, "", (int)(tab - line), line);
  int pad = left < HELP_COLUMN ? HELP_COLUMN - left : 3;
  size_t rest = len - (size_t)(tab + 1 - line);
  fprintf(out, "%*s%.*s\n", rest ? pad : 0, "", (int)rest, tab + 1);
}

void train_options_help(FILE *out) {
  for (int k = 0; k < NOPTIONS; k++) {
    const option_t *o = &OPTIONS[k];
    if (o->section) fprintf(out, "%s%s:\n", k ? "\n" : "", o->section);
    if (!o->help) continue;
    const char *line = o->help, *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char first[160]; /* "--name METAVAR\tdescription" ("--name\t..." for a flag) */
    snprintf(first, sizeof first, "--%s%s%.*s", o->opt.name, line[0] == '\t' ? "" : " ", (int)len,
             line);
    print_help_line(out, first, strlen(first), 2);
    for (line = nl ? nl + 1 : NULL; line; line = nl ? nl + 1 : NULL) {
      nl = strchr(line, '\n');
      print_help_line(out, line, nl ? (size_t)(nl - line) : strlen(line), 6);
    }
  }
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
