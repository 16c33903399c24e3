/* The rules suite's helpers (sim_rules.c), shared with its parts in
 * other files (sim_rules_memops.c). */
#ifndef SIM_RULES_H
#define SIM_RULES_H

#include <check.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OK(call) ck_assert_int_eq((int)(call), 0)

/* Fork a child whose stderr goes to a new file made from the template
 * path (mkstemp); both get its fd (the child's stderr is it). Read and
 * remove it with child_reap. */
pid_t child_start(char *path, int *fd_p);
/* Run scenario in a child with stderr in a file; 1 when it died of
 * SIGABRT after a line naming `rule`. */
int rejected(void (*scenario)(void), const char *rule);
/* Wait for child pid whose stderr went to fd (the temp file path): its
 * wait status; what it wrote is in buf (len bytes at most, ended), the
 * file closed and removed. */
int child_reap(pid_t pid, int fd, const char *path, char *buf, size_t len);
/* A scenario's setup failed: exit 3, saying what. */
void die(const char *what) __attribute__((noreturn));
#define S(call)                                                                \
  do {                                                                         \
    if ((call) != 0)                                                           \
      die(#call);                                                              \
  } while (0)
/* 0 when got is want, else 1, said on stderr. */
int expect(const char *what, int got, int want);
/* Run checks in a child process; its exit status (0: all held). */
int in_child(int (*checks)(void));

/* A call that may block the host on the GPU, and a scenario that makes it
 * (its setup first; forbid() just before the call). */
typedef struct {
  const char *call;
  void (*scenario)(void);
} blocking_case;
/* Every scenario of cases[0..n), run in a child on a thread other than
 * its main one, where rule host-sync lets them be: 0 when they all
 * passed (sim_rules_block.c). */
int blocking_elsewhere(const blocking_case *cases, int n);
/* The exit status of this program run anew with var=value, running only
 * the checks named `checks` (main's SIM_RULES_CHECKS). */
int run_anew(const char *var, const char *value, const char *checks);

/* The driver entry points the tests call, looked up in libcuda.so.1 the
 * way libspclient does (the suite links only the runtime); a missing one
 * is a failed setup (die). */
typedef struct {
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*ctx_sync)(void);
  CUresult (*stream_query)(CUstream);
  CUresult (*event_create)(CUevent *, unsigned);
  CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
  CUresult (*write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  CUresult (*write64)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  CUresult (*wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  CUresult (*wait64)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  CUresult (*batch)(CUstream, unsigned, CUstreamBatchMemOpParams *, unsigned);
} drv_api;
drv_api drv(void);

/* The address of a pointer as the driver takes it. */
static inline CUdeviceptr dptr(const void *p) {
  return (CUdeviceptr)(uintptr_t)p;
}

/* Stream order: a host function A (hold_a) holds its stream until go;
 * B (note_b), queued on another stream after A, notes whether A had
 * finished. ran_within: whether B ran within ms while A held. */
typedef struct {
  int go, a_done, b_ran, b_saw;
} order_t;
void CUDART_CB hold_a(void *arg);
void CUDART_CB note_b(void *arg);
int ran_within(order_t *o, int ms);

/* Queue on s the plan kernel (nvcc's own object, run by the simulator's
 * host build of the same source) copying 64 bytes src -> dst, its
 * descriptor uploaded to descs (device memory) first. */
void queue_copy(void *descs, void *src, void *dst, cudaStream_t s);

/* ---- cuMem (VMM) memory: sim_rules_vmm.c, sim_rules_vmm_rules.c ---------
 * The driver's virtual memory management entry points, found as torch
 * finds them (cudaGetDriverEntryPointByVersion, CUDA 12 ABI); a missing
 * one is a failed setup (die). */
typedef struct {
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *,
                          CUmemAllocationGranularity_flags);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
                     const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                      unsigned long long);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                  unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*get_access)(unsigned long long *, const CUmemLocation *,
                         CUdeviceptr);
  CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
  CUresult (*props)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
  CUresult (*export_fd)(void *, CUmemGenericAllocationHandle,
                        CUmemAllocationHandleType, unsigned long long);
  CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *,
                        CUmemAllocationHandleType);
  CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr);
  CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
} vmm_api;
extern const char *const vmm_names[]; /* in vmm_api's order */
vmm_api vmm(void);
#define VMM_G ((size_t)2 << 20) /* the granularity */
/* Pinned memory of GPU dev, exportable as the given handle types. */
CUmemAllocationProp vmm_prop(int dev, int handle_types);
/* A cuMemCreate allocation of size bytes on dev (die on failure). */
CUmemGenericAllocationHandle vmm_make(int dev, size_t size, int handle_types);
/* cuMemSetAccess of [p, p+size) for GPU dev with flags (die). */
void vmm_grant(CUdeviceptr p, size_t size, int dev, int flags);
/* Two 2 MiB allocations of GPU dev mapped back to back at the start of
 * a 6 MiB reservation, granted to GPU dev (both when both, else only the
 * first); and undoing all of it. */
typedef struct {
  CUdeviceptr base;
  CUmemGenericAllocationHandle h[2];
} vmm_pair;
void vmm_pair_make(vmm_pair *t, int dev, int both);
void vmm_pair_free(vmm_pair *t);
void sim_rules_vmm(TCase *tc);
void sim_rules_vmm_rules(TCase *tc);
int vmm_no_peer_checks(void);

/* sim_rules_memops.c: its tests, and its checks run anew without stream
 * memory operations. */
void sim_rules_memops(TCase *tc);
/* sim_rules_block.c (calls that may block, contexts) and
 * sim_rules_nccl.c (NCCL): their tests. */
void sim_rules_block(TCase *tc);
void sim_rules_nccl(TCase *tc);
int no_memops_checks(void);
int no_v1_memops_checks(void);

#endif
