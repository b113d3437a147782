// RUN: partita-opt %s --dist-partition=vocab-parallel-cross-entropy=true | FileCheck %s \
// RUN:   --implicit-check-not=dist.all_gather --implicit-check-not=dist.all_reduce \
// RUN:   --implicit-check-not=dist.reduce_scatter --implicit-check-not=dist.all_to_all \
// RUN:   --implicit-check-not=dist.slice --implicit-check-not=dist.collective_permute
// RUN: partita-opt %s --dist-partition | FileCheck %s --check-prefix=GATHER

// Tests the vocabulary-parallel cross entropy (opt-in): logits [2, 32] with
// the vocabulary split over tp=4 (8 columns per device). The log-sum-exp
// takes a max and a sum all_reduce; the label's logit is looked up in the
// logits flattened to [16, 1] at token * 8 + clamped local label (bases
// [0, 8]) and masked to 0 outside the shard; per token lse / 4 - logit, the
// mean over tokens is partial over tp and returned partial. Without the
// option the logits are gathered.
dist.mesh @mesh <["tp"=4]>
// CHECK-LABEL: func.func @vocab_parallel_ce
// CHECK-SAME: (%[[L:[^:]*]]: tensor<2x8xf32>
// CHECK-SAME: %[[Y:[^:]*]]: tensor<2xi32>
// CHECK-SAME: -> (tensor<f32> {dist.global_sharding = #dist.sharding<@mesh, [], partial={"tp"}>
// CHECK: %[[M:.*]] = nn.reduce max %[[L]] dims = [1] : tensor<2x8xf32> -> tensor<2xf32>
// CHECK: %[[GM:.*]] = dist.all_reduce %[[M]] on @mesh axes = ["tp"] kind = max : tensor<2xf32>
// CHECK: %[[BM:.*]] = nn.broadcast %[[GM]] dims = [0] : tensor<2xf32> -> tensor<2x8xf32>
// CHECK: %[[D:.*]] = nn.sub %[[L]], %[[BM]] : tensor<2x8xf32>
// CHECK: %[[E:.*]] = nn.exp %[[D]] : tensor<2x8xf32>
// CHECK: %[[S:.*]] = nn.reduce sum %[[E]] dims = [1] : tensor<2x8xf32> -> tensor<2xf32>
// CHECK: %[[GS:.*]] = dist.all_reduce %[[S]] on @mesh axes = ["tp"] kind = sum : tensor<2xf32>
// CHECK: %[[LOG:.*]] = nn.log %[[GS]] : tensor<2xf32>
// CHECK: %[[LSE:.*]] = nn.add %[[LOG]], %[[GM]] : tensor<2xf32>
// CHECK: %[[I:.*]] = dist.axis_index on @mesh axes = ["tp"] : tensor<i32>
// CHECK: %[[R:.*]] = nn.constant dense<8> : tensor<i32>
// CHECK: %[[ST:.*]] = nn.mul %[[I]], %[[R]] : tensor<i32>
// CHECK: %[[SB:.*]] = nn.broadcast %[[ST]] dims = [] : tensor<i32> -> tensor<2xi32>
// CHECK: %[[LOC:.*]] = nn.sub %[[Y]], %[[SB]] : tensor<2xi32>
// CHECK: %[[ZERO:.*]] = nn.constant dense<0> : tensor<2xi32>
// CHECK: %[[TOP:.*]] = nn.constant dense<7> : tensor<2xi32>
// CHECK: %[[LOW:.*]] = nn.max %[[LOC]], %[[ZERO]] : tensor<2xi32>
// CHECK: %[[A:.*]] = nn.sub %[[TOP]], %[[LOW]] : tensor<2xi32>
// CHECK: %[[B:.*]] = nn.max %[[A]], %[[ZERO]] : tensor<2xi32>
// CHECK: %[[C:.*]] = nn.sub %[[TOP]], %[[B]] : tensor<2xi32>
// CHECK: %[[DIF:.*]] = nn.sub %[[LOC]], %[[C]] : tensor<2xi32>
// CHECK: %[[NEG:.*]] = nn.sub %[[ZERO]], %[[DIF]] : tensor<2xi32>
// CHECK: %[[ABS:.*]] = nn.max %[[DIF]], %[[NEG]] : tensor<2xi32>
// CHECK: %[[ONE:.*]] = nn.constant dense<1> : tensor<2xi32>
// CHECK: %[[OMA:.*]] = nn.sub %[[ONE]], %[[ABS]] : tensor<2xi32>
// CHECK: %[[KEEP:.*]] = nn.max %[[OMA]], %[[ZERO]] : tensor<2xi32>
// CHECK: %[[FLAT:.*]] = nn.reshape %[[L]] : tensor<2x8xf32> -> tensor<16x1xf32>
// CHECK: %[[BASE:.*]] = nn.constant dense<[0, 8]> : tensor<2xi32>
// CHECK: %[[IDX:.*]] = nn.add %[[BASE]], %[[C]] : tensor<2xi32>
// CHECK: %[[P:.*]] = nn.embedding %[[FLAT]][%[[IDX]]] : tensor<16x1xf32>, tensor<2xi32> -> tensor<2x1xf32>
// CHECK: %[[MT:.*]] = nn.constant dense<{{\[\[}}0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32>
// CHECK: %[[MASK:.*]] = nn.embedding %[[MT]][%[[KEEP]]] : tensor<2x1xf32>, tensor<2xi32> -> tensor<2x1xf32>
// CHECK: %[[PM:.*]] = nn.mul %[[P]], %[[MASK]] : tensor<2x1xf32>
// CHECK: %[[PL:.*]] = nn.reshape %[[PM]] : tensor<2x1xf32> -> tensor<2xf32>
// CHECK: %[[Q:.*]] = nn.constant dense<2.500000e-01> : tensor<2xf32>
// CHECK: %[[SH:.*]] = nn.mul %[[LSE]], %[[Q]] : tensor<2xf32>
// CHECK: %[[T:.*]] = nn.sub %[[SH]], %[[PL]] : tensor<2xf32>
// CHECK: %[[LOSS:.*]] = nn.reduce mean %[[T]] dims = [0] : tensor<2xf32> -> tensor<f32>
// CHECK: return %[[LOSS]] : tensor<f32>
// GATHER-LABEL: func.func @vocab_parallel_ce
// GATHER: dist.all_gather %{{.*}} on @mesh axes = ["tp"] dim = 1 : tensor<2x8xf32> -> tensor<2x32xf32>
// GATHER: nn.cross_entropy
func.func @vocab_parallel_ce(
    %logits: tensor<2x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {"tp"}]>},
    %labels: tensor<2xi32> {dist.sharding = #dist.sharding<@mesh, [{}]>})
    -> (tensor<f32> {dist.sharding = #dist.sharding<@mesh, []>}) {
  %l = nn.cross_entropy %logits, %labels {dist.sharding = [#dist.sharding<@mesh, []>]} : tensor<2x32xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
