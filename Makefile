# spcoll — one entry point: deps, all, check, check-asan, check-valgrind,
# demo, install. Out-of-tree objects under $(BUILD).
# CUDA: the machine's toolkit under /usr/local/cuda, else the one `make
# check` installs from PyPI (scripts/cuda_toolkit.sh) under CUDA_PIP_DIR,
# which every build tree (build, build-asan) shares.
CUDA_PIP_DIR ?= $(CURDIR)/build/cuda-toolkit
CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda,$(CUDA_PIP_DIR)/home)
PREFIX    ?= /usr/local
DESTDIR   ?=
BUILD     ?= build
SANITIZE  ?=
CC        ?= cc
V         ?= 0

Q := $(if $(filter 1,$(V)),,@)

PKG_CONFIG ?= pkg-config
UV_CFLAGS   := $(shell $(PKG_CONFIG) --cflags libuv 2>/dev/null)
UV_LIBS     := $(shell $(PKG_CONFIG) --libs libuv 2>/dev/null)
PBC_CFLAGS  := $(shell $(PKG_CONFIG) --cflags libprotobuf-c 2>/dev/null)
PBC_LIBS    := $(shell $(PKG_CONFIG) --libs libprotobuf-c 2>/dev/null)
SD_LIBS     := $(shell $(PKG_CONFIG) --libs libsystemd 2>/dev/null)
UCX_LIBS    := $(shell $(PKG_CONFIG) --libs ucx 2>/dev/null || echo -lucp -lucs)
CRYPTO_LIBS := $(shell $(PKG_CONFIG) --libs libcrypto 2>/dev/null || echo -lcrypto)
CHECK_CFLAGS:= $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS  := $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

# CUDA and NCCL are optional: found under CUDA_HOME, the GPU code is built;
# otherwise the host path builds alone.
HAVE_CUDA := $(shell test -x $(CUDA_HOME)/bin/nvcc && test -f $(CUDA_HOME)/include/cuda_runtime.h && echo 1)
HAVE_NCCL := $(shell test -f $(CUDA_HOME)/include/nccl.h && echo 1)

comma := ,
GPU_CFLAGS := $(if $(HAVE_CUDA),-DSPC_HAVE_CUDA -I$(CUDA_HOME)/include) \
  $(if $(HAVE_NCCL),-DSPC_HAVE_NCCL)
GPU_LIBS   := $(if $(HAVE_CUDA),-L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcudart) \
  $(if $(HAVE_NCCL),-lnccl)
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
OPT       ?= -O2
# The daemon's layers are its folders (docs/architecture.md): sources are
# found by folder, and each folder is on the include path, so a file moves
# between layers without its includes changing. Files still flat in
# daemon/ build too.
DAEMON_DIRS := daemon $(patsubst %/,%,$(sort $(dir $(wildcard daemon/*/*.c daemon/*/*.h))))
# Symbols are hidden unless declared public: libspclient.so exports only
# what spcoll.h declares (SPC_API), not the kernels, protobuf or internals.
BASE_CFLAGS := -std=gnu11 -g $(OPT) -fPIC -fvisibility=hidden -D_GNU_SOURCE -pthread $(SAN_FLAGS) \
  -I$(BUILD)/proto -Iproto -Ikernels -Iclient -Iclient/fast $(addprefix -I,$(DAEMON_DIRS)) $(PBC_CFLAGS) $(UV_CFLAGS)
WARN      := -Wall -Wextra -Werror -Wno-format-truncation
CFLAGS_ALL = $(BASE_CFLAGS) $(WARN) $(CFLAGS)
LDFLAGS_ALL = -pthread $(SAN_FLAGS) $(LDFLAGS)

