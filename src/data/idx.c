/* IDX files (the MNIST family's format), gzipped or plain: a big-endian
 * header -- magic 0x00000803 + count, rows, cols for ubyte images, magic
 * 0x00000801 + count for ubyte labels -- then the bytes. The header is read
 * and checked first, then exactly the bytes it declares: memory is bounded
 * by the header, never by what a (decompressed) file happens to hold. Every check names
 * the file and the offset or field at fault, because a wrong or damaged
 * download is the usual cause and the user has to find which file it is. */
#include "dtrain/data.h"

#include <stdlib.h>
#include <string.h>

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IDX_IMAGES_HEADER 16
#define IDX_LABELS_HEADER 8
/* Keeps rows*cols*count inside 64 bits and each side inside an int. */
#define IDX_MAX_SIDE 32768u
/* The most payload one file may declare (pixels stay in memory as bytes):
 * a damaged header is refused before anything is allocated for it. */
#define IDX_MAX_PAYLOAD (4ull << 30)
/* How far past the declared end the reader looks to say how much trailing
 * data there is. */
#define IDX_TRAILING_PEEK 65536

typedef struct {
  const char *path;
  file_in_t in;
  uint8_t header[IDX_IMAGES_HEADER];
  uint8_t *payload;     /* exactly the bytes the header declares */
  uint32_t count;       /* samples the header declares */
  uint32_t rows, cols;  /* images only */
} idx_file_t;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void idx_free(idx_file_t *f) {
  file_in_close(&f->in);
  free(f->payload);
  f->payload = NULL;
}

/* Opens the file, reads its header and checks the size and magic number. */
static int idx_open(const char *path, uint32_t magic, size_t header, const char *what,
                    idx_file_t *f) {
  memset(f, 0, sizeof *f);
  f->path = path;
  DT_TRY(file_in_open(&f->in, path));
  size_t got;
  if (file_in_read(&f->in, f->header, header, &got) != 0) {
    idx_free(f);
    return -1;
  }
  /* The magic first: a file of the wrong kind is a likelier mistake than
   * a short one, and the magic says which it is. */
  if (got >= 4 && be32(f->header) != magic) {
    dt_error("%s: bad magic 0x%08x at offset 0, expected 0x%08x (IDX ubyte %s)", path,
             be32(f->header), magic, what);
  } else if (got < header) {
    dt_error("%s: truncated: %zu bytes, shorter than the %zu-byte IDX header of %s", path,
             got, header, what);
  } else if ((f->count = be32(f->header + 4)) == 0) {
    dt_error("%s: header says 0 %s (count at offset 4): no samples", path, what);
  } else {
    return 0;
  }
  idx_free(f);
  return -1;
}

/* Counts (up to IDX_TRAILING_PEEK) the bytes after the declared end. */
static int count_trailing(idx_file_t *f, size_t *extra, int *more) {
  *extra = 0;
  *more = 0;
  uint8_t *scratch = malloc(IDX_TRAILING_PEEK);
  if (!scratch) return dt_error("%s: out of memory", f->path);
  int rc = file_in_read(&f->in, scratch, IDX_TRAILING_PEEK, extra);
  free(scratch);
  if (rc != 0) return -1;
  if (*extra == IDX_TRAILING_PEEK) {
    int end = file_in_at_end(&f->in);
    if (end < 0) return -1;
    *more = !end;
  }
  return 0;
}

/* Reads exactly the payload the header declares, growing the buffer as
 * data arrives (so a truncated file with a huge header costs only what it
 * holds). A shorter file is truncated; a longer one is refused too, since
 * extra bytes mean the header does not describe this file (a wrong or
 * concatenated download). */
