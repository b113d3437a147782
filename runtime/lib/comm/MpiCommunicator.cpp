//===- MpiCommunicator.cpp - ranks as MPI processes -----------------------===//
//
// Ranks are MPI_COMM_WORLD ranks. Blocking MPI collectives cannot time out,
// so every call posts the non-blocking form (MPI_Iallreduce, MPI_Iallgather,
// MPI_Ireduce_scatter_block, MPI_Ialltoall, MPI_Ibarrier, MPI_Isend,
// MPI_Irecv) and polls it with MPI_Test until it completes or the deadline
// passes; communicators carry MPI_ERRORS_RETURN, so an error MPI detects (a
// peer's connection reset) also becomes an Error instead of an abort inside
// MPI. MPI cannot cancel a collective in flight: after an Error this
// communicator refuses every call, and the process must exit non-zero
// without MPI_Finalize (which would wait for the lost peer), or let
// MpiOptions::abortOnError call MPI_Abort.
//
// A group's communicator is created on its first use with
// MPI_Comm_create_group, which involves only the group's members (so
// concurrent groups set up independently) but blocks. It is preceded by a
// handshake of non-blocking messages among the members under the same
// deadline, so a member that never comes is reported by rank instead of
// hanging the others; a member dying in the short window between the two
// can still hang them. Group communicators are cached per ordered rank list;
// createGroup sets one up ahead of time (the executor makes every group its
// plan uses when it is built), and start() on such a group posts the
// non-blocking call and returns its MPI request, tested against the deadline
// by CommRequest::wait.
//
// When a collective times out, MPI cannot say which members never posted
// it, so the rank takes an arrival census before it fails: it asks every
// other member of the group, on the control communicator, how many calls
// on that group it has posted, and waits for answers (half the timeout,
// between 0.5 and 5 s).
// Every rank answers such queries while it polls any request (waitAll), so
// a member that reached the call answers at once; one that did not answer
// is stopped (SIGSTOP), busy elsewhere or gone, and one that answers with
// a smaller count has not reached the call. The message then names them
// ("waiting for ranks [2]"), as the local communicator's does. The
// census costs nothing until a deadline passes, besides an MPI_Iprobe per
// poll once a wait has spun for a while.
//
// collective_permute is point to point on the send/recv communicator under
// its own tag: a source posts one MPI_Isend to its target, a target one
// MPI_Irecv from its source, and nothing else moves; it needs no group
// communicator, and messages between two ranks keep their order, so
// consecutive permutes (of any groups) cannot mix.
//
// send and recv need no group communicator either: a message goes to the
// peer's world rank on the send/recv communicator under MPI tag `tag + 1`
// (0 is collective_permute's), preceded by a header (its count and dtype)
// under the same tag on a communicator of its own. A receive posts both
// MPI_Irecvs when it starts, so receives take messages in the order they
// were posted (MPI's non-overtaking rule holds on each communicator), and
// when it waits it checks the header before the data: a message of another
// size or dtype is an error naming both, never an MPI_ERR_TRUNCATE or a
// silent reinterpretation (MPI itself carries no dtype). The header is one
// small message more per send, against the activations a pipeline moves.
// A send or receive that times out takes the census of its peer, as a
// collective does of its group: the peer answers how many of the matching
// calls (receives from this rank, or sends to it, with the tag) it has
// posted, so the message says whether it is stopped or gone, alive but not
// there yet, or there.
//
// Reductions of f16 and bf16 use user-defined MPI operations over 16-bit
// words that round after every step, as the local communicator does; the
// order in which MPI combines ranks is the MPI library's, so results repeat
// for a given process count and size but need not equal `local` bit for bit.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Communicator.h"

#include "CommUtils.h"

// The C API only: the deprecated C++ bindings add nothing and warn.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <tuple>

namespace partita::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using comm::describeCall;
using comm::describeCount;
using comm::formatRanks;
using comm::groupHash;

template <DType T, ReduceOp O>
void userReduce(void *in, void *inout, int *len, MPI_Datatype *) {
  comm::reduceInto(inout, in, static_cast<size_t>(*len), T, O);
}

/// The send buffer to give MPI's reduce-scatter: MPI forbids `recv` inside
/// `send`, which the interface allows (this rank's own block), so an
/// overlapping input is first copied into `copy`.
const void *unaliasedReduceScatterSend(const void *send, const void *recv,
                                       size_t bytes, size_t groupSize,
                                       std::vector<unsigned char> &copy) {
  const auto *sendBytes = static_cast<const unsigned char *>(send);
  const auto *recvBytes = static_cast<const unsigned char *>(recv);
  size_t all = bytes * groupSize;
  if (recvBytes < sendBytes + all && sendBytes < recvBytes + bytes) {
    copy.assign(sendBytes, sendBytes + all);
    return copy.data();
  }
  return send;
}

