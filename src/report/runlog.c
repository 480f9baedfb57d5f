/* One run's JSON Lines metrics read back: the epoch lines' figures, the
 * "done" line's totals, and the lines themselves (report.json carries
 * them as they are). dtrain wrote the file, one object a line whose
 * nested objects (the epoch's "layers") come after its own keys, so a key
 * is found by its first quoted name; arrays of numbers (the parameter
 * servers' per-worker figures) are never read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/core.h"
#include "report/report.h"

double json_line_number(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return NAN;
  p += strlen(pat);
  char *end;
  double v = strtod(p, &end);
  return end == p ? NAN : v;
}

static int line_is(const char *line, const char *event) {
  char pat[64];
  snprintf(pat, sizeof pat, "{\"event\":\"%s\"", event);
  return !strncmp(line, pat, strlen(pat));
}

static epoch_line_t epoch_from(const char *l) {
  return (epoch_line_t){
      .epoch = json_line_number(l, "epoch"), .step = json_line_number(l, "step"),
      .train_loss = json_line_number(l, "train_loss"), .test_loss = json_line_number(l, "test_loss"),
      .test_acc = json_line_number(l, "test_acc"),
      .samples_per_sec = json_line_number(l, "samples_per_sec"),
      .epoch_sec = json_line_number(l, "epoch_sec"), .eval_sec = json_line_number(l, "eval_sec"),
      .compute_sec = json_line_number(l, "compute_sec"), .comm_sec = json_line_number(l, "comm_sec"),
      .comm_exposed_sec = json_line_number(l, "comm_exposed_sec"),
      .bytes_sent = json_line_number(l, "bytes_sent"),
      .bytes_sent_per_step = json_line_number(l, "bytes_sent_per_step"),
      .staleness_mean = json_line_number(l, "staleness_mean"),
      .wait_sec = json_line_number(l, "wait_sec"), .bubble_sec = json_line_number(l, "bubble_sec")};
}

static void read_line(run_log_t *r, const char *l) {
  if (line_is(l, "epoch")) {
    r->epochs[r->nepochs++] = epoch_from(l);
  } else if (line_is(l, "done")) {
    r->has_done = 1;
    r->total_sec = json_line_number(l, "total_sec");
    r->samples_per_sec = json_line_number(l, "samples_per_sec");
    r->test_acc = json_line_number(l, "test_acc");
    r->bytes_sent = json_line_number(l, "bytes_sent");
  } else if (line_is(l, "diverged") && !r->error[0]) {
    snprintf(r->error, sizeof r->error, "diverged at epoch %.0f", json_line_number(l, "epoch"));
  }
}

int run_log_read(run_log_t *r, const char *path) {
  uint8_t *data = NULL;
  size_t len = 0;
  r->nepochs = 0;
  r->has_done = 0;
  if (access(path, F_OK) == 0 && file_read_all(path, 0, &data, &len) != 0) return -1;
  while (len > 0 && data[len - 1] != '\n') len--; /* a cut last line is left out */
  size_t lines = 0;
  for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
  r->epochs = calloc(lines + 1, sizeof *r->epochs);
  r->lines = malloc(len + 1);
  if (!r->epochs || !r->lines) {
    free(data);
    return dt_error("%s: out of memory", path);
  }
  memcpy(r->lines, data ? (char *)data : "", len);
  r->lines[len] = 0;
  r->lines_len = len;
  free(data);
  for (char *l = r->lines, *nl; *l; l = nl + 1) {
    nl = strchr(l, '\n');
    *nl = 0;
    read_line(r, l);
    *nl = '\n';
  }
  return 0;
}

void run_log_free(run_log_t *r) {
  free(r->epochs);
  free(r->lines);
  r->epochs = NULL;
  r->lines = NULL;
}
