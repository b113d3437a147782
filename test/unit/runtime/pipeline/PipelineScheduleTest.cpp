//===- PipelineScheduleTest.cpp - pipeline schedules: lists, proofs, bubbles ===//
//
// The unit-cost bubble is defined as in the published analyses (GPipe,
// Megatron-LM, zero bubble): the idle time of every rank, summed, over
// ranks * makespan, where the makespan is the time the slowest rank ends
// and a rank's busy time is the time it spends in F, B, W and full
// backwards (ActionCosts defaults: F = B = W = 1, full backward = 2,
// communication free). With these,
//   gpipe, 1f1b     (p - 1) / (m + p - 1)          (any m)
//   interleaved     (p - 1) / (v m + p - 1)         (m a multiple of p)
// since each rank computes m (F + B) and waits (p - 1) (F + B), and the
// interleaved rank's wait shrinks to (p - 1) (F + B) of a chunk, 1/v of a
// stage, while it computes v m chunk microbatches.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/PipelineSchedule.h"
#include "partita/runtime/Tensor.h"
#include "runtime/plan/plan.pb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>

using namespace partita::runtime;
using namespace partita::runtime::pipeline;

namespace {

const int kRanks[] = {1, 2, 3, 4, 8};

std::vector<int> microbatchCounts(int p) { return {1, 2, p, 2 * p + 1}; }

Action A(ActionKind kind, int microbatch, int chunk = 0) {
  Action a;
  a.kind = kind;
  a.microbatch = microbatch;
  a.chunk = chunk;
  return a;
}

bool sameActions(const Schedule &x, const Schedule &y) {
  if (x.actions.size() != y.actions.size())
    return false;
  for (size_t r = 0; r < x.actions.size(); ++r) {
    if (x.actions[r].size() != y.actions[r].size())
      return false;
    for (size_t i = 0; i < x.actions[r].size(); ++i) {
      const Action &a = x.actions[r][i], &b = y.actions[r][i];
      if (a.kind != b.kind || a.chunk != b.chunk ||
          (a.kind != ActionKind::ReduceGradients &&
           a.kind != ActionKind::Optimizer && a.microbatch != b.microbatch))
        return false;
    }
  }
  return true;
}

int indexOf(const std::vector<Action> &list, ActionKind kind, int microbatch,
            int chunk = 0) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == kind && list[i].microbatch == microbatch &&
        list[i].chunk == chunk)
      return static_cast<int>(i);
  return -1;
}

std::string errorOf(const Schedule &s) {
  std::optional<ScheduleError> e = validate(s);
  return e ? toString(*e) : "valid";
}

// The 2-rank, 2-microbatch set with the naive 1F1B order: each rank sends
// before it receives, so rank 0 sends activation 1 while rank 1 sends
// gradient 0. Each pair's messages are in matching order, so sends that
// never block (buffered) finish it; rendezvous sends deadlock.
Schedule naiveOneFOneB() {
  using K = ActionKind;
  Schedule s;
  s.kind = "file";
  s.ranks = 2;
  s.microbatches = 2;
  s.actions = {
      {A(K::Forward, 0), A(K::SendActivation, 0), A(K::Forward, 1),
       A(K::SendActivation, 1), A(K::RecvGradient, 0), A(K::Backward, 0),
       A(K::RecvGradient, 1), A(K::Backward, 1), A(K::ReduceGradients, 0),
       A(K::Optimizer, 0)},
      {A(K::RecvActivation, 0), A(K::Forward, 0), A(K::Backward, 0),
       A(K::SendGradient, 0), A(K::RecvActivation, 1), A(K::Forward, 1),
       A(K::Backward, 1), A(K::SendGradient, 1), A(K::ReduceGradients, 0),
       A(K::Optimizer, 0)}};
  return s;
}

} // namespace

