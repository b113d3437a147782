"""partita.from_torch: a PyTorch module as an nn model.

The module is traced to an ATen FX graph by make_fx over a functional call
(torch.export does not exist in Debian's torch 1.13, and symbolic_trace
alone fails on ordinary model code); each ATen node becomes nn ops, written
as IR text and parsed by the compiler. Parameters are function arguments
named by their state_dict keys (`nn.param`), the example arguments are
inputs (`nn.input`, named after forward()'s parameters), the outputs
`nn.output` ("output0", ...). The weights come along (`state_dict()`), to
pass as `params=` to Plan.run.

An ATen op without a mapping fails at import, naming the op and the line of
the model's source that called it (found by running the module once more
under a dispatch mode that stops at that op).

Buffers (a causal mask) are constants of the model: ops computed from
buffers and constants alone (positions from arange, the mask's comparison)
are evaluated at import, and a masked_fill by such a mask with -inf becomes
the addition of a constant (0 where kept, -inf where masked). int64 index
tensors become i32, Partita's index type.

Mapped so far (an MLP's and a GPT-2 block's ops): mm, addmm, bmm, t,
transpose, permute, view/reshape, expand, whole-range slice, add/sub/mul/div
(broadcast, Python scalars), relu, gelu (exact and tanh), tanh, exp, neg,
embedding, native_layer_norm, _softmax, masked_fill (constant mask), and
cross-entropy (_log_softmax followed by nll_loss_forward, mean, no weights);
detach and clone pass through. Outputs are named by `output_names` (a
model to train names its scalar loss "loss").
"""

import inspect
import os
import traceback
from typing import Any, Dict, List, Sequence, Tuple

from ._error import Error

# Index tensors are i32 in Partita (the runtime's embedding and cross-entropy
# kernels read i32): int64 tensors become i32 (Plan.run converts the values).
_DTYPES = {"float32": "f32", "float64": "f64", "float16": "f16",
           "bfloat16": "bf16", "int32": "i32", "int64": "i32"}


def _type(shape: Sequence[int], dtype) -> str:
    name = _DTYPES.get(str(dtype).replace("torch.", ""))
    if name is None:
        raise Error(f"from_torch: unsupported dtype {dtype}")
    dims = "x".join(str(int(d)) for d in shape)
    return f"tensor<{dims}x{name}>" if dims else f"tensor<{name}>"


