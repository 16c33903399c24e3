/* Single-copy fast-path ops (see client_fast.c). A rank whose op is not
 * small need not copy its input into its staging, nor its output out of
 * it: the other ranks read both where its caller keeps them, in its
 * buffer's memfd, which they take with pidfd_getfd and map read-only.
 *
 * The kernel lets a process take another's fds only where it could
 * ptrace it (same uid, not undumpable, no Yama or seccomp rule against
 * it): exactly the processes that could read that memory anyway, as Open
 * MPI's CMA copies do. So every rank first probes every other rank, and
 * a rank reads its op in its own buffers only once every rank has said
 * that it may take every other's: otherwise the group stages, as before.
 * A probe of rank r checks that the process r names holds this group's
 * segment (the fd it named is the memfd this rank maps: only members get
 * it), runs as this rank's uid, and lets this rank take its fds and read
 * its memory. The segment is writable by every member, so a member could
 * name someone else's process for r, or say for another rank that it may
 * read: the segment check keeps reads among the group's processes, the
 * uid check among one user's (whose processes could ptrace each other
 * anyway), and a rank trusts its own probe, not what its word says. The probe never waits for anyone (a rank that takes the daemon
 * path may never probe): until every rank has said, ops stage. A rank
 * probes in its first op that finds every rank attached, at the latest
 * its second (every rank published its first before), so from its third
 * op on every rank knows.
 *
 * The owner of an op read in place may not return before every rank is
 * done reading (client_fast.c waits on every rank's fdone then), and
 * keeps its buffers' memfds open while they exist; a rank that frees a
 * buffer bumps its `freed` word, and the others drop what they mapped of
 * its buffers.
 *
 * Caller memory (spc_buffer_wrap) has no memfd: its owner names the
 * tensor's address, and the others read it with process_vm_readv
 * (client_fast_cma.c). The kernel allows that to exactly the processes
 * that may take the owner's fds, but a seccomp filter may refuse either
 * call alone, so the probe reads a word of the rank's memory too. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client_fast_internal.h"

void spc__fast_map_init(spc_group *g) {
  spc_fast *f = g->fast;
  spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  for (int r = 0; r < SPK_FSEG_MAXWORLD; r++)
    f->map.pidfd[r] = -1;
  me->id.pid = (int32_t)getpid();
  me->id.probe_fd = f->map.seg_fd;
  /* Any value a prober cannot hit by accident: it reads it back. */
  f->map.probe_word = spc__fast_now_ns() ^ ((uint64_t)(uintptr_t)f << 16);
  me->id.probe_addr = (uint64_t)(uintptr_t)&f->map.probe_word;
  me->id.probe_word = f->map.probe_word;
  spc__fast_publish(f->hdr, me, &me->id.attached, 1);
}

static void maps_drop(spc_fast *f, int r) {
  for (int i = 0; i < SPC_FAST_MAPS; i++) {
    spc_fast_map *m = &f->map.maps[r][i];
    if (m->base != NULL)
      munmap(m->base, m->size); /* our own mapping: it cannot fail */
    memset(m, 0, sizeof(*m));
  }
}

void spc__fast_map_free(spc_fast *f, int world) {
  for (int r = 0; r < world; r++) {
    maps_drop(f, r);
    if (f->map.pidfd[r] >= 0)
      close(f->map.pidfd[r]);
    f->map.pidfd[r] = -1;
  }
}

/* A rank that freed a buffer since we last looked: drop what we mapped
 * of its buffers. */
static void freed_check(spc_fast *f, int r) {
  uint64_t fr = SPK_LOAD(&spc__fast_rank(f, r)->freed,
                                __ATOMIC_ACQUIRE);
  if (fr != f->map.freed_seen[r]) {
    maps_drop(f, r);
    f->map.freed_seen[r] = fr;
  }
}

/* Why a probe failed: the call and its errno. */
typedef struct {
  int call, err;
} probe_why;

static int probe_fail(probe_why *why, int call, int err, int pfd) {
  why->call = call;
  why->err = err;
  if (pfd >= 0)
    close(pfd);
  return -1;
}

/* Whether this process reads rank r's probe word (id) as r said it is. */
static int probe_read(const spk_fseg_ident *id) {
  uint64_t word = 0;
  struct iovec local = {&word, sizeof(word)};
  struct iovec remote = {(void *)(uintptr_t)id->probe_addr, sizeof(word)};
  ssize_t n = process_vm_readv((pid_t)id->pid, &local, 1, &remote, 1, 0);
  if (n < 0)
    return -errno;
  return n == (ssize_t)sizeof(word) && word == id->probe_word ? 0 : -EIO;
}

