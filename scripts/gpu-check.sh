#!/usr/bin/env bash
# One command on a GPU machine (CUDA, NCCL, Protobuf, OpenBLAS, OpenMPI, gcc,
# CMake and Ninja; no LLVM or MLIR, maybe no GoogleTest, no network):
# configures and builds the runtime-only project (runtime/) with CUDA, then,
# each stage timed and the whole within a time limit:
#   - the cuda backend's GPU tests (partita-runtime-tests-cuda-gpu; a skip
#     is a failure on a GPU machine);
#   - the plans of PLAN_DIR/cuda-plans.txt with `--backend cuda --check`
#     (mlp; gpt forward, fp32, 1e-5, on 1 rank and on 4 ranks sharing the
#     GPU over `local`; gpt's train step);
#   - the attention kernels alone (partita-attention-bench at the GPT
#     shape: gemm and tensor in fp32 and TF32, simt in fp32);
#   - the speed benchmark, bench/gpu-gpt/run.sh run PLAN_DIR/bench: the
#     GPT train step of issue 17 beside PyTorch's, with the ratios;
#   - compute-sanitizer memcheck, racecheck and synccheck on a subset of the GPU tests;
#   - the runtime's unit tests (ctest);
#   - every plan of PLAN_DIR/plans.txt with `partita-run --check` on 4 local
#     ranks and under `mpirun -np 4` (cpu backend);
#   - PLAN_DIR/nccl-plans.txt with `--comm nccl` under mpirun, one rank per
#     GPU (plans needing more GPUs than the machine has are skipped);
#   - with time left and Nsight Compute (ncu) at hand, the attention
#     kernels' shared-memory bank conflicts on the GPU beside the block
#     emulator's counts (scripts/compare-banks.py; informs, never fails).
# PLAN_DIR comes from scripts/make-gpu-check-plans.sh, run where LLVM is.
# Prints a summary and writes it as Markdown (for docs/gpu-check-results.md)
# to --summary FILE (default: $OUT/gpu-check-summary.md when $OUT is set,
# else BUILD_DIR/gpu-check-summary.md), with the logs of every run beside
# it (gpu-check-logs/). Exits non-zero on any failure, a stage left out
# for lack of time included.
#
# With --emulate (a machine without a GPU, CI) it configures with
# PARTITA_CUDA=AUTO, expects the GPU tests to report SKIPPED, runs the cuda
# plans with `--backend cuda --emulate` and the nccl plans with ranks as
# threads, and leaves out the sanitizers and the benchmark (see docs/gpu.md
# for what that cannot show).
#
# Usage: scripts/gpu-check.sh [--emulate] [--arch LIST] [--limit SECONDS]
#          [--summary FILE] [--no-bench] [PLAN_DIR] [BUILD_DIR]
#   BUILD_DIR defaults to build-rt/ at the repository root.
#   --arch: PARTITA_CUDA_ARCHITECTURES (default on a GPU: the device's own,
#     from nvidia-smi's compute_cap, e.g. 90: half the nvcc time of 80;90;
#     with --emulate: the project's default, 80;90).
#   --limit: the whole run's time limit (default 480 s: under the device
#     tool's 600-s call limit, and with its start inside a 15-minute device
#     budget; 1800 s with --emulate); a stage that would start after it is
#     reported as not run, and fails the check.
# Environment: GPU_CHECK_GTEST_SOURCE, a GoogleTest source tree to build when
# none is installed (default: .gpu/googletest at the repository root when
# it exists: a copy of Debian's /usr/src/googletest carried to the GPU
# machine; see runtime/CMakeLists.txt, PARTITA_GTEST_SOURCE_DIR).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$(date +%s)
emulate=0
arch="${GPU_CHECK_CUDA_ARCHITECTURES:-}"
limit=""
summary=""
bench=1
while [ $# -gt 0 ]; do
  case "$1" in
  --emulate) emulate=1 ;;
  --arch) arch="$2"; shift ;;
  --arch=*) arch="${1#--arch=}" ;;
  --limit) limit="$2"; shift ;;
  --limit=*) limit="${1#--limit=}" ;;
  --summary) summary="$2"; shift ;;
  --summary=*) summary="${1#--summary=}" ;;
  --no-bench) bench=0 ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) echo "unknown option $1 (see $0 --help)" >&2; exit 2 ;;
  *) break ;;
  esac
  shift
