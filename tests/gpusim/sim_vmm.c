/* CUDA's virtual memory management (cuMemCreate, cuMemAddressReserve,
 * cuMemMap, cuMemSetAccess and the rest; sim.h says the model). A
 * physical allocation is a memfd: its first page a shared header
 * (vmm_hdr), then the memory, which cuMemMap maps (MAP_FIXED|MAP_SHARED)
 * into a reservation, a PROT_NONE mapping this file made. A mapping is a
 * sim_map of kind SIM_M_VMM, recorded with the others (sim_map_add) so
 * every access check sees it, and accessible from the GPUs cuMemSetAccess
 * granted. Exported allocations are dups of the memfd: they map in
 * whatever process receives them (SCM_RIGHTS, pidfd_getfd), across PID
 * namespaces too. Reservations are sim_vmm_resv.c's. Lock order: this
 * file's, then the reservations' or the memory records'. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VMAGIC 0x73706373696d564dull /* "spcsimVM" */
#define HANDLE_TAG ((uint64_t)0x5c3 << 52)

/* The memfd's first page, the same in every process that maps it. */
typedef struct {
  uint64_t magic;
  uint64_t id; /* creator's pid << 32 | its count: for messages */
  int32_t dev, creator;
  uint64_t size;
  int32_t handle_types;
} vmm_hdr;

/* A physical allocation as this process holds it: one per allocation
 * (an import of one it holds already adds a reference), known by the
 * memfd's inode. Freed when neither handle references nor mappings are
 * left; counted against its GPU while it lives in the creating process. */
typedef struct phys {
  struct phys *next;
  uint64_t handle, block_id, id, ino;
  int fd, dev, handle_types, created;
  uint64_t size;
  int handles;  /* cuMemCreate/Import/RetainAllocationHandle minus Release */
  int mappings; /* cuMemMap mappings of it here */
} phys;

typedef struct vmap {
  struct vmap *next;
  sim_map *m; /* recorded with the memory records */
  phys *ph;
} vmap;

static pthread_mutex_t vmu = PTHREAD_MUTEX_INITIALIZER;
static phys *physs;
static vmap *vmaps;
static uint32_t seq;

static phys *by_handle_locked(uint64_t h) {
  for (phys *p = physs; p != NULL; p = p->next)
    if (p->handle == h && p->handles > 0)
      return p;
  return NULL;
}

/* Forget ph once nothing holds it: its memory goes back to its GPU. */
static void phys_drop_locked(phys *ph) {
  if (ph->handles > 0 || ph->mappings > 0)
    return;
  for (phys **pp = &physs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == ph) {
      *pp = ph->next;
      break;
    }
  if (close(ph->fd) != 0)
    fprintf(stderr, "spcsim: close(%d) of a cuMem allocation's memfd: %s\n",
            ph->fd, strerror(errno));
  if (ph->created)
    sim_dev_unreserve(ph->dev, ph->size);
  free(ph);
}

/* A new record for the allocation in fd (this process's own copy). */
static phys *phys_new_locked(int fd, const vmm_hdr *h, uint64_t ino,
                             int created) {
  phys *ph = calloc(1, sizeof(*ph));
  if (ph == NULL)
    return NULL;
  ph->block_id = sim_new_id();
  ph->handle = HANDLE_TAG | ph->block_id;
  ph->id = h->id;
  ph->ino = ino;
  ph->fd = fd;
  ph->dev = h->dev;
  ph->handle_types = h->handle_types;
  ph->created = created;
  ph->size = h->size;
  ph->handles = 1;
  ph->next = physs;
  physs = ph;
  return ph;
}

/* The memfd of a new allocation, its header written; -1 after saying
 * why. */
