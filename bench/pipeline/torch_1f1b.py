"""A pipelined GPT train step in PyTorch: 1F1B over torch.distributed
point-to-point (gloo), timed; the peer of `partita plan --pp P --schedule
1f1b` in bench/pipeline/run.sh. Debian's torch 1.13 has no pipelining
module, so the schedule is written here as Megatron-LM's non-interleaved
1F1B (Narayanan et al. 2021): rank r runs min(P - r - 1, m) warm-up
forwards, then one forward and one backward in turn, then the remaining
backwards. Activations go forward and their gradients back with isend
(waited on at the end of the step, as Megatron's batched sends) and a
blocking recv.

The model is bench/train-vs-ddp's GPT (Partita's layouts), its layers split
evenly over the ranks as `partita plan --pp P --stages-by layers` splits
them: rank 0 also holds the embeddings, the last rank the final norm, the
LM head and the loss. Each microbatch's loss is its mean over its tokens
divided by m (the whole batch's mean, as Partita normalizes it once); the
gradients accumulate over the m microbatches and torch.optim.AdamW steps
once per step on every rank.

  python3 torch_1f1b.py --ranks P --microbatches m --threads T --steps K \\
      --warmup W --batch B --seq S --hidden H --heads n --layers L --vocab V
Prints one line per timed step of rank 0 ("step k: SECONDS s  loss L", the
loss on the last rank's line is the step's), then a summary.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "common"))
sys.path.insert(0, os.path.join(here, "..", "train-vs-ddp"))
import fair  # noqa: E402
from torch_ddp import GPT  # noqa: E402


def worker(rank, a, store):
    if rank == 0:
        fair.setup_torch(torch, a.threads)  # prints the kernels it runs
    else:
        torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.ranks)
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.hidden, a.heads, a.layers, 4 * a.hidden)
    P, m = a.ranks, a.microbatches
    first, last = rank == 0, rank == P - 1
    per = a.layers // P
    layers = list(model.layers)[rank * per:(rank + 1) * per]
    params = [p for l in layers for p in l.values()]
    if first:
        params += [model.wte, model.wpe]
    if last:
        params += [model.lnf_g, model.lnf_b, model.lm_head]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=a.weight_decay)
    mb = a.batch // m
    shape = (mb, a.seq, a.hidden)
    gen = torch.Generator().manual_seed(1000)

    def stage_forward(x, ids, labels):
        if first:
            x = model.embed(ids)
        for l in layers:
            x = model.block(l, x)
        return model.head(x, labels) / m if last else x

    times = []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        labels = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        inputs, outputs, sends = {}, {}, []
        loss_sum = 0.0

        def forward(i):
            nonlocal loss_sum
            x = None
            if not first:
                x = torch.empty(shape)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            out = stage_forward(x, ids[i * mb:(i + 1) * mb],
                                labels[i * mb:(i + 1) * mb])
            inputs[i], outputs[i] = x, out
            if last:
                loss_sum += out.item()
            else:
                sends.append(dist.isend(out.detach(), rank + 1))

        def backward(i):
            x, out = inputs.pop(i), outputs.pop(i)
            if last:
                out.backward()
            else:
                grad = torch.empty(shape)
                dist.recv(grad, rank + 1)
                out.backward(grad)
            if not first:
                sends.append(dist.isend(x.grad, rank - 1))

        warmup = min(P - rank - 1, m)
        for i in range(warmup):
            forward(i)
        for i in range(m - warmup):
            forward(warmup + i)
            backward(i)
        for i in range(m - warmup, m):
            backward(i)
        for s in sends:
            s.wait()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup and (rank == 0 or last):
            if rank == 0:
                times.append(dt)
            tag = "step" if rank == 0 else "loss of step"
            print(f"{tag} {step - a.warmup}: {dt:.6f} s  loss {loss_sum:.4f}",
                  flush=True)
    if rank == 0:
        total = sum(p.numel() for p in model.parameters())
        print(f"torch {torch.__version__} 1F1B gloo: {P} ranks x "
              f"{torch.get_num_threads()} threads, {total} parameters, batch "
              f"{a.batch} in {m} microbatches", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("ranks", 2), ("microbatches", 4), ("threads", 1),
                          ("steps", 10), ("warmup", 2), ("batch", 8),
                          ("seq", 64), ("hidden", 128), ("heads", 4),
                          ("layers", 2), ("vocab", 256)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    a = p.parse_args()
    if a.batch % a.microbatches or a.layers % a.ranks:
        p.error("--batch must divide by --microbatches and --layers by --ranks")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a, os.path.join(tmp, "store")), nprocs=a.ranks,
                 join=True)


if __name__ == "__main__":
    main()
