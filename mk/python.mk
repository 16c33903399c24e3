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
$(CPEER): tests/python/cpeer.c $(LIBA) $(wildcard client/spcoll*.h)
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
# GPU (libtorch links libcufile, libcudart, ...): torch alone (--no-deps)
# does not import (libcufile.so.0), so the full install is used (~5.4 GiB).
# The install is bounded by TORCH_INSTALL_TIMEOUT seconds. A failure is a
# failure of `make check`, naming the log, unless PyPI cannot be reached
# (pip cannot fetch one small package either): then the torch 2.x suites
# are reported as SKIP, with the log's path, never as passed.
# `make torch-latest-refresh` replaces the venv with the then-newest torch.
TORCH_VENV            := $(BUILD)/torch-latest
TORCH_VENV_STAMP      := $(TORCH_VENV)/.installed
TORCH_OFFLINE         := $(BUILD)/torch-latest.offline
TORCH_INSTALL_TIMEOUT ?= 900
TORCH_PIP_SPEC        ?= torch

# PIP_FAILED(log, what): PyPI reachable -> say so and fail; else mark the
# machine offline (the suites then SKIP).
PIP_FAILED = if $(TORCH_VENV)/bin/pip download --disable-pip-version-check \
    --no-deps -q -d $(BUILD)/pypi-probe packaging >> $(1) 2>&1; then \
  echo "$(2) failed with PyPI reachable: see $(1)"; exit 1; \
  else echo "$(2): PyPI cannot be reached (no network): see $(1)"; \
  touch $(TORCH_OFFLINE); fi

.PHONY: check-python-torch-latest torch-latest-refresh
$(TORCH_VENV_STAMP):
	$(Q)rm -rf $(TORCH_VENV) $(TORCH_OFFLINE) && mkdir -p $(BUILD)
	$(Q)echo "== installing the newest torch from PyPI into $(TORCH_VENV)" \
	  "(once; bounded to $(TORCH_INSTALL_TIMEOUT) s) =="
	$(Q)$(PYTHON) -m venv $(TORCH_VENV) > $(BUILD)/torch-latest.log 2>&1 || { \
	  echo "torch install failed: $(PYTHON) -m venv (make deps installs" \
	    "python3-venv): see $(BUILD)/torch-latest.log"; exit 1; }
	$(Q)if timeout $(TORCH_INSTALL_TIMEOUT) $(TORCH_VENV)/bin/pip install \
	    --disable-pip-version-check -q "$(TORCH_PIP_SPEC)" numpy pytest \
	    >> $(BUILD)/torch-latest.log 2>&1 && \
	  $(TORCH_VENV)/bin/python -c 'import torch.distributed as d; assert d.is_available()' \
	    >> $(BUILD)/torch-latest.log 2>&1; then \
	  $(TORCH_VENV)/bin/python -c 'import torch; print(torch.__version__)' > $@; \
	else $(call PIP_FAILED,$(BUILD)/torch-latest.log,torch install); fi

# Runs its arguments when torch from PyPI is installed; SKIP (naming
# target) when the machine is offline (found once per build tree: `make
# torch-latest-refresh` tries again); fails when the install failed.
TORCH_READY = { [ -f $(TORCH_OFFLINE) ] || \
  $(MAKE) --no-print-directory $(TORCH_VENV_STAMP); } && \
  if [ ! -f $(TORCH_VENV_STAMP) ]; then \
    echo "SKIP $(1): no network, no torch from PyPI (see $(BUILD)/torch-latest.log)"; \
  else

