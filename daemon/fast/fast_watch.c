/* The fast row's watch and stats of a group's segment: fast ops stalled
 * or past the op timeout (the watchdog's tick), what waits (stats), the
 * ops completed (harvested into the group's, the daemon's and the row's
 * counters) and the text stats' line. Every word read here is the
 * ranks' to write: numbers only, each checked before it names anything.
 * Loop thread only. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fast_internal.h"
#include "fast_sync.h"

/* A fast op waits while some rank waits in the segment; it is stalled
 * when no rank has published anything since (the sum of their progress
 * words is unchanged). A rank that is stopped may be stopped inside a
 * wait, so who is late is told by the counters: a rank behind the others
 * on any of them is one the op waits for, as the daemon path names the
 * ranks that have not issued an op. */
static int observe(spd_fgroup *seg, uint64_t now) {
  uint64_t sum = 0;
  int waiting = 0;
  for (int r = 0; r < seg->g->world; r++) {
    const spk_fseg_rank *a = spd_fgroup_rank(seg, r);
    sum += SPK_LOAD(&a->progress, __ATOMIC_ACQUIRE);
    waiting += SPK_LOAD(&a->waiting, __ATOMIC_ACQUIRE) != 0;
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

int spd_fgroup_waiting(void *state, uint64_t now, spd_group_wait *w) {
  spd_fgroup *seg = state;
  const spd_group_view *g = seg->g;
  if (*g->broken || !observe(seg, now))
    return 0;
  uint64_t max[NFIELDS] = {0};
  for (int r = 0; r < g->world; r++)
    for (size_t i = 0; i < NFIELDS; i++) {
      uint64_t v = spk_fseg_said(spd_fgroup_rank(seg, r), counter_fields[i]);
      max[i] = v > max[i] ? v : max[i];
    }
  size_t n = 0;
  w->seq = max[0];
  w->kind = 0;
  w->age_ns = now - seg->since_ns;
  w->missing[0] = '\0';
  for (int r = 0; r < g->world; r++) {
    const spk_fseg_rank *a = spd_fgroup_rank(seg, r);
    int behind = 0;
    for (size_t i = 0; i < NFIELDS; i++)
      behind |= spk_fseg_said(a, counter_fields[i]) < max[i];
    if (behind && n < sizeof(w->missing) - 16)
      n += (size_t)snprintf(w->missing + n, sizeof(w->missing) - n, "%s%d",
                            n ? "," : "", r);
    if (!behind) /* an up-to-date rank's descriptor tells the op's kind */
      w->kind = SPK_LOAD(&a->ring[w->seq % SPK_FSEG_RING].op,
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
static void stuck_report(spd_fgroup *seg, const spd_group_wait *w) {
  const spd_group_view *g = seg->g;
  seg->stuck_since = seg->since_ns;
  SPD_WARN(&g->ctx->log, "stuck op: group '%s' op %llu (%s, shared-memory "
           "path) pending %.1f s, waiting for rank(s) %s", g->name,
           (unsigned long long)w->seq, spd_op_slot_name(spd_op_slot(w->kind)),
           (double)w->age_ns * 1e-9, w->missing);
}

/* The stall w, past the group's op timeout: some rank published a
 * sequence number that another has not reached, and no rank moved since.
 * The group breaks, failing the waiters in the segment and the daemon
 * path's pending ops, naming the ranks behind. */
static void timed_out(const spd_group_view *g, const spd_group_wait *w) {
  char msg[400];
  snprintf(msg, sizeof(msg), "op %llu (%s, shared-memory path) of group "
           "'%s' timed out after %.1f s: rank(s) %s never issued it",
           (unsigned long long)w->seq, spd_op_slot_name(spd_op_slot(w->kind)),
           g->name, (double)w->age_ns * 1e-9, w->missing);
  SPD_WARN(&g->ctx->log, "%s", msg);
  g->ctx->stats.ops_timed_out++;
  g->fail(g->group, SPK_ETIMEDOUT, msg);
}

void spd_fgroup_tick(void *state, uint64_t now) {
  spd_fgroup *seg = state;
  const spd_group_view *g = seg->g;
  spd_group_wait w;
  if (!spd_fgroup_waiting(seg, now, &w))
    return;
  uint64_t stuck = (uint64_t)g->ctx->cfg.stuck_seconds * 1000000000u;
  if (w.age_ns > g->op_timeout_ns)
    timed_out(g, &w);
  else if (!w.stuck && w.age_ns > stuck)
    stuck_report(seg, &w);
}

/* Rank 0's counters of one op kind, each read once, atomically. */
static spk_fseg_counters counters_read(const spk_fseg_counters *c) {
  spk_fseg_counters v = {0};
  v.bytes = SPK_LOAD(&c->bytes, __ATOMIC_RELAXED);
  v.ns = SPK_LOAD(&c->ns, __ATOMIC_RELAXED);
  v.in_place = SPK_LOAD(&c->in_place, __ATOMIC_RELAXED);
  for (int j = 0; j < SPK_FSEG_HIST; j++)
    v.lat[j] = SPK_LOAD(&c->lat[j], __ATOMIC_RELAXED);
  return v;
}

void spd_fgroup_harvest(void *state) {
  spd_fgroup *seg = state;
  const spd_group_view *g = seg->g;
  spd_ctx *ctx = g->ctx;
  const spk_fseg_rank *r0 = spd_fgroup_rank(seg, 0);
  for (int k = 0; k < SPK_OP_COUNT; k++) {
    /* Rank 0 bumps count last (release), so what it counts is whole. */
    const spk_fseg_counters *c = &r0->counters[k];
    spk_fseg_counters *seen = &seg->seen[k];
    uint64_t count = SPK_LOAD(&c->count, __ATOMIC_ACQUIRE);
    uint64_t errors = SPK_LOAD(&c->errors, __ATOMIC_ACQUIRE);
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
    *g->ops_done += dc;
    seg->counters->ops += dc;
    seg->counters->bytes += db;
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
static void read_in_place(const spd_fgroup *seg, int world, FILE *out) {
  static const char *const calls[SPK_FSEG_PROBE_COUNT] = {
      "ok", "no pid named", "pidfd_open", "pidfd_getfd",
      "its fd was not the group's segment", "it runs as another uid",
      "process_vm_readv"};
  int unknown = 0;
  for (int r = 0; r < world; r++) {
    const spk_fseg_rank *a = spd_fgroup_rank(seg, r);
    uint64_t can = SPK_LOAD(&a->id.canmap, __ATOMIC_ACQUIRE);
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

void spd_fgroup_line(void *state, const char *label, FILE *out) {
  const spd_fgroup *seg = state;
  uint64_t ops = 0, errors = 0, in_place = 0;
  for (int k = 0; k < SPK_OP_COUNT; k++) {
    ops += seg->seen[k].count, errors += seg->seen[k].errors;
    in_place += seg->seen[k].in_place;
  }
  fprintf(out, "shm %s ops=%llu errors=%llu in_place=%llu stage_bytes=%llu",
          label, (unsigned long long)ops, (unsigned long long)errors,
          (unsigned long long)in_place, (unsigned long long)seg->stage);
  read_in_place(seg, seg->g->world, out);
  fputc('\n', out);
}
