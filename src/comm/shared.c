/* Shared memory for strategies whose ranks update one arena in place
 * (Hogwild). A transport facility: on local the ranks are threads of one
 * process, so one allocation is visible to all of them; rank 0 makes it
 * and sends its address to the others. Processes (mpi) share no memory:
 * there the call fails and says what to use instead. */
#include <string.h>

#include "dtrain/comm.h"

int comm_shares_memory(const comm_t *c) {
  return c->ops && c->ops->name && !strcmp(c->ops->name, "local");
}

int comm_shared_alloc(comm_t *c, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (!comm_shares_memory(c))
    return dt_error("shared memory needs --comm local (ranks of --comm %s are separate "
                    "processes)", c->ops && c->ops->name ? c->ops->name : "?");
  uint64_t addr = 0;
  if (c->rank != 0) {
    DT_TRY(comm_recv(c, 0, COMM_TAG_SHARED, &addr, sizeof addr));
    if (!addr) return dt_error("shared memory: rank 0 could not allocate %zu bytes", bytes);
    *ptr = (void *)(uintptr_t)addr;
    return 0;
  }
  void *p = dt_alloc(bytes ? bytes : 1);
  addr = (uint64_t)(uintptr_t)p; /* 0 tells the others that it failed */
  for (int r = 1; r < c->size; r++)
    if (comm_send(c, r, COMM_TAG_SHARED, &addr, sizeof addr) != 0) {
      dt_free(p);
      return -1;
    }
  if (!p) return -1;
  *ptr = p;
  return 0;
}

int comm_shared_free(comm_t *c, void *ptr) {
  /* Once every rank is here nobody touches it any more. If the barrier
   * fails (a rank failed), another may still be using it: left allocated,
   * as the run is ending anyway. */
  int rc = comm_barrier(c);
  if (rc == 0 && c->rank == 0) dt_free(ptr);
  return rc;
}
