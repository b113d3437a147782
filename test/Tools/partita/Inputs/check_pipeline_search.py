#!/usr/bin/env python3
"""Checks the pipelined candidates of `partita plan --strategy auto`.

Usage: check_pipeline_search.py PARTITA MODEL4.mlir MODEL4B16.mlir WORKDIR

MODEL4 is a 4-layer GPT (batch 8), MODEL4B16 the same with batch 16.

On 4 devices with dp, megatron and the pure pipeline pp, compute-bound (10
GFLOP/s a device; memory, links so fast and calls so cheap that moving
bytes is noise):
- the candidates are dp and megatron on 4 devices, and under each schedule
  (1f1b, zb-h1, interleaved) pp=2 before dp=2 and tp=2, and pp=4 alone (the
  set is written out here);
- each pipelined row's microbatches are P x 2^k and its cut layers or
  cost; compiled by hand with `partita plan --pp P --schedule S
  --stages-by CUT --microbatches m`, each of its stages' memory is `partita
  explain --stage s`'s total (P stages, 2P interleaved) and the row's memory
  the largest rank's (its stages t = r mod P together); each stage's send
  is a call plus its larger message (activations or gradients, from
  explain's "sends" line) over the link;
- each row's comm is the cost model applied to its traffic, and its step is
  compute + comm + bubble (hidden 0);
- a 1f1b row's step is the makespan of 1F1B simulated here (its published
  order: rank r runs P - r - 1 forwards, then alternates, then drains; a
  forward waits for the previous stage's, a backward for the next stage's)
  with the row's stage times; a zb-h1 or interleaved row's step is at
  least its busiest rank's work;
- pipelining moves FLOPs, it adds none: the pure pipeline's stages' FLOPs
  sum to at least dp's contraction FLOPs per device times 4 (less 1%), and
  to at most dp's FLOPs of every kernel times 4 (dp repeats its optimizer
  update on every device; the stages split it);
- under a memory limit that another cut or count of a pipelined row meets
  but its chosen one does not (each compiled by hand and measured by
  explain), that pipeline fits, and every pipeline over the limit is over
  it under every cut and count: the search keeps one that fits when there
  is one.
On 8 devices in 2 nodes of 4 with a slow link between them (0.2 GB/s):
- rank 1 is pipelined, its "pp" groups span the nodes and nothing else
  does; the chosen plan agrees with explain stage by stage and trains 2
  steps matching the unpartitioned reference (`partita run --check`).
Prints one line per check; any failure exits 1 with the reason.
"""

import os
import re
import subprocess
import sys

from search_report import price_traffic, read_report, spans_nodes

SCHEDULES = ("1f1b", "zb-h1", "interleaved")


def chunks_of(schedule):
    """Stages a pipeline rank runs: interleaved's 2 (--chunks' default)."""
    return 2 if schedule == "interleaved" else 1


def rank_memory(stage_memory, ranks):
    """The most a pipeline rank holds: its stages' (t mod ranks) together."""
    return max(sum(stage_memory[r::ranks]) for r in range(ranks))
EXPECTED = {("dp", "dp=4", "-"), ("megatron", "tp=4", "-")} | {
    (s, m, sched) for sched in SCHEDULES
    for s, m in (("dp", "pp=2,dp=2"), ("megatron", "pp=2,tp=2"),
                 ("pp", "pp=4"))}


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def search(partita, model, work, name, cost, extra, devices):
    report = os.path.join(work, name + ".tsv")
    plan = os.path.join(work, name + ".pb")
    run = subprocess.run(
        [partita, "plan", model, "--train", "adamw", "--strategy", "auto",
         "--devices", str(devices), "--search-report", report, "-o", plan]
        + cost + extra, capture_output=True, text=True)
    if run.returncode != 0:
        fail("the search %s failed:\n%s" % (name, run.stderr))
    rows = read_report(report)
    return run, rows, plan


