/* coll_async: collectives run beside the caller's compute (overlap).
 * Data parallelism starts a bucket's allreduce as soon as backpropagation
 * has produced its gradients, and keeps computing. Requests run one at a
 * time, on a progress thread or, once the caller waits, on the caller's;
 * every rank must submit the same sequence (which synchronous training
 * does). FIFO runs them in submission order; PRIORITY runs the lowest
 * `priority` first (ties in submission order), the ranks agreeing before
 * each request on which one (see coll_async.c), so requests that touch the
 * same memory must not be given a lower priority than an earlier one. */
#ifndef DTRAIN_COLL_ASYNC_H
#define DTRAIN_COLL_ASYNC_H

#include "dtrain/coll.h"

typedef struct coll_async coll_async_t;
int coll_async_new(coll_ctx_t *ctx, coll_order_t order, coll_async_t **out);
/* Each returns the request's ticket, for coll_async_wait_one. */
size_t coll_async_allreduce(coll_async_t *a, allreduce_algo_t algo, float *buf, size_t count,
                            int priority);
/* In place, ring layout: reduce-scatter leaves the sum of block r
 * (coll_block) in rank r's buf; allgather spreads each rank's block r. */
size_t coll_async_reduce_scatter(coll_async_t *a, float *buf, size_t count, int priority);
size_t coll_async_allgather(coll_async_t *a, float *buf, size_t count, int priority);
/* A collective of the caller's own, run in its turn like the others: fn
 * gets the context the requests run on (a compressed allreduce, which
 * composes collectives and point-to-point messages on it). */
typedef int (*coll_async_fn)(coll_ctx_t *ctx, void *arg);
size_t coll_async_call(coll_async_t *a, coll_async_fn fn, void *arg, int priority);
/* Runs or waits for requests until this one has finished (under PRIORITY,
 * the more urgent ones run first; under FIFO, the earlier ones). */
int coll_async_wait_one(coll_async_t *a, size_t ticket);
/* Runs or waits for every submitted request. *busy_sec: seconds spent
 * communicating since the previous wait or take_busy. */
int coll_async_wait(coll_async_t *a, double *busy_sec);
double coll_async_take_busy(coll_async_t *a);
void coll_async_free(coll_async_t *a);
/* What a request costs on the wire besides its own bytes, on rank `rank`
 * of P: under PRIORITY the ranks' agreement before it (an allgather_ring
 * of one float a rank); nothing under FIFO. */
void coll_async_agree_bytes(coll_order_t order, int P, int rank, size_t *sent, size_t *received);
#endif
