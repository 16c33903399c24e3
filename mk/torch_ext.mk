# The C++ c10d backend (client/torch -> $(BUILD)/python/spcoll/_c10d.so),
# built against the torch of $(TORCH_VENV) (torch 2.x from PyPI; Debian's
# torch 1.13 ships no c10d headers). Its compile flags come from that torch
# (include paths, C++ ABI, CUDA where torch has it: scripts/
# torch_ext_flags.py); Python's headers from python3-dev. libspclient
# is linked in statically with its symbols hidden, so the extension needs
# nothing but torch (imported first) and libprotobuf-c at run time.
CXX        ?= g++
C10D_SRC   := $(wildcard client/torch/*.cpp)
C10D_OBJ   := $(patsubst client/torch/%.cpp,$(BUILD)/c10d/%.o,$(C10D_SRC))
C10D_EXT   := $(BUILD)/python/spcoll/_c10d.so
C10D_FLAGS := $(BUILD)/c10d/torch.flags
C10D_LIBS  := $(BUILD)/c10d/torch.libs

$(C10D_FLAGS) $(C10D_LIBS) &: $(TORCH_VENV_STAMP) scripts/torch_ext_flags.py
	@mkdir -p $(dir $@)
	$(Q)CUDA_HOME=$(CUDA_HOME) $(TORCH_VENV)/bin/python scripts/torch_ext_flags.py $(C10D_FLAGS) $(C10D_LIBS)
	$(Q)test -f $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' \
	  2>/dev/null)/Python.h || { echo "no Python.h: make deps installs python3-dev"; exit 1; }

$(BUILD)/c10d/%.o: client/torch/%.cpp $(wildcard client/torch/*.hpp) $(wildcard client/spcoll*.h) $(C10D_FLAGS)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -std=c++20 -g -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror \
	  -Iclient -Ikernels $$(cat $(C10D_FLAGS)) -DTORCH_API_INCLUDE_EXTENSION_H \
	  -c $< -o $@

$(C10D_EXT): $(C10D_OBJ) $(LIBA) $(C10D_LIBS)
	@mkdir -p $(dir $@)
	$(Q)$(CXX) -shared -o $@ $(C10D_OBJ) $(LIBA) $(PBC_LIBS) $$(cat $(C10D_LIBS)) \
	  -lc10 -ltorch -ltorch_cpu -ltorch_python -Wl,--exclude-libs,ALL

.PHONY: c10d
c10d: $(C10D_EXT)

# Installed beside the package when it was built.
install: install-c10d
install-c10d: install-python
	$(Q)if [ -f $(C10D_EXT) ]; then \
	  install -m 0755 $(C10D_EXT) $(DESTDIR)$(PY_SITE)/spcoll/_c10d.so; fi
