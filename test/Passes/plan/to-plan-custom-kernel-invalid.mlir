// RUN: partita-translate --to-plan %s -split-input-file -verify-diagnostics -o /dev/null

// Tests that an op with no KernelOpInterface (ptest.bad_hook,
// test/lib/TestDialect.cpp) is rejected at the op.
func.func @forward(%x: tensor<2x2xf32> {nn.input = "x"}) -> tensor<2x2xf32> {
  // expected-error @+1 {{cannot be lowered to a plan: the runtime has no kernel or collective for it (it implements no dist::KernelOpInterface)}}
  %y = "ptest.bad_hook"(%x) : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

// Tests that a built-in kernel with an attribute its kind has no field for
// is rejected.
func.func @forward(%x: tensor<2xf32> {nn.input = "x"}) -> tensor<2xf32> {
  // expected-error @+1 {{describes kernel 'add' with attribute 'bogus', which that kernel kind has no field for (KernelAttrs in runtime/plan/plan.proto)}}
  %y = "ptest.kernel"(%x, %x) {name = "add", bogus = 1}
      : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// Tests that a built-in kernel's attribute of the wrong kind is rejected.
func.func @forward(%x: tensor<2x2xf32> {nn.input = "x"}) -> tensor<2x2xf32> {
  // expected-error @+1 {{describes kernel 'softmax' with attribute 'dim' of kind float, but KernelAttrs.dim takes int64}}
  %y = "ptest.kernel"(%x) {name = "softmax", dim = 1.0}
      : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

func.func @forward(%x: tensor<2x2xf32> {nn.input = "x"}) -> tensor<2x2xf32> {
  // expected-error @+1 {{describes kernel 'transpose' with attribute 'dims' of kind int, but KernelAttrs.dims takes a list of int64}}
  %y = "ptest.kernel"(%x) {name = "transpose", dims = 1}
      : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}

// -----

// Tests that a kernel with an empty name is rejected.
func.func @forward(%x: tensor<2xf32> {nn.input = "x"}) -> tensor<2xf32> {
  // expected-error @+1 {{describes a kernel with an empty name}}
  %y = "ptest.kernel"(%x) {name = ""} : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// Tests that a failing KernelOpInterface (its own diagnostic) stops the
// lowering.
func.func @forward(%x: tensor<2xf32> {nn.input = "x"}) -> tensor<2xf32> {
  // expected-error @+1 {{'ptest.kernel' op attribute 'bad' is no kernel attribute}}
  %y = "ptest.kernel"(%x) {name = "my.kernel", bad = [1, 2]}
      : (tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
