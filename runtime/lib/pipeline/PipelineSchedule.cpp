//===- PipelineSchedule.cpp - pipeline schedules: generate, check, simulate ===//
//
// Generation runs in two steps. First each rank's compute order (F, full
// backward, or B and W) is fixed by the schedule's rule: GPipe and 1F1B by
// their published orders, interleaved 1F1B by Megatron-LM's virtual
// microbatch order (arXiv 2104.04473), zb-h1 by a unit-time list scheduler
// (below). Second, communication is inserted: the compute orders are timed
// with unit costs and buffered sends, and every message is given a meeting
// time: the first time from when it is produced to when it is needed at
// which neither end is inside a compute (so a rendezvous send costs no
// waiting), else the time it is produced. Each rank's sends and receives
// are ordered by one global key (meeting time, sending stage, direction,
// microbatch); a receive sits before the compute that needs it, a send
// after the compute that made it. Since every rank meets its messages in
// the same global order, the smallest unfinished message always has both
// ends at it: the set cannot deadlock under rendezvous sends. validate()
// proves that anyway, on any set.
//
// Known limit: Megatron-LM's interleaved order has messages with no such
// meeting time for some sizes (2 ranks, or 8 ranks with m > R): one end
// waits, and its rendezvous bubble exceeds the published (p-1)/(vm+p-1),
// which the same lists reach exactly with buffered sends (SendMode).
//
// zb-h1 (arXiv 2401.10241): the F / B order of 1F1B with B the input
// gradient only (so the same R - r microbatches at most between F and B);
// at each unit of time a rank whose next F or B still waits for its input
// runs a deferred W instead of idling, and rank r runs a W first once r + 1
// are due. With F = B = W each rank idles R - 1 units, a third of 1F1B's.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/PipelineSchedule.h"
#include "partita/runtime/Tensor.h"
#include "runtime/plan/plan.pb.h"
#include "runtime/plan/PlanMemory.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

namespace partita::runtime::pipeline {

const char *toString(ActionKind kind) {
  switch (kind) {
  case ActionKind::Forward:
    return "FORWARD";
  case ActionKind::Backward:
    return "BACKWARD";
  case ActionKind::BackwardInput:
    return "BACKWARD_INPUT";
  case ActionKind::BackwardWeight:
    return "BACKWARD_WEIGHT";
  case ActionKind::SendActivation:
    return "SEND_ACTIVATION";
  case ActionKind::RecvActivation:
    return "RECV_ACTIVATION";
  case ActionKind::SendGradient:
    return "SEND_GRADIENT";
  case ActionKind::RecvGradient:
    return "RECV_GRADIENT";
  case ActionKind::ReduceGradients:
    return "REDUCE_GRADIENTS";
  case ActionKind::Optimizer:
    return "OPTIMIZER";
  }
  return "?";
}

bool isCompute(ActionKind kind) {
  return kind == ActionKind::Forward || kind == ActionKind::Backward ||
         kind == ActionKind::BackwardInput ||
         kind == ActionKind::BackwardWeight;
}

bool isCommunication(ActionKind kind) {
  return kind == ActionKind::SendActivation ||
         kind == ActionKind::RecvActivation ||
         kind == ActionKind::SendGradient || kind == ActionKind::RecvGradient;
}

static bool isPerStage(ActionKind kind) {
  return kind == ActionKind::ReduceGradients || kind == ActionKind::Optimizer;
}

std::string describe(const Action &action) {
  std::string s = toString(action.kind);
  if (!isPerStage(action.kind))
    s += " of microbatch " + std::to_string(action.microbatch);
  s += " (chunk " + std::to_string(action.chunk) + ")";
  return s;
}

std::string toString(const ScheduleError &error) {
  return "rank " + std::to_string(error.rank) + " step " +
         std::to_string(error.step) + ": " + error.message;
}

//===----------------------------------------------------------------------===//
// Generation
//===----------------------------------------------------------------------===//

namespace {

using Order = std::vector<std::vector<Action>>;

Action act(ActionKind kind, int microbatch, int chunk = 0) {
  Action a;
  a.kind = kind;
  a.microbatch = microbatch;
  a.chunk = chunk;
  return a;
}

Order gpipeOrder(int ranks, int m) {
  Order order(ranks);
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < m; ++i)
      order[r].push_back(act(ActionKind::Forward, i));
    for (int i = 0; i < m; ++i)
      order[r].push_back(act(ActionKind::Backward, i));
  }
  return order;
}

Order oneFOneBOrder(int ranks, int m) {
  Order order(ranks);
  for (int r = 0; r < ranks; ++r) {
    int warmup = std::min(ranks - r - 1, m);
    for (int i = 0; i < warmup; ++i)
      order[r].push_back(act(ActionKind::Forward, i));
    for (int i = 0; i < m - warmup; ++i) {
      order[r].push_back(act(ActionKind::Forward, warmup + i));
      order[r].push_back(act(ActionKind::Backward, i));
    }
    for (int i = m - warmup; i < m; ++i)
      order[r].push_back(act(ActionKind::Backward, i));
  }
  return order;
}

// Megatron-LM's interleaved 1F1B: virtual microbatch k runs microbatch
// (k / (R v)) R + k % R on chunk (k / R) % v going forward, chunk
// v - 1 - (k / R) % v going backward; rank r warms up with
// 2 (R - r - 1) + (v - 1) R forwards (all of them when m == R).
Order interleavedOrder(int ranks, int m, int v) {
  Order order(ranks);
  int total = m * v;
  auto microbatchOf = [&](int k) { return (k / (ranks * v)) * ranks + k % ranks; };
  auto chunkOf = [&](int k, bool forward) {
    int c = (k % (ranks * v)) / ranks;
    return forward ? c : v - 1 - c;
  };
  for (int r = 0; r < ranks; ++r) {
    int warmup = m == ranks ? total
                            : std::min(total, 2 * (ranks - r - 1) +
                                                  (v - 1) * ranks);
    auto forward = [&](int k) {
      order[r].push_back(
          act(ActionKind::Forward, microbatchOf(k), chunkOf(k, true)));
    };
    auto backward = [&](int k) {
      order[r].push_back(
          act(ActionKind::Backward, microbatchOf(k), chunkOf(k, false)));
    };
    for (int k = 0; k < warmup; ++k)
      forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k)
      backward(k);
  }
  return order;
}

