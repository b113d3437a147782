#!/bin/sh
# The bf16-mixed train step against the fp32 one (issue 16): the same GPT
# planned with `--train adamw` twice, fp32 and `--precision bf16-mixed`,
# run by the same runner, one rank, alternating rounds, and also the
# bf16-mixed plan with bf16 contractions widened to f32 (PARTITA_ONEDNN=OFF:
# what the step cost before oneDNN). Prints each median step and the ratios.
#   bench/bf16-step/run.sh [THREADS] [STEPS] [ROUNDS]
# Environment: PARTITA (compiler, default build/bin/partita), RUN (runner,
# default build/bin/partita-run), LAYERS HIDDEN HEADS SEQ BATCH VOCAB;
# TORCH=1 also runs PyTorch's bf16 autocast step against its fp32 step on
# the same model (torch_step.py, Debian's python3-torch), after Partita's
# rounds, with the fair method's torch settings.
# Each run drops its first step (warm-up: primitives and scratch are made
# then). Fair method (bench/common/fair.sh): one OPENBLAS_CORETYPE for every
# run, OPENBLAS_NUM_THREADS=THREADS, rounds alternating their order; at
# THREADS > 1 every run has OMP_WAIT_POLICY=PASSIVE (set OMP_WAIT_POLICY to
# override), without which the runtime runs oneDNN on one thread
# (runtime/lib/cpu/OneDnnGemm.cpp); fp32 runs never start OpenMP threads.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
partita=${PARTITA:-$root/build/bin/partita}
run=${RUN:-$root/build/bin/partita-run}
threads=${1:-1}
steps=${2:-6}
rounds=${3:-3}
L=${LAYERS:-4} H=${HIDDEN:-512} N=${HEADS:-8} S=${SEQ:-256} B=${BATCH:-8}
V=${VOCAB:-1024}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"
fair_setup "$threads"
export OPENBLAS_NUM_THREADS="$threads"
if [ "$threads" -gt 1 ]; then
  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  export OMP_WAIT_POLICY
fi

"$partita" model gpt --layers "$L" --hidden "$H" --heads "$N" --seq "$S" \
  --batch "$B" --vocab "$V" -o "$tmp/gpt.mlir"
"$partita" plan "$tmp/gpt.mlir" --train adamw --strategy dp --mesh dp=1 \
  --quiet -o "$tmp/fp32.pb"
"$partita" plan "$tmp/gpt.mlir" --train adamw --precision bf16-mixed \
  --strategy dp --mesh dp=1 --quiet -o "$tmp/bf16.pb"
echo "bf16-step: gpt layers $L hidden $H heads $N seq $S batch $B vocab $V;" \
  "threads $threads (OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset})," \
  "$steps steps x $rounds rounds; $(date -u '+%F %H:%M UTC');" \
  "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"

# side NAME: one run of that side, its steps after the first appended to
# $tmp/NAME.txt.
side() {
  case $1 in
  fp32) env "$run" "$tmp/fp32.pb" --steps $((steps + 1)) > "$tmp/out.txt" ;;
  bf16) env "$run" "$tmp/bf16.pb" --steps $((steps + 1)) > "$tmp/out.txt" ;;
  widened) env PARTITA_ONEDNN=OFF "$run" "$tmp/bf16.pb" --steps $((steps + 1)) \
      > "$tmp/out.txt" ;;
  esac
  grep -m1 'kernels' "$tmp/out.txt" | sed "s/^/bf16-step: $1: /"
  sed -n 's/^step \([0-9]*\)\/[0-9]*  loss [0-9.]*  (\([0-9.]*\) ms)$/\1 \2/p' \
    "$tmp/out.txt" | awk '$1 > 1 { print $2 }' >> "$tmp/$1.txt"
}
: > "$tmp/fp32.txt"
: > "$tmp/bf16.txt"
: > "$tmp/widened.txt"
r=1
while [ "$r" -le "$rounds" ]; do
  if [ $((r % 2)) -eq 1 ]; then order="fp32 bf16 widened"; else order="widened bf16 fp32"; fi
  for s in $order; do side "$s"; done
  r=$((r + 1))
done
/usr/bin/python3 - "$tmp" <<'PY'
import statistics, sys
tmp = sys.argv[1]
m = {}
for s in ("fp32", "bf16", "widened"):
    t = [float(x) for x in open(f"{tmp}/{s}.txt").read().split()]
    m[s] = statistics.median(t)
    print(f"{s:8s} step median {m[s]:9.1f} ms  ({len(t)} steps, "
          f"min {min(t):.1f}, max {max(t):.1f})")
print(f"bf16-mixed / fp32 step: {m['bf16'] / m['fp32']:.3f}")
print(f"bf16-mixed widened (PARTITA_ONEDNN=OFF) / fp32 step: "
      f"{m['widened'] / m['fp32']:.3f}")
PY
if [ "${TORCH:-0}" = 1 ]; then
  fair_require_torch
  # shellcheck disable=SC2086
  env $FAIR_TORCH_ENV /usr/bin/python3 "$root/bench/bf16-step/torch_step.py" \
    --threads "$threads" --steps "$steps" --rounds "$rounds" --batch "$B" \
    --seq "$S" --hidden "$H" --heads "$N" --layers "$L" --vocab "$V"
fi
echo "bf16-step: $(uptime | sed 's/.*load/load/')"
