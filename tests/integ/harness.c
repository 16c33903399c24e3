#include "harness.h"
#include "client_fast.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int spt_raw_connect(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int launch(spt_daemon *d, const char *const *extra);

int spt_daemon_start(spt_daemon *d, const char *const *extra) {
  memset(d, 0, sizeof(*d));
  snprintf(d->dir, sizeof(d->dir), "/tmp/spcoll-test-XXXXXX");
  if (mkdtemp(d->dir) == NULL) {
    perror("mkdtemp");
    return -1;
  }
  return launch(d, extra);
}

int spt_daemon_restart(spt_daemon *d, const char *const *extra) {
  if (d->pid > 0)
    return -1; /* still running */
  return launch(d, extra);
}

/* spcolld in d's folder, on its socket, logging to its log. */
static int launch(spt_daemon *d, const char *const *extra) {
  snprintf(d->socket, sizeof(d->socket), "%s/spcolld.sock", d->dir);
  snprintf(d->log, sizeof(d->log), "%s/spcolld.log", d->dir);
  const char *bin = getenv("SPCOLLD");
  if (bin == NULL)
    bin = "build/bin/spcolld";
  const char *level = getenv("SPT_LOG_LEVEL"); /* debugging: "debug" */
  const char *argv[32] = {bin, "--socket", d->socket, "--workers", "2",
                          "--log-level", level ? level : "info"};
  int n = 7;
  /* SPT_MOVER: the engine every op of the suite goes to (tests/run.sh);
   * the shared-memory fast path, which would take the small ones past
   * every engine, is off then. */
  const char *mover = getenv("SPT_MOVER");
  if (mover != NULL && mover[0] != '\0') {
    argv[n++] = "--mover", argv[n++] = mover;
    argv[n++] = "--fast-bytes", argv[n++] = "0";
  }
  for (int i = 0; extra && extra[i] && n < 31; i++)
    argv[n++] = extra[i];
  d->pid = fork();
  if (d->pid < 0)
    return -1;
  if (d->pid == 0) {
    int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
      dup2(fd, 2);
    execv(bin, (char *const *)argv);
    fprintf(stderr, "execv(%s): %s\n", bin, strerror(errno));
    _exit(127);
  }
  /* Wait for both sockets (the stats socket listens after the control
   * socket): readiness, not a timing check. */
  char stats[160];
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", d->dir);
  for (int i = 0; extra && extra[i]; i++) {
    if (strcmp(extra[i], "--stats-socket") == 0 && extra[i + 1])
      snprintf(stats, sizeof(stats), "%s", extra[i + 1]);
    if (strcmp(extra[i], "--socket") == 0 && extra[i + 1])
      snprintf(d->socket, sizeof(d->socket), "%s", extra[i + 1]);
  }
  for (int i = 0; i < 1000; i++) {
    int fd = spt_raw_connect(d->socket);
    int sfd = fd >= 0 ? spt_raw_connect(stats) : -1;
    if (fd >= 0)
      close(fd);
    if (sfd >= 0) {
      close(sfd);
      return 0;
    }
    if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
      spt_daemon_dump_log(d);
      return -1;
    }
    sleep_ms(10);
  }
  return -1;
}

void spt_daemon_dump_log(const spt_daemon *d) {
  FILE *f = fopen(d->log, "r");
  char line[512];
  if (f == NULL)
    return;
  fprintf(stderr, "---- %s ----\n", d->log);
  while (fgets(line, sizeof(line), f))
    fputs(line, stderr);
  fclose(f);
}

int spt_daemon_stop(spt_daemon *d) {
  int status = 0;
  if (d->pid <= 0)
    return -1;
  kill(d->pid, SIGTERM);
  for (int i = 0; i < 3000; i++) {
    if (waitpid(d->pid, &status, WNOHANG) == d->pid)
      break;
    if (i == 2999) {
      kill(d->pid, SIGKILL);
      waitpid(d->pid, &status, 0);
    }
    sleep_ms(10);
  }
  d->pid = 0;
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0 || getenv("SPT_DUMP_LOGS") != NULL)
    spt_daemon_dump_log(d);
  unlink(d->log);
  unlink(d->socket);
  rmdir(d->dir);
  return rc;
}

int spt_daemon_fds(const spt_daemon *d) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
  DIR *dir = opendir(path);
  if (dir == NULL)
    return -1;
  int n = 0;
  while (readdir(dir) != NULL)
    n++;
  closedir(dir);
  return n - 2;
}

spc_request *spt_join_send(spc_client *c, const char *name, int world,
                           int rank) {
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = (char *)name, j.world_size = world, j.rank = rank;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN, f.group_join = &j;
  spc_request *req;
  return spc__send(c, &f, -1, &req) == 0 ? req : NULL;
}