Order zeroBubbleH1Order(int ranks, int m, const std::vector<int> &limits) {
  // The F / B order of 1F1B (B now the input gradient only); at each unit
  // of time W goes in where the next F or B waits for its input, or once
  // `cap` Ws are due.
  Order skeleton = oneFOneBOrder(ranks, m);
  Order order(ranks);
  std::vector<size_t> next(ranks, 0);
  std::vector<int> nextW(ranks, 0), doneB(ranks, 0);
  std::vector<std::vector<long>> endF(ranks, std::vector<long>(m, -1)),
      endB(ranks, std::vector<long>(m, -1));
  auto arrived = [](long end, long t) { return end >= 0 && end <= t; };
  int remaining = 3 * m * ranks;
  for (long t = 0; remaining > 0; ++t) {
    if (t > 16L * m * ranks + 16)
      throw Error("internal error: the zb-h1 scheduler made no progress");
    std::vector<std::pair<int, Action>> done;
    for (int r = 0; r < ranks; ++r) {
      // Rank r keeps at most r + 1 Ws waiting: the last rank, first to
      // run ahead, defers the most, and the bubble still closes. A limit
      // keeps fewer (1: each W right after its B).
      int cap = r + 1;
      if (r < int(limits.size()))
        cap = std::max(1, std::min(cap, limits[r]));
      bool ready = false;
      if (next[r] < skeleton[r].size()) {
        const Action &a = skeleton[r][next[r]];
        int mb = a.microbatch;
        ready = a.kind == ActionKind::Forward
                    ? (r == 0 || arrived(endF[r - 1][mb], t))
                    : (r == ranks - 1 || arrived(endB[r + 1][mb], t));
      }
      int due = doneB[r] - nextW[r];
      if (due > 0 && (!ready || due >= cap)) {
        order[r].push_back(act(ActionKind::BackwardWeight, nextW[r]++));
      } else if (ready) {
        Action a = skeleton[r][next[r]++];
        if (a.kind == ActionKind::Backward)
          a.kind = ActionKind::BackwardInput;
        order[r].push_back(a);
        done.push_back({r, a});
      } else {
        continue;
      }
      --remaining;
    }
    for (const auto &[r, a] : done) {
      if (a.kind == ActionKind::Forward) {
        endF[r][a.microbatch] = t + 1;
      } else {
        endB[r][a.microbatch] = t + 1;
        ++doneB[r];
      }
    }
  }
  // A rank given limits that defers no W (rank 0 always) runs B and W as
  // one backward.
  for (int r = 0; r < int(limits.size()) && r < ranks; ++r) {
    if (r > 0 && limits[r] > 1)
      continue;
    std::vector<Action> merged;
    for (const Action &a : order[r]) {
      if (a.kind == ActionKind::BackwardWeight) {
        if (merged.empty() || merged.back().kind != ActionKind::Backward ||
            merged.back().microbatch != a.microbatch)
          throw Error("internal error: the zb-h1 scheduler parted a W from "
                      "its B on a rank that defers none");
        continue;
      }
      merged.push_back(a);
      if (a.kind == ActionKind::BackwardInput)
        merged.back().kind = ActionKind::Backward;
    }
    order[r] = std::move(merged);
  }
  return order;
}

// Times each rank's compute order with buffered (free) communication and
// the given costs, then inserts sends and receives ordered by one global
// key (see the file comment). Appends each chunk's gradient reduction and
// optimizer step after its last backward, in the order the chunks finish.
std::vector<std::vector<Action>> insertCommunication(const Order &order,
                                                     int ranks, int chunks,
                                                     int m) {
  const int stages = ranks * chunks;
  ActionCosts costs;
  auto duration = [&](ActionKind k) {
    switch (k) {
    case ActionKind::Forward:
      return costs.forward;
    case ActionKind::Backward:
      return costs.backwardInput + costs.backwardWeight;
    case ActionKind::BackwardInput:
      return costs.backwardInput;
    default:
      return costs.backwardWeight;
    }
  };
  std::vector<std::vector<double>> endF(stages, std::vector<double>(m, -1)),
      endB(stages, std::vector<double>(m, -1));
  std::vector<std::vector<double>> start(ranks);
  std::vector<size_t> pc(ranks, 0);
  std::vector<double> clock(ranks, 0);
  for (int r = 0; r < ranks; ++r)
    start[r].assign(order[r].size(), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      while (pc[r] < order[r].size()) {
        const Action &a = order[r][pc[r]];
        int s = a.chunk * ranks + r;
        double ready = clock[r];
        if (a.kind == ActionKind::Forward && s > 0) {
          if (endF[s - 1][a.microbatch] < 0)
            break;
          ready = std::max(ready, endF[s - 1][a.microbatch]);
        }
        if ((a.kind == ActionKind::Backward ||
             a.kind == ActionKind::BackwardInput) &&
            s < stages - 1) {
          if (endB[s + 1][a.microbatch] < 0)
            break;
          ready = std::max(ready, endB[s + 1][a.microbatch]);
        }
        start[r][pc[r]] = ready;
        clock[r] = ready + duration(a.kind);
        if (a.kind == ActionKind::Forward)
          endF[s][a.microbatch] = clock[r];
        else if (a.kind != ActionKind::BackwardWeight)
          endB[s][a.microbatch] = clock[r];
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < ranks; ++r)
    if (pc[r] < order[r].size())
      throw Error("internal error: a generated compute order waits forever");

  // A message moves at the first time in [produced, needed] when neither
  // end is inside a compute (idle or between two), so that rendezvous sends
  // keep the buffered timeline; with none, when it is produced.
  std::vector<std::vector<std::pair<double, double>>> busy(ranks);
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < order[r].size(); ++i)
      busy[r].push_back({start[r][i], start[r][i] + duration(order[r][i].kind)});
  // Each rank's intervals are in time order: binary searches keep this
  // near-linear in the number of actions.
  auto freeAt = [&](int r, double t) {
    auto it = std::lower_bound(
        busy[r].begin(), busy[r].end(), t,
        [](const std::pair<double, double> &iv, double x) {
          return iv.first < x;
        });
    return it == busy[r].begin() || std::prev(it)->second <= t;
  };
  auto meetAt = [&](int a, int b, double produced, double needed) {
    std::vector<double> candidates = {produced, needed};
    for (int r : {a, b}) {
      auto it = std::lower_bound(
          busy[r].begin(), busy[r].end(), produced,
          [](const std::pair<double, double> &iv, double x) {
            return iv.second <= x;
          });
      for (; it != busy[r].end() && it->second < needed; ++it)
        candidates.push_back(it->second);
    }
    std::sort(candidates.begin(), candidates.end());
    for (double t : candidates)
      if (freeAt(a, t) && freeAt(b, t))
        return t;
    return produced;
  };
  // Where each stage's F / B of a microbatch sits in its rank's order.
  std::vector<std::vector<size_t>> indexF(stages, std::vector<size_t>(m)),
      indexB(stages, std::vector<size_t>(m));
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < order[r].size(); ++i) {
      const Action &a = order[r][i];
      int s = a.chunk * ranks + r;
      if (a.kind == ActionKind::Forward)
        indexF[s][a.microbatch] = i;
      else if (a.kind != ActionKind::BackwardWeight)
        indexB[s][a.microbatch] = i;
    }
  // The meeting time of stage s's activation (gradient = false) or input
  // gradient (true) of microbatch mb.
  auto activationAt = [&](int s, int mb) {
    int to = s + 1;
    return meetAt(s % ranks, to % ranks, endF[s][mb],
                  start[to % ranks][indexF[to][mb]]);
  };
  auto gradientAt = [&](int s, int mb) {
    int to = s - 1;
    return meetAt(s % ranks, to % ranks, endB[s][mb],
                  start[to % ranks][indexB[to][mb]]);
  };

  // (time, class: communication 0 before compute 1, sending stage,
  // direction, microbatch, position): communication keys are the same at
  // both ends of a message.
  using Key = std::tuple<double, int, int, int, int, size_t>;
  std::vector<std::vector<Action>> lists(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::pair<Key, Action>> items;
    std::map<int, double> lastBackward;
    for (size_t i = 0; i < order[r].size(); ++i) {
      const Action &a = order[r][i];
      int s = a.chunk * ranks + r, mb = a.microbatch, c = a.chunk;
      items.push_back({Key(start[r][i], 1, 0, 0, 0, i), a});
      if (a.kind == ActionKind::Forward) {
        if (s > 0)
          items.push_back({Key(activationAt(s - 1, mb), 0, s - 1, 0, mb, 0),
                           act(ActionKind::RecvActivation, mb, c)});
        if (s < stages - 1)
          items.push_back({Key(activationAt(s, mb), 0, s, 0, mb, 0),
                           act(ActionKind::SendActivation, mb, c)});
      } else if (a.kind != ActionKind::BackwardWeight) {
        if (s < stages - 1)
          items.push_back({Key(gradientAt(s + 1, mb), 0, s + 1, 1, mb, 0),
                           act(ActionKind::RecvGradient, mb, c)});
        if (s > 0)
          items.push_back({Key(gradientAt(s, mb), 0, s, 1, mb, 0),
                           act(ActionKind::SendGradient, mb, c)});
      }
      if (a.kind != ActionKind::Forward)
        lastBackward[c] = std::max(lastBackward[c],
                                   start[r][i] + duration(a.kind));
    }
    std::stable_sort(items.begin(), items.end(),
                     [](const auto &x, const auto &y) {
                       return x.first < y.first;
                     });
    for (const auto &item : items)
      lists[r].push_back(item.second);
    std::vector<std::pair<double, int>> finish;
    for (const auto &[c, t] : lastBackward)
      finish.push_back({t, c});
    std::sort(finish.begin(), finish.end());
    for (const auto &[t, c] : finish) {
      lists[r].push_back(act(ActionKind::ReduceGradients, 0, c));
      lists[r].push_back(act(ActionKind::Optimizer, 0, c));
    }
  }
  return lists;
}

} // namespace

