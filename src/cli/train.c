/* dtrain train: options -> train_config_t -> train_run. A preset's options
 * are applied first, then the user's, so explicit options override it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dtrain/dist.h"

static const char *TRAIN_HELP =
    "usage: dtrain train [OPTIONS]\n"
    "\n"
    "Trains a model; prints one line per epoch, writes metrics as JSON Lines.\n"
    "\n"
    "what to train:\n"
    "  --model mlp|lenet|FILE    built-in model or a model file (docs/MODEL_FORMAT.md) [mlp]\n"
    "  --data fashion-mnist|synthetic|DIR   data set [fashion-mnist]\n"
    "  --epochs N                epochs in total (with --resume: up to N) [1]\n"
    "  --batch N                 batch size per worker [64]\n"
    "  --seed N                  seed of initialisation, shuffling, dropout [1]\n"
    "  --threads N               BLAS threads per worker [1]\n"
    "  --max-steps N             stop after N optimizer steps in total (smoke tests)\n"
    "  --max-loss X              a mean train or test loss above X (or NaN) stops the run as\n"
    "                            diverged, keeping the last good checkpoint [1e4]\n"
    "\n"
    "optimizer:\n"
    "  --optimizer sgd|adam|rmsprop|lars   [sgd]\n"
    "  --lr X                    base learning rate [0.05]\n"
    "  --momentum X              momentum (sgd, rmsprop, lars) [0]\n"
    "  --nesterov                Nesterov momentum (sgd)\n"
    "  --weight-decay X          L2 weight decay [0]\n"
    "  --beta1 X --beta2 X --eps X   Adam / RMSProp constants\n"
    "  --lr-schedule constant|step|cosine   per-step schedule; cosine decays to 0 [constant]\n"
    "  --warmup-epochs X         linear warm-up length [0]\n"
    "  --lr-step-epochs X --lr-gamma X   step schedule: multiply by gamma every X epochs [1, 0.1]\n"
    "\n"
    "distribution (the taxonomy axes; see 'dtrain presets'):\n"
    "  --preset NAME             fill the axes from a named system; later options override\n"
    "  --workers N               workers (ranks) on --comm local [1]\n"
    "  --comm local|mpi          transport: threads in this process, or MPI processes [local]\n"
    "  --optimization central|decentral   [central]\n"
    "  --schedule sync|async|ssp:S|value:V|backup:B   [sync]\n"
    "  --exchange allreduce:ring|rhd|tree|naive|hier|shm|auto|ps:K|...   [allreduce:auto]\n"
    "                            allreduce:shm: one pass over the ranks' buffers in shared\n"
    "                            memory (--comm local, no --net)\n"
    "                            shared: one machine's shared memory (--comm local); with\n"
    "                            --schedule sync a sharded optimizer, with async Hogwild\n"
    "  --bucket-mb X             gradient bucket size; 0 = one bucket per layer [25]\n"
    "  --overlap on|off          start bucket allreduces during backprop [on]\n"
    "  --comm-order fifo|priority  fifo: buckets' allreduces in the order backprop readies\n"
    "                            them; priority: the first layers' first, each bucket's\n"
    "                            update applied as the next forward pass reaches it\n"
    "                            (ByteScheduler, P3) [fifo]\n"
    "  --partition-kb N          priority: buckets go out in parts of at most N KiB [1024]\n"
    "  --shard-optimizer on|off  allreduce:ring: each rank steps 1/N of the parameters with\n"
    "                            1/N of the optimizer work (ZeRO stage 1) [off]\n"
    "  --balance on|off          split each synchronous step's batch by the ranks' measured\n"
    "                            speed (same global batch; not bitwise repeatable) [off]\n"
    "  --net latency=50us,bandwidth=1Gbit   emulated network on --comm local\n"
    "  --straggler rank=R,slowdown=F        slow down one rank's compute F times\n"
    "  --comm-timeout SEC        a rank waiting longer than this on a peer fails [300]\n"
    "\n"
    "parameter servers (--exchange ps:K | ps:n):\n"
    "  --fetch-every N --push-every N   Downpour: pull / push every N steps [1]\n"
    "  --staleness-lr            divide each update by its staleness (async)\n"
    "  --dc-asgd LAMBDA          delay-compensated ASGD (async)\n"
    "  --kill rank=R,at-step=S   stop worker R at step S (fault injection, local)\n"
    "  --checkpoint-dir DIR      one checkpoint file per server shard plus a manifest\n"
    "\n"
    "decentralized (--optimization decentral):\n"
    "  --tau T                   local steps between merges [1]\n"
    "  --alpha X --beta X | --rho X   EASGD elastic coefficients\n"
    "  --tau-up T --tau-down T   TreeEASGD exchange periods\n"
    "  --neighbor-weight W       D-PSGD weight of each ring neighbour [1/3]\n"
    "\n"
    "files and output:\n"
    "  --metrics FILE.jsonl      one JSON object per epoch and a final 'done' line\n"
    "  --checkpoint FILE         safetensors checkpoint, written atomically after every epoch\n"
    "  --resume FILE             continue from a checkpoint up to --epochs\n"
    "  --quiet                   no live progress line\n"
    "\n"
    "examples:\n"
    "  dtrain train --model lenet --epochs 3 --lr 0.05 --momentum 0.9 --lr-schedule cosine\n"
    "  dtrain train --workers 2 --preset pytorch-ddp --epochs 2\n"
    "  mpirun -np 4 dtrain train --comm mpi --exchange allreduce:ring\n";

typedef struct {
  train_config_t *cfg;
  int saw_optimizer_constants;
} parse_state_t;

static int copy_path(const char *opt, const char *val, char *dst, size_t cap) {
  if (strlen(val) >= cap) return dt_error("option --%s: path too long (max %zu)", opt, cap - 1);
  strcpy(dst, val);
  return 0;
}

static int parse_onoff(const char *opt, const char *val, int *out) {
  if (!strcmp(val, "on") || !strcmp(val, "1") || !strcmp(val, "true")) *out = 1;
  else if (!strcmp(val, "off") || !strcmp(val, "0") || !strcmp(val, "false")) *out = 0;
  else return dt_error("option --%s: '%s' (expected on or off)", opt, val);
  return 0;
}

/* "latency=50us,bandwidth=1Gbit" */
static int parse_net(const char *val, train_config_t *c) {
  char buf[256];
  if (strlen(val) >= sizeof buf) return dt_error("option --net: value too long");
  strcpy(buf, val);
  char *save = NULL;
  for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return dt_error("option --net: '%s' is not key=value (latency=50us,bandwidth=1Gbit)", kv);
    *eq = 0;
    if (!strcmp(kv, "latency")) {
      if (parse_duration("net latency", eq + 1, &c->net_latency) != 0) return -1;
    } else if (!strcmp(kv, "bandwidth")) {
      if (parse_bandwidth("net bandwidth", eq + 1, &c->net_bandwidth) != 0) return -1;
    } else {
      return dt_error("option --net: unknown key '%s' (expected latency, bandwidth)", kv);
    }
  }
  return 0;
}

