#!/usr/bin/env python3
"""Sets the block emulator's shared-memory bank counts beside Nsight Compute's.

Usage: compare-banks.py EMULATED NCU_CSV KERNELS_H

EMULATED: the output of `partita-attention-bench --emulate --banks ...`;
NCU_CSV: `ncu --csv --print-kernel-base mangled --metrics ...` of the same
command without --emulate (some or all of the same launches, on the GPU);
KERNELS_H: runtime/lib/cuda/Kernels.h, whose `enum class GpuKernel`
numbers the kernels (a kernel's mangled name holds its number,
`GpuKernelE26E`) and whose kernelName spells them.

Prints one line per kernel and direction (loads, stores): wavefronts per
shared-memory instruction and the share of wavefronts above the ideal
(bank conflicts) as the emulator counted them and as the GPU did. Ratios,
not totals, so the GPU may profile fewer launches (ncu --launch-count);
the instruction counts may differ where the compiler merges neighbouring
accesses. Informs only (scripts/gpu-check.sh records it); fails only on
unreadable input.
"""

import csv
import re
import sys
from collections import defaultdict

# ncu metric -> (what, load or store)
METRICS = {
    "smsp__inst_executed_op_shared_ld.sum": ("requests", "loads"),
    "smsp__inst_executed_op_shared_st.sum": ("requests", "stores"),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": ("wavefronts", "loads"),
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": ("wavefronts", "stores"),
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": ("conflicts", "loads"),
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": ("conflicts", "stores"),
}


def kernel_names(kernels_h):
    """The kernels' names (kernelName) in GpuKernel's order."""
    text = open(kernels_h).read()
    body = re.search(r"enum class GpuKernel[^{]*\{(.*?)\};", text, re.S).group(1)
    order = [m.group(1) for m in re.finditer(r"^\s*(\w+),", body, re.M)]
    spelled = dict(re.findall(r'case GpuKernel::(\w+): return "(\w+)";', text))
    return [spelled.get(n, n) for n in order]


def emulated(path):
    counts = {}
    pattern = re.compile(
        r"^\s+(\S+)\s+loads (?:none|(\d+) requests in (\d+) wavefronts "
        r"\(\S+ the ideal (\d+)\)); stores (?:none|(\d+) requests in (\d+) "
        r"wavefronts \(\S+ the ideal (\d+)\))")
    for line in open(path):
        m = pattern.match(line)
        if m:
            v = [int(x) if x else 0 for x in m.groups()[1:]]
            counts[m.group(1)] = {"loads": v[0:3], "stores": v[3:6]}
    return counts


def measured(path, names):
    totals = defaultdict(lambda: defaultdict(float))
    lines = [l for l in open(path) if l.startswith('"')]
    for row in csv.DictReader(lines):
        metric = row.get("Metric Name", "")
        if metric not in METRICS:
            continue
        m = re.search(r"GpuKernelE(\d+)E", row.get("Kernel Name", ""))
        if not m or int(m.group(1)) >= len(names):
            continue
        value = float(row["Metric Value"].replace(",", "") or 0)
        what, kind = METRICS[metric]
        totals[names[int(m.group(1))]][(what, kind)] += value
    return totals


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    names = kernel_names(sys.argv[3])
    emu = emulated(sys.argv[1])
    gpu = measured(sys.argv[2], names)
    if not emu and not gpu:
        sys.exit("compare-banks: no counts in either input")
    for kernel in sorted(set(emu) | set(gpu)):
        for kind in ("loads", "stores"):
            text = f"  {kernel:24s} {kind:6s} emulator "
            e = emu.get(kernel, {}).get(kind)
            if e and e[0]:
                text += (f"{e[1] / e[0]:5.2f} wf/instr, "
                         f"{100 * (e[1] - e[2]) / e[1]:5.1f}% over the ideal")
            else:
                text += "-"
            g = gpu.get(kernel, {})
            req, wf = g.get(("requests", kind), 0), g.get(("wavefronts", kind), 0)
            if req and wf:
                text += (f"; GPU {wf / req:5.2f} wf/instr, "
                         f"{100 * g.get(('conflicts', kind), 0) / wf:5.1f}% "
                         f"bank conflicts ({req:.0f} instr)")
            else:
                text += "; GPU -"
            print(text)


if __name__ == "__main__":
    main()
