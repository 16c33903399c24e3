/* spc_connect / spc_disconnect: socket, Hello/Welcome, teardown. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_fast.h"
#include "client_gpu.h"

/* c->socket_path fits sun_path (spc_connect checked). */
static int socket_open(spc_client *c) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  const char *path = c->socket_path;
  _Static_assert(sizeof(sa.sun_path) == sizeof(c->socket_path),
                 "a client's socket path is a sun_path");
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    return spc__fail(c, SPC_ESYSTEM, "socket(AF_UNIX): %s", strerror(errno));
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
    return spc__fail(c, SPC_ECONNECTION, "connect(%s): %s (is spcolld "
                     "running?)", path, strerror(errno));
  return SPC_OK;
}

static int hello(spc_client *c) {
  Spcoll__Hello h = SPCOLL__HELLO__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  h.protocol_version = SPF_PROTOCOL_VERSION;
  h.framework = c->framework;
  h.pid = getpid();
  f.body_case = SPCOLL__FRAME__BODY_HELLO;
  f.hello = &h;
  Spcoll__Frame *reply;
  int rc = spc__call(c, &f, -1, &reply);
  if (rc < 0)
    return rc;
  if (reply->body_case != SPCOLL__FRAME__BODY_WELCOME)
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered hello with %s",
                   spf_body_name(reply->body_case));
  else
    c->client_id = reply->welcome->client_id,
    c->daemon_op_timeout_ms = (int64_t)reply->welcome->op_timeout_ms;
  spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

int spc__conn_open(spc_client *c) {
  spc__ring_reset(c); /* a new connection counts its frames anew */
  int rc = socket_open(c);
  return rc < 0 ? rc : hello(c);
}

static void client_free(spc_client *c) {
  spc__gpu_flags_free(c); /* takes answers: before the requests go */
  while (c->requests != NULL) {
    spc_request *r = c->requests;
    c->requests = r->next;
    if (r->reply)
      spcoll__frame__free_unpacked(r->reply, NULL);
    free(r->msg);
    free(r);
  }
  spc__fast_freed(c); /* the other ranks let go of our buffers */
  while (c->groups != NULL) {
    spc_group *g = c->groups;
    c->groups = g->next;
    if (c->lost) /* nobody else tells the ranks still in an op */
      spc__fast_leave(g);
    spc__fast_detach(g);
    free(g);
  }
  while (c->buffers != NULL) {
    spc_buffer *b = c->buffers;
    c->buffers = b->next;
    if (b->gpu != NULL)
      spc__gpu_buffer_forget(b);
    else if (!b->wrapped) {
      munmap(b->data, b->size); /* the client is gone: nobody to tell */
      close(b->memfd);
    }
    free(b);
  }
  spc__gpu_client_free(c);
  spc__seg_forget(c);
  if (c->fd >= 0)
    close(c->fd);
  spf_reader_free(&c->reader);
  free(c);
}

int spc_connect(const char *socket_path, const char *framework,
                spc_client **client_p) {
  char path[108];
  if (client_p == NULL) {
    snprintf(spc__connect_error(), 512, "client_p is NULL");
    return SPC_EINVAL;
  }
  spc_client *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    snprintf(spc__connect_error(), 512, "calloc of a client failed");
    return SPC_ENOMEM;
  }
  c->fd = -1;
  c->reconnect_ms = -1;
  c->revive = spc__revive;
  c->reform = spc__reform;
  spf_reader_init(&c->reader);
  if (socket_path == NULL)
    socket_path = spc_default_socket(path, sizeof(path));
  snprintf(c->framework, sizeof(c->framework), "%s",
           framework ? framework : "c");
  int rc = SPC_OK;
  if (strlen(socket_path) >= sizeof(c->socket_path))
    rc = spc__fail(c, SPC_EINVAL, "socket path '%s' is longer than %zu "
                   "bytes", socket_path, sizeof(c->socket_path) - 1);
  else
    snprintf(c->socket_path, sizeof(c->socket_path), "%s", socket_path);
  if (rc == SPC_OK)
    rc = spc__conn_open(c);
  if (rc < 0) {
    snprintf(spc__connect_error(), 512, "%s", c->last_error);
    client_free(c);
    return rc;
  }
  *client_p = c;
  return SPC_OK;
}

void spc_disconnect(spc_client *c) {
  if (c != NULL)
    client_free(c);
}
