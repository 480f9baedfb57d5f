/* dtrain launch: elastic restarts, as torchrun's agent does them. It runs
 * the training as a child (dtrain train with --workers N on --comm local,
 * the ranks threads of that child; mpirun -np N dtrain train on --comm
 * mpi, a process a rank), watches how it ends, and when a rank was lost
 * starts it again from the last checkpoint on the ranks that remain: the
 * world shrinks by the lost rank (under a hostfile, by every rank of the
 * lost rank's host, which is not used again; hosts added to the file since
 * join), down to --min-np, at most --max-restarts times. A child killed as
 * a whole (the local process, mpirun) lost no host: it restarts on as many
 * ranks. Each restart is one line on stderr and one "restart" record in
 * the run's --metrics; with --checkpoint-every STEPS a restart loses at
 * most STEPS steps. What ends a child without a lost rank (a divergence,
 * a bad file) ends launch too: a restart would meet it again. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "dtrain/safetensors.h"
#include "dtrain/train.h"

#define MAX_HOSTS 256
#define MAX_MPIRUN_WORDS 64

static const char *LAUNCH_HELP =
    "usage: dtrain launch --np N [--min-np M] [--max-restarts R] [--checkpoint-every STEPS]\n"
    "                     [--hostfile F] -- [train options]\n"
    "\n"
    "Runs 'dtrain train' with N ranks and restarts it from its last checkpoint when a\n"
    "rank is lost, on the ranks that remain (elastic, like torchrun). On --comm local\n"
    "the ranks are threads of one child process (dtrain train --workers N); a rank's\n"
    "thread that takes SIGUSR1 (tgkill; its thread is named dtrain-rankR) is lost. On\n"
    "--comm mpi, mpirun starts a process a rank (the command in $DTRAIN_MPIRUN, split\n"
    "at spaces [mpirun]); a rank's process that dies of a signal (kill -9) is lost,\n"
    "and under --hostfile a host whose daemon mpirun loses (a link cut), all its ranks.\n"
    "The child killed as a whole (local) lost no host: it restarts on as many ranks.\n"
    "\n"
    "options:\n"
    "  --np N                ranks to start with: on local the workers (--workers N), on\n"
    "                        mpi mpirun's -np (a strategy's server or master ranks\n"
    "                        included); a lost rank takes one off\n"
    "  --min-np M            restart only while at least M ranks remain [1]\n"
    "  --max-restarts R      restart at most R times [3]\n"
    "  --checkpoint-every S  passed to train: a checkpoint every S steps, so a\n"
    "                        restart loses at most S steps (needs --checkpoint FILE)\n"
    "  --hostfile F          --comm mpi: Open MPI's hostfile (HOST [slots=K] a line);\n"
    "                        a lost rank's host is dropped, hosts added to F since the\n"
    "                        last start join (up to --np ranks); read at every start\n"
    "\n"
    "After '--': 'dtrain train' options (dtrain train --help), but --workers (launch\n"
    "sets it). With --checkpoint FILE a restart resumes from FILE, once this launch has\n"
    "written it; without, from the start. Each restart is one line on stderr and a\n"
    "{\"event\":\"restart\",...} line in --metrics: the rank lost and its host, the signal,\n"
    "the step it stopped at where known, the step resumed from, the new world size.\n"
    "Exit: 0 when the run ends, 1 when it fails for another reason or a loss leaves\n"
    "fewer than --min-np ranks or passes --max-restarts, 2 for bad options.\n"
    "\n"
    "examples:\n"
    "  dtrain launch --np 4 --min-np 3 --checkpoint-every 50 -- --epochs 5 \\\n"
    "      --checkpoint run.st --metrics run.jsonl\n"
    "  DTRAIN_MPIRUN='mpirun --oversubscribe' dtrain launch --np 4 --hostfile hosts \\\n"
    "      -- --comm mpi --epochs 5 --checkpoint run.st\n";

typedef struct {
  long np, min_np, max_restarts, every;
  const char *hostfile;
  int train_argc;               /* the options after "--" */
  char **train_argv;
} launch_opts_t;

