//===- BlasKernels.cpp - OpenBLAS kernel choice on CPUs it misdetects -----===//
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU
// model at load time. 0.3.21 (Debian 12) does not know recent Xeons such as
// Sapphire Rapids and falls back to its Prescott (SSE3) kernels there, which
// run sgemm 4-5x slower than its SkylakeX (AVX-512) ones on the same core
// (bench/cpu-gemm: mlp-up 64 ms vs 15 ms). When the user has not chosen a
// core type (OPENBLAS_CORETYPE) and OpenBLAS's choice lacks instruction sets
// the CPU has, the kernel table is chosen again through OpenBLAS's own
// entry points for this (gotoblas_dynamic_quit / gotoblas_dynamic_init, which
// read OPENBLAS_CORETYPE), before the first Partita kernel runs.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

extern "C" {
char *openblas_get_corename(void);
// Present only in DYNAMIC_ARCH builds of OpenBLAS; weak, so a build with a
// fixed target links and simply keeps its kernels.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace partita::runtime {

namespace {

/// The best OpenBLAS x86-64 core type this CPU can run, or "" when there is
/// nothing better to ask for than what OpenBLAS detects itself.
std::string bestCoreType() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return "";
}

/// Core types that use none of AVX2 / AVX-512 (what OpenBLAS falls back to).
bool isLegacyCore(const std::string &name) {
  for (const char *legacy :
       {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
        "Sandybridge", "Katmai", "Unknown"})
    if (name == legacy)
      return true;
  return false;
}

std::string configure() {
  std::string detected = openblas_get_corename();
  std::string note = "OpenBLAS " + detected + " kernels";
  if (const char *user = std::getenv("OPENBLAS_CORETYPE")) {
    return note + " (OPENBLAS_CORETYPE=" + user + ")";
  }
  std::string best = bestCoreType();
  if (best.empty() || !isLegacyCore(detected) || !gotoblas_dynamic_init ||
      !gotoblas_dynamic_quit)
    return note;
  // OPENBLAS_CORETYPE is read once by gotoblas_dynamic_init and removed
  // again, so child processes detect for themselves.
  setenv("OPENBLAS_CORETYPE", best.c_str(), /*overwrite=*/0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
  std::string now = openblas_get_corename();
  return "OpenBLAS " + now + " kernels (chosen by Partita: OpenBLAS detected " +
         detected + " on a CPU with " +
         (best == "SkylakeX" ? "AVX-512" : "AVX2") + ")";
}

} // namespace

std::string blasCoreName() { return openblas_get_corename(); }

const std::string &configureBlasKernels() {
  static std::once_flag once;
  static std::string note;
  std::call_once(once, [] { note = configure(); });
  return note;
}

} // namespace partita::runtime
