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
 * order (worker.c); a pipeline rank's: perf_pipeline_memory_bytes. Not
 * counted: the kernels' workspaces (oneDNN's: ~0.3 MiB a rank measured
 * here), the collectives' scratch, a thread's stack. */
#include "compress/compressor.h"
#include "perf/perf.h"
#include "strategy/pipe/schedule.h"
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

/* The model's activation arena for the batch (each layer's output and
 * its gradient a sample, the layers' scratch; under --recompute a
 * segment's inside once), the worker's batch and the epoch's order. */
static double batch_bytes(const train_config_t *cfg, const model_t *m, size_t ntrain) {
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
  return 4.0 * (acts + inputs + (double)ntrain);
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
  return model + batch_bytes(cfg, m, ntrain);
}

/* A pipeline rank as the engine runs it (strategy/pipe/engine.c): the
 * whole model's parameters (every rank draws them all), its chunks'
 * gradients and optimizer state (the arenas are mapped on first touch:
 * dt_map_floats), each chunk's activation slots -- `slots` micro-batches
 * of `micro` samples, each layer's output and its gradient, its scratch,
 * the chunk's input and its input's gradient (stage_new, plan_chunks) --,
 * PipeDream's P and 2BW's one older weight versions of its chunk, and
 * the model's own activation arena (zeroed when it is built; rank 0
 * evaluates the gathered model in it). */
double perf_pipeline_memory_bytes(const train_config_t *cfg, const model_t *m,
                                  const unsigned char *own, int micro, size_t ntrain) {
  int async = pipe_kind_async((pipe_kind_t)cfg->pipe.schedule);
  int slots = cfg->pipe.micro_batches + (async ? cfg->pipe.stages : 0);
  double params = 0, acts = 0, inputs = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    if (!own[i]) continue;
    params += (double)l->param_len;
    acts += 2.0 * (double)shape_size(l->out_shape) + (double)l->scratch_len / (m->max_batch > 0 ? m->max_batch : 1);
    if (i == 0 || !own[i - 1]) inputs += 2.0 * (double)shape_size(l->in_shape); /* a chunk's first */
  }
  int versions = cfg->pipe.schedule == PIPE_PIPEDREAM ? cfg->pipe.stages : cfg->pipe.schedule == PIPE_2BW;
  double floats = (double)m->nparams + (1.0 + state_arenas(&cfg->optim) + versions) * params +
                  (double)m->nbuffers + (double)slots * micro * (acts + inputs);
  return 4.0 * floats + batch_bytes(cfg, m, ntrain); /* the model's own arena, the batch */
}
