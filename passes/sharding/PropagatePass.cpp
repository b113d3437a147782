//===- PropagatePass.cpp - dist-propagate -----------------------------------------===//

#include "passes/sharding/Passes.h"

namespace partita::sharding {
#define GEN_PASS_DEF_DISTPROPAGATE
#include "passes/sharding/Passes.h.inc"

namespace {
struct DistPropagatePass : public impl::DistPropagateBase<DistPropagatePass> {
  using Base::Base;
  // TODO: implement.
  void runOnOperation() final {}
};
} // namespace
} // namespace partita::sharding
