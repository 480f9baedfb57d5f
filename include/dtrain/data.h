/* data: datasets (IDX files of the MNIST family, gzipped or plain;
 * synthetic), seeded per-epoch shuffling, sharding and batch gathering.
 *
 * MEMORY: IDX images stay as uint8 pixels (47 MB for Fashion-MNIST train,
 * where float32 would be 188 MB and break the 200 MiB budget of a run);
 * data_gather normalises while copying a batch: x = pixel * scale + shift.
 * Synthetic data is generated as float32 into `x` (pixels == NULL).
 * Layout is NHWC (for one channel the same as NCHW). */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include "dtrain/core.h"

typedef struct {
  size_t n;                 /* samples */
  int c, h, w;              /* per-sample shape */
  size_t dim;               /* c*h*w */
  int nclasses;
  uint8_t *pixels;          /* [n, dim] raw IDX pixels, or NULL */
  float scale, shift;       /* x = pixel * scale + shift (set by dataset_normalize) */
  float *x;                 /* [n, dim] float samples when pixels == NULL */
  int32_t *y;               /* [n] */
  /* Text (src/data/text.c): the bytes of the whole text, shared by the
   * splits' windows; window i of this split starts at byte
   * (text_first + i)·dim. NULL: not text. */
  uint8_t *text;
  size_t text_len, text_first;
  size_t ylen;              /* labels per sample: 1 (0 reads as 1), or T for text */
  char source[256];         /* where it came from, for messages */
} dataset_t;

#define FORTUNES_DIR "/usr/share/games/fortunes"

/* Fashion-MNIST (and MNIST) mean and std of the pixel values / 255. */
#define FASHION_MNIST_MEAN 0.2860f
#define FASHION_MNIST_STD 0.3530f
#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* One IDX image file + label file (gzip or plain); pixels kept as uint8
 * with scale 1/255, shift 0 (i.e. [0,1]) until dataset_normalize.
 * Errors name the file and the offset/field that is wrong. */
int dataset_load_idx(const char *images_path, const char *labels_path, dataset_t *out);
/* spec: "fashion-mnist" (the Debian package's files), "synthetic", or a
 * folder holding train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz],
 * t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz].
 * Loads the train (train != 0) or test split and normalises it. */
int dataset_load(const char *spec, int train, uint64_t seed, dataset_t *out);
/* Gaussian class prototypes plus noise: learnable, deterministic for a seed. */
int dataset_synthetic(size_t n, int c, int h, int w, int nclasses, uint64_t seed,
                      dataset_t *out);
/* The train (train != 0) or test split of the synthetic task of `seed`:
 * both splits share the class prototypes and differ in their samples.
 * dataset_synthetic() is the train split. */
int dataset_synthetic_split(size_t n, int c, int h, int w, int nclasses, uint64_t seed,
                            int train, dataset_t *out);
/* For pixel data sets scale/shift so that x = (pixel/255 - mean)/std;
 * for float data normalises x in place. */
/* Whether --data names text: "fortunes" (the Debian package's files in
 * FORTUNES_DIR) or "text:PATH" (any file, read as bytes). */
int data_is_text(const char *spec);
/* The train (train != 0: the first 90% of the windows) or validation
 * split (the last 10%) of the text as windows of seq_len bytes, each with
 * its seq_len next bytes as labels (ylen = seq_len, 256 classes). An empty
 * or too short file is refused with one line saying how long it must be. */
int dataset_load_text(const char *spec, int seq_len, int train, dataset_t *out);
/* dataset_load, or dataset_load_text where spec names text. */
int dataset_load_seq(const char *spec, int train, uint64_t seed, int seq_len, dataset_t *out);
/* Labels per sample (ylen, at least 1). */
static inline size_t dataset_ylen(const dataset_t *d) { return d->ylen ? d->ylen : 1; }
void dataset_normalize(dataset_t *d, float mean, float std);
void dataset_free(dataset_t *d);

/* The permutation of [0, n) for an epoch: a function of (seed, epoch) only,
 * so every rank computes the same order and a resumed run the same too. */
void data_epoch_order(uint64_t seed, int64_t epoch, uint32_t *order, size_t n);
/* Shard r of `parts`: the contiguous range [*off, *off + *len) of [0, n)
 * (sizes differ by at most one). */
void data_shard(size_t n, int r, int parts, size_t *off, size_t *len);
/* Copies the samples order[0..count) into x [count, dim] (normalised:
 * pixel * scale + shift, or the float samples; text: the byte values) and
 * y [count, ylen]. x NULL:
 * the labels only (a pipeline's last stage, whose input arrives). */
void data_gather(const dataset_t *d, const uint32_t *order, size_t count, float *x, int32_t *y);
/* text.c: window w of a text split into x [dim] (may be NULL) and y [dim]. */
void text_gather(const dataset_t *d, size_t w, float *x, int32_t *y);
#endif