/// Control-communicator tags: the set-up handshake uses 1..32766 (every MPI
/// allows tags up to 32767), the census the two left.
constexpr int kCensusQueryTag = 0;
constexpr int kCensusAnswerTag = 32767;
/// How long a timed-out rank waits for the census's answers: half the
/// timeout, at least 500 ms and at most 5 s (never more than the timeout).
/// Members that are polling answer within milliseconds on an idle machine;
/// on an oversubscribed one (ranks sharing cores with other work) a polling
/// rank may wait hundreds of milliseconds for a core, so the window grows
/// with the timeout the user chose for such machines.
std::chrono::milliseconds censusWait(std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  return std::min(
      timeout, std::clamp(timeout / 2, milliseconds(500), milliseconds(5000)));
}

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return "MPI error " + std::to_string(code) + " (" +
         std::string(text, length) + ")";
}

class MpiCommunicator final : public Communicator {
public:
  explicit MpiCommunicator(const MpiOptions &options);
  ~MpiCommunicator() override;

  int rank() const override { return myRank; }
  int size() const override { return worldSize; }
  const char *kind() const override { return "mpi"; }
  bool callableFromAnyThread() const override {
    return threadLevel >= MPI_THREAD_SERIALIZED;
  }

  void allReduce(void *data, size_t count, DType dtype, ReduceOp op,
                 const std::vector<int> &group) override;
  void allGather(const void *send, void *recv, size_t count, DType dtype,
                 const std::vector<int> &group) override;
  void reduceScatter(const void *send, void *recv, size_t count, DType dtype,
                     ReduceOp op, const std::vector<int> &group) override;
  void allToAll(const void *send, void *recv, size_t count, DType dtype,
                const std::vector<int> &group) override;
  void collectivePermute(const void *send, void *recv, size_t count,
                         DType dtype,
                         const std::vector<std::pair<int, int>> &pairs,
                         const std::vector<int> &group) override;
  void barrier(const std::vector<int> &group) override;
  std::shared_ptr<CommGroup> createGroup(const std::vector<int> &ranks) override;
  std::unique_ptr<CommRequest> start(const CollectiveArgs &args,
                                     const CommGroup &group) override;

private:
  /// A group with its MPI communicator (MPI_COMM_NULL for a group of one).
  struct MpiGroup final : CommGroup {
    MpiGroup(std::vector<int> ranks, int position, MPI_Comm comm)
        : CommGroup(std::move(ranks), position), comm(comm) {}
    MPI_Comm comm;
  };
  /// Which call on which group a collective is, for the arrival census:
  /// every member of a group posts its calls on it in the same order, so
  /// the n-th call of one member is the n-th of every other.
  struct CallId {
    std::vector<int> ranks;
    uint64_t group = 0;  // groupHash(ranks)
    uint64_t number = 0; // 1 for the group's first call
  };
  /// A posted collective; wait() tests it against the deadline.
  class Request final : public CommRequest {
  public:
    Request(MpiCommunicator &owner, std::string head, CallId id)
        : owner(owner), head(std::move(head)), started(Clock::now()),
          id(std::move(id)) {}
    void wait(Clock::time_point deadline) override {
      if (requests.empty())
        return;
      owner.waitAll(requests, head, deadline, nullptr, nullptr, started, &id);
      requests.clear();
    }
    MpiCommunicator &owner;
    std::string head;
    Clock::time_point started;
    CallId id;
    std::vector<MPI_Request> requests;
    std::vector<unsigned char> copy; // reduce_scatter's send, when it overlaps
  };

  /// A posted send or receive: the header's and the data's requests.
  class PeerRequest final : public CommRequest {
  public:
    PeerRequest(MpiCommunicator &owner, comm::PeerCall call,
                const CollectiveArgs &args)
        : owner(owner), call(std::move(call)), count(args.count),
          dtype(args.dtype), isSend(args.kind == CollectiveKind::Send) {}
    void wait(Clock::time_point deadline) override;
    MpiCommunicator &owner;
    comm::PeerCall call;
    size_t count;
    DType dtype;
    bool isSend;
    Clock::time_point started = Clock::now();
    CallId id; // the census's name: this call on its channel
    int64_t header[2] = {0, 0}; // count, dtype
    std::vector<MPI_Request> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    bool done = false;
  };

  /// One collective call: where it runs and how long it may take.
  struct Call {
    std::string head; // "rank 3: all_reduce over group [0,1,2,3]"
    int position;
    MPI_Comm comm; // MPI_COMM_NULL for a group of one
    Clock::time_point deadline;
    CallId id;
  };

