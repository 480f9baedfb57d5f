/* Option value parsing with errors that name the option and the value. */
#include "dtrain/core.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <strings.h>

int parse_int(const char *opt, const char *text, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  if (!text || !*text) return dt_error("option --%s: missing value (expected an integer)", opt);
  long v = strtol(text, &end, 10);
  if (*end || end == text) return dt_error("option --%s: '%s' is not an integer", opt, text);
  if (errno == ERANGE) /* an integer all the same: say what range would do */
    return dt_error("option --%s: %s is out of range (expected %ld..%ld)", opt, text, lo, hi);
  if (v < lo || v > hi)
    return dt_error("option --%s: %ld is out of range (expected %ld..%ld)", opt, v, lo, hi);
  *out = v;
  return 0;
}

int parse_float(const char *opt, const char *text, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  if (!text || !*text) return dt_error("option --%s: missing value (expected a number)", opt);
  double v = strtod(text, &end);
  if (errno || *end || !isfinite(v)) return dt_error("option --%s: '%s' is not a number", opt, text);
  if (v < lo || v > hi)
    return dt_error("option --%s: %g is out of range (expected %g..%g)", opt, v, lo, hi);
  *out = v;
  return 0;
}

/* Split "12.5unit" into a number and a unit suffix. */
static int number_and_unit(const char *text, double *v, const char **unit) {
  char *end;
  errno = 0;
  *v = strtod(text, &end);
  if (errno || end == text || !isfinite(*v) || *v < 0) return -1;
  *unit = end;
  return 0;
}

typedef struct { const char *name; double scale; } unit_t;

/* The scale of unit `u` (case-insensitive; a trailing "/s" dropped when
 * per_second), or 0 when the table has no such unit. */
static double unit_scale(const char *u, const unit_t *units, size_t n, int per_second) {
  char name[16];
  size_t len = strlen(u);
  if (len >= sizeof name) return 0;
  memcpy(name, u, len + 1);
  if (per_second && len > 2 && strcasecmp(name + len - 2, "/s") == 0) name[len - 2] = 0;
  for (size_t i = 0; i < n; i++)
    if (strcasecmp(name, units[i].name) == 0) return units[i].scale;
  return 0;
}

/* A number with a unit from the table: a duration, or (bandwidth) a
 * positive rate whose unit may end in "/s". */
static int parse_with_unit(const char *opt, const char *text, const unit_t *units, size_t n,
                           int bandwidth, double *out) {
  double v = 0, scale = 0;
  const char *u;
  if (text && number_and_unit(text, &v, &u) == 0 && (!bandwidth || v > 0))
    scale = unit_scale(u, units, n, bandwidth);
  if (scale > 0) {
    *out = v * scale;
    return 0;
  }
  return dt_error("option --%s: '%s' is not a %s (examples: %s)", opt, text ? text : "",
                  bandwidth ? "bandwidth" : "duration",
                  bandwidth ? "1Gbit, 100Mbit, 10GB" : "50us, 2ms, 0.1s");
}

int parse_duration(const char *opt, const char *text, double *seconds) {
  static const unit_t units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"", 1}};
  return parse_with_unit(opt, text, units, sizeof units / sizeof *units, 0, seconds);
}

/* Bits or bytes per second ("/s" optional). */
int parse_bandwidth(const char *opt, const char *text, double *bytes_per_sec) {
  static const unit_t units[] = {
      {"bit", 1.0 / 8},  {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8},
      {"b", 1},          {"kb", 1e3},       {"mb", 1e6},       {"gb", 1e9},
      {"bps", 1.0 / 8},  {"kbps", 1e3 / 8}, {"mbps", 1e6 / 8}, {"gbps", 1e9 / 8}};
  return parse_with_unit(opt, text, units, sizeof units / sizeof *units, 1, bytes_per_sec);
}

int parse_megabytes(const char *opt, const char *text, size_t *bytes) {
  double v = 0;
  if (parse_float(opt, text, 0, 1e6, &v) != 0) return -1;
  *bytes = (size_t)(v * 1024 * 1024);
  return 0;
}

int name_index(const char *name, const char *const *names, int n) {
  for (int k = 0; name && k < n; k++)
    if (strcmp(name, names[k]) == 0) return k;
  return -1;
}

const char *name_of(int k, const char *const *names, int n) {
  return k >= 0 && k < n ? names[k] : "unknown";
}

/* "key=value,key=value" of option --opt: each item a known key (keys[],
 * nkeys of them) given at most once with a non-empty value; vals[i] is the
 * value of keys[i] or NULL. The values point into buf. */
int parse_items(const char *opt, const char *val, const char *example, char *buf, size_t cap,
                const char *const *keys, int nkeys, const char **vals) {
  if (strlen(val) >= cap) return dt_error("option --%s: value too long (example: %s)", opt, example);
  strcpy(buf, val);
  for (int i = 0; i < nkeys; i++) vals[i] = NULL;
  char *item = buf;
  for (;;) {
    char *comma = strchr(item, ',');
    if (comma) *comma = 0;
    if (!*item) return dt_error("option --%s: empty item in '%s' (example: %s)", opt, val, example);
    char *eq = strchr(item, '=');
    if (!eq) return dt_error("option --%s: '%s' is not key=value (example: %s)", opt, item, example);
    *eq = 0;
    int k = -1;
    for (int i = 0; i < nkeys; i++)
      if (!strcmp(item, keys[i])) k = i;
    if (k < 0) {
      char known[128] = "";
      for (int i = 0; i < nkeys; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", keys[i]);
      return dt_error("option --%s: unknown key '%s' (expected %s)", opt, item, known);
    }
    if (vals[k]) return dt_error("option --%s: key '%s' given twice in '%s'", opt, item, val);
    if (!eq[1]) return dt_error("option --%s: key '%s' has an empty value (example: %s)", opt, item, example);
    vals[k] = eq + 1;
    if (!comma) return 0;
    item = comma + 1;
  }
}

