// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=adamw lr=0.01 beta1=0.8 beta2=0.99 eps=1e-6 weight-decay=0.1" | FileCheck %s --check-prefixes=CHECK,ADAMW
// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=sgd lr=0.5 momentum=0.9 weight-decay=0.25" | FileCheck %s --check-prefixes=CHECK,SGD
// RUN: partita-opt %s -split-input-file -nn-autodiff=optimizer=none | FileCheck %s --check-prefixes=CHECK,NONE
// RUN: partita-opt %s -split-input-file -nn-autodiff="optimizer=none clip-norm=2.0" | FileCheck %s --check-prefixes=CHECK,CLIP

// Tests the train-step signature under each optimizer: parameters, then
// state grouped per parameter (m, v / momentum), then the step count
// (adamw), then the inputs; results the new parameters, the new state and
// the loss. The unused parameter u gets a zero gradient; w, read twice, gets
// the sum of its two cotangents.
func.func @forward(%w: tensor<4x2xf32> {nn.param = "w"}, %u: tensor<3xf32> {nn.param = "u"},
                   %x: tensor<3x4xf32> {nn.input = "x"}, %l: tensor<3xi32> {nn.input = "labels"})
    -> (tensor<f32> {nn.output = "loss"}, tensor<3x2xf32> {nn.output = "logits"}) {
  %y = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  %z = nn.einsum "bh,hc->bc" %x, %w : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
  %s = nn.add %y, %z : tensor<3x2xf32>
  %loss = nn.cross_entropy %s, %l : tensor<3x2xf32>, tensor<3xi32> -> tensor<f32>
  return %loss, %s : tensor<f32>, tensor<3x2xf32>
}
// CHECK-NOT: func.func @forward
// ADAMW-LABEL: func.func @train_step
// ADAMW-SAME: (%[[W:arg0]]: tensor<4x2xf32> {nn.param = "w"}, %[[U:arg1]]: tensor<3xf32> {nn.param = "u"},
// ADAMW-SAME: %[[WM:arg2]]: tensor<4x2xf32> {nn.state = "w.m"}, %[[WV:arg3]]: tensor<4x2xf32> {nn.state = "w.v"},
// ADAMW-SAME: %[[UM:arg4]]: tensor<3xf32> {nn.state = "u.m"}, %[[UV:arg5]]: tensor<3xf32> {nn.state = "u.v"},
// ADAMW-SAME: %[[STEP:arg6]]: tensor<f32> {nn.state = "step"},
// ADAMW-SAME: %[[X:arg7]]: tensor<3x4xf32> {nn.input = "x"}, %[[L:arg8]]: tensor<3xi32> {nn.input = "labels"})
// ADAMW-SAME: -> (tensor<4x2xf32> {nn.param = "w"}, tensor<3xf32> {nn.param = "u"},
// ADAMW-SAME: tensor<4x2xf32> {nn.state = "w.m"}, tensor<4x2xf32> {nn.state = "w.v"}, tensor<3xf32> {nn.state = "u.m"}, tensor<3xf32> {nn.state = "u.v"},
// ADAMW-SAME: tensor<f32> {nn.state = "step"}, tensor<f32> {nn.output = "loss"})
// SGD-LABEL: func.func @train_step
// SGD-SAME: (%[[W:arg0]]: tensor<4x2xf32> {nn.param = "w"}, %[[U:arg1]]: tensor<3xf32> {nn.param = "u"},
// SGD-SAME: %[[WB:arg2]]: tensor<4x2xf32> {nn.state = "w.momentum"}, %[[UB:arg3]]: tensor<3xf32> {nn.state = "u.momentum"},
// SGD-SAME: %[[X:arg4]]: tensor<3x4xf32> {nn.input = "x"}, %[[L:arg5]]: tensor<3xi32> {nn.input = "labels"})
// SGD-SAME: -> (tensor<4x2xf32> {nn.param = "w"}, tensor<3xf32> {nn.param = "u"},
// SGD-SAME: tensor<4x2xf32> {nn.state = "w.momentum"}, tensor<3xf32> {nn.state = "u.momentum"}, tensor<f32> {nn.output = "loss"})
// NONE-LABEL: func.func @grads
// NONE-SAME: (%[[W:arg0]]: tensor<4x2xf32> {nn.param = "w"}, %[[U:arg1]]: tensor<3xf32> {nn.param = "u"},
// NONE-SAME: %[[X:arg2]]: tensor<3x4xf32> {nn.input = "x"}, %[[L:arg3]]: tensor<3xi32> {nn.input = "labels"})
// NONE-SAME: -> (tensor<f32> {nn.output = "loss"}, tensor<4x2xf32> {nn.grad = "w"}, tensor<3xf32> {nn.grad = "u"})
// CLIP-LABEL: func.func @grads
// CLIP-SAME: (%[[W:arg0]]: {{[^,]*}}, %[[U:arg1]]: {{[^,]*}}, %[[X:arg2]]: {{[^,]*}}, %[[L:arg3]]: {{[^)]*}})

