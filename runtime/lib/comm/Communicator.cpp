//===- Communicator.cpp - groups and asynchronous calls, shared defaults ---===//
//
// What every communicator gets unless it does better: a group is its checked
// rank list, and start() runs the blocking call at once (right for `local`,
// whose ranks meet inside the call; `mpi` overrides both).
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include "CommUtils.h"

namespace partita::runtime {

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
  }
  return std::make_unique<CompletedRequest>();
}

} // namespace partita::runtime
