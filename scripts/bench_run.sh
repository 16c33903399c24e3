#!/bin/sh
# `make bench`: spcoll-bench for every rank count with its same-run
# baselines (Open MPI plain and with glibc's mmap threshold raised, gloo)
# and a second spcoll round up to BENCH_AGAIN_BYTES, a third of Open MPI
# and of spcoll up to BENCH_THIRD_BYTES, spcoll and Open MPI in turn in
# the same processes up to BENCH_PAIR_BYTES, the latency mode, how long
# ops are unavailable across 10 upgrades of the daemon,
# ucx_perftest, torch.distributed on backend "spcoll" beside gloo and the
# C call (scripts/bench_torch.py, its own table and files), then
# scripts/bench_report.py's merged table with ratios, targets and PNGs. Everything lands in $BENCH_OUT and
# the whole output in $BENCH_OUT/bench.log. Knobs: see mk/bench.mk.
# A baseline that is missing or fails is reported and skipped; spcoll's own
# failure stops the run. Prints numbers; asserts nothing.
set -u
BUILD=${BUILD:-build}
OUT=${BENCH_OUT:-$BUILD/bench}
RANKS=${BENCH_RANKS:-2 4 8}
MAX=${BENCH_MAX_BYTES:-1073741824}
ITERS=${BENCH_ITERS:-200}
LAT_ITERS=${BENCH_LAT_ITERS:-10000}
BASELINES=${BENCH_BASELINES:-mpi gloo ucx}
GLOO_MAX=${BENCH_GLOO_MAX_BYTES:-268435456}
# spcoll's second round of the sizes up to this, after the baselines:
# Open MPI runs twice (plain and tuned) and the report takes the better, so
# spcoll too is timed twice, minutes apart, where one run's small points
# hang on which of the VM's states it drew (docs/performance.md).
AGAIN=${BENCH_AGAIN_BYTES:-33554432}
# A third draw for both, Open MPI (plain) then spcoll, of the sizes up to
# this: the VM's slow states last seconds, a whole op's small points, and
# two draws each still left a run's verdict on the smallest points to
# them (docs/performance.md). Below 1 MiB a draw costs seconds.
THIRD=${BENCH_THIRD_BYTES:-1048576}
# spcoll and Open MPI timed in turn in the same processes (spcoll-pair-
# bench), of the sizes up to this, with this base of iterations: both
# sides then share each of the VM's states, which separate runs draw each
# on its own (docs/performance.md). 0: none.
PAIR=${BENCH_PAIR_BYTES:-1048576}
PAIR_ITERS=${BENCH_PAIR_ITERS:-1000}
PY=${BENCH_PYTHON:-/usr/bin/python3}   # Debian's, the one with torch
# torch.distributed on backend "spcoll" vs gloo vs the C call
# (scripts/bench_torch.py, `make bench-torch`): torch 2.x from the venv
# that mk/python.mk makes, and the c10d extension; skipped without them.
TORCH_PY=${BENCH_TORCH_PYTHON:-$BUILD/torch-latest/bin/python}
TORCH_STAMP=${BENCH_TORCH_STAMP:-$BUILD/torch-latest/.installed}
TORCH_C10D=${BENCH_TORCH_C10D:-$BUILD/python/spcoll/_c10d.so}
TORCH_RANKS=${BENCH_TORCH_RANKS:-2 4}
TORCH_MAX=${BENCH_TORCH_MAX_BYTES:-33554432}
TORCH_ITERS=${BENCH_TORCH_ITERS:-200}
TORCH_MIN_ITERS=${BENCH_TORCH_MIN_ITERS:-10}
TORCH_BLOCK_MS=${BENCH_TORCH_BLOCK_MS:-250}
# Open MPI's reductions malloc a temporary per call; above glibc's mmap
# threshold each one is a fresh mmap that faults in every page. Raising
# the threshold (and the trim threshold, so freed memory stays) lets the
# heap reuse it: the "mpi_tuned" rows.
TUNED="glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"

mkdir -p "$OUT" || exit 1
[ "$GLOO_MAX" -gt "$MAX" ] && GLOO_MAX=$MAX
[ "$AGAIN" -gt "$MAX" ] && AGAIN=$MAX
[ "$THIRD" -gt "$MAX" ] && THIRD=$MAX
[ "$PAIR" -gt "$MAX" ] && PAIR=$MAX
[ "$TORCH_MAX" -gt "$MAX" ] && TORCH_MAX=$MAX
has() { case " $BASELINES " in *" $1 "*) return 0 ;; esac; return 1; }