/* --name VALUE or --name=VALUE at argv[*i]; NULL when argv[*i] is not it. */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] || *i + 1 >= argc) return NULL;
  return argv[++*i];
}

static int parse_launch(int argc, char **argv, launch_opts_t *o) {
  *o = (launch_opts_t){.np = 0, .min_np = 1, .max_restarts = 3};
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    const char *v;
    if ((v = opt_value(argc, argv, &i, "--np"))) DT_TRY(parse_int("np", v, 1, 4096, &o->np));
    else if ((v = opt_value(argc, argv, &i, "--min-np"))) DT_TRY(parse_int("min-np", v, 1, 4096, &o->min_np));
    else if ((v = opt_value(argc, argv, &i, "--max-restarts")))
      DT_TRY(parse_int("max-restarts", v, 0, 1000000, &o->max_restarts));
    else if ((v = opt_value(argc, argv, &i, "--checkpoint-every")))
      DT_TRY(parse_int("checkpoint-every", v, 1, 1L << 50, &o->every));
    else if ((v = opt_value(argc, argv, &i, "--hostfile"))) o->hostfile = v;
    else
      return dt_error("'%s': not a launch option (--np, --min-np, --max-restarts, "
                      "--checkpoint-every, --hostfile; train options go after '--')", argv[i]);
  }
  if (!o->np) return dt_error("--np N is needed (the ranks to start with)");
  if (o->min_np > o->np)
    return dt_error("--min-np %ld is above --np %ld (the ranks it starts with): lower --min-np",
                    o->min_np, o->np);
  o->train_argc = i < argc ? argc - i - 1 : 0;
  o->train_argv = argv + i + (i < argc);
  for (int k = 0; k < o->train_argc; k++)
    if (!strncmp(o->train_argv[k], "--workers", 9) &&
        (o->train_argv[k][9] == 0 || o->train_argv[k][9] == '='))
      return dt_error("train option --workers: launch sets it (give the ranks as --np)");
  return 0;
}

/* ---- the command line of one attempt ------------------------------------------ */

typedef struct {
  char *argv[4096];
  int argc;
  char workers[32], every[32], np[32];
} cmdline_t;

static int push(cmdline_t *c, char *word) {
  if (c->argc + 1 >= (int)(sizeof c->argv / sizeof c->argv[0]))
    return dt_error("too many train options");
  c->argv[c->argc++] = word;
  c->argv[c->argc] = NULL;
  return 0;
}

/* $DTRAIN_MPIRUN split at spaces (kept in `words`), or plain mpirun. */
static int push_mpirun(cmdline_t *c, char *words, size_t cap) {
  const char *env = getenv("DTRAIN_MPIRUN");
  snprintf(words, cap, "%s", env && *env ? env : "mpirun");
  int n = 0;
  for (char *t = strtok(words, " \t"); t; t = strtok(NULL, " \t"), n++)
    DT_TRY(push(c, t));
  return n ? 0 : dt_error("$DTRAIN_MPIRUN is empty");
}

/* [mpirun ... -np N [--hostfile H]] EXE train OPTIONS --workers N
 * [--checkpoint-every S] [--resume CKPT] [--metrics-append on]; `append`:
 * a restart, whose metrics continue after its restart record */
static int build_cmdline(cmdline_t *c, const launch_opts_t *o, int mpi, int world, char *exe,
                         char *mpirun_words, size_t cap, char *live_hostfile, char *resume,
                         int append) {
  c->argc = 0;
  if (mpi) {
    DT_TRY(push_mpirun(c, mpirun_words, cap));
    snprintf(c->np, sizeof c->np, "%d", world);
    DT_TRY(push(c, "-np"));
    DT_TRY(push(c, c->np));
    if (live_hostfile) DT_TRY(push(c, "--hostfile"));
    if (live_hostfile) DT_TRY(push(c, live_hostfile));
  }
  DT_TRY(push(c, exe));
  DT_TRY(push(c, "train"));
  for (int k = 0; k < o->train_argc; k++) DT_TRY(push(c, o->train_argv[k]));
  if (!mpi) {
    snprintf(c->workers, sizeof c->workers, "%d", world);
    DT_TRY(push(c, "--workers"));
    DT_TRY(push(c, c->workers));
  }
  if (o->every) {
    snprintf(c->every, sizeof c->every, "%ld", o->every);
    DT_TRY(push(c, "--checkpoint-every"));
    DT_TRY(push(c, c->every));
  }
  if (resume) DT_TRY(push(c, "--resume")); /* a later option overrides the user's own */
  if (resume) DT_TRY(push(c, resume));
  if (append) DT_TRY(push(c, "--metrics-append"));
  if (append) DT_TRY(push(c, "on"));
  return 0;
}

