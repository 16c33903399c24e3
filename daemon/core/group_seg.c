/* A group's shared segment, daemon side: see group_seg.h. The daemon makes
 * the segment, so its size and seals are its own; the clients only get a
 * descriptor of it over their socket, so nobody outside the group (no
 * path, no other uid) can reach it. */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "group.h"
#include "fast_sync.h"
#include "group_seg.h"
#include "quota.h"

/* A descriptor of the segment for every rank, before any rank hears of
 * it: when one cannot be made (the daemon is out of fds), no rank gets
 * the segment, rather than some ranks running ops in it that the others
 * never see. -1 with errno set on failure. */
static int dup_all(spd_gseg *seg, int world) {
  for (int r = 0; r < world; r++)
    if ((seg->dups[r] = fcntl(seg->fd, F_DUPFD_CLOEXEC, 0)) < 0)
      return -1;
  return 0;
}

static void dups_close(spd_gseg *seg) {
  for (int r = 0; r < SPK_FSEG_MAXWORLD; r++)
    if (seg->dups[r] >= 0) {
      close(seg->dups[r]);
      seg->dups[r] = -1;
    }
}

void spd_gseg_create(spd_group *g) {
  spd_ctx *ctx = g->ctx;
  uint64_t stage = (uint64_t)spd_config_fast_stage(&ctx->cfg);
  if (g->seg != NULL || stage == 0 || g->multinode || g->nlocal != g->world ||
      g->world > SPK_FSEG_MAXWORLD)
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
  spd_gseg *seg = calloc(1, sizeof(*seg));
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
    seg->since_ns = spd_now_ns();
    g->seg = seg;
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

/* Rank r's area, from the layout the daemon made (not the header's). */
static const spk_fseg_rank *seg_rank(const spd_gseg *seg, int r) {
  return spk_fseg_rank_of(seg->hdr, seg->stage, r);
}

void spd_gseg_send_joined(spd_group *g, spd_session *s, Spcoll__Frame *f) {
  if (g->seg == NULL) {
    spd_session_send(s, f);
    return;
  }
  f->group_joined->fast_seg_size = g->seg->size;
  int r = (int)f->group_joined->rank, fd = g->seg->dups[r];
  g->seg->dups[r] = -1;
  if (spd_session_send_fd(s, f, fd) < 0) {
    /* This rank cannot take the segment (its descriptor was made, so the
     * send itself failed: memory, or its connection is closing), so no
     * rank may run ops in it: closed sends every rank's ops to the daemon
     * (broken would fail them). A rank answered earlier in this turn may
     * have published its first op in it already: that op waits for this
     * rank until the op timeout, or fails when its connection closes. */
    __atomic_store_n(&g->seg->hdr->closed, 1, __ATOMIC_RELEASE);
    f->group_joined->fast_seg_size = 0;
    spd_session_send(s, f);
  }
}

void spd_gseg_answered(spd_group *g, int rank, uint64_t req) {
  if (g->seg == NULL)
    return;
  spk_fseg_rank *a = (spk_fseg_rank *)seg_rank(g->seg, rank);
  __atomic_store_n(&a->answered, req, __ATOMIC_RELEASE);
}

void spd_gseg_break(spd_group *g, int status, const char *msg) {
  spd_gseg *seg = g->seg;
  if (seg == NULL || __atomic_load_n(&seg->hdr->broken, __ATOMIC_ACQUIRE))
    return;
  spd_gseg_harvest(g); /* ops done before the break still count */
  spk_fsync_break(seg->hdr, status < 0 ? status : SPK_EABORTED, msg);
  /* Not FUTEX_PRIVATE: the waiters are other processes. */
  syscall(SYS_futex, &seg->hdr->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* A fast op waits while some rank waits in the segment; it is stalled
 * when no rank has published anything since (the sum of their progress
 * words is unchanged). A rank that is stopped may be stopped inside a
 * wait, so who is late is told by the counters: a rank behind the others
 * on any of them is one the op waits for, as the daemon path names the
 * ranks that have not issued an op. */
static int observe(spd_group *g, uint64_t now) {
  spd_gseg *seg = g->seg;
  uint64_t sum = 0;
  int waiting = 0;
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = seg_rank(seg, r);
    sum += __atomic_load_n(&a->progress, __ATOMIC_ACQUIRE);
    waiting += __atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) != 0;
  }
  if (sum != seg->progress_seen || !waiting) {
    seg->progress_seen = sum;
    seg->since_ns = now;
  }
  return waiting > 0;
}

static const size_t counter_fields[] = {
    offsetof(spk_fseg_rank, published), offsetof(spk_fseg_rank, consumed),
    offsetof(spk_fseg_rank, fdone), offsetof(spk_fseg_rank, reduced)};
#define NFIELDS (sizeof(counter_fields) / sizeof(counter_fields[0]))

int spd_gseg_pending(spd_group *g, uint64_t now, spd_gseg_wait *w) {
  spd_gseg *seg = g->seg;
  if (seg == NULL || g->broken || !observe(g, now))
    return 0;
  uint64_t max[NFIELDS] = {0};
  for (int r = 0; r < g->world; r++)
    for (size_t i = 0; i < NFIELDS; i++) {
      uint64_t v = spk_fseg_said(seg_rank(seg, r), counter_fields[i]);
      max[i] = v > max[i] ? v : max[i];
    }
  size_t n = 0;
  w->seq = max[0];
  w->kind = 0;
  w->age_ns = now - seg->since_ns;
  w->missing[0] = '\0';
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = seg_rank(seg, r);
    int behind = 0;
    for (size_t i = 0; i < NFIELDS; i++)
      behind |= spk_fseg_said(a, counter_fields[i]) < max[i];
    if (behind && n < sizeof(w->missing) - 16)
      n += (size_t)snprintf(w->missing + n, sizeof(w->missing) - n, "%s%d",
                            n ? "," : "", r);
    if (!behind) /* an up-to-date rank's descriptor tells the op's kind */
      w->kind = __atomic_load_n(&a->ring[w->seq % SPK_FSEG_RING].op,
                                __ATOMIC_RELAXED);
  }
  if (n == 0) /* nobody is behind: every rank waits (a bug, not a user's) */
    snprintf(w->missing, sizeof(w->missing), "none (every rank waits)");
  /* A stall is told by its start: any move of a rank starts a new one,
   * which the watchdog may log again. */
  w->stuck = seg->stuck_since != 0 && seg->stuck_since == seg->since_ns;
  return 1;
}

