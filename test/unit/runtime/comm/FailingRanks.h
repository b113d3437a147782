//===- FailingRanks.h - local ranks expected to fail -------------*- C++ -*-===//
//
// For the communicator tests: runs a body on local ranks that should fail
// and records what each rank saw and when.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_UNIT_RUNTIME_COMM_FAILINGRANKS_H
#define PARTITA_TEST_UNIT_RUNTIME_COMM_FAILINGRANKS_H

#include "partita/runtime/Communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace partita::runtime::test {

/// What one rank saw: its error (empty when none) and when it got it, in
/// milliseconds after the ranks started.
struct Outcome {
  std::string error;
  long long ms = -1;
};

/// Runs `body` on n local ranks; returns each rank's outcome and, through
/// `rootCause`, what runLocalRanks threw. A run that does not throw is a
/// test failure.
inline std::vector<Outcome>
runFailing(int n, std::chrono::milliseconds timeout,
           const std::function<void(Communicator &)> &body,
           std::string &rootCause) {
  using Clock = std::chrono::steady_clock;
  std::vector<Outcome> outcomes(n);
  Clock::time_point start = Clock::now();
  rootCause.clear();
  try {
    runLocalRanks(
        n,
        [&](Communicator &c) {
          try {
            body(c);
          } catch (const Error &e) {
            outcomes[c.rank()] = {
                e.what(), std::chrono::duration_cast<std::chrono::milliseconds>(
                              Clock::now() - start)
                              .count()};
            throw;
          }
        },
        timeout);
    ADD_FAILURE() << "runLocalRanks did not throw";
  } catch (const Error &e) {
    rootCause = e.what();
  }
  return outcomes;
}

} // namespace partita::runtime::test

#endif // PARTITA_TEST_UNIT_RUNTIME_COMM_FAILINGRANKS_H
