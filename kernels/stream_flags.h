/* A client's stream flags buffer (BufRegister.stream_flags): host memory
 * both the client and the daemon map, SPK_SFLAG_SLOTS slots of two words
 * (ready, done: docs/gpu.md, "Client side"), then the client's counts of
 * its device ops that the daemon never sees (symmetric buffers,
 * docs/gpu-symmetric.md), for the daemon's stats.
 *
 * Counts, since the buffer was made (a client that reconnects makes a new
 * one, or registers this one again with what it holds counted already):
 * the client stores each (rlx) as it changes; the daemon loads
 * them (rlx) when it renders stats and when the buffer goes, and adds
 * what grew since its last look. They are the client's word, used for
 * nothing but those counters; a buffer of the slots alone (an older
 * client) has none. */
#ifndef SPK_STREAM_FLAGS_H
#define SPK_STREAM_FLAGS_H

#include <stdint.h>

#define SPK_SFLAG_SLOTS 256u
#define SPK_SFLAG_COUNTS_OFF (SPK_SFLAG_SLOTS * 16u)

typedef struct {
  uint64_t sym_ops;         /* ops run on symmetric buffers */
  uint64_t sym_bytes;       /* bytes those copied into this client */
  uint64_t sym_daemon_ops;  /* ops on symmetric buffers sent to the daemon */
  uint64_t pad[5];          /* the buffer stays a multiple of 16 bytes */
} spk_sflag_counts;

#define SPK_SFLAG_BYTES (SPK_SFLAG_COUNTS_OFF + sizeof(spk_sflag_counts))

#define SPK_SFLAG_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define SPK_SFLAG_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

#endif
