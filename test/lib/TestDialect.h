//===- TestDialect.h - a test-only dialect for the op hooks -----*- C++ -*-===//
//
// `ptest`: ops written outside the nn dialect that go through sharding and
// partitioning with no change under passes/, which is what shows that the
// passes know ops only through their interfaces (sharding rule, partition
// hook, cost).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_LIB_TESTDIALECT_H
#define PARTITA_TEST_LIB_TESTDIALECT_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace partita::test {
/// Adds the `ptest` dialect to `registry` (partita-opt does).
void registerTestDialect(mlir::DialectRegistry &registry);
} // namespace partita::test

#endif // PARTITA_TEST_LIB_TESTDIALECT_H
