/* Fuzz target: the reader of a cluster file (perf_cluster_file_parse,
 * src/perf/cluster_file.c), from a buffer: no file is read. What it
 * accepts must be usable by the projection: one group at least, each with
 * hosts and ranks, a device either measured (speed > 0) or projected
 * (flops, efficiency, memory bandwidth all > 0), links of finite latency
 * >= 0 and bandwidth > 0, the counts adding up, the names ended; a
 * refusal is one line. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "perf/project.h"

static int usable_link(perf_link_t l) {
  return isfinite(l.alpha) && l.alpha >= 0 && isfinite(l.beta) && l.beta > 0;
}

static int usable_group(const perf_group_t *g) {
  int measured = g->speed > 0 && isfinite(g->speed);
  int projected = g->flops > 0 && g->efficiency > 0 && g->memory_bandwidth > 0 &&
                  isfinite(g->flops) && isfinite(g->efficiency) && isfinite(g->memory_bandwidth);
  return g->hosts >= 1 && g->ranks_per_host >= 1 && measured != projected &&
         g->memory >= 0 && memchr(g->device, 0, sizeof g->device) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1); /* exactly size bytes: ASan sees any read past them */
  if (!text) return 0;
  memcpy(text, data, size);
  perf_cluster_file_t c;
  if (perf_cluster_file_parse(text, size, "cluster", &c) == 0) {
    int hosts = 0, ranks = 0;
    if (c.ngroups < 1 || c.ngroups > PERF_MAX_GROUPS || !usable_link(c.intra) ||
        !usable_link(c.inter) || memchr(c.name, 0, sizeof c.name) == NULL)
      abort();
    for (int g = 0; g < c.ngroups; g++) {
      if (!usable_group(&c.group[g])) abort();
      hosts += c.group[g].hosts, ranks += c.group[g].hosts * c.group[g].ranks_per_host;
    }
    if (hosts != c.nhosts || ranks != c.nranks ||
        perf_cluster_file_group(&c, ranks - 1) != &c.group[c.ngroups - 1])
      abort();
  } else if (!dt_errmsg()[0] || strchr(dt_errmsg(), '\n')) {
    abort(); /* a refusal is one line */
  }
  free(text);
  return 0;
}
