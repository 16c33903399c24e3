/* spcoll-copy-rate: how fast one process copies another's memory on this
 * machine, the two ways spcoll's fast path can: a memcpy from a mapping of
 * memory both share (a memfd, as spcoll memory is: what the C call and
 * the opt-in CPU allocator read) and process_vm_readv from the other
 * process's private memory (cross-memory attach: how caller memory, an
 * ordinary torch tensor, is read). The ratio bounds what caller memory can
 * reach against the C call at sizes where the copy dominates. Printed by
 * scripts/bench_torch.py (`make bench-torch`) before its tables.
 *
 *   spcoll-copy-rate [BYTES...]      (default: 2 MiB and 32 MiB)
 *
 * One line per size: bytes, the p50 time of each way in µs and its GB/s,
 * and process_vm_readv's rate over memcpy's. Prints numbers; asserts
 * nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { MAX_ITERS = 400 };

typedef struct {
  pid_t pid;      /* the process whose memory is read */
  char *priv;     /* its private (malloc'd) copy, an address in its space */
  char *shared;   /* the memfd both map, at this process's address */
} peer;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The child: fill its private buffer, hand its address up the pipe, then
 * wait for the parent to close the other pipe. */
static void child(size_t n, char *shared, int up, int down) {
  char *priv = malloc(n);
  if (priv == NULL) {
    fprintf(stderr, "spcoll-copy-rate: malloc of %zu bytes failed\n", n);
    _exit(1);
  }
  memset(priv, 1, n);
  memset(shared, 1, n);
  if (write(up, &priv, sizeof(priv)) != (ssize_t)sizeof(priv)) {
    perror("spcoll-copy-rate: write to the pipe");
    _exit(1);
  }
  char c;
  while (read(down, &c, 1) < 0 && errno == EINTR)
    ;
  _exit(0);
}

static int peer_start(size_t n, peer *p) {
  int fd = memfd_create("spcoll-copy-rate", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) {
    fprintf(stderr, "spcoll-copy-rate: memfd of %zu bytes: %s\n", n,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  p->shared = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p->shared == MAP_FAILED) {
    fprintf(stderr, "spcoll-copy-rate: mmap of %zu bytes: %s\n", n,
            strerror(errno));
    return -1;
  }
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) {
    perror("spcoll-copy-rate: pipe");
    return -1;
  }
  p->pid = fork();
  if (p->pid < 0) {
    perror("spcoll-copy-rate: fork");
    return -1;
  }
  if (p->pid == 0) {
    close(up[0]);
    close(down[1]);
    child(n, p->shared, up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  ssize_t got = read(up[0], &p->priv, sizeof(p->priv));
  close(up[0]);
  if (got != (ssize_t)sizeof(p->priv)) {
    fprintf(stderr, "spcoll-copy-rate: the reader's child sent no address\n");
    close(down[1]);
    return -1;
  }
  return down[1]; /* closing it lets the child exit */
}

static void peer_stop(peer *p, int down, size_t n) {
  close(down);
  int st;
  while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
    ;
  if (munmap(p->shared, n) != 0)
    perror("spcoll-copy-rate: munmap");
}

/* p50 µs of `iters` copies of n bytes into dst, one way; -1 on error. */
static double time_way(const peer *p, char *dst, size_t n, int cma,
                       int iters) {
  double t[MAX_ITERS];
  for (int i = -2; i < iters; i++) { /* two untimed: pages, caches */
    double t0 = now_us();
    if (cma) {
      struct iovec l = {dst, n}, r = {p->priv, n};
      ssize_t got = process_vm_readv(p->pid, &l, 1, &r, 1, 0);
      if (got != (ssize_t)n) {
        fprintf(stderr, "spcoll-copy-rate: process_vm_readv of %zu bytes "
                "from pid %d: %s\n", n, (int)p->pid,
                got < 0 ? strerror(errno) : "short read");
        return -1;
      }
    } else {
      memcpy(dst, p->shared, n);
    }
    if (i >= 0)
      t[i] = now_us() - t0;
  }
  qsort(t, (size_t)iters, sizeof(t[0]), cmp_double);
  return t[iters / 2];
}

static int rate(size_t n) {
  peer p;
  int down = peer_start(n, &p);
  if (down < 0)
    return -1;
  char *dst = malloc(n);
  int rc = -1;
  if (dst == NULL) {
    fprintf(stderr, "spcoll-copy-rate: malloc of %zu bytes failed\n", n);
  } else {
    memset(dst, 0, n);
    int iters = n >= ((size_t)16 << 20) ? 40 : MAX_ITERS;
    double mc = time_way(&p, dst, n, 0, iters);
    double cma = time_way(&p, dst, n, 1, iters);
    if (mc > 0 && cma > 0) {
      printf("%zu bytes: memcpy from a shared mapping %.1f us (%.2f GB/s), "
             "process_vm_readv %.1f us (%.2f GB/s): %.2fx\n", n, mc,
             (double)n / mc / 1e3, cma, (double)n / cma / 1e3, mc / cma);
      rc = 0;
    }
  }
  free(dst);
  peer_stop(&p, down, n);
  return rc;
}

int main(int argc, char **argv) {
  size_t def[] = {(size_t)2 << 20, (size_t)32 << 20};
  int bad = 0;
  if (argc < 2) {
    for (size_t i = 0; i < sizeof(def) / sizeof(def[0]); i++)
      bad |= rate(def[i]) != 0;
    return bad;
  }
  for (int i = 1; i < argc; i++) {
    char *end;
    unsigned long long n = strtoull(argv[i], &end, 0);
    if (*end != '\0' || n == 0 || n > ((unsigned long long)1 << 34)) {
      fprintf(stderr, "spcoll-copy-rate: size '%s' is not a byte count "
              "from 1 to 16 GiB\n", argv[i]);
      return 2;
    }
    bad |= rate((size_t)n) != 0;
  }
  return bad;
}
