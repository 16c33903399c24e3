/* Simulated device memory: every cudaMalloc allocation is a memfd with a
 * shared header page (who imported it, whether its exporter freed it), so
 * CUDA IPC handles open in other processes (through /proc/<pid>/fd, the
 * way pidfd_getfd would) and misuse across processes is seen. Pool
 * (cudaMallocAsync) memory and pinned host memory are plain mappings the
 * process records; host memory registered with cudaHostRegister is the
 * caller's, recorded as it is. munmap is interposed: device memory is
 * unmapped only by cudaFree or cudaIpcCloseMemHandle, registered memory
 * only after cudaHostUnregister. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAGIC 0x73706373696d4d45ull /* "spcsimME" */
#define HMAGIC 0x53504353u

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static sim_map *maps;
static uint64_t next_id = 1;
static uint32_t pool_access[SIM_MAX_DEV]; /* bit d: device d granted */

/* The handle's bytes (64, as CUDA's). */
typedef struct {
  uint32_t magic;
  int32_t pid, fd, dev;
  uint64_t ino, id, size;
  uint8_t pad[24];
} ipc_mem_handle;
_Static_assert(sizeof(ipc_mem_handle) == 64, "a CUDA IPC handle has 64 bytes");

static void *raw_mmap(size_t len, int fd) {
  return mmap(NULL, len, PROT_READ | PROT_WRITE,
              fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
}

static int raw_munmap(void *p, size_t len) {
  return (int)syscall(SYS_munmap, p, len);
}

static void link_map(sim_map *m) {
  m->next = maps;
  maps = m;
}

static sim_map *find_locked(const void *p, uint64_t len) {
  const uint8_t *a = p;
  for (sim_map *m = maps; m != NULL; m = m->next)
    if (a >= m->ptr && a < m->ptr + m->size &&
        len <= m->size - (uint64_t)(a - m->ptr))
      return m;
  return NULL;
}

/* The mapping overlapping [a, a+len) (headers included), or NULL. */
static sim_map *overlap_locked(const uint8_t *a, uint64_t len) {
  for (sim_map *m = maps; m != NULL; m = m->next)
    if (a < m->map + m->map_size && a + len > m->map)
      return m;
  return NULL;
}

static void unlink_map(sim_map *m) {
  for (sim_map **p = &maps; *p != NULL; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      return;
    }
}

int sim_malloc(int dev, uint64_t size, void **p_out) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(dev);
  if (size == 0) {
    *p_out = NULL;
    return SIM_OK;
  }
  if (dev < 0 || dev >= sim_cfg()->ndev)
    return SIM_EDEVICE;
  int rc = sim_dev_reserve(dev, size);
  if (rc != SIM_OK)
    return rc;
  uint64_t map_size = SIM_HDR + ((size + 4095) & ~(uint64_t)4095);
  int fd = memfd_create("spcsim-device", MFD_CLOEXEC);
  struct stat st;
  if (fd < 0 || ftruncate(fd, (off_t)map_size) < 0 || fstat(fd, &st) < 0) {
    fprintf(stderr, "spcsim: memfd for %llu device bytes: %s\n",
            (unsigned long long)size, strerror(errno));
    if (fd >= 0)
      close(fd);
    sim_dev_unreserve(dev, size);
    return SIM_ENOMEM;
  }
  uint8_t *map = raw_mmap(map_size, fd);
  sim_map *m = calloc(1, sizeof(*m));
  if (map == MAP_FAILED || m == NULL) {
    fprintf(stderr, "spcsim: mmap of %llu device bytes: %s\n",
            (unsigned long long)map_size, strerror(errno));
    if (map != MAP_FAILED)
      raw_munmap(map, map_size);
    free(m);
    close(fd);
    sim_dev_unreserve(dev, size);
    return SIM_ENOMEM;
  }
  pthread_mutex_lock(&mu);
  sim_mhdr *h = (sim_mhdr *)map;
  h->magic = MAGIC;
  h->id = ((uint64_t)getpid() << 32) | next_id;
  m->buffer_id = next_id++;
  h->dev = dev;
  h->exporter = getpid();
  h->size = size;
  m->kind = SIM_M_DEVICE;
  m->dev = dev;
  m->map = map;
  m->map_size = map_size;
  m->ptr = map + SIM_HDR;
  m->size = size;
  m->hdr = h;
  m->fd = fd;
  m->ino = st.st_ino;
  link_map(m);
  pthread_mutex_unlock(&mu);
  *p_out = m->ptr;
  return SIM_OK;
}