// Tests that every named schedule is valid for every size the issue names,
// and that the stage ends send and receive only what they must.
TEST(PipelineSchedule, EveryScheduleIsValid) {
  for (const char *kind : {"gpipe", "1f1b", "zb-h1"})
    for (int p : kRanks)
      for (int m : microbatchCounts(p)) {
        SCOPED_TRACE(std::string(kind) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        Schedule s = makeSchedule(kind, p, m);
        EXPECT_EQ(errorOf(s), "valid");
        ASSERT_EQ(s.actions.size(), static_cast<size_t>(p));
        for (const Action &a : s.actions[0])
          EXPECT_NE(a.kind, ActionKind::RecvActivation);
        for (const Action &a : s.actions[p - 1])
          EXPECT_NE(a.kind, ActionKind::SendActivation);
        for (const std::vector<Action> &list : s.actions) {
          ASSERT_GE(list.size(), 2u);
          EXPECT_EQ(list[list.size() - 2].kind, ActionKind::ReduceGradients);
          EXPECT_EQ(list.back().kind, ActionKind::Optimizer);
        }
      }
}

// Tests that interleaved is valid where Megatron-LM's rule allows it (m a
// multiple of p, at least 2 ranks for 2 chunks) and refused otherwise.
TEST(PipelineSchedule, InterleavedValidOrRefused) {
  for (int p : kRanks)
    for (int m : microbatchCounts(p))
      for (int v : {1, 2, 3}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " v=" + std::to_string(v));
        bool allowed = v == 1 || (p >= 2 && m % p == 0);
        if (!allowed) {
          EXPECT_THROW(makeSchedule("interleaved", p, m, v), Error);
          continue;
        }
        Schedule s = makeSchedule("interleaved", p, m, v);
        EXPECT_EQ(errorOf(s), "valid");
        EXPECT_EQ(s.chunks, v);
      }
  try {
    makeSchedule("interleaved", 4, 6, 2);
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the ranks"),
              std::string::npos)
        << e.what();
  }
  try {
    makeSchedule("interleaved", 1, 4, 2);
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("at least 2 ranks"),
              std::string::npos)
        << e.what();
  }
}

// Tests that one rank is plain gradient accumulation: F0 B0 F1 B1 ...
// then the reduction and the optimizer step.
TEST(PipelineSchedule, OneRankIsGradientAccumulation) {
  using K = ActionKind;
  for (const char *kind : {"1f1b", "interleaved"}) {
    Schedule s = makeSchedule(kind, 1, 3);
    std::vector<Action> want = {A(K::Forward, 0), A(K::Backward, 0),
                                A(K::Forward, 1), A(K::Backward, 1),
                                A(K::Forward, 2), A(K::Backward, 2),
                                A(K::ReduceGradients, 0), A(K::Optimizer, 0)};
    Schedule expected = s;
    expected.actions = {want};
    EXPECT_TRUE(sameActions(s, expected)) << kind << "\n" << toText(s);
  }
  Schedule zb = makeSchedule("zb-h1", 1, 2);
  using K = ActionKind;
  Schedule expected = zb;
  expected.actions = {{A(K::Forward, 0), A(K::BackwardInput, 0),
                       A(K::BackwardWeight, 0), A(K::Forward, 1),
                       A(K::BackwardInput, 1), A(K::BackwardWeight, 1),
                       A(K::ReduceGradients, 0), A(K::Optimizer, 0)}};
  EXPECT_TRUE(sameActions(zb, expected)) << toText(zb);
}

// Tests that backwards run in microbatch order on every stage, so
// gradients accumulate in the order of a one-rank run.
TEST(PipelineSchedule, BackwardsInMicrobatchOrder) {
  for (const char *kind : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    Schedule s = makeSchedule(kind, 4, 8, kind == std::string("interleaved") ? 2 : 1);
    for (const std::vector<Action> &list : s.actions)
      for (int c = 0; c < s.chunks; ++c) {
        int last = -1;
        for (const Action &a : list)
          if (a.chunk == c && (a.kind == ActionKind::Backward ||
                               a.kind == ActionKind::BackwardWeight)) {
            EXPECT_EQ(a.microbatch, last + 1) << kind;
            last = a.microbatch;
          }
      }
  }
}

