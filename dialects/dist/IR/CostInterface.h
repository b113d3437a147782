//===- CostInterface.h - per-op compute and memory cost ---------*- C++ -*-===//
//
// Declares CostOpInterface and the value it returns: the one source of a
// kernel's cost. dist-auto-shard asks each op for its cost at a choice's
// local shapes; plan lowering writes each kernel's FLOPs and bytes into the
// plan, where the strategy search and the runtime's profile read them. The cost model turns FLOPs and bytes into time
// (passes/sharding/DeviceRates.h, kernelSeconds), and wire bytes too.
//
// Units and conventions, shared by every implementation:
// - flops: floating-point operations, a multiply-add counted as 2, so a
//   matmul of [m,k] by [k,n] is 2*m*n*k (the convention of Kaplan et al.
//   2020, "Scaling Laws for Neural Language Models", and Narayanan et al.
//   2021, "Efficient Large-Scale Language Model Training on GPU Clusters
//   Using Megatron-LM"). Additions, multiplications, divisions, comparisons
//   and max each count 1.
// - transcendentals: evaluations of exp, log, tanh, erf, sqrt, rsqrt,
//   sin and cos, counted apart from flops (as XLA's HLO cost analysis does)
//   because they run on different units (GPU special-function units) at a
//   different rate.
// - bytesRead / bytesWritten: compulsory memory traffic of an ideally fused
//   kernel: each operand read once and each result written once, intermediates
//   kept on chip (attention's score matrix never reaches memory, as in
//   FlashAttention). Ops that touch only part of an operand (embedding reads
//   only the looked-up rows) say so.
// - wireBytes: for collectives, the bytes each device sends (equal to what
//   it receives for the symmetric collectives) under the bandwidth-optimal
//   ring algorithms; 0 for ops that do not communicate. See DistCost.cpp.
//
// Every field is a double, not an int64_t: the FLOPs of one training step
// of a large model reach int64_t's 9.2e18 (6 * 1e12 parameters * 4e6 tokens
// = 2.4e19; GPT-3's step, 6 * 175e9 * 3.2e6 = 3.4e18, is within 3x of it)
// and a search sums many steps and candidates; the ring fractions (n-1)/n
// are not integers; and a cost model divides by rates anyway. Counts of small
// tensors are still exact (a double holds every integer up to 2^53).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_COSTINTERFACE_H
#define PARTITA_DIALECTS_DIST_IR_COSTINTERFACE_H

#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Types.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace partita::dist {

/// A tensor as the cost model sees it: a static shape and an element type.
struct TensorShape {
  llvm::SmallVector<int64_t, 4> shape;
  mlir::Type elementType;

  /// The number of elements (1 for rank 0), as a double (no overflow).
  double getNumElements() const;
};

/// One op's cost on one device; see the file comment for the units.
struct OpCost {
  double flops = 0;
  double transcendentals = 0;
  double bytesRead = 0;
  double bytesWritten = 0;
  double wireBytes = 0;

  OpCost &operator+=(const OpCost &other);
  bool operator==(const OpCost &other) const;
  /// "flops=... transcendentals=... read=... written=...[ wire=...]", each
  /// number printed exactly when it is an integer below 2^53.
  std::string toString() const;
};

/// Bytes of one element of `type` (bits rounded up to whole bytes), or
/// nothing for a type without a fixed size.
std::optional<int64_t> getElementBytes(mlir::Type type);

/// The bytes of `tensor`, or nothing when its element type has no size.
std::optional<double> getBytes(const TensorShape &tensor);

/// The default cost: no FLOPs, every operand read and every result written
/// once. Fails when an element type has no fixed size or a size is negative
/// (dynamic); every implementation starts from it, so none counts those.
mlir::FailureOr<OpCost>
getDataMovementCost(llvm::ArrayRef<TensorShape> operands,
                    llvm::ArrayRef<TensorShape> results);

/// The shapes of `values`' types; failure when one is not a statically
/// shaped ranked tensor.
mlir::FailureOr<llvm::SmallVector<TensorShape>>
getTensorShapes(mlir::TypeRange types);

/// Asks `op` (which implements CostOpInterface) for its cost at its own
/// operand and result types.
mlir::FailureOr<OpCost> costOfOwnTypes(mlir::Operation *op);

/// Attaches CostOpInterface to every dist op that runs on a device (the
/// collectives, slice, mask, axis_index, send and recv); called by the dist
/// dialect's initialize, so every context that loads dist has them.
void attachDistCostModels(mlir::MLIRContext &context);

} // namespace partita::dist

#include "dialects/dist/IR/CostInterface.h.inc"

#endif // PARTITA_DIALECTS_DIST_IR_COSTINTERFACE_H
