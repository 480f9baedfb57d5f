/* The mirror tree: reduce_tree and broadcast_tree (coll/) of a vector that
 * moves a little each round (MPCA-SGD's scaled models and centre), every
 * link of the binomial tree compressed through a mirror (mirror.c).
 *
 *   reduce:     a rank adds its children's partial sums, as it holds them,
 *               to its own contribution, in the order reduce_tree adds
 *               them (children by rising mask), and sends the change of
 *               its partial sum since its parent last heard it.
 *   broadcast:  a rank takes the value as it holds it from its parent and
 *               sends each child the change since that child last heard
 *               it (children by falling mask, as broadcast_tree).
 *
 * Per link both ends hold the same copy: the receiver's copy, and the
 * sender's mirror of it. Copies start where every rank starts, so the
 * first messages already carry changes: `start` is each non-root rank's
 * first contribution (a link's copy starts as its subtree's sum of it)
 * and `top` the first broadcast value.
 *
 *   steps:  as reduce_tree and broadcast_tree: ceil(lg P) rounds each
 *   bytes:  a non-root rank sends one encoding up and receives one down,
 *           E = codec_bytes(n) each; a rank with k children receives k E
 *           up and sends k E down (2 (P - 1) E in all a round)
 *   memory: a rank 2 n floats for its parent link and 2 n per child
 *
 * Messages are a codec's fixed size (codec_bytes): the variable-length
 * codecs are refused by the caller's options. A message that does not
 * decode is refused naming the peer, the copy untouched. */
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"

struct mirror_tree {
  codec_spec_t codec;
  size_t n, bytes;
  int rank, size, root, vr;
  int parent;              /* rank, or -1 at the root */
  int nchild;
  int child[32];           /* ranks, by rising mask */
  float **up_copy;         /* each child's partial sum as this rank holds it */
  float *up_mirror;        /* this rank's partial sum as its parent holds it */
  float *down_copy;        /* the broadcast value as this rank holds it */
  float **down_mirror;     /* the value as each child holds it */
  uint8_t *msg;            /* one encoding */
  float *scratch;          /* 2 n: mirror_encode's */
  uint64_t seed;
};

static float *copy_of(const float *x, size_t n, float scale) {
  float *c = dt_dup_floats(x, n);
  if (c && scale != 1.0f) kern_scale(n, scale, c);
  return c;
}

int mirror_tree_new(const codec_spec_t *s, size_t n, int rank, int size, int root, uint64_t seed,
                    const float *start, const float *top, mirror_tree_t **out) {
  mirror_tree_t *t = calloc(1, sizeof *t);
  *out = t;
  if (!t) return dt_error("out of memory (mirror tree)");
  *t = (mirror_tree_t){.codec = *s, .n = n, .bytes = codec_bytes(s, n), .rank = rank,
                       .size = size, .root = root, .vr = (rank - root + size) % size,
                       .parent = -1, .seed = seed};
  int vr = t->vr;
  for (int mask = 1; mask < size; mask <<= 1) {
    if (vr & mask) {
      t->parent = (vr - mask + root) % size;
      break;
    }
    if (vr + mask < size) t->child[t->nchild++] = (vr + mask + root) % size;
  }
  t->up_copy = calloc((size_t)t->nchild + 1, sizeof *t->up_copy);
  t->down_mirror = calloc((size_t)t->nchild + 1, sizeof *t->down_mirror);
  t->msg = dt_alloc(t->bytes + 1);
  t->scratch = dt_alloc_floats(2 * n + 1);
  if (!t->up_copy || !t->down_mirror || !t->msg || !t->scratch) return dt_error("out of memory (mirror tree)");
  for (int i = 0; i < t->nchild; i++) {
    int cvr = (t->child[i] - root + size) % size, low = cvr & -cvr;
    int subtree = low < size - cvr ? low : size - cvr; /* the ranks [cvr, cvr + low) */
    if (!(t->up_copy[i] = copy_of(start, n, (float)subtree)) || !(t->down_mirror[i] = copy_of(top, n, 1.0f)))
      return -1;
  }
  if (t->parent >= 0) {
    int low = vr & -vr, subtree = low < size - vr ? low : size - vr;
    if (!(t->up_mirror = copy_of(start, n, (float)subtree)) || !(t->down_copy = copy_of(top, n, 1.0f)))
      return -1;
  }
  return 0;
}

void mirror_tree_free(mirror_tree_t *t) {
  if (!t) return;
  for (int i = 0; i < t->nchild; i++) {
    if (t->up_copy) dt_free(t->up_copy[i]);
    if (t->down_mirror) dt_free(t->down_mirror[i]);
  }
  free(t->up_copy), free(t->down_mirror);
  dt_free(t->up_mirror), dt_free(t->down_copy), dt_free(t->msg), dt_free(t->scratch);
  free(t);
}

/* msg from `peer` into copy (its bytes checked by the codec). */
static int take(mirror_tree_t *t, comm_t *c, int peer, int tag, float *copy, const char *what) {
  if (comm_recv(c, peer, tag, t->msg, t->bytes) != 0)
    return dt_error_prefix("mirror tree %s: from rank %d: ", what, peer);
  if (mirror_decode(&t->codec, t->msg, t->bytes, t->n, copy) != 0)
    return dt_error_prefix("mirror tree %s: the message from rank %d: ", what, peer);
  return 0;
}

static int give(mirror_tree_t *t, comm_t *c, int peer, int tag, const float *x, float *mirror,
                int64_t round, int down) {
  size_t b = mirror_encode(&t->codec, x, mirror, t->n, mirror_seed(t->seed, t->rank, peer, round, down), t->msg,
                           t->scratch);
  if (comm_send(c, peer, tag, t->msg, b) != 0)
    return dt_error_prefix("mirror tree %s: to rank %d: ", down ? "broadcast" : "reduce", peer);
  return 0;
}

int mirror_tree_reduce(mirror_tree_t *t, comm_t *c, float *x, int64_t round) {
  for (int i = 0; i < t->nchild; i++) {
    DT_TRY(take(t, c, t->child[i], TAG_MIRROR_UP, t->up_copy[i], "reduce"));
    kern_axpy(t->n, 1.0f, t->up_copy[i], x);
  }
  return t->parent < 0 ? 0 : give(t, c, t->parent, TAG_MIRROR_UP, x, t->up_mirror, round, 0);
}

int mirror_tree_broadcast(mirror_tree_t *t, comm_t *c, float *x, int64_t round) {
  if (t->parent >= 0) {
    DT_TRY(take(t, c, t->parent, TAG_MIRROR_DOWN, t->down_copy, "broadcast"));
    memcpy(x, t->down_copy, t->n * sizeof *x);
  }
  for (int i = t->nchild - 1; i >= 0; i--)
    DT_TRY(give(t, c, t->child[i], TAG_MIRROR_DOWN, x, t->down_mirror[i], round, 1));
  return 0;
}
