/* Helpers of the fuzz targets (see fuzz.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "fuzz.h"

int fuzz_write_temp(const uint8_t *data, size_t size, int gz, char *path) {
  /* $TMPDIR (e.g. /dev/shm, for speed) if set and short, else /tmp */
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir || strlen(dir) > 40) dir = "/tmp";
  snprintf(path, 64, "%s/dtrain-fuzz-XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  int ok;
  if (gz) {
    gzFile g = gzdopen(fd, "wb1");
    ok = g && (size == 0 || gzwrite(g, data, (unsigned)size) == (int)size);
    if (g) ok = gzclose(g) == Z_OK && ok;
    else close(fd);
  } else {
    ok = size == 0 || write(fd, data, size) == (ssize_t)size;
    ok = close(fd) == 0 && ok;
  }
  if (!ok) unlink(path);
  return ok ? 0 : -1;
}
