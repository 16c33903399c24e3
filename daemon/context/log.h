/* Leveled logging to stderr (the journal under systemd). The level lives
 * in the daemon's context; macros check it before formatting. */
#ifndef SPD_LOG_H
#define SPD_LOG_H

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
