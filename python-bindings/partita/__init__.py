"""Partita from Python: build or parse nn models, annotate them with
shardings, compile them to plans for a device mesh, explain, run and train
the plans on local ranks.

    import partita
    m = partita.model("gpt", layers=2, hidden=64, heads=4)
    plan = m.plan(partita.Mesh({"dp": 2}), strategy="dp")
    print(plan.explain().text)
    results = plan.run({"ids": ids, "labels": labels})

The compiler part (partita.compiler, which links LLVM/MLIR) is imported on
first use; `import partita.runtime` alone runs plans without loading LLVM.
"""

from ._error import Diagnostic, Error
from .sharding import Mesh, P, PartitionSpec, Partial, Replicate, Shard

# Names served by partita.compiler, imported on first access (PEP 562) so
# that `import partita` and `import partita.runtime` stay free of LLVM.
_COMPILER_NAMES = ("parse", "load", "model", "Model")
_RUNTIME_NAMES = ("Plan",)


def from_torch(module, example_args, output_names=()):
    """A PyTorch module as an nn model (partita/torch_frontend.py)."""
    from .torch_frontend import from_torch as convert
    return convert(module, example_args, output_names)


def from_jax(fn, *example_args, output_names=(), params_argnum=0):
    """A JAX function as an nn model (partita/jax_frontend.py)."""
    from .jax_frontend import from_jax as convert
    return convert(fn, *example_args, output_names=output_names,
                   params_argnum=params_argnum)


def __getattr__(name):
    if name in _COMPILER_NAMES:
        from . import compiler
        return getattr(compiler, name)
    if name in _RUNTIME_NAMES:
        from . import runtime
        return getattr(runtime, name)
    raise AttributeError(f"module 'partita' has no attribute {name!r}")


__all__ = ["Diagnostic", "Error", "Mesh", "P", "PartitionSpec", "Partial",
           "Replicate", "Shard", "parse", "load", "model", "Model", "Plan",
           "from_torch", "from_jax"]
