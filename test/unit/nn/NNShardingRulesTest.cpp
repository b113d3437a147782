//===- NNShardingRulesTest.cpp - unit tests of the nn ops' sharding rules -===//

#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

using namespace mlir;
using namespace partita;
using dist::FactorKind;
using dist::ShardingRule;
using dist::TensorFactors;

namespace {

using Dim = SmallVector<int64_t, 2>;

class NNShardingRulesTest : public ::testing::Test {
protected:
  NNShardingRulesTest() : builder(&context), loc(UnknownLoc::get(&context)) {
    context.loadDialect<nn::NNDialect>();
    f32 = builder.getF32Type();
    i32 = builder.getI32Type();
  }
  ~NNShardingRulesTest() override {
    // Ops first: they use the block's arguments.
    for (Operation *op : llvm::reverse(ops))
      op->destroy();
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type element = {}) {
    return RankedTensorType::get(shape, element ? element : f32);
  }
  Value arg(ArrayRef<int64_t> shape, Type element = {}) {
    return block.addArgument(tensor(shape, element), loc);
  }

  /// Builds a detached op, owned by the fixture.
  template <typename Op, typename... Args> Op build(Args &&...args) {
    Op op = Op::create(builder, loc, std::forward<Args>(args)...);
    ops.push_back(op.getOperation());
    return op;
  }

  /// The op's rule, which must exist and fit the op.
  ShardingRule ruleOf(Operation *op) {
    auto iface = cast<dist::ShardingRuleOpInterface>(op);
    FailureOr<ShardingRule> rule = iface.getShardingRule();
    EXPECT_TRUE(succeeded(rule)) << "no rule for " << op->getName().getStringRef().str();
    if (failed(rule))
      return ShardingRule();
    EXPECT_TRUE(succeeded(rule->verify(op))) << rule->toString();
    return *rule;
  }
  bool hasNoRule(Operation *op) {
    return failed(cast<dist::ShardingRuleOpInterface>(op).getShardingRule());
  }

  ShardingRule reshapeRule(ArrayRef<int64_t> from, ArrayRef<int64_t> to) {
    return ruleOf(build<nn::ReshapeOp>(tensor(to), arg(from)));
  }

