/* SIGINT and SIGTERM: the CLI's handler records the signal here, and the
 * training loop stops at its next step, as after any other failure: what
 * was written stays whole (a checkpoint is replaced only by rename, a
 * metrics line only whole), and a checkpoint write in progress finishes
 * or is removed. A second signal does not wait: it removes the temporary
 * file of a write in progress and ends the process at once. */
#define _POSIX_C_SOURCE 200809L
#include "dtrain/core.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* A lock-free atomic: safe in a handler, and read by every rank's thread. */
static atomic_int caught;

static void on_signal(int signo) {
  int saved = errno;
  if (atomic_load(&caught)) { /* the second: stop now, leaving nothing half-written */
    file_remove_pending();
    static const char msg[] = "dtrain: interrupted again: stopping now\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(128 + signo);
  }
  atomic_store(&caught, signo);
  errno = saved;
}

void dt_catch_interrupts(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* SIGUSR1 sent to one rank's thread (tgkill; under local its thread is
 * named dtrain-rankR) stops that rank alone, at its next step, as a lost
 * rank: the fault dtrain launch restarts from. A flag of the thread that
 * took the signal; a thread that is no rank's ignores it. */
static _Thread_local volatile sig_atomic_t rank_signal;

static void on_rank_signal(int signo) { rank_signal = signo; }

void dt_catch_rank_signal(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_rank_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
}

int dt_rank_signalled(void) { return rank_signal; }

int dt_interrupted(void) { return atomic_load_explicit(&caught, memory_order_relaxed); }

const char *dt_signal_name(int signo) {
  return signo == SIGINT ? "SIGINT" : signo == SIGTERM ? "SIGTERM" : signo == SIGUSR1 ? "SIGUSR1"
                                                                                  : "a signal";
}
