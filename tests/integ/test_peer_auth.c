/* Peers on a hostile network (daemon/peer/peer_boot.c, peer_auth.c):
 * - garbage to a daemon's peer port (64 bytes of 0xff or 0x00, which
 *   aborted the daemon inside UCX's connection manager before, random
 *   bytes, a bad magic, a silent connection) is refused, counted and
 *   logged, and the daemon serves on;
 * - garbage at UCX's own transport ports (with UCX_TLS=tcp) leaves the
 *   daemon serving and its peers up;
 * - a hello that names a node outside the list, or another node as its
 *   target, is refused;
 * - a daemon with another key cannot join, whether it dials or answers
 *   at a real node's address while that node is down: its rank of a
 *   group across the nodes never completes the group, while a group
 *   across the good nodes runs verified ops through it all.
 * Three daemons on loopback. Waits are bounded by guards, never timed. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"

#define N_ELEMS 1024

static spt_nodes nodes;

static int tcp_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  return fd;
}

/* Send bytes to node i's peer port; 1 when the daemon then closed the
 * connection on its own (within the guard). */
static int refused(int i, const void *bytes, size_t len) {
  int fd = tcp_to(spt_node_port(&nodes, i));
  if (len > 0)
    ck_assert_int_eq(spt_raw_send_bytes(fd, bytes, len), 0);
  int closed = spt_raw_closed(fd, 30);
  close(fd);
  return closed;
}

static long long stat_of(int i, const char *name) {
  return spt_daemon_stat(&nodes.d[i], name);
}

/* Until node i sees `up` other nodes up (a guard, not a timing check). */
static void wait_up(int i, int up) {
  for (int t = 0; t < 3000 && stat_of(i, "peer_nodes_up") != up; t++)
    usleep(10000);
  ck_assert_int_eq(stat_of(i, "peer_nodes_up"), up);
}

static int log_has(int i, const char *what) {
  FILE *f = fopen(nodes.d[i].log, "r");
  char line[1024];
  int found = 0;
  while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
    found = strstr(line, what) != NULL;
  if (f != NULL)
    fclose(f);
  return found;
}

/* A verified all-gather loop of rank `rank` of world-2 group `name`, on
 * node `node`: exit 0 when all iters were right. */
static int gather_loop(int node, const char *name, int rank, int iters) {
  spc_client *c = spt_connect(nodes.d[node].socket);
  spc_group *g;
  spc_buffer *b;
  if (c == NULL || spc_group_join(c, name, 2, rank, &g) < 0 ||
      spc_buffer_alloc(c, (size_t)N_ELEMS * 4 * 3, &b) < 0)
    return 1;
  float *x = spc_buffer_data(b);
  int64_t s1[1] = {N_ELEMS}, s2[1] = {2 * N_ELEMS};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, N_ELEMS * 4, SPC_FLOAT32, 1, s2);
  for (int it = 0; it < iters; it++) {
    for (int i = 0; i < N_ELEMS; i++)
      x[i] = (float)(rank * N_ELEMS + i + it);
    if (spc_all_gather(g, &in, &out, 0, NULL) < 0) {
      fprintf(stderr, "rank %d op %d: %s\n", rank, it, spc_last_error(c));
      return 1;
    }
    for (int i = 0; i < 2 * N_ELEMS; i++)
      if (x[N_ELEMS + i] != (float)(i + it))
        return 1;
  }
  spc_disconnect(c);
  return 0;
}

/* Ranks 0 and 1 of `name` on nodes 0 and 1, in two processes. */
static void gathers_start(pid_t *pids, const char *name, int iters) {
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(gather_loop(r, name, r, iters));
  }
}

static void gathers_ok(pid_t *pids) {
  int codes[2];
  ck_assert_int_eq(spt_reap(pids, codes, 2, 120), 0);
  ck_assert_int_eq(codes[0], 0);
  ck_assert_int_eq(codes[1], 0);
}

static void setup(void) {
  ck_assert_int_eq(spt_nodes_start(&nodes, 3, NULL), 0);
  for (int i = 0; i < 3; i++)
    wait_up(i, 2);
}

static void teardown(void) {
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}

/* A hello frame: magic, version 1, from, to, a nonce. */
static void hello(uint8_t *h, const char *magic, uint32_t from, uint32_t to) {
  memcpy(h, magic, 4);
  uint32_t v[3] = {htonl(1), htonl(from), htonl(to)};
  memcpy(h + 4, v, sizeof(v));
  memset(h + 16, 0x5a, 32);
}

