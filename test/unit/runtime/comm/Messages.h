//===- Messages.h - recognizable point-to-point payloads ---------*- C++ -*-===//
//
// For the point-to-point tests (PointToPointTest, partita-mpi-comm-test):
// every element says who sent it, with which tag, as which message.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TEST_UNIT_RUNTIME_COMM_MESSAGES_H
#define PARTITA_TEST_UNIT_RUNTIME_COMM_MESSAGES_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace partita::runtime::test {

/// What rank `from` sends with `tag` as its `k`-th message, element `i`.
inline int32_t payload(int from, int tag, int k, size_t i) {
  return from * 1000000 + tag * 1000 + k * 100 + static_cast<int32_t>(i % 97);
}

inline std::vector<int32_t> message(int from, int tag, int k, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i)
    v[i] = payload(from, tag, k, i);
  return v;
}

} // namespace partita::runtime::test

#endif // PARTITA_TEST_UNIT_RUNTIME_COMM_MESSAGES_H
