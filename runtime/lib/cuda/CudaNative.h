//===- CudaNative.h - CUDA handles behind the real device layer -*- C++ -*-===//
//
// For the other CUDA-built parts of the runtime (the real NCCL layer), which
// queue work of their own on the device layer's streams. Built with
// PARTITA_CUDA only; includes the CUDA runtime's header.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_CUDANATIVE_H
#define PARTITA_RUNTIME_LIB_CUDA_CUDANATIVE_H

#include "partita/runtime/Stream.h"

#include <cuda_runtime_api.h>

namespace partita::runtime::gpu {

/// The cudaStream_t of a stream of the real device layer (createCudaApi's
/// computeStream or createStream); throws Error for any other stream.
cudaStream_t nativeCudaStream(Stream &stream);

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_CUDANATIVE_H
