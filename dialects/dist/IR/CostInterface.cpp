//===- CostInterface.cpp - per-op compute and memory cost -----------------===//
//
// The helpers CostOpInterface's implementations share: element sizes, the
// default (data movement) cost, and the cost at an op's own types.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/CostInterface.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <sstream>

using namespace mlir;

#include "dialects/dist/IR/CostInterface.cpp.inc"

namespace partita::dist {

double TensorShape::getNumElements() const {
  double count = 1;
  for (int64_t size : shape)
    count *= double(size);
  return count;
}

OpCost &OpCost::operator+=(const OpCost &other) {
  flops += other.flops;
  transcendentals += other.transcendentals;
  bytesRead += other.bytesRead;
  bytesWritten += other.bytesWritten;
  wireBytes += other.wireBytes;
  return *this;
}

bool OpCost::operator==(const OpCost &other) const {
  return flops == other.flops && transcendentals == other.transcendentals &&
         bytesRead == other.bytesRead && bytesWritten == other.bytesWritten &&
         wireBytes == other.wireBytes;
}

/// An integer below 2^53 exactly, anything else in shortest round-trip form.
static void printNumber(std::ostringstream &os, double value) {
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    os << (int64_t)value;
    return;
  }
  os.precision(17);
  os << value;
}

std::string OpCost::toString() const {
  std::ostringstream os;
  os << "flops=";
  printNumber(os, flops);
  os << " transcendentals=";
  printNumber(os, transcendentals);
  os << " read=";
  printNumber(os, bytesRead);
  os << " written=";
  printNumber(os, bytesWritten);
  if (wireBytes != 0) {
    os << " wire=";
    printNumber(os, wireBytes);
  }
  return os.str();
}

std::optional<int64_t> getElementBytes(Type type) {
  if (auto complex = dyn_cast<ComplexType>(type)) {
    std::optional<int64_t> part = getElementBytes(complex.getElementType());
    return part ? std::optional<int64_t>(2 * *part) : std::nullopt;
  }
  if (isa<IndexType>(type))
    return 8;
  if (type && type.isIntOrFloat())
    return (type.getIntOrFloatBitWidth() + 7) / 8;
  return std::nullopt;
}

std::optional<double> getBytes(const TensorShape &tensor) {
  std::optional<int64_t> bytes = getElementBytes(tensor.elementType);
  if (!bytes)
    return std::nullopt;
  return tensor.getNumElements() * double(*bytes);
}

FailureOr<OpCost> getDataMovementCost(ArrayRef<TensorShape> operands,
                                      ArrayRef<TensorShape> results) {
  // A dynamic size (negative) would make every count negative.
  auto isDynamic = [](const TensorShape &tensor) {
    return llvm::any_of(tensor.shape, [](int64_t size) { return size < 0; });
  };
  if (llvm::any_of(operands, isDynamic) || llvm::any_of(results, isDynamic))
    return failure();
  OpCost cost;
  for (const TensorShape &operand : operands) {
    std::optional<double> bytes = getBytes(operand);
    if (!bytes)
      return failure();
    cost.bytesRead += *bytes;
  }
  for (const TensorShape &result : results) {
    std::optional<double> bytes = getBytes(result);
    if (!bytes)
      return failure();
    cost.bytesWritten += *bytes;
  }
  return cost;
}

FailureOr<SmallVector<TensorShape>> getTensorShapes(TypeRange types) {
  SmallVector<TensorShape> shapes;
  for (Type type : types) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || !tensor.hasStaticShape())
      return failure();
    shapes.push_back(
        {SmallVector<int64_t, 4>(tensor.getShape()), tensor.getElementType()});
  }
  return shapes;
}

FailureOr<OpCost> costOfOwnTypes(Operation *op) {
  auto costOp = dyn_cast<CostOpInterface>(op);
  if (!costOp)
    return failure();
  FailureOr<SmallVector<TensorShape>> operands =
      getTensorShapes(op->getOperandTypes());
  FailureOr<SmallVector<TensorShape>> results =
      getTensorShapes(op->getResultTypes());
  if (failed(operands) || failed(results))
    return failure();
  return costOp.getCost(*operands, *results);
}

} // namespace partita::dist
