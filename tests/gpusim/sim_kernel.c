/* Kernels: nvcc's registration calls (__cudaRegisterFatBinary,
 * __cudaRegisterFunction) name each kernel by its mangled device name;
 * the simulator finds the host build of that kernel (kernels_host.cc) by
 * the same name and runs a launch on the stream's worker: blocks one
 * after another, the threads of a block as fibers that switch at
 * __syncthreads. A kernel with no host build fails its launch loudly. */
#include "sim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct spcsim_kernel_entry {
  void *fn;
  int nargs;
  void (*sizes)(size_t *);
  void (*run)(void **);
  void (*access)(void **, int);
};
extern const struct spcsim_kernel_entry spcsim_kernels[];

typedef struct {
  unsigned x, y, z;
} u3;
typedef struct {
  u3 tid, bid, bdim, gdim;
} tctx;

typedef struct kfun {
  struct kfun *next;
  const void *host_fun;
  char name[256];
  const struct spcsim_kernel_entry *entry;
} kfun;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static kfun *funs;

void **sim_register_fatbin(void *fatbin) {
  void **h = calloc(1, sizeof(void *));
  if (h != NULL)
    *h = fatbin;
  return h;
}

void sim_unregister_fatbin(void **h) {
  pthread_mutex_lock(&mu);
  for (kfun **p = &funs; *p != NULL;) {
    kfun *f = *p;
    *p = f->next;
    free(f);
  }
  pthread_mutex_unlock(&mu);
  free(h);
}

static const struct spcsim_kernel_entry *host_build(const char *name) {
  for (const struct spcsim_kernel_entry *e = spcsim_kernels; e->fn; e++) {
    Dl_info di;
    if (dladdr(e->fn, &di) && di.dli_sname && strcmp(di.dli_sname, name) == 0)
      return e;
  }
  return NULL;
}

void sim_register_function(void **h, const char *host_fun,
                           const char *device_name) {
  (void)h;
  kfun *f = calloc(1, sizeof(*f));
  if (f == NULL)
    return;
  f->host_fun = host_fun;
  snprintf(f->name, sizeof(f->name), "%s", device_name);
  f->entry = host_build(device_name);
  pthread_mutex_lock(&mu);
  f->next = funs;
  funs = f;
  pthread_mutex_unlock(&mu);
}

static kfun *fun_of(const void *p, int is_kernel) {
  if (is_kernel)
    return (kfun *)p;
  pthread_mutex_lock(&mu);
  kfun *f = funs;
  while (f != NULL && f->host_fun != p)
    f = f->next;
  pthread_mutex_unlock(&mu);
  return f;
}

/* A module's function by its device name (cuModuleGetFunction): the host
 * build of that name, kept for the process like nvcc's registrations. */
int sim_kernel_named(void **k_p, const char *name) {
  const struct spcsim_kernel_entry *e = host_build(name);
  if (e == NULL)
    return SIM_ENOKERNEL;
  pthread_mutex_lock(&mu);
  kfun *f = funs;
  while (f != NULL && (f->host_fun != NULL || strcmp(f->name, name) != 0))
    f = f->next;
  if (f == NULL && (f = calloc(1, sizeof(*f))) != NULL) {
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->entry = e;
    f->next = funs;
    funs = f;
  }
  pthread_mutex_unlock(&mu);
  if (f == NULL)
    return SIM_ENOMEM;
  *k_p = f;
  return SIM_OK;
}

int sim_get_kernel(void **k_p, const void *host_fun) {
  kfun *f = fun_of(host_fun, 0);
  if (f == NULL)
    return SIM_ENOKERNEL;
  *k_p = f;
  return SIM_OK;
}

/* ---- the legacy launch configuration stack ----------------------------- */

static __thread struct {
  sim_dim3 grid, block;
  size_t shmem;
  void *s;
} cfg_stack[8];
static __thread int cfg_n;

void sim_push_config(sim_dim3 grid, sim_dim3 block, size_t shmem, void *s) {
  if (cfg_n < 8) {
    cfg_stack[cfg_n].grid = grid;
    cfg_stack[cfg_n].block = block;
    cfg_stack[cfg_n].shmem = shmem;
    cfg_stack[cfg_n].s = s;
  }
  cfg_n++;
}

