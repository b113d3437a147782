#!/usr/bin/env python3
"""Checks `partita plan --strategy auto` against what it claims.

Usage: check_strategy_search.py PARTITA MODEL.mlir WORKDIR

Pipelined candidates are left out here (--search-schedules none);
check_pipeline_search.py checks them. On 4 devices, with the default cost
model:
- the candidates are every strategy preset on every mesh of 4 devices it
  can use, and megatron and dp+megatron with sequence parallelism (the set
  is written out here, not read from the tool);
- each row's estimate is the cost model applied to its kernels (their FLOPs
  at 100 TFLOP/s plus their bytes at 2000 GB/s) and its traffic (calls and
  wire bytes by mesh axes; bucketed gradient reductions hidden behind the
  backward, up to 2/3 of the compute), and the ranks follow the estimates;
- the chosen plan is rank 1, and `partita explain` of the written plan
  gives the same memory total, communicator calls and wire bytes;
- dp's contraction FLOPs per device are 6 x matmul parameters x tokens / 4,
  within 10%, and every data- or tensor-parallel split has the same within
  1% (a bias add fused into its einsum counts with it, and a row-parallel
  einsum's bias is added after its all-reduce, unfused);
- a memory limit one byte under the winner's memory makes the search choose
  the fastest candidate within the limit, not the winner;
- a limit under every candidate makes the search accumulate gradients over
  2, 4, ... microbatches until a candidate fits, and chooses the fastest of
  those; a limit of 1 byte fails with a diagnostic naming the smallest;
- with 4 devices a node on 8, every axis order is tried, and which groups
  span nodes (worked out here apart from the tool) sets each link's rate;
- both chosen plans train 2 steps matching the unpartitioned reference
  (`partita run --check`).
Prints one line per check; any failure exits 1 with the reason.
"""

import os
import re
import subprocess
import sys

from search_report import price_traffic, read_report

EXPECTED = {
    ("dp", "dp=4"), ("zero1", "dp=4"), ("zero2", "dp=4"), ("zero3", "dp=4"),
    ("fsdp", "dp=4"), ("megatron", "tp=4"), ("dp+megatron", "dp=2,tp=2"),
    ("zero1+megatron", "dp=2,tp=2"), ("zero2+megatron", "dp=2,tp=2"),
    ("zero3+megatron", "dp=2,tp=2"), ("fsdp+megatron", "dp=2,tp=2"),
    ("cp", "cp=4"), ("dp+cp", "dp=2,cp=2"),
    ("megatron+sp", "tp=4"), ("dp+megatron+sp", "dp=2,tp=2"),
}
FLOPS, MEMORY, LINK, NODE_LINK, CALL, BACKWARD = \
    100e12, 2000e9, 100e9, 25e9, 20e-6, 2 / 3


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def search(partita, model, work, name, extra, devices=4):
    report = os.path.join(work, name + ".tsv")
    plan = os.path.join(work, name + ".pb")
    run = subprocess.run(
        [partita, "plan", model, "--train", "adamw", "--strategy", "auto",
         "--devices", str(devices), "--search-report", report, "-o", plan,
         "--search-schedules", "none"] + extra,
        capture_output=True, text=True)
    rows = read_report(report) if os.path.exists(report) else []
    return run, rows, plan


