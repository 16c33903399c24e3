#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *spd_log_level_name(spd_log_level lvl) {
  return (unsigned)lvl <= SPD_LOG_DEBUG ? level_names[lvl] : "?";
}

int spd_log_level_parse(const char *s) {
  for (int i = 0; i <= SPD_LOG_DEBUG; i++)
    if (strcmp(s, level_names[i]) == 0)
      return i;
  return -1;
}

/* One line per call, written with a single fprintf so lines from the mover
 * threads do not interleave mid-line. */
void spd_log_write(const spd_logger *lg, spd_log_level lvl, const char *file,
                   int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  (void)lg;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  fprintf(stderr, "spcolld %s %s:%d %s\n", spd_log_level_name(lvl),
          base ? base + 1 : file, line, msg);
}
