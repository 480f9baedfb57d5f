/* dtrain train: options -> train_config_t (train_options_parse,
 * src/strategy/options.c) -> train_run. Exit 2 on a usage error, 1 when the
 * run fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dtrain/train.h"

static const char *TRAIN_USAGE =
    "usage: dtrain train [OPTIONS]\n"
    "\n"
    "Trains a model; prints one line per epoch, writes metrics as JSON Lines.\n"
    "\n";

/* the option lines come from the options' own rows (train_options_help) */
static const char *TRAIN_RULES =
    "\n"
    "rules:\n"
    "  Every option takes one value (--opt VALUE or --opt=VALUE), except the flags\n"
    "  --nesterov, --staleness-lr and --quiet; an empty value is refused; on|off\n"
    "  switches take on or off. A later\n"
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
      fputs(TRAIN_USAGE, stdout);
      train_options_help(stdout);
      fputs(TRAIN_RULES, stdout);
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
  dt_catch_rank_signal();
  int rc = train_run(&cfg, &argc, &argv);
  if (rc != 0) {
    fprintf(stderr, "dtrain train: %s\n", dt_errmsg());
    if (rc == TRAIN_REFUSED) return 2;
    return dt_interrupted() ? 128 + dt_interrupted() : 1;
  }
  return 0;
}
