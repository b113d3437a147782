//===- ExecutorTest.cpp - plan loading and the executor on hand-built plans
//===//

#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Executor.h"
#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <mutex>
#include <thread>
#include <tuple>

using namespace partita::runtime;
namespace plan = partita::plan;

namespace {

constexpr uint32_t kTrailer = 0x4e414c50;

/// Builds plans by hand: activations get 64-byte aligned arena slots one
/// after another (no reuse), live for the whole program.
struct PlanBuilder {
  plan::Plan p;
  plan::Program *prog;
  int64_t arena = 0;

  explicit PlanBuilder(std::vector<std::pair<std::string, int64_t>> axes = {},
                       bool partitioned = false) {
    p.set_format_version(kPlanFormatVersion);
    p.set_trailer(kTrailer);
    p.set_seed(7);
    for (auto &[name, size] : axes) {
      plan::MeshAxis *a = p.mutable_mesh()->add_axes();
      a->set_name(name);
      a->set_size(size);
    }
    prog = p.add_programs();
    prog->set_name("main");
    prog->set_partitioned(partitioned);
  }

  int64_t buffer(plan::Role role, std::vector<int64_t> local,
                 std::vector<std::vector<std::string>> sharding = {},
                 std::string name = "", std::vector<int64_t> global = {}) {
    plan::Buffer *b = prog->add_buffers();
    b->set_id(prog->buffers_size() - 1);
    b->set_role(role);
    b->set_name(name);
    for (int64_t d : local)
      b->add_local_shape(d);
    if (global.empty())
      global = local;
    for (int64_t d : global)
      b->add_global_shape(d);
    for (auto &axes : sharding) {
      plan::DimSharding *ds = b->add_sharding();
      for (auto &a : axes)
        ds->add_axes(a);
    }
    if (role == plan::ACTIVATION) {
      int64_t bytes = 4;
      for (int64_t d : local)
        bytes *= d;
      int64_t offset = (arena + 63) / 64 * 64;
      b->set_offset(offset);
      arena = offset + bytes;
      b->set_first_use(0);
      b->set_last_use(1000);
    } else {
      prog->add_arguments(b->id());
    }
    if (role == plan::PARAMETER) {
      b->mutable_init()->set_kind(plan::Init::UNIFORM);
      b->mutable_init()->set_a(-1);
      b->mutable_init()->set_b(1);
    }
    return b->id();
  }

  void kernel(const std::string &kind, std::vector<int64_t> in,
              std::vector<int64_t> out, const std::string &spec = "") {
    plan::Kernel *k = prog->add_instructions()->mutable_kernel();
    // The plan spells kinds as the upper-case enum of the runtime's names.
    std::string upper = kind;
    for (char &ch : upper)
      ch = char(std::toupper(static_cast<unsigned char>(ch)));
    plan::Kernel::Kind value = plan::Kernel::KIND_UNSPECIFIED;
    plan::Kernel::Kind_Parse(upper, &value);
    k->set_kind(value);
    k->mutable_attrs()->set_spec(spec);
    for (int64_t i : in)
      k->add_inputs(i);
    for (int64_t o : out)
      k->add_outputs(o);
  }

  void collective(plan::Collective::Kind kind, std::vector<std::string> axes,
                  int64_t in, int64_t out, int64_t dim = 0,
                  int64_t concat = 0) {
    plan::Collective *c = prog->add_instructions()->mutable_collective();
    c->set_kind(kind);
    for (auto &a : axes)
      c->add_axes(a);
    c->set_input(in);
    c->set_output(out);
    c->set_dim(dim);
    c->set_concat_dim(concat);
  }

  std::string finish() {
    for (plan::Buffer &b : *prog->mutable_buffers())
      if (b.role() == plan::ACTIVATION)
        b.set_last_use(
            std::min<int64_t>(b.last_use(), prog->instructions_size()));
    prog->set_arena_bytes(arena);
    return seal();
  }

  /// The file's bytes after edits to `p` (checksum and trailer renewed).
  std::string seal() {
    plan::sealPlan(p);
    return p.SerializeAsString();
  }
};

Tensor iota(std::vector<int64_t> shape, float scale = 1.0f) {
  Tensor t(DType::F32, shape);
  for (int64_t i = 0; i < t.numElements(); ++i)
    t.data<float>()[i] = scale * float(i) - 1.5f;
  return t;
}

/// Runs `main` of `bytes` on `ranks` local ranks; returns rank 0's results.
std::vector<Tensor> runOn(const std::string &bytes, int ranks,
                          const std::vector<Tensor> &inputs) {
  auto file = PlanFile::parse(bytes);
  std::vector<Tensor> out;
  std::mutex m;
  runLocalRanks(ranks, [&](Communicator &comm) {
    auto backend = createCpuBackend(1);
    Executor ex(file, "main", &comm, *backend);
    ex.setInputs(inputs);
    ex.run();
    std::vector<Tensor> r = ex.gatherResults();
    std::lock_guard<std::mutex> lock(m);
    if (comm.rank() == 0)
      out = std::move(r);
  });
  return out;
}

void expectNear(const Tensor &a, const Tensor &b, float tol = 1e-5f) {
  ASSERT_EQ(a.getShape(), b.getShape());
  for (int64_t i = 0; i < a.numElements(); ++i)
    EXPECT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "element " << i;
}

TEST(InitialValue, IsDeterministicAndInRange) {
  for (uint64_t i = 0; i < 1000; ++i) {
    double u = initialValue(1, "w", i, plan::Init::UNIFORM, -0.5, 0.25);
    EXPECT_GE(u, -0.5);
    EXPECT_LT(u, 0.25);
    EXPECT_EQ(u, initialValue(1, "w", i, plan::Init::UNIFORM, -0.5, 0.25));
  }
  // Different names, seeds and indices give different values.
  EXPECT_NE(initialValue(1, "w", 3, 1, 0, 1), initialValue(1, "v", 3, 1, 0, 1));
  EXPECT_NE(initialValue(1, "w", 3, 1, 0, 1), initialValue(2, "w", 3, 1, 0, 1));
  EXPECT_NE(initialValue(1, "w", 3, 1, 0, 1), initialValue(1, "w", 4, 1, 0, 1));
  EXPECT_EQ(initialValue(1, "w", 3, plan::Init::CONSTANT, 0.75, 0), 0.75);
  // Normal: sample mean and standard deviation near (2, 0.5).
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double v = initialValue(5, "n", i, plan::Init::NORMAL, 2.0, 0.5);
    sum += v;
    sq += v * v;
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 2.0, 0.02);
  EXPECT_NEAR(sd, 0.5, 0.02);
}

TEST(Executor, OneRankEinsumUsesTheInitializer) {
  PlanBuilder b;
  int64_t w = b.buffer(plan::PARAMETER, {3, 2}, {}, "w");
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t y = b.buffer(plan::ACTIVATION, {2, 2});
  b.kernel("einsum", {x, w}, {y}, "ij,jk->ik");
  b.prog->add_results(y);
  std::string bytes = b.finish();
  Tensor xin = iota({2, 3});
  std::vector<Tensor> out = runOn(bytes, 1, {xin});
  ASSERT_EQ(out.size(), 1u);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 2; ++k) {
      double want = 0;
      for (int j = 0; j < 3; ++j)
        want +=
            xin.data<float>()[i * 3 + j] *
            float(initialValue(7, "w", j * 2 + k, plan::Init::UNIFORM, -1, 1));
      EXPECT_NEAR(out[0].data<float>()[i * 2 + k], want, 1e-5);
    }
}

TEST(Executor, ShardedParameterHoldsItsBlockOfTheGlobalValues) {
  PlanBuilder whole;
  whole.buffer(plan::PARAMETER, {4, 6}, {}, "w");
  auto wholeFile = PlanFile::parse(whole.finish());
  auto backend = createCpuBackend(1);
  Tensor global =
      Executor(wholeFile, "main", nullptr, *backend).localParameter("w");

  PlanBuilder split({{"dp", 2}, {"tp", 3}}, true);
  split.buffer(plan::PARAMETER, {2, 2}, {{"dp"}, {"tp"}}, "w", {4, 6});
  auto splitFile = PlanFile::parse(split.finish());
  runLocalRanks(6, [&](Communicator &comm) {
    auto be = createCpuBackend(1);
    Tensor local = Executor(splitFile, "main", &comm, *be).localParameter("w");
    int dp = comm.rank() / 3, tp = comm.rank() % 3;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        EXPECT_EQ(local.data<float>()[i * 2 + j],
                  global.data<float>()[(dp * 2 + i) * 6 + tp * 2 + j]);
  });
}

/// y = x @ w with w split along the contraction over tp: partial sums, then
/// an all_reduce; equals the one-rank result.
TEST(Executor, AllReduceOfPartialSumsMatchesOneRank) {
  PlanBuilder whole;
  int64_t w = whole.buffer(plan::PARAMETER, {4, 3}, {}, "w");
  int64_t x = whole.buffer(plan::INPUT, {2, 4}, {}, "x");
  int64_t y = whole.buffer(plan::ACTIVATION, {2, 3});
  whole.kernel("einsum", {x, w}, {y}, "ij,jk->ik");
  whole.prog->add_results(y);
  Tensor xin = iota({2, 4}, 0.5f);
  std::vector<Tensor> want = runOn(whole.finish(), 1, {xin});

  PlanBuilder split({{"tp", 2}}, true);
  w = split.buffer(plan::PARAMETER, {2, 3}, {{"tp"}, {}}, "w", {4, 3});
  x = split.buffer(plan::INPUT, {2, 2}, {{}, {"tp"}}, "x", {2, 4});
  int64_t partial = split.buffer(plan::ACTIVATION, {2, 3});
  y = split.buffer(plan::ACTIVATION, {2, 3});
  split.kernel("einsum", {x, w}, {partial}, "ij,jk->ik");
  split.collective(plan::Collective::ALL_REDUCE, {"tp"}, partial, y);
  split.prog->add_results(y);
  std::vector<Tensor> got = runOn(split.finish(), 2, {xin});
  ASSERT_EQ(got.size(), 1u);
  expectNear(got[0], want[0]);
}

