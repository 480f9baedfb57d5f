/* Fuzz target: the option parser of `dtrain train` (train_options_parse,
 * src/strategy/options.c) and the checks that follow it, never training. The
 * input is split on NUL or newline into argv[1..]; argv[0] is "train". */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/train.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "train";
  char *p = text, *end = text + size;
  while (p <= end && argc <= MAX_ARGS) {
    char *q = p;
    while (q < end && *q && *q != '\n') q++;
    *q = 0;
    argv[argc++] = p;
    p = q + 1;
  }
  argv[argc] = NULL;
  train_config_t cfg;
  dt_error_clear();
  if (train_options_parse(argc, argv, &cfg) != 0) {
    const char *msg = dt_errmsg(); /* one line, always set */
    if (!msg[0] || strchr(msg, '\n')) abort();
  }
  free(text);
  return 0;
}
