#!/usr/bin/env bash
# Times dist-propagate on GPT graphs of 12, 48 and 96 layers at GPT-3 175B
# widths (hidden 12288, 96 heads, seq 2048), annotated by the dp+megatron
# recipe on a dp=8 x tp=8 mesh (batch 8). The vocabulary is GPT-3's 50257
# padded to 51200, a multiple of 128 * tp, as Megatron-LM pads it
# (--make-vocab-size-divisible-by 128), so the vocab-parallel embedding
# divides. Prints, per graph, the op count, the pass's wall time (best of N
# runs, from --mlir-timing: parsing and printing excluded) and the time per
# 1000 ops. Target: < 1 s at 96 layers, time linear in the op count.
#
#   bench/propagation/run.sh [runs]      (default 3; binaries from build/bin,
#                                         or $PARTITA_BIN)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${PARTITA_BIN:-$root/build/bin}"
runs="${1:-3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

printf '%-8s %8s %12s %16s\n' layers ops "ms/graph" "ms/1000 ops"
for layers in 12 48 96; do
  "$bin/partita" model gpt --layers "$layers" --hidden 12288 --heads 96 \
    --seq 2048 --vocab 51200 --batch 8 -o "$tmp/gpt.mlir"
  "$bin/partita" plan "$tmp/gpt.mlir" --mesh dp=8,tp=8 --strategy dp+megatron \
    --emit annotated --quiet -o "$tmp/annotated.mlir"
  # Ops in the function body: every line that defines a value, plus return.
  ops=$(( $(grep -cE '^\s+%[^ ]+ = ' "$tmp/annotated.mlir") + 1 ))
  best=""
  for ((i = 0; i < runs; ++i)); do
    "$bin/partita-opt" "$tmp/annotated.mlir" --dist-propagate \
      --mlir-timing --mlir-timing-display=list -o /dev/null 2>"$tmp/timing"
    s=$(awk '/DistPropagate/ { print $1; exit }' "$tmp/timing")
    if [ -z "$s" ]; then
      echo "no DistPropagate line in the timing report:" >&2
      cat "$tmp/timing" >&2
      exit 1
    fi
    if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN { exit !(a < b) }'; then
      best="$s"
    fi
  done
  awk -v l="$layers" -v n="$ops" -v s="$best" \
    'BEGIN { printf "%-8d %8d %12.1f %16.2f\n", l, n, s * 1000, s * 1e6 / n }'
done
