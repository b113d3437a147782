"""The package imports, and its runtime part loads no LLVM."""

import os
import subprocess
import sys

import partita


def mapped_libraries(code):
    """The shared objects mapped after running `code` in a fresh Python."""
    script = code + "\nprint(open('/proc/self/maps').read())"
    out = subprocess.run([sys.executable, "-c", script], check=True,
                         capture_output=True, text=True, env=os.environ).stdout
    return {line.split()[-1] for line in out.splitlines()
            if len(line.split()) >= 6 and ".so" in line.split()[-1]}


def is_llvm(path):
    name = os.path.basename(path)
    return name.startswith(("libLLVM", "libMLIR")) or "llvm-" in path


# Tests that importing the runtime part maps neither libLLVM nor libMLIR.
def test_runtime_import_loads_no_llvm():
    libs = mapped_libraries("import partita.runtime")
    assert any("_runtime" in lib for lib in libs), libs
    assert not [lib for lib in libs if is_llvm(lib)]


# Tests the negative control: the compiler part does map libMLIR, so the
# check above can see it.
def test_compiler_import_loads_mlir():
    libs = mapped_libraries("import partita.compiler")
    assert [lib for lib in libs if is_llvm(lib)], libs


def test_import_exports_the_api():
    for name in ("parse", "load", "model", "Mesh", "P", "Shard", "Replicate",
                 "Partial", "Error", "Plan"):
        assert hasattr(partita, name), name
