"""Meshes and sharding specs, in the two spellings users bring along.

- JAX style, one entry per tensor dimension: ``P("dp", None)``; an entry is a
  mesh axis, a tuple of axes (major to minor), or None (not split).
- DTensor style, one placement per mesh axis, in the mesh's axis order:
  ``[Shard(0), Replicate()]``; ``Partial()`` marks the value as an unreduced
  partial sum over that axis (JAX style: ``P(None, "tp", partial="dp")``).

Both become the same per-dimension form (`to_dims`), and so the same
``#dist.sharding`` in the IR. Pure Python: importing it loads nothing else.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

from ._error import Error


class Mesh:
    """A logical device mesh: named axes with sizes, major axis first, e.g.
    ``Mesh({"dp": 2, "tp": 2})`` (4 devices)."""

    def __init__(self, axes: Dict[str, int]):
        if not isinstance(axes, dict) or not axes:
            raise Error("Mesh takes a dict of axis name -> size, e.g. "
                        "Mesh({'dp': 2, 'tp': 2})")
        for name, size in axes.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise Error(f"mesh axis name {name!r} is not an identifier")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise Error(f"mesh axis {name!r} has size {size!r}: expected "
                            "a whole number >= 1")
        self.axes: List[Tuple[str, int]] = list(axes.items())

    @property
    def axis_names(self) -> List[str]:
        return [name for name, _ in self.axes]

    @property
    def size(self) -> int:
        n = 1
        for _, size in self.axes:
            n *= size
        return n

    def __eq__(self, other) -> bool:
        return isinstance(other, Mesh) and self.axes == other.axes

    def __repr__(self) -> str:
        return "Mesh({" + ", ".join(f"{n!r}: {s}" for n, s in self.axes) + "})"


class P:
    """A JAX-style PartitionSpec: per tensor dimension, the mesh axes that
    split it. ``partial`` names axes over which the value is a partial sum."""

    def __init__(self, *dims: Union[None, str, Tuple[str, ...]],
                 partial: Union[None, str, Sequence[str]] = None):
        self.dims = dims
        if partial is None:
            self.partial: Tuple[str, ...] = ()
        elif isinstance(partial, str):
            self.partial = (partial,)
        else:
            self.partial = tuple(partial)

    def __repr__(self) -> str:
        inner = ", ".join(repr(d) for d in self.dims)
        if self.partial:
            inner += f", partial={self.partial!r}"
        return f"P({inner})"


PartitionSpec = P


class Shard:
    """DTensor placement: this mesh axis splits tensor dimension `dim`."""

    def __init__(self, dim: int):
        self.dim = dim

    def __repr__(self) -> str:
        return f"Shard({self.dim})"


class Replicate:
    """DTensor placement: every device along this mesh axis holds the whole
    tensor."""

    def __repr__(self) -> str:
        return "Replicate()"


class Partial:
    """DTensor placement: the value is an unreduced partial sum over this mesh
    axis (only "sum" is supported for annotations)."""

    def __init__(self, reduce_op: str = "sum"):
        self.reduce_op = reduce_op

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op!r})"


Spec = Union[P, Sequence[Union[Shard, Replicate, Partial]]]


def to_dims(spec: Spec, mesh: Mesh, tensor: str,
            shape: Sequence[int]) -> Tuple[List[List[str]], List[str]]:
    """Per tensor dimension the axes that split it (major to minor), and the
    partial axes, from either spelling. Raises Error naming the tensor, the
    dimension and the axis at fault. (Unknown axes and uneven splits are
    checked again, against the IR's types, by the compiler.)"""
    rank = len(shape)
    if isinstance(spec, P):
        if len(spec.dims) != rank:
            raise Error(f"tensor '{tensor}' has {rank} dimension"
                        f"{'' if rank == 1 else 's'}, the spec {spec!r} "
                        f"gives {len(spec.dims)}")
        dims: List[List[str]] = []
        for d, entry in enumerate(spec.dims):
            if entry is None:
                dims.append([])
            elif isinstance(entry, str):
                dims.append([entry])
            elif isinstance(entry, tuple) and all(isinstance(a, str)
                                                  for a in entry):
                dims.append(list(entry))
            else:
                raise Error(f"tensor '{tensor}' dimension {d}: {entry!r} is "
                            "not a mesh axis, a tuple of axes or None")
        return dims, list(spec.partial)

    placements = list(spec)
    if len(placements) != len(mesh.axes):
        raise Error(f"tensor '{tensor}': {len(placements)} placement"
                    f"{'' if len(placements) == 1 else 's'} for a mesh of "
                    f"{len(mesh.axes)} axes {mesh!r} (DTensor style gives one "
                    "per mesh axis)")
    dims = [[] for _ in range(rank)]
    partial: List[str] = []
    for (axis, _), placement in zip(mesh.axes, placements):
        if isinstance(placement, Shard):
            d = placement.dim + rank if placement.dim < 0 else placement.dim
            if not 0 <= d < rank:
                raise Error(f"tensor '{tensor}' has no dimension "
                            f"{placement.dim} (rank {rank}) for mesh axis "
                            f"'{axis}'")
            dims[d].append(axis)
        elif isinstance(placement, Partial):
            if placement.reduce_op != "sum":
                raise Error(f"tensor '{tensor}' mesh axis '{axis}': "
                            f"Partial({placement.reduce_op!r}) is not "
                            "supported for annotations (only sum)")
            partial.append(axis)
        elif not isinstance(placement, Replicate):
            raise Error(f"tensor '{tensor}' mesh axis '{axis}': {placement!r}"
                        " is not Shard, Replicate or Partial")
    return dims, partial
