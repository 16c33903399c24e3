/* spcoll.h — libspclient, the trainer side of spcoll.
 *
 * A trainer process connects to the node's spcolld, joins named groups and
 * asks for collectives on tensors that live in buffers it shares with the
 * daemon. The daemon moves the bytes; this library only describes the work.
 *
 * Conventions
 * - Every function returning int returns SPC_OK (0) or a negative SPC_E*
 *   status. spc_strerror() names a status; spc_last_error() gives the full
 *   message of the client's last failure (which argument, which value).
 * - Output parameters (names ending in _p) are set only on success.
 * - Threads: a spc_client and everything made from it (groups, buffers,
 *   requests) must be used by one thread at a time. Distinct clients are
 *   independent. Threads that share a client under a lock of their own
 *   may hand it over (spc_client_set_wait_lock): ops then release it while
 *   they wait for other ranks.
 * - Tensors are C-contiguous: (buffer, byte offset, dtype, shape). Dims may
 *   be negative, Python style (-1 is the last).
 * - Every rank of a group issues the same ops in the same order, as with
 *   NCCL. The daemon checks that the ranks agree; a disagreement fails the
 *   op on every rank with SPC_EMISMATCH and a message naming the field.
 */
#ifndef SPCOLL_H
#define SPCOLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The public API: every declaration of this header is exported from
 * libspclient.so, which builds with -fvisibility=hidden (nothing else is).
 * SPC_API marks one declaration; the pragma covers the whole header, so a
 * function declared here is public without more. */
#define SPC_API __attribute__((visibility("default")))
#pragma GCC visibility push(default)

#define SPC_VERSION "0.1.0"
#define SPC_MAX_DIMS 8
/* Bumped whenever a public struct's layout or a function's signature
 * changes; spc_abi() reports it with the layouts. */
#define SPC_ABI_VERSION 1

/* Status codes: negative values are errors. */
enum {
  SPC_OK = 0,
  SPC_EINVAL = -1,     /* a bad argument: the message names it */
  SPC_EPROTOCOL = -2,  /* the daemon rejected a frame */
  SPC_EVERSION = -3,   /* client and daemon speak different protocols */
  SPC_ENOTFOUND = -4,  /* no such group or buffer */
  SPC_ECONFLICT = -5,  /* rank already taken, world size conflicts */
  SPC_EMISMATCH = -6,  /* the ranks of a group disagree on an op */
  SPC_EPEERLOST = -7,  /* a rank of the group was lost; group broken */
  SPC_ESHUTDOWN = -8,  /* the daemon is shutting down */
  SPC_ENOMEM = -9,
  SPC_ESYSTEM = -10,   /* a system call failed (the message says which) */
  SPC_EABORTED = -11,
  SPC_ECONNECTION = -12, /* the connection to the daemon failed or closed */
  SPC_EPERM = -13,      /* the group belongs to another user */
  SPC_ETIMEDOUT = -14,  /* the group did not complete in time */
  SPC_EUNSUPPORTED = -15, /* the daemon lacks what the request needs (GPU,
                           * a peer transport) */
  SPC_EDEVICE = -16,    /* a CUDA or NCCL call failed (the message says which) */
  SPC_ENODELOST = -17,  /* a peer node's daemon died or became unreachable;
                         * the message names the node; group broken */
  SPC_ERESTARTED = -18  /* the daemon went away (restart, upgrade, crash)
                         * while the op was in flight, or another rank's
                         * copy of it was, or another node the group
                         * spans lost its daemon (the message names it):
                         * it failed on every rank. The client reconnects
                         * and rejoins by itself; the next op runs
                         * (spc_set_reconnect_timeout) */
};

typedef enum {
  SPC_FLOAT32 = 0,
  SPC_FLOAT64 = 1,
  SPC_FLOAT16 = 2,
  SPC_BFLOAT16 = 3,
  SPC_INT8 = 4,
  SPC_UINT8 = 5,
  SPC_INT32 = 6,
  SPC_INT64 = 7
} spc_dtype;

