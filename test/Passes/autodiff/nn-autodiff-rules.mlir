// RUN: partita-opt %s -split-input-file -nn-autodiff=optimizer=none | FileCheck %s

// Each case differentiates one op family. The loss is reduce-sum of the op's
// result, so the result's cotangent DY is the broadcast of the seed 1.0; every
// value depends on parameters only, so every backward op is a weight
// gradient ("W"). The expected ops follow from calculus by hand:
// d(a+b) = (dy, dy), d(a-b) = (dy, -dy), d(a*b) = (dy*b, dy*a),
// d(a/b) = (dy/b, -(dy*y)/b), d max(a,b) = (dy*[a>=b], dy - dy*[a>=b]).

// Tests that add, sub, mul, div and max get their textbook cotangents.
func.func @forward(%a: tensor<4xf32> {nn.param = "a"}, %b: tensor<4xf32> {nn.param = "b"},
                   %c: tensor<4xf32> {nn.param = "c"}, %d: tensor<4xf32> {nn.param = "d"},
                   %e: tensor<4xf32> {nn.param = "e"}, %f: tensor<4xf32> {nn.param = "f"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %add = nn.add %a, %b : tensor<4xf32>
  %sub = nn.sub %add, %c : tensor<4xf32>
  %mul = nn.mul %sub, %d : tensor<4xf32>
  %div = nn.div %mul, %e : tensor<4xf32>
  %max = nn.max %div, %f : tensor<4xf32>
  %l = nn.reduce sum %max dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[A:arg0]]: tensor<4xf32> {nn.param = "a"}, %[[B:arg1]]: tensor<4xf32> {nn.param = "b"}, %[[C:arg2]]: {{[^,]*}}, %[[D:arg3]]: {{[^,]*}}, %[[E:arg4]]: {{[^,]*}}, %[[F:arg5]]: {{[^,]*}})
// CHECK-SAME: -> (tensor<f32> {nn.output = "loss"}, tensor<4xf32> {nn.grad = "a"}, tensor<4xf32> {nn.grad = "b"}, tensor<4xf32> {nn.grad = "c"}, tensor<4xf32> {nn.grad = "d"}, tensor<4xf32> {nn.grad = "e"}, tensor<4xf32> {nn.grad = "f"})
// CHECK: %[[ADD:.+]] = nn.add %[[A]], %[[B]] : tensor<4xf32>
// CHECK: %[[SUB:.+]] = nn.sub %[[ADD]], %[[C]] : tensor<4xf32>
// CHECK: %[[MUL:.+]] = nn.mul %[[SUB]], %[[D]] : tensor<4xf32>
// CHECK: %[[DIV:.+]] = nn.div %[[MUL]], %[[E]] : tensor<4xf32>
// CHECK: %[[MAX:.+]] = nn.max %[[DIV]], %[[F]] : tensor<4xf32>
// CHECK: %[[L:.+]] = nn.reduce sum %[[MAX]] dims = [0] : tensor<4xf32> -> tensor<f32>
// CHECK: %[[ONE:.+]] = nn.constant {nn.grad_kind = "B"} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DY:.+]] = nn.broadcast %[[ONE]] dims = [] {nn.grad_kind = "W"} : tensor<f32> -> tensor<4xf32>
// CHECK: %[[GE:.+]] = nn.greater_equal %[[DIV]], %[[F]] {nn.grad_kind = "W"}
// CHECK: %[[DDIV:.+]] = nn.mul %[[DY]], %[[GE]] {nn.grad_kind = "W"}
// CHECK: %[[GE2:.+]] = nn.greater_equal %[[DIV]], %[[F]] {nn.grad_kind = "W"}
// CHECK: %[[TOLHS:.+]] = nn.mul %[[DY]], %[[GE2]] {nn.grad_kind = "W"}
// CHECK: %[[DF:.+]] = nn.sub %[[DY]], %[[TOLHS]] {nn.grad_kind = "W"}
// CHECK: %[[DMUL:.+]] = nn.div %[[DDIV]], %[[E]] {nn.grad_kind = "W"}
// CHECK: %[[T:.+]] = nn.mul %[[DDIV]], %[[DIV]] {nn.grad_kind = "W"}
// CHECK: %[[U:.+]] = nn.div %[[T]], %[[E]] {nn.grad_kind = "W"}
// CHECK: %[[DE:.+]] = nn.neg %[[U]] {nn.grad_kind = "W"}
// CHECK: %[[DSUB:.+]] = nn.mul %[[DMUL]], %[[D]] {nn.grad_kind = "W"}
// CHECK: %[[DD:.+]] = nn.mul %[[DMUL]], %[[SUB]] {nn.grad_kind = "W"}
// CHECK: %[[DC:.+]] = nn.neg %[[DSUB]] {nn.grad_kind = "W"}
// CHECK: return %[[L]], %[[DSUB]], %[[DSUB]], %[[DC]], %[[DD]], %[[DE]], %[[DF]]

