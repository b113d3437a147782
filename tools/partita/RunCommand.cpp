//===- RunCommand.cpp - `partita run`: execute a plan ---------------------===//
//
// Loads a plan, runs its step program on N ranks (threads on the local
// communicator, or MPI processes), and prints every result. A train step
// (@train_step, from `partita plan --train`) is trained instead: --steps
// steps on consecutive batches of a token file (TrainData.h), one line per
// step with its loss. Inputs come from
// .npy files or are generated (counter-based, so every rank and every run
// sees the same values; integer inputs in [0, bound) from the plan). With
// --check it also runs the plan's unpartitioned "reference" program on one
// rank with the same parameters and inputs and compares every result.
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"
#include "tools/partita/GeneratedInputs.h"
#include "tools/partita/TrainData.h"

#include "partita/runtime/Executor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand runCommand("run", "Execute a plan on N ranks (local threads or "
                                 "MPI) and print its results");

cl::opt<std::string> planFile(cl::Positional, cl::sub(runCommand),
                              cl::desc("<plan.pb>"));
cl::opt<std::string> ranksArg("ranks", cl::sub(runCommand), cl::value_desc("n"),
                              cl::desc("Number of ranks (default: the plan's "
                                       "device count)"));
cl::opt<std::string> commArg("comm", cl::sub(runCommand), cl::init("local"),
                             cl::value_desc("local|mpi"),
                             cl::desc("Communicator: local (threads, default) "
                                      "or mpi (one process per rank, under "
                                      "mpirun)"));
cl::opt<std::string> stepsArg("steps", cl::sub(runCommand), cl::value_desc("k"),
                              cl::desc("Steps to run (default 1); a train "
                                       "step trains for k steps"));
cl::opt<std::string>
    dataArg("data", cl::sub(runCommand), cl::value_desc("file"),
            cl::desc("Training: flat binary file of token ids, batches of "
                     "consecutive windows of seq + 1 tokens (default: "
                     "/usr/share/common-licenses/GPL-3, byte-level)"));
cl::opt<unsigned> tokenBytesArg(
    "token-bytes", cl::sub(runCommand), cl::init(1), cl::value_desc("1|2|4"),
    cl::desc("Training: bytes per token in --data (little-endian; default "
             "1: ids are bytes)"));
cl::opt<bool> printBatchArg(
    "print-batch", cl::sub(runCommand), cl::Hidden,
    cl::desc("Testing: print each training step's ids and labels"));
cl::opt<std::string> saveParamsArg(
    "save-params", cl::sub(runCommand), cl::value_desc("dir"),
    cl::desc("Training: write the final parameters as DIR/<name>.npy"));
cl::opt<std::string> saveCheckpointArg(
    "save-checkpoint", cl::sub(runCommand), cl::value_desc("dir"),
    cl::desc("Training: after the last step, write every parameter and "
             "optimizer state buffer as DIR/<name>.npy (global arrays) and the "
             "number of steps trained as DIR/checkpoint.txt"));
cl::opt<std::string> loadCheckpointArg(
    "load-checkpoint", cl::sub(runCommand), cl::value_desc("dir"),
    cl::desc("Training: start from a --save-checkpoint directory (its "
             "parameters, optimizer state and data position); any plan of the "
             "same model and optimizer takes it, whatever its mesh or "
             "strategy"));
cl::list<std::string> inputsArg(
    "inputs", cl::sub(runCommand), cl::CommaSeparated,
    cl::value_desc("a.npy,..."),
    cl::desc("Input arrays in the program's input order (default: generated)"));
cl::opt<std::string>
    outputsArg("outputs", cl::sub(runCommand), cl::value_desc("dir"),
               cl::desc("Write every result as DIR/<name>.npy"));
cl::opt<bool> checkArg("check", cl::sub(runCommand),
                       cl::desc("Compare with the plan's unpartitioned "
                                "reference program run on one rank"));
cl::opt<double> rtolArg("rtol", cl::sub(runCommand), cl::init(1e-5),
                        cl::desc("--check: largest relative difference "
                                 "allowed (max |a-b| / max |b| per result; "
                                 "training: per step's loss and per final "
                                 "parameter)"));
cl::opt<double> paramRtolArg(
    "param-rtol", cl::sub(runCommand), cl::init(-1),
    cl::desc("--check of training: largest relative difference allowed in "
             "the final parameters (default: --rtol). AdamW scales rounding "
             "noise in a zero gradient up to steps of size lr, so its "
             "parameters may differ more than its losses"));
cl::opt<uint64_t> seedArg("input-seed", cl::sub(runCommand), cl::init(1),
                          cl::desc("Seed of generated inputs"));
cl::opt<unsigned> timeoutArg("timeout-ms", cl::sub(runCommand), cl::init(60000),
                             cl::desc("Collective timeout in milliseconds"));

cl::opt<bool> syncCommArg(
    "sync-comm", cl::sub(runCommand),
    cl::desc("Run each gradient bucket's communicator call in line instead "
             "of on a communication thread that overlaps it with the rest "
             "of backward (same results; for measuring the overlap)"));

cl::opt<bool> profileArg(
    "profile", cl::sub(runCommand),
    cl::desc("Time every instruction; print rank 0's time per step for each "
             "kernel kind and collective, largest first"));

