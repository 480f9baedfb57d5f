/* Fuzz target: the reader of a parameter-server checkpoint folder's
 * manifest.json (ps_manifest_parse, src/strategy/ps_ckpt.c), from a buffer:
 * no file is read. What it accepts must be usable as it is used: shards
 * in order covering [0, nparams), plain file names. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strategy/ps/ps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static ps_manifest_t m; /* 200 KB: static, not on the stack */
  char *text = malloc(size ? size : 1); /* exactly size bytes: ASan sees any read past them */
  if (!text) return 0;
  memcpy(text, data, size);
  if (ps_manifest_parse(text, size, "manifest.json", &m) == 0) {
    if (m.nshards < 1 || m.nshards > PS_MANIFEST_MAX_SHARDS || m.epoch < 0 || m.step < 0) abort();
    size_t at = 0;
    for (int i = 0; i < m.nshards; i++) {
      const ps_manifest_shard_t *s = &m.shards[i];
      if (s->begin != at || s->end <= s->begin || !s->file[0] || strchr(s->file, '/') ||
          !strcmp(s->file, "..") || strlen(s->file) >= sizeof s->file)
        abort();
      at = s->end;
    }
    if (at != m.nparams || strchr(m.buffers, '/')) abort();
  }
  free(text);
  return 0;
}
