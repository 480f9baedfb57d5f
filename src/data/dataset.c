/* dataset_load: what `--data` names (fashion-mnist, synthetic, or a folder
 * of IDX files) turned into a normalised dataset, plus normalising and
 * freeing. */
#include "dtrain/data.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The synthetic task has the shape and size of Fashion-MNIST, so the same
 * models and batch sizes run on it. */
#define SYNTH_TRAIN 60000
#define SYNTH_TEST 10000

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/base, or else dir/base.gz. `missing` (if set) replaces the
 * default message, for a dataset the user did not point at a folder. */
static int find_idx_file(const char *dir, const char *base, const char *missing, char *path,
                         size_t cap) {
  snprintf(path, cap, "%s/%s", dir, base);
  if (is_file(path)) return 0;
  snprintf(path, cap, "%s/%s.gz", dir, base);
  if (is_file(path)) return 0;
  if (missing) return dt_error("%s", missing);
  return dt_error("%s: neither %s nor %s.gz found", dir, base, base);
}

static int load_idx_folder(const char *dir, int train, const char *missing, dataset_t *out) {
  const char *split = train ? "train" : "t10k";
  char base[64], images[4096], labels[4096];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
  DT_TRY(find_idx_file(dir, base, missing, images, sizeof images));
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
  DT_TRY(find_idx_file(dir, base, missing, labels, sizeof labels));
  DT_TRY(dataset_load_idx(images, labels, out));
  /* Every MNIST-family folder gets Fashion-MNIST's constants: close enough
   * for MNIST (0.1307, 0.3081) to train well, and the same for every run. */
  dataset_normalize(out, FASHION_MNIST_MEAN, FASHION_MNIST_STD);
  return 0;
}

int dataset_load(const char *spec, int train, uint64_t seed, dataset_t *out) {
  memset(out, 0, sizeof *out);
  if (!spec || !*spec)
    return dt_error("option --data: missing value (expected fashion-mnist, synthetic or a folder)");
  if (strcmp(spec, "synthetic") == 0)
    return dataset_synthetic_split(train ? SYNTH_TRAIN : SYNTH_TEST, 1, 28, 28, 10, seed, train,
                                   out);
  if (strcmp(spec, "fashion-mnist") == 0) {
    char missing[512];
    snprintf(missing, sizeof missing,
             "fashion-mnist not found at %s (install the Debian package dataset-fashion-mnist, "
             "or pass --data DIR)", FASHION_MNIST_DIR);
    DT_TRY(load_idx_folder(FASHION_MNIST_DIR, train, missing, out));
    snprintf(out->source, sizeof out->source, "fashion-mnist %s (%s)", train ? "train" : "test",
             FASHION_MNIST_DIR);
    return 0;
  }
  if (!is_dir(spec))
    return dt_error("option --data: '%s' is not a folder (expected fashion-mnist, synthetic or a "
                    "folder of IDX files)", spec);
  return load_idx_folder(spec, train, NULL, out);
}

int dataset_load_seq(const char *spec, int train, uint64_t seed, int seq_len, dataset_t *out) {
  if (data_is_text(spec)) return dataset_load_text(spec, seq_len, train, out);
  return dataset_load(spec, train, seed, out);
}

void dataset_normalize(dataset_t *d, float mean, float std) {
  const float inv = 1.0f / std;
  if (d->pixels) { /* applied by data_gather: x = pixel/255 scaled */
    d->scale = inv / 255.0f;
    d->shift = -mean * inv;
    return;
  }
  float *restrict x = d->x;
  for (size_t i = 0; i < d->n * d->dim; i++) x[i] = (x[i] - mean) * inv;
}

void dataset_free(dataset_t *d) {
  free(d->pixels);
  free(d->text);
  d->pixels = NULL;
  d->text = NULL;
  dt_free(d->x);
  dt_free(d->y);
  d->x = NULL;
  d->y = NULL;
  d->n = 0;
}