// Tests the stage and peer of an action under the interleaved layout:
// chunk c of rank r is stage c R + r, so rank 3's chunk 0 (stage 3) sends
// its activation to stage 4, chunk 1 of rank 0.
TEST(PipelineSchedule, StagesAndPeers) {
  Schedule s = makeSchedule("interleaved", 4, 4, 2);
  EXPECT_EQ(stageOf(s, 3, A(ActionKind::Forward, 0, 1)), 7);
  EXPECT_EQ(peerRank(s, 3, A(ActionKind::SendActivation, 0, 0)), 0);
  EXPECT_EQ(peerRank(s, 0, A(ActionKind::RecvActivation, 0, 1)), 3);
  EXPECT_EQ(peerRank(s, 0, A(ActionKind::SendGradient, 0, 1)), 3);
  EXPECT_EQ(peerRank(s, 2, A(ActionKind::RecvGradient, 0, 0)), 3);
}

// Tests the plan and file round trips.
TEST(PipelineSchedule, RoundTrips) {
  for (const char *kind : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    Schedule s =
        makeSchedule(kind, 4, 8, kind == std::string("interleaved") ? 3 : 1);
    partita::plan::PipelineSchedule proto;
    toProto(s, proto);
    EXPECT_EQ(proto.rank_actions_size(), 4);
    Schedule back = fromProto(proto);
    EXPECT_EQ(back.kind, s.kind);
    EXPECT_EQ(back.chunks, s.chunks);
    EXPECT_EQ(back.microbatches, 8);
    EXPECT_TRUE(sameActions(s, back)) << kind;
    Schedule text = parseScheduleText(toText(s), "t", 4, 8, s.chunks);
    EXPECT_EQ(text.kind, "file");
    EXPECT_TRUE(sameActions(s, text)) << kind;
  }
}

// Tests that fromProto refuses a plan whose lists do not fit its sizes.
TEST(PipelineSchedule, FromProtoErrors) {
  partita::plan::PipelineSchedule proto;
  toProto(makeSchedule("1f1b", 2, 2), proto);
  partita::plan::PipelineSchedule fewer = proto;
  fewer.mutable_rank_actions()->RemoveLast();
  EXPECT_THROW(fromProto(fewer), Error);
  partita::plan::PipelineSchedule badKind = proto;
  badKind.mutable_rank_actions(1)->mutable_actions(2)->set_kind(
      static_cast<partita::plan::PipelineAction::Kind>(42));
  try {
    fromProto(badKind);
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 step 2: unknown action kind 42"),
              std::string::npos)
        << e.what();
  }
  partita::plan::PipelineSchedule zero = proto;
  zero.set_microbatches(0);
  EXPECT_THROW(fromProto(zero), Error);
}

