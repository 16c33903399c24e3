#include "buffer.h"
#include "stream_flags.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "engine.h"
#include "gpu_ipc.h"

/* A client could truncate an unsealed file under our mapping and make the
 * daemon fault (SIGBUS); the shrink seal rules that out. */
static int buffer_check_fd(int fd, uint64_t size, struct stat *st_p,
                           spk_err *err) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "fstat(fd %d) failed: %s", fd,
                       strerror(errno));
  if (!S_ISREG(st.st_mode))
    return spk_err_set(err, SPK_EINVAL,
                       "buffer fd is not a memfd (file mode 0%o)",
                       (unsigned)st.st_mode);
  /* Only plain shmem: a hugetlb memfd can lose pages under the mapping
   * (hole punching with an empty huge page pool) and SIGBUS the daemon. */
  struct statfs fs;
  if (fstatfs(fd, &fs) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "fstatfs(fd %d) failed: %s", fd,
                       strerror(errno));
  if (fs.f_type != TMPFS_MAGIC)
    return spk_err_set(err, SPK_EINVAL,
                       "buffer fd is not a shmem memfd (filesystem 0x%lx)",
                       (unsigned long)fs.f_type);
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    return spk_err_set(err, SPK_EINVAL,
                       "buffer fd is not a sealable memfd: F_GET_SEALS: %s",
                       strerror(errno));
  if (!(seals & F_SEAL_SHRINK))
    return spk_err_set(err, SPK_EINVAL,
                       "buffer memfd is not sealed with F_SEAL_SHRINK "
                       "(seals 0x%x)", (unsigned)seals);
  if (size == 0)
    return spk_err_set(err, SPK_EINVAL,
                       "buffer size must be greater than 0, got 0");
  if ((uint64_t)st.st_size != size)
    return spk_err_set(err, SPK_EINVAL,
                       "buffer size %llu does not match the memfd's size %lld",
                       (unsigned long long)size, (long long)st.st_size);
  *st_p = st;
  return SPK_OK;
}

/* Pages the daemon faults in are charged to the daemon: a client could
 * register a huge sparse file and make the daemon pay for its memory. The
 * owner populates them (spc_buffer_alloc does, with MADV_POPULATE_WRITE).
 * mincore finds absent pages fast (0.6 ms per GiB here, SEEK_HOLE 16 ms);
 * a page it calls absent may be swapped out, which SEEK_HOLE tells apart.
 * Pages fallocated but never written count as holes to both. */
static int buffer_hole_at(int fd, uint64_t off, int *hole_p, spk_err *err) {
  off_t h = lseek(fd, (off_t)off, SEEK_HOLE);
  if (h < 0)
    return spk_err_set(err, SPK_ESYSTEM, "lseek(fd %d, %llu, SEEK_HOLE) "
                       "failed: %s", fd, (unsigned long long)off,
                       strerror(errno));
  *hole_p = (uint64_t)h == off;
  return SPK_OK;
}

static int buffer_check_populated(int fd, void *base, uint64_t size,
                                  spk_err *err) {
  unsigned char vec[4096];
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t npages = (size + page - 1) / page;
  for (uint64_t first = 0; first < npages; first += sizeof(vec)) {
    uint64_t n = npages - first < sizeof(vec) ? npages - first : sizeof(vec);
    uint64_t len = n * page;
    if (first * page + len > size)
      len = size - first * page;
    if (mincore((char *)base + first * page, len, vec) < 0)
      return spk_err_set(err, SPK_ESYSTEM, "mincore of %llu bytes failed: %s",
                         (unsigned long long)len, strerror(errno));
    for (uint64_t i = 0; i < n; i++) {
      int hole = 0, rc;
      if (vec[i] & 1)
        continue;
      if ((rc = buffer_hole_at(fd, (first + i) * page, &hole, err)) < 0)
        return rc;
      if (hole)
        return spk_err_set(err, SPK_EINVAL,
                           "buffer memfd has unpopulated pages from byte %llu "
                           "of %llu: write every page before registering "
                           "(MADV_POPULATE_WRITE, as spc_buffer_alloc does; "
                           "fallocate alone does not populate them); the "
                           "daemon does not fault in a client's memory",
                           (unsigned long long)((first + i) * page),
                           (unsigned long long)size);
    }
  }
  return SPK_OK;
}

int spd_buffer_map(spd_ctx *ctx, int fd, uint64_t size, spd_buffer **buf_p,
                   spk_err *err) {
  struct stat st = {0};
  int rc = buffer_check_fd(fd, size, &st, err);
  if (rc < 0)
    goto out_close;
  spd_buffer *buf = calloc(1, sizeof(*buf));
  if (buf == NULL) {
    rc = spk_err_set(err, SPK_ENO_MEMORY, "calloc of a buffer record failed");
    goto out_close;
  }
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    rc = spk_err_set(err, SPK_ESYSTEM, "mmap of %llu bytes failed: %s",
                     (unsigned long long)size, strerror(errno));
    free(buf);
    goto out_close;
  }
  if ((rc = buffer_check_populated(fd, base, size, err)) < 0) {
    if (munmap(base, size) < 0)
      SPD_WARN(&ctx->log, "munmap of a refused buffer failed: %m");
    free(buf);
    goto out_close;
  }
  buf->id = spd_next_id(ctx);
  buf->kind = SPD_BUF_HOST;
  buf->device = -1;
  buf->file_dev = (uint64_t)st.st_dev;
  buf->file_ino = (uint64_t)st.st_ino;
  buf->base = base;
  buf->size = size;
  buf->refs = 1;
  ctx->stats.buffers_registered++;
  *buf_p = buf;