// CHECK: %[[Y:.+]] = nn.einsum "bh,hc->bc" %[[X]], %[[W]]
// CHECK: %[[Z:.+]] = nn.einsum "bh,hc->bc" %[[X]], %[[W]]
// CHECK: %[[S:.+]] = nn.add %[[Y]], %[[Z]]
// CHECK: %[[LOSS:.+]] = nn.cross_entropy %[[S]], %[[L]]
// CHECK: %[[ONE:.+]] = nn.constant {nn.grad_kind = "B"} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DS:.+]] = nn.cross_entropy_grad %[[S]], %[[L]], %[[ONE]] {nn.grad_kind = "B"}
// CHECK: %[[DW1:.+]] = nn.einsum "bc,bh->hc" %[[DS]], %[[X]] {nn.grad_kind = "W"}
// CHECK: %[[DW2:.+]] = nn.einsum "bc,bh->hc" %[[DS]], %[[X]] {nn.grad_kind = "W"}
// CHECK: %[[DW:.+]] = nn.add %[[DW1]], %[[DW2]] {nn.grad_kind = "W"} : tensor<4x2xf32>
// CHECK: %[[DU:.+]] = nn.constant {nn.grad_kind = "W"} dense<0.000000e+00> : tensor<3xf32>

// ADAMW: %[[ONE2:.+]] = nn.constant {nn.grad_kind = "update"} dense<1.000000e+00> : tensor<f32>
// ADAMW: %[[STEP2:.+]] = nn.add %[[STEP]], %[[ONE2]] {nn.grad_kind = "update"} : tensor<f32>
// ADAMW: %[[W2:.+]], %[[WM2:.+]], %[[WV2:.+]] = nn.adamw %[[W]], %[[DW]], %[[WM]], %[[WV]], %[[STEP2]] lr = 1.000000e-02 beta1 = 8.000000e-01 beta2 = 0.98999999999999999 eps = 9.9999999999999995E-7 weight_decay = 1.000000e-01 {nn.grad_kind = "update"} : tensor<4x2xf32>, tensor<f32>
// ADAMW: %[[U2:.+]], %[[UM2:.+]], %[[UV2:.+]] = nn.adamw %[[U]], %[[DU]], %[[UM]], %[[UV]], %[[STEP2]] {{.*}} {nn.grad_kind = "update"} : tensor<3xf32>, tensor<f32>
// ADAMW: return %[[W2]], %[[U2]], %[[WM2]], %[[WV2]], %[[UM2]], %[[UV2]], %[[STEP2]], %[[LOSS]]

// SGD: %[[W2:.+]], %[[WB2:.+]] = nn.sgd %[[W]], %[[DW]], %[[WB]] lr = 5.000000e-01 momentum = 9.000000e-01 weight_decay = 2.500000e-01 {nn.grad_kind = "update"} : tensor<4x2xf32>
// SGD: %[[U2:.+]], %[[UB2:.+]] = nn.sgd %[[U]], %[[DU]], %[[UB]] {{.*}} : tensor<3xf32>
// SGD: return %[[W2]], %[[U2]], %[[WB2]], %[[UB2]], %[[LOSS]]

