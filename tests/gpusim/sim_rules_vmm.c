/* The rules suite's cuMem (VMM) memory, as CUDA's driver API defines it
 * and torch's expandable segments use it: reserve, create, map back to
 * back, grant access, copy and run kernels across the seam of two
 * mappings; the pointer attributes; sharing as file descriptors with
 * another process; each entry point's error codes. The rules it breaks
 * are in sim_rules_vmm_rules.c. Registered by sim_rules.c's main. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_rules.h"

const char *const vmm_names[] = {"cuMemGetAllocationGranularity",
                                 "cuMemCreate",
                                 "cuMemRelease",
                                 "cuMemAddressReserve",
                                 "cuMemAddressFree",
                                 "cuMemMap",
                                 "cuMemUnmap",
                                 "cuMemSetAccess",
                                 "cuMemGetAccess",
                                 "cuMemRetainAllocationHandle",
                                 "cuMemGetAllocationPropertiesFromHandle",
                                 "cuMemExportToShareableHandle",
                                 "cuMemImportFromShareableHandle",
                                 "cuPointerGetAttribute",
                                 "cuMemGetAddressRange"};
#define NNAMES ((int)(sizeof(vmm_names) / sizeof(vmm_names[0])))

vmm_api vmm(void) {
  void *f[NNAMES];
  vmm_api a;
  _Static_assert(sizeof(a) == sizeof(f), "one pointer per name");
  for (int i = 0; i < NNAMES; i++) {
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(vmm_names[i], &f[i], 12000,
                                         cudaEnableDefault, &q) != 0 ||
        q != cudaDriverEntryPointSuccess || f[i] == NULL)
      die(vmm_names[i]);
  }
  memcpy(&a, f, sizeof(a));
  return a;
}

CUmemAllocationProp vmm_prop(int dev, int handle_types) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof(p));
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = (CUmemAllocationHandleType)handle_types;
  return p;
}

CUmemGenericAllocationHandle vmm_make(int dev, size_t size, int types) {
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = vmm_prop(dev, types);
  S(vmm().create(&h, size, &p, 0));
  return h;
}

void vmm_grant(CUdeviceptr p, size_t size, int dev, int flags) {
  CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, dev},
                       (CUmemAccess_flags)flags};
  S(vmm().set_access(p, size, &d, 1));
}

void vmm_pair_make(vmm_pair *t, int dev, int both) {
  vmm_api v = vmm();
  S(v.reserve(&t->base, 3 * VMM_G, 0, 0, 0));
  for (int i = 0; i < 2; i++) {
    t->h[i] = vmm_make(dev, VMM_G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    S(v.map(t->base + i * VMM_G, VMM_G, 0, t->h[i], 0));
  }
  vmm_grant(t->base, both ? 2 * VMM_G : VMM_G, dev,
            CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

/* One cuMemUnmap for both mappings (whole mappings laid back to back). */
void vmm_pair_free(vmm_pair *t) {
  vmm_api v = vmm();
  S(v.unmap(t->base, 2 * VMM_G));
  S(v.release(t->h[0]));
  S(v.release(t->h[1]));
  S(v.addr_free(t->base, 3 * VMM_G));
}

/* ---- the entry points ------------------------------------------------------
 * Found under their plain names in libcuda.so.1 (cuda.h maps none of
 * them to a versioned one), the same through the runtime's entry point
 * query with its _v2 attempt (torch's way). */
