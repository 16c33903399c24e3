# The layer check (docs/architecture.md): tests/layers.py over the
# includes and calls of the daemon's sources. Run by check.
.PHONY: check-layers
check-layers:
	$(Q)echo "== layers: tests/layers.py =="
	$(Q)python3 tests/layers.py

CHECK_EXTRA += check-layers
