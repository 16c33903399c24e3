/* An optional HTTP listener on 127.0.0.1 that answers GET /metrics with
 * the Prometheus rendering, for a Prometheus server to scrape. One request
 * per connection; anything else gets 404 or 400. */
#include <stdlib.h>
#include <string.h>

#include "stats.h"

#define HTTP_MAX_REQUEST 8192

typedef struct {
  uv_tcp_t tcp;
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
  free(h->data);
}

static void on_written(uv_write_t *req, int status) {
  http_write *w = (http_write *)req;
  (void)status;
  uv_close((uv_handle_t *)req->handle, on_conn_closed);
  free(w->text);
  free(w);
}

static void respond(http_conn *c, const char *status, const char *body) {
  http_write *w = malloc(sizeof(*w));
  size_t n = strlen(body) + 256;
  char *text = malloc(n);
  if (w == NULL || text == NULL) {
    free(w), free(text);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
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
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
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
      uv_close((uv_handle_t *)s, on_conn_closed);
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
  /* Bound to 127.0.0.1 and off unless configured: the scraper sees all. */
  char *text = spd_stats_render(c->ctx, "prometheus", 0);
  respond(c, text ? "200 OK" : "500 Internal Server Error",
          text ? text : "out of memory\n");
  free(text);
}

static void on_connection(uv_stream_t *server, int status) {
  spd_ctx *ctx = server->data;
  http_conn *c = calloc(1, sizeof(*c));
  if (status < 0 || c == NULL || uv_tcp_init(ctx->loop, &c->tcp) < 0) {
    free(c);
    return;
  }
  c->ctx = ctx;
  c->tcp.data = c;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
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
