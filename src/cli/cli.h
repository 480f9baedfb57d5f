/* The dtrain command: one function per subcommand. Each returns the exit
 * code: 0 ok, 1 run-time failure, 2 usage error. */
#ifndef DTRAIN_CLI_H
#define DTRAIN_CLI_H

int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);          /* dispatches bench kinds */
int cmd_bench_allreduce(int argc, char **argv);
int cmd_presets(int argc, char **argv);
int cmd_compare(int argc, char **argv);         /* src/cli/compare.c */

#endif
