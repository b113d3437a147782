"""Runs Partita's dist-propagate and JAX/XLA's sharding propagation on the same
three programs and writes the side-by-side tables of
docs/propagation-vs-jax.md.

    python3 bench/jax-compare/compare.py [--partita-opt build/bin/partita-opt]
                                         [--out docs/propagation-vs-jax.md]

Only the blocks between `<!-- generated:NAME -->` and
`<!-- end generated:NAME -->` are rewritten; the hand-written analysis around
them is kept. A block missing from the file is appended at the end.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import jax_programs  # noqa: E402

PARTITIONERS = ("shardy", "gspmd")


def run_jax(partitioner):
    with tempfile.TemporaryDirectory(prefix=f"jax-{partitioner}-") as dump:
        proc = subprocess.run(
            [sys.executable, os.path.join(HERE, "jax_side.py"),
             "--partitioner", partitioner, "--dump", dump],
            capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"jax_side.py --partitioner {partitioner} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def _bracket_end(text, start):
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "[<{":
            depth += 1
        elif text[i] in "]>}":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top(text):
    """Splits `a, b, c` at commas outside brackets and quotes."""
    parts, depth, quoted, cur = [], 0, False, ""
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "[<{":
            depth += 1
        elif not quoted and ch in "]>}":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def normalize_partita(attr):
    """`#dist.sharding<@mesh, [{"dp", ?}p1, {}], partial={"tp"}>` ->
    `[{"dp"}, {}], partial={"tp"}`: what the value is, without the
    open/closed markers and priorities that only steer propagation."""
    m = re.fullmatch(r"#dist\.sharding<\s*@[\w.$-]+\s*,\s*(.*)>", attr.strip(), re.S)
    if not m:
        return attr
    body = re.sub(r",\s*\?", "", m.group(1))
    body = body.replace("?", "")
    body = re.sub(r"\}p\d+", "}", body)
    body = re.sub(r"\{\s+\}", "{}", body)
    return body.strip()


def run_partita(partita_opt, mlir):
    """loc name -> (op name, sharding text or None); or an error string."""
    cmd = [partita_opt, "--dist-propagate", "--mlir-print-debuginfo",
           "--mlir-print-local-scope", mlir]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return f"cannot run {partita_opt}: {e}"
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no message"])[0]
        return "partita-opt failed: " + first.replace(ROOT + "/", "")
    # Ops the pass could not see into: their sharding is a fallback, not a
    # propagated result, and the table says so.
    no_rule = set(re.findall(r'loc\("([^"]+)"\): op \S+ has no sharding rule',
                             proc.stderr))
    out = {}
    sig = re.search(r"func\.func @\w+\(.*\) -> \((.*)\) \{", proc.stdout)
    if sig:
        for n, item in enumerate(_split_top(sig.group(1))):
            m = re.search(r"dist\.sharding = (#dist\.sharding<.*>)\}", item)
            out[f"result:{n}"] = ("func.func", normalize_partita(m.group(1))
                                  if m else None, False)
    for line in proc.stdout.splitlines():
        loc = re.search(r'loc\("([^"]+)"\)\s*$', line)
        op = re.search(r"=\s*([\w.]+)", line)
        if not loc or not op:
            continue
        sharding = None
        pos = line.find("dist.sharding = [")
        if pos >= 0:
            start = pos + len("dist.sharding = ")
            end = _bracket_end(line, start)
            items = _split_top(line[start + 1:end])
            sharding = " / ".join(normalize_partita(i) for i in items)
        out[loc.group(1)] = (op.group(1), sharding, loc.group(1) in no_rule)
    return out


def _code(text):
    return f"`{text}`" if text else ""


def _verdict(partita, jax):
    """jax: partitioner -> sharding text."""
    if partita is None:
        return "—"
    same = [p for p in PARTITIONERS if jax.get(p) == partita]
    if len(same) == len(PARTITIONERS):
        return "same"
    if not same:
        return "**differs**"
    return "same as " + ", ".join(same) + "; **differs** from " + ", ".join(
        p for p in PARTITIONERS if p not in same)


def program_block(prog, partita, jax_runs):
    lines = [f"### `{prog.name}`: {prog.title}", ""]
    lines.append(f"Partita input: `bench/jax-compare/{prog.mlir}`; JAX: "
                 f"`{prog.name}` in `bench/jax-compare/jax_programs.py`. "
                 "Annotated arguments (the same on both sides):")
    lines.append("")
    for a in prog.args:
        dims = ", ".join(
            "{" + ", ".join(f'"{x}"' for x in ((s,) if isinstance(s, str) else (s or ())))
            + "}" for s in a.spec)
        lines.append(f"- `{a.name}` {a.dtype}{list(a.shape)}: `[{dims}]`")
    lines.append("")
    if isinstance(partita, str):
        lines.append(f"Partita column empty: {partita}")
        lines.append("")
    lines.append("| Intermediate | Shape | Partita `dist-propagate` | JAX (Shardy) "
                 "| JAX (GSPMD) | Partita vs JAX |")
    lines.append("|---|---|---|---|---|---|")
    for row in prog.rows:
        jax = {}
        for p in PARTITIONERS:
            r = jax_runs[p]["programs"][prog.name]["rows"][row.name]
            jax[p] = r.get("sharding") or f"({r.get('error')})"
            if r.get("ambiguous"):
                print(f"{prog.name}/{row.name}: several {p} instructions of the "
                      "row's shape leave its scope; took the last", file=sys.stderr)
        if not row.partita:
            owner = row.name.split("/")[0]
            op = partita.get(owner, ("?",))[0] if isinstance(partita, dict) else "?"
            pcell = f"— (inside `{op}` `{owner}`)" if op != "?" else f"— (inside `{owner}`)"
            pval = None
        elif isinstance(partita, str):
            pcell, pval = "(not run)", None
        elif row.name not in partita:
            pcell, pval = f'(no op with loc("{row.name}"))', None
        else:
            op, pval, fallback = partita[row.name]
            pcell = _code(pval) if pval else f"(`{op}`: no `dist.sharding` written)"
            if fallback:
                pcell += f" (`{op}` has no rule yet: replicated by default)"
        shape = "[" + ", ".join(str(d) for d in row.shape) + "]"
        lines.append(f"| `{row.name}` | {shape} | {pcell} | {_code(jax['shardy'])} "
                     f"| {_code(jax['gspmd'])} | {_verdict(pval, jax)} |")
    lines.append("")
    lines.append("Collectives in XLA's partitioned, optimized program "
                 "(local shapes; the op that caused each):")
    lines.append("")
    for p in PARTITIONERS:
        coll = jax_runs[p]["programs"][prog.name]["collectives"]
        items = []
        for c in coll:
            axes = c["axes"]
            over = ("over " + ", ".join(f'"{a}"' for a in axes)
                    if isinstance(axes, list) else f"groups {axes}")
            items.append(f"`{c['opcode']}` {c['type']} {over} (`{c['op_name']}`)")
        lines.append(f"- {p}: " + ("; ".join(items) if items else "none"))
    return "\n".join(lines)


def header_block(jax_runs, partita_opt):
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    j = jax_runs["shardy"]
    return "\n".join([
        f"Generated by `bench/jax-compare/compare.py` with JAX {j['jax']} on 8 CPU "
        "devices (`--xla_force_host_platform_device_count=8`, mesh axes Auto) and "
        f"`{os.path.relpath(partita_opt, ROOT)} --dist-propagate` at commit "
        f"`{commit}`. Mesh `<[\"dp\"=2, \"tp\"=4]>` on both sides.",
        "",
        "- **JAX (Shardy)**: JAX's default partitioner; shardings read from the HLO "
        "right after the `shardy-xla` pass (Shardy propagation, exported to HLO "
        "shardings), before SPMD partitioning.",
        "- **JAX (GSPMD)**: `jax_use_shardy_partitioner=False`; shardings read from "
        "the HLO right after `sharding-propagation`.",
        "- Every XLA instruction carries the `jax.named_scope` it was traced in; a "
        "row's JAX sharding is that of the instruction whose value leaves the "
        "scope. HLO tile assignments are turned into mesh axes by matching device "
        "groups (`hlo_sharding.py`). These HLO shardings have no partial-sum "
        "state: XLA's partitioner reduces a contraction over a sharded "
        "dimension right at the contraction (see the collectives under each "
        "table, named after the op that caused them).",
        "- Rows marked \"inside\" exist only in JAX, which has no fused softmax or "
        "cross-entropy op; Partita's one op covers them.",
        "- `result:N` rows are the function's N-th result: the sharding in "
        "Partita's function signature, and XLA's sharding of the root "
        "instruction (its output sharding).",
        "- Partita's column drops open/closed markers and priorities; "
        "`partial={...}` is kept.",
    ])


def update_doc(path, blocks):
    text = open(path).read() if os.path.exists(path) else ""
    for name, body in blocks:
        begin, end = f"<!-- generated:{name} -->", f"<!-- end generated:{name} -->"
        new = f"{begin}\n{body}\n{end}"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if pattern.search(text):
            text = pattern.sub(lambda _: new, text)
        else:
            text = text.rstrip("\n") + ("\n\n" if text else "") + new + "\n"
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partita-opt", default=os.path.join(ROOT, "build/bin/partita-opt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/propagation-vs-jax.md"))
    opts = ap.parse_args()

    jax_runs = {p: run_jax(p) for p in PARTITIONERS}
    blocks = [("header", header_block(jax_runs, opts.partita_opt))]
    for prog in jax_programs.PROGRAMS:
        partita = run_partita(opts.partita_opt, os.path.join(HERE, prog.mlir))
        if isinstance(partita, dict):
            unknown = set(partita) - {r.name for r in prog.rows}
            if unknown:
                print(f"{prog.mlir}: ops with locs that name no row: "
                      f"{sorted(unknown)}", file=sys.stderr)
        else:
            print(f"{prog.mlir}: {partita}", file=sys.stderr)
        blocks.append((prog.name, program_block(prog, partita, jax_runs)))
    update_doc(opts.out, blocks)
    print(f"wrote {os.path.relpath(opts.out)}")


if __name__ == "__main__":
    main()
