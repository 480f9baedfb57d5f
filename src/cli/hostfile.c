/* dtrain launch --hostfile: Open MPI's hostfile ("HOST [slots=K]" a line,
 * '#' comments), read again at every restart so that hosts added to it
 * join, each host known to the resolver (getaddrinfo) or refused, and the
 * file of the hosts still alive that launch hands to mpirun. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dtrain/core.h"

/* One line: its host and slots (1 when not given); 0 for a blank or
 * comment line, -1 with the error set. */
static int parse_line(const char *path, int lineno, char *line, launch_host_t *h) {
  char *hash = strchr(line, '#');
  if (hash) *hash = 0;
  char *tok = strtok(line, " \t\r\n");
  if (!tok) return 0;
  if (strlen(tok) >= sizeof h->name)
    return dt_error("--hostfile %s line %d: host name '%.40s...' is too long", path, lineno, tok);
  snprintf(h->name, sizeof h->name, "%s", tok);
  h->slots = 1;
  while ((tok = strtok(NULL, " \t\r\n"))) {
    long v;
    char *end;
    if (strncmp(tok, "slots=", 6) != 0)
      return dt_error("--hostfile %s line %d: '%s' (expected HOST [slots=K])", path, lineno, tok);
    v = strtol(tok + 6, &end, 10);
    if (end == tok + 6 || *end || v < 1 || v > 4096)
      return dt_error("--hostfile %s line %d: '%s': slots must be a number from 1 to 4096", path,
                      lineno, tok);
    h->slots = (int)v;
  }
  return 1;
}

/* Whether $DTRAIN_KNOWN_HOSTS (names separated by spaces) lists it: hosts
 * that mpirun's rsh agent reaches without the resolver (the namespace
 * cluster's, docs/CLUSTER.md). */
static int host_listed(const char *name) {
  const char *list = getenv("DTRAIN_KNOWN_HOSTS");
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    p += strspn(p, " \t");
    size_t len = strcspn(p, " \t");
    if (len == n && !strncmp(p, name, n)) return 1;
    p += len;
  }
  return 0;
}

/* Whether the resolver knows the host (what mpirun will ask it). */
static int host_known(const char *name, char *why, size_t cap) {
  if (host_listed(name)) return 1;
  struct addrinfo *ai = NULL, hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  int rc = getaddrinfo(name, NULL, &hints, &ai);
  if (ai) freeaddrinfo(ai);
  if (rc != 0) snprintf(why, cap, "%s", gai_strerror(rc));
  return rc == 0;
}

int hostfile_read(const char *path, launch_host_t *hosts, int cap, int *n, int skip_unknown) {
  FILE *f = fopen(path, "r");
  if (!f) return dt_error("--hostfile %s: %s", path, strerror(errno));
  char line[512];
  int lineno = 0, rc = 0;
  *n = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    launch_host_t h = {0};
    int got = parse_line(path, ++lineno, line, &h);
    if (got < 0) rc = -1;
    if (got <= 0) continue;
    char why[128];
    if (!host_known(h.name, why, sizeof why)) {
      if (skip_unknown) continue; /* a restart: a host not yet known is not yet there */
      rc = dt_error("--hostfile %s line %d: unknown host '%s' (%s): fix the name, or add it to "
                    "/etc/hosts or $DTRAIN_KNOWN_HOSTS", path, lineno, h.name, why);
      break;
    }
    if (*n == cap) {
      rc = dt_error("--hostfile %s: more than %d hosts", path, cap);
      break;
    }
    hosts[(*n)++] = h;
  }
  if (rc == 0 && *n == 0) rc = dt_error("--hostfile %s: names no host", path);
  fclose(f);
  return rc;
}

int hostfile_write(const char *path, const launch_host_t *hosts, int n) {
  FILE *f = fopen(path, "w");
  if (!f) return dt_error("launch: %s: %s", path, strerror(errno));
  for (int i = 0; i < n; i++)
    if (!hosts[i].dead) fprintf(f, "%s slots=%d\n", hosts[i].name, hosts[i].slots);
  if (fclose(f) != 0) return dt_error("launch: %s: write failed", path);
  return 0;
}

int hostfile_host_of_rank(const launch_host_t *hosts, int n, int rank) {
  for (int i = 0, first = 0; i < n; i++) {
    if (hosts[i].dead) continue;
    if (rank < first + hosts[i].slots) return i;
    first += hosts[i].slots;
  }
  return -1;
}