def _source_line(module, example_args, op) -> str:
    """Where the model's code calls ATen op `op`: "file:line: code"."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(__file__)

    class Found(Exception):
        pass

    class Stop(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func == op:
                for frame in reversed(traceback.extract_stack()):
                    if not (frame.filename.startswith(torch_dir)
                            or frame.filename.startswith(here)):
                        raise Found(f"{frame.filename}:{frame.lineno}: "
                                    f"{(frame.line or '').strip()}")
                raise Found("")
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Stop():
            module(*example_args)
    except Found as found:
        return str(found)
    except Exception:  # the module fails eagerly too: no line to give
        return ""
    return ""


class _Writer:
    """Writes the nn function, one ATen node at a time."""

    def __init__(self):
        self.lines: List[str] = []
        self.values: Dict[Any, Tuple[str, Tuple[int, ...], Any]] = {}
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"%{hint}{self.count}"

    def emit(self, hint, text, shape, dtype):
        name = self.fresh(hint)
        self.lines.append(f"    {name} = {text}")
        return (name, tuple(shape), dtype)

    def constant(self, tensor):
        """An nn.constant holding the values of `tensor` (a torch tensor or
        a numpy array)."""
        import numpy as np
        array = (tensor.detach().cpu().numpy() if hasattr(tensor, "detach")
                 else np.asarray(tensor))
        shape = tuple(array.shape)
        if np.issubdtype(array.dtype, np.floating):
            flat = [("0xFF800000" if x == float("-inf") else
                     "0x7F800000" if x == float("inf") else f"{float(x):.17e}")
                    for x in array.reshape(-1).tolist()]
        else:
            flat = [str(int(x)) for x in array.reshape(-1).tolist()]
        if len(set(flat)) == 1:
            body = flat[0]
        else:
            def nest(items, dims):
                if not dims:
                    return items[0]
                step = len(items) // dims[0]
                return "[" + ", ".join(nest(items[i * step:(i + 1) * step],
                                            dims[1:])
                                       for i in range(dims[0])) + "]"
            body = nest(flat, list(shape))
        return self.emit("const", f"nn.constant dense<{body}> : "
                         f"{_type(shape, array.dtype)}", shape, array.dtype)

    def slice(self, value, dim, start, stop):
        """value[..., start:stop, ...] along `dim` (step 1), from ops that
        have sharding rules and gradients: nn has no slice op. A chunk
        aligned to its own size (a fused qkv projection's thirds) is a
        reshape exposing the chunks plus an einsum with a one-hot vector
        over them; another range an einsum with a 0/1 selection matrix.
        Both are exact (one product by 1, the others by 0)."""
        import numpy as np
        name, shape, dtype = value
        n, k = shape[dim], stop - start
        if start == 0 and k == n:
            return value
        if not np.issubdtype(np.dtype(str(dtype).replace("torch.", "")),
                             np.floating):
            raise Error(f"from_torch/from_jax: slicing a {dtype} tensor is "
                        "not supported")
        np_dtype = np.dtype(str(dtype).replace("torch.", ""))
        out_shape = shape[:dim] + (k,) + shape[dim + 1:]
        letters = list(_LETTERS[:len(shape)])
        if n % k == 0 and start % k == 0:
            parts = n // k
            split = shape[:dim] + (parts, k) + shape[dim + 1:]
            r = self.emit("chunks", f"nn.reshape {name} : {_type(shape, dtype)}"
                          f" -> {_type(split, dtype)}", split, dtype)
            onehot = np.zeros(parts, np_dtype)
            onehot[start // k] = 1
            c = self.constant(onehot)
            chunk = "z"
            spec_in = "".join(letters[:dim] + [chunk] + letters[dim:])
            spec = f"{spec_in},{chunk}->{''.join(letters)}"
            operand = r
        else:
            select = np.zeros((n, k), np_dtype)
            select[np.arange(start, stop), np.arange(k)] = 1
            c = self.constant(select)
            spec_in = "".join(letters[:dim] + ["z"] + letters[dim + 1:])
            spec = f"{spec_in},z{letters[dim]}->{''.join(letters)}"
            operand = value
        return self.emit("slice", f'nn.einsum "{spec}" {operand[0]}, {c[0]} : '
                         f"({_type(operand[1], dtype)}, {_type(c[1], dtype)}) "
                         f"-> {_type(out_shape, dtype)}", out_shape, dtype)

    def broadcast(self, value, shape):
        name, vshape, dtype = value
        shape = tuple(shape)
        if vshape == shape:
            return value
        # Numpy-style: trailing dimensions align; size-1 dimensions expand.
        offset = len(shape) - len(vshape)
        if any(v not in (1, shape[offset + i]) for i, v in enumerate(vshape)):
            raise Error(f"from_torch: cannot broadcast {vshape} to {shape}")
        if 1 in vshape:
            kept = [i for i, v in enumerate(vshape) if v != 1]
            squeezed = tuple(vshape[i] for i in kept)
            value = self.emit("reshape", f"nn.reshape {name} : "
                              f"{_type(vshape, dtype)} -> "
                              f"{_type(squeezed, dtype)}", squeezed, dtype)
            name = value[0]
            dims = [offset + i for i in kept]
            vshape = squeezed
        else:
            dims = [offset + i for i in range(len(vshape))]
        return self.emit("broadcast", f"nn.broadcast {name} dims = {dims} : "
                         f"{_type(vshape, dtype)} -> {_type(shape, dtype)}",
                         shape, dtype)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _node(w: _Writer, node, fail, consts):
    """The nn value of ATen node `node`; calls fail(node) when it has no
    mapping. `consts` holds the values of nodes computed at import (from
    buffers and constants: a causal mask, positions)."""
    import operator

    import torch
    aten = torch.ops.aten
    target = node.target
    meta = node.meta.get("val", node.meta.get("tensor_meta"))
    # One tensor result: its shape and dtype (a tensor, or TensorMetadata).
    single = hasattr(meta, "shape") and hasattr(meta, "dtype")
    shape = tuple(meta.shape) if single else None
    dtype = meta.dtype if single else None
    args = node.args

    def v(a):
        if a in consts:
            if a not in w.values:
                w.values[a] = w.constant(consts[a])
            return w.values[a]
        value = w.values.get(a)
        if (value is None or isinstance(value, list) or
                isinstance(value, tuple) and (value[0] is None or
                                              value[0] == "logsoftmax")):
            fail(node)
        return value

    if target == operator.getitem:
        parts = w.values.get(args[0])
        # native_layer_norm's mean and rstd have no nn value; only a use of
        # them fails.
        if isinstance(parts, list) and args[1] < len(parts):
            return parts[args[1]] if parts[args[1]] is not None else (None,)
        fail(node)
    if target == aten.native_layer_norm.default:
        x = v(args[0])
        if args[2] is None or args[3] is None or len(args[1]) != 1:
            fail(node)
        g, b = v(args[2]), v(args[3])
        out = w.emit("ln", f"nn.layer_norm {x[0]}, {g[0]}, {b[0]} eps = "
                     f"{float(args[4]):.17e} : {_type(x[1], x[2])}, "
                     f"{_type(g[1], g[2])}", x[1], x[2])
        return [out, None, None]
    if target == aten.embedding.default:
        table, ids = v(args[0]), v(args[1])
        return w.emit("embed", f"nn.embedding {table[0]}[{ids[0]}] : "
                      f"{_type(table[1], table[2])}, {_type(ids[1], ids[2])} "
                      f"-> {_type(shape, dtype)}", shape, dtype)
    if target == aten.masked_fill.Scalar and args[1] in consts:
        # A fill under a mask known at import (a causal mask buffer): an
        # added constant, 0 where kept and the fill value (-inf) where
        # masked, which leaves kept values exact.
        if float(args[2]) != float("-inf"):
            fail(node)
        x = v(args[0])
        mask = consts[args[1]]
        addend = torch.zeros(mask.shape, dtype=x[2]).masked_fill(mask, args[2])
        c = w.broadcast(w.constant(addend), x[1])
        return w.emit("masked", f"nn.add {x[0]}, {c[0]} : {_type(x[1], x[2])}",
                      x[1], x[2])
    if target == aten._log_softmax.default:
        # Only as cross-entropy's first half (below): kept as a marker.
        x = v(args[0])
        if args[2] or args[1] % len(x[1]) != len(x[1]) - 1:
            fail(node)
        return ("logsoftmax", x)
    if target == aten.nll_loss_forward.default:
        # nll_loss(log_softmax(x), labels), mean over tokens, no weights:
        # softmax cross-entropy. (ignore_index is not modeled: no label may
        # be -100.)
        lsm = w.values.get(args[0])
        if (not (isinstance(lsm, tuple) and lsm[0] == "logsoftmax")
                or args[2] is not None or args[3] != 1):
            fail(node)
        x, labels = lsm[1], v(args[1])
        loss = w.emit("loss", f"nn.cross_entropy {x[0]}, {labels[0]} : "
                      f"{_type(x[1], x[2])}, {_type(labels[1], labels[2])} -> "
                      f"{_type((), x[2])}", (), x[2])
        return [loss, None]
    if target == aten._softmax.default:
        x = v(args[0])
        if args[2]:
            fail(node)
        return w.emit("softmax", f"nn.softmax {x[0]} dim = {args[1] % len(x[1])}"
                      f" : {_type(x[1], x[2])}", x[1], x[2])
    if target == aten.expand.default:
        return w.broadcast(v(args[0]), shape)
    if target == aten.slice.Tensor:
        x = v(args[0])
        if x[1] == shape:
            return x
        dim = (args[1] if len(args) > 1 else 0) % len(x[1])
        start = args[2] if len(args) > 2 and args[2] is not None else 0
        step = args[4] if len(args) > 4 else 1
        if step != 1 or not isinstance(start, int):
            fail(node)
        start = max(0, start + x[1][dim] if start < 0 else start)
        return w.slice(x, dim, start, start + shape[dim])
    if target in (aten.split.Tensor, aten.split_with_sizes.default):
        # A fused projection split in parts (GPT-2's c_attn): slices.
        x = v(args[0])
        dim = (args[2] if len(args) > 2 else 0) % len(x[1])
        n = x[1][dim]
        sizes = (list(args[1]) if target == aten.split_with_sizes.default
                 else [min(args[1], n - i) for i in range(0, n, args[1])])
        parts, start = [], 0
        for size in sizes:
            parts.append(w.slice(x, dim, start, start + size))
            start += size
        return parts
    if target == aten.bmm.default:
        a, b = v(args[0]), v(args[1])
        return w.emit("bmm", f'nn.einsum "bij,bjk->bik" {a[0]}, {b[0]} : '
                      f"({_type(a[1], a[2])}, {_type(b[1], b[2])}) -> "
                      f"{_type(shape, dtype)}", shape, dtype)

    unary = {aten.relu.default: "nn.relu", aten.tanh.default: "nn.tanh",
             aten.exp.default: "nn.exp", aten.neg.default: "nn.neg"}
    binary = {aten.add.Tensor: "nn.add", aten.sub.Tensor: "nn.sub",
              aten.mul.Tensor: "nn.mul", aten.div.Tensor: "nn.div"}
    if target in (aten.detach.default, aten.clone.default, aten.alias.default):
        return v(args[0])
    if target in unary:
        x = v(args[0])
        return w.emit("act", f"{unary[target]} {x[0]} : {_type(x[1], x[2])}",
                      x[1], x[2])
    if target == aten.gelu.default:
        x = v(args[0])
        approx = node.kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        tanh = " tanh" if approx == "tanh" else ""
        return w.emit("gelu", f"nn.gelu {x[0]}{tanh} : {_type(x[1], x[2])}",
                      x[1], x[2])
    if target in binary:
        if len(args) > 2 or node.kwargs.get("alpha", 1) != 1:
            fail(node)

        def operand(x):
            if isinstance(x, torch.fx.Node):
                return w.broadcast(v(x), shape)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                # A Python scalar: a splat constant of the result's type.
                return w.emit("scalar", f"nn.constant dense<{float(x):.17e}> : "
                              f"{_type(shape, dtype)}", shape, dtype)
            fail(node)

        a, b = (operand(x) for x in args[:2])
        return w.emit("bin", f"{binary[target]} {a[0]}, {b[0]} : "
                      f"{_type(shape, dtype)}", shape, dtype)
    if target in (aten.t.default, aten.transpose.int, aten.permute.default):
        x = v(args[0])
        rank = len(x[1])
        if target == aten.t.default:
            perm = list(range(rank))[::-1]
        elif target == aten.transpose.int:
            perm = list(range(rank))
            i, j = (d % rank for d in args[1:3])
            perm[i], perm[j] = perm[j], perm[i]
        else:
            perm = [d % rank for d in args[1]]
        if perm == list(range(rank)):
            return x
        return w.emit("transpose", f"nn.transpose {x[0]} perm = {perm} : "
                      f"{_type(x[1], x[2])} -> {_type(shape, dtype)}",
                      shape, dtype)
    if target in (aten.view.default, aten._unsafe_view.default,
                  aten.reshape.default, aten._reshape_alias.default):
        x = v(args[0])
        if x[1] == shape:
            return x
        return w.emit("reshape", f"nn.reshape {x[0]} : {_type(x[1], x[2])} -> "
                      f"{_type(shape, dtype)}", shape, dtype)
    if target in (aten.mm.default, aten.addmm.default):
        a, b = (v(x) for x in (args[:2] if target == aten.mm.default
                               else args[1:3]))
        mm = w.emit("mm", f'nn.einsum "ij,jk->ik" {a[0]}, {b[0]} : '
                    f"({_type(a[1], a[2])}, {_type(b[1], b[2])}) -> "
                    f"{_type(shape, dtype)}", shape, dtype)
        if target == aten.mm.default:
            return mm
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            fail(node)
        bias = w.broadcast(v(args[0]), shape)
        return w.emit("addmm", f"nn.add {mm[0]}, {bias[0]} : "
                      f"{_type(shape, dtype)}", shape, dtype)
    fail(node)


def from_torch(module, example_args: Sequence[Any],
               output_names: Sequence[str] = ()):
    """The nn model of `module` called on `example_args` (a tuple of tensors).
    Returns a partita Model whose `state_dict()` holds the module's weights
    under their state_dict keys. Outputs are named `output_names` (then
    output<i>); a model to train names its scalar loss "loss"."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.nn.utils import stateless

    from .compiler import parse

    example_args = tuple(example_args)
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    state = {**params, **buffers}
    names = list(state)
    # Parameters are function arguments; buffers (masks, positions) are
    # constants of the model, folded at import.
    num_params = len(params)
    # A tied weight (GPT-2's lm_head.weight is transformer.wte.weight) is
    # one parameter, named by its first state_dict key; its other keys are
    # aliases that the functional call binds to the same value.
    first = {id(p): n for n, p in params.items()}
    aliases = {k: first[id(t)] for k, t in
               module.state_dict(keep_vars=True).items()
               if id(t) in first and first[id(t)] != k}

    def functional(state_values, *args):
        values = dict(zip(names, state_values))
        for alias, target in aliases.items():
            values[alias] = values[target]
        return stateless.functional_call(module, values, args)

    with torch.no_grad():
        # Fake tensors: the trace records shapes without computing the model
        # (a real-mode trace of GPT-2 small runs its forward: 8 s here).
        graph = make_fx(functional, tracing_mode="fake")(
            [state[n] for n in names], *example_args)

    try:
        arg_names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        arg_names = []
    arg_names = [a for a in arg_names if a not in ("self", "args", "kwargs")]
    input_names = [arg_names[i] if i < len(arg_names) else f"input{i}"
                   for i in range(len(example_args))]

    w = _Writer()
    signature = []
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names) + len(example_args):
        raise Error("from_torch: the traced graph has "
                    f"{len(placeholders)} inputs, expected "
                    f"{len(names) + len(example_args)}")
    consts = {}
    for i, node in enumerate(placeholders):
        if num_params <= i < len(names):
            consts[node] = state[names[i]].detach()
            continue
        if i < len(names):
            tensor, label, role = state[names[i]], names[i], "nn.param"
        else:
            j = i - len(names)
            tensor, label, role = example_args[j], input_names[j], "nn.input"
        if not isinstance(tensor, torch.Tensor):
            raise Error(f"from_torch: argument '{label}' is not a tensor")
        name = f"%arg{i}"
        w.values[node] = (name, tuple(tensor.shape), tensor.dtype)
        signature.append(f'{name}: {_type(tensor.shape, tensor.dtype)} '
                         f'{{{role} = "{label}"}}')

    def fail(node):
        op = node.target
        line = _source_line(module, example_args, op)
        raise Error(f"from_torch: unsupported ATen op {op}"
                    + (f" at {line}" if line else ""))

    def foldable(node):
        inputs = [a for a in node.all_input_nodes]
        return (all(a in consts for a in inputs)
                and node.target not in (torch.ops.aten.native_layer_norm.default,)
                and (inputs or not node.args or
                     node.target == torch.ops.aten.arange.start))

    def resolve(a):
        if isinstance(a, torch.fx.Node):
            return consts[a]
        if isinstance(a, (list, tuple)):
            return type(a)(resolve(x) for x in a)
        return a

    outputs = []
    for node in graph.graph.nodes:
        if node.op == "call_function" and foldable(node):
            value = node.target(*resolve(node.args), **resolve(node.kwargs))
            if isinstance(value, torch.Tensor):
                consts[node] = value
                continue
        if node.op == "call_function":
            w.values[node] = _node(w, node, fail, consts)
        elif node.op == "output":
            flat = node.args[0]
            flat = list(flat) if isinstance(flat, (list, tuple)) else [flat]
            outputs = [w.values[o] if o not in consts else
                       w.constant(consts[o]) for o in flat]
    if not outputs:
        raise Error("from_torch: the module returns no tensor")
    labels = [output_names[i] if i < len(output_names) else f"output{i}"
              for i in range(len(outputs))]
    results = ", ".join(f'{_type(o[1], o[2])} {{nn.output = "{labels[i]}"}}'
                        for i, o in enumerate(outputs))
    text = ("func.func @forward(" + ", ".join(signature) + ") -> ("
            + results + ") {\n" + "\n".join(w.lines) + "\n    return "
            + ", ".join(o[0] for o in outputs) + " : "
            + ", ".join(_type(o[1], o[2]) for o in outputs) + "\n}\n")
    model = parse(text, f"<from_torch {type(module).__name__}>")
    model._state = {k: t.detach().cpu().numpy() for k, t in params.items()}
    model._aliases = aliases
    model._buffers = {k: t.detach().cpu().numpy() for k, t in buffers.items()}
    return model
