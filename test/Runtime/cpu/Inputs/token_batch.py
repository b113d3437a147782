"""token_batch.py DATA STEP BATCH SEQ OUTDIR: writes step STEP's (from 0)
ids and labels as OUTDIR/ids.npy and OUTDIR/labels.npy (i32), from the
window rule in docs/user-guide.md (byte tokens), written independently of
the runtime's TokenData."""
import os
import sys

import numpy as np

data = np.frombuffer(open(sys.argv[1], "rb").read(), dtype=np.uint8)
step, batch, seq = (int(a) for a in sys.argv[2:5])
n = len(data)
ids = np.zeros((batch, seq), dtype=np.int32)
labels = np.zeros((batch, seq), dtype=np.int32)
for row in range(batch):
    start = ((step * batch + row) % n) * (seq + 1) % n
    window = [data[(start + j) % n] for j in range(seq + 1)]
    ids[row] = window[:seq]
    labels[row] = window[1:]
os.makedirs(sys.argv[5], exist_ok=True)
np.save(os.path.join(sys.argv[5], "ids.npy"), ids)
np.save(os.path.join(sys.argv[5], "labels.npy"), labels)
