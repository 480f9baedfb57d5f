/* dtrain compare: several presets on one task, one after another through
 * the same train_run, and a report (src/report/). Every preset's options
 * and the shared task options go through train_options_parse before
 * anything runs, so a bad list costs nothing; each run writes its JSON
 * Lines metrics into OUT/runs/ as it goes (kept whatever happens later);
 * report.json and report.html are written atomically once all have run.
 * Every output is checked before the first run (only compare's own files
 * are replaced), and an earlier report is removed then, so a stopped
 * comparison never leaves one beside runs it does not describe.
 * Exit 2 on a usage error, 1 when a run failed (the report is written and
 * shows it), 0 when all ran. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "dtrain/opt.h"
#include "dtrain/train.h"
#include "perf/perf.h"
#include "report/report.h"

#define MAX_PRESETS 64
#define MAX_RUNS 100
#define MARKER ".dtrain-compare"
/* the start of the report files, as src/report/ writes them */
#define REPORT_JSON_MAGIC "{\"format\":\"dtrain-compare-1\""
#define REPORT_HTML_MAGIC "<title>dtrain compare</title>"

static const char *COMPARE_HELP =
    "usage: dtrain compare --presets A,B,... [--out DIR] [OPTIONS] [train options]\n"
    "\n"
    "Runs each preset on the same task, one after another (threads on --comm local),\n"
    "and writes a report: DIR/report.html (one page, SVG charts, opens offline),\n"
    "DIR/report.json (every number on the page, each run's metrics lines), and\n"
    "DIR/runs/PRESET-seedS.jsonl (each run's metrics, kept as the run goes).\n"
    "The table is printed on stdout; the runs' own lines go to stderr. Before the runs,\n"
    "each preset's step is predicted ('dtrain plan --predict' of its command line) and\n"
    "shown beside the measured one (training time over steps); over 15% apart, the\n"
    "report names the part of the model most off (compute, communication, bubble,\n"
    "waiting).\n"
    "\n"
    "options:\n"
    "  --presets A,B,...   the presets to compare (see 'dtrain presets')\n"
    "  --out DIR           the report's folder: new, empty, or an earlier report [compare-report]\n"
    "  --force             write into DIR even if it holds other files (they are kept;\n"
    "                      a report.html or report.json not written by compare is refused)\n"
    "  --runs R            R runs of each preset, seeds --seed, --seed+1, ... [1]\n"
    "  --target-acc X      test accuracy (a fraction, 0 < X <= 1) whose time to reach\n"
    "                      the report compares\n"
    "  --trace             a timeline of each run: DIR/runs/PRESET-seedS.trace.json\n"
    "                      (with --trace-steps A:B, steps A to B-1 only)\n"
    "\n"
    "Every other option is a 'dtrain train' option (dtrain train --help) shared by all\n"
    "the runs: --model, --data, --workers, --epochs, --time-budget, --max-steps, --batch,\n"
    "--lr, --net, --straggler, --seed, ...; it overrides each preset's own value. Each\n"
    "preset must use every option given (the check of 'dtrain train'). Not allowed\n"
    "here: --preset (use --presets), --metrics, --checkpoint, --resume, --checkpoint-dir\n"
    "(compare writes its own files), --comm mpi (the runs share this process).\n"
    "\n"
    "example:\n"
    "  dtrain compare --presets horovod,petuum,local-sgd,gosgd --model mlp --workers 4 \\\n"
    "      --epochs 3 --net bandwidth=1Gbit --straggler rank=3,slowdown=3 --target-acc 0.8\n";

