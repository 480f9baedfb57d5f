/* data: the real Fashion-MNIST files, small IDX files written to a temp
 * folder (good ones and every kind of damage), folder specs, synthetic
 * data, epoch order, shards and gathering. */
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrain/data.h"
#include "test.h"

static char tmpdir[256];

/* ---- writing IDX files ------------------------------------------------------ */

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Pixel j of image i: a fixed pseudo-random byte, so gzip cannot shrink
 * the files to nothing and a truncated stream is really cut short. */
static uint8_t pixel_of(size_t i, size_t j) {
  uint32_t x = (uint32_t)(i * 7919 + j * 104729 + 12345);
  x ^= x >> 13, x *= 0x5bd1e995u, x ^= x >> 15;
  return (uint8_t)x;
}
static uint8_t label_of(size_t i) { return (uint8_t)(i * 3 % 7); } /* max 6: 7 classes */

static uint8_t *images_bytes(uint32_t magic, uint32_t n, uint32_t h, uint32_t w, size_t *len) {
  *len = 16 + (size_t)n * h * w;
  uint8_t *b = malloc(*len);
  put_be32(b, magic), put_be32(b + 4, n), put_be32(b + 8, h), put_be32(b + 12, w);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < (size_t)h * w; j++) b[16 + i * h * w + j] = pixel_of(i, j);
  return b;
}

static uint8_t *labels_bytes(uint32_t n, size_t *len) {
  *len = 8 + (size_t)n;
  uint8_t *b = malloc(*len);
  put_be32(b, 0x00000801), put_be32(b + 4, n);
  for (size_t i = 0; i < n; i++) b[8 + i] = label_of(i);
  return b;
}

/* Writes `len` bytes of b to tmpdir/name (gzip-compressed if gz), keeping
 * only the first `keep` bytes of the file when keep < its size. */
static const char *write_file(const char *name, const uint8_t *b, size_t len, int gz,
                              size_t keep) {
  static char paths[8][512];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, 512, "%s/%s", tmpdir, name);
  if (gz) {
    gzFile f = gzopen(path, "wb");
    gzwrite(f, b, (unsigned)len);
    gzclose(f);
  } else {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
  }
  struct stat st;
  if (stat(path, &st) == 0 && keep < (size_t)st.st_size) CHECK(truncate(path, (off_t)keep) == 0);
  return path;
}

static const char *write_images(const char *name, uint32_t n, uint32_t h, uint32_t w, int gz,
                                size_t keep) {
  size_t len;
  uint8_t *b = images_bytes(0x00000803, n, h, w, &len);
  const char *p = write_file(name, b, len, gz, keep);
  free(b);
  return p;
}

static const char *write_labels(const char *name, uint32_t n, int gz) {
  size_t len;
  uint8_t *b = labels_bytes(n, &len);
  const char *p = write_file(name, b, len, gz, SIZE_MAX);
  free(b);
  return p;
}

/* ---- the real Fashion-MNIST ------------------------------------------------
 * Reference values read by NumPy from the same files:
 *
 * /usr/bin/python3 -c "import gzip, numpy as np; d='/usr/share/datasets/fashion-mnist/';
 *   X=np.frombuffer(gzip.open(d+'train-images-idx3-ubyte.gz').read(),np.uint8,offset=16).reshape(-1,28,28);
 *   Y=np.frombuffer(gzip.open(d+'train-labels-idx1-ubyte.gz').read(),np.uint8,offset=8);
 *   T=np.frombuffer(gzip.open(d+'t10k-images-idx3-ubyte.gz').read(),np.uint8,offset=16).reshape(-1,28,28);
 *   L=np.frombuffer(gzip.open(d+'t10k-labels-idx1-ubyte.gz').read(),np.uint8,offset=8);
 *   print(X.shape, Y[:10].tolist(), X[0,14,10:15].tolist(), X[1,10,10], int(X[0].sum()), Y[59999]);
 *   print(T.shape, L[:10].tolist(), T[0,20,10:15].tolist(), L[9999])"
 *
 * (60000, 28, 28) [9, 0, 0, 3, 0, 2, 7, 2, 5, 5] [0, 0, 237, 226, 217] 252 76247 5
 * (10000, 28, 28) [9, 2, 1, 1, 6, 1, 4, 6, 5, 7] [126, 127, 146, 185, 195] 5 */

