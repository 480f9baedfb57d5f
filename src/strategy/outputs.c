/* What a run may write: its outputs are regular files that dtrain wrote
 * itself, or new ones, and no output is another output or an input.
 * Checked before anything runs, so a wrong path costs nothing. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain/train.h"

#define CHECKPOINT_MAGIC "\"format\":\"dtrain-checkpoint-1\""
#define METRICS_MAGIC "{\"event\":\""
#define TRACE_MAGIC "{\"traceEvents\":["
/* the files of --checkpoint-dir, as ps_ckpt.c writes them */
#define MANIFEST_MAGIC "\"format\":\"dtrain-ps-manifest-1\""
#define SHARD_MAGIC "\"format\":\"dtrain-ps-shard-1\""
#define BUFFERS_MAGIC "\"format\":\"dtrain-ps-buffers-1\""
#define TMP_SUFFIX ".dtrain-tmp"

static int check_one(const char *opt, const char *path, const char *magic) {
  if (!path[0]) return 0;
  if (file_check_output(path, magic) != 0) return dt_error_prefix("option %s: ", opt);
  return 0;
}

/* The names --checkpoint-dir gives its epoch files (ps_ckpt.c), whole. */
static int is_shard_name(const char *name) {
  int k, n, e, end = -1;
  sscanf(name, "shard-%d-of-%d.e%d.safetensors%n", &k, &n, &e, &end);
  return end >= 0 && !name[end];
}

static int is_buffers_name(const char *name) {
  int e, end = -1;
  sscanf(name, "buffers.e%d.safetensors%n", &e, &end);
  return end >= 0 && !name[end];
}

/* The mark of dtrain's own file for a name that --checkpoint-dir writes or
 * removes (any epoch, any number of servers), "" for a leftover temporary
 * (replaced whole, so only its kind is checked), NULL for other names. */
static const char *dir_output_magic(const char *name) {
  size_t n = strlen(name), t = strlen(TMP_SUFFIX);
  char base[256];
  if (n >= sizeof base) return NULL;
  if (n > t && !strcmp(name + n - t, TMP_SUFFIX)) {
    snprintf(base, sizeof base, "%.*s", (int)(n - t), name);
    return dir_output_magic(base) ? "" : NULL;
  }
  if (!strcmp(name, "manifest.json")) return MANIFEST_MAGIC;
  if (is_shard_name(name)) return SHARD_MAGIC;
  if (is_buffers_name(name)) return BUFFERS_MAGIC;
  return NULL;
}

static const char *not_folder_kind(mode_t m) {
  return S_ISREG(m) ? "a file" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISFIFO(m) ? "a pipe"
                                                                        : "not a folder";
}

/* --checkpoint-dir DIR: a folder (a new one where a folder may be made),
 * in which every file a run would replace or remove is dtrain's own:
 * --checkpoint's rule, applied before training to the whole folder. */
static int check_checkpoint_dir(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno != ENOENT) return dt_error("%s: cannot check it: %s", dir, strerror(errno));
    return file_check_writable_dir(dir);
  }
  if (stat(dir, &st) != 0)
    return dt_error("%s: a symbolic link to nothing; --checkpoint-dir takes a folder", dir);
  if (!S_ISDIR(st.st_mode))
    return dt_error("%s: exists and is %s; --checkpoint-dir takes a folder (choose another path)",
                    dir, not_folder_kind(st.st_mode));
  if (access(dir, W_OK | X_OK) != 0) return dt_error("%s: cannot be written: %s", dir, strerror(errno));
  DIR *d = opendir(dir);
  if (!d) return dt_error("%s: cannot list it: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    const char *magic = dir_output_magic(e->d_name);
    char path[4096];
    if (!magic) continue;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
      rc = dt_error("%s: path too long", dir);
    else rc = magic[0] ? file_check_output(path, magic) : file_check_regular(path);
  }
  closedir(d);
  return rc;
}

int train_check_outputs(const train_config_t *cfg) {
  DT_TRY(check_one("--checkpoint", cfg->checkpoint, CHECKPOINT_MAGIC));
  DT_TRY(check_one("--metrics", cfg->metrics, METRICS_MAGIC));
  DT_TRY(check_one("--trace", cfg->trace, TRACE_MAGIC));
  if (cfg->trace[0] && file_check_writable_dir(cfg->trace) != 0) return dt_error_prefix("option --trace: ");
  if (cfg->trace[0] && ((cfg->metrics[0] && file_same(cfg->trace, cfg->metrics)) ||
                        (cfg->checkpoint[0] && file_same(cfg->trace, cfg->checkpoint))))
    return dt_error("option --trace %s is also another output", cfg->trace);
  if (cfg->checkpoint[0] && cfg->metrics[0] && file_same(cfg->checkpoint, cfg->metrics))
    return dt_error("options --checkpoint and --metrics name the same file %s: each output "
                    "needs its own", cfg->metrics);
  if (cfg->resume[0] && cfg->metrics[0] && file_same(cfg->resume, cfg->metrics))
    return dt_error("options --resume and --metrics name the same file %s: the metrics "
                    "would overwrite the checkpoint", cfg->metrics);
  if (cfg->checkpoint_dir[0] && check_checkpoint_dir(cfg->checkpoint_dir) != 0)
    return dt_error_prefix("option --checkpoint-dir: ");
  if (cfg->checkpoint_dir[0] && file_check_regular(cfg->checkpoint_dir) == 0 &&
      ((cfg->checkpoint[0] && file_same(cfg->checkpoint_dir, cfg->checkpoint)) ||
       (cfg->metrics[0] && file_same(cfg->checkpoint_dir, cfg->metrics))))
    return dt_error("option --checkpoint-dir %s is also another output", cfg->checkpoint_dir);
  return 0;
}
