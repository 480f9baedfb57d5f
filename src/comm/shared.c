/* Shared memory for strategies whose ranks read or write one another's
 * memory in place (Hogwild, shared-memory sync, allreduce:shm). A
 * transport facility: on local the ranks are threads of one process, so
 * one allocation is visible to all of them; rank 0 makes it and sends its
 * address to the others. Processes (mpi) share no memory: there the call
 * fails and says what to use instead.
 *
 * Freeing is where a failed run used to crash: a rank that failed (a
 * timeout, a dead peer) returned and freed its arenas while a slower peer
 * still wrote into them through the shared tables. So comm_shared_free is
 * failure-safe: it waits until every rank of the communicator has called
 * it or has ended (never on a message, which a failed run no longer
 * delivers), and only then does anyone go on to free what it published.
 * A small header before the block holds who has arrived and left. */
#include <stdatomic.h>
#include <string.h>

#include "dtrain/comm.h"

#define SHARED_HEADER 64          /* keeps the caller's block 64-byte aligned */
#define MAX_SHARED_RANKS 4096

typedef struct {
  atomic_int departed;            /* ranks past their wait in comm_shared_free */
  atomic_uchar arrived[];         /* one flag a rank */
} shared_header_t;

static size_t header_bytes(int size) {
  size_t h = sizeof(shared_header_t) + (size_t)size;
  return (h + SHARED_HEADER - 1) / SHARED_HEADER * SHARED_HEADER;
}

/* The address goes from rank 0 to the others as the transport's own
 * message, straight through the backend (ranks and tag are valid by
 * construction): bookkeeping, not counted in comm_bytes. */
static int own_send(comm_t *c, int dst, const uint64_t *addr) {
  comm_req_t *r;
  DT_TRY(c->ops->isend(c, dst, COMM_TAG_SHARED, addr, sizeof *addr, &r));
  return c->ops->wait(c, r, NULL);
}

static int own_recv(comm_t *c, uint64_t *addr) {
  comm_req_t *r;
  DT_TRY(c->ops->irecv(c, 0, COMM_TAG_SHARED, addr, sizeof *addr, &r));
  return c->ops->wait(c, r, NULL);
}

static shared_header_t *header_of(const comm_t *c, void *ptr) {
  return (shared_header_t *)((char *)ptr - header_bytes(c->size));
}

int comm_shares_memory(const comm_t *c) {
  return c->ops && c->ops->name && !strcmp(c->ops->name, "local") && c->ops->gone;
}

int comm_shared_alloc(comm_t *c, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (!comm_shares_memory(c))
    return dt_error("shared memory needs --comm local (ranks of --comm %s are separate "
                    "processes)", c->ops && c->ops->name ? c->ops->name : "?");
  if (c->size > MAX_SHARED_RANKS) return dt_error("shared memory: %d ranks (at most %d)", c->size, MAX_SHARED_RANKS);
  uint64_t addr = 0;
  if (c->rank != 0) {
    DT_TRY(own_recv(c, &addr));
    if (!addr) return dt_error("shared memory: rank 0 could not allocate %zu bytes", bytes);
    *ptr = (void *)(uintptr_t)addr;
    return 0;
  }
  char *p = dt_alloc(header_bytes(c->size) + (bytes ? bytes : 1));
  if (p) *ptr = p + header_bytes(c->size);
  addr = (uint64_t)(uintptr_t)*ptr; /* 0 tells the others that it failed */
  for (int r = 1; r < c->size; r++)
    if (own_send(c, r, &addr) != 0)
      return -1; /* ranks before r hold the block: the caller still frees it */
  return p ? 0 : -1;
}

/* 1 once every rank of c has arrived here or ended. */
static int all_arrived(comm_t *c, shared_header_t *h) {
  for (int q = 0; q < c->size; q++)
    if (!atomic_load(&h->arrived[q]) && !c->ops->gone(c, q)) return 0;
  return 1;
}

int comm_shared_free(comm_t *c, void *ptr) {
  if (!ptr) return 0;
  shared_header_t *h = header_of(c, ptr);
  atomic_store(&h->arrived[c->rank], 1);
  /* The peers are threads of this process, each on its way here: the wait
   * ends within a step of the slowest. A short sleep keeps it off the core
   * a straggler needs. */
  for (int spins = 0; !all_arrived(c, h); spins++)
    if (spins > 1000) dt_sleep_until(dt_now() + 100e-6);
  /* The arrivals are final now (a rank that ended never arrives): the last
   * rank to leave frees the block, as nobody reads the header after it. */
  int arrived = 0;
  for (int q = 0; q < c->size; q++) arrived += atomic_load(&h->arrived[q]);
  if (atomic_fetch_add(&h->departed, 1) + 1 == arrived) dt_free(h);
  return 0;
}