def check_rows(rows, limit, expected=EXPECTED, per_node=0):
    # One row per pair with 1 microbatch; a train step over the limit may
    # come again with more microbatches, only when it then fits.
    whole = [r for r in rows if r["microbatches"] == 1]
    pairs = {(r["strategy"], r["mesh"]) for r in whole}
    if pairs != expected or len(whole) != len(expected):
        fail("candidates %s, expected %s" % (sorted(pairs), sorted(expected)))
    for r in rows:
        if r["microbatches"] == 1:
            continue
        base = next(b for b in whole if (b["strategy"], b["mesh"]) ==
                    (r["strategy"], r["mesh"]))
        if limit is None or base["memory_bytes"] <= limit or \
                r["memory_bytes"] > limit:
            fail("%s on %s with %d microbatches: its base needs %d bytes, it "
                 "%d, limit %s" % (r["strategy"], r["mesh"], r["microbatches"],
                                   base["memory_bytes"], r["memory_bytes"], limit))
    for r in rows:
        name = "%s on %s" % (r["strategy"], r["mesh"])
        if r["schedule"] != "-" or r["stages"] or r["bubble_seconds"] != 0:
            fail("%s: pipelined (schedule %s) under --search-schedules none"
                 % (name, r["schedule"]))
        if r["rejection"]:
            fail("%s rejected: %s" % (name, r["rejection"]))
        # Every kernel's FLOPs at the device rate and bytes at the memory
        # rate; the contractions' FLOPs are among the kernels'.
        if not close(r["compute_seconds"], r["kernel_flops"] / FLOPS +
                     r["kernel_bytes"] / MEMORY):
            fail("compute of %s is not kernel flops / %g + kernel bytes / %g"
                 % (name, FLOPS, MEMORY))
        if not 0 < r["flops"] <= r["kernel_flops"] or r["kernel_bytes"] <= 0:
            fail("%s: contraction flops %g, kernel flops %g, kernel bytes %g"
                 % (name, r["flops"], r["kernel_flops"], r["kernel_bytes"]))
        if not close(sum(t[2] for t in r["traffic"]), r["calls"]) or \
                not close(sum(t[3] for t in r["traffic"]), r["wire_bytes"]):
            fail("the traffic of %s does not add up to its calls and wire" % name)
        comm, bucketed, crosses = price_traffic(r, CALL, LINK, NODE_LINK,
                                                per_node)
        if crosses != bool(r["crosses_nodes"]):
            fail("%s: crosses nodes %d, expected %d" % (name, r["crosses_nodes"], crosses))
        if not close(r["comm_seconds"], comm):
            fail("comm of %s is %g, the model gives %g" % (name, r["comm_seconds"], comm))
        hidden = min(bucketed, BACKWARD * r["compute_seconds"])
        if not close(r["hidden_seconds"], hidden):
            fail("hidden of %s is %g, the model gives %g" %
                 (name, r["hidden_seconds"], hidden))
        if not close(r["seconds"], r["compute_seconds"] + comm - hidden):
            fail("step of %s is not compute + comm - hidden" % name)
        fits = limit is None or r["memory_bytes"] <= limit
        if fits != (r["rank"] > 0):
            fail("%s on %s: memory %d, limit %s, rank %d" %
                 (r["strategy"], r["mesh"], r["memory_bytes"], limit, r["rank"]))
    ranked = sorted((r for r in rows if r["rank"] > 0), key=lambda r: r["rank"])
    if [r["rank"] for r in ranked] != list(range(1, len(ranked) + 1)):
        fail("ranks are not 1..n")
    for a, b in zip(ranked, ranked[1:]):
        if a["seconds"] > b["seconds"]:
            fail("rank %d (%s) is slower than rank %d (%s)" %
                 (a["rank"], a["strategy"], b["rank"], b["strategy"]))
    return ranked


def chosen(run):
    m = re.search(r"chose (\S+) on (\S+) ", run.stderr)
    if not m:
        fail("no 'chose' line in:\n" + run.stderr)
    return m.group(1), m.group(2)


def check_explain(partita, plan, row):
    text = subprocess.run([partita, "explain", plan], capture_output=True,
                          text=True, check=True).stdout
    total = int(re.search(r"^  total +(\d+) B", text, re.M).group(1))
    m = re.search(r"in (\d+) communicator calls?, .* on the wire (\d+) B", text)
    calls, wire = int(m.group(1)), int(m.group(2))
    if row["microbatches"] > 1:
        # explain's collectives are the step program's; the search adds the
        # microbatch program's, run once per microbatch.
        calls, wire = row["calls"], round(row["wire_bytes"])
    if total != row["memory_bytes"] or calls != row["calls"] or \
            wire != round(row["wire_bytes"]):
        fail("explain says memory %d, calls %d, wire %d; the search %d, %d, %g"
             % (total, calls, wire, row["memory_bytes"], row["calls"],
                row["wire_bytes"]))


def check_run(partita, plan):
    run = subprocess.run([partita, "run", plan, "--steps", "2", "--check",
                          "--rtol", "1e-4"], capture_output=True, text=True)
    if run.returncode != 0:
        fail("partita run --check %s:\n%s%s" % (plan, run.stdout, run.stderr))