// Tests that makeSchedule names what is wrong with its arguments.
TEST(PipelineSchedule, MakeScheduleErrors) {
  auto message = [](const std::string &kind, int p, int m, int v) {
    try {
      makeSchedule(kind, p, m, v);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("2f2b", 2, 2, 1).find("unknown pipeline schedule '2f2b'"),
            std::string::npos);
  EXPECT_NE(message("1f1b", 0, 2, 1).find("at least 1 rank"), std::string::npos);
  EXPECT_NE(message("1f1b", 2, 0, 1).find("at least 1 microbatch"),
            std::string::npos);
  EXPECT_NE(message("interleaved", 2, 2, 0).find("at least 1 chunk"),
            std::string::npos);
  EXPECT_NE(message("1f1b", 2, 2, 2).find("one chunk per rank"),
            std::string::npos);
}

// Tests that a missing receive is named at the forward that needs it.
TEST(PipelineSchedule, RejectsMissingReceive) {
  Schedule s = makeSchedule("1f1b", 2, 2);
  std::vector<Action> &list = s.actions[1];
  int recv = indexOf(list, ActionKind::RecvActivation, 1);
  ASSERT_GE(recv, 0);
  list.erase(list.begin() + recv);
  int forward = indexOf(list, ActionKind::Forward, 1);
  std::optional<ScheduleError> e = validate(s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->step, forward);
  EXPECT_NE(e->message.find("FORWARD of microbatch 1 (chunk 0) has no "
                            "RECV_ACTIVATION"),
            std::string::npos)
      << toString(*e);
}

// Tests that W before its B is named at the W.
TEST(PipelineSchedule, RejectsWeightGradientBeforeInputGradient) {
  Schedule s = makeSchedule("zb-h1", 2, 2);
  std::vector<Action> &list = s.actions[0];
  int b = indexOf(list, ActionKind::BackwardInput, 1);
  int w = indexOf(list, ActionKind::BackwardWeight, 1);
  ASSERT_LT(b, w);
  std::swap(list[b], list[w]);
  std::optional<ScheduleError> e = validate(s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->step, b);
  EXPECT_NE(e->message.find("BACKWARD_WEIGHT of microbatch 1 (chunk 0) "
                            "before its BACKWARD_INPUT (step " +
                            std::to_string(w) + ")"),
            std::string::npos)
      << toString(*e);
}

// Tests that a send order that deadlocks only with rendezvous sends is
// rejected, naming the blocked rank, its step and the rank it waits for.
TEST(PipelineSchedule, RejectsRendezvousDeadlock) {
  Schedule s = naiveOneFOneB();
  std::optional<ScheduleError> e = validate(s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->step, 3); // SEND_ACTIVATION of microbatch 1
  EXPECT_NE(e->message.find("deadlock under rendezvous sends: SEND_ACTIVATION "
                            "of microbatch 1 (chunk 0) waits for rank 1, "
                            "which is blocked at its step 3, SEND_GRADIENT "
                            "of microbatch 0 (chunk 0) to rank 0"),
            std::string::npos)
      << toString(*e);
  // Receiving activation 1 before sending gradient 0 resolves it.
  std::swap(s.actions[1][3], s.actions[1][4]);
  EXPECT_EQ(errorOf(s), "valid");
}

// Tests the other rejections: order, duplicates, ends of the pipeline,
// reduction and optimizer, sizes, a send to itself.
TEST(PipelineSchedule, RejectsOtherBrokenSets) {
  using K = ActionKind;
  {
    // Two receives swapped: the messages arrive out of order.
    Schedule s = makeSchedule("gpipe", 2, 2);
    std::vector<Action> &list = s.actions[1];
    int r0 = indexOf(list, K::RecvActivation, 0);
    int r1 = indexOf(list, K::RecvActivation, 1);
    int f0 = indexOf(list, K::Forward, 0);
    // Receive 1 first, then 0, then both forwards.
    list.erase(list.begin() + r1);
    list.insert(list.begin() + r0, A(K::RecvActivation, 1));
    (void)f0;
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->rank, 1);
    EXPECT_NE(e->message.find("RECV_ACTIVATION"), std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.actions[1].push_back(A(K::SendActivation, 0));
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->rank, 1);
    EXPECT_EQ(e->step, static_cast<int>(s.actions[1].size()) - 1);
    EXPECT_NE(e->message.find("on the last stage (stage 1): there is no next "
                              "stage"),
              std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.actions[0].insert(s.actions[0].begin() + 1, A(K::Forward, 0));
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->rank, 0);
    EXPECT_EQ(e->step, 1);
    EXPECT_NE(e->message.find("a second FORWARD of microbatch 0 (chunk 0); "
                              "the first is step 0"),
              std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.actions[0].pop_back(); // the optimizer
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->rank, 0);
    EXPECT_EQ(e->step, static_cast<int>(s.actions[0].size()));
    EXPECT_NE(e->message.find("no OPTIMIZER (chunk 0)"), std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    std::vector<Action> &list = s.actions[0];
    Action reduce = list[list.size() - 2];
    list.erase(list.end() - 2);
    list.insert(list.begin(), reduce);
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->step, 0);
    EXPECT_NE(e->message.find("REDUCE_GRADIENTS (chunk 0) before the chunk's "
                              "last backward"),
              std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.actions[1].pop_back();
    s.actions[1].push_back(A(K::Optimizer, 0, 1));
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_NE(e->message.find("chunk out of range [0, 1)"), std::string::npos)
        << toString(*e);
  }
  {
    // Two chunks on one rank: stage 0 would send to itself.
    Schedule s;
    s.ranks = 1;
    s.chunks = 2;
    s.microbatches = 1;
    s.actions = {{A(K::Forward, 0, 0), A(K::SendActivation, 0, 0),
                  A(K::RecvActivation, 0, 1), A(K::Forward, 0, 1),
                  A(K::Backward, 0, 1), A(K::SendGradient, 0, 1),
                  A(K::RecvGradient, 0, 0), A(K::Backward, 0, 0)}};
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->step, 1);
    EXPECT_NE(e->message.find("a rendezvous send to itself never completes"),
              std::string::npos)
        << toString(*e);
  }
  {
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.actions.pop_back();
    EXPECT_NE(errorOf(s).find("1 action lists for 2 ranks"), std::string::npos);
  }
  {
    // Sizes the lists cannot fill are refused before anything is sized by
    // them.
    Schedule s = makeSchedule("1f1b", 2, 2);
    s.microbatches = 1 << 30;
    std::optional<ScheduleError> e = validate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->rank, 0);
    EXPECT_EQ(e->step, static_cast<int>(s.actions[0].size()));
    EXPECT_NE(e->message.find("fewer than the 2147483648 forwards and "
                              "backwards"),
              std::string::npos)
        << toString(*e);
  }
  EXPECT_THROW(makeSchedule("1f1b", 1024, 2048), Error);
  EXPECT_THROW(simulate(naiveOneFOneB()), Error);
}