/* "rank=2,slowdown=3" */
static int parse_straggler(const char *val, train_config_t *c) {
  char buf[128];
  long r = -1;
  double f = 0;
  if (strlen(val) >= sizeof buf) return dt_error("option --straggler: value too long");
  strcpy(buf, val);
  char *save = NULL;
  for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) return dt_error("option --straggler: '%s' is not key=value (rank=2,slowdown=3)", kv);
    *eq = 0;
    if (!strcmp(kv, "rank")) {
      if (parse_int("straggler rank", eq + 1, 0, 1 << 20, &r) != 0) return -1;
    } else if (!strcmp(kv, "slowdown")) {
      if (parse_float("straggler slowdown", eq + 1, 1, 1000, &f) != 0) return -1;
    } else {
      return dt_error("option --straggler: unknown key '%s' (expected rank, slowdown)", kv);
    }
  }
  if (r < 0 || f == 0) return dt_error("option --straggler: needs rank=R,slowdown=F");
  c->straggler_rank = (int)r;
  c->straggler_slowdown = f;
  return 0;
}

/* "rank=3,at-step=200" */
static int parse_kill(const char *val, train_config_t *c) {
  long r = -1, s = -1;
  if (sscanf(val, "rank=%ld,at-step=%ld", &r, &s) != 2 || r < 0 || s < 0)
    return dt_error("option --kill: '%s' (expected rank=R,at-step=S)", val);
  c->kill_rank = (int)r;
  c->kill_step = s;
  return 0;
}

