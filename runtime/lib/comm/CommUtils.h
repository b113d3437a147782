//===- CommUtils.h - helpers shared by the communicators --------*- C++ -*-===//
//
// Group checks, message formatting and the reduction kernel that the local
// and MPI communicators share. Internal to libpartita_runtime.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_COMM_COMMUTILS_H
#define PARTITA_RUNTIME_LIB_COMM_COMMUTILS_H

#include "partita/runtime/Communicator.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace partita::runtime::comm {

/// "[0,1,2,3]".
std::string formatRanks(const std::vector<int> &ranks);

/// "rank 3: all_reduce over group [0,1,2,3]", the head of every message
/// about a collective call.
std::string describeCall(int rank, const char *collective,
                         const std::vector<int> &group);

/// "4 x f32".
std::string describeCount(size_t count, DType dtype);

/// FNV-1a of a group's rank list: its name where ranks compare groups (the
/// mpi communicator's set-up handshake and arrival census, the nccl
/// communicator's message headers).
uint64_t groupHash(const std::vector<int> &group);

/// Returns the position of `rank` in `group`, or throws Error naming the
/// collective when the group is empty, names a rank outside [0, size),
/// names a rank twice or leaves `rank` out.
int checkGroup(int rank, int size, const std::vector<int> &group,
               const char *collective);

/// For collective_permute: checks that `pairs` are positions in
/// [0, groupSize) with no source and no target named twice (else throws
/// Error after `head`), and returns the source position sending to
/// `position` and the target position `position` sends to (-1 for none).
std::pair<int, int>
checkPermutePairs(const std::string &head,
                  const std::vector<std::pair<int, int>> &pairs,
                  int groupSize, int position);

/// "[(0,1),(1,0)]".
std::string formatPairs(const std::vector<std::pair<int, int>> &pairs);

/// A point-to-point call (CollectiveKind::Send or Recv) checked against its
/// group: the peer's rank and the head of the call's messages, "rank 0: send
/// of 4 x f32 to rank 1 with tag 7".
struct PeerCall {
  std::string head;
  int peerRank = -1;
  int tag = 0;
};

/// Checks `args` (Send or Recv) from the member at `group`'s position():
/// throws Error naming the call when the peer is no position of the group
/// or is this rank's own, the tag is outside 0..kMaxTag (and not
/// kRuntimeTag or kRuntimePeerTag), or the dtype is
/// out of the enum.
PeerCall checkPeerCall(const CollectiveArgs &args, const CommGroup &group);

/// For a send (`isSend`) or receive of `rank` with `tag` that timed out:
/// "it had posted 0 sends with tag 9 to rank 1, and this receive is number
/// 1", where `theirs` counts the peer's matching calls and `number` (from 1)
/// is this call's among this rank's.
std::string peerProgress(bool isSend, int tag, int rank, uint64_t theirs,
                         uint64_t number);

/// "<head> does not match the 8 x f32 that rank 0 sent": a receive whose
/// count or dtype differs from its message's.
std::string peerMismatch(const std::string &head, size_t sentCount,
                         DType sentType, int sender);

/// dst[i] = dst[i] op src[i] in the dtype: integers wrap, f16 and bf16 are
/// combined in f32 and rounded to nearest even, Max and Min propagate NaN.
void reduceInto(void *dst, const void *src, size_t count, DType dtype,
                ReduceOp op);

/// IEEE half and bfloat16 conversions (round to nearest even).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);

} // namespace partita::runtime::comm

#endif // PARTITA_RUNTIME_LIB_COMM_COMMUTILS_H
