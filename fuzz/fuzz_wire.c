/* Fuzz target: the receiver's check of a message header (wire_check_header,
 * src/comm/wire.c, used by the local and mpi transports) and the error line
 * it leads to. The first 12 bytes choose what the receive expects (tag,
 * source, ranks, length); the rest are the bytes received as a header. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 12) return 0;
  int32_t tag, src;
  uint32_t n;
  memcpy(&tag, data, 4);
  memcpy(&src, data + 4, 4);
  memcpy(&n, data + 8, 4);
  int nranks = (int)(n & 0xffff) - 8; /* some <= 0: not checked */
  size_t len = (size_t)(n >> 16) * 977;
  if (src < -1 || src > 70000) src = src & 1 ? COMM_ANY_SOURCE : (int)((uint32_t)src % 70000);
  if ((tag & 0xff) == 0x55) tag = WIRE_ANY_TAG;
  const uint8_t *raw = data + 12;
  size_t nbytes = size - 12;
  /* the bytes in a buffer of their own, so that ASan sees any read past them */
  uint8_t *copy = malloc(nbytes ? nbytes : 1);
  if (!copy) return 0;
  memcpy(copy, raw, nbytes);
  comm_header_t h;
  wire_status_t ws = wire_check_header(copy, nbytes, tag, src, nranks, len, &h);
  if (ws < WIRE_OK || ws > WIRE_LEN) abort();
  if (ws == WIRE_OK) {
    /* what passed is exactly what a sender writes */
    if (nbytes != sizeof h || h.magic != COMM_MAGIC || h.version != COMM_VERSION ||
        h.len != (uint64_t)len || (tag != WIRE_ANY_TAG && h.tag != tag) ||
        (src != COMM_ANY_SOURCE && h.src != src) || (nranks > 0 && (h.src < 0 || h.src >= nranks)))
      abort();
  } else {
    dt_error_clear();
    if (wire_error(ws, &h, nbytes, "rank 1", tag, len) != -1 || !dt_errmsg()[0]) abort();
  }
  free(copy);
  return 0;
}
