//===- AnnotatePass.cpp - dist-annotate -----------------------------------------===//

#include "passes/sharding/Passes.h"

namespace partita::sharding {
#define GEN_PASS_DEF_DISTANNOTATE
#include "passes/sharding/Passes.h.inc"

namespace {
struct DistAnnotatePass : public impl::DistAnnotateBase<DistAnnotatePass> {
  using Base::Base;
  // TODO: implement.
  void runOnOperation() final {}
};
} // namespace
} // namespace partita::sharding
