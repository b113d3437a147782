"""Adds a pipeline schedule to a sealed plan, for explain's tests before
the compiler writes pipelined plans.

  add_pipeline.py PROTOC PLAN_PROTO IN.pb SCHEDULE.txtpb OUT.pb

SCHEDULE.txtpb is a plan.PipelineSchedule in protobuf text format; it is
encoded with protoc, appended to the plan's content as field 5
(Plan.pipeline), and the plan is resealed (runtime/plan/PlanChecksum.h:
FNV-1a of the content, then the trailer)."""

import os
import subprocess
import sys

# The plan's seal (checksum and trailer), recomputed as the runtime's
# tests do it.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                "Runtime", "cpu", "Inputs"))
from mutate_plans import SEAL, reseal  # noqa: E402


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def main():
    protoc, proto, plan_in, schedule, plan_out = sys.argv[1:6]
    with open(schedule, "rb") as f:
        text = f.read()
    encoded = subprocess.run(
        [protoc, "--encode=partita.plan.PipelineSchedule", "-I",
         os.path.dirname(os.path.dirname(proto)), "plan/plan.proto"],
        input=text, capture_output=True, check=True).stdout
    with open(plan_in, "rb") as f:
        data = f.read()
    sealed = reseal(data[:-SEAL] + b"\x2a" + varint(len(encoded)) + encoded +
                    data[-SEAL:])
    if sealed is None:
        sys.exit("add_pipeline: the plan has no checksum and trailer")
    with open(plan_out, "wb") as f:
        f.write(sealed)


if __name__ == "__main__":
    main()
