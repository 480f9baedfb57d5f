/* safetensors: the checkpoint file format of Hugging Face, readable from
 * PyTorch (safetensors.torch) and NumPy with a few lines: an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the raw little-endian data. Only F32 tensors
 * and string metadata are used here. Part of core/. */
#ifndef DTRAIN_SAFETENSORS_H
#define DTRAIN_SAFETENSORS_H

#include "dtrain/core.h"

typedef struct {
  char name[128];
  int ndim;
  int64_t dims[4];
  size_t len;             /* elements */
  const float *data;      /* into the file buffer (reader) or caller memory (writer) */
} st_tensor_t;

typedef struct {
  char key[48];
  char value[208];
} st_meta_t;

/* Writes atomically (temp file, fsync, rename): a crash never leaves a
 * half-written checkpoint under `path`. */
int safetensors_write(const char *path, const st_tensor_t *tensors, int ntensors,
                      const st_meta_t *meta, int nmeta);

typedef struct {
  uint8_t *file;          /* whole file; tensors point into it */
  size_t file_len;
  int ntensors, nmeta;
  st_tensor_t *tensors;
  st_meta_t *meta;
  char path[256];
} safetensors_t;

/* Parses and validates the header as PyTorch's reader does (sizes matching
 * shapes without overflow, the byte ranges tiling the data exactly: no
 * overlap, no gap, no trailing bytes), plus F32 only and no duplicate
 * names. Errors name the file and the tensor. */
int safetensors_read(const char *path, safetensors_t *out);
/* The same on a file already in memory; `file` (from malloc) becomes
 * out->file and is freed by safetensors_free, or here on failure. `path`
 * names it in messages. */
int safetensors_parse(const char *path, uint8_t *file, size_t len, safetensors_t *out);
const st_tensor_t *safetensors_find(const safetensors_t *st, const char *name);
const char *safetensors_meta(const safetensors_t *st, const char *key);
/* Metadata `key` as a decimal integer in lo..hi: missing, empty, signs
 * other than a leading '-', spaces, overflow and out-of-range values are
 * errors naming the file and the key. */
int safetensors_meta_int(const safetensors_t *st, const char *key, long long lo, long long hi,
                         long long *out);
void safetensors_free(safetensors_t *st);
#endif