done
plans="${1:-}"
build="${2:-$root/build-rt}"
# A GPU machine has 16 cores and a few minutes of device time; a CI machine
# 2 cores that run every simulated thread of the emulated kernels.
[ -z "$limit" ] && { [ "$emulate" -eq 1 ] && limit=1800 || limit=480; }
# Each plan run: seconds on a GPU; emulated, gpt's 5 train steps took
# 8 min 50 s on a 2-core machine at load 40-60 when every simulated thread
# was a host thread (with fibers, all 9 cuda plans took 15 s, idle).
plan_limit=150
[ "$emulate" -eq 1 ] && plan_limit=900
mkdir -p "$build" && build="$(cd "$build" && pwd)"
if [ -n "$plans" ]; then
  plans="$(cd "$plans" && pwd)" || { echo "FAILED: no plan folder $1"; exit 1; }
fi
if [ -z "$summary" ]; then
  summary="${OUT:+$OUT/gpu-check-summary.md}"
  summary="${summary:-$build/gpu-check-summary.md}"
fi
mkdir -p "$(dirname "$summary")"
logdir="$(dirname "$summary")/gpu-check-logs"
rm -rf "$logdir" && mkdir -p "$logdir"
deadline=$((started + limit))
jobs="$(nproc 2>/dev/null || echo 2)"
failures=0
stages=()   # "| stage | result | seconds |" rows
results=()  # one line per plan run
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
left() { echo $((deadline - $(date +%s))); }
# limited SECONDS CMD...: CMD under timeout, at most what is left.
limited() {
  local s="$1" l
  shift
  l="$(left)"
  [ "$l" -lt "$s" ] && s="$l"
  [ "$s" -lt 1 ] && s=1
  timeout "$s" "$@"
}
stage_start=0
stage_name=""
begin() {
  stage_name="$1"
  stage_start=$(date +%s)
  echo "== $1 ($(($(date +%s) - started)) s in)"
}
# end RESULT: records the stage's row.
end() {
  stages+=("| $stage_name | $1 | $(($(date +%s) - stage_start)) |")
}
# enough SECONDS: whether SECONDS are left; else the stage is not run.
enough() {
  if [ "$(left)" -lt "$1" ]; then
    fail "$stage_name: not run, $(left) s left of the $limit s limit"
    end "not run (time limit)"
    return 1
  fi
}
keep_log() { [ -f "$1" ] && tail -c 65536 "$1" >"$logdir/$(basename "$1")"; }

write_summary() {
  {
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC'): scripts/gpu-check.sh$([ "$emulate" -eq 1 ] && echo ' --emulate')"
    echo
    # shellcheck disable=SC1091
    echo "- machine: $(nproc) cores, $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")," \
         "$(gcc --version 2>/dev/null | head -1), cmake $(cmake --version | head -1 | awk '{print $3}')"
    if command -v nvidia-smi >/dev/null; then
      echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -1)" \
           "(name, driver, memory, compute capability)"
    else
      echo "- GPU: none (nvidia-smi not found)"
    fi
    command -v nvcc >/dev/null && echo "- $(nvcc --version | tail -2 | head -1)"
    echo "- tree: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')" \
         "$([ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo '(with local changes)')"
    echo "- PARTITA_CUDA_ARCHITECTURES $(sed -n 's/^PARTITA_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null);" \
         "limit $limit s; total $(($(date +%s) - started)) s"
    echo
    echo "| stage | result | seconds |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${stages[@]}"
    if [ ${#results[@]} -gt 0 ]; then
      echo
      echo '```'
      printf '%s\n' "${results[@]}"
      echo '```'
    fi
    if [ -f "$build/attention-bench.txt" ]; then
      echo
      echo "Attention kernels (partita-attention-bench --iters 10, GPT shape):"
      echo
      echo '```'
      cat "$build/attention-bench.txt"
      echo '```'
    fi
    if [ -f "$build/banks.txt" ]; then
      echo
      echo "Shared-memory banks, the block emulator beside ncu (scripts/compare-banks.py):"
      echo
      echo '```'
      cat "$build/banks.txt"
      echo '```'
    fi
    if [ -f "$build/bench-results.txt" ]; then
      echo
      echo "Benchmark (bench/gpu-gpt/run.sh):"
      echo
      echo '```'
      cat "$build/bench-results.txt"
      echo '```'
    fi
    echo
    if [ "$failures" -eq 0 ]; then echo "gpu-check: ok"; else echo "gpu-check: $failures failed"; fi
  } >"$summary"
}
finish() {
  write_summary
  echo "== summary (written to $summary)"
  cat "$summary"
  [ "$failures" -eq 0 ]
  exit
}

