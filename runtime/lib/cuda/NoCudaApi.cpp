//===- NoCudaApi.cpp - the device layer's real half, when CUDA is off -----===//
//
// Built instead of CudaApi.cpp when the runtime is configured without CUDA
// (PARTITA_CUDA=OFF, or AUTO without a toolkit): the emulated device layer
// still works; asking for a GPU says how the runtime was built.
//
//===----------------------------------------------------------------------===//

#include "runtime/lib/cuda/GpuApi.h"
#include "runtime/lib/cuda/NcclApi.h"

namespace partita::runtime::gpu {

extern const char *const kNoCuda;
const char *const kNoCuda =
    "this Partita runtime was built without CUDA (configure with "
    "-DPARTITA_CUDA=ON where the CUDA toolkit is installed)";

bool builtWithCuda() { return false; }

int cudaDeviceCount(std::string &error) {
  error = kNoCuda;
  return -1;
}

std::unique_ptr<GpuApi> createCudaApi(int, const CudaApiOptions &) {
  throw Error(std::string("cuda: ") + kNoCuda);
}

} // namespace partita::runtime::gpu

namespace partita::runtime::nccl {

std::unique_ptr<NcclApi> createRealNccl(int) {
  throw Error(std::string("nccl: ") + gpu::kNoCuda);
}

} // namespace partita::runtime::nccl
