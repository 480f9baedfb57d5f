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
#include "perf/project.h"

static const char *PLAN_HELP =
    "usage: dtrain plan --predict [--load X] [--profile FILE [--force]] [--cluster FILE]\n"
    "                   [--compute-model layers|gemm] [TRAIN OPTIONS]\n"
    "       dtrain plan [--memory-per-rank MB] [--json FILE] [--explain] [--load X] [--profile FILE]\n"
    "                   TRAIN OPTIONS\n"
    "       dtrain plan --cluster FILE --workers N [the search's options] TRAIN OPTIONS\n"
    "       dtrain plan --cluster FILE (--workers N | --project FROM:TO) [--plot PAGE.html]\n"
    "                   [--classes N] [--bucket-mb MB] [--cycle-ms MS] [--net ...] [--straggler ...]\n"
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
    "buckets of 25 MB, 1 MB and one a layer; shared memory; ps:1, ps:2 sync (and in priority\n"
    "order), ssp:2 and async; local SGD at tau 4 and 8; D-PSGD; EASGD; GPipe, 1F1B and\n"
    "interleaved on P stages, P the smallest divisor of --workers above 1, at 2P and 4P\n"
    "micro-batches (or the next count that divides --batch), stages cut by PipeDream's\n"
    "dynamic program (--partition balanced); PipeDream and PipeDream-2BW without a flush\n"
    "(their steady step; marked: their weights are stale, other numerics); tensor over P;\n"
    "the data x pipeline x tensor grids that divide --workers, pp up to 8, tp up to 4)\n"
    "appended to the train options, predicted, and ranked by samples/s, with each step's exposed\n"
    "communication and idle time (bubble or waiting); a candidate the options refuse, or\n"
    "the model does not cover, says why; one over --memory-per-rank MB says by how much.\n"
    "Asynchronous candidates are expected values, with Yan et al.'s best and worst step and\n"
    "the expected staleness. Codecs follow in a table of their own, each with the test\n"
    "accuracy it cost in dtrain's measurements. --explain: the best three candidates' step\n"
    "split into compute, exposed communication and bubble or waiting. --json FILE: a line\n"
    "a candidate.\n"
    "\n"
    "--calibrate measures the transports' own alpha and beta here (the ring allreduce\n"
    "from 4 KiB to 64 MiB; --quick: to 1 MiB), then each operation on its own (the\n"
    "allreduces ring, rhd, tree, reduce-scatter, allgather, broadcast, and a ping-pong:\n"
    "one message), the shared-memory exchange's cost a value and one traced slice's, on\n"
    "local, and under mpirun with --comm mpi the ring and each operation on mpi as well;\n"
    "it writes them with this CPU and kernels to --out; each fit is a JSON line on\n"
    "stdout (its points and largest relative error).\n"
    "\n"
    "--cluster FILE describes the hosts to plan for (docs/CLUSTER_FILE.md: hosts, ranks per\n"
    "host, each rank's device -- this machine at a relative speed, or FLOP/s, efficiency and\n"
    "memory bandwidth, labelled projected --, memory per rank, the links inside a host and\n"
    "between hosts). With --workers N and every device this machine at a speed of at most\n"
    "1, the search above runs on the file's first N ranks (their hosts and links, a core\n"
    "each, slowed by 1 / speed; the smallest memory per rank bounds the candidates unless\n"
    "--memory-per-rank does). With --project FROM:TO, --plot, --classes, --bucket-mb or\n"
    "--cycle-ms, or a file of projected devices, the data-parallel strategies (allreduce\n"
    "ring, rhd, tree, hier; ps sharded on the workers; one ps; one async ps and one ssp:3\n"
    "ps, expected), GPipe, interleaved 1F1B (2 chunks a rank) and Megatron's tensor\n"
    "parallelism across a host's ranks (data parallel across hosts), Megatron's 3-D grid\n"
    "(tp a divisor of a host's ranks x pp stages across hosts x dp; its row the (tp, pp)\n"
    "with the most samples/s that fits, printed tp= pp= dp= m=), local SGD (tau 4),\n"
    "D-PSGD, and data parallelism with --compress fp16, int8, topk:0.01 and powersgd:4\n"
    "(the codec's ms and MB sent on its row) are projected instead, at --workers N or at\n"
    "every worker count FROM, 2 FROM, ... TO of --project FROM:TO (FROM >= 1, TO <= the\n"
    "cluster's ranks): step time, samples/s, scaling efficiency (samples/s over N times one\n"
    "worker's) and the memory of the strategy's fullest rank (a pipeline stage its chunks\n"
    "and the activations its schedule holds, a tp rank its blocks), over --memory-per-rank\n"
    "MB, or the file's memory per rank, marked 'does not fit' with by how much. The\n"
    "model's input is its file's 'input shape=' or 1x28x28. --net latency=,bandwidth= takes\n"
    "the place of the file's link between hosts; --straggler rank=R,slowdown=S slows rank R.\n"
    "With --predict, the one configuration is simulated on the file's first ranks instead\n"
    "(its hosts and links, each rank a core of its own, slowed by 1 / its speed: speeds of\n"
    "at most 1, measured devices only).\n"
    "  --plot PAGE.html  the projection as a page: samples/s and efficiency against workers\n"
    "                   (SVG), one line a strategy, and the table\n"
    "  --classes N      the model's classes (default 10; VGG-16 on ImageNet: 1000), or a\n"
    "                   sequence model's vocabulary (default 256; its input: --seq-len tokens)\n"
    "  --bucket-mb MB   gradients fused into buckets of MB (default 64: Horovod's fusion)\n"
    "  --cycle-ms MS    the allreduces as Horovod's loop runs them: every MS milliseconds\n"
    "                   (Horovod's default: 5) the tensors ready on every rank, negotiated\n"
    "                   with a coordinator, fused within --bucket-mb, copied in and out of\n"
    "                   the fusion buffer; 0 to 1000 (default 0: fixed buckets in backward\n"
    "                   order, each sent once ready, as dtrain's reducer)\n"
    "\n"
    "  --load X         the other processes' threads to assume running on this machine's\n"
    "                   cores (X >= 0; without: the one-minute load average now, less one),\n"
    "                   so that plans made at different moments share one assumption\n"
    "  --profile FILE   the transports' costs from a calibration profile (without: their\n"
    "                   own estimates); one taken on another CPU or with other kernels\n"
    "                   is refused (exit 2) unless --force\n"
    "  --compute-model layers|gemm  how a layer's pass is costed: layers (the default)\n"
    "                   times each layer here at the sizes the step runs; gemm takes dense,\n"
    "                   linear and conv2d layers from the profile's GEMM model (Yan et al.:\n"
    "                   ln t linear in ln m, ln n, ln k, fitted by --calibrate; needs\n"
    "                   --profile), the other layers still timed\n";