TEST(Executor, PartialResultsAreSummedWhenGathered) {
  PlanBuilder split({{"dp", 2}, {"tp", 2}}, true);
  int64_t x = split.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "x", {4, 3});
  int64_t y = split.buffer(plan::ACTIVATION, {2, 3}, {{"dp"}, {}}, "y", {4, 3});
  split.kernel("add", {x, x}, {y});
  split.prog->mutable_buffers(y)->add_partial_axes("tp");
  split.prog->add_results(y);
  Tensor xin = iota({4, 3});
  std::vector<Tensor> got = runOn(split.finish(), 4, {xin});
  // Each of the two tp ranks holds 2x; the gathered value sums them: 4x.
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_FLOAT_EQ(got[0].data<float>()[i], 4 * xin.data<float>()[i]);
}

TEST(Executor, CollectivesOnAnInnerDimension) {
  // x [4, 6] split along dim 1 over tp=3: all_gather dim 1 gives x back on
  // every rank; reduce_scatter dim 1 of (x, replicated) gives 3x's block;
  // all_to_all split 0 concat 1 turns a dim-1 split into a dim-0 split.
  PlanBuilder b({{"tp", 3}}, true);
  int64_t xs = b.buffer(plan::INPUT, {4, 2}, {{}, {"tp"}}, "xs", {4, 6});
  int64_t xr = b.buffer(plan::INPUT, {4, 6}, {}, "xr", {4, 6});
  int64_t gathered = b.buffer(plan::ACTIVATION, {4, 6}, {}, "g", {4, 6});
  int64_t scattered =
      b.buffer(plan::ACTIVATION, {4, 2}, {{}, {"tp"}}, "s", {4, 6});
  int64_t moved = b.buffer(plan::ACTIVATION, {2, 6}, {{"tp"}, {}}, "m", {6, 6});
  int64_t xs2 = b.buffer(plan::INPUT, {6, 2}, {{}, {"tp"}}, "xs2", {6, 6});
  b.collective(plan::Collective::ALL_GATHER, {"tp"}, xs, gathered, 1);
  b.collective(plan::Collective::REDUCE_SCATTER, {"tp"}, xr, scattered, 1);
  b.collective(plan::Collective::ALL_TO_ALL, {"tp"}, xs2, moved, 0, 1);
  b.prog->add_results(gathered);
  b.prog->add_results(scattered);
  b.prog->add_results(moved);
  Tensor x = iota({4, 6}), x2 = iota({6, 6}, 2.0f);
  std::vector<Tensor> got = runOn(b.finish(), 3, {x, x, x2});
  ASSERT_EQ(got.size(), 3u);
  expectNear(got[0], x);
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_FLOAT_EQ(got[1].data<float>()[i], 3 * x.data<float>()[i]);
  expectNear(got[2], x2);
}

TEST(Executor, SliceKeepsThisPositionsBlockAndPermuteMovesBlocks) {
  // x [4, 6] replicated over tp=3: slice dim 1 leaves position i columns
  // 2i..2i+1, so the gathered result is x. Permute (0->1, 1->2) of the
  // sliced blocks: position 1 gets block 0, 2 gets block 1, 0 gets zeros.
  PlanBuilder b({{"tp", 3}}, true);
  int64_t x = b.buffer(plan::INPUT, {4, 6}, {}, "x", {4, 6});
  int64_t sliced =
      b.buffer(plan::ACTIVATION, {4, 2}, {{}, {"tp"}}, "s", {4, 6});
  int64_t moved = b.buffer(plan::ACTIVATION, {4, 2}, {{}, {"tp"}}, "p", {4, 6});
  b.collective(plan::Collective::SLICE, {"tp"}, x, sliced, 1);
  b.collective(plan::Collective::COLLECTIVE_PERMUTE, {"tp"}, sliced, moved);
  for (int64_t v : {0, 1, 1, 2})
    b.prog->mutable_instructions(1)->mutable_collective()->add_pairs(v);
  b.prog->add_results(sliced);
  b.prog->add_results(moved);
  Tensor xin = iota({4, 6});
  std::vector<Tensor> got = runOn(b.finish(), 3, {xin});
  expectNear(got[0], xin);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c) {
      float want = c < 2 ? 0.0f : xin.data<float>()[r * 6 + c - 2];
      EXPECT_EQ(got[1].data<float>()[r * 6 + c], want) << r << "," << c;
    }
}

TEST(Executor, AxisIndexIsThePositionInTheGroup) {
  // On a dp=2 x tp=3 mesh, axis_index over tp is 0, 1, 2 along tp; returned
  // partial over tp, the gathered value is their sum 3; over (dp, tp) it is
  // 0..5, summed 15.
  PlanBuilder b({{"dp", 2}, {"tp", 3}}, true);
  int64_t tp = b.buffer(plan::ACTIVATION, {}, {}, "tp", {});
  int64_t both = b.buffer(plan::ACTIVATION, {}, {}, "both", {});
  for (int64_t id : {tp, both})
    b.prog->mutable_buffers(id)->set_dtype(plan::I32);
  b.collective(plan::Collective::AXIS_INDEX, {"tp"}, 0, tp);
  b.collective(plan::Collective::AXIS_INDEX, {"dp", "tp"}, 0, both);
  b.prog->mutable_buffers(tp)->add_partial_axes("tp");
  b.prog->mutable_buffers(both)->add_partial_axes("dp");
  b.prog->mutable_buffers(both)->add_partial_axes("tp");
  b.prog->add_results(tp);
  b.prog->add_results(both);
  std::vector<Tensor> got = runOn(b.finish(), 6, {});
  EXPECT_EQ(got[0].data<int32_t>()[0], 3);
  EXPECT_EQ(got[1].data<int32_t>()[0], 15);
}

TEST(Executor, PaddedBlocksScatterMaskAndGather) {
  // 5 rows on tp=4: 2 per device, 8 in all, rows 5..7 padding (rank 2's
  // second row, all of rank 3's). The input is scattered into the padded
  // blocks, MASK writes 9 into the padding, and gathering the masked value
  // as a padded result gives the 5 real rows back; all_gathered, the whole
  // padded column shows where the padding was.
  PlanBuilder b({{"tp", 4}}, true);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"tp"}, {}}, "x", {5, 3});
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3}, {{"tp"}, {}}, "y", {5, 3});
  int64_t z = b.buffer(plan::ACTIVATION, {8, 3}, {{}, {}}, "z", {8, 3});
  b.collective(plan::Collective::MASK, {"tp"}, x, y, 0);
  b.prog->mutable_instructions(0)->mutable_collective()->set_size(5);
  b.prog->mutable_instructions(0)->mutable_collective()->set_value(9.0);
  b.collective(plan::Collective::ALL_GATHER, {"tp"}, y, z, 0);
  b.prog->add_results(y);
  b.prog->add_results(z);
  Tensor xin = iota({5, 3});
  std::vector<Tensor> got = runOn(b.finish(), 4, {xin});
  ASSERT_EQ(got.size(), 2u);
  expectNear(got[0], xin);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(got[1].data<float>()[r * 3 + c],
                r < 5 ? xin.data<float>()[r * 3 + c] : 9.0f)
          << r << "," << c;
}

TEST(Executor, MeshDeviceOrderPermutesRanks) {
  // devices=[1, 0]: rank 1 holds block 0. A gathered result is unchanged.
  PlanBuilder b({{"tp", 2}}, true);
  b.p.mutable_mesh()->add_devices(1);
  b.p.mutable_mesh()->add_devices(0);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"tp"}, {}}, "x", {4, 3});
  int64_t y = b.buffer(plan::ACTIVATION, {4, 3}, {}, "y", {4, 3});
  b.collective(plan::Collective::ALL_GATHER, {"tp"}, x, y, 0);
  b.prog->add_results(y);
  Tensor xin = iota({4, 3});
  expectNear(runOn(b.finish(), 2, {xin})[0], xin);
}

TEST(Executor, KernelErrorsNameTheInstruction) {
  PlanBuilder b;
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t y = b.buffer(plan::ACTIVATION, {3, 3});
  b.kernel("einsum", {x}, {y}, "ij->ij");
  auto file = PlanFile::parse(b.finish());
  auto backend = createCpuBackend(1);
  Executor ex(file, "main", nullptr, *backend);
  ex.setInputs({iota({2, 3})});
  try {
    ex.run();
    FAIL() << "expected an error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("instruction 0"), std::string::npos)
        << e.what();
  }
}

// Tests that inputs and parameters set from views of caller-owned memory
// (the Python package's arrays, read in place) give the results of owning
// tensors, and that a view's shape is checked like a tensor's.
TEST(Executor, InputViewsReadCallerMemory) {
  PlanBuilder b;
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
  b.kernel("einsum", {x}, {y}, "ij->ij");
  b.prog->add_results(y);
  auto file = PlanFile::parse(b.finish());
  auto backend = createCpuBackend(1);
  Executor ex(file, "main", nullptr, *backend);
  Tensor xin = iota({2, 3});
  ex.setInputViews({xin.view()});
  ex.run();
  expectNear(ex.gatherResults()[0], xin);
  std::vector<float> wrong(4);
  EXPECT_THROW(ex.setInputViews({TensorView{wrong.data(), DType::F32, {2, 2}}}),
               Error);
}

TEST(Executor, InputBlocksSetOnlyThisRanksRows) {
  // 5 rows on dp=4 (2 a rank, rank 2's second row and rank 3's rows are
  // padding): each rank gives only its rows (setInputBlock), checked
  // against its block's shape; the gathered result is the whole input.
  PlanBuilder b({{"dp", 4}}, true);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "x", {5, 3});
  b.prog->add_results(x);
  auto file = PlanFile::parse(b.finish());
  Tensor xin = iota({5, 3});
  std::vector<Tensor> got;
  std::mutex m;
  runLocalRanks(4, [&](Communicator &comm) {
    auto backend = createCpuBackend(1);
    Executor ex(file, "main", &comm, *backend);
    Executor::Block block = ex.inputBlock(0);
    int64_t r0 = 2 * comm.rank();
    int64_t rows = std::max<int64_t>(0, std::min<int64_t>(2, 5 - r0));
    EXPECT_EQ(block.globalShape, (std::vector<int64_t>{5, 3}));
    EXPECT_EQ(block.offsets, (std::vector<int64_t>{r0, 0}));
    EXPECT_EQ(block.shape, (std::vector<int64_t>{rows, 3}));
    Tensor mine(DType::F32, block.shape);
    for (int64_t i = 0; i < rows * 3; ++i)
      mine.data<float>()[i] = xin.data<float>()[r0 * 3 + i];
    ex.setInputBlock(0, mine.view());
    Tensor wrong(DType::F32, {5, 3});
    try {
      ex.setInputBlock(0, wrong.view());
      ADD_FAILURE() << "a global array was taken as rank's block";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("input 'x'"), std::string::npos)
          << e.what();
    }
    EXPECT_THROW(ex.inputBlock(1), Error);
    ex.run();
    std::vector<Tensor> r = ex.gatherResults();
    std::lock_guard<std::mutex> lock(m);
    if (comm.rank() == 0)
      got = std::move(r);
  });
  ASSERT_EQ(got.size(), 1u);
  expectNear(got[0], xin);
}