typedef struct spc_client spc_client;
typedef struct spc_group spc_group;
typedef struct spc_buffer spc_buffer;
typedef struct spc_request spc_request;

/* A tensor in a registered buffer. Fill it with spc_tensor_init. */
typedef struct {
  spc_buffer *buf;
  uint64_t offset;            /* bytes from the start of buf */
  spc_dtype dtype;
  int ndim;
  int64_t shape[SPC_MAX_DIMS];
} spc_tensor;

/* Name of a status code ("invalid argument", ...). Never NULL. */
const char *spc_strerror(int status);

/* The library's version, SPC_ABI_VERSION and the size and field offsets of
 * spc_tensor, spc_op and spc_timing, as one line ("spcoll 0.1.0 abi 1;
 * spc_tensor 88 buf 0 offset 8 ...; ..."). Bindings that lay these structs
 * out themselves (Python's ctypes) compare it with their own layout and
 * refuse a library that differs. Never NULL; thread-safe after the first
 * call returns. */
const char *spc_abi(void);

/* Size in bytes of one element of dtype; 0 for an unknown dtype. */
size_t spc_dtype_size(spc_dtype dtype);

/* The default control socket: $SPCOLL_SOCKET if set, else
 * /run/spcolld/spcolld.sock for root, else $XDG_RUNTIME_DIR/spcolld.sock. */
const char *spc_default_socket(char *buf, size_t len);

/* Connect to the daemon at socket_path (NULL: spc_default_socket) and say
 * Hello. framework is a free-form tag shown in the daemon's stats ("torch",
 * "c"); NULL means "c". Fails with SPC_ECONNECTION when no daemon listens
 * and SPC_EVERSION when it speaks another protocol. On failure *client_p is
 * left alone and the message is in spc_last_error(NULL). */
int spc_connect(const char *socket_path, const char *framework,
                spc_client **client_p);

/* Close the connection and free the client. Groups, buffers and requests
 * still open are released (pending ops fail on the other ranks). NULL is a
 * no-op. */
void spc_disconnect(spc_client *client);

/* The message of the last failure of a call on client, "" when none. With
 * client NULL: the last spc_connect failure of this thread. */
const char *spc_last_error(const spc_client *client);

/* Join group `name` as `rank` of `world_size`. Blocks until every rank has
 * joined (like ncclCommInitRank), or fails with SPC_ETIMEDOUT when the
 * group is not complete within the daemon's join_timeout (1800 s by
 * default), naming the ranks that never came. Fails with SPC_ECONFLICT when
 * the rank is
 * taken or the group exists with another world size, SPC_EINVAL for a rank
 * outside [0, world_size) or a name that is not 1..127 bytes of
 * [A-Za-z0-9._:/@-]. */
int spc_group_join(spc_client *client, const char *name, int world_size,
                   int rank, spc_group **group_p);

/* Ask, for the groups this client joins from now on, that an op some rank
 * has not issued within timeout_ms fails on every rank with SPC_ETIMEDOUT
 * naming the ranks that never issued it, and breaks the group (as
 * torch.distributed's timeout does). 0 restores the daemon's op_timeout
 * (1800 s by default). A group takes the shortest timeout its ranks asked
 * for. SPC_EINVAL for a negative timeout. */
int spc_set_op_timeout(spc_client *client, int64_t timeout_ms);

