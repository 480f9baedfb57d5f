/* The transport's own costs: alpha (seconds a message) and beta (bytes a
 * second of copying and summing), on local (ranks as threads: with a core
 * each, and more ranks than cores) and mpi. Without a calibration profile
 * these are the transports' own estimates (local.c's link_estimate:
 * ~5 us a hop, ~20 us when threads share cores, memory speed). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf/perf.h"

const char *const perf_op_name[PERF_NOPS] = {"ring", "rhd", "tree", "allgather",
                                              "reduce_scatter", "broadcast", "p2p"};

void perf_profile_default(perf_profile_t *p) {
  memset(p, 0, sizeof *p);
  p->local = (perf_link_t){5e-6, 10e9};
  p->local_oversubscribed = (perf_link_t){20e-6, 10e9};
  p->mpi = (perf_link_t){5e-6, 5e9};
  /* measured here (AMD EPYC, 2 cores; `mpirun -np 4 dtrain bench allreduce --comm mpi --algo
   * ring`): 127 us at 64 KiB, 2.79 ms at 4 MiB, against 16 us and 1.15 ms on 2 ranks */
  p->mpi_oversubscribed = (perf_link_t){15e-6, 2.4e9};
}

/* ---- the profile's JSON: one object, string and number values, and the
 * transports' objects of numbers. A strict reader: anything else is an
 * error naming the key or the offset. ---------------------------------- */

#define PROFILE_FORMAT "dtrain-profile 1"

typedef struct {
  const char *s, *end, *source;
} reader_t;

static void skip_space(reader_t *r) {
  while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\t' || *r->s == '\r')) r->s++;
}

static long offset(const reader_t *r, const char *start) { return (long)(r->s - start); }

/* After an object's member: 1 where a comma follows (taken), 0 where not. */
static int more_members(reader_t *r) {
  skip_space(r);
  if (r->s < r->end && *r->s == ',') {
    r->s++;
    return 1;
  }
  return 0;
}

static int expect(reader_t *r, char c, const char *start) {
  skip_space(r);
  if (r->s >= r->end || *r->s != c)
    return dt_error("%s: expected '%c' at offset %ld", r->source, c, offset(r, start));
  r->s++;
  return 0;
}

/* A string without escapes (the profile writes none) into buf. */
static int read_string(reader_t *r, char *buf, size_t cap, const char *start) {
  DT_TRY(expect(r, '"', start));
  size_t n = 0;
  while (r->s < r->end && *r->s != '"') {
    if (*r->s == '\\' || (unsigned char)*r->s < 0x20 || n + 1 >= cap)
      return dt_error("%s: a string at offset %ld is too long or has an escape or control "
                      "character", r->source, offset(r, start));
    buf[n++] = *r->s++;
  }
  if (r->s >= r->end) return dt_error("%s: a string at offset %ld does not end", r->source, offset(r, start));
  r->s++;
  buf[n] = 0;
  return 0;
}

/* A number of either sign (the GEMM model's log-space coefficients). */
static int read_real(reader_t *r, const char *key, double *out, const char *start) {
  skip_space(r);
  const char *at = r->s;
  char buf[64];
  size_t n = 0;
  while (r->s < r->end && n + 1 < sizeof buf && strchr("0123456789+-.eE", *r->s)) buf[n++] = *r->s++;
  buf[n] = 0;
  char *e;
  double v = n ? strtod(buf, &e) : 0;
  if (!n || *e || !(fabs(v) <= 1e300)) {
    r->s = at;
    return dt_error("%s: key \"%s\" (offset %ld) is not a number", r->source, key, offset(r, start));
  }
  *out = v;
  return 0;
}

static int read_number(reader_t *r, const char *key, double *out, const char *start) {
  double v = 0;
  if (read_real(r, key, &v, start) != 0 || !(v >= 0))
    return dt_error("%s: key \"%s\" (offset %ld) is not a number >= 0", r->source, key,
                    offset(r, start));
  *out = v;
  return 0;
}