def simulate_1f1b(stages, m):
    """The makespan of 1F1B over len(stages) ranks, one stage each, with
    each stage's F, B (+ W) and update times; sends are left out (the cost
    model of these searches makes them noise)."""
    p = len(stages)
    order = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        acts = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            acts += [("F", warmup + i), ("B", i)]
        acts += [("B", i) for i in range(m - warmup, m)]
        order.append(acts)
    end_f = [[None] * m for _ in range(p)]
    end_b = [[None] * m for _ in range(p)]
    clock, pc = [0.0] * p, [0] * p
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while pc[r] < len(order[r]):
                kind, i = order[r][pc[r]]
                ready = clock[r]
                if kind == "F" and r > 0:
                    if end_f[r - 1][i] is None:
                        break
                    ready = max(ready, end_f[r - 1][i])
                if kind == "B" and r < p - 1:
                    if end_b[r + 1][i] is None:
                        break
                    ready = max(ready, end_b[r + 1][i])
                s = stages[r]
                clock[r] = ready + (s["F"] if kind == "F" else s["B"] + s["W"])
                (end_f if kind == "F" else end_b)[r][i] = clock[r]
                pc[r] += 1
                progress = True
    if any(pc[r] < len(order[r]) for r in range(p)):
        fail("1F1B does not finish")
    return max(clock[r] + stages[r]["update"] for r in range(p))


def explain_stage(partita, plan, stage):
    text = subprocess.run([partita, "explain", plan, "--stage", str(stage)],
                          capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"^  total +(\d+) B", text, re.M).group(1))
    m = re.search(r"^  sends +\d+ B.* per step = (\d+) microbatches x \((\d+) B"
                  r".* of activations to the next stage \+ (\d+) B", text, re.M)
    if not m:
        fail("no sends line in explain --stage %d of %s" % (stage, plan))
    return total, int(m.group(1)), int(m.group(2)), int(m.group(3))


def check_pipelined(partita, row, plan, call, link, node_link, per_node):
    """The row's stages against explain of `plan` (its compiled plan)."""
    name = "%s on %s (%s, %d microbatches)" % (
        row["strategy"], row["mesh"], row["schedule"], row["microbatches"])
    p = int(row["mesh"].split(",")[0].split("=")[1])
    if len(row["stages"]) != p * chunks_of(row["schedule"]):
        fail("%s: %d stages" % (name, len(row["stages"])))
    spans = spans_nodes(row["mesh"], ["pp"], per_node)
    rate = node_link if spans else link
    for s, stage in enumerate(row["stages"]):
        total, m, act, grad = explain_stage(partita, plan, s)
        if m != row["microbatches"] or total != stage["memory"]:
            fail("%s stage %d: explain says %d microbatches, %d bytes; the "
                 "search %d, %d" % (name, s, m, total, row["microbatches"],
                                    stage["memory"]))
        expected = call + max(act, grad) / rate if max(act, grad) else 0
        if not close(stage["send"], expected):
            fail("%s stage %d: send %g, expected %g (%d B of activations, %d "
                 "B of gradients)" % (name, s, stage["send"], expected, act,
                                      grad))
    if row["memory_bytes"] != rank_memory([st["memory"] for st in row["stages"]], p):
        fail("%s: memory is not its largest rank's" % name)
    return name


def plan_row(partita, model, row, cut, microbatches, out):
    """`partita plan` of a pipelined row's pipeline by hand (its preset on
    its stage mesh, --pp, --schedule, --stages-by `cut`, --microbatches)."""
    p = row["mesh"].split(",")[0].split("=")[1]
    stage_mesh = ",".join(row["mesh"].split(",")[1:])
    strategy = "none" if row["strategy"] == "pp" else row["strategy"]
    return subprocess.run(
        [partita, "plan", model, "--train", "adamw", "--strategy", strategy]
        + (["--mesh", stage_mesh] if stage_mesh else [])
        + ["--pp", p, "--schedule", row["schedule"], "--stages-by", cut,
           "--microbatches", str(microbatches), "--quiet", "-o", out],
        capture_output=True, text=True)


def variants(partita, model, work, row):
    """(cut, microbatches, largest rank's memory) of the row's pipeline
    under each cut and P, 2P, ... microbatches that compile, by hand."""
    p = int(row["mesh"].split(",")[0].split("=")[1])
    out = []
    for cut in ("layers", "cost"):
        m = p
        while m <= 64:
            variant = os.path.join(work, "variant.pb")
            if plan_row(partita, model, row, cut, m, variant).returncode != 0:
                break
            out.append((cut, m, rank_memory(
                [explain_stage(partita, variant, s)[0]
                 for s in range(p * chunks_of(row["schedule"]))], p)))
            m *= 2
    return out


