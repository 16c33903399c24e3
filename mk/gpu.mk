# The GPU path (CUDA IPC buffers, the CUDA and NCCL movers): nvcc rules for
# daemon/gpu/*.cu, CUDA flags for the daemon's GPU sources, the GPU suites
# (tests/gpu) and the GPU benchmark. Without CUDA under CUDA_HOME nothing
# here changes the build: the GPU sources compile to their stubs, the suites
# to programs that print "skipped" and exit 77.
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS ?= 80 90
# No exceptions and no guarded statics: the object then needs no libstdc++
# and links into the C daemon with cc.
NVCC_FLAGS := -std=c++17 -O3 -g -Xcompiler -fPIC -Xcompiler -Wall \
  -Xcompiler -fno-exceptions -Xcompiler -fno-threadsafe-statics -Ikernels \
  -Idaemon/gpu \
  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a))

CU_SRC := $(wildcard daemon/gpu/*.cu)
CU_OBJ := $(if $(HAVE_CUDA),$(patsubst %.cu,$(BUILD)/%.cu.o,$(CU_SRC)))

$(BUILD)/daemon/gpu/%.cu.o: daemon/gpu/%.cu kernels/plan_cuda.h kernels/plan.h \
  kernels/types.h kernels/status.h kernels/half_bits.h
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# libspclient's copy of the kernel (client/client_gpu_sym_kernel.c loads
# it with cuModuleLoadData: the library keeps no link-time CUDA
# dependency): plan_cuda.cu's device code as a fatbin, embedded as bytes.
# Without CUDA the array is empty and reductions on symmetric buffers go
# to the daemon.
$(BUILD)/client/plan_kernel.fatbin: daemon/gpu/plan_cuda.cu \
  kernels/plan_cuda.h kernels/plan.h kernels/types.h kernels/status.h \
  kernels/half_bits.h
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) -std=c++17 -O3 -Ikernels -Idaemon/gpu --fatbin \
	  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	  $< -o $@

$(BUILD)/client/plan_fatbin.c: scripts/embed_bytes.sh \
  $(if $(HAVE_CUDA),$(BUILD)/client/plan_kernel.fatbin)
	@mkdir -p $(dir $@)
	$(Q)sh scripts/embed_bytes.sh spc__plan_fatbin \
	  $(if $(HAVE_CUDA),$(BUILD)/client/plan_kernel.fatbin) > $@.tmp
	$(Q)mv $@.tmp $@

$(BUILD)/client/plan_fatbin.o: $(BUILD)/client/plan_fatbin.c
	$(Q)$(CC) $(CFLAGS_ALL) -w -c $< -o $@

# CUDA headers are system headers here: our -Werror is for our code.
GPU_CFLAGS_SYS := $(subst -I$(CUDA_HOME)/include,-isystem $(CUDA_HOME)/include,$(GPU_CFLAGS))

# The daemon's GPU sources see CUDA and NCCL; the kernels link into spcolld
# and into the daemon unit suites (which link the daemon's objects).
GPU_DAEMON_OBJ := $(call obj,daemon/engine/engine_gpu.c daemon/gpu/gpu_ctx.c \
  daemon/gpu/gpu_ipc.c daemon/gpu/gpu_vmm.c daemon/gpu/gpu_driver.c \
  daemon/gpu/gpu_job.c daemon/gpu/gpu_lost.c \
  daemon/gpu/gpu_flags.c \
  daemon/gpu/gpu_desc_cache.c \
  daemon/engine/mover_cuda.c \
  daemon/engine/mover_nccl.c daemon/engine/mover_nccl_set.c \
  daemon/engine/mover_nccl_watch.c daemon/engine/mover_nccl_gate.c \
  daemon/engine/xnode_stage.c)
$(GPU_DAEMON_OBJ): CFLAGS += $(GPU_CFLAGS_SYS)
$(BUILD)/tests/unit/unit_daemon_desc_cache.o: CFLAGS += $(GPU_CFLAGS_SYS)
$(SPCOLLD): $(CU_OBJ)
$(filter $(BUILD)/tests/unit_daemon_%,$(UNIT_BIN)): $(CU_OBJ)

# The driver's link stub: the toolkit's (a toolkit from PyPI has none).
CUDA_STUB := $(if $(HAVE_CUDA),$(wildcard $(CUDA_HOME)/lib64/stubs/libcuda.so))

# The client's own declarations of the driver API, held against cuda.h and
# the driver stub's exported names (where there is a stub).
$(BUILD)/tests/unit/unit_client_cuda_abi.o: CFLAGS += $(GPU_USER_CFLAGS) \
  $(if $(CUDA_STUB),-DSPC_CUDA_STUB='"$(CUDA_STUB)"')

# GPU suites: tests/gpu/test_gpu_*.c, run by tests/run.sh with the others.
# They use the CUDA runtime themselves (to fill and read device memory);
# libspclient stays free of any CUDA link (it loads libcuda at run time).
# gpu_cases.o: the op cases and their host-vs-device run, which the suites
# that run them (test_gpu_ops, test_gpu_multinode) share; restart_ops.o
# the restart suites' verified ops (test_gpu_restart on device tensors).
GPU_TEST_SRC := $(wildcard tests/gpu/test_gpu_*.c)
GPU_TEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/%,$(GPU_TEST_SRC))
GPU_TEST_LIB := $(BUILD)/tests/gpu/gpu_testlib.o $(BUILD)/tests/gpu/gpu_cases.o \
  $(BUILD)/tests/integ/ops_ref.o $(BUILD)/tests/integ/restart_ops.o \
  $(BUILD)/tests/integ/fast_ranks.o
GPU_USER_CFLAGS := $(if $(HAVE_CUDA),-DSPC_HAVE_CUDA -isystem $(CUDA_HOME)/include)
GPU_USER_LIBS := $(if $(HAVE_CUDA),-L$(CUDA_HOME)/lib64 \
  -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcudart)

$(BUILD)/tests/gpu/%.o: tests/gpu/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) $(GPU_USER_CFLAGS) -Itests \
	  -Itests/integ -MMD -MP -c $< -o $@

$(GPU_TEST_BIN): $(BUILD)/tests/test_gpu_%: $(BUILD)/tests/gpu/test_gpu_%.o \
  $(GPU_TEST_LIB) $(BUILD)/tests/integ/harness.o \
  $(BUILD)/tests/integ/harness_nodes.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) \
	  $(GPU_USER_LIBS) -lm

# The GPU benchmark (same-GPU all-to-all and all-gather next to the
# device-to-device copy bandwidth of the same run): scripts/gpu_run.sh.
# Its overlap column's compute kernel (bench/gpu_busy.cu) is built by nvcc.
GPU_BENCH := $(BUILD)/bin/spcoll-gpu-bench
GPU_BUSY_OBJ := $(if $(HAVE_CUDA),$(BUILD)/bench/gpu_busy.cu.o)
$(BUILD)/bench/gpu_busy.cu.o: bench/gpu_busy.cu bench/gpu_busy.h
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NVCC_FLAGS) -Ibench -c $< -o $@
$(BUILD)/bench/gpu_bench.o: CFLAGS += $(GPU_USER_CFLAGS)
$(GPU_BENCH): $(BUILD)/bench/gpu_bench.o $(BUILD)/tests/integ/harness.o $(LIBA) \
  $(GPU_BUSY_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS) $(GPU_USER_LIBS) -lm

# The hand-over benchmark (bench/gpu_handover.cu): what ordering one
# process's stream after another's costs on one GPU, events against stream
# memory operations, and whether cuMem file descriptors cross processes and
# PID namespaces. Driver API through the stub at link time; the machine's
# libcuda at run time; not built without the stub.
GPU_HANDOVER := $(if $(CUDA_STUB),$(BUILD)/bin/spcoll-gpu-handover)
$(BUILD)/bin/spcoll-gpu-handover: bench/gpu_handover.cu
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) -std=c++17 -O2 -Xcompiler -Wall -Xcompiler -Werror \
	  $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	  -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

all: $(GPU_TEST_BIN) $(GPU_BENCH) $(GPU_HANDOVER)

.PHONY: gpu-run
# On a machine with a GPU: the GPU suites and benchmark, logs under OUT.
gpu-run: all
	$(Q)BUILD=$(BUILD) sh scripts/gpu_run.sh
