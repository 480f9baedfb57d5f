/* Per-thread error line and stderr logging. */
#include "dtrain/core.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char errbuf[1024];
int dt_log_level = DT_LOG_INFO;

int dt_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return -1;
}

/* Prepend context ("loading model.txt: ") to the message already set. */
int dt_error_prefix(const char *fmt, ...) {
  char prefix[512], old[sizeof errbuf];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, errbuf, sizeof old);
  size_t n = strlen(prefix);
  if (n >= sizeof errbuf) n = sizeof errbuf - 1;
  memcpy(errbuf, prefix, n);
  size_t room = sizeof errbuf - 1 - n, m = strlen(old);
  memcpy(errbuf + n, old, m < room ? m : room);
  errbuf[n + (m < room ? m : room)] = 0;
  return -1;
}

const char *dt_errmsg(void) { return errbuf[0] ? errbuf : "unknown error"; }
void dt_error_clear(void) { errbuf[0] = 0; }

void dt_log(int level, const char *fmt, ...) {
  if (level > dt_log_level) return;
  static const char *names[] = {"error", "warning", "info", "debug"};
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dtrain: %s%s%s\n", level <= DT_LOG_WARN ? names[level] : "",
          level <= DT_LOG_WARN ? ": " : "", line);
}
