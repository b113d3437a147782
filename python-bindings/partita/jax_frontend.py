"""partita.from_jax: a JAX function as an nn model.

The function is traced to a jaxpr (jax.make_jaxpr) on the example arguments;
calls that only group code (pjit of a jnp helper, custom_jvp/custom_vjp,
remat) are inlined, and each primitive becomes nn ops, written as IR text
and parsed by the compiler, as from_torch does. The first argument is the
parameter pytree: its leaves are parameters (`nn.param`) named by their
pytree paths ("h.0.attn.w" for params["h"][0]["attn"]["w"]); the other
arguments are inputs (`nn.input`) named after the function's parameters
(a pytree input: "name.path"). Outputs are named by `output_names`, then
"output<i>".

What is computed from constants alone (iota, a causal mask from jnp.tril,
the positions' index arithmetic) is evaluated at import with JAX itself. A
few patterns are recognized rather than mapped op by op:

- softmax as jax.nn.softmax writes it (max-shifted exp over its sum) ->
  nn.softmax (its stop_gradient is exact there: softmax does not depend on
  the shift);
- jax.nn.log_softmax followed by take_along_axis of the labels, summed and
  scaled by -1/tokens (the usual mean cross-entropy) -> nn.cross_entropy;
- jnp.where(mask, x, -inf) with a constant mask -> x plus a constant
  (0 where kept, -inf where masked);
- x[ids] / jnp.take(x, ids, axis=0) on a 2-D table -> nn.embedding (the
  negative-index wrap jnp adds is dropped: ids must be in range);
- split and slice (a fused qkv projection) -> nn.reshape and nn.einsum
  with a constant one-hot or selection matrix (partita/_slicing.py), so
  that the existing ops' sharding rules and gradients apply.

A primitive without a mapping fails at import, naming the primitive and the
model's source line that produced it (the jaxpr keeps it). JAX shardings on
the example arguments (jax.sharding.NamedSharding, on arrays or on
jax.ShapeDtypeStruct) become Partita annotations on a Mesh of the same axes.
"""

import inspect
import linecache
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._error import Error
from .torch_frontend import _LETTERS, _Writer, _type

# Primitives that only group other primitives: their body is inlined.
_CALLS = ("pjit", "closed_call", "core_call", "custom_jvp_call",
          "custom_vjp_call", "custom_vjp_call_jaxpr", "remat", "checkpoint",
          "custom_lin")
# pjit-wrapped jax.numpy / jax.nn functions recognized as a whole.
_KEPT_CALLS = ("log_softmax", "take_along_axis")


# Primitives convert() maps (some only in the patterns named there).
_MAPPED = frozenset((
    "pjit[log_softmax]", "pjit[take_along_axis]", "exp", "log", "tanh", "neg",
    "rsqrt", "sqrt", "add", "sub", "mul", "div", "max", "integer_pow",
    "logistic", "convert_element_type", "copy", "copy_p", "reduce_precision",
    "broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose",
    "reduce_sum", "reduce_max", "dot_general", "select_n", "gather", "split",
    "slice", "iota", "lt", "le", "gt", "ge", "eq", "ne", "stop_gradient",
    "and", "or", "not"))


def _inner_jaxpr(params):
    """The body of a call primitive and its constants."""
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if key in params:
            inner = params[key]
            if hasattr(inner, "jaxpr"):  # ClosedJaxpr
                return inner.jaxpr, list(inner.consts)
            return inner, []
    return None, []


class _Eqn:
    """One primitive of the flattened (inlined) jaxpr. Inputs are refs:
    ("arg", k), ("lit", array) or ("eqn", index, output)."""

    __slots__ = ("index", "prim", "params", "inputs", "avals", "source")

    def __init__(self, index, prim, params, inputs, avals, source):
        self.index = index
        self.prim = prim
        self.params = params
        self.inputs = inputs
        self.avals = avals
        self.source = source

    @property
    def name(self) -> str:
        if self.prim.name == "pjit":
            return f"pjit[{self.params.get('name', '')}]"
        return self.prim.name


