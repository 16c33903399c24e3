/* Peer daemons: UCX set-up at start, the orderly stop, and what the rest
 * of the daemon asks about the peers. */
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <sys/random.h>

#include "peer_internal.h"

int spd_peers_enabled(const spd_ctx *ctx) {
  return ctx->peers != NULL;
}

int spd_peer_self(const spd_ctx *ctx) {
  return ctx->cfg.node_index;
}

int spd_peer_count(const spd_ctx *ctx) {
  return ctx->cfg.npeers;
}

int spd_peer_moves_cuda(const spd_ctx *ctx) {
  return ctx->peers != NULL && ctx->peers->cuda;
}

int spd_peer_is_up(const spd_ctx *ctx, int node) {
  if (ctx->peers == NULL || node < 0 || node >= ctx->cfg.npeers)
    return 0;
  return node == ctx->cfg.node_index || ctx->peers->peer[node].up;
}

int spd_peer_nodes_up(const spd_ctx *ctx) {
  int n = 0;
  for (int i = 0; ctx->peers != NULL && i < ctx->cfg.npeers; i++)
    n += i != ctx->cfg.node_index && ctx->peers->peer[i].up;
  return n;
}

static int ucx_init(spd_peers *P, spk_err *err) {
  ucp_config_t *config;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_config_read: %s",
                       ucs_status_string(st));
  ucp_params_t params = {
      .field_mask = UCP_PARAM_FIELD_FEATURES,
      .features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP};
  st = ucp_init(&params, config, &P->ucp);
  ucp_config_release(config);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_init: %s",
                       ucs_status_string(st));
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  st = ucp_worker_create(P->ucp, &wp, &P->worker);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_worker_create: %s",
                       ucs_status_string(st));
  ucp_am_handler_param_t am = {
      .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG,
      .id = SPD_PEER_AM_ID, .cb = spd_peer_on_am, .arg = P};
  st = ucp_worker_set_am_recv_handler(P->worker, &am);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_worker_set_am_recv_handler: %s",
                       ucs_status_string(st));
  st = ucp_worker_get_address(P->worker, &P->addr, &P->addr_len);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_worker_get_address: %s",
                       ucs_status_string(st));
  if (P->addr_len > SPD_AUTH_ADDR_MAX)
    return spk_err_set(err, SPK_ESYSTEM, "the UCX worker address has %zu "
                       "bytes, more than the bootstrap carries (%u)",
                       P->addr_len, SPD_AUTH_ADDR_MAX);
  return SPK_OK;
}

/* Whether the site's UCX was built with CUDA (logged at start): device
 * tensors of groups spanning nodes then go straight from device memory
 * (engine_ucx.c, xnode_direct). */
static int ucx_has_cuda(spd_peers *P) {
  ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
  if (ucp_context_query(P->ucp, &attr) != UCS_OK)
    return 0;
  return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

/* Handles are set up in this order and closed in it: the first
 * P->handles of them exist. */
static uv_handle_t *loop_handle(spd_peers *P, int i) {
  uv_handle_t *h[] = {(uv_handle_t *)&P->poll, (uv_handle_t *)&P->tick,
                      (uv_handle_t *)&P->kick, (uv_handle_t *)&P->boot};
  return h[i];
}

static int loop_attach(spd_peers *P, spk_err *err) {
  int efd;
  ucs_status_t st = ucp_worker_get_efd(P->worker, &efd);
  if (st != UCS_OK)
    return spk_err_set(err, SPK_ESYSTEM, "ucp_worker_get_efd: %s",
                       ucs_status_string(st));
  int rc = uv_poll_init(P->ctx->loop, &P->poll, efd);
  if (rc == 0)
    P->handles++, rc = uv_timer_init(P->ctx->loop, &P->tick);
  if (rc == 0)
    P->handles++, rc = uv_timer_init(P->ctx->loop, &P->kick);
  if (rc == 0)
    P->handles++, rc = uv_tcp_init(P->ctx->loop, &P->boot);
  if (rc == 0) {
    P->handles++;
    P->poll.data = P->tick.data = P->kick.data = P->boot.data = P;
    rc = uv_poll_start(&P->poll, UV_READABLE, spd_peer_on_poll);
  }
  if (rc == 0)
    rc = uv_timer_start(&P->tick, spd_peer_on_tick, 0, 1000);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "libuv set-up of the UCX worker fd "
                       "%d: %s", efd, uv_strerror(rc));
  return SPK_OK;
}

