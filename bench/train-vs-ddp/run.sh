#!/bin/sh
# The GPT train step (AdamW, data parallel on N ranks): Partita (`partita plan
# --train adamw --strategy dp`, `partita run --ranks N --steps K`, ranks as
# threads of the local communicator) against PyTorch DistributedDataParallel
# with the gloo backend (N processes), same machine, same model and global
# batch, one thread per rank (Partita gives each rank one BLAS thread when
# N > 1; with N = 1 both sides use THREADS).
#   bench/train-vs-ddp/run.sh [RANKS] [STEPS]
# Environment: BUILD (default build), BATCH SEQ HIDDEN HEADS LAYERS VOCAB,
# LR WD, THREADS (N = 1 only), ROUNDS. Each side runs 2 untimed warm-up steps
# per round; medians of ROUNDS (3) x STEPS timed steps per side. The sides
# run in lockstep (bench/common/lockstep.py: a step each in turns, through
# `partita run --step-gate` and torch_ddp.py --step-gate), so that a change
# of load on a shared machine hits both alike, step for step.
# With RANKS > 1 Partita runs three ways: the default plan (gradient
# reductions packed into 25 MiB buckets, each issued on a communication
# thread while backward goes on), the same plan with --sync-comm (the packed
# calls in line), and a plan with --bucket-bytes 0 (one call per gradient).
# BUCKET sets the first two's --bucket-bytes (default: partita's, 25MiB).
# Fair method (bench/common/fair.sh): the same OPENBLAS_CORETYPE for both
# processes, the kernels each runs printed and compared, torch at more than
# one thread with OMP_WAIT_POLICY=PASSIVE.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
ranks=${1:-2}
steps=${2:-10}
warmup=2
B=${BATCH:-8} S=${SEQ:-64} H=${HIDDEN:-128} N=${HEADS:-4} L=${LAYERS:-2} V=${VOCAB:-256}
lr=${LR:-1e-3} wd=${WD:-0.01}
threads=1
[ "$ranks" -eq 1 ] && threads=${THREADS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"

fair_require_torch

fair_setup "$threads"
"$build/bin/partita" model gpt --layers "$L" --batch "$B" --seq "$S" \
  --hidden "$H" --heads "$N" --vocab "$V" -o "$tmp/gpt.mlir"
if [ "$ranks" -eq 1 ]; then
  strategy="--strategy none"
else
  strategy="--mesh dp=$ranks --strategy dp"
fi
bucket=
[ "$ranks" -gt 1 ] && [ -n "${BUCKET:-}" ] && bucket="--bucket-bytes $BUCKET"
# shellcheck disable=SC2086
"$build/bin/partita" plan "$tmp/gpt.mlir" --train adamw --lr "$lr" \
  --weight-decay "$wd" $strategy $bucket -o "$tmp/train.pb" > "$tmp/plan.txt" 2>&1 ||
  { cat "$tmp/plan.txt" >&2; exit 1; }
if [ "$ranks" -gt 1 ]; then
  # shellcheck disable=SC2086
  "$build/bin/partita" plan "$tmp/gpt.mlir" --train adamw --lr "$lr" \
    --weight-decay "$wd" $strategy --bucket-bytes 0 -o "$tmp/nobucket.pb" \
    > "$tmp/plan.txt" 2>&1 || { cat "$tmp/plan.txt" >&2; exit 1; }
fi

# partita_cmd PLAN [FLAGS]: the command of a Partita side in lockstep.
partita_cmd() {
  plan=$1
  shift
  echo "env OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads" \
    "$build/bin/partita run $plan --ranks $ranks --steps $((steps + warmup))" \
    "--step-gate {gate} $*"
}

: > "$tmp/partita.txt"
: > "$tmp/sync.txt"
: > "$tmp/nobucket.txt"
: > "$tmp/torch.txt"
round=0
while [ "$round" -lt "${ROUNDS:-3}" ]; do
  set -- "$tmp/p.out" "$(partita_cmd "$tmp/train.pb")"
  if [ "$ranks" -gt 1 ]; then
    set -- "$@" "$tmp/s.out" "$(partita_cmd "$tmp/train.pb" --sync-comm)" \
      "$tmp/n.out" "$(partita_cmd "$tmp/nobucket.pb")"
  fi
  set -- "$@" "$tmp/t.out" "env $FAIR_TORCH_ENV /usr/bin/python3 \
    $root/bench/train-vs-ddp/torch_ddp.py --ranks $ranks --threads $threads \
    --steps $steps --warmup $warmup --batch $B --seq $S --hidden $H \
    --heads $N --layers $L --vocab $V --lr $lr --weight-decay $wd \
    --step-gate {gate}"
  /usr/bin/python3 "$root/bench/common/lockstep.py" $((steps + warmup)) "$@"
  # "step k/K  loss X  (T ms)"
  sed -n "/^step /p" "$tmp/p.out" | tail -n "$steps" >> "$tmp/partita.txt"
  if [ "$ranks" -gt 1 ]; then
    sed -n "/^step /p" "$tmp/s.out" | tail -n "$steps" >> "$tmp/sync.txt"
    sed -n "/^step /p" "$tmp/n.out" | tail -n "$steps" >> "$tmp/nobucket.txt"
  fi
  cat "$tmp/t.out" >> "$tmp/torch.txt"
  cp "$tmp/p.out" "$tmp/partita-last.txt"
  round=$((round + 1))
done

fair_check "$tmp/partita-last.txt" "$tmp/torch.txt"
/usr/bin/python3 - "$tmp/partita.txt" "$tmp/torch.txt" "$ranks" \
  "$tmp/sync.txt" "$tmp/nobucket.txt" <<'PY'
import re, statistics, sys
def steps(path):
    return [float(m.group(1)) / 1e3 for m in re.finditer(
        r"^step \d+/\d+ +loss \S+ +\(([0-9.]+) ms\)$", open(path).read(), re.M)]
part = steps(sys.argv[1])
text = open(sys.argv[2]).read()
torch = [float(m.group(1)) for m in
         re.finditer(r"^step \d+: ([0-9.]+) s", text, re.M)]
if not part or not torch:
    sys.exit("no step times parsed (partita %d, torch %d)" % (len(part), len(torch)))
mp, mt = statistics.median(part), statistics.median(torch)
print([l for l in text.splitlines() if l.startswith("torch ")][-1])
n = int(sys.argv[3])
ranks = "1 rank, unpartitioned" if n == 1 else f"{n} ranks, dp"
print(f"partita train step median ({ranks}): {mp:.6f} s ({len(part)} steps)")
print(f"torch DDP train step median ({n} rank{'s' if n > 1 else ''}, gloo): "
      f"{mt:.6f} s ({len(torch)} steps)")
print(f"ratio partita/torch (time, lower is better for partita): {mp / mt:.3f}")
if n > 1:
    sync, nobucket = steps(sys.argv[4]), steps(sys.argv[5])
    ms, mn = statistics.median(sync), statistics.median(nobucket)
    print(f"partita, buckets in line (--sync-comm): {ms:.6f} s; "
          f"ratio to torch {ms / mt:.3f}; overlapped/in-line {mp / ms:.3f}")
    print(f"partita, one call per gradient (--bucket-bytes 0): {mn:.6f} s; "
          f"ratio to torch {mn / mt:.3f}; bucketed/unbucketed {mp / mn:.3f}")
PY