static int idx_read_payload(idx_file_t *f, size_t header, size_t per_sample, const char *what,
                            const char *shape) {
  uint64_t want = (uint64_t)f->count * per_sample, total = header + want;
  if (want > IDX_MAX_PAYLOAD) {
    dt_error("%s: header says %u %s%s (%llu bytes), more than the %llu bytes dtrain reads from "
             "one IDX file (damaged header?)", f->path, f->count, what, shape,
             (unsigned long long)total, (unsigned long long)IDX_MAX_PAYLOAD);
    goto fail;
  }
  size_t n = 0, cap = 0;
  while (n < want) {
    if (n == cap) {
      size_t grown = cap ? cap * 2 : 1 << 20;
      if (grown > want) grown = (size_t)want;
      uint8_t *p = realloc(f->payload, grown);
      if (!p) {
        dt_error("%s: out of memory (%zu bytes)", f->path, grown);
        goto fail;
      }
      f->payload = p;
      cap = grown;
    }
    size_t got;
    if (file_in_read(&f->in, f->payload + n, cap - n, &got) != 0) goto fail;
    if (got == 0) {
      dt_error("%s: truncated: header says %u %s%s (%llu bytes) but the file has %zu", f->path,
               f->count, what, shape, (unsigned long long)total, header + n);
      goto fail;
    }
    n += got;
  }
  size_t extra;
  int more;
  if (count_trailing(f, &extra, &more) != 0) goto fail;
  if (extra) {
    dt_error("%s: %s%zu bytes of trailing data: header says %u %s%s (%llu bytes) but the file "
             "is longer", f->path, more ? "more than " : "", extra, f->count, what, shape,
             (unsigned long long)total);
    goto fail;
  }
  file_in_close(&f->in);
  return 0;
fail:
  idx_free(f);
  return -1;
}

static int idx_open_images(const char *path, idx_file_t *f) {
  DT_TRY(idx_open(path, IDX_IMAGES_MAGIC, IDX_IMAGES_HEADER, "images", f));
  f->rows = be32(f->header + 8);
  f->cols = be32(f->header + 12);
  if (f->rows == 0 || f->cols == 0 || f->rows > IDX_MAX_SIDE || f->cols > IDX_MAX_SIDE) {
    dt_error("%s: image size %ux%u at offset 8 is out of range (1..%u per side)", path,
             f->rows, f->cols, IDX_MAX_SIDE);
    idx_free(f);
    return -1;
  }
  return 0;
}

static int idx_read_images(idx_file_t *f) {
  char shape[32];
  snprintf(shape, sizeof shape, " of %ux%u", f->rows, f->cols);
  return idx_read_payload(f, IDX_IMAGES_HEADER, (size_t)f->rows * f->cols, "images", shape);
}

/* Pixels stay uint8 (a quarter of the memory of float32), with scale 1/255
 * until dataset_normalize; labels as int32; nclasses = max label + 1 (at
 * most 256, as labels are bytes). The payload buffer becomes the pixel
 * storage, so loading never holds two copies. */
static int idx_fill(idx_file_t *im, const idx_file_t *lb, dataset_t *out) {
  size_t n = im->count, dim = (size_t)im->rows * im->cols;
  out->y = dt_alloc(n * sizeof *out->y);
  if (!out->y) return dt_error_prefix("%s: ", im->path);
  out->pixels = im->payload;
  im->payload = NULL;
  out->scale = 1.0f / 255.0f;
  out->shift = 0.0f;
  const uint8_t *lab = lb->payload;
  int max_label = 0;
  for (size_t i = 0; i < n; i++) {
    out->y[i] = lab[i];
    if (lab[i] > max_label) max_label = lab[i];
  }
  out->n = n;
  out->c = 1;
  out->h = (int)im->rows;
  out->w = (int)im->cols;
  out->dim = dim;
  out->nclasses = max_label + 1;
  snprintf(out->source, sizeof out->source, "%s", im->path);
  return 0;
}

/* Both headers are checked before either payload is read. */
int dataset_load_idx(const char *images_path, const char *labels_path, dataset_t *out) {
  memset(out, 0, sizeof *out);
  idx_file_t im, lb;
  DT_TRY(idx_open_images(images_path, &im));
  if (idx_open(labels_path, IDX_LABELS_MAGIC, IDX_LABELS_HEADER, "labels", &lb) != 0) {
    idx_free(&im);
    return -1;
  }
  int rc = -1;
  if (im.count != lb.count)
    dt_error("images file %s has %u samples but labels file %s has %u", images_path, im.count,
             labels_path, lb.count);
  else if (idx_read_images(&im) == 0 &&
           idx_read_payload(&lb, IDX_LABELS_HEADER, 1, "labels", "") == 0)
    rc = idx_fill(&im, &lb, out);
  if (rc != 0) dataset_free(out);
  idx_free(&im);
  idx_free(&lb);
  return rc;
}
