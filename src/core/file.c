/* Whole-file reads (gzip-transparent) and atomic writes. */
#define _POSIX_C_SOURCE 200809L
#include "dtrain/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

int file_read_all(const char *path, int gz, uint8_t **data, size_t *len) {
  (void)gz; /* gzread passes plain files through unchanged */
  gzFile f = gzopen(path, "rb");
  if (!f) return dt_error("%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
  size_t cap = 1 << 20, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    gzclose(f);
    return dt_error("%s: out of memory", path);
  }
  for (;;) {
    if (n == cap) {
      uint8_t *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        gzclose(f);
        return dt_error("%s: out of memory", path);
      }
      buf = bigger;
      cap *= 2;
    }
    size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
    int got = gzread(f, buf + n, (unsigned)want);
    if (got < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      dt_error("%s: corrupt or truncated gzip data after %zu bytes (%s)", path, n, msg);
      free(buf);
      gzclose(f);
      return -1;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  /* gzread reports a truncated gzip stream only through gzerror. */
  int zerr = Z_OK;
  gzerror(f, &zerr);
  gzclose(f);
  if (zerr != Z_OK && zerr != Z_STREAM_END) {
    free(buf);
    return dt_error("%s: truncated gzip stream after %zu bytes", path, n);
  }
  *data = buf;
  *len = n;
  return 0;
}

int file_write_atomic(const char *path, const void *data, size_t len) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 16), *dircopy = strdup(path);
  if (!tmp || !dircopy) {
    free(tmp);
    free(dircopy);
    return dt_error("%s: out of memory", path);
  }
  snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    dt_error("%s: cannot create temporary file: %s", path, strerror(errno));
    goto fail;
  }
  const uint8_t *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      dt_error("%s: write failed: %s", path, strerror(errno));
      close(fd);
      unlink(tmp);
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    dt_error("%s: fsync failed: %s", path, strerror(errno));
    unlink(tmp);
    goto fail;
  }
  if (rename(tmp, path) != 0) {
    dt_error("%s: rename failed: %s", path, strerror(errno));
    unlink(tmp);
    goto fail;
  }
  int dfd = open(dirname(dircopy), O_RDONLY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  free(tmp);
  free(dircopy);
  return 0;
fail:
  free(tmp);
  free(dircopy);
  return -1;
}
