#include "config.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPD_VERSION "0.1.0"

void spd_config_defaults(spd_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (geteuid() != 0 && xdg != NULL && xdg[0] != '\0')
    snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s/spcolld.sock",
             xdg);
  else
    snprintf(cfg->socket_path, sizeof(cfg->socket_path),
             "/run/spcolld/spcolld.sock");
  cfg->socket_mode = 0660;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  cfg->workers = cores > 0 ? (int)cores : 1;
  cfg->log_level = SPD_LOG_INFO;
  cfg->stuck_seconds = 60;
}

static int parse_int(const char *flag, const char *s, long lo, long hi,
                     int base, long *v_p, spk_err *err) {
  char *end;
  long v = strtol(s, &end, base);
  if (s[0] == '\0' || *end != '\0' || v < lo || v > hi)
    return spk_err_set(err, SPK_EINVAL, "%s: '%s' is not an integer in %ld..%ld",
                       flag, s, lo, hi);
  *v_p = v;
  return SPK_OK;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: spcolld [options]\n"
          "  --socket PATH      control socket (default /run/spcolld/"
          "spcolld.sock,\n"
          "                     $XDG_RUNTIME_DIR/spcolld.sock when not root)\n"
          "  --stats-socket PATH stats socket (default: spcolld.stats.sock\n"
          "                     beside the control socket)\n"
          "  --socket-mode MODE octal permissions of the sockets (0660)\n"
          "  --workers N        host mover threads (default: cores)\n"
          "  --stuck-seconds N  report ops pending longer than N s (60)\n"
          "  --log-level L      error, warn, info, debug (info)\n"
          "  --version, --help\n");
}

static int apply_opt(spd_config *cfg, int opt, const char *arg, spk_err *err) {
  long v;
  int rc = SPK_OK;
  switch (opt) {
  case 's':
    if (strlen(arg) >= sizeof(cfg->socket_path))
      return spk_err_set(err, SPK_EINVAL, "--socket: path of %zu bytes is "
                         "longer than %zu", strlen(arg),
                         sizeof(cfg->socket_path) - 1);
    snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s", arg);
    break;
  case 'S':
    if (strlen(arg) >= sizeof(cfg->stats_socket_path))
      return spk_err_set(err, SPK_EINVAL, "--stats-socket: path of %zu bytes "
                         "is longer than %zu", strlen(arg),
                         sizeof(cfg->stats_socket_path) - 1);
    snprintf(cfg->stats_socket_path, sizeof(cfg->stats_socket_path), "%s",
             arg);
    break;
  case 'm':
    rc = parse_int("--socket-mode", arg, 0, 0777, 8, &v, err);
    cfg->socket_mode = (unsigned)v;
    break;
  case 'w':
    rc = parse_int("--workers", arg, 1, 1024, 10, &v, err);
    cfg->workers = (int)v;
    break;
  case 'k':
    rc = parse_int("--stuck-seconds", arg, 1, 86400, 10, &v, err);
    cfg->stuck_seconds = (int)v;
    break;
  case 'l':
    v = spd_log_level_parse(arg);
    if (v < 0)
      return spk_err_set(err, SPK_EINVAL, "--log-level: '%s' is not one of "
                         "error, warn, info, debug", arg);
    cfg->log_level = (spd_log_level)v;
    break;
  }
  return rc;
}

int spd_config_parse_args(spd_config *cfg, int argc, char **argv,
                          spk_err *err) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"stats-socket", required_argument, NULL, 'S'},
      {"socket-mode", required_argument, NULL, 'm'},
      {"workers", required_argument, NULL, 'w'},
      {"stuck-seconds", required_argument, NULL, 'k'},
      {"log-level", required_argument, NULL, 'l'},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int opt;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (opt == 'h') {
      usage(stdout);
      return 1;
    }
    if (opt == 'V') {
      printf("spcolld %s\n", SPD_VERSION);
      return 1;
    }
    if (opt == '?' || opt == ':')
      return spk_err_set(err, SPK_EINVAL, "%s option '%s'",
                         opt == '?' ? "unknown" : "missing value for",
                         argv[optind - 1]);
    int rc = apply_opt(cfg, opt, optarg, err);
    if (rc < 0)
      return rc;
  }
  if (optind < argc)
    return spk_err_set(err, SPK_EINVAL, "unexpected argument '%s'",
                       argv[optind]);
  return spd_config_finish(cfg, err);
}

/* The stats socket lives beside the control socket unless set. */
int spd_config_finish(spd_config *cfg, spk_err *err) {
  if (cfg->stats_socket_path[0] != '\0')
    return SPK_OK;
  const char *slash = strrchr(cfg->socket_path, '/');
  int dir = slash ? (int)(slash - cfg->socket_path) + 1 : 0;
  int n = snprintf(cfg->stats_socket_path, sizeof(cfg->stats_socket_path),
                   "%.*sspcolld.stats.sock", dir, cfg->socket_path);
  if (n < 0 || (size_t)n >= sizeof(cfg->stats_socket_path))
    return spk_err_set(err, SPK_EINVAL, "stats socket path beside %s is too "
                       "long: set --stats-socket", cfg->socket_path);
  return SPK_OK;
}

void spd_config_dump(const spd_config *cfg, FILE *out) {
  fprintf(out, "socket %s\n", cfg->socket_path);
  fprintf(out, "stats_socket %s\n", cfg->stats_socket_path);
  fprintf(out, "socket_mode %04o\n", cfg->socket_mode);
  fprintf(out, "workers %d\n", cfg->workers);
  fprintf(out, "stuck_seconds %d\n", cfg->stuck_seconds);
  fprintf(out, "log_level %s\n", spd_log_level_name(cfg->log_level));
}
