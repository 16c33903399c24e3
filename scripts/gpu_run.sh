#!/bin/sh
# The GPU run: build here, run on a lent GPU machine (docs/gpu.md).
#
#   sh scripts/gpu_run.sh prepare [BUILD]   on the build machine (CUDA 13 and
#       NCCL under CUDA_HOME, no GPU needed): builds into BUILD (build-gpu),
#       stages the GPU binaries in .gpurun/ and the Debian libraries they
#       load in .devlibs/ (both git-ignored through .git/info/exclude), and
#       prints the device command to use.
#   sh scripts/gpu_run.sh run [tests|bench|all]   on the GPU machine, from
#       the repository root, with .gpurun and .devlibs carried there: the
#       GPU suites and the benchmark, every log under $OUT (./gpu-out when
#       unset), a summary at the end.
#
# libnccl is not copied (218 MB): the GPU machine has it in its Python
# wheel (nvidia.nccl). libcudart.so.13 is copied: the wheel's runtime may
# be another major version.
set -u

stage_bins="bin/spcolld bin/spcoll-gpu-bench"
stage_tests="unit_daemon_cuda_desc unit_client_cuda_abi test_gpu_absent \
test_gpu_errors test_gpu_ops"

exclude() {
  f=.git/info/exclude
  mkdir -p .git/info
  grep -qx "$1" "$f" 2>/dev/null || echo "$1" >> "$f"
}

prepare() {
  build=${1:-build-gpu}
  case "$(make --no-print-directory config)" in
    *"cuda: found"*) ;;
    *) echo "gpu_run: CUDA not found under CUDA_HOME: nothing to stage" >&2
       exit 1 ;;
  esac
  exclude "/$build/"
  exclude "/.gpurun/"
  exclude "/.devlibs/"
  make -j"$(nproc)" --no-print-directory BUILD="$build" all || exit 1
  rm -rf .gpurun .devlibs
  mkdir -p .gpurun/bin .gpurun/tests .devlibs
  for b in $stage_bins; do cp "$build/$b" .gpurun/bin/ || exit 1; done
  for t in $stage_tests; do cp "$build/tests/$t" .gpurun/tests/ || exit 1; done
  # What the binaries load from Debian, but glibc itself, the C++ runtime
  # (the driver may want a newer one than Debian's), the driver and NCCL.
  for b in .gpurun/bin/* .gpurun/tests/*; do ldd "$b"; done |
    awk '/=> \// { print $3 }' | sort -u |
    grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" .devlibs/; done
  ucx=$(dirname "$(ldd .gpurun/bin/spcolld | awk '/libucs\.so/ { print $3 }')" 2>/dev/null)
  if [ -n "$ucx" ] && [ -d "$ucx/ucx" ]; then
    cp -rL "$ucx/ucx" .devlibs/ucx
  fi
  strip --strip-debug .gpurun/bin/* .gpurun/tests/* .devlibs/*.so* 2>/dev/null
  echo "staged:"; du -sh .gpurun .devlibs
  ls .devlibs
  cat <<EOF

device command (carry [".gpurun", ".devlibs"]):
  sh scripts/gpu_run.sh run all
EOF
}

run() {
  what=${1:-all}
  OUT=${OUT:-$PWD/gpu-out}
  mkdir -p "$OUT"
  nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' \
    2>/dev/null)
  export LD_LIBRARY_PATH="$PWD/.devlibs${nccl:+:$nccl/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UCX_MODULE_DIR="$PWD/.devlibs/ucx"
  export SPCOLLD="$PWD/.gpurun/bin/spcolld"
  export SPCOLL_GPU_LOGS=1 # the daemons' logs go into each suite's log
  summary="$OUT/summary.txt"
  : > "$summary"
  {
    date -u
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv
    echo "nccl from: ${nccl:-not found (python3 nvidia.nccl)}"
    ldd "$SPCOLLD"
  } > "$OUT/device.txt" 2>&1
  head -n 4 "$OUT/device.txt" | tee -a "$summary"
  if [ "$what" = all ] || [ "$what" = tests ]; then
    for t in $stage_tests; do
      start=$(date +%s)
      ".gpurun/tests/$t" > "$OUT/$t.log" 2>&1
      rc=$?
      case $rc in
        0) verdict=PASS ;;
        77) verdict=SKIP ;;
        *) verdict=FAIL ;;
      esac
      echo "$verdict $t (exit $rc, $(( $(date +%s) - start )) s): $(grep -E '^[0-9]+%: Checks|^skipped' "$OUT/$t.log" | tail -n 1)" |
        tee -a "$summary"
    done
  fi
  if [ "$what" = all ] || [ "$what" = bench ]; then
    .gpurun/bin/spcoll-gpu-bench --ranks 4 --min-bytes 1M --max-bytes 1G \
      --csv "$OUT/gpu_bench.csv" > "$OUT/gpu_bench.txt" 2> "$OUT/gpu_bench.err"
    echo "bench exit $?" | tee -a "$summary"
    cat "$OUT/gpu_bench.txt"
  fi
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare [BUILD] | run [tests|bench|all]" >&2; exit 2 ;;
esac
