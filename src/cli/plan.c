/* dtrain plan: the performance model (src/perf/). --predict [train
 * options]: the step `dtrain train` with the same options would run,
 * predicted, as one JSON line; --calibrate --out FILE: the transports'
 * costs measured here, as a profile --predict takes (--profile FILE). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dtrain/opt.h"
#include "perf/perf.h"

static const char *PLAN_HELP =
    "usage: dtrain plan --predict [--load X] [--profile FILE [--force]] [TRAIN OPTIONS]\n"
    "       dtrain plan [--memory-per-rank MB] [--json FILE] [--explain] [--load X] [--profile FILE]\n"
    "                   TRAIN OPTIONS\n"
    "       dtrain plan --calibrate --out PROFILE.json [--quick]\n"
    "       mpirun -np 2 dtrain plan --calibrate --comm mpi --out PROFILE.json [--quick]\n"
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
    "Without --predict, the search: each candidate strategy (allreduce ring, rhd, tree,\n"
    "buckets of 25 MB, 1 MB and one a layer; shared memory; ps:1, ps:2 sync, ssp:2 and async;\n"
    "local SGD at tau 4 and 8; D-PSGD; EASGD; GPipe, 1F1B and interleaved at 4 and 8\n"
    "micro-batches, stages cut by PipeDream's dynamic program (--partition balanced);\n"
    "tensor; the data x pipeline x tensor grids that divide --workers) appended to the\n"
    "train options, predicted, and ranked by samples/s, with each step's exposed\n"
    "communication and idle time (bubble or waiting); a candidate the options refuse, or\n"
    "the model does not cover, says why; one over --memory-per-rank MB says by how much.\n"
    "Asynchronous candidates are expected values, with Yan et al.'s best and worst step and\n"
    "the expected staleness. Codecs follow in a table of their own, each with the test\n"
    "accuracy it cost in dtrain's measurements. --explain: the best three candidates' step\n"
    "split into compute, exposed communication and bubble or waiting. --json FILE: a line\n"
    "a candidate.\n"
    "\n"
    "--calibrate measures the transports' own alpha and beta here (the ring allreduce\n"
    "from 4 KiB to 64 MiB; --quick: to 1 MiB) on local, and under mpirun with --comm mpi\n"
    "on mpi as well, and writes them with this CPU and kernels to --out; each fit is a\n"
    "JSON line on stdout (its points and largest relative error).\n"
    "\n"
    "  --load X         the other processes' threads to assume running on this machine's\n"
    "                   cores (X >= 0; without: the one-minute load average now, less one),\n"
    "                   so that plans made at different moments share one assumption\n"
    "  --profile FILE   the transports' costs from a calibration profile (without: their\n"
    "                   own estimates); one taken on another CPU or with other kernels\n"
    "                   is refused (exit 2) unless --force\n";

typedef struct {
  int predict, calibrate, quick, force, mpi, explain;
  const char *profile, *out, *json;
  size_t memory;             /* --memory-per-rank, bytes (0: no limit) */
  double load;               /* --load (-1: measured) */
} plan_opts_t;

static int set_profile(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->profile = v, 0; }
static int set_out(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->out = v, 0; }
static int set_json(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->json = v, 0; }
static int set_load(void *o, const char *v, void *ctx) {
  double x;
  DT_TRY(parse_float("load", v, -HUGE_VAL, HUGE_VAL, &x));
  if (!(x >= 0 && x <= 4096))
    return dt_error("option --load: %s is out of range (expected threads, 0 to 4096)", v);
  return ((plan_opts_t *)o)->load = x, 0;
}
static int set_memory(void *o, const char *v, void *ctx) {
  return parse_megabytes("memory-per-rank", v, &((plan_opts_t *)o)->memory);
}

/* plan's own options (dtrain/opt.h: worded as every command's); the
 * others go on to train's parser. */
#define O plan_opts_t
static const opt_t OWN[] = {
    {"predict", OPT_FLAG, OPT_FIELD(O, predict), 1, 1, 0, NULL, NULL, NULL},
    {"calibrate", OPT_FLAG, OPT_FIELD(O, calibrate), 1, 1, 0, NULL, NULL, NULL},
    {"quick", OPT_FLAG, OPT_FIELD(O, quick), 1, 1, 0, NULL, NULL, NULL},
    {"force", OPT_FLAG, OPT_FIELD(O, force), 1, 1, 0, NULL, NULL, NULL},
    {"explain", OPT_FLAG, OPT_FIELD(O, explain), 1, 1, 0, NULL, NULL, NULL},
    {"profile", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_profile},
    {"out", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_out},
    {"json", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_json},
    {"memory-per-rank", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_memory},
    {"load", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_load},
};
#undef O
static const opt_table_t OWN_TABLE = {OWN, (int)(sizeof OWN / sizeof OWN[0]), sizeof OWN[0],
                                      "dtrain plan"};

