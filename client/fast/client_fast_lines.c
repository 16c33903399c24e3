/* Small inputs in tagged lines (kernels/fast_seg.h, spk_fseg_line).
 *
 * An input in the rank's staging area costs a reader two hand-offs of
 * cache lines, one after the other: the polled line that says op s is
 * published, then the staging it reads. An input in one tagged line
 * costs one for a repeated op: the reader polls the owner's last line,
 * which says that the op is the repeat it planned for and holds the input
 * (with the line before it, for two: a second hand-off, but sooner).
 * docs/performance.md has the numbers: 2 ranks, 32 B inputs, 0.16-0.17
 * us an op instead of 0.20-0.22.
 *
 * A reader copies the lines' data into its own memory (gathered) for the
 * plan's steps, which read an input as contiguous bytes. The owner reuses
 * the lines of a parity under the staging's rules (client_fast.c,
 * stage_in): once every rank is done with the op that last used them. */
#include <string.h>

#include "client_fast_internal.h"

/* A reader copies an input's lines into gathered before the plan's
 * steps, which read an input as contiguous bytes. For two lines that
 * pays in an op that reduces them; an op that only moves its inputs
 * copies them sooner from the staging (docs/performance.md, "Two lines
 * only for reductions"). */
uint8_t spc__fast_lines_of(int op, uint64_t bytes) {
  const spk_op_row *row = spk_op_row_get((spk_op_kind)op);
  uint64_t most = row != NULL && row->reduces ? SPK_FSEG_LINED
                                              : SPK_FSEG_LINE_DATA;
  if (bytes <= SPK_FSEG_INLINE || bytes > most)
    return 0;
  return (uint8_t)((bytes + SPK_FSEG_LINE_DATA - 1) / SPK_FSEG_LINE_DATA);
}

void spc__fast_lines_put(spc_fast *f, uint64_t s, const void *src,
                         uint64_t bytes) {
  f->staging.lines_src = src;
  f->staging.lines_bytes = bytes;
  f->staging.lines_put = s;
}

/* An inline input goes into the polled line right before the words that
 * publish it (client_fast_desc.c), not when it is staged: the readers
 * poll that line, and one that fetched it in between would take it from
 * this rank, which must then fetch it back for the rest (a hand-off each
 * way, 200 ns and more when the VM puts the ranks' vCPUs far apart;
 * docs/performance.md).
 * Each line's data, then its tag, line after line: a line is written
 * while this rank owns it, and the readers polling the last one take it
 * once. An op that is no repeat in lines still tags the line the readers
 * of f->plan poll (its last line for this rank), so that they look at the
 * polled line at once. Nobody reads the lines of s's parity any more:
 * they were op s - 2's, which every rank finished before it published
 * s - 1, and this rank saw that (seen_pub), or waited for it in
 * stage_in. An op that puts nothing in lines (the daemon's, one read in
 * place or staged in the staging area) may not have waited: it tags only
 * when this rank saw it, else a rank still reading this one's lines of
 * s - 2 (after two async ops, which return at once) would find them
 * tagged with another op. Untagged, the readers of s find the polled line
 * a poll in 16 (client_fast_wait.c, published). */
void spc__fast_lines_tag(spc_fast *f, int me, uint64_t s, int repeat) {
  if (f->staging.tiny[me] && f->staging.lines_put == s)
    memcpy(spc__fast_rank(f, me)->inl[s & 1], f->staging.lines_src,
           f->staging.lines_bytes);
  spk_fseg_line *l = spc__fast_rank(f, me)->lines[s & 1];
  int n = f->staging.lines_put == s ? f->staging.lines[me] : 0;
  uint64_t tag = s << 1 | (n > 0 && repeat);
  const uint8_t *p = f->staging.lines_src;
  for (int i = 0; i < n; i++) {
    uint64_t o = (uint64_t)i * SPK_FSEG_LINE_DATA;
    uint64_t k = f->staging.lines_bytes - o;
    memcpy(l[i].data, p + o, k < SPK_FSEG_LINE_DATA ? k : SPK_FSEG_LINE_DATA);
    SPK_STORE(&l[i].tag, tag, __ATOMIC_RELEASE);
  }
  int polled = f->plan_ok ? f->staging.lines_polled : 0;
  if (polled > n && (f->staging.lines_put == s || f->seen_pub + 1 >= s))
    SPK_STORE(&l[polled - 1].tag, s << 1, __ATOMIC_RELEASE);
}

void spc__fast_lines_get(spc_fast *f, int r, uint64_t s) {
  const spk_fseg_line *l = spc__fast_rank(f, r)->lines[s & 1];
  for (int i = 0; i < f->staging.lines[r]; i++)
    memcpy(f->gathered[r] + (size_t)i * SPK_FSEG_LINE_DATA, l[i].data,
           SPK_FSEG_LINE_DATA);
}
