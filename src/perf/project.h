/* The projection (issue 33): a cluster described in a file (cluster_file.c)
 * and the data-parallel strategies' step on it at 8 ... 1024 workers
 * (project.c), printed and drawn (src/report/plan_plot.c). Apart from
 * perf.h because it plans for ranks that are not on this machine: a
 * device here is either this CPU at a relative speed (its layers measured
 * here) or a device described by its FLOP/s and memory bandwidth
 * (projected: nothing of it is measured). */
#ifndef DTRAIN_PERF_PROJECT_H
#define DTRAIN_PERF_PROJECT_H

#include <stdio.h>

#include "perf/perf.h"

#define PERF_MAX_GROUPS 16

/* Hosts alike: how many, ranks on each, each rank's device and memory. */
typedef struct {
  int hosts, ranks_per_host;
  char device[64];           /* its name, for the output */
  double speed;              /* > 0: this machine's measured time / speed; 0: projected */
  double flops, efficiency;  /* projected: peak FLOP/s, the fraction a layer's GEMMs reach */
  double memory_bandwidth;   /* projected: bytes/s (the layers without weights, the update) */
  double memory;             /* bytes a rank may hold (0: not limited) */
} perf_group_t;

typedef struct perf_cluster_file {
  char name[64];
  int ngroups, nhosts, nranks;
  perf_group_t group[PERF_MAX_GROUPS];
  perf_link_t intra, inter;  /* alpha: latency (s), beta: bytes/s the payload gets; inter: a
                              * host's one NIC */
  double intra_share, inter_share; /* beta over the line rate given: frames' headers, the
                                    * library's efficiency (1: none given) */
} perf_cluster_file_t;

/* The cluster file's JSON (docs/CLUSTER_FILE.md) from [s, s + len) read
 * from `source`: a malformed one is one line naming the key. */
int perf_cluster_file_parse(const char *s, size_t len, const char *source, perf_cluster_file_t *c);
int perf_cluster_file_load(const char *path, perf_cluster_file_t *c);
/* The group rank r is in (ranks numbered host by host, group by group). */
const perf_group_t *perf_cluster_file_group(const perf_cluster_file_t *c, int r);
/* The least memory_per_rank among the groups (0: none limited). */
double perf_cluster_file_memory(const perf_cluster_file_t *c);

/* ---- project.c -------------------------------------------------------- */

/* The strategies projected: data parallelism with each exchange; one
 * asynchronous server and one stale-synchronous (ssp:3) server (their
 * expected steps); GPipe, interleaved 1F1B of 2
 * chunks a rank, and Megatron's tensor parallelism across a host's ranks
 * with data parallelism across hosts; Megatron's 3-D grid (tp a divisor
 * of a host's ranks, pp stages across hosts, dp replicas over the rest);
 * local SGD averaging every 4 steps;
 * D-PSGD on a ring of the workers; data parallelism with the codecs
 * (--compress fp16, int8, topk:0.01, powersgd:4 as train runs them:
 * PROJ_CODEC_FIRST ... PROJ_COUNT - 1, in the order of perf_proj_codec). */
typedef enum {
  PROJ_RING, PROJ_RHD, PROJ_TREE, PROJ_HIER, PROJ_PS_SHARDED, PROJ_PS_ONE, PROJ_PS_ASYNC, PROJ_PS_SSP, PROJ_GPIPE,
  PROJ_INTERLEAVED, PROJ_TP, PROJ_GRID, PROJ_LOCAL_SGD, PROJ_DPSGD, PROJ_FP16, PROJ_INT8, PROJ_TOPK,
  PROJ_POWERSGD, PROJ_COUNT
} proj_strategy_t;
#define PROJ_CODEC_FIRST PROJ_FP16
#define PROJ_NCODECS (PROJ_COUNT - PROJ_CODEC_FIRST)
#define PROJ_INTERLEAVE_V 2  /* PROJ_INTERLEAVED's chunks a rank */
#define PROJ_LOCAL_SGD_TAU 4 /* PROJ_LOCAL_SGD's steps between averages */
#define PROJ_SSP_S 3         /* PROJ_PS_SSP's staleness bound (clocks) */
#define PROJ_GRID_MB 4       /* PROJ_GRID's micro-batches a stage (m = 4 pp, as the pipelines') */
#define PROJ_GRID_MAX_TP 16  /* PROJ_GRID's tp degrees tried: 1 and a host's ranks' divisors */
const char *perf_proj_name(proj_strategy_t s);
/* A codec strategy's --compress value ("fp16", ...); NULL for the others. */
const char *perf_proj_codec(proj_strategy_t s);

