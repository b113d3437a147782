//===- PropagationTest.cpp - unit tests of sharding propagation -----------===//

#include "passes/sharding/Propagation.h"

#include "dialects/dist/IR/DistDialect.h"

#include <gtest/gtest.h>

using namespace partita;
using namespace partita::sharding;
using dist::FactorKind;
using dist::ShardingRule;

namespace {

/// Mesh x=2, y=4, z=2.
dist::Mesh testMesh() {
  dist::Mesh mesh;
  mesh.name = "mesh";
  mesh.axes = {{"x", 2}, {"y", 4}, {"z", 2}};
  return mesh;
}
constexpr int32_t X = 0, Y = 1, Z = 2;

AxisEntry entry(int32_t axis, int64_t priority = kUnprioritized,
                int32_t origin = -1) {
  return {axis, priority, origin};
}

std::vector<int32_t> axesOf(llvm::ArrayRef<AxisEntry> list) {
  std::vector<int32_t> out;
  for (const AxisEntry &e : list)
    out.push_back(e.axis);
  return out;
}

using Axes = std::vector<int32_t>;

//===----------------------------------------------------------------------===//
// Conversions to and from the sharding model
//===----------------------------------------------------------------------===//

// Tests that an annotation read from the model keeps each dimension's
// priority and closedness on its axes, gives partial axes priority 0, and
// that a sub-axis is handed back instead of being dropped.
TEST(ModelConversionTest, AnnotationFromSharding) {
  dist::Mesh mesh = testMesh();
  dist::Sharding s({{"y", "x"}, {}}, {"z"}, dist::ReductionKind::Max);
  s.dims[0].priority = 2;
  s.dims[1].closed = false;
  auto ann = std::get<TensorAnnotation>(annotationFromSharding(s, mesh));
  ASSERT_EQ(ann.dims.size(), 2u);
  EXPECT_EQ(axesOf(ann.dims[0].axes), (Axes{Y, X}));
  EXPECT_EQ(ann.dims[0].priority, 2);
  EXPECT_EQ(ann.dims[0].axes[1].priority, 2);
  EXPECT_EQ(ann.dims[0].axes[1].origin, -1);
  EXPECT_TRUE(ann.dims[0].closed);
  EXPECT_FALSE(ann.dims[1].closed);
  EXPECT_EQ(ann.dims[1].priority, kUnprioritized);
  EXPECT_EQ(axesOf(ann.partial), (Axes{Z}));
  EXPECT_EQ(ann.partial[0].priority, 0);
  EXPECT_EQ(ann.partialKind, dist::ReductionKind::Max);

  dist::Sharding sub({{dist::AxisRef("y", 2, 2)}});
  auto axis = std::get<dist::AxisRef>(annotationFromSharding(sub, mesh));
  EXPECT_EQ(axis, dist::AxisRef("y", 2, 2));
}

//===----------------------------------------------------------------------===//
// projectDim
//===----------------------------------------------------------------------===//

TEST(ProjectDimTest, OneFactorTakesAllAxesThatDivideIt) {
  dist::Mesh mesh = testMesh();
  auto out = projectDim({entry(X), entry(Y)}, {16}, mesh);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(axesOf(out[0]), (Axes{X, Y}));
}

TEST(ProjectDimTest, NextFactorStartsWhenPreviousIsFull) {
  dist::Mesh mesh = testMesh();
  // [2 x 8] sharded by x (2) then y (4): x fills the first factor.
  auto out = projectDim({entry(X), entry(Y)}, {2, 8}, mesh);
  EXPECT_EQ(axesOf(out[0]), (Axes{X}));
  EXPECT_EQ(axesOf(out[1]), (Axes{Y}));
}

TEST(ProjectDimTest, StopsAtAxisThatWouldStraddleFactors) {
  dist::Mesh mesh = testMesh();
  // First factor 4 takes x (2); y (4) neither divides its remaining 2 nor
  // may skip to the second factor while the first is not fully split.
  auto out = projectDim({entry(X), entry(Y)}, {4, 4}, mesh);
  EXPECT_EQ(axesOf(out[0]), (Axes{X}));
  EXPECT_TRUE(out[1].empty());
}

TEST(ProjectDimTest, DropsAxisThatDividesNoFactor) {
  dist::Mesh mesh = testMesh();
  // A dimension of several factors keeps whole blocks: no padding.
  auto out = projectDim({entry(Y)}, {6, 2}, mesh);
  EXPECT_TRUE(out[0].empty());
  EXPECT_TRUE(out[1].empty());
  // One factor smaller than the axis: too small to pad.
  EXPECT_TRUE(projectDim({entry(Y)}, {3}, mesh)[0].empty());
}

TEST(ProjectDimTest, PadsDimensionOfOneFactor) {
  dist::Mesh mesh = testMesh();
  // 6 on y=4: dist-partition pads it to 8.
  EXPECT_EQ(axesOf(projectDim({entry(Y)}, {6}, mesh)[0]), (Axes{Y}));
  // x then y would need 8 shards of 6: only x is taken.
  EXPECT_EQ(axesOf(projectDim({entry(X), entry(Y)}, {6}, mesh)[0]), (Axes{X}));
}

TEST(ProjectDimTest, SkipsSizeOneFactors) {
  dist::Mesh mesh = testMesh();
  auto out = projectDim({entry(X)}, {1, 8}, mesh);
  EXPECT_TRUE(out[0].empty());
  EXPECT_EQ(axesOf(out[1]), (Axes{X}));
}

TEST(ProjectDimTest, KeepsPriorityAndOrigin) {
  dist::Mesh mesh = testMesh();
  auto out = projectDim({entry(Z, 3, 7)}, {8}, mesh);
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0].priority, 3);
  EXPECT_EQ(out[0][0].origin, 7);
}