// Tests the unit-cost bubbles against the published formulas (see the
// definition at the top of this file).
TEST(PipelineSchedule, BubbleMatchesPublishedFormulas) {
  for (int p : kRanks)
    for (int m : {1, 2, p, 2 * p, 2 * p + 1, 3 * p}) {
      double want = double(p - 1) / (m + p - 1);
      for (const char *kind : {"gpipe", "1f1b"}) {
        Simulation sim = simulate(makeSchedule(kind, p, m));
        EXPECT_NEAR(sim.bubbleFraction, want, 1e-12)
            << kind << " p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(sim.idleTime, 3.0 * p * (p - 1));
      }
      if (p < 2 || m % p != 0)
        continue;
      for (int v : {2, 3}) {
        double published = double(p - 1) / (v * m + p - 1);
        Schedule s = makeSchedule("interleaved", p, m, v);
        Simulation buffered = simulate(s, ActionCosts{}, SendMode::Buffered);
        EXPECT_NEAR(buffered.bubbleFraction, published, 1e-12)
            << "interleaved p=" << p << " m=" << m << " v=" << v;
        // Rendezvous sends reach it where the generator finds a meeting
        // time for every message (docs/pipeline.md); elsewhere one end
        // waits, so the bubble can only be larger.
        Simulation rendezvous = simulate(s);
        EXPECT_GE(rendezvous.bubbleFraction, published - 1e-12);
        if (p == 3 || p == 4 || m == p)
          EXPECT_NEAR(rendezvous.bubbleFraction, published, 1e-12)
              << "interleaved p=" << p << " m=" << m << " v=" << v;
      }
    }
}

// Tests that zb-h1 idles at most a third of 1f1b with F = B = W, for at
// least as many microbatches as ranks, and never more than 1f1b.
TEST(PipelineSchedule, ZeroBubbleIdlesAThirdOfOneFOneB) {
  for (int p : kRanks)
    for (int m : {1, 2, p, 2 * p, 2 * p + 1, 3 * p}) {
      double zb = simulate(makeSchedule("zb-h1", p, m)).idleTime;
      double base = simulate(makeSchedule("1f1b", p, m)).idleTime;
      EXPECT_LE(zb, base) << "p=" << p << " m=" << m;
      if (m >= p)
        EXPECT_LE(zb, base / 3 + 1e-9) << "p=" << p << " m=" << m;
    }
}

