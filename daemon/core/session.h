/* One session per client connection: frame I/O, the client's buffers and
 * group memberships. Loop thread only. The session is freed in its close
 * callback; groups and ops drop their pointers to it before that. */
#ifndef SPD_SESSION_H
#define SPD_SESSION_H

#include <sys/queue.h>
#include <sys/types.h>
#include <uv.h>

#include "buffer.h"
#include "daemon.h"
#include "frame.h"
#include "types.h"

struct spd_group;

typedef struct spd_member {
  TAILQ_ENTRY(spd_member) link;
  uint64_t id;                /* the client's handle for the group */
  struct spd_group *group;
  int rank;
} spd_member;

typedef struct spd_session {
  uv_pipe_t pipe;             /* first: the handle's data is the session */
  spd_ctx *ctx;
  TAILQ_ENTRY(spd_session) link;
  uint64_t id;
  pid_t pid;
  uid_t uid;
  gid_t gid;
  int hello_done;
  int closing;
  int stats_only;             /* came in on the stats socket */
  int counted;                /* holds a connection of its uid's quota */
  int doomed;                 /* closed by the reaper (spd_session_doom) */
  uint64_t accepted_ns;       /* for the hello deadline */
  uint64_t partial_ns;        /* a frame began and is not whole; 0: none */
  long long reader_charge;    /* reader bytes counted as request memory */
  gid_t groups[32];           /* supplementary groups (SO_PEERGROUPS) */
  int ngroups_sup;
  int ngroups, nbuffers, pending; /* counted against the client limits */
  int vmm_pending;            /* cuMem registrations mapping now */
  int fds_queued;             /* sent descriptors libuv holds for it */
  /* Whether each queued descriptor, oldest first, is charged to its uid's
   * SPD_Q_FDS (ring of fds_queued from fd_head); one past the quota is
   * not, and the registration it came with is refused (fds_why). */
  uint8_t fd_charged[SPK_VMM_MAX_CHUNKS];
  int fd_head;
  char fds_why[200];
  uint64_t registered_bytes;
  double frame_tokens;        /* frame-rate bucket, refilled over time */
  uint64_t frame_ns;
  char framework[32];
  spf_reader reader;
  uint32_t frames_read;       /* socket frames handled (mod 2^32) */
  spd_buffer *ring;           /* its submission ring, if it has one */
  uint64_t ring_tail;         /* bytes taken from it (the daemon's copy) */
  TAILQ_ENTRY(spd_session) ring_link; /* in ctx->rings while ring is set */
  TAILQ_HEAD(, spd_buffer) buffers;
  TAILQ_HEAD(, spd_member) members;
} spd_session;

/* Accept a connection from the listener and start reading. */
void spd_session_accept(spd_ctx *ctx, uv_stream_t *server, int stats_only);

/* Frames out and lookups (session_out.c): what the layers below the
 * session call of it. */

/* Queue a frame to the client. Dropped silently once the session closes. */
void spd_session_send(spd_session *s, const Spcoll__Frame *f);
/* Send frame f to s with fd attached (SCM_RIGHTS). fd is the send's from
 * here (a dup the caller made): closed once sent, or on failure. */
int spd_session_send_fd(spd_session *s, const Spcoll__Frame *f, int fd);
/* A request refused because the daemon drains (`what`: "ops", "groups"):
 * SPK_ESHUTDOWN; when it drains for an upgrade, SPK_ERESTARTED marked
 * not run, which the client sends again to the new daemon. */
void spd_session_refuse(spd_session *s, uint64_t id, const char *what);
void spd_session_send_error(spd_session *s, uint64_t id, int status,
                            const char *msg);
/* Done for request id; timing (may be NULL) says where an op's time went. */
void spd_session_send_done(spd_session *s, uint64_t id,
                           const Spcoll__Done *timing);
/* The client's membership or buffer with this id, or NULL. */
spd_member *spd_session_member(spd_session *s, uint64_t id);
spd_buffer *spd_session_buffer(spd_session *s, uint64_t id);

/* Protocol error: reply with Error, count it, then close once the reply is
 * written. The daemon and every other client go on. */
void spd_session_fail(spd_session *s, uint64_t id, int status,
                      const char *msg);

/* Orderly close: memberships and buffers released, pending writes flushed,
 * then the handle is closed and the session freed. */
void spd_session_close(spd_session *s);

/* Close s soon, from the loop rather than from the caller's stack: safe
 * inside reply loops that walk groups and sessions. Nothing more is sent
 * to it or read from it. */
void spd_session_doom(spd_session *s, const char *why);
/* Close the doomed sessions (the reaper, an idle handle of the ctx). */
void spd_session_reap(spd_ctx *ctx);

/* Close connections past their hello or partial-frame deadline (called
 * from the watchdog). */
void spd_session_deadlines(spd_ctx *ctx, uint64_t now);

/* Is the client an operator: root, the daemon's own uid, or listed in
 * operator_uid / operator_gid (its primary or a supplementary group)? */
int spd_session_is_operator(const spd_session *s);

/* Take the next file descriptor the client sent with SCM_RIGHTS. *charged:
 * whether it holds its uid's SPD_Q_FDS, which the caller gives back
 * (spd_session_fds_give) once it has closed it; 0: it came past the
 * quota, and the caller refuses what it came with (s->fds_why). */
int spd_session_take_fd(spd_session *s, int *fd_p, int *charged,
                        spk_err *err);

/* n descriptors of uid taken with spd_session_take_fd are closed. */
void spd_session_fds_give(spd_ctx *ctx, uid_t uid, int n);

/* The client releases b (or goes): off its list and its uid's accounts. */
void spd_session_buffer_drop(spd_session *s, spd_buffer *b);
/* The same; 1 when b's device mapping is closed after the call (a cuMem
 * one, unmapped on the thread pool): fn(arg) follows once it is. */
int spd_session_buffer_drop_then(spd_session *s, spd_buffer *b,
                                 spd_gpu_closed_fn fn, void *arg);

/* The live session with this id, or NULL (closed ones are off the list;
 * ids are never reused). */
spd_session *spd_session_find(spd_ctx *ctx, uint64_t id);


/* BufRegister (session_buffer.c): answered at once, or for cuMem
 * allocations once they are mapped. */
void spd_session_buf_register(spd_session *s, const Spcoll__Frame *f);

/* A frame of the client's, from its socket or its ring: counted against
 * its frame rate, handled, freed. (session.c) */
void spd_session_take_frame(spd_session *s, Spcoll__Frame *f);

/* The client's submission ring (session_ring.c, kernels/submit_ring.h).
 * open: buf becomes it (a BufRegister with submit_ring). take: its
 * records that may be taken now, handled; 1 when one waits for socket
 * frames. close: it is no more (its buffer goes, or the client). stop:
 * the daemon stops. */
int spd_session_ring_open(spd_session *s, spd_buffer *buf, spk_err *err);
int spd_session_ring_take(spd_session *s);
void spd_session_ring_close(spd_session *s);
void spd_session_rings_stop(spd_ctx *ctx);

/* Handle one decoded frame (session_dispatch.c). */
void spd_session_dispatch(spd_session *s, const Spcoll__Frame *f);

#endif
