#!/bin/sh
# The CUDA toolkit from PyPI, for a machine without one under /usr/local/cuda
# (the toolkit is no Debian package): NVIDIA's own wheels (nvcc, the CUDA
# runtime and its headers, NCCL) installed into a virtualenv under DIR, and
# DIR/home laid out as a CUDA_HOME (bin/, include/, lib64/) of links into
# them (CCCL's headers too: cuda_fp16.h, which nccl.h includes, needs
# <nv/target>). With it the GPU code builds, and spcsim, the CUDA/NCCL simulator
# its suites run on, is built: their suites then run instead of SKIP.
# There is no GPU driver in these wheels: a real GPU still needs the
# machine's own (nor is there the driver's link stub, lib64/stubs).
#
# Made once per package list (DIR/.installed); bounded by CUDA_INSTALL_TIMEOUT seconds. A
# failed install fails, naming its log, unless PyPI cannot be reached: then
# it says so, the GPU suites SKIP, and it exits 0.
# Usage: sh scripts/cuda_toolkit.sh DIR
set -eu
DIR=${1:?usage: cuda_toolkit.sh DIR}
PYTHON=${PYTHON:-python3}
TIMEOUT=${CUDA_INSTALL_TIMEOUT:-900}
# The versions of the toolkit this project is built and tested with.
PKGS="nvidia-cuda-nvcc==13.0.* nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.* \
nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.* \
nvidia-cuda-profiler-api==13.0.* nvidia-nccl-cu13==2.28.*"
LOG=$DIR.log
VENV=$DIR/venv
HOME_DIR=$DIR/home

# Made for this list of packages: a new list installs anew.
[ -f "$DIR/.installed" ] && [ "$(head -n 1 "$DIR/.installed")" = "$PKGS" ] &&
  exit 0
[ -f "$DIR.offline" ] && exit 0
rm -rf "$DIR" "$DIR.offline"
mkdir -p "$DIR"
echo "== installing the CUDA toolkit from PyPI into $DIR (once; no /usr/local/cuda) =="
if ! "$PYTHON" -m venv "$VENV" > "$LOG" 2>&1; then
  echo "CUDA toolkit install failed: $PYTHON -m venv (make deps installs python3-venv): see $LOG"
  exit 1
fi
# shellcheck disable=SC2086  # PKGS is a list of words
if ! timeout "$TIMEOUT" "$VENV/bin/pip" install --disable-pip-version-check -q \
    $PKGS >> "$LOG" 2>&1; then
  if "$VENV/bin/pip" download --disable-pip-version-check --no-deps -q \
      -d "$DIR/pypi-probe" packaging >> "$LOG" 2>&1; then
    echo "CUDA toolkit install failed with PyPI reachable: see $LOG"
    exit 1
  fi
  echo "CUDA toolkit: PyPI cannot be reached (no network), GPU suites will SKIP: see $LOG"
  touch "$DIR.offline"
  exit 0
fi

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
CU=$SITE/nvidia/cu13
NCCL=$SITE/nvidia/nccl
for f in "$CU/bin/nvcc" "$CU/include/cuda_runtime.h" "$CU/include/nv/target" \
    "$CU/include/cuda_profiler_api.h" \
    "$CU/lib/libcudart.so.13" \
    "$NCCL/include/nccl.h" "$NCCL/lib/libnccl.so.2"; do
  [ -e "$f" ] || { echo "CUDA toolkit from PyPI lacks $f: see $LOG"; exit 1; }
done
# nvcc finds cicc, ptxas and its headers from its own real path, so bin/
# is one link; include/ and lib64/ merge the runtime's files with NCCL's.
mkdir -p "$HOME_DIR/include" "$HOME_DIR/lib64"
ln -sfn "$CU/bin" "$HOME_DIR/bin"
for f in "$CU"/include/* "$NCCL"/include/*; do
  ln -sfn "$f" "$HOME_DIR/include/$(basename "$f")"
done
ln -sfn "$CU/lib/libcudart.so.13" "$HOME_DIR/lib64/libcudart.so.13"
ln -sfn libcudart.so.13 "$HOME_DIR/lib64/libcudart.so"
ln -sfn "$NCCL/lib/libnccl.so.2" "$HOME_DIR/lib64/libnccl.so.2"
ln -sfn libnccl.so.2 "$HOME_DIR/lib64/libnccl.so"
{ echo "$PKGS"; "$HOME_DIR/bin/nvcc" --version | tail -n 1; } > "$DIR/.installed"
echo "CUDA toolkit: $(tail -n 1 "$DIR/.installed") under $HOME_DIR"