int sim_free(void *p, const char *call) {
  if (p == NULL)
    return SIM_OK;
  /* cudaFree waits until the device is idle before it unmaps: work still
   * queued may read the allocation (torch's empty_cache frees segments
   * right after queueing copies from them and relies on this). The
   * streams' errors are their own calls' to report. */
  sim_map pre;
  if (sim_lookup(p, 1, &pre) && pre.kind == SIM_M_DEVICE && pre.ptr == p)
    (void)sim_device_sync(pre.dev);
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_DEVICE) {
    int kind = m ? m->kind : -1;
    pthread_mutex_unlock(&mu);
    if (kind == SIM_M_IMPORT)
      sim_violation("ipc-unmap-not-close", call,
                    "%p was mapped with "
                    "cudaIpcOpenMemHandle: only cudaIpcCloseMemHandle may "
                    "unmap it",
                    p);
    return SIM_EINVAL;
  }
  int imp = __atomic_load_n(&m->hdr->importers, __ATOMIC_ACQUIRE);
  if (imp > 0) {
    pthread_mutex_unlock(&mu);
    sim_violation("ipc-free-while-imported", call,
                  "allocation %p (%llu "
                  "bytes, GPU %d) is still open in %d other process(es) "
                  "through cudaIpcOpenMemHandle: importers must close it "
                  "first",
                  p, (unsigned long long)m->size, m->dev, imp);
    pthread_mutex_lock(&mu);
  }
  __atomic_store_n(&m->hdr->freed, 1, __ATOMIC_RELEASE);
  unlink_map(m);
  pthread_mutex_unlock(&mu);
  sim_dev_unreserve(m->dev, m->size);
  raw_munmap(m->map, m->map_size);
  close(m->fd);
  free(m);
  return SIM_OK;
}

int sim_malloc_pool(int dev, uint64_t size, void **p_out) {
  if (dev < 0 || dev >= sim_cfg()->ndev)
    return SIM_EDEVICE;
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(dev);
  if (size == 0)
    size = 1;
  int rc = sim_dev_reserve(dev, size);
  if (rc != SIM_OK)
    return rc;
  uint64_t map_size = (size + 4095) & ~(uint64_t)4095;
  uint8_t *map = raw_mmap(map_size, -1);
  sim_map *m = calloc(1, sizeof(*m));
  if (map == MAP_FAILED || m == NULL) {
    if (map != MAP_FAILED)
      raw_munmap(map, map_size);
    free(m);
    sim_dev_unreserve(dev, size);
    return SIM_ENOMEM;
  }
  m->kind = SIM_M_POOL;
  m->dev = dev;
  m->map = m->ptr = map;
  m->map_size = map_size;
  m->size = size;
  m->fd = -1;
  pthread_mutex_lock(&mu);
  m->buffer_id = next_id++;
  link_map(m);
  pthread_mutex_unlock(&mu);
  *p_out = map;
  return SIM_OK;
}

void sim_free_pool_now(void *p) {
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_POOL) {
    pthread_mutex_unlock(&mu);
    sim_violation("free-not-allocated", "cudaFreeAsync",
                  "%p is not a "
                  "cudaMallocAsync allocation",
                  p);
    return;
  }
  unlink_map(m);
  pthread_mutex_unlock(&mu);
  sim_dev_unreserve(m->dev, m->size);
  raw_munmap(m->map, m->map_size);
  free(m);
}

int sim_host_alloc(uint64_t size, void **p_out) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(sim_cur_dev()); /* pinned memory is the context's */
  uint64_t map_size = (size + 4095) & ~(uint64_t)4095;
  uint8_t *map = raw_mmap(map_size ? map_size : 4096, -1);
  sim_map *m = calloc(1, sizeof(*m));
  if (map == MAP_FAILED || m == NULL) {
    if (map != MAP_FAILED)
      raw_munmap(map, map_size);
    free(m);
    return SIM_ENOMEM;
  }
  m->kind = SIM_M_PINNED;
  m->dev = -1;
  m->map = m->ptr = map;
  m->map_size = map_size ? map_size : 4096;
  m->size = size ? size : 1;
  m->fd = -1;
  pthread_mutex_lock(&mu);
  link_map(m);
  pthread_mutex_unlock(&mu);
  *p_out = map;
  return SIM_OK;
}