static int make_memfd(const vmm_hdr *h, uint64_t *ino_p) {
  int fd = memfd_create("spcsim-vmm", MFD_CLOEXEC);
  struct stat st;
  if (fd < 0 || ftruncate(fd, (off_t)(SIM_HDR + h->size)) != 0 ||
      pwrite(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
      fstat(fd, &st) != 0) {
    fprintf(stderr,
            "spcsim: cuMemCreate: memfd (fd %d) for %llu bytes of "
            "GPU %d: %s\n",
            fd, (unsigned long long)h->size, h->dev, strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  *ino_p = (uint64_t)st.st_ino;
  return fd;
}

int sim_vmm_create(int dev, uint64_t size, int handle_types, uint64_t *h_out) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (dev < 0 || dev >= sim_cfg()->ndev)
    return SIM_EDEVICE;
  if (size == 0 || size % SIM_VMM_GRAN != 0)
    return SIM_EINVAL;
  sim_ctx_touch(dev);
  int rc = sim_dev_reserve(dev, size);
  if (rc != SIM_OK)
    return rc;
  vmm_hdr h = {.magic = VMAGIC,
               .dev = dev,
               .creator = getpid(),
               .size = size,
               .handle_types = handle_types};
  h.id = ((uint64_t)getpid() << 32) |
         __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
  uint64_t ino = 0;
  int fd = make_memfd(&h, &ino);
  if (fd < 0) {
    sim_dev_unreserve(dev, size);
    return SIM_ENOMEM;
  }
  pthread_mutex_lock(&vmu);
  phys *ph = phys_new_locked(fd, &h, ino, 1);
  if (ph != NULL)
    *h_out = ph->handle;
  pthread_mutex_unlock(&vmu);
  if (ph == NULL) {
    close(fd);
    sim_dev_unreserve(dev, size);
    return SIM_ENOMEM;
  }
  return SIM_OK;
}

/* cuMemRelease of a handle that is not (or no longer) one is undefined
 * (CUDA: "If handle is not a valid handle the behavior is undefined"). */
int sim_vmm_release(uint64_t h, const char *call) {
  pthread_mutex_lock(&vmu);
  phys *ph = by_handle_locked(h);
  if (ph != NULL) {
    ph->handles--;
    phys_drop_locked(ph);
  }
  pthread_mutex_unlock(&vmu);
  if (ph == NULL) {
    sim_violation("vmm-release-unknown", call,
                  "0x%llx is not a cuMem allocation handle this process "
                  "holds (released already as often as it was created, "
                  "imported and retained?)",
                  (unsigned long long)h);
    return SIM_EINVAL;
  }
  return SIM_OK;
}

/* ---- mappings ---------------------------------------------------------- */

static vmap *vmap_in_locked(const uint8_t *p, uint64_t len) {
  for (vmap *v = vmaps; v != NULL; v = v->next)
    if (v->m->ptr < p + len && v->m->ptr + v->m->size > p)
      return v;
  return NULL;
}

uint8_t *sim_vmm_mapped_in(const void *p, uint64_t len) {
  pthread_mutex_lock(&vmu);
  vmap *v = vmap_in_locked(p, len);
  uint8_t *at = v != NULL ? v->m->ptr : NULL;
  pthread_mutex_unlock(&vmu);
  return at;
}

int sim_vmm_map(void *p, uint64_t size, uint64_t offset, uint64_t h) {
  uint8_t *a = p;
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (size == 0 || (uintptr_t)a % SIM_VMM_GRAN || size % SIM_VMM_GRAN ||
      offset % SIM_VMM_GRAN)
    return SIM_EINVAL;
  sim_map *m = calloc(1, sizeof(*m));
  vmap *v = calloc(1, sizeof(*v));
  pthread_mutex_lock(&vmu);
  phys *ph = by_handle_locked(h);
  int rc = m == NULL || v == NULL ? SIM_ENOMEM
           : ph == NULL || offset > ph->size || size > ph->size - offset ||
                   !sim_vmm_in_reservation(a, size) ||
                   vmap_in_locked(a, size) != NULL
               ? SIM_EINVAL
               : SIM_OK;
  if (rc == SIM_OK &&
      mmap(a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd,
           (off_t)(SIM_HDR + offset)) == MAP_FAILED) {
    fprintf(stderr, "spcsim: cuMemMap: mmap of %llu bytes at %p: %s\n",
            (unsigned long long)size, p, strerror(errno));
    sim_vmm_give_back(a, size, "cuMemMap");
    rc = SIM_ENOMEM;
  }
  if (rc == SIM_OK) {
    *m = (sim_map){.kind = SIM_M_VMM,
                   .dev = ph->dev,
                   .ptr = a,
                   .size = size,
                   .map = a,
                   .map_size = size,
                   .fd = -1,
                   .block_id = ph->block_id,
                   .handle_types = ph->handle_types};
    ph->mappings++;
    *v = (vmap){.next = vmaps, .m = m, .ph = ph};
    vmaps = v;
    sim_map_add(m);
  }
  pthread_mutex_unlock(&vmu);
  if (rc != SIM_OK) {
    free(m);
    free(v);
  }
  return rc;
}

static vmap *vmap_at_locked(const uint8_t *a) {
  for (vmap *v = vmaps; v != NULL; v = v->next)
    if (v->m->ptr == a)
      return v;
  return NULL;
}

/* Whether [p, p+size) is whole mappings laid back to back (what
 * cuMemUnmap and cuMemSetAccess take). */
static int whole_mappings_locked(const uint8_t *p, uint64_t size) {
  const uint8_t *at = p, *end = p + size;
  if (size == 0 || end < p)
    return 0;
  while (at < end) {
    vmap *v = vmap_at_locked(at);
    if (v == NULL || v->m->size > (uint64_t)(end - at))
      return 0;
    at += v->m->size;
  }
  return 1;
}

/* The GPUs whose work may use the mappings in [p, p+size): the
 * allocations' and those granted access. */
static uint32_t users_locked(const uint8_t *p, uint64_t size) {
  uint32_t devs = 0;
  for (vmap *v = vmaps; v != NULL; v = v->next)
    if (v->m->ptr >= p && v->m->ptr < p + size)
      devs |=
          1u << v->m->dev | __atomic_load_n(&v->m->access, __ATOMIC_ACQUIRE);
  return devs;
}

static void sync_devices(uint32_t devs) {
  for (int d = 0; d < SIM_MAX_DEV; d++)
    if ((devs >> d) & 1u)
      (void)sim_device_sync(d); /* the streams' errors are theirs */
}

/* Undo the mapping v: the reservation takes the range back. */
static void unmap_locked(vmap *v) {
  sim_map *m = v->m;
  for (vmap **vp = &vmaps; *vp != NULL; vp = &(*vp)->next)
    if (*vp == v) {
      *vp = v->next;
      break;
    }
  sim_map_remove(m);
  sim_vmm_give_back(m->ptr, m->size, "cuMemUnmap");
  v->ph->mappings--;
  phys_drop_locked(v->ph);
  free(m);
  free(v);
}

/* Synchronous, as CUDA documents: work queued before may still use the
 * mappings, so the GPUs that reach them are waited for first. */
int sim_vmm_unmap(void *p, uint64_t size) {
  uint8_t *a = p;
  pthread_mutex_lock(&vmu);
  int ok = whole_mappings_locked(a, size);
  uint32_t devs = ok ? users_locked(a, size) : 0;
  pthread_mutex_unlock(&vmu);
  if (!ok)
    return SIM_EINVAL;
  sync_devices(devs);
  pthread_mutex_lock(&vmu);
  /* Checked again: another thread may have unmapped meanwhile. */
  ok = whole_mappings_locked(a, size);
  for (uint8_t *at = a; ok && at < a + size;) {
    vmap *v = vmap_at_locked(at);
    at += v->m->size;
    unmap_locked(v);
  }
  pthread_mutex_unlock(&vmu);
  return ok ? SIM_OK : SIM_EINVAL;
}

/* The grants for one mapping's access masks. */
static void grant(sim_map *m, const sim_vmm_access *a, int n) {
  uint32_t acc = __atomic_load_n(&m->access, __ATOMIC_ACQUIRE);
  uint32_t ro = __atomic_load_n(&m->readonly, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++) {
    uint32_t bit = 1u << a[i].dev;
    acc = a[i].flags ? acc | bit : acc & ~bit;
    ro = a[i].flags == 1 ? ro | bit : ro & ~bit;
  }
  __atomic_store_n(&m->readonly, ro, __ATOMIC_RELEASE);
  __atomic_store_n(&m->access, acc, __ATOMIC_RELEASE);
}

/* Synchronous, as CUDA documents: a GPU losing access first finishes
 * the work it has (which may use the range). A GPU that cannot reach an
 * allocation's GPU at all (SPCSIM_NO_PEER) is SIM_EDEVICE. */
int sim_vmm_set_access(void *p, uint64_t size, const sim_vmm_access *a, int n) {
  uint8_t *base = p;
  for (int i = 0; i < n; i++)
    if (a[i].flags == 0)
      (void)sim_device_sync(a[i].dev);
  pthread_mutex_lock(&vmu);
  int rc = whole_mappings_locked(base, size) ? SIM_OK : SIM_EINVAL;
  for (uint8_t *at = base; rc == SIM_OK && at < base + size;) {
    vmap *v = vmap_at_locked(at);
    for (int i = 0; i < n; i++)
      if (a[i].flags != 0 && !sim_peer_possible(a[i].dev, v->m->dev))
        rc = SIM_EDEVICE;
    at += v->m->size;
  }
  for (uint8_t *at = base; rc == SIM_OK && at < base + size;) {
    vmap *v = vmap_at_locked(at);
    grant(v->m, a, n);
    at += v->m->size;
  }
  pthread_mutex_unlock(&vmu);
  return rc;
}

static vmap *vmap_holding_locked(const uint8_t *a) {
  for (vmap *v = vmaps; v != NULL; v = v->next)
    if (a >= v->m->ptr && a < v->m->ptr + v->m->size)
      return v;
  return NULL;
}

int sim_vmm_get_access(const void *p, int dev, int *flags_out) {
  pthread_mutex_lock(&vmu);
  vmap *v = vmap_holding_locked(p);
  if (v != NULL) {
    uint32_t acc = __atomic_load_n(&v->m->access, __ATOMIC_ACQUIRE);
    uint32_t ro = __atomic_load_n(&v->m->readonly, __ATOMIC_ACQUIRE);
    *flags_out = !((acc >> dev) & 1u) ? 0 : ((ro >> dev) & 1u) ? 1 : 3;
  }
  pthread_mutex_unlock(&vmu);
  return v != NULL ? SIM_OK : SIM_EINVAL;
}

/* The handle value the memory was mapped with, one more reference. */
int sim_vmm_retain(const void *p, uint64_t *h_out) {
  pthread_mutex_lock(&vmu);
  vmap *v = vmap_holding_locked(p);
  if (v != NULL) {
    v->ph->handles++;
    *h_out = v->ph->handle;
  }
  pthread_mutex_unlock(&vmu);
  return v != NULL ? SIM_OK : SIM_EINVAL;
}

int sim_vmm_props(uint64_t h, int *dev_out, int *handle_types_out) {
  pthread_mutex_lock(&vmu);
  phys *ph = by_handle_locked(h);
  if (ph != NULL) {
    *dev_out = ph->dev;
    *handle_types_out = ph->handle_types;
  }
  pthread_mutex_unlock(&vmu);
  return ph != NULL ? SIM_OK : SIM_EINVAL;
}

/* ---- sharing --------------------------------------------------------------
 */

/* A new descriptor of the allocation, the caller's to close. Only for an
 * allocation made asking for descriptors (requestedHandleTypes). */
int sim_vmm_export_fd(uint64_t h, int *fd_out) {
  pthread_mutex_lock(&vmu);
  phys *ph = by_handle_locked(h);
  int rc = ph == NULL || !(ph->handle_types & SIM_VMM_FD) ? SIM_EINVAL : SIM_OK;
  int fd = rc == SIM_OK ? fcntl(ph->fd, F_DUPFD_CLOEXEC, 0) : -1;
  if (rc == SIM_OK && fd < 0) {
    fprintf(stderr,
            "spcsim: cuMemExportToShareableHandle: "
            "fcntl(%d, F_DUPFD_CLOEXEC): %s\n",
            ph->fd, strerror(errno));
    rc = SIM_ENOMEM;
  }
  pthread_mutex_unlock(&vmu);
  if (rc == SIM_OK)
    *fd_out = fd;
  return rc;
}

/* The header of the allocation fd holds, and its inode; SIM_EINVAL after
 * saying why when fd is not one spcsim exported. */
static int read_header(int fd, vmm_hdr *h, uint64_t *ino_p, const char *call) {
  struct stat st;
  const char *why = NULL;
  if (fstat(fd, &st) != 0)
    why = strerror(errno);
  else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < SIM_HDR)
    why = "not the memfd of a cuMemCreate allocation";
  else if (pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
    why = "its header could not be read";
  else if (h->magic == SIM_MHDR_MAGIC)
    why = "it is a cudaMalloc allocation's memfd, not a cuMemCreate one";
  else if (h->magic != VMAGIC)
    why = "no spcsim cuMem header (wrong magic)";
  else if ((uint64_t)st.st_size != SIM_HDR + h->size)
    why = "its size does not match its header";
  if (why != NULL) {
    fprintf(stderr, "spcsim: %s: file descriptor %d: %s\n", call, fd, why);
    return SIM_EINVAL;
  }
  *ino_p = (uint64_t)st.st_ino;
  return SIM_OK;
}

/* A handle on the allocation fd stands for (the caller keeps fd): the
 * one this process has for it already, with one more reference, or a new
 * one on a copy of fd. */
int sim_vmm_import_fd(int fd, uint64_t *h_out, const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  vmm_hdr h;
  uint64_t ino = 0;
  int rc = read_header(fd, &h, &ino, call);
  if (rc != SIM_OK)
    return rc;
  if (h.dev < 0 || h.dev >= sim_cfg()->ndev) {
    fprintf(stderr,
            "spcsim: %s: the allocation is on GPU %d, which this "
            "process does not have\n",
            call, h.dev);
    return SIM_ENOTSUP;
  }
  sim_ctx_touch(h.dev);
  pthread_mutex_lock(&vmu);
  phys *ph = physs;
  while (ph != NULL && ph->ino != ino)
    ph = ph->next;
  if (ph != NULL) {
    ph->handles++;
  } else {
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
      fprintf(stderr, "spcsim: %s: fcntl(%d, F_DUPFD_CLOEXEC): %s\n", call, fd,
              strerror(errno));
    ph = own >= 0 ? phys_new_locked(own, &h, ino, 0) : NULL;
    if (ph == NULL && own >= 0 && close(own) != 0)
      fprintf(stderr, "spcsim: %s: close(%d): %s\n", call, own,
              strerror(errno));
  }
  if (ph != NULL)
    *h_out = ph->handle;
  pthread_mutex_unlock(&vmu);
  return ph != NULL ? SIM_OK : SIM_ENOMEM;
}

/* At exit: mappings, handles and reservations still held. */
void sim_vmm_leaks(void) {
  pthread_mutex_lock(&vmu);
  for (vmap *v = vmaps; v != NULL; v = v->next)
    sim_leak_note("cuMemMap mapping of %llu bytes at %p (GPU %d) never "
                  "unmapped (cuMemUnmap)",
                  (unsigned long long)v->m->size, (void *)v->m->ptr, v->m->dev);
  for (phys *p = physs; p != NULL; p = p->next)
    if (p->handles > 0)
      sim_leak_note("%s handle 0x%llx (allocation %llx, %llu bytes, GPU %d) "
                    "with %d reference(s) never released (cuMemRelease)",
                    p->created ? "cuMemCreate" : "imported cuMem",
                    (unsigned long long)p->handle, (unsigned long long)p->id,
                    (unsigned long long)p->size, p->dev, p->handles);
  pthread_mutex_unlock(&vmu);
  sim_vmm_resv_leaks();
}