//===----------------------------------------------------------------------===//
// resolveCandidates
//===----------------------------------------------------------------------===//

TEST(ResolveTest, NoCandidatesChoosesNothing) {
  EXPECT_TRUE(resolveCandidates({}, testMesh()).empty());
}

TEST(ResolveTest, PrefixIsCompatibleAndLongerWins) {
  dist::Mesh mesh = testMesh();
  std::vector<Candidate> c = {{{entry(X)}, 8}, {{entry(X), entry(Y)}, 8}};
  EXPECT_EQ(axesOf(resolveCandidates(c, mesh)), (Axes{X, Y}));
}

TEST(ResolveTest, StrongerPriorityWinsOverMoreBytes) {
  dist::Mesh mesh = testMesh();
  std::vector<Candidate> c = {{{entry(X, 1)}, 1000}, {{entry(Y, 0)}, 1}};
  EXPECT_EQ(axesOf(resolveCandidates(c, mesh)), (Axes{Y}));
}

TEST(ResolveTest, ConflictGoesToTheChoiceThatReshardsFewerBytes) {
  dist::Mesh mesh = testMesh();
  // Choosing y would reshard the 100-byte tensor; choosing x the 10-byte one.
  std::vector<Candidate> c = {{{entry(Y)}, 10}, {{entry(X)}, 100}};
  EXPECT_EQ(axesOf(resolveCandidates(c, mesh)), (Axes{X}));
  // Two small tensors outweigh one larger one.
  std::vector<Candidate> d = {
      {{entry(Y)}, 60}, {{entry(Y)}, 60}, {{entry(X)}, 100}};
  EXPECT_EQ(axesOf(resolveCandidates(d, mesh)), (Axes{Y}));
}

TEST(ResolveTest, EqualCostTieBreaksOnAxisNamesWhateverTheOrder) {
  dist::Mesh mesh = testMesh();
  std::vector<Candidate> c = {{{entry(Z)}, 10}, {{entry(Y)}, 10}};
  std::vector<Candidate> r = {{{entry(Y)}, 10}, {{entry(Z)}, 10}};
  EXPECT_EQ(axesOf(resolveCandidates(c, mesh)), (Axes{Y}));
  EXPECT_EQ(axesOf(resolveCandidates(r, mesh)), (Axes{Y}));
}

TEST(ResolveTest, WeakerLevelsOnlyExtendTheStrongerChoice) {
  dist::Mesh mesh = testMesh();
  // p0 agrees on x; p1 extends it with z; the p2 extension with y conflicts
  // with the stronger choice and loses although it is listed first.
  std::vector<Candidate> c = {{{entry(X, 0), entry(Y, 2)}, 10},
                              {{entry(X, 0), entry(Z, 1)}, 10}};
  EXPECT_EQ(axesOf(resolveCandidates(c, mesh)), (Axes{X, Z}));
}

TEST(ResolveTest, EachAxisKeepsTheStrongestSupportingOrigin) {
  dist::Mesh mesh = testMesh();
  std::vector<Candidate> c = {{{entry(X, 2, 5), entry(Y, 2, 5)}, 10},
                              {{entry(X, 0, 9)}, 10}};
  AxisList out = resolveCandidates(c, mesh);
  ASSERT_EQ(axesOf(out), (Axes{X, Y}));
  EXPECT_EQ(out[0].priority, 0);
  EXPECT_EQ(out[0].origin, 9);
  EXPECT_EQ(out[1].priority, 2);
  EXPECT_EQ(out[1].origin, 5);
}

