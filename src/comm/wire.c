/* The message header on the wire: the check every receive makes, shared
 * by the local and mpi transports (and fuzzed by fuzz/fuzz_wire.c). */
#include <string.h>

#include "dtrain/comm.h"

wire_status_t wire_check_header(const void *raw, size_t nbytes, int tag, int src, int nranks,
                                size_t len, comm_header_t *out) {
  memset(out, 0, sizeof *out);
  if (!raw || nbytes != sizeof *out) return WIRE_SIZE;
  memcpy(out, raw, sizeof *out);
  if (out->magic != COMM_MAGIC || out->version != COMM_VERSION) return WIRE_FOREIGN;
  if (tag != WIRE_ANY_TAG && out->tag != tag) return WIRE_TAG;
  if (nranks > 0 && (out->src < 0 || out->src >= nranks)) return WIRE_SRC;
  if (src != COMM_ANY_SOURCE && out->src != src) return WIRE_SRC;
  if (out->len != (uint64_t)len) return WIRE_LEN;
  return WIRE_OK;
}

int wire_error(wire_status_t status, const comm_header_t *h, size_t nbytes, const char *from,
               int tag, size_t len) {
  switch (status) {
  case WIRE_SIZE:
    return dt_error("message from %s tag %d: bad header (%zu bytes, expected %zu)", from, tag,
                    nbytes, sizeof *h);
  case WIRE_FOREIGN:
    return dt_error("message from %s tag %d: bad header (magic 0x%08x version %u; expected a "
                    "dtrain version %u message)", from, tag, h->magic, h->version, COMM_VERSION);
  case WIRE_TAG:
    return dt_error("message from %s tag %d: bad header (it says tag %d)", from, tag, h->tag);
  case WIRE_SRC:
    return dt_error("message from %s tag %d: bad header (it says it comes from rank %d)", from,
                    tag, h->src);
  case WIRE_LEN:
    return dt_error("message from %s tag %d: length %llu bytes but receive expects %zu", from,
                    tag, (unsigned long long)h->len, len);
  default:
    return dt_error("message from %s tag %d: bad header", from, tag);
  }
}
