// RUN: partita-opt %s -split-input-file --dist-annotate="strategy=dp mesh=dp=2,tp=4" | FileCheck %s --check-prefixes=CHECK,DP,BATCH
// RUN: partita-opt %s -split-input-file --dist-annotate="strategy=megatron mesh=dp=2,tp=4" | FileCheck %s --check-prefixes=CHECK,TP,MEG
// RUN: partita-opt %s -split-input-file --dist-annotate="strategy=dp+megatron mesh=dp=2,tp=4" | FileCheck %s --check-prefixes=CHECK,TP,BATCH

// Prefixes: DP = dp only, MEG = megatron only, TP = megatron and dp+megatron
// (the weights), BATCH = dp and dp+megatron (the inputs).

// Tests that every GPT parameter and input gets the recipe's sharding, every
// dimension written, closed, at priority p0 (B=2 S=4 H=8 n=4 d=2 F=16 V=32).
// CHECK-LABEL: func.func @gpt
// DP-SAME:  tensor<32x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "wte"}
// TP-SAME:  tensor<32x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "wte"}
// CHECK-SAME: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "wpe"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.ln1.gamma"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.ln1.beta"}
// DP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wq"}
// DP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wk"}
// DP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wv"}
// DP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.attn.bq"}
// DP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.attn.bk"}
// DP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.attn.bv"}
// DP-SAME:  tensor<4x2x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wo"}
// TP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wq"}
// TP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wk"}
// TP-SAME:  tensor<8x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wv"}
// TP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.attn.bq"}
// TP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.attn.bk"}
// TP-SAME:  tensor<4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.attn.bv"}
// TP-SAME:  tensor<4x2x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wo"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.attn.bo"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.ln2.gamma"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.ln2.beta"}
// DP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w1"}
// DP-SAME:  tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.mlp.b1"}
// DP-SAME:  tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w2"}
// TP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w1"}
// TP-SAME:  tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0]>, nn.param = "layers.0.mlp.b1"}
// TP-SAME:  tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.mlp.w2"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.mlp.b2"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "ln_f.gamma"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "ln_f.beta"}
// DP-SAME:  tensor<32x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "lm_head"}
// TP-SAME:  tensor<32x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "lm_head"}
// BATCH-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "ids"}
// BATCH-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "labels"}
// MEG-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "ids"}
// MEG-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "labels"}
func.func @gpt(
    %wte: tensor<32x8xf32> {nn.param = "wte"},
    %wpe: tensor<4x8xf32> {nn.param = "wpe"},
    %ln1_gamma: tensor<8xf32> {nn.param = "layers.0.ln1.gamma"},
    %ln1_beta: tensor<8xf32> {nn.param = "layers.0.ln1.beta"},
    %wq: tensor<8x4x2xf32> {nn.param = "layers.0.attn.wq"},
    %wk: tensor<8x4x2xf32> {nn.param = "layers.0.attn.wk"},
    %wv: tensor<8x4x2xf32> {nn.param = "layers.0.attn.wv"},
    %bq: tensor<4x2xf32> {nn.param = "layers.0.attn.bq"},
    %bk: tensor<4x2xf32> {nn.param = "layers.0.attn.bk"},
    %bv: tensor<4x2xf32> {nn.param = "layers.0.attn.bv"},
    %wo: tensor<4x2x8xf32> {nn.param = "layers.0.attn.wo"},
    %bo: tensor<8xf32> {nn.param = "layers.0.attn.bo"},
    %ln2_gamma: tensor<8xf32> {nn.param = "layers.0.ln2.gamma"},
    %ln2_beta: tensor<8xf32> {nn.param = "layers.0.ln2.beta"},
    %w1: tensor<8x16xf32> {nn.param = "layers.0.mlp.w1"},
    %b1: tensor<16xf32> {nn.param = "layers.0.mlp.b1"},
    %w2: tensor<16x8xf32> {nn.param = "layers.0.mlp.w2"},
    %b2: tensor<8xf32> {nn.param = "layers.0.mlp.b2"},
    %lnf_gamma: tensor<8xf32> {nn.param = "ln_f.gamma"},
    %lnf_beta: tensor<8xf32> {nn.param = "ln_f.beta"},
    %lm_head: tensor<32x8xf32> {nn.param = "lm_head"},
    %ids: tensor<2x4xi32> {nn.input = "ids"},
    %labels: tensor<2x4xi32> {nn.input = "labels"}) {
  return
}

// -----

