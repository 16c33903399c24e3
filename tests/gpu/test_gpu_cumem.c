/* cuMem device memory (CUDA's virtual memory management, torch's
 * expandable segments) registered wrong gets a clear error and nothing
 * else is disturbed: a buffer over more allocations than one registration
 * may carry, memory created without an exportable handle type, a
 * descriptor that is not cuMem memory, a registration that lists more
 * allocations than descriptors came with (a protocol error: that
 * connection alone is closed), descriptors short for a moment (the
 * registration goes through once they are back). A registration shared by a later buffer
 * inside it, and the range it covers. After all of them the same rank
 * runs an op on cuMem memory. (The op suites run every case on cuMem
 * memory: test_gpu_ops.) Without a GPU: "skipped: no GPU", exit 77. */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "gpu_testlib.h"

#ifdef SPC_HAVE_CUDA

#define MB ((size_t)1 << 20)

static spt_daemon daemon_;

static int expect(spc_client *c, const char *what, int rc, int want,
                  const char *needle) {
  if (rc == want && (needle == NULL || strstr(spc_last_error(c), needle)))
    return 0;
  fprintf(stderr, "%s: got %d (%s), want %d with '%s'\n", what, rc,
          spc_last_error(c), want, needle ? needle : "");
  return 1;
}

/* A BufRegister naming n cuMem allocations of 2 MiB on the GPU of uuid,
 * sent with the nfds descriptors fds. */
static int register_raw(spc_client *c, const void *uuid, size_t n,
                        const int *fds, int nfds) {
  uint64_t sizes[4] = {2 * MB, 2 * MB, 2 * MB, 2 * MB};
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  reg.size = 4096;
  reg.n_vmm_sizes = n;
  reg.vmm_sizes = sizes;
  reg.device_uuid.len = 16;
  reg.device_uuid.data = (uint8_t *)uuid;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  return spc__call_fds(c, &f, fds, nfds, NULL);
}

/* Too many allocations, none exportable: refused by the library itself,
 * naming why. */
static int local_refusals(spc_client *c) {
  int bad = 0;
  void *p, *q;
  spc_buffer *b;
  size_t many = (SPK_VMM_MAX_CHUNKS + 1) * 2 * MB;
  if (gpt_vmm_alloc(0, many, 2 * MB, &p) ||
      gpt_vmm_alloc_as(0, 2 * MB, 2 * MB, 0, &q))
    return 1;
  bad |= expect(c, "65 allocations in one buffer",
                spc_buffer_register_device(c, p, many, &b), SPC_EINVAL,
                "span more than 64 cuMem allocations");
  bad |= expect(c, "not exportable",
                spc_buffer_register_device(c, q, 4096, &b), SPC_EINVAL,
                "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR");
  gpt_vmm_free(p, many, 2 * MB);
  gpt_vmm_free(q, 2 * MB, 2 * MB);
  return bad;
}

/* Two buffers inside one run of mappings share its registration; a
 * buffer straddling two mappings carries both. */
static int shared(spc_client *c, uint8_t *p) {
  spc_buffer *whole, *inner;
  void *base;
  size_t size;
  long long before = gpt_stat(&daemon_, "buffers_vmm");
  int bad = expect(c, "straddling", spc_buffer_register_device(
                       c, p + 2 * MB - 512, 1024, &whole), SPC_OK, NULL);
  bad |= expect(c, "inside", spc_buffer_register_device(c, p + 2 * MB + 64,
                64, &inner), SPC_OK, NULL);
  if (bad)
    return bad;
  if (spc_buffer_device_range(inner, &base, &size) != SPC_OK ||
      base != p || size != 4 * MB ||
      gpt_stat(&daemon_, "buffers_vmm") != before + 1) {
    fprintf(stderr, "range %p + %zu (want %p + %zu), %lld registrations "
            "(want 1)\n", base, size, (void *)p, 4 * MB,
            gpt_stat(&daemon_, "buffers_vmm") - before);
    bad = 1;
  }
  spc_buffer_free(inner);
  spc_buffer_free(whole);
  return bad;
}