check-python-torch-latest: $(LIBSO) $(SPCOLLD) $(CPEER)
	$(Q)$(call TORCH_READY,check-python-torch-latest) \
	  $(MAKE) -j4 --no-print-directory $(C10D_EXT) || exit 1; \
	  echo "== Python front end: pytest tests/python (torch" \
	    "$$(cat $(TORCH_VENV_STAMP)) from PyPI, $(TORCH_VENV)) =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  SPCOLL_CPEER=$(abspath $(CPEER)) PYTHONPATH=$(CURDIR)/client/python \
	  SPCOLL_C10D=$(abspath $(C10D_EXT)) \
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
	$(Q)$(call TORCH_READY,check-python-cuda-sim) if [ ! -f $(BUILD)/gpusim/libcudart.so.13 ]; then \
	  echo "SKIP check-python-cuda-sim: no simulator under $(BUILD)/gpusim" \
	    "(CUDA/NCCL headers not found at build time)"; \
	else $(MAKE) -j4 --no-print-directory $(C10D_EXT) || exit 1; \
	  echo "== CUDA tensors from Python on spcsim (SIMULATED, torch" \
	    "$$(cat $(TORCH_VENV_STAMP))) =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  PYTHONPATH=$(CURDIR)/client/python PYTHONDONTWRITEBYTECODE=1 \
	  SPCOLL_C10D=$(abspath $(C10D_EXT)) \
	  sh tests/python/cuda_sim.sh $(BUILD) $(TORCH_VENV)/bin/python; \
	fi; fi

# Upstream sequence-parallel code from PyPI, unchanged (megatron-core,
# yunchang, DeepSpeed, axolotl-ringmaster), in the same virtualenv, checked on backend "spcoll"
# against "gloo" (tests/python_upstream). DeepSpeed is an sdist: built
# against the venv's torch (--no-build-isolation), no ops compiled ahead,
# told the CUDA toolkit of this build (its setup runs nvcc where torch's
# guess of CUDA_HOME names a folder, even an empty one);
# on the CPU it JIT-builds its shm comm op at import, which needs ninja on
# PATH (from PyPI into the venv, whose bin/ the suite's PATH leads with: a
# fresh machine has none).
# (the stamp's suffix changes with the list, so a new list is installed)
UPSTREAM_STAMP := $(TORCH_VENV)/.upstream-3
UPSTREAM_PKGS  ?= megatron-core yunchang deepspeed axolotl-ringmaster ninja
$(UPSTREAM_STAMP): $(TORCH_VENV_STAMP)
	$(Q)echo "== installing $(UPSTREAM_PKGS) from PyPI into $(TORCH_VENV) (once) =="
	$(Q)if CUDA_HOME=$(CUDA_HOME) DS_BUILD_OPS=0 timeout $(TORCH_INSTALL_TIMEOUT) $(TORCH_VENV)/bin/pip \
	    install --disable-pip-version-check -q --no-build-isolation \
	    $(UPSTREAM_PKGS) > $(BUILD)/torch-upstream.log 2>&1; then \
	  $(TORCH_VENV)/bin/pip list 2>/dev/null | grep -iE \
	    '^(megatron-core|yunchang|deepspeed|axolotl-ringmaster) ' > $@; \
	else $(call PIP_FAILED,$(BUILD)/torch-upstream.log,upstream install); fi

.PHONY: check-python-upstream
check-python-upstream: $(LIBSO) $(SPCOLLD)
	$(Q)$(call TORCH_READY,check-python-upstream) \
	  $(MAKE) -j4 --no-print-directory $(UPSTREAM_STAMP) $(C10D_EXT) || exit 1; \
	if [ ! -f $(UPSTREAM_STAMP) ]; then \
	  echo "SKIP check-python-upstream: no network, the upstream libraries" \
	    "did not install (see $(BUILD)/torch-upstream.log)"; \
	else \
	  echo "== upstream code on backend spcoll vs gloo (torch" \
	    "$$(cat $(TORCH_VENV_STAMP));" $$(cat $(UPSTREAM_STAMP) | tr -s ' ') ") =="; \
	  SPCOLL_LIB=$(abspath $(LIBSO)) SPCOLLD=$(abspath $(SPCOLLD)) \
	  PYTHONPATH=$(CURDIR)/client/python PYTHONDONTWRITEBYTECODE=1 \
	  SPCOLL_C10D=$(abspath $(C10D_EXT)) PATH=$(abspath $(TORCH_VENV))/bin:$$PATH \
	  $(TORCH_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider \
	    -W ignore::UserWarning -W ignore::FutureWarning tests/python_upstream; \
	fi; fi

torch-latest-refresh:
	rm -rf $(TORCH_VENV) $(TORCH_OFFLINE)
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