typedef struct {
  char *presets[MAX_PRESETS];
  int npresets;
  char plist[1024];
  int runs, force, trace;
  double target_acc;
  const char *out;
  long long seed;
  char **rest;                  /* the train options: rest[0] is a placeholder */
  int nrest;
} compare_opts_t;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("dtrain compare: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

static int known_presets(char *buf, size_t cap) {
  int n;
  const preset_t *p = preset_list(&n);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < n && len < cap; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", p[i].name);
  return n;
}

/* A later --presets replaces an earlier one, as a later option does in train. */
static int set_presets(void *ov, const char *val, void *ctx) {
  compare_opts_t *o = ov;
  if (strlen(val) >= sizeof o->plist) return dt_error("--presets: list too long");
  strcpy(o->plist, val);
  o->npresets = 0;
  for (char *w = o->plist, *next; w; w = next) {
    next = strchr(w, ',');
    if (next) *next++ = 0;
    if (!*w) return dt_error("--presets %s: an empty name in the list (write A,B,...)", val);
    if (!preset_find(w)) {
      char known[2048];
      known_presets(known, sizeof known);
      return dt_error("--presets: unknown preset '%s' (known: %s)", w, known);
    }
    for (int i = 0; i < o->npresets; i++)
      if (!strcmp(o->presets[i], w)) return dt_error("--presets: '%s' is named twice", w);
    if (o->npresets == MAX_PRESETS) return dt_error("--presets: more than %d presets", MAX_PRESETS);
    o->presets[o->npresets++] = w;
  }
  return 0;
}

static int set_out(void *o, const char *val, void *ctx) { return ((compare_opts_t *)o)->out = val, 0; }

static int set_target_acc(void *o, const char *val, void *ctx) {
  double fv;
  DT_TRY(parse_float("target-acc", val, -HUGE_VAL, HUGE_VAL, &fv));
  if (!(fv > 0 && fv <= 1))
    return dt_error("option --target-acc: %g is out of range (expected a fraction, 0 < X <= 1)", fv);
  return ((compare_opts_t *)o)->target_acc = fv, 0;
}

/* compare's own options (dtrain/opt.h); the others go to train's parser. */
#define O compare_opts_t
static const opt_t OWN[] = {
    {"presets", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_presets},
    {"out", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_out},
    {"runs", OPT_INT, OPT_FIELD(O, runs), 1, MAX_RUNS, 0, NULL, NULL, NULL},
    {"target-acc", OPT_FUNC, 0, 0, 0, 0, 0, NULL, NULL, set_target_acc},
    {"seed", OPT_INT, OPT_FIELD(O, seed), 0, (double)((1L << 62) - MAX_RUNS), 0, NULL, NULL, NULL},
    {"force", OPT_FLAG, OPT_FIELD(O, force), 1, 1, 0, NULL, NULL, NULL},
    {"trace", OPT_FLAG, OPT_FIELD(O, trace), 1, 1, 0, NULL, NULL, NULL},
};
#undef O
static const opt_table_t OWN_TABLE = {OWN, (int)(sizeof OWN / sizeof OWN[0]), sizeof OWN[0],
                                      "dtrain compare"};

static int refused_option(const char *name, const char *val) {
  if (!strcmp(name, "preset"))
    return usage_error("option --preset: compare takes --presets A,B,... (a list)");
  if (!strcmp(name, "metrics") || !strcmp(name, "checkpoint") || !strcmp(name, "resume") ||
      !strcmp(name, "checkpoint-dir") || (!strcmp(name, "trace") && val))
    return usage_error("option --%s: compare writes each run's metrics (and with --trace, its "
                       "timeline) into --out DIR/runs/ and keeps no checkpoints", name);
  if (!strcmp(name, "comm") && val && strcmp(val, "local") != 0)
    return usage_error("option --comm %s: compare runs its presets in this process (--comm local); "
                       "run 'dtrain train --comm mpi' for each instead", val);
  return 0;
}

static int parse(int argc, char **argv, compare_opts_t *o) {
  *o = (compare_opts_t){.runs = 1, .target_acc = NAN, .out = "compare-report", .seed = 1};
  o->rest = calloc((size_t)argc + 8, sizeof *o->rest);
  if (!o->rest) return usage_error("out of memory");
  o->rest[o->nrest++] = "train";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0 || !a[2]) {
      o->rest[o->nrest++] = argv[i]; /* train_options_parse names it */
      continue;
    }
    char name[64];
    const char *eq = strchr(a, '='), *val = NULL;
    size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), a + 2);
    if (eq) val = eq + 1;
    else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) val = argv[i + 1];
    int id = opt_find(&OWN_TABLE, a + 2, n);
    if (id >= 0 && !(eq && OWN[id].kind == OPT_FLAG)) { /* --trace=F: train's, refused below */
      const char *v;
      if (opt_next(&OWN_TABLE, argc, argv, &i, &id, &v) != 0 || opt_set(&OWN[id], o, v, NULL) != 0)
        return usage_error("%s", dt_errmsg());
      continue;
    }
    if (refused_option(name, val) != 0) return 2;
    o->rest[o->nrest++] = argv[i];
  }
  if (!o->npresets) return usage_error("--presets A,B,... is required (see dtrain compare --help)");
  return 0;
}