namespace {
/// The named schedule's rule applied to `limits` (zb-h1's deferral per
/// rank; empty for the published lists).
Schedule generate(const std::string &kind, int ranks, int microbatches,
                  int chunks, const std::vector<int> &limits) {
  if (kind != "gpipe" && kind != "1f1b" && kind != "interleaved" &&
      kind != "zb-h1")
    throw Error("unknown pipeline schedule '" + kind +
                "': expected gpipe, 1f1b, interleaved or zb-h1");
  if (ranks < 1)
    throw Error("pipeline schedule '" + kind + "' needs at least 1 rank, got " +
                std::to_string(ranks));
  if (microbatches < 1)
    throw Error("pipeline schedule '" + kind +
                "' needs at least 1 microbatch, got " +
                std::to_string(microbatches));
  if (chunks < 1)
    throw Error("pipeline schedule '" + kind +
                "' needs at least 1 chunk per rank, got " +
                std::to_string(chunks));
  if (chunks > 1 && kind != "interleaved")
    throw Error("pipeline schedule '" + kind + "' runs one chunk per rank, got " +
                std::to_string(chunks) + " (only 'interleaved' takes more)");
  if (static_cast<long long>(ranks) * chunks * microbatches > (1 << 20))
    throw Error("pipeline schedule '" + kind + "': " + std::to_string(ranks) +
                " ranks x " + std::to_string(chunks) + " chunks x " +
                std::to_string(microbatches) +
                " microbatches is more than the 1048576 stage-microbatches "
                "a generated schedule may have");
  if (kind == "interleaved" && chunks > 1) {
    if (ranks < 2)
      throw Error("pipeline schedule 'interleaved' with " +
                  std::to_string(chunks) +
                  " chunks needs at least 2 ranks: on one rank its chunks are "
                  "one stage");
    if (microbatches % ranks != 0)
      throw Error("pipeline schedule 'interleaved' needs the microbatch count "
                  "to be a multiple of the ranks (as Megatron-LM does): " +
                  std::to_string(microbatches) + " microbatches over " +
                  std::to_string(ranks) + " ranks");
  }

  Order order;
  if (kind == "gpipe")
    order = gpipeOrder(ranks, microbatches);
  else if (kind == "1f1b" || (kind == "interleaved" && chunks == 1))
    order = oneFOneBOrder(ranks, microbatches);
  else if (kind == "interleaved")
    order = interleavedOrder(ranks, microbatches, chunks);
  else
    order = zeroBubbleH1Order(ranks, microbatches, limits);

  Schedule schedule;
  schedule.kind = kind;
  schedule.ranks = ranks;
  schedule.chunks = chunks;
  schedule.microbatches = microbatches;
  schedule.actions = insertCommunication(order, ranks, chunks, microbatches);
  if (std::optional<ScheduleError> error = validate(schedule))
    throw Error("internal error: generated schedule '" + kind +
                "' is invalid: " + toString(*error));
  return schedule;
}
} // namespace

Schedule makeSchedule(const std::string &kind, int ranks, int microbatches,
                      int chunks) {
  return generate(kind, ranks, microbatches, chunks, {});
}

Schedule makeZeroBubbleH1(int ranks, int microbatches,
                          const std::vector<int> &deferLimit) {
  return generate("zb-h1", ranks, microbatches, 1, deferLimit);
}

bool runsSplitBackward(const Schedule &schedule, int rank, int chunk) {
  if (rank < 0 || rank >= int(schedule.actions.size()))
    return false;
  return std::any_of(schedule.actions[rank].begin(),
                     schedule.actions[rank].end(), [&](const Action &a) {
                       return a.chunk == chunk &&
                              (a.kind == ActionKind::BackwardInput ||
                               a.kind == ActionKind::BackwardWeight);
                     });
}