/* Whether fd is the same file as this rank's segment. */
static int same_segment(const spc_fast *f, int fd) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && fstat(f->map.seg_fd, &b) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Whether the process of pidfd pfd (pid) runs as this process's uid:
 * /proc/PID belongs to it, and pid was still that process afterwards. */
static int same_uid(int pfd, pid_t pid) {
  char path[32];
  struct stat st;
  snprintf(path, sizeof(path), "/proc/%d", (int)pid);
  if (stat(path, &st) < 0 || st.st_uid != geteuid())
    return 0;
  struct pollfd p = {pfd, POLLIN, 0};
  return poll(&p, 1, 0) == 0; /* readable: it exited */
}

/* A pidfd of rank r's process, if this process may take its fds and read
 * its memory, and it holds this group's segment where it said, runs as
 * this uid, and its word is the one it named; else -1, and *why says why.
 * Any failure means "may not": the group stages its ops. */
static int probe(spc_fast *f, int r, probe_why *why) {
  /* What `attached` published; canmap and nomap_* r may be writing now. */
  const spk_fseg_ident *src = &spc__fast_rank(f, r)->id;
  spk_fseg_ident id = {.pid = src->pid, .probe_fd = src->probe_fd,
                       .probe_addr = src->probe_addr,
                       .probe_word = src->probe_word};
  if (id.pid <= 0)
    return probe_fail(why, SPK_FSEG_PROBE_NOPID, 0, -1);
  int pfd = (int)syscall(SYS_pidfd_open, (pid_t)id.pid, 0);
  if (pfd < 0)
    return probe_fail(why, SPK_FSEG_PROBE_PIDFD_OPEN, errno, -1);
  int fd = (int)syscall(SYS_pidfd_getfd, pfd, id.probe_fd, 0);
  if (fd < 0)
    return probe_fail(why, SPK_FSEG_PROBE_PIDFD_GETFD, errno, pfd);
  int same = same_segment(f, fd);
  close(fd);
  if (!same)
    return probe_fail(why, SPK_FSEG_PROBE_NOT_SAME, 0, pfd);
  if (!same_uid(pfd, (pid_t)id.pid))
    return probe_fail(why, SPK_FSEG_PROBE_UID, 0, pfd);
  int rc = probe_read(&id);
  if (rc < 0)
    return probe_fail(why, SPK_FSEG_PROBE_VM_READV, -rc, pfd);
  f->map.pid[r] = (pid_t)id.pid;
  return pfd;
}

void spc__fast_map_step(spc_group *g) {
  spc_fast *f = g->fast;
  spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  /* Every fast_freed_every ops, not only in ops read in place: a rank that
   * freed a buffer and reads nothing in place since must not keep it
   * mapped in the others for long. */
  if (f->map.cap == SPC_FAST_CAP_YES && f->seq % f->tune.fast_freed_every == 0)
    for (int r = 0; r < g->world; r++)
      if (r != g->rank)
        freed_check(f, r);
  if (f->map.cap != SPC_FAST_CAP_UNKNOWN)
    return;
  if (f->map.probed == 0) {
    if (!spc__fast_all_at_least(f, g->world, FIELD(id.attached), 1))
      return;
    int ok = 1;
    for (int r = 0; r < g->world; r++)
      if (r != g->rank) {
        probe_why why = {SPK_FSEG_PROBE_OK, 0};
        f->map.pidfd[r] = probe(f, r, &why);
        if (f->map.pidfd[r] < 0 && ok) { /* the first refusal, for the stats */
          me->id.nomap_rank = r;
          me->id.nomap_call = why.call;
          me->id.nomap_errno = why.err;
        }
        ok &= f->map.pidfd[r] >= 0;
      }
    f->map.probed = ok ? 2 : 1;
    spc__fast_publish(f->hdr, me, &me->id.canmap, (uint64_t)f->map.probed);
  }
  if (!spc__fast_all_at_least(f, g->world, FIELD(id.canmap), 1))
    return;
  f->map.cap = f->map.probed == 2 &&
                   spc__fast_all_at_least(f, g->world, FIELD(id.canmap), 2)
               ? SPC_FAST_CAP_YES
               : SPC_FAST_CAP_NO;
  if (f->map.cap == SPC_FAST_CAP_NO)
    spc__fast_map_free(f, g->world);
}

void spc__fast_forget(spc_client *c, const spc_buffer *b) {
  for (spc_group *g = c->groups; g != NULL; g = g->next)
    if (g->fast != NULL &&
        (g->fast->again.in.buf == b || g->fast->again.out.buf == b))
      spc__fast_again_forget(g->fast);
}

