/* Device descriptors kept for the ops that come again. A training step
 * repeats the same ops on the same tensors, so the descriptor bytes the
 * CUDA mover would upload for an op are usually those of an earlier one:
 * then it launches on the copy already on the GPU, and the op costs no
 * allocation, no upload and no free. Entries are immutable while they
 * exist; jobs hold them (refs) until their streams are done; the least
 * recently used entries no job holds go when the cache is past its bounds.
 * Loop thread only. */
#include "gpu.h"

#ifdef SPC_HAVE_CUDA

#include <stdlib.h>
#include <string.h>

/* Bounds per GPU state: entries, and the bytes they keep on the devices.
 * Descriptors of large ops (past ENTRY_MAX) are not kept: their upload is
 * small next to the op. */
#define CACHE_ENTRIES 64
#define CACHE_BYTES ((size_t)8 << 20)
#define ENTRY_MAX ((size_t)256 << 10)

struct spd_desc_entry {
  struct spd_desc_entry *next;
  int dev;
  size_t size;
  uint64_t hash;
  void *host;                  /* the bytes, to compare */
  void *d;                     /* the same on the device */
  int refs;
  int ready;                   /* 1 once the job that uploaded it is done
                                * (before, another stream might read it
                                * before the copy ran); -1 if that job
                                * failed: never used */
  uint64_t used;               /* a tick of the last lookup that hit it */
};

struct spd_desc_cache {
  spd_desc_entry *head;
  int n;
  size_t bytes;
  uint64_t tick;
};

static uint64_t fnv1a(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static spd_desc_cache *cache_of(spd_gpu *gpu) {
  if (gpu->descs == NULL)
    gpu->descs = calloc(1, sizeof(spd_desc_cache));
  return gpu->descs;
}

spd_desc_entry *spd_gpu_desc_find(spd_gpu *gpu, int dev, const void *host,
                                  size_t size, uint64_t *hash_p) {
  *hash_p = 0;
  spd_desc_cache *c = size > ENTRY_MAX ? NULL : cache_of(gpu);
  if (c == NULL)
    return NULL; /* not kept either: no hash of a large block */
  *hash_p = fnv1a(host, size);
  for (spd_desc_entry *e = c->head; e != NULL; e = e->next)
    if (e->ready == 1 && e->dev == dev && e->size == size &&
        e->hash == *hash_p && memcmp(e->host, host, size) == 0) {
      e->refs++;
      e->used = ++c->tick;
      return e;
    }
  return NULL;
}

static void entry_free(spd_desc_entry *e, cudaStream_t s) {
  if (cudaFreeAsync(e->d, s) != cudaSuccess)
    cudaGetLastError(); /* the pool keeps it; nothing else to do */
  free(e->host);
  free(e);
}

/* Drop idle entries, least recently used first, until one of `size` more
 * bytes fits; 0 when the held ones leave no room. */
static int make_room(spd_desc_cache *c, size_t size, cudaStream_t s) {
  while (c->n >= CACHE_ENTRIES || c->bytes + size > CACHE_BYTES) {
    spd_desc_entry **victim = NULL;
    for (spd_desc_entry **p = &c->head; *p != NULL; p = &(*p)->next)
      if ((*p)->refs == 0 && (victim == NULL || (*p)->used < (*victim)->used))
        victim = p;
    if (victim == NULL)
      return 0;
    spd_desc_entry *e = *victim;
    *victim = e->next;
    c->n--;
    c->bytes -= e->size;
    entry_free(e, s); /* idle: no queued work reads it */
  }
  return 1;
}

spd_desc_entry *spd_gpu_desc_keep(spd_gpu *gpu, int dev, void *d,
                                  const void *host, size_t size,
                                  uint64_t hash, cudaStream_t s) {
  spd_desc_cache *c = cache_of(gpu);
  if (c == NULL || size > ENTRY_MAX || !make_room(c, size, s))
    return NULL;
  spd_desc_entry *e = calloc(1, sizeof(*e));
  void *copy = malloc(size ? size : 1);
  if (e == NULL || copy == NULL) {
    free(e);
    free(copy);
    return NULL; /* not kept: the caller frees d after its op */
  }
  memcpy(copy, host, size);
  *e = (spd_desc_entry){.next = c->head, .dev = dev, .size = size,
                        .hash = hash, .host = copy, .d = d, .refs = 1,
                        .used = ++c->tick};
  c->head = e;
  c->n++;
  c->bytes += size;
  return e;
}

void *spd_gpu_desc_dev(const spd_desc_entry *e) {
  return e->d;
}

void spd_gpu_desc_put(spd_desc_entry *e, int ok) {
  if (e == NULL)
    return;
  e->refs--;
  if (e->ready == 0)
    e->ready = ok ? 1 : -1;
}

void spd_gpu_desc_cache_free(spd_gpu *gpu) {
  spd_desc_cache *c = gpu->descs;
  if (c == NULL)
    return;
  while (c->head != NULL) {
    spd_desc_entry *e = c->head;
    c->head = e->next;
    /* Shutdown: no job runs any more; stream 0 orders the frees after
     * whatever the device still has queued. */
    spk_err err;
    if (spd_gpu_set_device(e->dev, &err) == SPK_OK)
      entry_free(e, 0);
    else {
      free(e->host);
      free(e);
    }
  }
  free(c);
  gpu->descs = NULL;
}

#endif /* SPC_HAVE_CUDA */
