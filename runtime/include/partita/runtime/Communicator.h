//===- Communicator.h - collectives between ranks ---------------*- C++ -*-===//
//
// The abstract communicator the executor issues collectives through. Ranks
// are numbered 0..size-1; a group is an ordered list of ranks (the plan's
// mesh axes resolved at load time). Every call takes effect only when every
// rank of its group makes the matching call; every call gives up after the
// communicator's timeout with an Error naming the rank and the collective,
// never a hang. Buffers are contiguous; the executor lays data out so that
// collectives act on the leading dimension.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_COMMUNICATOR_H
#define PARTITA_RUNTIME_COMMUNICATOR_H

#include "partita/runtime/Tensor.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime {

enum class ReduceOp : uint8_t { Sum, Max, Min };

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local", "mpi", "nccl".
  virtual const char *kind() const = 0;

  /// In place: every rank of `group` ends with the reduction of all ranks'
  /// `count` elements.
  virtual void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                         const std::vector<int> &group) = 0;
  /// `recv` gets group.size() * count elements: rank group[i]'s `send` at
  /// block i.
  virtual void allGather(const void *send, void *recv, size_t count,
                         DType dtype, const std::vector<int> &group) = 0;
  /// `send` holds group.size() blocks of `count` elements; the rank at
  /// position i receives the reduction of every rank's block i.
  virtual void reduceScatter(const void *send, void *recv, size_t count,
                             DType dtype, ReduceOp op,
                             const std::vector<int> &group) = 0;
  /// `send` holds group.size() blocks of `count` elements; block j goes to
  /// the rank at position j, and `recv` block i comes from position i.
  virtual void allToAll(const void *send, void *recv, size_t count,
                        DType dtype, const std::vector<int> &group) = 0;
  /// Point to point, for pipeline stages.
  virtual void send(const void *data, size_t count, DType dtype, int peer) = 0;
  virtual void recv(void *data, size_t count, DType dtype, int peer) = 0;
  /// Every rank of the group waits for all the others.
  virtual void barrier(const std::vector<int> &group) = 0;

  void setTimeout(std::chrono::milliseconds t) { timeout = t; }
  std::chrono::milliseconds getTimeout() const { return timeout; }

protected:
  std::chrono::milliseconds timeout{60000};
};

/// Runs `body(comm)` on `numRanks` threads of this process, each with its own
/// local communicator; rethrows (as Error) the first failure after every
/// thread has stopped. A rank that throws poisons the shared state, so the
/// others fail at their next collective instead of waiting for it.
void runLocalRanks(int numRanks,
                   const std::function<void(Communicator &)> &body,
                   std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// The MPI communicator over MPI_COMM_WORLD (initializes MPI when needed);
/// null when Partita was built without MPI.
std::unique_ptr<Communicator> createMpiCommunicator();

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_COMMUNICATOR_H