/* The stall w, past stuck_seconds and short of the op timeout: logged
 * once, in the daemon path's words (watchdog.c's report), so that one
 * search of the log finds stuck ops of both paths. Once a stall, not
 * once an op: a rank that scribbles seq cannot make a line a tick, and
 * an op that moves (a late rank arrived, another is still missing) and
 * stalls again is told again, naming who it waits for now. */
static void stuck_report(spd_group *g, const spd_gseg_wait *w) {
  g->seg->stuck_since = g->seg->since_ns;
  SPD_WARN(&g->ctx->log, "stuck op: group '%s' op %llu (%s, shared-memory "
           "path) pending %.1f s, waiting for rank(s) %s", g->name,
           (unsigned long long)w->seq, spd_op_slot_name(spd_op_slot(w->kind)),
           (double)w->age_ns * 1e-9, w->missing);
}

/* The stall w, past the group's op timeout: some rank published a
 * sequence number that another has not reached, and no rank moved since.
 * The group breaks, failing the waiters in the segment and the daemon
 * path's pending ops, naming the ranks behind. */
static void timed_out(spd_group *g, const spd_gseg_wait *w) {
  char msg[400];
  snprintf(msg, sizeof(msg), "op %llu (%s, shared-memory path) of group "
           "'%s' timed out after %.1f s: rank(s) %s never issued it",
           (unsigned long long)w->seq, spd_op_slot_name(spd_op_slot(w->kind)),
           g->name, (double)w->age_ns * 1e-9, w->missing);
  SPD_WARN(&g->ctx->log, "%s", msg);
  g->ctx->stats.ops_timed_out++;
  spd_group_break(g, SPK_ETIMEDOUT, msg);
  spd_group_fail_pending(g, SPK_ETIMEDOUT, msg);
}

void spd_gseg_tick(spd_group *g, uint64_t now) {
  spd_gseg_wait w;
  if (!spd_gseg_pending(g, now, &w))
    return;
  uint64_t stuck = (uint64_t)g->ctx->cfg.stuck_seconds * 1000000000u;
  if (w.age_ns > g->op_timeout_ns)
    timed_out(g, &w);
  else if (!w.stuck && w.age_ns > stuck)
    stuck_report(g, &w);
}

/* Rank 0's counters of one op kind, each read once, atomically. */
static spk_fseg_counters counters_read(const spk_fseg_counters *c) {
  spk_fseg_counters v = {0};
  v.bytes = __atomic_load_n(&c->bytes, __ATOMIC_RELAXED);
  v.ns = __atomic_load_n(&c->ns, __ATOMIC_RELAXED);
  v.in_place = __atomic_load_n(&c->in_place, __ATOMIC_RELAXED);
  for (int j = 0; j < SPK_FSEG_HIST; j++)
    v.lat[j] = __atomic_load_n(&c->lat[j], __ATOMIC_RELAXED);
  return v;
}

