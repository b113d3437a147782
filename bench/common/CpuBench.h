//===- CpuBench.h - the cpu backend and inputs of the C++ benches ---------===//
//
// What bench/cpu-gemm and bench/cpu-kernels share: the thread count they
// run at (PARTITA_BENCH_THREADS, default 1), one cpu backend of that many
// threads, and seeded uniform random f32 tensors.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_BENCH_COMMON_CPUBENCH_H
#define PARTITA_BENCH_COMMON_CPUBENCH_H

#include "partita/runtime/Backend.h"

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

namespace partita::bench {

inline int benchThreads() {
  const char *env = std::getenv("PARTITA_BENCH_THREADS");
  return env ? std::atoi(env) : 1;
}

/// The cpu backend of benchThreads() threads, made on first use.
inline runtime::Backend &benchBackend() {
  static std::unique_ptr<runtime::Backend> instance =
      runtime::createCpuBackend(benchThreads());
  return *instance;
}

/// An f32 tensor of `shape`, uniform in [lo, hi) from `seed`.
inline runtime::Tensor randomF32(const std::vector<int64_t> &shape,
                                 uint64_t seed, float lo = -1, float hi = 1) {
  runtime::Tensor t(runtime::DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = dist(rng);
  return t;
}

} // namespace partita::bench

#endif // PARTITA_BENCH_COMMON_CPUBENCH_H
