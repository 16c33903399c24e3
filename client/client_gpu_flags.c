/* Stream flags: how a device op is ordered with the caller's stream when
 * the GPU has stream memory operations (proto/spcoll.proto, StreamFlags).
 * The client's stream sets the slot's `ready` word to the op's seq after
 * the work queued before it; the daemon's streams wait on it, and set
 * `done` after their last access; the client's stream waits on `done`.
 * Both sides queue their half at once and neither host waits for the
 * GPU, nor for the other side: spc_wait_on_stream returns once the wait
 * is queued, and the op's answer is taken whenever it comes.
 *
 * The words are a host buffer of the client's (a memfd the daemon maps,
 * registered with stream_flags), registered with CUDA in both processes:
 * both hosts see them too. That is what makes slot reuse safe and a
 * failure harmless: a slot is reused only once its op has answered and
 * both its words hold its seq (no write of it is still on its way), and
 * the host sets `done` itself for an op that failed, so no stream waits
 * for an op that never ran. Without the driver's entry points, the
 * device's 64-bit stream memory operations, or the daemon's, ops go with
 * interprocess events (client_gpu_op.c); SPCOLL_GPU_ORDER=events asks for
 * them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "client_gpu.h"

/* Bounds a wait for a free slot: every slot held by ops whose answers
 * came but whose streams have not yet reached their flags. */
#define FLAG_WAIT_S 300
/* slot_req of a slot whose op failed: never used again. */
#define SLOT_RETIRED UINT64_MAX

/* Ops go with events from now on (the daemon's stats count them). */
static int flags_off(spc__gpu_flags *f) {
  f->state = -1;
  return 0;
}

void spc__gpu_counts_publish(spc_client *c) {
  const spc__gpu_client *g = c->gpu;
  if (g == NULL || g->flags.state != 1)
    return;
  spk_sflag_counts *k =
      (spk_sflag_counts *)((uint8_t *)g->flags.words + SPK_SFLAG_COUNTS_OFF);
  const spc_gpu_paths *b = &g->flags.base;
  SPK_SFLAG_STORE(&k->sym_ops, g->paths.sym_ops - b->sym_ops);
  SPK_SFLAG_STORE(&k->sym_bytes, g->paths.sym_bytes - b->sym_bytes);
  SPK_SFLAG_STORE(&k->sym_daemon_ops,
                  g->paths.sym_daemon_ops - b->sym_daemon_ops);
}

/* The stream flags buffer: allocated, registered with the daemon for
 * stream flags and with CUDA here. 0 when any of it cannot be (asked for
 * events, a driver without the calls, the daemon's refusal, the CUDA
 * registration): then ops go with events. */
static int flags_setup(spc_client *c, const spc__cu_api *cu,
                       spc__gpu_flags *f) {
  const char *order = getenv("SPCOLL_GPU_ORDER");
  if (order != NULL && strcmp(order, "events") == 0)
    return flags_off(f);
  if (cu->MemHostRegister == NULL || cu->MemHostUnregister == NULL ||
      cu->MemHostGetDevicePointer == NULL || cu->StreamWriteValue64 == NULL ||
      cu->StreamWaitValue64 == NULL || cu->DeviceGetAttribute == NULL)
    return flags_off(f);
  char saved[sizeof(c->last_error)];
  memcpy(saved, c->last_error, sizeof(saved));
  int rc = spc__buffer_alloc(c, SPK_SFLAG_BYTES, SPC__BUF_FLAGS, &f->buf);
  if (rc < 0) {
    memcpy(c->last_error, saved, sizeof(saved)); /* not this call's error */
    return flags_off(f);
  }
  f->words = spc_buffer_data(f->buf);
  spc__CUresult r = cu->MemHostRegister(f->words, SPC__FLAG_SLOTS * 16,
                                        SPC__CU_MEMHOSTREGISTER_PORTABLE |
                                            SPC__CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r == SPC__CUDA_SUCCESS) {
    r = cu->MemHostGetDevicePointer(&f->dev, f->words, 0);
    if (r != SPC__CUDA_SUCCESS)
      cu->MemHostUnregister(f->words);
  }
  if (r != SPC__CUDA_SUCCESS) {
    spc_buffer_free(f->buf);
    f->buf = NULL;
    memcpy(c->last_error, saved, sizeof(saved));
    return flags_off(f);
  }
  f->base = ((const spc__gpu_client *)c->gpu)->paths;
  f->state = 1;
  return 1;
}

