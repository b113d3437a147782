"""Running and training plans (the runtime library; no LLVM is loaded).

Arrays are numpy arrays or CPU torch tensors (through DLPack): an array whose
dtype and layout already match the plan is read in place, with no staging
copy; others are converted first. Results come back as numpy arrays.
"""

import os
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _runtime
from ._error import Error

_NUMPY_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
                 "i32": np.int32, "i64": np.int64}
_TORCH_DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16",
                 "bf16": "bfloat16", "i32": "int32", "i64": "int64"}


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "__dlpack__")


def _as_array(x, dtype: str, what: str):
    """`x` as something the runtime reads in place: itself when it already
    has dtype `dtype` and is contiguous on the CPU, else a converted copy."""
    if _is_torch(x):
        import torch
        want = getattr(torch, _TORCH_DTYPES[dtype])
        if x.device.type != "cpu":
            raise Error(f"{what} is on {x.device}: the runtime reads CPU "
                        "tensors only")
        x = x.detach()  # DLPack refuses tensors that require gradients
        if x.dtype != want:
            x = x.to(want)
        return x.contiguous()
    if dtype not in _NUMPY_DTYPES:
        raise Error(f"{what}: numpy has no {dtype} type; pass a torch tensor")
    return np.ascontiguousarray(x, dtype=_NUMPY_DTYPES[dtype])


class Explanation:
    """`partita explain`'s report: `text`, and the memory totals per device
    in bytes as a dict (`memory`: parameters, inputs, activations, outputs,
    constants, state, arena_peak, host_arena, buckets, scratch, total; for a
    train step also model_state: parameters, gradients, optimizer,
    step_counter, total)."""

    def __init__(self, text: str, memory: Dict[str, Any]):
        self.text = text
        self.memory = memory

    def __str__(self) -> str:
        return self.text


class Plan:
    """A compiled plan: what the compiler hands the runtime. Holds the
    serialized plan (`to_bytes`, `save`) and its loaded, validated form."""

    def __init__(self, data: bytes, source: str = "<plan>"):
        self._data = bytes(data)
        self._source = source
        self._impl = _runtime.LoadedPlan(self._data, source)

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Plan":
        with open(path, "rb") as f:
            return cls(f.read(), os.fspath(path))

    def save(self, path: Union[str, os.PathLike]) -> None:
        with open(path, "wb") as f:
            f.write(self._data)

    def to_bytes(self) -> bytes:
        return self._data

    @property
    def num_devices(self) -> int:
        return self._impl.num_devices

    @property
    def programs(self) -> List[str]:
        """The step program first, then "reference" (the unpartitioned
        model, run on one rank)."""
        return list(self._impl.programs)

    @property
    def program(self) -> str:
        return self.programs[0]

    def inputs(self, program: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._impl.inputs(program or self.program)

    def results(self, program: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._impl.results(program or self.program)

    def parameters(self, program: Optional[str] = None) -> List[Dict[str, Any]]:
        return [v for v in self._impl.persistent(program or self.program)
                if v["parameter"]]

    def explain(self) -> Explanation:
        """The report of `partita explain` (needs the compiler part)."""
        from . import _compiler
        text, memory = _compiler.explain(self._data, self._source)
        return Explanation(text, memory)

    def _input_list(self, inputs, program: str) -> list:
        spec = self._impl.inputs(program)
        if isinstance(inputs, dict):
            unknown = set(inputs) - {v["name"] for v in spec}
            if unknown:
                raise Error(f"program '{program}' has no input "
                            f"{sorted(unknown)[0]!r}; its inputs are "
                            f"{[v['name'] for v in spec]}")
            missing = [v["name"] for v in spec if v["name"] not in inputs]
            if missing:
                raise Error(f"program '{program}' needs input '{missing[0]}'")
            inputs = [inputs[v["name"]] for v in spec]
        inputs = list(inputs)
        if len(inputs) != len(spec):
            raise Error(f"program '{program}' takes {len(spec)} inputs "
                        f"{[v['name'] for v in spec]}, got {len(inputs)}")
        return [_as_array(x, v["dtype"], f"input '{v['name']}'")
                for x, v in zip(inputs, spec)]

    def _param_list(self, params, program: str) -> list:
        if not params:
            return []
        spec = {v["name"]: v for v in self._impl.persistent(program)}
        out = []
        for name, value in params.items():
            if name not in spec:
                raise Error(f"program '{program}' has no parameter '{name}'")
            out.append((name, _as_array(value, spec[name]["dtype"],
                                        f"parameter '{name}'")))
        return out

    def run(self, inputs: Union[Dict[str, Any], Sequence[Any]],
            params: Optional[Dict[str, Any]] = None,
            ranks: Optional[int] = None,
            program: Optional[str] = None,
            timeout_ms: Optional[int] = None) -> Dict[str, np.ndarray]:
        """Runs the plan once on `inputs` (by name, or in the program's input
        order) as global arrays, on `ranks` local ranks (threads; default the
        mesh's devices), with `params` (global arrays by name) replacing the
        plan's initial values. Returns every result by name, as global numpy
        arrays. program="reference" runs the unpartitioned model on one rank.
        `timeout_ms` (default 60000, at least 100): how long a rank waits in
        a collective for the others before the run fails, naming it."""
        program = program or self.program
        if program not in self.programs:
            raise Error(f"the plan has no program '{program}' "
                        f"(it has {self.programs})")
        arrays = self._input_list(inputs, program)
        param_list = self._param_list(params, program)
        if not self._impl.is_partitioned(program):
            ranks = None if ranks in (None, self.num_devices) else ranks
        values = _runtime.run(self._impl, program, arrays, param_list,
                              ranks if self._impl.is_partitioned(program) else None,
                              timeout_ms)
        names = [v["name"] or f"result{i}"
                 for i, v in enumerate(self._impl.results(program))]
        return dict(zip(names, values))

    def train(self, batches: Iterable[Union[Dict[str, Any], Sequence[Any]]],
              steps: Optional[int] = None,
              params: Optional[Dict[str, Any]] = None,
              ranks: Optional[int] = None,
              callback: Optional[Callable[[Dict[str, Any]], None]] = None,
              timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """Trains a train-step plan (Model.plan(train=...)) for `steps` steps,
        step i on batches[i] (inputs by name or in order; default: as many
        steps as batches). `callback(metrics)` runs after each step with
        {"step", "loss", "seconds"}. Returns {"losses", "seconds",
        "parameters"} (the trained parameters as global numpy arrays).
        `timeout_ms` as in run(): large models on a loaded machine need more
        than the default minute between two ranks' arrivals."""
        program = self.program
        batch_list = list(batches) if steps is None else []
        if steps is None:
            steps = len(batch_list)
        else:
            it = iter(batches)
            for _ in range(steps):
                try:
                    batch_list.append(next(it))
                except StopIteration:
                    raise Error(f"train: {steps} steps need {steps} batches, "
                                f"got {len(batch_list)}") from None
        arrays = [self._input_list(b, program) for b in batch_list]
        return _runtime.train(self._impl, program, arrays, steps,
                              self._param_list(params, program),
                              ranks if self._impl.is_partitioned(program) else None,
                              callback, timeout_ms)

    def __repr__(self) -> str:
        return (f"<partita.Plan {self._source}: program '{self.program}' on "
                f"{self.num_devices} device{'s' if self.num_devices != 1 else ''}>")


def _last_input_addresses() -> List[int]:
    """The addresses the last run read its inputs from (tests check that an
    array is read in place)."""
    return _runtime._last_input_addresses()
