/* Fuzz target: the model-file parser. The input is the file's text; as in
 * model_spec_load, a NUL byte makes it not a text file. A file with split=
 * keys goes on to tensor parallelism's plan of them (3 ranks), which
 * inserts allgather layers into the spec. */
#include <stdlib.h>
#include <string.h>

#include "dtrain/nn.h"
#include "fuzz.h"
#include "strategy/tensor/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memchr(data, 0, size)) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  model_spec_t spec;
  if (model_spec_parse(text, "fuzz.model", &spec) == 0) {
    /* what a parsed spec promises the model builder */
    for (int i = 0; i < spec.nlayers; i++) {
      const layer_spec_t *l = &spec.layers[i];
      if (l->input < -1 || l->input >= i || l->index != i || l->line < 1) abort();
      if (l->kind == LAYER_DENSE && l->units < 1) abort();
      if ((l->kind == LAYER_CONV2D || l->kind == LAYER_MAXPOOL || l->kind == LAYER_AVGPOOL) &&
          (l->kernel < 1 || l->stride < 1))
        abort();
    }
    if ((spec.input.c | spec.input.h | spec.input.w) &&
        (spec.input.c < 1 || spec.input.h < 1 || spec.input.w < 1))
      abort();
    if (tensor_file_split_line(&spec, FILE_SPLIT_UNSET) && tensor_plan_file(&spec, 3) == 0)
      for (int i = 0; i < spec.nlayers; i++) { /* still a chain the builder can read */
        const layer_spec_t *l = &spec.layers[i];
        if (l->input < -1 || l->input >= i) abort();
        if (l->kind == LAYER_ALLGATHER && (i == 0 || spec.layers[i - 1].kind == LAYER_ALLGATHER)) abort();
        if (l->split != SPLIT_NONE && l->kind != LAYER_DENSE && l->kind != LAYER_CONV2D) abort();
      }
    model_spec_free(&spec);
  }
  free(text);
  return 0;
}
