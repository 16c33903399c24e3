/* The restart suites' verified ops (restart_ops.h). */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "restart_ops.h"

#define W SPT_RO_W

/* in holds `rows` rows of `cols` floats, out `orows` of `ocols`. With a
 * device buffer, the tensors are there, at the offsets of x and y in the
 * host buffer, which mirrors them. */
static int tensors(spt_ro *r, int64_t rows, int64_t cols, int64_t orows,
                   int64_t ocols) {
  int64_t s[2] = {rows, cols}, o[2] = {orows, ocols};
  r->k.used = 0;
  r->x = spt_rk_tensor(&r->k, &r->in, 2, s);
  r->y = spt_rk_tensor(&r->k, &r->out, 2, o);
  if (r->x == NULL || r->y == NULL)
    return -1;
  if (r->dev == NULL)
    return 0;
  size_t in_at = r->in.offset, out_at = r->out.offset;
  return spc_tensor_init(&r->in, r->dev, in_at, SPC_FLOAT32, 2, s) < 0 ||
                 spc_tensor_init(&r->out, r->dev, out_at, SPC_FLOAT32, 2,
                                 o) < 0
             ? -1
             : 0;
}

/* Device tensors: x to the device before the op, y back after it. */
static int mirror(spt_ro *r, int to_dev, size_t n) {
  if (r->dev == NULL)
    return 0;
  uint8_t *host = spc_buffer_data(r->k.b);
  uint8_t *dev = spc_buffer_data(r->dev);
  size_t at = to_dev ? r->in.offset : r->out.offset;
  return to_dev ? r->copy(dev + at, host + at, n, 1)
                : r->copy(host + at, dev + at, n, 0);
}

/* in [rows, n] and out [orows, n] (flat: [1, orows * n]), in filled:
 * each rank's own data, or (same) the one full tensor every rank passes
 * to a split. */
static int fill(spt_ro *r, int64_t rows, int64_t orows, int64_t n, int flat,
                int step, int same) {
  if ((flat ? tensors(r, rows, n, 1, orows * n)
            : tensors(r, rows, n, orows, n)) < 0)
    return -1;
  for (int64_t i = 0; i < rows * n; i++)
    r->x[i] = spt_rk_val(same ? 0 : r->rank, (size_t)i, step);
  return mirror(r, 1, (size_t)(rows * n) * sizeof(float));
}

/* Rows of the output: out row k is row src[k] of rank from[k]'s input
 * (from -1: the sum over ranks). How many differ. */
static size_t rows_differ(const spt_ro *r, int64_t orows, int64_t n,
                          const int *from, const int64_t *src, int step) {
  size_t bad = 0;
  for (int64_t k = 0; k < orows; k++)
    for (int64_t c = 0; c < n; c++) {
      float s = 0;
      for (int q = 0; q < W; q++)
        if (from[k] == q || from[k] < 0)
          s += spt_rk_val(q, (size_t)(src[k] * n + c), step);
      bad += r->y[k * n + c] != s;
    }
  return bad;
}

