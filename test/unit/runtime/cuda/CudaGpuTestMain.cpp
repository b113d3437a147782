//===- CudaGpuTestMain.cpp - the kernel tests on a GPU, or SKIPPED --------===//
//
// The same kernel tests on a real GPU. Without a usable CUDA device the
// binary prints CUDA's error text and exits with 77, which ctest reports as
// SKIPPED (SKIP_RETURN_CODE): never as passed.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

#include <cstdio>

namespace partita::runtime::test {

std::unique_ptr<Backend> cudaTestBackend(CudaBackendOptions options) {
  return createCudaBackend(options);
}

bool cudaTestEmulated() { return false; }

} // namespace partita::runtime::test

int main(int argc, char **argv) {
  std::string error = partita::runtime::cudaDeviceError();
  if (!error.empty()) {
    std::printf("SKIPPED: no usable CUDA device: %s\n", error.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