/* When the daemon goes away (a restart, an upgrade, a crash), the client
 * keeps its buffers and groups. Requests in flight fail with
 * SPC_ERESTARTED. The next call reconnects, trying for up to timeout_ms
 * (-1, the default: the op timeout, spc_set_op_timeout's or else the
 * daemon's; 0: never reconnect, every call then fails with
 * SPC_ECONNECTION), registers the host buffers again and rejoins the
 * groups under the same names and ranks, waiting for their other ranks to
 * rejoin too. An op some rank of a group had issued when the daemon went
 * fails on every rank with SPC_ERESTARTED, and the ranks' next ops run.
 * A group spanning nodes whose other node's daemon went: its ops fail
 * with SPC_ERESTARTED naming the node, and the next call on it rejoins
 * it, waiting up to timeout_ms for that node's ranks; if they do not come
 * back, it fails with SPC_ENODELOST naming the node, and so does every
 * later op of the group.
 * A daemon being upgraded (spcolld --upgrade) refuses the ops nobody
 * started as not run: spc_run and the blocking collectives send them again,
 * to the new daemon, and do not fail.
 * Device buffers are registered again (the driver exports them anew).
 * Not carried: groups made by spc_group_split (their ops fail with
 * SPC_ERESTARTED: leave them and make them again). Point-to-point requests in flight fail and are
 * not retried. After the timeout the call fails with SPC_ECONNECTION, and
 * so does every later one. SPC_EINVAL for a timeout below -1. */
int spc_set_reconnect_timeout(spc_client *client, int64_t timeout_ms);

/* Leave the group and free it. Ops the other ranks still issue on the group
 * fail with SPC_EPEERLOST naming this rank. */
int spc_group_leave(spc_group *group);

int spc_group_rank(const spc_group *group);
int spc_group_size(const spc_group *group);
/* 1 when some rank of the group runs on another node (its daemon peers
 * with this one), 0 when every rank is on this node. */
int spc_group_spans_nodes(const spc_group *group);

/* Allocate `size` bytes of host memory shared with the daemon (a sealed
 * memfd) and register it. The memory is zero-filled. The buffer holds one
 * file descriptor (its memfd) until it is freed: the other ranks of a
 * group on this node that may (same uid) take it to read the buffer's
 * tensors in place (docs/performance.md). */
int spc_buffer_alloc(spc_client *client, size_t size, spc_buffer **buf_p);

/* A buffer over `size` bytes of the caller's own host memory at ptr (any
 * memory: malloc, a torch tensor), without copying it into spcoll memory.
 * Nothing is registered with the daemon and no file descriptor is held.
 * Only spc_run takes its tensors (spc_start, P2P and the stream calls
 * refuse them with SPC_EINVAL). Where the group's fast path reads ops in
 * place, the other ranks read these tensors in this process with
 * process_vm_readv (the kernel's cross-memory attach: same uid, ptrace
 * allowed, as Open MPI's CMA), one copy in all; otherwise spc_run copies
 * them through a buffer of the library's own (one copy in, one out). The
 * memory must stay valid until spc_buffer_free, which frees only the
 * record. SPC_EINVAL for a NULL ptr or size 0. */
int spc_buffer_wrap(spc_client *client, void *ptr, size_t size,
                    spc_buffer **buf_p);

/* Unregister and unmap the buffer. The caller must not free a buffer that
 * an op in flight still uses (the daemon keeps its own mapping until the
 * op ends, so this is never unsafe for the daemon). */
int spc_buffer_free(spc_buffer *buf);

void *spc_buffer_data(const spc_buffer *buf);
size_t spc_buffer_size(const spc_buffer *buf);

/* Describe a tensor of `ndim` dims in buf at byte `offset`. Checks dtype,
 * ndim (1..SPC_MAX_DIMS), non-negative dims and that the tensor fits. */
int spc_tensor_init(spc_tensor *t, spc_buffer *buf, uint64_t offset,
                    spc_dtype dtype, int ndim, const int64_t *shape);

/* Address of the tensor's first element in this process. */
void *spc_tensor_data(const spc_tensor *t);