// Tests that an integer input is checked against the plan's bound for it
// (Buffer.value_bound), whole (setInputs) or as this rank's block
// (setInputBlock): a value at or beyond it fails naming the input, the
// element and the bound; negative values (skipped labels) and values below
// it pass.
TEST(Executor, IntegerInputsAreCheckedAgainstTheirBound) {
  PlanBuilder b({{"dp", 2}}, true);
  int64_t ids = b.buffer(plan::INPUT, {3}, {{"dp"}}, "ids", {6});
  b.prog->mutable_buffers(ids)->set_dtype(plan::I32);
  b.prog->mutable_buffers(ids)->set_value_bound(5);
  b.prog->add_results(ids);
  auto file = PlanFile::parse(b.finish());
  runLocalRanks(2, [&](Communicator &comm) {
    auto backend = createCpuBackend(1);
    Executor ex(file, "main", &comm, *backend);
    Tensor whole(DType::I32, {6});
    for (int i = 0; i < 6; ++i)
      whole.data<int32_t>()[i] = i == 1 ? -1 : 4 - i % 5;
    EXPECT_NO_THROW(ex.setInputs({whole}));
    whole.data<int32_t>()[4] = 5;
    whole.data<int32_t>()[5] = 70;
    try {
      ex.setInputs({whole});
      ADD_FAILURE() << "an id past the bound was taken";
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()),
                "input 'ids': element 4 is 5, outside [0, 5), the plan's "
                "bound for it (the size of the dimension it indexes: a "
                "vocabulary, a class count)");
    }
    Tensor block(DType::I32, {3});
    for (int i = 0; i < 3; ++i)
      block.data<int32_t>()[i] = i;
    EXPECT_NO_THROW(ex.setInputBlock(0, block.view()));
    block.data<int32_t>()[2] = 9;
    try {
      ex.setInputBlock(0, block.view());
      ADD_FAILURE() << "an id past the bound was taken in a block";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(
                    "the block of input 'ids' on this rank: element 2 is 9, "
                    "outside [0, 5)"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(Executor, RejectsWrongInputsAndCommunicators) {
  PlanBuilder b({{"tp", 2}}, true);
  b.buffer(plan::INPUT, {2, 3}, {{"tp"}, {}}, "x", {4, 3});
  auto file = PlanFile::parse(b.finish());
  auto backend = createCpuBackend(1);
  EXPECT_THROW(Executor(file, "main", nullptr, *backend), Error);
  EXPECT_THROW(Executor(file, "nope", nullptr, *backend), Error);
  runLocalRanks(2, [&](Communicator &comm) {
    Executor ex(file, "main", &comm, *backend);
    EXPECT_THROW(ex.setInputs({iota({2, 3})}), Error);
    EXPECT_THROW(ex.setInputs({}), Error);
  });
}

/// The message of the Error that parsing `bytes` throws.
std::string parseError(const std::string &bytes) {
  try {
    PlanFile::parse(bytes, "p.pb");
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlanFile, RejectsMaskSizeBeyondTheBlocks) {
  PlanBuilder b({{"tp", 4}}, true);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"tp"}, {}}, "x", {5, 3});
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3}, {{"tp"}, {}}, "y", {5, 3});
  b.collective(plan::Collective::MASK, {"tp"}, x, y, 0);
  b.prog->mutable_instructions(0)->mutable_collective()->set_size(9);
  EXPECT_EQ(parseError(b.finish()),
            "p.pb: program 'main': instruction 0: mask size 9 is not in [1, "
            "local size times group size]");
}

PlanBuilder validPlan() {
  PlanBuilder b;
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t z = b.buffer(plan::ACTIVATION, {2, 3});
  b.kernel("relu", {x}, {y});
  b.kernel("exp", {y}, {z});
  return b;
}

// Tests that an activation in the host arena is placed there and computes
// as in the device arena.
TEST(PlanFile, HostArenaActivationsRun) {
  PlanBuilder b = validPlan();
  b.prog->mutable_buffers(1)->set_memory_space(plan::HOST);
  b.prog->set_host_arena_bytes(24);
  b.prog->add_results(2);
  std::string bytes = b.finish();
  ASSERT_EQ(parseError(bytes), "(no error)");
  Tensor x = iota({2, 3});
  std::vector<Tensor> out = runOn(bytes, 1, {x});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(out[0].data<float>()[i],
                    std::exp(std::max(0.0f, x.data<float>()[i])));
}

// Tests that the plan's kernel kind enum and the runtime's kind names agree
// (the enum's names are the upper-case runtime names, in KernelKind order).
TEST(PlanFile, KernelKindEnumMatchesRuntimeNames) {
  for (int k = plan::Kernel::EINSUM; k <= plan::Kernel::Kind_MAX; ++k) {
    std::string upper = kernelKindName(k);
    for (char &ch : upper)
      ch = char(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_EQ(upper, plan::Kernel::Kind_Name(plan::Kernel::Kind(k)));
    EXPECT_EQ(kernelKindFromString(kernelKindName(k)),
              std::optional<KernelKind>(KernelKind(k - 1)));
  }
  EXPECT_STREQ(kernelKindName(0), "?");
  EXPECT_STREQ(kernelKindName(plan::Kernel::Kind_MAX + 1), "?");
}

TEST(PlanFile, RejectsMalformedAndTruncatedFiles) {
  std::string bytes = validPlan().finish();
  EXPECT_EQ(parseError(bytes), "(no error)");
  EXPECT_EQ(parseError(""), "p.pb: empty plan file");
  EXPECT_EQ(parseError("\xff\xff\xff garbage"),
            "p.pb: not a valid plan (malformed or truncated protobuf)");
  // Every proper prefix is rejected, whatever byte it stops at.
  for (size_t n = 1; n < bytes.size(); ++n)
    EXPECT_NE(parseError(bytes.substr(0, n)), "(no error)") << n;
  PlanBuilder b = validPlan();
  b.p.set_format_version(99);
  EXPECT_EQ(parseError(b.finish()),
            "p.pb: plan format version 99, but this runtime reads version 2");
  // Version 1 spelled kernel kinds as strings.
  b.p.set_format_version(1);
  EXPECT_EQ(parseError(b.finish()),
            "p.pb: plan format version 1, but this runtime reads version 2 "
            "(an older plan: compile it again with `partita plan`)");
}

// Tests that an arena offset that is not 64-byte aligned is rejected (kernels
// would read misaligned values), and that an arena larger or smaller than
// its buffers need is (a 12 KB plan must not make every rank zero-fill a
// declared 1 GB).
TEST(PlanFile, RejectsMisalignedOffsetsAndWrongArenaSizes) {
  {
    PlanBuilder b = validPlan();
    b.finish();
    b.prog->mutable_buffers(2)->set_offset(66);
    b.prog->set_arena_bytes(90);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': buffer 2 at arena offset 66 is not a "
              "multiple of 64 bytes");
  }
  {
    PlanBuilder b = validPlan();
    b.finish();
    b.prog->set_arena_bytes(int64_t(1) << 30);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': arena_bytes is 1073741824, but its "
              "activations need 88 (the largest offset plus size)");
  }
  {
    PlanBuilder b = validPlan();
    b.finish();
    b.prog->set_host_arena_bytes(64);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': host_arena_bytes is 64, but its host "
              "activations need 0 (the largest offset plus size)");
  }
}

/// x -> y = relu(x) -> z = add(y, y) with z over y's bytes (Buffer.reuses):
/// y lives [0, 1], z [1, end], both at offset 0.
PlanBuilder reusePlan(const std::string &second = "add") {
  PlanBuilder b;
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t z = b.buffer(plan::ACTIVATION, {2, 3});
  b.kernel("relu", {x}, {y});
  if (second == "exp")
    b.kernel("exp", {y}, {z});
  else
    b.kernel(second, {y, y}, {z});
  b.prog->add_results(z);
  b.finish();
  b.prog->mutable_buffers(y)->set_last_use(1);
  b.prog->mutable_buffers(z)->set_first_use(1);
  b.prog->mutable_buffers(z)->set_offset(0);
  b.prog->mutable_buffers(z)->set_reuses(y);
  b.prog->set_arena_bytes(24);
  return b;
}

// Tests that an output written over the input it reads last (Buffer.reuses,
// the memory plan's in-place elementwise ops) loads and computes, and that
// the loader refuses it where the instruction may not write over its input,
// the input is still read afterwards, or the two are not at one offset.
TEST(PlanFile, BufferReuseIsCheckedAndRuns) {
  {
    std::string bytes = reusePlan().seal();
    ASSERT_EQ(parseError(bytes), "(no error)");
    Tensor x = iota({2, 3});
    std::vector<Tensor> out = runOn(bytes, 1, {x});
    ASSERT_EQ(out.size(), 1u);
    for (int64_t i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ(out[0].data<float>()[i],
                      2 * std::max(0.0f, x.data<float>()[i]));
  }
  const std::string notOver =
      "p.pb: program 'main': buffer 2 reuses buffer 1, but instruction 1 "
      "(where it is written) is not one that writes its output over an "
      "input it reads for the last time";
  EXPECT_EQ(parseError(reusePlan("exp").seal()), notOver);
  {
    PlanBuilder b = reusePlan();
    b.prog->mutable_buffers(1)->set_last_use(2);
    EXPECT_EQ(parseError(b.seal()), notOver);
  }
  {
    PlanBuilder b = reusePlan();
    b.prog->mutable_buffers(2)->set_offset(64);
    b.prog->set_arena_bytes(88);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': buffer 2 reuses buffer 1 at another "
              "offset, size or memory space");
  }
  {
    // Without `reuses`, the same bytes are two buffers live at once.
    PlanBuilder b = reusePlan();
    b.prog->mutable_buffers(2)->clear_reuses();
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': the memory plan overlaps buffers 1 and "
              "2, which are live at the same time");
  }
}

