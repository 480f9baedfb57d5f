/* The cluster file (docs/CLUSTER_FILE.md): the hosts a plan projects onto,
 * each group's ranks and devices, and the links inside a host and between
 * hosts. A strict reader of the JSON subset the format uses (objects,
 * arrays of objects, strings without escapes, numbers): anything else, a
 * key it does not know, a value out of range or a key missing is one line
 * naming the key (groups[1].device.flops) or the offset. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf/project.h"

#define CLUSTER_FORMAT "dtrain-cluster 1"
#define MAX_RANKS (1 << 20)

typedef struct {
  const char *s, *end, *start, *source;
} rd_t;

static void ws(rd_t *r) {
  while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\t' || *r->s == '\r')) r->s++;
}

static long at(const rd_t *r) { return (long)(r->s - r->start); }

static int peek(rd_t *r, char c) {
  ws(r);
  return r->s < r->end && *r->s == c;
}

/* The key for a message: the top object has none. */
static const char *named(const char *key) { return *key ? key : "(the top object)"; }

static int expect(rd_t *r, char c, const char *key) {
  if (peek(r, c)) return r->s++, 0;
  key = named(key);
  return dt_error("%s: key \"%s\": expected '%c' at offset %ld", r->source, key, c, at(r));
}

static int string(rd_t *r, const char *key, char *buf, size_t cap) {
  DT_TRY(expect(r, '"', key));
  key = named(key);
  size_t n = 0;
  while (r->s < r->end && *r->s != '"') {
    if (*r->s == '\\' || (unsigned char)*r->s < 0x20 || n + 1 >= cap)
      return dt_error("%s: key \"%s\": a string at offset %ld is too long (%zu bytes at most) or "
                      "has an escape or control character", r->source, key, at(r), cap - 1);
    buf[n++] = *r->s++;
  }
  if (r->s >= r->end) return dt_error("%s: key \"%s\": a string does not end", r->source, key);
  r->s++;
  buf[n] = 0;
  return 0;
}

/* A number in [lo, hi] (integer: a whole number). */
static int number(rd_t *r, const char *key, double lo, double hi, int integer, double *out) {
  ws(r);
  char buf[64];
  size_t n = 0;
  while (r->s < r->end && n + 1 < sizeof buf && strchr("0123456789+-.eE", *r->s)) buf[n++] = *r->s++;
  buf[n] = 0;
  char *e = buf;
  double v = n ? strtod(buf, &e) : NAN;
  if (!n || *e || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v)))
    return dt_error("%s: key \"%s\": expected %s from %g to %g at offset %ld", r->source, key,
                    integer ? "a whole number" : "a number", lo, hi, at(r));
  *out = v;
  return 0;
}

/* Walks an object: calls field(key) for each, which reads its value. */
typedef int (*field_fn)(rd_t *r, const char *key, const char *path, void *ctx);

static int object(rd_t *r, const char *path, field_fn field, void *ctx) {
  DT_TRY(expect(r, '{', path));
  if (peek(r, '}')) return r->s++, 0;
  for (;;) {
    char key[48], full[256];
    DT_TRY(string(r, path, key, sizeof key));
    snprintf(full, sizeof full, "%s%s%s", path, *path ? "." : "", key);
    DT_TRY(expect(r, ':', full));
    DT_TRY(field(r, key, full, ctx));
    if (peek(r, ',')) {
      r->s++;
      continue;
    }
    return expect(r, '}', path);
  }
}

static int unknown(rd_t *r, const char *key, const char *known) {
  return dt_error("%s: unknown key \"%s\" (known here: %s)", r->source, key, known);
}

/* "comment": a string, or an array of strings (a note per line). */
static int comment(rd_t *r, const char *path) {
  char buf[1024];
  if (!peek(r, '[')) return string(r, path, buf, sizeof buf);
  r->s++;
  if (peek(r, ']')) return r->s++, 0;
  for (;;) {
    DT_TRY(string(r, path, buf, sizeof buf));
    if (peek(r, ',')) {
      r->s++;
      continue;
    }
    return expect(r, ']', path);
  }
}

