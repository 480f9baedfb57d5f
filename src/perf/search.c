/* The search: the strategies a model could run on N workers, each
 * predicted (perf_predict) on the same train options and ranked by
 * samples a second. The candidates are a fixed table of the taxonomy's
 * cells (allreduce algorithms, shared memory, parameter-server shard
 * counts, decentralized methods, pipeline schedules and micro-batch
 * counts, tensor and pipeline x tensor grids), appended to the user's own
 * options, so that every candidate is a command line `dtrain train`
 * accepts as it is; one the options refuse, or describe_step does not
 * cover, is listed with its reason. Candidates that do not fit the memory
 * per rank are listed as such, with by how much. */
#include <stdlib.h>
#include <string.h>

#include "perf/perf.h"

static const char *const CANDIDATES[] = {
    "--exchange allreduce:ring",
    "--exchange allreduce:rhd",
    "--exchange allreduce:tree",
    "--exchange shared",
    "--exchange ps:1",
    "--exchange ps:2",
    "--preset local-sgd",
    "--preset d-psgd",
    "--pp 2 --micro-batches 4 --partition macs",
    "--pp 2 --micro-batches 4 --partition macs --pipe-schedule 1f1b",
    "--pp 2 --micro-batches 8 --partition macs --pipe-schedule 1f1b",
    "--tp 2 --exchange allreduce:ring",
    "--pp 2 --tp 2 --micro-batches 4 --partition macs",
};
#define NCAND ((int)(sizeof CANDIDATES / sizeof *CANDIDATES))
#define MAX_WORDS 64

typedef struct {
  const char *options;
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

static int by_speed(const void *a, const void *b) {
  const row_t *x = a, *y = b;
  if (x->ok != y->ok) return y->ok - x->ok;
  double d = y->plan.samples_per_sec - x->plan.samples_per_sec;
  return (d > 0) - (d < 0);
}

static void print_table(const row_t *rows, double memory_per_rank, FILE *out) {
  fprintf(out, "%-4s %-62s %10s %10s %12s %10s  %s\n", "rank", "options", "step_ms", "samples/s",
          "bytes/step", "mem_MiB", "why");
  for (int k = 0, rank = 1; k < NCAND; k++) {
    const row_t *r = &rows[k];
    if (!r->ok) {
      fprintf(out, "%-4s %-62s %s\n", "-", r->options, r->why);
      continue;
    }
    const perf_plan_t *p = &r->plan;
    double mib = p->memory_bytes / (1024.0 * 1024.0);
    char why[96];
    if (memory_per_rank > 0 && p->memory_bytes > memory_per_rank)
      snprintf(why, sizeof why, "does not fit: %.1f MiB over the memory per rank",
               (p->memory_bytes - memory_per_rank) / (1024.0 * 1024.0));
    else
      snprintf(why, sizeof why, "%s: rank 0 computes %.0f%% of the step", p->strategy,
               p->step_sec > 0 ? 100 * p->compute_sec / p->step_sec : 0);
    fprintf(out, "%-4d %-62s %10.3f %10.0f %12.0f %10.1f  %s\n", rank++, r->options,
            1e3 * p->step_sec, p->samples_per_sec, p->bytes_sent, mib, why);
  }
}

int perf_search(int argc, char **argv, const perf_profile_t *prof, double memory_per_rank,
                FILE *json, FILE *out) {
  row_t *rows = calloc(NCAND, sizeof *rows);
  if (!rows) return dt_error("out of memory");
  perf_cache_t cache = {0}; /* the data set read once, the layers measured once a size */
  for (int k = 0; k < NCAND; k++) {
    rows[k].options = CANDIDATES[k];
    predict_row(argc, argv, prof, &cache, &rows[k]);
  }
  perf_cache_free(&cache);
  qsort(rows, NCAND, sizeof *rows, by_speed);
  int fits = 0;
  for (int k = 0; k < NCAND; k++)
    fits += rows[k].ok && !(memory_per_rank > 0 && rows[k].plan.memory_bytes > memory_per_rank);
  print_table(rows, memory_per_rank, out);
  for (int k = 0; json && k < NCAND; k++) {
    fprintf(json, "{\"options\":\"%s\",\"predicted\":%s", rows[k].options, rows[k].ok ? "true" : "false");
    if (rows[k].ok) {
      fputs(",\"plan\":", json);
      perf_plan_json(&rows[k].plan, json);
      fputs("}\n", json);
    } else {
      fputs(",\"why\":\"", json);
      for (const char *c = rows[k].why; *c; c++) fputc(*c == '"' || *c == '\\' ? '\'' : *c, json);
      fputs("\"}\n", json);
    }
  }
  int any = 0;
  for (int k = 0; k < NCAND; k++) any |= rows[k].ok;
  free(rows);
  if (!any) return dt_error("no candidate could be predicted for these options (each row says why)");
  if (!fits)
    return dt_error("no candidate fits --memory-per-rank %.1f MiB (each row says by how much)",
                    memory_per_rank / (1024.0 * 1024.0));
  return 0;
}
