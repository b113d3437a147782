#!/bin/sh
# Where a GPT train step's time goes: the share of GEMM and of every other
# kernel kind per step, for Partita (`partita run --profile`, the
# Executor's per-kind timer) and for PyTorch on the same model
# (torch.profiler, torch_breakdown.py), one rank, fp32, AdamW.
#   bench/step-breakdown/run.sh [THREADS] [STEPS]
# Environment: BUILD (default build), BATCH SEQ HIDDEN HEADS LAYERS VOCAB
# (defaults: the GPT of issue 16: 4 layers, hidden 256, seq 128, vocab 1024,
# batch 8), ROUNDS (2; the sides alternate). Fair method as in
# bench/common/fair.sh (same OPENBLAS_CORETYPE, kernels printed and
# compared, torch PASSIVE at more than one thread).
# Partita's "attention" and "attention_grad" kernels run their QK^T and PV
# products through BLAS inside the kernel; the profile times those products
# as their own row, "attention GEMMs" (at T threads: their summed time / T),
# which counts as GEMM beside the einsums.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
threads=${1:-1}
steps=${2:-5}
B=${BATCH:-8} S=${SEQ:-128} H=${HIDDEN:-256} N=${HEADS:-4} L=${LAYERS:-4} V=${VOCAB:-1024}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/common/fair.sh"

fair_require_torch
fair_setup "$threads"
fair_gpt_train_plan "$build/bin/partita" "$tmp"
round=0
while [ "$round" -lt "${ROUNDS:-2}" ]; do
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
    "$build/bin/partita" run "$tmp/train.pb" --steps $((steps + 2)) --profile \
    > "$tmp/partita.$round.txt"
  # shellcheck disable=SC2086
  env $FAIR_TORCH_ENV /usr/bin/python3 "$root/bench/step-breakdown/torch_breakdown.py" \
    --threads "$threads" --steps "$steps" --warmup 2 --batch "$B" --seq "$S" \
    --hidden "$H" --heads "$N" --layers "$L" --vocab "$V" > "$tmp/torch.$round.txt"
  round=$((round + 1))
done
fair_check "$tmp/partita.0.txt" "$tmp/torch.0.txt"
/usr/bin/python3 - "$tmp" "${ROUNDS:-2}" <<'PY'
import collections, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
part, torch = collections.defaultdict(list), collections.defaultdict(list)
psteps, tsteps = [], []
for r in range(rounds):
    text = open(f"{tmp}/partita.{r}.txt").read()
    for m in re.finditer(r"^  (\S.*?)\s+([0-9.]+) calls\s+([0-9.]+) ms", text, re.M):
        part[m[1].strip()].append(float(m[3]))
    # Drop the 2 warm-up steps from the step times.
    psteps += [float(x) for x in re.findall(
        r"^step \d+/\d+ +loss \S+ +\(([0-9.]+) ms\)$", text, re.M)][2:]
    text = open(f"{tmp}/torch.{r}.txt").read()
    for m in re.finditer(r"^kind (\S+) ([0-9.]+)$", text, re.M):
        torch[m[1]].append(float(m[2]))
    tsteps.append(float(re.search(r"^step ([0-9.]+)", text, re.M)[1]))

def table(title, kinds):
    med = {k: statistics.median(v) for k, v in kinds.items()}
    total = sum(med.values())
    print(f"{title}: per step, medians over rounds (sum {total:.1f} ms)")
    for k, v in sorted(med.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<44} {v:9.2f} ms {100 * v / total:6.1f}%")
    return med, total

pm, pt = table("partita (partita run --profile)", part)
tm, tt = table("torch (torch.profiler, self CPU time)", torch)
# GEMM: the einsums, and the products inside the attention kernels (their
# own row, "attention GEMMs"), as torch's mm/addmm/bmm/baddbmm.
pg = (pm.get("einsum", 0) + pm.get("attention GEMMs", 0)) / pt
tg = tm.get("gemm", 0) / tt
print(f"step time medians: partita {statistics.median(psteps):.1f} ms, "
      f"torch {statistics.median(tsteps):.1f} ms (unprofiled)")
print(f"GEMM share (einsum + attention GEMMs; mm, addmm, bmm, baddbmm): "
      f"partita {100 * pg:.1f}%, torch {100 * tg:.1f}%")
print(f"non-GEMM time per step: partita {pt * (1 - pg):.1f} ms, "
      f"torch {tt * (1 - tg):.1f} ms")
print(f"non-GEMM share: partita {100 * (1 - pg):.1f}%, torch "
      f"{100 * (1 - tg):.1f}%; partita/torch {(1 - pg) / (1 - tg):.3f}")
PY
