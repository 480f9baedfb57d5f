/* report: the comparison of several runs on one task (dtrain compare).
 * Each run's JSON Lines metrics are read back (runlog.c), the runs of a
 * preset are summed up into its figures (summary.c), the figures give each
 * preset a verdict in words (verdict.c), and the whole is written as
 * report.json (report_json.c) and as one self-contained page with SVG
 * charts (report_html.c, svg.c). Every number on the page comes from the
 * figures, and the figures from the metrics, so a test can check them
 * against each other. */
#ifndef DTRAIN_REPORT_H
#define DTRAIN_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "core/strbuf.h"

/* ---- one run's metrics (runlog.c) -------------------------------------------- */
typedef struct {
  double epoch, step, train_loss, test_loss, test_acc, samples_per_sec, epoch_sec, eval_sec;
  double compute_sec, comm_sec, comm_exposed_sec, bytes_sent, bytes_sent_per_step;
  double wait_sec;              /* NAN where the schedule does not measure it */
  double bubble_sec;            /* a pipeline's idle waiting for its neighbours; NAN: none */
  double staleness_mean;        /* NAN where the schedule has none */
} epoch_line_t;

typedef struct {
  char preset[32];
  long long seed;
  char file[512];               /* the metrics file, relative to the report's folder */
  int ok;                       /* the run ended with a "done" line and no error */
  char error[512];              /* why it failed or diverged; "" when ok */
  epoch_line_t *epochs;
  int nepochs;
  int has_done;
  double total_sec, samples_per_sec, test_acc, bytes_sent;  /* the "done" line */
  char *lines;                  /* the file's whole lines, as they are */
  size_t lines_len;
} run_log_t;

/* Reads `path` (whole lines only; a cut last line is left out). A file
 * that is missing or empty gives a run with no epochs. */
int run_log_read(run_log_t *r, const char *path);
void run_log_free(run_log_t *r);
/* The number after "key": in a flat JSON object line; NAN when absent. */
double json_line_number(const char *line, const char *key);

/* ---- a preset's figures (summary.c) ------------------------------------------ */
#define REPORT_SERIES_MAX 4096
#define VERDICT_CLAUSES_MAX 6

typedef struct {
  const char *kind;             /* first, reached, not_reached, best_final, final,
                                   hidden, exposed, bytes, throughput, staleness, failed */
  double value;                 /* the number the clause cites */
  char text[200];
} verdict_clause_t;

typedef struct {
  char name[32];
  int runs, ok;                 /* runs made, runs that ended well */
  char error[512];              /* the first failed run's error, or "" */
  /* per evaluated epoch, the mean over the runs that have it (as many
   * points as the shortest of the preset's runs) */
  int npoints;
  double *wall_sec, *samples, *test_acc, *train_loss, *step;
  /* totals, the mean over the runs that ended well (NAN when none did) */
  double final_acc, time_to_target;  /* NAN: target not reached (or no target) */
  int reached;                  /* runs that reached the target */
  double samples_per_sec, bytes_sent, bytes_per_step, total_sec;
  double train_sec, compute_sec, comm_sec, comm_exposed_sec, eval_sec, other_sec;
  double wait_sec;              /* of comm_exposed_sec, waiting for slower ranks; NAN: not measured */
  double bubble_sec;            /* of comm_exposed_sec, a pipeline's bubble; NAN: no pipeline */
  double comm_hidden_frac;      /* (comm - exposed) / comm; NAN without communication */
  double staleness_mean;        /* NAN where the schedule has none */
  verdict_clause_t verdict[VERDICT_CLAUSES_MAX];
  int nverdict;
  /* the performance model beside the measurement (prediction.c): a step's
   * seconds and its compute, and the rest (exposed communication, bubble,
   * waiting), predicted and measured (train_sec over the steps run) */
  int predicted;                /* 1: the model predicted this preset */
  double pred_step_sec, pred_compute_sec, meas_step_sec, meas_compute_sec, pred_error;
  const char *pred_off;         /* the part most off, where |error| > 15%: "compute",
                                   "communication", "bubble", "waiting"; NULL otherwise */
  char pred_text[240];          /* the comparison in words, or why it was not predicted */
} preset_summary_t;

/* A preset's prediction (dtrain plan --predict of its first run's command
 * line), given by the caller: ok 0 with why when the model does not
 * cover it. */
typedef struct {
  int ok;
  double step_sec, compute_sec;
  char why[200];
} report_prediction_t;

typedef struct {
  double target_acc;            /* NAN: none given */
  const char *command;          /* the command line, for the page */
  const char *task;             /* the shared options, in words */
  run_log_t *runs;
  int nruns;
  preset_summary_t *presets;
  int npresets;
  const report_prediction_t *predictions; /* [npresets], in the presets' order; NULL: none */
} report_t;

/* The presets' figures from their runs (runs[i].preset names the preset). */
int report_summarize(report_t *rep, const char *const *presets, int npresets);
void report_free(report_t *rep);
/* Each preset's verdict, from the figures of all (verdict.c). */
void report_verdicts(report_t *rep);

/* Each preset's predicted step beside its measured one (prediction.c):
 * the error, and where it is over 15% the part of the model most off. */
void report_predictions(report_t *rep);

/* The report's text (report_json.c, report_html.c) and the table (stdout). */
int report_json(const report_t *rep, strbuf_t *out);
int report_html(const report_t *rep, strbuf_t *out);
void report_table(const report_t *rep, FILE *f);

#endif
