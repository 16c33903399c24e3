/* Descriptors that come with frames: the fds the daemon passes with
 * SCM_RIGHTS (queued until the reply that names them is read) and the
 * shared segment a GroupJoined announces, kept until its group claims it.
 * The fast path itself is client_fast.c. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_fast.h"

void spc__fd_push(spc_client *c, int fd) {
  if (c->nfds == (int)(sizeof(c->fds) / sizeof(c->fds[0]))) {
    close(fd); /* more than any join asks for: a daemon bug */
    return;
  }
  c->fds[c->nfds++] = fd;
}

void spc__fds_take(spc_client *c, struct msghdr *msg) {
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL;
       cm = CMSG_NXTHDR(msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
      spc__fd_push(c, fd);
    }
  }
}

int spc__fd_pop(spc_client *c) {
  if (c->nfds == 0)
    return -1;
  int fd = c->fds[0];
  memmove(c->fds, c->fds + 1, (size_t)(--c->nfds) * sizeof(int));
  return fd;
}

void spc__seg_keep(spc_client *c, int wanted, uint64_t group_id,
                   uint64_t size) {
  int fd = spc__fd_pop(c);
  int room = c->nsegs < (int)(sizeof(c->segs) / sizeof(c->segs[0]));
  if (!wanted || !room) {
    if (fd >= 0)
      close(fd);
    return;
  }
  c->segs[c->nsegs].group_id = group_id;
  c->segs[c->nsegs].size = size;
  c->segs[c->nsegs].fd = fd;
  c->nsegs++;
}

int spc__seg_claim(spc_group *g) {
  spc_client *c = g->client;
  for (int i = 0; i < c->nsegs; i++) {
    if (c->segs[i].group_id != g->id)
      continue;
    int fd = c->segs[i].fd;
    uint64_t size = c->segs[i].size;
    c->segs[i] = c->segs[--c->nsegs];
    return spc__fast_attach(g, fd, size);
  }
  return SPC_OK;
}

void spc__seg_forget(spc_client *c) {
  while (c->nsegs > 0)
    if (c->segs[--c->nsegs].fd >= 0)
      close(c->segs[c->nsegs].fd);
  while (c->nfds > 0)
    close(spc__fd_pop(c));
}