void spc__fast_freed(spc_client *c) {
  for (spc_group *g = c->groups; g != NULL; g = g->next)
    if (g->fast != NULL) {
      SPK_ADD(&spc__fast_rank(g->fast, g->rank)->freed, 1,
                         __ATOMIC_RELEASE);
      spc__fast_again_forget(g->fast);
    }
}

/* An op whose output overlaps its input writes what others read, so it
 * stages, but for an all_reduce in place (in == out) that the fast path
 * does not run replicated (client_fast_plan.c, plan_replicated: every
 * rank reduces everything into its own output). Its plan reduces each
 * rank's own piece of the output from every rank's same piece of input,
 * and nobody else reads that piece of the owner's input; then, after the
 * barrier every rank passes once its reduce steps are done, copies the
 * other ranks' reduced pieces from their outputs into the rest of its
 * own, whose input the others read before that barrier. */
static int reads_safely(const spc_group *g, int kind, const spc_tensor *in,
                        const spc_tensor *out, const uint64_t *n) {
  uintptr_t a = (uintptr_t)spc_tensor_data(in);
  uintptr_t b = (uintptr_t)spc_tensor_data(out);
  if (a + n[0] <= b || b + n[1] <= a)
    return 1;
  return kind == SPK_OP_ALL_REDUCE && a == b && n[0] == n[1] &&
         !spc__fast_replicates(g->fast, g->world, n[1]);
}

int spc__fast_map_want(const spc_group *g, int kind, const spc_tensor *in,
                       const spc_tensor *out) {
  uint64_t n[2] = {spc__tensor_bytes(in), spc__tensor_bytes(out)};
  /* Caller memory staged would go through the daemon past op_bytes: one
   * copy read in place beats three at any size; map_bytes 0 still says
   * never. */
  uint64_t max = g->fast->hdr->map_bytes;
  if (max > 0 && (in->buf->wrapped || out->buf->wrapped))
    max = UINT64_MAX;
  uint64_t min = g->fast->wait.over ? g->fast->tune.fast_map_min_over_bytes
                                     : g->fast->tune.fast_map_min_bytes;
  return g->fast->map.cap == SPC_FAST_CAP_YES &&
         reads_safely(g, kind, in, out, n) && n[0] <= max && n[1] <= max &&
         (n[0] >= min || n[1] >= min);
}

void spc__fast_where_fill(spk_fseg_where *w, const spc_tensor *in,
                          const spc_tensor *out) {
  const spc_tensor *ts[2] = {in, out};
  w->mapped = 1;
  for (int t = 0; t < 2; t++) {
    w->fd[t] = ts[t]->buf->memfd;
    w->dev[t] = ts[t]->buf->dev;
    w->ino[t] = ts[t]->buf->ino;
    w->off[t] = ts[t]->buf->wrapped
                    ? (uint64_t)(uintptr_t)spc_tensor_data(ts[t])
                    : ts[t]->offset;
  }
}

/* Map the memfd rank r names as fd into an entry of its maps, not keep
 * (the entry this op's input uses). */
static int map_take(spc_group *g, int r, int fd_r, uint64_t dev, uint64_t ino,
                    const spc_fast_map *keep, spc_fast_map **m_p) {
  spc_fast *f = g->fast;
  int fd = (int)syscall(SYS_pidfd_getfd, f->map.pidfd[r], fd_r, 0);
  if (fd < 0)
    return spc__fail(g->client, SPC_ESYSTEM, "pidfd_getfd of rank %d's "
                     "buffer (its fd %d) failed: %s", r, fd_r,
                     strerror(errno));
  struct stat st;
  const char *why = NULL;
  void *base = MAP_FAILED;
  int seals = 0;
  if (fstat(fd, &st) < 0)
    why = strerror(errno);
  else if (st.st_dev != dev || st.st_ino != ino || st.st_size <= 0)
    why = "it is not the buffer the rank named";
  else if ((seals = fcntl(fd, F_GET_SEALS)) < 0)
    why = strerror(errno);
  else if (!(seals & F_SEAL_SHRINK)) /* could shrink under our reads */
    why = "it is not sealed against shrinking";
  else if ((base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd,
                        0)) == MAP_FAILED)
    why = strerror(errno);
  close(fd);
  if (why != NULL)
    return spc__fail(g->client, SPC_ESYSTEM, "mapping rank %d's buffer "
                     "(its fd %d, inode %llu) failed: %s", r, fd_r,
                     (unsigned long long)ino, why);
  spc_fast_map *m = &f->map.maps[r][f->map.map_next[r]++ % SPC_FAST_MAPS];
  if (m == keep)
    m = &f->map.maps[r][f->map.map_next[r]++ % SPC_FAST_MAPS];
  if (m->base != NULL)
    munmap(m->base, m->size);
  m->base = base;
  m->size = (uint64_t)st.st_size;
  m->dev = dev;
  m->ino = ino;
  *m_p = m;
  return SPC_OK;
}

