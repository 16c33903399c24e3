/* libspclient internals: not installed, not part of the API. */
#ifndef SPC_CLIENT_INTERNAL_H
#define SPC_CLIENT_INTERNAL_H

#include <stdint.h>

#include "frame.h"
#include "spcoll.h"
#include "tensor_check.h"
#include "types.h"

struct spc_request {
  spc_request *next;          /* in the client's list of outstanding ones */
  spc_client *client;
  uint64_t id;
  int done;
  int status;
  Spcoll__Frame *reply;       /* the answer, when it is not an Error */
  char *msg;                  /* the daemon's message, for an Error */
  int not_run;                /* the Error says it did not run anywhere */
  int *source_p;              /* a receive's: where its source goes */
  uint64_t group_id;          /* an op's group: an SPC_ERESTARTED from a
                               * live daemon marks it to rejoin */
  /* An op ordered through stream flags (client_gpu_flags.c): its slot + 1
   * (0: none), seq and device state. */
  uint32_t flag_slot1;
  uint64_t flag_seq;
  void *gpu_dev;
  /* Nobody waits for the answer any more (spc_wait_on_stream queued the
   * wait on the GPU): it is taken when it comes, a failure kept for the
   * client's next call (async_status). */
  int detached;
  /* An op of the symmetric path (client_gpu_sym_op.c): done once queued;
   * spc_wait synchronizes its stream in its context. */
  int sym;
  void *sym_stream, *sym_ctx;
  void *sym_buf;              /* its buffer's state, and its op's seq */
  uint64_t sym_seq;
};

struct spc_group {
  spc_group *next;
  spc_client *client;
  uint64_t id;
  int rank, world;
  int multinode;              /* some rank runs on another node */
  struct spc_fast *fast;      /* shared segment (client_fast.c), or NULL */
  /* What a rejoin after a daemon restart needs (client_restart.c): the
   * name joined ("" for a group made by spc_group_split, which cannot be
   * rejoined), the ops issued in the group's sequence (both paths), and
   * how many of the next ones fail without being issued (the other ranks
   * had issued them when the daemon went). */
  char name[SPK_NAME_MAX + 1];
  uint64_t issued, skip;
  /* To rejoin at its next op (client_sequence.c): its record broke with
   * SPC_ERESTARTED (a node it spans restarted), said in why; or the
   * daemon restarted and the group spans nodes, whose ranks come back
   * when they call it (SPC__REFORM_GONE: no record to leave). */
  int reform;
  /* Not rejoined (a split group after a restart, or a rejoin that
   * failed): every op fails with lost_status and why. */
  int lost, lost_status;
  char why[320];
  /* An op of the group waits with the client's lock released
   * (spc_client_set_wait_lock): another thread reviving the client
   * breaks its segment but leaves it mapped, and the group rejoins at
   * its next op. */
  int in_wait;
};

enum { SPC__REFORM_LEAVE = 1, SPC__REFORM_GONE = 2 };

struct spc_buffer {
  spc_buffer *next;
  spc_client *client;
  uint64_t id;
  void *data;
  size_t size;
  void *gpu;                  /* device memory: client_gpu.c's record */
  /* Host memory: its memfd, kept open so that the other ranks of a fast
   * path group may take it (client_fast_map.c), and its identity. */
  int memfd;
  uint64_t dev, ino;
  /* Caller memory (spc_buffer_wrap): no memfd (-1), unknown to the
   * daemon; the fast path's readers read it with process_vm_readv, and
   * spc_run stages it for the daemon's path (client_wrap.c). */
  int wrapped;
  int stream_flags;           /* registered for stream flags (GPU ops) */
  int submit_ring;            /* the client's submission ring */
};

struct spc_client {
  int fd;
  int broken;                 /* the connection failed: every call fails */
  /* The daemon went away (client_restart.c): the next call reconnects,
   * for up to reconnect_ms (-1: the op timeout), and brings back the
   * client's buffers and groups; reviving while it does. */
  int lost, reviving;
  /* spc__revive and spc__reform (client_restart.c, client_rejoin.c), set
   * by spc_connect: the layers below them that find the daemon gone, or a
   * group to rejoin, call them through here. */
  int (*revive)(spc_client *c);
  int (*reform)(spc_group *g);
  int hangup;                 /* the fast path saw the socket hang up */
  uint64_t gone_ns;           /* when a shared-memory wait first found the
                               * daemon gone (0: it did not): the segment's
                               * ops go on without it for the op timeout */
  int not_run;                /* the last request that failed did not run
                               * (a daemon being upgraded refused it) */
  int64_t reconnect_ms;
  int64_t daemon_op_timeout_ms; /* from Welcome */
  char socket_path[108];
  char framework[64];
  uint64_t next_id;
  uint64_t client_id;
  spf_reader reader;
  spc_request *requests;
  spc_group *groups;
  spc_buffer *buffers;
  char last_error[512];
  spc_timing last_timing;     /* from the last Done of an op */
  void *gpu;                  /* client_gpu.c's state, made on first use */
  int ndetached;              /* detached requests outstanding */
  int async_status;           /* a detached request failed: reported by */
  char async_msg[512];        /* the next op call (spc__async_take) */
  int64_t op_timeout_ms;      /* asked at join; 0: the daemon's */
  spc_buffer *wrap_stage;     /* client_wrap.c's staging, made on use */
  int fds[8];                 /* received with frames, not yet taken */
  int nfds;
  struct {                    /* shared segments of joins not yet done */
    uint64_t group_id, size;
    int fd;
  } segs[8];
  int nsegs;
  uint32_t frames_sent;       /* on the socket of this connection */
  int ring_mode;              /* client_ring.c: 0 not asked yet, -1 off,
                               * 1 ops on streams, 2 every op */
  spc_buffer *ring;           /* the submission ring, once made */
  uint64_t ring_head;         /* bytes put into it (its head word) */
  /* spc_client_set_wait_lock's lock, released while an op waits. */
  void (*wait_release)(void *);
  void (*wait_take)(void *);
  void *wait_arg;
};

