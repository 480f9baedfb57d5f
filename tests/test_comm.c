/* comm: the local transport. Ordering, ANY_SOURCE, both posting orders,
 * length and header errors, timeouts, fail-fast, split, the emulated
 * network's timing and the straggler delay. Rank functions report a
 * failed check by returning -1 with the check in the error line, and the
 * test checks comm_local_run's result. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdatomic.h>
#include <string.h>

#include "dtrain/comm.h"
#include "test.h"

/* ---- ordering and matching ---------------------------------------------- */

/* 200 messages on two tags, 100 each (tests/test.h). */
static int rank_ordering(comm_t *c, void *arg) { return check_order_by_tag(c, 100); }

static void test_ordering_by_tag(void) { CHECK_OK(comm_local_run(2, NULL, rank_ordering, NULL)); }

/* Ranks 1..4 each send their rank twice to rank 0 with ANY_SOURCE
 * receives: every message says who sent it, and each sender's two
 * messages arrive in order. */
static int rank_any_source(comm_t *c, void *arg) {
  int me = comm_rank(c), P = comm_size(c);
  if (me != 0) {
    int v[2] = {me * 10, me * 10 + 1};
    RCHECK_OK(comm_send(c, 0, 5, &v[0], sizeof(int)));
    RCHECK_OK(comm_send(c, 0, 5, &v[1], sizeof(int)));
    return 0;
  }
  int seen[8] = {0};
  for (int i = 0; i < 2 * (P - 1); i++) {
    int x = -1, src = -1;
    size_t got = 0;
    comm_req_t *r;
    RCHECK_OK(comm_irecv(c, COMM_ANY_SOURCE, 5, &x, sizeof x, &r));
    RCHECK_OK(comm_wait_src(c, r, &src, &got));
    RCHECK(src >= 1 && src < P && got == sizeof x);
    RCHECK(x == src * 10 + seen[src]);
    seen[src]++;
  }
  for (int s = 1; s < P; s++) RCHECK(seen[s] == 2);
  return 0;
}

static void test_any_source(void) { CHECK_OK(comm_local_run(5, NULL, rank_any_source, NULL)); }

/* The send is posted before the receive (arg 0) or after it (arg 1); the
 * barrier orders the two. The isend's wait returns only after the copy. */
static int rank_post_order(comm_t *c, void *arg) {
  int recv_first = *(int *)arg;
  float data[1000], got[1000];
  for (int i = 0; i < 1000; i++) data[i] = (float)i * 0.5f, got[i] = -1;
  comm_req_t *r;
  if (comm_rank(c) == 0) {
    if (recv_first) RCHECK_OK(comm_barrier(c));
    RCHECK_OK(comm_isend(c, 1, 3, data, sizeof data, &r));
    if (!recv_first) RCHECK_OK(comm_barrier(c));
    RCHECK_OK(comm_wait(c, r));
  } else {
    if (!recv_first) RCHECK_OK(comm_barrier(c));
    RCHECK_OK(comm_irecv(c, 0, 3, got, sizeof got, &r));
    if (recv_first) RCHECK_OK(comm_barrier(c));
    RCHECK_OK(comm_wait(c, r));
    RCHECK(memcmp(data, got, sizeof got) == 0);
  }
  return 0;
}

static void test_send_before_recv(void) {
  int recv_first = 0;
  CHECK_OK(comm_local_run(2, NULL, rank_post_order, &recv_first));
}

static void test_recv_before_send(void) {
  int recv_first = 1;
  CHECK_OK(comm_local_run(2, NULL, rank_post_order, &recv_first));
}

/* Both ranks post a receive, then a blocking send to each other: the
 * receiver copies inside its own blocked send, so neither waits forever. */
static int rank_cross_send(comm_t *c, void *arg) {
  int peer = 1 - comm_rank(c), out = comm_rank(c) + 7, in = -1;
  comm_req_t *r;
  RCHECK_OK(comm_irecv(c, peer, 0, &in, sizeof in, &r));
  RCHECK_OK(comm_send(c, peer, 0, &out, sizeof out));
  RCHECK_OK(comm_wait(c, r));
  RCHECK(in == peer + 7);
  return 0;
}

static void test_irecv_then_blocking_send(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_cross_send, NULL));
}

/* A wait on an isend lasts until the receiver has taken the message. */
static int rank_rendezvous(comm_t *c, void *arg) {
  double x = 3.25, y = 0;
  if (comm_rank(c) == 0) {
    double t0 = dt_now();
    RCHECK_OK(comm_send(c, 1, 0, &x, sizeof x));
    RCHECK(dt_now() - t0 >= 0.04);
  } else {
    dt_sleep_until(dt_now() + 0.05);
    RCHECK_OK(comm_recv(c, 0, 0, &y, sizeof y));
    RCHECK(y == 3.25);
  }
  return 0;
}

static void test_send_waits_for_receiver(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_rendezvous, NULL));
}

/* recv_reduce adds the message into the buffer; test() reports
 * completion without freeing; sendrecv swaps. */
