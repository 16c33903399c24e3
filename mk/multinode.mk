# Multi-node benchmark: 3 daemons peering over UCX on this machine, next to
# ucx_perftest tag_bw on the same transport, in one run.
XNODE_BENCH     := $(BUILD)/bin/spcoll-xnode-bench
XNODE_MAX_BYTES ?= 16777216

$(XNODE_BENCH): $(BUILD)/bench/xnode_bench.o $(BUILD)/tests/integ/harness.o \
  $(BUILD)/tests/integ/harness_nodes.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

# Plan time and memory per op against world size (64..4096 ranks, 8 a
# node): one node's part and cut, beside the whole plan.
PLAN_BENCH := $(BUILD)/bin/spcoll-plan-bench
$(PLAN_BENCH): $(BUILD)/bench/plan_bench.o $(LIBA)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(PBC_LIBS)

all: $(XNODE_BENCH) $(PLAN_BENCH)

# The baseline for what peer authentication costs: spcolld with every
# control message's MAC and the data tags' salt compiled out
# (SPD_PEER_NO_AUTH in daemon/peer/peer_auth.c; the handshake still runs).
# Built for bench-multinode only; never installed, never the daemon.
SPCOLLD_NOAUTH := $(BUILD)/bin/spcolld-noauth
$(BUILD)/noauth/peer_auth.o: daemon/peer/peer_auth.c $(PB_H)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) -DSPD_PEER_NO_AUTH -c $< -o $@
$(SPCOLLD_NOAUTH): $(filter-out $(BUILD)/daemon/peer/peer_auth.o,$(DAEMON_OBJ)) \
  $(BUILD)/noauth/peer_auth.o $(COMMON_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(UV_LIBS) $(PBC_LIBS) $(SD_LIBS) $(UCX_LIBS) $(CRYPTO_LIBS) $(GPU_LIBS)

# What a control message's MAC costs (peer_auth.c alone).
AUTH_BENCH := $(BUILD)/bin/spcoll-auth-bench
$(AUTH_BENCH): $(BUILD)/bench/auth_bench.o $(BUILD)/daemon/peer/peer_auth.o \
  $(KERNEL_OBJ)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $^ $(CRYPTO_LIBS)

.PHONY: bench-multinode
bench-multinode: deps
	$(Q)$(MAKE) --no-print-directory all $(SPCOLLD_NOAUTH) $(AUTH_BENCH)
	$(Q)mkdir -p $(BUILD)/bench
	$(Q)UCX_TLS=$${UCX_TLS:-tcp} sh scripts/bench_ucx.sh -o $(BUILD)/bench/ucx_xnode.csv \
	  -m $(XNODE_MAX_BYTES) > /dev/null
	$(Q)UCX_TLS=$${UCX_TLS:-tcp} $(XNODE_BENCH) --spcolld $(SPCOLLD) \
	  --spcolld-noauth $(SPCOLLD_NOAUTH) --ucx-csv $(BUILD)/bench/ucx_xnode.csv --max-bytes $(XNODE_MAX_BYTES) \
	  | tee $(BUILD)/bench/xnode.txt
	$(Q)$(AUTH_BENCH) | tee $(BUILD)/bench/auth.txt
	$(Q)$(PLAN_BENCH) | tee $(BUILD)/bench/plan.txt

# The longer scale run (make check runs the short one as multinode_scale):
# 16 daemons, the copy suite at worlds 64 and 128, the reduce suite at 64,
# the fault phase 3 times.
.PHONY: check-scale
check-scale: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)SPCOLLD=$(SPCOLLD) SPC_TEST_DATA=tests/data SPT_SCALE_LONG=1 \
	  sh tests/integ/multinode_scale.sh $(BUILD)
