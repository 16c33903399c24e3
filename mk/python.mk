# The PyTorch front end (client/python): its pytest suites run in `check`
# (check-python) and its package is installed by `install` (install-python).
# Everything is derived from $(BUILD), so BUILD=build-x works too.

PYTHON  ?= /usr/bin/python3
PY_PKG  := client/python/spcoll
CPEER   := $(BUILD)/python/spcoll_cpeer
PY_VER   = $(or $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null),3)
# Where $(PYTHON) looks under PREFIX: Debian's dist-packages for /usr and
# /usr/local, site-packages anywhere else (then add it to PYTHONPATH).
PY_SITE ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(if \
  $(filter /usr/local,$(PREFIX)),$(PREFIX)/lib/python$(PY_VER)/dist-packages,$(PREFIX)/lib/python$(PY_VER)/site-packages))

.PHONY: check-python install-python

# The C rank of the shared-group test (C and PyTorch ranks in one group).
$(CPEER): tests/python/cpeer.c $(LIBA) client/spcoll.h
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIBA) $(LDFLAGS_ALL) $(PBC_LIBS)

# pytest with Debian's python3-torch: a private spcolld, 2-4 rank processes.
# Without torch or pytest the suite is reported as SKIP (not as passed).
check-python: $(LIBSO) $(SPCOLLD) $(CPEER)
	$(Q)if ! $(PYTHON) -c 'import torch, pytest' >/dev/null 2>&1; then \
	  echo "SKIP check-python: $(PYTHON) cannot import torch and pytest" \
	    "(make deps installs python3-torch and python3-pytest)"; \
	else \
	  echo "== Python front end: pytest tests/python ($(PYTHON)) =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  SPCOLL_CPEER=$(abspath $(CPEER)) PYTHONPATH=$(CURDIR)/client/python \
	  PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -rs -p no:cacheprovider \
	    tests/python; \
	fi

CHECK_EXTRA += check-python check-python-torch-latest check-python-upstream

# The same suites on the newest torch from PyPI, in a virtualenv under
# $(BUILD) made once and then reused (stamp file). PyPI's Linux torch wheel
# needs its nvidia-*/cuda-* packages even to import on a machine without a
# GPU (libtorch links libcufile, libcudart, ...): measured here, torch
# 2.15.0 alone (--no-deps) fails to import (libcufile.so.0), the full
# install is ~5.4 GiB and took 73 s. The install is bounded by
# TORCH_INSTALL_TIMEOUT seconds; when it fails (no network, timeout) the
# suite is reported as SKIP with the log's path, not as passed.
# `make torch-latest-refresh` replaces the venv with the then-newest torch.
TORCH_VENV            := $(BUILD)/torch-latest
TORCH_VENV_STAMP      := $(TORCH_VENV)/.installed
TORCH_INSTALL_TIMEOUT ?= 900
TORCH_PIP_SPEC        ?= torch

.PHONY: check-python-torch-latest torch-latest-refresh
$(TORCH_VENV_STAMP):
	$(Q)rm -rf $(TORCH_VENV) && mkdir -p $(BUILD)
	$(Q)echo "== installing the newest torch from PyPI into $(TORCH_VENV)" \
	  "(once; bounded to $(TORCH_INSTALL_TIMEOUT) s) =="
	$(Q)if $(PYTHON) -m venv $(TORCH_VENV) > $(BUILD)/torch-latest.log 2>&1 && \
	  timeout $(TORCH_INSTALL_TIMEOUT) $(TORCH_VENV)/bin/pip install \
	    --disable-pip-version-check -q "$(TORCH_PIP_SPEC)" numpy pytest \
	    >> $(BUILD)/torch-latest.log 2>&1 && \
	  $(TORCH_VENV)/bin/python -c 'import torch.distributed as d; assert d.is_available()' \
	    >> $(BUILD)/torch-latest.log 2>&1; then \
	  $(TORCH_VENV)/bin/python -c 'import torch; print(torch.__version__)' > $@; \
	else echo "torch install failed: see $(BUILD)/torch-latest.log"; rm -rf $(TORCH_VENV); fi

check-python-torch-latest: $(LIBSO) $(SPCOLLD) $(CPEER)
	$(Q)$(MAKE) --no-print-directory $(TORCH_VENV_STAMP) || true
	$(Q)if [ ! -f $(TORCH_VENV_STAMP) ]; then \
	  echo "SKIP check-python-torch-latest: no torch from PyPI" \
	    "(see $(BUILD)/torch-latest.log)"; \
	else \
	  echo "== Python front end: pytest tests/python (torch" \
	    "$$(cat $(TORCH_VENV_STAMP)) from PyPI, $(TORCH_VENV)) =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  SPCOLL_CPEER=$(abspath $(CPEER)) PYTHONPATH=$(CURDIR)/client/python \
	  PYTHONDONTWRITEBYTECODE=1 $(TORCH_VENV)/bin/python -m pytest -q -rs \
	    -p no:cacheprovider tests/python; \
	fi