# Configure and build.
begin "configure and build"
cuda=ON
[ "$emulate" -eq 1 ] && cuda=AUTO
if [ -z "$arch" ] && [ "$emulate" -eq 0 ] && command -v nvidia-smi >/dev/null; then
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
          head -1 | tr -d ' .')"
fi
configure=(-DCMAKE_BUILD_TYPE=Release -DPARTITA_CUDA="$cuda")
[ -n "$arch" ] && configure+=(-DPARTITA_CUDA_ARCHITECTURES="$arch")
gtest="${GPU_CHECK_GTEST_SOURCE:-}"
[ -z "$gtest" ] && [ -f "$root/.gpu/googletest/CMakeLists.txt" ] && gtest="$root/.gpu/googletest"
[ -n "$gtest" ] && configure+=(-DPARTITA_GTEST_SOURCE_DIR="$gtest")
if ! limited 300 cmake -G Ninja -S "$root/runtime" -B "$build" "${configure[@]}" \
    >"$build/configure.log" 2>&1; then
  tail -20 "$build/configure.log"
  keep_log "$build/configure.log"
  fail "configuring the runtime"
  end FAILED
  finish
fi
if ! limited 300 cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1; then
  tail -30 "$build/build.log"
  keep_log "$build/build.log"
  fail "building the runtime"
  end FAILED
  finish
fi
end "ok${gtest:+ (GoogleTest from $gtest)}"
run="$build/bin/partita-run"

echo "== GPUs"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
    fail "nvidia-smi"
else
  echo "nvidia-smi not found"
fi
command -v nvcc >/dev/null && nvcc --version | tail -1

begin "GPU tests (partita-runtime-tests-cuda-gpu)"
gputests="$build/bin/partita-runtime-tests-cuda-gpu"
gpu_ok=0
if [ ! -x "$gputests" ]; then
  echo "not built (GoogleTest missing?)"
  [ "$emulate" -eq 0 ] && fail "the GPU tests were not built (GoogleTest missing? set GPU_CHECK_GTEST_SOURCE)"
  end "not built"
elif enough 20; then
  limited 120 "$gputests" --gtest_brief=1 >"$build/gpu-tests.log" 2>&1
  rc=$?
  keep_log "$build/gpu-tests.log"
  tail -3 "$build/gpu-tests.log"
  summary_line="$(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|SKIPPED' "$build/gpu-tests.log" | head -2 | tr '\n' ' ')"
  if [ "$rc" -eq 77 ] && [ "$emulate" -eq 0 ]; then
    fail "the GPU tests were skipped on a machine meant to have a GPU"
    end "FAILED, skipped: $summary_line"
  elif [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    fail "the GPU tests (see gpu-tests.log)"
    end "FAILED (exit $rc): $summary_line"
  else
    [ "$rc" -eq 0 ] && gpu_ok=1
    end "$([ "$rc" -eq 77 ] && echo skipped, no GPU || echo ok): $summary_line"
  fi
fi

# run_plan LABEL LOG CMD...: runs a plan, records "LABEL: ok (T s, max rel
# diff X)" or FAILED.
run_plan() {
  local label="$1" log="$2" start ms rc rel
  shift 2
  start=$(date +%s%N)
  limited "$plan_limit" "$@" </dev/null >"$log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  keep_log "$log"
  rel="$(sed -n 's/.*max rel diff \([0-9.e+-]*\).*/\1/p' "$log" |
         sort -g | tail -1)"
  [ "$rc" -eq 124 ] && echo "timed out after $((ms / 1000)) s" >>"$log"
  if [ "$rc" -eq 0 ]; then
    results+=("$label: ok ($((ms / 1000)).$((ms % 1000 / 100)) s${rel:+, largest rel diff $rel})")
  else
    results+=("$label: FAILED (exit $rc, $(basename "$log"): $(grep -m1 -i 'error\|timed out after' "$log" | cut -c1-200))")
    failures=$((failures + 1))
    tail -5 "$log"
  fi
  return "$rc"
}

