"""The GPT train step of `partita plan --train adamw --strategy dp` in PyTorch
DistributedDataParallel (gloo backend), timed.

N processes (torch.multiprocessing, one per rank, each with --threads intra-op
threads) train the GPT of `partita model gpt` in float32, in Partita's
layouts (q/k/v weights [H, n, d] with biases [n, d], wo [n, d, H], mlp
[H, F] and [F, H], untied lm_head [V, H], tanh GELU, causal attention with
scale 1/sqrt(d), mean cross-entropy), with torch.optim.AdamW. The global batch
--batch is split over the ranks as Partita's dp splits it (batch / N rows per
rank); each rank draws random token ids (the values do not change the work).
A step is zero_grad, forward, backward (DDP all-reduces the gradients in
buckets, overlapped with backward) and optimizer.step(); rank 0 times it.
--step-gate IN,OUT takes the steps in turns with another program
(bench/common/lockstep.py), as `partita run --step-gate` does: rank 0 reads
a line from file descriptor IN before each step (warm-up included) and
writes one to OUT after it; the other ranks wait at barriers.

  python3 torch_ddp.py --ranks N --threads T --steps K --warmup W --batch B \
      --seq S --hidden H --heads n --layers L --vocab V [--ffn F] \
      [--lr 1e-3 --weight-decay 0.01]
Prints one line per timed step ("step k: SECONDS s  loss L"), then a summary.
"""
import argparse
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "common"))
import fair  # noqa: E402
import lockstep  # noqa: E402


class GPT(nn.Module):
    def __init__(self, V, S, H, n, L, Fd):
        super().__init__()
        d = H // n

        def w(*shape):
            return nn.Parameter(torch.randn(*shape) * 0.02)

        def zeros(*shape):
            return nn.Parameter(torch.zeros(*shape))

        def ones(*shape):
            return nn.Parameter(torch.ones(*shape))

        self.wte, self.wpe = w(V, H), w(S, H)
        self.layers = nn.ModuleList()
        for _ in range(L):
            layer = nn.ParameterDict(dict(
                ln1_g=ones(H), ln1_b=zeros(H),
                wq=w(H, n, d), wk=w(H, n, d), wv=w(H, n, d),
                bq=zeros(n, d), bk=zeros(n, d), bv=zeros(n, d),
                wo=w(n, d, H), bo=zeros(H), ln2_g=ones(H), ln2_b=zeros(H),
                w1=w(H, Fd), b1=zeros(Fd), w2=w(Fd, H), b2=zeros(H)))
            self.layers.append(layer)
        self.lnf_g, self.lnf_b, self.lm_head = ones(H), zeros(H), w(V, H)
        # A plain attribute, not a buffer: DDP would broadcast it, and gloo
        # cannot broadcast bool tensors.
        self.mask = torch.ones(S, S, dtype=torch.bool).triu(1)

    # The forward in three parts, so that a pipeline (bench/pipeline) can
    # run them on different ranks.
    def embed(self, ids):
        return self.wte[ids] + self.wpe

    def block(self, l, x):
        H = x.shape[-1]
        d = l["wq"].shape[2]
        h = F.layer_norm(x, (H,), l["ln1_g"], l["ln1_b"], 1e-5)
        q = (torch.einsum("bsh,hnd->bsnd", h, l["wq"]) + l["bq"]).transpose(1, 2)
        k = (torch.einsum("bsh,hnd->bsnd", h, l["wk"]) + l["bk"]).transpose(1, 2)
        v = (torch.einsum("bsh,hnd->bsnd", h, l["wv"]) + l["bv"]).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(self.mask, float("-inf"))
        attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)
        x = x + torch.einsum("bsnd,ndh->bsh", attn, l["wo"]) + l["bo"]
        h = F.layer_norm(x, (H,), l["ln2_g"], l["ln2_b"], 1e-5)
        h = F.gelu(h @ l["w1"] + l["b1"], approximate="tanh")
        return x + h @ l["w2"] + l["b2"]

    def head(self, x, labels):
        B, S, H = x.shape
        x = F.layer_norm(x, (H,), self.lnf_g, self.lnf_b, 1e-5)
        logits = x @ self.lm_head.t()
        return F.cross_entropy(logits.reshape(B * S, -1), labels.reshape(B * S))

    def forward(self, ids, labels):
        x = self.embed(ids)
        for l in self.layers:
            x = self.block(l, x)
        return self.head(x, labels)


def worker(rank, a, store):
    if rank == 0:
        fair.setup_torch(torch, a.threads)  # prints the kernels it runs
    else:
        torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT(a.vocab, a.seq, a.hidden, a.heads, a.layers,
                a.ffn or 4 * a.hidden)
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=a.weight_decay)
    gen = torch.Generator().manual_seed(1000 + rank)
    local = a.batch // a.ranks
    times = []
    # The main process's descriptors, reopened through /proc: spawned ranks
    # do not inherit them.
    gate = lockstep.Gate(a.step_gate) if a.step_gate and rank == 0 else None
    for step in range(a.warmup + a.steps):
        if a.step_gate:
            if gate:
                gate.turn()
            dist.barrier()
        ids = torch.randint(0, a.vocab, (local, a.seq), generator=gen)
        labels = torch.randint(0, a.vocab, (local, a.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ddp(ids, labels)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if a.step_gate:
            dist.barrier()
            if gate:
                gate.done()
        if rank == 0 and step >= a.warmup:
            times.append(dt)
            print(f"step {step - a.warmup}: {dt:.6f} s  loss {loss.item():.4f}",
                  flush=True)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"torch {torch.__version__} DDP gloo: {a.ranks} ranks x "
              f"{torch.get_num_threads()} threads, {params} parameters, "
              f"batch {a.batch} ({local} per rank)", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("ranks", 2), ("threads", 1), ("steps", 10),
                          ("warmup", 2), ("batch", 8), ("seq", 64),
                          ("hidden", 128), ("heads", 4), ("layers", 2),
                          ("vocab", 256), ("ffn", 0)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--step-gate", metavar="IN,OUT")
    a = p.parse_args()
    if a.step_gate:
        fds = lockstep.Gate.parse(a.step_gate)
        if fds is None:
            p.error(f"--step-gate expects IN,OUT (two file descriptors), "
                    f"got '{a.step_gate}'")
        a.step_gate = [f"/proc/{os.getpid()}/fd/{f}" for f in fds]
    if a.batch % a.ranks:
        p.error(f"--batch {a.batch} is not divisible by --ranks {a.ranks}")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a, os.path.join(tmp, "store")), nprocs=a.ranks,
                 join=True)


if __name__ == "__main__":
    main()