/* ---- the output folder ------------------------------------------------------ */

/* 1 when DIR is empty or an earlier report (it holds the marker). */
static int reusable(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/" MARKER, dir);
  if (access(path, F_OK) == 0) return 1;
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int empty = 1;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
  closedir(d);
  return empty;
}

/* The report's own files: each absent or a regular file that compare
 * wrote (its mark at the start), never a link, a pipe or another's file;
 * runs/ absent or a folder. Checked before anything is written. */
static int check_report_files(const char *out) {
  static const struct { const char *name, *magic; } files[] = {
      {"report.json", REPORT_JSON_MAGIC}, {"report.html", REPORT_HTML_MAGIC}, {MARKER, ""}};
  char path[4096];
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    snprintf(path, sizeof path, "%s/%s", out, files[i].name);
    int rc = files[i].magic[0] ? file_check_output(path, files[i].magic) : file_check_regular(path);
    if (rc != 0) return usage_error("--out %s: %s", out, dt_errmsg());
  }
  struct stat st;
  snprintf(path, sizeof path, "%s/runs", out);
  if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode))
    return usage_error("--out %s: %s exists and is %s; compare writes its runs into a folder of "
                       "its own (remove it or choose another --out)", out, path,
                       S_ISLNK(st.st_mode) ? "a symbolic link" : "not a folder");
  return 0;
}

/* --out: new, empty, an earlier report, or (--force) another folder;
 * a symbolic link to a folder is that folder. Writes nothing. */
static int check_out(const compare_opts_t *o) {
  struct stat st;
  if (lstat(o->out, &st) != 0) return 0; /* new: made by make_out */
  if (stat(o->out, &st) != 0)
    return usage_error("--out %s: a symbolic link to nothing (remove it or choose another --out)",
                       o->out);
  if (!S_ISDIR(st.st_mode)) return usage_error("--out %s: exists and is not a folder", o->out);
  if (!reusable(o->out) && !o->force)
    return usage_error("--out %s: the folder exists and is not an earlier report (add --force "
                       "to write into it)", o->out);
  return check_report_files(o->out);
}

/* The folder and its runs/, noting which were made here (undo_out removes
 * them, empty, when a later check fails). */
static int make_out(const compare_opts_t *o, int made[2]) {
  char path[4096];
  made[0] = made[1] = 0;
  if (mkdir(o->out, 0777) == 0) made[0] = 1;
  else if (errno != EEXIST)
    return usage_error("--out %s: cannot create the folder: %s", o->out, strerror(errno));
  snprintf(path, sizeof path, "%s/runs", o->out);
  if (mkdir(path, 0777) == 0) made[1] = 1;
  else if (errno != EEXIST)
    return usage_error("--out %s: cannot create %s: %s", o->out, path, strerror(errno));
  return 0;
}

static void undo_out(const compare_opts_t *o, const int made[2]) {
  char path[4096];
  snprintf(path, sizeof path, "%s/runs", o->out);
  if (made[1]) rmdir(path);
  if (made[0]) rmdir(o->out);
}

/* After every check: the earlier report goes (an interrupted comparison
 * must not leave it beside runs it does not describe), and the marker
 * makes the folder an earlier report for the next comparison. */
static int claim_out(const compare_opts_t *o) {
  char path[4096];
  static const char *const old[] = {"report.json", "report.html"};
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/%s", o->out, old[i]);
    if (unlink(path) != 0 && errno != ENOENT)
      return usage_error("--out %s: cannot remove the earlier %s: %s", o->out, path, strerror(errno));
  }
  snprintf(path, sizeof path, "%s/" MARKER, o->out);
  static const char text[] = "a report of dtrain compare: report.html, report.json, runs/\n";
  if (file_write_atomic(path, text, sizeof text - 1) != 0)
    return usage_error("--out %s: cannot write: %s", o->out, dt_errmsg());
  return 0;
}

