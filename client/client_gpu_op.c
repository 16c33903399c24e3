/* Stream order for ops on device tensors: an interprocess event recorded
 * on the caller's stream goes with the op (the daemon's stream waits on
 * it), and a second one the daemon records after its work is what
 * spc_wait_on_stream makes the caller's stream wait on. Events are made by
 * this library, so they live as long as the client: the daemon never hands
 * out an event it would have to keep alive for a client it cannot see. */
#include <string.h>

#include "client_gpu.h"

/* The next event pair of d, made on first use. */
static int event_slot(spc_client *c, const spc__cu_api *cu, spc__gpu_dev *d,
                      int *slot_p) {
  int slot = d->next;
  d->next = (d->next + 1) % SPC__GPU_EVENTS;
  if (slot < d->nev) {
    *slot_p = slot;
    return SPC_OK;
  }
  /* Interprocess events must not time (CUDA requires DisableTiming). */
  unsigned flags = SPC__CU_EVENT_INTERPROCESS | SPC__CU_EVENT_DISABLE_TIMING;
  spc__CUresult r = cu->EventCreate(&d->ready[slot], flags);
  if (r == SPC__CUDA_SUCCESS) {
    r = cu->EventCreate(&d->done[slot], flags);
    if (r != SPC__CUDA_SUCCESS)
      cu->EventDestroy(d->ready[slot]);
  }
  if (r == SPC__CUDA_SUCCESS) {
    r = cu->IpcGetEventHandle(&d->ready_h[slot], d->ready[slot]);
    if (r == SPC__CUDA_SUCCESS)
      r = cu->IpcGetEventHandle(&d->done_h[slot], d->done[slot]);
    if (r != SPC__CUDA_SUCCESS) {
      cu->EventDestroy(d->ready[slot]);
      cu->EventDestroy(d->done[slot]);
    }
  }
  if (r != SPC__CUDA_SUCCESS) {
    d->next = slot;
    return spc__fail(c, SPC_EDEVICE, "an interprocess event pair on CUDA "
                     "device %d (cuEventCreate / cuIpcGetEventHandle): %s",
                     d->device, spc__cu_str(cu, r));
  }
  d->nev = slot + 1;
  *slot_p = slot;
  return SPC_OK;
}

/* Whether every piece of work queued on stream so far is complete, so the
 * daemon may touch the tensors at once: then no ready event goes with the
 * op, and the daemon's stream does not wait on one. Each such wait is a
 * hand-over between the caller's and the daemon's CUDA contexts, which on
 * a GPU shared by processes (no MPS) costs a context switch. Only a
 * stream of the caller's own: the NULL and per-thread default streams
 * also order work of other streams that a query of them does not see. */
int spc__gpu_stream_idle(const spc__cu_api *cu, void *stream) {
  uintptr_t s = (uintptr_t)stream;
  if (s <= 2) /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
    return 0;
  /* Anything but success (not ready, or an error a later call reports
   * itself) records the event as before. */
  return cu->StreamQuery((spc__CUstream)stream) == SPC__CUDA_SUCCESS;
}

int spc__gpu_op_events(spc_client *c, const spc_tensor *in, void *stream,
                       Spcoll__OpRequest *rq, spc__gpu_opev *ev) {
  ev->dev = NULL;
  ev->flag_slot1 = 0;
  if (in == NULL || in->buf == NULL || in->buf->gpu == NULL)
    return SPC_OK;
  const spc__cu_api *cu = spc__cu(c);
  if (cu == NULL)
    return SPC_EUNSUPPORTED;
  spc__gpu_dev *d;
  int slot = 0;
  int rc = spc__gpu_dev_get(c, spc_buffer_device(in->buf), &d);
  if (rc == SPC_OK && spc__gpu_flags_usable(c, d))
    return spc__gpu_flags_ready(c, d, stream, rq, &ev->sf, ev);
  /* The stream's context, so the NULL stream means this GPU's. */
  if (rc == SPC_OK)
    rc = spc__gpu_push(c, cu, d->ctx);
  if (rc < 0)
    return rc;
  rc = event_slot(c, cu, d, &slot);
  int idle = rc == SPC_OK && spc__gpu_stream_idle(cu, stream);
  if (rc == SPC_OK && !idle) {
    spc__CUresult r = cu->EventRecord(d->ready[slot], (spc__CUstream)stream);
    if (r != SPC__CUDA_SUCCESS)
      rc = spc__fail(c, SPC_EDEVICE, "cuEventRecord on stream %p of CUDA "
                     "device %d: %s", stream, d->device, spc__cu_str(cu, r));
  }
  spc__gpu_pop(cu);
  if (rc < 0)
    return rc;
  if (!idle) {
    rq->ready_event.len = sizeof(d->ready_h[slot]);
    rq->ready_event.data = (uint8_t *)&d->ready_h[slot];
  }
  rq->done_event.len = sizeof(d->done_h[slot]);
  rq->done_event.data = (uint8_t *)&d->done_h[slot];
  ev->dev = d;
  ev->slot = slot;
  return SPC_OK;
}

