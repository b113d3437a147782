//===- NNCostTest.cpp - unit tests of the nn ops' CostOpInterface ---------===//
//
// Every expected number is derived by hand from the formula in NNCost.cpp's
// header, written out as the arithmetic it comes from (f32: 4 bytes).
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/CostInterface.h"
#include "test/unit/CostTestModule.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace partita;
using dist::OpCost;
using dist::TensorShape;

namespace {

// One op of each family, each named by its location.
constexpr const char *kOps = R"mlir(
func.func @ops(%x: tensor<2x8x16xf32>, %w: tensor<16x64xf32>,
               %m: tensor<4x8xf32>, %a: tensor<2x8xf32>, %h: tensor<2x8xbf16>,
               %b: tensor<64xf32>, %y: tensor<2x8x64xf32>, %s: tensor<2x4x8x8xf32>,
               %g: tensor<64xf32>, %q: tensor<2x8x4x16xf32>, %kv: tensor<2x8x2x16xf32>,
               %table: tensor<512x64xf32>, %ids: tensor<2x8xi32>,
               %logits: tensor<2x8x512xf32>, %dloss: tensor<f32>,
               %p: tensor<64x256xf32>, %t: tensor<f32>) {
  %0 = nn.einsum "bsh,hf->bsf" %x, %w : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32> loc("einsum")
  %1 = nn.einsum "ij->i" %m : (tensor<4x8xf32>) -> tensor<4xf32> loc("einsum_sum")
  %2 = nn.einsum "ij->ji" %m : (tensor<4x8xf32>) -> tensor<8x4xf32> loc("einsum_transpose")
  %3 = nn.add %a, %a : tensor<2x8xf32> loc("add")
  %4 = nn.add %h, %h : tensor<2x8xbf16> loc("add_bf16")
  %5 = nn.greater_equal %a, %a : tensor<2x8xf32> loc("greater_equal")
  %6 = nn.exp %a : tensor<2x8xf32> loc("exp")
  %7 = nn.silu %a : tensor<2x8xf32> loc("silu")
  %8 = nn.gelu %a : tensor<2x8xf32> loc("gelu")
  %9 = nn.gelu %a tanh : tensor<2x8xf32> loc("gelu_tanh")
  %10 = nn.relu_grad %a, %a : tensor<2x8xf32> loc("relu_grad")
  %11 = nn.silu_grad %a, %a : tensor<2x8xf32> loc("silu_grad")
  %12 = nn.gelu_grad %a, %a : tensor<2x8xf32> loc("gelu_grad")
  %13 = nn.gelu_grad %a, %a tanh : tensor<2x8xf32> loc("gelu_grad_tanh")
  %14 = nn.broadcast %b dims = [2] : tensor<64xf32> -> tensor<2x8x64xf32> loc("broadcast")
  %15 = nn.convert %a : tensor<2x8xf32> to tensor<2x8xbf16> loc("convert")
  %16 = nn.constant dense<1.0> : tensor<4x8xf32> loc("constant")
  %17 = nn.transpose %q perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32> loc("transpose")
  %18 = nn.reshape %q : tensor<2x8x4x16xf32> -> tensor<16x64xf32> loc("reshape")
  %19 = nn.reduce sum %y dims = [2] : tensor<2x8x64xf32> -> tensor<2x8xf32> loc("reduce_sum")
  %20 = nn.reduce mean %y dims = [2] : tensor<2x8x64xf32> -> tensor<2x8xf32> loc("reduce_mean")
  %21 = nn.softmax %s dim = 3 : tensor<2x4x8x8xf32> loc("softmax")
  %22 = nn.layer_norm %y, %g, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32> loc("layer_norm")
  %23 = nn.rms_norm %y, %g eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32> loc("rms_norm")
  %24 = nn.layer_norm_grad %y, %g, %y eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32> loc("layer_norm_grad")
  %25 = nn.rms_norm_grad %y, %g, %y eps = 1.0e-05 : tensor<2x8x64xf32>, tensor<64xf32> loc("rms_norm_grad")
  %26 = nn.rotary %q theta = 10000.0 : tensor<2x8x4x16xf32> loc("rotary")
  %27 = nn.rotary_grad %q theta = 10000.0 : tensor<2x8x4x16xf32> loc("rotary_grad")
  %28 = nn.attention %q, %kv, %kv causal : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> loc("attention")
  %29 = nn.attention %q, %kv, %kv : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> loc("attention_full")
  %30 = nn.attention_grad %q, %kv, %kv, %q wrt = q causal : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32> loc("attention_grad_q")
  %31 = nn.attention_grad %q, %kv, %kv, %q wrt = k causal : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32> loc("attention_grad_k")
  %32 = nn.attention_grad %q, %kv, %kv, %q wrt = v causal : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32> loc("attention_grad_v")
  %qkv:3 = nn.attention_grad %q, %kv, %kv, %q wrt = q|k|v causal : tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32> -> tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32> loc("attention_grad_qkv")
  %33 = nn.embedding %table[%ids] : tensor<512x64xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32> loc("embedding")
  %34 = nn.embedding_grad %y, %ids : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<512x64xf32> loc("embedding_grad")
  %35 = nn.cross_entropy %logits, %ids : tensor<2x8x512xf32>, tensor<2x8xi32> -> tensor<f32> loc("cross_entropy")
  %36 = nn.cross_entropy_grad %logits, %ids, %dloss : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<f32> loc("cross_entropy_grad")
  %37:2 = nn.sgd %p, %p, %p lr = 0.1 momentum = 0.9 weight_decay = 0.0 : tensor<64x256xf32> loc("sgd")
  %38:3 = nn.adamw %p, %p, %p, %p, %t lr = 1.0e-03 beta1 = 0.9 beta2 = 0.999 eps = 1.0e-08 weight_decay = 0.01 : tensor<64x256xf32>, tensor<f32> loc("adamw")
  return
}
)mlir";

