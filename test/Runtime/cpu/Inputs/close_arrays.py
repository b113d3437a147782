"""close_arrays.py DIR_A DIR_B RTOL: every .npy of DIR_A is within RTOL of
DIR_B's (max |a - b| / max |b|, as partita run --check measures); prints how
many and the worst difference, and exits 1 beyond RTOL."""
import glob
import os
import sys

import numpy as np

rtol = float(sys.argv[3])
files = sorted(glob.glob(os.path.join(sys.argv[1], "*.npy")))
if not files:
    sys.exit("no .npy files in " + sys.argv[1])
worst = 0.0
for path in files:
    name = os.path.basename(path)
    a = np.load(path).astype(np.float64)
    b = np.load(os.path.join(sys.argv[2], name)).astype(np.float64)
    if a.shape != b.shape:
        sys.exit(f"{name}: shapes {a.shape} and {b.shape}")
    scale = np.max(np.abs(b)) if b.size else 0.0
    diff = np.max(np.abs(a - b)) if a.size else 0.0
    rel = diff / scale if scale > 0 else diff
    worst = max(worst, rel)
    if not rel <= rtol:
        sys.exit(f"{name} differs: {rel:.3e} > {rtol:g}")
print(f"{len(files)} arrays within {rtol:g} (worst {worst:.3e})")
