#!/bin/sh
# A pipelined GPT train step (AdamW, 1F1B): Partita (`partita plan --train
# adamw --pp P --microbatches m --schedule 1f1b`, `partita run --ranks P`,
# stages as threads of the local communicator) against the same 1F1B
# written in PyTorch over torch.distributed point-to-point with gloo
# (torch_1f1b.py, P processes), same machine, model, layer split, batch,
# microbatches and one thread per rank.
#   bench/pipeline/run.sh [RANKS] [MICROBATCHES] [STEPS]
# Environment: BUILD (default build), BATCH SEQ HIDDEN HEADS LAYERS VOCAB,
# LR WD, ROUNDS (3). Each side runs 2 untimed warm-up steps per round;
# medians of ROUNDS x STEPS timed steps per side, the sides alternating.
# Then one more Partita run with --trace prints its measured bubble beside
# the schedule's simulation with the measured stage times, and the
# published 1F1B bubble (P-1)/(m+P-1).
# Fair method (bench/common/fair.sh): the same OPENBLAS_CORETYPE for both,
# the kernels each side runs printed and compared.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
ranks=${1:-2}
m=${2:-8}
steps=${3:-10}
warmup=2
B=${BATCH:-16} S=${SEQ:-64} H=${HIDDEN:-128} N=${HEADS:-4} L=${LAYERS:-4} V=${VOCAB:-256}
lr=${LR:-1e-3} wd=${WD:-0.01}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"

fair_require_torch
fair_setup 1
"$build/bin/partita" model gpt --layers "$L" --batch "$B" --seq "$S" \
  --hidden "$H" --heads "$N" --vocab "$V" -o "$tmp/gpt.mlir"
"$build/bin/partita" plan "$tmp/gpt.mlir" --train adamw --lr "$lr" \
  --weight-decay "$wd" --strategy none --pp "$ranks" --microbatches "$m" \
  --schedule 1f1b -o "$tmp/pp.pb" > "$tmp/plan.txt" 2>&1 ||
  { cat "$tmp/plan.txt" >&2; exit 1; }

: > "$tmp/partita.txt"
: > "$tmp/torch.txt"
round=0
while [ "$round" -lt "${ROUNDS:-3}" ]; do
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/bin/partita" run \
    "$tmp/pp.pb" --ranks "$ranks" --steps $((steps + warmup)) > "$tmp/round.txt"
  sed -n "/^step /p" "$tmp/round.txt" | tail -n "$steps" >> "$tmp/partita.txt"
  cp "$tmp/round.txt" "$tmp/partita-last.txt"
  # shellcheck disable=SC2086
  env $FAIR_TORCH_ENV /usr/bin/python3 "$root/bench/pipeline/torch_1f1b.py" \
    --ranks "$ranks" --microbatches "$m" --threads 1 --steps "$steps" \
    --warmup "$warmup" --batch "$B" --seq "$S" --hidden "$H" --heads "$N" \
    --layers "$L" --vocab "$V" --lr "$lr" --weight-decay "$wd" >> "$tmp/torch.txt"
  round=$((round + 1))
done
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$build/bin/partita" run \
  "$tmp/pp.pb" --ranks "$ranks" --steps $((steps + warmup)) \
  --trace "$tmp/trace.json" > "$tmp/traced.txt"

fair_check "$tmp/partita-last.txt" "$tmp/torch.txt"
/usr/bin/python3 - "$tmp/partita.txt" "$tmp/torch.txt" "$ranks" "$m" \
  "$tmp/traced.txt" <<'PY'
import re, statistics, sys
part = [float(x) / 1e3 for x in re.findall(
    r"^step \d+/\d+ +loss \S+ +\(([0-9.]+) ms\)$", open(sys.argv[1]).read(), re.M)]
text = open(sys.argv[2]).read()
torch = [float(x) for x in re.findall(r"^step \d+: ([0-9.]+) s", text, re.M)]
if not part or not torch:
    sys.exit("no step times parsed (partita %d, torch %d)" % (len(part), len(torch)))
p, m = int(sys.argv[3]), int(sys.argv[4])
mp_, mt = statistics.median(part), statistics.median(torch)
print([l for l in text.splitlines() if l.startswith("torch ")][-1])
print(f"partita 1f1b train step median ({p} stages, {m} microbatches): {mp_:.6f} s ({len(part)} steps)")
print(f"torch 1F1B train step median (gloo): {mt:.6f} s ({len(torch)} steps)")
print(f"ratio partita/torch (time, lower is better for partita): {mp_ / mt:.3f}")
print([l for l in open(sys.argv[5]).read().splitlines()
       if l.startswith("pipeline bubble")][0])
print(f"published 1F1B bubble (P-1)/(m+P-1) with equal stage times: {(p - 1) / (m + p - 1):.4f}")
PY
