/* Simulated device memory: every cudaMalloc allocation is a memfd with a
 * shared header page (who imported it, whether its exporter freed it), so
 * CUDA IPC handles open in other processes (sim_ipc.c) and misuse across
 * processes is seen. Pool (cudaMallocAsync) memory and pinned host memory
 * are plain mappings the process records; host memory registered with
 * cudaHostRegister is the caller's, recorded as it is; cuMem (VMM)
 * mappings are sim_vmm.c's, recorded here so every access check sees
 * them. munmap is interposed: device memory is unmapped only by cudaFree,
 * cudaIpcCloseMemHandle or cuMemUnmap, registered memory only after
 * cudaHostUnregister. */
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

#define MAGIC SIM_MHDR_MAGIC

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static sim_map *maps;
static uint64_t next_id = 1;
static uint32_t pool_access[SIM_MAX_DEV]; /* bit d: device d granted */

static void *raw_mmap(size_t len, int fd) {
  return mmap(NULL, len, PROT_READ | PROT_WRITE,
              fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, fd, 0);
}

static int raw_munmap(void *p, size_t len) {
  return (int)syscall(SYS_munmap, p, len);
}

int sim_raw_munmap(void *p, size_t len) { return raw_munmap(p, len); }

static void link_map(sim_map *m) {
  m->next = maps;
  maps = m;
}

/* The VMM mapping holding a (whole: at == its start), or NULL. */
static sim_map *vmm_at_locked(const uint8_t *a, int whole) {
  for (sim_map *m = maps; m != NULL; m = m->next)
    if (m->kind == SIM_M_VMM && (whole ? a == m->ptr
                                       : a >= m->ptr && a < m->ptr + m->size))
      return m;
  return NULL;
}

/* The first of the VMM mappings that lie back to back over [a, a+len),
 * or NULL: a GPU sees one range there, whatever mapping each byte is in
 * (cuMemMap chunks laid end to end, as torch's expandable segments do). */
static sim_map *vmm_span_locked(const uint8_t *a, uint64_t len) {
  sim_map *first = vmm_at_locked(a, 0), *m = first;
  if (first == NULL || (uintptr_t)a + len < (uintptr_t)a)
    return NULL;
  while (m != NULL && m->ptr + m->size < a + len)
    m = vmm_at_locked(m->ptr + m->size, 1);
  return m != NULL ? first : NULL;
}

