/* opt: a command's options as data. One row per option: its name, how its
 * value is read -- a flag, an integer or a float in a range, on/off, one
 * of a few words, a path, or a function of the command's own -- and the
 * field it sets, an offset into the command's struct. `dtrain train`
 * (src/strategy/options.c), `compare` and `bench allreduce` keep their
 * rows; the reading of argv (--name VALUE or --name=VALUE, flags, the
 * messages for what is missing, empty or unknown) is this file's, once. */
#ifndef DTRAIN_OPT_H
#define DTRAIN_OPT_H

#include <stddef.h>

typedef enum { OPT_FLAG, OPT_INT, OPT_FLOAT, OPT_ONOFF, OPT_WORDS, OPT_PATH, OPT_FUNC } opt_kind_t;

/* A value of the command's own: set it in target (ctx: the command's
 * parse state); 0, or -1 with one line naming the option. */
typedef int (*opt_fn)(void *target, const char *val, void *ctx);

typedef struct {
  const char *name;     /* without the leading -- */
  opt_kind_t kind;
  size_t off, size;     /* the field in the target struct (PATH: its buffer) */
  double lo, hi;        /* INT, FLOAT: the range; FLAG: the value it sets (lo) */
  long scale;           /* INT: stored as value x scale (KiB: 1024); 0 = 1 */
  const char *words;    /* WORDS: "local|mpi": word i stores values[i], or i */
  const int *values;
  opt_fn fn;            /* FUNC */
} opt_t;

/* Rows of the field `f` of struct T. */
#define OPT_FIELD(T, f) offsetof(T, f), sizeof(((T *)0)->f)

/* Sets o's field in target from val (NULL for a flag). */
int opt_set(const opt_t *o, void *target, const char *val, void *ctx);

/* A command's table: n rows `stride` bytes apart, each beginning with its
 * opt_t (a command adds its own columns after it). */
typedef struct {
  const void *rows;
  int n;
  size_t stride;
  const char *command;  /* "dtrain train", for the messages */
} opt_table_t;

static inline const opt_t *opt_row(const opt_table_t *t, int i) {
  return (const opt_t *)((const char *)t->rows + (size_t)i * t->stride);
}
/* The row named name[0..len), or -1. */
int opt_find(const opt_table_t *t, const char *name, size_t len);
/* Reads the option at argv[*i] (moving *i past its value): its row in
 * *id and its value in *val (NULL for a flag). -1 with one line: not an
 * option, unknown (naming the nearest), a value missing or empty, a value
 * given to a flag. */
int opt_next(const opt_table_t *t, int argc, char **argv, int *i, int *id, const char **val);
#endif