// Tests the peak in-flight microbatches (forward started, backward not
// ended) per stage: gpipe m, 1f1b min(m, p - s), zb-h1 at most 1f1b's, and
// interleaved per rank as Megatron-LM's warm-up makes it: its warm-up
// forwards plus one, 2 (p - r - 1) + (v - 1) p + 1, capped at v m (all of
// them when m = p).
TEST(PipelineSchedule, PeakInFlight) {
  for (int p : kRanks)
    for (int m : microbatchCounts(p)) {
      Simulation gpipe = simulate(makeSchedule("gpipe", p, m));
      Simulation onef = simulate(makeSchedule("1f1b", p, m));
      Simulation zb = simulate(makeSchedule("zb-h1", p, m));
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(gpipe.peakInFlight[s], m);
        EXPECT_EQ(onef.peakInFlight[s], std::min(m, p - s));
        EXPECT_LE(zb.peakInFlight[s], onef.peakInFlight[s]);
      }
      if (p < 2 || m % p != 0)
        continue;
      for (int v : {2, 3}) {
        Simulation inter = simulate(makeSchedule("interleaved", p, m, v));
        for (int r = 0; r < p; ++r) {
          int warmup = m == p ? v * m
                              : std::min(v * m, 2 * (p - r - 1) + (v - 1) * p);
          EXPECT_EQ(inter.peakInFlightPerRank[r], std::min(v * m, warmup + 1))
              << "p=" << p << " m=" << m << " v=" << v << " r=" << r;
        }
      }
    }
}

// Tests that the slots a rank holds (what the executor allocates) match the
// simulation's in-flight count for the stash, gpipe m and 1f1b min(m, p - s),
// and that messages wait in at most one slot each way for these lists
// (each send and receive sits next to its compute).
TEST(PipelineSchedule, SlotPeaks) {
  for (int p : kRanks)
    for (int m : microbatchCounts(p))
      for (const char *kind : {"gpipe", "1f1b"}) {
        Schedule sched = makeSchedule(kind, p, m);
        Simulation sim = simulate(sched);
        for (int r = 0; r < p; ++r) {
          SlotPeaks peaks = slotPeaks(sched, r);
          SCOPED_TRACE(std::string(kind) + " p=" + std::to_string(p) +
                       " m=" + std::to_string(m) + " r=" + std::to_string(r));
          EXPECT_EQ(peaks.of(SlotKind::Stash), sim.peakInFlight[r]);
          EXPECT_EQ(peaks.of(SlotKind::ActivationIn), r > 0 ? 1 : 0);
          EXPECT_EQ(peaks.of(SlotKind::GradientOut), r > 0 ? 1 : 0);
          EXPECT_EQ(peaks.of(SlotKind::ActivationOut), r + 1 < p ? 1 : 0);
          EXPECT_EQ(peaks.of(SlotKind::GradientIn), r + 1 < p ? 1 : 0);
        }
      }
  EXPECT_EQ(slotPeaks(makeSchedule("1f1b", 2, 2), 5).of(SlotKind::Stash), 0);
}

// Tests zb-h1's slots against 1f1b's: what the forward keeps for B (the
// stash) is held for at most as many microbatches as 1f1b's stash on the
// same rank; what it keeps for W (the weight stash, held until the
// deferred W) for at most as many as 1f1b's largest, rank 0's min(m, p)
// (zero-bubble H1's bound, arXiv 2401.10241: the later ranks defer W into
// the room the earlier ones use); B's values wait for W in at most r + 1
// slots on rank r (the list scheduler lets that many Ws wait); a full
// backward's lists hold no deferred values.
TEST(PipelineSchedule, ZeroBubbleSlotPeaks) {
  for (int p : kRanks)
    for (int m : microbatchCounts(p)) {
      Schedule zb = makeSchedule("zb-h1", p, m);
      Schedule onef = makeSchedule("1f1b", p, m);
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " r=" + std::to_string(r));
        SlotPeaks z = slotPeaks(zb, r), o = slotPeaks(onef, r);
        EXPECT_LE(z.of(SlotKind::Stash), o.of(SlotKind::Stash));
        EXPECT_LE(z.of(SlotKind::WeightStash), slotPeaks(onef, 0).of(SlotKind::Stash));
        EXPECT_EQ(slotPeaks(onef, 0).of(SlotKind::Stash), std::min(m, p));
        EXPECT_GE(z.of(SlotKind::Deferred), 1);
        EXPECT_LE(z.of(SlotKind::Deferred), r + 1);
        EXPECT_EQ(o.of(SlotKind::Deferred), 0);
        EXPECT_EQ(o.of(SlotKind::WeightStash), o.of(SlotKind::Stash));
      }
    }
}