  /// Refuses calls after a failure, validates the group, and creates or
  /// finds its communicator.
  Call begin(const char *collective, const std::vector<int> &group);
  MPI_Comm groupComm(const std::string &head, const std::vector<int> &group,
                     int position, Clock::time_point deadline);
  /// Polls `requests` until all complete, or fails naming `head`. On a
  /// timeout, `waitingFor[i]` (when given) is the rank request i waits for.
  /// `since`, when set, is when the call started: the timeout message then
  /// names the time from it to the deadline instead of the timeout.
  /// Without `waitingFor`, a timed-out collective takes the arrival census
  /// of call `id` to name the members that did not post it.
  void waitAll(std::vector<MPI_Request> &requests, const std::string &head,
               Clock::time_point deadline,
               const std::vector<int> *waitingFor = nullptr,
               MPI_Status *status = nullptr, Clock::time_point since = {},
               const CallId *id = nullptr);
  /// Polls `requests` (tests them, answering census queries and backing
  /// off) until all complete, or returns false at the deadline.
  bool pollUntil(std::vector<MPI_Request> &requests, const std::string &head,
                 Clock::time_point deadline, MPI_Status *status);
  /// Posts a send or a receive (CollectiveKind::Send, Recv).
  std::unique_ptr<CommRequest> startPeer(const CollectiveArgs &args,
                                         const CommGroup &group);
  /// Starts one non-blocking operation (`start` gets its request) and
  /// waits for it as waitAll does.
  template <typename Start>
  void runOne(const std::string &head, Clock::time_point deadline, Start start,
              const std::vector<int> *waitingFor = nullptr,
              MPI_Status *status = nullptr, const CallId *id = nullptr) {
    std::vector<MPI_Request> request(1);
    check(start(&request[0]), head);
    waitAll(request, head, deadline, waitingFor, status, {}, id);
  }
  /// Counts a call this rank posts on `ranks` (the census's numbering).
  CallId nextCall(const std::vector<int> &ranks);
  /// Answers the census queries that have arrived; never blocks.
  void answerCensus();
  /// Asks the other members of `id`'s group how many calls on it they have
  /// posted: -1 for a member that did not answer in time.
  std::map<int, long long> askPosted(const CallId &id);
  /// Asks the other members of `id`'s group which of them posted it; the
  /// text to append to the timeout message (" waiting for ranks [2] (...)").
  std::string takeCensus(const CallId &id);
  /// The census of a send or receive: asks the peer how many of the
  /// matching calls it has posted; the text to append after "waiting for
  /// rank P" (" (it is alive but had not posted that send: ...)").
  std::string peerCensus(const CallId &id, bool isSend, int tag);
  std::string censusWaitText() const {
    return std::to_string(censusWait(getTimeout()).count()) + " ms";
  }
  /// A group of one needs no MPI: its own block is the result. memmove,
  /// since reduce_scatter lets `recv` lie inside `send`.
  static bool copyIfAlone(const Call &call, const void *send, void *recv,
                          size_t bytes) {
    if (call.comm != MPI_COMM_NULL)
      return false;
    if (bytes)
      std::memmove(recv, send, bytes);
    return true;
  }
  void check(int code, const std::string &head) {
    if (code != MPI_SUCCESS)
      fail(head + " failed: " + mpiErrorText(code));
  }
  int mpiCount(size_t count, const std::string &head);
  MPI_Datatype typeOf(DType dtype) const;
  MPI_Op opOf(DType dtype, ReduceOp op) const;
  [[noreturn]] void fail(const std::string &message);
  std::string timeoutText() const {
    return std::to_string(getTimeout().count()) + " ms";
  }

