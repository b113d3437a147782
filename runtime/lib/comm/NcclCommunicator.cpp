//===- NcclCommunicator.cpp - collectives on GPUs through NCCL ------------===//
//
// Rank 0 makes NCCL's unique id and broadcasts it over the bootstrap
// communicator (MPI across processes; the local communicator when
// emulated); every rank then makes the world NCCL communicator, and each
// group of createGroup is split from it (ncclCommSplit: color = the group's
// smallest rank, key = the position), so every rank of the world must make
// its groups together, in the same order, as the executor does (one group
// per mesh axis set, each rank passing its own group of that axis). All NCCL
// calls go through the thin NCCL layer (runtime/lib/cuda/NcclApi.h), real or
// emulated.
//
// Failure: communicators are non-blocking; start() posts the collective
// and a request's wait polls its completion and ncclCommGetAsyncError until
// the deadline. On an error or at the deadline every NCCL communicator of
// this rank is aborted (ncclCommAbort) and the wait throws Error naming the
// rank, the collective, the group and its mesh axes:
//   rank 1: all_reduce over group [0,1] (axes dp) on nccl timed out after
//   5000 ms; aborted every nccl communicator of this rank
// After that the communicator refuses every call.
//
// The blocking methods that take a rank list (the training loop's stop flag,
// a checkpoint's barrier) act on host memory, which NCCL cannot read, and
// go through the bootstrap communicator.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"
#include "partita/runtime/CudaBackend.h"

#include "CommUtils.h"
#include "runtime/lib/cuda/NcclApi.h"

#include <algorithm>
#include <numeric>
#include <thread>

namespace partita::runtime {
namespace {

using comm::describeCall;
using nccl::Clock;

class NcclGroup final : public CommGroup {
public:
  NcclGroup(std::vector<int> ranks, int position,
            std::shared_ptr<nccl::Comm> comm)
      : CommGroup(std::move(ranks), position), comm(std::move(comm)) {}
  std::shared_ptr<nccl::Comm> comm;
};

class NcclCommunicator;

class NcclRequest final : public CommRequest {
public:
  NcclRequest(NcclCommunicator &owner, const NcclGroup &group,
              std::unique_ptr<nccl::Op> op, std::string head, Clock::time_point started)
      : owner(owner), group(group), op(std::move(op)), head(std::move(head)),
        started(started) {}
  void wait(Clock::time_point deadline) override;

private:
  NcclCommunicator &owner;
  const NcclGroup &group;
  std::unique_ptr<nccl::Op> op;
  std::string head;
  Clock::time_point started;
  bool done = false;
};

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(Communicator &bootstrap, std::unique_ptr<nccl::NcclApi> api,
                   bool emulated)
      : boot(bootstrap), api(std::move(api)), emulated(emulated) {
    setTimeout(bootstrap.getTimeout());
  }
  ~NcclCommunicator() override {
    groups.clear();
    world.reset();
  }

  /// The id broadcast and the world communicator.
  void init(const NcclOptions &options) {
    nccl::UniqueId id;
    if (rank() == 0)
      id = api->uniqueId();
    // A broadcast from rank 0 as a gather: the bootstrap has no broadcast.
    std::vector<nccl::UniqueId> all(size());
    std::vector<int> everyone(size());
    std::iota(everyone.begin(), everyone.end(), 0);
    boot.allGather(id.bytes, all.data(), sizeof(id.bytes) / 4, DType::I32,
                   everyone);
    id = all[0];
    idText = nccl::fingerprint(id);
    if (options.afterId)
      options.afterId(idText);
    if (!emulated) {
      std::string error = cudaDeviceError();
      if (!error.empty())
        throw Error("rank " + std::to_string(rank()) +
                    ": --comm nccl: no usable CUDA device: " + error +
                    " (nccl unique id " + idText + " from rank 0 received)");
    }
    world = api->initRank(size(), id, rank(), Clock::now() + getTimeout());
  }

  int rank() const override { return boot.rank(); }
  int size() const override { return boot.size(); }
  const char *kind() const override { return "nccl"; }
  // A real GPU's executor would otherwise issue from a CUDA host callback,
  // where CUDA calls are not allowed.
  bool callableFromAnyThread() const override { return emulated; }
  bool takesDeviceMemory() const override { return true; }

  void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                 const std::vector<int> &group) override {
    checkUsable();
    boot.allReduce(data, count, dtype, op, group);
  }
  void allGather(const void *send, void *recv, size_t count, DType dtype,
                 const std::vector<int> &group) override {
    checkUsable();
    boot.allGather(send, recv, count, dtype, group);
  }
  void reduceScatter(const void *send, void *recv, size_t count, DType dtype,
                     ReduceOp op, const std::vector<int> &group) override {
    checkUsable();
    boot.reduceScatter(send, recv, count, dtype, op, group);
  }
  void allToAll(const void *send, void *recv, size_t count, DType dtype,
                const std::vector<int> &group) override {
    checkUsable();
    boot.allToAll(send, recv, count, dtype, group);
  }
  void collectivePermute(const void *send, void *recv, size_t count,
                         DType dtype,
                         const std::vector<std::pair<int, int>> &pairs,
                         const std::vector<int> &group) override {
    checkUsable();
    boot.collectivePermute(send, recv, count, dtype, pairs, group);
  }
  void send(const void *data, size_t count, DType dtype, int peer) override {
    checkUsable();
    boot.send(data, count, dtype, peer);
  }
  void recv(void *data, size_t count, DType dtype, int peer) override {
    checkUsable();
    boot.recv(data, count, dtype, peer);
  }
  void barrier(const std::vector<int> &group) override {
    checkUsable();
    boot.barrier(group);
  }

