#!/bin/sh
# Peak memory and step time of training before and after a change, side by
# side in one run: a BASE build of Partita (its bin/partita, and lib/ with
# its runtime libraries) against this tree's build, on the same GPT, the
# same strategies and the same local ranks.
#   bench/memory/run.sh BASE [RANKS] [STEPS]
# BASE: e.g. main built apart, without a worktree:
#   mkdir -p /tmp/base && git archive main | tar -x -C /tmp/base &&
#   cmake -G Ninja -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release &&
#   cmake --build /tmp/base/build -j1 --target partita   # BASE=/tmp/base/build
# Environment: BUILD (default build), STRATEGIES (default "dp zero2 zero3"),
# BATCH SEQ HIDDEN HEADS LAYERS VOCAB (default a 28.8M-parameter GPT: 4
# layers, hidden 768, 12 heads, seq 32, batch 8, vocab 256), ROUNDS (3).
# Each side plans with its own partita (the plan formats may differ), then
# the two alternate, ROUNDS times, each `partita run --ranks RANKS --steps
# STEPS+2` under /usr/bin/time (peak resident set of the process: all local
# ranks, the plan, BLAS, thread stacks). Prints per strategy: explain's
# predicted total per device (this build), both peak RSS (medians) and
# their ratio, this build's --report-memory high-water mark times RANKS, and
# both median step times (2 warm-up steps dropped per round) and their ratio.
# A base whose partita run gathers every final result on every rank (before
# the change that made that depend on --check/--save-params/--outputs) also
# holds the whole model's parameters and state as global arrays per rank at
# the end: the "new+gather" column runs this build with --save-params, which
# gathers them too.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
base=${1:?usage: bench/memory/run.sh BASE [RANKS] [STEPS]}
ranks=${2:-4}
steps=${3:-3}
rounds=${ROUNDS:-3}
B=${BATCH:-8} S=${SEQ:-32} H=${HIDDEN:-768} N=${HEADS:-12} L=${LAYERS:-4} V=${VOCAB:-256}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
new_partita() { "$build/bin/partita" "$@"; }
base_partita() { LD_LIBRARY_PATH="$base/lib" "$base/bin/partita" "$@"; }

new_partita model gpt --layers "$L" --batch "$B" --seq "$S" --hidden "$H" \
  --heads "$N" --vocab "$V" -o "$tmp/gpt.mlir"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# run SIDE PLAN TAG [FLAGS]: appends the peak RSS (KB) to $tmp/TAG.rss and
# the timed step times (ms) to $tmp/TAG.ms.
run() {
  side=$1 plan=$2 tag=$3
  shift 3
  if [ "$side" = base ]; then
    set -- env LD_LIBRARY_PATH="$base/lib" "$base/bin/partita" run "$plan" "$@"
  else
    set -- "$build/bin/partita" run "$plan" "$@"
  fi
  OPENBLAS_NUM_THREADS=1 /usr/bin/time -f "%M" -o "$tmp/time.txt" \
    "$@" --ranks "$ranks" --steps $((steps + 2)) \
    > "$tmp/out.txt" 2>&1 || { cat "$tmp/out.txt" >&2; exit 1; }
  tail -1 "$tmp/time.txt" >> "$tmp/$tag.rss"
  sed -n 's/^step \([0-9]*\)\/[0-9]*  loss [^ ]*  (\([0-9.]*\) ms)$/\1 \2/p' \
    "$tmp/out.txt" | awk '$1 > 2 {print $2}' >> "$tmp/$tag.ms"
  cp "$tmp/out.txt" "$tmp/$tag.last"
}

echo "GPT layers $L hidden $H heads $N seq $S batch $B vocab $V, $ranks local ranks, $rounds rounds x $steps steps"
printf '%-8s %14s %12s %12s %12s %7s %14s %9s %9s %7s\n' strategy \
  "explain/dev" "hwm x ranks" "base RSS" "new RSS" "new/base" "new+gather" \
  "base ms" "new ms" "new/base"
for s in ${STRATEGIES:-dp zero2 zero3}; do
  base_partita plan "$tmp/gpt.mlir" --train adamw --lr 1e-3 --strategy "$s" \
    --mesh "dp=$ranks" --quiet -o "$tmp/base-$s.pb"
  new_partita plan "$tmp/gpt.mlir" --train adamw --lr 1e-3 --strategy "$s" \
    --mesh "dp=$ranks" --quiet -o "$tmp/new-$s.pb"
  rm -f "$tmp"/*.rss "$tmp"/*.ms
  for r in $(seq "$rounds"); do
    run base "$tmp/base-$s.pb" base
    run new "$tmp/new-$s.pb" new --report-memory
  done
  rm -rf "$tmp/params"
  run new "$tmp/new-$s.pb" gather --save-params "$tmp/params"
  total=$(new_partita explain "$tmp/new-$s.pb" | sed -n 's/^  total *\([0-9]*\) B.*/\1/p')
  hwm=$(sed -n 's/.*high-water mark \([0-9]*\) B.*/\1/p' "$tmp/new.last")
  brss=$(median < "$tmp/base.rss") nrss=$(median < "$tmp/new.rss")
  grss=$(median < "$tmp/gather.rss")
  bms=$(median < "$tmp/base.ms") nms=$(median < "$tmp/new.ms")
  printf '%-8s %11.1f MB %9.1f MB %9.1f MB %9.1f MB %7.3f %11.1f MB %9.1f %9.1f %7.3f\n' \
    "$s" "$(echo "$total / 1000000" | bc -l)" "$(echo "$hwm * $ranks / 1000000" | bc -l)" \
    "$(echo "$brss * 1024 / 1000000" | bc -l)" "$(echo "$nrss * 1024 / 1000000" | bc -l)" \
    "$(echo "$nrss / $brss" | bc -l)" "$(echo "$grss * 1024 / 1000000" | bc -l)" \
    "$bms" "$nms" "$(echo "$nms / $bms" | bc -l)"
done