static int rank_reduce_and_test(comm_t *c, void *arg) {
  int me = comm_rank(c), peer = 1 - me;
  float mine[5], acc[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < 5; i++) mine[i] = (float)(me * 10 + i);
  comm_req_t *r;
  RCHECK_OK(comm_irecv_reduce(c, peer, 1, acc, 5, NULL, &r));
  RCHECK_OK(comm_send(c, peer, 1, mine, sizeof mine));
  int done = 0;
  while (!done) RCHECK_OK(comm_test(c, r, &done));
  RCHECK_OK(comm_wait(c, r));
  for (int i = 0; i < 5; i++) RCHECK(acc[i] == 1 + (float)(peer * 10 + i));
  int a = me, b = -1;
  RCHECK_OK(comm_sendrecv(c, peer, 2, &a, sizeof a, peer, 2, &b, sizeof b));
  RCHECK(b == peer);
  return 0;
}

static void test_recv_reduce_test_sendrecv(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_reduce_and_test, NULL));
}

/* ---- errors ------------------------------------------------------------- */

/* Lengths disagree: both sides fail, naming the peer, tag and lengths
 * from the header. Afterwards the link still works. */
static int rank_length_mismatch(comm_t *c, void *arg) {
  char buf[200] = {0};
  if (comm_rank(c) == 0) {
    RCHECK_FAILS_WITH(comm_send(c, 2, 5, buf, 100), "receiver expects 200 bytes but the message has 100");
  } else if (comm_rank(c) == 2) {
    RCHECK_FAILS_WITH(comm_recv(c, 0, 5, buf, 200),
                      "message from rank 0 tag 5: length 100 bytes but receive expects 200");
  }
  RCHECK_OK(comm_barrier(c));
  return 0;
}

static void test_length_mismatch(void) {
  CHECK_OK(comm_local_run(3, NULL, rank_length_mismatch, NULL));
}

/* Bad arguments are refused before anything is posted. */
static int rank_bad_args(comm_t *c, void *arg) {
  int x = 0;
  RCHECK_FAILS_WITH(comm_send(c, 2, 0, &x, sizeof x), "send to rank 2: no such rank (communicator has 2)");
  RCHECK_FAILS_WITH(comm_recv(c, -3, 0, &x, sizeof x), "no such rank");
  RCHECK_FAILS_WITH(comm_send(c, 0, -1, &x, sizeof x), "tag -1 is out of range");
  RCHECK_FAILS_WITH(comm_send(c, 0, COMM_TAG_MAX + 1, &x, sizeof x), "out of range");
  return 0;
}

static void test_bad_arguments(void) { CHECK_OK(comm_local_run(2, NULL, rank_bad_args, NULL)); }

/* Rank 1 waits for a message rank 0 never sends, while rank 0 is alive
 * (it waits for rank 1's later message): the wait times out after about
 * net.timeout and names the peer and tag. */
static int rank_timeout(comm_t *c, void *arg) {
  int x = 0;
  if (comm_rank(c) == 0) { /* outlives rank 1's timeout: retry our own */
    for (int i = 0; i < 50; i++)
      if (comm_recv(c, 1, 8, &x, sizeof x) == 0 || !strstr(dt_errmsg(), "timed out")) break;
    return x == 42 ? 0 : dt_error("rank 0 never got rank 1's message: %s", dt_errmsg());
  }
  double t0 = dt_now();
  RCHECK_FAILS_WITH(comm_recv(c, 0, 7, &x, sizeof x), "recv from rank 0 tag 7 (4 bytes): timed out after 0.2 s");
  double dt = dt_now() - t0;
  RCHECK(dt >= 0.19 && dt < 2.0);
  x = 42;
  return comm_send(c, 0, 8, &x, sizeof x);
}

static void test_timeout_names_peer_and_tag(void) {
  comm_net_t net = {.timeout = 0.2};
  CHECK_OK(comm_local_run(2, &net, rank_timeout, NULL));
}

/* Rank 0 returns without sending: rank 1 fails at once, not after the
 * 300 s default timeout. */
static int rank_peer_exits(comm_t *c, void *arg) {
  int x = 0;
  if (comm_rank(c) == 0) return 0;
  RCHECK_FAILS_WITH(comm_recv(c, 0, 1, &x, sizeof x), "rank 0 finished without sending it");
  return 0;
}

/* ---- --bind core ---------------------------------------------------------- */

/* Each rank's thread runs on one CPU, the (rank mod n)-th of the process's
 * own, and a thread it starts is on the same one. */
static void *affinity_of_thread(void *arg) {
  cpu_set_t *set = arg;
  return (void *)(intptr_t)sched_getaffinity(0, sizeof *set, set);
}

static int rank_bound(comm_t *c, void *arg) {
  const cpu_set_t *all = arg;
  int me = comm_rank(c), n = CPU_COUNT(all), want = -1;
  for (int cpu = 0, k = 0; cpu < CPU_SETSIZE && want < 0; cpu++)
    if (CPU_ISSET(cpu, all) && k++ == me % n) want = cpu;
  cpu_set_t mine, child;
  RCHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
  RCHECK(CPU_COUNT(&mine) == 1 && CPU_ISSET(want, &mine));
  pthread_t t;
  void *rc;
  RCHECK(pthread_create(&t, NULL, affinity_of_thread, &child) == 0);
  pthread_join(t, &rc);
  RCHECK(rc == NULL && CPU_EQUAL(&mine, &child));
  return 0;
}

static int rank_unbound(comm_t *c, void *arg) {
  cpu_set_t mine;
  RCHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
  RCHECK(CPU_EQUAL(&mine, (const cpu_set_t *)arg));
  return 0;
}

static void test_bind_core_pins_each_rank(void) {
  cpu_set_t all;
  CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
  comm_net_t net = {.bind_cores = 1};
  CHECK_OK(comm_local_run(CPU_COUNT(&all) + 1, &net, rank_bound, &all)); /* one CPU twice */
  CHECK_OK(comm_local_run(2, NULL, rank_unbound, &all));
}

