//===- PipelineExchangeTest.cpp - generated schedules over local sends ----===//
//
// Runs generated pipeline action lists (makeSchedule) on local ranks, one
// thread per pipeline rank, with the stages' compute replaced by a formula:
// every SEND_* is a blocking send of that stage's tagged buffer to its peer,
// every RECV_* a blocking receive, and a forward or backward checks that the
// input it received is the one of its own microbatch. Local sends are
// rendezvous, the validator's model, so a validated set must finish without
// a deadlock and the set the validator rejects must time out naming a send.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"
#include "partita/runtime/PipelineSchedule.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <numeric>

using namespace partita::runtime;
using namespace partita::runtime::pipeline;
using namespace std::chrono_literals;

namespace {

enum Direction { kActivation = 0, kGradient = 1 };

/// The tag of the messages `stage` sends in `direction`: one per direction
/// and sending stage, so a tag's messages arrive in the sender's microbatch
/// order.
int tagOf(Direction direction, int stage) { return 2 * stage + direction; }

/// The message `stage` sends in `direction` for `microbatch`: a length that
/// differs per stage and direction (a receive of another stage's message
/// fails on its size) and values that name all three.
std::vector<int32_t> messageOf(Direction direction, int stage,
                               int microbatch) {
  std::vector<int32_t> v(50 + 2 * stage + direction);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = direction * 10000000 + stage * 100000 + microbatch * 100 +
           static_cast<int32_t>(i);
  return v;
}

/// What one rank saw while walking its list.
struct Walk {
  int received = 0, sent = 0, computed = 0;
  std::vector<std::string> wrong; // receives with another microbatch's data
};

/// Walks rank `c.rank()`'s list of `schedule`, addressing peers as
/// positions in the pipeline group (every rank, in order).
Walk walk(Communicator &c, const Schedule &schedule) {
  int r = c.rank();
  std::vector<int> group(schedule.ranks);
  std::iota(group.begin(), group.end(), 0);
  Walk w;
  // Inputs received per (direction, stage, microbatch), until computed on.
  std::map<std::tuple<int, int, int>, std::vector<int32_t>> inbox;
  int last = schedule.ranks * schedule.chunks - 1;
  for (const Action &a : schedule.actions[r]) {
    int stage = stageOf(schedule, r, a), mb = a.microbatch;
    // Whether the input this compute consumed came from its own microbatch.
    auto consume = [&](Direction d, int from) {
      auto it = inbox.find({d, from, mb});
      if (it == inbox.end()) {
        w.wrong.push_back(describe(a) + ": its input was never received");
        return;
      }
      if (it->second != messageOf(d, from, mb))
        w.wrong.push_back(describe(a) + ": its input is not microbatch " +
                          std::to_string(mb) + "'s");
      inbox.erase(it);
    };
    switch (a.kind) {
    case ActionKind::Forward:
      if (stage > 0)
        consume(kActivation, stage - 1);
      ++w.computed;
      break;
    case ActionKind::Backward:
    case ActionKind::BackwardInput:
      if (stage < last)
        consume(kGradient, stage + 1);
      ++w.computed;
      break;
    case ActionKind::BackwardWeight:
      ++w.computed;
      break;
    case ActionKind::SendActivation:
    case ActionKind::SendGradient: {
      Direction d =
          a.kind == ActionKind::SendActivation ? kActivation : kGradient;
      std::vector<int32_t> out = messageOf(d, stage, mb);
      c.send(out.data(), out.size(), DType::I32, peerRank(schedule, r, a),
             tagOf(d, stage), group);
      ++w.sent;
      break;
    }
    case ActionKind::RecvActivation:
    case ActionKind::RecvGradient: {
      Direction d =
          a.kind == ActionKind::RecvActivation ? kActivation : kGradient;
      int from = d == kActivation ? stage - 1 : stage + 1;
      // The size this stage expects from its peer: a message of another
      // stage or direction is refused by the communicator.
      std::vector<int32_t> in(messageOf(d, from, mb).size(), -1);
      c.recv(in.data(), in.size(), DType::I32, peerRank(schedule, r, a),
             tagOf(d, from), group);
      inbox[{d, from, mb}] = std::move(in);
      ++w.received;
      break;
    }
    case ActionKind::ReduceGradients:
    case ActionKind::Optimizer:
      break;
    }
  }
  if (!inbox.empty())
    w.wrong.push_back(std::to_string(inbox.size()) +
                      " received inputs were never used");
  return w;
}

/// Runs `schedule` on its ranks; fails the test on a wrong input or when
/// the totals differ from what the sizes imply.
void runSchedule(const Schedule &schedule) {
  std::string name = schedule.kind + " p=" + std::to_string(schedule.ranks) +
                     " m=" + std::to_string(schedule.microbatches) +
                     " v=" + std::to_string(schedule.chunks);
  ASSERT_FALSE(validate(schedule).has_value()) << name;
  std::vector<Walk> walks(schedule.ranks);
  runLocalRanks(
      schedule.ranks,
      [&](Communicator &c) { walks[c.rank()] = walk(c, schedule); }, 20s);
  int stages = schedule.ranks * schedule.chunks, m = schedule.microbatches;
  int sent = 0, received = 0;
  for (int r = 0; r < schedule.ranks; ++r) {
    for (const std::string &w : walks[r].wrong)
      ADD_FAILURE() << name << " rank " << r << ": " << w;
    sent += walks[r].sent;
    received += walks[r].received;
  }
  // Each boundary between stages carries m activations and m gradients.
  EXPECT_EQ(sent, 2 * (stages - 1) * m) << name;
  EXPECT_EQ(received, sent) << name;
}

// Tests 1F1B's lists for 2 to 4 ranks and several microbatch counts: every
// receive gets its microbatch's activation or gradient and nothing
// deadlocks with rendezvous sends.
TEST(PipelineExchange, OneFOneBOverLocalRanks) {
  for (int p = 2; p <= 4; ++p)
    for (int m : {1, 2, p, 2 * p + 1})
      runSchedule(makeSchedule("1f1b", p, m));
}

// Tests the other generated schedules the same way: GPipe, zero-bubble H1
// (B and W split) and interleaved 1F1B with two chunks per rank.
TEST(PipelineExchange, OtherSchedulesOverLocalRanks) {
  for (int p = 2; p <= 4; ++p) {
    for (int m : {1, p + 1}) {
      runSchedule(makeSchedule("gpipe", p, m));
      runSchedule(makeSchedule("zb-h1", p, m));
    }
    runSchedule(makeSchedule("interleaved", p, 2 * p, 2));
  }
}

// Tests that the naive 1F1B order on two ranks (each rank sends before it
// receives), which the validator rejects as deadlocking under rendezvous
// sends, does deadlock on local ranks: a send times out naming its rank,
// peer and tag instead of hanging.
TEST(PipelineExchange, SetTheValidatorRejectsTimesOut) {
  // 1F1B for 2 ranks and 2 microbatches with rank 0 sending activation 1
  // before it receives gradient 0 and rank 1 sending gradient 0 before it
  // receives activation 1.
  const char *text = "0 F 0\n0 SA 0\n0 F 1\n0 SA 1\n0 RG 0\n0 B 0\n"
                     "0 RG 1\n0 B 1\n0 REDUCE\n0 OPT\n"
                     "1 RA 0\n1 F 0\n1 B 0\n1 SG 0\n1 RA 1\n1 F 1\n"
                     "1 B 1\n1 SG 1\n1 REDUCE\n1 OPT\n";
  Schedule schedule = parseScheduleText(text, "naive.txt", 2, 2);
  std::optional<ScheduleError> error = validate(schedule);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("deadlock under rendezvous sends"),
            std::string::npos)
      << toString(*error);
  try {
    runLocalRanks(
        2, [&](Communicator &c) { walk(c, schedule); }, 300ms);
    ADD_FAILURE() << "no deadlock";
  } catch (const Error &e) {
    // Rank 0 sends activation 1 (stage 0's activations: tag 0) while rank 1
    // sends gradient 0 (stage 1's gradients: tag 3); either times out first.
    std::string what = e.what();
    EXPECT_TRUE(what == "rank 0: send of 50 x i32 to rank 1 with tag 0 timed "
                        "out after 300 ms waiting for rank 1 (it had posted 1 "
                        "receives with tag 0 from rank 0, and this send is "
                        "number 2)" ||
                what == "rank 1: send of 53 x i32 to rank 0 with tag 3 timed "
                        "out after 300 ms waiting for rank 0 (it had posted 0 "
                        "receives with tag 3 from rank 1, and this send is "
                        "number 1)")
        << what;
  }
}

} // namespace