int sim_host_free(void *p) {
  if (p == NULL)
    return SIM_OK;
  /* cudaFreeHost synchronizes (CUDA's API reference): work still queued
   * on any GPU may read or write pinned memory, which every GPU maps. The
   * streams' errors are their own calls' to report. */
  sim_map pre;
  if (sim_lookup(p, 1, &pre) && pre.kind == SIM_M_PINNED && pre.ptr == p)
    for (int d = 0; d < sim_cfg()->ndev; d++)
      (void)sim_device_sync(d);
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_PINNED) {
    pthread_mutex_unlock(&mu);
    return SIM_EINVAL;
  }
  unlink_map(m);
  pthread_mutex_unlock(&mu);
  raw_munmap(m->map, m->map_size);
  free(m);
  return SIM_OK;
}

int sim_host_register(void *p, uint64_t size) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  uintptr_t end = (uintptr_t)p + size;
  if (p == NULL || size == 0 || end < (uintptr_t)p)
    return SIM_EINVAL;
  /* Pinning needs every page mapped: msync says ENOMEM at a hole. */
  if (msync((void *)a, end - a, MS_ASYNC) != 0)
    return SIM_EINVAL;
  sim_ctx_touch(sim_cur_dev()); /* registrations are the context's */
  sim_map *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return SIM_ENOMEM;
  m->kind = SIM_M_HOSTREG;
  m->dev = -1;
  m->map = m->ptr = p;
  m->map_size = m->size = size;
  m->fd = -1;
  pthread_mutex_lock(&mu);
  if (overlap_locked(p, size) != NULL) {
    pthread_mutex_unlock(&mu);
    free(m);
    return SIM_EREGISTERED;
  }
  link_map(m);
  pthread_mutex_unlock(&mu);
  return SIM_OK;
}

int sim_host_unregister(void *p) {
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_HOSTREG) {
    pthread_mutex_unlock(&mu);
    return SIM_ENOTREGISTERED;
  }
  unlink_map(m);
  pthread_mutex_unlock(&mu);
  free(m);
  return SIM_OK;
}

int sim_host_device_ptr(void *p, void **dev_p) {
  sim_map m;
  if (!sim_lookup(p, 1, &m) || !sim_is_host(m.kind))
    return SIM_EINVAL;
  *dev_p = p; /* unified addressing: the same address on every GPU */
  return SIM_OK;
}

int sim_lookup(const void *p, uint64_t len, sim_map *m_out) {
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, len ? len : 1);
  if (m != NULL)
    *m_out = *m;
  pthread_mutex_unlock(&mu);
  return m != NULL;
}

int sim_accessible(const sim_map *m, int dev) {
  switch (m->kind) {
  case SIM_M_PINNED:
  case SIM_M_HOSTREG:
    return 1;
  case SIM_M_POOL:
    return m->dev == dev ||
           (__atomic_load_n(&pool_access[m->dev], __ATOMIC_ACQUIRE) >> dev &
            1u);
  case SIM_M_IMPORT:
    return m->dev == dev ||
           (m->peer_lazy && sim_peer_possible(dev, m->dev)) ||
           sim_peer_enabled(dev, m->dev);
  default:
    return sim_peer_enabled(dev, m->dev);
  }
}

void sim_check_access(const void *p, uint64_t len, int dev, const char *call) {
  if (len == 0)
    return;
  sim_map m;
  if (!sim_lookup(p, len, &m)) {
    sim_violation("access-not-device-memory", call,
                  "%llu bytes at %p are "
                  "not (wholly) in one allocation of a simulated GPU, "
                  "nor pinned host memory",
                  (unsigned long long)len, p);
    return;
  }
  if (!sim_accessible(&m, dev))
    sim_violation("access-from-device", call,
                  "%s memory of GPU %d at %p "
                  "dereferenced from GPU %d, which has no access to it (%s)",
                  m.kind == SIM_M_POOL ? "pool (cudaMallocAsync)" : "device",
                  m.dev, p, dev,
                  m.kind == SIM_M_POOL ? "cudaMemPoolSetAccess was not "
                                         "called for it"
                                       : "peer access not enabled");
}

