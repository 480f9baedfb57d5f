/* dtrain: entry point and subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "dtrain/core.h"

static void usage(FILE *f) {
  fputs("usage: dtrain COMMAND [OPTIONS]\n"
        "\n"
        "commands:\n"
        "  train     train a model (dtrain train --help)\n"
        "  bench     benchmarks: allreduce (dtrain bench allreduce --help)\n"
        "  presets   list the named systems and the taxonomy axes they set\n"
        "  compare   run several presets on one task, write a report (dtrain compare --help)\n"
        "  describe  the step a configuration runs, as data: bytes per rank, tasks\n"
        "  launch    run train and restart it from its checkpoint when a rank is lost\n"
        "            (elastic; dtrain launch --help)\n"
        "\n"
        "Run 'dtrain COMMAND --help' for the options of a command.\n",
        f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "train") || !strcmp(cmd, "bench")) cli_settle_kernels(argv);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "presets")) return cmd_presets(argc - 1, argv + 1);
  if (!strcmp(cmd, "compare")) return cmd_compare(argc - 1, argv + 1);
  if (!strcmp(cmd, "describe")) return cmd_describe(argc - 1, argv + 1);
  if (!strcmp(cmd, "launch")) return cmd_launch(argc - 1, argv + 1);
  fprintf(stderr, "dtrain: unknown command '%s' (expected train, bench, presets, compare, describe or launch)\n", cmd);
  return 2;
}