int sim_pop_config(sim_dim3 *grid, sim_dim3 *block, size_t *shmem, void **s) {
  if (cfg_n == 0)
    return SIM_EINVAL;
  cfg_n--;
  *grid = cfg_stack[cfg_n].grid;
  *block = cfg_stack[cfg_n].block;
  *shmem = cfg_stack[cfg_n].shmem;
  *s = cfg_stack[cfg_n].s;
  return SIM_OK;
}

/* ---- fibers (x86-64): callee-saved registers, mxcsr and x87 control word
 * saved on the fiber's own stack ------------------------------------------- */

__asm__(".text\n"
        ".globl spcsim_fiber_switch\n"
        ".hidden spcsim_fiber_switch\n"
        ".type spcsim_fiber_switch,@function\n"
        "spcsim_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n"
        "  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n"
        "  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size spcsim_fiber_switch, .-spcsim_fiber_switch\n"
        ".globl spcsim_fiber_start\n"
        ".hidden spcsim_fiber_start\n"
        ".type spcsim_fiber_start,@function\n"
        "spcsim_fiber_start:\n"
        "  movq %r12, %rdi\n  call spcsim_fiber_main\n  ud2\n"
        ".size spcsim_fiber_start, .-spcsim_fiber_start\n");
void spcsim_fiber_switch(void **save_sp, void *load_sp);
void spcsim_fiber_start(void);

#define STACK (64 * 1024)
enum { F_RUN, F_BARRIER, F_DONE };

typedef struct {
  void *sp;
  int state;
  tctx tc;
} fiber;

__thread tctx *spcsim_tc;
static __thread struct {
  void *sched_sp;
  fiber *cur;
  void (*run)(void **);
  void **args;
} ks;

__attribute__((visibility("hidden"), used, noreturn)) void
spcsim_fiber_main(fiber *f) {
  ks.run(ks.args);
  f->state = F_DONE;
  spcsim_fiber_switch(&f->sp, ks.sched_sp);
  __builtin_unreachable();
}

void spcsim_syncthreads(void) {
  fiber *f = ks.cur;
  f->state = F_BARRIER;
  spcsim_fiber_switch(&f->sp, ks.sched_sp);
}

static void *fiber_init(fiber *f, uint8_t *stack_hi) {
  uint8_t *sp = (uint8_t *)(((uintptr_t)stack_hi - 128) & ~(uintptr_t)15);
  uint64_t *w = (uint64_t *)sp;
  uint32_t mx = 0x1f80;
  uint16_t cw = 0x037f;
  memcpy(sp, &mx, 4);
  memcpy(sp + 4, &cw, 2);
  w[1] = 0;                      /* r15 */
  w[2] = 0;                      /* r14 */
  w[3] = 0;                      /* r13 */
  w[4] = (uint64_t)(uintptr_t)f; /* r12: the fiber, for its start */
  w[5] = 0;                      /* rbx */
  w[6] = 0;                      /* rbp */
  w[7] = (uint64_t)(uintptr_t)spcsim_fiber_start;
  return sp;
}

typedef struct {
  kfun *f;
  sim_dim3 grid, block;
  int dev;
  int fault; /* SPCSIM_FAULT_LAUNCH chose this launch */
  void **argv;
  uint8_t *argbuf;
} launch_op;

/* Whether launch L faults on the device instead of running: the fault
 * SPCSIM_FAULT_LAUNCH injects, or an access the simulator refused (under
 * SPCSIM_ON_VIOLATION=continue; a GPU stops such a kernel with an
 * illegal address). Either poisons the process (sim_poison). */
static int launch_faults(launch_op *L) {
  /* What it will touch is checked first: a kernel cannot be stopped at
   * its first bad access, its arguments say where it goes. */
  int seen = sim_violations_here();
  if (L->f->entry->access != NULL)
    L->f->entry->access(L->argv, L->dev);
  if (!L->fault && sim_violations_here() == seen)
    return 0;
  sim_poison("kernel %s on GPU %d: %s", L->f->name, L->dev,
             L->fault ? "the fault SPCSIM_FAULT_LAUNCH injects"
                      : "an access refused above");
  return 1;
}