// NONE: return %[[LOSS]], %[[DW]], %[[DU]]

// Clipping by the global norm: coef = c / max(sqrt(sum g*g) + 1e-6, c).
// CLIP: %[[SQW:.+]] = nn.mul %[[DW]], %[[DW]] {nn.grad_kind = "update"}
// CLIP: %[[SUMW:.+]] = nn.reduce sum %[[SQW]] dims = [0, 1] {nn.grad_kind = "update"} : tensor<4x2xf32> -> tensor<f32>
// CLIP: %[[SQU:.+]] = nn.mul %[[DU]], %[[DU]]
// CLIP: %[[SUMU:.+]] = nn.reduce sum %[[SQU]] dims = [0] {nn.grad_kind = "update"} : tensor<3xf32> -> tensor<f32>
// CLIP: %[[TOTAL:.+]] = nn.add %[[SUMW]], %[[SUMU]]
// CLIP: %[[NORM:.+]] = nn.sqrt %[[TOTAL]] {nn.grad_kind = "update"}
// CLIP: %[[C:.+]] = nn.constant {nn.grad_kind = "update"} dense<2.000000e+00> : tensor<f32>
// CLIP: %[[TINY:.+]] = nn.constant {nn.grad_kind = "update"} dense<9.99999997E-7> : tensor<f32>
// CLIP: %[[PADDED:.+]] = nn.add %[[NORM]], %[[TINY]]
// CLIP: %[[DEN:.+]] = nn.max %[[PADDED]], %[[C]]
// CLIP: %[[COEF:.+]] = nn.div %[[C]], %[[DEN]]
// CLIP: %[[CW:.+]] = nn.broadcast %[[COEF]] dims = [] {nn.grad_kind = "update"} : tensor<f32> -> tensor<4x2xf32>
// CLIP: %[[GW:.+]] = nn.mul %[[DW]], %[[CW]]
// CLIP: %[[CU:.+]] = nn.broadcast %[[COEF]] dims = [] {nn.grad_kind = "update"} : tensor<f32> -> tensor<3xf32>
// CLIP: %[[GU:.+]] = nn.mul %[[DU]], %[[CU]]
// CLIP: return %[[LOSS]], %[[GW]], %[[GU]]

// -----

// Tests that adamw gets the step count converted to a parameter's element
// type when that is not f32.
func.func @forward(%w: tensor<4xbf16> {nn.param = "w"}) -> (tensor<bf16> {nn.output = "loss"}) {
  %l = nn.reduce sum %w dims = [0] : tensor<4xbf16> -> tensor<bf16>
  return %l : tensor<bf16>
}
// CHECK-LABEL: func.func
// ADAMW: %[[STEP2:.+]] = nn.add %arg3, %{{.+}} {nn.grad_kind = "update"} : tensor<f32>
// ADAMW: %[[CONV:.+]] = nn.convert %[[STEP2]] {nn.grad_kind = "update"} : tensor<f32> to tensor<bf16>
// ADAMW: nn.adamw %arg0, %{{.+}}, %arg1, %arg2, %[[CONV]] {{.*}} : tensor<4xbf16>, tensor<bf16>
// SGD-NOT: nn.convert
// SGD: nn.sgd
// NONE-NOT: nn.convert
// NONE: return

// -----

// Tests that the step function keeps @forward's other attributes: those of
// its parameters and inputs, and the function's own.
func.func @forward(%w: tensor<4xf32> {nn.param = "w", user.note = "weight"}, %x: tensor<4xf32> {nn.input = "x", user.note = "data"})
    -> (tensor<f32> {nn.output = "loss"}) attributes {user.tag = 7 : i64} {
  %p = nn.mul %w, %x : tensor<4xf32>
  %l = nn.reduce sum %p dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func
// CHECK-SAME: {nn.param = "w", user.note = "weight"}
// CHECK-SAME: {nn.input = "x", user.note = "data"}
// CHECK-SAME: attributes {user.tag = 7 : i64}
