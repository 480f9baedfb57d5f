/* Whole-file reads, streaming gzip-transparent reads, atomic writes. */
#define _POSIX_C_SOURCE 200809L
#include "dtrain/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* Plain bytes, sized by fstat and read to the end (a file that grows while
 * being read is read as far as it goes). */
static int read_plain(const char *path, uint8_t **data, size_t *len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return dt_error("%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return dt_error("%s: not a regular file", path);
  }
  size_t cap = (size_t)sb.st_size + 1, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return dt_error("%s: out of memory (%zu bytes)", path, cap);
  }
  for (;;) {
    if (n == cap) {
      uint8_t *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        close(fd);
        return dt_error("%s: out of memory", path);
      }
      buf = bigger;
      cap *= 2;
    }
    ssize_t got = read(fd, buf + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      dt_error("%s: read failed after %zu bytes: %s", path, n, strerror(errno));
      free(buf);
      close(fd);
      return -1;
    }
    if (got == 0) break;
    n += (size_t)got;
  }
  close(fd);
  *data = buf;
  *len = n;
  return 0;
}

int file_read_all(const char *path, int gz, uint8_t **data, size_t *len) {
  if (!gz) return read_plain(path, data, len);
  file_in_t f;
  DT_TRY(file_in_open(&f, path));
  size_t cap = 1 << 20, n = 0;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    file_in_close(&f);
    return dt_error("%s: out of memory", path);
  }
  for (;;) {
    if (n == cap) {
      uint8_t *bigger = realloc(buf, cap * 2);
      if (!bigger) {
        free(buf);
        file_in_close(&f);
        return dt_error("%s: out of memory", path);
      }
      buf = bigger;
      cap *= 2;
    }
    size_t got;
    if (file_in_read(&f, buf + n, cap - n, &got) != 0) {
      free(buf);
      file_in_close(&f);
      return -1;
    }
    if (got == 0) break;
    n += got;
  }
  file_in_close(&f);
  *data = buf;
  *len = n;
  return 0;
}

/* ---- streaming reads ------------------------------------------------------- */

int file_in_open(file_in_t *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->path = path;
  errno = 0;
  gzFile g = gzopen(path, "rb");
  if (!g) return dt_error("%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
  f->gz = g;
  return 0;
}

/* gzread takes an unsigned count: reads are split into pieces of 1 GiB. A
 * truncated gzip stream is reported only through gzerror, after a short
 * read, so both are checked. */
int file_in_read(file_in_t *f, void *buf, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    size_t want = n - *got > (1u << 30) ? (1u << 30) : n - *got;
    int r = gzread((gzFile)f->gz, (uint8_t *)buf + *got, (unsigned)want);
    int zerr = Z_OK;
    const char *msg = gzerror((gzFile)f->gz, &zerr);
    if (r < 0 || (zerr != Z_OK && zerr != Z_STREAM_END)) {
      if (zerr == Z_BUF_ERROR)
        return dt_error("%s: truncated gzip stream after %zu bytes", f->path, f->consumed);
      return dt_error("%s: corrupt or truncated gzip data after %zu bytes (%s)", f->path,
                      f->consumed, msg);
    }
    if (r == 0) break;
    *got += (size_t)r;
    f->consumed += (size_t)r;
  }
  return 0;
}

int file_in_at_end(file_in_t *f) {
  uint8_t byte;
  size_t got;
  DT_TRY(file_in_read(f, &byte, 1, &got));
  return got == 0 ? 1 : 0;
}

void file_in_close(file_in_t *f) {
  if (f->gz) gzclose((gzFile)f->gz);
  f->gz = NULL;
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
