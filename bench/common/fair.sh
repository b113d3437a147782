# Fair side-by-side settings for the benches that run a peer; sourced by
# their run.sh (POSIX sh). After `fair_setup THREADS`:
# - OPENBLAS_CORETYPE is exported, the same for both processes: the user's
#   value if set; with FAIR_CORETYPE=none, unset (each side detects, and
#   Partita may re-choose: the kernel check below then refuses a ratio);
#   otherwise what OpenBLAS detects here, or, where it falls back to a
#   legacy core (Prescott on CPUs 0.3.21 does not know), the core Partita's
#   configureBlasKernels would pick (SkylakeX with AVX-512, Haswell with AVX2).
# - FAIR_TORCH_ENV holds the peer's OpenMP settings: OMP_NUM_THREADS, and
#   OMP_WAIT_POLICY=PASSIVE when THREADS > 1 (Debian's torch spins GNU
#   OpenMP threads against OpenBLAS's and stalls under load otherwise).
# `fair_check PARTITA_OUT PEER_OUT` compares the kernel lines both sides
# printed and fails when they differ. Rounds alternate in each run.sh.
fair_common=$(cd "$(dirname "${0}")/../common" && pwd)

# Every peer bench needs Debian's PyTorch (/usr/bin/python3); without it
# there is nothing to compare with.
fair_require_torch() {
  if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
    echo "PyTorch is not installed (apt-get install -y python3-torch); no comparison" >&2
    exit 1
  fi
}

# fair_torch_env THREADS: the peer's OpenMP settings for THREADS threads
# (PASSIVE above one; see fair_setup).
fair_torch_env() {
  if [ "$1" -gt 1 ]; then
    echo "OMP_NUM_THREADS=$1 OMP_WAIT_POLICY=PASSIVE"
  else
    echo "OMP_NUM_THREADS=$1"
  fi
}

fair_setup() {
  fair_threads=$1
  if [ "${FAIR_CORETYPE:-}" = none ]; then
    unset OPENBLAS_CORETYPE
  elif [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    export OPENBLAS_CORETYPE
  else
    detected=$(env -u OPENBLAS_CORETYPE /usr/bin/python3 "$fair_common/fair.py" probe)
    case $detected in
    Prescott | Core2 | Penryn | Dunnington | Nehalem | Atom | Sandybridge | Katmai | Unknown | none)
      if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
        grep -qw avx512vl /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo; then
        detected=SkylakeX
      elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
        detected=Haswell
      fi
      ;;
    esac
    OPENBLAS_CORETYPE=$detected
    export OPENBLAS_CORETYPE
  fi
  FAIR_TORCH_ENV=$(fair_torch_env "$fair_threads")
  echo "fair: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} for both sides;" \
    "peer env: $FAIR_TORCH_ENV; $(uptime | sed 's/.*load/load/')"
}

# fair_check PARTITA_OUT PEER_OUT: the "OpenBLAS X kernels" each printed.
fair_check() {
  p=$(sed -n 's/^partita[a-z ]*: OpenBLAS \([^ ]*\) kernels.*/\1/p' "$1" | head -n 1)
  t=$(sed -n 's/^fair: torch side: OpenBLAS \([^ ]*\) kernels.*/\1/p' "$2" | head -n 1)
  echo "fair: kernels run: partita $p, peer $t"
  /usr/bin/python3 "$fair_common/fair.py" same "${p:-?}" "${t:-?}"
}

# fair_gpt_train_plan PARTITA DIR: `partita model gpt` of the GPT in $L $B $S
# $H $N $V (layers, batch, seq, hidden, heads, vocab) to DIR/gpt.mlir, and
# its one-rank AdamW train step (lr 1e-3, weight decay 0.01) to DIR/train.pb.
fair_gpt_train_plan() {
  "$1" model gpt --layers "$L" --batch "$B" --seq "$S" \
    --hidden "$H" --heads "$N" --vocab "$V" -o "$2/gpt.mlir"
  "$1" plan "$2/gpt.mlir" --train adamw --lr 1e-3 --weight-decay 0.01 \
    --strategy none -o "$2/train.pb" > "$2/plan.txt" 2>&1 ||
    { cat "$2/plan.txt" >&2; exit 1; }
}