/* The normalised value of element i, as data_gather would produce it. */
static double value_at(const dataset_t *d, size_t i) {
  return d->pixels ? (double)d->pixels[i] * d->scale + d->shift : d->x[i];
}

static void check_pixels(const dataset_t *d, size_t i, int row, int col0, const int *want, int k,
                         int normalised) {
  for (int j = 0; j < k; j++) {
    double v = want[j] / 255.0;
    if (normalised) v = (v - FASHION_MNIST_MEAN) / FASHION_MNIST_STD;
    CHECK_NEAR(value_at(d, i * d->dim + (size_t)row * 28 + (size_t)(col0 + j)), v, 1e-6);
  }
}

static void test_fashion_mnist_train_raw(void) {
  dataset_t d;
  CHECK_OK(dataset_load_idx(FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz",
                            FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz", &d));
  if (!d.pixels) return;
  CHECK(d.n == 60000 && d.c == 1 && d.h == 28 && d.w == 28 && d.dim == 784);
  CHECK(d.nclasses == 10);
  static const int labels[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  for (int i = 0; i < 10; i++) CHECK(d.y[i] == labels[i]);
  CHECK(d.y[59999] == 5);
  static const int row14[5] = {0, 0, 237, 226, 217};
  check_pixels(&d, 0, 14, 10, row14, 5, 0);
  CHECK_NEAR(value_at(&d, 1 * 784 + 10 * 28 + 10), 252 / 255.0, 1e-6);
  double sum = 0;
  for (int j = 0; j < 784; j++) sum += d.pixels[j];
  CHECK_NEAR(sum, 76247, 1e-2);
  dataset_free(&d);
}

static void test_fashion_mnist_test_normalised(void) {
  dataset_t d;
  CHECK_OK(dataset_load("fashion-mnist", 0, 1, &d));
  if (!d.pixels) return;
  CHECK(d.n == 10000 && d.h == 28 && d.w == 28 && d.nclasses == 10);
  static const int labels[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (int i = 0; i < 10; i++) CHECK(d.y[i] == labels[i]);
  CHECK(d.y[9999] == 5);
  static const int row20[5] = {126, 127, 146, 185, 195};
  check_pixels(&d, 0, 20, 10, row20, 5, 1);
  /* data_gather applies the same normalisation while copying a batch */
  float x[2 * 784];
  int32_t y[2];
  const uint32_t order[2] = {1, 0};
  data_gather(&d, order, 2, x, y);
  CHECK(y[0] == 2 && y[1] == 9);
  CHECK_NEAR(x[784 + 20 * 28 + 12], (146 / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD, 1e-5);
  CHECK(strstr(d.source, "fashion-mnist test") != NULL);
  dataset_free(&d);
}

/* ---- small IDX files: good ones -------------------------------------------- */

static void check_small(const dataset_t *d, uint32_t n, uint32_t h, uint32_t w) {
  CHECK(d->n == n && d->c == 1 && d->h == (int)h && d->w == (int)w && d->dim == h * w);
  CHECK(d->nclasses == 7);
  for (size_t i = 0; i < n && d->pixels; i++) {
    CHECK(d->y[i] == label_of(i));
    CHECK_NEAR(value_at(d, i * d->dim + 5), pixel_of(i, 5) / 255.0, 1e-7);
  }
}

static void test_idx_plain_and_gzip(void) {
  dataset_t d;
  const char *im = write_images("plain-images-idx3-ubyte", 9, 3, 4, 0, SIZE_MAX);
  const char *lb = write_labels("plain-labels-idx1-ubyte", 9, 0);
  CHECK_OK(dataset_load_idx(im, lb, &d));
  check_small(&d, 9, 3, 4);
  dataset_free(&d);
  im = write_images("gz-images-idx3-ubyte.gz", 9, 3, 4, 1, SIZE_MAX);
  lb = write_labels("gz-labels-idx1-ubyte.gz", 9, 1);
  CHECK_OK(dataset_load_idx(im, lb, &d));
  check_small(&d, 9, 3, 4);
  dataset_free(&d);
}

/* ---- small IDX files: damage -------------------------------------------------- */

static void test_idx_truncated_plain(void) {
  dataset_t d;
  const char *lb = write_labels("t1-labels-idx1-ubyte", 5, 0);
  const char *im = write_images("t1-images-idx3-ubyte", 5, 3, 4, 0, 50);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d),
                   "t1-images-idx3-ubyte: truncated: header says 5 images of 3x4 (76 bytes) but "
                   "the file has 50");
  im = write_images("t2-images-idx3-ubyte", 5, 3, 4, 0, 10);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d),
                   "t2-images-idx3-ubyte: truncated: 10 bytes, shorter than the 16-byte");
  im = write_images("t3-images-idx3-ubyte", 5, 3, 4, 0, SIZE_MAX);
  size_t len;
  uint8_t *b = labels_bytes(5, &len);
  lb = write_file("t3-labels-idx1-ubyte", b, len - 1, 0, SIZE_MAX);
  free(b);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d),
                   "t3-labels-idx1-ubyte: truncated: header says 5 labels (13 bytes)");
  CHECK(d.pixels == NULL && d.x == NULL && d.y == NULL);
}