/* An all_gather of one rank on cuMem memory, read back. */
static int op_works(spc_client *c, uint8_t *p) {
  spc_group *g;
  spc_buffer *b;
  float in[64], out[64];
  int64_t shape[1] = {64};
  spc_tensor x, y;
  for (int i = 0; i < 64; i++)
    in[i] = (float)i;
  GPT_CUDA(cudaMemcpy(p + 2 * MB - 128, in, sizeof(in),
                      cudaMemcpyHostToDevice));
  if (spc_group_join(c, "cumem-one", 1, 0, &g) < 0 ||
      spc_buffer_register_device(c, p, 4 * MB, &b) < 0)
    return expect(c, "setup", -1, 0, NULL);
  spc_tensor_init(&x, b, 2 * MB - 128, SPC_FLOAT32, 1, shape);
  spc_tensor_init(&y, b, 3 * MB, SPC_FLOAT32, 1, shape);
  int bad = expect(c, "all_gather on cuMem memory",
                   spc_all_gather(g, &x, &y, 0, NULL), SPC_OK, NULL);
  GPT_CUDA(cudaMemcpy(out, p + 3 * MB, sizeof(out), cudaMemcpyDeviceToHost));
  if (!bad && memcmp(in, out, sizeof(in)) != 0) {
    fprintf(stderr, "all_gather on cuMem memory: wrong bytes\n");
    bad = 1;
  }
  spc_buffer_free(b);
  spc_group_leave(g);
  return bad;
}

/* n descriptors held by the daemon for a raw connection (one byte of a
 * frame that never comes whole). */
static int park(int n) {
  int s = spt_raw_connect(daemon_.socket);
  int fds[64];
  for (int i = 0; i < n; i++)
    fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int rc = s >= 0 ? spt_raw_send_fds(s, fds, n, 0) : -1;
  for (int i = 0; i < n; i++)
    close(fds[i]);
  return rc == 0 ? s : -1;
}

static void *unpark(void *arg) {
  int *socks = arg;
  usleep(200000);
  close(socks[0]);
  close(socks[1]);
  return NULL;
}

/* With this user's descriptor share (uid_max_fds_in_flight, 96) held by
 * others, a registration of 2 allocations is refused; libspclient tries
 * again, and it goes through once they are closed. */
static int waits_for_descriptors(spc_client *c, uint8_t *p) {
  int before = spt_daemon_fds(&daemon_);
  int socks[2] = {park(64), park(31)};
  pthread_t t;
  spc_buffer *b;
  /* the daemon holds them (and the two connections) before we go on */
  for (int i = 0; i < 1000 && spt_daemon_fds(&daemon_) < before + 97; i++)
    usleep(1000);
  if (socks[0] < 0 || socks[1] < 0 ||
      spt_daemon_fds(&daemon_) < before + 97 ||
      pthread_create(&t, NULL, unpark, socks) != 0)
    return expect(c, "parking 95 descriptors in the daemon", -1, 0, NULL);
  int bad = expect(c, "registration while descriptors are short",
                   spc_buffer_register_device(c, p, 4 * MB, &b), SPC_OK,
                   NULL);
  pthread_join(t, NULL);
  if (!bad)
    spc_buffer_free(b);
  return bad;
}

static int rank_main(int rank, int world, void *arg) {
  (void)rank, (void)world, (void)arg;
  struct cudaDeviceProp prop;
  GPT_CUDA(cudaSetDevice(0));
  GPT_CUDA(cudaGetDeviceProperties(&prop, 0));
  spc_client *c = spt_connect(daemon_.socket);
  uint8_t *p;
  if (c == NULL || gpt_vmm_alloc(0, 4 * MB, 2 * MB, (void **)&p))
    return 1;
  int bad = local_refusals(c);
  int memfd = memfd_create("not-cumem", MFD_CLOEXEC);
  if (memfd < 0 || ftruncate(memfd, 2 * MB) < 0)
    return 1;
  bad |= expect(c, "a memfd as cuMem memory",
                register_raw(c, prop.uuid.bytes, 1, &memfd, 1), SPC_EDEVICE,
                "cuMemImportFromShareableHandle");
  bad |= shared(c, p);
  bad |= waits_for_descriptors(c, p);
  bad |= op_works(c, p);
  /* Two allocations listed, one descriptor sent: this connection is
   * closed for it, the daemon goes on. */
  spc_client *liar = spt_connect(daemon_.socket);
  bad |= liar == NULL;
  if (liar != NULL) {
    int rc = register_raw(liar, prop.uuid.bytes, 2, &memfd, 1);
    bad |= expect(liar, "fewer descriptors than allocations", rc,
                  SPC_EPROTOCOL, "2 file descriptors but came with 1");
    spc_disconnect(liar);
  }
  bad |= op_works(c, p);
  close(memfd);
  spc_disconnect(c);
  gpt_vmm_free(p, 4 * MB, 2 * MB);
  return bad;
}

START_TEST(cumem_registrations_fail_clearly) {
  const char *const extra[] = {"--log-level", "debug", NULL};
  gpt_run_on_daemon(&daemon_, extra, 1, rank_main, NULL, 120);
}
END_TEST

int main(void) {
  gpt_require_gpu();
  Suite *s = suite_create("gpu_cumem");
  TCase *tc = tcase_create("gpu_cumem");
  tcase_set_timeout(tc, 180);
  tcase_add_test(tc, cumem_registrations_fail_clearly);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
