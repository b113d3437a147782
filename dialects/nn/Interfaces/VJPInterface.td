//===- VJPInterface.td - vector-Jacobian products of nn ops -*- tablegen -*-===//
//
// The interface nn-autodiff differentiates through: per operand, the
// cotangent built from the result's cotangent with nn ops.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_NN_VJP_INTERFACE
#define PARTITA_NN_VJP_INTERFACE

include "mlir/IR/OpBase.td"

def NN_VJPOpInterface : OpInterface<"VJPOpInterface"> {
  let cppNamespace = "::partita::nn";
  let description = [{
    A differentiable op: given the cotangent of each of its results (the
    gradient of a scalar loss with respect to that result, of the result's
    type), it builds the cotangent of one of its operands with nn ops, at
    the builder's insertion point. The rules are attached to the nn ops as
    external models (`registerVJPExternalModels`).
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the cotangent of operand `index` (a value of that operand's
        type) from `resultCotangents` (one per result, of the results'
        types). Returns a null value when the operand has no cotangent (an
        integer operand: ids, labels), and failure after emitting an error
        when the rule cannot be built.
      }],
      "::mlir::FailureOr<::mlir::Value>", "buildOperandCotangent",
      (ins "::mlir::OpBuilder &":$builder, "unsigned":$index,
           "::mlir::ValueRange":$resultCotangents)>,
  ];
}

#endif // PARTITA_NN_VJP_INTERFACE
