/* cuMemAddressReserve ranges (sim.h's virtual memory management): each
 * a PROT_NONE mapping of its own, aligned to the granularity at least,
 * that sim_vmm.c maps allocations into (MAP_FIXED) and gives back to
 * (sim_vmm_give_back). Its own lock, never held while taking another. */
#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE ((uint64_t)4096)

typedef struct resv {
  struct resv *next;
  uint8_t *base;
  uint64_t size;
} resv;

static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER;
static resv *resvs;

static void *prot_none(void *at, uint64_t size, int flags) {
  return mmap(at, size, PROT_NONE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1, 0);
}

int sim_vmm_give_back(void *p, uint64_t size, const char *call) {
  if (prot_none(p, size, MAP_FIXED) != MAP_FAILED)
    return 0;
  fprintf(stderr,
          "spcsim: %s: mmap of PROT_NONE over %llu bytes at %p (its "
          "reservation): %s\n",
          call, (unsigned long long)size, p, strerror(errno));
  return -1;
}

/* [base, base+size) aligned to align, or NULL after saying why. The hint
 * is taken when that range is free and aligned (CUDA treats it as a hint
 * too). */
static uint8_t *reserve_range(uint64_t size, uint64_t align, uint64_t hint) {
  if (hint != 0 && hint % align == 0) {
    uint8_t *p = prot_none((void *)(uintptr_t)hint, size, MAP_FIXED_NOREPLACE);
    if (p == (uint8_t *)(uintptr_t)hint)
      return p;
    /* Elsewhere: a kernel without MAP_FIXED_NOREPLACE took it as a hint. */
    if (p != MAP_FAILED && sim_raw_munmap(p, size) != 0)
      fprintf(stderr, "spcsim: cuMemAddressReserve: munmap(%p, %llu): %s\n",
              (void *)p, (unsigned long long)size, strerror(errno));
  }
  uint64_t len = size + align;
  uint8_t *map = prot_none(NULL, len, 0);
  if (map == MAP_FAILED) {
    fprintf(stderr, "spcsim: cuMemAddressReserve: mmap of %llu bytes: %s\n",
            (unsigned long long)len, strerror(errno));
    return NULL;
  }
  uint8_t *base = (uint8_t *)(((uintptr_t)map + align - 1) & ~(align - 1));
  if ((base > map && sim_raw_munmap(map, (size_t)(base - map)) != 0) ||
      (base + size < map + len &&
       sim_raw_munmap(base + size, (size_t)(map + len - base - size)) != 0))
    fprintf(stderr,
            "spcsim: cuMemAddressReserve: munmap of the slack around %p: "
            "%s\n",
            (void *)base, strerror(errno));
  return base;
}

/* Sizes and addresses: multiples of the host page (CUDA's rule for
 * reservations; mappings need the granularity). */
int sim_vmm_reserve(uint64_t size, uint64_t align, uint64_t hint,
                    void **p_out) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (size == 0 || size % PAGE != 0 || hint % PAGE != 0 ||
      (align & (align - 1)) != 0 || size > ((uint64_t)1 << 47) ||
      align > ((uint64_t)1 << 40))
    return SIM_EINVAL;
  resv *r = calloc(1, sizeof(*r));
  uint64_t a = align > SIM_VMM_GRAN ? align : SIM_VMM_GRAN;
  uint8_t *base = r ? reserve_range(size, a, hint) : NULL;
  if (base == NULL) {
    free(r);
    return SIM_ENOMEM;
  }
  r->base = base;
  r->size = size;
  pthread_mutex_lock(&rmu);
  r->next = resvs;
  resvs = r;
  pthread_mutex_unlock(&rmu);
  *p_out = base;
  return SIM_OK;
}

static resv *holding_locked(const uint8_t *p, uint64_t len) {
  for (resv *r = resvs; r != NULL; r = r->next)
    if (p >= r->base && p < r->base + r->size &&
        len <= r->size - (uint64_t)(p - r->base))
      return r;
  return NULL;
}

int sim_vmm_in_reservation(const void *p, uint64_t len) {
  pthread_mutex_lock(&rmu);
  int in = holding_locked(p, len) != NULL;
  pthread_mutex_unlock(&rmu);
  return in;
}

/* Freeing a range still mapped leaves the mappings' memory referenced
 * through addresses the process gave up: CUDA asks for cuMemUnmap first
 * and leaves the rest undefined. */
int sim_vmm_addr_free(void *p, uint64_t size, const char *call) {
  pthread_mutex_lock(&rmu);
  resv *r = resvs;
  while (r != NULL && r->base != p)
    r = r->next;
  int whole = r != NULL && r->size == size;
  pthread_mutex_unlock(&rmu);
  if (!whole)
    return SIM_EINVAL;
  uint8_t *mapped = sim_vmm_mapped_in(p, size);
  if (mapped != NULL) {
    sim_violation("vmm-free-mapped", call,
                  "the range of %llu bytes at %p still has a cuMemMap "
                  "mapping at %p: cuMemUnmap it first",
                  (unsigned long long)size, p, (void *)mapped);
    return SIM_EINVAL;
  }
  pthread_mutex_lock(&rmu);
  resv **rp = &resvs;
  while (*rp != NULL && *rp != r)
    rp = &(*rp)->next;
  int found = *rp == r; /* else another thread freed it meanwhile */
  if (found)
    *rp = r->next;
  pthread_mutex_unlock(&rmu);
  if (!found)
    return SIM_EINVAL;
  if (sim_raw_munmap(p, size) != 0)
    fprintf(stderr, "spcsim: %s: munmap(%p, %llu): %s\n", call, p,
            (unsigned long long)size, strerror(errno));
  free(r);
  return SIM_OK;
}

int sim_vmm_reservation(const void *p, uint8_t **base_p, uint64_t *size_p) {
  pthread_mutex_lock(&rmu);
  resv *r = holding_locked(p, 1);
  if (r != NULL) {
    *base_p = r->base;
    *size_p = r->size;
  }
  pthread_mutex_unlock(&rmu);
  return r != NULL ? SIM_OK : SIM_EINVAL;
}

int sim_vmm_overlaps(const void *p, uint64_t len, uint8_t **base_p) {
  const uint8_t *a = p;
  pthread_mutex_lock(&rmu);
  resv *r = resvs;
  while (r != NULL && !(a < r->base + r->size && a + len > r->base))
    r = r->next;
  if (r != NULL)
    *base_p = r->base;
  pthread_mutex_unlock(&rmu);
  return r != NULL;
}

void sim_vmm_resv_leaks(void) {
  pthread_mutex_lock(&rmu);
  for (resv *r = resvs; r != NULL; r = r->next)
    sim_leak_note("cuMemAddressReserve range of %llu bytes at %p never "
                  "freed (cuMemAddressFree)",
                  (unsigned long long)r->size, (void *)r->base);
  pthread_mutex_unlock(&rmu);
}