static void test_idx_trailing_bytes(void) {
  dataset_t d;
  size_t len;
  uint8_t *b = images_bytes(0x00000803, 5, 3, 4, &len);
  const char *im = write_file("tr-images-idx3-ubyte", b, len, 0, SIZE_MAX);
  free(b);
  b = labels_bytes(6, &len);
  put_be32(b + 4, 5); /* six labels present, five declared */
  const char *lb = write_file("tr-labels-idx1-ubyte", b, len, 0, SIZE_MAX);
  free(b);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "tr-labels-idx1-ubyte: 1 bytes of trailing data");
}

static void test_idx_truncated_gzip(void) {
  dataset_t d;
  const char *lb = write_labels("tg-labels-idx1-ubyte.gz", 40, 1);
  const char *im = write_images("tg-images-idx3-ubyte.gz", 40, 8, 8, 1, 1500);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "tg-images-idx3-ubyte.gz: truncated gzip stream");
}

static void test_idx_corrupt_gzip(void) {
  dataset_t d;
  const char *lb = write_labels("cg-labels-idx1-ubyte.gz", 40, 1);
  const char *im = write_images("cg-images-idx3-ubyte.gz", 40, 8, 8, 1, SIZE_MAX);
  /* Overwrite bytes in the middle of the deflate data. */
  FILE *f = fopen(im, "r+b");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 700, SEEK_SET);
  for (int i = 0; i < 16; i++) fputc(0xff, f);
  fclose(f);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d),
                   "cg-images-idx3-ubyte.gz: corrupt or truncated gzip data");
}

static void test_idx_bad_magic(void) {
  dataset_t d;
  const char *lb = write_labels("bm-labels-idx1-ubyte", 5, 0);
  /* the labels file given as the images file */
  CHECK_FAILS_WITH(dataset_load_idx(lb, lb, &d),
                   "bm-labels-idx1-ubyte: bad magic 0x00000801 at offset 0, expected 0x00000803 "
                   "(IDX ubyte images)");
  const char *im = write_images("bm-images-idx3-ubyte", 5, 3, 4, 0, SIZE_MAX);
  CHECK_FAILS_WITH(dataset_load_idx(im, im, &d),
                   "bm-images-idx3-ubyte: bad magic 0x00000803 at offset 0, expected 0x00000801");
}