  MLIRContext context;
  OpBuilder builder;
  Location loc;
  Block block;
  SmallVector<Operation *> ops;
  Type f32, i32;
};

/// The single factor of a dimension (fails the test when there is not one).
int64_t only(const Dim &dim) {
  EXPECT_EQ(dim.size(), 1u);
  return dim.empty() ? -1 : dim.front();
}

//===----------------------------------------------------------------------===//
// Einsum and elementwise
//===----------------------------------------------------------------------===//

TEST_F(NNShardingRulesTest, EinsumSharesLettersAndReducesContracted) {
  auto op = build<nn::EinsumOp>(tensor({2, 8, 64}), "bsh,hf->bsf",
                                ValueRange{arg({2, 8, 16}), arg({16, 64})});
  ShardingRule rule = ruleOf(op);
  ASSERT_EQ(rule.getNumFactors(), 4);
  int64_t h = only(rule.getOperand(0)[2]);
  EXPECT_EQ(only(rule.getOperand(1)[0]), h);
  EXPECT_EQ(rule.getFactor(h).kind, FactorKind::Reduction);
  EXPECT_EQ(rule.getFactor(h).partialKind, dist::ReductionKind::Sum);
  EXPECT_EQ(rule.getFactor(h).size, 16);
  int64_t f = only(rule.getOperand(1)[1]);
  EXPECT_EQ(only(rule.getResult(0)[2]), f);
  EXPECT_EQ(rule.getFactor(f).kind, FactorKind::Parallel);
  EXPECT_EQ(only(rule.getResult(0)[0]), only(rule.getOperand(0)[0]));
}

TEST_F(NNShardingRulesTest, ElementwiseSharesOneParallelFactorPerDim) {
  Value a = arg({2, 8}), b = arg({2, 8});
  for (Operation *op :
       {build<nn::AddOp>(tensor({2, 8}), a, b).getOperation(),
        build<nn::MaxOp>(tensor({2, 8}), a, b).getOperation(),
        build<nn::GeluOp>(tensor({2, 8}), a, true).getOperation(),
        build<nn::RsqrtOp>(tensor({2, 8}), a).getOperation()}) {
    ShardingRule rule = ruleOf(op);
    ASSERT_EQ(rule.getNumFactors(), 2);
    for (const TensorFactors &operand : rule.getOperands())
      EXPECT_EQ(operand, rule.getResult(0));
    EXPECT_EQ(rule.getFactor(0).kind, FactorKind::Parallel);
    EXPECT_EQ(rule.getFactor(1).kind, FactorKind::Parallel);
    EXPECT_EQ(rule.getFactor(1).size, 8);
  }
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

TEST_F(NNShardingRulesTest, BroadcastRepeatedSizeOneDimHasNoFactor) {
  auto op = build<nn::BroadcastOp>(tensor({2, 8, 64}), arg({8, 1}),
                                   ArrayRef<int64_t>{1, 2});
  // [8, 1] -> [2, 8, 64]: dim 0 maps to result dim 1 (shared); dim 1 of
  // size 1 is repeated into 64 (no factor); result dim 0 is new.
  ShardingRule rule = ruleOf(op);
  const TensorFactors &in = rule.getOperand(0), &out = rule.getResult(0);
  EXPECT_EQ(only(in[0]), only(out[1]));
  EXPECT_TRUE(in[1].empty());
  for (int64_t d : {0, 2}) {
    int64_t f = only(out[d]);
    EXPECT_EQ(rule.getFactor(f).kind, FactorKind::Parallel);
    EXPECT_NE(only(in[0]), f);
  }
}

TEST_F(NNShardingRulesTest, ReduceMaxCombinesByMaxAndSumAndMeanBySum) {
  Value x = arg({2, 8, 16});
  struct Case {
    nn::ReduceKind kind;
    dist::ReductionKind partial;
  };
  for (Case c : {Case{nn::ReduceKind::Max, dist::ReductionKind::Max},
                 Case{nn::ReduceKind::Sum, dist::ReductionKind::Sum},
                 Case{nn::ReduceKind::Mean, dist::ReductionKind::Sum}}) {
    auto op = build<nn::ReduceOp>(tensor({8}), c.kind, x,
                                  ArrayRef<int64_t>{2, 0});
    ShardingRule rule = ruleOf(op);
    const TensorFactors &in = rule.getOperand(0);
    for (int64_t d : {0, 2}) {
      const dist::Factor &factor = rule.getFactor(only(in[d]));
      EXPECT_EQ(factor.kind, FactorKind::Reduction);
      EXPECT_EQ(factor.partialKind, c.partial);
    }
    EXPECT_EQ(only(rule.getResult(0)[0]), only(in[1]));
    EXPECT_EQ(rule.getFactor(only(in[1])).kind, FactorKind::Parallel);
  }
}

TEST_F(NNShardingRulesTest, TransposeFollowsPermutation) {
  const int64_t perm[] = {2, 0, 1};
  auto op = build<nn::TransposeOp>(tensor({4, 2, 3}), arg({2, 3, 4}),
                                   ArrayRef<int64_t>(perm));
  ShardingRule rule = ruleOf(op);
  for (auto [d, from] : llvm::enumerate(perm))
    EXPECT_EQ(only(rule.getResult(0)[d]), only(rule.getOperand(0)[from]));
}

//===----------------------------------------------------------------------===//
// Reshape factorization
//===----------------------------------------------------------------------===//

/// Factor sizes of each dimension of `dims`, for compact comparisons.
std::vector<std::vector<int64_t>> sizes(const ShardingRule &rule,
                                        const TensorFactors &dims) {
  std::vector<std::vector<int64_t>> out;
  for (const Dim &dim : dims) {
    out.emplace_back();
    for (int64_t f : dim)
      out.back().push_back(rule.getFactor(f).size);
  }
  return out;
}
using Sizes = std::vector<std::vector<int64_t>>;

TEST_F(NNShardingRulesTest, ReshapeMergesDims) {
  ShardingRule rule = reshapeRule({8, 6}, {48});
  EXPECT_EQ(sizes(rule, rule.getOperand(0)), (Sizes{{8}, {6}}));
  EXPECT_EQ(rule.getResult(0)[0], (Dim{only(rule.getOperand(0)[0]),
                                       only(rule.getOperand(0)[1])}));
}

TEST_F(NNShardingRulesTest, ReshapeMergesLeadingDims) {
  ShardingRule rule = reshapeRule({2, 4, 6}, {8, 6});
  const TensorFactors &in = rule.getOperand(0), &out = rule.getResult(0);
  EXPECT_EQ(out[0], (Dim{only(in[0]), only(in[1])}));
  EXPECT_EQ(out[1], in[2]);
  for (const dist::Factor &factor : rule.getFactors())
    EXPECT_EQ(factor.kind, FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, ReshapeSplitsOverlappingDimsByGcd) {
  // [4, 3] -> [2, 6]: 4 = 2*2, 6 = 2*3; the minor 2 of the input's first
  // dimension is the major 2 of the result's second.
  ShardingRule rule = reshapeRule({4, 3}, {2, 6});
  EXPECT_EQ(sizes(rule, rule.getOperand(0)), (Sizes{{2, 2}, {3}}));
  EXPECT_EQ(sizes(rule, rule.getResult(0)), (Sizes{{2}, {2, 3}}));
  EXPECT_EQ(rule.getOperand(0)[0][1], rule.getResult(0)[1][0]);
}

TEST_F(NNShardingRulesTest, ReshapeSkipsSizeOneDims) {
  ShardingRule rule = reshapeRule({1, 8, 1, 6}, {48, 1});
  EXPECT_EQ(sizes(rule, rule.getOperand(0)), (Sizes{{}, {8}, {}, {6}}));
  EXPECT_EQ(sizes(rule, rule.getResult(0)), (Sizes{{8, 6}, {}}));
}

TEST_F(NNShardingRulesTest, ReshapeFallsBackToWholeFactorsWhenMisaligned) {
  // [6, 4] -> [4, 6]: a common major 2, then [3, 4] against [2, 6] share no
  // major factor.
  ShardingRule rule = reshapeRule({6, 4}, {4, 6});
  const TensorFactors &in = rule.getOperand(0), &out = rule.getResult(0);
  EXPECT_EQ(sizes(rule, in), (Sizes{{2, 3}, {4}}));
  EXPECT_EQ(sizes(rule, out), (Sizes{{2, 2}, {6}}));
  EXPECT_EQ(in[0][0], out[0][0]);
  EXPECT_EQ(rule.getFactor(in[0][0]).kind, FactorKind::Parallel);
  for (int64_t f : {in[0][1], in[1][0], out[0][1], out[1][0]})
    EXPECT_EQ(rule.getFactor(f).kind, FactorKind::Whole);
}

TEST_F(NNShardingRulesTest, ReshapeRealignsAfterMisalignedRun) {
  ShardingRule rule = reshapeRule({3, 4, 5}, {2, 6, 5});
  const TensorFactors &in = rule.getOperand(0), &out = rule.getResult(0);
  EXPECT_EQ(in[2], out[2]);
  EXPECT_EQ(rule.getFactor(only(in[2])).kind, FactorKind::Parallel);
  for (const TensorFactors *dims : {&in, &out})
    for (int64_t d : {0, 1})
      EXPECT_EQ(rule.getFactor(only((*dims)[d])).kind, FactorKind::Whole);
}

/// Where each factor sits in a tensor's row-major order: the stride, in
/// elements, of one step of the factor.
std::map<int64_t, int64_t> strides(const ShardingRule &rule,
                                   const TensorFactors &dims) {
  std::map<int64_t, int64_t> out;
  int64_t stride = 1;
  for (const Dim &dim : llvm::reverse(dims)) {
    for (int64_t f : llvm::reverse(dim)) {
      out[f] = stride;
      stride *= rule.getFactor(f).size;
    }
  }
  return out;
}

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (auto [d, size] : llvm::enumerate(shape))
    text += (d ? "," : "") + std::to_string(size);
  return text + "]";
}

/// Every ordered way of writing `n` as a product of at most `rank` factors
/// > 1, plus versions with a size-1 dimension in front.
void shapesOf(int64_t n, int64_t rank, SmallVector<int64_t> &prefix,
              std::vector<SmallVector<int64_t>> &out) {
  if (n == 1) {
    out.push_back(prefix);
    SmallVector<int64_t> withOne = {1};
    withOne.append(prefix);
    out.push_back(withOne);
    return;
  }
  if (rank == 0)
    return;
  for (int64_t d = 2; d <= n; ++d) {
    if (n % d)
      continue;
    prefix.push_back(d);
    shapesOf(n / d, rank - 1, prefix, out);
    prefix.pop_back();
  }
}

TEST_F(NNShardingRulesTest, ReshapeParallelFactorsHaveEqualStridesOnBothSides) {
  // A parallel factor is sound only if it indexes the same elements on both
  // sides: same size and same row-major stride. Whole factors live on one
  // side only. Checked for every pair of shapes of 24 and of 36 elements.
  for (int64_t n : {24, 36}) {
    std::vector<SmallVector<int64_t>> shapes;
    SmallVector<int64_t> prefix;
    shapesOf(n, 3, prefix, shapes);
    for (const SmallVector<int64_t> &from : shapes) {
      for (const SmallVector<int64_t> &to : shapes) {
        SCOPED_TRACE(shapeText(from) + " -> " + shapeText(to));
        ShardingRule rule = reshapeRule(from, to);
        auto in = strides(rule, rule.getOperand(0));
        auto out = strides(rule, rule.getResult(0));
        int64_t parallelProduct = 1;
        for (auto [f, factor] : llvm::enumerate(rule.getFactors())) {
          if (factor.kind == FactorKind::Parallel) {
            ASSERT_TRUE(in.count(f) && out.count(f)) << factor.name;
            EXPECT_EQ(in[f], out[f]) << factor.name;
            parallelProduct *= factor.size;
          } else {
            EXPECT_EQ(factor.kind, FactorKind::Whole);
            EXPECT_EQ(in.count(f) + out.count(f), 1u) << factor.name;
          }
        }
        // Identical shapes and pure merges/splits need no whole factor.
        if (from == to) {
          EXPECT_EQ(parallelProduct, n);
        }
      }
    }
  }
}

TEST_F(NNShardingRulesTest, ReshapeOfMismatchedCountsHasNoRule) {
  // Invalid IR (the verifier rejects it), built directly: no rule, no crash.
  EXPECT_TRUE(hasNoRule(build<nn::ReshapeOp>(tensor({4, 6}), arg({5, 5}))));
  EXPECT_TRUE(hasNoRule(build<nn::ReshapeOp>(tensor({0, 6}), arg({6, 0}))));
}

//===----------------------------------------------------------------------===//
// Normalization, transformer blocks, loss
//===----------------------------------------------------------------------===//

TEST_F(NNShardingRulesTest, SoftmaxDimIsCollective) {
  auto op = build<nn::SoftmaxOp>(tensor({2, 4, 8}), arg({2, 4, 8}),
                                 builder.getI64IntegerAttr(1));
  ShardingRule rule = ruleOf(op);
  for (int64_t d = 0; d < 3; ++d)
    EXPECT_EQ(rule.getFactor(only(rule.getOperand(0)[d])).kind,
              d == 1 ? FactorKind::Collective : FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, LayerNormSharesHiddenWithGammaAndBeta) {
  auto op = build<nn::LayerNormOp>(tensor({2, 8, 64}), arg({2, 8, 64}),
                                   arg({64}), arg({64}),
                                   builder.getF64FloatAttr(1e-5));
  ShardingRule rule = ruleOf(op);
  int64_t h = only(rule.getOperand(0)[2]);
  EXPECT_EQ(rule.getFactor(h).kind, FactorKind::Collective);
  EXPECT_EQ(only(rule.getOperand(1)[0]), h);
  EXPECT_EQ(only(rule.getOperand(2)[0]), h);
  EXPECT_EQ(only(rule.getResult(0)[2]), h);
  EXPECT_EQ(rule.getFactor(only(rule.getOperand(0)[0])).kind,
            FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, RMSNormSharesHiddenWithGamma) {
  auto op = build<nn::RMSNormOp>(tensor({4, 64}), arg({4, 64}), arg({64}),
                                 builder.getF64FloatAttr(1e-5));
  ShardingRule rule = ruleOf(op);
  int64_t h = only(rule.getOperand(0)[1]);
  EXPECT_EQ(rule.getFactor(h).kind, FactorKind::Collective);
  EXPECT_EQ(only(rule.getOperand(1)[0]), h);
}

TEST_F(NNShardingRulesTest, RotaryKeepsHeadDimWhole) {
  auto op = build<nn::RotaryOp>(tensor({2, 8, 4, 16}), arg({2, 8, 4, 16}),
                                builder.getF64FloatAttr(10000.0));
  ShardingRule rule = ruleOf(op);
  const TensorFactors &dims = rule.getOperand(0);
  EXPECT_EQ(rule.getResult(0), dims);
  for (int64_t d = 0; d < 4; ++d)
    EXPECT_EQ(rule.getFactor(only(dims[d])).kind,
              d == 3 ? FactorKind::Whole : FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, AttentionSharesHeadsAndSplitsKeySeqCollectively) {
  auto op = build<nn::AttentionOp>(tensor({2, 8, 4, 16}), arg({2, 8, 4, 16}),
                                   arg({2, 32, 4, 16}), arg({2, 32, 4, 16}),
                                   false, FloatAttr());
  ShardingRule rule = ruleOf(op);
  const TensorFactors &q = rule.getOperand(0), &k = rule.getOperand(1),
                      &v = rule.getOperand(2), &o = rule.getResult(0);
  for (const TensorFactors *t : {&k, &v, &o})
    EXPECT_EQ((*t)[0], q[0]);
  EXPECT_EQ(k[2], q[2]);
  EXPECT_EQ(v[2], q[2]);
  EXPECT_EQ(o[2], q[2]);
  EXPECT_EQ(o[1], q[1]);
  EXPECT_EQ(v[1], k[1]);
  EXPECT_NE(k[1], q[1]);
  EXPECT_EQ(rule.getFactor(only(k[1])).kind, FactorKind::Collective);
  EXPECT_EQ(rule.getFactor(only(k[1])).size, 32);
  // q/k head_dim is one whole factor; v/result head_dim another, parallel.
  EXPECT_EQ(k[3], q[3]);
  EXPECT_EQ(rule.getFactor(only(q[3])).kind, FactorKind::Whole);
  EXPECT_EQ(o[3], v[3]);
  EXPECT_NE(v[3], q[3]);
  EXPECT_EQ(rule.getFactor(only(v[3])).kind, FactorKind::Parallel);
  for (const TensorFactors *t : {&q, &o})
    for (int64_t d : {0, 1, 2})
      EXPECT_EQ(rule.getFactor(only((*t)[d])).kind, FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, GroupedQueryAttentionSplitsQueryHeads) {
  // 8 query heads over 2 kv heads: query heads = [kv (2), group (4)].
  auto op = build<nn::AttentionOp>(tensor({2, 8, 8, 16}), arg({2, 8, 8, 16}),
                                   arg({2, 8, 2, 16}), arg({2, 8, 2, 16}),
                                   true, FloatAttr());
  ShardingRule rule = ruleOf(op);
  const Dim &qHeads = rule.getOperand(0)[2];
  ASSERT_EQ(qHeads.size(), 2u);
  EXPECT_EQ(rule.getFactor(qHeads[0]).size, 2);
  EXPECT_EQ(rule.getFactor(qHeads[1]).size, 4);
  EXPECT_EQ(rule.getOperand(1)[2], (Dim{qHeads[0]}));
  EXPECT_EQ(rule.getOperand(2)[2], (Dim{qHeads[0]}));
  EXPECT_EQ(rule.getResult(0)[2], qHeads);
  EXPECT_EQ(rule.getFactor(qHeads[1]).kind, FactorKind::Parallel);
}

TEST_F(NNShardingRulesTest, AttentionWithIndivisibleHeadsHasNoRule) {
  auto op = build<nn::AttentionOp>(tensor({2, 8, 6, 16}), arg({2, 8, 6, 16}),
                                   arg({2, 8, 4, 16}), arg({2, 8, 4, 16}),
                                   false, FloatAttr());
  EXPECT_TRUE(hasNoRule(op));
}

TEST_F(NNShardingRulesTest, EmbeddingVocabIsCollective) {
  auto op = build<nn::EmbeddingOp>(tensor({2, 8, 64}), arg({512, 64}),
                                   arg({2, 8}, i32));
  ShardingRule rule = ruleOf(op);
  const TensorFactors &table = rule.getOperand(0), &ids = rule.getOperand(1),
                      &out = rule.getResult(0);
  EXPECT_EQ(rule.getFactor(only(table[0])).kind, FactorKind::Collective);
  EXPECT_EQ(rule.getFactor(only(table[0])).size, 512);
  EXPECT_EQ(only(out[2]), only(table[1]));
  EXPECT_EQ(rule.getFactor(only(table[1])).kind, FactorKind::Parallel);
  EXPECT_EQ(out[0], ids[0]);
  EXPECT_EQ(out[1], ids[1]);
}

TEST_F(NNShardingRulesTest, CrossEntropyReducesTokensAndCollectsVocab) {
  auto op = build<nn::CrossEntropyOp>(tensor({}), arg({4, 10}),
                                      arg({4}, i32));
  ShardingRule rule = ruleOf(op);
  const TensorFactors &logits = rule.getOperand(0);
  EXPECT_EQ(rule.getOperand(1)[0], logits[0]);
  const dist::Factor &tokens = rule.getFactor(only(logits[0]));
  EXPECT_EQ(tokens.kind, FactorKind::Reduction);
  EXPECT_EQ(tokens.partialKind, dist::ReductionKind::Sum);
  EXPECT_EQ(rule.getFactor(only(logits[1])).kind, FactorKind::Collective);
  EXPECT_TRUE(rule.getResult(0).empty());
}

TEST_F(NNShardingRulesTest, ConstantHasParallelResultFactorsOnly) {
  auto type = tensor({4, 8});
  auto op = build<nn::ConstantOp>(
      type, cast<ElementsAttr>(DenseElementsAttr::get(type, 1.0f)));
  ShardingRule rule = ruleOf(op);
  EXPECT_TRUE(rule.getOperands().empty());
  EXPECT_EQ(sizes(rule, rule.getResult(0)), (Sizes{{4}, {8}}));
  EXPECT_EQ(rule.getFactor(0).kind, FactorKind::Parallel);
}

// Tests that the factors the partitioner looks up by role carry it: the
// sequence of rotary and attention(_grad), attention's key sequence and value
// head dimension, and the vocabulary of embedding, cross_entropy and their
// gradients; and that other factors have none.
TEST_F(NNShardingRulesTest, FactorsCarryTheirRoles) {
  using dist::FactorRole;
  auto roleOf = [](const ShardingRule &rule, const Dim &factors) {
    return rule.getFactor(only(factors)).role;
  };
  ShardingRule rotary =
      ruleOf(build<nn::RotaryOp>(tensor({2, 8, 4, 16}), arg({2, 8, 4, 16}),
                                 builder.getF64FloatAttr(10000.0)));
  EXPECT_EQ(roleOf(rotary, rotary.getOperand(0)[1]), FactorRole::Sequence);
  for (int64_t d : {0, 2, 3})
    EXPECT_EQ(roleOf(rotary, rotary.getOperand(0)[d]), FactorRole::None);

  ShardingRule attention = ruleOf(build<nn::AttentionOp>(
      tensor({2, 8, 4, 16}), arg({2, 8, 4, 16}), arg({2, 32, 4, 16}),
      arg({2, 32, 4, 16}), true, FloatAttr()));
  EXPECT_EQ(roleOf(attention, attention.getOperand(0)[1]),
            FactorRole::Sequence);
  EXPECT_EQ(roleOf(attention, attention.getOperand(1)[1]),
            FactorRole::KeySequence);
  EXPECT_EQ(roleOf(attention, attention.getOperand(2)[3]),
            FactorRole::ValueHeadDim);
  EXPECT_EQ(roleOf(attention, attention.getOperand(0)[3]), FactorRole::None);
  EXPECT_EQ(attention.findFactor(FactorRole::KeySequence),
            std::optional<int64_t>(only(attention.getOperand(1)[1])));
  EXPECT_EQ(attention.findFactor(FactorRole::Vocabulary), std::nullopt);
  EXPECT_EQ(attention.findFactor(FactorRole::None), std::nullopt);

  ShardingRule attentionGrad = ruleOf(build<nn::AttentionGradOp>(
      tensor({2, 32, 4, 16}), arg({2, 8, 4, 16}), arg({2, 32, 4, 16}),
      arg({2, 32, 4, 16}), arg({2, 8, 4, 16}), nn::AttentionGradWrt::Key, true,
      FloatAttr()));
  EXPECT_EQ(roleOf(attentionGrad, attentionGrad.getOperand(0)[1]),
            FactorRole::Sequence);
  EXPECT_EQ(roleOf(attentionGrad, attentionGrad.getOperand(1)[1]),
            FactorRole::KeySequence);
  EXPECT_EQ(roleOf(attentionGrad, attentionGrad.getOperand(2)[3]),
            FactorRole::ValueHeadDim);

  ShardingRule embedding = ruleOf(build<nn::EmbeddingOp>(
      tensor({2, 8, 64}), arg({512, 64}), arg({2, 8}, i32)));
  EXPECT_EQ(roleOf(embedding, embedding.getOperand(0)[0]),
            FactorRole::Vocabulary);
  // The ids' sequence is named "s" but reads no position.
  EXPECT_EQ(roleOf(embedding, embedding.getOperand(1)[1]), FactorRole::None);
  ShardingRule embeddingGrad = ruleOf(build<nn::EmbeddingGradOp>(
      tensor({512, 64}), arg({2, 8, 64}), arg({2, 8}, i32)));
  EXPECT_EQ(roleOf(embeddingGrad, embeddingGrad.getResult(0)[0]),
            FactorRole::Vocabulary);

  ShardingRule crossEntropy = ruleOf(
      build<nn::CrossEntropyOp>(tensor({}), arg({4, 10}), arg({4}, i32)));
  EXPECT_EQ(roleOf(crossEntropy, crossEntropy.getOperand(0)[1]),
            FactorRole::Vocabulary);
  ShardingRule crossEntropyGrad = ruleOf(build<nn::CrossEntropyGradOp>(
      tensor({4, 10}), arg({4, 10}), arg({4}, i32), arg({})));
  EXPECT_EQ(roleOf(crossEntropyGrad, crossEntropyGrad.getOperand(0)[1]),
            FactorRole::Vocabulary);
}

TEST_F(NNShardingRulesTest, BroadcastWithBadDimsHasNoRule) {
  // Invalid IR built directly: dims not increasing, and a size mismatch.
  EXPECT_TRUE(hasNoRule(build<nn::BroadcastOp>(
      tensor({2, 8}), arg({8, 2}), ArrayRef<int64_t>{1, 0})));
  EXPECT_TRUE(hasNoRule(build<nn::BroadcastOp>(
      tensor({2, 8}), arg({3}), ArrayRef<int64_t>{1})));
}

} // namespace
