//===- TestPasses.cpp - registration of the test-only passes --------------===//

#include "test/lib/TestPasses.h"

namespace partita::test {
void registerTestPrintShardingRulesPass();
void registerTestReshardPlanPass();

void registerTestPasses() {
  registerTestPrintShardingRulesPass();
  registerTestReshardPlanPass();
}
} // namespace partita::test