int sim_pool_set_access(int pool_dev, int dev, int on) {
  if (pool_dev < 0 || pool_dev >= sim_cfg()->ndev || dev < 0 ||
      dev >= sim_cfg()->ndev)
    return SIM_EINVAL;
  /* cudaMemPoolSetAccess documents cudaErrorInvalidValue only. */
  if (on && !sim_peer_possible(dev, pool_dev))
    return SIM_EINVAL;
  if (on)
    __atomic_or_fetch(&pool_access[pool_dev], 1u << dev, __ATOMIC_ACQ_REL);
  else
    __atomic_and_fetch(&pool_access[pool_dev], ~(1u << dev), __ATOMIC_ACQ_REL);
  return SIM_OK;
}

/* ---- CUDA IPC ------------------------------------------------------------ */

int sim_ipc_get(const void *p, sim_handle64 *hout, const char *call) {
  sim_map m;
  if (!sim_lookup(p, 1, &m))
    return SIM_EINVAL;
  if (m.kind != SIM_M_DEVICE || m.ptr != p) {
    sim_violation("ipc-handle-not-base", call,
                  "%p is %s: CUDA IPC shares "
                  "only the base of a cudaMalloc allocation",
                  p,
                  m.kind == SIM_M_POOL     ? "stream-ordered pool memory"
                  : m.kind == SIM_M_IMPORT ? "an imported mapping"
                  : m.kind == SIM_M_PINNED ? "pinned host memory"
                  : m.kind == SIM_M_HOSTREG ? "registered host memory"
                                            : "inside an allocation");
    return SIM_EINVAL;
  }
  ipc_mem_handle h = {.magic = HMAGIC,
                      .pid = getpid(),
                      .fd = m.fd,
                      .dev = m.dev,
                      .ino = m.ino,
                      .id = m.hdr->id,
                      .size = m.size};
  memcpy(hout, &h, sizeof(h));
  return SIM_OK;
}

int sim_ipc_open(const sim_handle64 *hin, int lazy_peer, void **p_out,
                 const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  sim_ctx_touch(sim_cur_dev());
  ipc_mem_handle h;
  memcpy(&h, hin, sizeof(h));
  if (h.magic != HMAGIC)
    return SIM_EMAPFAIL; /* garbage: an error, as CUDA returns one */
  if (h.pid == getpid()) {
    sim_violation("ipc-open-own-process", call,
                  "the handle of allocation "
                  "%llx was made by this process: CUDA IPC handles open "
                  "only in another process",
                  (unsigned long long)h.id);
    return SIM_EINVAL;
  }
  /* Opened before by this context: CUDA counts the open and hands back
   * the same pointer (cudaIpcOpenMemHandle: "the reference count on the
   * handle is incremented by 1 and the existing device pointer is
   * returned"). Another device's context maps it anew. */
  int ctx = sim_cur_dev();
  pthread_mutex_lock(&mu);
  for (sim_map *m = maps; m != NULL; m = m->next)
    if (m->kind == SIM_M_IMPORT && m->hdr->id == h.id && m->ctx_dev == ctx) {
      m->refs++;
      *p_out = m->ptr;
      pthread_mutex_unlock(&mu);
      return SIM_OK;
    }
  pthread_mutex_unlock(&mu);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_ino != h.ino) {
    fprintf(stderr, "spcsim: %s: cannot open the exporter's memory %s: %s\n",
            call, path, fd < 0 ? strerror(errno) : "inode differs (freed?)");
    if (fd >= 0)
      close(fd);
    return SIM_EMAPFAIL;
  }
  uint64_t map_size = (uint64_t)st.st_size;
  uint8_t *map = raw_mmap(map_size, fd);
  close(fd);
  if (map == MAP_FAILED)
    return SIM_EMAPFAIL;
  sim_mhdr *hdr = (sim_mhdr *)map;
  if (hdr->magic != MAGIC || hdr->id != h.id ||
      __atomic_load_n(&hdr->freed, __ATOMIC_ACQUIRE)) {
    raw_munmap(map, map_size);
    return SIM_EMAPFAIL;
  }
  sim_map *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    raw_munmap(map, map_size);
    return SIM_ENOMEM;
  }
  __atomic_add_fetch(&hdr->importers, 1, __ATOMIC_ACQ_REL);
  m->kind = SIM_M_IMPORT;
  m->dev = hdr->dev;
  m->map = map;
  m->map_size = map_size;
  m->ptr = map + SIM_HDR;
  m->size = hdr->size;
  m->hdr = hdr;
  m->fd = -1;
  m->peer_lazy = lazy_peer;
  m->ctx_dev = ctx;
  m->refs = 1;
  pthread_mutex_lock(&mu);
  m->buffer_id = next_id++;
  link_map(m);
  pthread_mutex_unlock(&mu);
  *p_out = m->ptr;
  return SIM_OK;
}