// -----

// Tests the unary rules: -dy, dy*y, dy/x, dy*(1 - y*y), dy*(-0.5*y^3) and
// (dy*0.5)/y.
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %0 = nn.neg %x : tensor<4xf32>
  %1 = nn.exp %0 : tensor<4xf32>
  %2 = nn.log %1 : tensor<4xf32>
  %3 = nn.tanh %2 : tensor<4xf32>
  %4 = nn.rsqrt %3 : tensor<4xf32>
  %5 = nn.sqrt %4 : tensor<4xf32>
  %l = nn.reduce sum %5 dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK: %[[NEG:.+]] = nn.neg %[[X:arg0]] : tensor<4xf32>
// CHECK: %[[EXP:.+]] = nn.exp %[[NEG]]
// CHECK: %[[LOG:.+]] = nn.log %[[EXP]]
// CHECK: %[[TANH:.+]] = nn.tanh %[[LOG]]
// CHECK: %[[RSQRT:.+]] = nn.rsqrt %[[TANH]]
// CHECK: %[[SQRT:.+]] = nn.sqrt %[[RSQRT]]
// CHECK: %[[DY:.+]] = nn.broadcast
// CHECK: %[[HALF:.+]] = nn.constant {nn.grad_kind = "W"} dense<5.000000e-01> : tensor<4xf32>
// CHECK: %[[T0:.+]] = nn.mul %[[DY]], %[[HALF]]
// CHECK: %[[D4:.+]] = nn.div %[[T0]], %[[SQRT]]
// CHECK: %[[SQ:.+]] = nn.mul %[[RSQRT]], %[[RSQRT]]
// CHECK: %[[CUBE:.+]] = nn.mul %[[SQ]], %[[RSQRT]]
// CHECK: %[[MHALF:.+]] = nn.constant {nn.grad_kind = "W"} dense<-5.000000e-01> : tensor<4xf32>
// CHECK: %[[SLOPE:.+]] = nn.mul %[[MHALF]], %[[CUBE]]
// CHECK: %[[D3:.+]] = nn.mul %[[D4]], %[[SLOPE]]
// CHECK: %[[YY:.+]] = nn.mul %[[TANH]], %[[TANH]]
// CHECK: %[[ONES:.+]] = nn.constant {nn.grad_kind = "W"} dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[ONEMINUS:.+]] = nn.sub %[[ONES]], %[[YY]]
// CHECK: %[[D2:.+]] = nn.mul %[[D3]], %[[ONEMINUS]]
// CHECK: %[[D1:.+]] = nn.div %[[D2]], %[[EXP]]
// CHECK: %[[D0:.+]] = nn.mul %[[D1]], %[[EXP]]
// CHECK: %[[DX:.+]] = nn.neg %[[D0]]
// CHECK: return %{{.+}}, %[[DX]]

// -----

// Tests that relu, silu and gelu (tanh form) use their grad ops on the
// forward input.
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %0 = nn.relu %x : tensor<4xf32>
  %1 = nn.silu %0 : tensor<4xf32>
  %2 = nn.gelu %1 tanh : tensor<4xf32>
  %l = nn.reduce sum %2 dims = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK: %[[RELU:.+]] = nn.relu %[[X:arg0]]
// CHECK: %[[SILU:.+]] = nn.silu %[[RELU]]
// CHECK: %[[DY:.+]] = nn.broadcast
// CHECK: %[[D1:.+]] = nn.gelu_grad %[[SILU]], %[[DY]] tanh {nn.grad_kind = "W"} : tensor<4xf32>
// CHECK: %[[D0:.+]] = nn.silu_grad %[[RELU]], %[[D1]] {nn.grad_kind = "W"} : tensor<4xf32>
// CHECK: %[[DX:.+]] = nn.relu_grad %[[X]], %[[D0]] {nn.grad_kind = "W"} : tensor<4xf32>
// CHECK: return %{{.+}}, %[[DX]]

