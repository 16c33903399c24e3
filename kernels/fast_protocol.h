/* The fast path's protocol, written once: every word of a group's shared
 * segment (kernels/fast_seg.h) that more than one process touches, who
 * writes it, with which memory order, what that pairs with; then the
 * invariants the ranks and the daemon keep. Code that touches one of
 * these words follows this list; a change of an access changes it here.
 *
 * Checked: every access to these words, by the client (client/fast/),
 * the daemon (daemon/fast/) and the shared steps (kernels/fast_seg.h,
 * kernels/fast_sync.h), goes through kernels/fast_atomic.h
 * (tests/layers.py rule 13), and tests/unit/unit_fast_model.c runs the
 * shared steps (pub, the ring slot's put and get, said, the slot reuse
 * of invariant 1 with read_descs, the sleep/wake handshake of invariant
 * 5, the in_op/closed handshake of invariant 6, the break of invariant
 * 7) under a seeded scheduler with store buffers and loads performed
 * early; it finds the lost wake-up when the publisher's sc fence is
 * dropped, the torn slot when its release stores are weakened or the
 * reader's acquire is, a drain under a running op when the rank's in_op
 * store is weakened, and a torn break message when the daemon's release
 * or the waiter's acquire is. The client's and the daemon's other accesses
 * (the counters, the staging and line reuse, in-place reads' done and
 * failed words, answered) are not run under it yet.
 *
 * Roles: O the rank that owns a rank area (its only writer unless said),
 * R any other rank of the group, D the daemon. Orders: rlx, acq, rel, sc
 * (__ATOMIC_*). pub(w, v) is spk_fsync_publish (kernels/fast_sync.h,
 * called by spc__fast_publish): a rel store of `progress`, the rel store
 * of w, an sc fence, then, if `sleepers` (rlx) is not 0, `wake` bumped
 * (sc) and a FUTEX_WAKE.
 *
 * Header (spk_fseg_hdr)
 *   layout, op_bytes, map_bytes, stream_bytes, mid_spin_ns
 *       D writes them once, before the segment's fd is sent to any rank;
 *       read-only after. Each side locates areas from the layout it kept
 *       at attach, never from the header (a rank may scribble on it).
 *   broken, broken_msg
 *       D only: broken_msg plain, then broken rel, then wake (sc add and
 *       FUTEX_WAKE). R reads broken acq (every wait loop, every new op),
 *       then broken_msg (bounded by its size).
 *   wake      futex word: sc add by a publisher that saw sleepers, and by
 *             D's break (spk_fsync_break); R reads it sc before
 *             FUTEX_WAIT.
 *   sleepers  R: sc add before its last look and sc sub after the sleep
 *             (several writers); publishers read it rlx after their fence.
 *   closed    D: sc store (drain) or rel store (a rank could not take the
 *             segment); R: sc load before a new op (runs_here).
 *
 * Rank area (spk_fseg_rank), O writes unless said
 *   published  O: pub. R and D: acq (spk_fseg_said, the lines' tag
 *              standing in for it). Publishes everything O wrote for op s
 *              before it: ring slot, repeated, mapped, inl, lines, staged
 *              input.
 *   progress   O: rel in every pub; D: acq (stall watch only).
 *   repeated, mapped
 *              O: rlx before the publish; R: rlx after its acq of
 *              published (==s means "this op is a repeat / read in O's own
 *              buffers").
 *   inl, lines.data, staging
 *              O: plain, before the publish (or the line's tag); R: plain
 *              after the acq. Reuse: invariants 2 and 3.
 *   lines.tag  O: rel, line after line, (s << 1) | repeat; R: acq of the
 *              last line only (release sequence covers the earlier lines).
 *   consumed, read_descs
 *              O: consumed by pub (or a rel store followed by a pub),
 *              read_descs rel, then, if `sleepers` (rlx) is not 0, the
 *              publisher's fence and wake (spc__fast_read_descs); R and
 *              D: acq through spk_fseg_said, which
 *              takes the larger of the two and published - 1.
 *   fdone      O: pub; R and D: acq via said. O is done with op s's inputs
 *              and its reads of the others' staging and buffers.
 *   reduced    O: pub after its reduce steps; R: acq via said before it
 *              reads O's staged output.
 *   freed      O: rel add; R: acq (drops its mappings of O's buffers).
 *   failed, fail_status
 *              O: fail_status plain, then failed = s rel; R: failed acq
 *              after waiting for fdone s, then fail_status.
 *   waiting    O: rel 1 / rel 0 around a wait; D: acq (watchdog, drain).
 *   in_op      O: sc 1 before it reads closed, rel 0 at the op's end;
 *              D: sc load (drain).
 *   answered   D only: rel, before it queues the reply; O: acq (a hint
 *              to stop spinning; the socket reply stays the answer).
 *   ring[s % SPK_FSEG_RING]
 *              O: spk_fseg_desc_put: the body plain, then op, repeat,
 *              eligible, seq rlx (seq last). R: seq/repeat rlx to ask
 *              whether the slot still holds s, spk_fseg_desc_get (head
 *              rlx, body plain) after its acq of published; D: seq,
 *              eligible, op rlx (spk_fseg_fast_op, the watchdog).
 *   id         O: pid, probe_fd, probe_addr, probe_word plain, then
 *              attached by pub; R reads those four after its acq of
 *              attached. nomap_* plain, then canmap by pub; R and D read
 *              nomap_* only after canmap == 1 (acq).
 *   counters   rank 0 only: bytes, ns, in_place, lat[] rlx stores, then
 *              count rel (errors rel); D: count, errors acq, then each of
 *              the others rlx, once per harvest.
 *
 * Invariants
 * 1. Ring-slot reuse. O writes slot s % RING for op s only when every
 *    rank has read the slot's op s - RING: said(consumed) >= s - RING for
 *    all (slot_wait, client_fast_desc.c), known without a look when every
 *    rank was seen to publish past it (seen_pub). Exception: a daemon-path
 *    op over a daemon-path op's slot, which a reader decides on from the
 *    atomic head alone (not eligible either way); the plain body it may
 *    read mixed is not used.
 * 2. Staging reuse. O writes the input staging (the half of s's parity
 *    for a small op, else all of it) only once every rank's said(fdone)
 *    reached the last op that read it (stage_in, client_fast.c). The
 *    output staging is rewritten only in op s + 1's plan run, which
 *    starts after every rank published s + 1.
 * 3. Inline inputs and lines go by parity: op s's in half s & 1, free
 *    once every rank is done with s - 2 (invariant 2's wait, or every
 *    rank seen publishing s - 1).
 * 4. Done by a later publish. O publishes s + 1 only after op s returned,
 *    so published > s says "done with s": consumed and fdone may lag
 *    (pending), and said() folds published - 1 in. A publish clears
 *    pending, so a later flush never lowers them.
 * 5. Sleep and wake (Dekker): the sleeper adds itself to sleepers (sc),
 *    fences (sc), reads wake, looks at the counters and at broken, then
 *    FUTEX_WAITs on the value it read; a publisher stores (rel), fences
 *    (sc), reads sleepers. One of them sees the other. Sleeps are bounded
 *    (200 ms) and end with a look at the daemon.
 * 6. Drain. D stores closed (sc), then waits until no rank is waiting or
 *    in_op (sc) and no published fast op is left unread; a rank stores
 *    in_op (sc) before it loads closed (sc): either D sees in_op, or the
 *    rank sees closed and takes the daemon's path. A rank still joins a
 *    fast op another rank published before closed (started_by_others).
 * 7. Break. D breaks a segment, once: broken_msg, broken (rel), a wake
 *    of everyone. The one other writer: a rank whose connection to D
 *    ended (D dead, or upgrading) breaks it the same way as it leaves,
 *    status SPC_ERESTARTED, the same words from every rank
 *    (client_fast_wait.c, spc__fast_leave). Racing ranks store the same
 *    bytes; racing an upgrading D, which breaks it with SPC_ERESTARTED
 *    too, only the message may mix. Every
 *    wait loop and every new op looks at broken;
 *    a rank already done with its op ignores it. A rank that read in
 *    place looks at broken after an sc fence: unbroken means its reads
 *    came before any owner returned.
 * 8. In-place reads end together: every rank waits for every rank's
 *    fdone of s before it returns (read_done), so no owner hands its
 *    buffers back while another reads them; a rank that could not read
 *    says so in failed before its fdone.
 * 9. Attach: every rank publishes its identity, then attached; probes
 *    start once every rank is attached; canmap is published after the
 *    reason it is 1.
 */
#ifndef SPK_FAST_PROTOCOL_H
#define SPK_FAST_PROTOCOL_H
#endif