/// y = relu(x), v = exp(x), z = einsum(y, w, v) (the addend v: a fused
/// add) with z over the bytes of input `over` of the einsum (Buffer.reuses).
PlanBuilder einsumReusePlan(int over) {
  PlanBuilder b;
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {}, "x");
  int64_t w = b.buffer(plan::INPUT, {3, 3}, {}, "w");
  int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t v = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t z = b.buffer(plan::ACTIVATION, {2, 3});
  b.kernel("relu", {x}, {y});
  b.kernel("exp", {x}, {v});
  b.kernel("einsum", {y, w, v}, {z}, "ij,jk->ik");
  plan::KernelAttrs *attrs =
      b.prog->mutable_instructions(2)->mutable_kernel()->mutable_attrs();
  attrs->add_dims(0);
  attrs->add_dims(1);
  b.prog->add_results(z);
  b.finish();
  b.prog->mutable_buffers(y)->set_last_use(2);
  b.prog->mutable_buffers(v)->set_first_use(1);
  b.prog->mutable_buffers(v)->set_last_use(2);
  int64_t reused = over == 2 ? v : y;
  b.prog->mutable_buffers(z)->set_first_use(2);
  b.prog->mutable_buffers(z)->set_offset(b.prog->buffers(reused).offset());
  b.prog->mutable_buffers(z)->set_reuses(reused);
  b.prog->set_arena_bytes(64 + 24);
  return b;
}

// Tests that an einsum may write its output over its addend (the fused
// add's operand, PlanMemory.h) and computes relu(x) w + exp(x) so, and that
// the loader refuses an output over one of its operands.
TEST(PlanFile, EinsumOutputReusesOnlyItsAddend) {
  std::string bytes = einsumReusePlan(2).seal();
  ASSERT_EQ(parseError(bytes), "(no error)");
  Tensor x = iota({2, 3}), w = iota({3, 3}, 0.5f);
  std::vector<Tensor> out = runOn(bytes, 1, {x, w});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 3; ++k) {
      double want = std::exp(double(x.data<float>()[i * 3 + k]));
      for (int64_t j = 0; j < 3; ++j)
        want += std::max(0.0f, x.data<float>()[i * 3 + j]) *
                double(w.data<float>()[j * 3 + k]);
      EXPECT_NEAR(out[0].data<float>()[i * 3 + k], want, 1e-5 * (1 + std::fabs(want)));
    }
  EXPECT_EQ(parseError(einsumReusePlan(0).seal()),
            "p.pb: program 'main': buffer 4 reuses buffer 2, but instruction 2 "
            "(where it is written) is not one that writes its output over an "
            "input it reads for the last time");
}

// Tests that a plan whose bytes changed after it was sealed is rejected by
// its content checksum, whichever byte changed, and that a plan without a
// checksum (an older compiler's) is rejected with advice.
TEST(PlanFile, RejectsContentThatDoesNotMatchItsChecksum) {
  PlanBuilder b = validPlan();
  b.prog->mutable_instructions(0)->mutable_kernel()->mutable_attrs()->set_lr(
      0.5);
  std::string bytes = b.finish();
  ASSERT_EQ(parseError(bytes), "(no error)");
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] = char(changed[i] ^ 0x01);
    EXPECT_NE(parseError(changed), "(no error)") << "byte " << i;
  }
  // The learning rate 0.5 (a double, 0x3fe0000000000000) becomes 0.25.
  std::string lr = bytes;
  size_t at = lr.find(std::string("\x00\x00\x00\x00\x00\x00\xe0\x3f", 8));
  ASSERT_NE(at, std::string::npos);
  lr[at + 6] = char(0xd0);
  std::string message = parseError(lr);
  EXPECT_EQ(message.rfind("p.pb: content checksum mismatch: the plan records ",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find(" (the file was corrupted or edited after "
                         "compilation)"),
            std::string::npos)
      << message;
  // No checksum field: only the trailer after the content.
  b.p.clear_checksum();
  b.p.set_trailer(kTrailer);
  EXPECT_EQ(parseError(b.p.SerializeAsString()),
            "p.pb: the plan has no content checksum before its end-of-plan "
            "marker (written by an older compiler, or edited: compile it "
            "again with `partita plan`)");
}

TEST(PlanFile, RejectsInconsistentPlans) {
  {
    PlanBuilder b = validPlan();
    b.prog->mutable_instructions(0)->mutable_kernel()->set_inputs(0, 9);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0 refers to buffer 9, but the "
              "program has 3");
  }
  {
    PlanBuilder b = validPlan();
    b.prog->mutable_instructions(1)->mutable_kernel()->set_kind(
        static_cast<plan::Kernel::Kind>(77));
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 1 has unknown kernel kind "
              "77");
  }
  {
    PlanBuilder b = validPlan();
    b.prog->mutable_instructions(1)->mutable_kernel()->set_kind(
        plan::Kernel::KIND_UNSPECIFIED);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 1 has unknown kernel kind "
              "0");
  }
  {
    PlanBuilder b = validPlan();
    b.prog->mutable_buffers(1)->set_memory_space(
        static_cast<plan::MemorySpace>(5));
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 has an unknown memory space 5 "
              "(0: device, 1: host)");
  }
  {
    // A host activation must fit the host arena, which is empty here.
    PlanBuilder b = validPlan();
    b.prog->mutable_buffers(1)->set_memory_space(plan::HOST);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 at host arena offset 0 with 24 "
              "bytes does not fit the host arena of 0 bytes");
  }
  {
    // Buffers 1 and 2 share bytes while both are live (buffer 2 moved from
    // offset 64 to 0, and the arena shrunk to what that needs).
    PlanBuilder b = validPlan();
    std::string bytes = b.finish();
    b.prog->mutable_buffers(2)->set_offset(0);
    b.prog->set_arena_bytes(24);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': the memory plan overlaps buffers 1 and 2, "
              "which are live at the same time");
  }
  {
    // Buffer 1 (relu's output) claims to die before exp reads it.
    PlanBuilder b = validPlan();
    b.finish();
    b.prog->mutable_buffers(1)->set_last_use(0);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': instruction 1 uses buffer 1 outside its "
              "live range [0, 0]");
  }
  {
    PlanBuilder b = validPlan();
    b.finish();
    b.prog->set_arena_bytes(80);
    EXPECT_EQ(parseError(b.seal()),
              "p.pb: program 'main': buffer 2 at arena offset 64 with 24 bytes "
              "does not fit the arena of 80 bytes");
  }
  {
    PlanBuilder b({{"tp", 2}}, true);
    b.buffer(plan::INPUT, {2, 3}, {{"tp"}, {}}, "x", {5, 3});
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 0 ('x'): global shape [5x3] "
              "exceeds local shape [2x3] times its sharding at dimension 0");
  }
  {
    // 4x3 over tp=2 holds 8 rows: a global of 7 leaves 1 row of padding;
    // 6 would leave 2, the device count, which no partition pads.
    PlanBuilder b({{"tp", 2}}, true);
    b.buffer(plan::INPUT, {4, 3}, {{"tp"}, {}}, "x", {7, 3});
    EXPECT_EQ(parseError(b.finish()), "(no error)");
    PlanBuilder c({{"tp", 2}}, true);
    c.buffer(plan::INPUT, {4, 3}, {{"tp"}, {}}, "x", {6, 3});
    EXPECT_EQ(parseError(c.finish()),
              "p.pb: program 'main': buffer 0 ('x'): global shape [6x3] is "
              "smaller than local shape [4x3] times its sharding at dimension "
              "0 by 2 or more (padding is less than the device count)");
  }
  {
    PlanBuilder b({{"tp", 2}}, true);
    int64_t x = b.buffer(plan::INPUT, {2, 3});
    int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
    b.collective(plan::Collective::ALL_GATHER, {"pp"}, x, y, 0);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0 names mesh axis 'pp', which "
              "the mesh does not have");
  }
  {
    PlanBuilder b({{"tp", 2}}, true);
    int64_t x = b.buffer(plan::INPUT, {2, 3});
    int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
    b.collective(plan::Collective::ALL_GATHER, {"tp"}, x, y, 1);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0: collective output shape "
              "[2x3] does not follow from its input shape [2x3]");
  }
  {
    PlanBuilder b({{"tp", 2}}, true);
    int64_t x = b.buffer(plan::INPUT, {2, 3});
    int64_t y = b.buffer(plan::ACTIVATION, {2, 3});
    b.collective(plan::Collective::COLLECTIVE_PERMUTE, {"tp"}, x, y);
    b.prog->mutable_instructions(0)->mutable_collective()->add_pairs(0);
    b.prog->mutable_instructions(0)->mutable_collective()->add_pairs(2);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0: collective_permute pairs "
              "must be distinct positions in [0, 2)");
  }
  {
    PlanBuilder b({{"tp", 0}});
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: mesh axis 'tp' has size 0 (must be >= 1)");
  }
}

//===----------------------------------------------------------------------===//
// Training: state buffers and results that replace parameters and state
//===----------------------------------------------------------------------===//