/* The train options as train will read them on `world` ranks, checked
 * before anything runs: under mpi the workers and grid mpirun -np world
 * leaves (on local train's parse checks --workers world). */
static int check_train_options(const launch_opts_t *o, int world, train_config_t *cfg) {
  cmdline_t c;
  char exe[] = "dtrain", words[8] = "";
  DT_TRY(build_cmdline(&c, o, 0, world, exe, words, sizeof words, NULL, NULL, 0));
  if (train_options_parse(c.argc - 1, c.argv + 1, cfg) != 0) return -1;
  if (o->hostfile && cfg->comm != COMM_MPI)
    return dt_error("--hostfile: needs --comm mpi among the train options (on local the ranks are "
                    "threads of one process on this host)");
  if (cfg->comm == COMM_MPI) {
    train_config_t fit = *cfg;
    fit.workers = 1; /* not given: found from the world, as train finds it */
    DT_TRY(train_config_fit_world(&fit, world));
  }
  return train_check_outputs(cfg);
}

/* ---- what a restart resumes from ------------------------------------------------ */

/* The checkpoint file as launch found it, so that a restart resumes only
 * from one this launch wrote (not an older run's). */
typedef struct {
  int existed;
  struct stat st;
} file_stamp_t;

static file_stamp_t stamp(const char *path) {
  file_stamp_t s = {0};
  s.existed = path[0] && stat(path, &s.st) == 0;
  return s;
}

static int written_since(const char *path, const file_stamp_t *before) {
  file_stamp_t now = stamp(path);
  if (!now.existed) return 0;
  if (!before->existed) return 1;
  return now.st.st_ino != before->st.st_ino || now.st.st_mtim.tv_sec != before->st.st_mtim.tv_sec ||
         now.st.st_mtim.tv_nsec != before->st.st_mtim.tv_nsec || now.st.st_size != before->st.st_size;
}

typedef struct {
  long long step, epoch, samples;
} resume_point_t;

static int read_resume_point(const char *path, resume_point_t *p) {
  safetensors_t st;
  *p = (resume_point_t){0};
  if (safetensors_read(path, &st) != 0) return -1;
  int rc = safetensors_meta_int(&st, "step", 0, INT64_MAX, &p->step);
  if (rc == 0) rc = safetensors_meta_int(&st, "epoch", 0, INT64_MAX, &p->epoch);
  if (rc == 0 && safetensors_meta(&st, "epoch_samples"))
    rc = safetensors_meta_int(&st, "epoch_samples", 0, INT64_MAX, &p->samples);
  safetensors_free(&st);
  return rc;
}

/* ---- the restart's record --------------------------------------------------------- */

typedef struct {
  int restart, was, world;
  const child_end_t *end;
  const char *what;             /* "rank 2 (host h1)", "the whole run" */
  const char *from;             /* the checkpoint, or NULL: from the start */
  resume_point_t at;
} restart_t;

static void restart_line(const restart_t *r, long max_restarts) {
  char stopped[64] = "";
  if (r->end->lost_step >= 0) snprintf(stopped, sizeof stopped, " at step %lld", r->end->lost_step);
  char from[600];
  if (r->from)
    snprintf(from, sizeof from, "from %s at step %lld (epoch %lld, %lld samples in)", r->from,
             r->at.step, r->at.epoch + 1, r->at.samples);
  else
    snprintf(from, sizeof from, "from the start (no checkpoint written yet)");
  fprintf(stderr, "dtrain launch: %s lost (%s%s); restart %d of %ld on %d ranks (was %d) %s\n",
          r->what, r->end->lost_signal[0] ? r->end->lost_signal : "ended", stopped, r->restart,
          max_restarts, r->world, r->was, from);
}

