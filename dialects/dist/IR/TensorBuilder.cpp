//===- TensorBuilder.cpp - finding a model dialect's tensor builder -------===//

#include "dialects/dist/IR/TensorBuilder.h"

#include "mlir/IR/Dialect.h"

using namespace mlir;

namespace partita::dist {

const TensorBuilderInterface *findTensorBuilder(Operation *scope) {
  const TensorBuilderInterface *found = nullptr;
  scope->walk([&](Operation *op) {
    if (Dialect *dialect = op->getDialect())
      found = dialect->getRegisteredInterface<TensorBuilderInterface>();
    return found ? WalkResult::interrupt() : WalkResult::advance();
  });
  return found;
}

bool isTensorSum(Operation *op) {
  Dialect *dialect = op->getDialect();
  auto *builder =
      dialect ? dialect->getRegisteredInterface<TensorBuilderInterface>()
              : nullptr;
  return builder && builder->isSum(op);
}

} // namespace partita::dist
