/* IDX files (the MNIST family's format), gzipped or plain: a big-endian
 * header -- magic 0x00000803 + count, rows, cols for ubyte images, magic
 * 0x00000801 + count for ubyte labels -- then the bytes. Every check names
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

typedef struct {
  const char *path;
  uint8_t *bytes;       /* the whole file, decompressed */
  size_t len;
  uint32_t count;       /* samples the header declares */
  uint32_t rows, cols;  /* images only */
} idx_file_t;

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void idx_free(idx_file_t *f) {
  free(f->bytes);
  f->bytes = NULL;
}

/* Reads the file and checks the header size and magic number. */
static int idx_open(const char *path, uint32_t magic, size_t header, const char *what,
                    idx_file_t *f) {
  memset(f, 0, sizeof *f);
  f->path = path;
  DT_TRY(file_read_all(path, 1, &f->bytes, &f->len));
  /* The magic first: a file of the wrong kind is a likelier mistake than
   * a short one, and the magic says which it is. */
  if (f->len >= 4 && be32(f->bytes) != magic) {
    dt_error("%s: bad magic 0x%08x at offset 0, expected 0x%08x (IDX ubyte %s)", path,
             be32(f->bytes), magic, what);
  } else if (f->len < header) {
    dt_error("%s: truncated: %zu bytes, shorter than the %zu-byte IDX header of %s", path,
             f->len, header, what);
  } else if ((f->count = be32(f->bytes + 4)) == 0) {
    dt_error("%s: header says 0 %s (count at offset 4): no samples", path, what);
  } else {
    return 0;
  }
  idx_free(f);
  return -1;
}

/* The payload must be exactly what the header declares: a shorter file is
 * truncated, and a longer one is refused too, since extra bytes mean the
 * header does not describe this file (a wrong or concatenated download). */
static int idx_check_size(idx_file_t *f, size_t header, size_t per_sample, const char *what,
                          const char *shape) {
  uint64_t want = (uint64_t)header + (uint64_t)f->count * per_sample;
  if (f->len < want)
    dt_error("%s: truncated: header says %u %s%s (%llu bytes) but the file has %zu", f->path,
             f->count, what, shape, (unsigned long long)want, f->len);
  else if (f->len > want)
    dt_error("%s: %llu bytes of trailing data: header says %u %s%s (%llu bytes) but the file "
             "has %zu", f->path, (unsigned long long)(f->len - want), f->count, what, shape,
             (unsigned long long)want, f->len);
  else
    return 0;
  idx_free(f);
  return -1;
}

static int idx_open_images(const char *path, idx_file_t *f) {
  DT_TRY(idx_open(path, IDX_IMAGES_MAGIC, IDX_IMAGES_HEADER, "images", f));
  f->rows = be32(f->bytes + 8);
  f->cols = be32(f->bytes + 12);
  if (f->rows == 0 || f->cols == 0 || f->rows > IDX_MAX_SIDE || f->cols > IDX_MAX_SIDE) {
    dt_error("%s: image size %ux%u at offset 8 is out of range (1..%u per side)", path,
             f->rows, f->cols, IDX_MAX_SIDE);
    idx_free(f);
    return -1;
  }
  char shape[32];
  snprintf(shape, sizeof shape, " of %ux%u", f->rows, f->cols);
  return idx_check_size(f, IDX_IMAGES_HEADER, (size_t)f->rows * f->cols, "images", shape);
}

static int idx_open_labels(const char *path, idx_file_t *f) {
  DT_TRY(idx_open(path, IDX_LABELS_MAGIC, IDX_LABELS_HEADER, "labels", f));
  return idx_check_size(f, IDX_LABELS_HEADER, 1, "labels", "");
}

/* Pixels stay uint8 (a quarter of the memory of float32), with scale 1/255
 * until dataset_normalize; labels as int32; nclasses = max label + 1 (at
 * most 256, as labels are bytes). The file buffer becomes the pixel
 * storage in place, so loading never holds two copies. */
static int idx_fill(idx_file_t *im, const idx_file_t *lb, dataset_t *out) {
  size_t n = im->count, dim = (size_t)im->rows * im->cols;
  out->y = dt_alloc(n * sizeof *out->y);
  if (!out->y) return dt_error_prefix("%s: ", im->path);
  memmove(im->bytes, im->bytes + IDX_IMAGES_HEADER, n * dim);
  uint8_t *shrunk = realloc(im->bytes, n * dim);
  out->pixels = shrunk ? shrunk : im->bytes;
  im->bytes = NULL;
  out->scale = 1.0f / 255.0f;
  out->shift = 0.0f;
  const uint8_t *lab = lb->bytes + IDX_LABELS_HEADER;
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

int dataset_load_idx(const char *images_path, const char *labels_path, dataset_t *out) {
  memset(out, 0, sizeof *out);
  idx_file_t im, lb;
  DT_TRY(idx_open_images(images_path, &im));
  if (idx_open_labels(labels_path, &lb) != 0) {
    idx_free(&im);
    return -1;
  }
  int rc = -1;
  if (im.count != lb.count)
    dt_error("images file %s has %u samples but labels file %s has %u", images_path, im.count,
             labels_path, lb.count);
  else
    rc = idx_fill(&im, &lb, out);
  if (rc != 0) dataset_free(out);
  idx_free(&im);
  idx_free(&lb);
  return rc;
}