OpCost cost(double flops, double transcendentals, double read, double written) {
  OpCost c;
  c.flops = flops;
  c.transcendentals = transcendentals;
  c.bytesRead = read;
  c.bytesWritten = written;
  return c;
}

class NNCostTest : public ::testing::Test, protected test::CostTestModule {
protected:
  NNCostTest() {
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
    parse(kOps);
  }

  /// The cost of the op named `name` at the given (local) shapes.
  FailureOr<OpCost> costAt(StringRef name, ArrayRef<TensorShape> operands,
                           ArrayRef<TensorShape> results) {
    auto op = cast<dist::CostOpInterface>(opNamed(name));
    return op.getCost(operands, results);
  }

  TensorShape f32(ArrayRef<int64_t> shape) {
    return {SmallVector<int64_t, 4>(shape), Float32Type::get(&context)};
  }
};

// Tests that a contraction costs 2 FLOPs per point of its iteration space.
TEST_F(NNCostTest, Einsum) {
  // b=2 s=8 h=16 f=64; reads x (2*8*16) and w (16*64), writes 2*8*64.
  EXPECT_COST("einsum",
              cost(2.0 * 2 * 8 * 16 * 64, 0, (256 + 1024) * 4, 2 * 8 * 64 * 4));
  // One add per element of the summed operand; a permutation adds nothing.
  EXPECT_COST("einsum_sum", cost(4 * 8, 0, 32 * 4, 4 * 4));
  EXPECT_COST("einsum_transpose", cost(0, 0, 32 * 4, 32 * 4));
}

// Tests that the cost follows the local shapes it is given, not the op's.
TEST_F(NNCostTest, EinsumAtLocalShapes) {
  // Batch split in two and f in two: b=1 s=8 h=16 f=32.
  FailureOr<OpCost> local =
      costAt("einsum", {f32({1, 8, 16}), f32({16, 32})}, {f32({1, 8, 32})});
  ASSERT_TRUE(succeeded(local));
  EXPECT_EQ(
      local->toString(),
      cost(2.0 * 1 * 8 * 16 * 32, 0, (128 + 512) * 4, 256 * 4).toString());
  // h disagrees between the operands: no cost.
  EXPECT_TRUE(failed(
      costAt("einsum", {f32({1, 8, 16}), f32({8, 32})}, {f32({1, 8, 32})})));
  // Wrong operand count or rank: no cost.
  EXPECT_TRUE(failed(costAt("einsum", {f32({1, 8, 16})}, {f32({1, 8, 32})})));
  EXPECT_TRUE(
      failed(costAt("einsum", {f32({8, 16}), f32({16, 32})}, {f32({8, 32})})));
  // A dynamic size: no cost.
  EXPECT_TRUE(failed(costAt("einsum",
                            {f32({ShapedType::kDynamic, 8, 16}), f32({16, 32})},
                            {f32({ShapedType::kDynamic, 8, 32})})));
  // An element type without a size: no cost.
  TensorShape none{{1, 8, 16}, NoneType::get(&context)};
  EXPECT_TRUE(
      failed(costAt("einsum", {none, f32({16, 32})}, {f32({1, 8, 32})})));
}

