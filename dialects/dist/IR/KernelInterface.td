//===- KernelInterface.td - the runtime kernel of an op ---*- tablegen -*-===//
//
// The interface through which an op tells the plan lowering which runtime
// kernel computes it: a kernel name and a small set of attributes.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIST_KERNEL_INTERFACE
#define PARTITA_DIST_KERNEL_INTERFACE

include "mlir/IR/OpBase.td"

def KernelOpInterface : OpInterface<"KernelOpInterface"> {
  let cppNamespace = "::partita::dist";
  let description = [{
    The runtime kernel that computes the op on one device: a name and
    attributes of five plain kinds (integer, float, bool, string, integer
    list), a `KernelDescription` (see `KernelInterface.h`). The plan
    lowering (`dist-lower-to-plan`) asks every op that is not a collective
    for it and knows no op by itself.

    A name the plan format has a kernel kind for (`Kernel.Kind` in
    `runtime/plan/plan.proto`, in lower case: `einsum`, `layer_norm`, ...)
    lowers to that kind, its attributes to the `KernelAttrs` fields of the
    same names and types. Any other name lowers to a `CUSTOM` kernel that
    carries the name and the attributes as they are; the runtime runs it
    with the kernel registered under that name (`KernelRegistry.h`), and a
    plan whose custom kernel nobody registered is rejected when loaded.

    Inputs and outputs are the op's operands and results, in order.
  }];
  let methods = [
    InterfaceMethod<[{
        Returns the op's kernel, or failure after emitting a diagnostic at
        the op when the runtime has no kernel for this instance (an
        unsupported element type, a value out of range).
      }],
      "::mlir::FailureOr<::partita::dist::KernelDescription>", "getKernel">,
    InterfaceMethod<[{
        The operands that hold indices into a dimension of another operand
        (an embedding's ids into its table's rows, cross entropy's labels
        into its logits' classes). The plan lowering bounds the integer
        inputs they read by that dimension, so tools that make inputs make
        valid ones. A gradient op may leave them out: its forward op says it.
        The default (which the generated note below does not know of)
        returns none.
      }],
      "::llvm::SmallVector<::partita::dist::IndexOperand>", "getIndexOperands",
      (ins), /*methodBody=*/"", /*defaultImplementation=*/"return {};">,
  ];
}

#endif // PARTITA_DIST_KERNEL_INTERFACE
