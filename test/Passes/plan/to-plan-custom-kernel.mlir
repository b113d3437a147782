// RUN: partita-translate --to-plan --plan-text -split-input-file %s | FileCheck %s

// The plan lowering asks each op's KernelOpInterface for its kernel and
// knows no op itself: ptest.kernel (test/lib/TestDialect.cpp) describes the
// kernel its attributes spell.

// Tests that a kernel name the plan has no kind for lowers to a CUSTOM
// kernel with its name and every attribute, sorted by name, of each kind.
// CHECK-LABEL: name: "forward"
// CHECK:      kernel {
// CHECK-NEXT:   kind: CUSTOM
// CHECK-NEXT:   attrs {
// CHECK-NEXT:   }
// CHECK-NEXT:   inputs: 0
// CHECK-NEXT:   outputs: 1
// CHECK-NEXT:   custom_name: "my.kernel"
// CHECK-NEXT:   custom_attrs {
// CHECK-NEXT:     name: "alpha"
// CHECK-NEXT:     value {
// CHECK-NEXT:       float_value: 0.5
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   custom_attrs {
// CHECK-NEXT:     name: "count"
// CHECK-NEXT:     value {
// CHECK-NEXT:       int_value: -3
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   custom_attrs {
// CHECK-NEXT:     name: "dims"
// CHECK-NEXT:     value {
// CHECK-NEXT:       ints_value {
// CHECK-NEXT:         values: 1
// CHECK-NEXT:         values: 0
// CHECK-NEXT:       }
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   custom_attrs {
// CHECK-NEXT:     name: "mode"
// CHECK-NEXT:     value {
// CHECK-NEXT:       string_value: "fast"
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT:   custom_attrs {
// CHECK-NEXT:     name: "on"
// CHECK-NEXT:     value {
// CHECK-NEXT:       bool_value: true
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT: }
func.func @forward(%x: tensor<2x3xf32> {nn.input = "x"}) -> tensor<2x3xf32> {
  %y = "ptest.kernel"(%x) {name = "my.kernel", on = true, mode = "fast",
                           dims = array<i64: 1, 0>, count = -3, alpha = 0.5}
      : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// Tests that a built-in name lowers to its kind and its attributes to the
// KernelAttrs fields of the same names, whichever op names it.
// CHECK-LABEL: name: "forward"
// CHECK:      kind: ADD
// CHECK-NEXT: attrs {
// CHECK-NEXT: }
// CHECK-NEXT: inputs: 0
// CHECK-NEXT: inputs: 0
// CHECK-NEXT: outputs: 2
// CHECK-NEXT: }
// CHECK:      kind: ATTENTION
// CHECK-NEXT: attrs {
// CHECK-NEXT:   causal: true
// CHECK-NEXT:   has_scale: true
// CHECK-NEXT:   scale: 0.25
// CHECK-NEXT: }
// CHECK:      kind: TRANSPOSE
// CHECK-NEXT: attrs {
// CHECK-NEXT:   dims: 1
// CHECK-NEXT:   dims: 0
// CHECK-NEXT: }
// CHECK-NOT:  custom_name
func.func @forward(%x: tensor<2x3xf32> {nn.input = "x"},
                   %q: tensor<1x4x2x8xf32> {nn.input = "q"})
    -> (tensor<2x3xf32>, tensor<1x4x2x8xf32>, tensor<3x2xf32>) {
  %y = "ptest.kernel"(%x, %x) {name = "add"}
      : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %a = "ptest.kernel"(%q, %q, %q) {name = "attention", causal = true,
                                   has_scale = true, scale = 0.25}
      : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>)
      -> tensor<1x4x2x8xf32>
  %t = "ptest.kernel"(%x) {name = "transpose", dims = array<i64: 1, 0>}
      : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %y, %a, %t : tensor<2x3xf32>, tensor<1x4x2x8xf32>, tensor<3x2xf32>
}

// -----

// Tests that a name is built in only in the plan's own (lower-case)
// spelling: "Add" is a custom kernel.
// CHECK-LABEL: name: "forward"
// CHECK:      kind: CUSTOM
// CHECK:      custom_name: "Add"
func.func @forward(%x: tensor<2xf32> {nn.input = "x"}) -> tensor<2xf32> {
  %y = "ptest.kernel"(%x, %x) {name = "Add"}
      : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %y : tensor<2xf32>
}
