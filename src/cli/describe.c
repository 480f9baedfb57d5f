/* dtrain describe: the step a training configuration would run, as data
 * (train_describe_step), without running it. Takes train's options. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dtrain/train.h"

static const char *DESCRIBE_HELP =
    "usage: dtrain describe [TRAIN OPTIONS]\n"
    "\n"
    "Prints, as one JSON object, the step that 'dtrain train' with the same options would\n"
    "run: the strategy, each rank's bytes sent and received per step (what the transport\n"
    "counts), and the step's tasks -- each layer's forward and backward, the optimizer's\n"
    "update, every message and collective with its pattern, bytes, and the task it waits\n"
    "for. Nothing is trained; the data set is read for its shapes.\n"
    "\n"
    "Described so far: synchronous data parallelism (--exchange allreduce:ring|rhd|tree|\n"
    "naive|shm, and auto on 2 ranks) with --tp, --sync-bn, --balance and --comm-order\n"
    "priority, without --compress; the one weird trick (--tp-conv data); model averaging\n"
    "(local SGD, SparkNet), D-PSGD and EASGD (sync, async) without --compress;\n"
    "synchronous pipelines (gpipe, 1f1b, interleaved, with replicas and --tp;\n"
    "--partition macs or given) without --compress. Other strategies say so.\n";

int cmd_describe(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(DESCRIBE_HELP, stdout);
      return 0;
    }
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain describe: %s\n", dt_errmsg());
    return 2;
  }
  if (train_describe_step(&cfg, stdout) != 0) {
    fprintf(stderr, "dtrain describe: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
