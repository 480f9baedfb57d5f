/* Fuzz target: the IDX reader, plain and gzipped, through real files (it
 * reads paths). Input: a flags byte (bit 0: gzip the images file, bit 1:
 * gzip the labels file), a 16-bit little-endian length of the images
 * file, the images file, then the labels file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/data.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  int flags = data[0];
  size_t split = (size_t)data[1] | (size_t)data[2] << 8;
  data += 3, size -= 3;
  if (split > size) split = size;
  char images[64], labels[64];
  if (fuzz_write_temp(data, split, flags & 1, images) != 0) return 0;
  if (fuzz_write_temp(data + split, size - split, flags & 2, labels) != 0) {
    unlink(images);
    return 0;
  }
  dataset_t d;
  if (dataset_load_idx(images, labels, &d) == 0) {
    /* what a loaded data set promises */
    if (d.n < 1 || d.dim != (size_t)d.h * d.w || d.nclasses < 1 || d.nclasses > 256) abort();
    volatile unsigned sink = 0;
    for (size_t i = 0; i < d.n * d.dim; i++) sink += d.pixels[i];
    for (size_t i = 0; i < d.n; i++)
      if (d.y[i] < 0 || d.y[i] >= d.nclasses) abort();
    (void)sink;
    dataset_free(&d);
  }
  unlink(images);
  unlink(labels);
  return 0;
}