// Tests zb-h1 with per-rank limits on the Ws it defers: a limit of 1 runs
// each W right after its B as one full backward (BACKWARD actions, no
// deferred slot, the rank's list 1f1b's), larger limits bound the deferred
// slots, and every limited list is valid and keeps 1f1b's stash.
TEST(PipelineSchedule, ZeroBubbleDeferLimits) {
  for (int p : kRanks)
    for (int m : microbatchCounts(p)) {
      Schedule onef = makeSchedule("1f1b", p, m);
      for (int limit = 1; limit <= p; ++limit) {
        std::vector<int> limits(p, limit);
        Schedule zb = makeZeroBubbleH1(p, m, limits); // validated inside
        for (int r = 0; r < p; ++r) {
          SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) +
                       " limit=" + std::to_string(limit) +
                       " r=" + std::to_string(r));
          SlotPeaks z = slotPeaks(zb, r);
          bool full = false, split = false;
          for (const Action &a : zb.actions[r]) {
            full |= a.kind == ActionKind::Backward;
            split |= a.kind == ActionKind::BackwardInput ||
                     a.kind == ActionKind::BackwardWeight;
          }
          EXPECT_NE(full, split);
          EXPECT_EQ(full, limit == 1 || r == 0);
          EXPECT_LE(z.of(SlotKind::Deferred), std::min(limit, r + 1));
          EXPECT_EQ(z.of(SlotKind::Stash), slotPeaks(onef, r).of(SlotKind::Stash));
        }
      }
    }
  EXPECT_THROW(makeZeroBubbleH1(0, 4, {}), Error);
}

// Tests zb-h1 under a memory limit on made-up stage sizes where a deferred
// W costs more than 1f1b's room: the default limit (1f1b's busiest stage)
// holds on every rank, the last rank defers fewer Ws than the published
// list's p, an unlimited list is the published one (but for rank 0's
// fused backward), and a limit below 1f1b's own leaves full backwards.
TEST(PipelineSchedule, ZeroBubbleUnderMemoryLimit) {
  const int p = 4, m = 8;
  StageMemory stage;
  stage.fused[int(SlotKind::Stash)] = 100;
  stage.fused[int(SlotKind::WeightStash)] = 60;
  stage.split = stage.fused;
  stage.split[int(SlotKind::Deferred)] = 80;
  stage.fusedArena = 50;
  stage.splitArena = 40;
  std::vector<StageMemory> memory(p, stage);
  Schedule onef = makeSchedule("1f1b", p, m);
  int64_t most = 0;
  for (int r = 0; r < p; ++r)
    most = std::max(most, activationBytes(onef, r, 0, memory[r]));
  EXPECT_EQ(most, 4 * 160 + 50); // rank 0: min(m, p) microbatches
  Schedule bounded = makeBoundedZeroBubbleH1(p, m, memory, -1);
  Schedule published = makeSchedule("zb-h1", p, m);
  bool fewer = false;
  for (int r = 0; r < p; ++r) {
    SCOPED_TRACE("r=" + std::to_string(r));
    EXPECT_LE(activationBytes(bounded, r, 0, memory[r]), most);
    fewer |= slotPeaks(bounded, r).of(SlotKind::Deferred) < slotPeaks(published, r).of(SlotKind::Deferred);
  }
  EXPECT_GT(activationBytes(published, p - 1, 0, memory[p - 1]), most);
  EXPECT_TRUE(fewer);
  EXPECT_LT(simulate(bounded).bubbleFraction, simulate(onef).bubbleFraction);
  Schedule unlimited =
      makeBoundedZeroBubbleH1(p, m, memory, std::numeric_limits<int64_t>::max());
  for (int r = 1; r < p; ++r)
    EXPECT_EQ(slotPeaks(unlimited, r).of(SlotKind::Deferred),
              slotPeaks(published, r).of(SlotKind::Deferred));
  Schedule tight = makeBoundedZeroBubbleH1(p, m, memory, 1);
  for (int r = 0; r < p; ++r)
    for (const Action &a : tight.actions[r])
      EXPECT_NE(a.kind, ActionKind::BackwardWeight);
  EXPECT_THROW(makeBoundedZeroBubbleH1(p, m, {}, -1), Error);
}