/* A link as read: its line rate, and what of it the payload gets. */
typedef struct {
  perf_link_t *l;
  double payload, overhead, efficiency; /* frame_payload, frame_overhead (bytes), efficiency */
} link_rd_t;

static int link_field(rd_t *r, const char *key, const char *path, void *ctx) {
  link_rd_t *k = ctx;
  if (!strcmp(key, "latency")) return number(r, path, 0, 10, 0, &k->l->alpha);
  if (!strcmp(key, "bandwidth")) return number(r, path, 1, 1e15, 0, &k->l->beta);
  if (!strcmp(key, "frame_payload")) return number(r, path, 1, 1e9, 0, &k->payload);
  if (!strcmp(key, "frame_overhead")) return number(r, path, 0, 1e9, 0, &k->overhead);
  if (!strcmp(key, "efficiency")) return number(r, path, 0.01, 1, 0, &k->efficiency);
  if (!strcmp(key, "comment")) return comment(r, path);
  return unknown(r, path, "latency, bandwidth, frame_payload, frame_overhead, efficiency, comment");
}

/* The link's object; then its bandwidth becomes what the payload gets:
 * the line rate x payload / (payload + overhead) a frame (the headers and
 * gaps each frame puts on the wire) x the share the collective library
 * reaches of that. *share keeps the factor, for the output. */
static int link(rd_t *r, const char *path, perf_link_t *l, double *share) {
  link_rd_t k = {l, 0, 0, 1};
  DT_TRY(object(r, path, link_field, &k));
  if (k.overhead > 0 && !(k.payload > 0))
    return dt_error("%s: key \"%s.frame_payload\" is missing: frame_overhead is per frame of "
                    "frame_payload bytes (RoCE at Ethernet's 1500-byte MTU: 1024)", r->source, path);
  *share = k.efficiency * (k.payload > 0 ? k.payload / (k.payload + k.overhead) : 1);
  l->beta *= *share;
  return 0;
}

static int device_field(rd_t *r, const char *key, const char *path, void *ctx) {
  perf_group_t *g = ctx;
  if (!strcmp(key, "name")) return string(r, path, g->device, sizeof g->device);
  if (!strcmp(key, "speed")) return number(r, path, 1e-6, 1e9, 0, &g->speed);
  if (!strcmp(key, "flops")) return number(r, path, 1e3, 1e20, 0, &g->flops);
  if (!strcmp(key, "efficiency")) return number(r, path, 1e-4, 4, 0, &g->efficiency);
  if (!strcmp(key, "memory_bandwidth")) return number(r, path, 1e3, 1e16, 0, &g->memory_bandwidth);
  if (!strcmp(key, "comment")) return comment(r, path);
  return unknown(r, path, "name, speed, flops, efficiency, memory_bandwidth, comment");
}

static int group_field(rd_t *r, const char *key, const char *path, void *ctx) {
  perf_group_t *g = ctx;
  double v;
  if (!strcmp(key, "hosts")) return number(r, path, 1, MAX_RANKS, 1, &v) ? -1 : (g->hosts = (int)v, 0);
  if (!strcmp(key, "ranks_per_host"))
    return number(r, path, 1, 1024, 1, &v) ? -1 : (g->ranks_per_host = (int)v, 0);
  if (!strcmp(key, "memory_per_rank")) return number(r, path, 0, 1e18, 0, &g->memory);
  if (!strcmp(key, "device")) return object(r, path, device_field, g);
  if (!strcmp(key, "comment")) return comment(r, path);
  return unknown(r, path, "hosts, ranks_per_host, memory_per_rank, device, comment");
}

/* A group read is whole: hosts, ranks, and a device either measured here
 * (speed) or projected (flops, efficiency, memory_bandwidth), not both. */
