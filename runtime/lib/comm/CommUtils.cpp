//===- CommUtils.cpp - helpers shared by the communicators ----------------===//

#include "CommUtils.h"

#include <cmath>
#include <cstring>
#include <set>
#include <type_traits>

namespace partita::runtime {

const char *toString(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  }
  return "unknown";
}

namespace comm {

std::string formatRanks(const std::vector<int> &ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i)
      s += ",";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

std::string describeCall(int rank, const char *collective,
                         const std::vector<int> &group) {
  return "rank " + std::to_string(rank) + ": " + collective + " over group " +
         formatRanks(group);
}

std::string describeCount(size_t count, DType dtype) {
  return std::to_string(count) + " x " + toString(dtype);
}

uint64_t groupHash(const std::vector<int> &group) {
  uint64_t hash = 1469598103934665603ull;
  for (int r : group)
    hash = (hash ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  return hash;
}

int checkGroup(int rank, int size, const std::vector<int> &group,
               const char *collective) {
  std::string head = describeCall(rank, collective, group);
  if (group.empty())
    throw Error(head + ": the group is empty");
  std::set<int> seen;
  int position = -1;
  for (size_t i = 0; i < group.size(); ++i) {
    int r = group[i];
    if (r < 0 || r >= size)
      throw Error(head + ": the group names rank " + std::to_string(r) +
                  ", but ranks are 0.." + std::to_string(size - 1));
    if (!seen.insert(r).second)
      throw Error(head + ": the group names rank " + std::to_string(r) +
                  " twice");
    if (r == rank)
      position = static_cast<int>(i);
  }
  if (position < 0)
    throw Error(head + ": the group does not contain the calling rank");
  return position;
}

std::string formatPairs(const std::vector<std::pair<int, int>> &pairs) {
  std::string s = "[";
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i)
      s += ",";
    s += "(" + std::to_string(pairs[i].first) + "," +
         std::to_string(pairs[i].second) + ")";
  }
  return s + "]";
}

std::pair<int, int>
checkPermutePairs(const std::string &head,
                  const std::vector<std::pair<int, int>> &pairs,
                  int groupSize, int position) {
  std::set<int> sources, targets;
  int from = -1, to = -1;
  for (auto [s, t] : pairs) {
    std::string pair =
        "pair (" + std::to_string(s) + "," + std::to_string(t) + ")";
    if (s < 0 || s >= groupSize || t < 0 || t >= groupSize)
      throw Error(head + ": " + pair + " names a position outside [0, " +
                  std::to_string(groupSize) + ")");
    if (!sources.insert(s).second)
      throw Error(head + ": " + pair + " repeats source " + std::to_string(s));
    if (!targets.insert(t).second)
      throw Error(head + ": " + pair + " repeats target " + std::to_string(t));
    if (t == position)
      from = s;
    if (s == position)
      to = t;
  }
  return {from, to};
}

PeerCall checkPeerCall(const CollectiveArgs &args, const CommGroup &group) {
  bool isSend = args.kind == CollectiveKind::Send;
  int rank = group.ranks()[group.position()];
  std::string who = "rank " + std::to_string(rank) + ": " +
                    (isSend ? "send" : "recv") + " with tag " +
                    std::to_string(args.tag) + (isSend ? " to" : " from") +
                    " position " + std::to_string(args.peer) + " of group " +
                    formatRanks(group.ranks());
  if (args.peer < 0 || args.peer >= group.size())
    throw Error(who + ": the group has positions 0.." +
                std::to_string(group.size() - 1));
  if (args.peer == group.position())
    throw Error(who + ": that is rank " + std::to_string(rank) +
                " itself, and a rank cannot send to itself");
  if ((args.tag < 0 || args.tag > kMaxTag) && args.tag != kRuntimeTag &&
      args.tag != kRuntimePeerTag)
    throw Error(who + ": tags are 0.." + std::to_string(kMaxTag));
  (void)sizeOf(args.dtype); // throws on a dtype out of the enum
  int peerRank = group.ranks()[args.peer];
  return {"rank " + std::to_string(rank) + ": " + (isSend ? "send" : "recv") +
              " of " + describeCount(args.count, args.dtype) +
              (isSend ? " to rank " : " from rank ") +
              std::to_string(peerRank) + " with tag " +
              std::to_string(args.tag),
          peerRank, args.tag};
}

