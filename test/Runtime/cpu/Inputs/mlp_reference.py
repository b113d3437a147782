"""An independent pure-Python reference of `partita model mlp` for the runtime tests.

`inputs DIR`: writes DIR/x.npy and DIR/labels.npy.
`check DIR ...`: rebuilds the parameters from the plan's counter-based
initializer (re-implemented here from its definition in
runtime/plan/plan.proto and Executor.cpp: splitmix64 of the seed xor the
FNV-1a hash of the name, then of the key plus twice the element index;
Box-Muller for the normal), runs the MLP forward pass in double precision, and
compares with DIR/out/loss.npy and DIR/out/logits.npy. Pure Python (no
NumPy), so it runs with the Python that runs lit.
"""
import argparse
import ast
import math
import random
import struct
import sys

M = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & M
    return h


def unit(r):
    return ((r >> 11) + 0.5) * 2.0**-53


def param(seed, name, shape, std):
    """The parameter as a flat row-major list of float32-rounded values."""
    key = splitmix64(seed ^ fnv1a64(name))
    n = math.prod(shape)
    values = []
    for i in range(n):
        u1 = unit(splitmix64((key + 2 * i) & M))
        u2 = unit(splitmix64((key + 2 * i + 1) & M))
        v = std * math.sqrt(-2.0 * math.log(u1)) * math.cos(2 * math.pi * u2)
        values.append(struct.unpack("<f", struct.pack("<f", v))[0])
    return values


def write_npy(path, descr, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join(f"{d}," for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    fmt = {"<f4": "f", "<i4": "i"}[descr]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode() + struct.pack("<%d%s" % (len(values), fmt), *values))


def read_npy(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY" and data[6] == 1
    n = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + n].decode())
    fmt = {"<f4": "f", "<i4": "i"}[header["descr"]]
    count = math.prod(header["shape"])
    return list(struct.unpack("<%d%s" % (count, fmt), data[10 + n:]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["inputs", "check"])
    parser.add_argument("dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=32)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--std", type=float, default=0.02)
    args = parser.parse_args()
    B, H, F, V = args.batch, args.hidden, args.ffn, args.classes
    if args.mode == "inputs":
        rng = random.Random(1234)
        write_npy(f"{args.dir}/x.npy", "<f4", (B, H),
                  [rng.uniform(-2, 2) for _ in range(B * H)])
        write_npy(f"{args.dir}/labels.npy", "<i4", (B,),
                  [rng.randrange(V) for _ in range(B)])
        return 0
    flat = read_npy(f"{args.dir}/x.npy")
    x = [flat[b * H:(b + 1) * H] for b in range(B)]
    labels = read_npy(f"{args.dir}/labels.npy")
    p = lambda name, shape: param(args.seed, name, shape, args.std)

    def affine(rows, w, bias, n_in, n_out):
        return [[sum(r[k] * w[k * n_out + j] for k in range(n_in)) + bias[j]
                 for j in range(n_out)] for r in rows]

    for i in range(args.layers):
        h = affine(x, p(f"layers.{i}.w1", (H, F)), p(f"layers.{i}.b1", (F,)), H, F)
        h = [[max(v, 0.0) for v in r] for r in h]
        y = affine(h, p(f"layers.{i}.w2", (F, H)), p(f"layers.{i}.b2", (H,)), F, H)
        x = [[a + b for a, b in zip(r, s)] for r, s in zip(x, y)]
    logits = affine(x, p("head.w", (H, V)), p("head.b", (V,)), H, V)
    loss = 0.0
    for row, label in zip(logits, labels):
        top = max(row)
        lse = math.log(sum(math.exp(v - top) for v in row)) + top
        loss += (lse - row[label]) / B

    got_loss = read_npy(f"{args.dir}/out/loss.npy")[0]
    got_logits = read_npy(f"{args.dir}/out/logits.npy")
    want_logits = [v for r in logits for v in r]
    scale = max(abs(v) for v in want_logits)
    logits_err = max(abs(a - b) for a, b in zip(got_logits, want_logits)) / scale
    loss_err = abs(got_loss - loss) / abs(loss)
    print(f"reference loss {loss:.6f}, partita {got_loss:.6f}")
    ok = logits_err < 1e-5 and loss_err < 1e-5
    print(f"logits rel err {logits_err:.2e}, loss rel err {loss_err:.2e}: "
          + ("MATCH" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
