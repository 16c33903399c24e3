/* The fast path's row of the engine table: a group's shared segment,
 * daemon side. The daemon makes the segment, so its size and seals are
 * its own; the clients only get a descriptor of it over their socket, so
 * nobody outside the group (no path, no other uid) can reach it. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fast_internal.h"
#include "fast_sync.h"
#include "quota.h"

/* A descriptor of the segment for every rank, before any rank hears of
 * it: when one cannot be made (the daemon is out of fds), no rank gets
 * the segment, rather than some ranks running ops in it that the others
 * never see. -1 with errno set on failure. */
static int dup_all(spd_fgroup *seg, int world) {
  for (int r = 0; r < world; r++)
    if ((seg->dups[r] = fcntl(seg->fd, F_DUPFD_CLOEXEC, 0)) < 0)
      return -1;
  return 0;
}

static void dups_close(spd_fgroup *seg) {
  for (int r = 0; r < SPK_FSEG_MAXWORLD; r++)
    if (seg->dups[r] >= 0) {
      close(seg->dups[r]);
      seg->dups[r] = -1;
    }
}

/* group_open: every rank of g is on this node (the table's contract). */
static void fast_open(const spd_group_view *g, spd_engine_counters *counters,
                      void **state_p) {
  spd_ctx *ctx = g->ctx;
  uint64_t stage = (uint64_t)spd_config_fast_stage(&ctx->cfg);
  *state_p = NULL;
  if (stage == 0 || g->world > SPK_FSEG_MAXWORLD)
    return;
  uint64_t size = spk_fseg_size(g->world, stage);
  /* The segment is memory the daemon holds for the group's owner: it
   * counts as that uid's registered bytes. */
  char why[200];
  if (spd_quota_take(&ctx->quotas, &ctx->cfg, g->owner, SPD_Q_BYTES,
                     (long long)size, why, sizeof(why)) < 0) {
    SPD_INFO(&ctx->log, "group '%s': no fast path: its segment of %llu "
             "bytes: %s", g->name, (unsigned long long)size, why);
    return;
  }
  spd_fgroup *seg = calloc(1, sizeof(*seg));
  if (seg == NULL) {
    spd_quota_give(&ctx->quotas, g->owner, SPD_Q_BYTES, (long long)size);
    SPD_WARN(&ctx->log, "group '%s': no fast path: calloc of %zu bytes "
             "failed", g->name, sizeof(*seg));
    return;
  }
  for (int r = 0; r < SPK_FSEG_MAXWORLD; r++)
    seg->dups[r] = -1;
  const char *what = "memfd_create";
  int fd = memfd_create("spcoll-group", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *p = MAP_FAILED;
  if (fd >= 0 && (what = "ftruncate", ftruncate(fd, (off_t)size)) == 0 &&
      (what = "mmap", p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                                MAP_SHARED, fd, 0)) != MAP_FAILED &&
      (what = "fcntl(F_ADD_SEALS)",
       fcntl(fd, F_ADD_SEALS,
             F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) == 0 &&
      (what = "fcntl(F_DUPFD_CLOEXEC)", seg->fd = fd,
       dup_all(seg, g->world)) == 0) {
    seg->hdr = p;
    seg->size = size;
    seg->stage = stage;
    spk_fseg_init(seg->hdr, g->world, stage,
                  (uint32_t)ctx->cfg.mid_spin_us * 1000u);
    for (int k = 0; k < SPK_OP_COUNT; k++)
      seg->hdr->op_bytes[k] = (uint64_t)spd_config_fast_limit(&ctx->cfg, k);
    seg->hdr->map_bytes = (uint64_t)ctx->cfg.fast_map_bytes;
    seg->hdr->stream_bytes = (uint64_t)ctx->cfg.stream_bytes;
#define TUNE_PUT(field, flag, def, lo, hi, help)                             \
  seg->hdr->tune.field = (uint64_t)ctx->cfg.field;
    SPK_FAST_TUNES(TUNE_PUT)
#undef TUNE_PUT
    seg->since_ns = spd_now_ns();
    seg->g = g;
    seg->counters = counters;
    *state_p = seg;
    SPD_DEBUG(&ctx->log, "group '%s': shared segment of %llu bytes", g->name,
              (unsigned long long)size);
    return;
  }
  SPD_WARN(&ctx->log, "group '%s': no fast path: %s (segment of %llu "
           "bytes) failed: %m", g->name, what, (unsigned long long)size);
  dups_close(seg);
  if (p != MAP_FAILED)
    munmap(p, size);
  if (fd >= 0)
    close(fd);
  free(seg);
  spd_quota_give(&ctx->quotas, g->owner, SPD_Q_BYTES, (long long)size);
}

static int fast_fd(void *state, int rank, uint64_t *size) {
  spd_fgroup *seg = state;
  if (rank < 0 || rank >= seg->g->world)
    return -1;
  int fd = seg->dups[rank];
  seg->dups[rank] = -1;
  *size = seg->size;
  return fd;
}

/* A rank cannot take the segment (its descriptor was made, so the send
 * itself failed: memory, or its connection is closing), so no rank may
 * run ops in it: closed sends every rank's ops to the daemon (broken
 * would fail them). A rank answered earlier in this turn may have
 * published its first op in it already: that op waits for this rank
 * until the op timeout, or fails when its connection closes. */
static void fast_fd_lost(void *state) {
  spd_fgroup *seg = state;
  SPK_STORE(&seg->hdr->closed, 1, __ATOMIC_RELEASE);
}

static void fast_answered(void *state, int rank, uint64_t req) {
  spd_fgroup *seg = state;
  spk_fseg_rank *a = (spk_fseg_rank *)spd_fgroup_rank(seg, rank);
  SPK_STORE(&a->answered, req, __ATOMIC_RELEASE);
}

static void fast_break(void *state, int status, const char *msg) {
  spd_fgroup *seg = state;
  if (SPK_LOAD(&seg->hdr->broken, __ATOMIC_ACQUIRE))
    return;
  spd_fgroup_harvest(seg); /* ops done before the break still count */
  spk_fsync_break(seg->hdr, status < 0 ? status : SPK_EABORTED, msg);
  /* Not FUTEX_PRIVATE: the waiters are other processes. */
  syscall(SYS_futex, &seg->hdr->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Under way: some rank is inside a fast op (in_op, waiting), or
 * published one that another rank has not reached. A published op of
 * the daemon's path is the daemon's to wait for (its g->ops), or was
 * refused: no reason to wait for the others to issue it. */
static int fast_busy(void *state) {
  const spd_fgroup *seg = state;
  if (SPK_LOAD(&seg->hdr->broken, __ATOMIC_ACQUIRE))
    return 0;
  uint64_t fast = 0, low = UINT64_MAX;
  for (int r = 0; r < seg->g->world; r++) {
    const spk_fseg_rank *a = spd_fgroup_rank(seg, r);
    if (spk_fsync_rank_busy(a))
      return 1;
    uint64_t p = SPK_LOAD(&a->published, __ATOMIC_ACQUIRE);
    if (p > fast && spk_fseg_fast_op(a, p))
      fast = p;
    low = p < low ? p : low;
  }
  return low < fast;
}

/* The daemon drains: every rank sends its new ops to the daemon. A rank
 * that has not seen closed has its in_op seen by fast_busy
 * (kernels/fast_sync.h). */
static void fast_drain(void *state) {
  spd_fgroup *seg = state;
  spk_fsync_close(seg->hdr);
}

static void fast_close(void *state) {
  spd_fgroup *seg = state;
  const spd_group_view *g = seg->g;
  spd_fgroup_harvest(seg);
  spd_quota_give(&g->ctx->quotas, g->owner, SPD_Q_BYTES, (long long)seg->size);
  munmap(seg->hdr, seg->size);
  close(seg->fd);
  dups_close(seg);
  free(seg);
}

/* The fast path's row: it runs no daemon work (its ranks run their ops
 * among themselves in the segment; an op it cannot take goes to the
 * daemon's path and another row), so it has only the group hooks. */
const spd_engine spd_engine_fast = {
    .built = 1,
    .counts_own_bytes = 1,
    .group_open = fast_open,
    .group_fd = fast_fd,
    .group_fd_lost = fast_fd_lost,
    .group_answered = fast_answered,
    .group_break = fast_break,
    .group_tick = spd_fgroup_tick,
    .group_waiting = spd_fgroup_waiting,
    .group_harvest = spd_fgroup_harvest,
    .group_line = spd_fgroup_line,
    .group_drain = fast_drain,
    .group_busy = fast_busy,
    .group_close = fast_close,
};