static void run_launch(void *a, int *status) {
  launch_op *L = a;
  if (*status == SIM_OK && launch_faults(L))
    *status = SIM_EILLEGAL;
  if (*status != SIM_OK) { /* the stream already failed: CUDA skips it */
    free(L->argbuf);
    free(L->argv);
    return;
  }
  unsigned nt = L->block.x * L->block.y * L->block.z;
  fiber *fs = calloc(nt, sizeof(*fs));
  uint8_t *stacks = mmap(NULL, (size_t)nt * STACK, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (fs == NULL || stacks == MAP_FAILED) {
    fprintf(stderr, "spcsim: no memory for %u simulated threads\n", nt);
    *status = SIM_ELAUNCH;
    free(fs);
    if (stacks != MAP_FAILED)
      syscall(SYS_munmap, stacks, (size_t)nt * STACK);
    free(L->argbuf);
    free(L->argv);
    return;
  }
  ks.run = L->f->entry->run;
  ks.args = L->argv;
  for (unsigned bz = 0; bz < L->grid.z; bz++)
    for (unsigned by = 0; by < L->grid.y; by++)
      for (unsigned bx = 0; bx < L->grid.x; bx++) {
        for (unsigned t = 0; t < nt; t++) {
          fiber *f = &fs[t];
          f->state = F_RUN;
          f->tc.bid = (u3){bx, by, bz};
          f->tc.gdim = (u3){L->grid.x, L->grid.y, L->grid.z};
          f->tc.bdim = (u3){L->block.x, L->block.y, L->block.z};
          f->tc.tid = (u3){t % L->block.x, (t / L->block.x) % L->block.y,
                           t / (L->block.x * L->block.y)};
          f->sp = fiber_init(f, stacks + (size_t)(t + 1) * STACK);
        }
        for (;;) {
          unsigned waiting = 0, done = 0;
          for (unsigned t = 0; t < nt; t++) {
            fiber *f = &fs[t];
            if (f->state == F_DONE) {
              done++;
              continue;
            }
            f->state = F_RUN;
            ks.cur = f;
            spcsim_tc = &f->tc;
            spcsim_fiber_switch(&ks.sched_sp, f->sp);
            if (f->state == F_DONE)
              done++;
            else
              waiting++;
          }
          if (waiting == 0)
            break;
          if (done != 0)
            sim_violation("syncthreads-divergent", L->f->name,
                          "block "
                          "(%u,%u,%u): %u thread(s) wait at __syncthreads "
                          "while %u have exited",
                          bx, by, bz, waiting, done);
        }
      }
  syscall(SYS_munmap, stacks, (size_t)nt * STACK);
  free(fs);
  free(L->argbuf);
  free(L->argv);
}

int sim_launch(const void *p, int is_kernel, sim_dim3 grid, sim_dim3 block,
               void **args, size_t shmem, sim_stream *s) {
  kfun *f = fun_of(p, is_kernel);
  if (f == NULL)
    return SIM_ENOKERNEL;
  if (f->entry == NULL) {
    sim_violation("kernel-no-host-build", "cudaLaunchKernel",
                  "kernel %s "
                  "has no host build in the simulator (tests/gpusim/"
                  "kernels_host.cc)",
                  f->name);
    return SIM_ENOKERNEL;
  }
  uint64_t nt = (uint64_t)block.x * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || nt == 0 || nt > 1024 ||
      shmem > 48 * 1024)
    return SIM_ECONFIG;
  size_t sizes[32], total = 0;
  if (f->entry->nargs > 32)
    return SIM_ELAUNCH;
  f->entry->sizes(sizes);
  for (int i = 0; i < f->entry->nargs; i++)
    total += (sizes[i] + 15) & ~(size_t)15;
  launch_op *L = calloc(1, sizeof(*L));
  if (L != NULL) {
    L->argbuf = malloc(total ? total : 1);
    L->argv = calloc((size_t)f->entry->nargs + 1, sizeof(void *));
  }
  if (L == NULL || L->argbuf == NULL || L->argv == NULL) {
    if (L != NULL) {
      free(L->argbuf);
      free(L->argv);
    }
    free(L);
    return SIM_ENOMEM;
  }
  /* The arguments are captured now: the caller's copies die with the
   * launch call, the kernel runs later. */
  size_t at = 0;
  for (int i = 0; i < f->entry->nargs; i++) {
    memcpy(L->argbuf + at, args[i], sizes[i]);
    L->argv[i] = L->argbuf + at;
    at += (sizes[i] + 15) & ~(size_t)15;
  }
  L->f = f;
  L->fault = sim_launch_should_fault();
  L->grid = grid;
  L->block = block;
  L->dev = sim_stream_dev(s);
  int rc = sim_enqueue(s, run_launch, L, 1);
  if (rc != SIM_OK) {
    free(L->argbuf);
    free(L->argv);
    free(L);
  }
  return rc;
}