int spt_ro_op(spt_ro *r, int kind, int64_t n, int step, int *wrong) {
  int me = r->rank, from[2 * W], rc;
  int64_t src[2 * W], lens[2] = {W, W}, rows, orows;
  static const int same[SPT_RO_KINDS] = {[0] = 1, [6] = 1, [8] = 1};
  /* kind: rows in, rows out, and where each output row comes from */
  switch (kind) {
  case 0: /* split of one [W, n] tensor: row me */
  case 6: /* zigzag split of [2W, n]: rows me and 2W-1-me */
  case 8: /* packed split of two sequences of W rows: row me of each */
    rows = kind == 0 ? W : 2 * W, orows = kind == 0 ? 1 : 2;
    from[0] = from[1] = 0;
    src[0] = me, src[1] = kind == 6 ? 2 * W - 1 - me : W + me;
    break;
  case 1: /* all_gather: row q is rank q's */
  case 7: /* zigzag gather: rank q's rows at q and 2W-1-q */
  case 9: /* packed gather: rank q's rows at q and W+q */
    rows = kind == 1 ? 1 : 2, orows = W * rows;
    for (int q = 0; q < W; q++) {
      from[q] = q, src[q] = 0;
      if (kind != 1) {
        int at = kind == 7 ? 2 * W - 1 - q : W + q;
        from[at] = q, src[at] = 1;
      }
    }
    break;
  case 2: /* all_reduce of [1, n] */
    rows = orows = 1, from[0] = -1, src[0] = 0;
    break;
  case 3: /* reduce_scatter of [W, n]: the sum of row me */
    rows = W, orows = 1, from[0] = -1, src[0] = me;
    break;
  default: /* all_to_all(_v) of [W, n]: row q is rank q's row me (all_to_all
            * gathers along 1: [1, W * n], the same bytes) */
    rows = orows = W;
    for (int q = 0; q < W; q++)
      from[q] = q, src[q] = me;
    break;
  }
  if (fill(r, rows, orows, n, kind == 4, step, same[kind]) < 0)
    return SPC_ENOMEM;
  int64_t splits[W];
  for (int q = 0; q < W; q++)
    splits[q] = 1;
  spc_group *g = r->k.g;
  const spc_tensor *in = &r->in, *out = &r->out;
  switch (kind) {
  case 0: rc = spc_split(g, in, out, 0, NULL); break;
  case 1: rc = spc_all_gather(g, in, out, 0, NULL); break;
  case 2: rc = spc_all_reduce(g, in, out, SPC_SUM); break;
  case 3: rc = spc_reduce_scatter(g, in, out, 0, NULL); break;
  case 4: rc = spc_all_to_all(g, in, out, 0, 1, 0); break;
  case 5: rc = spc_all_to_all_v(g, in, out, splits, splits); break;
  case 6: rc = spc_zigzag_split(g, in, out, 0); break;
  case 7: rc = spc_zigzag_gather(g, in, out, 0); break;
  case 8: rc = spc_packed_split(g, in, out, 0, lens, 2); break;
  default: rc = spc_packed_gather(g, in, out, 0, lens, 2); break;
  }
  if (rc == SPC_OK && mirror(r, 0, (size_t)(orows * n) * sizeof(float)))
    return SPC_EDEVICE;
  *wrong = rc == SPC_OK && rows_differ(r, orows, n, from, src, step) != 0;
  return rc;
}


void spt_ro_loop(spt_ro *r, int rounds, int64_t n, int64_t n2,
                 spt_ro_tally *t) {
  int per = n2 > 0 ? 2 * SPT_RO_KINDS : SPT_RO_KINDS;
  t->last_fail = -1;
  for (int round = 0; round < rounds; round++) {
    t->round = round;
    for (int op = 0; op < per; op++) {
      int wrong = 0;
      int rc = spt_ro_op(r, op % SPT_RO_KINDS, op < SPT_RO_KINDS ? n : n2,
                         round * per + op, &wrong);
      if (rc == SPC_ERESTARTED) {
        t->restarted++;
        t->last_fail = round;
      } else if (rc < 0 || wrong) {
        fprintf(stderr, "rank %d round %d op %d: %s\n", r->rank, round, op,
                rc < 0 ? spc_last_error(r->k.c) : "wrong data");
        t->bad++;
        t->last_fail = round;
      }
    }
  }
}

int spt_ro_tally_bad(const spt_ro_tally *t, int w, int rounds, int last_ok,
                     int *restarted_p, char *why, size_t len) {
  *restarted_p = 0;
  for (int r = 0; r < w; r++) {
    if (t[r].bad != 0) {
      snprintf(why, len, "rank %d: %d ops wrong or failed otherwise", r,
               t[r].bad);
      return 1;
    }
    if (t[r].last_fail >= rounds - last_ok) {
      snprintf(why, len, "rank %d failed an op in round %d, near the end",
               r, t[r].last_fail);
      return 1;
    }
    *restarted_p += t[r].restarted;
  }
  return 0;
}

int spt_ro_replace(spt_daemon *old, spt_daemon *again,
                   const char *const *argv, int upgrade, char *why,
                   size_t len) {
  const char *args[32];
  int n = 0, st = 0;
  while (argv[n] != NULL && n < 30)
    args[n] = argv[n], n++;
  args[n++] = upgrade ? "--upgrade" : NULL;
  args[n] = NULL;
  if (upgrade ? spt_daemon_start(again, args) != 0
              : kill(old->pid, SIGKILL) != 0)
    return snprintf(why, len, "%s failed", upgrade ? "the new daemon's start"
                                                   : "kill"), -1;
  if (waitpid(old->pid, &st, 0) != old->pid)
    return snprintf(why, len, "waitpid: %s", strerror(errno)), -1;
  old->pid = 0;
  if (upgrade && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    spt_daemon_dump_log(old);
    return snprintf(why, len, "the old daemon ended with status %#x", st),
           -1;
  }
  if (upgrade)
    return 0;
  usleep(100000); /* the clients find no daemon for a while */
  return spt_daemon_start(again, args) == 0
             ? 0
             : (snprintf(why, len, "the new daemon did not start"), -1);
}