/* ---- Ops ------------------------------------------------------------
 * An op is described by a spc_op (made by the spc_op_* constructors below)
 * and run on (in, out) tensors of one dtype: spc_start returns at once with
 * a request (complete it with spc_wait or spc_test; do not touch out or
 * change in meanwhile), spc_run blocks. The named functions after them are
 * spc_run of the matching constructor.
 *
 * An op that goes to spcolld (not through a group's shared segment) is
 * put into the client's submission ring, a 64 KiB host buffer the
 * daemon maps, made at the client's first group join; the socket carries a kick only
 * when the daemon may be asleep, so ops issued while it is awake cost no
 * system call. Ops too big for it, or issued while it is full, go on the
 * socket, in order with the rest. The ring is one of the client's
 * buffers for spcolld's limits (client_max_buffers, and 64 KiB of
 * client_max_bytes); where spcolld refuses it, ops go on the socket.
 * SPCOLL_SUBMIT_RING=0 in the environment keeps every op on the socket.
 *
 * Split sizes: "rule" is the seeds' rule, n over w ranks gives n/w + 1 to
 * the first n % w ranks and n/w to the rest. A size list (sizes, w
 * entries, or NULL for the rule) must be the same on every rank.
 * Argument errors (a bad dim, sizes that do not sum, a wrong output shape)
 * fail the op on every rank with SPC_EINVAL, naming the rank and the value,
 * and the group stays usable.
 *
 * Ops are out of place: an output shares no byte with any input or output
 * of any rank, except in place as NCCL defines it: all_reduce with out the
 * same bytes as in; all_gather with in exactly the rank's own slot of out;
 * reduce_scatter with out exactly the rank's own slot of in (slots along a
 * dim with only 1s before it, e.g. dim 0; all_gather unscaled). Other
 * overlaps fail with SPC_EINVAL naming both tensors (docs/security.md).
 * Tensors start at a multiple of their element size. */

typedef enum {
  SPC_SCALE_NONE = 0,  /* gradients pass unchanged */
  SPC_SCALE_UP = 1,    /* multiplied by the group size */
  SPC_SCALE_DOWN = 2   /* divided by the group size (one IEEE division) */
} spc_grad_scale;

typedef enum { SPC_SUM = 0, SPC_MAX = 1, SPC_MIN = 2 } spc_reduce_op;

typedef struct {
  int kind;                   /* internal op number */
  int ndims;
  int dims[2];
  const int64_t *sizes;       /* NULL, or nsizes entries */
  int nsizes;                 /* 0 with sizes: the group size */
  const int64_t *sizes2;
  int nsizes2;
  int64_t scalar;
  unsigned flags;
} spc_op;

/* The op kinds (spc_op.kind, set by the spc_op_* constructors), numbered
 * as on the wire. The library's one op list (kernels/op_list.h) is checked
 * against every value when it builds, so the two cannot drift. */
typedef enum {
  SPC_OP_SPLIT = 1,
  SPC_OP_ALL_GATHER = 2,
  SPC_OP_ALL_TO_ALL = 3,
  SPC_OP_ALL_TO_ALL_V = 4,
  SPC_OP_ALL_REDUCE = 5,
  SPC_OP_REDUCE_SCATTER = 6,
  SPC_OP_ZIGZAG_SPLIT = 7,
  SPC_OP_ZIGZAG_GATHER = 8,
  SPC_OP_PACKED_SPLIT = 9,
  SPC_OP_PACKED_GATHER = 10
} spc_op_kind;

/* What the op list says of kind: its name (that of its spc_op_<name>
 * constructor), the kind whose op, made with the same arguments, is its
 * gradient (0: none listed; all_to_all and all_to_all_v swap their dims
 * or lists, see the backward functions below), that gradient's scale, and
 * whether the op combines values (1: it takes a reduce op and a numeric
 * dtype). Any output pointer may be NULL. Returns SPC_OK, or SPC_ENOTFOUND
 * when kind is no op: kinds run from 1 without gaps, so asking 1, 2, ...
 * until SPC_ENOTFOUND lists every op this library has. */
int spc_op_info(int kind, const char **name_p, int *grad_kind_p,
                spc_grad_scale *grad_scale_p, int *reduces_p);

/* split: every rank passes the same full tensor x; out_r = piece r of x
 * along dim (sizes or the rule). out: x's shape with dim -> piece r. */
spc_op spc_op_split(int dim, const int64_t *sizes);
/* all_gather: out = cat over ranks of in along dim, rank order; ranks may
 * hold different sizes along dim (sizes optional, checked when given). */