/// An SGD step on w (sharded over dp when `ranks` is 2): g = w * x, then
/// sgd(w, g, momentum) -> (w', momentum'), both replacing their buffers;
/// results (w', momentum', g). `donate`: w' and momentum' are in_place
/// (written straight into w and momentum, no copy-back).
std::string sgdStepPlan(int ranks, bool donate = false) {
  bool split = ranks > 1;
  PlanBuilder b(split ? std::vector<std::pair<std::string, int64_t>>{{"dp", 2}}
                      : std::vector<std::pair<std::string, int64_t>>{},
                split);
  std::vector<std::vector<std::string>> sharding;
  if (split)
    sharding = {{"dp"}};
  int64_t local = split ? 2 : 4;
  int64_t w = b.buffer(plan::PARAMETER, {local}, sharding, "w", {4});
  int64_t buf = b.buffer(plan::STATE, {local}, sharding, "w.momentum", {4});
  int64_t x = b.buffer(plan::INPUT, {local}, sharding, "x", {4});
  int64_t g = b.buffer(plan::ACTIVATION, {local}, sharding, "", {4});
  int64_t w2 = b.buffer(plan::ACTIVATION, {local}, sharding, "w", {4});
  int64_t buf2 =
      b.buffer(plan::ACTIVATION, {local}, sharding, "w.momentum", {4});
  b.kernel("mul", {w, x}, {g});
  b.kernel("sgd", {w, g, buf}, {w2, buf2});
  plan::KernelAttrs *attrs =
      b.prog->mutable_instructions(1)->mutable_kernel()->mutable_attrs();
  attrs->set_lr(0.5);
  attrs->set_momentum(0.9);
  b.prog->mutable_buffers(w2)->set_replaces("w");
  b.prog->mutable_buffers(buf2)->set_replaces("w.momentum");
  b.prog->mutable_buffers(w2)->set_in_place(donate);
  b.prog->mutable_buffers(buf2)->set_in_place(donate);
  for (int64_t r : {w2, buf2, g})
    b.prog->add_results(r);
  return b.finish();
}

TEST(Executor, TrainingStepsUpdateParametersAndStateInPlace) {
  const std::vector<float> xs[3] = {
      {1, -2, 0.5, 3}, {0.25, 1, -1, 2}, {-1, 0.5, 2, 1}};
  // The reference: the initial w, then three SGD steps by hand.
  auto file = PlanFile::parse(sgdStepPlan(1));
  std::vector<ProgramValue> persistent = file->persistent("main");
  ASSERT_EQ(persistent.size(), 2u);
  EXPECT_TRUE(persistent[0].isParameter);
  EXPECT_EQ(persistent[1].name, "w.momentum");
  EXPECT_TRUE(persistent[1].isState);
  EXPECT_EQ(file->results("main")[0].replaces, "w");
  EXPECT_EQ(file->results("main")[2].replaces, "");
  std::vector<double> w(4), buf(4, 0.0);
  for (int i = 0; i < 4; ++i)
    w[i] = float(initialValue(7, "w", i, plan::Init::UNIFORM, -1, 1));
  std::vector<double> lastGrad(4);
  for (const std::vector<float> &x : xs)
    for (int i = 0; i < 4; ++i) {
      lastGrad[i] = w[i] * x[i];
      buf[i] = 0.9 * buf[i] + lastGrad[i];
      w[i] -= 0.5 * buf[i];
    }
  for (int ranks : {1, 2})
  for (bool donate : {false, true}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)" +
                 (donate ? ", donated" : ", copied back"));
    auto planFile = PlanFile::parse(sgdStepPlan(ranks, donate));
    std::mutex m;
    runLocalRanks(ranks, [&](Communicator &comm) {
      auto backend = createCpuBackend(1);
      Executor ex(planFile, "main", ranks > 1 ? &comm : nullptr, *backend);
      // State starts at zero.
      Tensor zero = ex.gatherPersistent("w.momentum");
      for (int i = 0; i < 4; ++i)
        EXPECT_EQ(zero.data<float>()[i], 0.0f);
      std::vector<Tensor> results;
      for (const std::vector<float> &x : xs) {
        Tensor t(DType::F32, {4});
        std::copy(x.begin(), x.end(), t.data<float>());
        ex.setInputs({t});
        ex.run();
        results = ex.gatherResults();
      }
      Tensor wGot = ex.gatherPersistent("w");
      Tensor bufGot = ex.gatherPersistent("w.momentum");
      Tensor grad = ex.gatherResult(2); // one result alone (collective)
      std::lock_guard<std::mutex> lock(m);
      expectNear(grad, results[2], 0);
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(wGot.data<float>()[i], w[i], 1e-5) << "w " << i;
        EXPECT_NEAR(bufGot.data<float>()[i], buf[i], 1e-5) << "buf " << i;
        // The last step's results: the update and its gradient.
        EXPECT_EQ(results[0].data<float>()[i], wGot.data<float>()[i]);
        EXPECT_NEAR(results[2].data<float>()[i], lastGrad[i], 1e-5);
      }
      Tensor local = ex.localParameter("w.momentum");
      EXPECT_EQ(local.getShape(), (std::vector<int64_t>{ranks > 1 ? 2 : 4}));
      // Everything the executor holds lives as long as it does.
      ExecutorMemory mem = ex.memory();
      int64_t bytes = ranks > 1 ? 8 : 16; // one local f32 vector
      EXPECT_EQ(mem.parameters, bytes);
      EXPECT_EQ(mem.state, bytes);
      EXPECT_EQ(mem.inputs, bytes);
      EXPECT_EQ(mem.arena, ex.arenaBytes());
      EXPECT_EQ(mem.highWaterMark,
                mem.arena + mem.parameters + mem.state + mem.inputs);
    });
  }
}

//===----------------------------------------------------------------------===//
// Steps recorded as a graph (ExecutorOptions::captureGraph)
//===----------------------------------------------------------------------===//

std::unique_ptr<Backend> emulatedCudaBackend() {
  CudaBackendOptions options;
  options.emulate = true;
  options.blockSize = 32;
  return createCudaBackend(options);
}

/// w and its momentum after each of `steps` SGD steps of sgdStepPlan(1,
/// donate) on the emulated cuda backend, step k's input scaled by k + 1;
/// before step k the learning rate is rates[k] when given (NaN: leave
/// it). captures: the executor's graphCaptures() at the end.
std::vector<std::vector<float>> sgdSteps(bool graph, bool donate, int steps,
                                         const std::vector<double> &rates,
                                         int64_t *captures = nullptr) {
  auto file = PlanFile::parse(sgdStepPlan(1, donate));
  auto backend = emulatedCudaBackend();
  ExecutorOptions options;
  options.captureGraph = graph;
  Executor ex(file, "main", nullptr, *backend, options);
  std::vector<std::vector<float>> out;
  for (int k = 0; k < steps; ++k) {
    if (k < int(rates.size()) && !std::isnan(rates[k]))
      ex.setLearningRate(rates[k]);
    ex.setInputs({iota({4}, float(k + 1))});
    ex.run();
    for (const char *name : {"w", "w.momentum"}) {
      Tensor t = ex.gatherPersistent(name);
      out.emplace_back(t.data<float>(), t.data<float>() + 4);
    }
  }
  if (captures)
    *captures = ex.graphCaptures();
  return out;
}

// Tests that steps launched as a recorded graph give the eager steps'
// values bit for bit, with new inputs every step, parameters updated in
// place or copied back: step 1 runs eagerly, step 2 is recorded once and
// launched, and so are steps 3 to 5.
TEST(Executor, GraphStepsMatchEagerSteps) {
  for (bool donate : {false, true}) {
    SCOPED_TRACE(donate ? "donated" : "copied back");
    int64_t captures = -1;
    std::vector<std::vector<float>> eager = sgdSteps(false, donate, 5, {});
    std::vector<std::vector<float>> graphed =
        sgdSteps(true, donate, 5, {}, &captures);
    EXPECT_EQ(captures, 1);
    EXPECT_EQ(graphed, eager);
  }
}

// Tests that a recorded step follows setLearningRate (its sgd kernel reads
// the rate from device memory the executor writes before each run, as a
// schedule needs) without recording again: the values equal the eager
// steps' under the same changes, and differ from a run without them.
TEST(Executor, GraphStepsFollowTheLearningRate) {
  std::vector<double> rates = {NAN, NAN, NAN, 0.125, 0.125, 0.25};
  int64_t captures = -1;
  std::vector<std::vector<float>> eager = sgdSteps(false, false, 6, rates);
  std::vector<std::vector<float>> graphed =
      sgdSteps(true, false, 6, rates, &captures);
  EXPECT_EQ(captures, 1);
  EXPECT_EQ(graphed, eager);
  EXPECT_NE(sgdSteps(true, false, 6, {}), eager);
}

/// The emulated cuda backend, except that its neg kernel, from its second
/// call on, first does what a capturing CUDA stream refuses: waits for the
/// stream, allocates, or frees (a buffer it took before).
class RefusedWhileRecording final : public Backend {
public:
  enum Does { Waits, Allocates, Frees };
  explicit RefusedWhileRecording(Does does)
      : inner(emulatedCudaBackend()), does(does),
        held(inner->device().allocateBuffer(64)) {}
  const char *name() const override { return inner->name(); }
  Device &device() override { return inner->device(); }
  void run(const KernelCall &call) override {
    if (call.kind == KernelKind::Neg && calls++ > 0) {
      if (does == Waits)
        device().computeStream().synchronize();
      else if (does == Allocates)
        device().allocateBuffer(64);
      else
        held.reset();
    }
    inner->run(call);
  }

private:
  std::unique_ptr<Backend> inner;
  Does does;
  DeviceBuffer held;
  int calls = 0;
};

// Tests a step that does, while it is recorded, what a CUDA stream under
// capture refuses (the host waiting for the stream, allocating or freeing
// device memory): the recording run fails naming the graph and what the
// step did (the instruction too, where it throws at once; a free, which
// must not throw, fails the capture at its end), and the stream is left
// running work again (not recording), with no graph kept.
TEST(Executor, AStepThatCannotBeRecordedFailsAndEndsTheCapture) {
  using Does = RefusedWhileRecording::Does;
  struct Case {
    Does does;
    const char *says;
  } cases[] = {
      {Does::Waits, "instruction 1: during a capture, the stream's user "
                    "makes the host wait for the stream"},
      {Does::Allocates, "instruction 1: cuda (emulated): the step allocates "
                        "device memory while its work is being recorded"},
      {Does::Frees, "the captured work frees device memory, which a graph "
                    "cannot hold"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.says);
    RefusedWhileRecording backend(c.does);
    PlanBuilder b;
    int64_t x = b.buffer(plan::INPUT, {4}, {}, "x");
    int64_t y = b.buffer(plan::ACTIVATION, {4});
    int64_t z = b.buffer(plan::ACTIVATION, {4});
    b.kernel("exp", {x}, {y});
    b.kernel("neg", {y}, {z});
    b.prog->add_results(z);
    auto file = PlanFile::parse(b.finish());
    ExecutorOptions options;
    options.captureGraph = true;
    Executor ex(file, "main", nullptr, backend, options);
    ex.setInputs({iota({4})});
    ex.run(); // eager
    try {
      ex.run();
      ADD_FAILURE() << "the step was recorded";
    } catch (const Error &e) {
      std::string what = e.what();
      EXPECT_EQ(what.rfind("recording the step as a graph (--cuda-graph): ",
                           0),
                0u)
          << what;
      EXPECT_NE(what.find(c.says), std::string::npos) << what;
    }
    EXPECT_EQ(ex.graphCaptures(), 0);
    int ran = 0;
    backend.device().computeStream().enqueue([&] { ++ran; });
    EXPECT_EQ(ran, 1) << "the stream still records";
  }
}

