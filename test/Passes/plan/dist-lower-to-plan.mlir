// RUN: partita-opt %s --dist-lower-to-plan="output=%t.pb reference=forward seed=3" | FileCheck %s --check-prefix=IR
// RUN: partita run %t.pb --check | FileCheck %s --check-prefix=EXEC

// Tests that the pass leaves the IR unchanged and writes a plan that runs
// (with the same function as its reference).

// IR-LABEL: func.func @forward
// IR-NEXT:    nn.einsum "bh,hc->bc"
// IR-NEXT:    return
// EXEC:      partita run: forward on 1 rank (local), arena 24 bytes per rank
// EXEC:      y: f32[3x2]
// EXEC-NEXT: check y: max abs diff 0.000e+00, max rel diff 0.000e+00 (ok, rtol 1e-05)

module {
  func.func @forward(%w: tensor<4x2xf32> {nn.param = "w"},
                     %x: tensor<3x4xf32> {nn.input = "x"})
      -> (tensor<3x2xf32> {nn.output = "y"}) {
    %y = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
    return %y : tensor<3x2xf32>
  }
}