# CUDA tensors from Python on spcsim (tests/gpusim): PyPI torch's CUDA
# build starts on the simulator, so the device path (registration, IPC,
# stream order both ways, both movers, the torch backend on CUDA tensors)
# runs end to end without a GPU; checks that need a kernel of torch's own
# are reported as skipped. Not a GPU result: on a real GPU the same suite
# runs under plain check-python-torch-latest.
.PHONY: check-python-cuda-sim
CHECK_EXTRA += check-python-cuda-sim
check-python-cuda-sim: $(LIBSO) $(SPCOLLD)
	$(Q)$(MAKE) --no-print-directory $(TORCH_VENV_STAMP) || true
	$(Q)if [ ! -f $(TORCH_VENV_STAMP) ]; then \
	  echo "SKIP check-python-cuda-sim: no torch from PyPI" \
	    "(see $(BUILD)/torch-latest.log)"; \
	elif [ ! -f $(BUILD)/gpusim/libcudart.so.13 ]; then \
	  echo "SKIP check-python-cuda-sim: no simulator under $(BUILD)/gpusim" \
	    "(CUDA/NCCL headers not found at build time)"; \
	else \
	  echo "== CUDA tensors from Python on spcsim (SIMULATED, torch" \
	    "$$(cat $(TORCH_VENV_STAMP))) =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  PYTHONPATH=$(CURDIR)/client/python PYTHONDONTWRITEBYTECODE=1 \
	  sh tests/python/cuda_sim.sh $(BUILD) $(TORCH_VENV)/bin/python; \
	fi

# Upstream sequence-parallel code from PyPI, unchanged (megatron-core,
# yunchang, DeepSpeed, axolotl-ringmaster), in the same virtualenv, checked on backend "spcoll"
# against "gloo" (tests/python_upstream). DeepSpeed is an sdist: built
# against the venv's torch (--no-build-isolation), no ops compiled ahead.
# (the stamp's suffix changes with the list, so a new list is installed)
UPSTREAM_STAMP := $(TORCH_VENV)/.upstream-2
UPSTREAM_PKGS  ?= megatron-core yunchang deepspeed axolotl-ringmaster
$(UPSTREAM_STAMP): $(TORCH_VENV_STAMP)
	$(Q)echo "== installing $(UPSTREAM_PKGS) from PyPI into $(TORCH_VENV) (once) =="
	$(Q)if DS_BUILD_OPS=0 timeout $(TORCH_INSTALL_TIMEOUT) $(TORCH_VENV)/bin/pip \
	    install --disable-pip-version-check -q --no-build-isolation \
	    $(UPSTREAM_PKGS) > $(BUILD)/torch-upstream.log 2>&1; then \
	  $(TORCH_VENV)/bin/pip list 2>/dev/null | grep -iE \
	    '^(megatron-core|yunchang|deepspeed|axolotl-ringmaster) ' > $@; \
	else echo "upstream install failed: see $(BUILD)/torch-upstream.log"; fi

.PHONY: check-python-upstream
check-python-upstream: $(LIBSO) $(SPCOLLD)
	$(Q)$(MAKE) --no-print-directory $(TORCH_VENV_STAMP) || true
	$(Q)if [ -f $(TORCH_VENV_STAMP) ]; then \
	  $(MAKE) --no-print-directory $(UPSTREAM_STAMP) || true; fi
	$(Q)if [ ! -f $(UPSTREAM_STAMP) ]; then \
	  echo "SKIP check-python-upstream: the upstream libraries did not" \
	    "install (see $(BUILD)/torch-latest.log, $(BUILD)/torch-upstream.log)"; \
	else \
	  echo "== upstream code on backend spcoll vs gloo (torch" \
	    "$$(cat $(TORCH_VENV_STAMP));" $$(cat $(UPSTREAM_STAMP) | tr -s ' ') ") =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  PYTHONPATH=$(CURDIR)/client/python PYTHONDONTWRITEBYTECODE=1 \
	  $(TORCH_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider \
	    -W ignore::UserWarning -W ignore::FutureWarning tests/python_upstream; \
	fi

torch-latest-refresh:
	rm -rf $(TORCH_VENV)
	$(MAKE) --no-print-directory $(TORCH_VENV_STAMP)

# The package, copied (no pip, no network) where $(PYTHON) finds it, with
# the library's directory recorded so it loads $(PREFIX)/lib/libspclient.so.1
# even when that is not on the loader's path; a dist-info makes pip see it.
PY_DIST := $(DESTDIR)$(PY_SITE)/spcoll-0.1.0.dist-info
install: install-python
install-python:
	install -d $(DESTDIR)$(PY_SITE)/spcoll $(PY_DIST)
	install -m 0644 $(PY_PKG)/*.py $(DESTDIR)$(PY_SITE)/spcoll/
	printf 'LIBDIR = "%s"\n' "$(PREFIX)/lib" > $(DESTDIR)$(PY_SITE)/spcoll/_install.py
	printf 'Metadata-Version: 2.1\nName: spcoll\nVersion: 0.1.0\nSummary: %s\n' \
	  "PyTorch front end of spcolld (sequence-parallel collectives)" > $(PY_DIST)/METADATA
	printf 'make\n' > $(PY_DIST)/INSTALLER
	cd $(DESTDIR)$(PY_SITE) && for f in spcoll/*.py spcoll-0.1.0.dist-info/METADATA \
	  spcoll-0.1.0.dist-info/INSTALLER; do echo "$$f,,"; done \
	  > spcoll-0.1.0.dist-info/RECORD && echo "spcoll-0.1.0.dist-info/RECORD,," \
	  >> spcoll-0.1.0.dist-info/RECORD