static void test_peer_exit_fails_fast(void) {
  double t0 = dt_now();
  CHECK_OK(comm_local_run(2, NULL, rank_peer_exits, NULL));
  CHECK(dt_now() - t0 < 5);
}

/* Rank 2 fails; the others are blocked on each other and must stop
 * promptly. The run reports the failing rank's own message. */
static int rank_one_fails(comm_t *c, void *arg) {
  if (comm_rank(c) == 2) return dt_error("boom at step 3");
  int x = 0;
  return comm_recv(c, (comm_rank(c) + 1) % 4 == 2 ? 3 : (comm_rank(c) + 1) % 4, 0, &x, sizeof x);
}

static void test_one_rank_fails_others_stop(void) {
  double t0 = dt_now();
  CHECK_FAILS_WITH(comm_local_run(4, NULL, rank_one_fails, NULL), "rank 2: boom at step 3");
  CHECK(dt_now() - t0 < 5);
}

/* A peer blocked in a send to the failing rank stops too, naming it. */
static atomic_int stop_message_ok;
static int rank_fails_late(comm_t *c, void *arg) {
  int x = 0;
  if (comm_rank(c) == 1) {
    dt_sleep_until(dt_now() + 0.02);
    return dt_error("disk full");
  }
  if (comm_send(c, 1, 4, &x, sizeof x) == 0) return dt_error("send to a failed rank succeeded");
  if (strstr(dt_errmsg(), "send to rank 1 tag 4: stopped because peer rank 1 failed"))
    atomic_store(&stop_message_ok, 1);
  return -1;
}

static void test_blocked_sender_names_failed_rank(void) {
  atomic_store(&stop_message_ok, 0);
  CHECK_FAILS_WITH(comm_local_run(2, NULL, rank_fails_late, NULL), "rank 1: disk full");
  CHECK(atomic_load(&stop_message_ok));
}

/* cancel withdraws an unmatched receive and an unmatched send; a
 * receiver matched to a cancelled send fails with a clear message. The
 * flags order the ranks without a comm call, which would copy the message. */
static atomic_int recv_posted, send_cancelled;
static int rank_cancel(comm_t *c, void *arg) {
  int x = 1, y = 0;
  comm_req_t *r;
  if (comm_rank(c) == 0) {
    RCHECK_OK(comm_irecv(c, 1, 9, &y, sizeof y, &r));
    RCHECK_OK(comm_cancel(c, r));
    RCHECK_OK(comm_isend(c, 1, 9, &x, sizeof x, &r)); /* rank 1 never receives this */
    RCHECK_OK(comm_cancel(c, r));
    while (!atomic_load(&recv_posted)) dt_sleep_until(dt_now() + 1e-4);
    RCHECK_OK(comm_isend(c, 1, 10, &x, sizeof x, &r)); /* matches at once */
    RCHECK_OK(comm_cancel(c, r));
    atomic_store(&send_cancelled, 1);
  } else {
    RCHECK_OK(comm_irecv(c, 0, 10, &y, sizeof y, &r));
    atomic_store(&recv_posted, 1);
    while (!atomic_load(&send_cancelled)) dt_sleep_until(dt_now() + 1e-4);
    RCHECK_FAILS_WITH(comm_wait(c, r), "recv from rank 0 tag 10: the sender cancelled the message");
  }
  RCHECK_OK(comm_sendrecv(c, 1 - comm_rank(c), 9, &x, sizeof x, 1 - comm_rank(c), 9, &y, sizeof y));
  RCHECK(y == 1);
  return 0;
}

static void test_cancel(void) {
  comm_net_t net = {.timeout = 5};
  atomic_store(&recv_posted, 0), atomic_store(&send_cancelled, 0);
  CHECK_OK(comm_local_run(2, &net, rank_cancel, NULL));
}

/* ---- split -------------------------------------------------------------- */

/* Six ranks split by parity, keys reversed: sizes and ranks follow
 * (key, old rank); a message on the sub-communicator never matches a
 * receive on the parent with the same tag, and vice versa. */
static int rank_split(comm_t *c, void *arg) {
  int me = comm_rank(c);
  comm_t *sub;
  RCHECK_OK(comm_split(c, me % 2, -me, &sub));
  RCHECK(comm_size(sub) == 3);
  RCHECK(comm_rank(sub) == 2 - me / 2);
  /* sub rank 0 sends on the parent first, then on the sub-communicator,
   * both tag 3, to sub rank 1 (parent rank me - 2) */
  int parent_msg = 100 + me, sub_msg = 200 + me, x = -1;
  if (comm_rank(sub) == 0) {
    comm_req_t *r[2];
    RCHECK_OK(comm_isend(c, me - 2, 3, &parent_msg, sizeof(int), &r[0]));
    RCHECK_OK(comm_isend(sub, 1, 3, &sub_msg, sizeof(int), &r[1]));
    RCHECK_OK(comm_waitall(c, 2, r));
  } else if (comm_rank(sub) == 1) {
    RCHECK_OK(comm_recv(sub, 0, 3, &x, sizeof x));
    RCHECK(x == 200 + me + 2);
    RCHECK_OK(comm_recv(c, me + 2, 3, &x, sizeof x));
    RCHECK(x == 100 + me + 2);
  }
  /* a split of a split, and a barrier on each */
  comm_t *single;
  RCHECK_OK(comm_split(sub, comm_rank(sub), 0, &single));
  RCHECK(comm_size(single) == 1 && comm_rank(single) == 0);
  RCHECK_OK(comm_barrier(single));
  RCHECK_OK(comm_barrier(sub));
  comm_free(single);
  comm_free(sub);
  return 0;
}

