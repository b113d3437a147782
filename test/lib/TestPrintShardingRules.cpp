//===- TestPrintShardingRules.cpp - print every op's sharding rule --------===//
//
// -test-print-sharding-rules: emits a remark at each op that implements
// ShardingRuleOpInterface with its rule in compact form, so lit can check
// the rule of every op. Factors with a typed role (dist::FactorRole) end the
// remark as " roles={name:role,...}" (ShardingRule::toString).
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/DistOps.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace partita::test {
namespace {
struct TestPrintShardingRulesPass
    : public PassWrapper<TestPrintShardingRulesPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestPrintShardingRulesPass)

  StringRef getArgument() const final { return "test-print-sharding-rules"; }
  StringRef getDescription() const final {
    return "Print the sharding rule of every op as a remark.";
  }
  void runOnOperation() final {
    getOperation()->walk([&](dist::ShardingRuleOpInterface op) {
      FailureOr<dist::ShardingRule> rule = op.getShardingRule();
      if (failed(rule)) {
        op->emitRemark() << "no sharding rule";
        return;
      }
      if (failed(rule->verify(op))) {
        signalPassFailure();
        return;
      }
      op->emitRemark() << rule->toString();
    });
  }
};
} // namespace

void registerTestPrintShardingRulesPass() {
  PassRegistration<TestPrintShardingRulesPass>();
}
} // namespace partita::test
