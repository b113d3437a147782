//===- TestPasses.cpp - registration of the test-only passes --------------===//

#include "test/lib/TestPasses.h"

namespace partita::test {
void registerTestPrintOpCostsPass();
void registerTestPrintShardingRulesPass();
void registerTestReshardPlanPass();

void registerTestPasses() {
  registerTestPrintOpCostsPass();
  registerTestPrintShardingRulesPass();
  registerTestReshardPlanPass();
}
} // namespace partita::test
