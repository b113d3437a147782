#!/bin/sh
# partita train's MFU on the CPU against bench/forward-flops' ratio
# (forward FLOP/s over cblas_sgemm's on the same GEMMs) for the same mlp,
# alternating the two ROUNDS times so a change of load hits both alike.
#   bench/train-mfu/run.sh [THREADS] [STEPS] [ROUNDS]
# Environment: BUILD (default build), BATCH HIDDEN FFN VOCAB LAYERS.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
threads=${1:-1}
steps=${2:-8}
rounds=${3:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
layers=${LAYERS:-2} batch=${BATCH:-256} hidden=${HIDDEN:-1024}
ffn=${FFN:-4096} vocab=${VOCAB:-1024}
cat > "$tmp/mlp.toml" <<TOML
[model]
family = "mlp"
layers = $layers
hidden = $hidden
ffn = $ffn
vocab = $vocab
[train]
steps = $((steps + 2))
batch = $batch
[log]
progress = "plain"
TOML
export OPENBLAS_NUM_THREADS=$threads
r=1
while [ "$r" -le "$rounds" ]; do
  BUILD=$build LAYERS=$layers BATCH=$batch HIDDEN=$hidden FFN=$ffn \
    VOCAB=$vocab "$root/bench/forward-flops/run.sh" "$threads" "$steps" \
    > "$tmp/fwd.$r.txt"
  "$build/bin/partita" train "$tmp/mlp.toml" --log.metrics "$tmp/m.$r.jsonl" \
    > "$tmp/train.$r.txt" 2>&1
  r=$((r + 1))
done
/usr/bin/python3 - "$tmp" "$rounds" "$threads" <<'PY'
import json, re, statistics, sys
tmp, rounds, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ratios, mfus, peaks, gemm = [], [], [], []
for r in range(1, rounds + 1):
    fwd = open(f"{tmp}/fwd.{r}.txt").read()
    ratios.append(float(re.search(r"ratio partita/sgemm: ([0-9.]+)", fwd)[1]))
    gemm.append(float(re.search(r"cblas_sgemm same GEMMs: \S+ s\s+([0-9.]+)", fwd)[1]))
    train = open(f"{tmp}/train.{r}.txt").read()
    peaks.append(float(re.search(r"peak of this machine, ([0-9.e+]+) GFLOP/s", train)[1]))
    steps = [json.loads(l) for l in open(f"{tmp}/m.{r}.jsonl")]
    # Drop the 2 warm-up steps, as the forward-flops bench does.
    mfus += [s["mfu"] for s in steps if s["type"] == "step"][2:]
ratio, mfu = statistics.median(ratios), statistics.median(mfus)
print(f"threads {threads}, {rounds} rounds alternating, medians")
print(f"forward-flops ratio partita/sgemm (same GEMMs): {ratio:.3f}"
      f"  (sgemm {statistics.median(gemm):.1f} GFLOP/s)")
print(f"partita train MFU (6N FLOPs/example vs sgemm 1024^3 peak): {mfu:.3f}"
      f"  (peak {statistics.median(peaks):.1f} GFLOP/s)")
print(f"MFU / forward ratio: {mfu / ratio:.3f}"
      f"  ({'within' if abs(mfu / ratio - 1) <= 0.10 else 'outside'} 10%)")
PY
