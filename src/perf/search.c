/* The search: the strategies a model could run on N workers, each
 * predicted (perf_predict) on the same train options and ranked by
 * samples a second. The candidates are the taxonomy's cells -- allreduce
 * algorithms and bucket sizes, shared memory, parameter-server shard
 * counts and schedules (sync, ssp, async: expected values), decentralized
 * methods, pipeline schedules and micro-batch counts with the stages cut
 * by PipeDream's dynamic program (--partition balanced, perf/partition.c),
 * PipeDream's and 2BW's pipelines without a flush (their steady step,
 * marked: their weights are stale),
 * and the data x pipeline x tensor grids that divide N -- appended to the
 * user's own options, so that every candidate is a command line `dtrain
 * train` accepts as it is; one the options refuse, or describe_step does
 * not cover, is listed with its reason. Candidates that do not fit the
 * memory per rank are listed as such, with by how much. Codecs change the
 * numerics, not only the time: they are a table of their own, each with
 * the accuracy cost dtrain measured for it. */
#include <stdlib.h>
#include <string.h>

#include "perf/partition.h"
#include "perf/perf.h"
#include "perf/project.h"

static const char *const FIXED[] = {
    "--exchange allreduce:ring",
    "--exchange allreduce:ring --bucket-mb 1",
    "--exchange allreduce:ring --bucket-mb 0",
    "--exchange allreduce:rhd",
    "--exchange allreduce:tree",
    "--exchange shared",
    "--exchange ps:1",
    "--exchange ps:2",
    "--exchange ps:2 --comm-order priority",
    "--exchange ps:1 --schedule ssp:2",
    "--exchange ps:1 --schedule async",
    "--exchange ps:2 --schedule async",
    "--preset local-sgd --tau 4",
    "--preset local-sgd",
    "--preset d-psgd",
    "--preset easgd",
};
#define NFIXED ((int)(sizeof FIXED / sizeof *FIXED))

/* The pipelines at P stages, P the workers' smallest divisor above 1 (2
 * where the workers are even, 3 on 3 or 9, all of them on a prime), each
 * at micro-batches a multiple of P (none: PipeDream's one), cut by
 * PipeDream's dynamic program. */
typedef struct {
  int micro_per_stage; /* 0: one micro-batch */
  int stage_multiple;  /* Megatron's interleaving takes M a multiple of P */
  const char *schedule;
} pipe_row_t;
static const pipe_row_t PIPES[] = {
    {2, 0, ""},
    {4, 0, ""},
    {2, 0, " --pipe-schedule 1f1b"},
    {4, 0, " --pipe-schedule 1f1b"},
    {2, 1, " --pipe-schedule interleaved:2"},
    {0, 0, " --pipe-schedule pipedream"},
    {2, 0, " --pipe-schedule 2bw"},
};
#define NPIPES ((int)(sizeof PIPES / sizeof *PIPES))

/* Codecs on the ring, each with the test-accuracy change dtrain measured
 * against the dense ring (docs/BENCHMARKS.md, "Gradient compression
 * against the dense ring": 4 workers, batch 64, mlp 5 epochs, lenet 3,
 * seed 1). */
typedef struct {
  const char *options;
  double mlp_points, lenet_points;
} codec_row_t;
static const codec_row_t CODECS[] = {
    {"--exchange allreduce:ring --compress fp16", +0.03, -0.01},
    {"--exchange allreduce:ring --compress int8", +0.04, -0.24},
    {"--exchange allreduce:ring --compress qsgd:7", +0.20, -0.36},
    {"--exchange allreduce:ring --compress terngrad:2.5", +0.10, -0.17},
    {"--exchange allreduce:ring --compress onebit", -1.58, -2.51},
    {"--exchange allreduce:ring --compress powersgd:2", -0.51, -0.53},
    {"--exchange allreduce:ring --compress topk:0.001", -2.15, -2.40},
    {"--exchange allreduce:ring --compress dgc:0.001", -0.86, -2.12},
};
#define NCODECS ((int)(sizeof CODECS / sizeof *CODECS))

#define MAX_GRID 32 /* every pp 1..8 x tp 1..4 */
#define MAX_ROWS (NFIXED + NPIPES + 1 + MAX_GRID)
#define MAX_WORDS 64
#define EXPLAINED 3

typedef struct {
  char options[160];
  int ok;
  perf_plan_t plan;
  char why[200];             /* the refusal, when not ok */
} row_t;

/* argv for train_options_parse: the user's words, then the candidate's. */
static int candidate_argv(int argc, char **argv, const char *cand, char *buf, size_t cap,
                          char **out) {
  int n = 0;
  for (int i = 0; i < argc && n < MAX_WORDS - 1; i++) out[n++] = argv[i];
  snprintf(buf, cap, "%s", cand);
  for (char *w = strtok(buf, " "); w && n < MAX_WORDS - 1; w = strtok(NULL, " ")) out[n++] = w;
  out[n] = NULL;
  return n;
}