def main():
    partita, model, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)

    run, rows, plan = search(partita, model, work, "free", [])
    if run.returncode != 0:
        fail("the search failed:\n" + run.stderr)
    ranked = check_rows(rows, None)
    best = ranked[0]
    if chosen(run) != (best["strategy"], best["mesh"]):
        fail("chose %s, rank 1 is %s" % (chosen(run), best["strategy"]))
    check_explain(partita, plan, best)
    print("no limit: %d candidates ranked by the cost model; chose rank 1, "
          "%s on %s; explain agrees" % (len(rows), best["strategy"], best["mesh"]))

    # Layers 2, hidden 32, mlp 4x, vocab 256, batch 8 x seq 16: the
    # contractions' parameters (attention 4 H^2, mlp 8 H^2 a layer; the head
    # V H) times 6 FLOPs a token, over 4 devices.
    matmul_params = 2 * (4 * 32 * 32 + 8 * 32 * 32) + 256 * 32
    expected = 6 * matmul_params * 8 * 16 / 4
    dp = next(r for r in rows if r["strategy"] == "dp")
    if abs(dp["flops"] - expected) > 0.1 * expected:
        fail("dp's FLOPs per device %g, expected about %g" % (dp["flops"], expected))
    for r in rows:
        if "cp" not in r["mesh"] and "+sp" not in r["strategy"] and \
                not close(r["flops"], dp["flops"], 1e-2):
            fail("%s on %s: %g FLOPs per device, dp %g" %
                 (r["strategy"], r["mesh"], r["flops"], dp["flops"]))
    print("FLOPs per device: dp %.4g, 6 N T / 4 = %.4g; the same for every "
          "dp and tp split" % (dp["flops"], expected))
    check_run(partita, plan)
    print("chosen plan: 2 steps match the reference")

    limit = best["memory_bytes"] - 1
    run, rows, plan = search(partita, model, work, "limited",
                             ["--memory-per-device", str(limit)])
    if run.returncode != 0:
        fail("the limited search failed:\n" + run.stderr)
    ranked = check_rows(rows, limit)
    fitting = [r for r in rows if r["memory_bytes"] <= limit]
    fastest = min(r["seconds"] for r in fitting)
    pick = ranked[0]
    if chosen(run) != (pick["strategy"], pick["mesh"]) or \
            pick["seconds"] != fastest or pick["strategy"] == best["strategy"]:
        fail("under the limit chose %s" % (chosen(run),))
    check_explain(partita, plan, pick)
    check_run(partita, plan)
    print("limit 1 byte under %s's memory: chose %s on %s, the fastest of %d "
          "within it; explain agrees; 2 steps match the reference" %
          (best["strategy"], pick["strategy"], pick["mesh"], len(fitting)))

    # Under every candidate with 1 microbatch: only more microbatches fit.
    smallest = min(r["memory_bytes"] for r in rows if r["microbatches"] == 1)
    limit = smallest - 1
    run, rows, plan = search(partita, model, work, "accumulated",
                             ["--memory-per-device", str(limit)])
    if run.returncode != 0:
        fail("the search under every candidate failed:\n" + run.stderr)
    ranked = check_rows(rows, limit)
    pick = ranked[0]
    if pick["microbatches"] < 2 or pick["memory_bytes"] > limit or \
            chosen(run) != (pick["strategy"], pick["mesh"]) or \
            ("with %d microbatches" % pick["microbatches"]) not in run.stderr:
        fail("under every candidate chose %s" % (chosen(run),))
    check_explain(partita, plan, pick)
    check_run(partita, plan)
    print("limit under every candidate: chose %s on %s with %d microbatches, "
          "the fastest of %d that fit with more; explain agrees; 2 steps "
          "match the reference" % (pick["strategy"], pick["mesh"],
                                   pick["microbatches"], len(ranked)))

    run, _, _ = search(partita, model, work, "none",
                       ["--memory-per-device", "1"])
    if run.returncode == 0 or "no candidate fits --memory-per-device" not in run.stderr \
            or ("needs %d bytes a device" % smallest) not in run.stderr:
        fail("a limit under every candidate:\n" + run.stderr)
    print("a limit of 1 byte: exit %d, names the smallest (%d bytes)"
          % (run.returncode, smallest))

    # 8 devices, 4 a node: every order of the axes is a candidate, and a
    # group that spans nodes runs at the node link's rate.
    expected = {("dp+megatron", m) for m in
                ("dp=2,tp=4", "dp=4,tp=2", "tp=4,dp=2", "tp=2,dp=4")}
    run, rows, plan = search(partita, model, work, "nodes",
                             ["--devices-per-node", "4", "--search-strategies",
                              "dp+megatron"], devices=8)
    if run.returncode != 0:
        fail("the search over nodes failed:\n" + run.stderr)
    ranked = check_rows(rows, None, expected, per_node=4)
    if chosen(run) != (ranked[0]["strategy"], ranked[0]["mesh"]):
        fail("over nodes chose %s, rank 1 is %s" % (chosen(run), ranked[0]["mesh"]))
    check_explain(partita, plan, ranked[0])
    check_run(partita, plan)
    print("8 devices, 4 a node: %d meshes, %d across nodes; chose %s; explain "
          "agrees; 2 steps match the reference" %
          (len(rows), sum(r["crosses_nodes"] for r in rows), ranked[0]["mesh"]))


if __name__ == "__main__":
    main()