static void test_split(void) { CHECK_OK(comm_local_run(6, NULL, rank_split, NULL)); }

/* ---- hosts -------------------------------------------------------------- */

/* Host ids in the order of first appearance of each label. */
static void renumber(const int *label, int n, int *out) {
  int next = 0;
  for (int i = 0; i < n; i++) {
    int j = 0;
    while (j < i && label[j] != label[i]) j++;
    out[i] = j < i ? out[j] : next++;
  }
}

/* comm_host on the world (the hosts of comm_net_t) and on splits: each
 * rank keeps its host, renumbered in the order of the new ranks. */
static int rank_hosts(comm_t *c, void *arg) {
  const int *want = arg; /* host of each rank */
  int P = comm_size(c), me = comm_rank(c), nh = 0, label[16], id[16];
  RCHECK(P <= 16);
  for (int r = 0; r < P; r++) {
    RCHECK(comm_host(c, r) == want[r]);
    nh = want[r] + 1 > nh ? want[r] + 1 : nh;
  }
  RCHECK(comm_nhosts(c) == nh);
  comm_t *rev, *half;
  /* reversed: new rank k is old rank P-1-k */
  RCHECK_OK(comm_split(c, 0, -me, &rev));
  for (int k = 0; k < P; k++) label[k] = want[P - 1 - k];
  renumber(label, P, id);
  for (int k = 0; k < P; k++) RCHECK(comm_host(rev, k) == id[k]);
  RCHECK(comm_nhosts(rev) == nh);
  /* even and odd ranks */
  RCHECK_OK(comm_split(c, me % 2, me, &half));
  int n = comm_size(half), hosts = 0;
  for (int k = 0; k < n; k++) label[k] = want[2 * k + me % 2];
  renumber(label, n, id);
  for (int k = 0; k < n; k++) {
    RCHECK(comm_host(half, k) == id[k]);
    hosts = id[k] + 1 > hosts ? id[k] + 1 : hosts;
  }
  RCHECK(comm_nhosts(half) == hosts);
  comm_free(rev);
  comm_free(half);
  return 0;
}

static void test_hosts(void) {
  int one[5] = {0}, even[5] = {0, 0, 0, 1, 1}, list[5] = {0, 1, 1, 1, 2};
  comm_net_t two = {.hosts = 2}, three = {.hosts = 3, .host_ranks = {1, 3, 1}};
  CHECK_OK(comm_local_run(5, NULL, rank_hosts, one));
  CHECK_OK(comm_local_run(5, &two, rank_hosts, even));
  CHECK_OK(comm_local_run(5, &three, rank_hosts, list));
  /* hosts that do not fit the ranks are refused, in one line */
  comm_net_t many = {.hosts = 6}, wrong = {.hosts = 2, .host_ranks = {3, 3}};
  CHECK_FAILS_WITH(comm_local_run(5, &many, rank_hosts, one),
                   "net hosts=6: more hosts than the 5 ranks of the run");
  CHECK_FAILS_WITH(comm_local_run(5, &wrong, rank_hosts, one),
                   "net hosts=3+3: the hosts hold 6 ranks but the run has 5 ranks");
}

