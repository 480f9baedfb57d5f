/* dtrain plan: the performance model (src/perf/). --predict [train
 * options]: the step `dtrain train` with the same options would run,
 * predicted, as one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "perf/perf.h"

static const char *PLAN_HELP =
    "usage: dtrain plan --predict [--profile FILE] [TRAIN OPTIONS]\n"
    "\n"
    "--predict prints one JSON line for exactly what 'dtrain train' with the same options\n"
    "would run: {\"event\":\"plan\",\"step_sec\":..,\"samples_per_sec\":..,\"epoch_sec\":..,\n"
    "\"bytes_sent_per_step\":..,\"memory_bytes\":..}. The step is the strategy's own\n"
    "description (dtrain describe), simulated as a task graph: each layer's forward and\n"
    "backward timed here at the sizes the step runs, the ranks sharing this machine's\n"
    "cores, messages and collectives on the links of --net (the emulator's model),\n"
    "--straggler slowing its rank. bytes_sent_per_step is rank 0's, as a run's metrics\n"
    "count it. Nothing is trained; the data set is read for its shapes.\n"
    "\n"
    "  --profile FILE   the transport's alpha and beta from a calibration profile\n"
    "                   (without: the transports' own estimates); one taken on another\n"
    "                   CPU or with other kernels is refused (exit 2) unless --force\n";

/* Takes plan's own options out of argv (in place); the rest are train's. */
static int plan_args(int *argc, char **argv, int *predict, int *force, const char **profile) {
  int n = 1;
  for (int i = 1; i < *argc; i++) {
    if (!strcmp(argv[i], "--predict")) *predict = 1;
    else if (!strcmp(argv[i], "--force")) *force = 1;
    else if (!strncmp(argv[i], "--profile=", 10)) *profile = argv[i] + 10;
    else if (!strcmp(argv[i], "--profile")) {
      if (i + 1 >= *argc || !argv[i + 1][0]) {
        fprintf(stderr, "dtrain plan: option --profile needs a file (--profile PROFILE.json)\n");
        return -1;
      }
      *profile = argv[++i];
    } else argv[n++] = argv[i];
  }
  *argc = n;
  return 0;
}

int cmd_plan(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(PLAN_HELP, stdout);
      return 0;
    }
  int predict = 0, force = 0;
  const char *profile = NULL;
  if (plan_args(&argc, argv, &predict, &force, &profile) != 0) return 2;
  if (!predict) {
    fprintf(stderr, "dtrain plan: give --predict [train options] (dtrain plan --help)\n");
    return 2;
  }
  perf_profile_t prof;
  perf_profile_default(&prof);
  if (profile && perf_profile_load(profile, force, &prof) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  kern_set_threads(1); /* before any BLAS call, as train */
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  if (perf_predict(&cfg, &prof, stdout) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
