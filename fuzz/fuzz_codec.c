/* Fuzz target: decoding a compressed gradient message (src/compress/), what
 * a rank does with bytes a peer sent. Input: a byte choosing the codec, a
 * 16-bit little-endian count of values n, then the message. A decode must
 * refuse a message that is not an encoding of n values and never read or
 * write outside the message and the n floats (ASan's exact-size heap
 * buffers); a refused message adds nothing. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/compress.h"
#include "fuzz.h"

static const char *const CODECS[] = {"fp32", "fp16", "bf16", "int8", "onebit", "qsgd:7",
                                     "qsgd:1", "terngrad", "topk:0.01", "randomk:0.5",
                                     "threshold:0.5", "strom:0.5", "dgc:0.001"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  codec_spec_t s;
  if (codec_parse(CODECS[data[0] % (sizeof CODECS / sizeof *CODECS)], &s) != 0) abort();
  size_t n = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3, size -= 3;
  uint8_t *msg = malloc(size ? size : 1);
  float *acc = calloc(n ? n : 1, sizeof *acc);
  if (!msg || !acc) abort();
  memcpy(msg, data, size);
  if (codec_decode_add(&s, msg, size, n, acc) != 0)
    for (size_t i = 0; i < n; i++)
      if (acc[i] != 0) abort(); /* refused: nothing added */
  free(msg);
  free(acc);
  return 0;
}