// Tests the diagnostics of a graph the executor cannot record: the cpu
// device's stream, a partitioned program on 2 devices, a profile.
TEST(Executor, GraphCaptureRefusesWhatItCannotRecord) {
  ExecutorOptions options;
  options.captureGraph = true;
  auto one = PlanFile::parse(sgdStepPlan(1));
  auto cpu = createCpuBackend(1);
  try {
    Executor ex(one, "main", nullptr, *cpu, options);
    ADD_FAILURE() << "the cpu device recorded a graph";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(),
                 "recording steps as a graph (--cuda-graph): the cpu "
                 "device's stream cannot record (a CUDA stream can: "
                 "--backend cuda)");
  }
  ExecutorOptions profiled = options;
  profiled.profile = true;
  auto cuda = emulatedCudaBackend();
  try {
    Executor ex(one, "main", nullptr, *cuda, profiled);
    ADD_FAILURE() << "a profiled executor recorded a graph";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("and a profile exclude each other"),
              std::string::npos)
        << e.what();
  }
  auto two = PlanFile::parse(sgdStepPlan(2));
  std::vector<std::string> errors(2);
  runLocalRanks(2, [&](Communicator &comm) {
    auto backend = emulatedCudaBackend();
    try {
      Executor ex(two, "main", &comm, *backend, options);
    } catch (const Error &e) {
      errors[comm.rank()] = e.what();
    }
  });
  for (const std::string &e : errors)
    EXPECT_EQ(e, "recording steps as a graph (--cuda-graph) needs a "
                 "one-device program: 'main' runs on 2 devices, and the "
                 "executor issues its collectives from the host");
}

TEST(PlanFile, RejectsDonatedUpdatesThatWouldClobberAnOldValue) {
  {
    // Not a result that replaces anything.
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {3});
    b.kernel("neg", {w}, {y});
    b.prog->add_results(y);
    b.prog->mutable_buffers(y)->set_in_place(true);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 is in_place but is no "
              "activation result that replaces a parameter or state buffer");
  }
  {
    // neg reads w as it writes w' over it: not an update kernel.
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {3});
    b.kernel("neg", {w}, {y});
    b.prog->add_results(y);
    b.prog->mutable_buffers(y)->set_replaces("w");
    b.prog->mutable_buffers(y)->set_in_place(true);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 is in_place (shares the bytes "
              "of 'w' from instruction 0 on), but instruction 0 reads the "
              "old 'w'");
  }
  {
    // The old w is read after sgd wrote w'.
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t buf = b.buffer(plan::STATE, {3}, {}, "w.momentum");
    int64_t g = b.buffer(plan::INPUT, {3}, {}, "g");
    int64_t w2 = b.buffer(plan::ACTIVATION, {3});
    int64_t buf2 = b.buffer(plan::ACTIVATION, {3});
    int64_t late = b.buffer(plan::ACTIVATION, {3});
    b.kernel("sgd", {w, g, buf}, {w2, buf2});
    b.kernel("neg", {w}, {late});
    for (int64_t r : {w2, buf2, late})
      b.prog->add_results(r);
    b.prog->mutable_buffers(w2)->set_replaces("w");
    b.prog->mutable_buffers(w2)->set_in_place(true);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 3 is in_place (shares the bytes "
              "of 'w' from instruction 0 on), but instruction 1 reads the "
              "old 'w'");
  }
  {
    // sgd reads the momentum buffer as its gradient too.
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t buf = b.buffer(plan::STATE, {3}, {}, "w.momentum");
    int64_t w2 = b.buffer(plan::ACTIVATION, {3});
    int64_t buf2 = b.buffer(plan::ACTIVATION, {3});
    b.kernel("sgd", {w, buf, buf}, {w2, buf2});
    for (int64_t r : {w2, buf2})
      b.prog->add_results(r);
    b.prog->mutable_buffers(buf2)->set_replaces("w.momentum");
    b.prog->mutable_buffers(buf2)->set_in_place(true);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 3 is in_place (shares the bytes "
              "of 'w.momentum' from instruction 0 on), but instruction 0 "
              "reads the old 'w.momentum'");
  }
}

// Tests that gathering a value every device holds whole is a local copy
// (no all_gather, no temporary of every device's copy: the largest gather
// stays 0), while a split one is gathered from its blocks.
TEST(Executor, GatherOfAReplicatedValueIsLocal) {
  PlanBuilder b({{"dp", 2}}, true);
  int64_t w = b.buffer(plan::PARAMETER, {3}, {{}}, "w");
  int64_t v = b.buffer(plan::PARAMETER, {2}, {{"dp"}}, "v", {4});
  int64_t y = b.buffer(plan::ACTIVATION, {3}, {{}});
  b.kernel("neg", {w}, {y});
  b.prog->add_results(y);
  (void)v;
  auto planFile = PlanFile::parse(b.finish());
  runLocalRanks(2, [&](Communicator &comm) {
    auto backend = createCpuBackend(1);
    Executor ex(planFile, "main", &comm, *backend);
    Tensor wIn = iota({3}), vIn = iota({4}, 2.0f);
    ex.setPersistent("w", wIn);
    ex.setPersistent("v", vIn);
    expectNear(ex.gatherPersistent("w"), wIn, 0);
    EXPECT_EQ(ex.memory().largestGather, 0);
    expectNear(ex.gatherPersistent("v"), vIn, 0);
    EXPECT_EQ(ex.memory().largestGather, 16);
  });
}

TEST(Executor, SetPersistentWritesEachRanksBlock) {
  auto planFile = PlanFile::parse(sgdStepPlan(2));
  runLocalRanks(2, [&](Communicator &comm) {
    auto backend = createCpuBackend(1);
    Executor ex(planFile, "main", &comm, *backend);
    Tensor w = iota({4});
    ex.setPersistent("w", w);
    Tensor local = ex.localParameter("w");
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(local.data<float>()[i], w.data<float>()[comm.rank() * 2 + i]);
    Tensor got = ex.gatherPersistent("w");
    expectNear(got, w, 0);
    try {
      ex.setPersistent("w", iota({5}));
      ADD_FAILURE() << "no error";
    } catch (const Error &e) {
      EXPECT_STREQ(e.what(), "parameter 'w' must be f32x4, got f32x5");
    }
    try {
      ex.gatherResult(3);
      ADD_FAILURE() << "no error";
    } catch (const Error &e) {
      EXPECT_STREQ(e.what(),
                   "result 3 does not exist: the program has 3 results");
    }
    try {
      ex.gatherPersistent("nope");
      ADD_FAILURE() << "no error";
    } catch (const Error &e) {
      EXPECT_STREQ(e.what(),
                   "the program has no parameter or state buffer 'nope'");
    }
  });
}

TEST(Executor, ResultsThatExchangeParametersReadTheOldValues) {
  PlanBuilder b;
  int64_t p = b.buffer(plan::PARAMETER, {3}, {}, "p");
  int64_t q = b.buffer(plan::PARAMETER, {3}, {}, "q");
  b.prog->add_results(q);
  b.prog->add_results(p);
  // The results are the arguments themselves: q replaces p, p replaces q.
  b.prog->mutable_buffers(q)->set_replaces("p");
  b.prog->mutable_buffers(p)->set_replaces("q");
  auto file = PlanFile::parse(b.finish());
  auto backend = createCpuBackend(1);
  Executor ex(file, "main", nullptr, *backend);
  Tensor p0 = ex.localParameter("p"), q0 = ex.localParameter("q");
  ex.run();
  expectNear(ex.localParameter("p"), q0, 0);
  expectNear(ex.localParameter("q"), p0, 0);
}

TEST(PlanFile, RejectsBadReplacementsAndState) {
  {
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {3});
    b.kernel("neg", {w}, {y});
    b.prog->mutable_buffers(y)->set_replaces("w");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 replaces 'w' but is not a "
              "result of the program");
  }
  {
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {3});
    b.kernel("neg", {w}, {y});
    b.prog->add_results(y);
    b.prog->mutable_buffers(y)->set_replaces("v");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 replaces 'v', which is no "
              "parameter or state buffer");
  }
  {
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {3});
    int64_t z = b.buffer(plan::ACTIVATION, {3});
    b.kernel("neg", {w}, {y});
    b.kernel("neg", {y}, {z});
    b.prog->add_results(y);
    b.prog->add_results(z);
    b.prog->mutable_buffers(y)->set_replaces("w");
    b.prog->mutable_buffers(z)->set_replaces("w");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': two results replace 'w'");
  }
  {
    PlanBuilder b;
    int64_t w = b.buffer(plan::PARAMETER, {3}, {}, "w");
    int64_t y = b.buffer(plan::ACTIVATION, {1, 3});
    b.kernel("reshape", {w}, {y});
    b.prog->add_results(y);
    b.prog->mutable_buffers(y)->set_replaces("w");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 replaces 'w' but its dtype, "
              "shapes or sharding differ from it");
  }
  {
    PlanBuilder b({{"dp", 2}}, true);
    int64_t w = b.buffer(plan::PARAMETER, {2}, {{"dp"}}, "w", {4});
    int64_t y = b.buffer(plan::ACTIVATION, {2}, {{}}, "", {2});
    b.kernel("neg", {w}, {y});
    b.prog->add_results(y);
    b.prog->mutable_buffers(y)->set_replaces("w");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 1 replaces 'w' but its dtype, "
              "shapes or sharding differ from it");
  }
  {
    PlanBuilder b;
    b.buffer(plan::PARAMETER, {3}, {}, "w");
    b.buffer(plan::STATE, {3}, {}, "w");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': two parameters or state buffers are "
              "named 'w'");
  }
  {
    PlanBuilder b;
    b.buffer(plan::STATE, {3});
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': buffer 0 is training state without a "
              "name");
  }
}