spc_op spc_op_all_gather(int dim, const int64_t *sizes);
/* all_to_all: in is cut in w pieces along scatter_dim (rule), piece j goes
 * to rank j; received pieces are concatenated along gather_dim in rank
 * order. Every rank has the same size S on scatter_dim; rank j's size on
 * gather_dim must be piece j of the total G, so pass gather_size = G when
 * the ranks' sizes differ (0: local size * w). out: scatter_dim -> piece r
 * of S, gather_dim -> G. Any dim pair, 2-D to 8-D. */
spc_op spc_op_all_to_all(int scatter_dim, int gather_dim, int64_t gather_size);
/* all_to_all_v along dim 0: rank i sends rows in_splits[j] to rank j and
 * concatenates what it receives (out_splits[i] from rank i) in rank order.
 * Lists are this rank's own (w entries each). */
spc_op spc_op_all_to_all_v(const int64_t *in_splits, const int64_t *out_splits);
/* all_reduce: out = op over ranks of in, elementwise. 16-bit floats
 * accumulate in fp32. */
spc_op spc_op_all_reduce(spc_reduce_op op);
/* reduce_scatter: out_r = piece r (sizes or rule) along dim of the sum over
 * ranks of in. */
spc_op spc_op_reduce_scatter(int dim, const int64_t *sizes);
/* zigzag (load-balanced ring attention) split: the full sequence along dim,
 * length L divisible by 2w, is cut in 2w chunks; rank r keeps chunk r then
 * chunk 2w-1-r. zigzag gather is the inverse (natural order restored). */
spc_op spc_op_zigzag_split(int dim);
spc_op spc_op_zigzag_gather(int dim);
/* packed (varlen) split: nseq sequences of seq_lens packed along dim of
 * the full tensor; rank r takes piece r (rule) of each, concatenated.
 * packed gather rebuilds the original packing. */
spc_op spc_op_packed_split(int dim, const int64_t *seq_lens, int nseq);
spc_op spc_op_packed_gather(int dim, const int64_t *seq_lens, int nseq);
/* Scale every copied element by the group size: the grad_scale of the
 * seeds' backward ops. Returns op with the scale set. */
spc_op spc_op_scaled(spc_op op, spc_grad_scale scale);

/* The shape this rank's output must have for op on `in`, from the same
 * planners the daemon runs, and this rank's own argument checks (dims in
 * range, size lists that sum, zigzag divisibility): a bad argument is found
 * here before any rank waits. An all_gather without sizes assumes every
 * rank holds in's size. out_shape has room for SPC_MAX_DIMS. */
int spc_out_shape(const spc_group *group, const spc_op *op,
                  const spc_tensor *in, int64_t *out_shape, int *ndim_p);

int spc_start(spc_group *group, const spc_op *op, const spc_tensor *in,
              const spc_tensor *out, spc_request **req_p);
int spc_run(spc_group *group, const spc_op *op, const spc_tensor *in,
            const spc_tensor *out);

/* Forward ops, blocking. */
int spc_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
              int dim, const int64_t *sizes);
int spc_all_gather(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   int dim, const int64_t *sizes);
int spc_all_to_all(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   int scatter_dim, int gather_dim, int64_t gather_size);
int spc_all_to_all_v(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     const int64_t *in_splits, const int64_t *out_splits);
/* Megatron sp2hp: in [..., H] viewed as [n, H] -> out [w*n, H/w]; hp2sp:
 * in [N, h] -> out [N/w, w*h]. Both are all_to_all on 2-d views. */
int spc_sp2hp(spc_group *g, const spc_tensor *in, const spc_tensor *out);
int spc_hp2sp(spc_group *g, const spc_tensor *in, const spc_tensor *out);
int spc_all_reduce(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   spc_reduce_op op);
int spc_reduce_scatter(spc_group *g, const spc_tensor *in,
                       const spc_tensor *out, int dim, const int64_t *sizes);
