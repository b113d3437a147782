"""Independent checks of `partita run --steps` for train-sgd-step.test.

`batch DATA DIR B S`: writes DIR/ids.npy and DIR/labels.npy, the first batch
    `partita run` trains on: rows are windows w = 0..B-1 of S + 1 bytes of
    DATA starting at byte w * (S + 1); ids are a window's first S bytes,
    labels its last S.
`check MODEL P0 P1 GRADS LR`: reads every parameter (names in MODEL's
    argument order) before (P0/<name>.npy) and after (P1/<name>.npy) one
    plain SGD step, and its gradient at P0 (GRADS/<name>.npy, or
    GRADS/result<i>.npy by position, the loss being result 0), and checks
    p1 == p0 - LR * g elementwise (float32 arithmetic: within 1e-6 of the
    parameter's scale). Prints MATCH or MISMATCH per parameter.
Pure Python (no numpy).
"""
import ast
import os
import re
import struct
import sys


def write_npy(path, shape, values):
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%s), }" % (
        "".join("%d, " % d for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode())
        f.write(struct.pack("<%di" % len(values), *values))


def read_npy(path):
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    if data[6] == 1:
        (length,), start = struct.unpack("<H", data[8:10]), 10
    else:
        (length,), start = struct.unpack("<I", data[8:12]), 12
    header = ast.literal_eval(data[start:start + length].decode())
    assert header["descr"] == "<f4", (path, header)
    body = data[start + length:]
    return list(struct.unpack("<%df" % (len(body) // 4), body))


def batch(data_path, out, b, s):
    data = open(data_path, "rb").read()
    ids, labels = [], []
    for w in range(b):
        window = data[w * (s + 1):w * (s + 1) + s + 1]
        ids += list(window[:-1])
        labels += list(window[1:])
    write_npy(os.path.join(out, "ids.npy"), (b, s), ids)
    write_npy(os.path.join(out, "labels.npy"), (b, s), labels)


def check(model, p0_dir, p1_dir, grads_dir, lr):
    text = open(model).read()
    names = re.findall(r'nn\.param = "([^"]+)"', text)
    ok = True
    for i, name in enumerate(names):
        p0 = read_npy(os.path.join(p0_dir, name + ".npy"))
        p1 = read_npy(os.path.join(p1_dir, name + ".npy"))
        # partita plan --train none names each gradient "<param>.grad".
        gpath = os.path.join(grads_dir, name + ".grad.npy")
        g = read_npy(gpath)
        scale = max(1.0, max(abs(x) for x in p0))
        diff = max(abs(b - (a - lr * d)) for a, b, d in zip(p0, p1, g))
        good = len(p0) == len(p1) == len(g) and diff <= 1e-6 * scale
        ok &= good
        print("param %s: %d elements, max |p1 - (p0 - lr g)| %.3e: %s"
              % (name, len(p0), diff, "MATCH" if good else "MISMATCH"))
    print("all %d parameters match" % len(names) if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1] == "batch":
        batch(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(check(*sys.argv[2:6], float(sys.argv[6])))
