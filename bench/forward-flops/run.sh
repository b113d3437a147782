#!/bin/sh
# A GEMM-heavy forward step (partita model mlp, large hidden and ffn, one
# rank) against raw cblas_sgemm on the same GEMM shapes, in one process.
#   bench/forward-flops/run.sh [THREADS] [STEPS]
# Environment: BUILD (default build), BATCH HIDDEN FFN VOCAB LAYERS.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
threads=${1:-1}
steps=${2:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/partita" model mlp --layers "${LAYERS:-2}" --batch "${BATCH:-256}" \
  --hidden "${HIDDEN:-1024}" --ffn "${FFN:-4096}" --vocab "${VOCAB:-1024}" \
  -o "$tmp/mlp.mlir"
"$build/bin/partita-translate" --to-plan "$tmp/mlp.mlir" -o "$tmp/mlp.pb"
OPENBLAS_NUM_THREADS=$threads "$build/bin/partita-bench-forward-flops" \
  "$tmp/mlp.pb" --steps "$steps" --threads "$threads"