static void test_idx_count_mismatch(void) {
  dataset_t d;
  const char *im = write_images("cm-images-idx3-ubyte", 6, 3, 4, 0, SIZE_MAX);
  const char *lb = write_labels("cm-labels-idx1-ubyte", 5, 0);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "has 6 samples but labels file");
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "cm-labels-idx1-ubyte has 5");
}

static void test_idx_zero_samples_and_bad_size(void) {
  dataset_t d;
  const char *lb = write_labels("z-labels-idx1-ubyte", 0, 0);
  const char *im = write_images("z-images-idx3-ubyte", 0, 3, 4, 0, SIZE_MAX);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "z-images-idx3-ubyte: header says 0 images");
  im = write_images("z2-images-idx3-ubyte", 2, 0, 4, 0, SIZE_MAX);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "z2-images-idx3-ubyte: image size 0x4 at offset 8");
  im = write_images("z3-images-idx3-ubyte", 2, 3, 4, 0, SIZE_MAX);
  CHECK_FAILS_WITH(dataset_load_idx(im, lb, &d), "z-labels-idx1-ubyte: header says 0 labels");
}

static void test_idx_missing_file(void) {
  dataset_t d;
  char path[512];
  snprintf(path, sizeof path, "%s/nothing-images-idx3-ubyte", tmpdir);
  CHECK_FAILS_WITH(dataset_load_idx(path, path, &d), "nothing-images-idx3-ubyte: cannot open");
}

/* ---- gzip bombs: memory bounded by the header -------------------------------
 * A small .gz file that decompresses to `zeros_mb` MiB of zeros after a
 * given header. The reader must check the header first and read no more
 * than it declares, so refusing such a file costs little memory. */
static const char *write_bomb(const char *name, const uint8_t *header, size_t hlen,
                              size_t zeros_mb) {
  static char paths[2][512];
  static int next;
  char *path = paths[next++ % 2];
  snprintf(path, 512, "%s/%s", tmpdir, name);
  gzFile f = gzopen(path, "wb1");
  CHECK(f != NULL);
  if (!f) return path;
  gzwrite(f, header, (unsigned)hlen);
  uint8_t *zeros = calloc(1, 1 << 20);
  for (size_t i = 0; zeros && i < zeros_mb; i++) gzwrite(f, zeros, 1 << 20);
  free(zeros);
  gzclose(f);
  return path;
}

/* Loads in a child process and checks that it fails with `needle` and that
 * the child's peak resident memory grew by less than `max_mb` MiB. */
static void check_refused_cheaply(const char *images, const char *labels, const char *needle,
                                  long max_mb) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    dataset_t d;
    int rc = dataset_load_idx(images, labels, &d);
    getrusage(RUSAGE_SELF, &after);
    long grew_mb = (after.ru_maxrss - before.ru_maxrss) / 1024;
    int bad = 0;
    if (rc == 0 || !strstr(dt_errmsg(), needle)) {
      fprintf(stderr, "  %s: got '%s', expected an error with '%s'\n", images,
              rc == 0 ? "success" : dt_errmsg(), needle);
      bad = 1;
    }
    if (grew_mb >= max_mb) {
      fprintf(stderr, "  %s: peak memory grew by %ld MiB (at most %ld expected)\n", images,
              grew_mb, max_mb);
      bad = 1;
    }
    if (rc == 0) dataset_free(&d);
    _exit(bad);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_idx_gzip_bomb_bounded(void) {
  uint8_t h[16];
  const char *lb = write_labels("bomb-labels-idx1-ubyte", 10, 0);
  /* a bad magic: refused after 16 bytes */
  put_be32(h, 0xdeadbeef), put_be32(h + 4, 10), put_be32(h + 8, 28), put_be32(h + 12, 28);
  const char *im = write_bomb("bomb1-images-idx3-ubyte.gz", h, 16, 512);
  check_refused_cheaply(im, lb, "bomb1-images-idx3-ubyte.gz: bad magic 0xdeadbeef", 64);
  /* a good header for 10 images, then 512 MiB of trailing zeros */
  put_be32(h, 0x00000803);
  im = write_bomb("bomb2-images-idx3-ubyte.gz", h, 16, 512);
  check_refused_cheaply(im, lb, "more than 65536 bytes of trailing data: header says 10 images "
                        "of 28x28 (7856 bytes)", 64);
  /* a header declaring more than any IDX file dtrain reads */
  put_be32(h + 4, 4000000), put_be32(h + 8, 32768), put_be32(h + 12, 32768);
  im = write_bomb("bomb3-images-idx3-ubyte.gz", h, 16, 64);
  put_be32(h, 0x00000801), put_be32(h + 4, 4000000);
  lb = write_bomb("bomb3-labels-idx1-ubyte.gz", h, 8, 0);
  check_refused_cheaply(im, lb, "bomb3-images-idx3-ubyte.gz: header says 4000000 images of "
                        "32768x32768", 64);
  /* labels that disagree with the images: refused before either payload is read */
  put_be32(h, 0x00000803), put_be32(h + 4, 1000), put_be32(h + 8, 28), put_be32(h + 12, 28);
  im = write_bomb("bomb4-images-idx3-ubyte.gz", h, 16, 512);
  lb = write_labels("bomb4-labels-idx1-ubyte", 999, 0);
  check_refused_cheaply(im, lb, "has 1000 samples but labels file", 64);
}

