#!/bin/sh
# Issue 16's sweep: the 1-rank GPT train step (AdamW, fp32) of Partita
# against PyTorch's on the same model, over layers x hidden x threads, each
# point one bench/train-vs-ddp/run.sh 1 (the fair method: the same
# OPENBLAS_CORETYPE for both processes and the kernels compared, PyTorch at
# 2 threads with OMP_WAIT_POLICY=PASSIVE, the sides alternating round by
# round). Prints one line per point and a table of partita/torch time
# ratios (lower is better for Partita), with the machine's load before and
# after each point.
#   bench/train-sweep/run.sh [STEPS (5)]
# Environment: LAYERS_LIST ("2 4 8 12"), HIDDEN_LIST ("128 256 512 768"),
# THREADS_LIST ("1 2"), BATCH (8), SEQ (128), VOCAB (1024), ROUNDS (3),
# BUILD; heads are hidden / 64.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "bench/train-sweep: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "batch ${BATCH:-8}, seq ${SEQ:-128}, vocab ${VOCAB:-1024}, $steps timed steps x ${ROUNDS:-3} rounds per side"
for threads in ${THREADS_LIST:-1 2}; do
  for layers in ${LAYERS_LIST:-2 4 8 12}; do
    for hidden in ${HIDDEN_LIST:-128 256 512 768}; do
      before=$(cut -d' ' -f1 /proc/loadavg)
      ratio=$(THREADS=$threads LAYERS=$layers HIDDEN=$hidden \
        HEADS=$((hidden / 64)) BATCH=${BATCH:-8} SEQ=${SEQ:-128} \
        VOCAB=${VOCAB:-1024} ROUNDS=${ROUNDS:-3} \
        "$root/bench/train-vs-ddp/run.sh" 1 "$steps" 2>&1 |
        tee "$out.point" | sed -n 's/^ratio partita\/torch (time, lower is better for partita): //p')
      if [ -z "$ratio" ]; then
        echo "threads $threads layers $layers hidden $hidden: no ratio; the bench said:" >&2
        cat "$out.point" >&2
        exit 1
      fi
      steps_line=$(sed -n 's/^partita train step median[^:]*: \([0-9.]*\) s.*/\1/p' "$out.point")
      torch_line=$(sed -n 's/^torch DDP train step median[^:]*: \([0-9.]*\) s.*/\1/p' "$out.point")
      echo "threads $threads layers $layers hidden $hidden: partita ${steps_line} s, torch ${torch_line} s, ratio $ratio (load $before -> $(cut -d' ' -f1 /proc/loadavg))"
      echo "$threads $layers $hidden $ratio" >> "$out"
    done
  done
done
rm -f "$out.point"
/usr/bin/python3 - "$out" <<'PY'
import collections, sys
rows = [l.split() for l in open(sys.argv[1])]
table = collections.defaultdict(dict)
hiddens = sorted({int(h) for _, _, h, _ in rows})
for t, l, h, r in rows:
    table[(int(t), int(l))][int(h)] = float(r)
print("partita/torch train step time (1 rank):")
print("threads layers " + " ".join(f"{h:>7}" for h in hiddens))
for (t, l), cells in sorted(table.items()):
    print(f"{t:>7} {l:>6} " + " ".join(f"{cells.get(h, float('nan')):7.3f}" for h in hiddens))
worst = max(float(r) for *_, r in rows)
print(f"worst ratio {worst:.3f} over {len(rows)} points")
PY
