/* The dtrain command: one function per subcommand. Each returns the exit
 * code: 0 ok, 1 run-time failure, 2 usage error. */
#ifndef DTRAIN_CLI_H
#define DTRAIN_CLI_H

int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);          /* dispatches bench kinds */
int cmd_bench_allreduce(int argc, char **argv);
int cmd_presets(int argc, char **argv);
int cmd_compare(int argc, char **argv);         /* src/cli/compare.c */
int cmd_describe(int argc, char **argv);        /* src/cli/describe.c */
int cmd_plan(int argc, char **argv);            /* src/cli/plan.c */
int cmd_sample(int argc, char **argv);          /* src/cli/sample.c */

int cmd_launch(int argc, char **argv);          /* src/cli/launch.c */

/* dtrain launch's child (launch_child.c): how one attempt ended, and the
 * rank it lost where a line of its stderr named one. */
typedef struct {
  int status;                   /* waitpid's */
  int lost_rank;                /* -1: no rank named */
  long long lost_step;          /* the step it stopped at; -1: not known (a killed process) */
  char lost_signal[24];         /* "SIGKILL", "SIGUSR1", "host unreachable", ... */
  char lost_host[128];          /* mpi: the node the rank ran on, or the host lost with all its
                                   ranks (lost_rank -1); "" under local */
} child_end_t;
/* Runs argv with its stderr passed through ours, read for a lost rank;
 * a SIGINT/SIGTERM that launch takes is passed on. */
int launch_run_child(char *const argv[], child_end_t *end);

/* --hostfile (hostfile.c): "HOST [slots=K]" lines, each host known to the
 * resolver (else refused, or skipped with skip_unknown: a restart's
 * reading, where a host not yet known is not yet up). */
typedef struct {
  char name[128];
  int slots;
  int dead;                     /* lost in this launch: never used again */
} launch_host_t;
int hostfile_read(const char *path, launch_host_t *hosts, int cap, int *n, int skip_unknown);
/* The live hosts, for mpirun --hostfile. */
int hostfile_write(const char *path, const launch_host_t *hosts, int n);
/* The live host mpirun places `rank` on (by slot, in file order); -1: none. */
int hostfile_host_of_rank(const launch_host_t *hosts, int n, int rank);

#include <stdio.h>
/* Before a command runs: the best OpenBLAS kernels for this CPU (may start
 * dtrain again with OPENBLAS_CORETYPE set), checked against the reference
 * GEMM, and one line on stderr where the user's setting is far below the
 * CPU (src/cli/kernels.c). */
void cli_settle_kernels(char **argv);
/* One line: the kernels in use, the CPU's features, and a faster setting. */
void cli_describe_kernels(FILE *f);

#endif
