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
 *   independent, so a thread per client is the way to go multi-threaded.
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

#define SPC_VERSION "0.1.0"
#define SPC_MAX_DIMS 8

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
  SPC_ECONNECTION = -12 /* the connection to the daemon failed or closed */
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
 * joined (like ncclCommInitRank). Fails with SPC_ECONFLICT when the rank is
 * taken or the group exists with another world size, SPC_EINVAL for a rank
 * outside [0, world_size). */
int spc_group_join(spc_client *client, const char *name, int world_size,
                   int rank, spc_group **group_p);

/* Leave the group and free it. Ops the other ranks still issue on the group
 * fail with SPC_EPEERLOST naming this rank. */
int spc_group_leave(spc_group *group);

int spc_group_rank(const spc_group *group);
int spc_group_size(const spc_group *group);

/* Allocate `size` bytes of host memory shared with the daemon (a sealed
 * memfd) and register it. The memory is zero-filled. */
int spc_buffer_alloc(spc_client *client, size_t size, spc_buffer **buf_p);

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

/* All-gather: out = concatenation of every rank's `in` along `dim`, in rank
 * order. Ranks may hold different sizes along dim. `sizes` (world_size
 * entries, or NULL) states each rank's size along dim; when given, every
 * rank must pass the same list and it is checked against the inputs.
 * out must have in's shape with dim replaced by the sum of the sizes.
 * Blocks until the op is done on this rank. */
int spc_all_gather(spc_group *group, const spc_tensor *in, const spc_tensor *out,
                   int dim, const int64_t *sizes);

/* The same, returning at once with a request to complete with spc_wait or
 * spc_test. Do not touch out (or change in) until it completes. */
int spc_all_gather_async(spc_group *group, const spc_tensor *in,
                         const spc_tensor *out, int dim, const int64_t *sizes,
                         spc_request **req_p);

/* Wait for the request, free it and set *req to NULL. Returns the op's
 * status. */
int spc_wait(spc_request **req);

/* Poll the request without blocking. *done_p = 0 while it runs; when it is
 * done, *done_p = 1, the request is freed, *req becomes NULL and the op's
 * status is returned. */
int spc_test(spc_request **req, int *done_p);

#ifdef __cplusplus
}
#endif

#endif
