/* Host buffers: a sealed memfd, mapped here and registered with the
 * daemon (the fd travels with SCM_RIGHTS); tensor descriptors. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_fast.h"
#include "client_gpu.h"
#include "tensor_check.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* The pages are ours to allocate: the daemon refuses to map a sparse file,
 * whose pages it would otherwise fault in on its own account. First touch
 * costs the same either way; it just happens here. Kernels before 5.14
 * lack the advice: touch each page instead. */
static int memfd_populate(void *data, size_t size) {
  if (madvise(data, size, MADV_POPULATE_WRITE) == 0)
    return 0;
  if (errno != EINVAL)
    return -1;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t off = 0; off < size; off += page)
    ((volatile char *)data)[off] = 0;
  return 0;
}

/* The memfd's size, seals and identity (the fast path's readers check
 * it, client_fast_map.c); the name of the call that failed, or NULL. */
static const char *memfd_shape(int fd, size_t size, spc_buffer *b) {
  struct stat st;
  if (ftruncate(fd, (off_t)size) < 0)
    return "ftruncate";
  /* Shrinking could make the daemon fault on its mapping; growing is
   * harmless but pointless, so both are sealed. */
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
    return "fcntl(F_ADD_SEALS)";
  if (fstat(fd, &st) < 0)
    return "fstat";
  b->dev = st.st_dev;
  b->ino = st.st_ino;
  return NULL;
}

/* b's memfd (b->memfd), mapped at b->data. */
static int memfd_make(spc_client *c, size_t size, spc_buffer *b) {
  int fd = memfd_create("spcoll", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return spc__fail(c, SPC_ESYSTEM, "memfd_create: %s", strerror(errno));
  const char *what = memfd_shape(fd, size, b);
  if (what == NULL) {
    what = "mmap";
    void *data = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data != MAP_FAILED && memfd_populate(data, size) < 0) {
      what = "madvise(MADV_POPULATE_WRITE)";
      int saved = errno;
      munmap(data, size);
      errno = saved;
    } else if (data != MAP_FAILED) {
      b->memfd = fd;
      b->data = data;
      return SPC_OK;
    }
  }
  int saved = errno;
  close(fd);
  return spc__fail(c, SPC_ESYSTEM, "%s of a %zu-byte memfd: %s", what, size,
                   strerror(saved));
}

int spc_buffer_alloc(spc_client *c, size_t size, spc_buffer **buf_p) {
  return spc__buffer_alloc(c, size, SPC__BUF_PLAIN, buf_p);
}

