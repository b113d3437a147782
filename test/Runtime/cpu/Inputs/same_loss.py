"""same_loss.py A.npy B.npy RTOL: two scalar losses agree within RTOL
(relative); prints both."""
import sys

import numpy as np

a, b = float(np.load(sys.argv[1])), float(np.load(sys.argv[2]))
rel = abs(a - b) / abs(b)
print(f"losses {a:.7f} and {b:.7f}, rel diff {'within' if rel <= float(sys.argv[3]) else 'BEYOND'} {sys.argv[3]}")
