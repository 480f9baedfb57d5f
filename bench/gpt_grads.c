/* The loss and the gradients of a sequence model on one batch of text,
 * for the PyTorch oracle (bench/gpt_vs_pytorch_grads.py): the model's
 * parameters are read from a dtrain checkpoint (safetensors, by name), the
 * batch is windows 0..B-1 of the text's training split, and the output is
 * a safetensors file holding each parameter's gradient as "grad.<name>"
 * and the loss (nats per token, the mean over the batch's B·T tokens) as
 * metadata "loss".
 *
 * usage: gpt_grads MODEL CHECKPOINT TEXTFILE SEQ_LEN BATCH OUT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/safetensors.h"

static int load_params(model_t *m, const char *path) {
  safetensors_t st;
  DT_TRY(safetensors_read(path, &st));
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *t = &m->tensors[i];
    const st_tensor_t *s = safetensors_find(&st, t->name);
    if (!s || s->len != t->len) {
      safetensors_free(&st);
      return dt_error("%s: tensor %s missing or of another size", path, t->name);
    }
    memcpy(m->params + t->off, s->data, t->len * sizeof(float));
  }
  safetensors_free(&st);
  return 0;
}

static int write_grads(const model_t *m, double loss, const char *out) {
  st_tensor_t *ts = calloc((size_t)m->ntensors, sizeof *ts);
  if (!ts) return dt_error("out of memory");
  for (int i = 0; i < m->ntensors; i++) {
    const tensor_info_t *t = &m->tensors[i];
    snprintf(ts[i].name, sizeof ts[i].name, "grad.%s", t->name);
    ts[i].ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) ts[i].dims[d] = t->dims[d];
    ts[i].len = t->len;
    ts[i].data = m->grads + t->off;
  }
  st_meta_t meta = {"loss", ""};
  snprintf(meta.value, sizeof meta.value, "%.17g", loss);
  int rc = safetensors_write(out, ts, m->ntensors, &meta, 1);
  free(ts);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: gpt_grads MODEL CHECKPOINT TEXTFILE SEQ_LEN BATCH OUT\n");
    return 2;
  }
  int T = atoi(argv[4]), B = atoi(argv[5]);
  char spec_text[4200];
  snprintf(spec_text, sizeof spec_text, "text:%s", argv[3]);
  dataset_t d;
  model_spec_t spec;
  model_t *m = NULL;
  if (dataset_load_text(spec_text, T, 1, &d) != 0 || model_spec_load(argv[1], &spec) != 0) goto fail;
  if (model_build(&spec, (shape_t){1, 1, T}, 256, B, &m) != 0) goto fail;
  model_spec_free(&spec);
  if (load_params(m, argv[2]) != 0) goto fail;
  uint32_t *order = malloc((size_t)B * sizeof *order);
  float *x = dt_alloc_floats((size_t)B * T);
  int32_t *y = malloc((size_t)B * T * sizeof *y);
  for (int i = 0; i < B; i++) order[i] = (uint32_t)i;
  data_gather(&d, order, (size_t)B, x, y);
  model_forward(m, x, B, 1, NULL);
  double loss = model_loss(m, y, B, B, NULL) / B;
  model_backward(m, x, B, NULL, NULL);
  if (write_grads(m, loss, argv[6]) != 0) goto fail;
  printf("loss %.9f over %d x %d tokens, %zu parameters\n", loss, B, T, m->nparams);
  free(order), dt_free(x), free(y);
  model_free(m);
  dataset_free(&d);
  return 0;
fail:
  fprintf(stderr, "gpt_grads: %s\n", dt_errmsg());
  return 1;
}