void spd_gseg_harvest(spd_group *g) {
  spd_gseg *seg = g->seg;
  if (seg == NULL)
    return;
  spd_ctx *ctx = g->ctx;
  const spk_fseg_rank *r0 = seg_rank(seg, 0);
  for (int k = 0; k < SPK_OP_COUNT; k++) {
    /* Rank 0 bumps count last (release), so what it counts is whole. */
    const spk_fseg_counters *c = &r0->counters[k];
    spk_fseg_counters *seen = &seg->seen[k];
    uint64_t count = __atomic_load_n(&c->count, __ATOMIC_ACQUIRE);
    uint64_t errors = __atomic_load_n(&c->errors, __ATOMIC_ACQUIRE);
    if (count == seen->count && errors == seen->errors)
      continue;
    /* One look at each counter: rank 0 may count again meanwhile, and
     * what it adds is taken at the next harvest, not lost. */
    spk_fseg_counters now = counters_read(c);
    now.count = count, now.errors = errors;
    int slot = spd_op_slot(k);
    spd_op_stats *sts[2] = {&ctx->op_stats[slot], &g->op_stats[slot]};
    uint64_t dc = count - seen->count, db = now.bytes - seen->bytes;
    double ds = (double)(now.ns - seen->ns) * 1e-9;
    g->ops_done += dc;
    ctx->stats.ops_completed += dc;
    ctx->stats.bytes_moved += db;
    ctx->stats.ops_failed += errors - seen->errors;
    for (int i = 0; i < 2; i++) {
      sts[i]->count += dc;
      sts[i]->errors += errors - seen->errors;
      sts[i]->bytes += db;
      sts[i]->seconds += ds;
      for (int j = 0; j < SPK_FSEG_HIST && j < SPD_LAT_BUCKETS; j++)
        sts[i]->lat[j] += now.lat[j] - seen->lat[j];
    }
    *seen = now;
  }
}

/* Whether the ranks read each other's ops in place (client_fast_map.c):
 * "yes", "unknown" (some rank has not probed yet) or "no", with the first
 * refusal a rank published: which rank it could not read and why. Read
 * from the ranks' areas, which any member may scribble on: only numbers,
 * each checked before it names anything. */
static void read_in_place(const spd_gseg *seg, int world, FILE *out) {
  static const char *const calls[SPK_FSEG_PROBE_COUNT] = {
      "ok", "no pid named", "pidfd_open", "pidfd_getfd",
      "its fd was not the group's segment", "it runs as another uid",
      "process_vm_readv"};
  int unknown = 0;
  for (int r = 0; r < world; r++) {
    const spk_fseg_rank *a = seg_rank(seg, r);
    uint64_t can = __atomic_load_n(&a->id.canmap, __ATOMIC_ACQUIRE);
    unknown |= can != 1 && can != 2; /* not yet, or a scribble */
    if (can != 1)
      continue;
    int call = a->id.nomap_call, err = a->id.nomap_errno;
    fprintf(out, " read_in_place=no rank=%d could_not_read_rank=%d "
            "why=\"%s%s%s\"", r, a->id.nomap_rank,
            call >= 0 && call < SPK_FSEG_PROBE_COUNT ? calls[call] : "?",
            err > 0 ? ": " : "", err > 0 ? strerror(err) : "");
    return;
  }
  fprintf(out, " read_in_place=%s", unknown ? "unknown" : "yes");
}

void spd_gseg_line(spd_group *g, const char *label, FILE *out) {
  if (g->seg == NULL)
    return;
  uint64_t ops = 0, errors = 0, in_place = 0;
  for (int k = 0; k < SPK_OP_COUNT; k++) {
    ops += g->seg->seen[k].count, errors += g->seg->seen[k].errors;
    in_place += g->seg->seen[k].in_place;
  }
  fprintf(out, "shm %s ops=%llu errors=%llu in_place=%llu stage_bytes=%llu",
          label, (unsigned long long)ops, (unsigned long long)errors,
          (unsigned long long)in_place, (unsigned long long)g->seg->stage);
  read_in_place(g->seg, g->world, out);
  fputc('\n', out);
}

/* Under way: some rank is inside a fast op (in_op, waiting), or
 * published one that another rank has not reached. A published op of
 * the daemon's path is the daemon's to wait for (its g->ops), or was
 * refused: no reason to wait for the others to issue it. */
int spd_gseg_busy(const spd_group *g) {
  const spd_gseg *seg = g->seg;
  if (seg == NULL || __atomic_load_n(&seg->hdr->broken, __ATOMIC_ACQUIRE))
    return 0;
  uint64_t fast = 0, low = UINT64_MAX;
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = seg_rank(seg, r);
    if (spk_fsync_rank_busy(a))
      return 1;
    uint64_t p = __atomic_load_n(&a->published, __ATOMIC_ACQUIRE);
    if (p > fast && spk_fseg_fast_op(a, p))
      fast = p;
    low = p < low ? p : low;
  }
  return low < fast;
}

void spd_gseg_close_all(spd_ctx *ctx) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    if (g->seg != NULL)
      /* a rank that has not seen closed has its in_op seen by
       * spd_gseg_busy (kernels/fast_sync.h) */
      spk_fsync_close(g->seg->hdr);
}

void spd_gseg_destroy(spd_group *g) {
  spd_gseg *seg = g->seg;
  if (seg == NULL)
    return;
  spd_gseg_harvest(g);
  spd_quota_give(&g->ctx->quotas, g->owner, SPD_Q_BYTES, (long long)seg->size);
  munmap(seg->hdr, seg->size);
  close(seg->fd);
  dups_close(seg);
  free(seg);
  g->seg = NULL;
}