  MpiOptions options;
  bool ownsMpi = false;
  int threadLevel = MPI_THREAD_SINGLE; // MPI_Query_thread
  bool failed = false;
  std::string firstFailure;
  int myRank = 0, worldSize = 1, tagUpperBound = 32767;
  MPI_Comm worldComm = MPI_COMM_NULL; // collectives over all ranks in order
  MPI_Comm p2pComm = MPI_COMM_NULL;   // send / recv, collective_permute
  MPI_Comm headerComm = MPI_COMM_NULL; // the headers of send / recv
  MPI_Comm ctrlComm = MPI_COMM_NULL;  // group set-up handshakes
  std::map<std::vector<int>, MPI_Comm> groupComms;
  /// Calls posted per group (by groupHash), the census's answers.
  std::map<uint64_t, uint64_t> callsPosted;
  /// Census answers being sent: {group, number, calls posted}.
  struct Answer {
    uint64_t words[3];
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::list<Answer> answers;
  MPI_Op halfOps[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bf16Ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

MpiCommunicator::MpiCommunicator(const MpiOptions &options) : options(options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    throw Error("mpi communicator: MPI was already finalized in this process");
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) !=
        MPI_SUCCESS)
      throw Error("mpi communicator: MPI_Init_thread failed");
    ownsMpi = true;
  }
  MPI_Query_thread(&threadLevel);
  MPI_Comm_rank(MPI_COMM_WORLD, &myRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  int *upper = nullptr, found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &upper, &found);
  if (found && upper)
    tagUpperBound = *upper;
  for (MPI_Comm *c : {&worldComm, &p2pComm, &headerComm, &ctrlComm}) {
    MPI_Comm_dup(MPI_COMM_WORLD, c);
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  }
  MPI_Op_create(&userReduce<DType::F16, ReduceOp::Sum>, 1, &halfOps[0]);
  MPI_Op_create(&userReduce<DType::F16, ReduceOp::Max>, 1, &halfOps[1]);
  MPI_Op_create(&userReduce<DType::F16, ReduceOp::Min>, 1, &halfOps[2]);
  MPI_Op_create(&userReduce<DType::BF16, ReduceOp::Sum>, 1, &bf16Ops[0]);
  MPI_Op_create(&userReduce<DType::BF16, ReduceOp::Max>, 1, &bf16Ops[1]);
  MPI_Op_create(&userReduce<DType::BF16, ReduceOp::Min>, 1, &bf16Ops[2]);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failure a collective may still be in flight: freeing or
  // finalizing would wait for a peer that is gone.
  if (failed || finalized)
    return;
  for (auto &[group, c] : groupComms)
    if (c != worldComm)
      MPI_Comm_free(&c);
  for (MPI_Comm *c : {&worldComm, &p2pComm, &headerComm, &ctrlComm})
    MPI_Comm_free(c);
  for (MPI_Op &op : halfOps)
    MPI_Op_free(&op);
  for (MPI_Op &op : bf16Ops)
    MPI_Op_free(&op);
  if (ownsMpi)
    MPI_Finalize();
}