std::string peerProgress(bool isSend, int tag, int rank, uint64_t theirs,
                         uint64_t number) {
  const char *what = isSend ? "receives" : "sends";
  return "it had posted " + std::to_string(theirs) + " " + what +
         " with tag " + std::to_string(tag) + (isSend ? " from" : " to") +
         " rank " + std::to_string(rank) + ", and this " +
         (isSend ? "send" : "receive") + " is number " +
         std::to_string(number);
}

std::string peerMismatch(const std::string &head, size_t sentCount,
                         DType sentType, int sender) {
  return head + " does not match the " + describeCount(sentCount, sentType) +
         " that rank " + std::to_string(sender) + " sent";
}

// Bit patterns through memcpy: no aliasing games.
static uint32_t bitsOf(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof w);
  return w;
}
static float floatOf(uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

// The two half conversions follow the FP16 library by Marat Dukhan (MIT):
// exact for normals and subnormals, round to nearest even, NaN stays NaN.
float halfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t twoW = w + w;
  const uint32_t expOffset = 0xE0u << 23;
  const float normalized = floatOf((twoW >> 4) + expOffset) * 0x1.0p-112f;
  const float denormalized = floatOf((twoW >> 17) | (126u << 23)) - 0.5f;
  const uint32_t denormalizedCutoff = 1u << 27;
  return floatOf(sign | (twoW < denormalizedCutoff ? bitsOf(denormalized)
                                                   : bitsOf(normalized)));
}

uint16_t floatToHalf(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = bitsOf(f);
  const uint32_t shl1W = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1W & 0xFF000000u;
  if (bias < 0x71000000u)
    bias = 0x71000000u;
  base = floatOf((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bitsOf(base);
  const uint32_t expBits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissaBits = bits & 0x00000FFFu;
  const uint32_t nonsign = expBits + mantissaBits;
  return static_cast<uint16_t>((sign >> 16) |
                               (shl1W > 0xFF000000u ? 0x7E00u : nonsign));
}

float bf16ToFloat(uint16_t h) {
  return floatOf(static_cast<uint32_t>(h) << 16);
}

uint16_t floatToBf16(float f) {
  uint32_t w = bitsOf(f);
  if ((w & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and a NaN
    return static_cast<uint16_t>((w >> 16) | 0x0040u);
  w += 0x7fffu + ((w >> 16) & 1u);
  return static_cast<uint16_t>(w >> 16);
}

namespace {

template <typename T> T addWrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T> T maxOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return (a > b || std::isnan(a)) ? a : b;
  else
    return a > b ? a : b;
}

template <typename T> T minOf(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return (a < b || std::isnan(a)) ? a : b;
  else
    return a < b ? a : b;
}

template <typename T>
void reduceTyped(T *dst, const T *src, size_t count, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    for (size_t i = 0; i < count; ++i)
      dst[i] = addWrapping(dst[i], src[i]);
    return;
  case ReduceOp::Max:
    for (size_t i = 0; i < count; ++i)
      dst[i] = maxOf(dst[i], src[i]);
    return;
  case ReduceOp::Min:
    for (size_t i = 0; i < count; ++i)
      dst[i] = minOf(dst[i], src[i]);
    return;
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce16(uint16_t *dst, const uint16_t *src, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    float a = ToFloat(dst[i]), b = ToFloat(src[i]);
    float r = op == ReduceOp::Sum   ? a + b
              : op == ReduceOp::Max ? maxOf(a, b)
                                    : minOf(a, b);
    dst[i] = FromFloat(r);
  }
}

} // namespace

void reduceInto(void *dst, const void *src, size_t count, DType dtype,
                ReduceOp op) {
  switch (dtype) {
  case DType::F32:
    return reduceTyped(static_cast<float *>(dst),
                       static_cast<const float *>(src), count, op);
  case DType::F64:
    return reduceTyped(static_cast<double *>(dst),
                       static_cast<const double *>(src), count, op);
  case DType::I32:
    return reduceTyped(static_cast<int32_t *>(dst),
                       static_cast<const int32_t *>(src), count, op);
  case DType::I64:
    return reduceTyped(static_cast<int64_t *>(dst),
                       static_cast<const int64_t *>(src), count, op);
  case DType::F16:
    return reduce16<halfToFloat, floatToHalf>(
        static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(src), count,
        op);
  case DType::BF16:
    return reduce16<bf16ToFloat, floatToBf16>(
        static_cast<uint16_t *>(dst), static_cast<const uint16_t *>(src), count,
        op);
  }
}

} // namespace comm
} // namespace partita::runtime