typedef struct {
  int predict, calibrate, quick, force, mpi, explain;
  const char *profile, *out, *json;
  size_t memory;             /* --memory-per-rank, bytes (0: no limit) */
  int gemm_model;            /* --compute-model gemm */
  const char *cluster, *plot;
  int from, to;              /* --project FROM:TO (0: not given) */
  int classes;
  size_t bucket;             /* --bucket-mb, bytes */
  double cycle_ms;           /* --cycle-ms (-1: not given) */
  double load;               /* --load (-1: measured) */
  int comm_given, net_given; /* --comm, --net among the train options */
} plan_opts_t;

static int set_profile(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->profile = v, 0; }
static int set_out(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->out = v, 0; }
static int set_json(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->json = v, 0; }
static int set_compute_model(void *o, const char *v, void *ctx) {
  if (strcmp(v, "layers") && strcmp(v, "gemm"))
    return dt_error("option --compute-model: '%s' (expected layers or gemm)", v);
  ((plan_opts_t *)o)->gemm_model = !strcmp(v, "gemm");
  return 0;
}
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

static int set_cluster(void *o, const char *v, void *ctx) { return ((plan_opts_t *)o)->cluster = v, 0; }
static int set_plot(void *o, const char *v, void *ctx) {
  if (!strstr(v, ".htm"))
    return dt_error("--plot %s: give a page's path ending in .html (the projection is written "
                    "as HTML)", v);
  return ((plan_opts_t *)o)->plot = v, 0;
}
static int set_classes(void *o, const char *v, void *ctx) {
  long n;
  DT_TRY(parse_int("classes", v, 2, 1000000, &n));
  return ((plan_opts_t *)o)->classes = (int)n, 0;
}
static int set_bucket(void *o, const char *v, void *ctx) {
  DT_TRY(parse_megabytes("bucket-mb", v, &((plan_opts_t *)o)->bucket));
  if (!((plan_opts_t *)o)->bucket) return dt_error("--bucket-mb 0: give at least 1 (MB)");
  return 0;
}
static int set_cycle(void *o, const char *v, void *ctx) {
  double x;
  DT_TRY(parse_float("cycle-ms", v, -HUGE_VAL, HUGE_VAL, &x));
  if (!(x >= 0 && x <= 1000))
    return dt_error("option --cycle-ms: %s is out of range (expected milliseconds, 0 to 1000; "
                    "Horovod's default: 5)", v);
  return ((plan_opts_t *)o)->cycle_ms = x, 0;
}
/* FROM:TO, 1 <= FROM <= TO <= 1 << 20, at most 16 doublings. */
static int set_project(void *o, const char *v, void *ctx) {
  plan_opts_t *p = o;
  long a, b;
  const char *colon = strchr(v, ':');
  char first[32];
  if (!colon || (size_t)(colon - v) >= sizeof first)
    return dt_error("--project %s: give FROM:TO worker counts, for example 8:1024", v);
  memcpy(first, v, (size_t)(colon - v));
  first[colon - v] = 0;
  DT_TRY(parse_int("project", first, 1, 1 << 20, &a));
  DT_TRY(parse_int("project", colon + 1, 1, 1 << 20, &b));
  int rows = 0;
  for (long n = a; n <= b; n *= 2) rows++;
  if (b < a || rows > 16)
    return dt_error("--project %s: give FROM <= TO within 16 doublings (8:1024 is 8)", v);
  p->from = (int)a, p->to = (int)b;
  return 0;
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
    {"compute-model", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_compute_model},
    {"cluster", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_cluster},
    {"project", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_project},
    {"plot", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_plot},
    {"classes", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_classes},
    {"bucket-mb", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_bucket},
    {"cycle-ms", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_cycle},
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
    if (!strncmp(a, "--comm=", 7) || !strcmp(a, "--comm")) o->comm_given = 1;
    if (!strncmp(a, "--net=", 6) || !strcmp(a, "--net")) o->net_given = 1;
    argv[n++] = argv[i];
  }
  *argc = n;
  if (o->predict && o->calibrate) {
    fprintf(stderr, "dtrain plan: give --predict [train options] or --calibrate --out FILE, "
                    "not both (dtrain plan --help)\n");
    return -1;
  }
  if (!o->predict && !o->calibrate && !o->cluster && n == 1) {
    fprintf(stderr, "dtrain plan: give --predict [train options], --calibrate --out FILE, or "
                    "train options to search over (dtrain plan --help)\n");
    return -1;
  }
  if ((o->json || o->memory || o->explain) && (o->predict || o->calibrate)) {
    fprintf(stderr, "dtrain plan: --%s is the search's option (without --predict or "
                    "--calibrate)\n", o->json ? "json" : o->memory ? "memory-per-rank" : "explain");
    return -1;
  }
  if (o->calibrate && (!o->out || n > 1 + 2 * o->mpi || o->profile || o->gemm_model || o->load >= 0)) {
    fprintf(stderr, "dtrain plan: --calibrate takes --out FILE, --quick and (under mpirun) "
                    "--comm mpi only%s\n", o->out ? "" : "; --out FILE is missing");
    return -1;
  }
  if ((o->from || o->plot || o->classes || o->bucket || o->cycle_ms >= 0) && !o->cluster) {
    fprintf(stderr, "dtrain plan: --%s projects onto a cluster: give --cluster FILE "
                    "(docs/CLUSTER_FILE.md)\n",
            o->from ? "project" : o->plot ? "plot" : o->classes ? "classes"
            : o->bucket ? "bucket-mb" : "cycle-ms");
    return -1;
  }
  if (o->cluster && (o->calibrate || (o->predict && (o->from || o->plot || o->cycle_ms >= 0)))) {
    fprintf(stderr, "dtrain plan: --cluster searches or projects the strategies on the file's "
                    "hosts (or, with --predict, runs one there); --%s is not one of its options "
                    "(dtrain plan --help)\n",
            o->calibrate ? "calibrate" : o->from ? "project" : o->plot ? "plot" : "cycle-ms");
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
  perf_profile_t prof, mpi = {0};
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
  if (o->mpi) {
    prof.mpi = mpi.mpi, prof.mpi_measured = 1;
    memcpy(prof.mpi_op, mpi.mpi_op, sizeof prof.mpi_op);
    prof.mpi_ops = mpi.mpi_ops, prof.mpi_op_ranks = mpi.mpi_op_ranks;
  }
  if (write_profile(o->out, &prof) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  if (!o->mpi)
    fprintf(stderr, "dtrain plan: the profile's mpi row is an estimate (mpi_measured 0); "
                    "mpirun -np 2 dtrain plan --calibrate --comm mpi --out FILE measures it\n");
  return 0;
}

/* The search: the candidates ranked on the user's options; on a cluster
 * file's hosts where one is given (cluster: NULL for this machine), whose
 * smallest memory per rank bounds the candidates unless --memory-per-rank
 * does. */
static int search(int argc, char **argv, const plan_opts_t *o, const perf_profile_t *prof,
                  const perf_cluster_file_t *cluster) {
  perf_search_opts_t so = {.memory_per_rank = (double)o->memory, .cluster = cluster,
                           .explain = o->explain};
  char from[300];
  if (cluster && !o->memory) so.memory_per_rank = perf_cluster_file_memory(cluster);
  if (cluster && !o->memory && so.memory_per_rank > 0) {
    snprintf(from, sizeof from, "the memory per rank of %s", o->cluster);
    so.memory_from = from;
  }
  if (o->json && (file_check_output(o->json, "\"event\":\"plan\"") != 0 ||
                  !(so.json = file_open_output(o->json, 0)))) {
    fprintf(stderr, "dtrain plan: --json %s: %s\n", o->json, dt_errmsg());
    return 2;
  }
  kern_set_threads(1);
  int rc = perf_search(argc, argv, prof, &so, stdout);
  if (so.json) fclose(so.json);
  if (rc != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  return 0;
}

/* Every group of the file is this machine at a speed of at most 1: its
 * layers are measured here (and slowed), so the whole search can run on it. */
static int measured_here(const perf_cluster_file_t *c) {
  for (int g = 0; g < c->ngroups; g++)
    if (!(c->group[g].speed > 0 && c->group[g].speed <= 1)) return 0;
  return 1;
}

/* --cluster: the strategies projected onto the described cluster. */
static int project(int argc, char **argv, const plan_opts_t *o, const perf_cluster_file_t *cl) {
  const perf_cluster_file_t c = *cl;
  train_config_t cfg;
  if (o->json || o->explain) {
    fprintf(stderr, "dtrain plan: --%s is the search's option; the projection%s prints its "
            "table\n", o->json ? "json" : "explain", measured_here(cl) ? "" : " onto projected devices");
    return 2;
  }
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  int from = o->from ? o->from : cfg.workers, to = o->from ? o->to : cfg.workers;
  if (to > c.nranks) {
    fprintf(stderr, "dtrain plan: %s%d workers: the cluster %s has %d ranks (%d hosts); "
            "give at most %d\n", o->from ? "--project to " : "--workers ", to, o->cluster,
            c.nranks, c.nhosts, c.nranks);
    return 2;
  }
  if (o->plot && (file_check_output(o->plot, "dtrain plan: projection") != 0 ||
                  file_check_writable_dir(o->plot) != 0)) {
    fprintf(stderr, "dtrain plan: --plot %s: %s\n", o->plot, dt_errmsg());
    return 2;
  }
  kern_set_threads(1);
  perf_proj_opts_t po = {
      .model = cfg.model, .batch = cfg.batch, .nclasses = o->classes,
      .input = {1, 28, 28}, .seq_len = cfg.seq_len, .bucket_bytes = o->bucket ? (double)o->bucket : 64.0 * 1024 * 1024,
      .cycle_sec = o->cycle_ms > 0 ? o->cycle_ms / 1e3 : 0,
      .straggler_rank = cfg.straggler_rank, .straggler_slowdown = cfg.straggler_slowdown,
      .net_latency = cfg.net_latency, .net_bandwidth = cfg.net_bandwidth,
      .memory_per_rank = (double)o->memory, .optim = &cfg.optim};
  perf_projection_t p;
  if (perf_project(&po, &c, from, to, &p) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  perf_projection_print(&p, &c, stdout);
  int fits = 0;
  for (int k = 0; k < p.nrows; k++)
    for (int s = 0; s < PROJ_COUNT; s++) fits |= p.row[k].fits[s] && isfinite(p.row[k].step_sec[s]);
  if (!fits) { /* data parallelism's figures: the pipelines and tp hold less, and fit no better */
    const double MiB = 1024.0 * 1024.0;
    double most = (p.mem_limit - p.mem_fixed) / p.mem_per_sample;
    char fit[96];
    if (most >= 1) snprintf(fit, sizeof fit, "a batch of at most %.0f fits", floor(most));
    else snprintf(fit, sizeof fit, "no batch fits: the model alone takes %.1f MiB", p.mem_fixed / MiB);
    fprintf(stderr, "dtrain plan: %s: a data-parallel rank holds %.1f MiB for --batch %d (%.1f MiB "
            "+ %.2f MiB a sample), no pipeline stage, tp or 3-D grid rank fits either, and %s gives %.1f MiB; "
            "%s\n", o->memory ? "--memory-per-rank" : "memory_per_rank", p.row[0].memory_bytes[PROJ_RING] / MiB,
            cfg.batch, p.mem_fixed / MiB, p.mem_per_sample / MiB,
            o->memory ? "--memory-per-rank" : o->cluster, p.mem_limit / MiB, fit);
    return 2;
  }
  if (o->plot && perf_projection_html(&p, &c, cfg.model, o->plot) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  fprintf(stderr, "dtrain plan: projected %d worker counts x %d strategies in %.3f s\n", p.nrows,
          PROJ_COUNT, p.seconds);
  return 0;
}

/* --cluster FILE --workers N of devices measured here: the search on the
 * file's hosts, N at most its ranks. */
static int cluster_search(int argc, char **argv, const plan_opts_t *o, const perf_profile_t *prof,
                          const perf_cluster_file_t *c) {
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  if (cfg.workers > c->nranks) {
    fprintf(stderr, "dtrain plan: --workers %d: the cluster %s has %d ranks (%d hosts); "
            "give at most %d\n", cfg.workers, o->cluster, c->nranks, c->nhosts, c->nranks);
    return 2;
  }
  return search(argc, argv, o, prof, c);
}

int cmd_plan(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(PLAN_HELP, stdout);
      return 0;
    }
  plan_opts_t o = {.load = -1, .cycle_ms = -1};
  if (plan_args(&argc, argv, &o) != 0) return 2;
  if (o.calibrate) return calibrate(argc, argv, &o);
  perf_cluster_file_t file;
  if (o.cluster && perf_cluster_file_load(o.cluster, &file) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  int projecting = o.from || o.plot || o.classes || o.bucket || o.cycle_ms >= 0 ||
                   (o.cluster && !measured_here(&file));
  /* a cluster file's ranks are processes on its hosts: a run there is
   * --comm mpi's (its default exchange allreduce, not local's shared
   * memory). --net, which stands for the file's link, is local's option:
   * with it the default is allreduce already. */
  char *with_mpi[256];
  if (o.cluster && !o.comm_given && !o.net_given && !projecting) {
    if (argc + 2 > 256) {
      fprintf(stderr, "dtrain plan: %d options: at most 253 with --cluster\n", argc - 1);
      return 2;
    }
    memcpy(with_mpi, argv, (size_t)argc * sizeof *argv);
    with_mpi[argc++] = "--comm", with_mpi[argc++] = "mpi";
    argv = with_mpi;
  }
  if (o.cluster && !o.predict && projecting) return project(argc, argv, &o, &file);
  perf_profile_t prof;
  perf_profile_default(&prof);
  if (o.profile && perf_profile_load(o.profile, o.force, &prof) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  if (o.gemm_model && !prof.gemm_fit.fitted) {
    fprintf(stderr, "dtrain plan: --compute-model gemm needs a profile with a GEMM model "
                    "(--profile FILE, from dtrain plan --calibrate --out FILE)\n");
    return 2;
  }
  prof.use_gemm_fit = o.gemm_model;
  if (o.load >= 0) prof.load_given = 1, prof.load = o.load;
  if (!o.predict && o.cluster) return cluster_search(argc, argv, &o, &prof, &file);
  if (!o.predict) return search(argc, argv, &o, &prof, NULL);
  kern_set_threads(1); /* before any BLAS call, as train */
  train_config_t cfg;
  if (train_options_parse(argc, argv, &cfg) != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 2;
  }
  perf_plan_t plan;
  perf_cache_t cache = {.cluster = &file}; /* --cluster: the file's hosts, links and speeds */
  int rc = perf_predict(&cfg, &prof, o.cluster ? &cache : NULL, &plan);
  perf_cache_free(&cache);
  if (rc != 0) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return o.cluster ? 2 : 1;
  }
  if (perf_plan_json(&plan, stdout) != 0 || fputc('\n', stdout) == EOF) {
    fprintf(stderr, "dtrain plan: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