// Tests the elementwise ops: FLOPs and transcendentals per element.
TEST_F(NNCostTest, Elementwise) {
  const double n = 2 * 8;
  EXPECT_COST("add", cost(n, 0, 2 * n * 4, n * 4));
  EXPECT_COST("add_bf16", cost(n, 0, 2 * n * 2, n * 2));
  EXPECT_COST("greater_equal", cost(n, 0, 2 * n * 4, n * 4));
  EXPECT_COST("exp", cost(0, n, n * 4, n * 4));
  EXPECT_COST("silu", cost(3 * n, n, n * 4, n * 4));
  EXPECT_COST("gelu", cost(4 * n, n, n * 4, n * 4));
  EXPECT_COST("gelu_tanh", cost(8 * n, n, n * 4, n * 4));
  EXPECT_COST("relu_grad", cost(2 * n, 0, 2 * n * 4, n * 4));
  EXPECT_COST("silu_grad", cost(8 * n, n, 2 * n * 4, n * 4));
  EXPECT_COST("gelu_grad", cost(9 * n, 2 * n, 2 * n * 4, n * 4));
  EXPECT_COST("gelu_grad_tanh", cost(17 * n, n, 2 * n * 4, n * 4));
}

// Tests that data movement costs bytes and no FLOPs.
TEST_F(NNCostTest, DataMovement) {
  EXPECT_COST("broadcast", cost(0, 0, 64 * 4, 2 * 8 * 64 * 4));
  EXPECT_COST("convert", cost(0, 0, 16 * 4, 16 * 2));
  EXPECT_COST("constant", cost(0, 0, 0, 32 * 4));
  EXPECT_COST("transpose", cost(0, 0, 1024 * 4, 1024 * 4));
  EXPECT_COST("reshape", cost(0, 0, 1024 * 4, 1024 * 4));
}

// Tests reductions, softmax and the norms (N = 2*8*64 = 1024, R = 16 rows).
TEST_F(NNCostTest, ReductionsAndNorms) {
  EXPECT_COST("reduce_sum", cost(1024, 0, 1024 * 4, 16 * 4));
  EXPECT_COST("reduce_mean", cost(1024 + 16, 0, 1024 * 4, 16 * 4));
  // 2*4*8*8 = 512 elements: max, subtract, sum, divide and one exp each.
  EXPECT_COST("softmax", cost(4 * 512, 512, 512 * 4, 512 * 4));
  EXPECT_COST("layer_norm",
              cost(7 * 1024 + 3 * 16, 16, (1024 + 64 + 64) * 4, 1024 * 4));
  EXPECT_COST("rms_norm",
              cost(4 * 1024 + 2 * 16, 16, (1024 + 64) * 4, 1024 * 4));
  EXPECT_COST("layer_norm_grad",
              cost(13 * 1024 + 5 * 16, 16, (1024 + 64 + 1024) * 4, 1024 * 4));
  EXPECT_COST("rms_norm_grad",
              cost(9 * 1024 + 4 * 16, 16, (1024 + 64 + 1024) * 4, 1024 * 4));
}

