"""Fair-comparison helpers shared by the benches that run a peer (PyTorch).

A side-by-side time means something only when both processes run the same
BLAS kernels and neither stalls on its own threading: this module reports
the OpenBLAS kernels the calling process actually loaded (via ctypes on the
OpenBLAS that torch linked: `openblas_get_corename`/`openblas_get_config`),
applies the thread settings the benches agree on, and, run as a script,
probes the kernels a fresh process gets and compares two processes' kernel
lines.

  python3 fair.py probe            # corename OpenBLAS detects here, no env
  python3 fair.py same A B         # exit 1 unless core names A and B match
"""
import ctypes
import os
import sys


def _openblas_paths():
    """Paths of the OpenBLAS libraries mapped into this process."""
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if "/" in line else ""
            if "openblas" in os.path.basename(path) and path not in paths:
                paths.append(path)
    return paths


def blas_kernels():
    """(corename, config) of the OpenBLAS this process runs, or
    ("none", reason) when no OpenBLAS is loaded."""
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
            name, config = lib.openblas_get_corename, lib.openblas_get_config
        except (OSError, AttributeError):
            continue
        name.restype = config.restype = ctypes.c_char_p
        return name().decode(), config().decode()
    return "none", "no OpenBLAS mapped into this process"


def setup_torch(torch, threads):
    """Sets torch's intra-op threads and prints the line the bench scripts
    parse: the kernels this process runs and its OpenMP settings."""
    torch.set_num_threads(threads)
    wait = os.environ.get("OMP_WAIT_POLICY", "unset")
    if threads > 1 and wait.upper() != "PASSIVE":
        # Debian's torch spins GNU OpenMP threads against OpenBLAS's own;
        # under load that stalls it by 1.6-13x (issue 16).
        print("fair: warning: torch at %d threads without "
              "OMP_WAIT_POLICY=PASSIVE" % threads, file=sys.stderr)
    name, config = blas_kernels()
    print("fair: torch side: OpenBLAS %s kernels (%s), torch %s, %d threads, "
          "OMP_WAIT_POLICY=%s, OPENBLAS_CORETYPE=%s" %
          (name, config, torch.__version__, torch.get_num_threads(), wait,
           os.environ.get("OPENBLAS_CORETYPE", "unset")), flush=True)


def main(argv):
    if argv[:1] == ["probe"]:
        # Load OpenBLAS as torch does (through the BLAS alternative).
        for soname in ("libopenblas.so.0", "libblas.so.3"):
            try:
                ctypes.CDLL(soname)
                break
            except OSError:
                pass
        print(blas_kernels()[0])
        return 0
    if argv[:1] == ["same"] and len(argv) == 3:
        if argv[1] != argv[2]:
            print("fair: the two sides run different OpenBLAS kernels "
                  "(partita %s, peer %s): no ratio" % (argv[1], argv[2]),
                  file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