KERNEL_SRC := $(wildcard kernels/*.c)
PROTO_SRC  := proto/frame.c
DAEMON_SRC := $(wildcard $(addsuffix /*.c,$(DAEMON_DIRS)))
CLIENT_SRC := $(filter-out client/spcollctl.c,$(wildcard client/*.c))
FAST_SRC   := $(wildcard client/fast/*.c)
UNIT_SRC   := $(filter-out tests/unit/plan_testlib.c,$(wildcard tests/unit/*.c))
INTEG_SRC  := $(wildcard tests/integ/test_*.c)
HARNESS_SRC:= tests/integ/harness.c tests/integ/harness_nodes.c

PROTOS := spcoll peer
PB_C := $(patsubst %,$(BUILD)/proto/%.pb-c.c,$(PROTOS))
PB_H := $(patsubst %,$(BUILD)/proto/%.pb-c.h,$(PROTOS))
PB_O := $(patsubst %,$(BUILD)/proto/%.pb-c.o,$(PROTOS))

obj = $(patsubst %.c,$(BUILD)/%.o,$(1))
KERNEL_OBJ := $(call obj,$(KERNEL_SRC))
PROTO_OBJ  := $(call obj,$(PROTO_SRC)) $(PB_O)
DAEMON_OBJ := $(call obj,$(DAEMON_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
# The GPU movers' kernel as libspclient carries it for symmetric buffers
# (mk/gpu.mk): bytes for cuModuleLoadData, none without CUDA.
CLIENT_OBJ += $(BUILD)/client/plan_fatbin.o
FAST_OBJ   := $(call obj,$(FAST_SRC))
COMMON_OBJ := $(KERNEL_OBJ) $(PROTO_OBJ)

SPCOLLD    := $(BUILD)/bin/spcolld
LIBSO      := $(BUILD)/lib/libspclient.so
LIBSO1     := $(BUILD)/lib/libspclient.so.1
LIBA       := $(BUILD)/lib/libspclient.a
# The client's fast path (client/fast/), its own link unit: an archive
# libspclient takes whole; not installed.
LIBFAST    := $(BUILD)/lib/libspcfast.a
PCFILE     := $(BUILD)/lib/spcoll.pc
DEMO       := $(BUILD)/bin/spcoll-demo
SPCOLLCTL  := $(BUILD)/bin/spcollctl
BENCH      := $(BUILD)/bin/spcoll-bench
UNIT_BIN   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
INTEG_BIN  := $(patsubst tests/integ/%.c,$(BUILD)/tests/%,$(INTEG_SRC))

# Keep objects of pattern rules: they are not throw-away intermediates.
.SECONDARY:

.PHONY: bench soak fuzz fuzz-run all deps test check check-asan check-asan-only check-valgrind \
  check-valgrind-only demo install clean config
all: $(SPCOLLD) $(SPCOLLCTL) $(BENCH) $(LIBSO1) $(LIBSO) $(LIBA) $(PCFILE) $(DEMO) $(UNIT_BIN) $(INTEG_BIN)

config:
	@echo "cuda: $(if $(HAVE_CUDA),found under $(CUDA_HOME),not found)"
	@echo "nccl: $(if $(HAVE_NCCL),found under $(CUDA_HOME),not found)"

deps:
	$(Q)sh scripts/deps.sh

# The toolkit from PyPI where the machine has none (the GPU suites and
# spcsim need nvcc and CUDA's and NCCL's headers; they then run, not SKIP).
.PHONY: cuda-toolkit
cuda-toolkit:
	$(Q)if [ "$(CUDA_HOME)" = "$(CUDA_PIP_DIR)/home" ]; then \
	  sh scripts/cuda_toolkit.sh $(CUDA_PIP_DIR); fi

$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/proto
	$(Q)protoc-c --proto_path=proto --c_out=$(BUILD)/proto $<

# Generated code gets our flags but not -Werror: we do not own its text.
$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(SPCOLLD): $(DAEMON_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(UV_LIBS) $(PBC_LIBS) $(SD_LIBS) $(UCX_LIBS) $(CRYPTO_LIBS) $(GPU_LIBS)

# GPU code compiles whenever CUDA is found; nothing else sees its headers.
$(BUILD)/daemon/gpu/gpu_probe.o: daemon/gpu/gpu_probe.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) $(GPU_CFLAGS) -MMD -MP -c $< -o $@

# The library is the file its SONAME names, the one the loader looks for
# when a program linked with it starts; libspclient.so, the name the
# linker takes for -lspclient, points at it (as make install lays it out).
$(LIBSO1): $(CLIENT_OBJ) $(LIBFAST) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libspclient.so.1 -o $@ \
	  $(CLIENT_OBJ) -Wl,--whole-archive $(LIBFAST) -Wl,--no-whole-archive \
	  $(COMMON_OBJ) $(PBC_LIBS)

$(LIBFAST): $(FAST_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIBSO): $(LIBSO1)
	$(Q)ln -sfn libspclient.so.1 $@

$(LIBA): $(CLIENT_OBJ) $(FAST_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(PCFILE): client/spcoll.pc.in
	@mkdir -p $(dir $@)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|g' $< > $@

$(BUILD)/bench/%.o: bench/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) -Itests/integ -MMD -MP -c $< -o $@

$(SPCOLLCTL): $(BUILD)/client/spcollctl.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

$(DEMO): $(BUILD)/demo/demo.o $(BUILD)/demo/ulysses.o $(BUILD)/tests/integ/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS) -lm

$(BUILD)/demo/%.o: demo/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) -Itests/integ -MMD -MP -c $< -o $@

# Unit suites of daemon pieces link the daemon's objects but its main.
DAEMON_LIB_OBJ := $(filter-out $(BUILD)/daemon/main.o,$(DAEMON_OBJ))
$(BUILD)/tests/unit_daemon_%: $(BUILD)/tests/unit/unit_daemon_%.o $(DAEMON_LIB_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(UV_LIBS) $(PBC_LIBS) $(SD_LIBS) $(UCX_LIBS) $(CRYPTO_LIBS) $(GPU_LIBS) -lm

# Unit suites of the client library link it whole.
$(BUILD)/tests/unit_client_%: $(BUILD)/tests/unit/unit_client_%.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) -lm

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/tests/unit/plan_testlib.o $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) -lm

# The protocol checker builds the fast path's headers over its model.
# (a ring of 2 slots: reuse within a few ops)
$(BUILD)/tests/unit/unit_fast_model.o: CFLAGS += -DSPK_FAST_MODEL \
  -DSPK_FSEG_RING=2u
$(BUILD)/tests/unit/%.o: tests/unit/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -Itests -MMD -MP -c $< -o $@

$(BUILD)/tests/integ/%.o: tests/integ/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) -Itests -MMD -MP -c $< -o $@

$(BUILD)/tests/test_%: $(BUILD)/tests/integ/test_%.o $(BUILD)/tests/integ/harness.o \
  $(BUILD)/tests/integ/harness_nodes.o $(BUILD)/tests/integ/ops_ref.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) -lm

# Both conformance suites share the case runner.
$(BUILD)/tests/test_conformance $(BUILD)/tests/test_conformance_batch: \
  $(BUILD)/tests/integ/conformance_cases.o
# The fast-path suites, the stats and the restart suites share their rank
# helpers (before the library on the link line, which they call).
FAST_TESTS := $(BUILD)/tests/test_fast $(BUILD)/tests/test_fast_uid \
  $(BUILD)/tests/test_fast_under_way \
  $(BUILD)/tests/test_fast_map $(BUILD)/tests/test_fast_wrap \
  $(BUILD)/tests/test_p2p \
  $(BUILD)/tests/test_stats $(BUILD)/tests/test_wait_lock \
  $(BUILD)/tests/test_submit_ring
$(FAST_TESTS): $(BUILD)/tests/test_%: $(BUILD)/tests/integ/test_%.o \
  $(BUILD)/tests/integ/fast_ranks.o $(BUILD)/tests/integ/harness.o \
  $(BUILD)/tests/integ/harness_nodes.o $(BUILD)/tests/integ/ops_ref.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) -lm
# The restart suites also share their verified ops.
RESTART_TESTS := $(BUILD)/tests/test_restart $(BUILD)/tests/test_restart_nodes
$(RESTART_TESTS): $(BUILD)/tests/test_%: $(BUILD)/tests/integ/test_%.o \
  $(BUILD)/tests/integ/restart_ops.o $(BUILD)/tests/integ/fast_ranks.o \
  $(BUILD)/tests/integ/harness.o $(BUILD)/tests/integ/harness_nodes.o \
  $(BUILD)/tests/integ/ops_ref.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) -lm

# The peer-port suite speaks the daemons' bootstrap (peer_auth.c) and UCX
# itself.
$(BUILD)/tests/test_peer_ucx: $(BUILD)/tests/integ/test_peer_ucx.o \
  $(BUILD)/tests/integ/harness.o $(BUILD)/tests/integ/harness_nodes.o \
  $(BUILD)/tests/integ/ops_ref.o $(BUILD)/daemon/peer/peer_auth.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CHECK_LIBS) $(PBC_LIBS) $(UCX_LIBS) \
	  $(CRYPTO_LIBS) -lm

# Tests: unit suites, then integration suites against a real daemon.
# `check` runs them plain, then under ASan+UBSan (build-asan/), then the
# client-side suites under valgrind: what CI runs.
test:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)sh tests/run.sh $(BUILD)

check: deps cuda-toolkit
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory $(CHECK_EXTRA)
	$(Q)$(MAKE) --no-print-directory check-asan-only
	$(Q)$(MAKE) --no-print-directory check-valgrind-only
	$(Q)$(MAKE) --no-print-directory fuzz-run FUZZ_SECONDS=10

check-asan: deps cuda-toolkit
	$(Q)$(MAKE) --no-print-directory check-asan-only

check-asan-only:
	@echo "== ASan + UBSan build (build-asan/) =="
	$(Q)SPC_SANITIZED=1 $(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 OPT=-O1 test

check-valgrind: deps
	$(Q)$(MAKE) --no-print-directory check-valgrind-only

check-valgrind-only:
	@echo "== valgrind: client library suites =="
	$(Q)$(MAKE) --no-print-directory all
	$(Q)SPC_VALGRIND=1 sh tests/run.sh $(BUILD) client

# Fuzzing: libFuzzer targets built with clang, run FUZZ_SECONDS each on a
# working corpus seeded from tests/fuzz/corpus/<target>. `check` runs a short
# round; `make fuzz` a long one. A crash leaves crash-* in $(BUILD)/fuzz.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := frame planner
FUZZ_FLAGS   := -std=gnu11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I$(BUILD)/proto -Iproto -Ikernels $(PBC_CFLAGS)

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(KERNEL_SRC) proto/frame.c $(PB_C)
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(filter %.c,$^) $(PBC_LIBS)

fuzz: deps
	$(Q)$(MAKE) --no-print-directory fuzz-run

fuzz-run: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))
	$(Q)set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus-$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECONDS) s =="; \
	  (cd $(BUILD)/fuzz && ./fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	    -print_final_stats=1 corpus-$$t $(CURDIR)/tests/fuzz/corpus/$$t \
	    > fuzz_$$t.log 2>&1) || { tail -n 40 $(BUILD)/fuzz/fuzz_$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|Done" $(BUILD)/fuzz/fuzz_$$t.log | tail -n 2; \
	done

# Benchmarks (make bench): mk/bench.mk.

# The soak with faults; a short round runs in check (6 s).
SOAK_SECONDS ?= 60
soak: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)SPC_SOAK_SECONDS=$(SOAK_SECONDS) SPCOLLD=$(SPCOLLD) $(BUILD)/tests/test_soak

demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)$(DEMO) --spcolld $(SPCOLLD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/sbin
	install -m 0755 $(SPCOLLD) $(DESTDIR)$(PREFIX)/sbin/spcolld
	install -m 0755 $(SPCOLLCTL) $(DESTDIR)$(PREFIX)/bin/spcollctl
	install -m 0755 $(LIBSO1) $(DESTDIR)$(PREFIX)/lib/libspclient.so.1
	ln -sf libspclient.so.1 $(DESTDIR)$(PREFIX)/lib/libspclient.so
	install -m 0644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/libspclient.a
	install -m 0644 client/spcoll.h client/spcoll_gpu.h client/spcoll_batch.h \
	  $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|g' client/spcoll.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/spcoll.pc
	install -d $(DESTDIR)/etc/spcolld
	install -m 0644 systemd/spcolld.conf.example $(DESTDIR)/etc/spcolld/spcolld.conf.example
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/lib/sysusers.d \
	  $(DESTDIR)$(PREFIX)/lib/tmpfiles.d
	sed -e 's|/usr/local/sbin/|$(PREFIX)/sbin/|' systemd/spcolld.service \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/spcolld.service
	install -m 0644 systemd/spcolld.socket $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 systemd/spcolld.sysusers $(DESTDIR)$(PREFIX)/lib/sysusers.d/spcolld.conf
	install -m 0644 systemd/spcolld.tmpfiles $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/spcolld.conf

clean:
	rm -rf build build-asan

# Parts with their own rules (Python package, GPU, multi-node) live in
# mk/*.mk; each may add targets to CHECK_EXTRA, run by check after test.
CHECK_EXTRA ?=
include $(sort $(wildcard mk/*.mk))

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