// -----

// Tests the einsum rule: each operand's cotangent is an einsum of the
// result's cotangent with the other operand ("bh,hf->bf": "bf,hf->bh" and
// "bf,bh->hf"), and a one-operand einsum's letters found nowhere else are
// broadcast back ("bf->f" sums b away, so its cotangent is "f->f"'s
// identity broadcast along b).
func.func @forward(%w: tensor<3x5xf32> {nn.param = "w"}, %x: tensor<2x3xf32> {nn.input = "x"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.einsum "bh,hf->bf" %x, %w : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %s = nn.einsum "bf->f" %y : (tensor<2x5xf32>) -> tensor<5xf32>
  %l = nn.reduce sum %s dims = [0] : tensor<5xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[W:arg0]]: tensor<3x5xf32> {nn.param = "w"}, %[[X:arg1]]: tensor<2x3xf32> {nn.input = "x"})
// CHECK: %[[Y:.+]] = nn.einsum "bh,hf->bf" %[[X]], %[[W]]
// CHECK: %[[DS:.+]] = nn.broadcast %{{.+}} dims = [] {nn.grad_kind = "B"} : tensor<f32> -> tensor<5xf32>
// CHECK: %[[DY:.+]] = nn.broadcast %[[DS]] dims = [1] {nn.grad_kind = "B"} : tensor<5xf32> -> tensor<2x5xf32>
// CHECK-NOT: nn.einsum "bf,hf->bh"
// CHECK: %[[DW:.+]] = nn.einsum "bf,bh->hf" %[[DY]], %[[X]] {nn.grad_kind = "W"} : (tensor<2x5xf32>, tensor<2x3xf32>) -> tensor<3x5xf32>
// CHECK: return %{{.+}}, %[[DW]]

// -----

// Tests that the input operand of an einsum gets "bf,hf->bh" when it needs
// a cotangent (x is computed from a parameter here), tagged "W" since it
// depends on parameters only.
func.func @forward(%w: tensor<3x5xf32> {nn.param = "w"}, %v: tensor<2x3xf32> {nn.param = "v"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.einsum "bh,hf->bf" %v, %w : (tensor<2x3xf32>, tensor<3x5xf32>) -> tensor<2x5xf32>
  %l = nn.reduce sum %y dims = [0, 1] : tensor<2x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[W:arg0]]: {{.*}}, %[[V:arg1]]: {{.*}})
// CHECK: %[[DY:.+]] = nn.broadcast %{{.+}} dims = [] {nn.grad_kind = "W"} : tensor<f32> -> tensor<2x5xf32>
// CHECK: %[[DV:.+]] = nn.einsum "bf,hf->bh" %[[DY]], %[[W]] {nn.grad_kind = "W"} : (tensor<2x5xf32>, tensor<3x5xf32>) -> tensor<2x3xf32>
// CHECK: %[[DW:.+]] = nn.einsum "bf,bh->hf" %[[DY]], %[[V]] {nn.grad_kind = "W"}
// CHECK: return %{{.+}}, %[[DW]], %[[DV]]

// -----