int spc__gpu_flags_usable(spc_client *c, spc__gpu_dev *d) {
  spc__gpu_client *g = c->gpu;
  const spc__cu_api *cu = spc__cu(c);
  if (cu == NULL || g == NULL)
    return 0;
  if (d->memops == 0) {
    int v = 0;
    d->memops = cu->DeviceGetAttribute != NULL &&
                        cu->DeviceGetAttribute(
                            &v, SPC__CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                            d->cudev) == SPC__CUDA_SUCCESS &&
                        v == 1
                    ? 1
                    : -1;
  }
  if (d->memops < 0)
    return 0;
  if (g->flags.state == 0)
    return flags_setup(c, cu, &g->flags);
  return g->flags.state > 0;
}

static int slot_free(const spc__gpu_flags *f, unsigned k) {
  if (f->slot_req[k] != 0)
    return 0;
  uint64_t s = f->slot_seq[k];
  return s == 0 ||
         (__atomic_load_n(&f->words[2 * k], __ATOMIC_ACQUIRE) == s &&
          __atomic_load_n(&f->words[2 * k + 1], __ATOMIC_ACQUIRE) == s);
}

static int find_slot(spc__gpu_flags *f, unsigned *slot_p) {
  for (unsigned i = 0; i < SPC__FLAG_SLOTS; i++) {
    unsigned k = (f->next + i) % SPC__FLAG_SLOTS;
    if (slot_free(f, k)) {
      f->next = (k + 1) % SPC__FLAG_SLOTS;
      *slot_p = k;
      return 1;
    }
  }
  return 0;
}

/* A free slot: answers taken while every slot is held, then a wait for
 * the streams that have yet to reach their flags, bounded. */
static int slot_get(spc_client *c, spc__gpu_flags *f, unsigned *slot_p) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!find_slot(f, slot_p)) {
    int rc = c->ndetached > 0 ? spc__pump_any(c, 1) : SPC_OK;
    if (rc < 0)
      return rc;
    if (c->ndetached > 0)
      continue;
    struct timespec now, nap = {0, 50000};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > FLAG_WAIT_S)
      return spc__fail(c, SPC_ETIMEDOUT, "all %d stream flag slots are held "
                       "for %d s by ops whose streams have not reached "
                       "their flags (a stream that never runs?) or retired "
                       "by failed ops: reconnect", SPC__FLAG_SLOTS,
                       FLAG_WAIT_S);
    nanosleep(&nap, NULL);
  }
  return SPC_OK;
}

int spc__gpu_flags_ready(spc_client *c, spc__gpu_dev *d, void *stream,
                         Spcoll__OpRequest *rq, Spcoll__StreamFlags *sf,
                         spc__gpu_opev *ev) {
  spc__gpu_flags *f = &((spc__gpu_client *)c->gpu)->flags;
  const spc__cu_api *cu = spc__cu(c);
  unsigned slot = 0;
  int rc = slot_get(c, f, &slot);
  if (rc < 0)
    return rc;
  uint64_t seq = ++f->seq;
  rc = spc__gpu_push(c, cu, d->ctx);
  if (rc < 0)
    return rc;
  /* A stream with nothing queued orders nothing: the host sets the flag,
   * and the daemon's stream does not wait on this one's work (each such
   * wait hands the GPU between the two processes' contexts). */
  spc__CUresult r = SPC__CUDA_SUCCESS;
  if (spc__gpu_stream_idle(cu, stream))
    __atomic_store_n(&f->words[2 * slot], seq, __ATOMIC_RELEASE);
  else
    r = cu->StreamWriteValue64((spc__CUstream)stream,
                               f->dev + 16 * (spc__CUdeviceptr)slot, seq,
                               SPC__CU_STREAM_WRITE_VALUE_DEFAULT);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuStreamWriteValue64 of the ready "
                     "flag on stream %p of CUDA device %d: %s", stream,
                     d->device, spc__cu_str(cu, r));
  f->slot_seq[slot] = seq;
  *sf = (Spcoll__StreamFlags)SPCOLL__STREAM_FLAGS__INIT;
  sf->buffer_id = f->buf->id;
  sf->slot = slot;
  sf->seq = seq;
  rq->stream_flags = sf;
  ev->dev = d;
  ev->flag_slot1 = slot + 1;
  ev->flag_seq = seq;
  return SPC_OK;
}