//===----------------------------------------------------------------------===//
// propagate
//===----------------------------------------------------------------------===//

TensorNode tensor(std::vector<int64_t> shape) {
  TensorNode node;
  node.shape.assign(shape.begin(), shape.end());
  int64_t n = 4;
  for (int64_t d : shape)
    n *= d;
  node.bytes = n;
  return node;
}

/// Annotates every dimension, `closed` and at `priority`.
TensorNode annotated(std::vector<int64_t> shape, std::vector<Axes> dims,
                     int64_t priority = kUnprioritized, bool closed = true) {
  TensorNode node = tensor(shape);
  TensorAnnotation ann;
  for (const Axes &axes : dims) {
    DimAnnotation dim;
    dim.closed = closed;
    dim.priority = priority;
    for (int32_t a : axes)
      dim.axes.push_back(entry(a, priority, 0));
    ann.dims.push_back(dim);
  }
  node.annotation = ann;
  return node;
}

/// Mesh indices of axes named in the model (testMesh's axes).
Axes indicesOf(const std::vector<dist::AxisRef> &axes) {
  Axes out;
  for (const dist::AxisRef &axis : axes)
    out.push_back(static_cast<int32_t>(*testMesh().findAxis(axis.name)));
  return out;
}

std::vector<Axes> dimsOf(const PropagatedTensor &tensor) {
  std::vector<Axes> out;
  for (const dist::DimSharding &dim : tensor.sharding.dims)
    out.push_back(indicesOf(dim.axes));
  return out;
}

/// "ik,kj->ij" matmul edge.
Edge matmul(int32_t lhs, int32_t rhs, int32_t out, int64_t i, int64_t k,
            int64_t j) {
  std::vector<int64_t> a = {i, k}, b = {k, j}, c = {i, j};
  llvm::ArrayRef<int64_t> ins[] = {a, b};
  llvm::ArrayRef<int64_t> outs[] = {c};
  Edge edge;
  edge.rule = *ShardingRule::fromSpec("ik,kj->ij", ins, outs);
  edge.operands = {lhs, rhs};
  edge.results = {out};
  return edge;
}

TEST(PropagateTest, IdentityChainCarriesTheAnnotationBothWays) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t a = g.addTensor(tensor({8, 8}));
  int32_t b = g.addTensor(annotated({8, 8}, {{X}, {}}));
  int32_t c = g.addTensor(tensor({8, 8}));
  g.addIdentityEdge(a, b);
  g.addIdentityEdge(b, c);
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[a]), (std::vector<Axes>{{X}, {}}));
  EXPECT_EQ(dimsOf(r.tensors[c]), (std::vector<Axes>{{X}, {}}));
  EXPECT_GE(r.sweeps, 2);
}

TEST(PropagateTest, ContractedFactorMakesTheResultPartial) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t lhs = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t rhs = g.addTensor(tensor({8, 16}));
  int32_t out = g.addTensor(tensor({4, 16}));
  g.edges.push_back(matmul(lhs, rhs, out, 4, 8, 16));
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[rhs]), (std::vector<Axes>{{Y}, {}}));
  EXPECT_EQ(dimsOf(r.tensors[out]), (std::vector<Axes>{{}, {}}));
  EXPECT_EQ(indicesOf(r.tensors[out].sharding.partialAxes), (Axes{Y}));
  EXPECT_EQ(r.tensors[out].sharding.partialKind, dist::ReductionKind::Sum);
  // The model form: unannotated dimensions stay open, the sources list the
  // dimension axes then the partial ones.
  EXPECT_EQ(r.tensors[out].sharding.toString(), "[{?}, {?}] partial=sum{y}");
  EXPECT_EQ(r.tensors[rhs].sharding.toString(), "[{y, ?}, {?}]");
  EXPECT_EQ(r.tensors[rhs].sharding.partialKind, dist::ReductionKind::Sum);
  EXPECT_EQ(axesOf(r.tensors[out].sources), (Axes{Y}));
}

/// An additive (add-like) edge over two [4x16] operands.
Edge addEdge(int32_t lhs, int32_t rhs, int32_t out) {
  Edge edge;
  int64_t f0 = edge.rule.addFactor(4, FactorKind::Parallel);
  int64_t f1 = edge.rule.addFactor(16, FactorKind::Parallel);
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addResult({{f0}, {f1}});
  edge.rule.setAdditive();
  edge.operands = {lhs, rhs};
  edge.results = {out};
  return edge;
}

