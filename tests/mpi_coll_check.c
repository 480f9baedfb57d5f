/* The comm and coll checks on the mpi transport, run by
 * tests/e2e_mpi_coll.sh under mpirun with 1..9 processes.
 *
 *   mpi_coll_check            point-to-point checks, then every collective
 *                             of tests/test_coll.c twice (bitwise equal)
 *   mpi_coll_check timeout    rank 1 waits for a message never sent: it
 *                             must time out after 0.5 s naming peer and tag
 *   mpi_coll_check fail       rank 1 fails: the run must stop at once
 *   mpi_coll_check bytes      bytes on the wire (comm_bytes) of every
 *                             collective, exactly its formula (test_coll.c)
 *   mpi_coll_check hosts N    the ranks taken as N hosts (comm_net_t.hosts,
 *                             which on mpi replaces the nodes MPI finds: all
 *                             ranks share one node here): comm_host and its
 *                             splits, the allreduces that run hier (hier,
 *                             auto) twice (bitwise equal, and equal to the
 *                             same hosts on local: rank 0 runs them there
 *                             too, as threads), and the bytes of every
 *                             collective
 *
 * Exit status 0 and "mpi_coll_check: ok" from rank 0 when all passed. */
#define COLL_CHECKS_ONLY
#include "test_coll.c"

#include <stdint.h>
#include <unistd.h>

/* The hosts MPI found: ranks on one host share its name (gethostname), and
 * every rank holds the same table. */
static int check_hosts_found(comm_t *c) {
  int P = comm_size(c), me = comm_rank(c);
  char name[256] = {0};
  RCHECK(gethostname(name, sizeof name - 1) == 0);
  RCHECK(c->host != NULL); /* the world's table, filled by the transport */
  if (me != 0) {
    RCHECK_OK(comm_send(c, 0, 9, name, sizeof name));
    RCHECK_OK(comm_send(c, 0, 9, c->host, P * sizeof(int)));
    return comm_barrier(c);
  }
  char (*names)[256] = calloc((size_t)P, sizeof *names);
  int *table = calloc((size_t)P, sizeof(int));
  RCHECK(names && table);
  memcpy(names[0], name, sizeof name);
  for (int q = 1; q < P; q++) RCHECK_OK(comm_recv(c, q, 9, names[q], sizeof name));
  for (int q = 1; q < P; q++) {
    RCHECK_OK(comm_recv(c, q, 9, table, P * sizeof(int)));
    for (int r = 0; r < P; r++) RCHECK(table[r] == comm_host(c, r));
  }
  for (int a = 0; a < P; a++)
    for (int b = 0; b < P; b++)
      RCHECK((comm_host(c, a) == comm_host(c, b)) == !strcmp(names[a], names[b]));
  free(names), free(table);
  return comm_barrier(c);
}

/* hosts N: ranks split evenly over N hosts, consecutive (comm_net_hosts);
 * a split keeps them (odd and even ranks). */
static int check_hosts_given(comm_t *c, int hosts) {
  int P = comm_size(c), me = comm_rank(c);
  int base = P / hosts, extra = P % hosts;
  for (int h = 0, r = 0; h < hosts; h++)
    for (int k = 0; k < base + (h < extra); k++, r++) RCHECK(comm_host(c, r) == h);
  RCHECK(comm_nhosts(c) == hosts);
  comm_t *half;
  RCHECK_OK(comm_split(c, me % 2, me, &half));
  for (int k = 0; k < comm_size(half); k++)
    for (int l = 0; l < comm_size(half); l++)
      RCHECK((comm_host(half, k) == comm_host(half, l)) ==
             (comm_host(c, 2 * k + me % 2) == comm_host(c, 2 * l + me % 2)));
  RCHECK(comm_host(half, 0) == 0);
  comm_free(half);
  return comm_barrier(c);
}

/* Every other rank sends two messages to rank 0, which takes them with
 * ANY_SOURCE; large ones too, so the payload goes by rendezvous. */