/* ---- --data specs -------------------------------------------------------------- */

/* A folder with plain train files and gzipped test files: both found, and
 * normalised with the Fashion-MNIST constants. */
static void test_load_folder(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/folder", tmpdir);
  CHECK(mkdir(dir, 0700) == 0);
  write_images("folder/train-images-idx3-ubyte", 12, 5, 5, 0, SIZE_MAX);
  write_labels("folder/train-labels-idx1-ubyte", 12, 0);
  write_images("folder/t10k-images-idx3-ubyte.gz", 4, 5, 5, 1, SIZE_MAX);
  dataset_t d;
  CHECK_FAILS_WITH(dataset_load(dir, 0, 1, &d),
                   "folder: neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz found");
  write_labels("folder/t10k-labels-idx1-ubyte.gz", 4, 1);
  for (int train = 0; train <= 1; train++) {
    CHECK_OK(dataset_load(dir, train, 1, &d));
    CHECK(d.n == (train ? 12u : 4u) && d.h == 5 && d.w == 5);
    for (size_t i = 0; i < d.n && d.pixels; i++)
      CHECK_NEAR(value_at(&d, i * 25 + 3), (pixel_of(i, 3) / 255.0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD,
                 1e-5);
    dataset_free(&d);
  }
}

static void test_load_bad_spec(void) {
  dataset_t d;
  CHECK_FAILS_WITH(dataset_load("mnist-please", 1, 1, &d),
                   "option --data: 'mnist-please' is not a folder (expected fashion-mnist, synthetic");
  CHECK_FAILS_WITH(dataset_load("", 1, 1, &d), "option --data");
}

/* ---- synthetic ---------------------------------------------------------------- */

static int nearest_mean(const float *means, int k, size_t dim, const float *x) {
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c < k; c++) {
    double dd = 0;
    for (size_t j = 0; j < dim; j++) dd += (x[j] - means[c * dim + j]) * (x[j] - means[c * dim + j]);
    if (dd < best_d) best_d = dd, best = c;
  }
  return best;
}