/* --net's keys: values, and one line for each bad one. */
static void test_net_parse(void) {
  comm_net_t n = {.timeout = 7};
  CHECK_OK(comm_net_parse("hosts=2,intra-bandwidth=10Gbit,intra-latency=5us,bandwidth=1Gbit,"
                          "latency=50us", &n));
  CHECK(n.hosts == 2 && n.host_ranks[0] == 0 && n.timeout == 7);
  CHECK(fabs(n.intra_bandwidth - 1.25e9) < 1 && fabs(n.intra_latency - 5e-6) < 1e-12);
  CHECK(fabs(n.bandwidth - 1.25e8) < 1 && fabs(n.latency - 50e-6) < 1e-12);
  CHECK_OK(comm_net_parse("hosts=3+2", &n));
  CHECK(n.hosts == 2 && n.host_ranks[0] == 3 && n.host_ranks[1] == 2 && n.host_ranks[2] == 0);
  CHECK(n.latency == 0 && n.intra_bandwidth == 0); /* a --net replaces the whole description */
  CHECK_OK(comm_net_parse("latency=1ms", &n));
  CHECK(n.hosts == 0 && n.host_ranks[0] == 0 && n.latency == 1e-3);
  static const struct { const char *text, *error; } bad[] = {
      {"hosts=0", "option --net: hosts=0: expected at least 1 host"},
      {"hosts=two", "option --net: hosts=two is not a number of hosts or a list of ranks per host"},
      {"hosts=-2", "option --net: hosts=-2 is not a number"},
      {"hosts=3+", "option --net: hosts=3+ is not a number"},
      {"hosts=3+0", "option --net: hosts=3+0: every host needs at least one rank"},
      {"hosts=5000", "option --net: hosts=5000: at most 4096"},
      {"hosts=2.5", "option --net: hosts=2.5 is not a number"},
      {"intra-latency=5us", "option --net: intra-latency is the link within a host: it needs hosts=N with N >= 2"},
      {"hosts=1,intra-bandwidth=1Gbit", "option --net: intra-bandwidth is the link within a host"},
      {"hosts=2,intra-bandwidth=1e30Gbit", "option --net: intra-bandwidth 1e30Gbit is out of range (expected 1 kbit/s to 10 Tbit/s)"},
      {"hosts=2,intra-latency=11s", "option --net: intra-latency 11s is out of range (expected 0 to 10 s)"},
      {"hosts=2,intra-latency=fast", "option --net intra-latency: 'fast' is not a duration"},
      {"hosts=2,hosts=3", "option --net: key 'hosts' given twice"},
      {"host=2", "option --net: unknown key 'host' (expected latency, bandwidth, hosts, intra-latency, intra-bandwidth, link)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    comm_net_t m = {0};
    CHECK_FAILS_WITH(comm_net_parse(bad[i].text, &m), bad[i].error);
    CHECK(strchr(dt_errmsg(), '\n') == NULL && m.hosts == 0);
  }
  char list[400] = "hosts=1";
  for (int i = 1; i < 65; i++) strcat(list, "+1");
  comm_net_t m = {0};
  CHECK_FAILS_WITH(comm_net_parse(list, &m), "at most 64 hosts in a list");
}

/* ---- emulated network --------------------------------------------------- */

typedef struct {
  double sent_at;
  double arrived[2];
} timing_t;

/* 1 MB over a 1 Gbit/s link with 1 ms latency takes 8 ms + 1 ms; a second
 * message sent at the same time waits for the link: 17 ms. */
static int rank_link(comm_t *c, void *arg) {
  timing_t *t = arg;
  size_t n = 1000000;
  char *buf = malloc(2 * n);
  RCHECK(buf);
  RCHECK(c->emulated);
  int rc = 0;
  if (comm_rank(c) == 0) {
    comm_req_t *r[2];
    t->sent_at = dt_now();
    if (comm_isend(c, 1, 0, buf, n, &r[0]) || comm_isend(c, 1, 0, buf + n, n, &r[1]) ||
        comm_waitall(c, 2, r))
      rc = -1;
  } else {
    for (int i = 0; i < 2 && rc == 0; i++) {
      rc = comm_recv(c, 0, 0, buf + i * n, n);
      t->arrived[i] = dt_now();
    }
  }
  free(buf);
  return rc;
}

/* How late a message may arrive from scheduling noise (other jobs share
 * the cores; a sanitizer slows every thread several times). Still short
 * of the 65 ms by which bits mistaken for bytes would delay the first. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define LINK_SLACK 0.050
#else
#define LINK_SLACK 0.030
#endif

static void test_emulated_link_timing(void) {
  comm_net_t net = {.latency = 1e-3, .bandwidth = 125e6};
  timing_t t = {0};
  CHECK_OK(comm_local_run(2, &net, rank_link, &t));
  double first = t.arrived[0] - t.sent_at, second = t.arrived[1] - t.sent_at;
  /* never early; late only by scheduling noise */
  if (!(first >= 0.009 && first < 0.009 + LINK_SLACK && second >= 0.017 &&
        second < 0.017 + LINK_SLACK))
    fprintf(stderr, "  first message after %.2f ms, second after %.2f ms\n", first * 1e3, second * 1e3);
  CHECK(first >= 0.009 && first < 0.009 + LINK_SLACK);
  /* the link carried them one after the other: sent at once over two
   * links, the second would arrive at 9 ms too. (Their difference is not
   * checked: a first message late by scheduling noise shrinks it, which
   * failed a CI run on a busy host.) */
  CHECK(second >= 0.017 && second < 0.017 + LINK_SLACK);
}

/* Per-rank overrides: rank 1's link is 10x slower than rank 0's. */
static int rank_per_rank_link(comm_t *c, void *arg) {
  double *elapsed = arg;
  char buf[100000];
  int peer = 1 - comm_rank(c);
  comm_req_t *r[2];
  RCHECK_OK(comm_barrier(c));
  double t0 = dt_now();
  RCHECK_OK(comm_irecv(c, peer, 0, buf + sizeof buf / 2, sizeof buf / 2, &r[0]));
  RCHECK_OK(comm_isend(c, peer, 0, buf, sizeof buf / 2, &r[1]));
  RCHECK_OK(comm_wait(c, r[0]));
  elapsed[comm_rank(c)] = dt_now() - t0;
  return comm_wait(c, r[1]);
}

/* Hosts: a rank's link to its own host and its link to the other hosts
 * are separate. Rank 0 (host 0 of 2+2) sends 1 MB to rank 2 (other host:
 * 100 Mbit/s, 5 ms: arrives at 85 ms), then 10 kB to rank 1 (same host:
 * 1 Gbit/s, 1 ms: 1.08 ms). On one shared link the second would wait for
 * the first (past 81 ms). */
static int rank_host_links(comm_t *c, void *arg) {
  double *t = arg; /* [0] sent, [1] arrived from the other host, [2] from the same host */
  size_t big = 1000000, small = 10000;
  char *buf = calloc(1, big);
  RCHECK(buf && c->emulated);
  RCHECK_OK(comm_barrier(c));
  int rc = 0;
  if (comm_rank(c) == 0) {
    comm_req_t *r[2];
    t[0] = dt_now(); /* the receivers' clock too: threads of one process */
    rc = comm_isend(c, 2, 0, buf, big, &r[0]);
    if (rc == 0) rc = comm_isend(c, 1, 0, buf, small, &r[1]);
    if (rc == 0) rc = comm_waitall(c, 2, r);
  } else if (comm_rank(c) == 1 || comm_rank(c) == 2) {
    int me = comm_rank(c);
    rc = comm_recv(c, 0, 0, buf, me == 2 ? big : small);
    t[me == 2 ? 1 : 2] = dt_now();
  }
  free(buf);
  return rc;
}