void spc__gpu_flags_sent(spc_client *c, const spc__gpu_opev *ev,
                         spc_request *req) {
  spc__gpu_flags *f = &((spc__gpu_client *)c->gpu)->flags;
  if (req == NULL) { /* the send failed: no daemon will set the done flag */
    __atomic_store_n(&f->words[2 * (ev->flag_slot1 - 1) + 1], ev->flag_seq,
                     __ATOMIC_RELEASE);
    return;
  }
  f->slot_req[ev->flag_slot1 - 1] = req->id;
  req->flag_slot1 = ev->flag_slot1;
  req->flag_seq = ev->flag_seq;
  req->gpu_dev = ev->dev;
}

void spc__gpu_flags_answered(spc_client *c, const spc_request *req) {
  spc__gpu_client *g = c->gpu;
  if (req->flag_slot1 == 0 || g == NULL || g->flags.words == NULL)
    return;
  unsigned k = req->flag_slot1 - 1;
  if (g->flags.slot_req[k] != req->id)
    return;
  g->flags.slot_req[k] = 0;
  if (req->status < 0) {
    /* A failed op may not have set it: the caller's stream goes on. A
     * daemon stream stuck in the op may still write it late, so the slot
     * is retired, never reused. */
    __atomic_store_n(&g->flags.words[2 * k + 1], req->flag_seq,
                     __ATOMIC_RELEASE);
    g->flags.slot_req[k] = SLOT_RETIRED;
  }
}

int spc__gpu_flags_wait(spc_client *c, spc_request *req, void *stream) {
  spc__gpu_flags *f = &((spc__gpu_client *)c->gpu)->flags;
  spc__gpu_dev *d = req->gpu_dev;
  const spc__cu_api *cu = spc__cu(c);
  unsigned k = req->flag_slot1 - 1;
  int rc = spc__gpu_push(c, cu, d->ctx);
  if (rc < 0)
    return rc;
  spc__CUresult r = cu->StreamWaitValue64(
      (spc__CUstream)stream, f->dev + 16 * (spc__CUdeviceptr)k + 8,
      req->flag_seq, SPC__CU_STREAM_WAIT_VALUE_GEQ);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuStreamWaitValue64 on the done flag "
                     "on stream %p of CUDA device %d: %s", stream, d->device,
                     spc__cu_str(cu, r));
  return SPC_OK;
}

void spc__gpu_flags_free(spc_client *c) {
  spc__gpu_client *g = c->gpu;
  if (g == NULL || g->flags.state <= 0)
    return; /* before spc__cu: a host-only client never loads the driver */
  const spc__cu_api *cu = spc__cu(NULL);
  if (cu == NULL)
    return;
  /* Every answer taken (the daemon bounds its ops by their timeout); a
   * slot whose answer cannot come any more is released by the host. */
  while (c->ndetached > 0 && !c->broken)
    if (spc__pump_any(c, 1) < 0)
      break;
  for (unsigned k = 0; k < SPC__FLAG_SLOTS; k++)
    if (g->flags.slot_req[k] != 0 && g->flags.slot_req[k] != SLOT_RETIRED)
      __atomic_store_n(&g->flags.words[2 * k + 1], g->flags.slot_seq[k],
                       __ATOMIC_RELEASE);
  /* Streams may still have waits on the words queued: they must have run
   * before the words stop being device memory. Disconnecting is the one
   * place the library waits for the GPU. */
  for (int i = 0; i < g->ndevs; i++)
    if (spc__gpu_push(c, cu, g->devs[i].ctx) == SPC_OK) {
      cu->CtxSynchronize();
      spc__gpu_pop(cu);
    }
  cu->MemHostUnregister(g->flags.words);
  g->flags.state = 0;
  g->flags.words = NULL;
}
