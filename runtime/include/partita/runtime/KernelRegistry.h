//===- KernelRegistry.h - custom kernels by name ----------------*- C++ -*-===//
//
// Kernels the plan format does not know. An op outside the nn dialect names
// its kernel through dist::KernelOpInterface; a name that is no built-in
// kernel kind lowers to a CUSTOM kernel carrying the name and attributes,
// and a backend runs it with the function registered here under that name
// for the backend ("cpu"). Registration happens in the process that runs the
// plan, before the plan is loaded: directly by an embedder, or by a kernel
// library (a shared library loaded with loadKernelLibrary, which
// `partita run --kernel-library PATH` and `partita-run` call).
//
// A kernel library exports one C function that registers its kernels:
//
//   extern "C" void partita_register_kernels() {
//     partita::runtime::registerKernel("cpu", "my.op", myOpKernel);
//   }
//
// and links libpartita_runtime (shared), so it registers into the same
// process-wide registry as the tool that loads it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_KERNELREGISTRY_H
#define PARTITA_RUNTIME_KERNELREGISTRY_H

#include "partita/runtime/Backend.h"

#include <functional>
#include <string>
#include <vector>

namespace partita::runtime {

/// A custom kernel: reads call.inputs and call.attrs.custom, writes
/// call.outputs (local shapes; outputs never overlap inputs), and throws
/// Error naming what does not fit. Ranks running as threads of one process
/// call it concurrently, each on its own buffers: it must be reentrant.
using CustomKernel = std::function<void(const KernelCall &call)>;

/// Registers `kernel` as `name` for backend `backend` ("cpu"). Throws Error
/// when the name is empty or is already registered for that backend.
void registerKernel(const std::string &backend, const std::string &name,
                    CustomKernel kernel);

/// The kernel registered as `name` for `backend`, or nullptr. The pointer
/// stays valid for the life of the process.
const CustomKernel *findKernel(const std::string &backend,
                               const std::string &name);

/// The names registered for `backend`, sorted.
std::vector<std::string> registeredKernels(const std::string &backend);

/// The symbol a kernel library exports (see the file comment).
constexpr const char *kKernelLibraryEntryPoint = "partita_register_kernels";

/// Loads the shared library at `path` and calls its
/// partita_register_kernels(). Throws Error naming the path when it cannot
/// be loaded, lacks the entry point, or its registration fails. The library
/// stays loaded for the life of the process.
void loadKernelLibrary(const std::string &path);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_KERNELREGISTRY_H
