"""The AdamW train step of `partita model gpt` in PyTorch on a CUDA GPU, timed.

The peer of `partita-run PLAN --backend cuda` in bench/gpu-gpt/run.sh: the same
computation as the nn IR `partita model gpt` writes (token embedding plus
learned positions; pre-LN blocks: layer_norm, q/k/v projections with biases,
causal multi-head attention, output projection, residual, layer_norm,
w1 + b1, tanh-GELU, w2 + b2, residual; a final layer_norm; an untied LM head;
mean cross-entropy), its gradient and one AdamW update per step
(torch.optim.AdamW, foreach, lr 1e-3, weight decay 0.01), in float32.

  python3 torch_train.py [--tf32] [--attention manual|sdpa] [--steps N]
      [--warmup W] [--batch B] [--seq S] [--hidden H] [--heads n]
      [--layers L] [--vocab V] [--profile] [--device cuda|cpu]

--tf32 lets cuBLAS (and cuDNN) use TF32 for float32 matrix products
(torch.backends.cuda.matmul.allow_tf32); without it they are exact float32.
--attention manual (default) computes scores, mask, softmax and the value
product as separate kernels, as Partita's plan describes the work;
sdpa uses F.scaled_dot_product_attention (a fused kernel).
Prints one line per timed step ("step k: SECONDS s", each step ended by
torch.cuda.synchronize) and a final "median: SECONDS s".
--profile then runs 2 more steps under torch.profiler and prints, after a
line "torch profile ...", the 25 operators with the most GPU time (self
time, per step): the peer of `partita-run --profile`; then, after "torch
matrix products ...", each matrix product (mm, addmm, bmm) by operand shapes
with its GPU time and TFLOP/s: the peer of `--profile-einsums`.
--device cpu runs the same on the CPU (to try the script on a small model
where there is no GPU; times are then CPU times).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    for name, default in [("steps", 10), ("warmup", 3), ("batch", 16),
                          ("seq", 1024), ("hidden", 768), ("heads", 12),
                          ("layers", 12), ("vocab", 50304)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--attention", choices=["manual", "sdpa"], default="manual")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cuda = a.device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    B, S, H, n, V = a.batch, a.seq, a.hidden, a.heads, a.vocab
    d, Fd = H // n, 4 * H

    params = []

    def w(*shape, scale=0.02):
        t = (torch.randn(*shape, device=dev) * scale).requires_grad_()
        params.append(t)
        return t

    def ones(m):
        t = torch.ones(m, device=dev, requires_grad=True)
        params.append(t)
        return t

    def zeros(m):
        t = torch.zeros(m, device=dev, requires_grad=True)
        params.append(t)
        return t

    wte, wpe = w(V, H), w(S, H)
    layers = [dict(ln1_g=ones(H), ln1_b=zeros(H), wq=w(H, H), wk=w(H, H),
                   wv=w(H, H), bq=zeros(H), bk=zeros(H), bv=zeros(H),
                   wo=w(H, H), bo=zeros(H), ln2_g=ones(H), ln2_b=zeros(H),
                   w1=w(H, Fd), b1=zeros(Fd), w2=w(Fd, H), b2=zeros(H))
              for _ in range(a.layers)]
    lnf_g, lnf_b, lm_head = ones(H), zeros(H), w(V, H)
    ids = torch.randint(0, V, (B, S), device=dev)
    labels = torch.randint(0, V, (B, S), device=dev)
    mask = torch.ones(S, S, dtype=torch.bool, device=dev).triu(1)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)

    def attention(q, k, v):
        if a.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    def step():
        x = wte[ids] + wpe
        for l in layers:
            h = F.layer_norm(x, (H,), l["ln1_g"], l["ln1_b"], 1e-5)
            q = (h @ l["wq"] + l["bq"]).view(B, S, n, d).transpose(1, 2)
            k = (h @ l["wk"] + l["bk"]).view(B, S, n, d).transpose(1, 2)
            v = (h @ l["wv"] + l["bv"]).view(B, S, n, d).transpose(1, 2)
            o = attention(q, k, v).transpose(1, 2).reshape(B, S, H)
            x = x + (o @ l["wo"] + l["bo"])
            h = F.layer_norm(x, (H,), l["ln2_g"], l["ln2_b"], 1e-5)
            h = F.gelu(h @ l["w1"] + l["b1"], approximate="tanh")
            x = x + (h @ l["w2"] + l["b2"])
        x = F.layer_norm(x, (H,), lnf_g, lnf_b, 1e-5)
        logits = x @ lm_head.t()
        loss = F.cross_entropy(logits.view(B * S, V), labels.view(B * S))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.steps):
        sync()
        start = time.perf_counter()
        loss = step()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - start)
            print(f"step {i - a.warmup}: {times[-1]:.6f} s loss {loss.item():.4f}",
                  flush=True)
    if cuda:
        print(f"device: {torch.cuda.get_device_name()}, torch "
              f"{torch.__version__}, tf32 {a.tf32}, attention {a.attention}, "
              f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    else:
        print(f"device: cpu, torch {torch.__version__}, attention {a.attention}")
    print(f"median: {statistics.median(times):.6f} s")
    if a.profile:
        profile(step, sync, cuda)


def profile(step, sync, cuda, steps=2):
    """The GPU time of each operator over `steps` steps, per step, largest
    first, then of each matrix product by operand shapes; a failure of the
    profiler is printed, not raised (the timing above stands)."""
    try:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile
        activities = [ProfilerActivity.CPU]
        if cuda:
            activities.append(ProfilerActivity.CUDA)
        with torch_profile(activities=activities, record_shapes=True) as prof:
            for _ in range(steps):
                step()
            sync()

        def device_us(e, self_time):
            names = (["self_device_time_total", "self_cuda_time_total"]
                     if self_time else
                     ["device_time_total", "cuda_time_total"])
            if not cuda:
                names = ["self_cpu_time_total" if self_time
                         else "cpu_time_total"]
            for name in names:
                if hasattr(e, name):
                    return getattr(e, name)
            return 0

        rows = []
        for e in prof.key_averages():
            us = device_us(e, True)
            if us > 0:
                rows.append((us / steps, e.count / steps, e.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        where = "GPU" if cuda else "CPU"
        print(f"torch profile, per step (mean of {steps}), self {where} time, "
              f"largest first:")
        for us, calls, key in rows[:25]:
            print(f"  {key[:60]:60s} {calls:7.1f} calls {us / 1e3:10.3f} ms "
                  f"{100 * us / total:5.1f}%")
        print(f"  {'sum':60s} {'':13s} {total / 1e3:10.3f} ms")
        products = []
        for e in prof.key_averages(group_by_input_shape=True):
            flops = matmul_flops(e.key, e.input_shapes)
            us = device_us(e, False)
            if flops and us > 0:
                products.append((us / steps, e.count / steps, e.key,
                                 e.input_shapes, flops))
        products.sort(reverse=True)
        print(f"torch matrix products, per step (mean of {steps}), {where} "
              f"time by operand shapes, largest first:")
        for us, calls, key, shapes, flops in products:
            label = f"{key[6:]} {' '.join(str(s) for s in shapes if s)}"
            print(f"  {label[:60]:60s} {calls:7.1f} calls {us / 1e3:10.3f} ms "
                  f"{flops * calls / us / 1e6:8.2f} TFLOP/s")
        print(f"  {'sum':60s} {'':13s} "
              f"{sum(p[0] for p in products) / 1e3:10.3f} ms")
    except Exception as e:  # noqa: BLE001 - report, keep the timing
        print(f"torch profile failed: {type(e).__name__}: {e}")


def matmul_flops(key, shapes):
    """FLOPs of one call of a matrix product op (2 M N K per product), from
    its operand shapes; 0 for any other op."""
    if key in ("aten::mm", "aten::bmm") and len(shapes) >= 2:
        a, b = shapes[0], shapes[1]
    elif key in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3:
        a, b = shapes[1], shapes[2]
    else:
        return 0
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return 0
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


if __name__ == "__main__":
    main()