spc_group *spt_join_finish(spc_client *c, spc_request *req, int world,
                           int rank) {
  Spcoll__Frame *reply;
  if (req == NULL || spc__finish(c, req, &reply) != 0)
    return NULL;
  spc_group *g = NULL;
  if (reply->body_case == SPCOLL__FRAME__BODY_GROUP_JOINED &&
      (g = calloc(1, sizeof(*g))) != NULL) {
    *g = (spc_group){.next = c->groups, .client = c,
                     .id = reply->group_joined->group_id, .rank = rank,
                     .world = world,
                     .multinode = reply->group_joined->multinode};
    c->groups = g;
    if (spc__seg_claim(g) < 0) { /* the group's shared segment, if any */
      c->groups = g->next;
      free(g);
      g = NULL;
    }
  }
  spcoll__frame__free_unpacked(reply, NULL);
  return g;
}

long long spt_daemon_stat(const spt_daemon *d, const char *name) {
  char path[160];
  snprintf(path, sizeof(path), "%s/spcolld.stats.sock", d->dir);
  spc_client *c = spt_connect(path);
  if (c == NULL)
    return -1;
  Spcoll__StatsRequest rq = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *reply = NULL;
  rq.format = "text";
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &rq;
  long long v = -1;
  if (spc__call(c, &f, -1, &reply) == 0) {
    /* "name value" lines; the name is a whole word at a line start */
    size_t n = strlen(name);
    for (const char *l = reply->stats_reply->text; l != NULL && *l;) {
      if (strncmp(l, name, n) == 0 && l[n] == ' ') {
        v = atoll(l + n + 1);
        break;
      }
      l = strchr(l, '\n');
      l = l ? l + 1 : NULL;
    }
  }
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  spc_disconnect(c);
  return v;
}

int spt_daemon_maps(const spt_daemon *d) {
  char path[64], line[512];
  snprintf(path, sizeof(path), "/proc/%d/maps", (int)d->pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  int n = 0;
  while (fgets(line, sizeof(line), f) != NULL)
    n += strchr(line, '\n') != NULL;
  fclose(f);
  return n;
}

long spt_daemon_rss_kb(const spt_daemon *d) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)d->pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return -1;
  long kb = -1;
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
      break;
  fclose(f);
  return kb;
}

int spt_run_ranks(int world, spt_rank_fn fn, void *arg, int guard_s) {
  pid_t pids[256];
  int failed = 0;
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm((unsigned)guard_s); /* a hung rank dies instead of the suite */
      int rc = fn(r, world, arg);
      exit(rc == 0 ? 0 : 1);
    }
  }
  for (int r = 0; r < world; r++) {
    int st;
    if (pids[r] < 0 || waitpid(pids[r], &st, 0) < 0) {
      failed++;
      continue;
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d failed (%s %d)\n", r,
              WIFEXITED(st) ? "exit" : "signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
      failed++;
    }
  }
  return failed;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

void spt_fill(void *p, spc_dtype dt, size_t n, uint64_t seed, int rank) {
  for (size_t i = 0; i < n; i++) {
    uint64_t v = mix(seed * 1000003u + (uint64_t)rank * 7919u + i);
    int32_t small = (int32_t)(v % 4096) - 2048; /* /64 -> [-32, 32) */
    switch (dt) {
    case SPC_FLOAT32: ((float *)p)[i] = (float)small / 64.0f; break;
    case SPC_FLOAT64: ((double *)p)[i] = (double)small / 64.0; break;
    case SPC_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case SPC_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case SPC_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case SPC_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((uint16_t *)p)[i] = (uint16_t)v; break;
    }
  }
}

spc_client *spt_connect(const char *socket) {
  spc_client *c = NULL;
  int rc = spc_connect(socket, "test", &c);
  if (rc < 0)
    fprintf(stderr, "spc_connect(%s): %s: %s\n", socket, spc_strerror(rc),
            spc_last_error(NULL));
  return c;
}

int spt_raw_send_bytes(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    p += n, len -= (size_t)n;
  }
  return 0;
}

int spt_raw_send_fds(int fd, const int *fds, int n, char byte) {
  char cbuf[CMSG_SPACE(sizeof(int) * 64)];
  if (n < 1 || n > 64)
    return -1;
  memset(cbuf, 0, sizeof(cbuf));
  struct iovec iov = {&byte, 1};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                     .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
  memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
  return sendmsg(fd, &m, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

int spt_raw_send(int fd, Spcoll__Frame *f) {
  uint8_t *buf;
  size_t len;
  spk_err err;
  if (spf_encode(f, &buf, &len, &err) < 0)
    return -1;
  int rc = spt_raw_send_bytes(fd, buf, len);
  free(buf);
  return rc;
}

Spcoll__Frame *spt_raw_recv(int fd, int guard_s) {
  spf_reader r;
  spf_reader_init(&r);
  Spcoll__Frame *f = NULL;
  spk_err err;
  for (;;) {
    int rc = spf_reader_next(&r, &f, &err);
    if (rc != 0)
      break;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, guard_s * 1000) <= 0)
      break;
    uint8_t *space;
    size_t avail;
    spf_reader_space(&r, 1, &space, &avail, &err);
    /* One byte at a time: never read past this frame into the next. */
    ssize_t n = recv(fd, space, 1, 0);
    if (n <= 0)
      break;
    spf_reader_commit(&r, (size_t)n);
  }
  spf_reader_free(&r);
  return f;
}

