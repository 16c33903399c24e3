/* Symmetric buffers: device memory every rank of a group allocates alike
 * and every rank maps (CUDA IPC), so that ops on it run on the ranks' own
 * streams, each rank copying what it receives from the others' memory,
 * with no daemon between a trainer's kernels (client_gpu_sym_op.c runs
 * them). Each rank's allocation starts with SPC__SYM_HDR bytes of flags
 * (its ready and done words) in front of the caller's bytes. The buffer is
 * also registered with the daemon as any device buffer, so an op the
 * symmetric path cannot run goes there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_gpu.h"

/* What each rank says of its allocation, all-gathered over the group. */
typedef struct {
  uint32_t magic;
  int32_t usable;             /* memory operations, peer copies, not off */
  int32_t kernel;             /* and the GPU movers' kernel loaded */
  int32_t pad;
  uint64_t size;
  spc__CUipcMemHandle handle; /* the allocation, flags included */
  char why[176];              /* why not usable */
} sym_card;

#define SYM_MAGIC 0x53594d31u /* "SYM1" */

/* Each rank's card into cards[world] through the daemon (an all_gather of
 * bytes), or an all_reduce MIN of *v when cards is NULL. */
static int sym_collective(spc_group *g, const sym_card *mine, sym_card *cards,
                          int32_t *v) {
  spc_client *c = g->client;
  size_t one = cards != NULL ? sizeof(*mine) : sizeof(*v);
  spc_buffer *b;
  int rc = spc_buffer_alloc(c, one * (size_t)(g->world + 1), &b);
  if (rc < 0)
    return rc;
  uint8_t *p = spc_buffer_data(b);
  memcpy(p, cards != NULL ? (const void *)mine : (const void *)v, one);
  spc_tensor in, out;
  int64_t s_in[2] = {1, (int64_t)one}, s_out[2] = {g->world, (int64_t)one};
  spc_op op = spc_op_all_gather(0, NULL);
  if (cards == NULL) {
    op = spc_op_all_reduce(SPC_MIN);
    s_in[0] = s_out[0] = 1, s_in[1] = s_out[1] = 1;
  }
  rc = spc_tensor_init(&in, b, 0, cards ? SPC_UINT8 : SPC_INT32, 2, s_in);
  if (rc == SPC_OK)
    rc = spc_tensor_init(&out, b, one, cards ? SPC_UINT8 : SPC_INT32, 2, s_out);
  if (rc == SPC_OK)
    rc = spc_run(g, &op, &in, &out);
  if (rc == SPC_OK && cards != NULL)
    memcpy(cards, p + one, one * (size_t)g->world);
  else if (rc == SPC_OK)
    memcpy(v, p + one, sizeof(*v));
  char keep[sizeof(c->last_error)];
  memcpy(keep, c->last_error, sizeof(keep));
  spc_buffer_free(b);
  memcpy(c->last_error, keep, sizeof(keep)); /* the op's failure, if any */
  return rc;
}

/* This rank's card: whether its driver and GPU can run the path. */
static void card_make(spc_group *g, const spc__cu_api *cu, spc__gpu_dev *d,
                      spc__CUdeviceptr base, uint64_t size, sym_card *k) {
  memset(k, 0, sizeof(*k));
  k->magic = SYM_MAGIC;
  k->size = size;
  const char *off = getenv("SPCOLL_GPU_SYMMETRIC");
  const char *why = NULL;
  if (off != NULL && strcmp(off, "0") == 0)
    why = "SPCOLL_GPU_SYMMETRIC=0 on this rank";
  else if (g->multinode)
    why = "the group spans nodes (CUDA IPC reaches this node's GPUs only)";
  else if (!spc__gpu_flags_usable(g->client, d))
    why = "no 64-bit stream memory operations on this rank's GPU";
  else if (cu->IpcOpenMemHandle == NULL || cu->IpcCloseMemHandle == NULL ||
           cu->MemcpyAsync == NULL || cu->Memcpy2DAsync == NULL ||
           cu->StreamSynchronize == NULL)
    why = "the driver lacks cuIpcOpenMemHandle or cuMemcpy2DAsync";
  else if (cu->IpcGetMemHandle(&k->handle, base) != SPC__CUDA_SUCCESS)
    why = "cuIpcGetMemHandle of the allocation failed";
  k->usable = why == NULL;
  k->kernel = k->usable && spc__sym_kernel_ready(g->client, cu, d);
  snprintf(k->why, sizeof(k->why), "%s",
           why != NULL ? why : k->kernel ? "" : d->kernel_why);
}