def _flatten(jaxpr, inputs, consts, eqns: List[_Eqn]):
    """Appends `jaxpr`'s primitives to `eqns`, calls inlined; returns the
    refs of its outputs."""
    try:
        from jax.extend import core as jcore
    except ImportError:  # older jax
        from jax import core as jcore
    env = {}
    for var, ref in zip(jaxpr.constvars, consts):
        env[var] = ref if isinstance(ref, tuple) else ("lit", np.asarray(ref))
    for var, ref in zip(jaxpr.invars, inputs):
        env[var] = ref

    def ref_of(v):
        if isinstance(v, jcore.Literal):
            return ("lit", np.asarray(v.val))
        return env[v]

    for eqn in jaxpr.eqns:
        ins = [ref_of(v) for v in eqn.invars]
        name = eqn.primitive.name
        inner, inner_consts = _inner_jaxpr(eqn.params)
        if (name in _CALLS and inner is not None
                and not (name == "pjit"
                         and eqn.params.get("name") in _KEPT_CALLS)):
            outs = _flatten(inner, ins, inner_consts, eqns)
        else:
            e = _Eqn(len(eqns), eqn.primitive, eqn.params, ins,
                     [v.aval for v in eqn.outvars], eqn.source_info)
            eqns.append(e)
            outs = [("eqn", e.index, i) for i in range(len(eqn.outvars))]
        for var, ref in zip(eqn.outvars, outs):
            if type(var).__name__ != "DropVar":
                env[var] = ref
    return [ref_of(v) for v in jaxpr.outvars]


def _where(eqn: _Eqn) -> str:
    """The model's source line of `eqn`: "file:line: code", or ""."""
    try:
        from jax._src import source_info_util
        frame = source_info_util.user_frame(eqn.source)
    except Exception:  # an internal API: no line rather than a crash
        return ""
    if frame is None:
        return ""
    code = linecache.getline(frame.file_name, frame.start_line).strip()
    return f"{frame.file_name}:{frame.start_line}: {code}"


def _path_name(path) -> str:
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts)


def _same(a, b) -> bool:
    """Whether two refs name one value (literals never do)."""
    return a[0] != "lit" and a == b


class _Marker:
    """A value with no nn op of its own yet: log_softmax(x) and what
    take_along_axis picks from it, on the way to a cross-entropy."""

    def __init__(self, kind, logits, labels=None, scale=1.0, summed=False):
        self.kind = kind
        self.logits = logits
        self.labels = labels
        self.scale = scale
        self.summed = summed