static void predict_row(int argc, char **argv, const perf_profile_t *prof, perf_cache_t *cache,
                        row_t *r) {
  char buf[256], *words[MAX_WORDS];
  int n = candidate_argv(argc, argv, r->options, buf, sizeof buf, words);
  train_config_t cfg;
  if (train_options_parse(n, words, &cfg) != 0 || perf_predict(&cfg, prof, cache, &r->plan) != 0) {
    snprintf(r->why, sizeof r->why, "%s", dt_errmsg());
    return;
  }
  r->ok = 1;
}

/* The smallest divisor of n above 1 (n itself on a prime; 2 below 2, so
 * that one worker's rows say why they need more). */
static int first_divisor(int n) {
  for (int d = 2; d <= n; d++)
    if (n % d == 0) return d;
  return 2;
}

/* Micro-batches: the fewest, at least `least` and a multiple of `step`,
 * that divide the batch (a micro-batch is batch / M samples); `least`
 * where none does, which the options then refuse with their reason. */
static int micro_batches(int batch, int least, int step) {
  for (int m = least; m <= batch; m += step)
    if (batch % m == 0) return m;
  return least;
}

/* The pipelines at first_divisor(N) stages and the tensor split over as
 * many ranks, data parallel over the rest. */
static int split_rows(int N, int batch, row_t *rows) {
  int P = first_divisor(N), n = 0;
  size_t cap = sizeof rows[0].options;
  for (int k = 0; k < NPIPES; k++) {
    const pipe_row_t *r = &PIPES[k];
    int m = r->micro_per_stage ? micro_batches(batch, r->micro_per_stage * P, r->stage_multiple ? P : 1) : 1;
    snprintf(rows[n++].options, cap, "--pp %d --micro-batches %d --partition balanced%s", P, m,
             r->schedule);
  }
  snprintf(rows[n++].options, cap, "--tp %d --exchange allreduce:ring", P);
  return n;
}

/* The data x pipeline x tensor grids of the user's workers beyond
 * split_rows' (pp P alone, tp P alone): pp up to 8 and tp up to 4, each a
 * divisor, pp x tp dividing the workers, data parallel over the rest, at
 * 2 pp micro-batches or the next that divides the batch (with tp, GPipe
 * cut by multiply-adds: the tensor description refuses some of the
 * measured cuts, and 1F1B under tp). */
static int grid_rows(int N, int batch, row_t *rows) {
  int P = first_divisor(N), n = 0;
  for (int pp = 1; pp <= 8; pp++)
    for (int tp = 1; tp <= 4; tp++) {
      if (pp * tp <= 1 || N % (pp * tp) != 0 || (pp == P && tp == 1) || (pp == 1 && tp == P))
        continue;
      if (n == MAX_GRID) return n;
      char *o = rows[n++].options;
      size_t cap = sizeof rows[0].options;
      if (pp == 1) snprintf(o, cap, "--tp %d --exchange allreduce:ring", tp);
      else if (tp == 1)
        snprintf(o, cap, "--pp %d --micro-batches %d --partition balanced --pipe-schedule 1f1b", pp,
                 micro_batches(batch, 2 * pp, 1));
      else /* GPipe cut by multiply-adds: the description under tp covers these */
        snprintf(o, cap, "--pp %d --tp %d --micro-batches %d --partition macs", pp, tp,
                 micro_batches(batch, 2 * pp, 1));
    }
  return n;
}

static int fits(const row_t *r, double memory_per_rank) {
  return r->ok && !(memory_per_rank > 0 && r->plan.memory_bytes > memory_per_rank);
}

static int by_speed(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  if (x->ok != y->ok) return y->ok - x->ok;
  double d = y->plan.samples_per_sec - x->plan.samples_per_sec;
  return (d > 0) - (d < 0);
}