static void test_emulated_host_links(void) {
  comm_net_t net = {.hosts = 2, .latency = 5e-3, .bandwidth = 12.5e6, .intra_latency = 1e-3,
                    .intra_bandwidth = 125e6};
  double t[3] = {0};
  CHECK_OK(comm_local_run(4, &net, rank_host_links, t));
  double arrived[2] = {t[1] - t[0], t[2] - t[0]};
  if (!(arrived[0] >= 0.085 && arrived[0] < 0.085 + LINK_SLACK && arrived[1] >= 0.00108 &&
        arrived[1] < 0.00108 + LINK_SLACK))
    fprintf(stderr, "  between hosts after %.2f ms, within a host after %.2f ms\n",
            arrived[0] * 1e3, arrived[1] * 1e3);
  CHECK(arrived[0] >= 0.085 && arrived[0] < 0.085 + LINK_SLACK);
  CHECK(arrived[1] >= 0.00108 && arrived[1] < 0.00108 + LINK_SLACK);
}

static void test_emulated_per_rank_bandwidth(void) {
  double bw[2] = {50e6, 5e6}, lat[2] = {0, 0}, elapsed[2] = {0};
  comm_net_t net = {.rank_bandwidth = bw, .rank_latency = lat};
  CHECK_OK(comm_local_run(2, &net, rank_per_rank_link, elapsed));
  /* rank 0 receives rank 1's 50 KB over 5 MB/s: 10 ms; rank 1 gets 1 ms */
  CHECK(elapsed[0] >= 0.0095 && elapsed[0] < 0.06);
  CHECK(elapsed[1] < 0.0095);
}

/* A straggler with slowdown 3 really computes 3x as long. */
static int rank_straggler(comm_t *c, void *arg) {
  double t0 = dt_now();
  comm_compute_delay(c, 0.02);
  double dt = dt_now() - t0;
  if (comm_rank(c) == 1) {
    RCHECK(c->slowdown == 3);
    RCHECK(dt >= 0.04 && dt < 0.1);
  } else {
    RCHECK(c->slowdown == 1);
    RCHECK(dt < 0.01);
  }
  return 0;
}

static void test_straggler_delay(void) {
  double slow[2] = {1, 3};
  comm_net_t net = {.rank_slowdown = slow};
  CHECK_OK(comm_local_run(2, &net, rank_straggler, NULL));
}

/* ---- the runner --------------------------------------------------------- */

static int rank_single(comm_t *c, void *arg) {
  RCHECK(comm_size(c) == 1 && comm_rank(c) == 0 && !c->emulated && c->thread_multiple);
  int x = 4, y = 0;
  RCHECK_OK(comm_sendrecv(c, 0, 1, &x, sizeof x, 0, 1, &y, sizeof y));
  RCHECK(y == 4);
  return comm_barrier(c);
}

static void test_single_rank_and_bad_size(void) {
  CHECK_OK(comm_local_run(1, NULL, rank_single, NULL));
  CHECK_FAILS_WITH(comm_local_run(0, NULL, rank_single, NULL), "0 ranks requested");
}

/* Two threads of each rank talk at once (a progress thread, as the
 * strategies use): the local transport allows it. */
typedef struct {
  comm_t *c;
  int tag, rc;
  char err[256];
} side_t;

static void *side_thread(void *p) {
  side_t *s = p;
  int peer = 1 - comm_rank(s->c);
  for (int i = 0; i < 200 && s->rc == 0; i++) {
    int out = i, in = -1;
    s->rc = comm_sendrecv(s->c, peer, s->tag, &out, sizeof out, peer, s->tag, &in, sizeof in);
    if (s->rc == 0 && in != i) s->rc = dt_error("thread tag %d got %d, expected %d", s->tag, in, i);
  }
  if (s->rc) snprintf(s->err, sizeof s->err, "%s", dt_errmsg());
  return NULL;
}

static int rank_two_threads(comm_t *c, void *arg) {
  side_t a = {c, 1, 0, ""}, b = {c, 2, 0, ""};
  pthread_t t;
  RCHECK(pthread_create(&t, NULL, side_thread, &a) == 0);
  side_thread(&b);
  pthread_join(t, NULL);
  if (a.rc) return dt_error("%s", a.err);
  if (b.rc) return dt_error("%s", b.err);
  return 0;
}

static void test_two_threads_per_rank(void) {
  CHECK_OK(comm_local_run(2, NULL, rank_two_threads, NULL));
}

/* ---- bytes on the wire (comm_bytes) -------------------------------------- */

static int bytes_are(const comm_t *c, uint64_t sent, uint64_t received, const char *when) {
  comm_bytes_t b = comm_bytes(c);
  if (b.sent != sent || b.received != received)
    return dt_error("rank %d %s: %llu bytes sent, %llu received; expected %llu and %llu",
                    comm_rank(c), when, (unsigned long long)b.sent, (unsigned long long)b.received,
                    (unsigned long long)sent, (unsigned long long)received);
  return 0;
}

