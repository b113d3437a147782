// RUN: partita-opt %s -split-input-file --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute \
// RUN:   --implicit-check-not=dist.mask

// Dimensions their axes do not divide are padded (Padding.h): 6 on dp=4 is
// held as 2 rows per device (8 in all, the last 2 padding), 50 on tp=4 as 13
// columns (52). Before an op reduces over a padded dimension its local
// operands are masked to the reduction's identity: dist.mask with the real
// size, the axes splitting the dimension and 0 (sum), -inf (max, printed
// 0xFFF0000000000000) or -1 (cross_entropy labels). Means scale by the local
// count over the real one (2/6 here). Signatures keep the real global types.

// Tests that a padded batch reduced by a sum is masked to 0 on its dp split, and that the signature records the real global type.
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @reduce_sum
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<6x16xf32>})
// CHECK: %[[M:.*]] = dist.mask %[[X]] on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x16xf32>
// CHECK: %[[Y:.*]] = nn.reduce sum %[[M]] dims = [0] : tensor<2x16xf32> -> tensor<16xf32>
// CHECK: return %[[Y]]
func.func @reduce_sum(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %y = nn.reduce sum %x dims = [0] {dist.sharding = [#dist.sharding<@mesh, [{}], partial={"dp"}>]} : tensor<6x16xf32> -> tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Tests that a padded batch reduced by a max is masked to -inf.
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @reduce_max
// CHECK: %[[M:.*]] = dist.mask %{{.*}} on @mesh axes = ["dp"] dim = 0 size = 6 value = 0xFFF0000000000000 : tensor<2x16xf32>
// CHECK: nn.reduce max %[[M]] dims = [0] : tensor<2x16xf32> -> tensor<16xf32>
func.func @reduce_max(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %y = nn.reduce max %x dims = [0] {dist.sharding = [#dist.sharding<@mesh, [{}], partial=max{"dp"}>]} : tensor<6x16xf32> -> tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Tests that a mean over a padded batch is masked to 0 and scaled by 2/6 (local rows over real rows), not 1/4.
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @reduce_mean
// CHECK: %[[M:.*]] = dist.mask %{{.*}} on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x16xf32>
// CHECK: %[[Y:.*]] = nn.reduce mean %[[M]] dims = [0] : tensor<2x16xf32> -> tensor<16xf32>
// CHECK: %[[S:.*]] = nn.constant dense<0.333333343> : tensor<16xf32>
// CHECK: nn.mul %[[Y]], %[[S]] : tensor<16xf32>
func.func @reduce_mean(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %y = nn.reduce mean %x dims = [0] {dist.sharding = [#dist.sharding<@mesh, [{}], partial={"dp"}>]} : tensor<6x16xf32> -> tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// Tests that an einsum contracting a padded dimension masks both operands to 0, and that parallel padded dimensions need no mask.
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @contraction
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32> {{.*}}, %[[G:.*]]: tensor<2x8xf32>
// CHECK: %[[R:.*]] = nn.relu %[[X]] : tensor<2x16xf32>
// CHECK: %[[MX:.*]] = dist.mask %[[R]] on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x16xf32>
// CHECK: %[[MG:.*]] = dist.mask %[[G]] on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x8xf32>
// CHECK: nn.einsum "bh,bf->hf" %[[MX]], %[[MG]] : (tensor<2x16xf32>, tensor<2x8xf32>) -> tensor<16x8xf32>
func.func @contraction(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                       %g: tensor<6x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> (tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) {
  %r = nn.relu %x {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<6x16xf32>
  %y = nn.einsum "bh,bf->hf" %r, %g {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"dp"}>]} : (tensor<6x16xf32>, tensor<6x8xf32>) -> tensor<16x8xf32>
  return %y : tensor<16x8xf32>
}

// -----

// Tests that cross_entropy over padded tokens gives their labels -1 (skipped by the kernel) and scales the mean by 2/6.
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @cross_entropy_tokens
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32> {{.*}}, %[[L:.*]]: tensor<2xi32>
// CHECK: %[[ML:.*]] = dist.mask %[[L]] on @mesh axes = ["dp"] dim = 0 size = 6 value = -1.000000e+00 : tensor<2xi32>
// CHECK: %[[C:.*]] = nn.cross_entropy %[[X]], %[[ML]] : tensor<2x16xf32>, tensor<2xi32> -> tensor<f32>
// CHECK: %[[S:.*]] = nn.constant dense<0.333333343> : tensor<f32>
// CHECK: nn.mul %[[C]], %[[S]] : tensor<f32>
func.func @cross_entropy_tokens(%x: tensor<6x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                                %l: tensor<6xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
    -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}) {
  %y = nn.cross_entropy %x, %l {dist.sharding = [#dist.sharding<@mesh, [], partial={"dp"}>]} : tensor<6x16xf32>, tensor<6xi32> -> tensor<f32>
  return %y : tensor<f32>
}

// -----

// Tests that a softmax over a padded vocabulary split on tp masks the padding to -inf before its collective-aware form.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @softmax_vocab
// CHECK-SAME: (%[[X:.*]]: tensor<4x13xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {"tp"}]>, dist.global_type = tensor<4x50xf32>})
// CHECK: %[[M:.*]] = dist.mask %[[X]] on @mesh axes = ["tp"] dim = 1 size = 50 value = 0xFFF0000000000000 : tensor<4x13xf32>
// CHECK: %[[MAX:.*]] = nn.reduce max %[[M]] dims = [1] : tensor<4x13xf32> -> tensor<4xf32>
// CHECK: dist.all_reduce %[[MAX]] on @mesh axes = ["tp"] kind = max : tensor<4xf32>
// CHECK: nn.sub %[[M]], %{{.*}} : tensor<4x13xf32>
// CHECK: dist.all_reduce %{{.*}} on @mesh axes = ["tp"] kind = sum : tensor<4xf32>
func.func @softmax_vocab(%x: tensor<4x50xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> (tensor<4x50xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  %y = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<4x50xf32>
  return %y : tensor<4x50xf32>
}

// -----

// Tests that logits with a padded vocabulary gathered for cross_entropy are 52 wide and masked to -inf past 50, with no axes (the gathered dimension is whole but padded).
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @cross_entropy_vocab
// CHECK-SAME: (%[[X:.*]]: tensor<4x13xf32> {{.*}}, %[[L:.*]]: tensor<4xi32>
// CHECK: %[[G:.*]] = dist.all_gather %[[X]] on @mesh axes = ["tp"] dim = 1 : tensor<4x13xf32> -> tensor<4x52xf32>
// CHECK: %[[M:.*]] = dist.mask %[[G]] on @mesh axes = [] dim = 1 size = 50 value = 0xFFF0000000000000 : tensor<4x52xf32>
// CHECK: nn.cross_entropy %[[M]], %[[L]] : tensor<4x52xf32>, tensor<4xi32> -> tensor<f32>
func.func @cross_entropy_vocab(%x: tensor<4x50xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
                               %l: tensor<4xi32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
    -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}) {
  %y = nn.cross_entropy %x, %l {dist.sharding = [#dist.sharding<@mesh, []>]} : tensor<4x50xf32>, tensor<4xi32> -> tensor<f32>
  return %y : tensor<f32>
}

// -----

// Tests that an embedding table with a padded vocabulary split on tp needs no mask: its lookup uses blocks of 13 rows and no id reaches the padding.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @embedding_vocab
// CHECK-SAME: (%[[T:.*]]: tensor<13x8xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"tp"}, {}]>, dist.global_type = tensor<50x8xf32>}
// CHECK: dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
// CHECK: nn.constant dense<13> : tensor<i32>
// CHECK: nn.constant dense<12> : tensor<4xi32>
// CHECK: nn.embedding %[[T]][%{{.*}}] : tensor<13x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
func.func @embedding_vocab(%t: tensor<50x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
                           %ids: tensor<4xi32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
    -> (tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}], partial={"tp"}>}) {
  %y = nn.embedding %t[%ids] {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : tensor<50x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Tests that cross_entropy_grad over a padded vocabulary masks its gathered logits to -inf, so the softmax gives the padding a zero gradient.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @cross_entropy_grad_vocab
// CHECK-SAME: (%[[X:.*]]: tensor<4x13xf32> {{.*}}, %[[L:.*]]: tensor<4xi32> {{.*}}, %[[D:.*]]: tensor<f32>
// CHECK: %[[G:.*]] = dist.all_gather %[[X]] on @mesh axes = ["tp"] dim = 1 : tensor<4x13xf32> -> tensor<4x52xf32>
// CHECK: %[[M:.*]] = dist.mask %[[G]] on @mesh axes = [] dim = 1 size = 50 value = 0xFFF0000000000000 : tensor<4x52xf32>
// CHECK: %[[Y:.*]] = nn.cross_entropy_grad %[[M]], %[[L]], %[[D]] {{.*}}: tensor<4x52xf32>, tensor<4xi32>, tensor<f32>
// CHECK: dist.slice %[[Y]] on @mesh axes = ["tp"] dim = 1 : tensor<4x52xf32> -> tensor<4x13xf32>
func.func @cross_entropy_grad_vocab(%x: tensor<4x50xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
                                    %l: tensor<4xi32> {dist.sharding = #dist.sharding<@mesh, [{}]>},
                                    %d: tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>})
    -> (tensor<4x50xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  %y = nn.cross_entropy_grad %x, %l, %d {dist.sharding = [#dist.sharding<@mesh, [{}, {}]>]} : tensor<4x50xf32>, tensor<4xi32>, tensor<f32>
  return %y : tensor<4x50xf32>
}

// -----

// Tests that embedding_grad summing over padded tokens masks dy and ids to 0 (a padded token adds a zero row to row 0).
dist.mesh @mesh <["dp"=4]>
// CHECK-LABEL: func.func @embedding_grad_tokens
// CHECK-SAME: (%[[DY:.*]]: tensor<2x8xf32> {{.*}}, %[[IDS:.*]]: tensor<2xi32>
// CHECK: %[[MD:.*]] = dist.mask %[[DY]] on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2x8xf32>
// CHECK: %[[MI:.*]] = dist.mask %[[IDS]] on @mesh axes = ["dp"] dim = 0 size = 6 value = 0.000000e+00 : tensor<2xi32>
// CHECK: nn.embedding_grad %[[MD]], %[[MI]] : tensor<2x8xf32>, tensor<2xi32> -> tensor<10x8xf32>
func.func @embedding_grad_tokens(%dy: tensor<6x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                                 %ids: tensor<6xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}]>})
    -> (tensor<10x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>}) {
  %y = nn.embedding_grad %dy, %ids {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"dp"}>]} : tensor<6x8xf32>, tensor<6xi32> -> tensor<10x8xf32>
  return %y : tensor<10x8xf32>
}
