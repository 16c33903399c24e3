/* Surviving a daemon restart (spcoll.h, spc_set_reconnect_timeout). When
 * the daemon goes away the client keeps its state: buffers (their memfds
 * are its own), groups, op timeout. Requests in flight fail with
 * SPC_ERESTARTED (client_conn.c, conn_lost); the next call reconnects,
 * with backoff, registers the buffers again and rejoins the groups under
 * the same names and ranks.
 *
 * A group's ranks realign on rejoin: each says how many ops it issued in
 * the group's sequence (GroupJoin.issued), and fails, without issuing
 * them, the ops it is behind the furthest rank by (GroupJoined.skip).
 * Every rank's next op is then the same op, and an op that some rank had
 * issued when the daemon went fails on every rank. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_fast.h"
#include "client_gpu.h"

int spc_set_reconnect_timeout(spc_client *c, int64_t timeout_ms) {
  if (c == NULL)
    return SPC_EINVAL;
  if (timeout_ms < -1)
    return spc__fail(c, SPC_EINVAL, "reconnect timeout %lld ms: -1 (the op "
                     "timeout), 0 (never reconnect) or a number of ms",
                     (long long)timeout_ms);
  c->reconnect_ms = timeout_ms;
  return SPC_OK;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One try: connect and say hello. A daemon not (yet) listening, or one
 * that went again during the hello, is worth another try (1); anything
 * else is not (its status). */
static int try_once(spc_client *c) {
  if (c->fd >= 0)
    close(c->fd); /* the old daemon's, or a failed try's */
  c->fd = -1;
  c->lost = 0;
  c->broken = 0;
  int rc = spc__conn_open(c);
  if (rc == SPC_OK) {
    c->gone_ns = 0;
    return SPC_OK;
  }
  c->lost = 1; /* the failed try's socket: closed by the next try */
  return rc == SPC_ECONNECTION || rc == SPC_ERESTARTED ? 1 : rc;
}

/* Connect again, 10 ms apart at first, doubling up to 1 s, until the
 * reconnect timeout. */
static int reconnect(spc_client *c) {
  int64_t limit = spc__reconnect_limit_ms(c), t0 = now_ms();
  int64_t pause = 10;
  for (;;) {
    int rc = try_once(c);
    if (rc <= 0)
      return rc;
    int64_t left = limit - (now_ms() - t0);
    if (left <= 0) {
      c->lost = 0, c->broken = 1; /* for good: no later call waits again */
      return spc__fail(c, SPC_ECONNECTION, "spcolld did not come back "
                       "within %lld ms (the reconnect timeout): %s",
                       (long long)limit, c->last_error);
    }
    usleep((useconds_t)((pause < left ? pause : left) * 1000));
    pause = pause * 2 < 1000 ? pause * 2 : 1000;
  }
}

/* Every buffer registered with the new daemon (new ids; tensors name
 * their buffer, not its id): host buffers by their memfds, device ones
 * exported again by the driver (client_gpu.c). Wrapped caller memory is
 * unknown to any daemon. */
static int buffers_again(spc_client *c) {
  for (spc_buffer *b = c->buffers; b != NULL; b = b->next) {
    int rc = b->wrapped || b->gpu != NULL ? SPC_OK
                                          : spc__buffer_register(c, b);
    if (rc < 0)
      return rc;
  }
  return spc__gpu_register_again(c);
}

/* Every named group of this node's ranks rejoined: all joins sent first,
 * then their answers taken, so that no two ranks wait on the order of
 * each other's groups. A group spanning nodes is rejoined at its next op
 * (client_sequence.c): its other nodes' ranks come back when they call
 * it, in the order of the program's ops; so is a group whose op another
 * thread waits in (g->in_wait): its segment is left mapped under that
 * wait. A group made by spc_group_split has no name to rejoin by: lost. */
static int groups_again(spc_client *c) {
  int n = 0, rc = SPC_OK;
  for (spc_group *g = c->groups; g != NULL; g = g->next)
    n++;
  spc_request **reqs = calloc((size_t)n + 1, sizeof(*reqs));
  if (reqs == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of %d rejoins failed", n);
  int i = 0;
  for (spc_group *g = c->groups; g != NULL; g = g->next, i++) {
    spc__fast_leave(g); /* the old daemon's segment */
    if (!g->in_wait) /* else unmapped when it rejoins (spc__reform) */
      spc__fast_detach(g);
    if (g->lost)
      continue;
    g->reform = g->multinode || g->in_wait ? SPC__REFORM_GONE : 0;
    snprintf(g->why, sizeof(g->why), "spcolld restarted");
    if (g->name[0] == '\0') {
      g->lost = 1, g->lost_status = SPC_ERESTARTED;
      snprintf(g->why, sizeof(g->why), "a group made by spc_group_split "
               "cannot be rejoined after a daemon restart: leave it and "
               "make it again");
    } else if (!g->multinode && !g->in_wait && rc == SPC_OK) {
      rc = spc__rejoin_send(g, &reqs[i]);
    }
  }
  i = 0;
  for (spc_group *g = c->groups; g != NULL; g = g->next, i++) {
    int r = reqs[i] != NULL ? spc__rejoin_finish(g, reqs[i]) : SPC_OK;
    if (rc == SPC_OK)
      rc = r;
  }
  free(reqs);
  return rc;
}

int spc__revive(spc_client *c) {
  c->reviving = 1;
  int rc = reconnect(c);
  if (rc == SPC_OK)
    rc = buffers_again(c);
  if (rc == SPC_OK)
    rc = groups_again(c);
  c->reviving = 0;
  /* Gone again, or going (a daemon that is itself being replaced): the
   * next call tries again. Anything else ends the client, as a broken
   * connection does. */
  if (rc == SPC_ERESTARTED || rc == SPC_ESHUTDOWN)
    c->lost = 1;
  else if (rc < 0 && !c->lost)
    c->broken = 1;
  return rc;
}