static void peers_close(const spc__cu_api *cu, spc__sym *s);

/* Map every other rank's allocation; 0 when one cannot be (why filled,
 * none left mapped). */
static int peers_open(const spc__cu_api *cu, spc__sym *s,
                      const sym_card *cards) {
  s->mapped = 1;
  for (int r = 0; r < s->world; r++) {
    if (r == s->rank) {
      s->peer[r] = s->own;
      continue;
    }
    spc__CUresult e = cu->IpcOpenMemHandle(
        &s->peer[r], cards[r].handle, SPC__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (e != SPC__CUDA_SUCCESS) {
      s->peer[r] = 0;
      snprintf(s->why, sizeof(s->why), "cuIpcOpenMemHandle of rank %d's "
               "buffer on rank %d: %s", r, s->rank, spc__cu_str(cu, e));
      peers_close(cu, s);
      return 0;
    }
  }
  return 1;
}

static void peers_close(const spc__cu_api *cu, spc__sym *s) {
  for (int r = 0; s->mapped && r < s->world; r++)
    if (r != s->rank && s->peer[r] != 0) {
      (void)cu->IpcCloseMemHandle(s->peer[r]); /* nothing to do if it fails */
      s->peer[r] = 0;
    }
  s->mapped = s->usable = 0;
}

/* The cards agree (same size, every rank usable): the peers mapped, and
 * every rank told whether all of them could. */
static int sym_connect(spc_group *g, const spc__cu_api *cu, spc__sym *s,
                       const sym_card *cards) {
  for (int r = 0; r < s->world; r++) {
    if (cards[r].magic != SYM_MAGIC)
      return spc__fail(g->client, SPC_EMISMATCH, "rank %d's answer to "
                       "spc_buffer_alloc_symmetric is not one (another call "
                       "at the same point of the group's sequence?)", r);
    if (cards[r].size != cards[s->rank].size)
      return spc__fail(g->client, SPC_EMISMATCH, "spc_buffer_alloc_symmetric: "
                       "size %llu on rank %d, %llu on rank %d",
                       (unsigned long long)cards[r].size, r,
                       (unsigned long long)cards[s->rank].size, s->rank);
  }
  int32_t all = 1;
  for (int r = 0; r < s->world && all; r++)
    if (!cards[r].usable) {
      all = 0;
      snprintf(s->why, sizeof(s->why), "rank %d: %.*s", r,
               (int)sizeof(cards[r].why) - 1, cards[r].why);
    }
  s->kernel = all;
  for (int r = 0; r < s->world && s->kernel; r++)
    if (!cards[r].kernel) {
      s->kernel = 0; /* reductions go to the daemon: said, not refused */
      snprintf(s->why, sizeof(s->why), "reductions through the daemon: "
               "rank %d: %.*s", r, (int)sizeof(cards[r].why) - 1,
               cards[r].why);
    }
  if (all && spc__gpu_push(g->client, cu, s->ctx) == SPC_OK) {
    all = peers_open(cu, s, cards);
    spc__gpu_pop(cu);
  } else {
    all = 0;
  }
  int32_t agreed = all;
  int rc = sym_collective(g, NULL, NULL, &agreed);
  if (rc < 0 || !agreed) {
    if (s->mapped && spc__gpu_push(g->client, cu, s->ctx) == SPC_OK) {
      peers_close(cu, s);
      spc__gpu_pop(cu);
    }
    if (all && rc == SPC_OK)
      snprintf(s->why, sizeof(s->why), "another rank could not map every "
               "rank's buffer");
  }
  s->usable = rc == SPC_OK && agreed;
  return rc;
}

int spc_buffer_alloc_symmetric(spc_group *g, int device, size_t size,
                               spc_buffer **buf_p) {
  if (g == NULL || buf_p == NULL)
    return SPC_EINVAL;
  spc_client *c = g->client;
  if (size == 0 || size > SIZE_MAX - SPC__SYM_HDR)
    return spc__fail(c, SPC_EINVAL, "symmetric buffer size %zu: must be "
                     "1 byte or more", size);
  spc_buffer *b;
  int rc = spc_buffer_alloc_device(c, device, SPC__SYM_HDR + size, &b);
  if (rc < 0)
    return rc;
  spc__gpu_buf *gb = b->gpu;
  spc__sym *s = calloc(1, sizeof(*s) + (size_t)g->world * sizeof(*s->peer));
  if (s == NULL) {
    spc_buffer_free(b);
    return spc__fail(c, SPC_ENOMEM, "symmetric buffer state for %d ranks",
                     g->world);
  }
  const spc__cu_api *cu = spc__cu(c);
  spc__gpu_dev *d;
  (void)spc__gpu_dev_get(c, device, &d); /* made by the allocation */
  *s = (spc__sym){.group = g, .rank = g->rank, .world = g->world,
                  .ctx = d->ctx, .own = (spc__CUdeviceptr)(uintptr_t)b->data,
                  .peer = (spc__CUdeviceptr *)(s + 1), .cur = -1,
                  .refs = 1};
  s->copies = malloc(SPC__SYM_MAX_COPIES * sizeof(*s->copies));
  sym_card mine, *cards = calloc((size_t)g->world, sizeof(*cards));
  if (s->copies == NULL) {
    free(cards);
    cards = NULL;
  }
  card_make(g, cu, d, s->own, size, &mine);
  rc = cards != NULL ? sym_collective(g, &mine, cards, NULL)
                     : spc__fail(c, SPC_ENOMEM, "%d ranks' cards", g->world);
  if (rc == SPC_OK)
    rc = sym_connect(g, cu, s, cards);
  s->fn = d->kernel, s->sms = d->sms;
  free(cards);
  if (rc < 0) {
    free(s->copies);
    free(s);
    char keep[sizeof(c->last_error)];
    memcpy(keep, c->last_error, sizeof(keep));
    spc_buffer_free(b);
    memcpy(c->last_error, keep, sizeof(keep));
    return rc;
  }
  /* The caller's view starts after the flags. */
  b->data = (uint8_t *)b->data + SPC__SYM_HDR;
  b->size = size;
  gb->off += SPC__SYM_HDR;
  gb->sym = s;
  *buf_p = b;
  return SPC_OK;
}

int spc_buffer_symmetric(const spc_buffer *b, char *why, size_t len) {
  const spc__gpu_buf *gb = b != NULL ? b->gpu : NULL;
  const spc__sym *s = gb != NULL ? gb->sym : NULL;
  const char *w = s == NULL ? "not made by spc_buffer_alloc_symmetric"
                            : s->why;
  if (why != NULL && len > 0) /* usable: what goes to the daemon, if any */
    snprintf(why, len, "%s", w);
  return s != NULL && s->usable;
}

int spc_gpu_path_stats(const spc_client *c, spc_gpu_paths *st) {
  if (c == NULL || st == NULL)
    return SPC_EINVAL;
  const spc__gpu_client *g = c->gpu;
  memset(st, 0, sizeof(*st));
  if (g != NULL)
    *st = g->paths;
  return SPC_OK;
}

void spc__sym_group_gone(spc_client *c, spc_group *g) {
  for (spc_buffer *b = c->buffers; b != NULL; b = b->next) {
    spc__gpu_buf *gb = b->gpu;
    if (gb != NULL && gb->sym != NULL && gb->sym->group == g) {
      gb->sym->group = NULL;
      gb->sym->usable = 0;
      snprintf(gb->sym->why, sizeof(gb->sym->why), "its group was left");
    }
  }
}

int spc__sym_free(spc_client *c, spc__sym *s, int collective) {
  const spc__cu_api *cu = spc__cu(c);
  int usable = s->mapped && s->group != NULL, rc = SPC_OK;
  /* Every op this rank queued ends with its wait for the others' done
   * words: past it on every stream, no rank reads this memory any more. */
  if (cu != NULL && spc__gpu_push(c, cu, s->ctx) == SPC_OK) {
    (void)cu->CtxSynchronize(); /* a failure is the context's, reported by
                                 * the free that follows */
    peers_close(cu, s);
    spc__sym_kernel_free(cu, s);
    spc__gpu_pop(cu);
  } else {
    spc__sym_kernel_free(NULL, s);
  }
  /* Memory is freed only once no other process maps it: every rank has
   * closed its mappings of the others' before any rank goes on. */
  if (usable && collective) {
    int32_t v = 1;
    rc = sym_collective(s->group, NULL, NULL, &v);
  }
  free(s->copies);
  s->copies = NULL;
  s->freed = 1;
  if (--s->refs == 0)
    free(s);
  return rc;
}

void spc__sym_req_done(spc_request *req) {
  spc__sym *s = req->sym_buf;
  if (s != NULL && --s->refs == 0)
    free(s);
  req->sym_buf = NULL;
}