void spc__gpu_op_sent(spc_client *c, const spc__gpu_opev *ev,
                      spc_request *req) {
  if (ev->flag_slot1 != 0)
    spc__gpu_flags_sent(c, ev, req);
  else if (ev->dev != NULL && req != NULL)
    ev->dev->req[ev->slot] = req->id;
}

int spc_start_on_stream(spc_group *g, const spc_op *op, const spc_tensor *in,
                        const spc_tensor *out, spc_stream stream,
                        spc_request **req_p) {
  return spc__start(g, op, in, out, stream, req_p);
}

/* The event pair an outstanding request went with, if it still has it
 * (a pair is reused after SPC__GPU_EVENTS later ops). */
static spc__gpu_dev *request_pair(spc_client *c, uint64_t id, int *slot_p) {
  spc__gpu_client *g = c->gpu;
  for (int i = 0; g != NULL && i < g->ndevs; i++)
    for (int k = 0; k < g->devs[i].nev; k++)
      if (g->devs[i].req[k] == id) {
        *slot_p = k;
        return &g->devs[i];
      }
  return NULL;
}

/* An op ordered through stream flags: the wait for its done flag queued
 * on stream, and the answer left to come (spc__detach) unless it is here
 * already. */
static int flags_wait_on_stream(spc_request *req, void *stream) {
  spc_client *c = req->client;
  int rc = spc__pump(c, req, 0);
  if (rc == SPC_OK && !req->done)
    rc = spc__gpu_flags_wait(c, req, stream);
  if (rc == SPC_OK && !req->done) {
    spc__detach(c, req);
    return SPC_OK;
  }
  /* Answered (its done flag is set, or set now if it failed), or the wait
   * could not be queued: the caller hears of it now. */
  int frc = spc__finish(c, req, NULL);
  return rc < 0 ? rc : frc;
}

int spc_wait_on_stream(spc_request **reqp, spc_stream stream) {
  if (reqp == NULL || *reqp == NULL)
    return SPC_EINVAL;
  spc_request *req = *reqp;
  spc_client *c = req->client;
  if (req->sym) { /* queued on its own stream already */
    *reqp = NULL;
    int rc = stream == req->sym_stream ? SPC_OK
                                       : spc__sym_wait_on_stream(req, stream);
    int frc = spc__finish(c, req, NULL);
    return rc < 0 ? rc : frc;
  }
  if (req->flag_slot1 != 0) {
    *reqp = NULL;
    return flags_wait_on_stream(req, stream);
  }
  int slot = 0;
  spc__gpu_dev *d = request_pair(c, req->id, &slot);
  *reqp = NULL;
  Spcoll__Frame *reply = NULL;
  int rc = spc__finish(c, req, &reply);
  int recorded = rc == SPC_OK && reply != NULL &&
                 reply->body_case == SPCOLL__FRAME__BODY_DONE &&
                 reply->done->done_event_recorded;
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  /* A pair already reused by a later op cannot be waited on; the daemon
   * answers only once its work is complete, so nothing is lost then. */
  if (d == NULL || !recorded)
    return rc;
  d->req[slot] = 0;
  const spc__cu_api *cu = spc__cu(c);
  if (cu == NULL)
    return SPC_EUNSUPPORTED;
  int prc = spc__gpu_push(c, cu, d->ctx);
  if (prc < 0)
    return prc;
  /* The daemon answers once its work is complete, so the done event
   * normally is: a stream wait on it would cost a context switch (see
   * stream_idle) for nothing. */
  spc__CUresult r = cu->EventQuery(d->done[slot]);
  if (r != SPC__CUDA_SUCCESS)
    r = cu->StreamWaitEvent((spc__CUstream)stream, d->done[slot], 0);
  spc__gpu_pop(cu);
  if (r != SPC__CUDA_SUCCESS)
    return spc__fail(c, SPC_EDEVICE, "cuStreamWaitEvent on stream %p of "
                     "CUDA device %d: %s", stream, d->device,
                     spc__cu_str(cu, r));
  return rc;
}

int spc_run_on_stream(spc_group *g, const spc_op *op, const spc_tensor *in,
                      const spc_tensor *out, spc_stream stream) {
  spc_request *req;
  int rc = spc__start(g, op, in, out, stream, &req);
  if (rc < 0)
    return rc;
  return spc_wait_on_stream(&req, stream);
}