static void test_synthetic(void) {
  dataset_t a, b, c, t;
  CHECK_OK(dataset_synthetic(2000, 1, 28, 28, 4, 7, &a));
  CHECK_OK(dataset_synthetic(2000, 1, 28, 28, 4, 7, &b));
  CHECK_OK(dataset_synthetic(2000, 1, 28, 28, 4, 8, &c));
  CHECK_OK(dataset_synthetic_split(2000, 1, 28, 28, 4, 7, 0, &t));
  if (!a.x || !b.x || !c.x || !t.x) goto out;
  size_t nx = a.n * a.dim;
  CHECK(memcmp(a.x, b.x, nx * sizeof(float)) == 0 && memcmp(a.y, b.y, a.n * 4) == 0);
  CHECK(memcmp(a.x, c.x, nx * sizeof(float)) != 0);
  CHECK(memcmp(a.x, t.x, nx * sizeof(float)) != 0);
  /* roughly normalised */
  double sum = 0, sq = 0;
  for (size_t i = 0; i < nx; i++) sum += a.x[i], sq += (double)a.x[i] * a.x[i];
  CHECK_NEAR(sum / (double)nx, 0.0, 0.05);
  CHECK_NEAR(sqrt(sq / (double)nx), 1.0, 0.05);
  /* Learnable, and the test split shares the train split's prototypes:
   * class means from train classify test well above chance (25%). */
  enum { dim = 784 };
  static float means[4 * dim];
  memset(means, 0, sizeof means);
  for (size_t i = 0; i < a.n; i++)
    for (size_t j = 0; j < dim; j++) means[a.y[i] * dim + j] += a.x[i * dim + j] / 500.0f;
  int right = 0;
  for (size_t i = 0; i < t.n; i++) right += nearest_mean(means, 4, dim, t.x + i * dim) == t.y[i];
  CHECK(right > 1400);
  /* ...but not those of another seed */
  right = 0;
  for (size_t i = 0; i < c.n; i++) right += nearest_mean(means, 4, dim, c.x + i * dim) == c.y[i];
  CHECK(right < 800);
out:
  dataset_free(&a), dataset_free(&b), dataset_free(&c), dataset_free(&t);
  CHECK_FAILS_WITH(dataset_synthetic(0, 1, 28, 28, 4, 7, &a), "0 samples");
}

/* The ziggurat's values are N(0, 1): moments, a chi-square over 66 bins
 * (65 degrees of freedom: mean 65, sd 11.4), and the tail past its base
 * layer's edge R = 3.654, which takes the slow path. A wrong table or a
 * skipped wedge test moves a bin or the tail well past these bounds. */
static void test_fill_normal_is_standard_normal(void) {
  enum { n = 4000000, bins = 64 };
  float *z = malloc(n * sizeof *z);
  if (!z) return;
  rng_t r;
  rng_seed(&r, 11);
  rng_fill_normal(&r, n, z);
  double sum = 0, sq = 0, count[bins + 2] = {0};
  size_t past_r = 0, past_45 = 0;
  for (size_t i = 0; i < n; i++) {
    double x = z[i];
    sum += x, sq += x * x;
    int b = x < -4.0 ? 0 : x >= 4.0 ? bins + 1 : 1 + (int)((x + 4.0) / 0.125);
    count[b]++;
    past_r += fabs(x) > 3.6541528853610088;
    past_45 += fabs(x) > 4.5;
  }
  CHECK_NEAR(sum / n, 0.0, 5.0 / sqrt(n));
  CHECK_NEAR(sq / n, 1.0, 5.0 * sqrt(2.0 / n));
  double chi2 = 0;
  for (int b = 0; b < bins + 2; b++) {
    double lo = b == 0 ? -INFINITY : -4.0 + 0.125 * (b - 1);
    double hi = b == bins + 1 ? INFINITY : -4.0 + 0.125 * b;
    double p = 0.5 * (erfc(-hi / sqrt(2.0)) - erfc(-lo / sqrt(2.0)));
    chi2 += (count[b] - n * p) * (count[b] - n * p) / (n * p);
  }
  CHECK(chi2 < 130);
  double tail = erfc(3.6541528853610088 / sqrt(2.0)) * n; /* expected count, both sides */
  CHECK_NEAR((double)past_r, tail, 5.0 * sqrt(tail));
  CHECK(past_45 > 0 && past_45 < 70); /* expected 27 */
  free(z);
}