// Tests that an additive op keeps the partial sum its operands share (two
// contractions over y, each the add's only use), so the sum is reduced
// once; a chain of two adds carries it on.
TEST(PropagateTest, AdditiveOpKeepsASharedPartialSum) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t l1 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r1 = g.addTensor(tensor({8, 16}));
  int32_t p1 = g.addTensor(tensor({4, 16}));
  int32_t l2 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r2 = g.addTensor(tensor({8, 16}));
  int32_t p2 = g.addTensor(tensor({4, 16}));
  int32_t l3 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r3 = g.addTensor(tensor({8, 16}));
  int32_t p3 = g.addTensor(tensor({4, 16}));
  int32_t s12 = g.addTensor(tensor({4, 16}));
  int32_t s123 = g.addTensor(tensor({4, 16}));
  g.edges.push_back(matmul(l1, r1, p1, 4, 8, 16));
  g.edges.push_back(matmul(l2, r2, p2, 4, 8, 16));
  g.edges.push_back(matmul(l3, r3, p3, 4, 8, 16));
  g.edges.push_back(addEdge(p1, p2, s12));
  g.edges.push_back(addEdge(s12, p3, s123));
  PropagationResult r = propagate(g);
  EXPECT_EQ(indicesOf(r.tensors[s12].sharding.partialAxes), (Axes{Y}));
  EXPECT_EQ(indicesOf(r.tensors[s123].sharding.partialAxes), (Axes{Y}));
  EXPECT_EQ(r.tensors[s123].sharding.partialKind, dist::ReductionKind::Sum);
}

// Tests the negative controls: an operand that is not partial, and a
// partial operand another op reads too (reduced for that reader anyway),
// leave the sum whole.
TEST(PropagateTest, AdditiveOpNeedsEveryOperandPartialAndUnshared) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t l1 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r1 = g.addTensor(tensor({8, 16}));
  int32_t p1 = g.addTensor(tensor({4, 16}));
  int32_t whole = g.addTensor(annotated({4, 16}, {{}, {}}));
  int32_t mixed = g.addTensor(tensor({4, 16}));
  g.edges.push_back(matmul(l1, r1, p1, 4, 8, 16));
  g.edges.push_back(addEdge(p1, whole, mixed));
  // p2 is read by the add and by an identity edge (another reader).
  int32_t l2 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r2 = g.addTensor(tensor({8, 16}));
  int32_t p2 = g.addTensor(tensor({4, 16}));
  int32_t l3 = g.addTensor(annotated({4, 8}, {{}, {Y}}));
  int32_t r3 = g.addTensor(tensor({8, 16}));
  int32_t p3 = g.addTensor(tensor({4, 16}));
  int32_t copy = g.addTensor(tensor({4, 16}));
  int32_t shared = g.addTensor(tensor({4, 16}));
  g.edges.push_back(matmul(l2, r2, p2, 4, 8, 16));
  g.edges.push_back(matmul(l3, r3, p3, 4, 8, 16));
  g.addIdentityEdge(p2, copy);
  g.edges.push_back(addEdge(p2, p3, shared));
  PropagationResult r = propagate(g);
  EXPECT_TRUE(r.tensors[mixed].sharding.partialAxes.empty());
  EXPECT_TRUE(r.tensors[shared].sharding.partialAxes.empty());
  EXPECT_EQ(indicesOf(r.tensors[p2].sharding.partialAxes), (Axes{Y}));
}

TEST(PropagateTest, ClosedDimensionNeverChanges) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t a = g.addTensor(annotated({8}, {{X}}));
  int32_t b = g.addTensor(annotated({8}, {{}}));
  g.addIdentityEdge(a, b);
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[b]), (std::vector<Axes>{{}}));
}

TEST(PropagateTest, WholeFactorNeverGetsAxes) {
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t a = g.addTensor(annotated({8, 8}, {{X}, {Y}}));
  int32_t b = g.addTensor(tensor({8, 8}));
  Edge edge;
  int64_t f0 = edge.rule.addFactor(8, FactorKind::Parallel);
  int64_t f1 = edge.rule.addFactor(8, FactorKind::Whole);
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addResult({{f0}, {f1}});
  edge.operands = {a};
  edge.results = {b};
  g.edges.push_back(std::move(edge));
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[b]), (std::vector<Axes>{{X}, {}}));
}

