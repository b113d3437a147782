#!/bin/sh
# How a 1-rank GPT train step (AdamW, fp32) scales from 1 thread to T:
# `partita run` at 1 and at T threads (OPENBLAS_NUM_THREADS, the rank's
# thread count: its intra-op pool, which also splits the large GEMMs), and,
# unless TORCH=0, PyTorch's step (train-vs-ddp's torch_ddp.py, one process)
# at 1 and T threads, all four in lockstep (a step each in turns,
# bench/common/lockstep.py) in each of ROUNDS rounds. Prints each
# median, each side's T-thread step over its 1-thread step (issue 16: at
# most 0.65 for Partita at T = 2 on an idle machine) and partita/torch at
# both counts.
#   bench/thread-scaling/run.sh [THREADS (2)] [STEPS (10)]
# Environment: BUILD, BATCH SEQ HIDDEN HEADS LAYERS VOCAB (default: the
# issue 16 GPT, 4 layers, hidden 256, seq 128, vocab 1024, batch 8),
# ROUNDS (3), TORCH (1). Fair method (bench/common/fair.sh).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
threads=${1:-2}
steps=${2:-10}
warmup=2
B=${BATCH:-8} S=${SEQ:-128} H=${HIDDEN:-256} N=${HEADS:-4} L=${LAYERS:-4} V=${VOCAB:-1024}
torch=${TORCH:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"
[ "$torch" -eq 1 ] && fair_require_torch
fair_setup "$threads"
fair_gpt_train_plan "$build/bin/partita" "$tmp"
echo "thread-scaling: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; GPT $L layers, hidden $H, seq $S, vocab $V, batch $B; 1 and $threads threads; $steps timed steps x ${ROUNDS:-3} rounds per side"
for t in 1 "$threads"; do : > "$tmp/partita.$t"; : > "$tmp/torch.$t"; done
# Each round runs the (up to) four in lockstep, a step each in turns
# (bench/common/lockstep.py), so a slow phase of the host lands on all.
round=0
while [ "$round" -lt "${ROUNDS:-3}" ]; do
  set --
  for t in 1 "$threads"; do
    set -- "$@" "$tmp/p$t.out" "env OPENBLAS_NUM_THREADS=$t OMP_NUM_THREADS=$t \
      $build/bin/partita run $tmp/train.pb --steps $((steps + warmup)) \
      --step-gate {gate}"
    if [ "$torch" -eq 1 ]; then
      set -- "$@" "$tmp/t$t.out" "env $(fair_torch_env "$t") /usr/bin/python3 \
        $root/bench/train-vs-ddp/torch_ddp.py --ranks 1 --threads $t \
        --steps $steps --warmup $warmup --batch $B --seq $S --hidden $H \
        --heads $N --layers $L --vocab $V --lr 1e-3 --weight-decay 0.01 \
        --step-gate {gate}"
    fi
  done
  /usr/bin/python3 "$root/bench/common/lockstep.py" $((steps + warmup)) "$@"
  for t in 1 "$threads"; do
    sed -n "/^step /p" "$tmp/p$t.out" | tail -n "$steps" >> "$tmp/partita.$t"
    [ "$torch" -eq 1 ] && cat "$tmp/t$t.out" >> "$tmp/torch.$t"
  done
  cp "$tmp/p1.out" "$tmp/partita-last.txt"
  round=$((round + 1))
done
[ "$torch" -eq 1 ] && fair_check "$tmp/partita-last.txt" "$tmp/torch.1"
/usr/bin/python3 - "$tmp" "$threads" "$torch" <<'PY'
import re, statistics, sys
tmp, t, torch = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def partita(n):
    return statistics.median(float(m[1]) for m in re.finditer(
        r"^step \d+/\d+ +loss \S+ +\(([0-9.]+) ms\)$", open(f"{tmp}/partita.{n}").read(), re.M))
def peer(n):
    return 1e3 * statistics.median(float(m[1]) for m in re.finditer(
        r"^step \d+: ([0-9.]+) s", open(f"{tmp}/torch.{n}").read(), re.M))
p1, pt = partita(1), partita(t)
print(f"partita: 1 thread {p1:.1f} ms, {t} threads {pt:.1f} ms, {t}/1 {pt / p1:.3f}")
if torch:
    t1, tt = peer(1), peer(t)
    print(f"torch:   1 thread {t1:.1f} ms, {t} threads {tt:.1f} ms, {t}/1 {tt / t1:.3f}")
    print(f"partita/torch: 1 thread {p1 / t1:.3f}, {t} threads {pt / tt:.3f}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