static void print_row(const row_t *r, const char *rank, double memory_per_rank, FILE *out) {
  if (!r->ok) {
    fprintf(out, "%-4s %-76s %s\n", "-", r->options, r->why);
    return;
  }
  const perf_plan_t *p = &r->plan;
  double mib = p->memory_bytes / (1024.0 * 1024.0);
  char why[120];
  if (memory_per_rank > 0 && p->memory_bytes > memory_per_rank)
    snprintf(why, sizeof why, "does not fit: %.1f MiB over the memory per rank",
             (p->memory_bytes - memory_per_rank) / (1024.0 * 1024.0));
  else if (p->asynchronous)
    snprintf(why, sizeof why, "%s: expected (best %.2f, worst %.2f ms), staleness %.1f", p->strategy,
             1e3 * p->step_best_sec, 1e3 * p->step_worst_sec, p->staleness_expected);
  else if (p->stale_weights)
    snprintf(why, sizeof why, "%s, no flush (stale weights): the steady step, rank 0 computes %.0f%%",
             p->strategy, p->step_sec > 0 ? 100 * p->compute_sec / p->step_sec : 0);
  else
    snprintf(why, sizeof why, "%s: rank 0 computes %.0f%% of the step", p->strategy,
             p->step_sec > 0 ? 100 * p->compute_sec / p->step_sec : 0);
  fprintf(out, "%-4s %-76s %9.3f %9.0f %12.0f %8.1f %8.3f %8.3f  %s\n", rank, r->options,
          1e3 * p->step_sec, p->samples_per_sec, p->bytes_sent, mib, 1e3 * p->exposed_sec,
          1e3 * p->bubble_sec, why);
}

static void print_table(const row_t *rows, int n, double memory_per_rank, FILE *out) {
  fprintf(out, "%-4s %-76s %9s %9s %12s %8s %8s %8s  %s\n", "rank", "options", "step_ms", "samples/s",
          "bytes/step", "mem_MiB", "expo_ms", "bubbl_ms", "why");
  char rank[16];
  for (int k = 0, next = 1; k < n; k++) {
    snprintf(rank, sizeof rank, "%d", next);
    next += rows[k].ok;
    print_row(&rows[k], rank, memory_per_rank, out);
  }
}

/* The codecs: predicted on the ring, with the accuracy each cost. */
static void print_codecs(const row_t *rows, FILE *out) {
  fprintf(out, "\ncodecs change the numerics (not ranked above); test accuracy against the dense "
               "ring as measured (docs/BENCHMARKS.md, 4 workers, mlp 5 epochs, lenet 3):\n");
  fprintf(out, "%-52s %9s %9s %12s %10s %10s\n", "options", "step_ms", "samples/s", "bytes/step",
          "mlp_pts", "lenet_pts");
  for (int k = 0; k < NCODECS; k++) {
    const row_t *r = &rows[k];
    if (!r->ok) {
      fprintf(out, "%-52s %s\n", r->options, r->why);
      continue;
    }
    fprintf(out, "%-52s %9.3f %9.0f %12.0f %+10.2f %+10.2f\n", r->options, 1e3 * r->plan.step_sec,
            r->plan.samples_per_sec, r->plan.bytes_sent, CODECS[k].mlp_points, CODECS[k].lenet_points);
  }
}

/* PipeDream's own answer for the workers (stages replicated as its
 * dynamic program chooses): a plan the engine's dp x pp grid cannot run
 * unless every stage has the same replicas, printed for comparison. */
static void print_pipedream(int argc, char **argv, perf_cache_t *cache, FILE *out) {
  train_config_t cfg;
  partition_t part;
  if (train_options_parse(argc, argv, &cfg) != 0) return;
  if (cache->cluster && !(cfg.net.bandwidth > 0)) /* the file's hosts: a cut crosses their NIC */
    cfg.net.bandwidth = cache->cluster->inter.beta;
  if (perf_pipedream(&cfg, cache, cfg.workers, &part) != 0) {
    fprintf(out, "\nPipeDream's partition: %s\n", dt_errmsg());
    return;
  }
  char link[64] = ", links unlimited";
  if (cfg.net.bandwidth > 0)
    snprintf(link, sizeof link, ", B %.3g Gbit/s%s", 8e-9 * cfg.net.bandwidth,
             cache->cluster ? ", the hosts' NIC" : "");
  fprintf(out, "\nPipeDream's partition over %d machines (stage replication, 2a/B at each cut%s): ",
          cfg.workers, link);
  for (int k = 0; k < part.stages; k++)
    fprintf(out, "%slayers %d-%d x%d", k ? ", " : "", part.first[k], part.first[k + 1] - 1, part.replicas[k]);
  fprintf(out, "; %.3f ms a batch at its slowest stage or cut (%s)\n", 1e3 * part.slowest,
          part.stages == 1 ? "data parallelism" : "a pipeline");
}

/* --explain: the best few that fit, their step split. */
static void print_explain(const row_t *rows, int n, double memory_per_rank, FILE *out) {
  fprintf(out, "\nthe best candidates' step (rank 0): compute + exposed communication + bubble "
               "+ waiting = step\n");
  for (int k = 0, shown = 0; k < n && shown < EXPLAINED; k++) {
    if (!fits(&rows[k], memory_per_rank)) continue;
    const perf_plan_t *p = &rows[k].plan;
    fprintf(out, "  %d. %s: %.3f ms compute + %.3f ms exposed communication + %.3f ms bubble + "
                 "%.3f ms waiting = %.3f ms; %.3f ms of communication in all (%.0f%% hidden)\n",
            ++shown, rows[k].options, 1e3 * p->compute_sec, 1e3 * p->exposed_sec, 1e3 * p->bubble_sec,
            1e3 * p->waiting_sec, 1e3 * p->step_sec, 1e3 * p->comm_sec,
            p->comm_sec > 0 ? 100 * (1 - p->exposed_sec / p->comm_sec) : 0);
  }
}

