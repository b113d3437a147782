//===- CudaKernelsEmulatedMain.cpp - the kernel tests on the emulator -----===//
//
// The emulated device layer, with the block emulator's shared-memory race
// check on: every ported kernel is also checked free of races at every
// block size the tests use.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"

namespace partita::runtime::test {

std::unique_ptr<Backend> cudaTestBackend(CudaBackendOptions options) {
  options.emulate = true;
  options.checkRaces = true;
  return createCudaBackend(options);
}

bool cudaTestEmulated() { return true; }

} // namespace partita::runtime::test
