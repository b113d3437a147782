"""Reads XLA's HLO text after sharding propagation and names shardings in
Partita's notation.

An HLO sharding lists, for a tile grid, the device of every tile
(`{devices=[2,1,4]<=[8] last_tile_dim_replicate}`: 2x1 tiles, each held by a
group of 4 devices). Partita names mesh axes instead (`[{"dp"}, {}]`). The
conversion tries every way of placing the mesh axes on the tensor dimensions
(each axis on one dimension, in some order, or on none) and keeps the one
whose tiles are held by exactly the same device groups. Shardings no placement
reproduces (maximal, manual, sub-axes) are returned as the raw HLO text.

Run this file to check the conversion on hand-worked cases.
"""

import dataclasses
import itertools
import math
import re

import numpy as np


@dataclasses.dataclass
class Instr:
    name: str
    type: str  # HLO type text, layout dropped
    shape: tuple  # () for scalars, None for tuples/tokens
    opcode: str
    operands: list
    sharding: str  # text inside sharding={...}, or None
    op_name: str  # metadata op_name, or ""
    is_root: bool
    replica_groups: str  # text of replica_groups=..., or ""


_INSTR = re.compile(
    r"^\s*(ROOT\s+)?%([\w.\-]+)\s*=\s*(\([^()]*\)|\S+?)(?:\{[\d,]*\})?"
    r"\s+([\w\-]+)\((.*)$")


def _matching(text, start, open_ch, close_ch):
    """Index of the bracket closing the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {open_ch}{close_ch} in: {text}")


def _shape(type_text):
    m = re.fullmatch(r"[a-z]+\d*\[([\d,]*)\]", type_text)
    if not m:
        return None
    return tuple(int(d) for d in m.group(1).split(",") if d)


def parse_entry(hlo_text):
    """The instructions of the ENTRY computation, in order."""
    lines = hlo_text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("ENTRY"))
    except StopIteration:
        raise ValueError("no ENTRY computation in the HLO text")
    out = []
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        m = _INSTR.match(line)
        if not m:
            continue
        root, name, type_text, opcode, rest = m.groups()
        close = _matching("(" + rest, 0, "(", ")")
        operands = re.findall(r"%([\w.\-]+)", rest[:close - 1])
        attrs = rest[close:]
        sharding = None
        pos = attrs.find("sharding={")
        if pos >= 0:
            b = pos + len("sharding=")
            sharding = attrs[b + 1:_matching(attrs, b, "{", "}")]
        op_name = re.search(r'op_name="([^"]*)"', attrs)
        groups = _replica_groups_text(attrs)
        type_text = re.sub(r"\{[\d,]*\}", "", type_text)
        out.append(Instr(name, type_text, _shape(type_text), opcode, operands,
                         sharding, op_name.group(1) if op_name else "",
                         bool(root), groups))
    return out


def _replica_groups_text(attrs):
    pos = attrs.find("replica_groups=")
    if pos < 0:
        return ""
    text = attrs[pos + len("replica_groups="):]
    if text.startswith("{"):
        return text[:_matching(text, 0, "{", "}") + 1]
    if text.startswith("mesh["):
        return text[:text.index("}") + 1]
    m = re.match(r"\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?", text)
    return m.group(0) if m else text.split(",")[0]


def _iota(text):
    """`[2,4]<=[8]` or `[4,2]<=[2,4]T(1,0)`: the device array it names."""
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
    if not m:
        return None
    dims = [int(d) for d in m.group(2).split(",")]
    arr = np.arange(math.prod(dims)).reshape(dims)
    if m.group(3):
        arr = arr.transpose([int(p) for p in m.group(3).split(",")])
    return arr.reshape([int(d) for d in m.group(1).split(",")])


def replica_groups(text):
    """The device groups of a collective's `replica_groups=` text, as a set
    of frozensets, or None for a form this reader does not know."""
    text = text.strip()
    if text.startswith("{"):
        return {frozenset(int(d) for d in g.split(",") if d)
                for g in re.findall(r"\{([\d,]*)\}", text[1:-1])}
    if text.startswith("mesh["):
        m = re.fullmatch(r"mesh\[([^\]]*)\](?:, device_ids=\((.*)\))? \{([^}]*)\}",
                         text)
        if not m:
            return None
        axes = re.findall(r"'(\w+)'=(\d+)", m.group(1))
        shape = [int(n) for _, n in axes]
        if m.group(2):
            # `[2,4]T(1,0)`: the ids of an iota of that shape, transposed.
            ids = re.fullmatch(r"\[([\d,]+)\](T\([\d,]+\))?", m.group(2))
            if not ids:
                return None
            dims = ids.group(1)
            n = math.prod(int(d) for d in dims.split(","))
            arr = _iota(f"[{n}]<=[{dims}]{ids.group(2) or ''}").reshape(shape)
        else:
            arr = np.arange(math.prod(shape)).reshape(shape)
        over = [i for i, (a, _) in enumerate(axes) if f"'{a}'" in m.group(3)]
        rest = [i for i in range(len(axes)) if i not in over]
        arr = arr.transpose(rest + over).reshape(-1, math.prod(shape[i] for i in over))
        return {frozenset(int(d) for d in row) for row in arr}
    arr = _iota(text)
    if arr is None or arr.ndim != 2:
        return None
    return {frozenset(int(d) for d in row) for row in arr}


def groups_to_axes(groups, mesh_axes):
    """The mesh axes a collective's device groups span, e.g. ["tp"], or None."""
    if groups is None:
        return None
    names = [a for a, _ in mesh_axes]
    for n in range(len(names) + 1):
        for subset in itertools.combinations(names, n):
            placement = [[a for a in names if a not in subset]]
            # Devices that agree on every axis outside `subset` form a group.
            by_key = {}
            for k, devs in _placement_groups(placement, mesh_axes, 1).items():
                by_key[k] = devs
            if set(by_key.values()) == groups:
                return list(subset)
    return None


