/* The rules suite's misuse of cuMem (VMM) memory, each rule's scenario
 * in a child that must die naming it; the calls that may block (rule
 * host-sync); the leak report; GPUs without peer access; and legacy CUDA
 * IPC (memory and events) across PID namespaces, which CUDA refuses.
 * Registered by sim_rules_vmm.c. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_rules.h"

/* One 2 MiB allocation of GPU 0 mapped at the start of a 4 MiB
 * reservation, no access granted yet. */
static CUdeviceptr one_mapped(CUmemGenericAllocationHandle *h) {
  CUdeviceptr b;
  S(vmm().reserve(&b, 2 * VMM_G, 0, 0, 0));
  *h = vmm_make(0, VMM_G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  S(vmm().map(b, VMM_G, 0, *h, 0));
  return b;
}

/* ---- the rules ------------------------------------------------------------
 */

static void free_mapped(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  vmm().addr_free(b, 2 * VMM_G);
}

static void release_twice(void) {
  CUmemGenericAllocationHandle h = vmm_make(0, VMM_G, 0);
  S(vmm().release(h));
  vmm().release(h);
}

START_TEST(vmm_rules) {
  ck_assert(rejected(free_mapped, "vmm-free-mapped"));
  ck_assert(rejected(release_twice, "vmm-release-unknown"));
}
END_TEST

/* Mapped memory is reachable from no GPU until cuMemSetAccess. */
static void copy_before_access(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  char x[64] = {0};
  cudaMemcpy((void *)(uintptr_t)b, x, sizeof(x), cudaMemcpyHostToDevice);
}

/* Access revoked (PROT_NONE) is access gone. */
static void copy_after_revoke(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  char x[64] = {0};
  vmm_grant(b, VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  S(cudaMemcpy((void *)(uintptr_t)b, x, sizeof(x), cudaMemcpyHostToDevice));
  vmm_grant(b, VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  cudaMemcpy(x, (void *)(uintptr_t)b, sizeof(x), cudaMemcpyDeviceToHost);
}

/* GPU 1 writes memory granted to GPU 0 only (a stream memory op). */
static void write_from_other_gpu(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  cudaStream_t s;
  vmm_grant(b, VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  S(cudaSetDevice(1));
  S(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  drv().write32((CUstream)s, b, 1, 0);
  cudaStreamSynchronize(s);
}

/* The plan kernel reads 64 bytes across two mappings, the second never
 * granted: the whole range is checked, not its first mapping. */
static void kernel_across_half_granted(void) {
  vmm_pair t;
  void *descs, *dst;
  cudaStream_t s;
  vmm_pair_make(&t, 0, 0);
  S(cudaMalloc(&descs, 4096));
  S(cudaMalloc(&dst, 64));
  S(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  queue_copy(descs, (char *)(uintptr_t)t.base + VMM_G - 32, dst, s);
  cudaStreamSynchronize(s);
}

START_TEST(vmm_access_needs_set_access) {
  ck_assert(rejected(copy_before_access, "access-from-device"));
  ck_assert(rejected(copy_after_revoke, "access-from-device"));
  ck_assert(rejected(write_from_other_gpu, "access-from-device"));
  ck_assert(rejected(kernel_across_half_granted, "access-from-device"));
}
END_TEST

static void legacy_handle_of_vmm(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  cudaIpcMemHandle_t ih;
  vmm_grant(b, VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  cudaIpcGetMemHandle(&ih, (void *)(uintptr_t)b);
}

static void munmap_mapping(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  munmap((void *)(uintptr_t)b, VMM_G);
}

static void munmap_reservation(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  munmap((void *)(uintptr_t)(b + VMM_G), VMM_G); /* the unmapped half */
}

START_TEST(vmm_memory_is_not_legacy_or_host_memory) {
  ck_assert(rejected(legacy_handle_of_vmm, "ipc-handle-not-base"));
  ck_assert(rejected(munmap_mapping, "unmap-device-memory"));
  ck_assert(rejected(munmap_reservation, "unmap-device-memory"));
}
END_TEST

/* ---- host-sync --------------------------------------------------------------
 * The calls that may block (cudrv_vmm.c says why), flagged on the main
 * thread of a program that must not block, passing elsewhere. */

static void forbid(void) { setenv("SPCSIM_FORBID_SYNC", "1", 1); }

static void b_create(void) {
  forbid();
  vmm_make(0, VMM_G, 0);
}

static void b_release(void) {
  CUmemGenericAllocationHandle h = vmm_make(0, VMM_G, 0);
  forbid();
  vmm().release(h);
}

static void b_map(void) {
  CUdeviceptr b;
  CUmemGenericAllocationHandle h = vmm_make(0, VMM_G, 0);
  S(vmm().reserve(&b, VMM_G, 0, 0, 0));
  forbid();
  vmm().map(b, VMM_G, 0, h, 0);
}

static void b_set_access(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  forbid();
  vmm_grant(b, VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static void b_unmap(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  forbid();
  vmm().unmap(b, VMM_G);
}

static void b_addr_free(void) {
  CUdeviceptr b;
  S(vmm().reserve(&b, VMM_G, 0, 0, 0));
  forbid();
  vmm().addr_free(b, VMM_G);
}

static const blocking_case blocking[] = {
    {"cuMemCreate", b_create}, {"cuMemRelease", b_release},
    {"cuMemMap", b_map},       {"cuMemSetAccess", b_set_access},
    {"cuMemUnmap", b_unmap},   {"cuMemAddressFree", b_addr_free},
};
#define NBLOCKING ((int)(sizeof(blocking) / sizeof(blocking[0])))

START_TEST(vmm_host_sync) {
  ck_assert_msg(rejected(blocking[_i].scenario, "host-sync"),
                "%s on the main thread was not flagged", blocking[_i].call);
}
END_TEST

START_TEST(vmm_blocking_calls_off_the_main_thread) {
  ck_assert_int_eq(blocking_elsewhere(blocking, NBLOCKING), 0);
}
END_TEST

/* ---- leaks ------------------------------------------------------------------
 * A process that exits holding a mapping, a handle and a reservation is
 * told so, and fails (SPCSIM_LEAKS_FATAL). */
START_TEST(vmm_leaks_reported) {
  char path[] = "/tmp/spcsim-vmm-leak-XXXXXX";
  int fd;
  pid_t pid = child_start(path, &fd);
  if (pid == 0) {
    CUmemGenericAllocationHandle h;
    setenv("SPCSIM_LEAKS_FATAL", "1", 1);
    one_mapped(&h);
    exit(0);
  }
  char buf[4096];
  int st = child_reap(pid, fd, path, buf, sizeof(buf));
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 98,
                "status 0x%x, said:\n%s", st, buf);
  ck_assert_msg(strstr(buf, "leak: cuMemMap mapping of 2097152 bytes") &&
                    strstr(buf, "leak: cuMemCreate handle") &&
                    strstr(buf, "leak: cuMemAddressReserve range of 4194304"),
                "%s", buf);
}
END_TEST

/* ---- topology
 * ----------------------------------------------------------------- GPUs 0 and
 * 1 without peer access (SPCSIM_NO_PEER=0-1, run anew): GPU 1 may not be
 * granted GPU 0's memory, and a refused call grants nothing; GPU 2 may. */
int vmm_no_peer_checks(void) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr b = one_mapped(&h);
  CUmemAccessDesc d[2] = {
      {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
      {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE}};
  unsigned long long f = 9;
  vmm_api v = vmm();
  int bad = expect("cuMemSetAccess(GPU 0 and 1)", v.set_access(b, VMM_G, d, 2),
                   CUDA_ERROR_INVALID_DEVICE) +
            expect("cuMemGetAccess(GPU 0)", v.get_access(&f, &d[0].location, b),
                   CUDA_SUCCESS) +
            expect("GPU 0's access after the refusal", (int)f, 0);
  d[1].location.id = 2;
  bad += expect("cuMemSetAccess(GPU 0 and 2)", v.set_access(b, VMM_G, d, 2),
                CUDA_SUCCESS) +
         expect("cuMemUnmap", v.unmap(b, VMM_G), CUDA_SUCCESS) +
         expect("cuMemRelease", v.release(h), CUDA_SUCCESS) +
         expect("cuMemAddressFree", v.addr_free(b, 2 * VMM_G), CUDA_SUCCESS);
  return bad ? 1 : 0;
}

START_TEST(vmm_gpus_without_peer_access) {
  ck_assert_msg(run_anew("SPCSIM_NO_PEER", "0-1", "vmmnopeer") == 0,
                "the cuMem checks of GPUs without peer access failed");
}
END_TEST

/* ---- legacy CUDA IPC across PID namespaces ----------------------------------
 * A handle opens in another process of the exporter's PID namespace, and
 * fails with cudaErrorMapBufferObjectFailed in a process of another one
 * (a trainer in a container of its own): memory and events alike. The
 * checks return the open's error code as their exit status. */

static cudaIpcMemHandle_t mem_h;
static cudaIpcEventHandle_t ev_h;

static int open_mem(void) {
  void *q;
  int rc = cudaIpcOpenMemHandle(&q, mem_h, cudaIpcMemLazyEnablePeerAccess);
  if (rc == cudaSuccess && cudaIpcCloseMemHandle(q) != cudaSuccess)
    return 254;
  return rc;
}

static int open_event(void) {
  cudaEvent_t e;
  int rc = cudaIpcOpenEventHandle(&e, ev_h);
  if (rc == cudaSuccess && cudaEventDestroy(e) != cudaSuccess)
    return 254;
  return rc;
}

/* checks' exit status, run by the first process of a new PID namespace
 * (its init); 250 when there is none (unshare needs CAP_SYS_ADMIN). */
static int in_new_pid_namespace(int (*checks)(void)) {
  fflush(NULL);
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) {
    if (unshare(CLONE_NEWPID) != 0) {
      fprintf(stderr,
              "unshare(CLONE_NEWPID): %s: this test needs root "
              "(CAP_SYS_ADMIN); it fails without\n",
              strerror(errno));
      _exit(250);
    }
    pid_t init = fork();
    if (init == 0)
      _exit(checks());
    int st = 0;
    if (init < 0 || waitpid(init, &st, 0) != init)
      _exit(251);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 252);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(p, &st, 0), p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(legacy_ipc_across_pid_namespaces) {
  void *p;
  cudaEvent_t e;
  OK(cudaMalloc(&p, 1 << 16));
  OK(cudaIpcGetMemHandle(&mem_h, p));
  OK(cudaEventCreateWithFlags(&e,
                              cudaEventInterprocess | cudaEventDisableTiming));
  OK(cudaIpcGetEventHandle(&ev_h, e));
  ck_assert_int_eq(in_child(open_mem), cudaSuccess);
  ck_assert_int_eq(in_child(open_event), cudaSuccess);
  int m = in_new_pid_namespace(open_mem);
  ck_assert_msg(m != 250, "no PID namespace could be made (stderr says why)");
  ck_assert_int_eq(m, cudaErrorMapBufferObjectFailed);
  ck_assert_int_eq(in_new_pid_namespace(open_event),
                   cudaErrorMapBufferObjectFailed);
  OK(cudaEventDestroy(e));
  OK(cudaFree(p));
}
END_TEST

void sim_rules_vmm_rules(TCase *tc) {
  tcase_add_test(tc, vmm_rules);
  tcase_add_test(tc, vmm_access_needs_set_access);
  tcase_add_test(tc, vmm_memory_is_not_legacy_or_host_memory);
  tcase_add_loop_test(tc, vmm_host_sync, 0, NBLOCKING);
  tcase_add_test(tc, vmm_blocking_calls_off_the_main_thread);
  tcase_add_test(tc, vmm_leaks_reported);
  tcase_add_test(tc, vmm_gpus_without_peer_access);
  tcase_add_test(tc, legacy_ipc_across_pid_namespaces);
}
