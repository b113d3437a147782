#!/bin/bash
# pipeline_matrix.sh MODEL.mlir DIR NAME: plans MODEL with each schedule
# (gpipe, 1f1b, zb-h1; interleaved where m is a multiple of pp) on pp 2 and
# 4 with m in {1, 3, 8}, runs each for 50 AdamW steps on pp local ranks, and
# prints per run whether its losses and final parameters equal, bit for
# bit, the one-rank run of the same m microbatches. Exits non-zero when a
# plan or run fails.
set -euo pipefail
model=$1 dir=$2 name=$3
here=$(dirname "$0")
mkdir -p "$dir"
losses() { sed -n 's/^\(step [0-9/]*  loss [^ ]*\).*/\1/p'; }
for m in 1 3 8; do
  if [ "$m" = 1 ]; then extra=(); else extra=(--microbatches "$m"); fi
  partita plan "$model" --train adamw --strategy none "${extra[@]}" --quiet -o "$dir/m$m.pb"
  partita run "$dir/m$m.pb" --steps 50 --save-params "$dir/m$m" | losses > "$dir/m$m.loss"
done
for pp in 2 4; do
  for m in 1 3 8; do
    for s in gpipe 1f1b interleaved zb-h1; do
      [ "$s" = interleaved ] && [ $((m % pp)) != 0 ] && continue
      run="$dir/$s-pp$pp-m$m"
      partita plan "$model" --train adamw --strategy none --pp "$pp" \
        --microbatches "$m" --schedule "$s" --quiet -o "$run.pb"
      partita run "$run.pb" --ranks "$pp" --steps 50 --save-params "$run" | losses > "$run.loss"
      if cmp -s "$dir/m$m.loss" "$run.loss"; then l="losses equal"; else l="losses DIFFER"; fi
      a=$("${PYTHON:-python3}" "$here/same_arrays.py" "$dir/m$m" "$run" 2>&1 || true)
      echo "$name $s pp $pp m $m: $l, $a"
    done
  done
done