/* Every kind of point-to-point call, on 3 ranks: a send counts its length
 * when posted, a receive its length when its wait succeeds (irecv_reduce:
 * count x 4); a cancelled receive, and one whose wait fails, count
 * nothing; wait_src reports the bytes a receive took, 0 for a send. */
static int rank_bytes_p2p(comm_t *c, void *arg) {
  int me = comm_rank(c);
  char buf[1000] = {0}, big[80] = {0};
  float acc[7] = {0}, add[7] = {1, 2, 3, 4, 5, 6, 7};
  int a = me, b = -1, src = -1;
  size_t got = 99;
  comm_req_t *r;
  RCHECK_OK(bytes_are(c, 0, 0, "at the start"));
  if (me == 0) {
    RCHECK_OK(comm_send(c, 1, 1, buf, 100));
    RCHECK_OK(comm_isend(c, 1, 2, buf, 1000, &r));
    RCHECK_OK(comm_wait_src(c, r, &src, &got));
    RCHECK(got == 0); /* a send received nothing */
    RCHECK_OK(comm_send(c, 1, 3, NULL, 0));
    RCHECK_OK(comm_irecv(c, 1, 4, buf, 10, &r)); /* never sent: withdrawn */
    RCHECK_OK(comm_cancel(c, r));
    RCHECK_OK(bytes_are(c, 1100, 0, "after its sends"));
    RCHECK_OK(comm_sendrecv(c, 2, 5, &a, sizeof a, 2, 5, &b, sizeof b));
    RCHECK_OK(bytes_are(c, 1104, 4, "after the sendrecv"));
  } else if (me == 1) {
    RCHECK_OK(comm_recv(c, 0, 1, buf, 100));
    RCHECK_OK(comm_irecv(c, 0, 2, buf, 1000, &r));
    RCHECK_OK(comm_wait_src(c, r, &src, &got));
    RCHECK(src == 0 && got == 1000);
    RCHECK_OK(comm_recv(c, 0, 3, NULL, 0));
    RCHECK_OK(comm_irecv_reduce(c, 2, 6, acc, 7, NULL, &r));
    RCHECK_OK(comm_wait(c, r));
    RCHECK(acc[6] == 7);
    RCHECK_OK(bytes_are(c, 0, 1128, "after its receives"));
    /* rank 2 sends 40 bytes, this receive expects 80: it fails, counting nothing */
    RCHECK_FAILS_WITH(comm_recv(c, 2, 7, big, 80), "length 40 bytes but receive expects 80");
    RCHECK_OK(bytes_are(c, 0, 1128, "after a failed receive"));
  } else {
    RCHECK_OK(comm_send(c, 1, 6, add, sizeof add));
    RCHECK_OK(comm_sendrecv(c, 0, 5, &a, sizeof a, 0, 5, &b, sizeof b));
    /* the send was posted, so it counts, though the receiver refused it */
    RCHECK_FAILS_WITH(comm_send(c, 1, 7, big, 40), "receiver expects 80 bytes");
    RCHECK_OK(bytes_are(c, 28 + 4 + 40, 4, "after its sends"));
  }
  RCHECK_OK(comm_barrier(c)); /* the transport's own messages: not counted */
  return 0;
}

static void test_bytes_point_to_point(void) {
  comm_net_t net = {.timeout = 20};
  CHECK_OK(comm_local_run(3, &net, rank_bytes_p2p, NULL));
}

/* Communicators split from a rank's world share its counter: traffic on
 * a sub-communicator (and on a split of it) shows in comm_bytes of each.
 * Split, barrier and comm_shared_alloc are the transport's bookkeeping
 * and count nothing. */
static int rank_bytes_split(comm_t *c, void *arg) {
  int me = comm_rank(c);
  comm_t *sub, *single;
  RCHECK_OK(comm_split(c, me % 2, me, &sub));
  RCHECK_OK(comm_split(sub, comm_rank(sub), 0, &single));
  RCHECK_OK(comm_barrier(sub));
  RCHECK_OK(comm_barrier(c));
  void *shared = NULL;
  RCHECK_OK(comm_shared_alloc(sub, 256, &shared));
  RCHECK_OK(bytes_are(c, 0, 0, "after split, barrier and shared alloc"));
  double x[8] = {0};
  if (comm_rank(sub) == 0) RCHECK_OK(comm_send(sub, 1, 3, x, sizeof x));
  else RCHECK_OK(comm_recv(sub, 0, 3, x, sizeof x));
  if (comm_rank(sub) == 0) RCHECK_OK(comm_send(c, me + 2, 4, x, 8)); /* on the parent */
  else RCHECK_OK(comm_recv(c, me - 2, 4, x, 8));
  uint64_t s = comm_rank(sub) == 0 ? 72 : 0, r = comm_rank(sub) == 0 ? 0 : 72;
  RCHECK_OK(bytes_are(c, s, r, "world, after traffic on the world and a sub-communicator"));
  RCHECK_OK(bytes_are(sub, s, r, "sub-communicator"));
  RCHECK_OK(bytes_are(single, s, r, "split of the sub-communicator"));
  comm_shared_free(sub, shared);
  comm_free(single);
  comm_free(sub);
  return 0;
}

static void test_bytes_split_shares_counter(void) {
  comm_net_t net = {.timeout = 20};
  CHECK_OK(comm_local_run(4, &net, rank_bytes_split, NULL));
}

/* Two threads of each rank send and receive at once on two communicators
 * of the rank (as a progress thread beside the compute thread): every
 * byte is counted, once (and ThreadSanitizer sees no race). */
