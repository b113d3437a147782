//===- KernelInterface.cpp - the runtime kernel of an op ------------------===//

#include "dialects/dist/IR/KernelInterface.h"

using namespace mlir;

#include "dialects/dist/IR/KernelInterface.cpp.inc"

namespace partita::dist {

llvm::StringRef getKernelAttrKindName(const KernelAttrValue &value) {
  switch (value.index()) {
  case 0:
    return "int";
  case 1:
    return "float";
  case 2:
    return "bool";
  case 3:
    return "string";
  default:
    return "int list";
  }
}

} // namespace partita::dist
