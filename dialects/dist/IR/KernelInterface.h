//===- KernelInterface.h - the runtime kernel of an op ----------*- C++ -*-===//
//
// Declares KernelOpInterface and the value it returns: the kernel name and
// its attributes, in a form the plan lowering writes into a plan without
// knowing the op. Built-in names become the plan's kernel kinds; other names
// become custom kernels that a runtime kernel library provides.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_KERNELINTERFACE_H
#define PARTITA_DIALECTS_DIST_IR_KERNELINTERFACE_H

#include "mlir/IR/OpDefinition.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace partita::dist {

/// One kernel attribute value: an integer, a float, a bool, a string or a
/// list of integers (the kinds a plan can carry).
using KernelAttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

/// An op's runtime kernel: its name and its attributes, ordered by name (so
/// a plan's bytes do not depend on the order an op sets them in).
struct KernelDescription {
  std::string name;
  std::map<std::string, KernelAttrValue> attrs;

  KernelDescription() = default;
  explicit KernelDescription(llvm::StringRef name) : name(name.str()) {}

  KernelDescription &setInt(llvm::StringRef key, int64_t value) {
    attrs[key.str()] = value;
    return *this;
  }
  KernelDescription &setFloat(llvm::StringRef key, double value) {
    attrs[key.str()] = value;
    return *this;
  }
  KernelDescription &setBool(llvm::StringRef key, bool value) {
    attrs[key.str()] = value;
    return *this;
  }
  KernelDescription &setString(llvm::StringRef key, llvm::StringRef value) {
    attrs[key.str()] = value.str();
    return *this;
  }
  KernelDescription &setInts(llvm::StringRef key,
                             llvm::ArrayRef<int64_t> values) {
    attrs[key.str()] = std::vector<int64_t>(values.begin(), values.end());
    return *this;
  }
};

/// Operand `index` of an op holds indices into dimension `dim` of operand
/// `into` (negative: from the last).
struct IndexOperand {
  unsigned index;
  unsigned into;
  int64_t dim;
};

/// "int", "float", "bool", "string" or "int list": how diagnostics name the
/// kind of `value`.
llvm::StringRef getKernelAttrKindName(const KernelAttrValue &value);

} // namespace partita::dist

#include "dialects/dist/IR/KernelInterface.h.inc"

#endif // PARTITA_DIALECTS_DIST_IR_KERNELINTERFACE_H
