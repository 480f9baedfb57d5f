/* train_check_memory: a run whose options would need more memory than
 * this process may have is refused before anything is allocated, naming
 * the option that sizes it, the memory and the limit (a value such as
 * --batch 1048576 or --workers 4096 otherwise grows until the kernel's
 * OOM killer ends it, or another process on a shared machine).
 *
 * The estimate is a lower bound, so nothing that fits is refused: every
 * rank of this process holds the whole model's parameters and gradients
 * (worker.c builds the whole model on every rank, a stage's included) and
 * activations for its batch (the model's arena is sized for --batch; a
 * tensor-parallel rank holds at least 1/tp of them); under --comm local
 * every rank is a thread, whose stack is reserved address space. The
 * options that size the rest are bounded by these: --micro-batches
 * divides --batch, a pipeline's schedules are O(pp x V x M) instructions,
 * --pp x V is at most the model's layers (pipe_check_model), --pp and --tp
 * divide --workers. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "strategy/model_check.h"
#include "strategy/strategy.h"

typedef struct {
  double bytes;
  char what[96];            /* "the machine's 15.6 GiB of memory" */
} mem_limit_t;

static void format_bytes(double b, char *buf, size_t cap) {
  if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else snprintf(buf, cap, "%.1f MiB", b / (1024.0 * 1024));
}

/* Floats a sample takes in the activation arena: each layer's output and
 * its gradient, and its scratch (m is built for one sample); under
 * --recompute a segment's inside once, in the workspace they share. */
static double act_floats_per_sample(const model_t *m) {
  double n = m->nclasses, ws = 0, seg = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const layer_t *l = &m->layers[i];
    double own = 2.0 * (double)shape_size(l->out_shape) + (double)l->scratch_len;
    if (l->in_workspace) seg += own;
    else n += own;
    if (l->recompute_from) ws = seg > ws ? seg : ws, seg = 0;
  }
  return n + ws;
}

/* The address space this process has already taken (code, libraries,
 * the data set): what is left under ulimit -v is the limit less this. */
static double address_space_used(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f) {
    if (fscanf(f, "%lu", &pages) != 1) pages = 0;
    fclose(f);
  }
  return (double)pages * (double)sysconf(_SC_PAGESIZE);
}

/* cgroup v2's memory.max of this process's group (0: none or unknown). */
static double cgroup_limit(void) {
  FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
  double v = 0;
  if (f) {
    unsigned long long x;
    if (fscanf(f, "%llu", &x) == 1) v = (double)x; /* "max" reads as none */
    fclose(f);
  }
  return v;
}

/* The smallest of the machine's memory and its cgroup's (resident), and
 * what is left of ulimit -v (address space, where thread stacks count). */
static void memory_limits(mem_limit_t *resident, mem_limit_t *address) {
  char b[32];
  resident->bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  format_bytes(resident->bytes, b, sizeof b);
  snprintf(resident->what, sizeof resident->what, "the machine's %s of memory", b);
  double cg = cgroup_limit();
  if (cg > 0 && cg < resident->bytes) {
    resident->bytes = cg;
    format_bytes(cg, b, sizeof b);
    snprintf(resident->what, sizeof resident->what, "the %s of this cgroup (memory.max)", b);
  }
  struct rlimit rl;
  address->bytes = 0;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    address->bytes = (double)rl.rlim_cur - address_space_used();
    if (address->bytes < 0) address->bytes = 0;
    format_bytes(address->bytes, b, sizeof b);
    snprintf(address->what, sizeof address->what, "the %s of address space left under ulimit -v", b);
  }
}

/* A thread's stack as glibc reserves it: ulimit -s, or 2 MiB unlimited. */
static double thread_stack(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_STACK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 2.0 * 1024 * 1024;
  return (double)rl.rlim_cur;
}

int train_check_memory(const train_config_t *c, const model_t *m) {
  int ranks = c->comm == COMM_MPI ? 1 : strategy_total_ranks(c);
  int batch = worker_max_batch(c);
  double model = 4.0 * (2.0 * (double)m->nparams + (double)m->nbuffers);
  double acts = 4.0 * (double)batch * act_floats_per_sample(m) / (c->tensor.ranks > 1 ? c->tensor.ranks : 1);
  double need = (double)ranks * (model + acts);
  double stacks = c->comm == COMM_MPI ? 0 : (double)ranks * thread_stack();
  mem_limit_t resident, address;
  memory_limits(&resident, &address);
  const mem_limit_t *over = need > resident.bytes ? &resident
                            : address.bytes > 0 && need + stacks > address.bytes ? &address : NULL;
  if (!over) return 0;
  if (over == &address) need += stacks;
  char total[32], per[32];
  format_bytes(need, total, sizeof total);
  if (acts >= model) {
    format_bytes(acts, per, sizeof per);
    return dt_error("option --batch %d: the activations of a batch (%s a rank, %d rank%s) would "
                    "take %s in all, more than %s: give a smaller --batch", c->batch, per, ranks,
                    ranks == 1 ? "" : "s", total, over->what);
  }
  format_bytes(model, per, sizeof per);
  if (ranks > 1)
    return dt_error("option --workers %d: %d ranks, each with the model's parameters and "
                    "gradients (%s), would take %s in all, more than %s: give fewer --workers",
                    c->workers, ranks, per, total, over->what);
  return dt_error("option --model %s: its parameters and gradients (%s) would take %s in all, "
                  "more than %s", c->model, per, total, over->what);
}