START_TEST(garbage_refused) {
  uint8_t ff[64], zero[64], rnd[4096], h[48];
  memset(ff, 0xff, sizeof(ff));
  memset(zero, 0, sizeof(zero));
  ck_assert_int_eq(getrandom(rnd, sizeof(rnd), 0), (ssize_t)sizeof(rnd));
  long long before = stat_of(0, "peer_unauthenticated");
  /* First what is looked for in the log: it logs the first ten refusals
   * of a minute. */
  ck_assert(refused(0, NULL, 0)); /* silent: closed at its deadline */
  ck_assert(refused(0, ff, sizeof(ff)));
  hello(h, "SPCX", 1, 0);
  ck_assert(refused(0, h, sizeof(h)));
  for (int k = 0; k < 3; k++) {
    ck_assert(refused(0, ff, sizeof(ff)));
    ck_assert(refused(0, zero, sizeof(zero)));
    ck_assert(refused(0, rnd, sizeof(rnd)));
  }
  ck_assert_int_ge(stat_of(0, "peer_unauthenticated"), before + 12);
  ck_assert(log_has(0, "peer refused: bootstrap from 127.0.0.1"));
  ck_assert(log_has(0, "not a spcolld bootstrap (bad magic 0xffffffff)"));
  ck_assert(log_has(0, "did not end within"));
  pid_t pids[2];
  gathers_start(pids, "after-garbage", 20);
  gathers_ok(pids);
  ck_assert_int_eq(stat_of(0, "peer_nodes_up"), 2);
}
END_TEST

/* The TCP ports node i's process listens on besides its peer port (UCX's
 * transport ports), from /proc: (address, port) pairs, at most max. */
static int ucx_ports(int i, struct sockaddr_in *out, int max) {
  char path[64], link[64];
  unsigned long inodes[64];
  int ni = 0, n = 0;
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)nodes.d[i].pid);
  DIR *d = opendir(path);
  ck_assert_ptr_nonnull(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL && ni < 64) {
    char fd[300];
    snprintf(fd, sizeof(fd), "%s/%s", path, e->d_name);
    ssize_t len = readlink(fd, link, sizeof(link) - 1);
    if (len > 0 && (link[len] = '\0', sscanf(link, "socket:[%lu]",
                                               &inodes[ni]) == 1))
      ni++;
  }
  closedir(d);
  FILE *f = fopen("/proc/net/tcp", "r");
  ck_assert_ptr_nonnull(f);
  char line[512];
  while (fgets(line, sizeof(line), f) != NULL && n < max) {
    unsigned addr, port, state;
    unsigned long inode;
    if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*s %*s %*s %*s %*s %lu",
               &addr, &port, &state, &inode) != 4 || state != 0x0a ||
        (int)port == spt_node_port(&nodes, i))
      continue;
    for (int k = 0; k < ni; k++)
      if (inodes[k] == inode) {
        out[n] = (struct sockaddr_in){.sin_family = AF_INET,
                                      .sin_port = htons((uint16_t)port),
                                      .sin_addr.s_addr = addr};
        n++;
      }
  }
  fclose(f);
  return n;
}

/* Garbage at UCX's own transport ports (UCX reads it; spcolld's code
 * does not): the daemon serves on, its peers stay up. */
START_TEST(ucx_ports_survive_garbage) {
  struct sockaddr_in ports[8];
  int n = ucx_ports(0, ports, 8);
  ck_assert_int_ge(n, 1); /* UCX_TLS=tcp: one port an interface at least */
  uint8_t ff[64], zero[64], rnd[4096];
  memset(ff, 0xff, sizeof(ff));
  memset(zero, 0, sizeof(zero));
  ck_assert_int_eq(getrandom(rnd, sizeof(rnd), 0), (ssize_t)sizeof(rnd));
  const uint8_t *pat[] = {ff, zero, rnd};
  const size_t len[] = {sizeof(ff), sizeof(zero), sizeof(rnd)};
  for (int p = 0; p < n; p++)
    for (int k = 0; k < 9; k++) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      ck_assert_int_ge(fd, 0);
      if (connect(fd, (struct sockaddr *)&ports[p], sizeof(ports[p])) == 0)
        (void)spt_raw_send_bytes(fd, pat[k % 3], len[k % 3]);
      close(fd);
    }
  pid_t pids[2];
  gathers_start(pids, "after-ucx-garbage", 20);
  gathers_ok(pids);
  ck_assert_int_eq(stat_of(0, "peer_nodes_up"), 2);
  ck_assert_int_eq(kill(nodes.d[0].pid, 0), 0); /* alive */
}
END_TEST