if [ -n "$plans" ]; then
  if [ ! -x "$run" ]; then
    fail "$run was not built (tools/partita-run/ is not in this checkout)"
    finish
  fi
  # The cuda backend on the plans it can run (one line per plan, as
  # plans.txt).
  if [ -f "$plans/cuda-plans.txt" ]; then
    begin "cuda backend: cuda-plans.txt"
    if enough 20; then
      backend=(--backend cuda)
      [ "$emulate" -eq 1 ] && backend+=(--emulate)
      n0=$failures
      cd "$plans" || exit 1
      while read -r plan args; do
        [ -n "$plan" ] || continue
        label="$plan $args"
        # shellcheck disable=SC2086 # args are words from cuda-plans.txt
        run_plan "cuda$([ "$emulate" -eq 1 ] && echo ' (emulated)'): ${label% }" \
          "$build/$plan.cuda$(echo "$args" | tr -dc 'a-z0-9').log" \
          "$run" "$plan" --check "${backend[@]}" $args
      done <"$plans/cuda-plans.txt"
      cd "$root" || exit 1
      end "$([ "$failures" -eq "$n0" ] && echo ok || echo "$((failures - n0)) FAILED")"
    fi
  fi

  if [ "$emulate" -eq 0 ] && [ "$bench" -eq 1 ]; then
    begin "attention kernels: partita-attention-bench"
    ab="$build/bin/partita-attention-bench"
    if [ ! -x "$ab" ]; then
      fail "$ab was not built"
      end "not built"
    elif enough 40; then
      : >"$build/attention-bench.txt"
      n0=$failures
      for kind in gemm tensor simt; do
        for precision in fp32 tf32; do
          # The CUDA-core kernels have no TF32.
          [ "$kind" = simt ] && [ "$precision" = tf32 ] && continue
          flags=(--iters 10 --attention "$kind")
          [ "$precision" = tf32 ] && flags+=(--tf32)
          log="$build/attention-bench-$kind-$precision.log"
          if limited 60 "$ab" "${flags[@]}" >"$log" 2>&1; then
            { echo "--attention $kind, $precision:"
              grep -E '^  (forward|dq|dk|dv|qkv|fwd\+lse|step) ' "$log"; } >>"$build/attention-bench.txt"
          else
            echo "--attention $kind, $precision: FAILED (see $(basename "$log"))" >>"$build/attention-bench.txt"
            failures=$((failures + 1))
          fi
          keep_log "$log"
        done
      done
      cat "$build/attention-bench.txt"
      end "$([ "$failures" -eq "$n0" ] && echo ok || echo "$((failures - n0)) FAILED")"
    fi

    begin "benchmark: bench/gpu-gpt/run.sh"
    if [ ! -f "$plans/bench/gpt-train.pb" ]; then
      fail "no $plans/bench/gpt-train.pb (scripts/make-gpu-check-plans.sh writes it)"
      end "not run (no plan)"
    elif enough 60; then
      # Each partita run and torch variant at most a quarter of what is
      # left (first 8: 4 Partita, fp32 and TF32 with two attention kinds,
      # and 4 PyTorch, then the ratios; then run.sh's EXTRAS, 3 a
      # precision; most take 15-40 s).
      per=$(( $(left) / 4 ))
      [ "$per" -gt 150 ] && per=150
      if STEPS=${BENCH_STEPS:-6} WARMUP=${BENCH_WARMUP:-2} PROFILE=1 \
          STEP_TIMEOUT="$per" BENCH_RESULTS="$build/bench-results.txt" \
          limited "$(left)" "$root/bench/gpu-gpt/run.sh" run "$plans/bench" "$build" \
          2>&1 | tee "$build/bench.log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
        end ok
      else
        fail "the benchmark (see bench.log)"
        end FAILED
      fi
      keep_log "$build/bench.log"
    fi
  fi