/* "gemm_fit": {"c0", "c1", "c2", "c3", "points", "max_error"} (gemm_fit.c). */
static int read_gemm_fit(reader_t *r, perf_gemm_fit_t *f, const char *start) {
  static const char *const names[] = {"c0", "c1", "c2", "c3", "points", "max_error"};
  double v[6];
  int got = 0;
  DT_TRY(expect(r, '{', start));
  for (;;) {
    char k[32], full[64];
    DT_TRY(read_string(r, k, sizeof k, start));
    DT_TRY(expect(r, ':', start));
    snprintf(full, sizeof full, "gemm_fit.%s", k);
    int i = 0;
    while (i < 6 && strcmp(k, names[i])) i++;
    if (i == 6)
      return dt_error("%s: unknown key \"%s\" (expected c0, c1, c2, c3, points, max_error)",
                      r->source, full);
    DT_TRY(i < 4 ? read_real(r, full, &v[i], start) : read_number(r, full, &v[i], start));
    got |= 1 << i;
    if (!more_members(r)) break;
  }
  DT_TRY(expect(r, '}', start));
  if (got != 63)
    return dt_error("%s: key \"gemm_fit\" needs c0, c1, c2, c3, points and max_error", r->source);
  if (v[4] < 4 || v[4] > 1e6 || v[4] != (int)v[4])
    return dt_error("%s: key \"gemm_fit.points\" is %g (expected a count from 4)", r->source, v[4]);
  *f = (perf_gemm_fit_t){{v[0], v[1], v[2], v[3]}, (int)v[4], v[5], 1};
  return 0;
}

static int read_link(reader_t *r, const char *key, perf_link_t *l, int *seen, const char *start) {
  DT_TRY(expect(r, '{', start));
  int got = 0;
  for (int first = 1;; first = 0) {
    skip_space(r);
    if (r->s < r->end && *r->s == '}' && first) break;
    char k[32], full[64];
    DT_TRY(read_string(r, k, sizeof k, start));
    DT_TRY(expect(r, ':', start));
    snprintf(full, sizeof full, "%s.%s", key, k);
    double *v = !strcmp(k, "alpha") ? &l->alpha : !strcmp(k, "beta") ? &l->beta : NULL;
    if (!v)
      return dt_error("%s: unknown key \"%s\" (expected alpha, beta)", r->source, full);
    DT_TRY(read_number(r, full, v, start));
    got |= v == &l->alpha ? 1 : 2;
    if (!more_members(r)) break;
  }
  DT_TRY(expect(r, '}', start));
  if (got != 3) return dt_error("%s: key \"%s\" needs both alpha and beta", r->source, key);
  if (!(l->beta > 0)) return dt_error("%s: key \"%s.beta\" must be above 0", r->source, key);
  *seen = 1;
  return 0;
}

/* "local_ops" / "mpi_ops": {"ranks": P, "ring": {alpha, beta}, "rhd": ..., "p2p": ...},
 * any of the operations, each at most once. */
static int read_ops(reader_t *r, const char *key, perf_link_t *op, unsigned *mask, int *ranks,
                    const char *start) {
  DT_TRY(expect(r, '{', start));
  for (;;) {
    char k[32], full[64];
    DT_TRY(read_string(r, k, sizeof k, start));
    DT_TRY(expect(r, ':', start));
    snprintf(full, sizeof full, "%s.%s", key, k);
    int i = 0;
    while (i < PERF_NOPS && strcmp(k, perf_op_name[i])) i++;
    if (!strcmp(k, "ranks")) {
      double v = 0;
      DT_TRY(read_number(r, full, &v, start));
      if (v < 2 || v > 4096 || v != (int)v)
        return dt_error("%s: key \"%s\" is %g (expected a count of ranks from 2)", r->source, full, v);
      *ranks = (int)v;
    } else if (i == PERF_NOPS) {
      return dt_error("%s: unknown key \"%s\" (expected ranks, ring, rhd, tree, allgather, "
                      "reduce_scatter, broadcast, p2p)", r->source, full);
    } else {
      if (*mask & 1u << i) return dt_error("%s: key \"%s\" appears twice", r->source, full);
      int seen = 0;
      DT_TRY(read_link(r, full, &op[i], &seen, start));
      *mask |= 1u << i;
    }
    if (!more_members(r)) break;
  }
  DT_TRY(expect(r, '}', start));
  if (*mask && !*ranks) return dt_error("%s: key \"%s.ranks\" is missing", r->source, key);
  return 0;
}

