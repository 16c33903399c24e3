/* systemctl reload: the unit's ExecReload sends SIGHUP, and the daemon
 * starts its own binary again, by the path it was started from (after a
 * package upgrade, the new binary), with its own arguments and --upgrade.
 * The new daemon takes the sockets over (upgrade.c) and tells systemd
 * that it is the main process now (MAINPID, sd.c; the unit allows it
 * with NotifyAccess=all); this one drains and exits. The new process is
 * started detached: it outlives this one, which systemd (a subreaper)
 * then adopts it from. The daemon does the same by itself when it can no
 * longer serve (a device fault ended its CUDA context, which only a new
 * process gets back: gpu_lost.c). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lifecycle.h"

static void on_reloader_exit(uv_process_t *p, int64_t status, int sig) {
  spd_ctx *ctx = p->data;
  SPD_WARN(&ctx->log, "the daemon started for a reload (pid %d) exited: "
           "status %lld, signal %d", p->pid, (long long)status, sig);
  ctx->reload_started = 0; /* a later SIGHUP may try again */
  uv_close((uv_handle_t *)p, NULL);
}

/* argv, less any --upgrade, then --upgrade; NULL-ended. */
static char **reload_args(spd_ctx *ctx) {
  char **a = calloc((size_t)ctx->argc + 2, sizeof(*a));
  if (a == NULL)
    return NULL;
  int n = 0;
  a[n++] = ctx->exe;
  for (int i = 1; i < ctx->argc; i++)
    if (strcmp(ctx->argv[i], "--upgrade") != 0)
      a[n++] = ctx->argv[i];
  a[n++] = "--upgrade";
  return a;
}

/* Start the binary again with --upgrade, for `why` (in the log). */
static void reload(spd_ctx *ctx, const char *why) {
  if (ctx->reload_started || ctx->stopping || ctx->draining ||
      ctx->exe[0] == '\0') {
    SPD_WARN(&ctx->log, "%s: no reload (%s)", why,
             ctx->reload_started  ? "one is under way"
             : ctx->exe[0] == '\0' ? "the binary's path is unknown"
                                    : "stopping");
    return;
  }
  char **args = reload_args(ctx);
  uv_stdio_container_t io[3] = {{.flags = UV_INHERIT_FD, .data.fd = 0},
                                {.flags = UV_INHERIT_FD, .data.fd = 1},
                                {.flags = UV_INHERIT_FD, .data.fd = 2}};
  uv_process_options_t o = {.file = ctx->exe, .args = args,
                            .exit_cb = on_reloader_exit,
                            .flags = UV_PROCESS_DETACHED,
                            .stdio_count = 3, .stdio = io};
  int rc = args == NULL ? UV_ENOMEM : uv_spawn(ctx->loop, &ctx->reloader, &o);
  free(args);
  if (rc < 0) {
    SPD_ERROR(&ctx->log, "%s: starting %s --upgrade failed: %s", why,
              ctx->exe, uv_strerror(rc));
    return;
  }
  ctx->reloader.data = ctx;
  ctx->reload_started = 1;
  uv_unref((uv_handle_t *)&ctx->reloader); /* this loop's end waits not */
  SPD_INFO(&ctx->log, "%s: started %s --upgrade (pid %d), which takes "
           "the sockets over", why, ctx->exe, ctx->reloader.pid);
}

static void on_hup(uv_signal_t *h, int signum) {
  (void)signum;
  reload(h->data, "SIGHUP");
}

void spd_reload_self(spd_ctx *ctx, const char *why) {
  reload(ctx, why);
}

/* The binary's path now: /proc/self/exe, less the " (deleted)" a package
 * upgrade that replaced the file leaves on it. */
static int exe_path(spd_ctx *ctx, spk_err *err) {
  ssize_t n = readlink("/proc/self/exe", ctx->exe, sizeof(ctx->exe) - 1);
  if (n < 0)
    return spk_err_set(err, SPK_ESYSTEM, "readlink(/proc/self/exe): %s",
                       strerror(errno));
  ctx->exe[n] = '\0';
  const char *del = " (deleted)";
  size_t dl = strlen(del);
  if ((size_t)n > dl && strcmp(ctx->exe + n - dl, del) == 0)
    ctx->exe[n - dl] = '\0';
  return SPK_OK;
}

int spd_reload_start(spd_ctx *ctx, int argc, char **argv, spk_err *err) {
  ctx->argc = argc, ctx->argv = argv;
  spk_err why;
  int rc = exe_path(ctx, &why);
  if (rc < 0) { /* no /proc, say: the daemon serves, without reloads */
    SPD_WARN(&ctx->log, "SIGHUP will not reload: %s", why.msg);
    ctx->exe[0] = '\0';
  }
  if ((rc = uv_signal_init(ctx->loop, &ctx->sig_hup)) == 0) {
    ctx->sig_hup.data = ctx; /* from here on, stop must close it */
    rc = uv_signal_start(&ctx->sig_hup, on_hup, SIGHUP);
  }
  return rc < 0 ? spk_err_set(err, SPK_ESYSTEM, "SIGHUP handler: %s",
                              uv_strerror(rc))
                : SPK_OK;
}

void spd_reload_stop(spd_ctx *ctx) {
  if (ctx->sig_hup.data != NULL)
    uv_close((uv_handle_t *)&ctx->sig_hup, NULL);
  ctx->sig_hup.data = NULL;
  if (ctx->reload_started) /* it goes on: only our handle closes */
    uv_close((uv_handle_t *)&ctx->reloader, NULL);
  ctx->reload_started = 0;
}