int spc_zigzag_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     int dim);
int spc_zigzag_gather(spc_group *g, const spc_tensor *in,
                      const spc_tensor *out, int dim);
int spc_packed_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     int dim, const int64_t *seq_lens, int nseq);
int spc_packed_gather(spc_group *g, const spc_tensor *in,
                      const spc_tensor *out, int dim, const int64_t *seq_lens,
                      int nseq);

/* Backward ops: the gradient of each forward op, with the seeds'
 * grad_scale. grad_out has the forward output's shape, grad_in the
 * forward input's. */
/* split backward: grad_in = cat over ranks of scale(grad_out) (default
 * scale in the seeds: down). */
int spc_split_backward(spc_group *g, const spc_tensor *grad_out,
                       const spc_tensor *grad_in, int dim,
                       const int64_t *sizes, spc_grad_scale scale);
/* all_gather backward, two flavours, both needed:
 * _own: grad_in = this rank's own piece of its own scale(grad_out) (the
 *   seeds' gather_forward_split_backward, default scale up);
 * _sum: grad_in = this rank's piece of the sum over ranks of grad_out (a
 *   reduce_scatter: Megatron with tensor_parallel_output_grad). */
int spc_all_gather_backward_own(spc_group *g, const spc_tensor *grad_out,
                                const spc_tensor *grad_in, int dim,
                                const int64_t *sizes, spc_grad_scale scale);
int spc_all_gather_backward_sum(spc_group *g, const spc_tensor *grad_out,
                                const spc_tensor *grad_in, int dim,
                                const int64_t *sizes);
/* all_to_all backward: all_to_all(grad, gather_dim, scatter_dim,
 * gather_size = the forward input's size S on scatter_dim). */
int spc_all_to_all_backward(spc_group *g, const spc_tensor *grad_out,
                            const spc_tensor *grad_in, int scatter_dim,
                            int gather_dim, int64_t scatter_size);
/* zigzag split backward: gather, divide by w, natural order; zigzag gather
 * backward: multiply by w, keep chunks r and 2w-1-r. */
int spc_zigzag_split_backward(spc_group *g, const spc_tensor *grad_out,
                              const spc_tensor *grad_in, int dim);
int spc_zigzag_gather_backward(spc_group *g, const spc_tensor *grad_out,
                               const spc_tensor *grad_in, int dim);
/* packed split backward: the full gradient from every rank's pieces,
 * divided by w; packed gather backward: own pieces multiplied by w. */
int spc_packed_split_backward(spc_group *g, const spc_tensor *grad_out,
                              const spc_tensor *grad_in, int dim,
                              const int64_t *seq_lens, int nseq);
int spc_packed_gather_backward(spc_group *g, const spc_tensor *grad_out,
                               const spc_tensor *grad_in, int dim,
                               const int64_t *seq_lens, int nseq);

/* Kept from the first release: spc_start of spc_op_all_gather. */
int spc_all_gather_async(spc_group *group, const spc_tensor *in,
                         const spc_tensor *out, int dim, const int64_t *sizes,
                         spc_request **req_p);

/* Split a group into sub-groups, as ncclCommSplit / MPI_Comm_split: every
 * rank of g calls it; ranks passing the same color form a new group, ranked
 * by (key, rank in g). color < 0 joins no group (*sub_p = NULL). Used for
 * hybrid context parallelism: with ring size R, ring groups are colors
 * rank / R (consecutive ranks) and Ulysses groups colors rank % R.
 * A group across nodes splits too: a sub-group whose ranks are all on one
 * node is a group of that node (spc_group_spans_nodes 0), the others span
 * nodes. SPC_ENOMEM on every rank when a rank with a color is at its
 * client's group limit; a node lost before a sub-group is complete fails
 * the split on every rank, the message naming the node. */
int spc_group_split(spc_group *g, int color, int key, spc_group **sub_p);

/* Where the daemon spent the last op this client completed (all 0 before
 * the first): daemon_ns from reading the request to queueing the reply;
 * of it, wait_ns waiting for the other ranks, plan_ns in stream order and
 * planning, move_ns in the mover. The rest of a round trip is the socket
 * and this library. */