  std::shared_ptr<CommGroup> createGroup(const std::vector<int> &ranks) override {
    checkUsable();
    int position = comm::checkGroup(rank(), size(), ranks, "create_group");
    std::vector<int> everyone(size());
    std::iota(everyone.begin(), everyone.end(), 0);
    std::shared_ptr<nccl::Comm> comm;
    if (ranks == everyone) {
      comm = world; // every rank asks for it alike: no split
    } else {
      int color = *std::min_element(ranks.begin(), ranks.end());
      try {
        comm = api->split(*world, color, position,
                          Clock::now() + getTimeout());
      } catch (const Error &e) {
        fail(describeCall(rank(), "create_group", ranks) + ": " + e.what());
      }
    }
    auto group = std::make_shared<NcclGroup>(ranks, position, comm);
    groups.push_back(group);
    return group;
  }

  std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                     const CommGroup &g) override {
    checkUsable();
    const auto *group = dynamic_cast<const NcclGroup *>(&g);
    if (!group)
      throw Error("rank " + std::to_string(rank()) +
                  ": nccl: a group not made by this communicator");
    std::string head = describeCall(rank(), toString(args.kind), g.ranks());
    if (!g.label().empty())
      head += " (" + g.label() + ")";
    if (args.kind == CollectiveKind::Barrier) {
      boot.barrier(g.ranks());
      return Communicator::start({CollectiveKind::Barrier}, g);
    }
    nccl::Call call{nccl::Call::AllReduce};
    call.send = args.send;
    call.recv = args.recv;
    call.count = args.count;
    call.dtype = args.dtype;
    call.op = args.op;
    switch (args.kind) {
    case CollectiveKind::AllReduce:
      call.send = args.recv; // in place
      break;
    case CollectiveKind::AllGather:
      call.kind = nccl::Call::AllGather;
      break;
    case CollectiveKind::ReduceScatter:
      call.kind = nccl::Call::ReduceScatter;
      break;
    case CollectiveKind::AllToAll:
      call.kind = nccl::Call::AllToAll;
      break;
    case CollectiveKind::CollectivePermute: {
      call.kind = nccl::Call::SendRecv;
      try {
        std::tie(call.recvFrom, call.sendTo) = comm::checkPermutePairs(
            head, args.pairs, g.size(), g.position());
      } catch (const Error &e) {
        fail(e.what());
      }
      break;
    }
    case CollectiveKind::Barrier:
      break;
    }
    Clock::time_point now = Clock::now();
    std::unique_ptr<nccl::Op> op;
    try {
      op = api->post(*group->comm, call);
    } catch (const Error &e) {
      fail(head + " on nccl failed: " + e.what());
    }
    return std::make_unique<NcclRequest>(*this, *group, std::move(op),
                                         std::move(head), now);
  }

  /// Aborts every NCCL communicator of this rank and throws `message`
  /// (with that said); later calls refuse.
  [[noreturn]] void fail(const std::string &message) {
    if (failure.empty()) {
      for (const auto &g : groups)
        if (g->comm)
          api->abort(*g->comm);
      if (world)
        api->abort(*world);
      failure = message + "; aborted every nccl communicator of this rank";
    }
    throw Error(failure);
  }

  nccl::NcclApi &layer() { return *api; }

private:
  void checkUsable() {
    if (!failure.empty())
      throw Error("rank " + std::to_string(rank()) +
                  ": nccl communicator unusable after an earlier failure: " +
                  failure);
  }

  Communicator &boot;
  std::unique_ptr<nccl::NcclApi> api;
  bool emulated;
  std::string idText;
  std::shared_ptr<nccl::Comm> world;
  std::vector<std::shared_ptr<NcclGroup>> groups;
  std::string failure;
};

void NcclRequest::wait(Clock::time_point deadline) {
  if (done)
    return;
  while (true) {
    std::string error;
    nccl::OpState state = owner.layer().poll(*group.comm, *op, error);
    if (state == nccl::OpState::Done) {
      done = true;
      return;
    }
    if (state == nccl::OpState::Failed)
      owner.fail(head + " on nccl failed: " + error);
    if (Clock::now() >= deadline) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - started);
      owner.fail(head + " on nccl timed out after " +
                 std::to_string(ms.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

} // namespace

std::unique_ptr<Communicator>
createNcclCommunicator(Communicator &bootstrap, const NcclOptions &options) {
  std::unique_ptr<nccl::NcclApi> api =
      options.emulate ? nccl::createEmulatedNccl(bootstrap)
                      : nccl::createRealNccl(options.device);
  auto comm = std::make_unique<NcclCommunicator>(bootstrap, std::move(api),
                                                 options.emulate);
  comm->init(options);
  return comm;
}

} // namespace partita::runtime
