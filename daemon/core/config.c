#include "config.h"

#include "engine.h"

#include <errno.h>
#include <getopt.h>
#include <grp.h>
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
  snprintf(cfg->mover, sizeof(cfg->mover), "auto");
  for (int k = 0; k < SPK_OP_COUNT; k++)
    cfg->fast_op_bytes[k] = -1;
  cfg->log_level = SPD_LOG_INFO;
  cfg->stuck_seconds = 60;
  cfg->join_timeout = 1800;
  cfg->max_world = 1024;
  cfg->client_max_groups = 1024;
  cfg->client_max_buffers = 4096;
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  cfg->client_max_bytes =
      pages > 0 && psize > 0 ? (long long)pages * psize : 1LL << 40;
  cfg->client_max_pending = 4096;
  cfg->client_max_frame_rate = 100000;
  cfg->peer_timeout = 30;
  spd_limits_defaults(cfg);
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

/* A group name or number; looked up once, at start. */
static int parse_gid(spd_config *cfg, const char *arg, spk_err *err) {
  if (cfg->noperator_gid == SPD_MAX_OPERATORS)
    return spk_err_set(err, SPK_EINVAL, "--operator-gid: at most %d groups",
                       SPD_MAX_OPERATORS);
  long v;
  if (arg[0] >= '0' && arg[0] <= '9') {
    int rc = parse_int("--operator-gid", arg, 0, INT_MAX, 10, &v, err);
    if (rc < 0)
      return rc;
  } else {
    struct group *gr = getgrnam(arg);
    if (gr == NULL)
      return spk_err_set(err, SPK_EINVAL, "--operator-gid: no group named "
                         "'%s'", arg);
    v = (long)gr->gr_gid;
  }
  cfg->operator_gid[cfg->noperator_gid++] = (unsigned)v;
  return SPK_OK;
}

/* "auto" or the name of an engine this spcolld was built with that runs
 * daemon work (not the fast row, whose ops the ranks run themselves). */
static int parse_mover(spd_config *cfg, const char *arg, spk_err *err) {
  int k = spd_engine_find(arg);
  if (strcmp(arg, "auto") != 0 && k < 0) {
    char names[128] = "auto";
    for (int i = 0; i < SPD_ENGINE_COUNT; i++)
      if (spd_engine_runs(i))
        snprintf(names + strlen(names), sizeof(names) - strlen(names),
                 ", %s", spd_engine_name(i));
    return spk_err_set(err, SPK_EINVAL, "--mover: '%s' is not one of %s",
                       arg, names);
  }
  if (k >= 0 && !spd_engines[k]->built)
    return spk_err_set(err, SPK_EINVAL, "--mover: %s, but spcolld was built "
                       "without it", arg);
  if (k >= 0 && !spd_engine_runs(k))
    return spk_err_set(err, SPK_EINVAL, "--mover: %s runs no daemon work "
                       "(its ops run in the clients); name a mover", arg);
  snprintf(cfg->mover, sizeof(cfg->mover), "%s", arg);
  return SPK_OK;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: spcolld [options]\n"
          "  --config PATH      settings file (default /etc/spcolld/"
          "spcolld.conf\n"
          "                     when it exists); flags override it\n"
          "  --socket PATH      control socket (default /run/spcolld/"
          "spcolld.sock,\n"
          "                     $XDG_RUNTIME_DIR/spcolld.sock when not root)\n"
          "  --stats-socket PATH stats socket (default: spcolld.stats.sock\n"
          "                     beside the control socket)\n"
          "  --socket-mode MODE octal permissions of the sockets (0660)\n"
          "  --workers N        host mover threads (default: cores)\n"

          "  --stuck-seconds N  report ops pending longer than N s (60)\n"
          "  --join-timeout N   a group incomplete after N s fails its joins "
          "(1800)\n"
          "  --metrics-port P   serve GET /metrics on 127.0.0.1:P (0: off)\n"
          "  --max-world N      largest group size (1024)\n"
          "  --socket-group G   group owning both sockets (default: ours)\n"
          "  --stats-socket-group G  group owning the stats socket\n"
          "  --client-max-frame-rate N  frames per second per client "
          "(100000)\n"
          "  --allow-uid U      may join any user's groups by qualified name\n"
          "                     @UID/NAME (repeat; root always may)\n"
          "  --operator-uid U, --operator-gid G  may drain and abort (repeat;\n"
          "                     root and the daemon's uid always may)\n"
          "  --client-max-groups N, --client-max-buffers N,\n"
          "  --client-max-bytes N, --client-max-pending N\n"
          "                     per-client limits (1024, 4096, RAM, 4096)\n"
          "  --log-level L      error, warn, info, debug (info)\n"
          "  --peers H:P,...    every node's daemon (UCX), by node index;\n"
          "                     unset: this node alone\n"
          "  --node-index I     this node's entry in --peers (0)\n"
          "  --ucx-listen A:P   where the peers' bootstrap (TCP) listens\n"
          "                     (default: this node's --peers entry)\n"
          "  --peer-key-file F  the node key every node shares: a file of\n"
          "                     32+ random bytes, mode 600 (default: the\n"
          "                     systemd credential peer-key); needed with "
          "--peers\n"
          "  --peer-timeout N   a peer silent for N s is lost (30)\n"
          "  --upgrade          take the sockets over from the spcolld\n"
          "                     running on them, which then stops; its\n"
          "                     clients reconnect here (operators only)\n"
          "  --version, --help\n");
  fprintf(out, "  --mover M          the engine an op goes to when it can run "
          "it, or auto\n                     (default); engines:");
  for (int i = 0; i < SPD_ENGINE_COUNT; i++)
    if (spd_engine_runs(i))
      fprintf(out, " %s", spd_engine_name(i));
  fputc('\n', out);
  fprintf(out, "  --fast-op-bytes OP=B,...  fast-path threshold of these ops "
          "(others:\n                     fast_bytes; '-': none)\n");
  spd_limits_usage(out);
}