TEST(PropagateTest, WeakAnnotationReachedFirstDoesNotBeatStrongOne) {
  // a(p1: x) - b - c - d - e(p0: y): b is one hop from the weak annotation
  // and three from the strong one, yet ends with y.
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t a = g.addTensor(annotated({8}, {{X}}, /*priority=*/1));
  int32_t b = g.addTensor(tensor({8}));
  int32_t c = g.addTensor(tensor({8}));
  int32_t d = g.addTensor(tensor({8}));
  int32_t e = g.addTensor(annotated({8}, {{Y}}, /*priority=*/0));
  g.addIdentityEdge(a, b);
  g.addIdentityEdge(b, c);
  g.addIdentityEdge(c, d);
  g.addIdentityEdge(d, e);
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[a]), (std::vector<Axes>{{X}}));
  for (int32_t t : {b, c, d})
    EXPECT_EQ(dimsOf(r.tensors[t]), (std::vector<Axes>{{Y}})) << "tensor " << t;
  EXPECT_EQ(r.tensors[b].sources[0].priority, 0);
}

TEST(PropagateTest, ResultDoesNotDependOnEdgeOrder) {
  // m sits between two equally strong, conflicting annotations; two
  // orders of the same edges must give the same state.
  auto build = [](bool reversed) {
    Graph g;
    g.meshes.push_back(testMesh());
    int32_t a = g.addTensor(annotated({8, 8}, {{Z}, {}}));
    int32_t m = g.addTensor(tensor({8, 8}));
    int32_t b = g.addTensor(annotated({8, 8}, {{X}, {}}));
    int32_t n = g.addTensor(tensor({8, 8}));
    if (reversed) {
      g.addIdentityEdge(m, n);
      g.addIdentityEdge(b, m);
      g.addIdentityEdge(a, m);
    } else {
      g.addIdentityEdge(a, m);
      g.addIdentityEdge(b, m);
      g.addIdentityEdge(m, n);
    }
    return propagate(g);
  };
  PropagationResult one = build(false), two = build(true);
  for (int32_t t = 0; t < 4; ++t)
    EXPECT_EQ(dimsOf(one.tensors[t]), dimsOf(two.tensors[t])) << "tensor " << t;
  // Equal bytes on both sides: the axis names decide.
  EXPECT_EQ(dimsOf(one.tensors[1]), (std::vector<Axes>{{X}, {}}));
  EXPECT_EQ(dimsOf(one.tensors[3]), (std::vector<Axes>{{X}, {}}));
}

TEST(PropagateTest, AxisUsedOnOneDimensionIsNotAddedToAnother) {
  Graph g;
  g.meshes.push_back(testMesh());
  // Transpose-like edge: a's dim 0 is b's dim 1 and the other way round.
  int32_t a = g.addTensor(annotated({8, 8}, {{X}, {}}, kUnprioritized,
                                    /*closed=*/false));
  int32_t b = g.addTensor(annotated({8, 8}, {{X}, {}}, kUnprioritized,
                                    /*closed=*/false));
  Edge edge;
  int64_t f0 = edge.rule.addFactor(8, FactorKind::Parallel);
  int64_t f1 = edge.rule.addFactor(8, FactorKind::Parallel);
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addResult({{f1}, {f0}});
  edge.operands = {a};
  edge.results = {b};
  g.edges.push_back(std::move(edge));
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[a]), (std::vector<Axes>{{X}, {}}));
  EXPECT_EQ(dimsOf(r.tensors[b]), (std::vector<Axes>{{X}, {}}));
}

TEST(PropagateTest, TwoFactorsOfOneOpNeverTakeOneAxis) {
  // Elementwise a[y,x] + b[x,y]: factor 0 takes x (equal bytes, name
  // order), so factor 1 must take y rather than lose its axis entirely.
  Graph g;
  g.meshes.push_back(testMesh());
  int32_t a = g.addTensor(annotated({8, 8}, {{Y}, {X}}));
  int32_t b = g.addTensor(annotated({8, 8}, {{X}, {Y}}));
  int32_t c = g.addTensor(tensor({8, 8}));
  Edge edge;
  int64_t f0 = edge.rule.addFactor(8, FactorKind::Parallel);
  int64_t f1 = edge.rule.addFactor(8, FactorKind::Parallel);
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addOperand({{f0}, {f1}});
  edge.rule.addResult({{f0}, {f1}});
  edge.operands = {a, b};
  edge.results = {c};
  g.edges.push_back(std::move(edge));
  PropagationResult r = propagate(g);
  EXPECT_EQ(dimsOf(r.tensors[c]), (std::vector<Axes>{{X}, {Y}}));
}

} // namespace
