/* The memory a rank holds for training, from the model and the options:
 * the parameter, gradient and buffer arenas (every rank builds the whole
 * model: worker.c), the optimizer's state arenas, and the activation
 * arena the model sizes once for its batch (each layer's output and its
 * gradient a sample, the layers' scratch; under --recompute the layers
 * inside a segment only once, in the workspace the segments share), and the worker's own: its
 * batch's inputs and labels, the epoch's sample order (worker.c). Not
 * counted: the kernels' workspaces (oneDNN's: ~0.3 MiB a rank measured
 * here), the collectives' scratch, a thread's stack. */
#include "perf/perf.h"

/* The optimizer's state arenas: asked of the optimizer itself. */
static int state_arenas(const optim_config_t *oc) {
  optimizer_t *o;
  if (optim_new(oc, 1, &o) != 0) return 0;
  int n = o->nstate;
  optim_free(o);
  return n;
}

double perf_memory_bytes(const train_config_t *cfg, const model_t *m, size_t ntrain) {
  double params = (double)m->nparams;
  double model = 4.0 * ((2.0 + state_arenas(&cfg->optim)) * params + (double)m->nbuffers);
  double acts = (double)m->nclasses * cfg->batch, ws = 0, seg = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    double own = 2.0 * (double)shape_size(l->out_shape) * cfg->batch + (double)l->scratch_len;
    if (l->in_workspace) seg += own; /* --recompute: one segment's at a time */
    else acts += own;
    if (l->recompute_from) ws = seg > ws ? seg : ws, seg = 0;
  }
  acts += ws;
  double inputs = (double)shape_size(m->layers[0].in_shape) * cfg->batch + cfg->batch; /* x, y */
  return model + 4.0 * (acts + inputs + (double)ntrain);
}
