# spcsim, the CUDA/NCCL simulator (tests/gpusim): stand-ins for
# libcudart.so.13, libcuda.so.1, libnccl.so.2 and libnvidia-ml.so.1 under
# $(BUILD)/gpusim, loaded in place of the real ones through LD_LIBRARY_PATH so spcolld,
# libspclient, the GPU suites and the GPU benchmark run unmodified on a
# machine without a GPU. Built whenever CUDA's headers are found (their
# signatures are checked against the real cuda.h, cuda_runtime_api.h and
# nccl.h); never sanitized itself, so the ASan build loads the same code.
CXX ?= g++
GPUSIM_DIR := $(BUILD)/gpusim
GPUSIM_LIBS := $(GPUSIM_DIR)/libcudart.so.13 $(GPUSIM_DIR)/libcuda.so.1 \
  $(GPUSIM_DIR)/libnccl.so.2 $(GPUSIM_DIR)/libnvidia-ml.so.1
GPUSIM_CFLAGS := -std=gnu11 -g -O2 -fPIC -D_GNU_SOURCE -pthread \
  -Wall -Wextra -Werror -Itests/gpusim -Ikernels -Idaemon/gpu
GPUSIM_CORE_OBJ := $(patsubst %,$(GPUSIM_DIR)/%.o,sim_core sim_mem \
  sim_ipc sim_vmm sim_vmm_resv sim_stream sim_memop sim_copy sim_kernel half \
  kernels_host)

ifeq ($(HAVE_CUDA)$(HAVE_NCCL),11)
all: $(GPUSIM_LIBS) $(GPUSIM_DIR)/sim_rules
endif

$(GPUSIM_DIR)/%.o: tests/gpusim/%.c tests/gpusim/sim.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(GPUSIM_CFLAGS) -c $< -o $@

$(GPUSIM_DIR)/half.o: kernels/half.c kernels/half.h kernels/half_bits.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(GPUSIM_CFLAGS) -c $< -o $@

# The kernel source as it is, but for its host launcher's <<<...>>>.
$(GPUSIM_DIR)/plan_cuda_host.inc: daemon/gpu/plan_cuda.cu
	@mkdir -p $(dir $@)
	$(Q)sed -e 's/<<<\([^>]*\)>>>/ SPCSIM_CHEVRONS(\1)/' $< > $@

$(GPUSIM_DIR)/kernels_host.o: tests/gpusim/kernels_host.cc \
  $(GPUSIM_DIR)/plan_cuda_host.inc tests/gpusim/shim/cuda_runtime.h \
  kernels/plan_cuda.h kernels/half_bits.h
	$(Q)$(CXX) -std=c++17 -g -O2 -fPIC -fno-exceptions -fno-rtti \
	  -fno-threadsafe-statics -Wall -Wno-unknown-pragmas -Werror \
	  -Itests/gpusim/shim -Ikernels -Idaemon/gpu -I$(GPUSIM_DIR) -c $< -o $@

$(GPUSIM_DIR)/libspcsim.so: $(GPUSIM_CORE_OBJ)
	$(Q)$(CC) -shared -pthread -Wl,-soname,libspcsim.so -o $@ $^ -ldl -lm

# The fronts see the real CUDA/NCCL headers.
$(GPUSIM_DIR)/cudart.o $(GPUSIM_DIR)/cudrv.o $(GPUSIM_DIR)/cudrv_vmm.o \
  $(GPUSIM_DIR)/nccl.o: \
  GPUSIM_CFLAGS += -isystem $(CUDA_HOME)/include -fvisibility=hidden
$(GPUSIM_DIR)/cudrv.o $(GPUSIM_DIR)/cudrv_vmm.o: tests/gpusim/cudrv.h

GPUSIM_SO = $(CC) -shared -pthread -Wl,-soname,$(notdir $@) -o $@ $< \
  -L$(GPUSIM_DIR) -lspcsim -Wl,-rpath,'$$ORIGIN' -lm

$(GPUSIM_DIR)/cudart_torch.o: GPUSIM_CFLAGS += -isystem $(CUDA_HOME)/include \
  -fvisibility=hidden

# What PyPI's torch links beyond spcoll's needs: "not supported" stubs.
$(GPUSIM_DIR)/absent_%.o: tests/gpusim/absent.c tests/gpusim/sim.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(GPUSIM_CFLAGS) -fvisibility=hidden \
	  -isystem $(CUDA_HOME)/include \
	  -DSIM_ABSENT_$(shell echo $* | tr a-z A-Z) -c $< -o $@

$(GPUSIM_DIR)/libcudart.so.13: $(GPUSIM_DIR)/cudart.o tests/gpusim/cudart.map \
  $(GPUSIM_DIR)/cudart_torch.o $(GPUSIM_DIR)/absent_cudart.o \
  $(GPUSIM_DIR)/libspcsim.so
	$(Q)$(GPUSIM_SO) $(GPUSIM_DIR)/cudart_torch.o \
	  $(GPUSIM_DIR)/absent_cudart.o -Wl,--version-script=tests/gpusim/cudart.map

$(GPUSIM_DIR)/libcuda.so.1: $(GPUSIM_DIR)/cudrv.o $(GPUSIM_DIR)/cudrv_vmm.o \
  $(GPUSIM_DIR)/absent_cuda.o $(GPUSIM_DIR)/libspcsim.so
	$(Q)$(GPUSIM_SO) $(GPUSIM_DIR)/cudrv_vmm.o $(GPUSIM_DIR)/absent_cuda.o

$(GPUSIM_DIR)/libnccl.so.2: $(GPUSIM_DIR)/nccl.o $(GPUSIM_DIR)/absent_nccl.o \
  $(GPUSIM_DIR)/libspcsim.so
	$(Q)$(GPUSIM_SO) $(GPUSIM_DIR)/absent_nccl.o

# NVML's few entry points PyPI's torch calls (tests/gpusim/nvml.c).
$(GPUSIM_DIR)/libnvidia-ml.so.1: tests/gpusim/nvml.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(GPUSIM_CFLAGS) -fvisibility=hidden -shared \
	  -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

# The rules suite: the misuse of each rule, rejected (tests/run.sh runs it
# through tests/gpusim/simrun.sh).
GPUSIM_RULES_SRC := $(addprefix tests/gpusim/,sim_rules.c sim_rules_memops.c \
  sim_rules_block.c sim_rules_nccl.c sim_rules_vmm.c sim_rules_vmm_rules.c)
$(GPUSIM_DIR)/sim_rules: $(GPUSIM_RULES_SRC) tests/gpusim/sim_rules.h \
  tests/check_run.h $(CU_OBJ)
	$(Q)$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -isystem $(CUDA_HOME)/include \
	  -Itests -o $@ $(GPUSIM_RULES_SRC) $(CU_OBJ) $(LDFLAGS_ALL) $(CHECK_LIBS) \
	  -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lnccl -ldl