static void test_load_synthetic(void) {
  dataset_t d;
  CHECK_OK(dataset_load("synthetic", 0, 3, &d));
  CHECK(d.n == 10000 && d.c == 1 && d.h == 28 && d.w == 28 && d.nclasses == 10);
  dataset_free(&d);
}

/* ---- epoch order, shards, gather ---------------------------------------------- */

static int is_permutation(const uint32_t *o, size_t n) {
  char *seen = calloc(n, 1);
  int ok = 1;
  for (size_t i = 0; i < n; i++) {
    if (o[i] >= n || seen[o[i]]) ok = 0;
    else seen[o[i]] = 1;
  }
  free(seen);
  return ok;
}

static void test_epoch_order(void) {
  enum { n = 1000 };
  static uint32_t e1[n], e1again[n], e2[n], other_seed[n];
  data_epoch_order(42, 2, e2, n); /* computed first: order must not depend on call history */
  data_epoch_order(42, 1, e1, n);
  data_epoch_order(42, 1, e1again, n);
  data_epoch_order(43, 1, other_seed, n);
  CHECK(is_permutation(e1, n) && is_permutation(e2, n));
  CHECK(memcmp(e1, e1again, sizeof e1) == 0);
  CHECK(memcmp(e1, e2, sizeof e1) != 0);
  CHECK(memcmp(e1, other_seed, sizeof e1) != 0);
  int fixed = 0;
  for (size_t i = 0; i < n; i++) fixed += e1[i] == i;
  CHECK(fixed < 20); /* really shuffled (expected about 1) */
}

static void test_shards_partition(void) {
  static const size_t ns[] = {0, 1, 7, 10, 60000, 60001};
  static const int parts[] = {1, 2, 3, 7, 8, 16};
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof parts / sizeof parts[0]; b++) {
      size_t next = 0, lo = SIZE_MAX, hi = 0;
      for (int r = 0; r < parts[b]; r++) {
        size_t off, len;
        data_shard(ns[a], r, parts[b], &off, &len);
        CHECK(off == next);
        next = off + len;
        lo = len < lo ? len : lo;
        hi = len > hi ? len : hi;
      }
      CHECK(next == ns[a]);
      CHECK(hi - lo <= 1);
    }
  size_t off, len;
  data_shard(10, 2, 3, &off, &len);
  CHECK(off == 7 && len == 3);
  data_shard(10, 0, 3, &off, &len);
  CHECK(off == 0 && len == 4);
}

static void test_gather(void) {
  dataset_t d;
  CHECK_OK(dataset_synthetic(10, 2, 2, 3, 3, 5, &d));
  if (!d.x) return;
  const uint32_t order[4] = {7, 0, 9, 7};
  float x[4 * 12];
  int32_t y[4];
  data_gather(&d, order, 4, x, y);
  for (int i = 0; i < 4; i++) {
    CHECK(memcmp(x + i * 12, d.x + order[i] * 12, 12 * sizeof(float)) == 0);
    CHECK(y[i] == d.y[order[i]]);
  }
  dataset_free(&d);
}

/* ---- text as bytes ------------------------------------------------------------ */

/* 101 bytes in windows of 4: 25 windows (the last target is byte 100), the
 * last 2 (10%) held out; a window's labels are its bytes shifted by one. */