/* A JSON string's characters, for a host name or a path. */
static void json_str(char *out, size_t cap, const char *s) {
  size_t n = 0;
  for (; *s && n + 7 < cap; s++) {
    if (*s == '"' || *s == '\\') out[n++] = '\\', out[n++] = *s;
    else if ((unsigned char)*s < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", *s);
    else out[n++] = *s;
  }
  out[n] = 0;
}

/* Appended whole to the run's metrics (the next attempt appends after it;
 * made here where train was lost before it made it). */
static int restart_record(const char *metrics, const restart_t *r) {
  if (!metrics[0]) return 0;
  char host[300], ckpt[600], rank[32], step[32];
  json_str(host, sizeof host, r->end->lost_host);
  json_str(ckpt, sizeof ckpt, r->from ? r->from : "");
  snprintf(rank, sizeof rank, r->end->lost_rank >= 0 ? "%d" : "null", r->end->lost_rank);
  snprintf(step, sizeof step, r->end->lost_step >= 0 ? "%lld" : "null", r->end->lost_step);
  char line[2048];
  int n = snprintf(line, sizeof line,
                   "{\"event\":\"restart\",\"restart\":%d,\"lost_rank\":%s,\"lost_host\":%s%s%s,"
                   "\"signal\":\"%s\",\"stopped_step\":%s,\"resumed_step\":%lld,\"epochs_done\":%lld,"
                   "\"epoch_samples\":%lld,\"checkpoint\":%s%s%s,\"workers\":%d,\"was_workers\":%d}\n",
                   r->restart, rank, host[0] ? "\"" : "", host[0] ? host : "null", host[0] ? "\"" : "",
                   r->end->lost_signal, step, r->at.step, r->at.epoch, r->at.samples,
                   r->from ? "\"" : "", r->from ? ckpt : "null", r->from ? "\"" : "", r->world, r->was);
  int fd = open(metrics, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return dt_error("--metrics %s: %s", metrics, strerror(errno));
  int ok = n > 0 && n < (int)sizeof line && write(fd, line, (size_t)n) == n;
  close(fd);
  return ok ? 0 : dt_error("--metrics %s: the restart record could not be written", metrics);
}

/* ---- the loop ------------------------------------------------------------------ */

typedef struct {
  launch_opts_t o;
  train_config_t cfg;
  int mpi, world, restarts;
  launch_host_t hosts[MAX_HOSTS];
  int nhosts;
  char live_hostfile[PATH_MAX];
  file_stamp_t ckpt_before;
} launch_t;

static int live_slots(const launch_t *l) {
  int n = 0;
  for (int i = 0; i < l->nhosts; i++) n += l->hosts[i].dead ? 0 : l->hosts[i].slots;
  return n;
}

/* A restart's hosts: the file read again (new hosts join), the lost ones
 * kept out; the world is what they hold, up to --np. */
static int refresh_hosts(launch_t *l) {
  launch_host_t fresh[MAX_HOSTS];
  int n;
  if (hostfile_read(l->o.hostfile, fresh, MAX_HOSTS, &n, 1) != 0) return -1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < l->nhosts; j++)
      if (!strcmp(fresh[i].name, l->hosts[j].name) && l->hosts[j].dead) fresh[i].dead = 1;
  memcpy(l->hosts, fresh, (size_t)n * sizeof *fresh);
  l->nhosts = n;
  return hostfile_write(l->live_hostfile, l->hosts, l->nhosts);
}

/* A host lost with all its ranks (its daemon unreachable): marked dead. */
static int host_lost(launch_t *l, const child_end_t *end, char *what, size_t cap) {
  int before = live_slots(l), placed = before < l->world ? before : l->world;
  for (int i = 0; i < l->nhosts; i++)
    if (!l->hosts[i].dead && !strcmp(l->hosts[i].name, end->lost_host)) l->hosts[i].dead = 1;
  int after = live_slots(l), now = after < l->world ? after : l->world;
  snprintf(what, cap, "host %s", end->lost_host);
  return placed - now;
}

/* How many ranks the loss took: the rank, or under a hostfile its host's
 * (which is marked dead); `what` names it. */
static int ranks_lost(launch_t *l, const child_end_t *end, char *what, size_t cap) {
  if (end->lost_rank < 0 && end->lost_host[0] && l->o.hostfile) return host_lost(l, end, what, cap);
  if (end->lost_rank < 0) {
    snprintf(what, cap, "the whole run (%s)", WIFSIGNALED(end->status) ? "killed by a signal" : "ended");
    return 0;
  }
  if (!l->o.hostfile) {
    snprintf(what, cap, "rank %d%s%s", end->lost_rank, end->lost_host[0] ? " on host " : "",
             end->lost_host);
    return 1;
  }
  int h = -1;
  for (int i = 0; i < l->nhosts && h < 0; i++)
    if (!l->hosts[i].dead && !strcmp(l->hosts[i].name, end->lost_host)) h = i;
  if (h < 0) h = hostfile_host_of_rank(l->hosts, l->nhosts, end->lost_rank);
  if (h < 0) {
    snprintf(what, cap, "rank %d", end->lost_rank);
    return 1;
  }
  int before = live_slots(l);
  int placed = before < l->world ? before : l->world;
  l->hosts[h].dead = 1;
  int after = live_slots(l);
  int now = after < l->world ? after : l->world;
  snprintf(what, cap, "rank %d and host %s", end->lost_rank, l->hosts[h].name);
  return placed - now > 0 ? placed - now : 1;
}

/* The train options on the world a loss leaves: a grid the remaining
 * ranks cannot form (--pp 2 on 3) ends launch with train's reason, before
 * a restart that train would refuse. */
static int check_new_world(const launch_t *l, int world, const char *what, const child_end_t *end) {
  train_config_t cfg;
  if (check_train_options(&l->o, world, &cfg) == 0) return 0;
  char why[512];
  snprintf(why, sizeof why, "%s", dt_errmsg());
  return dt_error("%s lost (%s): the run cannot go on on %d ranks (%s): giving up after %d restart%s",
                  what, end->lost_signal[0] ? end->lost_signal : "ended", world, why, l->restarts,
                  l->restarts == 1 ? "" : "s");
}

/* Whether the attempt's end is a loss to restart from; if so the new world. */
static int plan_restart(launch_t *l, const child_end_t *end, restart_t *r, char *what, size_t cap) {
  int lost = ranks_lost(l, end, what, cap);
  int world = l->world - lost;
  if (l->o.hostfile && (end->lost_rank >= 0 || end->lost_host[0])) {
    if (refresh_hosts(l) != 0) return -1;
    int slots = live_slots(l);
    world = slots < l->o.np ? slots : (int)l->o.np; /* new hosts may bring it back up */
  }
  *r = (restart_t){.restart = l->restarts + 1, .was = l->world, .world = world, .end = end, .what = what};
  if (world < l->o.min_np)
    return dt_error("%s lost (%s): %d rank%s, below --min-np %ld: giving up after %d restart%s",
                    what, end->lost_signal[0] ? end->lost_signal : "ended", world,
                    world == 1 ? " remains" : "s remain", l->o.min_np,
                    l->restarts, l->restarts == 1 ? "" : "s");
  if (l->restarts >= l->o.max_restarts)
    return dt_error("%s lost (%s): --max-restarts %ld reached: giving up", what,
                    end->lost_signal[0] ? end->lost_signal : "ended", l->o.max_restarts);
  if (world != l->world) return check_new_world(l, world, what, end);
  return 0;
}

static int attempt(launch_t *l, char *exe, char *resume, child_end_t *end) {
  cmdline_t c;
  char words[4096];
  DT_TRY(build_cmdline(&c, &l->o, l->mpi, l->world, exe, words, sizeof words,
                       l->o.hostfile ? l->live_hostfile : NULL, resume,
                       l->restarts > 0 && l->cfg.metrics[0]));
  return launch_run_child(c.argv, end);
}

/* The loop: an attempt, and while it lost ranks and may go on, another. */
static int run_launch(launch_t *l, char *exe) {
  char *resume = l->cfg.resume[0] ? l->cfg.resume : NULL;
  for (;;) {
    child_end_t end;
    DT_TRY(attempt(l, exe, resume, &end));
    int st = end.status;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (dt_interrupted()) return dt_error("interrupted by %s: not restarted", dt_signal_name(dt_interrupted()));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 2) {
      dt_error("train refused its options on %d ranks (the line above): not restarted", l->world);
      return TRAIN_REFUSED;
    }
    if (end.lost_rank < 0 && !(end.lost_host[0] && l->o.hostfile) && !WIFSIGNALED(st))
      return dt_error("the run failed (exit %d) without losing a rank: not restarted (a restart "
                      "would meet the same failure)", WEXITSTATUS(st));
    if (WIFSIGNALED(st) && end.lost_rank < 0 && !end.lost_host[0])
      snprintf(end.lost_signal, sizeof end.lost_signal, "%s",
               WTERMSIG(st) == 9 ? "SIGKILL" : WTERMSIG(st) == 15 ? "SIGTERM" : "a signal");
    restart_t r;
    char what[300];
    DT_TRY(plan_restart(l, &end, &r, what, sizeof what));
    resume = written_since(l->cfg.checkpoint, &l->ckpt_before) ? l->cfg.checkpoint
             : l->cfg.resume[0]                                 ? l->cfg.resume
                                                                : NULL;
    if (resume && read_resume_point(resume, &r.at) != 0) return -1;
    r.from = resume;
    restart_line(&r, l->o.max_restarts);
    DT_TRY(restart_record(l->cfg.metrics, &r)); /* the next attempt appends after it */
    l->restarts++;
    l->world = r.world;
  }
}

