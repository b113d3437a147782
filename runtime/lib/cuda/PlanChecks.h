//===- PlanChecks.h - checks of a plan before the cuda backend runs it -*- C++ -*-===//
//
// On a GPU, work on two streams runs concurrently unless an event orders
// it, and NCCL deadlocks when the members of a communicator issue different
// collective sequences; neither shows up as an error, only as wrong numbers
// or a hang. So before the cuda backend runs a plan, these checks look for
// both in the plan itself:
//   - streams: a gradient bucket's call runs on the communication stream
//     from where it is issued (its last member) until the compute stream
//     waits for its event (before the first instruction that reads one of
//     its outputs, or at the end of the step), writing its outputs there;
//     no other buffer may use the same arena bytes in that window;
//   - collective sequences: for each mesh axis set, the members of each
//     group issue the same collectives (kind, dtype, count, op, dim) in
//     the same order.
// Each returns the first problem found, or "" when there is none.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_PLANCHECKS_H
#define PARTITA_RUNTIME_LIB_CUDA_PLANCHECKS_H

#include <string>
#include <vector>

namespace partita::plan {
class Mesh;
class Plan;
class Program;
} // namespace partita::plan

namespace partita::runtime::gpu {

/// The stream check of `program`.
std::string checkStreamOrder(const plan::Program &program);

/// The sequence check: rank r (its mesh position, or its place in
/// mesh.devices) runs `programOfRank[r]`.
std::string
checkCollectiveSequences(const plan::Mesh &mesh,
                         const std::vector<const plan::Program *> &programOfRank);

/// Both, for program `name` of `plan` run by every rank; throws Error
/// naming the program and the problem.
void checkPlanForCuda(const plan::Plan &plan, const std::string &name);

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_PLANCHECKS_H