int sim_ipc_close(void *p, const char *call) {
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_IMPORT) {
    pthread_mutex_unlock(&mu);
    sim_violation("ipc-close-not-open", call,
                  "%p is not the address "
                  "cudaIpcOpenMemHandle returned",
                  p);
    return SIM_EINVAL;
  }
  if (--m->refs > 0) { /* other opens of the handle still hold it */
    pthread_mutex_unlock(&mu);
    return SIM_OK;
  }
  unlink_map(m);
  pthread_mutex_unlock(&mu);
  __atomic_sub_fetch(&m->hdr->importers, 1, __ATOMIC_ACQ_REL);
  raw_munmap(m->map, m->map_size);
  free(m);
  return SIM_OK;
}

int sim_range(const void *p, uint8_t **base_p, uint64_t *size_p) {
  sim_map m;
  if (!sim_lookup(p, 1, &m) || sim_is_host(m.kind))
    return SIM_EINVAL;
  *base_p = m.ptr;
  *size_p = m.size;
  return SIM_OK;
}

/* munmap's check (the wrapper is in libcudart.so.13, a direct dependency
 * of the programs, so it comes before libc's in symbol lookup): a process
 * unmapping simulated device memory by hand (not cudaFree, not
 * cudaIpcCloseMemHandle) is the misuse CUDA leaves undefined. */
int sim_munmap(void *addr, size_t len) {
  if (getenv("SPCSIM_TRACE_MUNMAP"))
    fprintf(stderr, "spcsim: munmap(%p, %zu)\n", addr, len);
  pthread_mutex_lock(&mu);
  sim_map *hit = overlap_locked(addr, len);
  int kind = hit ? hit->kind : -1;
  void *ptr = hit ? hit->ptr : NULL;
  pthread_mutex_unlock(&mu);
  if (kind == SIM_M_HOSTREG)
    sim_violation("unmap-registered-memory", "munmap",
                  "%zu bytes at %p overlap memory registered with "
                  "cudaHostRegister at %p: cudaHostUnregister it first",
                  len, addr, ptr);
  else if (hit != NULL)
    sim_violation(
        kind == SIM_M_IMPORT ? "ipc-unmap-not-close" : "unmap-device-memory",
        "munmap",
        "%zu bytes at %p overlap %s at %p: unmap it with "
        "%s",
        len, addr,
        kind == SIM_M_IMPORT ? "a CUDA IPC mapping" : "simulated device memory",
        ptr, kind == SIM_M_IMPORT ? "cudaIpcCloseMemHandle" : "cudaFree");
  return raw_munmap(addr, len);
}

void sim_mem_leaks(void) {
  pthread_mutex_lock(&mu);
  for (sim_map *m = maps; m != NULL; m = m->next) {
    static const char *const what[] = {
        "cudaMalloc allocation", "cudaIpcOpenMemHandle mapping",
        "cudaMallocAsync allocation", "cudaMallocHost memory",
        "cudaHostRegister registration"};
    sim_leak_note("%s of %llu bytes at %p (GPU %d) never released",
                  what[m->kind], (unsigned long long)m->size, (void *)m->ptr,
                  m->dev);
  }
  pthread_mutex_unlock(&mu);
}

/* cuMemGetAddressRange's signature and codes (0 success, 1 invalid
 * value), shared by the driver front and the runtime's entry point query. */
__attribute__((visibility("default"))) int
spcsim_cu_mem_get_address_range(unsigned long long *base, size_t *size,
                                unsigned long long p) {
  uint8_t *b;
  uint64_t n;
  if (sim_range((const void *)(uintptr_t)p, &b, &n) != SIM_OK)
    return 1;
  if (base)
    *base = (unsigned long long)(uintptr_t)b;
  if (size)
    *size = n;
  return 0;
}
