/* Status codes shared by every layer, listed once. Negative values are
 * errors; the positive twin of each is the wire protocol's Status value
 * and the public SPC_E* code has the same number. A row: internal name
 * (SPK_E<name>), public name (SPC_<pub>, client/spcoll.h), wire name
 * (STATUS_<wire>, proto/spcoll.proto), value, message. The copies in
 * spcoll.h, the .proto and the Python package are held against this list
 * at build time (client/client_conn.c) and in the Python suite
 * (tests/python/test_status_list.py). */
#ifndef SPK_STATUS_H
#define SPK_STATUS_H

#define SPK_STATUS_MAP(X)                                                 \
  X(INVAL, EINVAL, INVALID, 1, "invalid argument")                        \
  X(PROTOCOL, EPROTOCOL, PROTOCOL, 2, "protocol error")                   \
  X(VERSION, EVERSION, VERSION, 3, "protocol version mismatch")           \
  X(NOT_FOUND, ENOTFOUND, NOT_FOUND, 4, "no such object")                 \
  X(CONFLICT, ECONFLICT, CONFLICT, 5, "conflicting membership")           \
  X(MISMATCH, EMISMATCH, MISMATCH, 6, "ranks disagree on the op")         \
  X(PEER_LOST, EPEERLOST, PEER_LOST, 7, "a rank of the group was lost")   \
  X(SHUTDOWN, ESHUTDOWN, SHUTDOWN, 8, "daemon shutting down")             \
  X(NO_MEMORY, ENOMEM, NO_MEMORY, 9, "out of memory")                     \
  X(SYSTEM, ESYSTEM, SYSTEM, 10, "system call failed")                    \
  X(ABORTED, EABORTED, ABORTED, 11, "aborted")                            \
  X(CONNECTION, ECONNECTION, CONNECTION, 12,                              \
    "connection to the daemon failed")                                    \
  X(PERM, EPERM, PERMISSION, 13, "permission denied")                     \
  X(TIMEDOUT, ETIMEDOUT, TIMEOUT, 14, "timed out")                        \
  X(UNSUPPORTED, EUNSUPPORTED, UNSUPPORTED, 15,                           \
    "not supported by this daemon")                                       \
  X(DEVICE, EDEVICE, DEVICE, 16, "device (CUDA/NCCL) error")              \
  X(NODE_LOST, ENODELOST, NODE_LOST, 17, "a peer node was lost")         \
  X(RESTARTED, ERESTARTED, RESTARTED, 18,                                 \
    "a daemon restarted while the op was in flight")

enum {
  SPK_OK = 0,
#define SPK_STATUS_ENUM(name, pub, wire, val, msg) SPK_E##name = -(val),
  SPK_STATUS_MAP(SPK_STATUS_ENUM)
#undef SPK_STATUS_ENUM
};

/* Fixed-size message buffer filled by the first place that detects an
 * error; callers pass the status up and keep the message. */
typedef struct {
  char msg[512];
} spk_err;

const char *spk_strerror(int status);
/* status when it is one of the errors listed above, else fallback: what
 * a peer names is used only as a status this code knows. */
int spk_error_or(int status, int fallback);
int spk_err_set(spk_err *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