/* A number key of the profile's top level: "shm_sec", "trace_slice_sec", ... */
static int read_seconds(reader_t *r, const char *key, double *out, const char *start) {
  DT_TRY(read_number(r, key, out, start));
  if (*out > 1) return dt_error("%s: key \"%s\" is %g s (expected a time under a second)", r->source, key, *out);
  return 0;
}

static int read_member(reader_t *r, perf_profile_t *p, int *seen, const char *start) {
  char key[32], text[128];
  DT_TRY(read_string(r, key, sizeof key, start));
  DT_TRY(expect(r, ':', start));
  if (!strcmp(key, "format")) {
    DT_TRY(read_string(r, text, sizeof text, start));
    if (strcmp(text, PROFILE_FORMAT))
      return dt_error("%s: key \"format\" is \"%s\" (expected \"%s\": a profile from "
                      "dtrain plan --calibrate)", r->source, text, PROFILE_FORMAT);
    seen[0] = 1;
  } else if (!strcmp(key, "cpu") || !strcmp(key, "gemm")) {
    int cpu = !strcmp(key, "cpu");
    DT_TRY(read_string(r, cpu ? p->cpu : p->gemm, cpu ? sizeof p->cpu : sizeof p->gemm, start));
    seen[cpu ? 1 : 2] = 1;
  } else if (!strcmp(key, "local")) DT_TRY(read_link(r, key, &p->local, &seen[3], start));
  else if (!strcmp(key, "local_oversubscribed"))
    DT_TRY(read_link(r, key, &p->local_oversubscribed, &seen[4], start));
  else if (!strcmp(key, "mpi")) DT_TRY(read_link(r, key, &p->mpi, &seen[5], start));
  else if (!strcmp(key, "mpi_measured")) {
    double v = 0;
    DT_TRY(read_number(r, key, &v, start));
    if (v != 0 && v != 1) return dt_error("%s: key \"mpi_measured\" is %g (expected 0 or 1)", r->source, v);
    p->mpi_measured = v == 1;
  } else if (!strcmp(key, "gemm_fit")) DT_TRY(read_gemm_fit(r, &p->gemm_fit, start));
  else if (!strcmp(key, "local_ops"))
    DT_TRY(read_ops(r, key, p->local_op, &p->local_ops, &p->local_op_ranks, start));
  else if (!strcmp(key, "mpi_ops")) DT_TRY(read_ops(r, key, p->mpi_op, &p->mpi_ops, &p->mpi_op_ranks, start));
  else if (!strcmp(key, "shm_sec")) DT_TRY(read_seconds(r, key, &p->shm_sec, start));
  else if (!strcmp(key, "shm_ranks")) {
    double v = 0;
    DT_TRY(read_number(r, key, &v, start));
    if (v < 2 || v > 4096 || v != (int)v)
      return dt_error("%s: key \"shm_ranks\" is %g (expected a count of ranks from 2)", r->source, v);
    p->shm_ranks = (int)v;
  } else if (!strcmp(key, "trace_slice_sec")) DT_TRY(read_seconds(r, key, &p->trace_slice_sec, start));
  else return dt_error("%s: unknown key \"%s\" (expected format, cpu, gemm, local, "
                       "local_oversubscribed, mpi, mpi_measured, gemm_fit, local_ops, mpi_ops, "
                       "shm_sec, shm_ranks, trace_slice_sec)", r->source, key);
  return 0;
}

int perf_profile_parse(const char *s, size_t len, const char *source, perf_profile_t *p) {
  static const char *const keys[] = {"format", "cpu", "gemm", "local", "local_oversubscribed", "mpi"};
  perf_profile_t q;
  perf_profile_default(&q);
  reader_t r = {s, s + len, source};
  int seen[6] = {0};
  DT_TRY(expect(&r, '{', s));
  for (;;) {
    DT_TRY(read_member(&r, &q, seen, s));
    if (!more_members(&r)) break;
  }
  DT_TRY(expect(&r, '}', s));
  skip_space(&r);
  if (r.s != r.end) return dt_error("%s: text after the profile's object at offset %ld", source, offset(&r, s));
  for (int k = 0; k < 6; k++)
    if (!seen[k]) return dt_error("%s: key \"%s\" is missing (a profile from dtrain plan --calibrate has it)", source, keys[k]);
  if (q.shm_sec > 0 && !q.shm_ranks)
    return dt_error("%s: key \"shm_ranks\" is missing (shm_sec was measured over that many ranks)", source);
  q.calibrated = 1;
  *p = q;
  return 0;
}

