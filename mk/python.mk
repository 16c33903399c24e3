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

CHECK_EXTRA += check-python

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