static int check_any_source(comm_t *c) {
  int P = comm_size(c), me = comm_rank(c);
  enum { N = 100000 };
  float *big = malloc(N * sizeof(float));
  RCHECK(big);
  int rc = 0;
  if (me != 0) {
    for (int k = 0; k < 2 && rc == 0; k++) {
      for (int i = 0; i < N; i++) big[i] = (float)(me * 10 + k);
      rc = comm_send(c, 0, 6, big, N * sizeof(float));
    }
  } else {
    int seen[64] = {0};
    for (int m = 0; m < 2 * (P - 1) && rc == 0; m++) {
      comm_req_t *r;
      int src = -1;
      rc = comm_irecv(c, COMM_ANY_SOURCE, 6, big, N * sizeof(float), &r);
      if (rc == 0) rc = comm_wait_src(c, r, &src, NULL);
      if (rc == 0 && (src < 1 || src >= P || big[0] != (float)(src * 10 + seen[src]) ||
                      big[N - 1] != big[0]))
        rc = dt_error("ANY_SOURCE message %d: from rank %d with value %g", m, src, (double)big[0]);
      if (rc == 0) seen[src]++;
    }
  }
  free(big);
  return rc;
}

/* Lengths disagree both ways: the receiver names peer, tag and lengths. */
static int check_length_mismatch(comm_t *c) {
  if (comm_size(c) < 2 || comm_rank(c) > 1) return comm_barrier(c);
  char buf[4000] = {0};
  if (comm_rank(c) == 0) {
    RCHECK_OK(comm_send(c, 1, 5, buf, 100));
    RCHECK_OK(comm_send(c, 1, 5, buf, 3000));
  } else {
    int rc = comm_recv(c, 0, 5, buf, 200);
    RCHECK(rc != 0 && strstr(dt_errmsg(), "message from rank 0 tag 5: length 100 bytes but receive expects 200"));
    rc = comm_recv(c, 0, 5, buf, 2000);
    RCHECK(rc != 0 && strstr(dt_errmsg(), "length 3000 bytes but receive expects 2000"));
  }
  return comm_barrier(c);
}

static int check_split(comm_t *c) {
  comm_t *sub;
  int me = comm_rank(c);
  RCHECK_OK(comm_split(c, me % 2, -me, &sub));
  RCHECK(comm_size(sub) == (comm_size(c) + 1 - me % 2) / 2);
  int x = comm_rank(sub), sum = 0;
  /* everyone sends its sub rank to sub rank 0 */
  if (comm_rank(sub) != 0) RCHECK_OK(comm_send(sub, 0, 3, &x, sizeof x));
  else
    for (int i = 1; i < comm_size(sub); i++) {
      RCHECK_OK(comm_recv(sub, i, 3, &x, sizeof x));
      sum += x;
    }
  RCHECK(comm_rank(sub) != 0 || sum == comm_size(sub) * (comm_size(sub) - 1) / 2);
  comm_free(sub);
  return comm_barrier(c);
}

typedef struct {
  const char *mode;
  int hosts;
} run_arg_t;

static int run_checks(comm_t *c) {
  RCHECK_OK(check_order_by_tag(c, 50)); /* tests/test.h */
  RCHECK_OK(check_any_source(c));
  RCHECK_OK(check_length_mismatch(c));
  RCHECK_OK(check_split(c));
  RCHECK_OK(check_hosts_found(c));
  int P = comm_size(c);
  size_t n = (size_t)P * NCOUNTS * NOPS;
  uint64_t *h1 = calloc(n, sizeof(uint64_t)), *h2 = calloc(n, sizeof(uint64_t));
  RCHECK(h1 && h2);
  check_cfg_t a = {h1, 100003, 0}, b = {h2, 100003, 0};
  int rc = coll_check_rank(c, &a);
  if (rc == 0) rc = coll_check_rank(c, &b);
  for (size_t i = comm_rank(c) * NCOUNTS * NOPS; rc == 0 && i < (comm_rank(c) + 1) * NCOUNTS * NOPS; i++)
    if (h1[i] != h2[i]) rc = dt_error("count index %zu op %zu: bits differ between two runs", i / NOPS % NCOUNTS, i % NOPS);
  free(h1), free(h2);
  return rc;
}