int64_t activationBytes(const Schedule &schedule, int rank, int chunk,
                        const StageMemory &memory) {
  bool split = runsSplitBackward(schedule, rank, chunk);
  const SlotBytes &bytes = split ? memory.split : memory.fused;
  SlotPeaks peaks = slotPeaks(schedule, rank, chunk);
  int64_t total = split ? memory.splitArena : memory.fusedArena;
  for (int k = 0; k < kSlotKinds; ++k)
    total += int64_t(peaks.of(SlotKind(k))) * bytes[k];
  return total;
}

Schedule makeBoundedZeroBubbleH1(int ranks, int microbatches,
                                 const std::vector<StageMemory> &memory,
                                 int64_t limit) {
  if (int(memory.size()) != ranks)
    throw Error("zb-h1 under a memory limit: " + std::to_string(memory.size()) +
                " stage sizes for " + std::to_string(ranks) + " ranks");
  if (limit < 0) {
    // 1f1b's busiest stage, each stage with its one backward.
    Schedule onef = makeSchedule("1f1b", ranks, microbatches);
    for (int r = 0; r < ranks; ++r)
      limit = std::max(limit, activationBytes(onef, r, 0, memory[r]));
  }
  std::vector<int> limits(ranks);
  for (int r = 0; r < ranks; ++r)
    limits[r] = r + 1;
  // Fewer Ws deferred on every rank over the limit, until none is or it
  // defers none (each round lowers a limit, so at most sum r + 1 rounds;
  // a rank's list also moves with its neighbours', so all are rechecked).
  for (;;) {
    Schedule schedule = makeZeroBubbleH1(ranks, microbatches, limits);
    bool lowered = false;
    for (int r = 0; r < ranks; ++r)
      if (limits[r] > 1 && activationBytes(schedule, r, 0, memory[r]) > limit) {
        --limits[r];
        lowered = true;
      }
    if (!lowered)
      return schedule;
  }
}

