/* Legacy CUDA IPC (cudaIpcGetMemHandle / cudaIpcOpenMemHandle): a handle
 * names the exporter's process, its memfd and the allocation; an importer
 * opens the memfd through /proc/<pid>/fd (the way pidfd_getfd would) and
 * maps it, counted in the allocation's shared header so the exporter's
 * cudaFree sees it. The handle also carries the exporter's PID namespace:
 * CUDA opens legacy IPC handles only within it (a container with its own
 * PID namespace cannot open another's), and so does the simulator, where
 * /proc would otherwise let it. */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HMAGIC 0x53504353u

/* The handle's bytes (64, as CUDA's). pidns: the exporter's PID
 * namespace (sim_pidns), 0 when it could not be told. */
typedef struct {
  uint32_t magic;
  int32_t pid, fd, dev;
  uint64_t ino, id, size;
  uint64_t pidns;
  uint8_t pad[16];
} ipc_mem_handle;
_Static_assert(sizeof(ipc_mem_handle) == 64, "a CUDA IPC handle has 64 bytes");

/* Not cached: a process's PID namespace is fixed for its life, but a
 * forked child (of a process that unshared CLONE_NEWPID) has another one
 * and may carry a pid equal to one cached before. */
uint64_t sim_pidns(void) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) {
    fprintf(stderr,
            "spcsim: stat(\"/proc/self/ns/pid\"): %s; PID "
            "namespaces are not told apart\n",
            strerror(errno));
    return 0;
  }
  return (uint64_t)st.st_ino;
}

int sim_ipc_pidns_differs(uint64_t exporter, const char *what,
                          const char *call) {
  uint64_t mine = sim_pidns();
  if (exporter == 0 || mine == 0 || exporter == mine)
    return 0;
  fprintf(stderr,
          "spcsim: %s: the %s handle came from another PID "
          "namespace (pid:[%llu]; this process is in pid:[%llu]): CUDA IPC "
          "handles open only in their exporter's PID namespace\n",
          call, what, (unsigned long long)exporter, (unsigned long long)mine);
  return 1;
}

static const char *not_base(const sim_map *m) {
  switch (m->kind) {
  case SIM_M_POOL:
    return "stream-ordered pool memory";
  case SIM_M_IMPORT:
    return "an imported mapping";
  case SIM_M_PINNED:
    return "pinned host memory";
  case SIM_M_HOSTREG:
    return "registered host memory";
  case SIM_M_VMM:
    return "cuMem (VMM) memory (share it with cuMemExportToShareableHandle)";
  default:
    return "inside an allocation";
  }
}

int sim_ipc_get(const void *p, sim_handle64 *hout, const char *call) {
  sim_map m;
  if (!sim_lookup(p, 1, &m))
    return SIM_EINVAL;
  if (m.kind != SIM_M_DEVICE || m.ptr != p) {
    sim_violation("ipc-handle-not-base", call,
                  "%p is %s: CUDA IPC shares "
                  "only the base of a cudaMalloc allocation",
                  p, not_base(&m));
    return SIM_EINVAL;
  }
  ipc_mem_handle h = {.magic = HMAGIC,
                      .pid = getpid(),
                      .fd = m.fd,
                      .dev = m.dev,
                      .ino = m.ino,
                      .id = m.hdr->id,
                      .size = m.size,
                      .pidns = sim_pidns()};
  memcpy(hout, &h, sizeof(h));
  return SIM_OK;
}

/* Opened before by context ctx: CUDA counts the open and hands back the
 * same pointer (cudaIpcOpenMemHandle: "the reference count on the handle
 * is incremented by 1 and the existing device pointer is returned").
 * Another device's context maps it anew. */
/* This process as an importer of hdr: a slot of its own, or the count
 * of the rest when every slot is taken (-1). */
