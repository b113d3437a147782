//===- CudaKernelsEmulatedMain.cpp - the kernel tests on the emulator -----===//
//
// The emulated device layer, with the block emulator's shared-memory race
// check on: every ported kernel is also checked free of races at every
// block size the tests use.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

namespace partita::runtime::test {

std::unique_ptr<Backend> cudaTestBackend(int blockSize, bool tf32,
                                         CudaAttention attention) {
  CudaBackendOptions options;
  options.tf32 = tf32;
  options.attention = attention;
  options.emulate = true;
  options.blockSize = blockSize;
  options.checkRaces = true;
  return createCudaBackend(options);
}

} // namespace partita::runtime::test
