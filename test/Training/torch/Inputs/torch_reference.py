"""PyTorch reference for `partita model gpt|llama`: loss, logits and every
parameter's gradient in float64, compared with what Partita computed.

The model is rebuilt from the nn IR that `partita model` writes: parameter
names, order and shapes come from @forward's signature, the sizes (batch, seq,
heads, kv heads, head dim, ffn, vocab, layers, tied or not) from those shapes,
and eps / theta from the IR. The semantics are dialects/nn/README.md's:
  gpt:   token embedding + learned positions; pre-LN blocks (layer_norm,
         q/k/v = h . w[H,n,d] + b[n,d], causal attention with scale
         1/sqrt(d), o = attn . wo[n,d,H] + bo, residual; layer_norm,
         w1 + b1, tanh-GELU, w2 + b2, residual); final layer_norm; logits
         x . lm_head^T (or wte^T when tied); mean cross-entropy.
  llama: token embedding; rms_norm blocks; q [H,n,d], k/v [H,k,d] without
         biases, interleaved-pair rotary on q and k (angle
         p * theta^(-2i/d)), grouped-query causal attention (query head h
         uses kv head h // (n/k)), wo; rms_norm, silu(h.w1) * (h.w3), w2;
         final rms_norm; lm_head.
Everything runs in float64 from the float32 values Partita used (exact), so
the differences printed are Partita's float32 rounding (or its bugs).

  torch_reference.py inputs MODEL.mlir DIR [--seed N] [--only-inputs]
      Writes random parameters (DIR/<name>.npy, float32) and ids / labels
      (int32), and DIR/inputs.rsp, a response file for `partita run @FILE`
      holding --inputs= and the .npy paths in @forward's argument order (for
      a model whose parameters were made inputs), or with --only-inputs just
      the ids and labels.
  torch_reference.py check MODEL.mlir --params DIR --ids F --labels F
                     --outputs DIR [--grads] [--rtol R]
      Compares DIR/loss.npy (and DIR/logits.npy when present) and with
      --grads each parameter's gradient (DIR/<name>.grad.npy, the result named
      after nn.grad, or DIR/result<i>.npy by position when results are unnamed)
      with PyTorch's; prints one line per tensor, "max abs diff A, max rel
      diff R (ok|FAILED)" with A = max|a - b|, R = A / max|b|, and exits 1
      unless every A <= rtol * max|b| + atol (--rtol 1e-4, --atol 1e-9: the
      absolute part covers gradients that are exactly zero in float64, such
      as the key biases', which softmax ignores, where float32 leaves ~1e-11).
"""
import argparse
import math
import os
import re
import sys

import numpy as np

torch = F = None  # imported by `check` only: `inputs` needs no PyTorch

ARG_RE = re.compile(
    r'%[\w.]+: tensor<([0-9x]*?)x?(f32|i32|i64)> \{nn\.(param|input) = "([^"]+)"\}')


def parse_model(path):
    text = open(path).read()
    sig = text[text.index("func.func @forward"):]
    sig = sig[:sig.index("{\n")]
    args = []
    for dims, dtype, role, name in ARG_RE.findall(sig):
        shape = tuple(int(s) for s in dims.split("x")) if dims else ()
        args.append(dict(name=name, shape=shape, dtype=dtype, role=role))
    if not args:
        sys.exit(f"{path}: no @forward arguments with nn.param / nn.input")
    eps = re.search(r"eps = ([0-9.e+-]+)", text)
    theta = re.search(r"theta = ([0-9.e+-]+)", text)
    return dict(args=args, eps=float(eps.group(1)) if eps else 1e-5,
                theta=float(theta.group(1)) if theta else 1e4,
                arch="llama" if "nn.rms_norm" in text else "gpt")


def layer_count(names):
    return len({int(m.group(1)) for n in names
                for m in [re.match(r"layers\.(\d+)\.", n)] if m})


