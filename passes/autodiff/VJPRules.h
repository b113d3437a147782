//===- VJPRules.h - the nn ops' vector-Jacobian products --------*- C++ -*-===//

#ifndef PARTITA_PASSES_AUTODIFF_VJPRULES_H
#define PARTITA_PASSES_AUTODIFF_VJPRULES_H

#include "mlir/IR/DialectRegistry.h"

namespace partita::nn {
/// Attaches a VJPOpInterface model to every differentiable nn op.
void registerVJPExternalModels(mlir::DialectRegistry &registry);
} // namespace partita::nn

#endif // PARTITA_PASSES_AUTODIFF_VJPRULES_H
