/* Several daemons that peer over UCX on loopback: one "node" each, with its
 * own socket and UCX port. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* A free port below the kernel's ephemeral range (32768 up), so that no
 * socket UCX or a client opens meanwhile can take it; random so parallel
 * runs do not collide. */
static int free_port(void) {
  static unsigned seed;
  if (seed == 0)
    seed = (unsigned)getpid() * 2654435761u;
  for (int tries = 0; tries < 200; tries++) {
    int port = 20000 + (int)(rand_r(&seed) % 12000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      perror("socket");
      return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    if (ok)
      return port;
  }
  fprintf(stderr, "no free port in 20000..31999\n");
  return -1;
}

/* A node key of 32 random bytes in a file only we may read. */
static int key_make(spt_nodes *N) {
  snprintf(N->key, sizeof(N->key), "/tmp/spt-peer-key.XXXXXX");
  int fd = mkstemp(N->key); /* mode 0600 */
  uint8_t key[32];
  if (fd < 0 || getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key) ||
      write(fd, key, sizeof(key)) != (ssize_t)sizeof(key)) {
    perror("node key");
    if (fd >= 0)
      close(fd);
    return -1;
  }
  return close(fd);
}

static int node_launch(spt_nodes *N, int i, int again) {
  char index[16];
  snprintf(index, sizeof(index), "%d", i);
  const char *argv[24] = {"--peers", N->peers, "--node-index", index,
                          "--peer-key-file", N->key};
  int n = 6;
  for (int k = 0; N->extra[k] != NULL && n < 23; k++)
    argv[n++] = N->extra[k];
  argv[n] = NULL;
  return again ? spt_daemon_restart(&N->d[i], argv)
               : spt_daemon_start(&N->d[i], argv);
}

int spt_node_start(spt_nodes *N, int i) {
  return node_launch(N, i, 0);
}

int spt_node_restart(spt_nodes *N, int i) {
  return node_launch(N, i, 1);
}

int spt_node_upgrade(spt_nodes *N, int i) {
  spt_daemon *old = &N->d[i], young;
  char index[16], stats[160];
  snprintf(index, sizeof(index), "%d", i);
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", old->dir);
  const char *argv[32] = {"--peers", N->peers, "--node-index", index,
                          "--peer-key-file", N->key, "--socket",
                          old->socket, "--stats-socket", stats, "--upgrade"};
  int n = 11, st = 0;
  for (int k = 0; N->extra[k] != NULL && n < 31; k++)
    argv[n++] = N->extra[k];
  argv[n] = NULL;
  if (spt_daemon_start(&young, argv) != 0 ||
      waitpid(old->pid, &st, 0) != old->pid)
    return -1;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    spt_daemon_dump_log(old);
    return -1;
  }
  /* The new daemon, on the old one's sockets, in the old folder (which
   * spt_nodes_stop removes once it stopped); its log moves there too. */
  if (rename(young.log, old->log) != 0 || rmdir(young.dir) != 0)
    perror("moving the upgraded node's log");
  snprintf(young.dir, sizeof(young.dir), "%s", old->dir);
  snprintf(young.log, sizeof(young.log), "%s", old->log);
  *old = young;
  return 0;
}

/* The --peers list: the nodes' own addresses (SPT_NODE_HOSTS, port 7410
 * each) or loopback with free ports, all distinct. */
static int peers_list(spt_nodes *N, int n) {
  const char *hosts = getenv("SPT_NODE_HOSTS");
  int ports[SPT_MAX_NODES];
  size_t used = 0;
  N->peers[0] = '\0';
  for (int i = 0; i < n; i++) {
    char host[64] = "127.0.0.1";
    int port = 7410;
    if (hosts != NULL) {
      const char *h = hosts;
      for (int k = 0; k < i && h != NULL; k++)
        h = strchr(h, ',') ? strchr(h, ',') + 1 : NULL;
      if (h == NULL)
        return -1;
      snprintf(host, sizeof(host), "%.*s", (int)strcspn(h, ","), h);
    } else {
      int dup;
      do {
        if ((port = free_port()) < 0)
          return -1;
        dup = 0;
        for (int k = 0; k < i; k++)
          dup |= ports[k] == port;
      } while (dup);
    }
    ports[i] = port;
    used += (size_t)snprintf(N->peers + used, sizeof(N->peers) - used,
                             "%s%s:%d", i ? "," : "", host, port);
  }
  return 0;
}

int spt_nodes_start(spt_nodes *N, int n, const char *const *extra) {
  memset(N->d, 0, sizeof(N->d));
  N->n = n;
  memset(N->extra, 0, sizeof(N->extra));
  for (int k = 0; extra != NULL && extra[k] != NULL && k < 15; k++)
    N->extra[k] = extra[k];
  /* Loopback tcp unless the caller's environment says otherwise. */
  setenv("UCX_TLS", "tcp", 0);
  if (key_make(N) < 0)
    return -1;
  /* A port found free may be taken by another process before its daemon
   * binds it (parallel suites pick from the same range): start again on
   * new ports, a few times. */
  for (int attempt = 0; attempt < 4; attempt++) {
    if (peers_list(N, n) < 0)
      return -1;
    int i = 0;
    while (i < n && spt_node_start(N, i) == 0)
      i++;
    if (i == n)
      return 0;
    fprintf(stderr, "node %d did not start (attempt %d)\n", i, attempt + 1);
    for (int k = 0; k < i; k++)
      spt_daemon_stop(&N->d[k]);
    memset(N->d, 0, sizeof(N->d));
    if (getenv("SPT_NODE_HOSTS") != NULL)
      break; /* fixed ports: a retry would meet the same */
  }
  unlink(N->key); /* best effort: the start failed already */
  N->key[0] = '\0';
  return -1;
}

int spt_node_port(const spt_nodes *N, int i) {
  const char *p = N->peers;
  for (int k = 0; k < i && p != NULL; k++)
    p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
  const char *colon = p ? strchr(p, ':') : NULL;
  return colon ? atoi(colon + 1) : -1;
}

int spt_nodes_stop(spt_nodes *N) {
  int bad = 0;
  for (int i = 0; i < N->n; i++)
    if (N->d[i].pid > 0 && spt_daemon_stop(&N->d[i]) != 0) {
      fprintf(stderr, "node %d did not stop cleanly\n", i);
      bad = -1;
    }
  if (N->key[0] != '\0' && unlink(N->key) < 0)
    perror("unlink of the node key");
  N->key[0] = '\0';
  return bad;
}