class _Converter:
    def __init__(self, eqns: List[_Eqn], args):
        self.eqns = eqns
        self.args = args  # ref ("arg", k) -> nn value
        self.w = _Writer()
        self.values: Dict[Tuple, Any] = {}

    # -- refs ------------------------------------------------------------
    def producer(self, ref) -> Optional[_Eqn]:
        return self.eqns[ref[1]] if ref[0] == "eqn" else None

    def get(self, ref):
        """What `ref` converted to so far (None for literals)."""
        return self.values.get(ref) if ref[0] != "lit" else None

    def is_const(self, ref) -> bool:
        return ref[0] == "lit" or isinstance(self.get(ref), np.ndarray)

    def const(self, ref) -> np.ndarray:
        return ref[1] if ref[0] == "lit" else self.values[ref]

    def fail(self, eqn: _Eqn, why: str = ""):
        line = _where(eqn)
        raise Error(f"from_jax: unsupported primitive {eqn.name}"
                    + (f" ({why})" if why else "")
                    + (f" at {line}" if line else ""))

    def value(self, ref, eqn: _Eqn, shape=None, dtype=None):
        """The nn value of `ref` (a constant becomes nn.constant, broadcast
        to `shape` when given; a scalar literal is splat to it)."""
        if ref[0] == "arg":
            return self.args[ref]
        if self.is_const(ref):
            c = np.asarray(self.const(ref))
            if c.dtype == np.bool_:
                self.fail(eqn, "a boolean operand")
            if dtype is not None:  # Python scalars are weakly typed
                c = c.astype(dtype)
            if shape is not None and c.ndim == 0:
                return self.w.emit(
                    "scalar", f"nn.constant dense<{float(c):.17e}> : "
                    f"{_type(shape, c.dtype)}", tuple(shape), c.dtype)
            v = self.w.constant(c)
            return self.w.broadcast(v, shape) if shape is not None else v
        v = self.values[ref]
        if isinstance(v, _Marker):
            v = self.materialize(v, eqn)
            self.values[ref] = v
        return self.w.broadcast(v, shape) if shape is not None else v

    def materialize(self, m: _Marker, eqn: _Eqn):
        tokens = int(np.prod(m.logits[1][:-1]))
        if (m.kind == "picked" and m.summed
                and abs(m.scale * tokens + 1.0) < 1e-6):
            x, labels = m.logits, m.labels
            return self.w.emit(
                "loss", f"nn.cross_entropy {x[0]}, {labels[0]} : "
                f"{_type(x[1], x[2])}, {_type(labels[1], labels[2])} -> "
                f"{_type((), x[2])}", (), x[2])
        self.fail(eqn, "log_softmax is mapped only as a mean cross-entropy "
                  "-mean(take_along_axis(log_softmax(x), labels))")

    # -- patterns (structure only: nothing is emitted) ----------------------
    def softmax_input(self, e: _Eqn):
        """(x, axis) when `e` (a div) ends softmax(x) as jax.nn.softmax
        writes it, else None."""
        def prod(ref, prim):
            p = self.producer(ref)
            return p if p is not None and p.prim.name == prim else None

        if e.prim.name != "div":
            return None
        exp = prod(e.inputs[0], "exp")
        bsum = prod(e.inputs[1], "broadcast_in_dim")
        if exp is None or bsum is None:
            return None
        rsum = prod(bsum.inputs[0], "reduce_sum")
        if rsum is None or not _same(rsum.inputs[0], e.inputs[0]):
            return None
        sub = prod(exp.inputs[0], "sub")
        if sub is None:
            return None
        shift = self.producer(sub.inputs[1])
        if shift is not None and shift.prim.name == "stop_gradient":
            shift = self.producer(shift.inputs[0])
        if shift is None or shift.prim.name != "broadcast_in_dim":
            return None
        m = self.producer(shift.inputs[0])
        if m is not None and m.prim.name == "max":
            lits = [r for r in m.inputs if r[0] == "lit"]
            rest = [r for r in m.inputs if r[0] != "lit"]
            if len(lits) != 1 or len(rest) != 1 or \
                    not np.isneginf(lits[0][1]).all():
                return None
            m = self.producer(rest[0])
        if (m is None or m.prim.name != "reduce_max"
                or not _same(m.inputs[0], sub.inputs[0])):
            return None
        axes = tuple(m.params["axes"])
        if axes != tuple(rsum.params["axes"]) or len(axes) != 1:
            return None
        return sub.inputs[0], axes[0]

    def wrapped_index(self, e: _Eqn):
        """x when `e` is jnp's negative-index wrap select_n(x < 0, x, x + n)."""
        if e.prim.name != "select_n" or len(e.inputs) != 3:
            return None
        lt = self.producer(e.inputs[0])
        add = self.producer(e.inputs[2])
        x = e.inputs[1]
        if (lt is None or add is None or lt.prim.name != "lt"
                or add.prim.name != "add" or not _same(lt.inputs[0], x)
                or lt.inputs[1][0] != "lit" or not _same(add.inputs[0], x)
                or add.inputs[1][0] != "lit"):
            return None
        return x

    def deps(self, e: _Eqn):
        """The refs `e`'s conversion reads."""
        sm = self.softmax_input(e)
        if sm is not None:
            return [sm[0]]
        x = self.wrapped_index(e)
        if x is not None:
            return [x]
        return e.inputs

    # -- conversion ---------------------------------------------------------
    def run(self, outputs):
        needed = set()
        todo = [r for r in outputs if r[0] == "eqn"]
        while todo:
            ref = todo.pop()
            if ref[1] in needed:
                continue
            needed.add(ref[1])
            todo.extend(r for r in self.deps(self.eqns[ref[1]])
                        if r[0] == "eqn")
        # Every primitive without a mapping is reported before anything
        # else can fail on its values (an fft's complex numbers).
        for e in self.eqns:
            if e.index in needed and e.name not in _MAPPED:
                self.fail(e)
        for e in self.eqns:
            if e.index in needed:
                outs = self.convert(e)
                for i, v in enumerate(outs):
                    self.values[("eqn", e.index, i)] = v

    def convert(self, e: _Eqn) -> list:
        name = e.prim.name
        wrapped = self.wrapped_index(e)
        if wrapped is not None and self.is_const(wrapped):
            return [np.asarray(self.const(wrapped))]
        if all(self.is_const(r) for r in e.inputs) and not (
                name == "pjit" and e.params.get("name") in _KEPT_CALLS
                and any(isinstance(self.get(r), _Marker)
                        for r in e.inputs)):
            return self.fold(e)
        aval = e.avals[0]
        shape, dtype = tuple(aval.shape), np.dtype(aval.dtype)
        w = self.w
        sm = self.softmax_input(e)
        if sm is not None:
            x = self.value(sm[0], e)
            axis = sm[1]
            return [w.emit("softmax", f"nn.softmax {x[0]} dim = {axis} : "
                           f"{_type(x[1], x[2])}", x[1], x[2])]
        x = self.wrapped_index(e)
        if x is not None:
            return [self.value(x, e)]
        ins = e.inputs
        p = e.params

        if name == "pjit" and p.get("name") == "log_softmax":
            x = self.value(ins[0], e)
            axis = p["jaxpr"].jaxpr.eqns[0].params.get("axes", (None,))
            if tuple(axis) != (len(x[1]) - 1,):
                self.fail(e, "log_softmax over another axis than the last")
            return [_Marker("logsoftmax", x)]
        if name == "pjit" and p.get("name") == "take_along_axis":
            m = self.get(ins[0])
            if not isinstance(m, _Marker) or m.kind != "logsoftmax":
                self.fail(e, "take_along_axis is mapped only on log_softmax")
            idx = self.value(ins[1], e)
            lead = m.logits[1][:-1]
            if idx[1] != lead + (1,):
                self.fail(e, "take_along_axis of one label per row")
            labels = w.emit("labels", f"nn.reshape {idx[0]} : "
                            f"{_type(idx[1], idx[2])} -> {_type(lead, idx[2])}",
                            lead, idx[2])
            return [_Marker("picked", m.logits, labels)]
        if any(isinstance(self.get(r), _Marker) for r in ins):
            m = next(self.values[r] for r in ins
                     if isinstance(self.get(r), _Marker))
            if m.kind == "picked" and name in ("reduce_sum", "neg", "div",
                                               "mul", "reshape", "squeeze"):
                out = _Marker("picked", m.logits, m.labels, m.scale, m.summed)
                if name == "reduce_sum":
                    if len(p["axes"]) != len(self.aval_shape(ins[0])):
                        self.fail(e, "a partial sum of the picked log-probs")
                    out.summed = True
                elif name == "neg":
                    out.scale = -m.scale
                elif name in ("div", "mul"):
                    other = ins[1] if isinstance(self.get(ins[0]),
                                                 _Marker) else ins[0]
                    if not self.is_const(other) or \
                            np.asarray(self.const(other)).size != 1 or \
                            (name == "div" and other is ins[0]):
                        self.fail(e, "the picked log-probs scaled by a "
                                  "non-constant")
                    c = float(np.asarray(self.const(other)).reshape(()))
                    out.scale = m.scale / c if name == "div" else m.scale * c
                return [out]

        unary = {"exp": "nn.exp", "log": "nn.log", "tanh": "nn.tanh",
                 "neg": "nn.neg", "rsqrt": "nn.rsqrt", "sqrt": "nn.sqrt"}
        binary = {"add": "nn.add", "sub": "nn.sub", "mul": "nn.mul",
                  "div": "nn.div", "max": "nn.max"}
        if name in unary:
            x = self.value(ins[0], e)
            return [w.emit("act", f"{unary[name]} {x[0]} : {_type(x[1], x[2])}",
                           x[1], x[2])]
        if name in binary:
            if not np.issubdtype(dtype, np.floating):
                self.fail(e, f"{dtype} operands")
            a, b = (self.value(r, e, shape, dtype) for r in ins)
            return [w.emit("bin", f"{binary[name]} {a[0]}, {b[0]} : "
                           f"{_type(shape, dtype)}", shape, dtype)]
        if name == "integer_pow":
            y = p["y"]
            x = self.value(ins[0], e)
            if y < 1:
                self.fail(e, f"power {y}")
            out = x
            for _ in range(y - 1):
                out = w.emit("pow", f"nn.mul {out[0]}, {x[0]} : "
                             f"{_type(shape, dtype)}", shape, dtype)
            return [out]
        if name == "logistic":
            # 1 / (1 + exp(-x)): nn has no sigmoid of its own.
            x = self.value(ins[0], e)
            t = _type(shape, dtype)
            n = w.emit("neg", f"nn.neg {x[0]} : {t}", shape, dtype)
            ex = w.emit("exp", f"nn.exp {n[0]} : {t}", shape, dtype)
            one = w.emit("one", f"nn.constant dense<1.0> : {t}", shape, dtype)
            den = w.emit("den", f"nn.add {one[0]}, {ex[0]} : {t}", shape, dtype)
            return [w.emit("sigmoid", f"nn.div {one[0]}, {den[0]} : {t}",
                           shape, dtype)]
        if name in ("convert_element_type", "copy", "copy_p",
                    "reduce_precision"):
            x = self.value(ins[0], e)
            if _type((), x[2]) == _type((), dtype):
                return [x]
            if not (np.issubdtype(dtype, np.floating)
                    and np.issubdtype(np.dtype(x[2]), np.floating)):
                self.fail(e, f"{x[2]} to {dtype}")
            return [w.emit("convert", f"nn.convert {x[0]} : "
                           f"{_type(x[1], x[2])} -> {_type(shape, dtype)}",
                           shape, dtype)]
        if name == "broadcast_in_dim":
            x = self.value(ins[0], e)
            return [self.broadcast_in_dim(x, shape, p["broadcast_dimensions"])]
        if name in ("reshape", "squeeze", "expand_dims"):
            if name == "reshape" and p.get("dimensions") is not None:
                self.fail(e, "reshape with dimensions")
            x = self.value(ins[0], e)
            if x[1] == shape:
                return [x]
            return [w.emit("reshape", f"nn.reshape {x[0]} : "
                           f"{_type(x[1], x[2])} -> {_type(shape, dtype)}",
                           shape, dtype)]
        if name == "transpose":
            x = self.value(ins[0], e)
            perm = list(p["permutation"])
            if perm == list(range(len(perm))):
                return [x]
            return [w.emit("transpose", f"nn.transpose {x[0]} perm = {perm} : "
                           f"{_type(x[1], x[2])} -> {_type(shape, dtype)}",
                           shape, dtype)]
        if name in ("reduce_sum", "reduce_max"):
            x = self.value(ins[0], e)
            kind = "sum" if name == "reduce_sum" else "max"
            return [w.emit("reduce", f"nn.reduce {kind} {x[0]} dims = "
                           f"{list(p['axes'])} : {_type(x[1], x[2])} -> "
                           f"{_type(shape, dtype)}", shape, dtype)]
        if name == "dot_general":
            return [self.dot_general(e, shape, dtype)]
        if name == "select_n":
            return [self.select(e, shape, dtype)]
        if name == "gather":
            return [self.gather(e, shape, dtype)]
        if name == "split":
            x = self.value(ins[0], e)
            out, start = [], 0
            for size in p["sizes"]:
                out.append(w.slice(x, p["axis"], start, start + size))
                start += size
            return out
        if name == "slice":
            x = self.value(ins[0], e)
            strides = p.get("strides")
            if strides is not None and any(s != 1 for s in strides):
                self.fail(e, "a strided slice")
            cut = [d for d, (a, b, n) in enumerate(zip(
                p["start_indices"], p["limit_indices"], x[1])) if (a, b) != (0, n)]
            for d in cut:
                x = w.slice(x, d, p["start_indices"][d], p["limit_indices"][d])
            return [x]
        self.fail(e)

    def aval_shape(self, ref):
        if ref[0] == "arg":
            return self.args[ref][1]
        if ref[0] == "lit":
            return np.shape(ref[1])
        return tuple(self.eqns[ref[1]].avals[ref[2]].shape)

    def fold(self, e: _Eqn) -> list:
        """Evaluates `e` on constant operands with JAX itself."""
        vals = [self.const(r) for r in e.inputs]
        out = e.prim.bind(*vals, **e.params)
        if not e.prim.multiple_results:
            out = [out]
        return [np.asarray(o) for o in out]

    def broadcast_in_dim(self, x, shape, dims):
        name, vshape, dtype = x
        if vshape == tuple(shape):
            return x
        w = self.w
        kept = [i for i, s in enumerate(vshape) if not (s == 1 and shape[dims[i]] != 1)]
        new_dims = [dims[i] for i in kept]
        squeezed = tuple(vshape[i] for i in kept)
        if squeezed != vshape:
            x = w.emit("reshape", f"nn.reshape {name} : {_type(vshape, dtype)} "
                       f"-> {_type(squeezed, dtype)}", squeezed, dtype)
        if len(squeezed) == len(shape):
            return x
        # Only size-1 dimensions added: a reshape.
        if all(shape[d] == 1 for d in range(len(shape)) if d not in new_dims):
            return w.emit("reshape", f"nn.reshape {x[0]} : "
                          f"{_type(squeezed, dtype)} -> {_type(shape, dtype)}",
                          tuple(shape), dtype)
        return w.emit("broadcast", f"nn.broadcast {x[0]} dims = {new_dims} : "
                      f"{_type(squeezed, dtype)} -> {_type(shape, dtype)}",
                      tuple(shape), dtype)

    def dot_general(self, e, shape, dtype):
        (lc, rc), (lb, rb) = e.params["dimension_numbers"]
        a, b = (self.value(r, e) for r in e.inputs)
        letters = iter(_LETTERS)
        la = [next(letters) for _ in a[1]]
        lr = [None] * len(b[1])
        for i, j in zip(lb, rb):
            lr[j] = la[i]
        for i, j in zip(lc, rc):
            lr[j] = la[i]
        for j in range(len(lr)):
            if lr[j] is None:
                lr[j] = next(letters)
        out = ([la[i] for i in lb]
               + [la[i] for i in range(len(la)) if i not in lb and i not in lc]
               + [lr[j] for j in range(len(lr)) if j not in rb and j not in rc])
        spec = f"{''.join(la)},{''.join(lr)}->{''.join(out)}"
        return self.w.emit("dot", f'nn.einsum "{spec}" {a[0]}, {b[0]} : '
                           f"({_type(a[1], a[2])}, {_type(b[1], b[2])}) -> "
                           f"{_type(shape, dtype)}", shape, dtype)

    def select(self, e, shape, dtype):
        """select_n(mask, a, b) with a constant mask and one branch all -inf:
        the other branch plus 0 / -inf (exact where kept)."""
        pred, *cases = e.inputs
        if len(cases) != 2 or not np.issubdtype(dtype, np.floating):
            self.fail(e, "a select on a non-constant condition")
        fill = [i for i, c in enumerate(cases) if self.is_const(c)
                and np.isneginf(np.asarray(self.const(c))).all()]
        if not fill or not self.is_const(pred):
            self.fail(e, "a select on a non-constant condition or without "
                      "a -inf branch")
        kept = cases[1 - fill[0]]
        # The mask at its own (smaller) shape when it is broadcast.
        mask_ref, dims = pred, None
        producer = self.producer(pred)
        if (producer is not None and producer.prim.name == "broadcast_in_dim"
                and self.is_const(producer.inputs[0])):
            mask_ref = producer.inputs[0]
            dims = producer.params["broadcast_dimensions"]
        mask = np.asarray(self.const(mask_ref)).astype(bool)
        # select_n takes case 0 where the mask is False, case 1 where True.
        if fill[0] == 1:
            addend = np.where(mask, np.float32(-np.inf), np.float32(0))
        else:
            addend = np.where(mask, np.float32(0), np.float32(-np.inf))
        addend = addend.astype(dtype)
        c = self.w.constant(addend)
        if dims is not None:
            c = self.broadcast_in_dim(c, shape, dims)
        else:
            c = self.w.broadcast(c, shape)
        x = self.value(kept, e, shape, dtype)
        return self.w.emit("masked", f"nn.add {x[0]}, {c[0]} : "
                           f"{_type(shape, dtype)}", shape, dtype)

    def gather(self, e, shape, dtype):
        """table[ids] on a 2-D table along its first dimension: nn.embedding."""
        dn = e.params["dimension_numbers"]
        table = self.value(e.inputs[0], e)
        ids_ref = e.inputs[1]
        ids_shape = self.aval_shape(ids_ref)
        if (len(table[1]) != 2 or tuple(dn.collapsed_slice_dims) != (0,)
                or tuple(dn.start_index_map) != (0,)
                or tuple(getattr(dn, "operand_batching_dims", ())) != ()
                or tuple(dn.offset_dims) != (len(ids_shape) - 1,)
                or tuple(e.params["slice_sizes"]) != (1, table[1][1])
                or ids_shape[-1] != 1):
            self.fail(e, "only table[ids] on a 2-D table is mapped")
        lead = tuple(ids_shape[:-1])
        if self.is_const(ids_ref):
            c = np.asarray(self.const(ids_ref)).reshape(lead).astype(np.int32)
            ids = self.w.constant(c)
        else:
            raw = self.value(ids_ref, e)
            ids = self.w.emit("ids", f"nn.reshape {raw[0]} : "
                              f"{_type(raw[1], raw[2])} -> "
                              f"{_type(lead, raw[2])}", lead, raw[2])
        return self.w.emit("embed", f"nn.embedding {table[0]}[{ids[0]}] : "
                           f"{_type(table[1], table[2])}, "
                           f"{_type(ids[1], ids[2])} -> {_type(shape, dtype)}",
                           shape, dtype)


