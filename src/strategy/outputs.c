/* What a run may write: its outputs are regular files that dtrain wrote
 * itself, or new ones, and no output is another output or an input.
 * Checked before anything runs, so a wrong path costs nothing. */
#include <string.h>

#include "dtrain/train.h"

#define CHECKPOINT_MAGIC "\"format\":\"dtrain-checkpoint-1\""
#define METRICS_MAGIC "{\"event\":\""
#define TRACE_MAGIC "{\"traceEvents\":["

static int check_one(const char *opt, const char *path, const char *magic) {
  if (!path[0]) return 0;
  if (file_check_output(path, magic) != 0) return dt_error_prefix("option %s: ", opt);
  return 0;
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
  if (cfg->checkpoint_dir[0] && file_check_regular(cfg->checkpoint_dir) == 0 &&
      ((cfg->checkpoint[0] && file_same(cfg->checkpoint_dir, cfg->checkpoint)) ||
       (cfg->metrics[0] && file_same(cfg->checkpoint_dir, cfg->metrics))))
    return dt_error("option --checkpoint-dir %s is also another output", cfg->checkpoint_dir);
  return 0;
}