//===----------------------------------------------------------------------===//
// Gradient buckets (Collective.bucket)
//===----------------------------------------------------------------------===//

/// Forwards to a real communicator, counting the reduction calls; can fail
/// every allReduce.
class CountingCommunicator : public Communicator {
public:
  explicit CountingCommunicator(Communicator &inner) : inner(inner) {}
  int rank() const override { return inner.rank(); }
  int size() const override { return inner.size(); }
  const char *kind() const override { return inner.kind(); }
  void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                 const std::vector<int> &group) override {
    ++allReduces;
    if (failAllReduce)
      throw Error("injected all_reduce failure");
    std::this_thread::sleep_for(delayAllReduce);
    inner.allReduce(data, count, dtype, op, group);
  }
  void allGather(const void *send, void *recv, size_t count, DType dtype,
                 const std::vector<int> &group) override {
    inner.allGather(send, recv, count, dtype, group);
  }
  void reduceScatter(const void *send, void *recv, size_t count, DType dtype,
                     ReduceOp op, const std::vector<int> &group) override {
    ++reduceScatters;
    inner.reduceScatter(send, recv, count, dtype, op, group);
  }
  void allToAll(const void *send, void *recv, size_t count, DType dtype,
                const std::vector<int> &group) override {
    inner.allToAll(send, recv, count, dtype, group);
  }
  void collectivePermute(const void *send, void *recv, size_t count,
                         DType dtype,
                         const std::vector<std::pair<int, int>> &pairs,
                         const std::vector<int> &group) override {
    inner.collectivePermute(send, recv, count, dtype, pairs, group);
  }
  void send(const void *data, size_t count, DType dtype, int peer, int tag,
            const std::vector<int> &group) override {
    inner.send(data, count, dtype, peer, tag, group);
  }
  void recv(void *data, size_t count, DType dtype, int peer, int tag,
            const std::vector<int> &group) override {
    inner.recv(data, count, dtype, peer, tag, group);
  }
  void barrier(const std::vector<int> &group) override {
    inner.barrier(group);
  }

  Communicator &inner;
  int allReduces = 0, reduceScatters = 0;
  bool failAllReduce = false;
  /// Each allReduce first sleeps this long (a bucket call still in flight
  /// when the step fails elsewhere).
  std::chrono::milliseconds delayAllReduce{0};
};

struct BucketRun {
  std::vector<Tensor> results; // rank 0's
  int allReduces = 0, reduceScatters = 0; // rank 0's calls in one step
};

BucketRun runCounted(const std::string &bytes, int ranks,
                     const std::vector<Tensor> &inputs, bool overlap) {
  auto file = PlanFile::parse(bytes);
  BucketRun out;
  std::mutex m;
  runLocalRanks(ranks, [&](Communicator &comm) {
    CountingCommunicator counting(comm);
    auto backend = createCpuBackend(1);
    ExecutorOptions options;
    options.overlapBuckets = overlap;
    Executor ex(file, "main", &counting, *backend, options);
    ex.setInputs(inputs);
    ex.run();
    int allReduces = counting.allReduces,
        reduceScatters = counting.reduceScatters;
    std::vector<Tensor> r = ex.gatherResults();
    std::lock_guard<std::mutex> lock(m);
    if (comm.rank() == 0)
      out = {std::move(r), allReduces, reduceScatters};
  });
  return out;
}

/// dp=2: three all_reduces of dp-split inputs of different shapes, then an
/// add reading two of the results. With `bucket`, the three are bucket 7.
std::string allReducePlan(bool bucket) {
  PlanBuilder b({{"dp", 2}}, true);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "x", {4, 3});
  int64_t y = b.buffer(plan::INPUT, {5}, {{"dp"}}, "y", {10});
  int64_t z = b.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "z", {4, 3});
  int64_t rx = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t ry = b.buffer(plan::ACTIVATION, {5});
  int64_t rz = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t sum = b.buffer(plan::ACTIVATION, {2, 3});
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, x, rx);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, y, ry);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, z, rz);
  if (bucket)
    for (int i = 0; i < 3; ++i)
      b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(7);
  b.kernel("add", {rx, rz}, {sum});
  for (int64_t id : {rx, ry, sum})
    b.prog->add_results(id);
  return b.finish();
}

TEST(Executor, BucketedAllReducesAreOnePackedCall) {
  Tensor x = iota({4, 3}), y = iota({10}, 0.25f), z = iota({4, 3}, -2.0f);
  BucketRun separate = runCounted(allReducePlan(false), 2, {x, y, z}, true);
  EXPECT_EQ(separate.allReduces, 3);
  // By hand: rx = x[0:2] + x[2:4]; ry = y[0:5] + y[5:10].
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(separate.results[0].data<float>()[i],
                    x.data<float>()[i] + x.data<float>()[i + 6]);
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(separate.results[1].data<float>()[i],
                    y.data<float>()[i] + y.data<float>()[i + 5]);
  for (bool overlap : {true, false}) {
    BucketRun bucketed = runCounted(allReducePlan(true), 2, {x, y, z}, overlap);
    EXPECT_EQ(bucketed.allReduces, 1) << "overlap " << overlap;
    ASSERT_EQ(bucketed.results.size(), 3u);
    for (size_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < separate.results[r].numElements(); ++i)
        EXPECT_EQ(bucketed.results[r].data<float>()[i],
                  separate.results[r].data<float>()[i])
            << "result " << r << " element " << i << " overlap " << overlap;
  }
}

/// A stream-ordered communicator (the nccl one on its emulated layer)
/// behind CountingCommunicator's forwarding, counting the calls enqueued on
/// a device stream and those started from the host.
class EnqueueCounter final : public CountingCommunicator {
public:
  explicit EnqueueCounter(Communicator &nccl) : CountingCommunicator(nccl) {}
  bool callableFromAnyThread() const override {
    return inner.callableFromAnyThread();
  }
  bool takesDeviceMemory() const override { return inner.takesDeviceMemory(); }
  bool ordersOnStreams() const override { return inner.ordersOnStreams(); }
  std::shared_ptr<CommGroup> createGroup(const std::vector<int> &ranks) override {
    return inner.createGroup(ranks);
  }
  std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                     const CommGroup &group) override {
    ++started;
    return inner.start(args, group);
  }
  void enqueue(const CollectiveArgs &args, const CommGroup &group,
               Stream &stream) override {
    ++enqueued;
    inner.enqueue(args, group, stream);
  }
  void waitEnqueued() override {
    ++waits;
    inner.waitEnqueued();
  }
  int started = 0, enqueued = 0, waits = 0;
};

// Tests that with a communicator that orders calls on device streams (nccl),
// a step's collectives, bucketed or not, are enqueued on the device's
// streams, none started from the host, and that the step waits for them
// once at its end: on the emulated cuda backend with a compute stream that
// runs ahead of the host (as a GPU's), over the emulated nccl layer, the
// results equal the cpu backend's over the local communicator.
TEST(Executor, StepCollectivesAreEnqueuedOnTheDeviceStreams) {
  Tensor x = iota({4, 3}), y = iota({10}, 0.25f), z = iota({4, 3}, -2.0f);
  for (bool bucket : {false, true}) {
    SCOPED_TRACE(bucket ? "bucketed" : "separate calls");
    BucketRun want = runCounted(allReducePlan(bucket), 2, {x, y, z}, true);
    auto file = PlanFile::parse(allReducePlan(bucket));
    std::mutex m;
    std::vector<Tensor> got;
    int started = -1, enqueued = -1, waits = -1;
    runLocalRanks(2, [&](Communicator &local) {
      NcclOptions nccl;
      nccl.emulate = true;
      std::unique_ptr<Communicator> inner = createNcclCommunicator(local, nccl);
      EnqueueCounter counter(*inner);
      CudaBackendOptions options;
      options.emulate = true;
      options.emulateAsync = true;
      options.blockSize = 32;
      auto backend = createCudaBackend(options);
      Executor ex(file, "main", &counter, *backend);
      ex.setInputs({x, y, z});
      ex.run();
      int s = counter.started, e = counter.enqueued, w = counter.waits;
      std::vector<Tensor> r = ex.gatherResults();
      std::lock_guard<std::mutex> lock(m);
      if (local.rank() == 0) {
        got = std::move(r);
        std::tie(started, enqueued, waits) = std::tie(s, e, w);
      }
    });
    EXPECT_EQ(started, 0);
    EXPECT_EQ(enqueued, bucket ? 1 : 3);
    EXPECT_EQ(waits, 1);
    ASSERT_EQ(got.size(), want.results.size());
    for (size_t r = 0; r < got.size(); ++r)
      for (int64_t i = 0; i < got[r].numElements(); ++i)
        EXPECT_EQ(got[r].data<float>()[i], want.results[r].data<float>()[i])
            << "result " << r << " element " << i;
  }
}