/* Seconds one allreduce (or server exchange) of `bytes` takes among the
 * first P ranks of the cluster: hosts of `per_host` ranks, the links
 * intra and inter (inter: the host's one NIC, shared by its ranks that
 * cross at once). PROJ_PS_ONE: a server rank of its own on a host of its
 * own, its link taking the P pushes and P pulls in turn. */
double perf_proj_exchange_sec(proj_strategy_t s, int P, int per_host, double bytes,
                              perf_link_t intra, perf_link_t inter);

typedef struct {
  const char *model;         /* name or path (model_spec_load) */
  int batch, nclasses;       /* per worker; the classes, a sequence model's vocabulary (0: 10, 256) */
  shape_t input;             /* used when the spec has no `input shape=` */
  int seq_len;               /* a sequence model's tokens a sample (its input 1x1xT) */
  double bucket_bytes;       /* gradients fused into buckets this large (Horovod: 64 MiB) */
  double cycle_sec;          /* > 0: Horovod's fusion cycle (its HOROVOD_CYCLE_TIME, 5 ms): the
                              * tensors ready at each cycle fused within bucket_bytes, after the
                              * coordinator's negotiation, copied in and out of the fusion
                              * buffer; 0: fixed buckets in backward order, each sent when ready
                              * (dtrain's reducer, PyTorch DDP's) */
  int straggler_rank;        /* -1: none */
  double straggler_slowdown;
  double net_latency, net_bandwidth; /* --net: between hosts, in place of the file's (0: the file's) */
  double memory_per_rank;    /* > 0: every rank's memory, in place of the file's */
  int grid_tp, grid_pp;      /* > 0: PROJ_GRID's tensor / pipeline degree fixed (pp 1, tp a
                              * host's ranks: the tp row's grid); 0: the grid with the most
                              * samples/s that fits (tp a divisor of a host's ranks, pp 2, 4,
                              * ... hosts) */
  const optim_config_t *optim;
} perf_proj_opts_t;

/* One worker count's figures per strategy. */
typedef struct {
  int workers;
  double step_sec[PROJ_COUNT], samples_per_sec[PROJ_COUNT], efficiency[PROJ_COUNT];
  double codec_sec[PROJ_COUNT];     /* of step_sec, the codec's CPU on the slowest rank (0: none) */
  double bytes_sent[PROJ_COUNT];    /* the codecs: a rank's bytes sent a step (0: not counted) */
  double memory_bytes[PROJ_COUNT];  /* the rank holding most: data parallel fixed + per_sample x
                                     * batch (+ a codec's memories), a pipeline stage its
                                     * parameters and the activations its schedule holds at
                                     * once, a tp rank its blocks */
  int fits[PROJ_COUNT];             /* memory_bytes within every rank's memory */
  int grid_tp, grid_pp, grid_dp;    /* PROJ_GRID's grid (0: none made) */
  double mem_limit;                 /* the memory bounding its ranks (0: none limited) */
} perf_proj_row_t;

typedef struct {
  int nrows;
  perf_proj_row_t row[16];
  double one_worker_sec;     /* the step on one rank alone: the efficiency's yardstick */
  double compute_sec;        /* a worker's forward, backward and update */
  double update_sec;         /* of it, the update */
  double grad_bytes;
  double inter_beta;         /* bytes/s between hosts as projected (the file's, or --net's) */
  double mem_fixed, mem_per_sample; /* a rank's bytes: fixed + per_sample x batch */
  double mem_limit;          /* the memory per rank bounding the rows: --memory-per-rank, else
                              * the least memory_per_rank among the groups (0: none limited) */
  int projected;             /* a device is described by FLOP/s, not measured here */
  char tp_why[160];          /* why PROJ_TP is not projected ("": it is) */
  double seconds;            /* the projection's own wall time */
} perf_projection_t;

/* The search at each worker count from..to (doubling) on the cluster. */
int perf_project(const perf_proj_opts_t *o, const perf_cluster_file_t *c, int from, int to,
                 perf_projection_t *out);
void perf_projection_print(const perf_projection_t *p, const perf_cluster_file_t *c, FILE *out);
/* plan_plot.c: the page (SVG charts in HTML, as the compare report). */
int perf_projection_html(const perf_projection_t *p, const perf_cluster_file_t *c,
                         const char *model, const char *path);

#endif