int spd_peers_start(spd_ctx *ctx, const spd_peer_hooks *hooks, spk_err *err) {
  if (ctx->cfg.npeers == 0)
    return SPK_OK;
  spd_peers *P = calloc(1, sizeof(*P));
  if (P == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the peer state failed");
  P->ctx = ctx;
  P->hooks = *hooks;
  P->member = spd_peer_member;
  TAILQ_INIT(&P->boots);
  TAILQ_INIT(&P->xfers);
  TAILQ_INIT(&P->events);
  TAILQ_INIT(&P->held);
  for (int n = 0; n < SPD_MAX_NODES; n++)
    P->peer[n].peers = P, P->peer[n].node = n;
  if (getrandom(&P->incarnation, sizeof(P->incarnation), 0) < 0)
    P->incarnation = spd_now_ns();
  ctx->peers = P;
  int rc = spd_auth_key_load(ctx->cfg.peer_key_file, &P->key, err);
  if (rc == SPK_OK)
    rc = ucx_init(P, err);
  if (rc == SPK_OK)
    rc = loop_attach(P, err);
  if (rc == SPK_OK)
    rc = spd_peer_boot_listen(P, err);
  if (rc == SPK_OK)
    P->cuda = ucx_has_cuda(P);
  if (rc == SPK_OK)
    SPD_INFO(&ctx->log, "node %d of %d: peers' bootstrap on %s:%d, "
             "authenticated with the key of %s; %s",
             ctx->cfg.node_index, ctx->cfg.npeers, ctx->cfg.ucx_listen.host,
             ctx->cfg.ucx_listen.port, ctx->cfg.peer_key_file,
             P->cuda ? "this UCX moves CUDA memory: device tensors go "
                       "directly"
                     : "this UCX has no CUDA support: device tensors are "
                       "staged through pinned host memory");
  return rc;
}

static void peers_free(spd_peers *P) {
  for (int n = 0; n < SPD_MAX_NODES; n++) {
    spd_peer_session_clear(&P->peer[n].in);
    spd_peer_session_clear(&P->peer[n].out);
  }
  if (P->addr != NULL)
    ucp_worker_release_address(P->worker, P->addr);
  OPENSSL_cleanse(P->key.key, sizeof(P->key.key));
  if (P->worker != NULL)
    ucp_worker_destroy(P->worker);
  if (P->ucp != NULL)
    ucp_cleanup(P->ucp);
  free(P);
}

static void on_handle_closed(uv_handle_t *h) {
  spd_peers *P = h->data;
  if (--P->handles == 0)
    peers_free(P);
}

/* First thing at a stop: tell every peer, so that none calls back while
 * we go, and make no new connections ourselves; bootstraps under way
 * end. */
int spd_peers_boot_fd(spd_ctx *ctx) {
  uv_os_fd_t fd;
  spd_peers *P = ctx->peers;
  if (P == NULL || P->stopping || P->boot_given ||
      uv_fileno((uv_handle_t *)&P->boot, &fd) < 0)
    return -1;
  return fd;
}

/* Closed now (the new daemon holds its own copy of the socket); the stop
 * does not close it again (spd_peers_stop). */
void spd_peers_boot_give_up(spd_ctx *ctx) {
  spd_peers *P = ctx->peers;
  if (P == NULL || P->boot_given || P->handles < 4)
    return;
  P->boot_given = 1;
  uv_close((uv_handle_t *)&P->boot, NULL);
}

void spd_peers_quiesce(spd_ctx *ctx) {
  spd_peers *P = ctx->peers;
  if (P == NULL || P->stopping)
    return;
  P->stopping = 1;
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Bye bye = SPCOLL__PEER__BYE__INIT;
  m.body_case = SPCOLL__PEER__MSG__BODY_BYE;
  m.bye = &bye;
  for (int n = 0; n < ctx->cfg.npeers; n++)
    if (P->peer[n].up)
      spd_peer_am_send(P, n, &m);
  spd_peer_boot_sweep(P, 1);
}

/* Close our endpoints after what they carry (the Byes) went out, waiting
 * at most a second; then force what is left. An endpoint with a send in
 * flight is closed by force at once: the send may be one its receiver
 * gave up, which UCX cannot cancel, and a worker destroyed with it still
 * on the endpoint aborts the daemon. */
static void out_eps_close(spd_peers *P) {
  void *reqs[SPD_MAX_NODES];
  int n = 0;
  for (int i = 0; i < P->ctx->cfg.npeers; i++) {
    spd_peer *p = &P->peer[i];
    if (p->ep == NULL)
      continue;
    ucp_request_param_t prm = {.op_attr_mask = 0};
    if (spd_peer_xfers_stuck(P, i)) {
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      prm.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    void *req = ucp_ep_close_nbx(p->ep, &prm);
    if (UCS_PTR_IS_PTR(req))
      reqs[n++] = req;
    p->ep = NULL;
    spd_peer_xfers_cancel(P, i);
  }
  uint64_t until = spd_now_ns() + 1000000000u;
  for (int i = 0; i < n; i++) {
    while (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS &&
           spd_now_ns() < until)
      ucp_worker_progress(P->worker);
    if (ucp_request_check_status(reqs[i]) == UCS_INPROGRESS)
      ucp_request_cancel(P->worker, reqs[i]);
    ucp_request_free(reqs[i]);
  }
}

void spd_peers_stop(spd_ctx *ctx) {
  spd_peers *P = ctx->peers;
  if (P == NULL)
    return;
  spd_peers_quiesce(ctx);
  ctx->peers = NULL;
  if (P->worker != NULL)
    out_eps_close(P);
  if (P->worker != NULL)
    while (ucp_worker_progress(P->worker) != 0)
      ;
  spd_peer_boot_sweep(P, 1);
  spd_peer_event *ev;
  while ((ev = TAILQ_FIRST(&P->events)) != NULL) {
    TAILQ_REMOVE(&P->events, ev, link);
    if (ev->kind == EV_XFER) {
      spd_peer_xfer_finish(P, ev->xfer); /* frees ev with the stream */
      continue;
    }
    if (ev->msg != NULL)
      spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    free(ev);
  }
  while ((ev = TAILQ_FIRST(&P->held)) != NULL) {
    TAILQ_REMOVE(&P->held, ev, link);
    spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    free(ev);
  }
  spd_xfer *x;
  while ((x = TAILQ_FIRST(&P->xfers)) != NULL) {
    TAILQ_REMOVE(&P->xfers, x, link); /* no op waits on it any more */
    if (x->req != NULL)
      ucp_request_free(x->req);
    free(x->iov);
    free(x);
  }
  spd_peer_unmap_all(P);
  if (P->handles == 0) {
    peers_free(P);
    return;
  }
  int n = P->handles;
  if (P->boot_given) /* closed already, the last of them (loop_handle) */
    n = --P->handles;
  for (int i = 0; i < n; i++) {
    loop_handle(P, i)->data = P;
    uv_close(loop_handle(P, i), on_handle_closed);
  }
}
