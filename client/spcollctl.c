/* spcollctl: ask a running spcolld how it is doing, over its stats
 * socket. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: spcollctl [--socket PATH | --stats-socket PATH] COMMAND\n"
          "commands:\n"
          "  status         version, uptime, counts\n"
          "  stats [--json] everything, as name-value lines or JSON\n"
          "  groups         groups, their state and pending ops\n"
          "  clients        connected clients\n"
          "  metrics        Prometheus text exposition format\n"
          "  abort GROUP    fail the group's pending and future ops on every\n"
          "                 rank with \"aborted by operator\"\n"
          "  drain          no new groups or ops; the daemon exits once the\n"
          "                 ops in flight are done\n"
          "The stats socket defaults to spcolld.stats.sock beside the control\n"
          "socket ($SPCOLL_SOCKET or the daemon's default).\n");
}

/* spcolld.stats.sock in the directory of the control socket. */
static void stats_path_beside(const char *control, char *buf, size_t len) {
  const char *slash = strrchr(control, '/');
  int dir = slash ? (int)(slash - control) + 1 : 0;
  snprintf(buf, len, "%.*sspcolld.stats.sock", dir, control);
}

static int fetch(const char *path, const char *format, char **text_p) {
  spc_client *c;
  int rc = spc_connect(path, "spcollctl", &c);
  if (rc < 0) {
    fprintf(stderr, "spcollctl: %s\n", spc_last_error(NULL));
    return rc;
  }
  Spcoll__StatsRequest rq = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  Spcoll__Frame *reply = NULL;
  rq.format = (char *)format;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &rq;
  rc = spc__call(c, &f, -1, &reply);
  if (rc == SPC_OK && reply->body_case == SPCOLL__FRAME__BODY_STATS_REPLY)
    *text_p = strdup(reply->stats_reply->text);
  else if (rc == SPC_OK)
    rc = SPC_EPROTOCOL;
  if (rc < 0)
    fprintf(stderr, "spcollctl: %s\n", spc_last_error(c));
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  spc_disconnect(c);
  return rc;
}

/* Print the lines of one "# name" section of the text stats. */
static void print_section(const char *text, const char *name) {
  char head[64];
  snprintf(head, sizeof(head), "# %s\n", name);
  const char *p = strstr(text, head);
  if (p == NULL)
    return;
  p += strlen(head);
  const char *end = strstr(p, "\n# ");
  fwrite(p, 1, end ? (size_t)(end - p) + 1 : strlen(p), stdout);
}

static int send_control(const char *path, const char *cmd, const char *group) {
  spc_client *c;
  if (spc_connect(path, "spcollctl", &c) < 0) {
    fprintf(stderr, "spcollctl: %s\n", spc_last_error(NULL));
    return 1;
  }
  Spcoll__Control ctl = SPCOLL__CONTROL__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  ctl.command = (char *)cmd;
  ctl.group = (char *)(group ? group : "");
  f.body_case = SPCOLL__FRAME__BODY_CONTROL;
  f.control = &ctl;
  int rc = spc__call(c, &f, -1, NULL);
  if (rc < 0)
    fprintf(stderr, "spcollctl: %s: %s\n", cmd, spc_last_error(c));
  spc_disconnect(c);
  return rc < 0;
}

static int run(const char *path, const char *cmd, int json) {
  const char *format = json ? "json"
                       : strcmp(cmd, "metrics") == 0 ? "prometheus" : "text";
  char *text = NULL;
  int rc = fetch(path, format, &text);
  if (rc < 0)
    return 1;
  if (strcmp(cmd, "groups") == 0 || strcmp(cmd, "clients") == 0) {
    print_section(text, cmd);
  } else if (strcmp(cmd, "status") == 0 && !json) {
    print_section(text, "server");
    print_section(text, "counters");
  } else {
    fputs(text, stdout);
  }
  free(text);
  return 0;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"stats-socket", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  char control[108], path[128] = "";
  int json = 0, opt;
  spc_default_socket(control, sizeof(control));
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (opt == 's')
      snprintf(control, sizeof(control), "%s", optarg);
    else if (opt == 'S')
      snprintf(path, sizeof(path), "%s", optarg);
    else if (opt == 'j')
      json = 1;
    else {
      usage(opt == 'h' ? stdout : stderr);
      return opt == 'h' ? 0 : 2;
    }
  }
  static const char *const cmds[] = {"status", "stats", "groups", "clients",
                                     "metrics", "drain", "abort"};
  const char *cmd = optind < argc ? argv[optind] : "status";
  int known = 0, nargs = strcmp(cmd, "abort") == 0 ? 1 : 0;
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
    known |= strcmp(cmd, cmds[i]) == 0;
  if (!known || argc - optind - 1 != nargs) {
    fprintf(stderr, "spcollctl: %s '%s'\n",
            known ? "wrong number of arguments for" : "unknown command", cmd);
    usage(stderr);
    return 2;
  }
  if (path[0] == '\0')
    stats_path_beside(control, path, sizeof(path));
  if (strcmp(cmd, "abort") == 0 || strcmp(cmd, "drain") == 0)
    return send_control(path, cmd, nargs ? argv[optind + 1] : NULL);
  return run(path, cmd, json);
}