def _sharding_spec(leaf):
    """(Mesh, P) from a NamedSharding on `leaf`, or None."""
    from .sharding import Mesh, P
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or not hasattr(sharding, "spec") or \
            not hasattr(sharding, "mesh"):
        return None
    mesh = Mesh({str(k): int(v) for k, v in sharding.mesh.shape.items()})
    spec = list(sharding.spec) + [None] * (len(leaf.shape) - len(sharding.spec))
    dims = [tuple(s) if isinstance(s, (list, tuple)) else s for s in spec]
    return mesh, P(*dims)


def from_jax(fn, *example_args, output_names: Sequence[str] = (),
             params_argnum: Optional[int] = 0):
    """The nn model of JAX function `fn` on `example_args` (arrays, pytrees
    of arrays, or jax.ShapeDtypeStruct). Argument `params_argnum` (the first
    by default; None for none) is the parameter pytree: its leaves become
    parameters named by their paths, and their values the model's
    state_dict(). Outputs are named `output_names` (a model to train names
    its scalar loss "loss")."""
    import jax

    from .compiler import parse

    try:
        closed = jax.make_jaxpr(fn)(*example_args)
    except Error:
        raise
    except Exception as e:  # a tracing failure of the function itself
        raise Error(f"from_jax: cannot trace {getattr(fn, '__name__', fn)}: "
                    f"{type(e).__name__}: {e}") from e

    try:
        arg_names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        arg_names = []
    leaves = []  # (name, role, leaf)
    for i, arg in enumerate(example_args):
        base = arg_names[i] if i < len(arg_names) else f"input{i}"
        flat, _ = jax.tree_util.tree_flatten_with_path(arg)
        role = "nn.param" if i == params_argnum else "nn.input"
        for path, leaf in flat:
            name = _path_name(path)
            if role == "nn.input":
                name = base + ("." + name if name else "")
            leaves.append((name or base, role, leaf))
    if len(leaves) != len(closed.jaxpr.invars):
        raise Error(f"from_jax: the jaxpr has {len(closed.jaxpr.invars)} "
                    f"inputs, the arguments {len(leaves)} leaves")

    signature, args = [], {}
    for k, ((name, role, leaf), var) in enumerate(zip(leaves,
                                                      closed.jaxpr.invars)):
        shape = tuple(var.aval.shape)
        dtype = np.dtype(var.aval.dtype)
        if not (np.issubdtype(dtype, np.floating)
                or np.issubdtype(dtype, np.integer)):
            raise Error(f"from_jax: argument '{name}' has dtype {dtype}")
        args[("arg", k)] = (f"%arg{k}", shape, dtype)
        signature.append(f'%arg{k}: {_type(shape, dtype)} '
                         f'{{{role} = "{name}"}}')

    eqns: List[_Eqn] = []
    outputs = _flatten(closed.jaxpr, [("arg", k) for k in range(len(leaves))],
                       list(closed.consts), eqns)
    conv = _Converter(eqns, args)
    conv.run(outputs)
    # Outputs: a dummy eqn for the error location is not needed; a marker
    # left unfinished fails at the last primitive that produced it.
    out_values = []
    for ref in outputs:
        if ref[0] == "eqn" and isinstance(conv.values.get(ref), _Marker):
            out_values.append(conv.value(ref, eqns[ref[1]]))
        elif ref[0] == "arg":
            out_values.append(args[ref])
        elif conv.is_const(ref):
            out_values.append(conv.w.constant(
                np.asarray(conv.const(ref))))
        else:
            out_values.append(conv.values[ref])
    if not out_values:
        raise Error("from_jax: the function returns no array")
    labels = [output_names[i] if i < len(output_names) else f"output{i}"
              for i in range(len(out_values))]
    results = ", ".join(f'{_type(o[1], o[2])} {{nn.output = "{labels[i]}"}}'
                        for i, o in enumerate(out_values))
    w = conv.w
    text = ("func.func @forward(" + ", ".join(signature) + ") -> ("
            + results + ") {\n" + "\n".join(w.lines) + "\n    return "
            + ", ".join(o[0] for o in out_values) + " : "
            + ", ".join(_type(o[1], o[2]) for o in out_values) + "\n}\n")
    model = parse(text, f"<from_jax {getattr(fn, '__name__', 'fn')}>")
    model._state = {name: np.asarray(leaf) for name, role, leaf in leaves
                    if role == "nn.param" and not isinstance(
                        leaf, jax.ShapeDtypeStruct)}
    for name, role, leaf in leaves:
        spec = _sharding_spec(leaf)
        if spec is not None:
            model.shard(name, spec[1], spec[0])
    return model
