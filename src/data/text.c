/* Text as bytes (--data text:PATH, --data fortunes): any file read as a
 * sequence of bytes, vocabulary 256, cut into non-overlapping windows of
 * seq_len tokens. Window i is bytes [i·T, i·T + T) as the input and
 * bytes [i·T + 1, i·T + T + 1) as the targets, so the last window needs
 * one byte past it. The last 10% of the windows (whole windows, taken from
 * the end of the text) are the validation split, the rest the training
 * split: held-out text the model never saw.
 *
 * The bytes stay bytes (uint8, as IDX pixels do); data_gather writes the
 * token ids as floats (the embedding reads them) and the T targets of a
 * sample as its labels. The default corpus is the Debian package
 * `fortunes`: its 43 plain files (not the .dat indexes, not the .u8
 * links), concatenated in name order. */
#include "dtrain/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TEXT_VOCAB 256
#define HOLDOUT_DIV 10   /* the last 1/10 of the windows: validation */

/* Appends the whole file at path to *buf (growing it). */
static int append_file(const char *path, uint8_t **buf, size_t *len, size_t *cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return dt_error("--data text:%s: cannot open it (%s)", path, strerror(errno));
  for (;;) {
    if (*len == *cap) {
      size_t nc = *cap ? *cap * 2 : 1 << 20;
      uint8_t *nb = realloc(*buf, nc);
      if (!nb) { fclose(f); return dt_error("out of memory reading %s", path); }
      *buf = nb, *cap = nc;
    }
    size_t got = fread(*buf + *len, 1, *cap - *len, f);
    *len += got;
    if (got == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  return bad ? dt_error("--data text:%s: read error", path) : 0;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The fortunes corpus: every regular file of dir that is not an index
 * (.dat) or a link (.u8), in name order. */
static int read_corpus_dir(const char *dir, uint8_t **buf, size_t *len) {
  DIR *d = opendir(dir);
  if (!d)
    return dt_error("--data fortunes: %s not found (install the Debian package fortunes: "
                    "scripts/install-deps.sh, or pass --data text:FILE)", dir);
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256) {
    if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8")) continue;
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  size_t cap = 0;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (rc == 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) rc = append_file(path, buf, len, &cap);
    free(names[i]);
  }
  return rc;
}

int data_is_text(const char *spec) {
  return spec && (strcmp(spec, "fortunes") == 0 || strncmp(spec, "text:", 5) == 0);
}

int dataset_load_text(const char *spec, int seq_len, int train, dataset_t *out) {
  memset(out, 0, sizeof *out);
  if (seq_len < 1) return dt_error("--seq-len must be >= 1 (got %d)", seq_len);
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  const char *what = spec;
  int rc;
  if (strcmp(spec, "fortunes") == 0) {
    rc = read_corpus_dir(FORTUNES_DIR, &buf, &len);
  } else {
    what = spec + 5;
    if (!*what) return dt_error("--data text:PATH: the path is empty (e.g. --data text:book.txt)");
    rc = append_file(what, &buf, &len, &cap);
  }
  if (rc != 0) { free(buf); return -1; }
  /* windows of T inputs, each target one byte later: the last needs T + 1 */
  size_t windows = len > 0 ? (len - 1) / (size_t)seq_len : 0;
  size_t held = windows / HOLDOUT_DIV;
  if (windows < 2 || held < 1) {
    free(buf);
    return dt_error("--data %s: %zu bytes make %zu windows of --seq-len %d (+1 for the targets); "
                    "at least %d are needed to hold out 10%% for validation: use a longer file "
                    "(at least %zu bytes) or a smaller --seq-len", spec, len, windows, seq_len,
                    HOLDOUT_DIV, (size_t)HOLDOUT_DIV * (size_t)seq_len + 1);
  }
  size_t first = train ? 0 : windows - held;
  out->n = train ? windows - held : held;
  out->c = 1, out->h = 1, out->w = seq_len;
  out->dim = (size_t)seq_len;
  out->nclasses = TEXT_VOCAB;
  out->text = buf;
  out->text_len = len;
  out->text_first = first;
  out->ylen = (size_t)seq_len;
  snprintf(out->source, sizeof out->source, "%s %s (%zu bytes, %zu windows of %d)",
           strcmp(spec, "fortunes") == 0 ? "fortunes" : what, train ? "train" : "validation", len,
           out->n, seq_len);
  return 0;
}

/* Window `w` of the split: its T input bytes as floats and its T targets. */
void text_gather(const dataset_t *d, size_t w, float *x, int32_t *y) {
  const size_t T = d->dim;
  const uint8_t *p = d->text + (d->text_first + w) * T;
  if (x)
    for (size_t t = 0; t < T; t++) x[t] = (float)p[t];
  for (size_t t = 0; t < T; t++) y[t] = p[t + 1];
}
