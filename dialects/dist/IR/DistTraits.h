//===- DistTraits.h - op traits the sharding strategies read ----*- C++ -*-===//
//
// Traits a model dialect's ops carry so that sharding strategies can find
// them without naming them. Declared in DistInterfaces.td.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_DIST_IR_DISTTRAITS_H
#define PARTITA_DIALECTS_DIST_IR_DISTTRAITS_H

#include "mlir/IR/OpDefinition.h"

namespace partita::dist {

/// Ops that normalize each row (the last dimension) of their first operand
/// on its own, so the rows may be split over devices: Megatron sequence
/// parallelism (dist-annotate's `sequence-parallel`) splits the sequence of
/// the [batch, seq, hidden] activations entering one. Declared in
/// DistInterfaces.td as RowNormalization.
template <typename ConcreteType>
class RowNormalization
    : public mlir::OpTrait::TraitBase<ConcreteType, RowNormalization> {};

} // namespace partita::dist

#endif // PARTITA_DIALECTS_DIST_IR_DISTTRAITS_H