/* ---- the runs ------------------------------------------------------------------ */

typedef struct {
  train_config_t cfg;
  run_log_t log;
} run_slot_t;

/* The train argv of one run: the shared options, then the preset, the
 * seed and the metrics file (compare's own, given last). */
static int run_config(const compare_opts_t *o, const char *preset, long long seed, run_slot_t *s) {
  char seedbuf[32], metrics[600], trace[600];
  snprintf(seedbuf, sizeof seedbuf, "%lld", seed);
  snprintf(s->log.file, sizeof s->log.file, "runs/%s-seed%lld.jsonl", preset, seed);
  snprintf(metrics, sizeof metrics, "%s/%s", o->out, s->log.file);
  snprintf(trace, sizeof trace, "%s/runs/%s-seed%lld.trace.json", o->out, preset, seed);
  snprintf(s->log.preset, sizeof s->log.preset, "%s", preset);
  s->log.seed = seed;
  char *argv[o->nrest + 11];
  int argc = 0;
  for (int i = 0; i < o->nrest; i++) argv[argc++] = o->rest[i];
  argv[argc++] = "--preset";
  argv[argc++] = (char *)preset;
  argv[argc++] = "--seed";
  argv[argc++] = seedbuf;
  argv[argc++] = "--metrics";
  argv[argc++] = metrics;
  argv[argc++] = "--quiet";
  if (o->trace) argv[argc++] = "--trace", argv[argc++] = trace;
  argv[argc] = NULL;
  if (train_options_parse(argc, argv, &s->cfg) != 0) return -1;
  if (s->cfg.comm != COMM_LOCAL) return dt_error("--comm mpi: compare runs its presets on --comm local");
  return 0;
}

/* One run, its stdout lines sent to stderr (stdout is the table's). */
static void run_one(run_slot_t *s, int index, int total) {
  fprintf(stderr, "== compare: %s, seed %lld (%d/%d)\n", s->log.preset, s->log.seed, index, total);
  fflush(stdout);
  int saved = dup(1);
  if (saved >= 0) dup2(2, 1);
  dt_error_clear();
  int argc = 1;
  char *args[] = {"dtrain", NULL}, **argv = args;
  double t0 = dt_now();
  int rc = train_run(&s->cfg, &argc, &argv);
  fflush(stdout);
  if (saved >= 0) dup2(saved, 1), close(saved);
  if (rc != 0) snprintf(s->log.error, sizeof s->log.error, "%s", dt_errmsg());
  char path[4096];
  snprintf(path, sizeof path, "%s", s->cfg.metrics);
  if (run_log_read(&s->log, path) != 0 && !s->log.error[0])
    snprintf(s->log.error, sizeof s->log.error, "%s", dt_errmsg());
  s->log.ok = rc == 0 && s->log.has_done && !s->log.error[0];
  if (rc == 0 && !s->log.has_done && !s->log.error[0])
    snprintf(s->log.error, sizeof s->log.error, "the run wrote no \"done\" line");
  fprintf(stderr, "== compare: %s, seed %lld: %s (%.1f s)%s%s\n", s->log.preset, s->log.seed,
          s->log.ok ? "done" : "FAILED", dt_now() - t0, s->log.ok ? "" : ": ", s->log.error);
}

/* Each preset's step predicted (dtrain plan --predict of its first run's
 * command line, the transports' own estimates), before any run loads the
 * machine; a preset the model does not cover says why. */
static report_prediction_t *predict_presets(const compare_opts_t *o) {
  report_prediction_t *pr = calloc((size_t)o->npresets, sizeof *pr);
  perf_profile_t prof;
  perf_profile_default(&prof);
  perf_cache_t cache = {0}; /* the data set's shapes, read once (the layers: each preset's own) */
  for (int i = 0; pr && i < o->npresets; i++) {
    run_slot_t s = {0};
    perf_plan_t plan;
    dt_error_clear();
    if (run_config(o, o->presets[i], o->seed, &s) == 0 && perf_predict(&s.cfg, &prof, &cache, &plan) == 0)
      pr[i] = (report_prediction_t){1, plan.step_sec, plan.compute_sec, ""};
    else
      snprintf(pr[i].why, sizeof pr[i].why, "%s", dt_errmsg());
    perf_compute_free(&cache.compute); /* a preset may build another model */
    cache.compute = (perf_compute_t){0};
  }
  perf_cache_free(&cache);
  kern_set_threads(1);
  return pr;
}

