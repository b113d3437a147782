#!/bin/sh
# The pipeline bubble measured against the schedule's simulation, and
# zb-h1 against 1f1b and gpipe: a uniform MLP (every layer alike) planned
# with --pp P --microbatches m under each schedule and run with --trace on
# P local ranks, one BLAS thread each; `partita run` prints the measured
# bubble (idle time over ranks x step time, median over the steps after the
# first) beside the schedule simulated with the measured mean F, B, W and
# update times of each stage. Rounds alternate the schedules.
#   bench/pipeline/bubble.sh [RANKS (2)] [MICROBATCHES (4)] [STEPS (12)]
# Environment: BUILD (default build), LAYERS (8), HIDDEN (512), BATCH (256),
# VOCAB (256), ROUNDS (3), SCHEDULES ("gpipe 1f1b zb-h1 zb-h1@1f1b"; NAME@L
# plans NAME with --stage-memory-limit L).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
ranks=${1:-2}
m=${2:-4}
steps=${3:-12}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
schedules=${SCHEDULES:-gpipe 1f1b zb-h1 zb-h1@1f1b}

"$build/bin/partita" model mlp --layers "${LAYERS:-8}" --hidden "${HIDDEN:-512}" \
  --batch "${BATCH:-256}" --vocab "${VOCAB:-256}" -o "$tmp/mlp.mlir"
for s in $schedules; do
  limit=
  case $s in *@*) limit="--stage-memory-limit ${s#*@}" ;; esac
  # shellcheck disable=SC2086
  "$build/bin/partita" plan "$tmp/mlp.mlir" --train adamw --strategy none \
    --pp "$ranks" --microbatches "$m" --schedule "${s%@*}" $limit --quiet -o "$tmp/$s.pb"
  : > "$tmp/$s.txt"
done
echo "bench/pipeline/bubble.sh: mlp ${LAYERS:-8} layers, hidden ${HIDDEN:-512}, batch ${BATCH:-256}; pp $ranks, m $m, $steps steps x ${ROUNDS:-3} rounds, 1 BLAS thread per rank; load $(cut -d' ' -f1-3 /proc/loadavg)"
round=0
while [ "$round" -lt "${ROUNDS:-3}" ]; do
  for s in $schedules; do
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/bin/partita" run \
      "$tmp/$s.pb" --ranks "$ranks" --steps "$steps" --trace "$tmp/trace.json" \
      >> "$tmp/$s.txt"
  done
  round=$((round + 1))
done
/usr/bin/python3 - "$tmp" $schedules <<'PY'
import re, statistics, sys
tmp, schedules = sys.argv[1], sys.argv[2:]
measured = {}
for s in schedules:
    text = open(f"{tmp}/{s}.txt").read()
    runs = re.findall(r"pipeline bubble: measured ([0-9.]+) .*simulated ([0-9.]+) ", text)
    steps = [float(x) for x in re.findall(r"^step \d+/\d+ +loss \S+ +\(([0-9.]+) ms\)$", text, re.M)]
    meas = statistics.median(float(a) for a, _ in runs)
    sim = statistics.median(float(b) for _, b in runs)
    ratios = [float(a) / float(b) for a, b in runs]
    measured[s] = meas
    print(f"{s:10s} bubble measured {meas:.4f}, simulated {sim:.4f}, measured/simulated "
          f"{statistics.median(ratios):.3f} (rounds {', '.join(f'{r:.3f}' for r in ratios)}); "
          f"step median {statistics.median(steps):.1f} ms")
for s in measured:
    if s.startswith("zb-h1") and "1f1b" in measured:
        print(f"{s} measured bubble / 1f1b's: {measured[s] / measured['1f1b']:.3f}")
PY
