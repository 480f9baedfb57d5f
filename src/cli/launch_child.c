/* dtrain launch's child: one attempt of the run (dtrain train, or mpirun
 * starting it), its stderr passed through line by line and read for the
 * rank that was lost. Two kinds of line name one:
 *   local: "rank 2: ... stopped by SIGUSR1 at step 134: this rank is lost"
 *          (a rank's thread signalled, src/core/interrupt.c);
 *   mpi:   Open MPI's "mpirun noticed that process rank 2 with PID 77 on
 *          node h1 exited on signal 9 (Killed)." (a rank's process killed),
 *          or its "Remote daemon: [[J,0],K] on node h1" after "ORTE has
 *          lost communication with a remote daemon" (a host cut off: all
 *          its ranks).
 * Everything else in the lines is the child's own business. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "dtrain/core.h"

/* The local transport's line: the rank, the signal's name, the step. */
static int parse_local_loss(const char *line, child_end_t *end) {
  const char *lost = strstr(line, ": this rank is lost");
  const char *by = strstr(line, "stopped by ");
  const char *rank = strstr(line, "rank ");
  int r;
  long long step;
  char sig[16];
  if (!lost || !by || !rank || rank > by) return 0;
  if (sscanf(rank, "rank %d:", &r) != 1 || sscanf(by, "stopped by %15s at step %lld", sig, &step) != 2)
    return 0;
  end->lost_rank = r;
  end->lost_step = step;
  snprintf(end->lost_signal, sizeof end->lost_signal, "%s", sig);
  return 1;
}

/* Open MPI's line for a rank's process that died of a signal. */
static int parse_mpi_loss(const char *line, child_end_t *end) {
  const char *p = strstr(line, "process rank ");
  int r, sig;
  long pid;
  char host[128];
  if (!p || sscanf(p, "process rank %d with PID %ld on node %127s exited on signal %d", &r, &pid,
                   host, &sig) != 4)
    return 0;
  end->lost_rank = r;
  snprintf(end->lost_host, sizeof end->lost_host, "%s", host);
  snprintf(end->lost_signal, sizeof end->lost_signal, "%s", sig == SIGKILL ? "SIGKILL"
                                                            : sig == SIGTERM ? "SIGTERM"
                                                            : sig == SIGSEGV ? "SIGSEGV" : "a signal");
  if (!strcmp(end->lost_signal, "a signal"))
    snprintf(end->lost_signal, sizeof end->lost_signal, "signal %d", sig);
  return 1;
}

/* Open MPI's line for a host whose daemon it lost (a link cut, the host
 * gone): "  Remote daemon: [[13130,0],2] on node el-h1". No rank named:
 * every rank of that host is lost. */
static int parse_mpi_host_loss(const char *line, child_end_t *end) {
  const char *p = strstr(line, "Remote daemon:");
  const char *on = p ? strstr(p, " on node ") : NULL;
  char host[128];
  if (!on || sscanf(on, " on node %127s", host) != 1) return 0;
  snprintf(end->lost_host, sizeof end->lost_host, "%s", host);
  snprintf(end->lost_signal, sizeof end->lost_signal, "host unreachable");
  return 1;
}

static void read_line(const char *line, child_end_t *end) {
  if (end->lost_rank >= 0 || end->lost_host[0]) return; /* the first loss named is the cause */
  if (!parse_local_loss(line, end) && !parse_mpi_loss(line, end)) parse_mpi_host_loss(line, end);
}

/* Passes what the pipe holds to stderr, a whole line at a time, each read
 * for a loss; `buf` keeps a line's start across reads. Returns 0 at EOF. */
static int pump(int fd, char *buf, size_t cap, size_t *have, child_end_t *end) {
  ssize_t n = read(fd, buf + *have, cap - 1 - *have);
  if (n < 0) return errno == EINTR || errno == EAGAIN ? 1 : 0;
  if (n == 0) {
    if (*have) { /* a last line without its newline */
      buf[*have] = 0;
      read_line(buf, end);
      fputs(buf, stderr);
      *have = 0;
    }
    return 0;
  }
  *have += (size_t)n;
  buf[*have] = 0;
  char *start = buf, *nl;
  while ((nl = strchr(start, '\n'))) {
    *nl = 0;
    read_line(start, end);
    fprintf(stderr, "%s\n", start);
    start = nl + 1;
  }
  *have = (size_t)(buf + *have - start);
  memmove(buf, start, *have);
  if (*have == cap - 1) { /* a line longer than the buffer: passed on as it is */
    buf[*have] = 0;
    fputs(buf, stderr);
    *have = 0;
  }
  return 1;
}

int launch_run_child(char *const argv[], child_end_t *end) {
  *end = (child_end_t){.lost_rank = -1, .lost_step = -1};
  int fds[2];
  if (pipe(fds) != 0) return dt_error("launch: pipe: %s", strerror(errno));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return dt_error("launch: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], argv);
    fprintf(stderr, "dtrain launch: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  size_t have = 0;
  int forwarded = 0;
  for (;;) {
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int ready = poll(&p, 1, 200);
    if (dt_interrupted() && !forwarded) { /* a SIGINT/SIGTERM for launch ends the run too */
      kill(pid, dt_interrupted());
      forwarded = 1;
    }
    if (ready > 0 && !pump(fds[0], buf, sizeof buf, &have, end)) break;
  }
  close(fds[0]);
  while (waitpid(pid, &end->status, 0) < 0)
    if (errno != EINTR) return dt_error("launch: waitpid: %s", strerror(errno));
  return 0;
}