// Tests that the simulation takes other costs: with F = 2, B = 3, W = 1
// the 1f1b bubble is still (p - 1) / (m + p - 1), and a send cost shows up
// in the makespan.
TEST(PipelineSchedule, SimulationCosts) {
  ActionCosts costs;
  costs.forward = 2;
  costs.backwardInput = 3;
  costs.backwardWeight = 1;
  Simulation sim = simulate(makeSchedule("1f1b", 4, 8), costs);
  EXPECT_NEAR(sim.bubbleFraction, 3.0 / 11, 1e-12);
  EXPECT_DOUBLE_EQ(sim.makespan, 11 * 6.0);
  ActionCosts withSend;
  withSend.send = 0.5;
  EXPECT_GT(simulate(makeSchedule("1f1b", 2, 2), withSend).makespan,
            simulate(makeSchedule("1f1b", 2, 2)).makespan);
  // The timeline holds every action of every rank.
  Schedule s = makeSchedule("zb-h1", 3, 5);
  Simulation t = simulate(s);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(t.timeline[r].size(), s.actions[r].size());
}

// Tests per-stage costs: 1f1b on 2 ranks, 4 microbatches, stage 1 twice as
// slow (F = 2, full backward 4). Stage 1 computes without a gap from its
// first forward (time 1) for 4 x 6 units, then stage 0 runs the last
// backward (2 units): makespan 1 + 24 + 2 = 27, with either kind of send.
TEST(PipelineSchedule, PerStageCosts) {
  ActionCosts fast, slow;
  slow.forward = slow.backwardInput = slow.backwardWeight = 2;
  Schedule s = makeSchedule("1f1b", 2, 4);
  EXPECT_DOUBLE_EQ(simulate(s, {fast, slow}).makespan, 27);
  EXPECT_DOUBLE_EQ(simulate(s, {fast, slow}, SendMode::Buffered).makespan, 27);
  EXPECT_THROW(simulate(s, std::vector<ActionCosts>{fast}), Error);
}

// Tests the schedule-file reader: names, comments, and errors naming the
// file and the line.
TEST(PipelineSchedule, ScheduleFile) {
  std::string path = ::testing::TempDir() + "pipeline-schedule-test.txt";
  {
    std::ofstream out(path);
    out << "# one rank, two microbatches\n"
           "0 F 0\n"
           "0 backward 0   # full backward\n"
           "0 FORWARD 1 0\n"
           "\n"
           "0 B 1\n"
           "0 REDUCE\n"
           "0 OPT 0\n";
  }
  Schedule s = parseScheduleFile(path, 1, 2);
  EXPECT_EQ(s.kind, "file");
  EXPECT_EQ(errorOf(s), "valid");
  EXPECT_EQ(s.actions[0].size(), 6u);
  std::remove(path.c_str());

  auto message = [](const std::string &text, int ranks = 2) {
    try {
      parseScheduleText(text, "f.txt", ranks, 2);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("0 F 0\n0 JUMP 1\n"),
            "f.txt:2: unknown action 'JUMP' (expected F, B, BI, W, SA, RA, "
            "SG, RG, REDUCE, OPT or the plan's names such as FORWARD)");
  EXPECT_EQ(message("\n\n2 F 0\n"),
            "f.txt:3: rank '2' is not a rank in [0, 2)");
  EXPECT_EQ(message("0 F 2\n"), "f.txt:1: microbatch '2' is not in [0, 2)");
  EXPECT_EQ(message("0 F -1\n"), "f.txt:1: microbatch '-1' is not in [0, 2)");
  EXPECT_EQ(message("0 F 0 1\n"), "f.txt:1: chunk '1' is not in [0, 1)");
  EXPECT_EQ(message("0 F 0 0 7\n"), "f.txt:1: unexpected '7' after the action");
  EXPECT_EQ(message("0 F\n"), "f.txt:1: FORWARD needs a microbatch");
  EXPECT_EQ(message("0\n"),
            "f.txt:1: expected 'RANK ACTION MICROBATCH [CHUNK]', got '0'");
  EXPECT_THROW(parseScheduleFile("/nonexistent/schedule.txt", 1, 1), Error);
}
