//===- CostInterface.td - per-op compute and memory cost --*- tablegen -*-===//
//
// The interface through which any op tells a cost model how much work it does
// for given local shapes: FLOPs, transcendental evaluations, bytes read and
// written, and bytes sent over the network.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_COST_INTERFACE
#define PARTITA_DIST_COST_INTERFACE

include "mlir/IR/OpBase.td"

def CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::partita::dist";
  let description = [{
    An op's cost on one device for operand and result shapes that may differ
    from its own types: the strategy search asks for the cost of a candidate
    sharding's *local* shapes without rewriting the IR. The answer is an
    `OpCost` (see `CostInterface.h` for the units and conventions): FLOPs
    (a multiply-add is 2), transcendental evaluations (exp, log, tanh, erf,
    sqrt, rsqrt; counted apart from FLOPs), compulsory bytes read and written
    (each operand read once, each result written once, as a fused kernel
    does), and for collectives the bytes each device puts on the wire.

    The default counts no FLOPs and the bytes of every operand read and every
    result written: right for pure data movement, and what an op of another
    dialect gets by declaring the interface without overriding `getCost`.
  }];
  let methods = [
    InterfaceMethod<[{
        Returns the cost for the given operand and result shapes and element
        types (one `TensorShape` per operand and per result, in order), or
        failure, with no diagnostic, when they do not fit the op (wrong
        count or rank, a dynamic size, an element type without a fixed
        size).
      }],
      "::mlir::FailureOr<::partita::dist::OpCost>", "getCost",
      (ins "::llvm::ArrayRef<::partita::dist::TensorShape>":$operands,
           "::llvm::ArrayRef<::partita::dist::TensorShape>":$results),
      /*methodBody=*/"",
      /*defaultImplementation=*/[{
        return ::partita::dist::getDataMovementCost(operands, results);
      }]>,
  ];
  let extraSharedClassDeclaration = [{
    /// The cost for the op's own operand and result types; failure when one
    /// is not a statically shaped ranked tensor.
    ::mlir::FailureOr<::partita::dist::OpCost> getCostOfOwnTypes() {
      return ::partita::dist::costOfOwnTypes($_op);
    }
  }];
}

#endif // PARTITA_DIST_COST_INTERFACE
