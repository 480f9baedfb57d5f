/* Fuzz target: the safetensors reader (header JSON, shapes, byte ranges,
 * metadata). The input is the whole file, parsed in memory from a buffer
 * of exactly its size, so that a read past the end is caught. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/safetensors.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *file = malloc(size ? size : 1);
  if (!file) return 0;
  memcpy(file, data, size);
  safetensors_t st;
  if (safetensors_parse("fuzz.safetensors", file, size, &st) != 0) return 0;
  /* every byte of every tensor is in the file: read them all */
  volatile float sink = 0;
  for (int i = 0; i < st.ntensors; i++) {
    const st_tensor_t *t = &st.tensors[i];
    for (size_t k = 0; k < t->len; k++) sink += t->data[k];
    if (safetensors_find(&st, t->name) == NULL) abort();
  }
  long long v;
  safetensors_meta_int(&st, "step", 0, INT64_MAX, &v);
  safetensors_meta_int(&st, "epoch", -5, 1000000, &v);
  (void)sink;
  safetensors_free(&st);
  return 0;
}
