#include "gpu_testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client_internal.h"

int gpt_gpu_count(char *why, size_t len) {
#ifndef SPC_HAVE_CUDA
  snprintf(why, len, "built without CUDA");
  return 0;
#else
  int p[2];
  if (pipe(p) < 0) {
    snprintf(why, len, "pipe failed");
    return 0;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    char msg[200];
    cudaError_t e = cudaGetDeviceCount(&n);
    snprintf(msg, sizeof(msg), "%d %s", e == cudaSuccess ? n : 0,
             e == cudaSuccess ? "cudaGetDeviceCount found no device"
                              : cudaGetErrorString(e));
    ssize_t w = write(p[1], msg, strlen(msg) + 1);
    _exit(w > 0 ? 0 : 1);
  }
  close(p[1]);
  char buf[256] = "";
  ssize_t got = read(p[0], buf, sizeof(buf) - 1);
  close(p[0]);
  int st;
  waitpid(pid, &st, 0);
  int n = 0, at = 0;
  if (got <= 0 || sscanf(buf, "%d %n", &n, &at) < 1) {
    snprintf(why, len, "the CUDA probe process failed");
    return 0;
  }
  if (n == 0)
    snprintf(why, len, "%s", buf + at);
  return n;
#endif
}

int gpt_require_gpu(void) {
  char why[200] = "";
  int n = gpt_gpu_count(why, sizeof(why));
  if (n > 0)
    return n;
  printf("skipped: no GPU (%s)\n", why);
  fflush(stdout);
  exit(77);
}

long long gpt_stat(const spt_daemon *d, const char *name) {
  return spt_daemon_stat(d, name);
}

void gpt_keep_log(const spt_daemon *d) {
  const char *keep = getenv("SPCOLL_GPU_LOGS");
  if (keep != NULL && strcmp(keep, "1") == 0)
    spt_daemon_dump_log(d);
}
