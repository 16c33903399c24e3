# Benchmarks print numbers (and write CSV, JSON and a PNG); they assert
# nothing. `make bench` runs scripts/bench_run.sh: spcoll-bench for every
# rank count (twice up to BENCH_AGAIN_BYTES), its latency mode, and the
# same-run baselines (Open MPI, gloo, ucx_perftest), the torch.distributed
# run (bench-torch, below), then the merged table with ratios and the plot.
# Knobs (environment or make variables):
#   BENCH_RANKS       world sizes                         (2 4 8)
#   BENCH_MAX_BYTES   largest size; the ladder is 8 B x4 up to it, then it
#                     (1 GiB); points over the memory bound are skipped
#   BENCH_ITERS       timed iterations from 64 KiB to 1 MiB, up to 50x as
#                     many below, fewer above (200)
#   BENCH_LAT_ITERS   round trips per rank in the latency mode (10000)
#   BENCH_BASELINES   which baselines run: any of mpi gloo ucx (all)
#   BENCH_GLOO_MAX_BYTES  gloo's largest size (256 MiB: TCP loopback)
#   BENCH_AGAIN_BYTES     spcoll's second round, after the baselines, runs
#                     the sizes up to this (32 MiB; 0: none): the better of
#                     its two rounds is set against the better of Open
#                     MPI's two runs
#   BENCH_THIRD_BYTES     a third draw of Open MPI (plain) and of spcoll,
#                     after those, of the sizes up to this (1 MiB; 0: none):
#                     each side's best of three stands
#   BENCH_PAIR_BYTES  spcoll and Open MPI timed in turn in the same
#                     processes (spcoll-pair-bench), sizes up to this
#                     (1 MiB; 0: none): both share the VM's states
#   BENCH_PAIR_ITERS  its bench_iters base (1000)
#   BENCH_MEM_FRACTION    share of MemAvailable one point may use (0.5)
#   BENCH_OUT         where results go ($(BUILD)/bench)
# `make bench-torch` (run by `make bench` too, from bench_run.sh):
# scripts/bench_torch.py, ordinary torch CPU tensors through
# torch.distributed on backend "spcoll" (the C++ c10d backend, also on a
# second group without torch's FlightRecorder hook) and on gloo in the
# same processes, then ("spcoll alloc") on tensors allocated after
# spcoll.c10d.use_cpu_allocator() in a second phase of those processes,
# each point checked with spcoll.c10d.counts() to stage nothing (a
# warning line if it did), beside spcoll's C call at the same size on
# spcoll memory (spcoll-torch-ccall, bench/torch_ccall.c), each through
# a private spcolld; run twice, the second time with torch's
# THP_MEM_ALLOC_ENABLE=1 (--thp, into $(BENCH_OUT)/thp); needs `make all`,
# `make c10d` and the torch venv ($(TORCH_VENV_STAMP), made once from
# PyPI; SKIP without network):
#   BENCH_TORCH_RANKS      world sizes                          (2 4)
#   BENCH_TORCH_MAX_BYTES  largest size; 8 B x4 up to it        (32 MiB)
#   BENCH_TORCH_ITERS      most timed iterations from 64 KiB to 1 MiB, up
#                          to 50x as many below, fewer above    (200)
#   BENCH_TORCH_MIN_ITERS  fewest timed iterations              (10)
#   BENCH_TORCH_BLOCK_MS   each source's timed iterations, and its warm-up,
#                          aim at about this long per point     (250)
BENCH_RANKS ?= 2 4 8
BENCH_MAX_BYTES ?= 1073741824
BENCH_ITERS ?= 200
BENCH_LAT_ITERS ?= 10000
BENCH_BASELINES ?= mpi gloo ucx
BENCH_GLOO_MAX_BYTES ?= 268435456
BENCH_AGAIN_BYTES ?= 33554432
BENCH_THIRD_BYTES ?= 1048576
BENCH_PAIR_BYTES ?= 1048576
BENCH_PAIR_ITERS ?= 1000
BENCH_OUT ?= $(BUILD)/bench
BENCH_TORCH_RANKS ?= 2 4
BENCH_TORCH_MAX_BYTES ?= 33554432
BENCH_TORCH_ITERS ?= 200
BENCH_TORCH_MIN_ITERS ?= 10
BENCH_TORCH_BLOCK_MS ?= 250

BENCH_SRC := bench/spcoll_bench.c bench/bench_sweep.c bench/spcoll_point.c \
  bench/bench_latency.c bench/bench_memcpy.c bench/bench_common.c
MPI_BENCH := $(BUILD)/bin/spcoll-mpi-bench
MPICC ?= mpicc

$(BENCH): $(call obj,$(BENCH_SRC)) $(BUILD)/tests/integ/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

# How long ops are unavailable across an upgrade of the daemon
# (bench/upgrade_bench.c; `make bench` runs it, scripts/bench_run.sh).
UPGRADE_BENCH := $(BUILD)/bin/spcoll-upgrade-bench
$(UPGRADE_BENCH): $(BUILD)/bench/upgrade_bench.o \
  $(BUILD)/tests/integ/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)
all: $(UPGRADE_BENCH)

