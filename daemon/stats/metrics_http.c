/* An optional HTTP listener on 127.0.0.1 that answers GET /metrics with
 * the Prometheus rendering, for a Prometheus server to scrape. One request
 * per connection; anything else gets 404 or 400. Any local user can open
 * it: it shows the daemon's aggregate counters only (per-group series, with
 * every uid's group names, when metrics_groups = 1), a connection has
 * hello_timeout to send its request and be answered, and at most
 * HTTP_MAX_CONNS are open at once. */
#include <stdlib.h>
#include <string.h>

#include "stats.h"

#define HTTP_MAX_REQUEST 8192
#define HTTP_MAX_CONNS 16

typedef struct {
  uv_tcp_t tcp;
  uv_timer_t deadline;
  int handles;                /* open handles; freed when none is left */
  spd_ctx *ctx;
  char buf[HTTP_MAX_REQUEST];
  size_t len;
  int answered;
} http_conn;

typedef struct {
  uv_write_t req;
  char *text;
} http_write;

static void on_conn_closed(uv_handle_t *h) {
  http_conn *c = h->data;
  if (--c->handles > 0)
    return;
  c->ctx->metrics_conns--;
  free(c);
}

static void conn_close(http_conn *c) {
  if (!uv_is_closing((uv_handle_t *)&c->tcp))
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
  if (c->handles == 2 && !uv_is_closing((uv_handle_t *)&c->deadline))
    uv_close((uv_handle_t *)&c->deadline, on_conn_closed);
}

static void on_deadline(uv_timer_t *t) {
  conn_close(t->data);
}

static void on_written(uv_write_t *req, int status) {
  http_write *w = (http_write *)req;
  (void)status;
  conn_close(req->handle->data);
  free(w->text);
  free(w);
}

static void respond(http_conn *c, const char *status, const char *body) {
  http_write *w = malloc(sizeof(*w));
  size_t n = strlen(body) + 256;
  char *text = malloc(n);
  if (w == NULL || text == NULL) {
    free(w), free(text);
    conn_close(c);
    return;
  }
  int len = snprintf(text, n, "HTTP/1.1 %s\r\nContent-Type: text/plain; "
                     "version=0.0.4; charset=utf-8\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s", status, strlen(body), body);
  w->text = text;
  uv_buf_t b = uv_buf_init(text, (unsigned)len);
  c->answered = 1;
  uv_read_stop((uv_stream_t *)&c->tcp);
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
    free(text), free(w);
    conn_close(c);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  http_conn *c = h->data;
  (void)suggested;
  *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len - 1));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  http_conn *c = s->data;
  (void)b;
  if (n < 0 || c->answered) {
    if (!c->answered)
      conn_close(c);
    return;
  }
  c->len += (size_t)n;
  c->buf[c->len] = '\0';
  if (strstr(c->buf, "\r\n\r\n") == NULL) {
    if (c->len >= sizeof(c->buf) - 1)
      respond(c, "400 Bad Request", "request too large\n");
    return;
  }
  if (strncmp(c->buf, "GET /metrics ", 13) != 0) {
    respond(c, "404 Not Found", "only GET /metrics is served here\n");
    return;
  }
  char *text = spd_stats_render(c->ctx, "prometheus",
                                c->ctx->cfg.metrics_groups
                                    ? 0
                                    : SPD_STATS_AGGREGATE);
  respond(c, text ? "200 OK" : "500 Internal Server Error",
          text ? text : "out of memory\n");
  free(text);
}

/* Over HTTP_MAX_CONNS the connection is accepted and closed at once. */
static void on_connection(uv_stream_t *server, int status) {
  spd_ctx *ctx = server->data;
  http_conn *c = calloc(1, sizeof(*c));
  if (status < 0 || c == NULL || uv_tcp_init(ctx->loop, &c->tcp) < 0) {
    SPD_WARN(&ctx->log, "metrics connection dropped: %s",
             status < 0 ? uv_strerror(status) : "out of memory");
    free(c);
    return;
  }
  c->ctx = ctx;
  c->tcp.data = c->deadline.data = c;
  c->handles = 1;
  ctx->metrics_conns++;
  int rc = uv_accept(server, (uv_stream_t *)&c->tcp);
  if (rc == 0 && ctx->metrics_conns > HTTP_MAX_CONNS)
    rc = UV_EBUSY;
  if (rc == 0 && (rc = uv_timer_init(ctx->loop, &c->deadline)) == 0) {
    c->handles = 2;
    rc = uv_timer_start(&c->deadline, on_deadline,
                        (uint64_t)ctx->cfg.hello_timeout * 1000, 0);
  }
  if (rc == 0)
    rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc < 0) {
    SPD_DEBUG(&ctx->log, "metrics connection closed: %s", uv_strerror(rc));
    conn_close(c);
  }
}

int spd_metrics_http_start(spd_ctx *ctx, spk_err *err) {
  if (ctx->cfg.metrics_port == 0)
    return SPK_OK;
  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", ctx->cfg.metrics_port, &addr);
  int rc = uv_tcp_init(ctx->loop, &ctx->metrics);
  if (rc == 0) {
    ctx->metrics.data = ctx;
    rc = uv_tcp_bind(&ctx->metrics, (const struct sockaddr *)&addr, 0);
  }
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&ctx->metrics, 16, on_connection);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "metrics listener on 127.0.0.1:%d: "
                       "%s", ctx->cfg.metrics_port, uv_strerror(rc));
  SPD_INFO(&ctx->log, "serving http://127.0.0.1:%d/metrics",
           ctx->cfg.metrics_port);
  return SPK_OK;
}

void spd_metrics_http_stop(spd_ctx *ctx) {
  if (ctx->metrics.data != NULL)
    uv_close((uv_handle_t *)&ctx->metrics, NULL);
  ctx->metrics.data = NULL;
}
