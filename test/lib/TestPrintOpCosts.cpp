//===- TestPrintOpCosts.cpp - print every op's cost -----------------------===//
//
// -test-print-op-costs: emits a remark at each op that implements
// CostOpInterface with its cost at its own types, and one at each function
// with the total, so lit can check single ops and whole models. With
// `expect-flops=F`, the function's total FLOPs must lie within `tolerance`
// (relative) of F, or the pass fails with an error: lit checks a model's
// total against the 2*N*tokens (forward) and 6*N*tokens (train step)
// approximations without FileCheck having to compare numbers.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/CostInterface.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

#include <cmath>
#include <cstdio>
#include <string>

using namespace mlir;

namespace partita::test {
namespace {

std::string formatNumber(const char *format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

struct TestPrintOpCostsPass
    : public PassWrapper<TestPrintOpCostsPass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TestPrintOpCostsPass)

  TestPrintOpCostsPass() = default;
  TestPrintOpCostsPass(const TestPrintOpCostsPass &pass) : PassWrapper(pass) {}

  StringRef getArgument() const final { return "test-print-op-costs"; }
  StringRef getDescription() const final {
    return "Print the cost of every op and each function's total as remarks.";
  }

  Option<bool> perOp{*this, "per-op",
                     llvm::cl::desc("Emit a remark per op (default true)"),
                     llvm::cl::init(true)};
  Option<double> expectFlops{
      *this, "expect-flops",
      llvm::cl::desc("Expected total FLOPs of each function (0: no check)"),
      llvm::cl::init(0)};
  Option<double> tolerance{
      *this, "tolerance",
      llvm::cl::desc("Allowed relative difference from expect-flops"),
      llvm::cl::init(0.05)};

  void runOnOperation() final {
    getOperation()->walk([&](FunctionOpInterface func) {
      if (failed(printFunction(func)))
        signalPassFailure();
    });
  }

  LogicalResult printFunction(FunctionOpInterface func) {
    dist::OpCost total;
    int64_t count = 0;
    bool ok = true;
    func.walk([&](dist::CostOpInterface op) {
      FailureOr<dist::OpCost> cost = dist::costOfOwnTypes(op);
      if (failed(cost)) {
        op->emitError() << "no cost for the op's own types";
        ok = false;
        return;
      }
      if (perOp)
        op->emitRemark() << op->getName() << ": " << cost->toString();
      total += *cost;
      ++count;
    });
    if (!ok)
      return failure();
    func.emitRemark() << "total of " << count << " ops: " << total.toString();
    if (expectFlops <= 0)
      return success();
    double ratio = total.flops / expectFlops;
    if (std::fabs(ratio - 1) > tolerance)
      return func.emitError()
             << "total flops " << formatNumber("%.6g", total.flops) << " are "
             << formatNumber("%.4f", ratio) << " times the expected "
             << formatNumber("%.6g", double(expectFlops))
             << ", outside the tolerance "
             << formatNumber("%g", double(tolerance));
    func.emitRemark() << "total flops within "
                      << formatNumber("%g", double(tolerance))
                      << " of the expected";
    return success();
  }
};
} // namespace

void registerTestPrintOpCostsPass() {
  PassRegistration<TestPrintOpCostsPass>();
}
} // namespace partita::test
