/* Leveled logging to stderr (the journal under systemd). The level lives
 * in the daemon's context; macros check it before formatting. */
#ifndef SPD_LOG_H
#define SPD_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  SPD_LOG_ERROR = 0,
  SPD_LOG_WARN = 1,
  SPD_LOG_INFO = 2,
  SPD_LOG_DEBUG = 3
} spd_log_level;

typedef struct {
  spd_log_level level;
} spd_logger;

void spd_log_write(const spd_logger *lg, spd_log_level lvl, const char *file,
                   int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Parse "error".."debug"; -1 when unknown. */
int spd_log_level_parse(const char *s);
const char *spd_log_level_name(spd_log_level lvl);

/* Text a client or a peer sent (a command, a group name, a reason) as
 * it may appear in a log line: printable ASCII but for the backslash, each
 * other byte as \xNN, at most SPD_LOG_STR_MAX bytes of it and then
 * "...", so that it can neither start a line of its own (a forged
 * "drained") nor make one line long. buf of at least SPD_LOG_STR_SIZE
 * bytes holds the longest; a smaller one cuts the copy short. Returns
 * buf; NULL s reads "(none)". */
#define SPD_LOG_STR_MAX 128
#define SPD_LOG_STR_SIZE (SPD_LOG_STR_MAX * 4 + 4)
const char *spd_log_str(char *buf, size_t size, const char *s);

/* At most `burst` lines of one kind per window of `window_ns`: the lines a
 * client may cause as often as it likes (a refused command) cannot flood
 * the log. Zeroed to start. Loop thread only (it lives in the daemon's
 * context). */
typedef struct {
  uint64_t start_ns;        /* the current window's start */
  unsigned lines;           /* logged in it */
  uint64_t suppressed;      /* not logged in it */
} spd_log_limit;

/* Whether one more line may be logged at now; a line that may not is
 * counted. A window past its end ends first: *ended_p is set to how many
 * lines it did not log (0: none), for the caller to say so once. */
int spd_log_limit_take(spd_log_limit *l, uint64_t now, unsigned burst,
                       uint64_t window_ns, uint64_t *ended_p);
/* A window past its end at now ends: how many lines it did not log (0 when
 * none, or when it has not ended), so that a flood that stopped is still
 * told (the watchdog's tick asks). */
uint64_t spd_log_limit_end(spd_log_limit *l, uint64_t now,
                           uint64_t window_ns);

/* The daemon's limit for lines a client or a peer may cause at will (a
 * refused command, a refused peer message): SPD_REFUSED_BURST lines a
 * window of SPD_REFUSED_WINDOW_S. */
#define SPD_REFUSED_BURST 10
#define SPD_REFUSED_WINDOW_S 60
#define SPD_REFUSED_WINDOW_NS ((uint64_t)SPD_REFUSED_WINDOW_S * 1000000000u)
/* The one line that says n lines of `what` went unlogged in a window,
 * all of them counted in the stats' `counter`; nothing when n is 0. */
void spd_log_limit_told(const spd_logger *lg, uint64_t n, const char *what,
                        const char *counter);
/* One refusal a client or a peer may cause at will, at now: counted in
 * *count and logged at warn as "<prefix>: <fmt's text>" within l's limit;
 * a window that ended with unlogged lines is told first (as `what`,
 * counted in the stats' `counter`). */
void spd_log_refusal(const spd_logger *lg, spd_log_limit *l, uint64_t now,
                     uint64_t *count, const char *what, const char *counter,
                     const char *prefix, const char *fmt, va_list ap);

#define SPD_LOG(lg, lvl, ...)                                         \
  do {                                                                \
    if ((lvl) <= (lg)->level)                                         \
      spd_log_write((lg), (lvl), __FILE__, __LINE__, __VA_ARGS__);    \
  } while (0)

#define SPD_ERROR(lg, ...) SPD_LOG(lg, SPD_LOG_ERROR, __VA_ARGS__)
#define SPD_WARN(lg, ...) SPD_LOG(lg, SPD_LOG_WARN, __VA_ARGS__)
#define SPD_INFO(lg, ...) SPD_LOG(lg, SPD_LOG_INFO, __VA_ARGS__)
#define SPD_DEBUG(lg, ...) SPD_LOG(lg, SPD_LOG_DEBUG, __VA_ARGS__)

#endif