machine() {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "kernel: $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|L3 cache|Hypervisor vendor):' |
    sed 's/  */ /g'
  grep -E '^(MemTotal|MemAvailable):' /proc/meminfo | sed 's/  */ /g'
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "spcolld mover threads: $(nproc)"
  command -v mpirun >/dev/null && echo "open mpi: $(mpirun --version 2>/dev/null | head -n 1)"
  $PY -c 'import torch; print("torch:", torch.__version__)' 2>/dev/null
  command -v ucx_info >/dev/null && echo "ucx: $(ucx_info -v 2>/dev/null | head -n 1)"
  echo "knobs: BENCH_RANKS='$RANKS' BENCH_MAX_BYTES=$MAX BENCH_ITERS=$ITERS" \
    "BENCH_LAT_ITERS=$LAT_ITERS BENCH_BASELINES='$BASELINES'" \
    "BENCH_GLOO_MAX_BYTES=$GLOO_MAX BENCH_AGAIN_BYTES=$AGAIN" \
    "BENCH_THIRD_BYTES=$THIRD BENCH_PAIR_BYTES=$PAIR" \
    "BENCH_PAIR_ITERS=$PAIR_ITERS"
}

run() {
  start=$(date +%s)
  machine | tee "$OUT/machine.txt"
  for n in $RANKS; do
    echo; echo "== $n ranks: spcoll =="
    "$BUILD/bin/spcoll-bench" --spcolld "$BUILD/bin/spcolld" --ranks "$n" \
      --max-bytes "$MAX" --iters "$ITERS" --csv "$OUT/spcoll_ranks$n.csv" \
      --json "$OUT/spcoll_ranks$n.json" || return 1
    if has mpi; then
      if [ -x "$BUILD/bin/spcoll-mpi-bench" ] && command -v mpirun >/dev/null; then
        echo; echo "== $n ranks: Open MPI =="
        $MPIRUN -np "$n" "$BUILD/bin/spcoll-mpi-bench" --max-bytes "$MAX" \
          --iters "$ITERS" --source mpi --csv "$OUT/mpi_ranks$n.csv" ||
          echo "# Open MPI baseline failed at $n ranks"
        echo; echo "== $n ranks: Open MPI, GLIBC_TUNABLES=$TUNED =="
        GLIBC_TUNABLES=$TUNED $MPIRUN -x GLIBC_TUNABLES -np "$n" \
          "$BUILD/bin/spcoll-mpi-bench" --max-bytes "$MAX" --iters "$ITERS" \
          --source mpi_tuned --csv "$OUT/mpi_tuned_ranks$n.csv" ||
          echo "# tuned Open MPI baseline failed at $n ranks"
      else
        echo "# no spcoll-mpi-bench or mpirun: Open MPI baseline skipped"
      fi
    fi
    if has gloo; then
      echo; echo "== $n ranks: torch.distributed gloo =="
      $PY scripts/bench_gloo.py --ranks "$n" --max-bytes "$GLOO_MAX" \
        --iters "$ITERS" --csv "$OUT/gloo_ranks$n.csv" ||
        echo "# gloo baseline failed at $n ranks"
    fi
    if [ "$AGAIN" -ge 8 ]; then
      echo; echo "== $n ranks: spcoll, second round up to $AGAIN B =="
      "$BUILD/bin/spcoll-bench" --spcolld "$BUILD/bin/spcolld" --ranks "$n" \
        --max-bytes "$AGAIN" --iters "$ITERS" \
        --csv "$OUT/spcoll_again_ranks$n.csv" \
        --json "$OUT/spcoll_again_ranks$n.json" || return 1
    fi
    if [ "$THIRD" -ge 8 ]; then
      if has mpi && [ -x "$BUILD/bin/spcoll-mpi-bench" ] &&
          command -v mpirun >/dev/null; then
        echo; echo "== $n ranks: Open MPI, third run up to $THIRD B =="
        $MPIRUN -np "$n" "$BUILD/bin/spcoll-mpi-bench" --max-bytes "$THIRD" \
          --iters "$ITERS" --source mpi_third \
          --csv "$OUT/mpi_third_ranks$n.csv" ||
          echo "# Open MPI's third run failed at $n ranks"
      fi
      echo; echo "== $n ranks: spcoll, third round up to $THIRD B =="
      "$BUILD/bin/spcoll-bench" --spcolld "$BUILD/bin/spcolld" --ranks "$n" \
        --max-bytes "$THIRD" --iters "$ITERS" \
        --csv "$OUT/spcoll_third_ranks$n.csv" \
        --json "$OUT/spcoll_third_ranks$n.json" || return 1
    fi
    if [ "$PAIR" -ge 8 ] && has mpi; then
      if [ -x "$BUILD/bin/spcoll-pair-bench" ] &&
          command -v mpirun >/dev/null; then
        echo; echo "== $n ranks: spcoll and Open MPI in the same processes," \
          "in turn, up to $PAIR B =="
        $MPIRUN -np "$n" "$BUILD/bin/spcoll-pair-bench" \
          --spcolld "$BUILD/bin/spcolld" --max-bytes "$PAIR" \
          --iters "$PAIR_ITERS" --csv "$OUT/pair_ranks$n.csv" ||
          echo "# the paired run failed at $n ranks"
      else
        echo "# no spcoll-pair-bench or mpirun: the paired run is skipped"
      fi
    fi
  done
  echo; echo "== latency: 8 B round trips between 2 ranks =="
  "$BUILD/bin/spcoll-bench" --spcolld "$BUILD/bin/spcolld" --latency \
    --ranks 2 --iters "$LAT_ITERS" --csv "$OUT/latency.csv" \
    --json "$OUT/latency.json" || return 1
  echo; echo "== availability: 10 upgrades of the daemon under 4 ranks =="
  "$BUILD/bin/spcoll-upgrade-bench" --spcolld "$BUILD/bin/spcolld" \
    --ranks 4 --upgrades 10 --csv "$OUT/upgrade.csv" ||
    echo "# the upgrade benchmark failed"
  if has ucx; then
    echo; echo "== ucx_perftest: the cross-node transport =="
    sh scripts/bench_ucx.sh -o "$OUT/ucx.csv" -m "$MAX" -i "$ITERS" ||
      echo "# ucx_perftest baseline failed"
  fi
  if [ -x "$TORCH_PY" ] && [ -f "$TORCH_STAMP" ] && [ -f "$TORCH_C10D" ] &&
      [ -x "$BUILD/bin/spcoll-torch-ccall" ]; then
    # twice: torch's default allocation, then THP_MEM_ALLOC_ENABLE=1
    for thp in "" --thp; do
      echo; echo "== torch.distributed: backend spcoll, gloo and the C call" \
        "${thp:+(torch's THP_MEM_ALLOC_ENABLE=1) }=="
      "$TORCH_PY" scripts/bench_torch.py $thp --ranks "$TORCH_RANKS" \
        --max-bytes "$TORCH_MAX" --iters "$TORCH_ITERS" \
        --min-iters "$TORCH_MIN_ITERS" --block-ms "$TORCH_BLOCK_MS" \
        --out "$OUT${thp:+/thp}" --spcolld "$BUILD/bin/spcolld" \
        --ccall "$BUILD/bin/spcoll-torch-ccall" --c10d "$TORCH_C10D" \
        --lib "$BUILD/lib/libspclient.so" ||
        echo "# the torch benchmark${thp:+ with $thp} failed"
    done
  else
    echo "# no torch venv ($TORCH_STAMP), c10d extension or" \
      "spcoll-torch-ccall: the torch benchmark is skipped"
  fi
  echo; echo "== merged =="
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
  report_py=$PY
  [ -x "$PY" ] || report_py=python3   # the report needs no torch
  $report_py scripts/bench_report.py "$OUT"
  echo "# bench run took $(( $(date +%s) - start )) s"
}

# Old result files would be merged as if they were this run's.
rm -f "$OUT"/spcoll_ranks*.csv "$OUT"/spcoll_ranks*.json "$OUT"/mpi_ranks*.csv \
  "$OUT"/spcoll_again_ranks*.csv "$OUT"/spcoll_again_ranks*.json \
  "$OUT"/mpi_tuned_ranks*.csv "$OUT"/gloo_ranks*.csv "$OUT"/latency.* \
  "$OUT"/mpi_third_ranks*.csv "$OUT"/spcoll_third_ranks*.* \
  "$OUT"/pair_ranks*.csv "$OUT"/upgrade.csv \
  "$OUT"/ucx.csv "$OUT"/summary.* "$OUT"/busbw_ranks*.png
rm -rf "$OUT/plot"
( run; echo $? > "$OUT/.rc" ) 2>&1 | tee "$OUT/bench.log"
rc=$(cat "$OUT/.rc" 2>/dev/null || echo 1)
rm -f "$OUT/.rc"
exit "$rc"