def split_tuple_sharding(text):
    """`{a}, {b}` (the inside of a tuple's sharding={...}) -> ["a", "b"]."""
    out, pos = [], 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return out
        end = _matching(text, start, "{", "}")
        out.append(text[start + 1:end])
        pos = end + 1


def scope_of(op_name):
    """`jit(f)/probs/max/reduce_max` -> `probs/max`: the named scopes only."""
    parts = op_name.split("/")[:-1]
    return "/".join(p for p in parts if not re.fullmatch(r"[\w.]*\(.*\)", p))


def scope_results(instrs, key=None):
    """Per scope, the instructions of that scope whose value leaves it (used
    by an instruction of another scope, or the root). `key` maps an op_name
    to the scope it counts for (default: `scope_of`)."""
    key = key or scope_of
    by_name = {i.name: i for i in instrs}
    scope = {i.name: key(i.op_name) for i in instrs}
    leaving = set()
    for i in instrs:
        for o in i.operands:
            if o in by_name and scope[o] != scope[i.name]:
                leaving.add(o)
        if i.is_root:
            leaving.add(i.name)
    out = {}
    for i in instrs:
        if i.name in leaving and scope[i.name]:
            out.setdefault(scope[i.name], []).append(i)
    return out


def _device_array(text):
    """Tile dims, flags and the device grid of a `devices=[...]...` sharding."""
    m = re.match(r"devices=\[([\d,]+)\]", text)
    tile = [int(d) for d in m.group(1).split(",")]
    rest = text[m.end():]
    iota = re.match(r"<=\[([\d,]+)\](?:T\(([\d,]+)\))?", rest)
    if iota:
        dims = [int(d) for d in iota.group(1).split(",")]
        arr = np.arange(math.prod(dims)).reshape(dims)
        if iota.group(2):
            arr = arr.transpose([int(p) for p in iota.group(2).split(",")])
        rest = rest[iota.end():]
    else:
        ids = re.match(r"([\d,]+)", rest)
        arr = np.array([int(d) for d in ids.group(1).split(",")])
        rest = rest[ids.end():]
    return tile, rest.strip(), arr.reshape(tile)