cl::opt<int> failRankArg(
    "inject-failure-rank", cl::sub(runCommand), cl::init(-1), cl::Hidden,
    cl::desc("Testing: this rank fails before step --inject-failure-step "
             "(local: throws; mpi: the process exits), so the others must "
             "fail in their next collective instead of hanging"));
cl::opt<int> failStepArg(
    "inject-failure-step", cl::sub(runCommand), cl::init(1), cl::Hidden,
    cl::desc("Testing: the step (1-based) before which "
             "--inject-failure-rank fails"));

constexpr StringLiteral kCommand = "run";

/// --inject-failure-rank: that rank fails before step --inject-failure-step
/// (`step` counts from 0).
void maybeInjectFailure(rt::Communicator *comm, int64_t step) {
  if (!comm || comm->rank() != failRankArg || step + 1 != failStepArg)
    return;
  if (std::string(comm->kind()) == "mpi") {
    // One write, so that it is not torn by other ranks' output.
    errs() << ("partita run: rank " + std::to_string(comm->rank()) +
               ": injected failure, exiting\n");
    errs().flush();
    std::_Exit(1);
  }
  throw rt::Error(step == 0 ? std::string("injected failure before the first step")
                            : "injected failure before step " +
                                  std::to_string(step + 1));
}

rt::ExecutorOptions executorOptions(const std::string &program) {
  rt::ExecutorOptions options;
  options.overlapBuckets = !syncCommArg;
  options.profile = profileArg && program != "reference";
  return options;
}

/// --profile: rank 0's profile of the last run of the step program.
std::vector<rt::ProfileEntry> rankZeroProfile;

/// Keeps `executor`'s profile when it is rank 0's of a profiled run.
void keepProfile(const rt::Executor &executor, rt::Communicator *comm) {
  std::vector<rt::ProfileEntry> entries = executor.profile();
  if (!entries.empty() && (!comm || comm->rank() == 0))
    rankZeroProfile = std::move(entries);
}

/// Prints rankZeroProfile as time per step beside the measured step time.
void printProfile(int64_t steps, const std::vector<double> &stepSeconds) {
  if (rankZeroProfile.empty() || steps < 1)
    return;
  double total = 0, measured = 0;
  for (const rt::ProfileEntry &e : rankZeroProfile)
    total += e.seconds;
  for (double s : stepSeconds)
    measured += s;
  outs() << "profile of rank 0, per step (mean of " << steps << "):\n";
  for (const rt::ProfileEntry &e : rankZeroProfile)
    outs() << format("  %-42s %7.1f calls %9.3f ms %6.1f%%\n", e.what.c_str(),
                     double(e.calls) / steps, e.seconds / steps * 1e3,
                     total > 0 ? 100 * e.seconds / total : 0.0);
  outs() << format("  %-42s %13s %9.3f ms (measured step: %.3f ms)\n",
                   "sum", "", total / steps * 1e3,
                   measured / std::max<size_t>(stepSeconds.size(), 1) * 1e3);
}

//===----------------------------------------------------------------------===//
// .npy files (format 1.0-3.0, little-endian, C order)
//===----------------------------------------------------------------------===//

const char *npyDescr(rt::DType dtype) {
  switch (dtype) {
  case rt::DType::F32:
    return "<f4";
  case rt::DType::F64:
    return "<f8";
  case rt::DType::F16:
    return "<f2";
  case rt::DType::I32:
    return "<i4";
  case rt::DType::I64:
    return "<i8";
  case rt::DType::BF16:
    break;
  }
  return nullptr;
}

rt::Tensor readNpy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw rt::Error("cannot open '" + path + "'");
  std::string data((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  auto bad = [&](const std::string &why) {
    return rt::Error("'" + path + "' is not a readable .npy file: " + why);
  };
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0)
    throw bad("no NUMPY magic");
  size_t headerLen, start;
  if (data[6] == 1) {
    headerLen = uint8_t(data[8]) | (uint8_t(data[9]) << 8);
    start = 10;
  } else {
    if (data.size() < 12)
      throw bad("truncated header");
    headerLen = uint8_t(data[8]) | (uint8_t(data[9]) << 8) |
                (uint32_t(uint8_t(data[10])) << 16) |
                (uint32_t(uint8_t(data[11])) << 24);
    start = 12;
  }
  if (data.size() < start + headerLen)
    throw bad("truncated header");
  std::string header = data.substr(start, headerLen);
  auto field = [&](const std::string &key) -> std::string {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos)
      throw bad("header has no '" + key + "'");
    size_t colon = header.find(':', at);
    return header.substr(colon + 1);
  };
  std::string descr = field("descr");
  size_t q1 = descr.find('\''), q2 = descr.find('\'', q1 + 1);
  descr = descr.substr(q1 + 1, q2 - q1 - 1);
  if (field("fortran_order").find("True") < field("fortran_order").find(','))
    throw bad("Fortran order is not supported");
  rt::DType dtype;
  if (descr == "<f4")
    dtype = rt::DType::F32;
  else if (descr == "<f8")
    dtype = rt::DType::F64;
  else if (descr == "<i4")
    dtype = rt::DType::I32;
  else if (descr == "<i8")
    dtype = rt::DType::I64;
  else if (descr == "<f2")
    dtype = rt::DType::F16;
  else
    throw bad("dtype '" + descr + "' is not supported (f4, f8, f2, i4, i8)");
  std::string shapeText = field("shape");
  shapeText = shapeText.substr(shapeText.find('(') + 1);
  shapeText = shapeText.substr(0, shapeText.find(')'));
  std::vector<int64_t> shape;
  std::stringstream ss(shapeText);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.find_first_of("0123456789") != std::string::npos)
      shape.push_back(std::stoll(item));
  rt::Tensor t(dtype, shape);
  size_t bytes = t.numElements() * rt::sizeOf(dtype);
  if (data.size() - start - headerLen != bytes)
    throw bad("holds " + std::to_string(data.size() - start - headerLen) +
              " data bytes, but its header says " + std::to_string(bytes));
  std::memcpy(t.data<char>(), data.data() + start + headerLen, bytes);
  return t;
}