START_TEST(vmm_entry_points_resolve) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ck_assert_ptr_nonnull(h);
  vmm_api a = vmm();
  void *f[NNAMES];
  memcpy(f, &a, sizeof(a));
  for (int i = 0; i < NNAMES - 1; i++) /* cuMemGetAddressRange: _v2 */
    ck_assert_msg(dlsym(h, vmm_names[i]) == f[i], "%s", vmm_names[i]);
  size_t g = 0;
  CUmemAllocationProp p = vmm_prop(1, 0);
  OK(a.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  ck_assert_uint_eq(g, VMM_G);
  OK(a.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  ck_assert_uint_eq(g, VMM_G);
  ck_assert_int_eq(a.granularity(&g, &p, 7), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(a.granularity(&g, NULL, 0), CUDA_ERROR_INVALID_VALUE);
  p.location.id = 99;
  ck_assert_int_eq(a.granularity(&g, &p, 0), CUDA_ERROR_INVALID_DEVICE);
  p.location.type = CU_MEM_LOCATION_TYPE_HOST;
  ck_assert_int_eq(a.granularity(&g, &p, 0), CUDA_ERROR_INVALID_VALUE);
  int vmm_ok = 0, fd_ok = 0;
  OK(drv().attr(&vmm_ok,
                CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  OK(drv().attr(&fd_ok,
                CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                0));
  ck_assert(vmm_ok && fd_ok);
}
END_TEST

/* ---- mapping, access and copies ------------------------------------------ */

static void fill(unsigned char *b, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(i * 31 + (size_t)seed);
}

/* A copy in and out of 1 MiB straddling the seam of two mappings, the
 * plan kernel reading 64 bytes across it, then an async device-to-device
 * copy there under SPCSIM_FORBID_PAGEABLE_ASYNC=1 (a span of mappings is
 * device memory, not pageable host memory). Then everything undone: the
 * leak report at exit would fail the test otherwise. */
START_TEST(vmm_copies_across_two_mappings) {
  enum { N = 1 << 20 };
  vmm_pair t;
  vmm_pair_make(&t, 0, 1);
  unsigned char *in = malloc(N), *out = malloc(N);
  ck_assert(in != NULL && out != NULL);
  fill(in, N, 5);
  unsigned char *seam = (unsigned char *)(uintptr_t)t.base + VMM_G - N / 2;
  OK(cudaMemcpy(seam, in, N, cudaMemcpyHostToDevice));
  OK(cudaMemcpy(out, seam, N, cudaMemcpyDeviceToHost));
  ck_assert_int_eq(memcmp(in, out, N), 0);
  void *descs, *dst;
  cudaStream_t s;
  OK(cudaMalloc(&descs, 4096));
  OK(cudaMalloc(&dst, 64));
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  queue_copy(descs, seam + N / 2 - 32, dst, s);
  OK(cudaStreamSynchronize(s));
  OK(cudaMemcpy(out, dst, 64, cudaMemcpyDeviceToHost));
  ck_assert_int_eq(memcmp(out, in + N / 2 - 32, 64), 0);
  setenv("SPCSIM_FORBID_PAGEABLE_ASYNC", "1", 1);
  OK(cudaMemcpyAsync(seam + N / 2 - 16, dst, 64, cudaMemcpyDeviceToDevice, s));
  OK(cudaStreamSynchronize(s));
  OK(cudaMemcpy(out, seam + N / 2 - 16, 64, cudaMemcpyDeviceToHost));
  ck_assert_int_eq(memcmp(out, in + N / 2 - 32, 64), 0);
  OK(cudaStreamDestroy(s));
  OK(cudaFree(descs));
  OK(cudaFree(dst));
  vmm_pair_free(&t);
  free(in);
  free(out);
}
END_TEST

static void CUDART_CB hold(void *arg) {
  usleep(100 * 1000); /* keeps the copy queued; not a timing check */
  *(volatile int *)arg = 1;
}

/* cuMemUnmap is synchronous: a copy out of the mappings, held behind a
 * host function, runs before the range goes back to its reservation. */
START_TEST(vmm_unmap_waits_for_queued_work) {
  vmm_pair t;
  vmm_pair_make(&t, 0, 1);
  unsigned char in[4096], out[4096];
  volatile int held = 0;
  void *dst;
  cudaStream_t s;
  fill(in, sizeof(in), 3);
  char *seam = (char *)(uintptr_t)t.base + VMM_G - sizeof(in) / 2;
  OK(cudaMemcpy(seam, in, sizeof(in), cudaMemcpyHostToDevice));
  OK(cudaMalloc(&dst, sizeof(in)));
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaLaunchHostFunc(s, hold, (void *)&held));
  OK(cudaMemcpyAsync(dst, seam, sizeof(in), cudaMemcpyDeviceToDevice, s));
  OK(vmm().unmap(t.base, 2 * VMM_G));
  ck_assert_msg(held == 1, "cuMemUnmap returned before queued work ran");
  OK(cudaMemcpy(out, dst, sizeof(out), cudaMemcpyDeviceToHost));
  ck_assert_int_eq(memcmp(in, out, sizeof(in)), 0);
  OK(vmm().release(t.h[0]));
  OK(vmm().release(t.h[1]));
  OK(vmm().addr_free(t.base, 3 * VMM_G));
  OK(cudaStreamDestroy(s));
  OK(cudaFree(dst));
}
END_TEST

/* Memory in use counts each allocation once, until its last reference
 * (handle or mapping) goes; an import of it in the same process is the
 * same allocation, the same handle. */
START_TEST(vmm_memory_lives_while_mapped_or_held) {
  vmm_api v = vmm();
  size_t free0, free1, total;
  CUdeviceptr b;
  OK(cudaMemGetInfo(&free0, &total));
  CUmemGenericAllocationHandle h = vmm_make(
                                   0, 2 * VMM_G,
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                               h2;
  OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free0 - free1, 2 * VMM_G);
  int fd = -1;
  OK(v.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  OK(v.import_fd(&h2, (void *)(uintptr_t)fd,
                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  ck_assert_int_eq(close(fd), 0);
  ck_assert(h2 == h);
  OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free0 - free1, 2 * VMM_G);
  OK(v.reserve(&b, 2 * VMM_G, 0, 0, 0));
  OK(v.map(b, 2 * VMM_G, 0, h, 0));
  vmm_grant(b, 2 * VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  OK(cudaMemset((void *)(uintptr_t)b, 0x7e, 2 * VMM_G));
  OK(v.release(h));
  OK(v.release(h2)); /* no handle left: the mapping holds it */
  unsigned char byte = 0;
  OK(cudaMemcpy(&byte, (char *)(uintptr_t)b + 2 * VMM_G - 1, 1,
                cudaMemcpyDeviceToHost));
  ck_assert_int_eq(byte, 0x7e);
  OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free0 - free1, 2 * VMM_G);
  /* The handle the memory was mapped with, retained from an address. */
  OK(v.retain(&h2, (char *)(uintptr_t)b + 12345));
  ck_assert(h2 == h);
  OK(v.unmap(b, 2 * VMM_G));
  OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free0 - free1, 2 * VMM_G);
  OK(v.release(h2));
  OK(cudaMemGetInfo(&free1, &total));
  ck_assert_uint_eq(free1, free0);
  OK(v.addr_free(b, 2 * VMM_G));
}
END_TEST

/* ---- pointer attributes ----------------------------------------------------
 */

static unsigned long long attr_u64(CUpointer_attribute a, CUdeviceptr p) {
  unsigned long long v = 0;
  OK(vmm().attr(&v, a, p));
  return v;
}

static unsigned attr_u32(CUpointer_attribute a, CUdeviceptr p) {
  unsigned v = 0;
  OK(vmm().attr(&v, a, p));
  return v;
}

/* cuMem memory of GPU 1 (the current device is 0), one allocation mapped
 * twice, another once, plus cudaMalloc memory to compare. */
START_TEST(vmm_pointer_attributes) {
  vmm_api v = vmm();
  CUdeviceptr b, base = 0;
  size_t size = 0;
  OK(cudaSetDevice(0));
  OK(v.reserve(&b, 8 * VMM_G, 0, 0, 0));
  CUmemGenericAllocationHandle h =
      vmm_make(1, 2 * VMM_G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle o = vmm_make(1, VMM_G, 0);
  OK(v.map(b, 2 * VMM_G, 0, h, 0));
  OK(v.map(b + 4 * VMM_G, VMM_G, VMM_G, h, 0)); /* its second half */
  OK(v.map(b + 6 * VMM_G, VMM_G, 0, o, 0));
  CUdeviceptr in = b + VMM_G + 100, twin = b + 4 * VMM_G;
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, in),
                    CU_MEMORYTYPE_DEVICE);
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, in), 1);
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_IS_MANAGED, in), 0);
  CUcontext ctx;
  ck_assert_int_eq(v.attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, in),
                   CUDA_ERROR_INVALID_VALUE);
  ck_assert_uint_eq(
      attr_u32(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, in), 0);
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_MAPPED, in), 1);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, in), b);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, in), 2 * VMM_G);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, in), b);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_SIZE, in), 8 * VMM_G);
  OK(v.range(&base, &size, in));
  ck_assert(base == b && size == 2 * VMM_G);
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, in),
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  ck_assert_uint_eq(
      attr_u32(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, b + 6 * VMM_G), 0);
  /* One physical allocation, two mappings: one block, two buffers. */
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, in),
                    attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, twin));
  ck_assert_uint_ne(attr_u64(CU_POINTER_ATTRIBUTE_BUFFER_ID, in),
                    attr_u64(CU_POINTER_ATTRIBUTE_BUFFER_ID, twin));
  ck_assert_uint_ne(
      attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, in),
      attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, b + 6 * VMM_G));
  /* Reserved, not mapped: MAPPED 0, the reservation's range, no more. */
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_MAPPED, b + 3 * VMM_G), 0);
  ck_assert_uint_eq(
      attr_u64(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 3 * VMM_G), b);
  unsigned type;
  ck_assert_int_eq(
      v.attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b + 3 * VMM_G),
      CUDA_ERROR_INVALID_VALUE);
  /* Another allocation at the same address: another block. */
  unsigned long long block = attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, b);
  OK(v.unmap(b, 2 * VMM_G));
  CUmemGenericAllocationHandle n = vmm_make(1, 2 * VMM_G, 0);
  OK(v.map(b, 2 * VMM_G, 0, n, 0));
  ck_assert_uint_ne(attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, b), block);
  /* cudaMalloc memory: legacy IPC capable, its own mapping. */
  void *d;
  OK(cudaMalloc(&d, 3000));
  CUdeviceptr dp = dptr(d);
  ck_assert_uint_eq(
      attr_u32(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, dp + 5), 1);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, dp + 5),
                    dp);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, dp + 5), 3000);
  ck_assert_uint_eq(attr_u32(CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, dp), 0);
  ck_assert_uint_eq(attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, dp),
                    attr_u64(CU_POINTER_ATTRIBUTE_BUFFER_ID, dp));
  OK(cudaFree(d));
  OK(v.unmap(b, 2 * VMM_G));
  OK(v.unmap(b + 4 * VMM_G, VMM_G));
  OK(v.unmap(b + 6 * VMM_G, VMM_G));
  OK(v.release(h));
  OK(v.release(o));
  OK(v.release(n));
  OK(v.addr_free(b, 8 * VMM_G));
}
END_TEST