def _groups(grid, rank):
    """tile index -> frozenset of devices holding it."""
    grid = grid.reshape(grid.shape[:rank] + (-1,))
    return {idx: frozenset(int(d) for d in grid[idx])
            for idx in itertools.product(*(range(n) for n in grid.shape[:rank]))}


def _placement_groups(placement, mesh_axes, rank):
    sizes = dict(mesh_axes)
    names = [a for a, _ in mesh_axes]
    groups = {}
    for coords in itertools.product(*(range(s) for _, s in mesh_axes)):
        at = dict(zip(names, coords))
        device = 0
        for a in names:
            device = device * sizes[a] + at[a]
        idx = []
        for axes in placement:
            k = 0
            for a in axes:
                k = k * sizes[a] + at[a]
            idx.append(k)
        groups.setdefault(tuple(idx), set()).add(device)
    return {k: frozenset(v) for k, v in groups.items()}


def _placements(mesh_axes, rank):
    names = [a for a, _ in mesh_axes]
    for where in itertools.product(range(rank + 1), repeat=len(names)):
        per_dim = [[a for a, w in zip(names, where) if w == d]
                   for d in range(rank)]
        for orders in itertools.product(
                *(itertools.permutations(axes) for axes in per_dim)):
            yield [list(o) for o in orders]


def format_dims(placement):
    return "[" + ", ".join(
        "{" + ", ".join(f'"{a}"' for a in axes) + "}" for axes in placement) + "]"


def to_partita(sharding, rank, mesh_axes):
    """Partita notation of an HLO sharding on a tensor of `rank`, or the raw
    HLO text (in braces) when no placement of whole mesh axes matches."""
    raw = "{" + sharding + "}"
    text = re.sub(r"\s*metadata=\{.*\}", "", sharding).strip()
    if text == "replicated":
        return format_dims([[] for _ in range(rank)])
    if not text.startswith("devices="):
        return raw
    tile, flags, grid = _device_array(text)
    if flags == "last_tile_dim_replicate" or flags == "last_tile_dims={replicated}":
        data_rank = len(tile) - 1
    elif flags == "":
        data_rank = len(tile)
    else:
        return raw
    if data_rank != rank or grid.size != math.prod(s for _, s in mesh_axes):
        return raw
    want = _groups(grid, rank)
    for placement in _placements(mesh_axes, rank):
        counts = [math.prod(dict(mesh_axes)[a] for a in axes) for axes in placement]
        if counts == tile[:rank] and _placement_groups(
                placement, mesh_axes, rank) == want:
            return format_dims(placement)
    return raw