fi

if [ "$gpu_ok" -eq 1 ]; then
  begin "compute-sanitizer memcheck, racecheck and synccheck"
  if ! command -v compute-sanitizer >/dev/null; then
    fail "compute-sanitizer not found"
    end "not found"
  elif enough 30; then
    r=""
    # The tensor-core attention (mma.sync, shared-memory tiles, shuffles)
    # at a small shape, beside the row and reduction kernels.
    for tool in memcheck racecheck synccheck; do
      if limited 90 compute-sanitizer --tool "$tool" --error-exitcode 1 "$gputests" \
          --gtest_brief=1 \
          --gtest_filter='*Softmax*:*LayerNorm*:*CrossEntropy*:*Reduce*:*DataMovement*:*TensorCoresWithTf32*' \
          >"$build/sanitizer-$tool.log" 2>&1; then
        echo "$tool: clean"
        r+="$tool clean; "
      else
        fail "compute-sanitizer $tool (see sanitizer-$tool.log)"
        tail -5 "$build/sanitizer-$tool.log"
        r+="$tool FAILED; "
      fi
      keep_log "$build/sanitizer-$tool.log"
    done
    end "${r%; } (softmax, layer_norm, cross_entropy, reduce, data movement, tensor-core attention)"
  fi
fi

begin "unit tests (ctest)"
if [ "$(ctest --test-dir "$build" -N 2>/dev/null | sed -n 's/^Total Tests: //p')" = "0" ]; then
  echo "no unit tests were built (GoogleTest not found)"
  end "none built"
elif enough 30; then
  # On a GPU the GPU tests ran above, and the emulated kernel tests
  # (CudaKernelsTest.*, minutes of CPU: every simulated thread is a host
  # thread) are the same tests on the CPU block emulator, which CI runs.
  exclude=()
  ctest_limit="$(left)"
  if [ "$emulate" -eq 0 ]; then
    exclude=(-E '^partita-runtime-tests-cuda-gpu$|^CudaKernelsTest[.]')
    ctest_limit=150
  fi
  limited "$ctest_limit" ctest --test-dir "$build" -j"$jobs" --output-on-failure \
    "${exclude[@]}" >"$build/ctest.log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "ctest timed out after $(($(date +%s) - stage_start)) s" >>"$build/ctest.log"
  if [ "$rc" -eq 0 ]; then
    end "ok: $(grep -m1 'tests passed' "$build/ctest.log")${exclude[1]:+ (left out: ${exclude[1]})}"
  else
    fail "the runtime's unit tests (see ctest.log)"
    grep -A30 'The following tests FAILED' "$build/ctest.log" | head -30
    end "FAILED: $(grep -m1 'tests passed\|timed out after' "$build/ctest.log")"
  fi
  keep_log "$build/ctest.log"
fi

if [ -z "$plans" ]; then
  echo "no PLAN_DIR given: plans not run"
  finish
fi
mpirun=(mpirun -np 4)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root --oversubscribe)

# One line per plan: FILE [PARTITA-RUN ARGS...] (plans.txt), else every *.pb.
if [ -f "$plans/plans.txt" ]; then
  list="$(cat "$plans/plans.txt")"
else
  list="$(cd "$plans" && ls *.pb 2>/dev/null)"
fi
begin "cpu backend: plans.txt on 4 local ranks and mpirun -np 4"
if [ -z "$list" ]; then
  fail "no plans in $plans"
  end FAILED
