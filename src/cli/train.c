/* dtrain train: options -> train_config_t (train_options_parse,
 * src/strategy/options.c) -> train_run. Exit 2 on a usage error, 1 when the
 * run fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dtrain/train.h"

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
    "  --precision fp32|bf16     bf16: every product's operands rounded to bfloat16, fp32\n"
    "                            accumulation and results (oneDNN on AVX512_BF16 or AMX);\n"
    "                            parameters, optimizer state, activations between layers\n"
    "                            and the loss stay fp32; refused on a CPU without bf16 [fp32]\n"
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
    "  --preset NAME             fill the axes from a named system (at most one); the other\n"
    "                            options override the preset's, wherever they stand\n"
    "  --workers N               workers (ranks) on --comm local [1]\n"
    "  --comm local|mpi          transport: threads in this process, or MPI processes [local]\n"
    "  --optimization central|decentral   [central]\n"
    "  --schedule sync|async|ssp:S|value:V|backup:B   [sync]\n"
    "  --exchange allreduce:ring|rhd|tree|naive|hier|shm|auto|ps:K|...\n"
    "                            [shared with --comm local, --schedule sync and 2+ workers,\n"
    "                            where no option given needs allreduce (--bucket-mb,\n"
    "                            --overlap, --comm-order, --shard-optimizer, --net, a\n"
    "                            pipeline, lars): the fastest one-machine path; otherwise\n"
    "                            allreduce:auto, which picks ring, rhd, tree or hier by\n"
    "                            size, ranks and link (docs/COLLECTIVES.md)]\n"
    "                            allreduce:shm: one pass over the ranks' buffers in shared\n"
    "                            memory (--comm local, no --net)\n"
    "                            allreduce:hier: by host (reduce-scatter inside a host,\n"
    "                            allreduce across hosts, allgather); auto picks it when the\n"
    "                            ranks are on >1 host with >=2 each (mpi: the nodes MPI finds;\n"
    "                            local: --net hosts=)\n"
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
    "  --net latency=50us,bandwidth=1Gbit   emulated network on --comm local; either key\n"
    "                            or both; latency 0 to 10 s, bandwidth 1 kbit/s to 10 Tbit/s\n"
    "      hosts=N | hosts=A+B+...   the ranks (servers too) on N hosts, consecutive and as\n"
    "                            even as possible, or A, B, ... ranks on each; latency and\n"
    "                            bandwidth are then the links between hosts, and\n"
    "      intra-latency=TIME,intra-bandwidth=RATE   the links within a host (need hosts;\n"
    "                            default: not delayed). Each rank has its own link of each kind.\n"
    "                            e.g. --net hosts=2,intra-bandwidth=10Gbit,intra-latency=5us,\n"
    "                                       bandwidth=1Gbit,latency=50us\n"
    "  --straggler rank=R,slowdown=F        slow down one rank's compute F times (1..1000)\n"
    "  --comm-timeout SEC        a rank waiting longer than this on a peer fails [300]\n"
    "\npipeline parallelism (workers = dp x pp; a stage per rank, --batch per replica):\n"
    "  --pp P                    pipeline stages, each a range of layers [1]\n"
    "  --micro-batches M         micro-batches of batch/M samples per step [1]\n"
    "  --pipe-schedule gpipe|1f1b  all forwards then all backwards (GPipe), or one forward\n"
    "                            one backward (PipeDream-Flush) [gpipe]\n"
    "  --partition balanced|macs|L0,L1,...  stages of even measured time (each layer's\n"
    "                            forward + backward timed first), of even multiply-adds, or\n"
    "                            the first layer of each (counted after dense+relu fusion)\n"
    "                            [balanced]\n"
    "\n"
    "parameter servers (--exchange ps:K | ps:n):\n"
    "  --fetch-every N --push-every N   Downpour: pull / push every N steps [1]\n"
    "  --staleness-lr            divide each update by its staleness (async)\n"
    "  --drop-stale S            async: drop a push more than S updates stale instead of\n"
    "                            applying it (a delay bound kept by rejection, not waiting)\n"
    "  --dc-asgd LAMBDA | a:LAMBDA0   delay-compensated ASGD (async, value:V): g + lambda\n"
    "                            g*g*(w_now - w_pulled) on the worker's mini-batch gradient;\n"
    "                            a:LAMBDA0 is DC-ASGD-a, lambda = LAMBDA0 / sqrt(MeanSquare)\n"
    "  --implicit-momentum on|off   async, value:V, sgd: --momentum is the total; the\n"
    "                            servers use --momentum - (1 - 1/N), asynchrony's implicit\n"
    "                            momentum taken out, negative for large N (Mitliagkas) [off]\n"
    "  --kill rank=R,at-step=S   stop worker R at step S (fault injection, local)\n"
    "  --checkpoint-dir DIR      one checkpoint file per server shard plus a manifest\n"
    "\n"
    "decentralized (--optimization decentral):\n"
    "  --tau T                   local steps between merges [1]\n"
    "  --alpha X --beta X | --rho X   EASGD elastic coefficients\n"
    "  --tau-up T1,T2,... --tau-down T1,T2,...   TreeEASGD exchange periods, one a level\n"
    "                            of the tree from the root (level l: the links between\n"
    "                            depths l-1 and l): a node at depth l sends its model to its\n"
    "                            parent every --tau-up Tl steps, to its children every\n"
    "                            --tau-down T(l+1); deeper levels take the last value, so\n"
    "                            one value is one period for the whole tree [1]\n"
    "  --neighbor-weight W       D-PSGD weight of each ring neighbour [1/3]\n"
    "\n"
    "files and output:\n"
    "  --metrics FILE.jsonl      one JSON object per epoch and a final 'done' line\n"
    "  --checkpoint FILE         safetensors checkpoint, written atomically after every epoch\n"
    "  --resume FILE             continue from a checkpoint up to --epochs\n"
    "  --quiet                   no live progress line\n"
    "\n"
    "rules:\n"
    "  Every option takes one value (--opt VALUE or --opt=VALUE), except the flags\n"
    "  --nesterov, --staleness-lr and --quiet; an empty value is refused. A later\n"
    "  option overrides an earlier one. key=value lists (--net, --straggler, --kill)\n"
    "  name each key once. An option that the resulting configuration does not use\n"
    "  (--tau under --optimization central, --fetch-every outside --exchange ps:K,\n"
    "  --beta1 without --optimizer adam, ...) is refused, naming the settings that use\n"
    "  it; the options a preset sets for itself are exempt. Usage errors exit with\n"
    "  status 2, failures of the run with 1.\n"
    "\n"
    "examples:\n"
    "  dtrain train --model lenet --epochs 3 --lr 0.05 --momentum 0.9 --lr-schedule cosine\n"
    "  dtrain train --workers 2 --preset pytorch-ddp --epochs 2\n"
    "  mpirun -np 4 dtrain train --comm mpi --exchange allreduce:ring\n";

int cmd_train(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(TRAIN_HELP, stdout);
      cli_describe_kernels(stdout);
      return 0;
    }
  kern_set_threads(1); /* before any BLAS call: idle pool threads must not spin */
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0 || train_check_outputs(&cfg) != 0) {
    fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
    return 2;
  }
  dt_catch_interrupts();
  if (train_run(&cfg, &argc, &argv) != 0) {
    fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
    return dt_interrupted() ? 128 + dt_interrupted() : 1;
  }
  return 0;
}