static int group_check(rd_t *r, const perf_group_t *g, const char *path) {
  const char *miss = !g->hosts ? "hosts" : !g->ranks_per_host ? "ranks_per_host" : NULL;
  if (miss) return dt_error("%s: key \"%s.%s\" is missing", r->source, path, miss);
  int proj = g->flops > 0 || g->efficiency > 0 || g->memory_bandwidth > 0;
  if (g->speed > 0 && proj)
    return dt_error("%s: key \"%s.device\": give speed (this machine's layers, measured) or "
                    "flops, efficiency and memory_bandwidth (projected), not both", r->source, path);
  if (!g->speed && !proj)
    return dt_error("%s: key \"%s.device\" is missing or empty: give speed (1: this machine) or "
                    "flops, efficiency and memory_bandwidth", r->source, path);
  miss = !proj ? NULL : !(g->flops > 0) ? "flops" : !(g->efficiency > 0) ? "efficiency"
         : !(g->memory_bandwidth > 0) ? "memory_bandwidth" : NULL;
  if (miss) return dt_error("%s: key \"%s.device.%s\" is missing (a projected device needs flops, "
                            "efficiency and memory_bandwidth)", r->source, path, miss);
  return 0;
}

static int groups(rd_t *r, const char *path, perf_cluster_file_t *c) {
  DT_TRY(expect(r, '[', path));
  for (int first = 1;; first = 0) {
    if (first && peek(r, ']')) break;
    char gp[300]; /* a key path (at most 255) and "[index]" */
    snprintf(gp, sizeof gp, "%s[%d]", path, c->ngroups);
    if (c->ngroups == PERF_MAX_GROUPS)
      return dt_error("%s: key \"%s\": more than %d groups", r->source, path, PERF_MAX_GROUPS);
    perf_group_t *g = &c->group[c->ngroups];
    *g = (perf_group_t){0};
    snprintf(g->device, sizeof g->device, "%s", "unnamed");
    DT_TRY(object(r, gp, group_field, g));
    DT_TRY(group_check(r, g, gp));
    if ((double)c->nranks + (double)g->hosts * g->ranks_per_host > MAX_RANKS)
      return dt_error("%s: key \"%s\": more than %d ranks in all", r->source, gp, MAX_RANKS);
    c->nhosts += g->hosts, c->nranks += g->hosts * g->ranks_per_host;
    c->ngroups++;
    if (peek(r, ',')) {
      r->s++;
      continue;
    }
    DT_TRY(expect(r, ']', path));
    break;
  }
  if (!c->ngroups) return dt_error("%s: key \"%s\" is empty (one group at least)", r->source, path);
  return 0;
}

typedef struct {
  perf_cluster_file_t *c;
  int format, intra, inter;
} top_t;

static int top_field(rd_t *r, const char *key, const char *path, void *ctx) {
  top_t *t = ctx;
  if (!strcmp(key, "format")) {
    char f[64];
    DT_TRY(string(r, path, f, sizeof f));
    if (strcmp(f, CLUSTER_FORMAT))
      return dt_error("%s: key \"format\" is \"%s\", expected \"%s\"", r->source, f, CLUSTER_FORMAT);
    return t->format = 1, 0;
  }
  if (!strcmp(key, "name")) return string(r, path, t->c->name, sizeof t->c->name);
  if (!strcmp(key, "comment")) return comment(r, path);
  if (!strcmp(key, "groups")) return groups(r, path, t->c);
  if (!strcmp(key, "intra")) return t->intra = 1, link(r, path, &t->c->intra, &t->c->intra_share);
  if (!strcmp(key, "inter")) return t->inter = 1, link(r, path, &t->c->inter, &t->c->inter_share);
  return unknown(r, path, "format, name, comment, groups, intra, inter");
}

int perf_cluster_file_parse(const char *s, size_t len, const char *source, perf_cluster_file_t *c) {
  memset(c, 0, sizeof *c);
  rd_t r = {s, s + len, s, source};
  top_t t = {c, 0, 0, 0};
  int rc = object(&r, "", top_field, &t);
  ws(&r);
  if (rc == 0 && r.s != r.end)
    rc = dt_error("%s: text after the cluster's object at offset %ld", source, at(&r));
  const char *miss = !t.format ? "format" : !c->ngroups ? "groups" : !t.intra ? "intra"
                     : !t.inter ? "inter" : NULL;
  if (rc == 0 && miss) rc = dt_error("%s: key \"%s\" is missing", source, miss);
  miss = !(c->intra.beta > 0) ? "intra.bandwidth" : !(c->inter.beta > 0) ? "inter.bandwidth" : NULL;
  if (rc == 0 && miss) rc = dt_error("%s: key \"%s\" is missing", source, miss);
  if (rc == 0 && !c->name[0]) snprintf(c->name, sizeof c->name, "%s", "cluster");
  if (rc != 0) memset(c, 0, sizeof *c);
  return rc;
}

