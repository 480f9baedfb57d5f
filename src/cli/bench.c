/* dtrain bench KIND: dispatch to the benchmark of that kind. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs("usage: dtrain bench allreduce [OPTIONS]\n"
          "  allreduce   time every allreduce algorithm from 4 KiB to 64 MiB\n"
          "Run 'dtrain bench KIND --help' for its options.\n",
          argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "allreduce")) return cmd_bench_allreduce(argc - 1, argv + 1);
  fprintf(stderr, "dtrain bench: unknown benchmark '%s' (expected allreduce)\n", argv[1]);
  return 2;
}