static void test_text_windows_and_split(void) {
  uint8_t b[101];
  for (int i = 0; i < 101; i++) b[i] = (uint8_t)(i * 37 + 5);
  const char *path = write_file("book.txt", b, sizeof b, 0, SIZE_MAX);
  char spec[600];
  snprintf(spec, sizeof spec, "text:%s", path);
  CHECK(data_is_text(spec) && data_is_text("fortunes") && !data_is_text("synthetic"));
  dataset_t tr, va;
  CHECK_OK(dataset_load_seq(spec, 1, 1, 4, &tr));
  CHECK_OK(dataset_load_seq(spec, 0, 1, 4, &va));
  CHECK(tr.n == 23 && va.n == 2 && tr.dim == 4 && tr.w == 4 && tr.c == 1 && tr.h == 1);
  CHECK(tr.nclasses == 256 && dataset_ylen(&tr) == 4);
  uint32_t order[2] = {22, 0};
  float x[8];
  int32_t y[8];
  data_gather(&tr, order, 2, x, y);
  for (int t = 0; t < 4; t++) {
    CHECK(x[t] == (float)b[22 * 4 + t] && y[t] == b[22 * 4 + t + 1]);
    CHECK(x[4 + t] == (float)b[t] && y[4 + t] == b[t + 1]);
  }
  uint32_t last = 1;
  data_gather(&va, &last, 1, x, y); /* validation window 1 = window 24: bytes 96..100 */
  for (int t = 0; t < 4; t++) CHECK(x[t] == (float)b[96 + t] && y[t] == b[97 + t]);
  dataset_free(&tr);
  dataset_free(&va);
}

/* An empty or too short file: one line saying how long it must be. */
static void test_text_too_short(void) {
  uint8_t b[40] = {0};
  const char *empty = write_file("empty.txt", b, 0, 0, SIZE_MAX);
  const char *short_file = write_file("short.txt", b, 40, 0, SIZE_MAX);
  char spec[600];
  dataset_t d;
  snprintf(spec, sizeof spec, "text:%s", empty);
  CHECK_FAILS_WITH(dataset_load_seq(spec, 1, 1, 8, &d), "0 bytes make 0 windows of --seq-len 8");
  snprintf(spec, sizeof spec, "text:%s", short_file);
  CHECK_FAILS_WITH(dataset_load_seq(spec, 1, 1, 8, &d), "at least 81 bytes) or a smaller --seq-len");
  CHECK_OK(dataset_load_seq(spec, 1, 1, 3, &d)); /* 13 windows of 3: 1 held out */
  CHECK(d.n == 12);
  dataset_free(&d);
  CHECK_FAILS_WITH(dataset_load_seq("text:", 1, 1, 8, &d), "the path is empty");
  snprintf(spec, sizeof spec, "text:%s/none.txt", tmpdir);
  CHECK_FAILS_WITH(dataset_load_seq(spec, 1, 1, 8, &d), "cannot open it");
}

/* The default corpus: the Debian package's 43 plain files, 2,576,674
 * bytes (not the .dat indexes, not the .u8 links). */
static void test_fortunes_corpus(void) {
  dataset_t tr, va;
  CHECK_OK(dataset_load_seq("fortunes", 1, 1, 128, &tr));
  CHECK_OK(dataset_load_seq("fortunes", 0, 1, 128, &va));
  CHECK(tr.text_len == 2576674);
  size_t windows = (2576674 - 1) / 128;
  CHECK(va.n == windows / 10 && tr.n + va.n == windows);
  dataset_free(&tr);
  dataset_free(&va);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/dtrain-test-data-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  RUN(test_fashion_mnist_train_raw);
  RUN(test_fashion_mnist_test_normalised);
  RUN(test_idx_plain_and_gzip);
  RUN(test_idx_truncated_plain);
  RUN(test_idx_trailing_bytes);
  RUN(test_idx_truncated_gzip);
  RUN(test_idx_corrupt_gzip);
  RUN(test_idx_bad_magic);
  RUN(test_idx_count_mismatch);
  RUN(test_idx_zero_samples_and_bad_size);
  RUN(test_idx_missing_file);
  RUN(test_idx_gzip_bomb_bounded);
  RUN(test_load_folder);
  RUN(test_load_bad_spec);
  RUN(test_synthetic);
  RUN(test_fill_normal_is_standard_normal);
  RUN(test_load_synthetic);
  RUN(test_epoch_order);
  RUN(test_shards_partition);
  RUN(test_gather);
  RUN(test_text_windows_and_split);
  RUN(test_text_too_short);
  RUN(test_fortunes_corpus);
  nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  TEST_MAIN_END();
}