// Tests broadcast <-> reduce: a broadcast's cotangent sums the new
// dimensions and the expanded size-1 ones (then reshapes back); reduce mean
// broadcasts back times 1/count (1/6); reduce max multiplies by
// greater_equal(x, broadcast(max)).
func.func @forward(%b: tensor<1x3xf32> {nn.param = "b"}) -> (tensor<f32> {nn.output = "loss"}) {
  %w = nn.broadcast %b dims = [1, 2] : tensor<1x3xf32> -> tensor<4x2x3xf32>
  %m = nn.reduce max %w dims = [0] : tensor<4x2x3xf32> -> tensor<2x3xf32>
  %l = nn.reduce mean %m dims = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK: %[[W:.+]] = nn.broadcast %[[B:arg0]] dims = [1, 2] : tensor<1x3xf32> -> tensor<4x2x3xf32>
// CHECK: %[[M:.+]] = nn.reduce max %[[W]] dims = [0]
// CHECK: %[[ONE:.+]] = nn.constant {nn.grad_kind = "B"} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[WIDE:.+]] = nn.broadcast %[[ONE]] dims = [] {nn.grad_kind = "W"} : tensor<f32> -> tensor<2x3xf32>
// CHECK: %[[SIXTH:.+]] = nn.constant {nn.grad_kind = "W"} dense<0.166666{{[0-9]*}}> : tensor<2x3xf32>
// CHECK: %[[DM:.+]] = nn.mul %[[WIDE]], %[[SIXTH]]
// CHECK: %[[DMW:.+]] = nn.broadcast %[[DM]] dims = [1, 2] {nn.grad_kind = "W"} : tensor<2x3xf32> -> tensor<4x2x3xf32>
// CHECK: %[[MW:.+]] = nn.broadcast %[[M]] dims = [1, 2] {nn.grad_kind = "W"} : tensor<2x3xf32> -> tensor<4x2x3xf32>
// CHECK: %[[GE:.+]] = nn.greater_equal %[[W]], %[[MW]]
// CHECK: %[[DW:.+]] = nn.mul %[[DMW]], %[[GE]]
// CHECK: %[[SUM:.+]] = nn.reduce sum %[[DW]] dims = [0, 1] {nn.grad_kind = "W"} : tensor<4x2x3xf32> -> tensor<3xf32>
// CHECK: %[[DB:.+]] = nn.reshape %[[SUM]] {nn.grad_kind = "W"} : tensor<3xf32> -> tensor<1x3xf32>
// CHECK: return %{{.+}}, %[[DB]]

// -----

// Tests that transpose's cotangent is the inverse transpose and reshape's
// the reshape back.
func.func @forward(%x: tensor<2x3x4xf32> {nn.param = "x"}) -> (tensor<f32> {nn.output = "loss"}) {
  %t = nn.transpose %x perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %r = nn.reshape %t : tensor<3x4x2xf32> -> tensor<24xf32>
  %l = nn.reduce sum %r dims = [0] : tensor<24xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK: %[[DR:.+]] = nn.broadcast %{{.+}} dims = [] {{.*}} -> tensor<24xf32>
// CHECK: %[[DT:.+]] = nn.reshape %[[DR]] {nn.grad_kind = "W"} : tensor<24xf32> -> tensor<3x4x2xf32>
// CHECK: %[[DX:.+]] = nn.transpose %[[DT]] perm = [2, 0, 1] {nn.grad_kind = "W"} : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
// CHECK: return %{{.+}}, %[[DX]]

// -----

// Tests softmax: dx = y * (dy - broadcast(sum(dy * y))) along the softmax
// dimension. The seed's broadcast is an input gradient ("W": the product
// depends on the input t); softmax(x) depends on the parameter only, so its
// cotangent and x's are weight gradients ("W").
func.func @forward(%x: tensor<2x5xf32> {nn.param = "x"}, %t: tensor<2x5xf32> {nn.input = "t"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.softmax %x dim = 1 : tensor<2x5xf32>
  %p = nn.mul %y, %t : tensor<2x5xf32>
  %l = nn.reduce sum %p dims = [0, 1] : tensor<2x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[X:arg0]]: {{.*}}, %[[T:arg1]]: {{.*}})
// CHECK: %[[Y:.+]] = nn.softmax %[[X]] dim = 1
// CHECK: %[[DP:.+]] = nn.broadcast %{{.+}} dims = [] {nn.grad_kind = "B"}
// CHECK: %[[DY:.+]] = nn.mul %[[DP]], %[[T]] {nn.grad_kind = "W"}
// CHECK: %[[PROD:.+]] = nn.mul %[[DY]], %[[Y]] {nn.grad_kind = "W"}
// CHECK: %[[DOT:.+]] = nn.reduce sum %[[PROD]] dims = [1] {nn.grad_kind = "W"} : tensor<2x5xf32> -> tensor<2xf32>
// CHECK: %[[WIDE:.+]] = nn.broadcast %[[DOT]] dims = [0] {nn.grad_kind = "W"} : tensor<2xf32> -> tensor<2x5xf32>
// CHECK: %[[DIFF:.+]] = nn.sub %[[DY]], %[[WIDE]]
// CHECK: %[[DX:.+]] = nn.mul %[[Y]], %[[DIFF]] {nn.grad_kind = "W"}
// CHECK: return %{{.+}}, %[[DX]]

// -----

// Tests layer_norm: layer_norm_grad for the input; gamma's gradient is
// layer_norm_gamma_grad (the sum of dy * xhat over the leading dimensions,
// in one op), beta's sums dy.
func.func @forward(%g: tensor<4xf32> {nn.param = "g"}, %b: tensor<4xf32> {nn.param = "b"},
                   %w: tensor<2x3x4xf32> {nn.param = "w"}) -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.layer_norm %w, %g, %b eps = 1.0e-05 : tensor<2x3x4xf32>, tensor<4xf32>
  %l = nn.reduce sum %y dims = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[G:arg0]]: {{.*}}, %[[B:arg1]]: {{.*}}, %[[W:arg2]]: {{.*}})
