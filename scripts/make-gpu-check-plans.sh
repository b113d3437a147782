#!/usr/bin/env bash
# Writes the plans scripts/gpu-check.sh runs on a machine without LLVM/MLIR:
# models and plans made here with this repository's `partita` (built first
# when missing), a training data file, and plans.txt, a line per plan: the
# plan's file and the partita-run arguments it needs.
# It also writes OUT_DIR/bench, the GPT train step of the speed benchmark
# (bench/gpu-gpt/run.sh make; about 1 MB, parameters are generated where it
# runs).
# Usage: scripts/make-gpu-check-plans.sh OUT_DIR
#   then copy OUT_DIR to the GPU machine and run
#   scripts/gpu-check.sh OUT_DIR
# Environment: PARTITA, the compiler (default build/bin/partita, built when
# missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
out="$1"
partita="${PARTITA:-$root/build/bin/partita}"
[ -x "$partita" ] || "$root/scripts/build.sh" --target partita
mkdir -p "$out"
rm -f "$out"/*.pb "$out"/plans.txt "$out"/cuda-plans.txt "$out"/nccl-plans.txt

"$partita" model mlp --layers 2 --hidden 64 --batch 8 -o "$out/mlp.mlir"
"$partita" model gpt --layers 2 --hidden 64 --heads 4 --batch 4 -o "$out/gpt.mlir"
"$partita" model llama --layers 2 --hidden 64 --heads 4 --batch 4 -o "$out/llama.mlir"
"$partita" model gpt --layers 2 --hidden 64 --heads 4 --seq 32 --batch 8 \
  -o "$out/gpt-small-train.mlir"
# Byte-level training data that travels with the plans (partita-run's
# default, /usr/share/common-licenses/GPL-3, may be absent there).
cp /usr/share/common-licenses/GPL-3 "$out/train-data.txt"

# plan NAME MODEL "PARTITA PLAN ARGS" "PARTITA-RUN ARGS"
plan() {
  "$partita" plan "$out/$2" $3 --quiet -o "$out/$1.pb"
  echo "$1.pb $4" >>"$out/plans.txt"
}
plan mlp-dp mlp.mlir "--mesh dp=4 --strategy dp" ""
plan gpt-megatron gpt.mlir "--mesh tp=4 --strategy megatron" ""
plan gpt-dp-megatron gpt.mlir "--mesh dp=2,tp=2 --strategy dp+megatron" ""
plan llama-fsdp llama.mlir "--mesh dp=4 --strategy fsdp" ""
plan gpt-train-zero2 gpt-small-train.mlir \
  "--train adamw --lr 1e-3 --mesh dp=4 --strategy zero2" \
  "--steps 3 --data train-data.txt --rtol 1e-4 --param-rtol 1e-3"
# The cuda backend's plans, made here, listed below with the nccl ones.
"$partita" plan "$out/mlp.mlir" --mesh dp=1 --strategy dp --quiet -o "$out/mlp-one.pb"
"$partita" plan "$out/mlp.mlir" --train adamw --mesh dp=1 --strategy dp --quiet \
  -o "$out/mlp-train-one.pb"
"$partita" plan "$out/gpt.mlir" --mesh dp=1 --strategy dp --quiet -o "$out/gpt-one.pb"
"$partita" plan "$out/gpt-small-train.mlir" --train adamw --lr 1e-3 --mesh dp=1 \
  --strategy dp --quiet -o "$out/gpt-train-one.pb"
# The nccl communicator's plans (nccl-plans.txt: plan, ranks, arguments):
# one rank per GPU under mpirun on a GPU machine (plans needing more GPUs
# than it has are skipped), ranks as threads with --emulate.
"$partita" plan "$out/mlp.mlir" --mesh dp=2,tp=2 --strategy dp+megatron --quiet \
  -o "$out/mlp-dp-tp.pb"
"$partita" plan "$out/mlp.mlir" --train adamw --mesh dp=4 --strategy zero3 --quiet \
  -o "$out/mlp-train-zero3.pb"
{
  echo "mlp-one.pb 1"
  echo "mlp-train-one.pb 1 --steps 5 --rtol 1e-4"
  echo "mlp-dp-tp.pb 4"
  echo "mlp-train-zero3.pb 4 --steps 5 --rtol 1e-4"
} >"$out/nccl-plans.txt"
# The cuda backend's plans (cuda-plans.txt, as plans.txt; its ported
# kernels, docs/gpu.md): mlp forward and training on one rank, and on 4
# local ranks sharing the GPU with host-staged collectives (the nccl plans
# above, over local); gpt forward (fp32, 1e-5) on one
# rank and on 4 local ranks sharing the GPU (dp x tp, the plan of
# plans.txt); 5 AdamW steps of gpt's train step on one rank; gpt's
# forward and 2 train steps again with attention on tensor cores
# (--attention tensor: three TF32 products, so the same tolerances; 2
# steps, as the emulator takes 5 s a step there); 2 train steps with
# --gemm-autotune (on a GPU the first step times cuBLASLt's algorithms,
# each shape's trial runs writing the real output or a scratch one, and
# the results must still match); 3 train steps with --cuda-graph (the
# third launched as the graph the second recorded) and the tensor-core
# attention.
{
  echo "mlp-one.pb"
  echo "mlp-train-one.pb --steps 5 --rtol 1e-4"
  echo "mlp-dp-tp.pb"
  echo "mlp-train-zero3.pb --steps 5 --rtol 1e-4"
  echo "mlp-one.pb --tf32 --rtol 1e-2"
  echo "gpt-one.pb --rtol 1e-5"
  echo "gpt-dp-megatron.pb --ranks 4 --rtol 1e-5"
  echo "gpt-train-one.pb --steps 5 --data train-data.txt --rtol 1e-4 --param-rtol 1e-3"
  echo "gpt-one.pb --attention tensor --rtol 1e-5"
  echo "gpt-train-one.pb --attention tensor --steps 2 --data train-data.txt --rtol 1e-4 --param-rtol 1e-3"
  echo "gpt-train-one.pb --gemm-autotune --steps 2 --data train-data.txt --rtol 1e-4 --param-rtol 1e-3"
  echo "gpt-train-one.pb --cuda-graph --attention tensor --steps 3 --data train-data.txt --rtol 1e-4 --param-rtol 1e-3"
  echo "llama-fsdp.pb --ranks 4 --rtol 1e-5"
} >"$out/cuda-plans.txt"
# The speed benchmark's plan (bench/gpu-gpt/run.sh).
PARTITA="$partita" "$root/bench/gpu-gpt/run.sh" make "$out/bench" >/dev/null
echo "wrote $(wc -l <"$out/plans.txt") plans and $out/plans.txt, $(wc -l <"$out/cuda-plans.txt") in cuda-plans.txt, $(wc -l <"$out/nccl-plans.txt") in nccl-plans.txt, and $out/bench ($(du -sh "$out/bench" | cut -f1)); $(du -sh "$out" | cut -f1) in all"