// Tests rotary and attention: q [2,8,4,16], k and v [2,8,2,16].
TEST_F(NNCostTest, Attention) {
  // 3 FLOPs per element; a sin and a cos per (position, pair): 8 * 16.
  EXPECT_COST("rotary", cost(3 * 1024, 8 * 16, 1024 * 4, 1024 * 4));
  EXPECT_COST("rotary_grad", cost(3 * 1024, 8 * 16, 1024 * 4, 1024 * 4));
  // Causal: half of batch * heads * sq * skv = 2*4*8*8 / 2 = 256 pairs.
  // Q K^T and P V: 2 * 2 * 256 * 16; softmax 5 per pair. The score matrix is
  // never written: reads q, k, v, writes o.
  const double pairs = 2 * 4 * 8 * 8 / 2, pd = pairs * 16;
  const double qkvBytes = (1024 + 512 + 512) * 4;
  EXPECT_COST("attention", cost(4 * pd + 5 * pairs, pairs, qkvBytes, 4096));
  EXPECT_COST("attention_full",
              cost(4 * 2 * pd + 5 * 2 * pairs, 2 * pairs, qkvBytes, 4096));
  // Gradients also read dy (the query's shape). wrt q: 8PD + 7P + the
  // rowsum 2 * 1024 + scaling the 1024 results; wrt k: 512 results.
  const double gradRead = qkvBytes + 1024 * 4;
  EXPECT_COST("attention_grad_q", cost(8 * pd + 7 * pairs + 2 * 1024 + 1024,
                                       pairs, gradRead, 1024 * 4));
  EXPECT_COST("attention_grad_k", cost(8 * pd + 7 * pairs + 2 * 1024 + 512,
                                       pairs, gradRead, 512 * 4));
  EXPECT_COST("attention_grad_v",
              cost(4 * pd + 5 * pairs, pairs, gradRead, 512 * 4));
  // All three in one op: the probabilities, dP and dS once; each result
  // adds its own product (and dq, dk their scaling). 2PD + 5P for P, 2PD
  // for dv, 4PD + 2P + the rowsum for dS, 2PD + 1024 for dq, 2PD + 512 for
  // dk: 12PD + 7P + 2 * 1024 + 1536, against the three ops' 20PD + 19P +
  // 4 * 1024 + 1536.
  EXPECT_COST("attention_grad_qkv",
              cost(12 * pd + 7 * pairs + 2 * 1024 + 1536, pairs, gradRead,
                   (1024 + 512 + 512) * 4));
  // A split query seq (local shapes): half the pairs.
  FailureOr<OpCost> local = costAt(
      "attention", {f32({2, 4, 4, 16}), f32({2, 8, 2, 16}), f32({2, 8, 2, 16})},
      {f32({2, 4, 4, 16})});
  ASSERT_TRUE(succeeded(local));
  EXPECT_EQ(local->flops, 4 * (pd / 2) + 5 * (pairs / 2));
  // Not [batch, seq, heads, head_dim]: no cost.
  EXPECT_TRUE(failed(costAt("attention",
                            {f32({8, 4, 16}), f32({8, 2, 16}), f32({8, 2, 16})},
                            {f32({8, 4, 16})})));
}

// Tests embedding (reads only the looked-up rows), the loss and optimizers.
TEST_F(NNCostTest, EmbeddingLossOptimizers) {
  // 16 tokens of 64: the ids (16 i32) and 16 rows are read, not the table.
  EXPECT_COST("embedding", cost(0, 0, 16 * 4 + 16 * 64 * 4, 16 * 64 * 4));
  EXPECT_COST("embedding_grad",
              cost(16 * 64, 0, 16 * 64 * 4 + 16 * 4, 512 * 64 * 4));
  // R = 16 rows of V = 512.
  EXPECT_COST("cross_entropy", cost(3 * 16 * 512 + 3 * 16 + 1, 16 * 512 + 16,
                                    16 * 512 * 4 + 16 * 4, 4));
  EXPECT_COST("cross_entropy_grad",
              cost(5 * 16 * 512 + 16 + 1, 16 * 512, 16 * 512 * 4 + 16 * 4 + 4,
                   16 * 512 * 4));
  const double n = 64 * 256;
  EXPECT_COST("sgd", cost(6 * n, 0, 3 * n * 4, 2 * n * 4));
  EXPECT_COST("adamw", cost(14 * n, n, 4 * n * 4 + 4, 3 * n * 4));
}

// Tests that every registered nn op implements CostOpInterface, so an op
// added without a cost fails here.
TEST(NNCostRegistrationTest, EveryNNOpHasACost) {
  MLIRContext context;
  context.loadDialect<nn::NNDialect>();
  int count = 0;
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "nn")
      continue;
    ++count;
    EXPECT_TRUE(name.hasInterface<dist::CostOpInterface>())
        << name.getStringRef().str()
        << " has no CostOpInterface: add it to dialects/nn/IR/NNCost.cpp";
  }
  EXPECT_GT(count, 0);
}

} // namespace