void MpiCommunicator::fail(const std::string &message) {
  if (!failed) {
    failed = true;
    firstFailure = message;
  }
  if (options.abortOnError) {
    std::fprintf(stderr, "partita: %s; calling MPI_Abort\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  throw Error(message);
}

int MpiCommunicator::mpiCount(size_t count, const std::string &head) {
  if (count > static_cast<size_t>(INT_MAX))
    fail(head + ": " + std::to_string(count) +
         " elements exceed MPI's int count (" + std::to_string(INT_MAX) + ")");
  return static_cast<int>(count);
}

MPI_Datatype MpiCommunicator::typeOf(DType dtype) const {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::F16:
  case DType::BF16:
    return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiCommunicator::opOf(DType dtype, ReduceOp op) const {
  int i = op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? 1 : 2;
  if (dtype == DType::F16)
    return halfOps[i];
  if (dtype == DType::BF16)
    return bf16Ops[i];
  return i == 0 ? MPI_SUM : i == 1 ? MPI_MAX : MPI_MIN;
}

bool MpiCommunicator::pollUntil(std::vector<MPI_Request> &requests,
                                const std::string &head,
                                Clock::time_point deadline,
                                MPI_Status *status) {
  // MPI_Test drives progress; back off from spinning to yielding to short
  // sleeps so that oversubscribed ranks leave the cores to their peers.
  for (unsigned polls = 0;; ++polls) {
    bool pending = false;
    for (MPI_Request &request : requests) {
      if (request == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      check(MPI_Test(&request, &done, status ? status : MPI_STATUS_IGNORE),
            head);
      pending |= !done;
    }
    if (!pending)
      return true;
    if (Clock::now() >= deadline)
      return false;
    if (polls < 64)
      continue;
    answerCensus();
    if (polls < 1024)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void MpiCommunicator::waitAll(std::vector<MPI_Request> &requests,
                              const std::string &head,
                              Clock::time_point deadline,
                              const std::vector<int> *waitingFor,
                              MPI_Status *status, Clock::time_point since,
                              const CallId *id) {
  if (pollUntil(requests, head, deadline, status))
    return;
  std::string message =
      head + " timed out after " +
      (since == Clock::time_point{}
           ? timeoutText()
           : std::to_string(std::chrono::duration_cast<
                                std::chrono::milliseconds>(deadline - since)
                                .count()) +
                 " ms");
  if (waitingFor) {
    std::vector<int> missing;
    for (size_t i = 0; i < requests.size(); ++i)
      if (requests[i] != MPI_REQUEST_NULL)
        missing.push_back((*waitingFor)[i]);
    message += " waiting for ranks " + formatRanks(missing);
  } else if (id) {
    message += takeCensus(*id);
  } else {
    message += " (MPI cannot tell which ranks did not take part)";
  }
  fail(message);
}

MpiCommunicator::CallId
MpiCommunicator::nextCall(const std::vector<int> &ranks) {
  CallId id{ranks, groupHash(ranks), 0};
  id.number = ++callsPosted[id.group];
  return id;
}

void MpiCommunicator::answerCensus() {
  for (auto it = answers.begin(); it != answers.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? answers.erase(it) : std::next(it);
  }
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusQueryTag, ctrlComm, &arrived,
                   &status) != MPI_SUCCESS ||
        !arrived)
      return;
    uint64_t query[2] = {0, 0};
    if (MPI_Recv(query, 2, MPI_UINT64_T, status.MPI_SOURCE, kCensusQueryTag,
                 ctrlComm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    auto posted = callsPosted.find(query[0]);
    Answer &answer = answers.emplace_back();
    answer.words[0] = query[0];
    answer.words[1] = query[1];
    answer.words[2] = posted == callsPosted.end() ? 0 : posted->second;
    if (MPI_Isend(answer.words, 3, MPI_UINT64_T, status.MPI_SOURCE,
                  kCensusAnswerTag, ctrlComm, &answer.request) != MPI_SUCCESS)
      answers.pop_back();
  }
}

std::map<int, long long> MpiCommunicator::askPosted(const CallId &id) {
  uint64_t query[2] = {id.group, id.number};
  std::vector<MPI_Request> queries;
  // Calls posted by each member, -1 until it answers.
  std::map<int, long long> posted;
  for (int r : id.ranks) {
    if (r == myRank)
      continue;
    posted[r] = -1;
    queries.emplace_back();
    if (MPI_Isend(query, 2, MPI_UINT64_T, r, kCensusQueryTag, ctrlComm,
                  &queries.back()) != MPI_SUCCESS)
      queries.pop_back();
  }
  size_t unanswered = posted.size();
  Clock::time_point until = Clock::now() + censusWait(getTimeout());
  while (unanswered && Clock::now() < until) {
    // Members timing out at the same moment ask too.
    answerCensus();
    int arrived = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kCensusAnswerTag, ctrlComm, &arrived,
                   &status) != MPI_SUCCESS)
      break;
    if (!arrived) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    uint64_t answer[3] = {0, 0, 0};
    if (MPI_Recv(answer, 3, MPI_UINT64_T, status.MPI_SOURCE, kCensusAnswerTag,
                 ctrlComm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      break;
    auto it = posted.find(status.MPI_SOURCE);
    // An answer to an earlier census (it came after that one gave up).
    if (answer[0] != id.group || answer[1] != id.number || it == posted.end() ||
        it->second >= 0)
      continue;
    it->second = static_cast<long long>(answer[2]);
    --unanswered;
  }
  // A query to a stopped rank may never complete; the communicator is
  // failing, so nothing waits for it.
  for (MPI_Request &q : queries)
    if (q != MPI_REQUEST_NULL)
      MPI_Request_free(&q);
  return posted;
}

std::string MpiCommunicator::takeCensus(const CallId &id) {
  std::map<int, long long> posted = askPosted(id);
  std::vector<int> silent, behind;
  for (auto [r, n] : posted) {
    if (n < 0)
      silent.push_back(r);
    else if (static_cast<uint64_t>(n) < id.number)
      behind.push_back(r);
  }
  std::vector<int> missing = silent;
  missing.insert(missing.end(), behind.begin(), behind.end());
  std::sort(missing.begin(), missing.end());
  if (missing.empty())
    return " (every member says it posted this call, #" +
           std::to_string(id.number) +
           " on the group; MPI did not complete it)";
  std::string text = " waiting for ranks " + formatRanks(missing) + " (";
  if (!silent.empty())
    text += formatRanks(silent) + " did not answer within " + censusWaitText() +
            ": stopped, busy or gone";
  if (!behind.empty())
    text += std::string(silent.empty() ? "" : "; ") + formatRanks(behind) +
            " had not reached it";
  return text + ")";
}

std::string MpiCommunicator::peerCensus(const CallId &id, bool isSend,
                                        int tag) {
  long long theirs = askPosted(id).begin()->second;
  const char *what = isSend ? "receive" : "send";
  if (theirs < 0)
    return " (it did not answer within " + censusWaitText() +
           ": stopped, busy or gone)";
  if (static_cast<uint64_t>(theirs) >= id.number)
    return std::string(" (it posted that ") + what +
           "; MPI did not complete it)";
  return std::string(" (it is alive but had not posted that ") + what +
         ": " +
         comm::peerProgress(isSend, tag, myRank, uint64_t(theirs), id.number) +
         ")";
}

MpiCommunicator::Call MpiCommunicator::begin(const char *collective,
                                             const std::vector<int> &group) {
  std::string head = describeCall(myRank, collective, group);
  if (failed)
    throw Error(head +
                " refused: an earlier call failed and MPI cannot "
                "cancel it (" +
                firstFailure + ")");
  int position;
  try {
    position = comm::checkGroup(myRank, worldSize, group, collective);
  } catch (const Error &e) {
    fail(e.what());
  }
  Clock::time_point deadline = Clock::now() + getTimeout();
  MPI_Comm c = group.size() == 1 ? MPI_COMM_NULL
                                 : groupComm(head, group, position, deadline);
  return {head, position, c, deadline, nextCall(group)};
}

MPI_Comm MpiCommunicator::groupComm(const std::string &head,
                                    const std::vector<int> &group, int position,
                                    Clock::time_point deadline) {
  auto it = groupComms.find(group);
  if (it != groupComms.end())
    return it->second;
  bool identity = static_cast<int>(group.size()) == worldSize;
  for (size_t i = 0; identity && i < group.size(); ++i)
    identity = group[i] == static_cast<int>(i);
  if (identity)
    return groupComms[group] = worldComm;

  // Handshake: every member tells every other one the group it is setting
  // up (FNV-1a of the rank list), under the call's deadline.
  uint64_t hash = groupHash(group);
  int tag = 1 + static_cast<int>(hash % static_cast<uint64_t>(
                                            std::min(tagUpperBound, 32766)));
  std::string setupHead = head + " (setting up the group)";
  size_t n = group.size();
  std::vector<uint64_t> theirs(n, 0);
  std::vector<MPI_Request> recvs, sends;
  std::vector<int> from;
  for (size_t q = 0; q < n; ++q) {
    if (static_cast<int>(q) == position)
      continue;
    recvs.emplace_back();
    from.push_back(group[q]);
    check(MPI_Irecv(&theirs[q], 1, MPI_UINT64_T, group[q], tag, ctrlComm,
                    &recvs.back()),
          setupHead);
    sends.emplace_back();
    check(MPI_Isend(&hash, 1, MPI_UINT64_T, group[q], tag, ctrlComm,
                    &sends.back()),
          setupHead);
  }
  waitAll(recvs, head, deadline, &from);
  waitAll(sends, head, deadline);
  for (size_t q = 0; q < n; ++q)
    if (static_cast<int>(q) != position && theirs[q] != hash)
      fail(head + ": rank " + std::to_string(group[q]) +
           " is setting up a different group at the same time");

  MPI_Group worldGroup, subGroup;
  MPI_Comm c = MPI_COMM_NULL;
  check(MPI_Comm_group(worldComm, &worldGroup), setupHead);
  check(
      MPI_Group_incl(worldGroup, static_cast<int>(n), group.data(), &subGroup),
      setupHead);
  check(MPI_Comm_create_group(worldComm, subGroup, tag, &c), setupHead);
  MPI_Group_free(&subGroup);
  MPI_Group_free(&worldGroup);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return groupComms[group] = c;
}

std::shared_ptr<CommGroup>
MpiCommunicator::createGroup(const std::vector<int> &ranks) {
  Call call = begin("create_group", ranks);
  return std::make_shared<MpiGroup>(ranks, call.position, call.comm);
}

std::unique_ptr<CommRequest>
MpiCommunicator::start(const CollectiveArgs &args, const CommGroup &group) {
  if (args.kind == CollectiveKind::Send || args.kind == CollectiveKind::Recv)
    return startPeer(args, group);
  const auto *g = dynamic_cast<const MpiGroup *>(&group);
  // collective_permute is point to point (no group communicator), and a
  // group made elsewhere has none: both run blocking.
  if (!g || args.kind == CollectiveKind::CollectivePermute)
    return Communicator::start(args, group);
  const char *name = toString(args.kind);
  std::string head = describeCall(myRank, name, group.ranks());
  if (failed)
    throw Error(head +
                " refused: an earlier call failed and MPI cannot "
                "cancel it (" +
                firstFailure + ")");
  auto request =
      std::make_unique<Request>(*this, head, nextCall(group.ranks()));
  int n = mpiCount(args.count, head);
  MPI_Datatype type = typeOf(args.dtype);
  size_t bytes = args.count * sizeOf(args.dtype);
  if (g->comm == MPI_COMM_NULL) {
    if (args.kind != CollectiveKind::AllReduce &&
        args.kind != CollectiveKind::Barrier && bytes)
      std::memmove(args.recv, args.send, bytes);
    return request;
  }
  request->requests.resize(1);
  MPI_Request *r = &request->requests[0];
  int code = MPI_SUCCESS;
  switch (args.kind) {
  case CollectiveKind::AllReduce:
    if (n == 0) {
      request->requests.clear();
      return request;
    }
    code = MPI_Iallreduce(MPI_IN_PLACE, args.recv, n, type,
                          opOf(args.dtype, args.op), g->comm, r);
    break;
  case CollectiveKind::AllGather:
    code = MPI_Iallgather(args.send, n, type, args.recv, n, type, g->comm, r);
    break;
  case CollectiveKind::ReduceScatter: {
    const void *send = unaliasedReduceScatterSend(
        args.send, args.recv, bytes, group.ranks().size(), request->copy);
    code = MPI_Ireduce_scatter_block(send, args.recv, n, type,
                                     opOf(args.dtype, args.op), g->comm, r);
    break;
  }
  case CollectiveKind::AllToAll:
    code = MPI_Ialltoall(args.send, n, type, args.recv, n, type, g->comm, r);
    break;
  case CollectiveKind::Barrier:
    code = MPI_Ibarrier(g->comm, r);
    break;
  case CollectiveKind::CollectivePermute:
  case CollectiveKind::Send:
  case CollectiveKind::Recv:
    break;
  }
  check(code, head);
  return request;
}

void MpiCommunicator::allReduce(void *data, size_t count, DType dtype,
                                ReduceOp op, const std::vector<int> &group) {
  Call call = begin("all_reduce", group);
  int n = mpiCount(count, call.head);
  if (call.comm == MPI_COMM_NULL || n == 0)
    return;
  runOne(
      call.head, call.deadline,
      [&](MPI_Request *request) {
        return MPI_Iallreduce(MPI_IN_PLACE, data, n, typeOf(dtype),
                              opOf(dtype, op), call.comm, request);
      },
      nullptr, nullptr, &call.id);
}

void MpiCommunicator::allGather(const void *send, void *recv, size_t count,
                                DType dtype, const std::vector<int> &group) {
  Call call = begin("all_gather", group);
  int n = mpiCount(count, call.head);
  if (copyIfAlone(call, send, recv, count * sizeOf(dtype)))
    return;
  runOne(
      call.head, call.deadline,
      [&](MPI_Request *request) {
        return MPI_Iallgather(send, n, typeOf(dtype), recv, n, typeOf(dtype),
                              call.comm, request);
      },
      nullptr, nullptr, &call.id);
}

void MpiCommunicator::reduceScatter(const void *send, void *recv, size_t count,
                                    DType dtype, ReduceOp op,
                                    const std::vector<int> &group) {
  Call call = begin("reduce_scatter", group);
  int n = mpiCount(count, call.head);
  if (copyIfAlone(call, send, recv, count * sizeOf(dtype)))
    return;
  std::vector<unsigned char> copy;
  send = unaliasedReduceScatterSend(send, recv, count * sizeOf(dtype),
                                    group.size(), copy);
  runOne(
      call.head, call.deadline,
      [&](MPI_Request *request) {
        return MPI_Ireduce_scatter_block(send, recv, n, typeOf(dtype),
                                         opOf(dtype, op), call.comm, request);
      },
      nullptr, nullptr, &call.id);
}

void MpiCommunicator::allToAll(const void *send, void *recv, size_t count,
                               DType dtype, const std::vector<int> &group) {
  Call call = begin("all_to_all", group);
  int n = mpiCount(count, call.head);
  if (copyIfAlone(call, send, recv, count * sizeOf(dtype)))
    return;
  runOne(
      call.head, call.deadline,
      [&](MPI_Request *request) {
        return MPI_Ialltoall(send, n, typeOf(dtype), recv, n, typeOf(dtype),
                             call.comm, request);
      },
      nullptr, nullptr, &call.id);
}

/// send and recv use `tag + 1`.
constexpr int kPermuteTag = 0;

void MpiCommunicator::collectivePermute(
    const void *send, void *recv, size_t count, DType dtype,
    const std::vector<std::pair<int, int>> &pairs,
    const std::vector<int> &group) {
  std::string head = describeCall(myRank, "collective_permute", group);
  if (failed)
    throw Error(head +
                " refused: an earlier call failed and MPI cannot "
                "cancel it (" +
                firstFailure + ")");
  int from = -1, to = -1;
  try {
    int position =
        comm::checkGroup(myRank, worldSize, group, "collective_permute");
    std::tie(from, to) = comm::checkPermutePairs(
        head, pairs, static_cast<int>(group.size()), position);
    (void)sizeOf(dtype);
  } catch (const Error &e) {
    fail(e.what());
  }
  int n = mpiCount(count, head);
  size_t bytes = count * sizeOf(dtype);
  if (from < 0) {
    if (bytes)
      std::memset(recv, 0, bytes);
  } else if (group[from] == myRank) {
    if (bytes)
      std::memcpy(recv, send, bytes);
  }
  bool sends = to >= 0 && group[to] != myRank;
  bool recvs = from >= 0 && group[from] != myRank;
  if (!sends && !recvs)
    return;
  Clock::time_point deadline = Clock::now() + getTimeout();
  std::vector<MPI_Request> recvRequest, sendRequest;
  std::vector<int> recvFrom, sendTo;
  if (recvs) {
    recvRequest.emplace_back();
    recvFrom.push_back(group[from]);
    check(MPI_Irecv(recv, n, typeOf(dtype), group[from], kPermuteTag, p2pComm,
                    &recvRequest.back()),
          head);
  }
  if (sends) {
    sendRequest.emplace_back();
    sendTo.push_back(group[to]);
    check(MPI_Isend(send, n, typeOf(dtype), group[to], kPermuteTag, p2pComm,
                    &sendRequest.back()),
          head);
  }
  // Testing the receive also progresses the send.
  if (recvs) {
    MPI_Status status;
    waitAll(recvRequest, head, deadline, &recvFrom, &status);
    int got = 0;
    MPI_Get_count(&status, typeOf(dtype), &got);
    if (got != n)
      fail(head + ": rank " + std::to_string(group[from]) + " sent " +
           (got == MPI_UNDEFINED ? std::string("a size that is no whole "
                                               "number of elements")
                                 : std::to_string(got) + " elements") +
           ", not " + describeCount(count, dtype));
  }
  if (sends)
    waitAll(sendRequest, head, deadline, &sendTo);
}

void MpiCommunicator::barrier(const std::vector<int> &group) {
  Call call = begin("barrier", group);
  if (call.comm == MPI_COMM_NULL)
    return;
  runOne(
      call.head, call.deadline,
      [&](MPI_Request *request) { return MPI_Ibarrier(call.comm, request); },
      nullptr, nullptr, &call.id);
}

std::unique_ptr<CommRequest>
MpiCommunicator::startPeer(const CollectiveArgs &args, const CommGroup &group) {
  comm::PeerCall call;
  try {
    comm::checkGroup(myRank, worldSize, group.ranks(), toString(args.kind));
    call = comm::checkPeerCall(args, group);
  } catch (const Error &e) {
    fail(e.what());
  }
  if (failed)
    throw Error(call.head + " refused: an earlier call failed and MPI cannot "
                            "cancel it (" +
                firstFailure + ")");
  int n = mpiCount(args.count, call.head);
  auto request = std::make_unique<PeerRequest>(*this, call, args);
  int tag = args.tag + 1, peer = call.peerRank;
  // The census names a channel by a list no group has (ranks are not
  // negative); each end counts its own calls on it, so a peer's answer is
  // its number of the matching calls.
  std::vector<int> channel = {-1 - args.tag, request->isSend ? myRank : peer,
                              request->isSend ? peer : myRank};
  request->id = nextCall(channel);
  request->id.ranks = {myRank, peer};
  MPI_Request *header = &request->requests[0], *data = &request->requests[1];
  if (request->isSend) {
    request->header[0] = static_cast<int64_t>(args.count);
    request->header[1] = static_cast<int64_t>(args.dtype);
    check(MPI_Isend(request->header, 2, MPI_INT64_T, peer, tag, headerComm,
                    header),
          call.head);
    check(MPI_Isend(args.send, n, typeOf(args.dtype), peer, tag, p2pComm,
                    data),
          call.head);
  } else {
    check(MPI_Irecv(request->header, 2, MPI_INT64_T, peer, tag, headerComm,
                    header),
          call.head);
    check(
        MPI_Irecv(args.recv, n, typeOf(args.dtype), peer, tag, p2pComm, data),
        call.head);
  }
  return request;
}

void MpiCommunicator::PeerRequest::wait(Clock::time_point deadline) {
  if (done)
    return;
  auto timedOut = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - started);
    owner.fail(call.head + " timed out after " + std::to_string(ms.count()) +
               " ms waiting for rank " + std::to_string(call.peerRank) +
               owner.peerCensus(id, isSend, call.tag));
  };
  if (!isSend) {
    // Before failing, the posted data receive is cancelled and completed:
    // else MPI could still write into the caller's buffer after the error
    // has unwound it (ASan: stack-use-after-scope under a size mismatch).
    auto cancelData = [&] {
      if (requests[1] == MPI_REQUEST_NULL)
        return;
      MPI_Cancel(&requests[1]);
      MPI_Wait(&requests[1], MPI_STATUS_IGNORE);
    };
    // The header first: a data message of another size would fail the
    // receive with MPI_ERR_TRUNCATE before its sizes could be named.
    std::vector<MPI_Request> first{requests[0]};
    bool arrived = owner.pollUntil(first, call.head, deadline, nullptr);
    requests[0] = first[0];
    if (!arrived) {
      cancelData();
      timedOut();
    }
    size_t sentCount = static_cast<size_t>(header[0]);
    auto sentType = static_cast<DType>(header[1]);
    if (sentCount != count || sentType != dtype) {
      cancelData();
      owner.fail(
          comm::peerMismatch(call.head, sentCount, sentType, call.peerRank));
    }
  }
  if (!owner.pollUntil(requests, call.head, deadline, nullptr))
    timedOut();
  done = true;
}

} // namespace

std::unique_ptr<Communicator> createMpiCommunicator(const MpiOptions &options) {
  return std::make_unique<MpiCommunicator>(options);
}

void abortMpiJob(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Abort(MPI_COMM_WORLD, code);
}

} // namespace partita::runtime