static int start(launch_t *l, int argc, char **argv) {
  DT_TRY(parse_launch(argc, argv, &l->o));
  l->world = (int)l->o.np;
  DT_TRY(check_train_options(&l->o, l->world, &l->cfg));
  l->mpi = l->cfg.comm == COMM_MPI;
  if (l->o.hostfile) {
    DT_TRY(hostfile_read(l->o.hostfile, l->hosts, MAX_HOSTS, &l->nhosts, 0));
    if (live_slots(l) < l->world) l->world = live_slots(l);
    if (l->world < l->o.min_np)
      return dt_error("--hostfile %s: its hosts hold %d slots, below --min-np %ld", l->o.hostfile,
                      live_slots(l), l->o.min_np);
  }
  l->ckpt_before = stamp(l->cfg.checkpoint);
  return 0;
}

int cmd_launch(int argc, char **argv) {
  for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(LAUNCH_HELP, stdout);
      return 0;
    }
  static launch_t l;
  if (start(&l, argc, argv) != 0) {
    fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
    return 2;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    fprintf(stderr, "dtrain launch: cannot find its own program (/proc/self/exe): %s\n", strerror(errno));
    return 1;
  }
  exe[n] = 0;
  char tmpl[] = "/tmp/dtrain-launch.XXXXXX";
  if (l.o.hostfile) { /* the live hosts' file mpirun reads, removed at the end */
    if (!mkdtemp(tmpl)) {
      fprintf(stderr, "dtrain launch: mkdtemp: %s\n", strerror(errno));
      return 1;
    }
    snprintf(l.live_hostfile, sizeof l.live_hostfile, "%s/hostfile", tmpl);
    if (hostfile_write(l.live_hostfile, l.hosts, l.nhosts) != 0) {
      fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
      rmdir(tmpl);
      return 1;
    }
  }
  dt_catch_interrupts();
  int rc = run_launch(&l, exe);
  if (l.o.hostfile) {
    unlink(l.live_hostfile);
    rmdir(tmpl);
  }
  if (rc == 0) return 0;
  fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
  if (rc == TRAIN_REFUSED) return 2;
  return dt_interrupted() ? 128 + dt_interrupted() : 1;
}