// CHECK: %[[DY:.+]] = nn.broadcast %{{.+}} dims = [] {{.*}} -> tensor<2x3x4xf32>
// CHECK: %[[DW:.+]] = nn.layer_norm_grad %[[W]], %[[G]], %[[DY]] eps = 1.000000e-05 {nn.grad_kind = "W"} : tensor<2x3x4xf32>, tensor<4xf32>
// CHECK: %[[DG:.+]] = nn.layer_norm_gamma_grad %[[W]], %[[DY]] eps = 1.000000e-05 {nn.grad_kind = "W"} : tensor<2x3x4xf32> -> tensor<4xf32>
// CHECK: %[[DB:.+]] = nn.reduce sum %[[DY]] dims = [0, 1] {nn.grad_kind = "W"} : tensor<2x3x4xf32> -> tensor<4xf32>
// CHECK: return %{{.+}}, %[[DG]], %[[DB]], %[[DW]]

// -----

// Tests rms_norm: gamma's gradient sums dy * rms_norm(x, 1) over the
// leading dimensions; the input x is not a parameter's function, so it gets
// no rms_norm_grad (test nn-autodiff-models.test sees one in Llama).
func.func @forward(%g: tensor<4xf32> {nn.param = "g"}, %x: tensor<3x4xf32> {nn.input = "x"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %y = nn.rms_norm %x, %g eps = 1.0e-06 : tensor<3x4xf32>, tensor<4xf32>
  %l = nn.reduce sum %y dims = [0, 1] : tensor<3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[G:arg0]]: {{.*}}, %[[X:arg1]]: {{.*}})
// CHECK: %[[DY:.+]] = nn.broadcast %{{.+}} dims = [] {nn.grad_kind = "B"} {{.*}} -> tensor<3x4xf32>
// CHECK-NOT: nn.rms_norm_grad
// CHECK: %[[ONES:.+]] = nn.constant {nn.grad_kind = "W"} dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[N:.+]] = nn.rms_norm %[[X]], %[[ONES]] eps = 9.9999999999999995E-7 {nn.grad_kind = "W"}
// CHECK: %[[P:.+]] = nn.mul %[[DY]], %[[N]]
// CHECK: %[[DG:.+]] = nn.reduce sum %[[P]] dims = [0] {nn.grad_kind = "W"} : tensor<3x4xf32> -> tensor<4xf32>
// CHECK: return %{{.+}}, %[[DG]]

// -----

// Tests attention (one attention_grad per operand, with the forward's causal
// and scale) and rotary (rotary_grad of the cotangent with the same theta).
func.func @forward(%q: tensor<1x4x2x8xf32> {nn.param = "q"}, %k: tensor<1x4x1x8xf32> {nn.param = "k"},
                   %v: tensor<1x4x1x8xf32> {nn.param = "v"}) -> (tensor<f32> {nn.output = "loss"}) {
  %qr = nn.rotary %q theta = 500.0 : tensor<1x4x2x8xf32>
  %o = nn.attention %qr, %k, %v causal scale = 0.25 : tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32>
  %l = nn.reduce sum %o dims = [0, 1, 2, 3] : tensor<1x4x2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[Q:arg0]]: {{.*}}, %[[K:arg1]]: {{.*}}, %[[V:arg2]]: {{.*}})
// CHECK: %[[QR:.+]] = nn.rotary %[[Q]] theta = 5.000000e+02
// CHECK: %[[DO:.+]] = nn.broadcast
// CHECK: %[[DQR:.+]] = nn.attention_grad %[[QR]], %[[K]], %[[V]], %[[DO]] wrt = q causal scale = 2.500000e-01 {nn.grad_kind = "W"} : tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32> -> tensor<1x4x2x8xf32>
// CHECK: %[[DK:.+]] = nn.attention_grad %[[QR]], %[[K]], %[[V]], %[[DO]] wrt = k causal scale = 2.500000e-01 {nn.grad_kind = "W"} : tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32> -> tensor<1x4x1x8xf32>
// CHECK: %[[DV:.+]] = nn.attention_grad %[[QR]], %[[K]], %[[V]], %[[DO]] wrt = v causal scale = 2.500000e-01 {nn.grad_kind = "W"} : tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32> -> tensor<1x4x1x8xf32>
// CHECK: %[[DQ:.+]] = nn.rotary_grad %[[DQR]] theta = 5.000000e+02 {nn.grad_kind = "W"} : tensor<1x4x2x8xf32>
// CHECK: return %{{.+}}, %[[DQ]], %[[DK]], %[[DV]]