def _self_test():
    mesh = (("dp", 2), ("tp", 4))
    # Worked by hand: devices d = 4*dp + tp.
    cases = [
        # 2 row tiles, each on 4 devices: rows {0..3} and {4..7} -> dp.
        ("devices=[2,1,4]<=[8] last_tile_dim_replicate", 2, '[{"dp"}, {}]'),
        # iota [2,4] transposed is [[0,4],[1,5],[2,6],[3,7]]: 4 column tiles
        # held by {0,4}, {1,5}, ... -> columns split by tp.
        ("devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate", 2,
         '[{}, {"tp"}]'),
        ("devices=[2,4]<=[8]", 2, '[{"dp"}, {"tp"}]'),
        # Tiles 0..7 on devices 0,4,1,5,...: tp major, dp minor.
        ("devices=[8,1]<=[2,4]T(1,0)", 2, '[{"tp", "dp"}, {}]'),
        ("devices=[8]0,1,2,3,4,5,6,7", 1, '[{"dp", "tp"}]'),
        ("devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate", 1, '[{"tp"}]'),
        ("replicated", 3, "[{}, {}, {}]"),
        ("replicated", 0, "[]"),
        # Devices 0,1 / 2,3 / ... hold the tiles: no whole-axis placement.
        ("devices=[4,2]<=[8] last_tile_dim_replicate", 1,
         "{devices=[4,2]<=[8] last_tile_dim_replicate}"),
        ("maximal device=0", 2, "{maximal device=0}"),
    ]
    for hlo, rank, want in cases:
        got = to_partita(hlo, rank, mesh)
        assert got == want, f"{hlo}: got {got}, want {want}"
    assert scope_of("jit(attention)/probs/max/reduce_max") == "probs/max"
    assert scope_of("jit(f)/embed/jit(_take)/gather") == "embed"
    text = """HloModule m

ENTRY %main (a: f32[4,8]) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}, metadata={op_name="a"}
  %c = f32[] constant(0)
  %b = f32[4,8]{1,0} broadcast(%c), dimensions={}, sharding={replicated}, metadata={op_name="jit(f)/r/max"}
  %m = f32[4,8]{1,0} maximum(%a, %b), sharding={devices=[2,4]<=[8]}, metadata={op_name="jit(f)/r/max"}
  ROOT %n = f32[4,8]{1,0} negate(%m), metadata={op_name="jit(f)/neg"}
}
"""
    instrs = parse_entry(text)
    assert [i.name for i in instrs] == ["a", "c", "b", "m", "n"]
    assert instrs[3].operands == ["a", "b"] and instrs[3].shape == (4, 8)
    assert instrs[1].shape == () and instrs[4].is_root
    res = scope_results(instrs)
    # %b stays inside scope r (its only user is %m, also in r).
    assert [i.name for i in res["r"]] == ["m"]
    # The root leaves, but it is in no named scope, so it names no row.
    assert set(res) == {"r"}
    # Collective device groups, d = 4*dp + tp.
    tp_groups = {frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})}
    dp_groups = {frozenset({d, d + 4}) for d in range(4)}
    for text, want in [
        ("{{0,1,2,3},{4,5,6,7}}", ["tp"]),
        ("[2,4]<=[8]", ["tp"]),
        ("[4,2]<=[2,4]T(1,0)", ["dp"]),
        ("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_2'}", ["tp"]),
        ("mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_0'}", ["dp"]),
        # Device ids 0,4,1,5,...: axis_0 (size 4) walks 0,1,2,3.
        ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], device_ids=([2,4]T(1,0)) "
         "{'axis_0'}", ["tp"]),
        ("{{0,1,2,3,4,5,6,7}}", ["dp", "tp"]),
        ("{{0,1},{2,3},{4,5},{6,7}}", None),
    ]:
        got = groups_to_axes(replica_groups(text), mesh)
        assert got == want, f"{text}: got {got}, want {want}"
    assert replica_groups("{{0,1,2,3},{4,5,6,7}}") == tp_groups
    assert replica_groups("[4,2]<=[2,4]T(1,0)") == dp_groups
    line = ("  %ar = f32[2,8]{1,0} all-reduce(%x), channel_id=5, "
            "replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_2'}, "
            "use_global_device_ids=true, to_apply=%r")
    assert _replica_groups_text(line) == \
        "mesh['axis_0'=2,'axis_1'=1,'axis_2'=4] {'axis_2'}"
    assert _replica_groups_text("replica_groups=[2,4]<=[8], use_global") == \
        "[2,4]<=[8]"
    assert split_tuple_sharding("{replicated}, {devices=[2,1,4]<=[8]}") == [
        "replicated", "devices=[2,1,4]<=[8]"]
    print("hlo_sharding self-test: ok")


if __name__ == "__main__":
    _self_test()