/* Takes plan's own options out of argv (in place); the rest are train's. */
static int plan_args(int *argc, char **argv, plan_opts_t *o) {
  int n = 1;
  for (int i = 1; i < *argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    int id = strncmp(a, "--", 2) == 0 && a[2] ? opt_find(&OWN_TABLE, a + 2, len) : -1;
    if (id >= 0) {
      const char *v;
      if (opt_next(&OWN_TABLE, *argc, argv, &i, &id, &v) != 0 || opt_set(&OWN[id], o, v, NULL) != 0) {
        fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
        return -1;
      }
      continue;
    }
    if (!strcmp(a, "--comm=mpi") || (!strcmp(a, "--comm") && i + 1 < *argc && !strcmp(argv[i + 1], "mpi")))
      o->mpi = 1;
    argv[n++] = argv[i];
  }
  *argc = n;
  if (o->predict && o->calibrate) {
    fprintf(stderr, "dtrain plan: give --predict [train options] or --calibrate --out FILE, "
                    "not both (dtrain plan --help)\n");
    return -1;
  }
  if (!o->predict && !o->calibrate && n == 1) {
    fprintf(stderr, "dtrain plan: give --predict [train options], --calibrate --out FILE, or "
                    "train options to search over (dtrain plan --help)\n");
    return -1;
  }
  if ((o->json || o->memory || o->explain) && (o->predict || o->calibrate)) {
    fprintf(stderr, "dtrain plan: --%s is the search's option (without --predict or "
                    "--calibrate)\n", o->json ? "json" : o->memory ? "memory-per-rank" : "explain");
    return -1;
  }
  if (o->calibrate && (!o->out || n > 1 + 2 * o->mpi || o->profile || o->load >= 0)) {
    fprintf(stderr, "dtrain plan: --calibrate takes --out FILE, --quick and (under mpirun) "
                    "--comm mpi only%s\n", o->out ? "" : "; --out FILE is missing");
    return -1;
  }
  if (o->predict && (o->out || o->quick)) {
    fprintf(stderr, "dtrain plan: --%s is --calibrate's option (--predict prints its line)\n",
            o->out ? "out" : "quick");
    return -1;
  }
  return 0;
}

static int write_profile(const char *path, const perf_profile_t *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return dt_error("out of memory");
  int rc = perf_profile_write(p, f);
  fclose(f);
  if (rc == 0) rc = file_write_atomic(path, buf, len);
  free(buf);
  return rc;
}

static int calibrate(int argc, char **argv, const plan_opts_t *o) {
  if (file_check_output(o->out, "dtrain-profile") != 0 || file_check_writable_dir(o->out) != 0) {
    fprintf(stderr, "dtrain plan: --out %s: %s\n", o->out, dt_errmsg());
    return 2;
  }
  kern_set_threads(1);
  perf_profile_t prof;
  perf_link_t mpi;
  int root = 1;
  if (o->mpi && perf_calibrate_mpi(&argc, &argv, o->quick, &mpi, &root, stdout) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  if (!root) return 0;
  if (perf_calibrate(o->quick, &prof, stdout) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  if (o->mpi) prof.mpi = mpi, prof.mpi_measured = 1;
  if (write_profile(o->out, &prof) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  if (!o->mpi)
    fprintf(stderr, "dtrain plan: the profile's mpi row is an estimate (mpi_measured 0); "
                    "mpirun -np 2 dtrain plan --calibrate --comm mpi --out FILE measures it\n");
  return 0;
}

/* The search: the candidates ranked on the user's options. */
static int search(int argc, char **argv, const plan_opts_t *o, const perf_profile_t *prof) {
  size_t mem = o->memory;
  FILE *json = NULL;
  if (o->json && (file_check_output(o->json, "\"event\":\"plan\"") != 0 ||
                  !(json = file_open_output(o->json, 0)))) {
    fprintf(stderr, "dtrain plan: --json %s: %s\n", o->json, dt_errmsg());
    return 2;
  }
  kern_set_threads(1);
  int rc = perf_search_explain(argc, argv, prof, (double)mem, o->explain, json, stdout);
  if (json) fclose(json);
  if (rc != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  return 0;
}

int cmd_plan(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(PLAN_HELP, stdout);
      return 0;
    }
  plan_opts_t o = {.load = -1};
  if (plan_args(&argc, argv, &o) != 0) return 2;
  if (o.calibrate) return calibrate(argc, argv, &o);
  perf_profile_t prof;
  perf_profile_default(&prof);
  if (o.profile && perf_profile_load(o.profile, o.force, &prof) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  if (o.load >= 0) prof.load_given = 1, prof.load = o.load;
  if (!o.predict) return search(argc, argv, &o, &prof);
  kern_set_threads(1); /* before any BLAS call, as train */
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  perf_plan_t plan;
  if (perf_predict(&cfg, &prof, NULL, &plan) != 0 || perf_plan_json(&plan, stdout) != 0 ||
      fputc('\n', stdout) == EOF) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