out_close:
  if (close(fd) < 0)
    SPD_WARN(&ctx->log, "close(buffer fd %d) failed: %m", fd);
  return rc;
}

int spd_buffer_of_device(spd_ctx *ctx, void *mem, uint8_t *base, int dev,
                         uint64_t size, spd_buffer **buf_p, spk_err *err) {
  spd_buffer *buf = calloc(1, sizeof(*buf));
  if (buf == NULL) {
    spd_gpu_ipc_close(ctx, mem);
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a buffer record "
                       "failed");
  }
  buf->gpu_mem = mem;
  buf->base = base;
  buf->device = dev;
  buf->kind = SPD_BUF_DEVICE;
  buf->id = spd_next_id(ctx);
  buf->size = size;
  buf->refs = 1;
  ctx->stats.buffers_registered++;
  *buf_p = buf;
  return SPK_OK;
}

int spd_buffer_open_device(spd_ctx *ctx, const uint8_t *handle, size_t hlen,
                           const uint8_t *uuid, size_t ulen, uint64_t offset,
                           uint64_t size, spd_buffer **buf_p, spk_err *err) {
  void *mem;
  uint8_t *base;
  int dev;
  int rc = spd_gpu_ipc_open(ctx, handle, hlen, uuid, ulen, offset, size,
                            &mem, &base, &dev, err);
  if (rc < 0)
    return rc;
  ctx->stats.buffers_ipc++;
  return spd_buffer_of_device(ctx, mem, base, dev, size, buf_p, err);
}

void spd_buffer_ref(spd_buffer *buf) {
  buf->refs++;
}

void spd_buffer_unref(spd_ctx *ctx, spd_buffer *buf) {
  (void)spd_buffer_unref_then(ctx, buf, NULL, NULL);
}


static void count_add(uint64_t *counter, uint64_t *seen, const uint64_t *word) {
  uint64_t v = SPK_SFLAG_LOAD(word);
  if (v > *seen)
    *counter += v - *seen;
  *seen = v;
}

void spd_buffer_counts_seed(spd_buffer *buf) {
  uint64_t sink[3] = {0};
  if (!buf->stream_flags || buf->size < SPK_SFLAG_BYTES)
    return;
  const spk_sflag_counts *k =
      (const spk_sflag_counts *)(buf->base + SPK_SFLAG_COUNTS_OFF);
  count_add(&sink[0], &buf->counts_seen[0], &k->sym_ops);
  count_add(&sink[1], &buf->counts_seen[1], &k->sym_bytes);
  count_add(&sink[2], &buf->counts_seen[2], &k->sym_daemon_ops);
}

void spd_buffer_counts_harvest(spd_ctx *ctx, spd_buffer *buf) {
  if (!buf->stream_flags || buf->size < SPK_SFLAG_BYTES)
    return;
  const spk_sflag_counts *k =
      (const spk_sflag_counts *)(buf->base + SPK_SFLAG_COUNTS_OFF);
  count_add(&ctx->stats.gpu_sym_ops, &buf->counts_seen[0], &k->sym_ops);
  count_add(&ctx->stats.gpu_sym_bytes, &buf->counts_seen[1], &k->sym_bytes);
  count_add(&ctx->stats.gpu_sym_daemon_ops, &buf->counts_seen[2],
            &k->sym_daemon_ops);
}

int spd_buffer_unref_then(spd_ctx *ctx, spd_buffer *buf,
                          spd_gpu_closed_fn fn, void *arg) {
  int mine = fn != NULL && buf->kind == SPD_BUF_DEVICE;
  if (mine) { /* one release per buffer: it is off its session's list */
    buf->closed = fn;
    buf->closed_arg = arg;
  }
  if (--buf->refs > 0)
    return mine;
  spd_buffer_counts_harvest(ctx, buf);
  spd_engines_forget_buffer(ctx, buf->engine_state);
  if (buf->kind == SPD_BUF_DEVICE) {
    /* An IPC mapping is undone only by cudaIpcCloseMemHandle (once its
     * allocation's last buffer goes), never by munmap: the client frees
     * the memory after this release returns. A cuMem mapping is unmapped
     * on the thread pool: its release's fn follows. */
    spd_gpu_closed_fn closed = buf->closed;
    void *closed_arg = buf->closed_arg;
    int later = spd_gpu_ipc_close_then(ctx, buf->gpu_mem, closed, closed_arg);
    free(buf);
    if (!later && closed != NULL && !mine)
      closed(closed_arg); /* a release an op held back: closed now */
    return mine && later;
  }
  if (munmap(buf->base, buf->size) < 0)
    SPD_ERROR(&ctx->log, "munmap(buffer %llu, %zu bytes) failed: %m",
              (unsigned long long)buf->id, buf->size);
  free(buf);
  return 0;
}

int spd_buffer_check_range(const spd_buffer *buf, uint64_t offset,
                           uint64_t bytes, const char *what, spk_err *err) {
  if (offset > buf->size || bytes > buf->size - offset)
    return spk_err_set(err, SPK_EINVAL,
                       "%s tensor (offset %llu, %llu bytes) reaches outside "
                       "buffer %llu of %zu bytes",
                       what, (unsigned long long)offset,
                       (unsigned long long)bytes, (unsigned long long)buf->id,
                       buf->size);
  return SPK_OK;
}
