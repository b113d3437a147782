# Lit configuration for Partita's FileCheck suites.
import os
import shutil
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "Partita"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.partita_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "lib",
                   "unit", "Inputs", "fuzz"]

config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.partita_tools_dir, append_path=False)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
config.substitutions.append(("%partita_src", config.partita_src_root))
config.substitutions.append(("%partita_obj", config.partita_obj_root))
# The runtime-only runner, by its full path (it may also be built by a
# runtime-only configure beside this one).
llvm_config.add_tool_substitutions(["partita-run"], [config.partita_tools_dir])
# The Python that runs lit also writes generated test inputs.
config.substitutions.append(("%python", sys.executable))
# protoc decodes and encodes plans in protobuf text format (plan mutations).
config.substitutions.append(("%protoc", config.protoc))
# xmllint (libxml2-utils, scripts/setup.sh) checks explain's SVG drawings.
config.substitutions.append(("%xmllint", shutil.which("xmllint") or "xmllint"))
if config.partita_have_mpi:
    config.available_features.add("mpi")
# The ptest ops' kernel libraries (test/lib/TestKernels.cpp), and whether
# `partita plan` parses ptest (PARTITA_DRIVER_TEST_DIALECT).
config.substitutions.append(
    ("%ptest_kernels_wrong", os.path.join(config.partita_lib_dir, "libPartitaTestKernelsWrong.so")))
config.substitutions.append(
    ("%ptest_kernels", os.path.join(config.partita_lib_dir, "libPartitaTestKernels.so")))
config.substitutions.append(("%partita_lib_dir", config.partita_lib_dir))
if config.partita_driver_test_dialect:
    config.available_features.add("ptest-driver")
# cuda: the runtime was built with CUDA; cuda-device: this machine has an
# NVIDIA GPU (a device node of the driver), so a GPU run can be expected to work.
if config.partita_have_cuda:
    config.available_features.add("cuda")
if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
    config.available_features.add("cuda-device")
