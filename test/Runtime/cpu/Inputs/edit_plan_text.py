"""Edits a plan as protobuf text: decodes it with protoc, replaces the first
occurrence of OLD with NEW in the text (a "\\n" in either stands for a line
break), encodes it and reseals it (checksum
recomputed, as mutate_plans.py does), so a test can hand the runtime a plan
that is well formed but wrong in one field."""
import subprocess
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
from mutate_plans import reseal  # noqa: E402


def main():
    protoc, proto, src, dst, old, new = sys.argv[1:7]
    old, new = old.replace("\\n", "\n"), new.replace("\\n", "\n")
    include = __import__("os").path.dirname(proto)
    text = subprocess.run([protoc, "-I", include, "--decode=partita.plan.Plan",
                           proto], stdin=open(src, "rb"), capture_output=True,
                          check=True).stdout.decode()
    if old not in text:
        sys.exit(f"edit_plan_text: '{old}' is not in the plan")
    text = text.replace(old, new, 1)
    data = subprocess.run([protoc, "-I", include, "--encode=partita.plan.Plan",
                           proto], input=text.encode(), capture_output=True,
                          check=True).stdout
    sealed = reseal(data)
    if sealed is None:
        sys.exit("edit_plan_text: the plan has no checksum and trailer")
    open(dst, "wb").write(sealed)


if __name__ == "__main__":
    main()
