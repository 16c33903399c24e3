/* What each uid, and the daemon as a whole, holds on behalf of clients:
 * connections, mapped buffers, registered bytes, file descriptors sent
 * and not yet closed, pending ops and the memory of their requests. Counted here and bounded by the uid_max_* and
 * max_* limits, so no local user can make the daemon hold more than its
 * share, and all of them together no more than the daemon can give.
 * Loop thread only. */
#ifndef SPD_QUOTA_H
#define SPD_QUOTA_H

#include <stddef.h>
#include <sys/types.h>

#include "config.h"

/* kind, what it counts (for messages), per-uid limit, daemon-wide limit
 * (both fields of spd_config; LLONG_MAX where there is none). */
#define SPD_QUOTAS(X)                                                        \
  X(CONNECTIONS, "connections", uid_max_connections, max_connections)        \
  X(STATS_CONNECTIONS, "stats connections", uid_max_connections,             \
    max_stats_connections)                                                   \
  X(BUFFERS, "buffers", uid_max_buffers, max_buffers)                        \
  X(BYTES, "registered bytes", uid_max_bytes, max_bytes)                     \
  X(FDS, "file descriptors in flight", uid_max_fds_in_flight,                \
    max_fds_in_flight)                                                       \
  X(PENDING, "pending ops", uid_max_pending, uid_max_pending)                \
  X(REQUEST_BYTES, "bytes of pending op requests", uid_max_request_bytes,    \
    max_request_bytes)

typedef enum {
#define SPD_QUOTA_ENUM(kind, what, uid_limit, limit) SPD_Q_##kind,
  SPD_QUOTAS(SPD_QUOTA_ENUM)
#undef SPD_QUOTA_ENUM
  SPD_Q_COUNT
} spd_quota_kind;

typedef struct {
  uid_t uid;
  long long use[SPD_Q_COUNT];
} spd_uid_use;

typedef struct {
  spd_uid_use *uids;          /* uids holding anything; unordered */
  int n, cap;
  long long total[SPD_Q_COUNT];
} spd_quotas;

/* Take n of kind for uid. SPK_ENO_MEMORY with msg naming the limit (the
 * config key) and the amounts when it would pass the uid's or the daemon's
 * limit; nothing is taken then. */
int spd_quota_take(spd_quotas *q, const spd_config *cfg, uid_t uid,
                   spd_quota_kind kind, long long n, char *msg, size_t len);
/* Give back what spd_quota_take took. */
void spd_quota_give(spd_quotas *q, uid_t uid, spd_quota_kind kind,
                    long long n);
/* What uid holds of kind (0 for an unknown uid). */
long long spd_quota_use(const spd_quotas *q, uid_t uid, spd_quota_kind kind);
void spd_quotas_free(spd_quotas *q);

#endif