def check_row_costs(row, flops, memory, call, link, node_link, per_node):
    name = "%s on %s (%s)" % (row["strategy"], row["mesh"], row["schedule"])
    if row["rejection"]:
        fail("%s rejected: %s" % (name, row["rejection"]))
    if not close(row["compute_seconds"],
                 row["kernel_flops"] / flops + row["kernel_bytes"] / memory):
        fail("compute of %s is not kernel flops / %g + kernel bytes / %g" %
             (name, flops, memory))
    if not close(sum(t[2] for t in row["traffic"]), row["calls"]) or \
            not close(sum(t[3] for t in row["traffic"]), row["wire_bytes"]):
        fail("the traffic of %s does not add up to its calls and wire" % name)
    comm, _, crosses = price_traffic(row, call, link, node_link, per_node)
    if crosses != bool(row["crosses_nodes"]):
        fail("%s: crosses nodes %d, expected %d" % (name, row["crosses_nodes"],
                                                    crosses))
    if not close(row["comm_seconds"], comm):
        fail("comm of %s is %g, the model gives %g" % (name, row["comm_seconds"], comm))
    pipelined = row["schedule"] != "-"
    if pipelined:
        p = int(row["mesh"].split(",")[0].split("=")[1])
        m = row["microbatches"]
        if m % p or (m // p) & (m // p - 1):
            fail("%s: %d microbatches is not %d x 2^k" % (name, m, p))
        if row["stages_by"] not in ("layers", "cost"):
            fail("%s: cut %s" % (name, row["stages_by"]))
        if row["hidden_seconds"] != 0 or row["bubble_seconds"] < 0:
            fail("%s: hidden %g, bubble %g" % (name, row["hidden_seconds"],
                                               row["bubble_seconds"]))
        if not close(row["seconds"], row["compute_seconds"] +
                     row["comm_seconds"] + row["bubble_seconds"]):
            fail("step of %s is not compute + comm + bubble" % name)
    elif row["bubble_seconds"] != 0 or row["stages"] or row["stages_by"] != "-":
        fail("%s is not pipelined but has a bubble or stages" % name)
    return name


def main():
    partita, model, model16, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)

    # Compute-bound: 1e10 FLOP/s, 1e15 B/s memory and links, 1 ns a call.
    flops, memory, link, call = 1e10, 1e15, 1e15, 1e-9
    cost = ["--device-tflops", "0.01", "--memory-gbytes", "1000000",
            "--link-gbytes", "1000000", "--call-us", "0.001"]
    run, rows, plan = search(partita, model, work, "compute", cost,
                             ["--search-strategies", "dp,megatron,pp"], 4)
    got = {(r["strategy"], r["mesh"], r["schedule"]) for r in rows}
    if got != EXPECTED or len(rows) != len(EXPECTED):
        fail("candidates %s, expected %s" % (sorted(got), sorted(EXPECTED)))
    checked = 0
    for row in rows:
        check_row_costs(row, flops, memory, call, link, link, 0)
        if row["schedule"] == "-":
            continue
        p = row["mesh"].split(",")[0].split("=")[1]
        manual = os.path.join(work, "manual%d.pb" % checked)
        made = plan_row(partita, model, row, row["stages_by"],
                        row["microbatches"], manual)
        if made.returncode != 0:
            fail("partita plan of %s on %s by hand:\n%s" %
                 (row["strategy"], row["mesh"], made.stderr))
        name = check_pipelined(partita, row, manual, call, link, link, 0)
        stage_work = [row["microbatches"] * (s["F"] + s["B"] + s["W"]) +
                      s["update"] for s in row["stages"]]
        busiest = max(sum(stage_work[r::int(p)]) for r in range(int(p)))
        if row["seconds"] < busiest * (1 - 1e-9):
            fail("%s: step %g under its busiest rank's work %g" %
                 (name, row["seconds"], busiest))
        if row["schedule"] == "1f1b":
            makespan = simulate_1f1b(row["stages"], row["microbatches"])
            if not close(row["seconds"], makespan, 1e-4):
                fail("%s: step %g, 1F1B simulated here %g" %
                     (name, row["seconds"], makespan))
        checked += 1
    ranked = sorted((r for r in rows if r["rank"] > 0), key=lambda r: r["rank"])
    for a, b in zip(ranked, ranked[1:]):
        if a["seconds"] > b["seconds"]:
            fail("rank %d is slower than rank %d" % (a["rank"], b["rank"]))
    dp = next(r for r in rows if (r["strategy"], r["mesh"]) == ("dp", "dp=4"))
    for pure in (r for r in rows if r["strategy"] == "pp"):
        total = sum(pure["microbatches"] * (s["F"] + s["B"] + s["W"]) + s["update"]
                    for s in pure["stages"]) * flops
        if not 4 * dp["flops"] * (1 - 1e-2) <= total <= \
                4 * dp["kernel_flops"] * (1 + 1e-9):
            fail("pp=4 (%s): its stages' FLOPs %g, dp's per device x 4: %g "
                 "of contractions, %g of every kernel" %
                 (pure["schedule"], total, 4 * dp["flops"],
                  4 * dp["kernel_flops"]))
    print("4 devices, compute-bound: %d candidates; %d pipelined rows agree "
          "with explain stage by stage; 1f1b steps match 1F1B simulated here; "
          "pp=4's stages hold dp's contraction FLOPs x 4, at most its kernels' x 4" % (len(rows), checked))

    # A memory limit that one of a pipeline's other cuts or counts meets but
    # its chosen one does not: the search must then keep one that fits.
    found = {}
    for row in rows:
        if row["schedule"] == "-":
            continue
        for cut, m, need in variants(partita, model, work, row):
            if need < row["memory_bytes"] and not found:
                found = dict(row=row, cut=cut, m=m, need=need)
    if not found:
        fail("no pipelined row has a smaller cut or count to test a limit with")
    limit = found["need"]
    key = (found["row"]["strategy"], found["row"]["mesh"], found["row"]["schedule"])
    run, rows, plan = search(partita, model, work, "limited", cost,
                             ["--search-strategies", "dp,megatron,pp",
                              "--memory-per-device", str(limit)], 4)
    over = 0
    for row in rows:
        if row["schedule"] == "-":
            continue
        name = "%s on %s (%s)" % (row["strategy"], row["mesh"], row["schedule"])
        if (row["rank"] > 0) != (row["memory_bytes"] <= limit):
            fail("%s: memory %d, limit %d, rank %d" % (
                name, row["memory_bytes"], limit, row["rank"]))
        if (row["strategy"], row["mesh"], row["schedule"]) == key and \
                row["rank"] == 0:
            fail("%s: over the limit %d, but cut by %s with %d microbatches "
                 "it fits" % (name, limit, found["cut"], found["m"]))
        if row["rank"] > 0:
            continue
        over += 1
        for cut, m, need in variants(partita, model, work, row):
            if need <= limit:
                fail("%s is over the limit, but cut by %s with %d "
                     "microbatches it needs %d bytes" % (name, cut, m, need))
    print("a limit that %s on %s (%s) meets cut by %s with %d microbatches, "
          "not as first chosen: it fits; %d pipelined rows over it are over "
          "under every cut and count" % (key[0], key[1], key[2], found["cut"],
                                         found["m"], over))

    # Two nodes of 4 with a slow link between them: the pipeline crosses it
    # with activations, not gradients.
    node_link = 0.2e9
    cost = ["--device-tflops", "1", "--devices-per-node", "4",
            "--node-link-gbytes", "0.2"]
    run, rows, plan = search(partita, model16, work, "nodes", cost,
                             ["--search-strategies", "dp,pp"], 8)
    for row in rows:
        if not row["rejection"]:
            check_row_costs(row, 1e12, 2000e9, 20e-6, 100e9, node_link, 4)
    best = next(r for r in rows if r["rank"] == 1)
    if best["schedule"] == "-":
        fail("over a slow node link chose %s on %s, not a pipeline" %
             (best["strategy"], best["mesh"]))
    m = re.search(r"chose (\S+) on (\S+) \((\S+), stages by (\S+)\) with "
                  r"(\d+) microbatches", run.stderr)
    if not m or m.groups() != (best["strategy"], best["mesh"], best["schedule"],
                               best["stages_by"], str(best["microbatches"])):
        fail("rank 1 is %s on %s; the tool says:\n%s" %
             (best["strategy"], best["mesh"], run.stderr))
    inner = [a.split("=")[0] for a in best["mesh"].split(",")[1:]]
    if not spans_nodes(best["mesh"], ["pp"], 4) or \
            any(spans_nodes(best["mesh"], [a], 4) for a in inner):
        fail("%s: pp should span the nodes and nothing else" % best["mesh"])
    name = check_pipelined(partita, best, plan, 20e-6, 100e9, node_link, 4)
    check = subprocess.run([partita, "run", plan, "--steps", "2", "--check",
                            "--rtol", "1e-4", "--param-rtol", "1e-3"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        fail("partita run --check %s:\n%s%s" % (plan, check.stdout, check.stderr))
    print("8 devices, 2 nodes, 0.2 GB/s between: chose %s, pp across the "
          "nodes; explain agrees stage by stage; 2 steps match the reference"
          % name)


if __name__ == "__main__":
    main()
