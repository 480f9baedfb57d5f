/* Whole-file reads, streaming gzip-transparent reads, atomic writes, and
 * the rules for outputs: dtrain writes only regular files, and replaces
 * only what it wrote itself (a device, a symbolic link or a user's file
 * named by mistake is refused, never clobbered). */
#define _POSIX_C_SOURCE 200809L
#include "dtrain/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
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

/* The temporary file of the atomic write in progress, for the signal
 * handler: unlink() is async-signal-safe, so an interrupted run removes it. */
static char pending_tmp[PATH_MAX + 32];
static atomic_int pending_set; /* lock-free: read in a handler; orders pending_tmp */

void file_remove_pending(void) {
  if (atomic_load(&pending_set)) unlink(pending_tmp);
}

static int refuse_non_regular(const char *path, const struct stat *st) {
  const char *what = S_ISLNK(st->st_mode)   ? "a symbolic link"
                     : S_ISDIR(st->st_mode) ? "a folder"
                     : S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device"
                     : S_ISFIFO(st->st_mode) ? "a pipe"
                                             : "not a regular file";
  return dt_error("%s: exists and is %s; dtrain writes only regular files (choose another path)",
                  path, what);
}

int file_check_regular(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    return dt_error("%s: cannot check it: %s", path, strerror(errno));
  }
  return S_ISREG(st.st_mode) ? 0 : refuse_non_regular(path, &st);
}

int file_check_output(const char *path, const char *own_magic) {
  DT_TRY(file_check_regular(path));
  int fd = open(path, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    return dt_error("%s: cannot read it to check that it is dtrain's own: %s", path, strerror(errno));
  }
  char head[4096 + 1];
  ssize_t n = read(fd, head, sizeof head - 1);
  close(fd);
  if (n < 0) return dt_error("%s: cannot read it: %s", path, strerror(errno));
  if (n == 0) return 0; /* an empty file holds nothing to lose */
  head[n] = 0;
  if (memmem(head, (size_t)n, own_magic, strlen(own_magic))) return 0;
  return dt_error("%s: exists and is not dtrain's own output (no '%s' at its start); refusing to "
                  "replace it: choose another path or remove the file", path, own_magic);
}

int file_check_writable_dir(const char *path) {
  char copy[PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  const char *dir = dirname(copy);
  if (access(dir, W_OK | X_OK) != 0)
    return dt_error("%s: cannot be written: the folder %s: %s", path, dir, strerror(errno));
  /* access() says yes to root everywhere, also in /proc or on a read-only
   * mount: a file made and removed again is the real test */
  char probe[PATH_MAX + 48];
  snprintf(probe, sizeof probe, "%s.dtrain-probe-%ld", path, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    return dt_error("%s: cannot be written: no file can be made in the folder %s: %s", path, dir,
                    strerror(errno));
  if (fd >= 0) close(fd), unlink(probe);
  return 0;
}

int file_same(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  /* not both there yet: compare the resolved folder and the name */
  char ra[PATH_MAX], rb[PATH_MAX], ca[PATH_MAX], cb[PATH_MAX];
  snprintf(ca, sizeof ca, "%s", a);
  snprintf(cb, sizeof cb, "%s", b);
  if (!realpath(dirname(ca), ra) || !realpath(dirname(cb), rb)) return !strcmp(a, b);
  snprintf(ca, sizeof ca, "%s", a);
  snprintf(cb, sizeof cb, "%s", b);
  return !strcmp(ra, rb) && !strcmp(basename(ca), basename(cb));
}

/* Removes a regular file at `path` (checked by lstat; a missing one is
 * fine), so that the O_EXCL create after it makes a new file whose mode is
 * 0666 & ~umask, as a plain create of a new file gets: truncating or
 * renaming over an old file would keep the mode that file (or a leftover
 * temporary) had, 0600 from a run under umask 077 for instance. */
static int remove_old(const char *path) {
  DT_TRY(file_check_regular(path));
  if (unlink(path) != 0 && errno != ENOENT)
    return dt_error("%s: cannot replace it: %s", path, strerror(errno));
  return 0;
}

FILE *file_open_output(const char *path, int append) {
  if (file_check_regular(path) != 0) return NULL;
  /* appending (--resume) continues the file as it is; otherwise a new file */
  if (!append && remove_old(path) != 0) return NULL;
  int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_EXCL), 0666);
  if (fd < 0) {
    dt_error("%s: cannot open for writing: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { /* replaced between the checks */
    close(fd);
    dt_error("%s: not a regular file; dtrain writes only regular files", path);
    return NULL;
  }
  FILE *f = fdopen(fd, append ? "a" : "w");
  if (!f) {
    close(fd);
    dt_error("%s: cannot open for writing: %s", path, strerror(errno));
  }
  return f;
}

/* One fixed temporary name per output (PATH.dtrain-tmp): a run killed
 * mid-write leaves at most one, which the next write removes and creates
 * anew (so the output gets 0666 & ~umask, not the leftover's mode). */
int file_write_atomic(const char *path, const void *data, size_t len) {
  if (strlen(path) >= PATH_MAX) return dt_error("%s: path too long", path);
  DT_TRY(file_check_regular(path));
  char tmp[PATH_MAX + 32], dircopy[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.dtrain-tmp", path);
  snprintf(dircopy, sizeof dircopy, "%s", path);
  DT_TRY(remove_old(tmp));
  /* the signal handler reads pending_tmp only while pending_set is 1 */
  atomic_store(&pending_set, 0);
  memcpy(pending_tmp, tmp, sizeof tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return dt_error("%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
  atomic_store(&pending_set, 1);
  const uint8_t *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      dt_error("%s: write failed: %s", path, w < 0 ? strerror(errno) : "no space written");
      close(fd);
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) {
    dt_error("%s: fsync failed: %s", path, strerror(errno));
    close(fd);
    goto fail;
  }
  if (close(fd) != 0) {
    dt_error("%s: close failed: %s", path, strerror(errno));
    goto fail;
  }
  if (rename(tmp, path) != 0) {
    dt_error("%s: rename failed: %s", path, strerror(errno));
    goto fail;
  }
  atomic_store(&pending_set, 0);
  int dfd = open(dirname(dircopy), O_RDONLY);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
fail:
  unlink(tmp);
  atomic_store(&pending_set, 0);
  return -1;
}