SlotBytes slotBytes(const std::vector<const plan::Program *> &programs) {
  std::map<std::pair<int, int>, int64_t> values;
  for (const plan::Program *program : programs) {
    if (!program)
      continue;
    for (int64_t id = 0; id < program->buffers_size(); ++id) {
      const plan::Buffer &buffer = program->buffers(int(id));
      bool result = std::find(program->results().begin(),
                              program->results().end(),
                              id) != program->results().end();
      if (buffer.role() != plan::INPUT && !result)
        continue;
      if (auto slot = slotOfValue(buffer.name(), result))
        values[{int(slot->first), slot->second}] = plan::localBytes(buffer);
    }
  }
  SlotBytes bytes{};
  for (const auto &[key, n] : values)
    bytes[key.first] += n;
  return bytes;
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {

// Where a message goes: the peer's rank and the stage at the other end.
struct Peer {
  int rank, stage;
};

Peer peerOf(const Schedule &sched, int rank, const Action &a) {
  int s = a.chunk * sched.ranks + rank;
  int other = (a.kind == ActionKind::SendActivation ||
               a.kind == ActionKind::RecvGradient)
                  ? s + 1
                  : s - 1;
  return {other % sched.ranks, other};
}

bool isSend(ActionKind k) {
  return k == ActionKind::SendActivation || k == ActionKind::SendGradient;
}

// The action at the other end of a message.
ActionKind matching(ActionKind k) {
  switch (k) {
  case ActionKind::SendActivation:
    return ActionKind::RecvActivation;
  case ActionKind::RecvActivation:
    return ActionKind::SendActivation;
  case ActionKind::SendGradient:
    return ActionKind::RecvGradient;
  default:
    return ActionKind::SendGradient;
  }
}

struct Message {
  bool gradient;
  int fromStage, microbatch;
  bool operator==(const Message &o) const {
    return gradient == o.gradient && fromStage == o.fromStage &&
           microbatch == o.microbatch;
  }
};

Message messageOf(const Schedule &sched, int rank, const Action &a) {
  int s = a.chunk * sched.ranks + rank;
  bool gradient = a.kind == ActionKind::SendGradient ||
                  a.kind == ActionKind::RecvGradient;
  int from = isSend(a.kind) ? s : peerOf(sched, rank, a).stage;
  return {gradient, from, a.microbatch};
}

} // namespace

int stageOf(const Schedule &sched, int rank, const Action &a) {
  return a.chunk * sched.ranks + rank;
}

int peerRank(const Schedule &sched, int rank, const Action &a) {
  return peerOf(sched, rank, a).rank;
}

namespace {

ScheduleError at(int rank, int step, std::string message) {
  return ScheduleError{rank, step, std::move(message)};
}

std::string stageName(int stage) { return "stage " + std::to_string(stage); }

} // namespace

std::optional<ScheduleError> validate(const Schedule &sched) {
  const int R = sched.ranks, v = sched.chunks, m = sched.microbatches;
  if (R < 1 || v < 1 || m < 1)
    return at(0, 0, "the schedule needs at least 1 rank, chunk and "
                    "microbatch (got " +
                        std::to_string(R) + ", " + std::to_string(v) + ", " +
                        std::to_string(m) + ")");
  if (static_cast<int>(sched.actions.size()) != R)
    return at(0, 0, "the schedule has " + std::to_string(sched.actions.size()) +
                        " action lists for " + std::to_string(R) + " ranks");
  // Each rank runs a forward and a backward per chunk and microbatch:
  // refuse sizes a list cannot fill before allocating for them (a plan may
  // claim any sizes).
  for (int r = 0; r < R; ++r) {
    long long need = 2LL * v * m;
    if (static_cast<long long>(sched.actions[r].size()) < need)
      return at(r, static_cast<int>(sched.actions[r].size()),
                "the list ends after " +
                    std::to_string(sched.actions[r].size()) +
                    " actions, fewer than the " + std::to_string(need) +
                    " forwards and backwards of " + std::to_string(v) +
                    " chunk(s) x " + std::to_string(m) + " microbatch(es)");
  }
  const int S = R * v;
  // Step of each action per (stage, microbatch); -1 when absent.
  enum Slot { F, BF, BI, BW, SA, RA, SG, RG, NumSlots };
  auto slotOf = [](ActionKind k) {
    switch (k) {
    case ActionKind::Forward:
      return F;
    case ActionKind::Backward:
      return BF;
    case ActionKind::BackwardInput:
      return BI;
    case ActionKind::BackwardWeight:
      return BW;
    case ActionKind::SendActivation:
      return SA;
    case ActionKind::RecvActivation:
      return RA;
    case ActionKind::SendGradient:
      return SG;
    default:
      return RG;
    }
  };
  std::vector<std::vector<std::vector<int>>> pos(
      S, std::vector<std::vector<int>>(NumSlots, std::vector<int>(m, -1)));
  std::vector<int> reducePos(S, -1), optimizerPos(S, -1);

  // Each action alone: in range, allowed on its stage, not repeated.
  for (int r = 0; r < R; ++r) {
    const std::vector<Action> &list = sched.actions[r];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action &a = list[i];
      int kind = static_cast<int>(a.kind);
      if (kind < 0 || kind > static_cast<int>(ActionKind::Optimizer))
        return at(r, i, "unknown action kind " + std::to_string(kind));
      if (a.chunk < 0 || a.chunk >= v)
        return at(r, i, describe(a) + ": chunk out of range [0, " +
                            std::to_string(v) + ")");
      int s = a.chunk * R + r;
      if (isPerStage(a.kind)) {
        int &p = a.kind == ActionKind::ReduceGradients ? reducePos[s]
                                                       : optimizerPos[s];
        if (p >= 0)
          return at(r, i, "a second " + describe(a) + "; the first is step " +
                              std::to_string(p));
        p = i;
        continue;
      }
      if (a.microbatch < 0 || a.microbatch >= m)
        return at(r, i, describe(a) + ": microbatch out of range [0, " +
                            std::to_string(m) + ")");
      if ((a.kind == ActionKind::SendActivation ||
           a.kind == ActionKind::RecvGradient) &&
          s == S - 1)
        return at(r, i, describe(a) + " on the last stage (" + stageName(s) +
                            "): there is no next stage");
      if ((a.kind == ActionKind::RecvActivation ||
           a.kind == ActionKind::SendGradient) &&
          s == 0)
        return at(r, i, describe(a) + " on the first stage: there is no "
                                      "previous stage");
      if (isCommunication(a.kind) && peerOf(sched, r, a).rank == r)
        return at(r, i, describe(a) + ": " + stageName(s) + " and " +
                            stageName(peerOf(sched, r, a).stage) +
                            " are both on rank " + std::to_string(r) +
                            ", and a rendezvous send to itself never "
                            "completes");
      int &p = pos[s][slotOf(a.kind)][a.microbatch];
      if (p >= 0)
        return at(r, i, "a second " + describe(a) + "; the first is step " +
                            std::to_string(p));
      p = i;
    }
  }

  // Per stage and microbatch: every action present and in order.
  for (int s = 0; s < S; ++s) {
    int r = s % R, c = s / R;
    int end = static_cast<int>(sched.actions[r].size());
    auto name = [&](ActionKind k, int mb) {
      return describe(act(k, mb, c));
    };
    int lastBackward = -1;
    for (int mb = 0; mb < m; ++mb) {
      const auto &p = pos[s];
      int f = p[F][mb];
      if (f < 0)
        return at(r, end, "no " + name(ActionKind::Forward, mb) +
                              " by the end of the list");
      int full = p[BF][mb], bi = p[BI][mb], bw = p[BW][mb];
      if (full >= 0 && (bi >= 0 || bw >= 0))
        return at(r, std::max(bi, bw),
                  name(bi >= 0 ? ActionKind::BackwardInput
                               : ActionKind::BackwardWeight,
                       mb) +
                      " beside a full " + name(ActionKind::Backward, mb) +
                      " (step " + std::to_string(full) + ")");
      if (full < 0 && bi < 0 && bw < 0)
        return at(r, end, "no " + name(ActionKind::Backward, mb) + " (or " +
                              "BACKWARD_INPUT and BACKWARD_WEIGHT) by the "
                              "end of the list");
      if (full < 0 && bi < 0)
        return at(r, bw, name(ActionKind::BackwardWeight, mb) +
                             " without its BACKWARD_INPUT");
      if (full < 0 && bw < 0)
        return at(r, bi, name(ActionKind::BackwardInput, mb) +
                             " without its BACKWARD_WEIGHT");
      if (full < 0 && bw < bi)
        return at(r, bw, name(ActionKind::BackwardWeight, mb) +
                             " before its BACKWARD_INPUT (step " +
                             std::to_string(bi) + ")");
      int b = full >= 0 ? full : bi;
      ActionKind bKind =
          full >= 0 ? ActionKind::Backward : ActionKind::BackwardInput;
      if (b < f)
        return at(r, b, name(bKind, mb) + " before its FORWARD (step " +
                            std::to_string(f) + ")");
      lastBackward = std::max({lastBackward, full, bw});
      if (s > 0) {
        int ra = p[RA][mb], sg = p[SG][mb];
        if (ra < 0)
          return at(r, f, name(ActionKind::Forward, mb) +
                              " has no RECV_ACTIVATION before it (" +
                              stageName(s) + " takes its input from " +
                              stageName(s - 1) + ")");
        if (ra > f)
          return at(r, ra, name(ActionKind::RecvActivation, mb) +
                               " after the FORWARD that needs it (step " +
                               std::to_string(f) + ")");
        if (sg < 0)
          return at(r, b, name(bKind, mb) +
                              " has no SEND_GRADIENT after it (" +
                              stageName(s - 1) + " waits for it)");
        if (sg < b)
          return at(r, sg, name(ActionKind::SendGradient, mb) +
                               " before the backward that computes it (step " +
                               std::to_string(b) + ")");
      }
      if (s < S - 1) {
        int sa = p[SA][mb], rg = p[RG][mb];
        if (sa < 0)
          return at(r, f, name(ActionKind::Forward, mb) +
                              " has no SEND_ACTIVATION after it (" +
                              stageName(s + 1) + " waits for it)");
        if (sa < f)
          return at(r, sa, name(ActionKind::SendActivation, mb) +
                               " before the FORWARD that computes it (step " +
                               std::to_string(f) + ")");
        if (rg < 0)
          return at(r, b, name(bKind, mb) +
                              " has no RECV_GRADIENT before it (" +
                              stageName(s) + " takes its output gradient "
                                             "from " +
                              stageName(s + 1) + ")");
        if (rg > b)
          return at(r, rg, name(ActionKind::RecvGradient, mb) +
                               " after the backward that needs it (step " +
                               std::to_string(b) + ")");
      }
    }
    if (reducePos[s] < 0)
      return at(r, end, "no " + name(ActionKind::ReduceGradients, 0) +
                            " by the end of the list");
    if (reducePos[s] < lastBackward)
      return at(r, reducePos[s],
                name(ActionKind::ReduceGradients, 0) +
                    " before the chunk's last backward (step " +
                    std::to_string(lastBackward) + ")");
    if (optimizerPos[s] < 0)
      return at(r, end, "no " + name(ActionKind::Optimizer, 0) +
                            " by the end of the list");
    if (optimizerPos[s] < reducePos[s])
      return at(r, optimizerPos[s],
                name(ActionKind::Optimizer, 0) +
                    " before the chunk's REDUCE_GRADIENTS (step " +
                    std::to_string(reducePos[s]) + ")");
  }

  // Per ordered pair of ranks: the receives take the messages in the order
  // they are sent.
  for (int to = 0; to < R; ++to) {
    std::vector<std::vector<std::pair<Message, int>>> sent(R);
    for (int from = 0; from < R; ++from) {
      const std::vector<Action> &list = sched.actions[from];
      for (int i = 0; i < static_cast<int>(list.size()); ++i)
        if (isSend(list[i].kind) && peerOf(sched, from, list[i]).rank == to)
          sent[from].push_back({messageOf(sched, from, list[i]), i});
    }
    std::vector<size_t> next(R, 0);
    const std::vector<Action> &list = sched.actions[to];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action &a = list[i];
      if (!isCommunication(a.kind) || isSend(a.kind))
        continue;
      int from = peerOf(sched, to, a).rank;
      Message want = messageOf(sched, to, a);
      // Completeness above guarantees a matching send exists.
      const auto &[got, step] = sent[from][next[from]++];
      if (!(got == want)) {
        const Action &s = sched.actions[from][step];
        return at(to, i, describe(a) + " from rank " + std::to_string(from) +
                             " is out of order: rank " + std::to_string(from) +
                             " sends " + describe(s) + " to rank " +
                             std::to_string(to) + " first (its step " +
                             std::to_string(step) + ")");
      }
    }
  }

  // Deadlock freedom: run the lists with sends that block until the
  // receive is posted.
  std::vector<size_t> pc(R, 0);
  auto blockedOn = [&](int r) -> const Action * {
    while (pc[r] < sched.actions[r].size() &&
           !isCommunication(sched.actions[r][pc[r]].kind))
      ++pc[r];
    return pc[r] < sched.actions[r].size() ? &sched.actions[r][pc[r]]
                                           : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const Action *a = blockedOn(r);
      if (!a || !isSend(a->kind))
        continue;
      int peer = peerOf(sched, r, *a).rank;
      const Action *b = blockedOn(peer);
      if (b && b->kind == matching(a->kind) &&
          peerOf(sched, peer, *b).rank == r &&
          messageOf(sched, peer, *b) == messageOf(sched, r, *a)) {
        ++pc[r];
        ++pc[peer];
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const Action *a = blockedOn(r);
    if (!a)
      continue;
    int peer = peerOf(sched, r, *a).rank;
    const Action *b = blockedOn(peer);
    std::string there =
        b ? "at its step " + std::to_string(pc[peer]) + ", " + describe(*b) +
                (isCommunication(b->kind)
                     ? (isSend(b->kind) ? " to rank " : " from rank ") +
                           std::to_string(peerOf(sched, peer, *b).rank)
                     : std::string())
          : "at the end of its list";
    return at(r, static_cast<int>(pc[r]),
              "deadlock under rendezvous sends: " + describe(*a) +
                  (isSend(a->kind) ? " waits for rank " : " waits on rank ") +
                  std::to_string(peer) + ", which is blocked " + there);
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Simulation
//===----------------------------------------------------------------------===//

double durationOf(ActionKind kind, const ActionCosts &costs) {
  switch (kind) {
  case ActionKind::Forward:
    return costs.forward;
  case ActionKind::Backward:
    return costs.backwardInput + costs.backwardWeight;
  case ActionKind::BackwardInput:
    return costs.backwardInput;
  case ActionKind::BackwardWeight:
    return costs.backwardWeight;
  case ActionKind::ReduceGradients:
    return costs.reduce;
  case ActionKind::Optimizer:
    return costs.optimizer;
  default:
    return costs.send;
  }
}

Simulation simulate(const Schedule &sched, const ActionCosts &costs,
                    SendMode mode) {
  return simulate(
      sched,
      std::vector<ActionCosts>(std::max(0, sched.ranks * sched.chunks), costs),
      mode);
}

Simulation simulate(const Schedule &sched,
                    const std::vector<ActionCosts> &stageCosts, SendMode mode) {
  if (std::optional<ScheduleError> error = validate(sched))
    throw Error("cannot simulate an invalid pipeline schedule: " +
                toString(*error));
  const int R = sched.ranks, S = R * sched.chunks;
  if (static_cast<int>(stageCosts.size()) != S)
    throw Error("pipeline simulation: " + std::to_string(stageCosts.size()) +
                " stage costs for " + std::to_string(S) + " stages");
  // A message costs what its sending stage's `send` says.
  auto costOf = [&](int rank, const Action &a) -> const ActionCosts & {
    int stage = a.chunk * R + rank;
    if (isCommunication(a.kind) && !isSend(a.kind))
      stage = peerOf(sched, rank, a).stage;
    return stageCosts[stage];
  };
  Simulation sim;
  sim.timeline.assign(R, {});
  std::vector<size_t> pc(R, 0);
  std::vector<double> clock(R, 0), busy(R, 0);
  auto record = [&](int r, const Action &a, double start, double end) {
    sim.timeline[r].push_back(Interval{a, start, end});
    if (!isCommunication(a.kind))
      busy[r] += end - start;
  };
  // Runs rank r's local actions; returns its blocking communication.
  auto advance = [&](int r) -> const Action * {
    const std::vector<Action> &list = sched.actions[r];
    while (pc[r] < list.size() && !isCommunication(list[pc[r]].kind)) {
      const Action &a = list[pc[r]++];
      double d = durationOf(a.kind, costOf(r, a));
      record(r, a, clock[r], clock[r] + d);
      clock[r] += d;
    }
    return pc[r] < list.size() ? &list[pc[r]] : nullptr;
  };
  // Buffered sends: when each message was sent, by (receiving rank,
  // gradient, sending stage, microbatch).
  std::map<std::tuple<int, bool, int, int>, double> sentAt;
  auto key = [&](int to, const Message &msg) {
    return std::make_tuple(to, msg.gradient, msg.fromStage, msg.microbatch);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const Action *a = advance(r);
      if (!a)
        continue;
      if (mode == SendMode::Buffered) {
        Message msg = messageOf(sched, r, *a);
        double d = durationOf(a->kind, costOf(r, *a));
        if (isSend(a->kind)) {
          sentAt[key(peerOf(sched, r, *a).rank, msg)] = clock[r] + d;
        } else {
          auto it = sentAt.find(key(r, msg));
          if (it == sentAt.end())
            continue;
          clock[r] = std::max(clock[r], it->second - d);
        }
        record(r, *a, clock[r], clock[r] + d);
        clock[r] += d;
        ++pc[r];
        progress = true;
        continue;
      }
      if (!isSend(a->kind))
        continue;
      int peer = peerOf(sched, r, *a).rank;
      const Action *b = advance(peer);
      if (!b || b->kind != matching(a->kind) ||
          !(messageOf(sched, peer, *b) == messageOf(sched, r, *a)))
        continue;
      double start = std::max(clock[r], clock[peer]);
      double end = start + durationOf(a->kind, costOf(r, *a));
      record(r, *a, start, end);
      record(peer, *b, start, end);
      clock[r] = clock[peer] = end;
      ++pc[r];
      ++pc[peer];
      progress = true;
    }
  }
  for (int r = 0; r < R; ++r)
    sim.makespan = std::max(sim.makespan, clock[r]);
  double idle = 0;
  for (int r = 0; r < R; ++r)
    idle += sim.makespan - busy[r];
  sim.idleTime = idle;
  sim.bubbleFraction = sim.makespan > 0 ? idle / (R * sim.makespan) : 0;

  // In flight: from the start of a microbatch's forward to the end of its
  // backward (B, or the full backward), per stage and per rank.
  sim.peakInFlight.assign(S, 0);
  sim.peakInFlightPerRank.assign(R, 0);
  for (int r = 0; r < R; ++r) {
    // (time, +1 / -1, chunk); ends sort before starts at the same time.
    std::vector<std::tuple<double, int, int>> events;
    for (const Interval &iv : sim.timeline[r]) {
      if (iv.action.kind == ActionKind::Forward)
        events.emplace_back(iv.start, 1, iv.action.chunk);
      else if (iv.action.kind == ActionKind::Backward ||
               iv.action.kind == ActionKind::BackwardInput)
        events.emplace_back(iv.end, -1, iv.action.chunk);
    }
    std::sort(events.begin(), events.end());
    std::vector<int> live(sched.chunks, 0);
    int total = 0;
    for (const auto &[t, delta, c] : events) {
      live[c] += delta;
      total += delta;
      int s = c * R + r;
      sim.peakInFlight[s] = std::max(sim.peakInFlight[s], live[c]);
      sim.peakInFlightPerRank[r] = std::max(sim.peakInFlightPerRank[r], total);
    }
  }
  return sim;
}

//===----------------------------------------------------------------------===//
// The plan and files
//===----------------------------------------------------------------------===//

void toProto(const Schedule &sched, plan::PipelineSchedule &proto) {
  proto.set_kind(sched.kind);
  proto.set_ranks(sched.ranks);
  proto.set_chunks(sched.chunks);
  proto.set_microbatches(sched.microbatches);
  proto.clear_rank_actions();
  for (const std::vector<Action> &list : sched.actions) {
    plan::PipelineRank *rank = proto.add_rank_actions();
    for (const Action &a : list) {
      plan::PipelineAction *pa = rank->add_actions();
      pa->set_kind(static_cast<plan::PipelineAction::Kind>(a.kind));
      pa->set_microbatch(a.microbatch);
      pa->set_chunk(a.chunk);
    }
  }
}

const char *describe(SlotKind kind) {
  switch (kind) {
  case SlotKind::ActivationIn:
    return "received activations";
  case SlotKind::ActivationOut:
    return "sent activations";
  case SlotKind::Stash:
    return "stash";
  case SlotKind::WeightStash:
    return "weight stash";
  case SlotKind::GradientIn:
    return "received gradients";
  case SlotKind::GradientOut:
    return "sent gradients";
  case SlotKind::Deferred:
    return "deferred";
  }
  return "?";
}

std::optional<std::pair<SlotKind, int>> slotOfValue(const std::string &name,
                                                    bool result) {
  struct Prefix {
    const char *text;
    SlotKind argument, result;
  };
  static const Prefix prefixes[] = {
      {kActivationValuePrefix, SlotKind::ActivationIn, SlotKind::ActivationOut},
      {kStashValuePrefix, SlotKind::Stash, SlotKind::Stash},
      {kWeightStashValuePrefix, SlotKind::WeightStash, SlotKind::WeightStash},
      {kGradientValuePrefix, SlotKind::GradientIn, SlotKind::GradientOut},
      {kDeferredValuePrefix, SlotKind::Deferred, SlotKind::Deferred},
  };
  for (const Prefix &p : prefixes) {
    size_t n = std::char_traits<char>::length(p.text);
    if (name.compare(0, n, p.text) != 0)
      continue;
    std::string digits = name.substr(n);
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return std::isdigit((unsigned char)c); }))
      throw Error("pipeline value '" + name + "': expected a number after '" +
                  p.text + "'");
    return std::make_pair(result ? p.result : p.argument, std::stoi(digits));
  }
  return std::nullopt;
}

