//===- PlanChecksTest.cpp - the plan checks before a cuda run -------------===//
//
// Hand-built plans (sealed, 64-byte aligned arena offsets, so the loader
// accepts them): a gradient bucket whose output's bytes are reused before
// the compute stream waits for the bucket's event (a planted missing event
// wait) is reported, by the check and by an executor on the cuda backend;
// the same plan with the reuse moved after the wait passes; two ranks of one
// communicator with their collectives reordered are reported.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Executor.h"
#include "runtime/lib/cuda/PlanChecks.h"
#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace partita::runtime {
namespace {

constexpr uint32_t kTrailer = 0x4e414c50;

plan::Buffer *addBuffer(plan::Program *prog, plan::Role role, int64_t offset,
                        int64_t first, int64_t last) {
  plan::Buffer *b = prog->add_buffers();
  b->set_id(prog->buffers_size() - 1);
  b->set_role(role);
  b->add_local_shape(16);
  b->add_global_shape(role == plan::INPUT ? 32 : 16);
  if (role == plan::INPUT) {
    b->add_sharding()->add_axes("dp");
    b->set_name("x" + std::to_string(b->id()));
  }
  if (role == plan::ACTIVATION) {
    b->set_offset(offset);
    b->set_first_use(first);
    b->set_last_use(last);
  }
  return b;
}

plan::Kernel *addKernel(plan::Program *prog, plan::Kernel::Kind kind,
                        std::vector<int64_t> in, int64_t out) {
  plan::Kernel *k = prog->add_instructions()->mutable_kernel();
  k->set_kind(kind);
  for (int64_t i : in)
    k->add_inputs(i);
  k->add_outputs(out);
  return k;
}

/// On dp=2: 0: a = exp(x); 1: g = all_reduce(a) and 2: h = all_reduce(a),
/// one bucket (issued at 2); 3: t = exp(x) at `tOffset`; 4: y = h + t. The
/// event wait for the bucket comes before instruction 4 (h's reader); g is
/// never read, and its live range is [1, gLast]. With tOffset == g's offset
/// and gLast == 1, t reuses g's bytes at 3, between the issue and the wait,
/// when the bucket's write of g may still land.
plan::Plan bucketPlan(int64_t tOffset, int64_t gLast) {
  plan::Plan p;
  p.set_format_version(kPlanFormatVersion);
  p.set_trailer(kTrailer);
  plan::MeshAxis *axis = p.mutable_mesh()->add_axes();
  axis->set_name("dp");
  axis->set_size(2);
  plan::Program *prog = p.add_programs();
  prog->set_name("main");
  prog->set_partitioned(true);
  addBuffer(prog, plan::INPUT, 0, 0, 0);            // 0: x
  addBuffer(prog, plan::ACTIVATION, 0, 0, 2);       // 1: a
  addBuffer(prog, plan::ACTIVATION, 64, 1, gLast);  // 2: g
  addBuffer(prog, plan::ACTIVATION, 128, 2, 4);     // 3: h
  addBuffer(prog, plan::ACTIVATION, tOffset, 3, 4); // 4: t
  addBuffer(prog, plan::ACTIVATION, 0, 4, 5);       // 5: y
  prog->add_arguments(0);
  prog->add_results(5);
  addKernel(prog, plan::Kernel::EXP, {0}, 1);
  for (int64_t out : {2, 3}) {
    plan::Collective *c = prog->add_instructions()->mutable_collective();
    c->set_kind(plan::Collective::ALL_REDUCE);
    c->add_axes("dp");
    c->set_input(1);
    c->set_output(out);
    c->set_bucket(1);
  }
  prog->mutable_instructions(2)->set_location("grads.bucket");
  addKernel(prog, plan::Kernel::EXP, {0}, 4);
  prog->mutable_instructions(3)->set_location("reuse");
  addKernel(prog, plan::Kernel::ADD, {3, 4}, 5);
  prog->set_arena_bytes(std::max<int64_t>(192, tOffset + 64));
  plan::sealPlan(p);
  return p;
}

// Tests that a buffer reusing a bucket output's bytes between the bucket's
// issue and the event wait (a missing wait) is reported, naming both
// buffers, the bucket and the instructions.
TEST(PlanChecksTest, PlantedMissingEventWaitIsReported) {
  plan::Plan p = bucketPlan(/*tOffset=*/64, /*gLast=*/1);
  // The loader's memory-plan validation accepts it: g's live range [1, 1]
  // and t's [3, 4] do not overlap.
  std::shared_ptr<const PlanFile> file = PlanFile::parse(p.SerializeAsString());
  std::string problem = gpu::checkStreamOrder(p.programs(0));
  EXPECT_EQ(problem,
            "instruction 3 (reuse) on the compute stream uses buffer 4, whose "
            "arena bytes [64, 128) overlap buffer 2, written by gradient "
            "bucket 1 on the communication stream from its issue at "
            "instruction 2 (grads.bucket) until the event wait before "
            "instruction 4: no event orders the two (buffer 2's live range "
            "ends at instruction 1)");

  // An executor on the cuda backend refuses the plan before it runs.
  CudaBackendOptions options;
  options.emulate = true;
  options.blockSize = 32;
  std::string error;
  try {
    runLocalRanks(2, [&](Communicator &comm) {
      auto backend = createCudaBackend(options);
      Executor executor(file, "main", &comm, *backend);
    });
  } catch (const Error &e) {
    error = e.what();
  }
  EXPECT_NE(error.find("program 'main': plan check before the cuda backend "
                       "runs it: instruction 3 (reuse)"),
            std::string::npos)
      << error;
}

// Tests the negative control: t in bytes of its own.
TEST(PlanChecksTest, OrderedReusePasses) {
  plan::Plan p = bucketPlan(/*tOffset=*/192, /*gLast=*/1);
  std::shared_ptr<const PlanFile> file = PlanFile::parse(p.SerializeAsString());
  EXPECT_EQ(gpu::checkStreamOrder(p.programs(0)), "");
  EXPECT_EQ(gpu::checkCollectiveSequences(p.mesh(),
                                          {&p.programs(0), &p.programs(0)}),
            "");
}

// Tests that two ranks of one communicator issuing the same two collectives
// in different orders are reported.
TEST(PlanChecksTest, ReorderedCollectiveIsReported) {
  plan::Plan p = bucketPlan(/*tOffset=*/192, /*gLast=*/1);
  // A second program: an all_gather of t before the all_reduce.
  plan::Program other = p.programs(0);
  other.set_name("other");
  plan::Instruction gather;
  plan::Collective *c = gather.mutable_collective();
  c->set_kind(plan::Collective::ALL_GATHER);
  c->add_axes("dp");
  c->set_input(0);
  c->set_output(4);
  plan::Program first = p.programs(0);
  *first.add_instructions() = gather;
  // `other`: the gather first, then the rest.
  other.clear_instructions();
  *other.add_instructions() = gather;
  for (const plan::Instruction &inst : p.programs(0).instructions())
    *other.add_instructions() = inst;
  EXPECT_EQ(gpu::checkCollectiveSequences(p.mesh(), {&first, &other}),
            "ranks 0 and 1 share a communicator over axes dp but issue "
            "different collectives as its call 0: all_reduce of 16 x f32 "
            "(sum) on rank 0, all_gather of 16 x f32 dim 0 on rank 1 (NCCL "
            "would hang or mix the two)");
  EXPECT_EQ(gpu::checkCollectiveSequences(p.mesh(), {&first, &first}), "");
}

} // namespace
} // namespace partita::runtime
