#!/bin/sh
# The GPT forward step: Partita (`partita run`, one rank) against the same
# model in PyTorch (Debian's python3-torch), same machine, same threads.
#   bench/gpt-vs-torch/run.sh [THREADS] [STEPS]
# Environment: BUILD (default build), BATCH SEQ HIDDEN HEADS LAYERS VOCAB.
# Each side runs 2 untimed warm-up steps per round; medians of ROUNDS (3) x
# STEPS timed steps per side. Fair method (bench/common/fair.sh): the same
# OPENBLAS_CORETYPE for both processes, the kernels each runs printed and
# compared, torch at THREADS > 1 with OMP_WAIT_POLICY=PASSIVE; in each
# round the sides run in lockstep, a step each in turns.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
threads=${1:-1}
steps=${2:-10}
warmup=2
B=${BATCH:-4} S=${SEQ:-128} H=${HIDDEN:-256} N=${HEADS:-4} L=${LAYERS:-2} V=${VOCAB:-1024}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"

fair_require_torch

fair_setup "$threads"
"$build/bin/partita" model gpt --layers "$L" --batch "$B" --seq "$S" \
  --hidden "$H" --heads "$N" --vocab "$V" -o "$tmp/gpt.mlir"
"$build/bin/partita-translate" --to-plan "$tmp/gpt.mlir" -o "$tmp/gpt.pb"

# The sides take their steps in turns (lockstep), so a change of load on
# a shared machine hits both alike; every round drops
# its own warm-up steps. One rank: `partita run` leaves OpenBLAS at its
# default thread count, which OPENBLAS_NUM_THREADS sets.
: > "$tmp/partita.txt"
: > "$tmp/torch.txt"
round=0
while [ "$round" -lt "${ROUNDS:-3}" ]; do
  /usr/bin/python3 "$root/bench/common/lockstep.py" $((steps + warmup)) \
    "$tmp/round.txt" \
    "env OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
      $build/bin/partita run $tmp/gpt.pb --steps $((steps + warmup)) \
      --step-gate {gate}" \
    "$tmp/torch-round.txt" \
    "env $FAIR_TORCH_ENV /usr/bin/python3 $root/bench/gpt-vs-torch/torch_gpt.py \
      --threads $threads --steps $steps --warmup $warmup --batch $B \
      --seq $S --hidden $H --heads $N --layers $L --vocab $V --step-gate {gate}"
  sed -n "/^step /p" "$tmp/round.txt" | tail -n "$steps" >> "$tmp/partita.txt"
  cp "$tmp/round.txt" "$tmp/partita-last.txt"
  cat "$tmp/torch-round.txt" >> "$tmp/torch.txt"
  round=$((round + 1))
done

fair_check "$tmp/partita-last.txt" "$tmp/torch.txt"
/usr/bin/python3 - "$tmp/partita.txt" "$tmp/torch.txt" <<'PY'
import re, statistics, sys
def times(path):
    return [float(m.group(1)) for m in
            re.finditer(r"^step \d+: ([0-9.]+) s$", open(path).read(), re.M)]
p, t = times(sys.argv[1]), times(sys.argv[2])  # warm-up steps already dropped
mp, mt = statistics.median(p), statistics.median(t)
print([l for l in open(sys.argv[2]) if l.startswith("torch ")][-1].strip())
print(f"partita forward step median: {mp:.6f} s ({len(p)} steps)")
print(f"torch   forward step median: {mt:.6f} s ({len(t)} steps)")
print(f"ratio partita/torch (time, lower is better for partita): {mp / mt:.3f}")
PY