START_TEST(wrong_node_index_refused) {
  uint8_t h[48];
  static const uint32_t from[] = {3, 64, 0x80000000u, 0xffffffffu, 0};
  for (size_t k = 0; k < sizeof(from) / sizeof(from[0]); k++) {
    hello(h, "SPCB", from[k], 0);
    ck_assert_msg(refused(0, h, sizeof(h)), "hello from node %u taken",
                  from[k]);
  }
  ck_assert(log_has(0, "not another node of the 3 in --peers"));
  hello(h, "SPCB", 1, 2); /* for node 2, sent to node 0 */
  ck_assert(refused(0, h, sizeof(h)));
  ck_assert(log_has(0, "hello for node 2, but this is node 0"));
  /* A right hello without the key gets a reply, then fails its proof. */
  hello(h, "SPCB", 1, 0);
  uint8_t proof[32] = {0};
  int fd = tcp_to(spt_node_port(&nodes, 0));
  ck_assert_int_eq(spt_raw_send_bytes(fd, h, sizeof(h)), 0);
  uint8_t reply[80];
  size_t got = 0;
  while (got < sizeof(reply)) {
    ssize_t n = recv(fd, reply + got, sizeof(reply) - got, 0);
    ck_assert_int_gt(n, 0);
    got += (size_t)n;
  }
  ck_assert_int_eq(spt_raw_send_bytes(fd, proof, sizeof(proof)), 0);
  ck_assert(spt_raw_closed(fd, 30));
  close(fd);
  ck_assert(log_has(0, "the initiator's proof of the node key is wrong"));
  ck_assert_int_eq(stat_of(0, "peer_nodes_up"), 2);
}
END_TEST

/* Node 2 dies (no Bye: the others keep dialing its address) and a
 * daemon with another key takes its address and index: it is refused
 * both ways, its rank never completes a group
 * across the nodes, and a group across nodes 0 and 1 runs meanwhile. */
START_TEST(rogue_at_a_real_address) {
  char good[sizeof(nodes.key)], rogue[sizeof(nodes.key)] =
                                    "/tmp/spt-rogue-key.XXXXXX";
  int fd = mkstemp(rogue);
  uint8_t key[32];
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(getrandom(key, sizeof(key), 0), (ssize_t)sizeof(key));
  ck_assert_int_eq(write(fd, key, sizeof(key)), (ssize_t)sizeof(key));
  close(fd);
  ck_assert_int_eq(kill(nodes.d[2].pid, SIGKILL), 0);
  waitpid(nodes.d[2].pid, NULL, 0);
  nodes.d[2].pid = 0;
  wait_up(0, 1);
  long long before = stat_of(0, "peer_unauthenticated");
  memcpy(good, nodes.key, sizeof(good));
  memcpy(nodes.key, rogue, sizeof(rogue));
  ck_assert_int_eq(spt_node_start(&nodes, 2), 0);
  memcpy(nodes.key, good, sizeof(good));
  /* Its rank of a world-3 group joins there; ranks 0 and 1 join too. */
  spc_client *c[3];
  spc_request *req[3];
  for (int r = 0; r < 3; r++) {
    c[r] = spt_connect(nodes.d[r].socket);
    req[r] = spt_join_send(c[r], "with-rogue", 3, r);
    ck_assert_ptr_nonnull(req[r]);
  }
  pid_t pids[2];
  gathers_start(pids, "beside-rogue", 200);
  /* Both good nodes refuse it, again and again (it dials every second,
   * and they dial it). */
  for (int t = 0; t < 3000; t++) {
    if (stat_of(0, "peer_unauthenticated") >= before + 4 &&
        log_has(0, "closed before the handshake ended"))
      break;
    usleep(10000);
  }
  ck_assert_int_ge(stat_of(0, "peer_unauthenticated"), before + 4);
  ck_assert(log_has(0, "the responder's proof of the node key is wrong"));
  /* Its own dials end when our proof fails at its end. */
  ck_assert(log_has(2, "the responder's proof of the node key is wrong"));
  ck_assert(log_has(0, "closed before the handshake ended"));
  gathers_ok(pids);
  ck_assert_int_eq(stat_of(0, "peer_nodes_up"), 1);
  ck_assert_int_eq(stat_of(2, "peer_nodes_up"), 0);
  /* The group with the rogue's rank never became ready. */
  for (int r = 0; r < 3; r++) {
    struct pollfd p = {spc_client_fd(c[r]), POLLIN, 0};
    ck_assert_int_eq(poll(&p, 1, 0), 0);
    spc_disconnect(c[r]);
  }
  ck_assert_int_eq(unlink(rogue), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("peer_auth");
  TCase *tc = tcase_create("peer_auth");
  tcase_set_timeout(tc, 300);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, garbage_refused);
  tcase_add_test(tc, ucx_ports_survive_garbage);
  tcase_add_test(tc, wrong_node_index_refused);
  tcase_add_test(tc, rogue_at_a_real_address);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