# The Open MPI baseline needs mpicc (Debian libopenmpi-dev): built by
# `make bench` only, so `all` never depends on MPI.
MPI_BENCH_SRC := bench/mpi_bench.c bench/mpi_ops.c bench/bench_common.c
$(MPI_BENCH): $(MPI_BENCH_SRC) bench/mpi_ops.h bench/bench_common.h
	@mkdir -p $(dir $@)
	$(Q)$(MPICC) -std=gnu11 -O2 -g -D_GNU_SOURCE $(WARN) $(CFLAGS) -Ibench \
	  -o $@ $(MPI_BENCH_SRC)

# spcoll and Open MPI in the same processes (bench/pair_bench.c): mpicc
# with our include paths, linked with the client library.
PAIR_BENCH := $(BUILD)/bin/spcoll-pair-bench
PAIR_OBJ := $(BUILD)/bench/mpi/pair_bench.o $(BUILD)/bench/mpi/mpi_ops.o
$(BUILD)/bench/mpi/%.o: bench/%.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(MPICC) $(CFLAGS_ALL) -Ibench -Itests/integ -MMD -MP -c -o $@ $<
$(PAIR_BENCH): $(PAIR_OBJ) $(call obj,bench/spcoll_point.c bench/bench_common.c) \
  $(BUILD)/tests/integ/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(MPICC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

# The C calls under scripts/bench_torch.py's torch ops (bench/torch_ccall.c):
# built by `make bench-torch` and `make bench` only, like the MPI benches.
TORCH_CCALL := $(BUILD)/bin/spcoll-torch-ccall
$(TORCH_CCALL): $(call obj,bench/torch_ccall.c bench/bench_common.c) \
  $(BUILD)/tests/integ/harness.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

# The copy rates that bound caller memory (bench/copy_rate.c), printed by
# scripts/bench_torch.py before its tables.
COPY_RATE := $(BUILD)/bin/spcoll-copy-rate
$(COPY_RATE): $(call obj,bench/copy_rate.c)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^

bench: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)if command -v $(MPICC) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory $(MPI_BENCH) $(PAIR_BENCH); \
	else echo "# no $(MPICC): the Open MPI baseline is skipped"; fi
	$(Q)$(MAKE) --no-print-directory bench-torch-deps || \
	  echo "# the torch benchmark's prerequisites failed: it is skipped"
	$(Q)BUILD=$(BUILD) BENCH_OUT=$(BENCH_OUT) BENCH_RANKS="$(BENCH_RANKS)" \
	  BENCH_MAX_BYTES=$(BENCH_MAX_BYTES) BENCH_ITERS=$(BENCH_ITERS) \
	  BENCH_LAT_ITERS=$(BENCH_LAT_ITERS) BENCH_BASELINES="$(BENCH_BASELINES)" \
	  BENCH_GLOO_MAX_BYTES=$(BENCH_GLOO_MAX_BYTES) \
	  BENCH_AGAIN_BYTES=$(BENCH_AGAIN_BYTES) \
	  BENCH_THIRD_BYTES=$(BENCH_THIRD_BYTES) \
	  BENCH_PAIR_BYTES=$(BENCH_PAIR_BYTES) BENCH_PAIR_ITERS=$(BENCH_PAIR_ITERS) \
	  BENCH_TORCH_PYTHON=$(TORCH_VENV)/bin/python \
	  BENCH_TORCH_STAMP=$(TORCH_VENV_STAMP) BENCH_TORCH_C10D=$(C10D_EXT) \
	  BENCH_TORCH_RANKS="$(BENCH_TORCH_RANKS)" \
	  BENCH_TORCH_MAX_BYTES=$(BENCH_TORCH_MAX_BYTES) \
	  BENCH_TORCH_ITERS=$(BENCH_TORCH_ITERS) \
	  BENCH_TORCH_MIN_ITERS=$(BENCH_TORCH_MIN_ITERS) \
	  BENCH_TORCH_BLOCK_MS=$(BENCH_TORCH_BLOCK_MS) \
	  sh scripts/bench_run.sh

# What bench-torch needs beyond `all`: its C side, and, where torch from
# PyPI is installed (or can be), the c10d extension.
.PHONY: bench-torch bench-torch-deps
bench-torch-deps: all $(TORCH_CCALL) $(COPY_RATE)
	$(Q)$(call TORCH_READY,bench-torch) \
	  $(MAKE) --no-print-directory c10d; fi

BENCH_TORCH_ARGS = --ranks "$(BENCH_TORCH_RANKS)" \
  --max-bytes $(BENCH_TORCH_MAX_BYTES) --iters $(BENCH_TORCH_ITERS) \
  --min-iters $(BENCH_TORCH_MIN_ITERS) --block-ms $(BENCH_TORCH_BLOCK_MS) \
  --out $(BENCH_OUT) --spcolld $(SPCOLLD) --ccall $(TORCH_CCALL) \
  --copy-rate $(COPY_RATE) --c10d $(C10D_EXT) --lib $(LIBSO)

# Twice: torch's default allocation, then its THP_MEM_ALLOC_ENABLE=1
# (--thp, results under $(BENCH_OUT)/thp).
bench-torch: bench-torch-deps
	$(Q)if [ -f $(TORCH_VENV_STAMP) ]; then \
	  $(TORCH_VENV)/bin/python scripts/bench_torch.py $(BENCH_TORCH_ARGS) && \
	  $(TORCH_VENV)/bin/python scripts/bench_torch.py $(BENCH_TORCH_ARGS) \
	    --thp --out $(BENCH_OUT)/thp; fi