typedef struct {
  uint64_t daemon_ns, wait_ns, plan_ns, move_ns;
} spc_timing;
int spc_last_timing(const spc_client *client, spc_timing *timing);

/* The connection's socket, for a thread that waits for answers without
 * holding the client (which one thread at a time may use): poll it for
 * POLLIN without the client, then call spc_test under the client's owner.
 * Readable means an answer may be there; another caller's spc_test may
 * have taken it first, so wait with a bound or a wake-up of your own.
 * Ops run through a group's shared segment (spc_run) never answer here.
 * -1 for NULL. */
int spc_client_fd(const spc_client *client);

/* For a program whose threads share the client under a lock of their
 * own: hand libspclient that lock's release and take (arg passed to
 * both; they run on the thread that holds the lock). spc_run and the
 * blocking collectives then release it while they wait for the group's
 * other ranks (through its shared segment, or for the daemon's answer)
 * and take it again before they go on. Meanwhile other threads may use
 * the client, for anything but the waiting op's group: that group's
 * calls stay one at a time, in the program's order. Without it (the
 * default), a thread waiting for one group holds the client, so ranks
 * that run two groups' ops on two threads in different orders wait for
 * each other until the op timeout. If the daemon goes while an op waits
 * so and another thread's call reconnects meanwhile, that op fails with
 * SPC_ERESTARTED and its group rejoins at its next op, not with the
 * client's other groups (as a group spanning nodes does). Both NULL
 * clears it; SPC_EINVAL for one NULL. */
int spc_client_set_wait_lock(spc_client *client, void (*release)(void *arg),
                             void (*take)(void *arg), void *arg);

/* Wait for the request, free it and set *req to NULL. Returns the op's
 * status. */
int spc_wait(spc_request **req);

/* Poll the request without blocking. *done_p = 0 while it runs; when it is
 * done, *done_p = 1, the request is freed, *req becomes NULL and the op's
 * status is returned. */
int spc_test(spc_request **req, int *done_p);

/* ---- Point to point ---------------------------------------------------
 * A send to one rank of the group and a receive from one rank (or from
 * any: SPC_ANY_SOURCE), matched per (group, source, destination, tag) in
 * the order each rank posted them; a receive from any source takes the
 * earliest send to it with its tag. Sender and receiver tensors must have
 * the same dtype and element count (shapes may differ), or both fail with
 * SPC_EMISMATCH naming the two. Independent of the group's collectives
 * (their orders do not interleave). Tags are >= 0. Host tensors (a device
 * tensor gets SPC_EUNSUPPORTED), in groups of one node or spanning nodes:
 * across nodes the receiver's daemon matches, so a receive from any source
 * takes the sends of other nodes in the order they reached it. The op
 * timeout, a lost rank or node, abort and drain end a waiting send or
 * receive with the collectives' errors. */
#define SPC_ANY_SOURCE (-1)

/* Send t to rank dst; returns once the receiver's output holds it. */
int spc_send(spc_group *group, const spc_tensor *t, int dst, int tag);

/* Receive into t from rank src (or SPC_ANY_SOURCE); *src_p (may be NULL)
 * gets the rank it came from. */
int spc_recv(spc_group *group, const spc_tensor *t, int src, int tag,
             int *src_p);

/* Start a send or receive; complete the request with spc_wait/spc_test
 * (t must stay untouched until then). A receive's *src_p (may be NULL; it
 * must stay valid until the request completes) is set when it completes
 * successfully. */
int spc_start_send(spc_group *group, const spc_tensor *t, int dst, int tag,
                   spc_request **req_p);
int spc_start_recv(spc_group *group, const spc_tensor *t, int src, int tag,
                   int *src_p, spc_request **req_p);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

/* The rest of the API, one header per part: tensors in CUDA device
 * memory, and batch preparation. */
#include "spcoll_gpu.h"
#include "spcoll_batch.h"

#endif
