//===- PipelineSchedule.h - pipeline schedules as action lists --*- C++ -*-===//
//
// A pipeline schedule is one ordered action list per pipeline rank
// (forward, full backward, input-gradient B, weight-gradient W, send and
// receive of activations and gradients, gradient reduction, optimizer).
// The compiler generates a named schedule into the plan
// (plan::PipelineSchedule); the runtime validates it before running and
// walks it. The same lists drive the unit-cost simulation (bubble fraction,
// in-flight microbatches per stage) and explain's Gantt chart.
//
// Schedules (R ranks, m microbatches, v chunks per rank):
//   gpipe        all forwards, then all backwards (GPipe, arXiv 1811.06965)
//   1f1b         R - r - 1 warm-up forwards, then one forward one backward
//                (PipeDream-Flush, arXiv 2006.09503; Megatron-LM)
//   interleaved  1f1b over v chunks per rank (Megatron-LM, arXiv 2104.04473)
//   zb-h1        1f1b with backward split into B and W, W deferred into the
//                bubbles (zero-bubble H1, arXiv 2401.10241)
// docs/pipeline.md describes the lists, the file format and the numbers.
//
// Plain C++17; errors are runtime::Error.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_PIPELINESCHEDULE_H
#define PARTITA_RUNTIME_PIPELINESCHEDULE_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace partita::plan {
class PipelineSchedule;
class Program;
class PipelineStage;
} // namespace partita::plan

