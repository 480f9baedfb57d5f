/* The memory a rank holds for training, from the model as the rank builds
 * it (a tensor-parallel rank's blocks: predict.c builds its model) and the
 * options: the parameter, gradient and buffer arenas (every rank builds
 * the whole model: worker.c, a pipeline stage's included), the
 * optimizer's state arenas (--shard-optimizer: ZeRO-1's 1/P of them, P the
 * data-parallel replicas; shared sync's one state, 1/P of it a rank, beside
 * each rank's own), the compressor's arrays of the gradient's
 * length under --compress (its state carried from step to step, error
 * feedback's residual or PowerSGD's Q, and its two work arrays), and the
 * activation arena the model sizes once for its batch (each layer's output
 * and its gradient a sample, the layers' scratch; under --recompute the
 * layers inside a segment only once, in the workspace the segments share),
 * and the worker's own: its batch's inputs and labels, the epoch's sample
 * order (worker.c). Not counted: a pipeline stage's own activation slots
 * (stage_new: M micro-batches of its layers), the kernels' workspaces
 * (oneDNN's: ~0.3 MiB a rank measured here), the collectives' scratch, a
 * thread's stack. */
#include "compress/compressor.h"
#include "perf/perf.h"
#include "strategy/worker.h"

/* The optimizer's state arenas: asked of the optimizer itself. */
static int state_arenas(const optim_config_t *oc) {
  optimizer_t *o;
  if (optim_new(oc, 1, &o) != 0) return 0;
  int n = o->nstate;
  optim_free(o);
  return n;
}

double perf_codec_memory_bytes(const compress_config_t *cc, size_t nparams) {
  compressor_t *k;
  if (cc->codec.kind == CODEC_NONE || compressor_new(cc, 1, 0, 2, &k) != 0) {
    dt_error_clear();
    return 0;
  }
  compress_state_t st[COMPRESS_MAX_STATE];
  double bytes = 4.0 * (double)nparams * (compressor_state(k, st) + 2); /* + its tmp, scratch */
  compressor_free(k);
  return bytes;
}

double perf_memory_bytes(const train_config_t *cfg, const model_t *m, size_t ntrain) {
  double params = (double)m->nparams;
  int tp = cfg->tensor.ranks > 1 ? cfg->tensor.ranks : 1, pp = cfg->pipe.stages > 1 ? cfg->pipe.stages : 1;
  int replicas = cfg->workers / tp / pp;
  double state = state_arenas(&cfg->optim) * params;
  if (cfg->shard_optimizer && replicas > 1) state /= replicas; /* this rank's blocks */
  /* shared sync: one state all ranks step a block of, beside each rank's
   * own (the state is copied back into it at the end) */
  if (cfg->exchange == EXCHANGE_SHARED && cfg->schedule == SCHEDULE_SYNC && cfg->workers > 1)
    state += state / cfg->workers;
  double model = 4.0 * (2.0 * params + state + (double)m->nbuffers);
  if (cfg->compression.codec.kind != CODEC_NONE) {
    compress_config_t cc = worker_compress_config(cfg);
    model += perf_codec_memory_bytes(&cc, m->nparams);
  }
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