bool isPipelinedStage(const plan::PipelineStage &stage) {
  return stage.backward() >= 0 || stage.backward_input() >= 0;
}

std::vector<int> microbatchPrograms(const plan::PipelineStage &stage) {
  std::vector<int> programs;
  for (int index : {stage.forward(), stage.backward(), stage.backward_input(),
                    stage.backward_weight()})
    if (index >= 0)
      programs.push_back(index);
  return programs;
}

SlotUse slotUse(ActionKind kind, bool first, bool last) {
  using K = SlotKind;
  SlotUse use;
  auto unless = [](bool skip, std::vector<SlotKind> &list, SlotKind k) {
    if (!skip)
      list.push_back(k);
  };
  switch (kind) {
  case ActionKind::Forward:
    unless(first, use.reads, K::ActivationIn);
    unless(first, use.releases, K::ActivationIn);
    unless(last, use.takes, K::ActivationOut);
    use.takes.push_back(K::Stash);
    use.takes.push_back(K::WeightStash);
    break;
  case ActionKind::Backward:
    use.reads = {K::Stash, K::WeightStash};
    unless(last, use.reads, K::GradientIn);
    use.releases = {K::Stash, K::WeightStash};
    unless(last, use.releases, K::GradientIn);
    unless(first, use.takes, K::GradientOut);
    break;
  case ActionKind::BackwardInput:
    // W reads the received gradient and the weight stash too: they stay.
    use.reads = {K::Stash, K::WeightStash};
    unless(last, use.reads, K::GradientIn);
    use.releases = {K::Stash};
    unless(first, use.takes, K::GradientOut);
    use.takes.push_back(K::Deferred);
    break;
  case ActionKind::BackwardWeight:
    use.reads = {K::WeightStash};
    unless(last, use.reads, K::GradientIn);
    use.reads.push_back(K::Deferred);
    use.releases = use.reads;
    break;
  case ActionKind::SendActivation:
    use.releases = {K::ActivationOut};
    break;
  case ActionKind::RecvActivation:
    use.takes = {K::ActivationIn};
    break;
  case ActionKind::SendGradient:
    use.releases = {K::GradientOut};
    break;
  case ActionKind::RecvGradient:
    use.takes = {K::GradientIn};
    break;
  default:
    break;
  }
  return use;
}