int spc__buffer_register(spc_client *c, spc_buffer *b) {
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  reg.size = b->size;
  reg.stream_flags = b->stream_flags != 0;
  reg.submit_ring = b->submit_ring != 0;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  Spcoll__Frame *reply = NULL;
  int rc = spc__register_call(c, &f, &b->memfd, 1, &reply);
  if (rc == SPC_OK && reply->body_case != SPCOLL__FRAME__BODY_BUF_REGISTERED)
    rc = spc__fail(c, SPC_EPROTOCOL, "spcolld answered buf_register with %s",
                   spf_body_name(reply->body_case));
  if (rc == SPC_OK) {
    b->id = reply->buf_registered->buffer_id;
    b->submit_ring = b->submit_ring && reply->buf_registered->submit_ring;
  }
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

int spc__buffer_alloc(spc_client *c, size_t size, int kind,
                      spc_buffer **buf_p) {
  if (c == NULL || buf_p == NULL)
    return SPC_EINVAL;
  if (size == 0)
    return spc__fail(c, SPC_EINVAL, "buffer size 0: must be at least 1 byte");
  spc_buffer *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of a buffer failed");
  int rc = memfd_make(c, size, b);
  if (rc < 0) {
    free(b);
    return rc;
  }
  b->size = size;
  b->stream_flags = kind == SPC__BUF_FLAGS;
  b->submit_ring = kind == SPC__BUF_RING;
  rc = spc__buffer_register(c, b);
  if (spc__again(c, &rc))
    rc = spc__buffer_register(c, b);
  if (rc < 0) {
    munmap(b->data, size);
    close(b->memfd);
    free(b);
    return rc;
  }
  b->client = c;
  b->next = c->buffers;
  c->buffers = b;
  *buf_p = b;
  return SPC_OK;
}

int spc_buffer_wrap(spc_client *c, void *ptr, size_t size,
                    spc_buffer **buf_p) {
  if (c == NULL || buf_p == NULL)
    return SPC_EINVAL;
  if (ptr == NULL || size == 0)
    return spc__fail(c, SPC_EINVAL, "spc_buffer_wrap of %zu bytes at %p: "
                     "needs memory (a non-NULL ptr and a size above 0)",
                     size, ptr);
  if ((uintptr_t)ptr + size < (uintptr_t)ptr)
    return spc__fail(c, SPC_EINVAL, "spc_buffer_wrap of %zu bytes at %p "
                     "wraps around the address space", size, ptr);
  spc_buffer *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of a buffer failed");
  b->client = c;
  b->data = ptr;
  b->size = size;
  b->memfd = -1;
  b->wrapped = 1;
  b->next = c->buffers;
  c->buffers = b;
  *buf_p = b;
  return SPC_OK;
}

/* A wrapped buffer is a record: nothing mapped, registered or held. The
 * fast path forgets a call it may repeat that names this record, whose
 * address malloc may hand out again. */
static int wrapped_free(spc_buffer *b) {
  spc_client *c = b->client;
  for (spc_buffer **p = &c->buffers; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      break;
    }
  spc__fast_forget(c, b);
  free(b);
  return SPC_OK;
}

int spc_buffer_free(spc_buffer *b) {
  if (b == NULL)
    return SPC_EINVAL;
  if (b->gpu != NULL)
    return spc__gpu_buffer_free(b);
  if (b->wrapped)
    return wrapped_free(b);
  spc_client *c = b->client;
  Spcoll__BufRelease rel = SPCOLL__BUF_RELEASE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  rel.buffer_id = b->id;
  f.body_case = SPCOLL__FRAME__BODY_BUF_RELEASE;
  f.buf_release = &rel;
  /* The daemon went: its registration went with it, and the buffer is
   * not registered again (client_restart.c). */
  int rc = c->lost ? SPC_OK : spc__call(c, &f, -1, NULL);
  spc__fast_freed(c);
  for (spc_buffer **p = &c->buffers; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      break;
    }
  if (munmap(b->data, b->size) < 0 && rc == SPC_OK)
    rc = spc__fail(c, SPC_ESYSTEM, "munmap(%zu bytes): %s", b->size,
                   strerror(errno));
  if (close(b->memfd) < 0 && rc == SPC_OK)
    rc = spc__fail(c, SPC_ESYSTEM, "close of buffer %llu's memfd (fd %d): %s",
                   (unsigned long long)b->id, b->memfd, strerror(errno));
  free(b);
  return rc;
}

void *spc_buffer_data(const spc_buffer *b) {
  return b ? b->data : NULL;
}

size_t spc_buffer_size(const spc_buffer *b) {
  return b ? b->size : 0;
}

int spc__tensor_check(spc_client *c, const char *what, const spc_buffer *buf,
                      uint64_t offset, spc_dtype dtype, int ndim,
                      const int64_t *shape) {
  if (ndim < 1 || ndim > SPC_MAX_DIMS)
    return spc__fail(c, SPC_EINVAL, "%s tensor has %d dims, not 1..%d", what,
                     ndim, SPC_MAX_DIMS);
  spk_shape s = {.ndim = ndim};
  memcpy(s.dim, shape, (size_t)ndim * sizeof(int64_t));
  spk_err err;
  if (spk_tensor_align_check(what, offset,
                             (uint64_t)(uintptr_t)buf->data + offset,
                             (spk_dtype)dtype, &err) < 0 ||
      spk_tensor_extent_check(what, &s, (spk_dtype)dtype, offset, buf->size,
                              NULL, &err) < 0)
    return spc__fail(c, SPC_EINVAL, "%s", err.msg);
  return SPC_OK;
}

int spc_tensor_init(spc_tensor *t, spc_buffer *buf, uint64_t offset,
                    spc_dtype dtype, int ndim, const int64_t *shape) {
  if (t == NULL || buf == NULL || (shape == NULL && ndim > 0))
    return SPC_EINVAL;
  spc_client *c = buf->client;
  if (spk_dtype_size((spk_dtype)dtype) == 0)
    return spc__fail(c, SPC_EINVAL, "unknown dtype %d", (int)dtype);
  if (ndim < 1 || ndim > SPC_MAX_DIMS)
    return spc__fail(c, SPC_EINVAL, "ndim %d outside 1..%d", ndim,
                     SPC_MAX_DIMS);
  /* The daemon checks the same (op.c) for tensors not made here. */
  int rc = spc__tensor_check(c, "this", buf, offset, dtype, ndim, shape);
  if (rc < 0)
    return rc;
  /* Whole, dims past ndim too: the fast path compares tensors bytewise
   * to find a repeated call (client_fast_again.c). */
  memset(t, 0, sizeof(*t));
  t->buf = buf;
  t->offset = offset;
  t->dtype = dtype;
  t->ndim = ndim;
  memcpy(t->shape, shape, (size_t)ndim * sizeof(int64_t));
  return SPC_OK;
}

/* Made at a group join or at an op's start, never while an op's frame is
 * built: its registration is a request of its own, which may find the
 * daemon gone and revive the client, and a frame names the old daemon's
 * handles. A ring the daemon will not take (its limits, or a daemon that
 * does not know rings: its answer does not say submit_ring) leaves this
 * connection on the socket; its failure is not the caller's. */
void spc__ring_make(spc_client *c) {
  if (!spc__ring_wanted(c) || c->lost || c->broken)
    return;
  char saved[sizeof(c->last_error)];
  memcpy(saved, c->last_error, sizeof(saved));
  spc_buffer *b;
  int rc = spc__buffer_alloc(c, SPC__RING_BYTES, SPC__BUF_RING, &b);
  if (rc == SPC_OK && !b->submit_ring) { /* taken as a plain buffer */
    (void)spc_buffer_free(b);
    rc = SPC_EUNSUPPORTED;
  }
  memcpy(c->last_error, saved, sizeof(saved));
  if (rc < 0) {
    c->ring_mode = -1;
    return;
  }
  c->ring = b;
  c->ring_head = 0;
}