/* Where rank r's tensor t (of `bytes` bytes) of where w is mapped here
 * (*p, in entry *m_p); keep: an entry not to give up for it. */
static int map_get(spc_group *g, int r, const spk_fseg_where *w, int t,
                   uint64_t bytes, spc_fast_map **m_p, uint8_t **p) {
  spc_fast *f = g->fast;
  if (w->fd[t] == -1) { /* caller memory: read where it is, in r */
    if (bytes == UINT64_MAX || w->off[t] == 0 ||
        w->off[t] + bytes < w->off[t])
      return spc__fail(g->client, SPC_ESYSTEM, "rank %d named %llu bytes of "
                       "its memory at address 0x%llx", r,
                       (unsigned long long)bytes,
                       (unsigned long long)w->off[t]);
    *p = (uint8_t *)(uintptr_t)w->off[t];
    f->map.remote[r * SPK_T_COUNT + t] = 1;
    return SPC_OK;
  }
  spc_fast_map *m = NULL, *keep = *m_p;
  for (int i = 0; i < SPC_FAST_MAPS && m == NULL; i++)
    if (f->map.maps[r][i].base != NULL && f->map.maps[r][i].dev == w->dev[t] &&
        f->map.maps[r][i].ino == w->ino[t])
      m = &f->map.maps[r][i];
  int rc = m != NULL ? SPC_OK
                     : map_take(g, r, w->fd[t], w->dev[t], w->ino[t], keep,
                                &m);
  if (rc < 0)
    return rc;
  if (bytes == UINT64_MAX || w->off[t] > m->size ||
      bytes > m->size - w->off[t])
    return spc__fail(g->client, SPC_ESYSTEM, "rank %d named %llu bytes at "
                     "offset %llu of a buffer of %llu bytes", r,
                     (unsigned long long)bytes,
                     (unsigned long long)w->off[t],
                     (unsigned long long)m->size);
  *p = m->base + w->off[t];
  *m_p = m;
  return SPC_OK;
}

/* Whether some step of f->plan reads an output (only then are the other
 * ranks' outputs mapped). */
static int plan_reads_out(const spc_fast *f) {
  for (size_t i = 0; i < f->plan.nmoves; i++)
    if (f->plan.moves[i].src_t == SPK_T_OUT)
      return 1;
  return 0;
}

/* Rank r's input and output of op s, read in its buffers (its output
 * only when the plan reads outputs: out). */
static int bases_mapped(spc_group *g, int r, uint64_t s, int out,
                        uint8_t **b) {
  spc_fast *f = g->fast;
  const spk_fseg_rank *a = spc__fast_rank(f, r);
  freed_check(f, r);
  /* The slot holds s until this rank says it consumed s; a copy, as r
   * may write anything there. */
  spk_fseg_where w = a->ring[s % SPK_FSEG_RING].where;
  const spk_fseg_desc *d = &f->planned[r];
  spc_fast_map *m = NULL;
  b[SPK_T_OUT] = NULL;
  int rc = map_get(g, r, &w, SPK_T_IN,
                   spc__fast_desc_bytes(d, d->in_ndim, d->in_shape), &m,
                   &b[SPK_T_IN]);
  if (rc == SPC_OK && out)
    rc = map_get(g, r, &w, SPK_T_OUT,
                 spc__fast_desc_bytes(d, d->out_ndim, d->out_shape), &m,
                 &b[SPK_T_OUT]);
  return rc;
}

int spc__fast_bases(spc_group *g, uint64_t s, const spc_tensor *in,
                    const spc_tensor *out, uint8_t **bases, int *any_p) {
  spc_fast *f = g->fast;
  int rc = SPC_OK;
  *any_p = 0;
  for (int r = 0; r < g->world; r++)
    *any_p |= f->inplace[r];
  int reads_out = *any_p && plan_reads_out(f);
  memset(f->map.remote, 0, sizeof(f->map.remote));
  for (int r = 0; r < g->world; r++) {
    uint8_t **b = &bases[r * SPK_T_COUNT];
    if (r == g->rank && f->inplace[r]) {
      b[SPK_T_IN] = spc_tensor_data(in);
      b[SPK_T_OUT] = spc_tensor_data(out);
    } else if (f->inplace[r]) {
      if (rc == SPC_OK)
        rc = bases_mapped(g, r, s, reads_out, b);
    } else {
      if (f->staging.lines[r])
        spc__fast_lines_get(f, r, s);
      for (int t = 0; t < SPK_T_COUNT; t++)
        b[t] = spc__fast_stage(f, r, t, s);
    }
  }
  return rc;
}
