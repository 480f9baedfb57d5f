/* opt: options as data (include/dtrain/opt.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/core.h"
#include "dtrain/opt.h"

static int set_int(const opt_t *o, char *field, const char *val) {
  long v;
  DT_TRY(parse_int(o->name, val, (long)o->lo, (long)o->hi, &v));
  long long s = (long long)v * (o->scale ? o->scale : 1);
  if (o->size == sizeof(int32_t)) *(int32_t *)field = (int32_t)s;
  else *(int64_t *)field = (int64_t)s;
  return 0;
}

static int set_float(const opt_t *o, char *field, const char *val) {
  double v;
  DT_TRY(parse_float(o->name, val, o->lo, o->hi, &v));
  if (o->size == sizeof(float)) *(float *)field = (float)v;
  else *(double *)field = v;
  return 0;
}

/* "a|b|c" -> "a, b or c" for the message */
static void words_text(const char *words, char *buf, size_t cap) {
  size_t n = 0;
  int k = 0, total = 1;
  for (const char *p = words; *p; p++) total += *p == '|';
  for (const char *p = words; *p && n + 8 < cap; k++) {
    size_t len = strcspn(p, "|");
    const char *sep = k == 0 ? "" : k == total - 1 ? " or " : ", ";
    n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", sep, (int)len, p);
    p += len + (p[len] == '|');
  }
}

static int set_word(const opt_t *o, char *field, const char *val) {
  const char *p = o->words;
  for (int k = 0; *p; k++) {
    size_t len = strcspn(p, "|");
    if (strlen(val) == len && !strncmp(p, val, len)) {
      *(int *)field = o->values ? o->values[k] : k;
      return 0;
    }
    p += len + (p[len] == '|');
  }
  char expected[160];
  words_text(o->words, expected, sizeof expected);
  return dt_error("option --%s: '%s' (expected %s)", o->name, val, expected);
}

int opt_set(const opt_t *o, void *target, const char *val, void *ctx) {
  char *field = (char *)target + o->off;
  switch (o->kind) {
  case OPT_FLAG: *(int *)field = (int)o->lo; return 0;
  case OPT_INT: return set_int(o, field, val);
  case OPT_FLOAT: return set_float(o, field, val);
  case OPT_ONOFF:
    if (!strcmp(val, "on")) *(int *)field = 1; /* the words the help gives, no others */
    else if (!strcmp(val, "off")) *(int *)field = 0;
    else return dt_error("option --%s: '%s' (expected on or off)", o->name, val);
    return 0;
  case OPT_WORDS: return set_word(o, field, val);
  case OPT_PATH:
    if (strlen(val) >= o->size)
      return dt_error("option --%s: path too long (max %zu)", o->name, o->size - 1);
    memcpy(field, val, strlen(val) + 1);
    return 0;
  case OPT_FUNC: return o->fn(target, val, ctx);
  }
  return dt_error("option --%s: no way to read it (a bug)", o->name);
}

int opt_find(const opt_table_t *t, const char *name, size_t len) {
  for (int i = 0; i < t->n; i++) {
    const char *r = opt_row(t, i)->name;
    if (strlen(r) == len && !strncmp(r, name, len)) return i;
  }
  return -1;
}

/* Edit distance of a[0..n) and b, capped: enough to suggest a near name. */
static int distance(const char *a, size_t n, const char *b) {
  size_t m = strlen(b);
  if (n > 64 || m > 64) return 99;
  int row[65];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[m];
}

/* The known option nearest to name[0..n), or NULL when none is near. */
static const char *nearest(const opt_table_t *t, const char *name, size_t n) {
  const char *best = NULL;
  int best_d = 99;
  for (int i = 0; i < t->n; i++) {
    const char *r = opt_row(t, i)->name;
    int d = distance(name, n, r);
    if (n >= 3 && n < strlen(r) && !strncmp(r, name, n)) d = 1; /* a prefix */
    if (d < best_d) best_d = d, best = r;
  }
  return best_d <= (n <= 4 ? 1 : 2) ? best : NULL;
}

static int unknown(const opt_table_t *t, const char *name, size_t n) {
  const char *near = nearest(t, name, n);
  int shown = n > 64 ? 64 : (int)n;
  if (near)
    return dt_error("unknown option --%.*s%s (did you mean --%s? see %s --help)", shown, name,
                    shown < (int)n ? "..." : "", near, t->command);
  return dt_error("unknown option --%.*s%s (see %s --help)", shown, name,
                  shown < (int)n ? "..." : "", t->command);
}

int opt_next(const opt_table_t *t, int argc, char **argv, int *i, int *id, const char **val) {
  const char *a = argv[*i];
  if (strncmp(a, "--", 2) != 0) {
    if (a[0] == '-' && a[1] && opt_find(t, a + 1, strlen(a + 1)) >= 0)
      return dt_error("unexpected argument '%s' (did you mean -%s?)", a, a);
    return dt_error("unexpected argument '%s' (options start with --)", a);
  }
  const char *eq = strchr(a, '=');
  size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
  if ((*id = opt_find(t, a + 2, n)) < 0) return unknown(t, a + 2, n);
  const opt_t *o = opt_row(t, *id);
  if (o->kind == OPT_FLAG) {
    if (eq) return dt_error("option --%s takes no value (got '%s')", o->name, eq + 1);
    *val = NULL;
  } else if (eq) {
    *val = eq + 1;
  } else {
    if (*i + 1 >= argc) return dt_error("option --%s: missing value", o->name);
    *val = argv[++*i];
    if (!strncmp(*val, "--", 2))
      return dt_error("option --%s: missing value (found the option %s; write --%s=VALUE for "
                      "a value that starts with --)", o->name, *val, o->name);
  }
  if (*val && !**val) return dt_error("option --%s: empty value", o->name);
  return 0;
}
