//===- OneDnnGemm.h - bf16 GEMMs through oneDNN -----------------*- C++ -*-===//
//
// The cpu backend's native bf16 contraction: a batched row-major GEMM with
// bf16 operands read as they are, f32 accumulation and the result rounded
// once to bf16 (or kept f32), run as a oneDNN matmul. Used only where oneDNN
// runs it on AMX (the case measured faster than sgemm on widened copies);
// elsewhere the caller widens (LowPrecision.h). Not installed.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CPU_ONEDNNGEMM_H
#define PARTITA_RUNTIME_LIB_CPU_ONEDNNGEMM_H

#include "partita/runtime/Backend.h"

#include <cstdint>
#include <string>

namespace partita::runtime::cpu {

/// Whether gemmBF16 can run at all: this build has oneDNN, PARTITA_ONEDNN is
/// not OFF in the environment, and oneDNN's matmul for a probe shape runs on
/// AMX. Decided once per process.
bool nativeBF16GemmAvailable();

/// What runs bf16 contractions, for the startup line: "oneDNN 2.6.3 bf16
/// matmul (brg:avx512_core_amx_bf16)", or "widened to f32 (OpenBLAS sgemm):
/// <why>".
const std::string &describeNativeBF16Gemm();

/// For i in [0, batches): C_i[M,N] = op(A_i) op(B_i), A_i = a + i * strideA
/// (op(A) is [M,K]; A stored [K,M] with leading dimension lda when transA),
/// likewise B, C_i = c + i * strideC with leading dimension ldc; strides and
/// leading dimensions in elements. `a` and `b` are bf16 bits; `c` is bf16
/// (rounded once, to nearest even) or f32 by `cType`. Accumulates in f32;
/// `accumulate`: adds the product to C's values (oneDNN's sum post-op, one
/// rounding).
/// Runs on as many threads as the intra-op pool current on the calling
/// thread has (1 inside a pool's loop, or with none; ThreadPool.h). Returns false, having written nothing, when this shape
/// has no AMX implementation in oneDNN (or nativeBF16GemmAvailable() is
/// false): the caller then widens.
bool gemmBF16(bool transA, bool transB, int64_t batches, int64_t m, int64_t n,
              int64_t k, const uint16_t *a, int64_t lda, int64_t strideA,
              const uint16_t *b, int64_t ldb, int64_t strideB, void *c,
              DType cType, int64_t ldc, int64_t strideC,
              bool accumulate = false);

} // namespace partita::runtime::cpu

#endif // PARTITA_RUNTIME_LIB_CPU_ONEDNNGEMM_H