static sim_map *find_locked(const void *p, uint64_t len) {
  const uint8_t *a = p;
  for (sim_map *m = maps; m != NULL; m = m->next)
    if (a >= m->ptr && a < m->ptr + m->size &&
        len <= m->size - (uint64_t)(a - m->ptr))
      return m;
  return vmm_span_locked(a, len);
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
  int imp = sim_importers_live(m->hdr);
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
  m->buffer_id = next_id++; /* BUFFER_ID, MEMORY_BLOCK_ID */
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
  m->buffer_id = next_id++;
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
  case SIM_M_VMM: /* cuMemSetAccess's grants, nothing else */
    return (__atomic_load_n(&m->access, __ATOMIC_ACQUIRE) >> dev) & 1u;
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

/* Whether a copy engine reaches m: memory of a cuMem mapping only when
 * some GPU was granted access to it. */
static int copy_reaches(const sim_map *m) {
  return m->kind != SIM_M_VMM || __atomic_load_n(&m->access, __ATOMIC_ACQUIRE);
}

/* Where [p, p+len) stands for GPU dev (-1: a copy engine): 0 not in
 * simulated memory, 1 reachable, 2 not, *bad the mapping refused (for
 * VMM memory, the first refused mapping of the span). */
static int reach(const void *p, uint64_t len, int dev, sim_map *bad) {
  pthread_mutex_lock(&mu);
  sim_map *m = find_locked(p, len);
  int r = m != NULL;
  if (m != NULL && m->kind == SIM_M_VMM) {
    const uint8_t *end = (const uint8_t *)p + len;
    for (; r == 1 && m != NULL && m->ptr < end;
         m = vmm_at_locked(m->ptr + m->size, 1))
      if (dev >= 0 ? !sim_accessible(m, dev) : !copy_reaches(m)) {
        *bad = *m;
        r = 2;
      }
  } else if (m != NULL && dev >= 0 && !sim_accessible(m, dev)) {
    *bad = *m;
    r = 2;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

static const char *kind_name(int kind) {
  return kind == SIM_M_POOL  ? "pool (cudaMallocAsync)"
         : kind == SIM_M_VMM ? "cuMem (VMM)"
                             : "device";
}

void sim_check_access(const void *p, uint64_t len, int dev, const char *call) {
  if (len == 0)
    return;
  sim_map m;
  int r = reach(p, len, dev, &m);
  if (r == 0) {
    sim_violation("access-not-device-memory", call,
                  "%llu bytes at %p are "
                  "not (wholly) in one allocation of a simulated GPU, "
                  "nor pinned host memory",
                  (unsigned long long)len, p);
    return;
  }
  if (r == 2)
    sim_violation("access-from-device", call,
                  "%s memory of GPU %d at %p (the mapping at %p) "
                  "dereferenced from GPU %d, which has no access to it (%s)",
                  kind_name(m.kind), m.dev, p, (void *)m.ptr, dev,
                  m.kind == SIM_M_POOL  ? "cudaMemPoolSetAccess was not "
                                          "called for it"
                  : m.kind == SIM_M_VMM ? "cuMemSetAccess did not grant it"
                                        : "peer access not enabled");
}

void sim_check_copy(const void *p, uint64_t len, const char *call) {
  sim_map m;
  if (len > 0 && reach(p, len, -1, &m) == 2)
    sim_violation("access-from-device", call,
                  "%llu bytes at %p: the cuMem (VMM) mapping at %p (GPU %d) "
                  "is accessible from no GPU (cuMemSetAccess was not called "
                  "for it), so no copy can reach it",
                  (unsigned long long)len, p, (void *)m.ptr, m.dev);
}

void sim_map_add(sim_map *m) {
  pthread_mutex_lock(&mu);
  m->buffer_id = next_id++;
  link_map(m);
  pthread_mutex_unlock(&mu);
}

void sim_map_remove(sim_map *m) {
  pthread_mutex_lock(&mu);
  unlink_map(m);
  pthread_mutex_unlock(&mu);
}

uint64_t sim_new_id(void) {
  pthread_mutex_lock(&mu);
  uint64_t id = next_id++;
  pthread_mutex_unlock(&mu);
  return id;
}

void sim_maps_lock(void) { pthread_mutex_lock(&mu); }
void sim_maps_unlock(void) { pthread_mutex_unlock(&mu); }
sim_map *sim_maps_first_locked(void) { return maps; }
sim_map *sim_maps_find_locked(const void *p, uint64_t len) {
  return find_locked(p, len);
}
void sim_maps_unlink_locked(sim_map *m) { unlink_map(m); }

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

int sim_range(const void *p, uint8_t **base_p, uint64_t *size_p) {
  sim_map m;
  if (!sim_lookup(p, 1, &m) || sim_is_host(m.kind))
    return SIM_EINVAL;
  *base_p = m.ptr;
  *size_p = m.size;
  return SIM_OK;
}

/* What unmaps memory of kind k properly. */
static const char *unmapper(int kind) {
  return kind == SIM_M_IMPORT ? "cudaIpcCloseMemHandle"
         : kind == SIM_M_VMM  ? "cuMemUnmap"
         : kind == SIM_M_POOL ? "cudaFreeAsync"
                              : "cudaFree";
}

/* munmap's check (the wrapper is in libcudart.so.13, a direct dependency
 * of the programs, so it comes before libc's in symbol lookup): a process
 * unmapping simulated device memory by hand (not cudaFree, not
 * cudaIpcCloseMemHandle, not cuMemUnmap), or a range it reserved with
 * cuMemAddressReserve, is the misuse CUDA leaves undefined. */
int sim_munmap(void *addr, size_t len) {
  if (getenv("SPCSIM_TRACE_MUNMAP"))
    fprintf(stderr, "spcsim: munmap(%p, %zu)\n", addr, len);
  pthread_mutex_lock(&mu);
  sim_map *hit = overlap_locked(addr, len);
  int kind = hit ? hit->kind : -1;
  void *ptr = hit ? hit->ptr : NULL;
  pthread_mutex_unlock(&mu);
  uint8_t *resv = NULL;
  if (kind == SIM_M_HOSTREG)
    sim_violation("unmap-registered-memory", "munmap",
                  "%zu bytes at %p overlap memory registered with "
                  "cudaHostRegister at %p: cudaHostUnregister it first",
                  len, addr, ptr);
  else if (hit != NULL)
    sim_violation(
        kind == SIM_M_IMPORT ? "ipc-unmap-not-close" : "unmap-device-memory",
        "munmap", "%zu bytes at %p overlap %s at %p: unmap it with %s", len,
        addr,
        kind == SIM_M_IMPORT ? "a CUDA IPC mapping"
        : kind == SIM_M_VMM  ? "a cuMemMap mapping"
                             : "simulated device memory",
        ptr, unmapper(kind));
  else if (sim_vmm_overlaps(addr, len, &resv))
    sim_violation("unmap-device-memory", "munmap",
                  "%zu bytes at %p overlap the cuMemAddressReserve range at "
                  "%p: free it with cuMemAddressFree",
                  len, addr, (void *)resv);
  return raw_munmap(addr, len);
}

/* What this process still holds (cuMem mappings: sim_vmm_leaks). */
void sim_mem_leaks(void) {
  pthread_mutex_lock(&mu);
  for (sim_map *m = maps; m != NULL; m = m->next) {
    static const char *const what[] = {
        "cudaMalloc allocation", "cudaIpcOpenMemHandle mapping",
        "cudaMallocAsync allocation", "cudaMallocHost memory",
        "cudaHostRegister registration"};
    if (m->kind != SIM_M_VMM)
      sim_leak_note("%s of %llu bytes at %p (GPU %d) never released",
                    what[m->kind], (unsigned long long)m->size,
                    (void *)m->ptr, m->dev);
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
