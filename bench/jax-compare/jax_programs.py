"""The three cross-check programs in JAX, annotated as their .mlir twins are.

Every intermediate that the Partita program has is computed under a
`jax.named_scope` whose name is the `loc("...")` of the matching Partita op, so
that the sharding XLA gives the instruction that leaves the scope can be put
on the same row. Intermediates that exist only on the JAX side (the pieces of
a softmax or a cross-entropy, which Partita keeps as one op) live in nested
scopes `<op>/<piece>` and are listed as rows of their own.

The mesh is the one of the .mlir files: dp=2 (major) x tp=4 (minor), device
ids in row-major order, so device d sits at (dp, tp) = (d // 4, d % 4).
"""

import dataclasses
import math

MESH_AXES = (("dp", 2), ("tp", 4))


@dataclasses.dataclass(frozen=True)
class Arg:
    name: str
    shape: tuple
    dtype: str  # "f32" or "i32"
    spec: tuple  # PartitionSpec entries: None, "dp", ("dp", "tp"), ...


@dataclasses.dataclass(frozen=True)
class Row:
    # named_scope on the JAX side, loc on the Partita side; `result:N` is
    # the function's N-th result (as XLA's root and Partita's signature say).
    name: str
    shape: tuple
    partita: bool = True  # False: JAX-only piece of a fused Partita op


@dataclasses.dataclass(frozen=True)
class Program:
    name: str  # also the jit function's name, so the dump files carry it
    mlir: str  # file beside this one
    title: str
    args: tuple
    rows: tuple
    build: object  # () -> python function taking the args in order


# ---------------------------------------------------------------------------
# Two-layer MLP: y = relu(x w1 + b1) w2 + b2.
B, H, F = 8, 16, 32


def _mlp():
    import jax
    import jax.numpy as jnp
    ns = jax.named_scope

    def mlp(x, w1, b1, w2, b2):
        with ns("x_w1"):
            h = jnp.einsum("bh,hf->bf", x, w1)
        with ns("b1_bcast"):
            b1b = jnp.broadcast_to(b1[None, :], (B, F))
        with ns("x_w1_b1"):
            hb = h + b1b
        with ns("relu"):
            a = jnp.maximum(hb, 0.0)
        with ns("relu_w2"):
            y = jnp.einsum("bf,fh->bh", a, w2)
        with ns("b2_bcast"):
            b2b = jnp.broadcast_to(b2[None, :], (B, H))
        with ns("out"):
            return y + b2b

    return mlp


MLP = Program(
    name="mlp",
    mlir="mlp.mlir",
    title="Two-layer MLP (Megatron MLP: w1 column-, w2 row-parallel; batch on dp)",
    args=(
        Arg("x", (B, H), "f32", ("dp", None)),
        Arg("w1", (H, F), "f32", (None, "tp")),
        Arg("b1", (F,), "f32", ("tp",)),
        Arg("w2", (F, H), "f32", ("tp", None)),
        Arg("b2", (H,), "f32", (None,)),
    ),
    rows=(
        Row("x_w1", (B, F)),
        Row("b1_bcast", (B, F)),
        Row("x_w1_b1", (B, F)),
        Row("relu", (B, F)),
        Row("relu_w2", (B, H)),
        Row("b2_bcast", (B, H)),
        Row("out", (B, H)),
        Row("result:0", (B, H)),
    ),
    build=_mlp,
)

# ---------------------------------------------------------------------------
# Attention block: per-head q/k/v projections, softmax(q k^T / sqrt(d)) v,
# output projection.
AB, AS, AH, AN, AD = 4, 8, 32, 4, 8


def _attention():
    import jax
    import jax.numpy as jnp
    ns = jax.named_scope

    def attention(x, wq, wk, wv, wo):
        with ns("q"):
            q = jnp.einsum("bsh,hnd->bsnd", x, wq)
        with ns("k"):
            k = jnp.einsum("bsh,hnd->bsnd", x, wk)
        with ns("v"):
            v = jnp.einsum("bsh,hnd->bsnd", x, wv)
        with ns("scores"):
            s = jnp.einsum("bqnd,bknd->bnqk", q, k)
        with ns("scale"):
            c = jnp.full(s.shape, 1.0 / math.sqrt(AD), jnp.float32)
        with ns("scores_scaled"):
            ss = s * c
        # jax.nn.softmax computes exactly these pieces; they are spelled out
        # so that each gets a row.
        with ns("probs"):
            with ns("max"):
                m = jnp.max(ss, axis=3)
            with ns("sub"):
                z = ss - m[..., None]
            with ns("exp"):
                e = jnp.exp(z)
            with ns("sum"):
                t = jnp.sum(e, axis=3)
            p = e / t[..., None]
        with ns("context"):
            o = jnp.einsum("bnqk,bknd->bqnd", p, v)
        with ns("out"):
            return jnp.einsum("bqnd,ndh->bqh", o, wo)

    return attention