/* Every setting is a flag; the config file's keys are the same names with
 * '_' for '-' (stats_socket = ...). */
static const struct option opts[] = {
    {"config", required_argument, NULL, 'c'},
    {"socket", required_argument, NULL, 's'},
    {"stats-socket", required_argument, NULL, 'S'},
    {"socket-mode", required_argument, NULL, 'm'},
    {"workers", required_argument, NULL, 'w'},
    {"mover", required_argument, NULL, 'E'},
    {"fast-op-bytes", required_argument, NULL, 'F'},
    {"stuck-seconds", required_argument, NULL, 'k'},
    {"join-timeout", required_argument, NULL, 'J'},
    {"metrics-port", required_argument, NULL, 'M'},
    {"max-world", required_argument, NULL, 'W'},
    {"socket-group", required_argument, NULL, 'g'},
    {"allow-uid", required_argument, NULL, 'u'},
    {"stats-socket-group", required_argument, NULL, 'T'},
    {"client-max-frame-rate", required_argument, NULL, 'R'},
    {"client-max-groups", required_argument, NULL, 'G'},
    {"client-max-buffers", required_argument, NULL, 'B'},
    {"client-max-bytes", required_argument, NULL, 'Y'},
    {"client-max-pending", required_argument, NULL, 'P'},
    {"log-level", required_argument, NULL, 'l'},
    {"peers", required_argument, NULL, 'p'},
    {"node-index", required_argument, NULL, 'n'},
    {"ucx-listen", required_argument, NULL, 'x'},
    {"peer-timeout", required_argument, NULL, 't'},
    {"peer-key-file", required_argument, NULL, 'K'},
    {"operator-uid", required_argument, NULL, 'O'},
    {"operator-gid", required_argument, NULL, 'Q'},
    {"upgrade", no_argument, NULL, 'U'},
    {"version", no_argument, NULL, 'V'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

static int apply_opt(spd_config *cfg, int opt, const char *arg, spk_err *err) {
  long v;
  int rc = SPK_OK;
  switch (opt) {
  case 'c':
    break; /* read before the other flags, in spd_config_parse_args */
  case 'U':
    cfg->upgrade = 1;
    break;
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
  case 'E':
    rc = parse_mover(cfg, arg, err);
    break;
  case 'F':
    rc = spd_config_fast_ops(cfg, arg, err);
    break;
  case 'g':
    if (strlen(arg) >= sizeof(cfg->socket_group))
      return spk_err_set(err, SPK_EINVAL, "--socket-group: '%s' is too long",
                         arg);
    snprintf(cfg->socket_group, sizeof(cfg->socket_group), "%s", arg);
    break;
  case 'T':
    if (strlen(arg) >= sizeof(cfg->stats_socket_group))
      return spk_err_set(err, SPK_EINVAL, "--stats-socket-group: '%s' is too "
                         "long", arg);
    snprintf(cfg->stats_socket_group, sizeof(cfg->stats_socket_group), "%s",
             arg);
    break;
  case 'R':
    rc = parse_int("--client-max-frame-rate", arg, 1, 100000000, 10, &v, err);
    cfg->client_max_frame_rate = (int)v;
    break;
  case 'u':
    if (cfg->nallow_uid == 16)
      return spk_err_set(err, SPK_EINVAL, "--allow-uid: at most 16 uids");
    rc = parse_int("--allow-uid", arg, 0, INT_MAX, 10, &v, err);
    cfg->allow_uid[cfg->nallow_uid++] = (unsigned)v;
    break;
  case 'O':
    if (cfg->noperator_uid == SPD_MAX_OPERATORS)
      return spk_err_set(err, SPK_EINVAL, "--operator-uid: at most %d uids",
                         SPD_MAX_OPERATORS);
    rc = parse_int("--operator-uid", arg, 0, INT_MAX, 10, &v, err);
    cfg->operator_uid[cfg->noperator_uid++] = (unsigned)v;
    break;
  case 'Q':
    rc = parse_gid(cfg, arg, err);
    break;
  case 'W':
    rc = parse_int("--max-world", arg, 1, 65536, 10, &v, err);
    cfg->max_world = (int)v;
    break;
  case 'G':
    rc = parse_int("--client-max-groups", arg, 1, 1 << 20, 10, &v, err);
    cfg->client_max_groups = (int)v;
    break;
  case 'B':
    rc = parse_int("--client-max-buffers", arg, 1, 1 << 20, 10, &v, err);
    cfg->client_max_buffers = (int)v;
    break;
  case 'Y':
    rc = parse_int("--client-max-bytes", arg, 1, LONG_MAX, 10, &v, err);
    cfg->client_max_bytes = v;
    break;
  case 'P':
    rc = parse_int("--client-max-pending", arg, 1, 1 << 20, 10, &v, err);
    cfg->client_max_pending = (int)v;
    break;
  case 'M':
    rc = parse_int("--metrics-port", arg, 0, 65535, 10, &v, err);
    cfg->metrics_port = (int)v;
    break;
  case 'J':
    rc = parse_int("--join-timeout", arg, 1, 86400 * 7, 10, &v, err);
    cfg->join_timeout = (int)v;
    break;
  case 'k':
    rc = parse_int("--stuck-seconds", arg, 1, 86400, 10, &v, err);
    cfg->stuck_seconds = (int)v;
    break;
  case 'p':
    rc = spd_parse_peers(cfg, arg, err);
    break;
  case 'n':
    rc = parse_int("--node-index", arg, 0, SPD_MAX_NODES - 1, 10, &v, err);
    cfg->node_index = (int)v;
    break;
  case 'x':
    rc = spd_parse_hostport("--ucx-listen", arg, &cfg->ucx_listen, err);
    break;
  case 'K':
    if (strlen(arg) >= sizeof(cfg->peer_key_file) || arg[0] == '\0')
      return spk_err_set(err, SPK_EINVAL, "--peer-key-file: path of %zu "
                         "bytes is empty or longer than %zu", strlen(arg),
                         sizeof(cfg->peer_key_file) - 1);
    snprintf(cfg->peer_key_file, sizeof(cfg->peer_key_file), "%s", arg);
    break;
  case 't':
    rc = parse_int("--peer-timeout", arg, 1, 86400, 10, &v, err);
    cfg->peer_timeout = (int)v;
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

/* One "key = value" line; blank lines and '#' comments are skipped. */
static int config_line(spd_config *cfg, char *line, const char *path, int n,
                       spk_err *err) {
  char *p = line + strspn(line, " \t");
  if (*p == '#' || *p == '\n' || *p == '\0')
    return SPK_OK;
  char *eq = strchr(p, '=');
  if (eq == NULL)
    return spk_err_set(err, SPK_EINVAL, "%s:%d: expected 'key = value'", path,
                       n);
  char *key = p, *val = eq + 1, *end = eq;
  while (end > key && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  *end = '\0';
  val += strspn(val, " \t");
  val[strcspn(val, "\r\n")] = '\0';
  for (char *v = val + strlen(val); v > val && (v[-1] == ' ' || v[-1] == '\t');)
    *--v = '\0';
  for (const struct option *o = opts; o->name; o++) {
    char name[32];
    snprintf(name, sizeof(name), "%s", o->name);
    for (char *c = name; *c; c++)
      *c = *c == '-' ? '_' : *c;
    if (o->has_arg != required_argument || o->val == 'c' ||
        strcmp(name, key) != 0)
      continue;
    spk_err why;
    if (apply_opt(cfg, o->val, val, &why) < 0)
      return spk_err_set(err, SPK_EINVAL, "%s:%d: key %s: %s", path, n, key,
                         why.msg);
    return SPK_OK;
  }
  for (int i = 0; i < spd_nlimits; i++) {
    if (strcmp(spd_limit_defs[i].field, key) != 0)
      continue;
    spk_err why;
    if (spd_limit_apply(cfg, i, val, &why) < 0)
      return spk_err_set(err, SPK_EINVAL, "%s:%d: key %s: %s", path, n, key,
                         why.msg);
    return SPK_OK;
  }
  return spk_err_set(err, SPK_EINVAL, "%s:%d: unknown key '%s'", path, n, key);
}

int spd_config_load(spd_config *cfg, const char *path, int must_exist,
                    spk_err *err) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return !must_exist && errno == ENOENT
               ? SPK_OK
               : spk_err_set(err, SPK_EINVAL, "cannot read config %s: %s",
                             path, strerror(errno));
  char line[512];
  int n = 0, rc = SPK_OK;
  while (rc == SPK_OK && fgets(line, sizeof(line), f) != NULL)
    rc = config_line(cfg, line, path, ++n, err);
  fclose(f);
  return rc;
}

/* --config is read first wherever it stands, so every flag overrides the
 * file. */
static int config_from_args(spd_config *cfg, int argc, char **argv,
                            spk_err *err) {
  const char *path = SPD_DEFAULT_CONFIG;
  int given = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      path = argv[i + 1], given = 1;
    else if (strncmp(argv[i], "--config=", 9) == 0)
      path = argv[i] + 9, given = 1;
  }
  return spd_config_load(cfg, path, given, err);
}

int spd_config_parse_args(spd_config *cfg, int argc, char **argv,
                          spk_err *err) {
  int rc = config_from_args(cfg, argc, argv, err);
  if (rc < 0)
    return rc;
  /* The fixed options, then one per limit (values from LIMIT_OPT up). */
  enum { NOPTS = sizeof(opts) / sizeof(opts[0]) - 1, LIMIT_OPT = 1000 };
  struct option all[NOPTS + SPD_MAX_LIMITS + 1];
  memcpy(all, opts, NOPTS * sizeof(all[0]));
  for (int i = 0; i < spd_nlimits; i++)
    all[NOPTS + i] = (struct option){spd_limit_defs[i].flag,
                                     required_argument, NULL, LIMIT_OPT + i};
  all[NOPTS + spd_nlimits] = (struct option){NULL, 0, NULL, 0};
  int opt;
  optind = 1;
  opterr = 0;
  while ((opt = getopt_long(argc, argv, ":", all, NULL)) != -1) {
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
    int rc = opt >= LIMIT_OPT
                 ? spd_limit_apply(cfg, opt - LIMIT_OPT, optarg, err)
                 : apply_opt(cfg, opt, optarg, err);
    if (rc < 0)
      return rc;
  }
  if (optind < argc)
    return spk_err_set(err, SPK_EINVAL, "unexpected argument '%s'",
                       argv[optind]);
  return spd_config_finish(cfg, err);
}

/* A daemon that peers must authenticate its peers: without
 * --peer-key-file, the systemd credential "peer-key" (LoadCredential=)
 * is the key; with neither, it does not start. */
static int peer_key_default(spd_config *cfg, spk_err *err) {
  if (cfg->npeers == 0 || cfg->peer_key_file[0] != '\0')
    return SPK_OK;
  const char *dir = getenv("CREDENTIALS_DIRECTORY");
  if (dir != NULL && dir[0] != '\0') {
    int n = snprintf(cfg->peer_key_file, sizeof(cfg->peer_key_file),
                     "%s/peer-key", dir);
    if (n > 0 && (size_t)n < sizeof(cfg->peer_key_file) &&
        access(cfg->peer_key_file, F_OK) == 0)
      return SPK_OK;
    cfg->peer_key_file[0] = '\0';
  }
  return spk_err_set(err, SPK_EINVAL, "--peers needs --peer-key-file (or the "
                     "systemd credential peer-key): the key every node "
                     "shares, which authenticates peer daemons. Make one "
                     "and copy it to every node: head -c 32 /dev/urandom > "
                     "/etc/spcoll/peer.key && chmod 600 "
                     "/etc/spcoll/peer.key");
}

/* The stats socket lives beside the control socket unless set; the
 * peers' bootstrap listens at this node's --peers entry unless set. */
int spd_config_finish(spd_config *cfg, spk_err *err) {
  if (cfg->npeers > 0 && cfg->node_index >= cfg->npeers)
    return spk_err_set(err, SPK_EINVAL, "--node-index %d is not an entry of "
                       "--peers, which lists %d nodes", cfg->node_index,
                       cfg->npeers);
  if (cfg->npeers > 0 && cfg->ucx_listen.port == 0)
    cfg->ucx_listen = cfg->peers[cfg->node_index];
  int rc = peer_key_default(cfg, err);
  if (rc < 0)
    return rc;
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
  fprintf(out, "mover %s\n", cfg->mover);
  fprintf(out, "stuck_seconds %d\n", cfg->stuck_seconds);
  fprintf(out, "join_timeout %d\n", cfg->join_timeout);
  fprintf(out, "metrics_port %d\n", cfg->metrics_port);
  fprintf(out, "max_world %d\n", cfg->max_world);
  fprintf(out, "socket_group %s\n", cfg->socket_group[0] ? cfg->socket_group
                                                         : "-");
  fprintf(out, "stats_socket_group %s\n",
          cfg->stats_socket_group[0] ? cfg->stats_socket_group : "-");
  fprintf(out, "client_max_frame_rate %d\n", cfg->client_max_frame_rate);
  for (int i = 0; i < cfg->nallow_uid; i++)
    fprintf(out, "allow_uid %u\n", cfg->allow_uid[i]);
  fprintf(out, "client_max_groups %d\n", cfg->client_max_groups);
  fprintf(out, "client_max_buffers %d\n", cfg->client_max_buffers);
  fprintf(out, "client_max_bytes %lld\n", cfg->client_max_bytes);
  fprintf(out, "client_max_pending %d\n", cfg->client_max_pending);
  fprintf(out, "log_level %s\n", spd_log_level_name(cfg->log_level));
  fprintf(out, "peers ");
  for (int i = 0; i < cfg->npeers; i++)
    fprintf(out, "%s%s:%d", i ? "," : "", cfg->peers[i].host,
            cfg->peers[i].port);
  fprintf(out, "%s\n", cfg->npeers ? "" : "-");
  fprintf(out, "node_index %d\n", cfg->node_index);
  if (cfg->npeers > 0)
    fprintf(out, "ucx_listen %s:%d\n", cfg->ucx_listen.host,
            cfg->ucx_listen.port);
  fprintf(out, "peer_timeout %d\n", cfg->peer_timeout);
  if (cfg->peer_key_file[0] != '\0')
    fprintf(out, "peer_key_file %s\n", cfg->peer_key_file);
  for (int i = 0; i < cfg->noperator_uid; i++)
    fprintf(out, "operator_uid %u\n", cfg->operator_uid[i]);
  for (int i = 0; i < cfg->noperator_gid; i++)
    fprintf(out, "operator_gid %u\n", cfg->operator_gid[i]);
  spd_config_fast_dump(cfg, out);
  spd_limits_dump(cfg, out);
}