elif enough 20; then
  n0=$failures
  cd "$plans" || exit 1
  while read -r plan args; do
    [ -n "$plan" ] || continue
    # shellcheck disable=SC2086 # args are words from plans.txt
    run_plan "cpu: $plan on 4 local ranks" "$build/$plan.local.log" \
      "$run" "$plan" --ranks 4 --check $args
    if command -v mpirun >/dev/null; then
      # shellcheck disable=SC2086
      run_plan "cpu: $plan under mpirun -np 4" "$build/$plan.mpi.log" \
        "${mpirun[@]}" "$run" "$plan" --comm mpi --check $args
    else
      fail "mpirun not found"
    fi
  done <<<"$list"
  cd "$root" || exit 1
  end "$([ "$failures" -eq "$n0" ] && echo ok || echo "$((failures - n0)) FAILED")"
fi

# The nccl communicator (nccl-plans.txt: plan, ranks, arguments): one GPU
# per rank under mpirun, or NCCL's layouts over local threads emulated.
if [ -f "$plans/nccl-plans.txt" ]; then
  begin "nccl communicator: nccl-plans.txt"
  if enough 20; then
    gpus=0
    command -v nvidia-smi >/dev/null && gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
    n0=$failures
    cd "$plans" || exit 1
    while read -r plan ranks args; do
      [ -n "$plan" ] || continue
      log="$build/$plan.nccl$ranks.log"
      if [ "$emulate" -eq 1 ]; then
        # shellcheck disable=SC2086 # args are words from nccl-plans.txt
        run_plan "nccl (emulated): $plan on $ranks rank(s)" "$log" \
          "$run" "$plan" --check --backend cuda --emulate --comm nccl $args
      elif [ "$ranks" -gt "$gpus" ]; then
        results+=("nccl: $plan skipped (needs $ranks GPUs, this machine has $gpus)")
      else
        # shellcheck disable=SC2086
        run_plan "nccl: $plan on $ranks rank(s)" "$log" \
          mpirun -np "$ranks" "${mpirun[@]:3}" "$run" "$plan" --check --backend cuda --comm nccl $args
      fi
    done <"$plans/nccl-plans.txt"
    cd "$root" || exit 1
    end "$([ "$failures" -eq "$n0" ] && echo ok || echo "$((failures - n0)) FAILED")"
  fi
fi

# The block emulator's model of shared-memory banks (docs/gpu.md) against
# the GPU's own counters: Nsight Compute on the first launches of small
# attention calls, the emulator on the same calls. Informs only: a missing
# ncu, no time left, or a profiler error is recorded, not a failure.
if [ "$gpu_ok" -eq 1 ] && [ "$bench" -eq 1 ]; then
  begin "shared-memory banks: ncu beside the block emulator"
  ab="$build/bin/partita-attention-bench"
  ncu_bin="$(command -v ncu || true)"
  [ -z "$ncu_bin" ] && [ -x /usr/local/cuda/bin/ncu ] && ncu_bin=/usr/local/cuda/bin/ncu
  if [ -z "$ncu_bin" ] || [ ! -x "$ab" ]; then
    end "not run (no ncu, or no partita-attention-bench)"
  elif [ "$(left)" -lt 60 ]; then
    end "not run ($(left) s left)"
  else
    metrics=smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum
    metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
    metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
    metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
    metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
    : >"$build/banks.txt"
    for kind in tensor simt; do
      shape=(--batch 1 --seq 256 --heads 2 --iters 1 --attention "$kind")
      emu="$build/banks-$kind-emulated.txt" csv="$build/banks-$kind-ncu.csv"
      if limited 60 "$ab" "${shape[@]}" --emulate --banks >"$emu" 2>&1 &&
          limited 90 "$ncu_bin" --csv --print-kernel-base mangled \
            --launch-count 16 --metrics "$metrics" "$ab" "${shape[@]}" >"$csv" 2>&1 &&
          python3 "$root/scripts/compare-banks.py" "$emu" "$csv" \
            "$root/runtime/lib/cuda/Kernels.h" >"$build/banks-$kind.txt" 2>&1; then
        { echo "--attention $kind:"; cat "$build/banks-$kind.txt"; } >>"$build/banks.txt"
      else
        { echo "--attention $kind: not compared:"; tail -3 "$csv" "$emu" 2>/dev/null; } >>"$build/banks.txt"
      fi
      keep_log "$emu"
      keep_log "$csv"
    done
    cat "$build/banks.txt"
    end "see the bank table"
  fi
fi

finish