static void *bytes_side_thread(void *p) {
  side_t *s = p;
  int peer = 1 - comm_rank(s->c);
  float out[25] = {0}, in[25];
  for (int i = 0; i < 300 && s->rc == 0; i++) {
    s->rc = comm_sendrecv(s->c, peer, s->tag, out, sizeof out, peer, s->tag, in, sizeof in);
    (void)comm_bytes(s->c); /* reading while the other thread counts */
  }
  if (s->rc) snprintf(s->err, sizeof s->err, "%s", dt_errmsg());
  return NULL;
}

static int rank_bytes_threads(comm_t *c, void *arg) {
  comm_t *sub;
  RCHECK_OK(comm_split(c, 0, comm_rank(c), &sub));
  side_t a = {sub, 1, 0, ""}, b = {c, 2, 0, ""};
  pthread_t t;
  RCHECK(pthread_create(&t, NULL, bytes_side_thread, &a) == 0);
  bytes_side_thread(&b);
  pthread_join(t, NULL);
  comm_free(sub);
  if (a.rc) return dt_error("%s", a.err);
  if (b.rc) return dt_error("%s", b.err);
  return bytes_are(c, 2 * 300 * 100, 2 * 300 * 100, "after two threads' exchanges");
}

static void test_bytes_two_threads(void) {
  comm_net_t net = {.timeout = 20};
  CHECK_OK(comm_local_run(2, &net, rank_bytes_threads, NULL));
}

/* The receiver's header check (wire.c), on raw bytes as they arrive. */
static void test_wire_check_header(void) {
  comm_header_t good = {COMM_MAGIC, COMM_VERSION, 2, 7, 64}, h, bad;
  unsigned char raw[sizeof good + 1];
  memcpy(raw + 1, &good, sizeof good); /* unaligned */
  CHECK(wire_check_header(raw + 1, sizeof good, 7, 2, 4, 64, &h) == WIRE_OK && h.len == 64);
  CHECK(wire_check_header(raw + 1, sizeof good, WIRE_ANY_TAG, COMM_ANY_SOURCE, 4, 64, &h) == WIRE_OK);
  CHECK(wire_check_header(raw + 1, sizeof good - 1, 7, 2, 4, 64, &h) == WIRE_SIZE);
  CHECK(wire_check_header(NULL, sizeof good, 7, 2, 4, 64, &h) == WIRE_SIZE);
  CHECK(wire_check_header(raw + 1, sizeof good, 8, 2, 4, 64, &h) == WIRE_TAG);
  CHECK(wire_check_header(raw + 1, sizeof good, 7, 1, 4, 64, &h) == WIRE_SRC);
  CHECK(wire_check_header(raw + 1, sizeof good, 7, COMM_ANY_SOURCE, 2, 64, &h) == WIRE_SRC);
  CHECK(wire_check_header(raw + 1, sizeof good, 7, 2, 4, 65, &h) == WIRE_LEN);
  bad = good, bad.magic ^= 1;
  CHECK(wire_check_header(&bad, sizeof bad, 7, 2, 4, 64, &h) == WIRE_FOREIGN);
  bad = good, bad.version = 2;
  CHECK(wire_check_header(&bad, sizeof bad, 7, 2, 4, 64, &h) == WIRE_FOREIGN);
  bad = good, bad.tag = -2; /* a transport's own tag */
  CHECK(wire_check_header(&bad, sizeof bad, 7, 2, 4, 64, &h) == WIRE_TAG);
  CHECK(wire_check_header(&bad, sizeof bad, -2, 2, 4, 64, &h) == WIRE_OK);
  bad = good, bad.len = (uint64_t)1 << 63;
  CHECK(wire_check_header(&bad, sizeof bad, 7, 2, 4, 64, &h) == WIRE_LEN);
  CHECK(wire_error(WIRE_LEN, &bad, sizeof bad, "rank 2", 7, 64) == -1 &&
        strstr(dt_errmsg(), "message from rank 2 tag 7: length 9223372036854775808 bytes"));
  CHECK(wire_error(WIRE_SIZE, &h, 3, "rank 2", 7, 64) == -1 && strstr(dt_errmsg(), "(3 bytes"));
}

int main(void) {
  RUN(test_ordering_by_tag);
  RUN(test_bind_core_pins_each_rank);
  RUN(test_any_source);
  RUN(test_send_before_recv);
  RUN(test_recv_before_send);
  RUN(test_irecv_then_blocking_send);
  RUN(test_send_waits_for_receiver);
  RUN(test_recv_reduce_test_sendrecv);
  RUN(test_length_mismatch);
  RUN(test_wire_check_header);
  RUN(test_bad_arguments);
  RUN(test_timeout_names_peer_and_tag);
  RUN(test_peer_exit_fails_fast);
  RUN(test_one_rank_fails_others_stop);
  RUN(test_blocked_sender_names_failed_rank);
  RUN(test_cancel);
  RUN(test_split);
  RUN(test_hosts);
  RUN(test_net_parse);
  RUN(test_emulated_link_timing);
  RUN(test_emulated_per_rank_bandwidth);
  RUN(test_emulated_host_links);
  RUN(test_straggler_delay);
  RUN(test_single_rank_and_bad_size);
  RUN(test_two_threads_per_rank);
  RUN(test_bytes_point_to_point);
  RUN(test_bytes_split_shares_counter);
  RUN(test_bytes_two_threads);
  TEST_MAIN_END();
}
