#!/bin/sh
# Where a GPT train step's time goes: the share of GEMM and of every other
# kernel kind per step, for Partita (`partita run --profile`, the
# Executor's per-kind timer) and for PyTorch on the same model
# (torch.profiler, torch_breakdown.py), one rank, fp32, AdamW.
#   bench/step-breakdown/run.sh [THREADS] [STEPS]
# Environment: BUILD (default build), BATCH SEQ HIDDEN HEADS LAYERS VOCAB
# (defaults: the GPT of issue 16: 4 layers, hidden 256, seq 128, vocab 1024,
# batch 8), ROUNDS (2; in each the sides run in lockstep, a step each in
# turns, bench/common/lockstep.py). Fair method as in
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
# Each round runs the two in lockstep (bench/common/lockstep.py), a step
# each in turns: 2 warm-up steps, then torch_breakdown.py's STEPS
# unprofiled and STEPS profiled ones; Partita profiles all of its 2 +
# 2 STEPS steps.
turns=$((2 + 2 * steps))
round=0
while [ "$round" -lt "${ROUNDS:-2}" ]; do
  /usr/bin/python3 "$root/bench/common/lockstep.py" "$turns" \
    "$tmp/partita.$round.txt" \
    "env OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
      $build/bin/partita run $tmp/train.pb --steps $turns --profile \
      --step-gate {gate}" \
    "$tmp/torch.$round.txt" \
    "env $FAIR_TORCH_ENV /usr/bin/python3 \
      $root/bench/step-breakdown/torch_breakdown.py --threads $threads \
      --steps $steps --warmup 2 --batch $B --seq $S --hidden $H --heads $N \
      --layers $L --vocab $V --step-gate {gate}"
  round=$((round + 1))
done
fair_check "$tmp/partita.0.txt" "$tmp/torch.0.txt"
/usr/bin/python3 - "$tmp" "${ROUNDS:-2}" <<'PY'
import collections, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
part, torch = collections.defaultdict(list), collections.defaultdict(list)
psteps, tsteps, tprofiled = [], [], []
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
    m = re.search(r"^step ([0-9.]+) ([0-9.]+)", text, re.M)
    tsteps.append(float(m[1]))
    tprofiled.append(float(m[2]))

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
# torch.profiler's per-op cost lands mostly on the many small non-GEMM ops.
# The conservative share charges all of it to them: the step (the
# unprofiled one, or the profiled sum when that is smaller: the two are
# different steps, and the host may have slowed between them) less the
# profiled GEMM time.
plain, profiled = statistics.median(tsteps), statistics.median(tprofiled)
base = min(plain, profiled)
ngc = max(base - tm.get("gemm", 0), 0) / base
print(f"torch.profiler's sum is {100 * (profiled / plain - 1):+.1f}% of torch's "
      f"unprofiled step; its non-GEMM share with all of the difference charged "
      f"to non-GEMM ops: {100 * ngc:.1f}%; partita/torch "
      f"{(1 - pg) / ngc if ngc else float('inf'):.3f} (conservative)")
PY
