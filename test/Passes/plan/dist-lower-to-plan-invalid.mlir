// RUN: partita-opt %s --dist-lower-to-plan="function=missing" -split-input-file -verify-diagnostics -o /dev/null

// Tests that the pass reports, on the module, a function option that names
// no function.
// expected-error @below {{has no function @missing to lower}}
module {
  func.func @forward() {
    return
  }
}
