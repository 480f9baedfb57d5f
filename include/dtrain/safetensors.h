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

/* Parses and validates the header (every byte range inside the file, F32
 * only, sizes matching shapes). Errors name the file and the tensor. */
int safetensors_read(const char *path, safetensors_t *out);
const st_tensor_t *safetensors_find(const safetensors_t *st, const char *name);
const char *safetensors_meta(const safetensors_t *st, const char *key);
void safetensors_free(safetensors_t *st);
#endif
