//===- LowPrecision.h - bf16 and f16 on the cpu backend ---------*- C++ -*-===//
//
// The cpu backend computes in f32 and f64. A kernel call with bf16 or f16
// operands runs the f32 kernel on widened copies and narrows its outputs,
// rounding to nearest even (runWidened); contractions thereby use sgemm on
// f32 scratch. Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CPU_LOWPRECISION_H
#define PARTITA_RUNTIME_LIB_CPU_LOWPRECISION_H

#include "partita/runtime/Backend.h"

#include <cstdint>
#include <functional>

namespace partita::runtime::cpu {

/// Whether `dtype` is bf16 or f16 (storage formats without arithmetic here).
inline bool isLowPrecision(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16;
}

/// Whether `call` has a bf16 or f16 operand and `kind` is no kernel that
/// handles those itself (convert, data movement, custom kernels).
bool needsWidening(const KernelCall &call);

/// Runs `call` through `runF32`: every bf16 or f16 input widened into f32
/// scratch, every bf16 or f16 output computed into f32 scratch and narrowed
/// into place afterwards. Other operands are passed as they are (an f32
/// output written in place over its f32 input stays in place). An
/// elementwise call on large 16-bit tensors runs piece by piece over the
/// intra-op pool, each piece through `runF32` with no pool (PoolScope of
/// null), so `runF32` must dispatch under the caller's PoolScope rather
/// than set one of its own.
void runWidened(const KernelCall &call,
                const std::function<void(const KernelCall &)> &runF32);

} // namespace partita::runtime::cpu

#endif // PARTITA_RUNTIME_LIB_CPU_LOWPRECISION_H