/* ---- sharing with another process ----------------------------------------
 * The allocation goes as a file descriptor over a Unix socket
 * (SCM_RIGHTS), to a process forked before it existed: the importer maps
 * it and sees the creator's bytes, and the creator sees its answer. */

static void send_fd(int sock, int fd) {
  char c = 'f';
  struct iovec io = {&c, 1};
  char ctl[CMSG_SPACE(sizeof(int))];
  struct msghdr msg = {.msg_iov = &io,
                       .msg_iovlen = 1,
                       .msg_control = ctl,
                       .msg_controllen = sizeof(ctl)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  if (sendmsg(sock, &msg, 0) != 1)
    die("sendmsg of a descriptor");
}

static int recv_fd(int sock) {
  char c, ctl[CMSG_SPACE(sizeof(int))];
  struct iovec io = {&c, 1};
  struct msghdr msg = {.msg_iov = &io,
                       .msg_iovlen = 1,
                       .msg_control = ctl,
                       .msg_controllen = sizeof(ctl)};
  int fd = -1;
  struct cmsghdr *cm = recvmsg(sock, &msg, 0) == 1 ? CMSG_FIRSTHDR(&msg) : NULL;
  if (cm == NULL || cm->cmsg_type != SCM_RIGHTS)
    die("recvmsg of a descriptor");
  memcpy(&fd, CMSG_DATA(cm), sizeof(int));
  return fd;
}

/* The importer: maps what it receives, checks the pattern, writes its
 * answer at the start, undoes everything and exits (leak report on). */
static void importer(int sock) {
  vmm_api v = vmm();
  unsigned char want[4096], got[4096];
  CUmemGenericAllocationHandle h;
  CUdeviceptr b;
  int fd = recv_fd(sock);
  S(v.import_fd(&h, (void *)(uintptr_t)fd,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  S(close(fd)); /* the handle holds the memory, as CUDA's does */
  S(v.reserve(&b, 2 * VMM_G, 0, 0, 0));
  S(v.map(b, 2 * VMM_G, 0, h, 0));
  vmm_grant(b, 2 * VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  fill(want, sizeof(want), 9);
  S(cudaMemcpy(got, (char *)(uintptr_t)b + VMM_G, sizeof(got),
               cudaMemcpyDeviceToHost));
  if (memcmp(got, want, sizeof(got)) != 0)
    die("the importer does not see the creator's bytes");
  fill(want, sizeof(want), 11);
  S(cudaMemcpy((void *)(uintptr_t)b, want, sizeof(want),
               cudaMemcpyHostToDevice));
  S(v.unmap(b, 2 * VMM_G));
  S(v.release(h));
  S(v.addr_free(b, 2 * VMM_G));
  exit(0);
}

START_TEST(vmm_shared_with_another_process) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  fflush(NULL);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    importer(sv[1]);
  }
  close(sv[1]);
  vmm_api v = vmm();
  CUdeviceptr b;
  unsigned char buf[4096], want[4096];
  CUmemGenericAllocationHandle h =
      vmm_make(0, 2 * VMM_G, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  OK(v.reserve(&b, 2 * VMM_G, 0, 0, 0));
  OK(v.map(b, 2 * VMM_G, 0, h, 0));
  vmm_grant(b, 2 * VMM_G, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  fill(buf, sizeof(buf), 9);
  OK(cudaMemcpy((char *)(uintptr_t)b + VMM_G, buf, sizeof(buf),
                cudaMemcpyHostToDevice));
  int fd = -1;
  OK(v.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  send_fd(sv[0], fd);
  ck_assert_int_eq(close(fd), 0);
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the importer failed (status 0x%x)", st);
  fill(want, sizeof(want), 11);
  OK(cudaMemcpy(buf, (void *)(uintptr_t)b, sizeof(buf),
                cudaMemcpyDeviceToHost));
  ck_assert_int_eq(memcmp(buf, want, sizeof(buf)), 0);
  OK(v.unmap(b, 2 * VMM_G));
  OK(v.release(h));
  OK(v.addr_free(b, 2 * VMM_G));
  close(sv[0]);
}
END_TEST

/* What may not be exported or imported, as error codes. */
START_TEST(vmm_sharing_errors) {
  vmm_api v = vmm();
  CUmemGenericAllocationHandle none = vmm_make(0, VMM_G, 0), h;
  int fd = -1, p[2];
  ck_assert_int_eq(
      v.export_fd(&fd, none, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_ERROR_INVALID_VALUE);
  CUmemFabricHandle fab;
  ck_assert_int_eq(v.export_fd(&fab, none, CU_MEM_HANDLE_TYPE_FABRIC, 0),
                   CUDA_ERROR_NOT_SUPPORTED);
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(v.import_fd(&h, (void *)(uintptr_t)p[0],
                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.import_fd(&h, (void *)(uintptr_t)-1,
                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                   CUDA_ERROR_INVALID_VALUE);
  close(p[0]);
  close(p[1]);
  CUmemAllocationProp got;
  OK(v.props(&got, none));
  ck_assert(got.type == CU_MEM_ALLOCATION_TYPE_PINNED &&
            got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            got.location.id == 0 && got.requestedHandleTypes == 0);
  OK(v.release(none));
  ck_assert_int_eq(v.props(&got, none), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

/* ---- argument errors -------------------------------------------------------
 */

START_TEST(vmm_argument_errors) {
  vmm_api v = vmm();
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp p = vmm_prop(0, 0);
  ck_assert_int_eq(v.create(&h, VMM_G + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.create(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.create(&h, VMM_G, &p, 1), CUDA_ERROR_INVALID_VALUE);
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  ck_assert_int_eq(v.create(&h, VMM_G, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  p.requestedHandleTypes = (CUmemAllocationHandleType)0x100;
  ck_assert_int_eq(v.create(&h, VMM_G, &p, 0), CUDA_ERROR_INVALID_VALUE);
  p = vmm_prop(42, 0);
  ck_assert_int_eq(v.create(&h, VMM_G, &p, 0), CUDA_ERROR_INVALID_DEVICE);
  p = vmm_prop(0, 0);
  p.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  ck_assert_int_eq(v.create(&h, VMM_G, &p, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr b, c;
  ck_assert_int_eq(v.reserve(&b, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.reserve(&b, VMM_G, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
  OK(v.reserve(&b, 4 * VMM_G, 4 * VMM_G, 0, 0));
  ck_assert_uint_eq(b % (4 * VMM_G), 0);
  OK(v.reserve(&c, VMM_G, 0, b + 8 * VMM_G, 0)); /* a hint, taken if free */
  ck_assert_uint_eq(c % VMM_G, 0);
  ck_assert_int_eq(v.addr_free(c, 2 * VMM_G), CUDA_ERROR_INVALID_VALUE);
  OK(v.addr_free(c, VMM_G));
  ck_assert_int_eq(v.addr_free(c, VMM_G), CUDA_ERROR_INVALID_VALUE);
  h = vmm_make(0, 2 * VMM_G, 0);
  ck_assert_int_eq(v.map(b + 3 * VMM_G, 2 * VMM_G, 0, h, 0),
                   CUDA_ERROR_INVALID_VALUE); /* past the reservation */
  ck_assert_int_eq(v.map(b + 4096, VMM_G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.map(b, VMM_G, 2 * VMM_G, h, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.map(b, VMM_G, 0, h + 1, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.map(b, VMM_G, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
  OK(v.map(b, 2 * VMM_G, 0, h, 0));
  ck_assert_int_eq(v.map(b + VMM_G, VMM_G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.unmap(b, VMM_G), CUDA_ERROR_INVALID_VALUE); /* half */
  ck_assert_int_eq(v.unmap(b + 2 * VMM_G, VMM_G), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                       CU_MEM_ACCESS_FLAGS_PROT_READ};
  ck_assert_int_eq(v.set_access(b, 3 * VMM_G, &d, 1), CUDA_ERROR_INVALID_VALUE);
  ck_assert_int_eq(v.set_access(b, 2 * VMM_G, &d, 0), CUDA_ERROR_INVALID_VALUE);
  d.location.id = 42;
  ck_assert_int_eq(v.set_access(b, 2 * VMM_G, &d, 1),
                   CUDA_ERROR_INVALID_DEVICE);
  d.location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST, 0};
  ck_assert_int_eq(v.set_access(b, 2 * VMM_G, &d, 1), CUDA_ERROR_INVALID_VALUE);
  d = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, 1}, (CUmemAccess_flags)2};
  ck_assert_int_eq(v.set_access(b, 2 * VMM_G, &d, 1), CUDA_ERROR_INVALID_VALUE);
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  OK(v.set_access(b, 2 * VMM_G, &d, 1));
  unsigned long long f = 9;
  OK(v.get_access(&f, &d.location, b + 5));
  ck_assert_uint_eq(f, CU_MEM_ACCESS_FLAGS_PROT_READ);
  d.location.id = 0;
  OK(v.get_access(&f, &d.location, b + 5));
  ck_assert_uint_eq(f, CU_MEM_ACCESS_FLAGS_PROT_NONE);
  ck_assert_int_eq(v.get_access(&f, &d.location, b + 2 * VMM_G),
                   CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle r;
  ck_assert_int_eq(v.retain(&r, (void *)(uintptr_t)(b + 2 * VMM_G)),
                   CUDA_ERROR_INVALID_VALUE);
  OK(v.unmap(b, 2 * VMM_G));
  OK(v.release(h));
  OK(v.addr_free(b, 4 * VMM_G));
}
END_TEST

void sim_rules_vmm(TCase *tc) {
  tcase_add_test(tc, vmm_entry_points_resolve);
  tcase_add_test(tc, vmm_copies_across_two_mappings);
  tcase_add_test(tc, vmm_unmap_waits_for_queued_work);
  tcase_add_test(tc, vmm_memory_lives_while_mapped_or_held);
  tcase_add_test(tc, vmm_pointer_attributes);
  tcase_add_test(tc, vmm_shared_with_another_process);
  tcase_add_test(tc, vmm_sharing_errors);
  tcase_add_test(tc, vmm_argument_errors);
  sim_rules_vmm_rules(tc);
}
