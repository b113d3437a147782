"""The GPT forward step of `partita model gpt` in PyTorch, timed.

Same computation as the nn IR the model command writes: token embedding plus
learned positions, pre-LN blocks (layer_norm, q/k/v projections with biases,
causal multi-head attention, output projection, residual; layer_norm,
w1 + b1, tanh-GELU, w2 + b2, residual), a final layer_norm, an untied LM head
(logits = x @ lm_head^T) and mean cross-entropy. Weights are random (the
numerics need not match Partita's, only the work). Forward only, under
torch.no_grad(), float32.

  python3 torch_gpt.py --threads T --steps N --warmup W --batch B --seq S \
      --hidden H --heads n --layers L --vocab V [--ffn F] [--step-gate IN,OUT]
Prints one line per timed step ("step k: SECONDS s") like `partita run`.
--step-gate takes every step (warm-up included) in turns with another
program, as `partita run --step-gate` does (bench/common/lockstep.py).
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
import fair  # noqa: E402
import lockstep  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    for name, default in [("threads", 1), ("steps", 10), ("warmup", 2),
                          ("batch", 4), ("seq", 128), ("hidden", 256),
                          ("heads", 4), ("layers", 2), ("vocab", 1024),
                          ("ffn", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--step-gate", metavar="IN,OUT")
    a = p.parse_args()
    gate = lockstep.Gate.from_option(p, a.step_gate)
    fair.setup_torch(torch, a.threads)
    torch.manual_seed(0)
    B, S, H, n, V = a.batch, a.seq, a.hidden, a.heads, a.vocab
    d, Fd = H // n, a.ffn or 4 * H

    def w(*shape):
        return torch.randn(*shape) * 0.02

    wte, wpe = w(V, H), w(S, H)
    layers = []
    for _ in range(a.layers):
        layers.append(dict(
            ln1_g=torch.ones(H), ln1_b=torch.zeros(H),
            wq=w(H, H), wk=w(H, H), wv=w(H, H),
            bq=torch.zeros(H), bk=torch.zeros(H), bv=torch.zeros(H),
            wo=w(H, H), bo=torch.zeros(H),
            ln2_g=torch.ones(H), ln2_b=torch.zeros(H),
            w1=w(H, Fd), b1=torch.zeros(Fd), w2=w(Fd, H), b2=torch.zeros(H)))
    lnf_g, lnf_b, lm_head = torch.ones(H), torch.zeros(H), w(V, H)
    ids = torch.randint(0, V, (B, S))
    labels = torch.randint(0, V, (B, S))
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)

    def forward():
        x = wte[ids] + wpe
        for l in layers:
            h = F.layer_norm(x, (H,), l["ln1_g"], l["ln1_b"], 1e-5)
            q = (h @ l["wq"] + l["bq"]).view(B, S, n, d).transpose(1, 2)
            k = (h @ l["wk"] + l["bk"]).view(B, S, n, d).transpose(1, 2)
            v = (h @ l["wv"] + l["bv"]).view(B, S, n, d).transpose(1, 2)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
            scores = scores.masked_fill(mask, float("-inf"))
            attn = torch.softmax(scores, dim=-1) @ v
            attn = attn.transpose(1, 2).reshape(B, S, H)
            x = x + (attn @ l["wo"] + l["bo"])
            h = F.layer_norm(x, (H,), l["ln2_g"], l["ln2_b"], 1e-5)
            h = F.gelu(h @ l["w1"] + l["b1"], approximate="tanh")
            x = x + (h @ l["w2"] + l["b2"])
        x = F.layer_norm(x, (H,), lnf_g, lnf_b, 1e-5)
        logits = x @ lm_head.t()
        loss = F.cross_entropy(logits.view(B * S, V), labels.view(B * S))
        return loss, logits

    with torch.no_grad():
        for step in range(a.warmup + a.steps):
            if gate:
                gate.turn()
            t0 = time.perf_counter()
            loss, _ = forward()
            dt = time.perf_counter() - t0
            if gate:
                gate.done()
            if step >= a.warmup:
                print(f"step {step - a.warmup}: {dt:.6f} s")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
