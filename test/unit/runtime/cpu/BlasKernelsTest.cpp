//===- BlasKernelsTest.cpp - OpenBLAS kernel choice -----------------------===//

#include "partita/runtime/Backend.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace partita::runtime;

namespace {

TEST(BlasKernels, RunTheVectorKernelsTheCpuHas) {
  if (std::getenv("OPENBLAS_CORETYPE"))
    GTEST_SKIP() << "OPENBLAS_CORETYPE is set: the user's choice is kept";
  auto backend = createCpuBackend(1);
  std::string core = blasCoreName();
  const std::string &note = configureBlasKernels();
  // The note names the kernels that run.
  EXPECT_NE(note.find("OpenBLAS " + core + " kernels"), std::string::npos)
      << note;
  // On a CPU with AVX2 (every x86-64 machine this project runs on), never
  // OpenBLAS's fallback kernels without it (0.3.21 picks Prescott on
  // Sapphire Rapids).
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    for (const char *legacy : {"Prescott", "Core2", "Nehalem", "Sandybridge"})
      EXPECT_NE(core, legacy) << note;
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    EXPECT_TRUE(core == "SkylakeX" || core == "Cooperlake" ||
                core == "SapphireRapids")
        << core;
  }
#endif
  // Once per process: a second backend changes nothing.
  auto again = createCpuBackend(1);
  EXPECT_EQ(blasCoreName(), core);
}

} // namespace
