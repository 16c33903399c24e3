/* spcoll-copy-rate: how fast one process copies another's memory on this
 * machine, the two ways spcoll's fast path can: a memcpy from a mapping of
 * memory both share (a memfd, as spcoll memory is: what the C call and
 * the opt-in CPU allocator read) and process_vm_readv from the other
 * process's private memory (cross-memory attach: how caller memory, an
 * ordinary torch tensor, is read). The ratio bounds what caller memory can
 * reach against the C call at sizes where the copy dominates. Printed by
 * scripts/bench_torch.py (`make bench-torch`) before its tables.
 *
 * process_vm_readv pins the other process's pages one by one; over
 * transparent huge pages it pins far fewer. So it is timed twice: from
 * memory as torch's CPU allocator gives it by default (64-byte aligned)
 * and as it does under THP_MEM_ALLOC_ENABLE=1 (page-aligned,
 * madvise(MADV_HUGEPAGE)), with how much of that the kernel backed with
 * huge pages (none where transparent huge pages are off). The reader's
 * buffer is 64-byte aligned too: the kernel's copy is much slower when
 * source and destination differ in their alignment to 64 bytes, which
 * two torch tensors do not.
 *
 *   spcoll-copy-rate [BYTES...]      (default: 2 MiB and 32 MiB)
 *
 * One line per size: bytes, the p50 time of each way in µs and its GB/s,
 * and each process_vm_readv's rate over memcpy's. Prints numbers; asserts
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
  char *huge;     /* its private copy advised MADV_HUGEPAGE, ditto */
  long huge_kb;   /* how much of that the kernel backs with huge pages */
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

/* AnonHugePages of this process's mapping that holds a, in kB; -1 if
 * /proc/self/smaps cannot say. */
static long huge_kb_at(const void *a) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL)
    return -1;
  char line[512];
  long kb = -1;
  int in = 0;
  unsigned long lo, hi, x = (unsigned long)a;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != NULL &&
        strchr(line, '-') < strchr(line, ' '))
      in = lo <= x && x < hi;
    else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
      break;
  }
  fclose(f);
  return kb;
}

/* Memory as torch's CPU allocator gives it: aligned to `align` bytes,
 * and, under THP_MEM_ALLOC_ENABLE=1 (thp), advised MADV_HUGEPAGE before
 * it is touched. NULL on failure, said. */
static char *torch_alloc(size_t n, size_t align, int thp) {
  void *p;
  int err = posix_memalign(&p, align, n);
  if (err != 0) {
    fprintf(stderr, "spcoll-copy-rate: posix_memalign of %zu bytes: %s\n",
            n, strerror(err));
    return NULL;
  }
  if (thp && madvise(p, n, MADV_HUGEPAGE) != 0) /* no THP: no huge pages */
    fprintf(stderr, "spcoll-copy-rate: madvise(MADV_HUGEPAGE) of %zu "
            "bytes: %s\n", n, strerror(errno));
  return p;
}

/* The child: fill its private buffers, hand their addresses (and how
 * much of the advised one is huge) up the pipe, then wait for the parent
 * to close the other pipe. */
static void child(size_t n, char *shared, int up, int down) {
  char *priv = torch_alloc(n, 64, 0);
  char *huge = torch_alloc(n, (size_t)sysconf(_SC_PAGESIZE), 1);
  if (priv == NULL || huge == NULL)
    _exit(1);
  memset(priv, 1, n);
  memset(huge, 1, n);
  memset(shared, 1, n);
  peer me = {.priv = priv, .huge = huge, .huge_kb = huge_kb_at(huge)};
  if (write(up, &me, sizeof(me)) != (ssize_t)sizeof(me)) {
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
  peer got_p;
  ssize_t got = read(up[0], &got_p, sizeof(got_p));
  close(up[0]);
  p->priv = got_p.priv;
  p->huge = got_p.huge;
  p->huge_kb = got_p.huge_kb;
  if (got != (ssize_t)sizeof(got_p)) {
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

/* p50 µs of `iters` copies of n bytes into dst, one way: a memcpy from
 * the shared mapping, or process_vm_readv from src in the peer; -1 on
 * error. */
static double time_way(const peer *p, char *dst, size_t n, const char *src,
                       int iters) {
  double t[MAX_ITERS];
  for (int i = -2; i < iters; i++) { /* two untimed: pages, caches */
    double t0 = now_us();
    if (src != NULL) {
      struct iovec l = {dst, n}, r = {(void *)src, n};
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
  char *dst = torch_alloc(n, 64, 0);
  int rc = -1;
  if (dst != NULL) {
    memset(dst, 0, n);
    int iters = n >= ((size_t)16 << 20) ? 40 : MAX_ITERS;
    double mc = time_way(&p, dst, n, NULL, iters);
    double cma = time_way(&p, dst, n, p.priv, iters);
    double thp = time_way(&p, dst, n, p.huge, iters);
    if (mc > 0 && cma > 0 && thp > 0) {
      printf("%zu bytes: memcpy from a shared mapping %.1f us (%.2f GB/s), "
             "process_vm_readv %.1f us (%.2f GB/s): %.2fx; under torch's "
             "THP_MEM_ALLOC_ENABLE=1 (%ld of %zu kB huge) %.1f us "
             "(%.2f GB/s): %.2fx\n", n, mc, (double)n / mc / 1e3, cma,
             (double)n / cma / 1e3, mc / cma, p.huge_kb, n >> 10, thp,
             (double)n / thp / 1e3, mc / thp);
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