static void json_row(const row_t *r, const codec_row_t *codec, FILE *json) {
  fprintf(json, "{\"table\":\"%s\",\"options\":\"%s\",\"predicted\":%s",
          codec ? "codecs" : "strategies", r->options, r->ok ? "true" : "false");
  if (codec)
    fprintf(json, ",\"accuracy_points_mlp\":%.2f,\"accuracy_points_lenet\":%.2f", codec->mlp_points,
            codec->lenet_points);
  if (r->ok) {
    fprintf(json, ",\"exposed_sec\":%.6g,\"bubble_sec\":%.6g,\"waiting_sec\":%.6g,\"plan\":",
            r->plan.exposed_sec, r->plan.bubble_sec, r->plan.waiting_sec);
    perf_plan_json(&r->plan, json);
    fputs("}\n", json);
  } else {
    fputs(",\"why\":\"", json);
    for (const char *c = r->why; *c; c++) fputc(*c == '"' || *c == '\\' ? '\'' : *c, json);
    fputs("\"}\n", json);
  }
}

/* No candidate nor codec could be predicted: where the user's own options
 * fail too (a model of another input shape), their reason is said once
 * rather than as a table of rows repeating it. */
static int no_row_ok(const row_t *rows, int n, const row_t *codecs) {
  for (int k = 0; k < n; k++)
    if (rows[k].ok) return 0;
  for (int k = 0; k < NCODECS; k++)
    if (codecs[k].ok) return 0;
  return 1;
}

int perf_search(int argc, char **argv, const perf_profile_t *prof, const perf_search_opts_t *o,
                FILE *out) {
  double memory_per_rank = o->memory_per_rank;
  row_t *rows = calloc(MAX_ROWS + NCODECS, sizeof *rows), *codecs = rows + MAX_ROWS;
  if (!rows) return dt_error("out of memory");
  int n = 0;
  for (; n < NFIXED; n++) snprintf(rows[n].options, sizeof rows[n].options, "%s", FIXED[n]);
  train_config_t cfg;
  int parsed = train_options_parse(argc, argv, &cfg) == 0;
  int workers = parsed ? cfg.workers : 1, batch = parsed ? cfg.batch : 64;
  n += split_rows(workers, batch, rows + n);
  n += grid_rows(workers, batch, rows + n);
  for (int k = 0; k < NCODECS; k++) snprintf(codecs[k].options, sizeof codecs[k].options, "%s", CODECS[k].options);
  /* the data set read once, the layers measured once a size; the cluster
   * file's hosts, links and speeds where one is given */
  perf_cache_t cache = {.cluster = o->cluster};
  for (int k = 0; k < n; k++) predict_row(argc, argv, prof, &cache, &rows[k]);
  for (int k = 0; k < NCODECS; k++) predict_row(argc, argv, prof, &cache, &codecs[k]);
  row_t own = {.options = "", .ok = 1}; /* the user's own options, where nothing else was predicted */
  if (no_row_ok(rows, n, codecs)) {
    own.ok = 0;
    predict_row(argc, argv, prof, &cache, &own);
  }
  if (!own.ok) { /* the user's options or model: said once */
    int rc = dt_error("%s", own.why);
    perf_cache_free(&cache);
    free(rows);
    return rc;
  }
  qsort(rows, (size_t)n, sizeof *rows, by_speed);
  int fit = 0, any = 0;
  for (int k = 0; k < n; k++) fit += fits(&rows[k], memory_per_rank), any |= rows[k].ok;
  print_table(rows, n, memory_per_rank, out);
  print_codecs(codecs, out);
  if (o->explain) print_explain(rows, n, memory_per_rank, out);
  print_pipedream(argc, argv, &cache, out);
  perf_cache_free(&cache);
  for (int k = 0; o->json && k < n; k++) json_row(&rows[k], NULL, o->json);
  for (int k = 0; o->json && k < NCODECS; k++) json_row(&codecs[k], &CODECS[k], o->json);
  free(rows);
  if (!any) return dt_error("no candidate could be predicted for these options (each row says why)");
  if (!fit)
    return dt_error("no candidate fits %s %.1f MiB (each row says by how much)",
                    o->memory_from ? o->memory_from : "--memory-per-rank",
                    memory_per_rank / (1024.0 * 1024.0));
  return 0;
}
