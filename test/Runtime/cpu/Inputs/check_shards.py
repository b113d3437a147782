"""check_shards.py DIR: checks a sharded checkpoint independently of the
runtime: every tensor's shards tile its global shape exactly once (no
element missing, none written twice), every shard file has the size and
zlib CRC-32 the manifest gives and holds the shard's shape; prints the
number of shards each rank wrote."""
import os
import sys
import zlib

import numpy as np

root = sys.argv[1]
lines = open(os.path.join(root, "manifest.txt")).read().splitlines()
if lines[0] != "partita checkpoint 3":
    sys.exit("bad header")
shapes, counts, by_rank = {}, {}, {}
for line in lines[1:]:
    f = line.split()
    if f[0] == "tensor":
        shape = () if f[4] == "scalar" else tuple(int(d) for d in f[4].split("x"))
        shapes[f[1]] = shape
        counts[f[1]] = np.zeros(shape, dtype=np.int64)
    elif f[0] == "end":
        continue
    elif f[0] == "shard":
        name, file, offsets, shape, size, crc, rank = f[1:]
        offsets = () if offsets == "-" else tuple(int(d) for d in offsets.split(","))
        shape = () if shape == "-" else tuple(int(d) for d in shape.split(","))
        data = open(os.path.join(root, file), "rb").read()
        if len(data) != int(size) or "%08x" % zlib.crc32(data) != crc:
            sys.exit(f"{file}: size or CRC-32 differs from the manifest")
        if np.load(os.path.join(root, file)).shape != shape:
            sys.exit(f"{file}: shape differs from the manifest")
        region = tuple(slice(o, o + s) for o, s in zip(offsets, shape))
        counts[name][region] += 1
        by_rank[int(rank)] = by_rank.get(int(rank), 0) + 1
for name, c in counts.items():
    if not (c == 1).all():
        sys.exit(f"{name}: shards do not tile it exactly once")
print(f"{sum(by_rank.values())} shards tile {len(shapes)} tensors exactly once")
print("shards by rank: " + ", ".join(f"{r}: {n}" for r, n in sorted(by_rank.items())))