def forward(model, P, ids, labels):
    """loss, logits of the model on parameters P (name -> f64 tensor)."""
    eps, arch = model["eps"], model["arch"]
    B, S = ids.shape
    L = layer_count(P)
    x = P["wte"][ids]
    if arch == "gpt":
        x = x + P["wpe"]
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)

    def attention(q, k, v):
        # q [B,S,n,d], k/v [B,S,kv,d] -> [B,S,n,d]
        n, kv, d = q.shape[2], k.shape[2], q.shape[3]
        k = k.repeat_interleave(n // kv, dim=2)
        v = v.repeat_interleave(n // kv, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(mask, float("-inf"))
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)

    def rms_norm(t, gamma):
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * gamma

    def rotary(t):
        # interleaved pairs (2i, 2i+1) at position p rotated by p*theta^(-2i/d)
        d = t.shape[-1]
        i = torch.arange(d // 2, dtype=torch.float64)
        angle = (torch.arange(t.shape[1], dtype=torch.float64)[:, None]
                 * model["theta"] ** (-2 * i / d))  # [S, d/2]
        cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
        a, b = t[..., 0::2], t[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos),
                           dim=-1).flatten(-2)

    for i in range(L):
        p = lambda n: P[f"layers.{i}.{n}"]
        if arch == "gpt":
            H = x.shape[-1]
            h = F.layer_norm(x, (H,), p("ln1.gamma"), p("ln1.beta"), eps)
            q = torch.einsum("bsh,hnd->bsnd", h, p("attn.wq")) + p("attn.bq")
            k = torch.einsum("bsh,hnd->bsnd", h, p("attn.wk")) + p("attn.bk")
            v = torch.einsum("bsh,hnd->bsnd", h, p("attn.wv")) + p("attn.bv")
            a = attention(q, k, v)
            x = x + torch.einsum("bsnd,ndh->bsh", a, p("attn.wo")) + p("attn.bo")
            h = F.layer_norm(x, (H,), p("ln2.gamma"), p("ln2.beta"), eps)
            h = F.gelu(h @ p("mlp.w1") + p("mlp.b1"), approximate="tanh")
            x = x + h @ p("mlp.w2") + p("mlp.b2")
        else:
            h = rms_norm(x, p("attn_norm.gamma"))
            q = rotary(torch.einsum("bsh,hnd->bsnd", h, p("attn.wq")))
            k = rotary(torch.einsum("bsh,hnd->bsnd", h, p("attn.wk")))
            v = torch.einsum("bsh,hnd->bsnd", h, p("attn.wv"))
            x = x + torch.einsum("bsnd,ndh->bsh", attention(q, k, v),
                                 p("attn.wo"))
            h = rms_norm(x, p("mlp_norm.gamma"))
            x = x + (F.silu(h @ p("mlp.w1")) * (h @ p("mlp.w3"))) @ p("mlp.w2")
    if arch == "gpt":
        x = F.layer_norm(x, (x.shape[-1],), P["ln_f.gamma"], P["ln_f.beta"], eps)
    else:
        x = rms_norm(x, P["norm_f.gamma"])
    head = P["lm_head"] if "lm_head" in P else P["wte"]
    logits = x @ head.t()
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    return loss, logits


def write_inputs(a):
    model = parse_model(a.model)
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    vocab = next(x["shape"][0] for x in model["args"] if x["name"] == "wte")
    paths = []
    for arg in model["args"]:
        name, shape = arg["name"], arg["shape"]
        if arg["dtype"] != "f32":
            value = rng.integers(0, vocab, size=shape).astype(np.int32)
        elif name.endswith(".gamma"):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".beta") or re.search(r"\.b\w*$", name):
            value = 0.05 * rng.standard_normal(shape)
        else:
            value = 0.1 * rng.standard_normal(shape)
        path = os.path.join(a.dir, name + ".npy")
        np.save(path, np.asarray(value, dtype=value.dtype if arg["dtype"] != "f32"
                                 else np.float32))
        if not a.only_inputs or arg["role"] == "input":
            paths.append(path)
    with open(os.path.join(a.dir, "inputs.rsp"), "w") as f:
        f.write("--inputs=" + ",".join(paths) + "\n")


def compare(what, got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    want = want.detach().numpy()
    if got.shape != want.shape:
        print(f"{what}: shape {list(got.shape)}, PyTorch's {list(want.shape)} (FAILED)")
        return False
    diff = np.abs(got - want)
    max_abs = float(diff.max()) if diff.size else 0.0
    ref = float(np.abs(want).max()) if want.size else 0.0
    rel = 0.0 if max_abs == 0 else (math.inf if ref == 0 or math.isnan(max_abs)
                                     else max_abs / ref)
    ok = max_abs <= rtol * ref + atol
    print(f"{what}: max abs diff {max_abs:.3e}, max rel diff {rel:.3e} "
          f"({'ok' if ok else 'FAILED'})")
    return ok


def check(a):
    global torch, F
    import torch
    import torch.nn.functional as F
    torch.set_default_dtype(torch.float64)
    model = parse_model(a.model)
    params = [x["name"] for x in model["args"] if x["role"] == "param"]
    P = {}
    for name in params:
        path = os.path.join(a.params, name + ".npy")
        if not os.path.exists(path):
            sys.exit(f"missing parameter file {path}")
        P[name] = torch.from_numpy(
            np.load(path).astype(np.float64)).requires_grad_(True)
    ids = torch.from_numpy(np.load(a.ids).astype(np.int64))
    labels = torch.from_numpy(np.load(a.labels).astype(np.int64))
    loss, logits = forward(model, P, ids, labels)
    loss.backward()
    ok = compare("loss", np.load(os.path.join(a.outputs, "loss.npy")), loss,
                 a.rtol, a.atol)
    logits_path = os.path.join(a.outputs, "logits.npy")
    if os.path.exists(logits_path):
        ok &= compare("logits", np.load(logits_path), logits, a.rtol, a.atol)
    if a.grads:
        # The plan names each gradient result "<param>.grad" (from nn.grad);
        # a plan whose results carry no names has them written as
        # result<i>.npy, i the result's position (loss first, then the
        # gradients in parameter order).
        by_name = all(os.path.exists(os.path.join(a.outputs, n + ".grad.npy"))
                      for n in params)
        for i, name in enumerate(params):
            file = name + ".grad.npy" if by_name else f"result{i + 1}.npy"
            path = os.path.join(a.outputs, file)
            if not os.path.exists(path):
                print(f"grad {name}: no {path} (FAILED)")
                ok = False
                continue
            ok &= compare(f"grad {name}", np.load(path), P[name].grad, a.rtol,
                          a.atol)
        print(f"checked {len(params)} gradients, read "
              f"{'by name' if by_name else 'by position'}")
    print(f"torch {torch.__version__}: {'all ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    i = sub.add_parser("inputs")
    i.add_argument("model")
    i.add_argument("dir")
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--only-inputs", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("model")
    for name in ("params", "ids", "labels", "outputs"):
        c.add_argument("--" + name, required=True)
    c.add_argument("--grads", action="store_true")
    c.add_argument("--rtol", type=float, default=1e-4)
    c.add_argument("--atol", type=float, default=1e-9)
    a = p.parse_args()
    if a.mode == "inputs":
        write_inputs(a)
        return 0
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