/* Applies one option. *used tells whether it consumed val. */
static int apply_option(parse_state_t *st, const char *name, const char *val, int *used) {
  train_config_t *c = st->cfg;
  long iv;
  double fv;
  *used = 1;
#define NEED_VAL \
  if (!val) return dt_error("option --%s: missing value", name)
  if (!strcmp(name, "nesterov")) {
    c->optim.nesterov = 1;
    *used = 0;
    return 0;
  }
  if (!strcmp(name, "quiet")) {
    c->progress = 0;
    *used = 0;
    return 0;
  }
  if (!strcmp(name, "staleness-lr")) {
    c->staleness_lr = 1;
    *used = 0;
    return 0;
  }
  NEED_VAL;
  if (!strcmp(name, "model")) return copy_path(name, val, c->model, sizeof c->model);
  if (!strcmp(name, "data")) return copy_path(name, val, c->data, sizeof c->data);
  if (!strcmp(name, "metrics")) return copy_path(name, val, c->metrics, sizeof c->metrics);
  if (!strcmp(name, "checkpoint")) return copy_path(name, val, c->checkpoint, sizeof c->checkpoint);
  if (!strcmp(name, "resume")) return copy_path(name, val, c->resume, sizeof c->resume);
  if (!strcmp(name, "epochs")) return parse_int(name, val, 1, 1000000, &iv) ? -1 : (c->epochs = (int)iv, 0);
  if (!strcmp(name, "batch")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->batch = (int)iv, 0);
  if (!strcmp(name, "workers")) return parse_int(name, val, 1, 4096, &iv) ? -1 : (c->workers = (int)iv, 0);
  if (!strcmp(name, "threads")) return parse_int(name, val, 1, 256, &iv) ? -1 : (c->threads = (int)iv, 0);
  if (!strcmp(name, "seed")) return parse_int(name, val, 0, 1L << 62, &iv) ? -1 : (c->seed = (uint64_t)iv, 0);
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
  if (!strcmp(name, "exchange")) return exchange_parse(val, c);
  if (!strcmp(name, "bucket-mb")) return parse_megabytes(name, val, &c->bucket_bytes);
  if (!strcmp(name, "overlap")) return parse_onoff(name, val, &c->overlap);
  if (!strcmp(name, "comm-order")) {
    if (!strcmp(val, "fifo")) c->comm_order = COLL_ORDER_FIFO;
    else if (!strcmp(val, "priority")) c->comm_order = COLL_ORDER_PRIORITY;
    else return dt_error("option --comm-order: '%s' (expected fifo or priority)", val);
    return 0;
  }
  if (!strcmp(name, "partition-kb"))
    return parse_int(name, val, 1, 1 << 22, &iv) ? -1 : (c->partition_bytes = (size_t)iv << 10, 0);
  if (!strcmp(name, "shard-optimizer")) return parse_onoff(name, val, &c->shard_optimizer);
  if (!strcmp(name, "balance")) return parse_onoff(name, val, &c->balance);
  if (!strcmp(name, "net")) return parse_net(val, c);
  if (!strcmp(name, "straggler")) return parse_straggler(val, c);
  if (!strcmp(name, "comm-timeout")) return parse_float(name, val, 0.001, 1e6, &c->net.timeout);
  if (!strcmp(name, "fetch-every")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->fetch_every = (int)iv, 0);
  if (!strcmp(name, "push-every")) return parse_int(name, val, 1, 1 << 20, &iv) ? -1 : (c->push_every = (int)iv, 0);
  if (!strcmp(name, "dc-asgd")) return parse_float(name, val, 0, 1e3, &c->dc_asgd);
  if (!strcmp(name, "kill")) return parse_kill(val, c);
  if (!strcmp(name, "checkpoint-dir")) return copy_path(name, val, c->checkpoint_dir, sizeof c->checkpoint_dir);
  if (!strcmp(name, "tau")) return parse_int(name, val, -1000000, 1000000, &iv) ? -1 : (c->tau = (int)iv, 0);
  if (!strcmp(name, "tau-up")) return parse_int(name, val, 1, 1000000, &iv) ? -1 : (c->tau_up = (int)iv, 0);
  if (!strcmp(name, "tau-down")) return parse_int(name, val, 1, 1000000, &iv) ? -1 : (c->tau_down = (int)iv, 0);
  if (!strcmp(name, "alpha")) return parse_float(name, val, 0, 1e3, &c->alpha);
  if (!strcmp(name, "beta")) return parse_float(name, val, 0, 1e3, &c->beta);
  if (!strcmp(name, "rho")) return parse_float(name, val, 0, 1e6, &c->rho);
  if (!strcmp(name, "neighbor-weight")) return parse_float(name, val, 0, 0.5, &c->neighbor_weight);
  if (!strcmp(name, "preset")) return 0; /* applied before the loop */
#undef NEED_VAL
  return dt_error("unknown option --%s (see dtrain train --help)", name);
}

/* Parses argv[1..argc) into cfg; returns -1 with the error set. */
static int parse_args(parse_state_t *st, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) return dt_error("unexpected argument '%s' (options start with --)", a);
    char name[64];
    const char *eq = strchr(a, '='), *val;
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    if (n >= sizeof name) return dt_error("unknown option %s", a);
    memcpy(name, a + 2, n);
    name[n] = 0;
    val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
    if (!strcmp(name, "momentum") || !strcmp(name, "weight-decay") || !strcmp(name, "nesterov"))
      st->saw_optimizer_constants = 1;
    int used;
    if (apply_option(st, name, val, &used) != 0) return -1;
    if (used && !eq) i++;
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
  return parse_args(st, n, words) == 0 ? 0 : dt_error_prefix("preset %s: ", name);
}

static const char *find_preset(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--preset=", 9)) return argv[i] + 9;
    if (!strcmp(argv[i], "--preset") && i + 1 < argc) return argv[i + 1];
  }
  return NULL;
}

int cmd_train(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(TRAIN_HELP, stdout);
      return 0;
    }
  kern_set_threads(1); /* before any BLAS call: idle pool threads must not spin */
  train_config_t cfg;
  train_config_default(&cfg);
  parse_state_t st = {&cfg, 0};
  const char *preset = find_preset(argc, argv);
  if ((preset && apply_preset(&st, preset) != 0) || parse_args(&st, argc, argv) != 0 ||
      train_config_check(&cfg) != 0 || train_check_outputs(&cfg) != 0) {
    fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
    return 2;
  }
  if (train_run(&cfg, &argc, &argv) != 0) {
    fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
