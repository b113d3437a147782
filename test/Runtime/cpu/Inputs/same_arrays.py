"""same_arrays.py DIR_A DIR_B: every .npy of DIR_A equals DIR_B's, bit for
bit; prints how many."""
import glob
import os
import sys

import numpy as np

files = sorted(glob.glob(os.path.join(sys.argv[1], "*.npy")))
if not files:
    sys.exit("no .npy files in " + sys.argv[1])
for path in files:
    a = np.load(path)
    b = np.load(os.path.join(sys.argv[2], os.path.basename(path)))
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
        sys.exit(f"{os.path.basename(path)} differs")
print(f"{len(files)} arrays identical")
