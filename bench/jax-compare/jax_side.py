"""Compiles the three programs with JAX on 8 CPU devices and prints, as JSON,
the sharding XLA's propagation gives every row of every program.

    python3 jax_side.py --partitioner shardy|gspmd --dump DIR

Runs as its own process because XLA_FLAGS (device count, dump directory) must
be set before JAX starts. The shardings are read from the HLO module dumped
right after the propagation pass (`shardy-xla` for Shardy, which converts
Shardy's propagated `sdy.sharding`s back to HLO shardings at its end;
`sharding-propagation` for GSPMD), before the SPMD partitioner runs; the
collectives are read from the compiled (partitioned, optimized) module.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hlo_sharding  # noqa: E402
import jax_programs  # noqa: E402

PASS_OF = {"shardy": "shardy-xla", "gspmd": "sharding-propagation"}
COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute",
               "reduce-scatter")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitioner", choices=sorted(PASS_OF), required=True)
    ap.add_argument("--dump", required=True, help="empty directory for XLA dumps")
    opts = ap.parse_args()

    os.environ["XLA_FLAGS"] = " ".join([
        os.environ.get("XLA_FLAGS", ""),
        "--xla_force_host_platform_device_count=8",
        f"--xla_dump_to={opts.dump}",
        f"--xla_dump_hlo_pass_re={PASS_OF[opts.partitioner]}",
    ])
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    jax.config.update("jax_use_shardy_partitioner",
                      opts.partitioner == "shardy")
    names = tuple(a for a, _ in jax_programs.MESH_AXES)
    sizes = tuple(s for _, s in jax_programs.MESH_AXES)
    # Auto axes: XLA's propagation decides what the annotations leave open,
    # as Partita's does (JAX's default, Explicit, would decide in tracing).
    mesh = jax.make_mesh(sizes, names, axis_types=(AxisType.Auto,) * len(names),
                         devices=jax.devices()[:8])
    assert [d.id for d in mesh.devices.flat] == list(range(8)), \
        "mesh devices are not in row-major id order"
    dtypes = {"f32": jnp.float32, "i32": jnp.int32}

    result = {"jax": jax.__version__, "partitioner": opts.partitioner,
              "programs": {}}
    for prog in jax_programs.PROGRAMS:
        args = [jax.ShapeDtypeStruct(
                    a.shape, dtypes[a.dtype],
                    sharding=NamedSharding(mesh, PartitionSpec(*a.spec)))
                for a in prog.args]
        fn = prog.build()
        assert fn.__name__ == prog.name
        compiled = jax.jit(fn).lower(*args).compile()

        pattern = os.path.join(
            opts.dump, f"module_*.jit_{prog.name}.*after_{PASS_OF[opts.partitioner]}.*")
        files = sorted(glob.glob(pattern))
        if not files:
            sys.exit(f"no dump matches {pattern}")
        with open(files[-1]) as f:
            instrs = hlo_sharding.parse_entry(f.read())
        # jnp.einsum and friends open scopes of their own ("bsh,hnd->bsnd"):
        # an instruction counts for the longest row name its scope starts with.
        row_names = [r.name for r in prog.rows]

        def row_of(op_name):
            scope = hlo_sharding.scope_of(op_name)
            hits = [r for r in row_names
                    if scope == r or scope.startswith(r + "/")]
            return max(hits, key=len) if hits else ""

        leaving = hlo_sharding.scope_results(instrs, key=row_of)

        rows = {}
        root = next(i for i in instrs if i.is_root)
        if root.opcode == "tuple":
            outs = hlo_sharding.split_tuple_sharding(root.sharding or "")
        else:
            outs = [root.sharding]
        for row in prog.rows:
            if row.name.startswith("result:"):
                n = int(row.name.split(":")[1])
                text = outs[n] if n < len(outs) else None
                rows[row.name] = {
                    "instr": root.name, "opcode": root.opcode, "hlo": text,
                    "sharding": hlo_sharding.to_partita(
                        text or "replicated", len(row.shape),
                        jax_programs.MESH_AXES),
                    "ambiguous": False}
                continue
            cands = [i for i in leaving.get(row.name, []) if i.shape == row.shape]
            if not cands:
                rows[row.name] = {"error": "no instruction of this shape leaves the scope"}
                continue
            i = cands[-1]
            rows[row.name] = {
                "instr": i.name,
                "opcode": i.opcode,
                "hlo": i.sharding,
                # An instruction without a sharding after propagation is
                # replicated by the partitioner.
                "sharding": hlo_sharding.to_partita(
                    i.sharding or "replicated", len(row.shape),
                    jax_programs.MESH_AXES),
                "ambiguous": len(cands) > 1,
            }

        collectives = []
        for i in hlo_sharding.parse_entry(compiled.as_text()):
            if i.opcode.startswith(COLLECTIVES):
                axes = hlo_sharding.groups_to_axes(
                    hlo_sharding.replica_groups(i.replica_groups),
                    jax_programs.MESH_AXES)
                collectives.append({
                    "opcode": i.opcode, "type": i.type,
                    "axes": axes if axes is not None else i.replica_groups,
                    "op_name": i.op_name})
        result["programs"][prog.name] = {"rows": rows,
                                         "collectives": collectives,
                                         "dump": os.path.basename(files[-1])}
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