int perf_profile_write(const perf_profile_t *p, FILE *out) {
  const perf_link_t *l[3] = {&p->local, &p->local_oversubscribed, &p->mpi};
  const char *names[3] = {"local", "local_oversubscribed", "mpi"};
  fprintf(out, "{\"format\":\"%s\",\"cpu\":\"%s\",\"gemm\":\"%s\"", PROFILE_FORMAT, p->cpu, p->gemm);
  for (int k = 0; k < 3; k++)
    fprintf(out, ",\n \"%s\":{\"alpha\":%.6g,\"beta\":%.6g}", names[k], l[k]->alpha, l[k]->beta);
  fprintf(out, ",\n \"mpi_measured\":%d", p->mpi_measured);
  const perf_link_t *ops[2] = {p->local_op, p->mpi_op};
  const unsigned masks[2] = {p->local_ops, p->mpi_ops};
  const int ranks[2] = {p->local_op_ranks, p->mpi_op_ranks};
  for (int t = 0; t < 2; t++) {
    if (!masks[t]) continue;
    fprintf(out, ",\n \"%s_ops\":{\"ranks\":%d", t ? "mpi" : "local", ranks[t]);
    for (int i = 0; i < PERF_NOPS; i++)
      if (masks[t] & 1u << i)
        fprintf(out, ",\"%s\":{\"alpha\":%.6g,\"beta\":%.6g}", perf_op_name[i], ops[t][i].alpha,
                ops[t][i].beta);
    fprintf(out, "}");
  }
  if (p->shm_sec > 0) fprintf(out, ",\n \"shm_sec\":%.6g,\"shm_ranks\":%d", p->shm_sec, p->shm_ranks);
  if (p->trace_slice_sec > 0) fprintf(out, ",\n \"trace_slice_sec\":%.6g", p->trace_slice_sec);
  const perf_gemm_fit_t *g = &p->gemm_fit;
  if (g->fitted)
    fprintf(out, ",\n \"gemm_fit\":{\"c0\":%.9g,\"c1\":%.9g,\"c2\":%.9g,\"c3\":%.9g,\"points\":%d,"
            "\"max_error\":%.4g}", g->c[0], g->c[1], g->c[2], g->c[3], g->points, g->max_error);
  fprintf(out, "}\n");
  return ferror(out) ? dt_error("writing the profile: write error") : 0;
}

void perf_machine(char *cpu, size_t cpu_cap, char *gemm, size_t gemm_cap) {
  snprintf(cpu, cpu_cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    char *v = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !v) continue;
    v++;
    while (*v == ' ') v++;
    v[strcspn(v, "\n\"\\")] = 0;
    snprintf(cpu, cpu_cap, "%s", v);
    break;
  }
  if (f) fclose(f);
  kern_gemm_describe(gemm, gemm_cap);
  gemm[strcspn(gemm, "\"\\")] = 0; /* written into JSON as it is */
}

int perf_profile_load(const char *path, int force, perf_profile_t *p) {
  uint8_t *data;
  size_t len;
  DT_TRY(file_read_all(path, 0, &data, &len));
  char source[300];
  snprintf(source, sizeof source, "profile %s", path);
  int rc = perf_profile_parse((const char *)data, len, source, p);
  free(data);
  if (rc != 0 || force) return rc;
  char cpu[128], gemm[128];
  perf_machine(cpu, sizeof cpu, gemm, sizeof gemm);
  if (strcmp(cpu, p->cpu))
    return dt_error("%s was taken on another CPU (\"%s\"; this is \"%s\"): calibrate here "
                    "(dtrain plan --calibrate --out FILE), or give --force", source, p->cpu, cpu);
  if (strcmp(gemm, p->gemm))
    return dt_error("%s was taken with other kernels (\"%s\"; these are \"%s\"): calibrate "
                    "again, or give --force", source, p->gemm, gemm);
  return 0;
}
