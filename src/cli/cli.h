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

#include <stdio.h>
/* Before a command runs: the best OpenBLAS kernels for this CPU (may start
 * dtrain again with OPENBLAS_CORETYPE set), checked against the reference
 * GEMM, and one line on stderr where the user's setting is far below the
 * CPU (src/cli/kernels.c). */
void cli_settle_kernels(char **argv);
/* One line: the kernels in use, the CPU's features, and a faster setting. */
void cli_describe_kernels(FILE *f);

#endif