SlotPeaks slotPeaks(const Schedule &schedule, int rank, int chunk) {
  SlotPeaks peaks;
  int held[kSlotKinds] = {};
  if (rank < 0 || rank >= int(schedule.actions.size()))
    return peaks;
  int stage = chunk * schedule.ranks + rank;
  bool first = stage == 0, last = stage + 1 == schedule.ranks * schedule.chunks;
  for (const Action &a : schedule.actions[rank]) {
    if (a.chunk != chunk)
      continue;
    SlotUse use = slotUse(a.kind, first, last);
    for (SlotKind k : use.releases)
      held[int(k)] = std::max(0, held[int(k)] - 1);
    for (SlotKind k : use.takes)
      peaks.most[int(k)] = std::max(peaks.most[int(k)], ++held[int(k)]);
  }
  return peaks;
}

Schedule fromProto(const plan::PipelineSchedule &proto) {
  Schedule sched;
  sched.kind = proto.kind();
  sched.ranks = proto.ranks();
  sched.chunks = proto.chunks();
  sched.microbatches = proto.microbatches();
  if (sched.ranks < 1 || sched.chunks < 1 || sched.microbatches < 1)
    throw Error("plan pipeline schedule '" + sched.kind +
                "': ranks, chunks and microbatches must be at least 1 (got " +
                std::to_string(sched.ranks) + ", " +
                std::to_string(sched.chunks) + ", " +
                std::to_string(sched.microbatches) + ")");
  if (proto.rank_actions_size() != sched.ranks)
    throw Error("plan pipeline schedule '" + sched.kind + "': " +
                std::to_string(proto.rank_actions_size()) +
                " action lists for " + std::to_string(sched.ranks) + " ranks");
  for (int r = 0; r < proto.rank_actions_size(); ++r) {
    std::vector<Action> &list = sched.actions.emplace_back();
    const plan::PipelineRank &rank = proto.rank_actions(r);
    for (int i = 0; i < rank.actions_size(); ++i) {
      const plan::PipelineAction &pa = rank.actions(i);
      int kind = static_cast<int>(pa.kind());
      if (kind < 0 || kind > static_cast<int>(ActionKind::Optimizer))
        throw Error("plan pipeline schedule: rank " + std::to_string(r) +
                    " step " + std::to_string(i) + ": unknown action kind " +
                    std::to_string(kind));
      list.push_back(act(static_cast<ActionKind>(kind), pa.microbatch(),
                         pa.chunk()));
    }
  }
  return sched;
}