ATTENTION = Program(
    name="attention",
    mlir="attention.mlir",
    title=("Attention block (heads of wq/wk/wv and wo on tp; batch on dp); "
           "B=4, S=8, H=32, 4 heads of 8"),
    args=(
        Arg("x", (AB, AS, AH), "f32", ("dp", None, None)),
        Arg("wq", (AH, AN, AD), "f32", (None, "tp", None)),
        Arg("wk", (AH, AN, AD), "f32", (None, "tp", None)),
        Arg("wv", (AH, AN, AD), "f32", (None, "tp", None)),
        Arg("wo", (AN, AD, AH), "f32", ("tp", None, None)),
    ),
    rows=(
        Row("q", (AB, AS, AN, AD)),
        Row("k", (AB, AS, AN, AD)),
        Row("v", (AB, AS, AN, AD)),
        Row("scores", (AB, AN, AS, AS)),
        Row("scale", (AB, AN, AS, AS)),
        Row("scores_scaled", (AB, AN, AS, AS)),
        Row("probs/max", (AB, AN, AS), partita=False),
        Row("probs/sub", (AB, AN, AS, AS), partita=False),
        Row("probs/exp", (AB, AN, AS, AS), partita=False),
        Row("probs/sum", (AB, AN, AS), partita=False),
        Row("probs", (AB, AN, AS, AS)),
        Row("context", (AB, AS, AN, AD)),
        Row("out", (AB, AS, AH)),
        Row("result:0", (AB, AS, AH)),
    ),
    build=_attention,
)

# ---------------------------------------------------------------------------
# Embedding lookup + LM head + mean softmax cross-entropy.
EB, ES, EH, EV = 4, 8, 16, 64


def _embedding_loss():
    import jax
    import jax.numpy as jnp
    ns = jax.named_scope

    def embedding_loss(wte, lm_head, ids, labels):
        with ns("embed"):
            # nn.embedding gives zeros for ids outside the table.
            e = jnp.take(wte, ids, axis=0, mode="fill", fill_value=0.0)
        with ns("logits"):
            logits = jnp.einsum("bsh,vh->bsv", e, lm_head)
        # nn.cross_entropy: mean over tokens of logsumexp(logits) - logits[label].
        with ns("loss"):
            with ns("max"):
                m = jnp.max(logits, axis=2)
            with ns("sumexp"):
                se = jnp.sum(jnp.exp(logits - m[..., None]), axis=2)
            with ns("lse"):
                lse = jnp.log(se) + m
            with ns("picked"):
                picked = jnp.take_along_axis(
                    logits, labels[..., None], axis=2)[..., 0]
            with ns("token_loss"):
                tl = lse - picked
            loss = jnp.mean(tl)
        return loss, logits

    return embedding_loss


EMBEDDING_LOSS = Program(
    name="embedding_loss",
    mlir="embedding_loss.mlir",
    title=("Embedding + logits + cross-entropy (vocab-parallel wte and lm_head "
           "on tp; tokens on dp); B=4, S=8, H=16, V=64"),
    args=(
        Arg("wte", (EV, EH), "f32", ("tp", None)),
        Arg("lm_head", (EV, EH), "f32", ("tp", None)),
        Arg("ids", (EB, ES), "i32", ("dp", None)),
        Arg("labels", (EB, ES), "i32", ("dp", None)),
    ),
    rows=(
        Row("embed", (EB, ES, EH)),
        Row("logits", (EB, ES, EV)),
        Row("loss/max", (EB, ES), partita=False),
        Row("loss/sumexp", (EB, ES), partita=False),
        Row("loss/lse", (EB, ES), partita=False),
        Row("loss/picked", (EB, ES), partita=False),
        Row("loss/token_loss", (EB, ES), partita=False),
        Row("loss", ()),
        Row("result:0", ()),
        Row("result:1", (EB, ES, EV)),
    ),
    build=_embedding_loss,
)

PROGRAMS = (MLP, ATTENTION, EMBEDDING_LOSS)
