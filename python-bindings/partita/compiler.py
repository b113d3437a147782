"""Models and compiling them (the compiler part: links LLVM/MLIR).

IR crosses as text: `str(model)` is the module, `parse` reads one.
"""

import fnmatch
import os
from typing import (Any, Dict, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

from . import _compiler
from ._error import Error
from .runtime import Plan
from .sharding import Mesh, Spec, to_dims


class Argument(NamedTuple):
    """An argument of the model's function: its name (nn.param / nn.input),
    role ("param", "input", "state"), global shape, element type and
    sharding (the #dist.sharding text, or None)."""

    name: str
    role: str
    shape: Tuple[int, ...]
    dtype: str
    sharding: Optional[str]


_STAGES = ("differentiated", "annotated", "propagated", "partitioned")


class Candidate(NamedTuple):
    """One strategy on one mesh as Model.search priced it (per device and
    step; `partita plan --strategy auto`, docs/strategies.md). `rank` is 0
    when it does not fit the memory limit or did not compile (then
    `rejection` says why)."""

    strategy: str  # the preset, "+sp" with sequence parallelism
    preset: str
    sequence_parallel: bool
    mesh: Mesh
    microbatches: int  # a pipeline's; else > 1: accumulated to fit memory
    pipeline_stages: int  # 1: not pipelined ("pp" in `mesh` otherwise)
    schedule: str  # "1f1b", "zb-h1", "interleaved"; "" when not pipelined
    stages_by: str  # its cut: "layers" or "cost"; "" when not pipelined
    rank: int
    seconds: float
    compute_seconds: float
    comm_seconds: float
    hidden_seconds: float
    bubble_seconds: float
    flops: float
    wire_bytes: float
    calls: int
    collectives: int
    memory_bytes: int
    crosses_nodes: bool
    rejection: str


class SearchResult(NamedTuple):
    """Model.search's candidates, ranked (those that fit by estimated step
    time, then those over the memory limit, then those rejected), and the
    table `partita plan --strategy auto` prints."""

    candidates: List[Candidate]
    table: str
    # The cost model's options search was given, for plan_best to compile
    # an "ilp" winner with.
    cost: Dict[str, Any] = {}

    @property
    def best(self) -> Optional[Candidate]:
        """The cheapest candidate that fits, or None."""
        return next((c for c in self.candidates if c.rank == 1), None)


class Model:
    """An nn module (its own MLIR context). `str(m)` is its IR."""

    def __init__(self, impl: "_compiler.Model"):
        self._impl = impl
        self._state = {}
        self._aliases = {}  # tied weights: other name -> parameter name
        self._buffers = {}

    def state_dict(self):
        """The weights that came with the model (from_torch: the module's
        parameters as numpy arrays, by parameter name; from_jax: the
        parameter pytree's leaves by path), to pass as Plan.run(params=)."""
        return dict(self._state)

    def to_state_dict(self, params=None):
        """A framework-style state dict: `params` (the weights by parameter
        name, e.g. Plan.train's result["parameters"]; default the imported
        ones) under every name they had, so that a tied weight appears under
        each of its keys (GPT-2: transformer.wte.weight and lm_head.weight),
        plus the module's buffers. torch's load_state_dict takes it after
        torch.from_numpy."""
        params = dict(self._state if params is None else params)
        out = dict(params)
        for alias, target in self._aliases.items():
            if target in params:
                out[alias] = params[target]
        out.update(self._buffers)
        return out

    @property
    def aliases(self):
        """Tied weights: each other name of a parameter -> its name."""
        return dict(self._aliases)

    def __str__(self) -> str:
        return self._impl.text()

    def arguments(self) -> List[Argument]:
        return [Argument(n, r, tuple(s), d, sh)
                for n, r, s, d, sh in self._impl.arguments()]

    @property
    def parameters(self) -> List[Argument]:
        return [a for a in self.arguments() if a.role == "param"]

    @property
    def inputs(self) -> List[Argument]:
        return [a for a in self.arguments() if a.role == "input"]

    def sharding(self, name: str) -> Optional[str]:
        """The #dist.sharding of parameter or input `name` (text), or None."""
        for a in self.arguments():
            if a.name == name:
                return a.sharding
        raise Error(f"no parameter or input named '{name}'")

    def shard(self, pattern: str, spec: Spec, mesh: Mesh) -> "Model":
        """Annotates every parameter and input whose name matches the glob
        `pattern` with `spec` on `mesh` (JAX style P(...), or DTensor style
        [Shard(d), Replicate(), Partial()] per mesh axis). Returns the model.
        Raises Error naming tensor, dimension and axis for an unknown axis or
        a dimension the axes do not divide."""
        # A tied weight matches under any of its names.
        names = {a.name: {a.name} for a in self.arguments()}
        for alias, target in self._aliases.items():
            names.setdefault(target, set()).add(alias)
        matched = [a for a in self.arguments()
                   if a.role in ("param", "input")
                   and any(fnmatch.fnmatchcase(n, pattern)
                           for n in names[a.name])]
        if not matched:
            raise Error(f"no parameter or input matches '{pattern}'")
        for a in matched:
            dims, partial = to_dims(spec, mesh, a.name, a.shape)
            self._impl.shard(a.name, mesh.axes, dims, partial)
        return self

    def _compile(self, mesh, strategy, train, lr, weight_decay, stage, seed,
                 sequence_parallel, precision="fp32", microbatches=1, pp=0,
                 schedule="1f1b", stages_by="layers", cost=None):
        annotated = any(a.sharding for a in self.arguments())
        if strategy is None:
            if not annotated:
                raise Error("no strategy given and the model has no "
                            "annotations: pass strategy= (dp, megatron, "
                            "dp+megatron, fsdp, ...) or call shard() first")
            strategy = "none"
        if train is True:
            train = "adamw"
        elif train is False:
            train = None
        axes = mesh.axes if (mesh is not None and strategy != "none") else []
        given = {k: v for k, v in (cost or {}).items() if v is not None}
        if given and strategy != "ilp":
            raise Error(f"{', '.join(sorted(given))} only price "
                        f"strategy='ilp', not '{strategy}'")
        return self._impl.compile(strategy, axes, train, lr, weight_decay,
                                  stage, seed, sequence_parallel, precision,
                                  microbatches, pp, schedule, stages_by,
                                  **given)

    def plan(self, mesh: Optional[Mesh] = None, strategy: Optional[str] = None,
             train: Union[None, bool, str] = None, lr: Optional[float] = None,
             weight_decay: Optional[float] = None, seed: int = 0,
             sequence_parallel: bool = False,
             precision: str = "fp32", microbatches: int = 1, pp: int = 0,
             schedule: str = "1f1b", stages_by: str = "layers",
             device_tflops: Optional[float] = None,
             memory_gbytes: Optional[float] = None,
             link_gbytes: Optional[float] = None,
             call_us: Optional[float] = None,
             memory_per_device: Optional[int] = None,
             devices_per_node: Optional[int] = None,
             node_link_gbytes: Optional[float] = None,
             ilp_seconds: Optional[float] = None,
             ilp_solver: Optional[str] = None) -> Plan:
        """Compiles the model for `mesh` with a strategy preset (dp, megatron,
        dp+megatron, zero1..3, fsdp, ...; default: the model's own
        annotations), as a train step when `train` is set (True/"adamw",
        "sgd", or "none" for gradients only), in `precision` ("fp32",
        "bf16-mixed" or "fp16-mixed": `partita plan --precision`), with
        `microbatches` (gradient accumulation, `--microbatches`). With `pp`
        (a train step) the step is split into `pp` pipeline stages by
        `stages_by` ("layers" or balanced by "cost") along a new major-most
        axis "pp" (`mesh` is each stage's), run by `schedule` ("gpipe",
        "1f1b", "zb-h1" or "interleaved" with 2 stages a rank): `--pp`,
        `--stages-by`, `--schedule`. strategy="ilp" chooses every op's
        sharding on `mesh` by an integer program over the cost model that
        `device_tflops`, `memory_gbytes`, `link_gbytes`, `call_us`,
        `memory_per_device`
        (bytes of arguments a device holds), `devices_per_node` and
        `node_link_gbytes` set, as `search` takes them, solved by
        `ilp_solver` ("cbc", "greedy" or "one-axis") with CBC given
        `ilp_seconds` (`partita plan --strategy ilp`, docs/strategies.md).
        The GIL is released while it compiles."""
        cost = dict(device_tflops=device_tflops, memory_gbytes=memory_gbytes,
                    link_gbytes=link_gbytes,
                    call_us=call_us, memory_per_device=memory_per_device,
                    devices_per_node=devices_per_node,
                    node_link_gbytes=node_link_gbytes,
                    ilp_seconds=ilp_seconds, ilp_solver=ilp_solver)
        _, data = self._compile(mesh, strategy, train, lr, weight_decay,
                                "plan", seed, sequence_parallel, precision,
                                microbatches, pp, schedule, stages_by, cost)
        return Plan(data, f"<plan of {strategy or 'annotations'}>")

    def search(self, devices: int, train: Union[None, bool, str] = None,
               memory_per_device: Optional[int] = None,
               device_tflops: float = 100.0, memory_gbytes: float = 2000.0,
               link_gbytes: float = 100.0,
               call_us: float = 20.0, devices_per_node: Optional[int] = None,
               node_link_gbytes: float = 25.0,
               strategies: Optional[Sequence[str]] = None,
               schedules: Optional[Sequence[str]] = None,
               lr: Optional[float] = None, precision: str = "fp32",
               seed: int = 0) -> SearchResult:
        """`partita plan --strategy auto`: compiles every strategy preset on
        every mesh of `devices` devices (as a train step when `train` is
        set, also pipelined under each of `schedules`: default 1f1b, zb-h1
        and interleaved, [] for none) and prices each plan by the cost model
        (docs/strategies.md: every kernel's FLOPs at `device_tflops` and
        bytes at `memory_gbytes`, collectives over `link_gbytes`).
        `plan_best(result)` compiles the winner. The GIL is released while
        it compiles."""
        if train is True:
            train = "adamw"
        elif train is False:
            train = None
        table, rows = _compiler.search(
            self._impl, devices, train, lr, None, precision, seed,
            memory_per_device or 0, device_tflops, link_gbytes, call_us,
            devices_per_node or 0, node_link_gbytes, list(strategies or []),
            None if schedules is None else list(schedules),
            memory_gbytes=memory_gbytes)
        candidates = [
            Candidate(s, p, sp, Mesh(dict(axes)), *rest)
            for s, p, sp, axes, *rest in rows]
        cost = dict(device_tflops=device_tflops, memory_gbytes=memory_gbytes,
                    link_gbytes=link_gbytes,
                    call_us=call_us, devices_per_node=devices_per_node,
                    node_link_gbytes=node_link_gbytes)
        return SearchResult(candidates, table, cost)

    def plan_best(self, result: SearchResult,
                  train: Union[None, bool, str] = None,
                  lr: Optional[float] = None, seed: int = 0,
                  precision: str = "fp32") -> Plan:
        """The plan of `result.best` (give the same train, lr, seed and
        precision as to search). Raises Error when nothing fits."""
        best = result.best
        if best is None:
            raise Error("no candidate of the search fits: "
                        + (result.candidates[0].rejection
                           or "each is over the memory limit"))
        # A pipelined candidate's mesh starts with "pp"; each stage's is
        # the rest (none for the pure pipeline).
        stage_axes = {name: size for name, size in best.mesh.axes
                      if best.pipeline_stages == 1 or name != "pp"}
        return self.plan(Mesh(stage_axes) if stage_axes else None,
                         strategy=best.preset, train=train, lr=lr,
                         seed=seed, sequence_parallel=best.sequence_parallel,
                         precision=precision, microbatches=best.microbatches,
                         pp=best.pipeline_stages if best.pipeline_stages > 1
                         else 0,
                         schedule=best.schedule or "1f1b",
                         stages_by=best.stages_by or "layers",
                         **(result.cost if best.preset == "ilp" else {}))

    def compile(self, mesh: Optional[Mesh] = None,
                strategy: Optional[str] = None, stage: str = "propagated",
                train: Union[None, bool, str] = None,
                lr: Optional[float] = None, seed: int = 0,
                sequence_parallel: bool = False) -> "Model":
        """The module after compile stage `stage` (differentiated, annotated,
        propagated or partitioned), as a new Model."""
        if stage not in _STAGES:
            raise Error(f"unknown stage '{stage}': expected "
                        f"{', '.join(_STAGES)}")
        impl, _ = self._compile(mesh, strategy, train, lr, None, stage, seed,
                                sequence_parallel)
        return Model(impl)


def parse(text: str, source: str = "<string>") -> Model:
    """Parses nn IR text (a module, or top-level ops)."""
    return Model(_compiler.parse(text, source))


def load(path: Union[str, os.PathLike]) -> Model:
    """Reads an .mlir file."""
    with open(path, "r", encoding="utf-8") as f:
        return parse(f.read(), os.fspath(path))


def model(kind: str, layers: Optional[int] = None, hidden: Optional[int] = None,
          heads: Optional[int] = None, kv_heads: Optional[int] = None,
          seq: Optional[int] = None, vocab: Optional[int] = None,
          batch: Optional[int] = None, ffn: Optional[int] = None,
          dtype: str = "f32", tied: bool = False) -> Model:
    """One of `partita model`'s built-in models ("mlp", "gpt", "llama");
    sizes not given take that command's defaults."""
    return Model(_compiler.build_model(kind, layers, hidden, heads, kv_heads,
                                       seq, vocab, batch, ffn, dtype, tied))