static int rank_main(comm_t *c, void *p) {
  const run_arg_t *arg = p;
  int me = comm_rank(c), x = 0;
  if (!strcmp(arg->mode, "timeout")) {
    /* every other rank stays alive, waiting (in 0.5 s rounds) for rank 1's
     * all-clear: a rank that ended early would wait for the others at the
     * end of the run, which fails after the timeout too */
    if (me != 1) {
      for (int i = 0; i < 40; i++)
        if (comm_recv(c, 1, 8, &x, sizeof x) == 0 || !strstr(dt_errmsg(), "timed out")) break;
      return x == 42 ? 0 : dt_error("rank 1's all-clear never came: %s", dt_errmsg());
    }
    double t0 = dt_now();
    int rc = comm_recv(c, 0, 7, &x, sizeof x);
    double dt = dt_now() - t0;
    RCHECK(rc != 0 && strstr(dt_errmsg(), "recv from rank 0 tag 7: timed out after 0.5 s"));
    RCHECK(dt >= 0.45 && dt < 5);
    x = 42;
    for (int r = 0; r < comm_size(c); r++)
      if (r != 1) DT_TRY(comm_send(c, r, 8, &x, sizeof x));
    return 0;
  }
  if (!strcmp(arg->mode, "bytes")) {
    /* counts P divides and counts it does not; 4099 floats span several
     * small segments; 300000 several of the default 1 MiB */
    static const size_t counts[] = {0, 1, 7, 1000, 4099, 300000};
    DT_TRY(bytes_check_rank(c, counts, (int)(sizeof counts / sizeof counts[0])));
    if (me == 0) printf("mpi_coll_check: bytes ok (%d ranks)\n", comm_size(c));
    return 0;
  }
  if (!strcmp(arg->mode, "hosts")) {
    static const size_t counts[] = {0, 1, 7, 1000, 4099, 300000};
    int P = comm_size(c);
    size_t n = (size_t)P * NCOUNTS * NOPS;
    uint64_t *h1 = calloc(n, sizeof(uint64_t)), *h2 = calloc(n, sizeof(uint64_t));
    RCHECK(h1 && h2);
    check_cfg_t a = {h1, 100003, 1}, b = {h2, 100003, 1};
    int rc = check_hosts_given(c, arg->hosts);
    if (rc == 0) rc = coll_check_rank(c, &a);
    if (rc == 0) rc = coll_check_rank(c, &b);
    for (size_t i = me * NCOUNTS * NOPS; rc == 0 && i < (me + 1) * NCOUNTS * NOPS; i++)
      if (h1[i] != h2[i])
        rc = dt_error("count index %zu op %zu: bits differ between two runs", i / NOPS % NCOUNTS, i % NOPS);
    /* the same hosts on local: the same bits (rank 0 compares every rank's) */
    size_t slice = NCOUNTS * NOPS;
    if (rc == 0 && me != 0) rc = comm_send(c, 0, 10, h1 + me * slice, slice * sizeof(uint64_t));
    if (rc == 0 && me == 0) {
      comm_net_t lnet = {.timeout = 120, .hosts = arg->hosts};
      check_cfg_t l = {h2, 100003, 1};
      memset(h2, 0, n * sizeof(uint64_t));
      if (comm_local_run(P, &lnet, coll_check_rank, &l) != 0) rc = dt_error_prefix("on local: ");
      for (int q = 1; rc == 0 && q < P; q++) rc = comm_recv(c, q, 10, h1 + q * slice, slice * sizeof(uint64_t));
      for (size_t i = 0; rc == 0 && i < n; i++)
        if (h1[i] != h2[i])
          rc = dt_error("rank %zu count index %zu op %zu: mpi and local give different bits",
                        i / slice, i / NOPS % NCOUNTS, i % NOPS);
    }
    free(h1), free(h2);
    if (rc == 0) rc = bytes_check_rank(c, counts, (int)(sizeof counts / sizeof counts[0]));
    if (rc == 0 && me == 0) printf("mpi_coll_check: hosts ok (%d ranks, %d hosts)\n", P, arg->hosts);
    return rc;
  }
  if (!strcmp(arg->mode, "fail")) {
    if (me == 1) return dt_error("deliberate failure on rank 1");
    return comm_recv(c, 1, 7, &x, sizeof x); /* never sent: must not hang */
  }
  DT_TRY(run_checks(c));
  if (me == 0) printf("mpi_coll_check: ok (%d ranks, thread multiple %d)\n", comm_size(c), c->thread_multiple);
  return 0;
}

int main(int argc, char **argv) {
  run_arg_t arg = {argc > 1 ? argv[1] : "checks", argc > 2 ? atoi(argv[2]) : 0};
  comm_net_t net = {.timeout = !strcmp(arg.mode, "timeout") ? 0.5 : 120, .hosts = arg.hosts};
  if (comm_mpi_run(&argc, &argv, &net, rank_main, &arg) != 0) {
    fprintf(stderr, "mpi_coll_check: %s\n", dt_errmsg());
    return 1;
  }
  return 0;
}
