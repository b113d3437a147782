//===- CostTestModule.h - named ops and their costs, for cost unit tests -===//
//
// The nn and dist cost tests each parse a module whose ops are named by their
// locations (loc("einsum")) and ask for the cost of one op by name; this is
// that module, shared by both fixtures.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_UNIT_COSTTESTMODULE_H
#define PARTITA_TEST_UNIT_COSTTESTMODULE_H

#include "dialects/dist/IR/CostInterface.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace partita::test {

/// A context and a module parsed into it by `parse` (after the fixture has
/// loaded its dialects).
class CostTestModule {
protected:
  void parse(llvm::StringRef source) {
    module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
    EXPECT_TRUE(module) << "the test module does not parse";
  }

  /// The op whose location is NameLoc `name`; null (and a test failure) when
  /// there is none.
  mlir::Operation *opNamed(llvm::StringRef name) {
    mlir::Operation *found = nullptr;
    if (module)
      module->walk([&](mlir::Operation *op) {
        if (auto loc = mlir::dyn_cast<mlir::NameLoc>(op->getLoc()))
          if (loc.getName() == name)
            found = op;
      });
    EXPECT_TRUE(found) << "no op named " << name.str();
    return found;
  }

  /// The cost of the op named `name` at its own types, which must exist.
  dist::OpCost costOf(llvm::StringRef name) {
    mlir::Operation *op = opNamed(name);
    if (!op)
      return dist::OpCost();
    mlir::FailureOr<dist::OpCost> c = dist::costOfOwnTypes(op);
    EXPECT_TRUE(mlir::succeeded(c)) << "no cost for " << name.str();
    return mlir::succeeded(c) ? *c : dist::OpCost();
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

} // namespace partita::test

/// Expects the op named `name` to cost `expected` (compared as printed, so a
/// failure shows every field).
#define EXPECT_COST(name, expected)                                            \
  EXPECT_EQ(costOf(name).toString(), (expected).toString()) << (name)

#endif // PARTITA_TEST_UNIT_COSTTESTMODULE_H
