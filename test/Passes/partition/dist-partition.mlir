// RUN: partita-opt %s -split-input-file --dist-partition | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute

// Per rule family and per resharding case, the exact collectives that
// dist-partition emits. Expected local shapes and collectives are derived by
// hand from the shardings (dp=2, tp=4): a dimension split over tp has a
// quarter of its global size on each device. Cases that resolve a partial
// value use a mesh with tp alone: with a spare replicated axis the planner
// may split an all_reduce into slice + all_reduce + all_gather over it,
// which moves fewer bytes (the planner's business, tested with it).

// Tests that a batch split on dp partitions with no collective, local shapes,
// and the global signature recorded on the function.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @dp_only
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<8x16xf32>},
// CHECK-SAME: %[[W:.*]]: tensor<16x32xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}, {}]>, dist.global_type = tensor<16x32xf32>})
// CHECK-SAME: -> (tensor<4x32xf32> {dist.global_sharding = #dist.sharding<@mesh, [{"dp"}, {}]>, dist.global_type = tensor<8x32xf32>})
// CHECK-SAME: attributes {dist.mesh = @mesh}
// CHECK: %[[Y:.*]] = nn.einsum "bh,hf->bf" %[[X]], %[[W]] : (tensor<4x16xf32>, tensor<16x32xf32>) -> tensor<4x32xf32>
// CHECK: %[[R:.*]] = nn.relu %[[Y]] : tensor<4x32xf32>
// CHECK: return %[[R]] : tensor<4x32xf32>
func.func @dp_only(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>},
                   %w: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})
    -> (tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>}) {
  %y = nn.einsum "bh,hf->bf" %x, %w {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %r = nn.relu %y {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8x32xf32>
  return %r : tensor<8x32xf32>
}

// -----

// Tests that a column-parallel then row-parallel MLP (Megatron) leaves the
// second einsum partial over tp and all-reduces it once, where a consumer
// needs the whole value.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @megatron_mlp
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32> {{.*}}, %[[W1:.*]]: tensor<16x8xf32> {{.*}}, %[[W2:.*]]: tensor<8x16xf32> {{.*}})
// CHECK: %[[H:.*]] = nn.einsum "bh,hf->bf" %[[X]], %[[W1]] : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
// CHECK: %[[A:.*]] = nn.relu %[[H]] : tensor<8x8xf32>
// CHECK: %[[P:.*]] = nn.einsum "bf,fh->bh" %[[A]], %[[W2]] : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[S:.*]] = dist.all_reduce %[[P]] on @mesh axes = ["tp"] kind = sum : tensor<8x16xf32>
// CHECK: %[[R:.*]] = nn.relu %[[S]] : tensor<8x16xf32>
// CHECK: %[[T:.*]] = nn.tanh %[[S]] : tensor<8x16xf32>
// CHECK: return %[[R]], %[[T]]
func.func @megatron_mlp(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>},
                        %w1: tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
                        %w2: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %h = nn.einsum "bh,hf->bf" %x, %w1 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  %a = nn.relu %h {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<8x32xf32>
  %p = nn.einsum "bf,fh->bh" %a, %w2 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  // Two consumers of the partial value share one all_reduce.
  %r = nn.relu %p {dist.sharding = [#dist.sharding<@mesh, [{}, {}]>]} : tensor<8x16xf32>
  %t = nn.tanh %p {dist.sharding = [#dist.sharding<@mesh, [{}, {}]>]} : tensor<8x16xf32>
  return %r, %t : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that a partial value whose consumer wants it split becomes a
// reduce_scatter (the sequence-parallel pattern), not an all_reduce.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @partial_to_split
// CHECK: %[[P:.*]] = nn.einsum "bf,fh->bh" %{{.*}}, %{{.*}} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[S:.*]] = dist.reduce_scatter %[[P]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[R:.*]] = nn.relu %[[S]] : tensor<2x16xf32>
// CHECK: return %[[R]] : tensor<2x16xf32>
func.func @partial_to_split(%a: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
                            %w2: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}) {
  %p = nn.einsum "bf,fh->bh" %a, %w2 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %r = nn.relu %p {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// -----

// Tests that a replicated value whose consumer wants it split is sliced
// locally (dist.slice), with no communication.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @replicated_to_split
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>
// CHECK: %[[S:.*]] = dist.slice %[[X]] on @mesh axes = ["dp"] dim = 0 : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK: %[[R:.*]] = nn.exp %[[S]] : tensor<4x16xf32>
// CHECK: return %[[R]] : tensor<4x16xf32>
func.func @replicated_to_split(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})
    -> tensor<8x16xf32> {
  %r = nn.exp %x {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// -----

// Tests that moving an axis from one dimension to another is one all_to_all
// (the destination dimension is split, the source one concatenated).
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @all_to_all
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32>
// CHECK: %[[A:.*]] = dist.all_to_all %[[X]] on @mesh axes = ["tp"] split_dim = 1 concat_dim = 0 : tensor<2x16xf32> -> tensor<8x4xf32>
// CHECK: return %[[A]] : tensor<8x4xf32>
func.func @all_to_all(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> tensor<8x16xf32> {
  %c = dist.constraint %x <@mesh, [{}, {"tp"}]> : tensor<8x16xf32>
  return %c : tensor<8x16xf32>
}

// -----

// Tests that swapping the axes of two dimensions that are split alike is one
// collective_permute; pairs derived by hand: position (x, y) = 2x + y holds
// block (x, y) and must send it to the device that will hold it, (y, x).
dist.mesh @grid <["x"=2, "y"=2]>
// CHECK-LABEL: func.func @permute
// CHECK-SAME: (%[[X:.*]]: tensor<4x4xf32>
// CHECK: %[[P:.*]] = dist.collective_permute %[[X]] on @grid axes = ["x", "y"] pairs = [0, 0, 1, 2, 2, 1, 3, 3] : tensor<4x4xf32>
// CHECK: return %[[P]] : tensor<4x4xf32>
func.func @permute(%x: tensor<8x8xf32> {dist.sharding = #dist.sharding<@grid, [{"x"}, {"y"}]>})
    -> tensor<8x8xf32> {
  %c = dist.constraint %x <@grid, [{"y"}, {"x"}]> : tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}

// -----

// Tests that softmax over a split dimension runs its collective-aware form:
// a local max, all-reduced with kind = max, then exp of the shifted input,
// its local sum all-reduced, and the division; no gather of the input.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @softmax_split_dim
// CHECK-SAME: (%[[X:.*]]: tensor<8x4xf32>
// CHECK: %[[M:.*]] = nn.reduce max %[[X]] dims = [1] : tensor<8x4xf32> -> tensor<8xf32>
// CHECK: %[[GM:.*]] = dist.all_reduce %[[M]] on @mesh axes = ["tp"] kind = max : tensor<8xf32>
// CHECK: %[[BM:.*]] = nn.broadcast %[[GM]] dims = [0] : tensor<8xf32> -> tensor<8x4xf32>
// CHECK: %[[D:.*]] = nn.sub %[[X]], %[[BM]] : tensor<8x4xf32>
// CHECK: %[[E:.*]] = nn.exp %[[D]] : tensor<8x4xf32>
// CHECK: %[[S:.*]] = nn.reduce sum %[[E]] dims = [1] : tensor<8x4xf32> -> tensor<8xf32>
// CHECK: %[[GS:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["tp"] kind = sum : tensor<8xf32>
// CHECK: %[[BS:.*]] = nn.broadcast %[[GS]] dims = [0] : tensor<8xf32> -> tensor<8x4xf32>
// CHECK: %[[Y:.*]] = nn.div %[[E]], %[[BS]] : tensor<8x4xf32>
// CHECK: return %[[Y]] : tensor<8x4xf32>
func.func @softmax_split_dim(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  %s = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<8x16xf32>
  return %s : tensor<8x16xf32>
}

// -----

// Tests that layer_norm over a split hidden dimension (64 over tp=4) takes
// the mean and the variance as local sums all-reduced and scaled by 1/64
// (the global size), with gamma and beta sliced alike.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @layer_norm_split_hidden
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32> {{.*}}, %[[G:.*]]: tensor<16xf32> {{.*}}, %[[B:.*]]: tensor<16xf32> {{.*}})
// CHECK: %[[S:.*]] = nn.reduce sum %[[X]] dims = [1] : tensor<2x16xf32> -> tensor<2xf32>
// CHECK: %[[GS:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["tp"] kind = sum : tensor<2xf32>
// CHECK: %[[K:.*]] = nn.constant dense<1.562500e-02> : tensor<2xf32>
// CHECK: %[[MU:.*]] = nn.mul %[[GS]], %[[K]] : tensor<2xf32>
// CHECK: %[[BMU:.*]] = nn.broadcast %[[MU]] dims = [0] : tensor<2xf32> -> tensor<2x16xf32>
// CHECK: %[[C:.*]] = nn.sub %[[X]], %[[BMU]] : tensor<2x16xf32>
// CHECK: %[[SQ:.*]] = nn.mul %[[C]], %[[C]] : tensor<2x16xf32>
// CHECK: %[[S2:.*]] = nn.reduce sum %[[SQ]] dims = [1] : tensor<2x16xf32> -> tensor<2xf32>
// CHECK: %[[GS2:.*]] = dist.all_reduce %[[S2]] on @mesh axes = ["tp"] kind = sum : tensor<2xf32>
// CHECK: %[[K2:.*]] = nn.constant dense<1.562500e-02> : tensor<2xf32>
// CHECK: %[[VAR:.*]] = nn.mul %[[GS2]], %[[K2]] : tensor<2xf32>
// CHECK: %[[EPS:.*]] = nn.constant dense<9.99999974E-6> : tensor<2xf32>
// CHECK: %[[VE:.*]] = nn.add %[[VAR]], %[[EPS]] : tensor<2xf32>
// CHECK: %[[R:.*]] = nn.rsqrt %[[VE]] : tensor<2xf32>
// CHECK: %[[BR:.*]] = nn.broadcast %[[R]] dims = [0] : tensor<2xf32> -> tensor<2x16xf32>
// CHECK: %[[N:.*]] = nn.mul %[[C]], %[[BR]] : tensor<2x16xf32>
// CHECK: %[[BG:.*]] = nn.broadcast %[[G]] dims = [1] : tensor<16xf32> -> tensor<2x16xf32>
// CHECK: %[[NG:.*]] = nn.mul %[[N]], %[[BG]] : tensor<2x16xf32>
// CHECK: %[[BB:.*]] = nn.broadcast %[[B]] dims = [1] : tensor<16xf32> -> tensor<2x16xf32>
// CHECK: %[[Y:.*]] = nn.add %[[NG]], %[[BB]] : tensor<2x16xf32>
// CHECK: return %[[Y]] : tensor<2x16xf32>
func.func @layer_norm_split_hidden(
    %x: tensor<2x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %g: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>},
    %b: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}]>})
    -> (tensor<2x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  %y = nn.layer_norm %x, %g, %b eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<2x64xf32>, tensor<64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Tests that rms_norm over a split hidden dimension needs one all_reduce (of
// the sum of squares), and that a replicated gamma is sliced for free.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @rms_norm_split_hidden
// CHECK-SAME: (%[[X:.*]]: tensor<2x16xf32> {{.*}}, %[[G:.*]]: tensor<64xf32> {{.*}})
// CHECK: %[[GL:.*]] = dist.slice %[[G]] on @mesh axes = ["tp"] dim = 0 : tensor<64xf32> -> tensor<16xf32>
// CHECK: %[[SQ:.*]] = nn.mul %[[X]], %[[X]] : tensor<2x16xf32>
// CHECK: %[[S:.*]] = nn.reduce sum %[[SQ]] dims = [1] : tensor<2x16xf32> -> tensor<2xf32>
// CHECK: %[[GS:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["tp"] kind = sum : tensor<2xf32>
// CHECK: %[[K:.*]] = nn.constant dense<1.562500e-02> : tensor<2xf32>
// CHECK: %[[MS:.*]] = nn.mul %[[GS]], %[[K]] : tensor<2xf32>
// CHECK: %[[EPS:.*]] = nn.constant dense<9.99999974E-6> : tensor<2xf32>
// CHECK: %[[VE:.*]] = nn.add %[[MS]], %[[EPS]] : tensor<2xf32>
// CHECK: %[[R:.*]] = nn.rsqrt %[[VE]] : tensor<2xf32>
// CHECK: %[[BR:.*]] = nn.broadcast %[[R]] dims = [0] : tensor<2xf32> -> tensor<2x16xf32>
// CHECK: %[[N:.*]] = nn.mul %[[X]], %[[BR]] : tensor<2x16xf32>
// CHECK: %[[BG:.*]] = nn.broadcast %[[GL]] dims = [1] : tensor<16xf32> -> tensor<2x16xf32>
// CHECK: %[[Y:.*]] = nn.mul %[[N]], %[[BG]] : tensor<2x16xf32>
// CHECK: return %[[Y]] : tensor<2x16xf32>
func.func @rms_norm_split_hidden(
    %x: tensor<2x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %g: tensor<64xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
    -> (tensor<2x64xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>}) {
  %y = nn.rms_norm %x, %g eps = 1.0e-5 {dist.sharding = [#dist.sharding<@mesh, [{}, {"tp"}]>]} : tensor<2x64xf32>, tensor<64xf32>
  return %y : tensor<2x64xf32>
}

// -----

// Tests that a collective factor without a collective-aware form yet
// (attention's key sequence) is gathered: exact, and the only collective.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @attention_split_keys
// CHECK-SAME: (%[[Q:.*]]: tensor<2x8x4x16xf32> {{.*}}, %[[K:.*]]: tensor<2x2x4x16xf32> {{.*}})
// CHECK: %[[KG:.*]] = dist.all_gather %[[K]] on @mesh axes = ["tp"] dim = 1 : tensor<2x2x4x16xf32> -> tensor<2x8x4x16xf32>
// CHECK: nn.attention %[[Q]], %[[KG]], %[[KG]] : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
func.func @attention_split_keys(
    %q: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {}, {}]>},
    %k: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}, {}, {}]>})
    -> tensor<2x8x4x16xf32> {
  %a = nn.attention %q, %k, %k {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}, {}]>]} : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  return %a : tensor<2x8x4x16xf32>
}

// -----

// Tests that softmax split on its batch dimension needs nothing.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @softmax_split_batch
// CHECK: nn.softmax %{{.*}} dim = 1 : tensor<4x16xf32>
func.func @softmax_split_batch(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}, {}]>})
    -> tensor<8x16xf32> {
  %s = nn.softmax %x dim = 1 {dist.sharding = [#dist.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8x16xf32>
  return %s : tensor<8x16xf32>
}

// -----

// Tests that a mean over a split dimension is scaled by 1/4 (tp shards) so
// that the partial values sum to the global mean, and that a returned
// partial value stays partial (the runtime reduces it).
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @mean_split
// CHECK-SAME: -> (tensor<8xf32> {dist.global_sharding = #dist.sharding<@mesh, [{}], partial={"tp"}>, dist.global_type = tensor<8xf32>})
// CHECK: %[[M:.*]] = nn.reduce mean %{{.*}} dims = [1] : tensor<8x4xf32> -> tensor<8xf32>
// CHECK: %[[C:.*]] = nn.constant dense<2.500000e-01> : tensor<8xf32>
// CHECK: %[[S:.*]] = nn.mul %[[M]], %[[C]] : tensor<8xf32>
// CHECK: return %[[S]] : tensor<8xf32>
func.func @mean_split(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> (tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %m = nn.reduce mean %x dims = [1] {dist.sharding = [#dist.sharding<@mesh, [{}], partial={"tp"}>]} : tensor<8x16xf32> -> tensor<8xf32>
  return %m : tensor<8xf32>
}

// -----

// Tests that a max over a split dimension is a partial max, reduced with
// kind = max where a consumer needs the whole value.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @max_split
// CHECK: %[[M:.*]] = nn.reduce max %{{.*}} dims = [1] : tensor<8x4xf32> -> tensor<8xf32>
// CHECK: %[[A:.*]] = dist.all_reduce %[[M]] on @mesh axes = ["tp"] kind = max : tensor<8xf32>
// CHECK: %[[E:.*]] = nn.exp %[[A]] : tensor<8xf32>
func.func @max_split(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<8xf32> {
  %m = nn.reduce max %x dims = [1] {dist.sharding = [#dist.sharding<@mesh, [{}], partial=max{"tp"}>]} : tensor<8x16xf32> -> tensor<8xf32>
  %e = nn.exp %m {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8xf32>
  return %e : tensor<8xf32>
}

// -----

// Tests that a split reduction whose result the propagation left whole is
// not split: the operand is gathered, and no partial value appears.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @reduction_left_whole
// CHECK: %[[G:.*]] = dist.all_gather %{{.*}} on @mesh axes = ["tp"] dim = 1 : tensor<8x4xf32> -> tensor<8x16xf32>
// CHECK: nn.reduce sum %[[G]] dims = [1] : tensor<8x16xf32> -> tensor<8xf32>
func.func @reduction_left_whole(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<8xf32> {
  %m = nn.reduce sum %x dims = [1] {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8x16xf32> -> tensor<8xf32>
  return %m : tensor<8xf32>
}

// -----

// Tests that a splat constant is built at its local shape and a non-splat
// one whole, then sliced by its consumer.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @constants
// CHECK: %[[S:.*]] = nn.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK: %[[N:.*]] = nn.constant dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00, 6.000000e+00, 7.000000e+00]> : tensor<8xf32>
// CHECK: %[[L:.*]] = dist.slice %[[N]] on @mesh axes = ["tp"] dim = 0 : tensor<8xf32> -> tensor<2xf32>
// CHECK: %[[A:.*]] = nn.add %[[S]], %[[L]] : tensor<2xf32>
// CHECK: return %[[A]] : tensor<2xf32>
func.func @constants() -> tensor<8xf32> {
  %s = nn.constant {dist.sharding = [#dist.sharding<@mesh, [{"tp"}]>]} dense<1.0> : tensor<8xf32>
  %n = nn.constant {dist.sharding = [#dist.sharding<@mesh, [{"tp"}]>]} dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]> : tensor<8xf32>
  %a = nn.add %s, %n {dist.sharding = [#dist.sharding<@mesh, [{"tp"}]>]} : tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

// Tests that a reshape merging a split major dimension with a whole minor
// one keeps the split (the shard stays one block), and that attention split
// on heads runs locally.
dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @reshape_and_attention
// CHECK: %[[A:.*]] = nn.attention %{{.*}}, %{{.*}}, %{{.*}} causal : tensor<2x8x1x16xf32>, tensor<2x8x1x16xf32>
// CHECK: %[[R:.*]] = nn.reshape %[[A]] : tensor<2x8x1x16xf32> -> tensor<2x8x16xf32>
// CHECK: return %[[R]] : tensor<2x8x16xf32>
func.func @reshape_and_attention(%q: tensor<2x8x4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {"tp"}, {}]>})
    -> tensor<2x8x64xf32> {
  %a = nn.attention %q, %q, %q causal {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {"tp"}, {}]>]} : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
  %r = nn.reshape %a {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {"tp"}]>]} : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  return %r : tensor<2x8x64xf32>
}

// -----

// Tests that a function with no sharding anywhere is left as it is.
// CHECK-LABEL: func.func @unsharded(%{{.*}}: tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT: nn.exp %{{.*}} : tensor<8xf32>
func.func @unsharded(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = nn.exp %x : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// Tests the vocabulary-parallel embedding (Megatron-LM): with the table's
// 32 rows split over tp=4, each device looks up its 8 rows at the ids
// shifted by its first row (axis_index * 8), clamped into [0, 7]; ids
// outside the shard are masked to zero rows (keep = max(1 - |l - c|, 0),
// turned into a float mask by a lookup in [[0], [1]]), the result is a
// partial sum over tp, and its consumer all-reduces it, instead of an
// all_gather of the table.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @vocab_parallel_embedding
// CHECK-SAME: (%[[T:.*]]: tensor<8x16xf32> {{.*}}, %[[IDS:.*]]: tensor<2x4xi32> {{.*}})
// CHECK: %[[I:.*]] = dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
// CHECK: %[[R:.*]] = nn.constant dense<8> : tensor<i32>
// CHECK: %[[S:.*]] = nn.mul %[[I]], %[[R]] : tensor<i32>
// CHECK: %[[SB:.*]] = nn.broadcast %[[S]] dims = [] : tensor<i32> -> tensor<2x4xi32>
// CHECK: %[[L:.*]] = nn.sub %[[IDS]], %[[SB]] : tensor<2x4xi32>
// CHECK: %[[ZERO:.*]] = nn.constant dense<0> : tensor<2x4xi32>
// CHECK: %[[TOP:.*]] = nn.constant dense<7> : tensor<2x4xi32>
// CHECK: %[[LOW:.*]] = nn.max %[[L]], %[[ZERO]] : tensor<2x4xi32>
// CHECK: %[[A:.*]] = nn.sub %[[TOP]], %[[LOW]] : tensor<2x4xi32>
// CHECK: %[[B:.*]] = nn.max %[[A]], %[[ZERO]] : tensor<2x4xi32>
// CHECK: %[[C:.*]] = nn.sub %[[TOP]], %[[B]] : tensor<2x4xi32>
// CHECK: %[[D:.*]] = nn.sub %[[L]], %[[C]] : tensor<2x4xi32>
// CHECK: %[[ND:.*]] = nn.sub %[[ZERO]], %[[D]] : tensor<2x4xi32>
// CHECK: %[[ABS:.*]] = nn.max %[[D]], %[[ND]] : tensor<2x4xi32>
// CHECK: %[[ONE:.*]] = nn.constant dense<1> : tensor<2x4xi32>
// CHECK: %[[OMA:.*]] = nn.sub %[[ONE]], %[[ABS]] : tensor<2x4xi32>
// CHECK: %[[KEEP:.*]] = nn.max %[[OMA]], %[[ZERO]] : tensor<2x4xi32>
// CHECK: %[[ROWS:.*]] = nn.embedding %[[T]][%[[C]]] : tensor<8x16xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
// CHECK: %[[MT:.*]] = nn.constant dense<{{\[\[}}0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32>
// CHECK: %[[M:.*]] = nn.embedding %[[MT]][%[[KEEP]]] : tensor<2x1xf32>, tensor<2x4xi32> -> tensor<2x4x1xf32>
// CHECK: %[[MB:.*]] = nn.broadcast %[[M]] dims = [0, 1, 2] : tensor<2x4x1xf32> -> tensor<2x4x16xf32>
// CHECK: %[[P:.*]] = nn.mul %[[ROWS]], %[[MB]] : tensor<2x4x16xf32>
// CHECK: %[[SUM:.*]] = dist.all_reduce %[[P]] on @mesh axes = ["tp"] kind = sum : tensor<2x4x16xf32>
// CHECK: %[[Y:.*]] = nn.tanh %[[SUM]] : tensor<2x4x16xf32>
// CHECK: return %[[Y]] : tensor<2x4x16xf32>
func.func @vocab_parallel_embedding(
    %table: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %ids: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})
    -> tensor<2x4x16xf32> {
  %e = nn.embedding %table[%ids] {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}]>]} : tensor<32x16xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  %y = nn.tanh %e {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}]>]} : tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// Tests that an add of two values that are one partial sum, whose result is
// wanted split (the q and k input gradients under sequence parallelism),
// adds the shares locally and reduce_scatters the sum once, not each
// operand.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @partial_add_to_split
// CHECK: %[[P:.*]] = nn.einsum "bf,fh->bh" %arg0, %arg2 : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[Q:.*]] = nn.einsum "bf,fh->bh" %arg1, %arg3 : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[S:.*]] = nn.add %[[P]], %[[Q]] : tensor<8x16xf32>
// CHECK: %[[RS:.*]] = dist.reduce_scatter %[[S]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[R:.*]] = nn.relu %[[RS]] : tensor<2x16xf32>
// CHECK: return %[[R]] : tensor<2x16xf32>
func.func @partial_add_to_split(
    %a: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %b: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w1: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %w2: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}) {
  %p = nn.einsum "bf,fh->bh" %a, %w1 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %q = nn.einsum "bf,fh->bh" %b, %w2 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %s = nn.add %p, %q {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  %r = nn.relu %s {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  return %r : tensor<8x16xf32>
}

// -----

// Tests that an operand read by another op as well is reduced for that
// reader, and the add reuses the reduction rather than keeping the sum
// partial (which would reduce twice).
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @partial_add_shared_operand
// CHECK: %[[P:.*]] = nn.einsum "bf,fh->bh"
// CHECK: %[[Q:.*]] = nn.einsum "bf,fh->bh"
// CHECK: %[[PS:.*]] = dist.reduce_scatter %[[P]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[QS:.*]] = dist.reduce_scatter %[[Q]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[S:.*]] = nn.add %[[PS]], %[[QS]] : tensor<2x16xf32>
// CHECK: %[[T:.*]] = nn.tanh %[[PS]] : tensor<2x16xf32>
func.func @partial_add_shared_operand(
    %a: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %b: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w1: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
    %w2: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
        tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>}) {
  %p = nn.einsum "bf,fh->bh" %a, %w1 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %q = nn.einsum "bf,fh->bh" %b, %w2 {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %s = nn.add %p, %q {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  %t = nn.tanh %p {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  return %s, %t : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// Tests that a sum over the rows of a partial value reduce_scatters it along
// the rows, reusing the reduce_scatter another consumer made, and
// all_reduces the small result (a norm's bias gradient under sequence
// parallelism), instead of all_reducing the whole value.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @partial_reduce_reuses_scatter
// CHECK: %[[P:.*]] = nn.einsum "bf,fh->bh"
// CHECK: %[[S:.*]] = dist.reduce_scatter %[[P]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<8x16xf32> -> tensor<2x16xf32>
// CHECK: %[[R:.*]] = nn.relu %[[S]] : tensor<2x16xf32>
// CHECK: %[[L:.*]] = nn.reduce sum %[[S]] dims = [0] : tensor<2x16xf32> -> tensor<16xf32>
// CHECK: %[[G:.*]] = dist.all_reduce %[[L]] on @mesh axes = ["tp"] kind = sum : tensor<16xf32>
// CHECK: %[[T:.*]] = nn.tanh %[[G]] : tensor<16xf32>
// CHECK: return %[[R]], %[[T]] : tensor<2x16xf32>, tensor<16xf32>
func.func @partial_reduce_reuses_scatter(
    %a: tensor<8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %w: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>},
        tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %p = nn.einsum "bf,fh->bh" %a, %w {dist.sharding = [#dist.sharding<@mesh, [{}, {}], partial={"tp"}>]} : (tensor<8x32xf32>, tensor<32x16xf32>) -> tensor<8x16xf32>
  %r = nn.relu %p {dist.sharding = [#dist.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x16xf32>
  %s = nn.reduce sum %p dims = [0] {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<8x16xf32> -> tensor<16xf32>
  %t = nn.tanh %s {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<16xf32>
  return %r, %t : tensor<8x16xf32>, tensor<16xf32>
}

// -----

// Tests that without an earlier scatter to reuse, a sum over dimensions 0
// and 1 of a partial value reduce_scatters it along the first one the mesh
// axis divides.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @partial_reduce
// CHECK: %[[P:.*]] = nn.einsum "bsf,fh->bsh"
// CHECK: %[[S:.*]] = dist.reduce_scatter %[[P]] on @mesh axes = ["tp"] dim = 0 kind = sum : tensor<4x8x16xf32> -> tensor<1x8x16xf32>
// CHECK: %[[L:.*]] = nn.reduce sum %[[S]] dims = [0, 1] : tensor<1x8x16xf32> -> tensor<16xf32>
// CHECK: %[[G:.*]] = dist.all_reduce %[[L]] on @mesh axes = ["tp"] kind = sum : tensor<16xf32>
// CHECK: %[[T:.*]] = nn.tanh %[[G]] : tensor<16xf32>
// CHECK: return %[[T]] : tensor<16xf32>
func.func @partial_reduce(
    %a: tensor<4x8x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {"tp"}]>},
    %w: tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}, {}]>})
    -> (tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}]>}) {
  %p = nn.einsum "bsf,fh->bsh" %a, %w {dist.sharding = [#dist.sharding<@mesh, [{}, {}, {}], partial={"tp"}>]} : (tensor<4x8x32xf32>, tensor<32x16xf32>) -> tensor<4x8x16xf32>
  %s = nn.reduce sum %p dims = [0, 1] {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<4x8x16xf32> -> tensor<16xf32>
  %t = nn.tanh %s {dist.sharding = [#dist.sharding<@mesh, [{}]>]} : tensor<16xf32>
  return %t : tensor<16xf32>
}