/* The op list's gradient of op (client_op_list.c): the same arguments,
 * the row's gradient kind and grad scale (kind 0 when it lists none). */
spc_op spc__op_grad(spc_op op);

/* Release the client's lock for a wait of g's op, where the caller
 * handed it over (spc_client_set_wait_lock): 1 when released, and
 * spc__wait_take must follow before anything of the client is touched.
 * (client_base.c) */
int spc__wait_release(spc_group *g);
void spc__wait_take(spc_group *g);

/* Record the message of a failure on c and return status. */
int spc__fail(spc_client *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* How long an op may wait: the client's op timeout, else the daemon's
 * (from Welcome), else 1800 s. (client_base.c) */
int64_t spc__op_limit_ms(const spc_client *c);

/* A tensor's fields, as spc_tensor_init takes them, against buf: dims,
 * alignment and its bytes from offset inside the buffer (kernels'
 * tensor_check.h, the daemon's words). SPC_EINVAL naming what, the
 * shape and the buffer's size; for a tensor its caller may have changed
 * since spc_tensor_init (an spc_tensor is a plain struct). */
int spc__tensor_check(spc_client *c, const char *what, const spc_buffer *buf,
                      uint64_t offset, spc_dtype dtype, int ndim,
                      const int64_t *shape);

/* t's bytes; UINT64_MAX for a shape whose bytes do not fit (it then fits
 * no buffer). */
uint64_t spc__tensor_bytes(const spc_tensor *t);

/* This thread's buffer for spc_connect failures (512 bytes). */
char *spc__connect_error(void);

/* ---- client_connect.c ---- */
/* Connect c->fd to c->socket_path and say hello (c->framework). */
int spc__conn_open(spc_client *c);

/* ---- client_restart.c: surviving a daemon restart ---- */
/* The connection to the daemon ended (what, errno err; 0: it closed).
 * The daemon went away (EOF, EPIPE, ECONNRESET) and c reconnects by
 * itself (reconnect_ms not 0): every request outstanding fails with
 * SPC_ERESTARTED, and the next call reconnects (c->lost). Otherwise they
 * fail with SPC_ECONNECTION, for good (c->broken). Returns the status
 * recorded. (client_conn.c) */
int spc__conn_gone(spc_client *c, const char *what, int err);
/* The fast path found the daemon's socket hung up (c->hangup): end the
 * connection as spc__conn_gone does, and return its status; SPC_OK when
 * it did not. (client_conn.c) */
int spc__hangup_take(spc_client *c);
/* c->lost: reconnect, register c's buffers again and rejoin its groups
 * (in one go, so no two ranks wait on each other's order). */
int spc__revive(spc_client *c);

/* ---- client_rejoin.c ---- */
/* How long a reconnect, and a rejoin's wait for the other ranks, may
 * take: the client's reconnect timeout, else its op timeout, else the
 * daemon's (from Welcome). */
int64_t spc__reconnect_limit_ms(const spc_client *c);
/* A rejoin of g under its name and rank, saying the ops it issued and
 * how long it waits: sent, and its answer taken (g's new id and segment,
 * and the ops it skips). */
int spc__rejoin_send(spc_group *g, spc_request **req_p);
int spc__rejoin_finish(spc_group *g, spc_request *req);
/* g->reform: leave its broken record and rejoin it under its name,
 * waiting for its other ranks for the reconnect timeout; after that g is
 * lost, failing with SPC_ENODELOST and the first cause. */
int spc__reform(spc_group *g);


/* ---- client_sequence.c ---- */
/* g usable: c revived when the daemon went, g rejoined when it is to
 * (g->reform); its failure when g is lost. Point-to-point calls it. */
int spc__group_ready(spc_group *g);
/* g's next op in its sequence: revives c first when the daemon went,
 * rejoins g when it is to (g->reform), then fails the op (SPC_ERESTARTED)
 * when the rejoin said other ranks had issued it; else counts it. */
int spc__group_issue(spc_group *g);

/* A request in no group's sequence that names no handle of the daemon's
 * (a registration, a join) ended with *rc: whether to send it once more,
 * after the client reconnected, because the daemon went away before it
 * answered (the daemon that got it, if any, is gone with what it did).
 * When reconnecting fails, *rc becomes its status. */
int spc__again(spc_client *c, int *rc);

/* Register b (its memfd, size and stream_flags) with the daemon; sets
 * b->id. (client_buffer.c) */
int spc__buffer_register(spc_client *c, spc_buffer *b);

/* Send f (with fd attached when fd >= 0) as a new request; on success the
 * request is outstanding and must be completed by spc__wait_req. */
int spc__send(spc_client *c, Spcoll__Frame *f, int fd, spc_request **req_p);
/* The same with nfds descriptors attached (SCM_RIGHTS, in order; at most
 * SPK_VMM_MAX_CHUNKS). The caller keeps its copies. */
int spc__send_fds(spc_client *c, Spcoll__Frame *f, const int *fds, int nfds,
                  spc_request **req_p);

/* Read frames until req is answered (block = 1) or until none is left to
 * read without blocking (block = 0). Returns the status of the transport;
 * the request's own status is in req->status once req->done. */
int spc__pump(spc_client *c, spc_request *req, int block);
/* Read and route what the daemon sent: block 1 waits for one read, 0
 * takes what is there. */
int spc__pump_any(spc_client *c, int block);
/* Nobody waits for req any more: its answer is taken when it comes. */
void spc__detach(spc_client *c, spc_request *req);
/* A detached request's failure, if one came: returned (as the client's
 * error) once, by the next op call. */
int spc__async_take(spc_client *c);
/* spc_buffer_alloc, registered as `kind`: SPC__BUF_PLAIN, _FLAGS
 * (stream flags) or _RING (the submission ring). */
enum { SPC__BUF_PLAIN, SPC__BUF_FLAGS, SPC__BUF_RING };
int spc__buffer_alloc(spc_client *c, size_t size, int kind,
                      spc_buffer **buf_p);

/* The submission ring (client_ring.c, kernels/submit_ring.h). wanted:
 * none yet, and not switched off (SPCOLL_SUBMIT_RING=0) or refused on
 * this connection. make (client_buffer.c): at a group join or an op's
 * start, where wanted. ready: whether frame f may go through it (an op,
 * and a ring). put: 2 when f (its id set) went into the ring and the
 * daemon must be kicked, 1 when it went in, 0 when it goes on the socket
 * (too big, no room), -1 when the daemon had closed the ring (the frame
 * was not sent).
 * reset: a new connection, before its hello: the ring is dropped (a new
 * one is made for it). */
#define SPC__RING_BYTES (64u << 10)
int spc__ring_wanted(spc_client *c);
void spc__ring_make(spc_client *c);
int spc__ring_ready(spc_client *c, const Spcoll__Frame *f);
int spc__ring_put(spc_client *c, Spcoll__Frame *f);
void spc__ring_reset(spc_client *c);

/* Block for req, then unlink and free it; returns its status. *reply_p (if
 * not NULL) receives the reply frame to free with
 * spcoll__frame__free_unpacked. */
int spc__finish(spc_client *c, spc_request *req, Spcoll__Frame **reply_p);

/* Send and finish in one go. */
int spc__call(spc_client *c, Spcoll__Frame *f, int fd,
              Spcoll__Frame **reply_p);
int spc__call_fds(spc_client *c, Spcoll__Frame *f, const int *fds, int nfds,
                  Spcoll__Frame **reply_p);
/* A registration with its descriptors: sent again, for up to about 2 s,
 * while the daemon refuses them for this user's share of descriptors in
 * flight (uid_max_fds_in_flight; others' go back within moments). */
int spc__register_call(spc_client *c, Spcoll__Frame *f, const int *fds,
                       int nfds, Spcoll__Frame **reply_p);

/* ---- client_wrap.c: caller memory (spc_buffer_wrap) on the daemon's
 * path, which knows no such buffer: spc_run copies it through a buffer
 * of the client's own. */
typedef struct {
  int active;
  spc_tensor in, out;          /* staged: what the daemon is sent */
  const spc_tensor *user_out;  /* copied back into at the end */
  int failed;                  /* staging failed with this status */
  char why[256];               /* and this message */
} spc__wrap;

/* Whether either tensor wraps caller memory. */
int spc__wrapped(const spc_tensor *in, const spc_tensor *out);
/* Stage *in_p and *out_p (when they wrap caller memory) into the
 * client's staging buffer, pointing them at the staged tensors; w says
 * what to copy back. On failure (its status, w->failed) the tensors are
 * left as they were: send them anyway, so the daemon fails the op on
 * every rank. */
int spc__wrap_begin(spc_client *c, spc__wrap *w, const spc_tensor **in_p,
                    const spc_tensor **out_p);
/* The op ended with rc: copy the staged output back when it succeeded;
 * a staging that failed is the op's failure, in its own words. */
int spc__wrap_end(spc_client *c, spc__wrap *w, int rc);

#endif
