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

/* Appends byte c to out[*n] as itself or as \xNN (escape: whether it
 * is to be escaped), if the whole of it fits with the NUL after it. */
static int put_byte(char *out, size_t size, size_t *n, unsigned char c,
                    int escape) {
  static const char hex[] = "0123456789abcdef";
  size_t need = escape ? 4 : 1;
  if (*n + need >= size)
    return 0;
  if (escape) {
    out[(*n)++] = '\\', out[(*n)++] = 'x';
    out[(*n)++] = hex[c >> 4], out[(*n)++] = hex[c & 15];
  } else {
    out[(*n)++] = (char)c;
  }
  return 1;
}

/* The copy keeps room for the "..." that says it was cut. */
const char *spd_log_str(char *buf, size_t size, const char *s) {
  size_t n = 0, i = 0;
  if (size < 4) {
    if (size > 0)
      buf[0] = '\0';
    return buf;
  }
  if (s == NULL)
    s = "(none)";
  for (; s[i] != '\0' && i < SPD_LOG_STR_MAX; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!put_byte(buf, size - 3, &n, c, c < 0x20 || c > 0x7e || c == '\\'))
      break;
  }
  if (s[i] != '\0')
    memcpy(buf + n, "...", 3), n += 3;
  buf[n] = '\0';
  return buf;
}

int spd_log_limit_take(spd_log_limit *l, uint64_t now, unsigned burst,
                       uint64_t window_ns, uint64_t *ended_p) {
  *ended_p = spd_log_limit_end(l, now, window_ns);
  if (l->lines == 0 && l->suppressed == 0)
    l->start_ns = now; /* the first line of a window starts it */
  if (l->lines < burst) {
    l->lines++;
    return 1;
  }
  l->suppressed++;
  return 0;
}

uint64_t spd_log_limit_end(spd_log_limit *l, uint64_t now,
                           uint64_t window_ns) {
  if ((l->lines == 0 && l->suppressed == 0) || now - l->start_ns < window_ns)
    return 0;
  uint64_t n = l->suppressed;
  *l = (spd_log_limit){0};
  return n;
}

void spd_log_limit_told(const spd_logger *lg, uint64_t n, const char *what,
                        const char *counter) {
  if (n > 0)
    SPD_WARN(lg, "%llu more %s not logged in %d s (%s counts every one)",
             (unsigned long long)n, what, SPD_REFUSED_WINDOW_S, counter);
}

void spd_log_refusal(const spd_logger *lg, spd_log_limit *l, uint64_t now,
                     uint64_t *count, const char *what, const char *counter,
                     const char *prefix, const char *fmt, va_list ap) {
  uint64_t ended;
  (*count)++;
  int log = spd_log_limit_take(l, now, SPD_REFUSED_BURST,
                               SPD_REFUSED_WINDOW_NS, &ended);
  spd_log_limit_told(lg, ended, what, counter);
  if (!log || SPD_LOG_WARN > lg->level)
    return;
  char text[512];
  if (vsnprintf(text, sizeof(text), fmt, ap) < 0)
    snprintf(text, sizeof(text), "(vsnprintf of the reason failed)");
  SPD_WARN(lg, "%s: %s", prefix, text);
}

/* One line per call, written with a single fprintf so lines from the mover
 * threads do not interleave mid-line. Control bytes are escaped whatever
 * the message holds: text from a client or a peer that reached it
 * unescaped still cannot start a line of its own. */
void spd_log_write(const spd_logger *lg, spd_log_level lvl, const char *file,
                   int line, const char *fmt, ...) {
  char msg[1024], out[1024];
  va_list ap;
  (void)lg;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  size_t n = 0;
  for (const char *p = msg; *p != '\0'; p++) {
    unsigned char c = (unsigned char)*p;
    if (!put_byte(out, sizeof(out), &n, c, c < 0x20 || c == 0x7f))
      break;
  }
  out[n] = '\0';
  const char *base = strrchr(file, '/');
  fprintf(stderr, "spcolld %s %s:%d %s\n", spd_log_level_name(lvl),
          base ? base + 1 : file, line, out);
}