namespace partita::runtime::pipeline {

/// Mirrors plan::PipelineAction::Kind value for value.
enum class ActionKind {
  Forward = 0,
  Backward = 1,
  BackwardInput = 2,
  BackwardWeight = 3,
  SendActivation = 4,
  RecvActivation = 5,
  SendGradient = 6,
  RecvGradient = 7,
  ReduceGradients = 8,
  Optimizer = 9,
};

struct Action {
  ActionKind kind = ActionKind::Forward;
  int microbatch = 0;
  /// The model chunk on this rank; stage = chunk * ranks + rank.
  int chunk = 0;
};

/// The plan's name of a kind ("FORWARD", "SEND_ACTIVATION", ...).
const char *toString(ActionKind kind);
/// F, full backward, B or W.
bool isCompute(ActionKind kind);
/// A send or a receive.
bool isCommunication(ActionKind kind);
/// "FORWARD of microbatch 2 (chunk 0)", for messages.
std::string describe(const Action &action);

/// What a pipelined plan names the values its stages exchange: buffers
/// "<prefix><k>" of a stage's programs (dist-stage-split writes them, the
/// executor and `partita explain` read them): the activations a forward
/// receives and sends, what it keeps for its backward (for the input-
/// gradient backward B or a full one; for the weight-gradient backward W,
/// which B may read too), the gradients a backward receives and sends, and
/// what B keeps for W (a split backward, zb-h1).
inline constexpr char kActivationValuePrefix[] = "pp.activation.";
inline constexpr char kStashValuePrefix[] = "pp.stash.";
inline constexpr char kWeightStashValuePrefix[] = "pp.wstash.";
inline constexpr char kGradientValuePrefix[] = "pp.gradient.";
inline constexpr char kDeferredValuePrefix[] = "pp.deferred.";

/// The slots a rank keeps for a microbatch in flight, one kind per way a
/// value travels: received and sent activations, the stash (forward to B or
/// full backward), the weight stash (forward to W), received and sent
/// gradients, and the deferred values (B to W).
enum class SlotKind {
  ActivationIn,
  ActivationOut,
  Stash,
  WeightStash,
  GradientIn,
  GradientOut,
  Deferred,
};
inline constexpr int kSlotKinds = 7;
/// "received activations", "stash", ... for messages and explain.
const char *describe(SlotKind kind);
/// The slot kind and index k of a stage program's argument (`result`
/// false) or result named `name`, or nullopt for another buffer. Throws
/// Error for a pipeline prefix without a number after it.
std::optional<std::pair<SlotKind, int>> slotOfValue(const std::string &name,
                                                    bool result);
/// Whether a stage has backward programs of its own (a pipelined step, cut
/// by dist-stage-split), not only a forward that runs the backward too (a
/// microbatched step's one stage).
bool isPipelinedStage(const plan::PipelineStage &stage);
/// A stage's per-microbatch programs (indices into Plan.programs): its
/// forward, then its full backward or its B and W, those that are >= 0.
std::vector<int> microbatchPrograms(const plan::PipelineStage &stage);

struct Schedule {
  std::string kind;
  int ranks = 1;
  int chunks = 1;
  int microbatches = 1;
  /// actions[r] is rank r's list, in order.
  std::vector<std::vector<Action>> actions;
};

/// The stage `rank` runs `action` on: chunk * ranks + rank.
int stageOf(const Schedule &schedule, int rank, const Action &action);
/// For a send or receive on `rank`: the rank at the other end (the next
/// stage's for SEND_ACTIVATION and RECV_GRADIENT, the previous stage's for
/// RECV_ACTIVATION and SEND_GRADIENT).
int peerRank(const Schedule &schedule, int rank, const Action &action);

/// The named schedule ("gpipe", "1f1b", "interleaved", "zb-h1"). Throws
/// Error for an unknown name or impossible sizes (ranks, microbatches,
/// chunks < 1; chunks > 1 unless interleaved; interleaved needs the
/// microbatch count to be a multiple of the ranks, as Megatron-LM does).
Schedule makeSchedule(const std::string &kind, int ranks, int microbatches,
                      int chunks = 1);

/// zb-h1 with rank r keeping at most deferLimit[r] weight-gradient
/// backwards (W) waiting (clamped to 1..r+1, the published list's r + 1;
/// missing entries: r + 1). A rank that defers none (a limit of 1, and
/// rank 0, whose limit r + 1 is 1) runs each W right after its B, so its
/// list has full backwards (BACKWARD) instead: the same times, and no
/// slot for B's values to wait in.
Schedule makeZeroBubbleH1(int ranks, int microbatches,
                          const std::vector<int> &deferLimit);

/// Per slot kind, the bytes of one microbatch's values on a stage.
using SlotBytes = std::array<int64_t, kSlotKinds>;

/// What one stage of a zb-h1 step holds per microbatch, with its backward
/// split (B and W) and as one backward: the slot bytes and the arena its
/// per-microbatch programs share.
struct StageMemory {
  SlotBytes split{}, fused{};
  int64_t splitArena = 0, fusedArena = 0;
};

/// Whether `rank` runs its chunk's backwards split, as B and W actions
/// (else as whole backwards).
bool runsSplitBackward(const Schedule &schedule, int rank, int chunk);

/// A stage's activation memory under `schedule`: the slots its rank holds
/// for it at once (slotPeaks) times their bytes, plus its shared arena,
/// split or fused as its list has B and W or full backwards.
int64_t activationBytes(const Schedule &schedule, int rank, int chunk,
                        const StageMemory &memory);

/// zb-h1 under a memory limit (one chunk per rank, memory[r] of rank r's
/// stage): each rank defers as many Ws as the published list does while
/// its activationBytes stays within `limit`, fewer where not, none (full
/// backwards) at worst. `limit` < 0: the most 1f1b holds on any stage, the
/// bound ZB-H1 is named for (arXiv 2401.10241). A rank over the limit even
/// with full backwards stays over it (the caller reports it).
Schedule makeBoundedZeroBubbleH1(int ranks, int microbatches,
                                 const std::vector<StageMemory> &memory,
                                 int64_t limit);

/// Per slot kind, the bytes of one microbatch's values in a stage's
/// per-microbatch programs: each value (kind and index) once, however many
/// of them read or write it.
SlotBytes slotBytes(const std::vector<const plan::Program *> &programs);

/// Why a schedule is not runnable: the rank, the index in its list and what
/// is wrong (a missing receive, W before its B, a deadlock under
/// rendezvous sends, ...).
struct ScheduleError {
  int rank = 0;
  int step = 0;
  std::string message;
};

/// "rank R step S: message".
std::string toString(const ScheduleError &error);

/// Proves the set complete (every stage runs forward and backward for
/// every microbatch exactly once, sends pair with receives, W after B,
/// one gradient reduction and optimizer per stage after its last backward)
/// and free of deadlock when every send blocks until its receive is posted.
std::optional<ScheduleError> validate(const Schedule &schedule);

/// Durations of one action per kind, in any unit (the simulation is
/// unit-cost with the defaults: F = B = W = 1, full backward = B + W,
/// communication free).
struct ActionCosts {
  double forward = 1, backwardInput = 1, backwardWeight = 1;
  double send = 0, reduce = 0, optimizer = 0;
};

/// The duration of one action of `kind` under `costs`.
double durationOf(ActionKind kind, const ActionCosts &costs);

struct Interval {
  Action action;
  double start = 0, end = 0;
};

struct Simulation {
  double makespan = 0;
  /// Idle time over ranks * makespan.
  double bubbleFraction = 0;
  /// The idle time summed over ranks: ranks * makespan minus the time spent
  /// in compute, gradient reduction and optimizer actions.
  double idleTime = 0;
  /// Per stage: the most microbatches whose forward ran and whose
  /// backward (B) has not, at any time.
  std::vector<int> peakInFlight;
  /// Per rank: the same count summed over its chunks at one time.
  std::vector<int> peakInFlightPerRank;
  /// Per rank, the timed actions.
  std::vector<std::vector<Interval>> timeline;
};

/// How a send behaves in the simulation: it blocks until its receive is
/// posted (rendezvous, the default and the validator's assumption), or it
/// completes at once and its receive waits only for it (buffered, the
/// published analyses' model, where sends are posted asynchronously).
enum class SendMode { Rendezvous, Buffered };

/// Runs the lists; throws Error when the schedule does not validate.
Simulation simulate(const Schedule &schedule, const ActionCosts &costs = {},
                    SendMode mode = SendMode::Rendezvous);
/// The same with each stage's own costs (stageCosts[s] for stage s, e.g.
/// from the cost model; a message costs its sending stage's `send`).
Simulation simulate(const Schedule &schedule,
                    const std::vector<ActionCosts> &stageCosts,
                    SendMode mode = SendMode::Rendezvous);

/// What a rank of a pipelined step holds at once for one of its chunks, per
/// slot kind, in microbatches, walking its list as the executor does: a
/// received activation from its RECV_ACTIVATION to its FORWARD; a
/// forward's outgoing activation to its SEND_ACTIVATION, its stash to its
/// BACKWARD or BACKWARD_INPUT and its weight stash to its BACKWARD or
/// BACKWARD_WEIGHT; a received gradient from its RECV_GRADIENT to its
/// BACKWARD or BACKWARD_WEIGHT; a backward's outgoing gradient to its
/// SEND_GRADIENT; B's deferred values to its W. The executor allocates
/// that many slots of each kind, so the peaks times the per-microbatch
/// bytes are its pipeline memory.
/// What an action of a stage does with its slots, the one rule the executor
/// and slotPeaks share: a compute action reads the values of `reads`,
/// then frees the slots of `releases` and fills new ones of `takes`; a
/// receive takes a slot and a send releases one. A first stage receives no
/// activation and sends no gradient; a last stage the reverse.
struct SlotUse {
  std::vector<SlotKind> reads, releases, takes;
};
SlotUse slotUse(ActionKind kind, bool firstStage, bool lastStage);

struct SlotPeaks {
  /// Per slot kind, the most slots held at once.
  std::array<int, kSlotKinds> most{};
  int of(SlotKind kind) const { return most[int(kind)]; }
};
SlotPeaks slotPeaks(const Schedule &schedule, int rank, int chunk = 0);

/// To and from the plan (from validates ranks, chunks and kinds).
void toProto(const Schedule &schedule, plan::PipelineSchedule &proto);
Schedule fromProto(const plan::PipelineSchedule &proto);

/// A hand-written set (--schedule-file): one line per action,
/// "rank KIND microbatch [chunk]", '#' comments; errors name the line.
Schedule parseScheduleFile(const std::string &path, int ranks,
                           int microbatches, int chunks = 1);
/// The same on text already read; `name` stands for the file in errors.
Schedule parseScheduleText(const std::string &text, const std::string &name,
                           int ranks, int microbatches, int chunks = 1);
/// The schedule in the schedule-file format (parseScheduleText reads it
/// back).
std::string toText(const Schedule &schedule);

} // namespace partita::runtime::pipeline

#endif // PARTITA_RUNTIME_PIPELINESCHEDULE_H
