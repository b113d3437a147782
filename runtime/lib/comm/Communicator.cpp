//===- Communicator.cpp - groups and asynchronous calls, shared defaults ---===//
//
// What every communicator gets unless it does better: a group is its checked
// rank list, start() runs the blocking collective at once (right for
// `local`, whose ranks meet inside the call; `mpi` overrides both), and the
// blocking point-to-point calls are start() and wait.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include "CommUtils.h"

#include <algorithm>
#include <numeric>

namespace partita::runtime {

std::vector<int> allRanks(int size) {
  std::vector<int> ranks(size_t(std::max(size, 0)));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

void barrierOfAll(Communicator *comm) {
  if (comm)
    comm->barrier(allRanks(comm->size()));
}

const char *toString(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduce:
    return "all_reduce";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::ReduceScatter:
    return "reduce_scatter";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::CollectivePermute:
    return "collective_permute";
  case CollectiveKind::Barrier:
    return "barrier";
  case CollectiveKind::Send:
    return "send";
  case CollectiveKind::Recv:
    return "recv";
  }
  return "?";
}

namespace {
/// A request whose collective completed inside start().
class CompletedRequest final : public CommRequest {
public:
  void wait(Clock::time_point) override {}
};
} // namespace

std::shared_ptr<CommGroup>
Communicator::createGroup(const std::vector<int> &ranks) {
  int position = comm::checkGroup(rank(), size(), ranks, "create_group");
  return std::make_shared<CommGroup>(ranks, position);
}

std::unique_ptr<CommRequest> Communicator::start(const CollectiveArgs &args,
                                                 const CommGroup &group) {
  const std::vector<int> &ranks = group.ranks();
  switch (args.kind) {
  case CollectiveKind::AllReduce:
    allReduce(args.recv, args.count, args.dtype, args.op, ranks);
    break;
  case CollectiveKind::AllGather:
    allGather(args.send, args.recv, args.count, args.dtype, ranks);
    break;
  case CollectiveKind::ReduceScatter:
    reduceScatter(args.send, args.recv, args.count, args.dtype, args.op,
                  ranks);
    break;
  case CollectiveKind::AllToAll:
    allToAll(args.send, args.recv, args.count, args.dtype, ranks);
    break;
  case CollectiveKind::CollectivePermute:
    collectivePermute(args.send, args.recv, args.count, args.dtype, args.pairs,
                      ranks);
    break;
  case CollectiveKind::Barrier:
    barrier(ranks);
    break;
  case CollectiveKind::Send:
  case CollectiveKind::Recv:
    throw Error("rank " + std::to_string(rank()) + ": " + toString(args.kind) +
                ": the " + kind() +
                " communicator has no point-to-point calls");
  }
  return std::make_unique<CompletedRequest>();
}

void Communicator::enqueue(const CollectiveArgs &args, const CommGroup &group,
                           Stream &) {
  throw Error(comm::describeCall(rank(), toString(args.kind), group.ranks()) +
              ": the " + kind() +
              " communicator does not order calls on device streams");
}

/// send() and recv(): start() on a group of `ranks`, waited for under the
/// timeout. Point-to-point calls need no group set up ahead (createGroup
/// would make `mpi` and `nccl` set one up collectively), so the group is the
/// checked rank list itself.
static void runPeerCall(Communicator &comm, const CollectiveArgs &args,
                        const std::vector<int> &ranks) {
  int position =
      comm::checkGroup(comm.rank(), comm.size(), ranks, toString(args.kind));
  comm.run(args, CommGroup(ranks, position));
}

void Communicator::send(const void *data, size_t count, DType dtype, int peer,
                        int tag, const std::vector<int> &group) {
  CollectiveArgs args{CollectiveKind::Send, data, nullptr, count, dtype};
  args.peer = peer;
  args.tag = tag;
  runPeerCall(*this, args, group);
}

void Communicator::recv(void *data, size_t count, DType dtype, int peer,
                        int tag, const std::vector<int> &group) {
  CollectiveArgs args{CollectiveKind::Recv, nullptr, data, count, dtype};
  args.peer = peer;
  args.tag = tag;
  runPeerCall(*this, args, group);
}

} // namespace partita::runtime