void writeNpy(const std::string &path, const rt::Tensor &t) {
  const char *descr = npyDescr(t.getDType());
  if (!descr)
    throw rt::Error("cannot write " + std::string(rt::toString(t.getDType())) +
                    " to .npy");
  std::string shape;
  for (int64_t d : t.getShape())
    shape += std::to_string(d) + ", ";
  if (t.getShape().size() > 1)
    shape.resize(shape.size() - 1);
  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  while ((10 + header.size() + 1) % 64)
    header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {char(header.size() & 0xff), char(header.size() >> 8)};
  out.write(len, 2);
  out << header;
  out.write(t.data<char>(), t.numElements() * rt::sizeOf(t.getDType()));
  if (!out)
    throw rt::Error("cannot write '" + path + "'");
}

//===----------------------------------------------------------------------===//

std::string describe(const rt::ProgramValue &v) {
  std::string s = v.name + " : " + rt::toString(v.dtype) + "[";
  for (size_t i = 0; i < v.globalShape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(v.globalShape[i]);
  return s + "]";
}

/// "f32[4x8]".
std::string describeTensor(const rt::Tensor &t) {
  std::string s = std::string(rt::toString(t.getDType())) + "[";
  for (size_t i = 0; i < t.getShape().size(); ++i)
    s += (i ? "x" : "") + std::to_string(t.getShape()[i]);
  return s + "]";
}

/// A generated input (GeneratedInputs.h), keyed by its name.
rt::Tensor generateInput(const rt::ProgramValue &v, uint64_t seed) {
  return generateUniform(v, seed, "input:" + v.name, "input " + describe(v),
                         "; pass --inputs", "; pass --inputs");
}

std::vector<rt::Tensor> makeInputs(const rt::PlanFile &plan,
                                   const std::string &program) {
  std::vector<rt::ProgramValue> inputs = plan.inputs(program);
  std::vector<rt::Tensor> tensors;
  if (!inputsArg.empty()) {
    if (inputsArg.size() != inputs.size())
      throw rt::Error("--inputs gives " + std::to_string(inputsArg.size()) +
                      " arrays, but the program takes " +
                      std::to_string(inputs.size()) + " inputs");
    for (const std::string &path : inputsArg)
      tensors.push_back(readNpy(path));
    return tensors;
  }
  for (const rt::ProgramValue &v : inputs)
    tensors.push_back(generateInput(v, seedArg));
  return tensors;
}

double elementAsDouble(const rt::Tensor &t, int64_t i) {
  switch (t.getDType()) {
  case rt::DType::F32:
    return t.data<float>()[i];
  case rt::DType::F64:
    return t.data<double>()[i];
  case rt::DType::I32:
    return t.data<int32_t>()[i];
  case rt::DType::I64:
    return double(t.data<int64_t>()[i]);
  default:
    return NAN;
  }
}

/// Runs `body` for each rank of `program`: once with no communicator when
/// the program is not partitioned, once with `mpi` when given (this process
/// is one MPI rank), else on `ranks` threads of the local communicator.
void onEveryRank(const rt::PlanFile &plan, const std::string &program,
                 int ranks, rt::Communicator *mpi,
                 const std::function<void(rt::Communicator *)> &body) {
  if (!plan.isPartitioned(program))
    body(nullptr);
  else if (mpi)
    body(mpi);
  else
    rt::runLocalRanks(
        ranks, [&](rt::Communicator &comm) { body(&comm); },
        std::chrono::milliseconds(timeoutArg));
}

/// Runs `program` of `plan` with `inputs`; returns the results on the rank
/// that prints (rank 0), empty on the others.
std::vector<rt::Tensor> execute(std::shared_ptr<const rt::PlanFile> plan,
                                const std::string &program, int ranks,
                                const std::vector<rt::Tensor> &inputs,
                                int64_t steps, rt::Communicator *mpi,
                                std::vector<double> &stepSeconds) {
  std::vector<rt::Tensor> results;
  std::mutex mutex;
  auto body = [&](rt::Communicator *comm) {
    auto backend = rt::createCpuBackend(ranks > 1 ? 1 : 0);
    rt::Executor executor(plan, program, comm, *backend,
                          executorOptions(program));
    executor.setInputs(inputs);
    std::vector<double> seconds;
    for (int64_t step = 0; step < steps; ++step) {
      maybeInjectFailure(comm, step);
      auto start = std::chrono::steady_clock::now();
      executor.run();
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
    }
    std::vector<rt::Tensor> gathered = executor.gatherResults();
    if (!comm || comm->rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      keepProfile(executor, comm);
      results = std::move(gathered);
      stepSeconds = seconds;
    }
  };
  onEveryRank(*plan, program, ranks, mpi, body);
  return results;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

/// Where a train step's batches come from: ids/labels from a token file,
/// every other input generated anew per step.
class BatchSource {
public:
  BatchSource(std::vector<rt::ProgramValue> inputs)
      : inputs(std::move(inputs)) {
    for (size_t i = 0; i < this->inputs.size(); ++i) {
      if (this->inputs[i].name == "ids")
        idsIndex = int(i);
      if (this->inputs[i].name == "labels")
        labelsIndex = int(i);
    }
  }

  /// Loads and checks the token file when the program reads tokens (ids
  /// and labels, i32 [batch, seq]); fails when --data was given for a
  /// program that takes none.
  void load() {
    if (idsIndex < 0 || labelsIndex < 0) {
      if (dataArg.getNumOccurrences())
        throw rt::Error("--data feeds programs with 'ids' and 'labels' "
                        "inputs (gpt, llama); this one takes " +
                        inputList() + ", generated per step");
      return;
    }
    const rt::ProgramValue &ids = inputs[idsIndex],
                           &labels = inputs[labelsIndex];
    if (ids.globalShape.size() != 2 || ids.globalShape != labels.globalShape ||
        ids.dtype != rt::DType::I32 || labels.dtype != rt::DType::I32)
      throw rt::Error("token data needs 'ids' and 'labels' inputs of one "
                      "shape i32[batch x seq]; the program has " +
                      describe(ids) + " and " + describe(labels));
    batch = ids.globalShape[0];
    seq = ids.globalShape[1];
    vocab = ids.valueBound;
    if (labels.valueBound > 0 && (vocab <= 0 || labels.valueBound < vocab))
      vocab = labels.valueBound;
    if (vocab <= 0)
      throw rt::Error("the plan gives no vocabulary for 'ids' (no value "
                      "bound), so token data cannot be checked against it");
    std::string path = dataArg.getNumOccurrences() ? dataArg.getValue()
                                                   : kDefaultTrainData.str();
    Expected<TokenData> loaded = TokenData::load(path, tokenBytesArg);
    if (!loaded)
      throw rt::Error(toString(loaded.takeError()));
    if (Error err = loaded->check(batch, seq, vocab))
      throw rt::Error(toString(std::move(err)));
    data = std::move(*loaded);
  }

  /// Step `step`'s inputs (0-based), in the program's input order.
  std::vector<rt::Tensor> make(int64_t step) const {
    std::vector<rt::Tensor> tensors;
    for (size_t i = 0; i < inputs.size(); ++i)
      tensors.push_back(data && (int(i) == idsIndex || int(i) == labelsIndex)
                            ? rt::Tensor(rt::DType::I32, inputs[i].globalShape)
                            : generateInput(inputs[i], seedArg + step));
    if (data)
      data->batch(step, batch, seq, tensors[idsIndex].data<int32_t>(),
                  tensors[labelsIndex].data<int32_t>());
    return tensors;
  }

  /// Prints the ids and labels of `tensors`, a row per window.
  void printTokens(int64_t step, const std::vector<rt::Tensor> &tensors) const {
    if (!data)
      return;
    const int32_t *ids = tensors[idsIndex].data<int32_t>();
    const int32_t *labels = tensors[labelsIndex].data<int32_t>();
    for (int64_t row = 0; row < batch; ++row) {
      outs() << "batch " << step + 1 << " row " << row << ": ids";
      for (int64_t j = 0; j < seq; ++j)
        outs() << " " << ids[row * seq + j];
      outs() << ", labels";
      for (int64_t j = 0; j < seq; ++j)
        outs() << " " << labels[row * seq + j];
      outs() << "\n";
    }
  }

  /// "data GPL-3 (35149 tokens), batch 8 x seq 16", or what is generated.
  std::string describeSource() const {
    if (!data)
      return "inputs generated per step (" + inputList() + ")";
    return "data " + data->getPath() + " (" + std::to_string(data->size()) +
           " tokens), batch " + std::to_string(batch) + " x seq " +
           std::to_string(seq);
  }

private:
  std::string inputList() const {
    std::string list;
    for (const rt::ProgramValue &v : inputs)
      list += (list.empty() ? "" : ", ") + describe(v);
    return list.empty() ? "no inputs" : list;
  }

  std::vector<rt::ProgramValue> inputs;
  int idsIndex = -1, labelsIndex = -1;
  int64_t batch = 0, seq = 0, vocab = 0;
  std::optional<TokenData> data;
};

/// What a training run leaves: the loss of every step, the final results
/// (updated parameters, state, loss) and the step times.
struct TrainRun {
  std::vector<double> losses;
  std::vector<double> seconds;
  std::vector<rt::Tensor> finalResults;
  /// With `saveState`: every parameter and state buffer after the last step.
  std::vector<std::pair<std::string, rt::Tensor>> finalState;
};

/// A training checkpoint: every parameter and state buffer as a global
/// array, and how many steps (batches) produced it.
struct Checkpoint {
  std::map<std::string, rt::Tensor> buffers;
  int64_t steps = 0;
};

constexpr StringLiteral kCheckpointHeader = "partita checkpoint 1";

/// Reads a --save-checkpoint directory for `program`: every persistent
/// buffer must be there with its global shape and dtype.
Checkpoint readCheckpoint(const rt::PlanFile &plan, const std::string &program,
                          const std::string &dir) {
  std::string what = "checkpoint '" + dir + "'";
  SmallString<128> info(dir);
  sys::path::append(info, "checkpoint.txt");
  std::ifstream in(info.str().str());
  if (!in)
    throw rt::Error(what + ": cannot open '" + info.str().str() +
                    "' (write checkpoints with --save-checkpoint)");
  std::string header, key;
  Checkpoint ck;
  if (!std::getline(in, header) || header != kCheckpointHeader ||
      !(in >> key >> ck.steps) || key != "steps" || ck.steps < 0)
    throw rt::Error(what + ": '" + info.str().str() + "' is not a checkpoint "
                    "description (expected '" + kCheckpointHeader.str() +
                    "' and 'steps N')");
  for (const rt::ProgramValue &value : plan.persistent(program)) {
    SmallString<128> path(dir);
    sys::path::append(path, value.name + ".npy");
    if (!sys::fs::exists(path))
      throw rt::Error(what + " has no '" + value.name + ".npy': the plan's " +
                      (value.isState ? "state" : "parameter") + " '" +
                      value.name + "' (was it saved from another model or " +
                      "optimizer?)");
    rt::Tensor t = readNpy(path.str().str());
    if (t.getDType() != value.dtype || t.getShape() != value.globalShape)
      throw rt::Error(what + ": '" + value.name + ".npy' is " +
                      describeTensor(t) + ", but the plan's " +
                      (value.isState ? "state" : "parameter") + " '" +
                      value.name + "' is " +
                      describeTensor(rt::Tensor(value.dtype, value.globalShape)));
    ck.buffers.emplace(value.name, std::move(t));
  }
  return ck;
}

/// Arrays to write, by name (not copied).
using NamedArrays = std::vector<std::pair<std::string, const rt::Tensor *>>;

/// Writes each array as DIR/<name>.npy, creating DIR.
void writeArrays(const std::string &dir, const NamedArrays &arrays) {
  if (std::error_code ec = sys::fs::create_directories(dir))
    throw rt::Error("cannot create '" + dir + "': " + ec.message());
  for (const auto &[name, tensor] : arrays) {
    SmallString<128> path(dir);
    sys::path::append(path, name + ".npy");
    writeNpy(path.str().str(), *tensor);
  }
}

void writeCheckpoint(const std::string &dir,
                     const std::vector<std::pair<std::string, rt::Tensor>> &state,
                     int64_t steps) {
  NamedArrays arrays;
  for (const auto &[name, tensor] : state)
    arrays.emplace_back(name, &tensor);
  writeArrays(dir, arrays);
  SmallString<128> info(dir);
  sys::path::append(info, "checkpoint.txt");
  std::ofstream out(info.str().str());
  out << kCheckpointHeader.str() << "\nsteps " << steps << "\n";
  if (!out)
    throw rt::Error("cannot write '" + info.str().str() + "'");
}

/// Trains `program` for `steps` steps on `ranks` ranks; prints a line per
/// step when `print`. Results are kept on rank 0 (the one that prints).
/// `start`: the checkpoint to begin from (its buffers, and batches from its
/// step count on), or null. `saveState`: keep every parameter and state
/// buffer after the last step in TrainRun::finalState.
TrainRun train(std::shared_ptr<const rt::PlanFile> plan,
               const std::string &program, int ranks, const BatchSource &source,
               int64_t steps, rt::Communicator *mpi, bool print,
               const Checkpoint *start = nullptr, bool saveState = false) {
  int64_t firstStep = start ? start->steps : 0;
  std::vector<rt::ProgramValue> values = plan->results(program);
  size_t lossIndex = values.size() - 1;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == "loss")
      lossIndex = i;
  TrainRun out;
  std::mutex mutex;
  auto body = [&](rt::Communicator *comm) {
    auto backend = rt::createCpuBackend(ranks > 1 ? 1 : 0);
    rt::Executor executor(plan, program, comm, *backend,
                          executorOptions(program));
    bool printer = !comm || comm->rank() == 0;
    if (start)
      for (const auto &[name, tensor] : start->buffers)
        executor.setPersistent(name, tensor);
    TrainRun mine;
    for (int64_t step = 0; step < steps; ++step) {
      maybeInjectFailure(comm, step);
      std::vector<rt::Tensor> batch = source.make(firstStep + step);
      if (printer && print && printBatchArg)
        source.printTokens(firstStep + step, batch);
      executor.setInputs(batch);
      auto start = std::chrono::steady_clock::now();
      executor.run();
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      // Collective: every rank gathers, rank 0 keeps. Only the loss, but
      // after the last step every result (the updated parameters).
      bool last = step + 1 == steps;
      std::vector<rt::Tensor> results;
      if (last)
        results = executor.gatherResults();
      rt::Tensor lossTensor =
          last ? results.at(lossIndex) : executor.gatherResult(lossIndex);
      if (!printer)
        continue;
      double loss = elementAsDouble(lossTensor, 0);
      mine.losses.push_back(loss);
      mine.seconds.push_back(seconds);
      if (print) {
        outs() << "step " << firstStep + step + 1 << "/" << firstStep + steps
               << "  loss "
               << format("%.4f", loss) << "  (" << format("%.1f", seconds * 1e3)
               << " ms)\n";
        outs().flush();
      }
      if (last)
        mine.finalResults = std::move(results);
    }
    if (saveState)
      for (const rt::ProgramValue &value : plan->persistent(program)) {
        // Collective: every rank gathers, rank 0 keeps.
        rt::Tensor t = executor.gatherPersistent(value.name);
        if (printer)
          mine.finalState.emplace_back(value.name, std::move(t));
      }
    if (printer) {
      std::lock_guard<std::mutex> lock(mutex);
      keepProfile(executor, comm);
      out = std::move(mine);
    }
  };
  onEveryRank(*plan, program, ranks, mpi, body);
  return out;
}

/// For each result of a train step, the parameter it updates (empty for
/// the loss and for optimizer state).
std::vector<std::string> updatedParameters(const rt::PlanFile &plan,
                                           const std::string &program) {
  std::set<std::string> params;
  for (const rt::ProgramValue &v : plan.persistent(program))
    if (v.isParameter)
      params.insert(v.name);
  std::vector<std::string> names;
  for (const rt::ProgramValue &v : plan.results(program))
    names.push_back(params.count(v.replaces) ? v.replaces : std::string());
  return names;
}

/// max |a - b| / max |b| over two results of one shape (infinite on NaN).
double relativeDifference(const rt::Tensor &a, const rt::Tensor &b,
                          double &maxAbs) {
  maxAbs = 0;
  double maxRef = 0;
  for (int64_t e = 0; e < a.numElements(); ++e) {
    double x = elementAsDouble(a, e), y = elementAsDouble(b, e);
    double diff = std::fabs(x - y);
    maxAbs = std::isnan(diff) ? INFINITY : std::max(maxAbs, diff);
    maxRef = std::max(maxRef, std::fabs(y));
  }
  return maxAbs == 0 ? 0 : maxRef == 0 ? INFINITY : maxAbs / maxRef;
}

int runTraining(std::shared_ptr<const rt::PlanFile> plan,
                const std::string &program, int64_t ranks, int64_t steps,
                rt::Communicator *mpi) {
  bool printer = !mpi || mpi->rank() == 0;
  BatchSource source(plan->inputs(program));
  source.load();
  if (printer) {
    outs() << "partita run: training " << program << " for " << steps << " step"
           << (steps == 1 ? "" : "s") << " on " << ranks << " rank"
           << (ranks == 1 ? "" : "s") << " (" << (mpi ? "mpi" : "local")
           << "), arena " << plan->arenaBytes(program) << " bytes per rank; "
           << source.describeSource() << "\n"
           << "partita run: " << rt::configureBlasKernels() << "\n";
    outs().flush();
  }
  std::optional<Checkpoint> start;
  if (!loadCheckpointArg.empty()) {
    start = readCheckpoint(*plan, program, loadCheckpointArg);
    if (printer)
      outs() << "partita run: starting from checkpoint '" << loadCheckpointArg
             << "' after " << start->steps << " step"
             << (start->steps == 1 ? "" : "s") << "\n";
  }
  const Checkpoint *from = start ? &*start : nullptr;
  int64_t firstStep = start ? start->steps : 0;
  TrainRun run = train(plan, program, int(ranks), source, steps, mpi,
                       /*print=*/printer, from,
                       /*saveState=*/!saveCheckpointArg.empty());
  if (!printer)
    return 0;
  std::vector<rt::ProgramValue> values = plan->results(program);
  if (run.finalResults.size() != values.size())
    return reportError(kCommand, "the train step returned " +
                                     std::to_string(run.finalResults.size()) +
                                     " results, its plan lists " +
                                     std::to_string(values.size()));
  std::vector<std::string> paramOf = updatedParameters(*plan, program);
  auto writeAll = [&](const std::string &dir, bool paramsOnly) {
    NamedArrays arrays;
    for (size_t i = 0; i < values.size(); ++i) {
      if (paramsOnly && paramOf[i].empty())
        continue;
      std::string name = paramsOnly                    ? paramOf[i]
                         : !values[i].replaces.empty() ? values[i].replaces
                         : values[i].name.empty() ? "result" + std::to_string(i)
                                                  : values[i].name;
      arrays.emplace_back(name, &run.finalResults[i]);
    }
    writeArrays(dir, arrays);
  };
  if (!saveParamsArg.empty())
    writeAll(saveParamsArg, /*paramsOnly=*/true);
  if (!outputsArg.empty())
    writeAll(outputsArg, /*paramsOnly=*/false);
  bool finite =
      llvm::all_of(run.losses, [](double l) { return std::isfinite(l); });
  if (!finite) {
    outs().flush();
    return reportError(kCommand, "the loss is not finite");
  }
  if (!saveCheckpointArg.empty()) {
    writeCheckpoint(saveCheckpointArg, run.finalState, firstStep + steps);
    outs() << "partita run: wrote checkpoint '" << saveCheckpointArg
           << "' after " << firstStep + steps << " steps ("
           << run.finalState.size() << " parameter and state buffers)\n";
  }
  if (steps > 1)
    outs() << "partita run: loss " << format("%.4f", run.losses.front())
           << " at step " << firstStep + 1 << ", "
           << format("%.4f", run.losses.back()) << " at step "
           << firstStep + steps << " ("
           << (run.losses.back() < run.losses.front() ? "fell" : "did not fall")
           << ")\n";
  printProfile(steps, run.seconds);
  if (!checkArg)
    return 0;

  // The reference: the unpartitioned train step, one rank, same batches.
  TrainRun ref = train(plan, "reference", 1, source, steps, nullptr,
                       /*print=*/false, from);
  if (ref.finalResults.size() != run.finalResults.size())
    return reportError(kCommand, "the reference program has " +
                                     std::to_string(ref.finalResults.size()) +
                                     " results, the train step " +
                                     std::to_string(run.finalResults.size()));
  bool ok = true;
  double worstLoss = 0;
  for (int64_t step = 0; step < steps; ++step) {
    double a = run.losses[step], b = ref.losses[step];
    double rel = a == b   ? 0
                 : b == 0 ? INFINITY
                          : std::fabs(a - b) / std::fabs(b);
    if (std::isnan(rel))
      rel = INFINITY;
    worstLoss = std::max(worstLoss, rel);
    bool pass = rel <= rtolArg;
    ok &= pass;
    outs() << "check step " << step + 1 << "/" << steps << ": loss "
           << format("%.6f", a) << ", reference " << format("%.6f", b)
           << ", rel diff " << format("%.3e", rel) << (pass ? "" : " (FAILED)")
           << "\n";
  }
  outs() << "check loss: max rel diff " << format("%.3e", worstLoss) << " over "
         << steps << " step" << (steps == 1 ? "" : "s") << " ("
         << (worstLoss <= rtolArg ? "ok" : "FAILED") << ", rtol "
         << format("%g", double(rtolArg)) << ")\n";
  double paramRtol = paramRtolArg < 0 ? double(rtolArg) : double(paramRtolArg);
  std::vector<std::string> refParamOf = updatedParameters(*plan, "reference");
  for (size_t i = 0; i < values.size(); ++i) {
    if (paramOf[i].empty())
      continue;
    if (i >= refParamOf.size() || refParamOf[i] != paramOf[i]) {
      outs() << "check param " << paramOf[i] << ": the reference's result #"
             << i << " is not its update "
             << "(FAILED)\n";
      ok = false;
      continue;
    }
    const rt::Tensor &a = run.finalResults[i], &b = ref.finalResults[i];
    if (a.getShape() != b.getShape() || a.getDType() != b.getDType()) {
      outs() << "check param " << paramOf[i]
             << ": shape or dtype differs from the reference (FAILED)\n";
      ok = false;
      continue;
    }
    double maxAbs;
    double rel = relativeDifference(a, b, maxAbs);
    bool pass = rel <= paramRtol;
    ok &= pass;
    outs() << "check param " << paramOf[i] << ": max abs diff "
           << format("%.3e", maxAbs) << ", max rel diff " << format("%.3e", rel)
           << " (" << (pass ? "ok" : "FAILED") << ", rtol "
           << format("%g", paramRtol) << ")\n";
  }
  outs().flush();
  if (!ok)
    return reportError(kCommand, "training differs from the reference beyond "
                                 "--rtol");
  return 0;
}

int runRun() {
  if (planFile.empty())
    return reportError(kCommand, "missing the plan file (partita run PLAN.pb "
                                 "[--ranks N] ...)");
  if (commArg != "local" && commArg != "mpi")
    return reportError(kCommand, "unknown --comm '" + commArg +
                                     "': expected local or mpi");
  int64_t ranks = 0, steps = 1;
  if (ranksArg.getNumOccurrences() && parseInteger(kCommand, ranksArg, ranks))
    return 1;
  if (stepsArg.getNumOccurrences() && parseInteger(kCommand, stepsArg, steps))
    return 1;
  if (steps < 1)
    return reportError(kCommand, "--steps must be at least 1");
  if (ranksArg.getNumOccurrences() && ranks < 1)
    return reportError(kCommand, "--ranks must be at least 1");
  if (!(rtolArg >= 0))
    return reportError(kCommand, "--rtol must be a non-negative number");
  if (paramRtolArg.getNumOccurrences() && !(paramRtolArg >= 0))
    return reportError(kCommand, "--param-rtol must be a non-negative number");

  try {
    std::shared_ptr<const rt::PlanFile> plan = rt::PlanFile::load(planFile);
    std::string program = plan->programNames().front();
    bool partitioned = plan->isPartitioned(program);
    int64_t devices = partitioned ? plan->numDevices() : 1;
    if (!ranksArg.getNumOccurrences())
      ranks = devices;
    if (ranks != devices)
      return reportError(
          kCommand,
          "the plan's program '" + program + "' runs on " +
              std::to_string(devices) + " rank" + (devices == 1 ? "" : "s") +
              (partitioned ? " (its mesh)" : " (it is not partitioned)") +
              ", but --ranks is " + std::to_string(ranks));
    if (checkArg && !plan->hasProgram("reference"))
      return reportError(kCommand, "--check needs a program named 'reference' "
                                   "in the plan (partita plan writes one)");

    std::unique_ptr<rt::Communicator> mpi;
    if (commArg == "mpi") {
      mpi = rt::createMpiCommunicator();
      if (!mpi)
        return reportError(kCommand,
                           "--comm mpi: this partita was built without MPI");
      mpi->setTimeout(std::chrono::milliseconds(timeoutArg));
      if (partitioned && mpi->size() != ranks)
        return reportError(kCommand, "--comm mpi: the job has " +
                                         std::to_string(mpi->size()) +
                                         " processes, but the plan needs " +
                                         std::to_string(ranks));
    }
    bool training = program == "train_step";
    if (!training)
      for (const cl::Option *option : std::initializer_list<const cl::Option *>{
               &dataArg, &tokenBytesArg, &saveParamsArg, &saveCheckpointArg,
               &loadCheckpointArg})
        if (option->getNumOccurrences())
          return reportError(kCommand,
                             "--" + option->ArgStr +
                                 " is for training: the plan's program is '" +
                                 program +
                                 "', not a train step (partita plan --train)");
    if (training) {
      if (!inputsArg.empty())
        return reportError(kCommand, "--inputs does not apply to a train "
                                     "step: its batches come from --data");
      return runTraining(plan, program, ranks, steps, mpi.get());
    }
    bool printer = !mpi || mpi->rank() == 0;
    std::vector<rt::Tensor> inputs = makeInputs(*plan, program);
    std::vector<double> seconds;
    std::vector<rt::Tensor> results =
        execute(plan, program, int(ranks), inputs, steps, mpi.get(), seconds);
    if (!printer)
      return 0;
    std::vector<rt::ProgramValue> values = plan->results(program);
    outs() << "partita run: " << program << " on " << ranks << " rank"
           << (ranks == 1 ? "" : "s") << " (" << (mpi ? "mpi" : "local")
           << "), arena " << plan->arenaBytes(program) << " bytes per rank\n"
           << "partita run: " << rt::configureBlasKernels() << "\n";
    for (size_t step = 0; step < seconds.size(); ++step)
      outs() << "step " << step << ": " << format("%.6f", seconds[step])
             << " s\n";
    printProfile(steps, seconds);
    for (size_t i = 0; i < values.size(); ++i) {
      const rt::Tensor &t = results[i];
      std::string name = values[i].name.empty() ? "result" + std::to_string(i)
                                                : values[i].name;
      outs() << name << ": " << rt::toString(t.getDType()) << "[";
      for (size_t d = 0; d < t.getShape().size(); ++d)
        outs() << (d ? "x" : "") << t.getShape()[d];
      outs() << "]";
      if (t.numElements() == 1)
        outs() << " = " << format("%.8g", elementAsDouble(t, 0));
      bool finite = true;
      for (int64_t e = 0; e < t.numElements(); ++e)
        finite &= std::isfinite(elementAsDouble(t, e));
      outs() << (finite ? "" : " (not finite)") << "\n";
      if (!outputsArg.empty()) {
        if (std::error_code ec = sys::fs::create_directories(outputsArg))
          return reportError(kCommand, "cannot create '" + outputsArg +
                                           "': " + ec.message());
        SmallString<128> path(outputsArg);
        sys::path::append(path, name + ".npy");
        writeNpy(path.str().str(), t);
      }
    }
    if (!checkArg)
      return 0;
    std::vector<double> refSeconds;
    std::vector<rt::Tensor> reference =
        execute(plan, "reference", 1, inputs, 1, nullptr, refSeconds);
    if (reference.size() != results.size())
      return reportError(kCommand, "the reference program has " +
                                       std::to_string(reference.size()) +
                                       " results, the step program " +
                                       std::to_string(results.size()));
    bool ok = true;
    for (size_t i = 0; i < results.size(); ++i) {
      const rt::Tensor &a = results[i], &b = reference[i];
      std::string name = values[i].name.empty() ? "result" + std::to_string(i)
                                                : values[i].name;
      if (a.getShape() != b.getShape() || a.getDType() != b.getDType()) {
        outs() << "check " << name
               << ": shape or dtype differs from the reference\n";
        ok = false;
        continue;
      }
      double maxAbs = 0, maxRef = 0;
      for (int64_t e = 0; e < a.numElements(); ++e) {
        double x = elementAsDouble(a, e), y = elementAsDouble(b, e);
        double diff = std::fabs(x - y);
        maxAbs = std::isnan(diff) ? INFINITY : std::max(maxAbs, diff);
        maxRef = std::max(maxRef, std::fabs(y));
      }
      double rel = maxAbs == 0 ? 0 : maxRef == 0 ? INFINITY : maxAbs / maxRef;
      bool pass = rel <= rtolArg;
      ok &= pass;
      outs() << "check " << name << ": max abs diff " << format("%.3e", maxAbs)
             << ", max rel diff " << format("%.3e", rel) << " ("
             << (pass ? "ok" : "FAILED") << ", rtol "
             << format("%g", double(rtolArg)) << ")\n";
    }
    // The comparison above goes first, then the error line.
    outs().flush();
    if (!ok)
      return reportError(kCommand, "results differ from the reference beyond "
                                   "--rtol");
    return 0;
  } catch (const rt::Error &e) {
    outs().flush();
    return reportError(kCommand, e.what());
  } catch (const std::exception &e) {
    return reportError(kCommand,
                       std::string("unexpected failure: ") + e.what());
  }
}
} // namespace

Command getRunCommand() { return {runCommand, runRun}; }

} // namespace partita::driver