namespace {
// The action names a schedule file takes: the plan's names and short ones.
std::optional<ActionKind> parseKind(std::string word) {
  for (char &ch : word)
    ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::pair<const char *, ActionKind> shortNames[] = {
      {"F", ActionKind::Forward},
      {"B", ActionKind::Backward},
      {"BI", ActionKind::BackwardInput},
      {"W", ActionKind::BackwardWeight},
      {"SA", ActionKind::SendActivation},
      {"RA", ActionKind::RecvActivation},
      {"SG", ActionKind::SendGradient},
      {"RG", ActionKind::RecvGradient},
      {"REDUCE", ActionKind::ReduceGradients},
      {"OPT", ActionKind::Optimizer}};
  for (const auto &[name, kind] : shortNames)
    if (word == name)
      return kind;
  for (int k = 0; k <= static_cast<int>(ActionKind::Optimizer); ++k)
    if (word == toString(static_cast<ActionKind>(k)))
      return static_cast<ActionKind>(k);
  return std::nullopt;
}

bool parseInt(const std::string &word, int &value) {
  if (word.empty() || word.size() > 9)
    return false;
  for (char ch : word)
    if (ch < '0' || ch > '9')
      return false;
  value = std::stoi(word);
  return true;
}
} // namespace

Schedule parseScheduleText(const std::string &text, const std::string &name,
                           int ranks, int microbatches, int chunks) {
  if (ranks < 1 || microbatches < 1 || chunks < 1)
    throw Error(name + ": ranks, microbatches and chunks must be at least 1 "
                       "(got " +
                std::to_string(ranks) + ", " + std::to_string(microbatches) +
                ", " + std::to_string(chunks) + ")");
  Schedule sched;
  sched.kind = "file";
  sched.ranks = ranks;
  sched.chunks = chunks;
  sched.microbatches = microbatches;
  sched.actions.assign(ranks, {});
  std::istringstream in(text);
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    std::string where = name + ":" + std::to_string(lineNo) + ": ";
    if (size_t hash = line.find('#'); hash != std::string::npos)
      line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;)
      w.push_back(word);
    if (w.empty())
      continue;
    if (w.size() < 2)
      throw Error(where + "expected 'RANK ACTION MICROBATCH [CHUNK]', got '" +
                  w[0] + "'");
    int rank = 0;
    if (!parseInt(w[0], rank) || rank >= ranks)
      throw Error(where + "rank '" + w[0] + "' is not a rank in [0, " +
                  std::to_string(ranks) + ")");
    std::optional<ActionKind> kind = parseKind(w[1]);
    if (!kind)
      throw Error(where + "unknown action '" + w[1] +
                  "' (expected F, B, BI, W, SA, RA, SG, RG, REDUCE, OPT or "
                  "the plan's names such as FORWARD)");
    Action a;
    a.kind = *kind;
    size_t next = 2;
    if (!isPerStage(*kind)) {
      if (w.size() < 3)
        throw Error(where + std::string(toString(*kind)) +
                    " needs a microbatch");
      if (!parseInt(w[2], a.microbatch) || a.microbatch >= microbatches)
        throw Error(where + "microbatch '" + w[2] + "' is not in [0, " +
                    std::to_string(microbatches) + ")");
      next = 3;
    }
    if (w.size() > next) {
      if (!parseInt(w[next], a.chunk) || a.chunk >= chunks)
        throw Error(where + "chunk '" + w[next] + "' is not in [0, " +
                    std::to_string(chunks) + ")");
      ++next;
    }
    if (w.size() > next)
      throw Error(where + "unexpected '" + w[next] + "' after the action");
    sched.actions[rank].push_back(a);
  }
  return sched;
}

Schedule parseScheduleFile(const std::string &path, int ranks,
                           int microbatches, int chunks) {
  std::ifstream in(path);
  if (!in)
    throw Error("cannot open schedule file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseScheduleText(text.str(), path, ranks, microbatches, chunks);
}

std::string toText(const Schedule &sched) {
  std::ostringstream os;
  os << "# " << sched.kind << ": " << sched.ranks << " ranks, "
     << sched.microbatches << " microbatches, " << sched.chunks
     << " chunk(s) per rank\n";
  for (int r = 0; r < static_cast<int>(sched.actions.size()); ++r)
    for (const Action &a : sched.actions[r]) {
      os << r << ' ' << toString(a.kind);
      if (!isPerStage(a.kind))
        os << ' ' << a.microbatch;
      os << ' ' << a.chunk << '\n';
    }
  return os.str();
}

} // namespace partita::runtime::pipeline
