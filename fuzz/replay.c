/* Replays inputs through a fuzz target without libFuzzer: each argument is
 * a file, or a folder whose files are all replayed. `make test` runs
 * build/fuzz/replay_<name> fuzz/corpus/<name>, so every crash ever found
 * stays fixed, with any compiler and under SAN=1. Prints one
 * "PASS fuzz_replay_<name>" line (a crash kills the process instead, and
 * tests/run.sh counts the non-zero exit). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

#ifndef FUZZ_NAME
#define FUZZ_NAME "target"
#endif

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (!buf) {
    fprintf(stderr, "%s: out of memory\n", path);
    return -1;
  }
  /* the exact size, as libFuzzer passes it: reads past the end are caught */
  uint8_t *exact = malloc(n ? n : 1);
  if (exact) memcpy(exact, buf, n);
  free(buf);
  if (!exact) return -1;
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  int count = 0, errors = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      perror(argv[i]);
      errors++;
      continue;
    }
    if (!S_ISDIR(sb.st_mode)) {
      errors += replay_file(argv[i]) != 0;
      count++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    if (!dir) {
      perror(argv[i]);
      errors++;
      continue;
    }
    char **names = NULL;
    size_t nn = 0;
    for (struct dirent *e; (e = readdir(dir));) {
      if (e->d_name[0] == '.') continue;
      char **more = realloc(names, (nn + 1) * sizeof *names);
      if (!more) break;
      names = more;
      size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
      if (!(names[nn] = malloc(len))) break;
      snprintf(names[nn++], len, "%s/%s", argv[i], e->d_name);
    }
    closedir(dir);
    qsort(names, nn, sizeof *names, by_name); /* a stable order for the log */
    for (size_t k = 0; k < nn; k++) {
      errors += replay_file(names[k]) != 0;
      count++;
      free(names[k]);
    }
    free(names);
  }
  if (errors || count == 0) {
    printf("FAIL fuzz_replay_%s: %d inputs, %d unreadable\n", FUZZ_NAME, count, errors);
    return 1;
  }
  printf("PASS fuzz_replay_%s (%d inputs)\n", FUZZ_NAME, count);
  return 0;
}
