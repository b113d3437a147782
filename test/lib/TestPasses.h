//===- TestPasses.h - test-only passes --------------------------*- C++ -*-===//
//
// Passes that expose one phase of an algorithm to lit; not for users.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_LIB_TESTPASSES_H
#define PARTITA_TEST_LIB_TESTPASSES_H

namespace partita::test {
void registerTestPasses();
} // namespace partita::test

#endif // PARTITA_TEST_LIB_TESTPASSES_H
