"""Usage: same-file.py EXPECTED ACTUAL. Fails with a unified diff unless the
two files are equal byte for byte (lit's PATH has no diff)."""
import difflib
import sys

expected_path, actual_path = sys.argv[1:3]
with open(expected_path) as f:
    expected = f.readlines()
with open(actual_path) as f:
    actual = f.readlines()
if actual != expected:
    sys.stdout.writelines(difflib.unified_diff(expected, actual,
                                               expected_path, actual_path))
    sys.exit(1)
