//===- NoMpiCommunicator.cpp - MPI communicator when built without MPI ----===//

#include "partita/runtime/Communicator.h"

namespace partita::runtime {
std::unique_ptr<Communicator> createMpiCommunicator(const MpiOptions &) {
  return nullptr;
}
void abortMpiJob(int) {}
} // namespace partita::runtime