int perf_cluster_file_load(const char *path, perf_cluster_file_t *c) {
  uint8_t *text = NULL;
  size_t len = 0;
  if (file_read_all(path, 0, &text, &len) != 0)
    return dt_error("--cluster %s: %s", path, dt_errmsg());
  int rc = perf_cluster_file_parse((const char *)text, len, path, c);
  free(text);
  return rc;
}

double perf_cluster_file_memory(const perf_cluster_file_t *c) {
  double least = 0;
  for (int g = 0; g < c->ngroups; g++)
    if (c->group[g].memory > 0 && (!least || c->group[g].memory < least)) least = c->group[g].memory;
  return least;
}

const perf_group_t *perf_cluster_file_group(const perf_cluster_file_t *c, int r) {
  for (int g = 0; g < c->ngroups; g++) {
    int n = c->group[g].hosts * c->group[g].ranks_per_host;
    if (r < n) return &c->group[g];
    r -= n;
  }
  return &c->group[c->ngroups - 1];
}

int perf_cluster_from_file(const perf_cluster_file_t *f, const train_config_t *cfg, int nranks,
                           const perf_profile_t *prof, perf_cluster_t *out) {
  *out = (perf_cluster_t){.nranks = nranks, .cores = nranks}; /* a core each: hosts of their own */
  if (nranks > f->nranks)
    return dt_error("the cluster file has %d ranks (%d hosts) and the step runs on %d; give "
                    "--workers so that at most %d ranks run", f->nranks, f->nhosts, nranks, f->nranks);
  out->host = calloc((size_t)nranks, sizeof *out->host);
  out->latency = calloc((size_t)nranks, sizeof *out->latency);
  out->bandwidth = calloc((size_t)nranks, sizeof *out->bandwidth);
  out->slowdown = calloc((size_t)nranks, sizeof *out->slowdown);
  if (!out->host || !out->latency || !out->bandwidth || !out->slowdown) {
    perf_cluster_free(out);
    return dt_error("out of memory");
  }
  int host = 0, first = 0; /* the first rank of the current host */
  for (int g = 0, r = 0; g < f->ngroups && r < nranks; g++) {
    const perf_group_t *gr = &f->group[g];
    for (int k = 0; k < gr->hosts * gr->ranks_per_host && r < nranks; k++, r++) {
      if (r - first == gr->ranks_per_host || (k == 0 && r > 0)) host++, first = r;
      if (!(gr->speed > 0) || gr->speed > 1) {
        perf_cluster_free(out);
        return dt_error("the cluster file's groups[%d] is %s: --predict measures each layer here "
                        "and can slow a rank, not speed one up; give it a speed of at most 1, or "
                        "use --project", g, gr->speed > 0 ? "faster than this machine" : "projected");
      }
      out->host[r] = host;
      if (r - first + 1 > out->cache_ranks) out->cache_ranks = r - first + 1;
      out->latency[r] = cfg->net_latency > 0 ? cfg->net_latency : f->inter.alpha;
      out->bandwidth[r] = cfg->net_bandwidth > 0 ? cfg->net_bandwidth : f->inter.beta;
      out->slowdown[r] = (1.0 / gr->speed) * (r == cfg->straggler_rank ? cfg->straggler_slowdown : 1);
    }
  }
  out->multihost = host > 0;
  if (out->multihost && cfg->exchange == EXCHANGE_SHARED) {
    perf_cluster_free(out);
    return dt_error("--exchange shared: the step's %d ranks span %d hosts of the cluster file, and "
                    "shared memory is one host's (at most %d workers, or --exchange allreduce)",
                    nranks, host + 1, f->group[0].ranks_per_host);
  }
  out->intra_latency = f->intra.alpha, out->intra_bandwidth = f->intra.beta;
  /* ranks on hosts of their own talk as mpi's do */
  perf_cluster_own(out, &prof->mpi, prof->mpi_op, prof->mpi_ops);
  return 0;
}