// Tests the Llama names, with grouped-query attention: wk and wv are split
// on their 4 kv heads (B=2 S=4 H=16 n=8 k=4 d=2 F=32 V=32).
// CHECK-LABEL: func.func @llama
// DP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "wte"}
// TP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "wte"}
// CHECK-SAME: tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.attn_norm.gamma"}
// DP-SAME:  tensor<16x8x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wq"}
// DP-SAME:  tensor<16x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wk"}
// DP-SAME:  tensor<16x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wv"}
// DP-SAME:  tensor<8x2x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wo"}
// TP-SAME:  tensor<16x8x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wq"}
// TP-SAME:  tensor<16x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wk"}
// TP-SAME:  tensor<16x4x2xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0, {}p0]>, nn.param = "layers.0.attn.wv"}
// TP-SAME:  tensor<8x2x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0, {}p0]>, nn.param = "layers.0.attn.wo"}
// CHECK-SAME: tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.mlp_norm.gamma"}
// DP-SAME:  tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w1"}
// DP-SAME:  tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w3"}
// DP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w2"}
// TP-SAME:  tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w1"}
// TP-SAME:  tensor<16x32xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w3"}
// TP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.mlp.w2"}
// CHECK-SAME: tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "norm_f.gamma"}
// DP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "lm_head"}
// TP-SAME:  tensor<32x16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "lm_head"}
// BATCH-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "ids"}
// BATCH-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "labels"}
// MEG-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "ids"}
// MEG-SAME: tensor<2x4xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "labels"}
func.func @llama(
    %wte: tensor<32x16xf32> {nn.param = "wte"},
    %attn_norm: tensor<16xf32> {nn.param = "layers.0.attn_norm.gamma"},
    %wq: tensor<16x8x2xf32> {nn.param = "layers.0.attn.wq"},
    %wk: tensor<16x4x2xf32> {nn.param = "layers.0.attn.wk"},
    %wv: tensor<16x4x2xf32> {nn.param = "layers.0.attn.wv"},
    %wo: tensor<8x2x16xf32> {nn.param = "layers.0.attn.wo"},
    %mlp_norm: tensor<16xf32> {nn.param = "layers.0.mlp_norm.gamma"},
    %w1: tensor<16x32xf32> {nn.param = "layers.0.mlp.w1"},
    %w3: tensor<16x32xf32> {nn.param = "layers.0.mlp.w3"},
    %w2: tensor<32x16xf32> {nn.param = "layers.0.mlp.w2"},
    %norm_f: tensor<16xf32> {nn.param = "norm_f.gamma"},
    %lm_head: tensor<32x16xf32> {nn.param = "lm_head"},
    %ids: tensor<2x4xi32> {nn.input = "ids"},
    %labels: tensor<2x4xi32> {nn.input = "labels"}) {
  return
}

// -----

// Tests the MLP names, a multi-digit layer index, and that the classifier
// head stays replicated even when the tensor axis does not divide its 10
// classes (B=2 H=8 F=16 V=10).
// CHECK-LABEL: func.func @mlp
// DP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w1"}
// DP-SAME:  tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.b1"}
// DP-SAME:  tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.w2"}
// TP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.w1"}
// TP-SAME:  tensor<16xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0]>, nn.param = "layers.0.b1"}
// TP-SAME:  tensor<16x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"tp"}p0, {}p0]>, nn.param = "layers.0.w2"}
// CHECK-SAME: tensor<8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "layers.0.b2"}
// DP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.12.w1"}
// TP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.12.w1"}
// CHECK-SAME: tensor<8x10xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "head.w"}
// CHECK-SAME: tensor<10xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.param = "head.b"}
// BATCH-SAME: tensor<2x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "x"}
// BATCH-SAME: tensor<2xi32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0]>, nn.input = "labels"}
// MEG-SAME: tensor<2x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "x"}
// MEG-SAME: tensor<2xi32> {dist.sharding = #dist.sharding<@mesh, [{}p0]>, nn.input = "labels"}
func.func @mlp(
    %w1: tensor<8x16xf32> {nn.param = "layers.0.w1"},
    %b1: tensor<16xf32> {nn.param = "layers.0.b1"},
    %w2: tensor<16x8xf32> {nn.param = "layers.0.w2"},
    %b2: tensor<8xf32> {nn.param = "layers.0.b2"},
    %w1_12: tensor<8x16xf32> {nn.param = "layers.12.w1"},
    %head_w: tensor<8x10xf32> {nn.param = "head.w"},
    %head_b: tensor<10xf32> {nn.param = "head.b"},
    %x: tensor<2x8xf32> {nn.input = "x"},
    %labels: tensor<2xi32> {nn.input = "labels"}) {
  return
}

// -----

// Tests that parameters megatron does not know (near misses of known names
// included) are left unannotated, while dp replicates every parameter, and
// that arguments named neither nn.param nor nn.input are never touched.
// CHECK-LABEL: func.func @unknown
// DP-SAME:  tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "experts.0.w"}
// DP-SAME:  tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.x.mlp.w1"}
// DP-SAME:  tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w1.t"}
// DP-SAME:  tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "mlp.w1"}
// TP-SAME:  tensor<4x4xf32> {nn.param = "experts.0.w"}
// TP-SAME:  tensor<4x4xf32> {nn.param = "layers.x.mlp.w1"}
// TP-SAME:  tensor<4x4xf32> {nn.param = "layers.0.mlp.w1.t"}
// TP-SAME:  tensor<4x4xf32> {nn.param = "mlp.w1"}
// CHECK-SAME: %{{[^:]*}}: tensor<4xf32>,
// CHECK-SAME: %{{[^:]*}}: tensor<3xf32> {test.other})
func.func @unknown(
    %experts: tensor<4x4xf32> {nn.param = "experts.0.w"},
    %bad_index: tensor<4x4xf32> {nn.param = "layers.x.mlp.w1"},
    %suffix: tensor<4x4xf32> {nn.param = "layers.0.mlp.w1.t"},
    %no_layer: tensor<4x4xf32> {nn.param = "mlp.w1"},
    %plain: tensor<4xf32>,
    %other: tensor<3xf32> {test.other}) {
  return
}

// -----

// Tests that every function of the module is annotated, declarations
// included, and that the mesh is created once, at the start of the module.
// CHECK:      module {
// CHECK-NEXT:   dist.mesh @mesh <["dp"=2, "tp"=4]>
// CHECK-NOT:    dist.mesh
// CHECK-LABEL:  func.func private @decl
// DP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.param = "layers.0.mlp.w1"}
// TP-SAME:  tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {"tp"}p0]>, nn.param = "layers.0.mlp.w1"}
// CHECK-LABEL:  func.func @second
// BATCH-SAME: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{"dp"}p0, {}p0]>, nn.input = "x"}
// MEG-SAME: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, [{}p0, {}p0]>, nn.input = "x"}
func.func private @decl(tensor<8x16xf32> {nn.param = "layers.0.mlp.w1"})
func.func @second(%x: tensor<4x8xf32> {nn.input = "x"}) {
  return
}