static int importer_claim(sim_mhdr *hdr) {
  int32_t me = (int32_t)getpid();
  for (int i = 0; i < SIM_IMPORTERS; i++) {
    int32_t free_slot = 0;
    if (__atomic_compare_exchange_n(&hdr->importer[i], &free_slot, me, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return i;
  }
  __atomic_add_fetch(&hdr->importers, 1, __ATOMIC_ACQ_REL);
  return -1;
}

int sim_importers_live(sim_mhdr *hdr) {
  int n = __atomic_load_n(&hdr->importers, __ATOMIC_ACQUIRE);
  for (int i = 0; i < SIM_IMPORTERS; i++) {
    int32_t pid = __atomic_load_n(&hdr->importer[i], __ATOMIC_ACQUIRE);
    if (pid != 0 && (kill(pid, 0) == 0 || errno == EPERM))
      n++;
  }
  return n;
}

static int reopen(uint64_t id, int ctx, void **p_out) {
  int found = 0;
  sim_maps_lock();
  for (sim_map *m = sim_maps_first_locked(); m != NULL && !found; m = m->next)
    if (m->kind == SIM_M_IMPORT && m->hdr->id == id && m->ctx_dev == ctx) {
      m->refs++;
      *p_out = m->ptr;
      found = 1;
    }
  sim_maps_unlock();
  return found;
}

/* The exporter's memory, mapped header and all (*size_p bytes), or NULL
 * after saying why. */
static uint8_t *map_exported(const ipc_mem_handle *h, uint64_t *size_p,
                             const char *call) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", h->pid, h->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_ino != h->ino) {
    fprintf(stderr, "spcsim: %s: cannot open the exporter's memory %s: %s\n",
            call, path, fd < 0 ? strerror(errno) : "inode differs (freed?)");
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  *size_p = (uint64_t)st.st_size;
  uint8_t *map = mmap(NULL, *size_p, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) {
    fprintf(stderr, "spcsim: %s: mmap of %llu bytes of %s: %s\n", call,
            (unsigned long long)*size_p, path, strerror(err));
    return NULL;
  }
  return map;
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
  /* Before the pid is compared: in another namespace it names another
   * process (or none). */
  if (sim_ipc_pidns_differs(h.pidns, "memory", call))
    return SIM_EMAPFAIL;
  if (h.pid == getpid()) {
    sim_violation("ipc-open-own-process", call,
                  "the handle of allocation "
                  "%llx was made by this process: CUDA IPC handles open "
                  "only in another process",
                  (unsigned long long)h.id);
    return SIM_EINVAL;
  }
  int ctx = sim_cur_dev();
  if (reopen(h.id, ctx, p_out))
    return SIM_OK;
  uint64_t map_size;
  uint8_t *map = map_exported(&h, &map_size, call);
  if (map == NULL)
    return SIM_EMAPFAIL;
  sim_mhdr *hdr = (sim_mhdr *)map;
  if (hdr->magic != SIM_MHDR_MAGIC || hdr->id != h.id ||
      __atomic_load_n(&hdr->freed, __ATOMIC_ACQUIRE)) {
    sim_raw_munmap(map, map_size);
    return SIM_EMAPFAIL;
  }
  sim_map *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    sim_raw_munmap(map, map_size);
    return SIM_ENOMEM;
  }
  m->slot = importer_claim(hdr);
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
  sim_map_add(m);
  *p_out = m->ptr;
  return SIM_OK;
}

int sim_ipc_close(void *p, const char *call) {
  sim_maps_lock();
  sim_map *m = sim_maps_find_locked(p, 1);
  if (m == NULL || m->ptr != p || m->kind != SIM_M_IMPORT) {
    sim_maps_unlock();
    sim_violation("ipc-close-not-open", call,
                  "%p is not the address "
                  "cudaIpcOpenMemHandle returned",
                  p);
    return SIM_EINVAL;
  }
  if (--m->refs > 0) { /* other opens of the handle still hold it */
    sim_maps_unlock();
    return SIM_OK;
  }
  sim_maps_unlink_locked(m);
  sim_maps_unlock();
  if (m->slot >= 0)
    __atomic_store_n(&m->hdr->importer[m->slot], 0, __ATOMIC_RELEASE);
  else
    __atomic_sub_fetch(&m->hdr->importers, 1, __ATOMIC_ACQ_REL);
  sim_raw_munmap(m->map, m->map_size);
  free(m);
  return SIM_OK;
}