/* ---- the report -------------------------------------------------------------- */

static void join_args(char *buf, size_t cap, int argc, char **argv, int from) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = from; i < argc && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", i > from ? " " : "", argv[i]);
}

static int write_report(const compare_opts_t *o, report_t *rep) {
  if (report_summarize(rep, (const char *const *)o->presets, o->npresets) != 0) return -1;
  report_verdicts(rep);
  report_predictions(rep);
  strbuf_t json = {0}, html = {0};
  char path[4096];
  int rc = report_json(rep, &json);
  if (rc == 0) rc = report_html(rep, &html);
  snprintf(path, sizeof path, "%s/report.json", o->out);
  if (rc == 0) rc = file_write_atomic(path, json.buf, json.len);
  snprintf(path, sizeof path, "%s/report.html", o->out);
  if (rc == 0) rc = file_write_atomic(path, html.buf, html.len);
  sb_free(&json);
  sb_free(&html);
  if (rc == 0) report_table(rep, stdout);
  return rc;
}

int cmd_compare(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(COMPARE_HELP, stdout), 0;
  kern_set_threads(1);
  compare_opts_t o;
  int rc = parse(argc, argv, &o);
  int total = o.npresets * o.runs;
  run_slot_t *slots = rc == 0 ? calloc((size_t)total, sizeof *slots) : NULL;
  if (rc == 0 && !slots) rc = usage_error("out of memory");
  for (int i = 0; rc == 0 && i < total; i++) {
    const char *preset = o.presets[i / o.runs];
    if (run_config(&o, preset, o.seed + i % o.runs, &slots[i]) != 0)
      rc = usage_error("preset %s: %s", preset, dt_errmsg());
  }
  int made[2] = {0, 0};
  if (rc == 0) rc = check_out(&o);
  if (rc == 0) rc = make_out(&o, made);
  for (int i = 0; rc == 0 && i < total; i++)
    if (train_check_outputs(&slots[i].cfg) != 0) rc = usage_error("%s", dt_errmsg());
  if (rc != 0) undo_out(&o, made);
  if (rc == 0) rc = claim_out(&o);
  if (rc != 0) {
    free(slots);
    free(o.rest);
    return rc;
  }
  report_prediction_t *predicted = predict_presets(&o);
  dt_catch_interrupts();
  int failed = 0;
  for (int i = 0; i < total && !dt_interrupted(); i++) {
    run_one(&slots[i], i + 1, total);
    failed += !slots[i].log.ok;
  }
  char command[4096], task[4096];
  join_args(command, sizeof command, argc, argv, 0);
  join_args(task, sizeof task, o.nrest, o.rest, 1);
  report_t rep = {.target_acc = o.target_acc, .command = command,
                  .task = task[0] ? task : "the defaults of dtrain train", .predictions = predicted};
  rep.runs = calloc((size_t)total, sizeof *rep.runs);
  rep.nruns = total;
  if (dt_interrupted()) {
    rc = 128 + dt_interrupted();
    fprintf(stderr, "dtrain compare: interrupted by %s: no report written; the runs' metrics "
                    "are kept in %s/runs/\n", dt_signal_name(dt_interrupted()), o.out);
  } else if (!rep.runs) {
    rc = usage_error("out of memory");
  } else {
    for (int i = 0; i < total; i++) rep.runs[i] = slots[i].log;
    if (write_report(&o, &rep) != 0) {
      fprintf(stderr, "dtrain compare: the report: %s\n", dt_errmsg());
      rc = 1;
    } else if (failed) {
      fprintf(stderr, "dtrain compare: %d of %d runs failed (the report shows why): %s/report.html\n",
              failed, total, o.out);
      rc = 1;
    } else {
      fprintf(stderr, "dtrain compare: report in %s/report.html and %s/report.json\n", o.out, o.out);
    }
  }
  report_free(&rep);
  free(rep.runs);
  free(predicted);
  for (int i = 0; i < total; i++) run_log_free(&slots[i].log);
  free(slots);
  free(o.rest);
  return rc;
}
