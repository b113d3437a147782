#!/usr/bin/env python3
# Checks a checkpoint saved after fp16-mixed steps that all overflowed:
# every master copy still equals the parameter's initial f32 value (INIT, a
# --save-params directory of the f32 model's forward plan: the same
# initializers), every f16 parameter is that value rounded to f16, every
# moment is zero, the Adam step count is 0, and the loss scale is SCALE
# (the initial scale halved once per step).
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: check-skipped-step.py CHECKPOINT INIT_DIR SCALE")
    ck, init, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
    load = lambda d, n: np.load(os.path.join(d, n + ".npy"))
    names = sorted(f[:-4] for f in os.listdir(init) if f.endswith(".npy"))
    if not names:
        sys.exit(f"no parameters in {init}")
    bad = []
    for name in names:
        start = load(init, name)
        if not np.array_equal(load(ck, name + ".master"), start):
            bad.append(name + ".master changed")
        if not np.array_equal(load(ck, name), start.astype(np.float16)):
            bad.append(name + " is not its initial value in f16")
        for moment in ("m", "v"):
            if np.any(load(ck, name + "." + moment) != 0):
                bad.append(f"{name}.{moment} is not zero")
    step = float(load(ck, "step"))
    got = float(load(ck, "loss_scale"))
    clean = float(load(ck, "loss_scale_clean_steps"))
    if step != 0:
        bad.append(f"step is {step}, expected 0")
    if got != scale:
        bad.append(f"loss_scale is {got:g}, expected {scale:g}")
    if clean != 0:
        bad.append(f"loss_scale_clean_steps is {clean:g}, expected 0")
    for line in bad:
        print(line)
    print(f"{len(names)} parameters unchanged, step {step:g}, loss scale "
          f"{got:g}: {'FAILED' if bad else 'ok'}")
    sys.exit(1 if bad else 0)


main()
