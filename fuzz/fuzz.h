/* Shared by the fuzz targets (fuzz/fuzz_<name>.c). Each target defines
 * LLVMFuzzerTestOneInput; `make fuzz` links it with libFuzzer (clang) into
 * build-fuzz/fuzz_<name>, and `make test` links it with fuzz/replay.c (any C
 * compiler) to run every file of fuzz/corpus/<name>/ through it. A target
 * must free what it allocates on every path: leaks are findings too. */
#ifndef DTRAIN_FUZZ_H
#define DTRAIN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to a new temporary file under $TMPDIR or /tmp and puts its
 * path (64 bytes) in path; gz != 0 compresses it with gzip. 0 on success. */
int fuzz_write_temp(const uint8_t *data, size_t size, int gz, char *path);

#endif