// -----

// Tests embedding and cross_entropy: the table's gradient is embedding_grad
// of the cotangent at the ids; the logits' is cross_entropy_grad with the
// loss's cotangent; ids and labels get none. The table is read twice (the
// tied head), so its two cotangents are summed.
func.func @forward(%t: tensor<6x4xf32> {nn.param = "t"}, %ids: tensor<2xi32> {nn.input = "ids"},
                   %labels: tensor<2xi32> {nn.input = "labels"}) -> (tensor<f32> {nn.output = "loss"}) {
  %x = nn.embedding %t[%ids] : tensor<6x4xf32>, tensor<2xi32> -> tensor<2x4xf32>
  %logits = nn.einsum "bh,vh->bv" %x, %t : (tensor<2x4xf32>, tensor<6x4xf32>) -> tensor<2x6xf32>
  %l = nn.cross_entropy %logits, %labels : tensor<2x6xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[T:arg0]]: {{.*}}, %[[IDS:arg1]]: {{.*}}, %[[LABELS:arg2]]: {{.*}})
// CHECK: %[[X:.+]] = nn.embedding %[[T]][%[[IDS]]]
// CHECK: %[[LOGITS:.+]] = nn.einsum "bh,vh->bv" %[[X]], %[[T]]
// CHECK: %[[ONE:.+]] = nn.constant {nn.grad_kind = "B"} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DLOGITS:.+]] = nn.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[ONE]] {nn.grad_kind = "B"} : tensor<2x6xf32>, tensor<2xi32>, tensor<f32>
// CHECK: %[[DX:.+]] = nn.einsum "bv,vh->bh" %[[DLOGITS]], %[[T]] {nn.grad_kind = "B"}
// CHECK: %[[DT1:.+]] = nn.einsum "bv,bh->vh" %[[DLOGITS]], %[[X]] {nn.grad_kind = "W"}
// CHECK: %[[DT2:.+]] = nn.embedding_grad %[[DX]], %[[IDS]] {nn.grad_kind = "W"} : tensor<2x4xf32>, tensor<2xi32> -> tensor<6x4xf32>
// CHECK: %[[DT:.+]] = nn.add %[[DT1]], %[[DT2]] {nn.grad_kind = "W"} : tensor<6x4xf32>
// CHECK: return %{{.+}}, %[[DT]]

// -----

// Tests that convert's cotangent is converted back to the input's type and
// that greater_equal (a step function) passes no cotangent on: only the
// product's direct path reaches x (the parameter: "W").
func.func @forward(%x: tensor<4xf32> {nn.param = "x"}, %t: tensor<4xf32> {nn.input = "t"})
    -> (tensor<bf16> {nn.output = "loss"}) {
  %mask = nn.greater_equal %x, %t : tensor<4xf32>
  %p = nn.mul %x, %mask : tensor<4xf32>
  %h = nn.convert %p : tensor<4xf32> to tensor<4xbf16>
  %l = nn.reduce sum %h dims = [0] : tensor<4xbf16> -> tensor<bf16>
  return %l : tensor<bf16>
}
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[X:arg0]]: {{[^,]*}}, %[[T:arg1]]: {{[^)]*}})
// CHECK: %[[MASK:.+]] = nn.greater_equal %[[X]], %[[T]]
// CHECK: %[[DH:.+]] = nn.broadcast %{{.+}} dims = [] {nn.grad_kind = "B"} : tensor<bf16> -> tensor<4xbf16>
// CHECK: %[[DP:.+]] = nn.convert %[[DH]] {nn.grad_kind = "B"} : tensor<4xbf16> to tensor<4xf32>
// CHECK: %[[DX:.+]] = nn.mul %[[DP]], %[[MASK]] {nn.grad_kind = "W"} : tensor<4xf32>
// CHECK-NOT: nn.add
// CHECK: return %{{.+}}, %[[DX]]