int spt_raw_closed(int fd, int guard_s) {
  char c;
  for (;;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, guard_s * 1000) <= 0)
      return 0;
    ssize_t n = recv(fd, &c, 1, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return 1;
    if (n < 0)
      return 0;
  }
}

int spt_raw_hello(int fd) {
  Spcoll__Hello h = SPCOLL__HELLO__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  h.protocol_version = SPF_PROTOCOL_VERSION;
  h.framework = "raw";
  f.id = 1;
  f.body_case = SPCOLL__FRAME__BODY_HELLO;
  f.hello = &h;
  if (spt_raw_send(fd, &f) < 0)
    return -1;
  Spcoll__Frame *r = spt_raw_recv(fd, 10);
  int ok = r && r->body_case == SPCOLL__FRAME__BODY_WELCOME;
  if (r)
    spcoll__frame__free_unpacked(r, NULL);
  return ok ? 0 : -1;
}

static size_t shape_numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

/* Source element of output element i: plain index arithmetic, written
 * apart from the planner on purpose. */
static size_t gather_source(size_t i, int ndim, const int64_t *oshape, int d,
                            const int64_t *sizes, const int64_t *off, int *k_p) {
  int64_t idx[SPC_MAX_DIMS] = {0};
  for (int j = ndim - 1; j >= 0; j--) {
    idx[j] = (int64_t)(i % (size_t)oshape[j]);
    i /= (size_t)oshape[j];
  }
  int k = 0;
  while (idx[d] >= off[k + 1])
    k++;
  idx[d] -= off[k];
  size_t si = 0;
  for (int j = 0; j < ndim; j++)
    si = si * (size_t)(j == d ? sizes[k] : oshape[j]) + (size_t)idx[j];
  *k_p = k;
  return si;
}

int spt_check_gather(const void *out, spc_dtype dt, int ndim,
                     const int64_t *oshape, int d, const int64_t *sizes,
                     int world, uint64_t seed, int rank) {
  size_t es = spc_dtype_size(dt), n = shape_numel(oshape, ndim);
  int64_t off[257] = {0};
  void *src[256];
  for (int k = 0; k < world; k++) {
    int64_t ishape[SPC_MAX_DIMS] = {0};
    memcpy(ishape, oshape, (size_t)ndim * sizeof(ishape[0]));
    ishape[d] = sizes[k];
    size_t m = shape_numel(ishape, ndim);
    src[k] = malloc(m * es + 1);
    spt_fill(src[k], dt, m, seed, k);
    off[k + 1] = off[k] + sizes[k];
  }
  int bad = 0;
  for (size_t i = 0; i < n && !bad; i++) {
    int k;
    size_t si = gather_source(i, ndim, oshape, d, sizes, off, &k);
    if (memcmp((const char *)out + i * es, (char *)src[k] + si * es, es)) {
      fprintf(stderr, "rank %d: output element %zu differs (should be rank "
              "%d's element %zu)\n", rank, i, k, si);
      bad = 1;
    }
  }
  for (int k = 0; k < world; k++)
    free(src[k]);
  return bad;
}

int spt_raw_join_pending(const char *socket, const char *name, int rank) {
  int fd = spt_raw_connect(socket);
  if (fd < 0 || spt_raw_hello(fd) < 0)
    return -1;
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = (char *)name, j.world_size = 2, j.rank = rank;
  f.id = 7, f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN, f.group_join = &j;
  Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame q = SPCOLL__FRAME__INIT;
  q.id = 8, q.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  q.stats_request = &sr;
  if (spt_raw_send(fd, &f) < 0 || spt_raw_send(fd, &q) < 0)
    return -1;
  Spcoll__Frame *r = spt_raw_recv(fd, 10);
  int ok = r && r->body_case == SPCOLL__FRAME__BODY_STATS_REPLY;
  if (r)
    spcoll__frame__free_unpacked(r, NULL);
  return ok ? fd : -1;
}

int spt_ctl(const spt_daemon *d, const char *args) {
  char cmd[512];
  const char *bin = getenv("SPCOLLD");
  char dir[256] = "build/bin";
  if (bin && strrchr(bin, '/'))
    snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(bin, '/') - bin), bin);
  snprintf(cmd, sizeof(cmd), "%s/spcollctl --socket %s %s", dir, d->socket,
           args);
  return system(cmd);
}

int spt_reap(const pid_t *pids, int *codes, int n, int guard_s) {
  for (int r = 0; r < n; r++)
    codes[r] = -2;
  for (int t = 0; t < guard_s * 100; t++) {
    int left = 0;
    for (int r = 0; r < n; r++) {
      int st;
      if (codes[r] != -2)
        continue;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r])
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      else
        left++;
    }
    if (left == 0)
      return 0;
    usleep(10000);
  }
  int hung = 0;
  for (int r = 0; r < n; r++)
    if (codes[r] == -2) {
      fprintf(stderr, "rank %d hung: killed\n", r);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
      codes[r] = -1;
      hung++;
    }
  return hung;
}
