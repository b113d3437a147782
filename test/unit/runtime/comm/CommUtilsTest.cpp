//===- CommUtilsTest.cpp - group checks, conversions and reductions -------===//
//
// Expected bit patterns of f16 and bf16 are the IEEE encodings worked out by
// hand (sign, biased exponent, mantissa), not outputs of the code.
//
//===----------------------------------------------------------------------===//

#include "CommUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::comm;

namespace {

TEST(CommUtils, FormatsRanksWithoutSpaces) {
  EXPECT_EQ(formatRanks({}), "[]");
  EXPECT_EQ(formatRanks({2}), "[2]");
  EXPECT_EQ(formatRanks({0, 1, 2, 3}), "[0,1,2,3]");
  EXPECT_EQ(describeCall(3, "all_reduce", {0, 1, 2, 3}),
            "rank 3: all_reduce over group [0,1,2,3]");
  EXPECT_EQ(describeCount(4, DType::BF16), "4 x bf16");
}

TEST(CommUtils, GroupPositionIsTheRanksIndexInTheList) {
  EXPECT_EQ(checkGroup(0, 4, {0, 1, 2, 3}, "all_reduce"), 0);
  EXPECT_EQ(checkGroup(1, 4, {3, 1, 0}, "all_gather"), 1);
  EXPECT_EQ(checkGroup(3, 4, {3}, "barrier"), 0);
}

// Runs `f`, expecting an Error whose message is exactly `message`.
template <typename F> void expectError(F f, const std::string &message) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(CommUtils, RejectsBadGroupsNamingTheProblem) {
  expectError([] { checkGroup(0, 4, {}, "all_reduce"); },
              "rank 0: all_reduce over group []: the group is empty");
  expectError(
      [] {
        checkGroup(0, 4, {0, 4}, "all_gather");
      },
      "rank 0: all_gather over group [0,4]: the group names rank 4, "
      "but ranks are 0..3");
  expectError(
      [] {
        checkGroup(0, 4, {0, -1}, "all_gather");
      },
      "rank 0: all_gather over group [0,-1]: the group names rank -1, "
      "but ranks are 0..3");
  expectError(
      [] {
        checkGroup(1, 4, {1, 2, 1}, "barrier");
      },
      "rank 1: barrier over group [1,2,1]: the group names rank 1 "
      "twice");
  expectError(
      [] {
        checkGroup(0, 4, {1, 2}, "all_to_all");
      },
      "rank 0: all_to_all over group [1,2]: the group does not "
      "contain the calling rank");
}

TEST(CommUtils, PeerCallNamesThePeersRankAndTheTag) {
  CommGroup group({3, 1, 0}, 1);
  CollectiveArgs args{CollectiveKind::Send, nullptr, nullptr, 4, DType::F32};
  args.peer = 0;
  args.tag = 12;
  PeerCall call = checkPeerCall(args, group);
  EXPECT_EQ(call.peerRank, 3);
  EXPECT_EQ(call.head, "rank 1: send of 4 x f32 to rank 3 with tag 12");
  args.kind = CollectiveKind::Recv;
  args.peer = 2;
  args.tag = kMaxTag;
  call = checkPeerCall(args, group);
  EXPECT_EQ(call.peerRank, 0);
  EXPECT_EQ(call.head, "rank 1: recv of 4 x f32 from rank 0 with tag 32764");
  args.tag = kRuntimeTag; // the runtime's own
  EXPECT_EQ(checkPeerCall(args, group).peerRank, 0);
  args.tag = kRuntimePeerTag;
  EXPECT_EQ(checkPeerCall(args, group).peerRank, 0);
  args.tag = kRuntimePeerTag + 1;
  expectError([&] { checkPeerCall(args, group); },
              "rank 1: recv with tag 32767 from position 2 of group [3,1,0]: "
              "tags are 0..32764");
  EXPECT_EQ(peerMismatch(call.head, 8, DType::I32, 0),
            "rank 1: recv of 4 x f32 from rank 0 with tag 32764 does not "
            "match the 8 x i32 that rank 0 sent");
  EXPECT_EQ(peerProgress(/*isSend=*/false, 9, 1, 0, 1),
            "it had posted 0 sends with tag 9 to rank 1, and this receive is "
            "number 1");
  EXPECT_EQ(peerProgress(/*isSend=*/true, 4, 0, 2, 3),
            "it had posted 2 receives with tag 4 from rank 0, and this send is "
            "number 3");
  EXPECT_STREQ(toString(CollectiveKind::Send), "send");
  EXPECT_STREQ(toString(CollectiveKind::Recv), "recv");
}

TEST(CommUtils, HalfEncodings) {
  // 1.0 = 0 01111 0000000000; 65504 (largest) = 0 11110 1111111111;
  // 2^-24 (smallest subnormal) = 0x0001; -2 = 1 10000 0...
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  // Overflow goes to infinity (0 11111 0...).
  EXPECT_EQ(floatToHalf(1e6f), 0x7c00);
  // Ties go to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  // 0 01101 0101010101: 2^-2 * (1 + 341 / 1024).
  EXPECT_EQ(halfToFloat(0x3555), 0.25f + 341 * std::ldexp(1.0f, -12));
  EXPECT_TRUE(std::isinf(halfToFloat(0x7c00)));
}

TEST(CommUtils, Bf16Encodings) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

TEST(CommUtils, ReduceIntoWrapsIntegers) {
  int32_t a[2] = {std::numeric_limits<int32_t>::max(), -5};
  int32_t b[2] = {1, 7};
  reduceInto(a, b, 2, DType::I32, ReduceOp::Sum);
  EXPECT_EQ(a[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(a[1], 2);
  int64_t c[2] = {-3, 9}, d[2] = {4, -10};
  reduceInto(c, d, 2, DType::I64, ReduceOp::Min);
  EXPECT_EQ(c[0], -3);
  EXPECT_EQ(c[1], -10);
}

TEST(CommUtils, ReduceIntoMaxAndMinPropagateNaN) {
  float a[3] = {1.0f, NAN, 2.0f}, b[3] = {NAN, 1.0f, 3.0f};
  reduceInto(a, b, 3, DType::F32, ReduceOp::Max);
  EXPECT_TRUE(std::isnan(a[0]));
  EXPECT_TRUE(std::isnan(a[1]));
  EXPECT_EQ(a[2], 3.0f);
  double c[2] = {NAN, 2.0}, d[2] = {0.0, 1.0};
  reduceInto(c, d, 2, DType::F64, ReduceOp::Min);
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], 1.0);
}

TEST(CommUtils, ReduceIntoRoundsHalfAfterEveryStep) {
  // 2048 + 1 is not an f16 (spacing 2 above 2048): ties to even, 2048.
  uint16_t a = floatToHalf(2048.0f), b = floatToHalf(1.0f);
  reduceInto(&a, &b, 1, DType::F16, ReduceOp::Sum);
  EXPECT_EQ(halfToFloat(a), 2048.0f);
  // 256 + 1 in bf16 (spacing 2 above 256): ties to even, 256; + 3 -> 259,
  // halfway between 258 (odd mantissa) and 260: 260.
  uint16_t c = floatToBf16(256.0f), one = floatToBf16(1.0f),
           three = floatToBf16(3.0f);
  reduceInto(&c, &one, 1, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(bf16ToFloat(c), 256.0f);
  reduceInto(&c, &three, 1, DType::BF16, ReduceOp::Sum);
  EXPECT_EQ(bf16ToFloat(c), 260.0f);
}

} // namespace