TEST(Executor, BucketedReduceScattersPackEachRanksBlocks) {
  // tp=2, replicated inputs: reduce_scatter sums two equal copies, so each
  // rank keeps its block of 2x. Members scatter along dims 1, 0 and 0 of
  // [4, 6], [6, 4] and [2]: the packed send holds, per rank r, a's block r
  // (transposed to the front), then b's, then c's.
  PlanBuilder b({{"tp", 2}}, true);
  int64_t a = b.buffer(plan::INPUT, {4, 6}, {}, "a", {4, 6});
  int64_t bb = b.buffer(plan::INPUT, {6, 4}, {}, "b", {6, 4});
  int64_t c = b.buffer(plan::INPUT, {2}, {}, "c", {2});
  int64_t sa = b.buffer(plan::ACTIVATION, {4, 3}, {{}, {"tp"}}, "sa", {4, 6});
  int64_t sb = b.buffer(plan::ACTIVATION, {3, 4}, {{"tp"}, {}}, "sb", {6, 4});
  int64_t sc = b.buffer(plan::ACTIVATION, {1}, {{"tp"}}, "sc", {2});
  b.collective(plan::Collective::REDUCE_SCATTER, {"tp"}, a, sa, 1);
  b.collective(plan::Collective::REDUCE_SCATTER, {"tp"}, bb, sb, 0);
  b.collective(plan::Collective::REDUCE_SCATTER, {"tp"}, c, sc, 0);
  for (int i = 0; i < 3; ++i)
    b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(1);
  for (int64_t id : {sa, sb, sc})
    b.prog->add_results(id);
  std::string bytes = b.finish();
  Tensor ain = iota({4, 6}), bin = iota({6, 4}, 0.5f), cin = iota({2}, 3.0f);
  for (bool overlap : {true, false}) {
    BucketRun run = runCounted(bytes, 2, {ain, bin, cin}, overlap);
    EXPECT_EQ(run.reduceScatters, 1) << "overlap " << overlap;
    ASSERT_EQ(run.results.size(), 3u);
    const Tensor *want[] = {&ain, &bin, &cin};
    for (size_t r = 0; r < 3; ++r)
      for (int64_t i = 0; i < want[r]->numElements(); ++i)
        EXPECT_FLOAT_EQ(run.results[r].data<float>()[i],
                        2 * want[r]->data<float>()[i])
            << "result " << r << " element " << i << " overlap " << overlap;
  }
}

TEST(Executor, ABucketLeavesTheBytesOfADeadOutputAlone) {
  // r0 = all_reduce(x) is never read: the memory plan gives its bytes to
  // z = relu(y), written before the bucket is unpacked (at the add that
  // reads r1). Unpacking r0 there would overwrite z.
  PlanBuilder b({{"dp", 2}}, true);
  int64_t x = b.buffer(plan::INPUT, {4}, {}, "x");
  int64_t y = b.buffer(plan::INPUT, {4}, {}, "y");
  int64_t r0 = b.buffer(plan::ACTIVATION, {4});
  int64_t r1 = b.buffer(plan::ACTIVATION, {4});
  int64_t z = b.buffer(plan::ACTIVATION, {4});
  int64_t w = b.buffer(plan::ACTIVATION, {4});
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, x, r0);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, y, r1);
  for (int i = 0; i < 2; ++i)
    b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(1);
  b.kernel("relu", {y}, {z});
  b.kernel("add", {r1, z}, {w});
  b.prog->add_results(w);
  b.finish();
  plan::Buffer *dead = b.prog->mutable_buffers(r0);
  dead->set_first_use(0);
  dead->set_last_use(0);
  plan::Buffer *reuse = b.prog->mutable_buffers(z);
  reuse->set_offset(dead->offset());
  reuse->set_first_use(2);
  reuse->set_last_use(3);
  std::string bytes = b.seal();
  Tensor xin = iota({4}, 5.0f), yin = iota({4}, 0.75f);
  for (bool overlap : {true, false}) {
    BucketRun run = runCounted(bytes, 2, {xin, yin}, overlap);
    ASSERT_EQ(run.results.size(), 1u);
    for (int64_t i = 0; i < 4; ++i) {
      float v = yin.data<float>()[i];
      EXPECT_FLOAT_EQ(run.results[0].data<float>()[i],
                      2 * v + (v > 0 ? v : 0.0f))
          << "element " << i << " overlap " << overlap;
    }
  }
}

TEST(Executor, ABucketsFailureReachesTheStepThatWaits) {
  auto file = PlanFile::parse(allReducePlan(true));
  for (bool overlap : {true, false}) {
    std::string message;
    try {
      runLocalRanks(2, [&](Communicator &comm) {
        CountingCommunicator counting(comm);
        counting.failAllReduce = comm.rank() == 1;
        auto backend = createCpuBackend(1);
        ExecutorOptions options;
        options.overlapBuckets = overlap;
        Executor ex(file, "main", &counting, *backend, options);
        ex.setInputs({iota({4, 3}), iota({10}), iota({4, 3})});
        ex.run();
      }, std::chrono::milliseconds(5000));
    } catch (const Error &e) {
      message = e.what();
    }
    // Rank 1's own failure, named by the bucket and its instructions; with
    // overlap it surfaces at the add that reads the bucket (instruction 3).
    EXPECT_NE(message.find("rank 1:"), std::string::npos) << message;
    EXPECT_NE(message.find("bucket 7 (instructions 0-2): injected all_reduce "
                           "failure"),
              std::string::npos)
        << message;
    if (overlap) {
      EXPECT_NE(message.find("instruction 3"), std::string::npos) << message;
    }
  }
}

// Tests that a rank whose step fails while its bucket call is still in
// flight on the communication stream tears down safely: rank 1's integer
// division by zero comes after it issued bucket 7, whose all_reduce is
// still sleeping in the communicator. The executor stops that stream (the
// call finishes with rank 0) before freeing the communicator groups and
// buckets the call reads; before, the groups went first and the call read
// freed memory (AddressSanitizer: heap-use-after-free in the local
// communicator, found by CI's plan mutation on a 2-rank train step).
TEST(Executor, AFailedStepWaitsForItsBucketCallInFlight) {
  PlanBuilder b({{"dp", 2}}, true);
  int64_t x = b.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "x", {4, 3});
  int64_t y = b.buffer(plan::INPUT, {5}, {{"dp"}}, "y", {10});
  int64_t z = b.buffer(plan::INPUT, {2, 3}, {{"dp"}, {}}, "z", {4, 3});
  int64_t d = b.buffer(plan::INPUT, {2}, {{"dp"}}, "d", {4});
  int64_t rx = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t ry = b.buffer(plan::ACTIVATION, {5});
  int64_t rz = b.buffer(plan::ACTIVATION, {2, 3});
  int64_t q = b.buffer(plan::ACTIVATION, {2});
  int64_t sum = b.buffer(plan::ACTIVATION, {2, 3});
  for (int64_t id : {d, q})
    b.prog->mutable_buffers(id)->set_dtype(plan::I32);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, x, rx);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, y, ry);
  b.collective(plan::Collective::ALL_REDUCE, {"dp"}, z, rz);
  for (int i = 0; i < 3; ++i)
    b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(7);
  b.kernel("div", {d, d}, {q}); // rank 1's block of d is zeros
  b.kernel("add", {rx, rz}, {sum});
  for (int64_t id : {rx, ry, q, sum})
    b.prog->add_results(id);
  auto file = PlanFile::parse(b.finish());
  Tensor divisor(DType::I32, {4});
  for (int i = 0; i < 4; ++i)
    divisor.data<int32_t>()[i] = i < 2 ? 1 : 0;
  std::string message;
  try {
    runLocalRanks(2, [&](Communicator &comm) {
      CountingCommunicator counting(comm);
      counting.delayAllReduce = std::chrono::milliseconds(300);
      auto backend = createCpuBackend(1);
      ExecutorOptions options;
      options.overlapBuckets = true;
      Executor ex(file, "main", &counting, *backend, options);
      ex.setInputs({iota({4, 3}), iota({10}), iota({4, 3}), divisor});
      ex.run();
    }, std::chrono::milliseconds(5000));
  } catch (const Error &e) {
    message = e.what();
  }
  EXPECT_NE(message.find("rank 1:"), std::string::npos) << message;
  EXPECT_NE(message.find("integer division by zero"), std::string::npos)
      << message;
}

TEST(PlanFile, RejectsBadBuckets) {
  auto bucketPlan = [] {
    PlanBuilder b({{"dp", 2}, {"tp", 2}}, true);
    for (int i = 0; i < 3; ++i) {
      int64_t in = b.buffer(plan::INPUT, {4}, {}, "x" + std::to_string(i));
      int64_t out = b.buffer(plan::ACTIVATION, {4});
      b.collective(plan::Collective::ALL_REDUCE, {"dp"}, in, out);
      b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(1);
    }
    return b;
  };
  EXPECT_EQ(parseError(bucketPlan().finish()), "(no error)");
  {
    PlanBuilder b = bucketPlan();
    b.prog->mutable_instructions(1)->mutable_collective()->set_bucket(2);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 2: bucket 1 continues after "
              "other instructions (a bucket's members must be adjacent)");
  }
  {
    PlanBuilder b = bucketPlan();
    b.prog->mutable_instructions(2)->mutable_collective()->set_axes(0, "tp");
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 2: bucket 1 mixes "
              "collectives of different kinds, axes, ops or dtypes");
  }
  {
    PlanBuilder b = bucketPlan();
    b.prog->mutable_instructions(1)->mutable_collective()->set_op(plan::MAX);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 1: bucket 1 mixes "
              "collectives of different kinds, axes, ops or dtypes");
  }
  {
    PlanBuilder b = bucketPlan();
    for (int i = 0; i < 3; ++i)
      b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(-4);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0: bucket -4 is negative");
  }
  {
    // Member 1 reads member 0's output, which the bucket writes only after
    // its one call.
    PlanBuilder b({{"dp", 2}}, true);
    int64_t in = b.buffer(plan::INPUT, {4}, {}, "x");
    int64_t mid = b.buffer(plan::ACTIVATION, {4});
    int64_t out = b.buffer(plan::ACTIVATION, {4});
    b.collective(plan::Collective::ALL_REDUCE, {"dp"}, in, mid);
    b.collective(plan::Collective::ALL_REDUCE, {"dp"}, mid, out);
    for (int i = 0; i < 2; ++i)
      b.prog->mutable_instructions(i)->mutable_collective()->set_bucket(2);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 1: bucket 2 member reads "
              "buffer 1, the output of an earlier member of the bucket");
  }
  {
    PlanBuilder b({{"dp", 2}}, true);
    int64_t in = b.buffer(plan::INPUT, {4}, {{"dp"}}, "x", {8});
    int64_t out = b.buffer(plan::ACTIVATION, {8});
    b.collective(plan::Collective::ALL_GATHER, {"dp"}, in, out);
    b.prog->mutable_instructions(0)->mutable_collective()->set_bucket(3);
    EXPECT_EQ(parseError(b.finish()),
              "p.pb: program 'main': instruction 0: only all_reduce and "
              "reduce_scatter can be in a bucket (bucket 3)");
  }
}

} // namespace
