# The C++ c10d backend (client/torch -> $(BUILD)/python/spcoll/_c10d.so),
# built against the torch of $(TORCH_VENV) (torch 2.x from PyPI; Debian's
# torch 1.13 ships no c10d headers). Its compile flags come from that torch
# (include paths, C++ ABI); Python's headers from python3-dev. libspclient
# is linked in statically with its symbols hidden, so the extension needs
# nothing but torch (imported first) and libprotobuf-c at run time.
CXX        ?= g++
C10D_SRC   := $(wildcard client/torch/*.cpp)
C10D_OBJ   := $(patsubst client/torch/%.cpp,$(BUILD)/c10d/%.o,$(C10D_SRC))
C10D_EXT   := $(BUILD)/python/spcoll/_c10d.so
C10D_FLAGS := $(BUILD)/c10d/torch.flags
C10D_LIBS  := $(BUILD)/c10d/torch.libs

$(C10D_FLAGS) $(C10D_LIBS) &: $(TORCH_VENV_STAMP)
	@mkdir -p $(dir $@)
	$(Q)$(TORCH_VENV)/bin/python -c 'import sysconfig, torch; \
	  from torch.utils import cpp_extension as c; \
	  print(" ".join(["-isystem " + p for p in c.include_paths()] + \
	    ["-isystem " + sysconfig.get_paths()["include"], \
	     "-D_GLIBCXX_USE_CXX11_ABI=%d" % torch._C._GLIBCXX_USE_CXX11_ABI]))' \
	  > $(C10D_FLAGS) 2>/dev/null
	$(Q)$(TORCH_VENV)/bin/python -c 'from torch.utils import cpp_extension as c; \
	  print(" ".join("-L" + p for p in c.library_paths()))' > $(C10D_LIBS) 2>/dev/null
	$(Q)test -f $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' \
	  2>/dev/null)/Python.h || { echo "no Python.h: make deps installs python3-dev"; exit 1; }

$(BUILD)/c10d/%.o: client/torch/%.cpp $(wildcard client/torch/*.hpp) client/spcoll.h $(C10D_FLAGS)
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
