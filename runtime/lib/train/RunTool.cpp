//===- RunTool.cpp - the command line that runs and trains plans ----------===//
//
// Loads a plan, runs its step program on N ranks (threads on the local
// communicator, or MPI processes), and prints every result. A train step
// (@train_step, from `partita plan --train`) is trained instead: --steps
// steps on consecutive batches of a token file (TokenData.h), one line per
// step with its loss. Inputs come from .npy files or are generated
// (counter-based, so every rank and every run sees the same values; integer
// inputs in [0, bound) from the plan). With --check it also runs the plan's
// unpartitioned "reference" program on one rank with the same parameters
// and inputs and compares every result.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/RunTool.h"
#include "partita/runtime/KernelRegistry.h"
#include "partita/runtime/Checkpoint.h"
#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Npy.h"
#include "partita/runtime/Train.h"

#include "runtime/lib/core/FileIO.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

namespace partita::runtime {

namespace {

/// How long a failing MPI rank waits before it ends the job (abortMpiJob):
/// long enough for peers that fail at about the same time to report.
constexpr std::chrono::milliseconds kMpiAbortGrace{1000};

/// The shortest --timeout-ms: below it, collectives that are merely slow
/// (a rank still loading the plan) time out, and 0 fails every one.
constexpr int64_t kMinTimeoutMs = 100;

/// Which kernels run contractions: OpenBLAS's (configureBlasKernels) and
/// what runs bf16 ones.
std::string kernelsLine() {
  return configureBlasKernels() + "; bf16 GEMMs: " + describeBF16Gemm();
}

template <typename... Args>
std::string format(const char *fmt, Args... args) {
  char buf[128];
  int n = std::snprintf(buf, sizeof(buf), fmt, args...);
  return std::string(buf, n > 0 ? std::min<size_t>(n, sizeof(buf) - 1) : 0);
}

/// One option of the command line.
struct OptionSpec {
  const char *name;
  const char *value; // value description; null for a flag
  const char *help;  // null: hidden (testing only)
};

const OptionSpec kOptions[] = {
    {"ranks", "n", "Number of ranks (default: the plan's device count)"},
    {"comm", "local|mpi|nccl",
     "Communicator: local (threads; the default), mpi (one process per "
     "rank; the default under mpirun) or nccl (with --backend cuda: one GPU "
     "per MPI process; with --emulate, NCCL's buffer layouts over local "
     "threads)"},
    {"backend", "cpu|cuda",
     "Kernels: cpu (default) or cuda (an NVIDIA GPU; fails at once without "
     "one). With --comm local or mpi the cuda ranks share the GPUs (local "
     "ranks device 0, MPI processes their node-local rank modulo the device "
     "count) and their collectives are staged through host memory; --comm "
     "nccl gives each rank its own GPU. "
     "--check's reference always runs on cpu"},
    {"emulate", nullptr,
     "With --backend cuda: run the cuda backend on its emulated device layer "
     "(host memory behind addresses the host may not touch, the CPU block "
     "emulator, the CPU's BLAS), no GPU needed"},
    {"tf32", nullptr,
     "With --backend cuda: f32 GEMMs (einsums) take TF32 operands (10-bit "
     "mantissa, fp32 accumulation; CUBLAS_COMPUTE_32F_FAST_TF32), about "
     "1e-3 relative error instead of fp32's; --emulate rounds the operands "
     "the same way. Default: exact fp32. --check then needs a looser "
     "--rtol"},
    {"attention", "kind",
     "With --backend cuda: how attention and its gradients run. gemm (the "
     "default): per batch, GEMMs over the heads into a [heads, seq, seq] "
     "scratch and a masked-softmax row kernel; simt: flash-style kernels "
     "on CUDA cores (no [seq, seq] buffer; --tf32 does not apply); tensor: "
     "flash-style kernels on tensor cores, f32 as three TF32 products "
     "(about fp32's accuracy; one with --tf32), head_dim up to 64 (other "
     "calls run by gemm)"},
    {"cuda-graph", nullptr,
     "With --backend cuda: record the step's kernels, copies and GEMMs as a "
     "CUDA graph on the second step and launch that graph for every later "
     "one (the learning rates are read from device memory, so schedules "
     "work), sparing the host "
     "each kernel launch. Same results. For one-device, unpipelined plans; "
     "not with --profile"},
    {"gemm-autotune", nullptr,
     "With --backend cuda: the first run of each GEMM shape times up to 8 of "
     "cuBLASLt's algorithms on the GPU and keeps the fastest (printing one "
     "line per shape) instead of its heuristic's first. Off by default: "
     "the choice depends on timing, so two runs may differ in rounding; "
     "--emulate has nothing to tune"},
    {"steps", "k", "Steps to run (default 1); a train step trains for k steps"},
    {"data", "file",
     "Training: flat binary file of token ids, batches of consecutive "
     "windows of seq + 1 tokens (default: /usr/share/common-licenses/GPL-3, "
     "byte-level)"},
    {"token-bytes", "1|2|4",
     "Training: bytes per token in --data (little-endian; default 1: ids are "
     "bytes)"},
    {"print-batch", nullptr, nullptr},
    // Testing: the emulated compute stream runs ahead of the host
    // (CudaBackendOptions::emulateAsync).
    {"emulate-async", nullptr, nullptr},
    // Testing: each emulated nccl call, or each item of the emulated
    // compute stream, waits this long first (NcclOptions::emulatedDelay,
    // CudaBackendOptions::emulatedComputeDelay).
    {"emulate-nccl-delay-us", "us", nullptr},
    {"emulate-compute-delay-us", "us[@rank,...]", nullptr},
    {"emulate-banks", nullptr,
     "With --backend cuda --emulate: count each kernel's shared-memory "
     "requests and the bank wavefronts they take (the block emulator's "
     "model of a GPU's 32 banks; conflicts show as more wavefronts than "
     "the ideal) and print them per kernel at the end. Slow: every shared "
     "access is recorded. Emulated plan runs launch blocks of 32 threads "
     "unless --emulate-block says otherwise"},
    {"emulate-block", "n",
     "With --backend cuda --emulate: threads per block of every kernel "
     "launch (a multiple of 32 up to 1024; default 32, quick to emulate; a "
     "GPU launches 256), e.g. to count --emulate-banks at a GPU's block size"},
    {"save-params", "dir",
     "Training: write the final parameters as DIR/<name>.npy"},
    {"save-checkpoint", "dir",
     "Training: after the last step, write a sharded checkpoint: each rank "
     "writes the parameter and optimizer state blocks it owns, with a "
     "manifest of names, dtypes, global shapes and CRC-32s; DIR is replaced "
     "only when the new one is complete"},
    {"load-checkpoint", "dir",
     "Training: start from a --save-checkpoint directory (its parameters, "
     "optimizer state and data position); any plan of the same model and "
     "optimizer takes it, whatever its mesh or strategy"},
    {"load-params", "dir",
     "Start from the parameters of a checkpoint or a --save-params "
     "directory: a forward plan runs with them; a train step trains from "
     "them with fresh optimizer state, from step 1"},
    {"inject-checkpoint-failure", "n", nullptr},
    {"kernel-library", "path",
     "Load a kernel library (a shared library exporting "
     "partita_register_kernels, KernelRegistry.h) that registers the custom "
     "kernels the plan names; repeatable"},
    {"inputs", "a.npy,...",
     "Input arrays in the program's input order (default: generated); "
     "integer ones must lie below the plan's bound for them ('values in "
     "[0, N)' in partita explain: a vocabulary, a class count)"},
    {"outputs", "dir", "Write every result as DIR/<name>.npy"},
    {"check", nullptr,
     "Compare with the plan's unpartitioned reference program run on one "
     "rank"},
    {"rtol", "r",
     "--check: largest relative difference allowed (max |a-b| / max |b| per "
     "result; training: per step's loss and per final parameter; default "
     "1e-5)"},
    {"param-rtol", "r",
     "--check of training: largest relative difference allowed in the final "
     "parameters (default: --rtol). AdamW scales rounding noise in a zero "
     "gradient up to steps of size lr, so its parameters may differ more "
     "than its losses"},
    {"atol", "a",
     "--check: largest absolute difference that passes whatever the "
     "relative one (a value that is zero in exact arithmetic, such as a key "
     "bias's gradient, has no relative scale; default 1e-8)"},
    {"input-seed", "n", "Seed of generated inputs (default 1)"},
    {"timeout-ms", "ms",
     "Collective timeout in milliseconds (default 60000, at least 100); under "
     "MPI a rank that fails ends the whole job (MPI_Abort)"},
    {"sync-comm", nullptr,
     "Run each gradient bucket's communicator call in line instead of on a "
     "communication thread that overlaps it with the rest of backward (same "
     "results; for measuring the overlap)"},
    {"trace", "file",
     "Record when each step, and each forward, backward, send and receive "
     "of a pipelined step, begins and ends on every rank, and write them to "
     "file in Chrome's trace format (open in Perfetto); a pipelined run also "
     "prints its measured bubble beside the schedule's simulation. Under "
     "mpi each process writes file.rank<r>"},
    {"profile", nullptr,
     "Time every instruction; print rank 0's time per step for each kernel "
     "kind and collective, largest first"},
    {"profile-einsums", nullptr,
     "With --profile (implied): one line per einsum spec and operand "
     "shapes instead of one 'einsum' line, each with its GFLOP/s, to find "
     "a slow GEMM shape"},
    {"report-memory", nullptr,
     "Print rank 0's memory high-water mark (and, pipelined, one rank's "
     "of each stage): the bytes its executor allocated (arena, "
     "parameters, state, inputs, gradient buckets, collective scratch), "
     "which partita explain's total predicts, and the process's peak "
     "resident set"},
    {"report-data", nullptr,
     "Training: print the tokens each rank read from the data (local ranks; "
     "under MPI this process's) over the run: a data-parallel rank reads "
     "only its rows of each batch"},
    {"step-gate", "in,out",
     "Take steps in turns with another program (a benchmark harness, "
     "bench/common/lockstep.py): before each step, warm-up included, read "
     "one line from file descriptor IN; after it write "
     "'step K done' to file descriptor OUT. End of file on IN is an error. "
     "Under MPI rank 0's process reads and writes, the other ranks wait at "
     "a barrier"},
    {"inject-failure-rank", "r", nullptr},
    {"inject-failure-step", "s", nullptr},
    {"help", nullptr, "Print this help"},
};

const OptionSpec *findOption(const std::string &name) {
  for (const OptionSpec &spec : kOptions)
    if (name == spec.name)
      return &spec;
  return nullptr;
}

std::string helpText(const std::string &tool) {
  std::string out = "OVERVIEW: Execute a plan on N ranks (local threads or "
                    "MPI) and print its results; train a train step\n\n"
                    "USAGE: " +
                    tool + " [options] <plan.pb>\n\nOPTIONS:\n";
  for (const OptionSpec &spec : kOptions) {
    if (!spec.help)
      continue;
    std::string flag = std::string("  --") + spec.name;
    if (spec.value)
      flag += std::string("=<") + spec.value + ">";
    out += flag;
    out += flag.size() < 30 ? std::string(30 - flag.size(), ' ')
                            : "\n" + std::string(30, ' ');
    out += std::string("- ") + spec.help + "\n";
  }
  return out;
}

/// The parsed command line: values as given (parsed further in runTool),
/// each present only when given.
struct Args {
  std::string plan;
  std::map<std::string, std::string> values;
  std::vector<std::string> inputs; // --inputs, comma-separated, repeatable
  std::vector<std::string> kernelLibraries; // --kernel-library, repeatable
  std::set<std::string> flags;

  bool has(const std::string &name) const {
    return values.count(name) || flags.count(name) ||
           (name == "inputs" && !inputs.empty());
  }
  std::optional<std::string> get(const std::string &name) const {
    auto it = values.find(name);
    if (it == values.end())
      return std::nullopt;
    return it->second;
  }
};

/// The pieces of `text` between its commas ("a,,b" -> a, "", b).
std::vector<std::string> commaPieces(const std::string &text) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    pieces.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos)
      return pieces;
    start = comma + 1;
  }
}

/// A whole number in `text`, or nullopt.
std::optional<int64_t> parseWhole(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno || *end || std::isspace((unsigned char)text[0]))
    return std::nullopt;
  return int64_t(v);
}

std::optional<double> parseReal(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end || std::isspace((unsigned char)text[0]))
    return std::nullopt;
  return v;
}

/// --step-gate IN,OUT: the process takes its training steps in turns with
/// another program. Before each step it reads one line from IN (the
/// harness's "go"); after it, it writes "step K done" to OUT.
class StepGate {
public:
  StepGate(int in, int out) : in(in), out(out) {}

  /// Parses "IN,OUT" (two file descriptors); nullopt when malformed.
  static std::optional<StepGate> parse(const std::string &text) {
    size_t comma = text.find(',');
    if (comma == std::string::npos)
      return std::nullopt;
    std::optional<int64_t> in = parseWhole(text.substr(0, comma));
    std::optional<int64_t> out = parseWhole(text.substr(comma + 1));
    if (!in || !out || *in < 0 || *out < 0 || *in > INT32_MAX ||
        *out > INT32_MAX)
      return std::nullopt;
    return StepGate(int(*in), int(*out));
  }

  /// The first descriptor that is not open, or -1.
  int notOpen() const {
    for (int fd : {in, out})
      if (::fcntl(fd, F_GETFD) == -1)
        return fd;
    return -1;
  }

  /// Blocks until the harness's line for step `step` (0-based) arrives.
  void waitForTurn(int64_t step) const {
    char c = 0;
    while (true) {
      ssize_t n = ::read(in, &c, 1);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        throw Error("--step-gate: cannot read file descriptor " +
                    std::to_string(in) + " before step " +
                    std::to_string(step + 1) + ": " + std::strerror(errno));
      if (n == 0)
        throw Error("--step-gate: file descriptor " + std::to_string(in) +
                    " reached its end before step " +
                    std::to_string(step + 1) +
                    " (the harness stopped giving turns)");
      if (c == '\n')
        return;
    }
  }

  /// Tells the harness that step `step` (0-based) is done.
  void done(int64_t step) const {
    std::string line = "step " + std::to_string(step + 1) + " done\n";
    size_t written = 0;
    while (written < line.size()) {
      ssize_t n = ::write(out, line.data() + written, line.size() - written);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw Error("--step-gate: cannot write file descriptor " +
                    std::to_string(out) + " after step " +
                    std::to_string(step + 1) + ": " + std::strerror(errno));
      written += size_t(n);
    }
  }

private:
  int in, out;
};

/// The runner: the parsed arguments and the output helpers.
class Tool {
public:
  explicit Tool(std::string name) : name(std::move(name)) {}
  int main(const std::vector<std::string> &argv);

private:
  /// Prints "<tool>: error: <message>" after flushing stdout (so the lines
  /// before it come first); returns 1.
  int fail(const std::string &message) {
    std::cout.flush();
    io::writeErrorLine(name + ": error: " + message);
    return 1;
  }
  int parse(const std::vector<std::string> &argv);
  int run();
  /// --step-gate, on every rank: rank 0 waits for the harness's turn
  /// before a step (gateTurn) and reports the step done (gateDone); the
  /// other ranks wait for it at a barrier, so that no rank works during the
  /// other program's turn.
  void gateTurn(Communicator *comm, int64_t step);
  void gateDone(Communicator *comm, int64_t step);
  int runForward(std::shared_ptr<const PlanFile> plan,
                 const std::string &program);
  int runTraining(std::shared_ptr<const PlanFile> plan,
                  const std::string &program);
  std::vector<Tensor> makeInputs(const PlanFile &plan,
                                 const std::string &program);
  /// --load-params: a checkpoint's manifest is read and checked here,
  /// once; each rank then reads the shards of its blocks.
  RankHook paramsLoader(const PlanFile &plan, const std::string &program,
                        const std::string &dir);

  std::string name;
  Args args;
  int64_t ranks = 0, steps = 1;
  unsigned tokenBytes = 1;
  double rtol = 1e-5, paramRtol = -1, atol = kDefaultCheckAtol;
  CheckpointSaveOptions saveFaults; // --inject-checkpoint-failure
  uint64_t seed = 1;
  RunOptions ranksOptions;
  std::unique_ptr<Communicator> mpi;
  std::optional<StepGate> gate; // --step-gate
  /// --comm nccl on GPUs: this process's rank, bootstrapped over `mpi`.
  std::unique_ptr<Communicator> nccl;
  std::string commName = "local";
};

/// Splits a response file into words: whitespace separates them, quotes
/// ('...' or "...") and backslashes keep whitespace in one (GNU style, as
/// llvm::cl reads them).
std::vector<std::string> splitResponseFile(const std::string &text) {
  std::vector<std::string> words;
  std::string word;
  bool inWord = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < text.size())
        word += text[++i];
      else
        word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      inWord = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      inWord = true;
    } else if (std::isspace((unsigned char)c)) {
      if (inWord)
        words.push_back(word);
      word.clear();
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord)
    words.push_back(word);
  return words;
}

int Tool::parse(const std::vector<std::string> &given) {
  // @FILE arguments are response files: their words take their place.
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, int>> pending; // word, nesting depth
  for (auto it = given.rbegin(); it != given.rend(); ++it)
    pending.emplace_back(*it, 0);
  while (!pending.empty()) {
    auto [word, depth] = pending.back();
    pending.pop_back();
    if (word.size() < 2 || word[0] != '@') {
      argv.push_back(word);
      continue;
    }
    if (depth >= 20)
      return fail("response files nest more than 20 deep at '" +
                  word.substr(1) + "'");
    std::string text;
    try {
      text = io::readFile(word.substr(1), 1 << 24, "the response file");
    } catch (const Error &e) {
      return fail(e.what());
    }
    std::vector<std::string> words = splitResponseFile(text);
    for (auto w = words.rbegin(); w != words.rend(); ++w)
      pending.emplace_back(*w, depth + 1);
  }
  bool positionalOnly = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string &arg = argv[i];
    if (positionalOnly || arg.size() < 2 || arg[0] != '-') {
      if (!args.plan.empty())
        return fail("unexpected argument '" + arg + "' (one plan file, " +
                    "then options; see '" + name + " --help')");
      args.plan = arg;
      continue;
    }
    if (arg == "--") {
      positionalOnly = true;
      continue;
    }
    // -flag and --flag alike, with the value after '=' or as the next word.
    std::string key = arg.substr(arg[1] == '-' ? 2 : 1);
    std::optional<std::string> value;
    if (size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    }
    const OptionSpec *spec = findOption(key);
    if (!spec)
      return fail("unknown option '" + arg + "' (see '" + name + " --help')");
    if (!spec->value) {
      if (value && *value != "true" && *value != "1") {
        if (*value == "false" || *value == "0")
          continue;
        return fail("--" + key + " takes no value, got '" + *value + "'");
      }
      args.flags.insert(key);
      continue;
    }
    if (!value) {
      if (i + 1 >= argv.size())
        return fail("--" + key + " needs a value (--" + key + "=<" +
                    spec->value + ">)");
      value = argv[++i];
    }
    if (key == "kernel-library") {
      args.kernelLibraries.push_back(*value);
      continue;
    }
    if (key == "inputs") {
      for (std::string &piece : commaPieces(*value))
        if (!piece.empty())
          args.inputs.push_back(std::move(piece));
      continue;
    }
    args.values[key] = *value;
  }
  return 0;
}

int Tool::main(const std::vector<std::string> &argv) {
  if (int rc = parse(argv))
    return rc;
  if (args.flags.count("help")) {
    std::cout << helpText(name);
    return 0;
  }
  int rc;
  try {
    return run();
  } catch (const Error &e) {
    rc = fail(e.what());
  } catch (const std::exception &e) {
    rc = fail(std::string("unexpected failure: ") + e.what());
  }
  // Under mpirun, a rank that just exits can leave the job hanging: its
  // peers wait in a collective (or in MPI_Finalize), and an mpirun told
  // not to tear a job down (orte_abort_on_non_zero_status 0) waits for
  // them. End the whole job instead, after a moment in which peers failing
  // the same way (a lost rank times out everywhere at once) report too.
  if (mpi && mpi->size() > 1) {
    std::this_thread::sleep_for(kMpiAbortGrace);
    abortMpiJob(rc);
  }
  return rc;
}

int Tool::run() {
  if (args.plan.empty())
    return fail("missing the plan file (" + name + " PLAN.pb [--ranks N] ...)");
  // Under mpirun each process is one rank of the job, never a copy of it.
  int launched = mpiLauncherWorldSize();
  std::string comm =
      args.get("comm").value_or(launched > 1 ? "mpi" : "local");
  if (comm != "local" && comm != "mpi" && comm != "nccl")
    return fail("unknown --comm '" + comm + "': expected local, mpi or nccl");
  commName = comm;
  if (comm == "local" && launched > 1)
    return fail("--comm local under mpirun (" + std::to_string(launched) +
                " processes) would run the whole job " +
                std::to_string(launched) +
                " times: leave out --comm (under mpirun the MPI communicator "
                "is used) or run without mpirun");
  std::string backend = args.get("backend").value_or("cpu");
  if (backend != "cpu" && backend != "cuda")
    return fail("unknown --backend '" + backend + "': expected cpu or cuda");
  bool emulate = args.flags.count("emulate");
  if (emulate && backend != "cuda")
    return fail("--emulate applies to --backend cuda only");
  if (comm == "nccl" && backend != "cuda")
    return fail("--comm nccl needs --backend cuda (NCCL moves GPU memory)");
  if (comm == "nccl" && emulate && launched > 1)
    return fail("--comm nccl --emulate runs its ranks as threads of one "
                "process: run it without mpirun");
  // No GPU: fail before anything else, with CUDA's own words (with nccl
  // after the unique id has gone round, below).
  if (backend == "cuda" && !emulate && comm != "nccl") {
    std::string error = cudaDeviceError();
    if (!error.empty())
      return fail("--backend cuda: no usable CUDA device: " + error +
                  " (--emulate runs the cuda backend without a GPU)");
  }
  if (args.flags.count("tf32") && backend != "cuda")
    return fail("--tf32 applies to --backend cuda only (the cpu backend's "
                "GEMMs are fp32)");
  ranksOptions.backend = backend;
  ranksOptions.cudaEmulate = emulate;
  ranksOptions.cudaTf32 = args.flags.count("tf32");
  if (std::optional<std::string> kind = args.get("attention")) {
    if (backend != "cuda")
      return fail("--attention applies to --backend cuda only");
    std::optional<CudaAttention> attention = parseCudaAttention(*kind);
    if (!attention)
      return fail("--attention " + *kind +
                  ": expected gemm, simt or tensor");
    ranksOptions.cudaAttention = *attention;
  }
  ranksOptions.cudaGraph = args.flags.count("cuda-graph");
  if (ranksOptions.cudaGraph && backend != "cuda")
    return fail("--cuda-graph applies to --backend cuda only");
  ranksOptions.cudaGemmAutotune = args.flags.count("gemm-autotune");
  if (ranksOptions.cudaGemmAutotune && backend != "cuda")
    return fail("--gemm-autotune applies to --backend cuda only");
  ranksOptions.cudaEmulateAsync = args.flags.count("emulate-async");
  if (ranksOptions.cudaEmulateAsync && !emulate)
    return fail("--emulate-async needs --backend cuda --emulate");
  if (std::optional<std::string> text = args.get("emulate-block")) {
    std::optional<int64_t> block = parseWhole(*text);
    if (!block || *block < 32 || *block > 1024 || *block % 32 != 0)
      return fail("--emulate-block " + *text +
                  ": expected a multiple of 32 from 32 to 1024");
    if (!emulate)
      return fail("--emulate-block needs --backend cuda --emulate");
    ranksOptions.cudaEmulatedBlock = int(*block);
  }
  if (args.flags.count("emulate-banks")) {
    if (!emulate)
      return fail("--emulate-banks needs --backend cuda --emulate");
    ranksOptions.cudaBankReport = std::make_shared<SharedBankReport>();
  }
  for (const char *option : {"emulate-nccl-delay-us", "emulate-compute-delay-us"}) {
    std::optional<std::string> text = args.get(option);
    if (!text)
      continue;
    bool isNccl = std::string(option) == "emulate-nccl-delay-us";
    // The compute delay may name its ranks: "US@R,R,...".
    std::string amount = *text;
    size_t at = isNccl ? std::string::npos : amount.find('@');
    if (at != std::string::npos) {
      std::vector<std::string> listed = commaPieces(amount.substr(at + 1));
      amount.resize(at);
      for (const std::string &piece : listed) {
        std::optional<int64_t> rank = parseWhole(piece);
        if (!rank || *rank < 0 || *rank > INT_MAX)
          return fail("--" + std::string(option) + " " + *text +
                      ": expected US or US@RANK,RANK,...");
        ranksOptions.cudaEmulatedDelayRanks.push_back(int(*rank));
      }
    }
    std::optional<int64_t> us = parseWhole(amount);
    if (!us || *us < 0 || *us > 1000000)
      return fail("--" + std::string(option) + " " + *text +
                  ": expected microseconds, 0 to 1000000");
    if (!emulate || (isNccl && comm != "nccl"))
      return fail("--" + std::string(option) + " needs --backend cuda --emulate" +
                  (isNccl ? " --comm nccl" : ""));
    (isNccl ? ranksOptions.ncclEmulatedDelay
            : ranksOptions.cudaEmulatedComputeDelay) =
        std::chrono::microseconds(*us);
  }
  for (const char *option : {"ranks", "steps"})
    if (std::optional<std::string> text = args.get(option)) {
      std::optional<int64_t> v = parseWhole(*text);
      if (!v)
        return fail(std::string("--") + option +
                    " expects a whole number, got '" + *text + "'");
      (std::string(option) == "ranks" ? ranks : steps) = *v;
    }
  // Unsigned options, read as llvm::cl reads them.
  int64_t timeoutMs = 60000, failRank = -1, failStep = 1, tokenBytesArg = 1,
          seedArg = 1;
  struct {
    const char *option;
    int64_t *into;
    int64_t min;
  } wholes[] = {{"timeout-ms", &timeoutMs, 0},
                {"inject-failure-rank", &failRank, INT32_MIN},
                {"inject-failure-step", &failStep, INT32_MIN},
                {"token-bytes", &tokenBytesArg, 0},
                {"input-seed", &seedArg, 0}};
  for (auto &w : wholes)
    if (std::optional<std::string> text = args.get(w.option)) {
      std::optional<int64_t> v = parseWhole(*text);
      if (!v || *v < w.min || *v > INT32_MAX * int64_t(w.min == 0 ? 2 : 1))
        return fail(std::string("--") + w.option +
                    " expects a whole number, got '" + *text + "'");
      *w.into = *v;
    }
  // Below this a collective cannot wait for the slowest rank of even a
  // small step (0 timed every one out).
  if (timeoutMs < kMinTimeoutMs)
    return fail("--timeout-ms must be at least " +
                std::to_string(kMinTimeoutMs) + ", got " +
                std::to_string(timeoutMs));
  if (std::optional<std::string> text = args.get("step-gate")) {
    gate = StepGate::parse(*text);
    if (!gate)
      return fail("--step-gate expects IN,OUT (two file descriptors), got '" +
                  *text + "'");
  }
  if (std::optional<std::string> text = args.get("inject-checkpoint-failure"))
    if (!parseCheckpointFault(*text, saveFaults))
      return fail("--inject-checkpoint-failure expects N, files:N, bytes:N, "
                  "full:N or stage:NAME, then @RANK or nothing, got '" +
                  *text + "'");
  tokenBytes = unsigned(tokenBytesArg);
  seed = uint64_t(seedArg);
  for (const char *option : {"rtol", "param-rtol", "atol"})
    if (std::optional<std::string> text = args.get(option)) {
      std::optional<double> v = parseReal(*text);
      if (!v)
        return fail(std::string("--") + option + " expects a number, got '" +
                    *text + "'");
      (std::string(option) == "rtol"         ? rtol
       : std::string(option) == "param-rtol" ? paramRtol
                                             : atol) = *v;
    }
  if (!(atol >= 0))
    return fail("--atol must be a non-negative number");
  if (steps < 1)
    return fail("--steps must be at least 1");
  if (args.has("ranks") && ranks < 1)
    return fail("--ranks must be at least 1");
  if (!(rtol >= 0))
    return fail("--rtol must be a non-negative number");
  if (args.has("param-rtol") && !(paramRtol >= 0))
    return fail("--param-rtol must be a non-negative number");
  if (args.has("load-params") && args.has("load-checkpoint"))
    return fail("--load-params and --load-checkpoint exclude each other "
                "(--load-checkpoint loads the parameters too)");

  // Before the plan: its executors look its custom kernels up when built.
  for (const std::string &library : args.kernelLibraries)
    loadKernelLibrary(library);
  std::shared_ptr<const PlanFile> plan = PlanFile::load(args.plan);
  std::string program = plan->programNames().front();
  bool partitioned = plan->isPartitioned(program);
  int64_t devices = partitioned ? plan->numDevices() : 1;
  if (!args.has("ranks"))
    ranks = devices;
  if (ranks != devices)
    return fail("the plan's program '" + program + "' runs on " +
                std::to_string(devices) + " rank" + (devices == 1 ? "" : "s") +
                (partitioned ? " (its mesh)" : " (it is not partitioned)") +
                ", but --ranks is " + std::to_string(ranks));
  if (args.flags.count("check") && !plan->hasProgram("reference"))
    return fail("--check needs a program named 'reference' in the plan "
                "(partita plan writes one)");

  ranksOptions.ranks = int(ranks);
  for (int r : ranksOptions.cudaEmulatedDelayRanks)
    if (r >= ranksOptions.ranks)
      return fail("--emulate-compute-delay-us names rank " + std::to_string(r) +
                  ", but the run has " + std::to_string(ranksOptions.ranks) +
                  " rank" + (ranksOptions.ranks == 1 ? "" : "s"));
  ranksOptions.timeout = std::chrono::milliseconds(timeoutMs);
  ranksOptions.overlapBuckets = !args.flags.count("sync-comm");
  ranksOptions.profileEinsums = args.flags.count("profile-einsums");
  ranksOptions.profile =
      args.flags.count("profile") || ranksOptions.profileEinsums;
  ranksOptions.trace = args.has("trace");
  if (ranksOptions.cudaGraph && ranksOptions.profile)
    return fail("--cuda-graph and --profile exclude each other: a profile "
                "times each instruction between two drains of the stream, a "
                "graph launches the whole step at once");
  ranksOptions.failRank = int(failRank);
  ranksOptions.failStep = int(failStep);
  ranksOptions.toolName = name;
  ranksOptions.nccl = comm == "nccl";
  if (comm == "mpi" || (comm == "nccl" && !emulate)) {
    mpi = createMpiCommunicator();
    if (!mpi)
      return fail("--comm mpi: the Partita runtime was built without MPI");
    mpi->setTimeout(std::chrono::milliseconds(timeoutMs));
    if (partitioned && mpi->size() != ranks)
      return fail("--comm mpi: the job has " + std::to_string(mpi->size()) +
                  " processes, but the plan needs " + std::to_string(ranks));
    ranksOptions.mpi = mpi.get();
    if (comm == "mpi" && backend == "cuda" && !emulate) {
      // Processes share the node's GPUs: node-local rank modulo the count.
      const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      int count = std::max(1, cudaDevices());
      ranksOptions.cudaDevice =
          (local ? std::atoi(local) : mpi->rank()) % count;
    }
    if (comm == "nccl") {
      // One GPU per rank: the rank's place on its node picks it.
      const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      NcclOptions options;
      options.device = local ? std::atoi(local) : mpi->rank();
      ranksOptions.cudaDevice = options.device;
      nccl = createNcclCommunicator(*mpi, options);
      ranksOptions.mpi = nccl.get();
    }
  }
  // Only the process that talks to the harness needs the descriptors.
  if (gate && (!mpi || mpi->rank() == 0))
    if (int fd = gate->notOpen(); fd >= 0)
      return fail("--step-gate: file descriptor " + std::to_string(fd) +
                  " is not open");
  bool training = program == "train_step";
  if (!training)
    for (const char *option : {"data", "token-bytes", "save-params",
                               "save-checkpoint", "load-checkpoint"})
      if (args.has(option))
        return fail(std::string("--") + option +
                    " is for training: the plan's program is '" + program +
                    "', not a train step (partita plan --train)");
  if (training) {
    if (args.has("inputs"))
      return fail("--inputs does not apply to a train step: its batches come "
                  "from --data");
    return runTraining(plan, program);
  }
  return runForward(plan, program);
}

std::vector<Tensor> Tool::makeInputs(const PlanFile &plan,
                                     const std::string &program) {
  std::vector<ProgramValue> inputs = plan.inputs(program);
  std::vector<Tensor> tensors;
  if (!args.inputs.empty()) {
    if (args.inputs.size() != inputs.size())
      throw Error("--inputs gives " + std::to_string(args.inputs.size()) +
                  " arrays, but the program takes " +
                  std::to_string(inputs.size()) + " inputs");
    for (const std::string &path : args.inputs)
      tensors.push_back(readNpy(path));
    return tensors;
  }
  for (const ProgramValue &v : inputs)
    tensors.push_back(generateInput(v, seed));
  return tensors;
}

RankHook Tool::paramsLoader(const PlanFile &plan, const std::string &program,
                           const std::string &dir) {
  namespace fs = std::filesystem;
  bool checkpoint = fs::exists(fs::path(dir) / "manifest.txt") ||
                    (!fs::exists(dir) &&
                     fs::exists(fs::path(dir + ".old") / "manifest.txt"));
  if (!checkpoint)
    return [&plan, program, dir](Executor &executor, Communicator *) {
      loadParameters(dir, executor, plan, program);
    };
  auto ck = std::make_shared<Checkpoint>(
      openCheckpoint(plan, program, dir, /*paramsOnly=*/true));
  return [&plan, program, ck](Executor &executor, Communicator *) {
    loadCheckpoint(*ck, executor, plan, program, /*paramsOnly=*/true);
  };
}

void Tool::gateTurn(Communicator *comm, int64_t step) {
  if (!comm || comm->rank() == 0)
    gate->waitForTurn(step);
  barrierOfAll(comm);
}

void Tool::gateDone(Communicator *comm, int64_t step) {
  barrierOfAll(comm);
  if (!comm || comm->rank() == 0)
    gate->done(step);
}

int Tool::runForward(std::shared_ptr<const PlanFile> plan,
                     const std::string &program) {
  bool printer = !mpi || mpi->rank() == 0;
  if (gate) {
    ranksOptions.beforeStep = [this](Communicator *comm, int64_t step) {
      gateTurn(comm, step);
    };
    ranksOptions.afterStep = [this](Communicator *comm, int64_t step) {
      gateDone(comm, step);
    };
  }
  std::vector<Tensor> inputs = makeInputs(*plan, program);
  std::function<void(Executor &, Communicator *)> load;
  if (std::optional<std::string> dir = args.get("load-params"))
    load = paramsLoader(*plan, program, *dir);
  ProgramRun run =
      runProgram(plan, program, inputs, steps, ranksOptions, load);
  if (!printer)
    return 0;
  std::vector<ProgramValue> values = plan->results(program);
  std::cout << name << ": " << program << " on " << ranks << " rank"
            << (ranks == 1 ? "" : "s") << " (" << commName
            << "), arena " << plan->arenaBytes(program) << " bytes per rank\n"
            << name << ": " << kernelsLine() << "\n";
  for (size_t step = 0; step < run.seconds.size(); ++step)
    // Steps count from 1, as the training lines and checkpoints count them.
    std::cout << "step " << step + 1 << ": " << format("%.6f", run.seconds[step])
              << " s\n";
  std::cout << formatProfile(run.profile, steps, run.seconds);
  if (ranksOptions.cudaBankReport)
    std::cout << formatBankReport(*ranksOptions.cudaBankReport,
                                  "all ranks and steps");
  if (args.flags.count("report-memory"))
    std::cout << formatMemory(*plan, run.memory, run.memoryByRank);
  std::optional<std::string> outputs = args.get("outputs");
  for (size_t i = 0; i < values.size() && i < run.results.size(); ++i) {
    const Tensor &t = run.results[i];
    std::string resultName = values[i].name.empty()
                                 ? "result" + std::to_string(i)
                                 : values[i].name;
    std::cout << resultName << ": " << describeTensor(t.getDType(), t.getShape());
    if (t.numElements() == 1)
      std::cout << " = " << format("%.8g", elementAsDouble(t, 0));
    bool finite = true;
    for (int64_t e = 0; e < t.numElements(); ++e)
      finite &= std::isfinite(elementAsDouble(t, e));
    std::cout << (finite ? "" : " (not finite)") << "\n";
    if (outputs)
      writeNpyDirectory(*outputs, {{resultName, &t}});
  }
  if (!args.flags.count("check"))
    return 0;
  RunOptions one;
  one.timeout = ranksOptions.timeout;
  one.overlapBuckets = ranksOptions.overlapBuckets;
  std::function<void(Executor &, Communicator *)> loadReference;
  if (std::optional<std::string> dir = args.get("load-params"))
    loadReference = paramsLoader(*plan, "reference", *dir);
  ProgramRun reference =
      runProgram(plan, "reference", inputs, 1, one, loadReference);
  CheckReport report =
      compareResults(*plan, program, run.results, reference.results, rtol,
                     atol);
  for (const std::string &line : report.lines)
    std::cout << line << "\n";
  // The comparison above goes first, then the error line.
  if (!report.ok)
    return fail("results differ from the reference beyond --rtol");
  return 0;
}

int Tool::runTraining(std::shared_ptr<const PlanFile> plan,
                      const std::string &program) {
  bool printer = !mpi || mpi->rank() == 0;
  BatchSource::Options data;
  data.dataPath = args.get("data");
  data.tokenBytes = tokenBytes;
  data.seed = seed;
  BatchSource source(plan->inputs(program), data);
  source.load();
  if (printer) {
    std::cout << name << ": training " << program << " for " << steps
              << " step" << (steps == 1 ? "" : "s") << " on " << ranks
              << " rank" << (ranks == 1 ? "" : "s") << " ("
              << commName << "), arena "
              << plan->arenaBytes(program) << " bytes per rank; "
              << source.describeSource() << "\n"
              << name << ": " << kernelsLine() << "\n";
    std::cout.flush();
  }
  std::optional<Checkpoint> start;
  std::optional<std::string> loadDir = args.get("load-checkpoint");
  std::optional<std::string> paramsDir = args.get("load-params");
  if (loadDir) {
    start = openCheckpoint(*plan, program, *loadDir, /*paramsOnly=*/false);
    if (printer)
      std::cout << name << ": starting from checkpoint '" << *loadDir
                << "' after " << start->steps << " step"
                << (start->steps == 1 ? "" : "s") << "\n";
  } else if (paramsDir && printer) {
    std::cout << name << ": starting from the parameters in '" << *paramsDir
              << "' with fresh optimizer state\n";
  }
  std::optional<std::string> saveDir = args.get("save-checkpoint");
  int64_t firstStep = start ? start->steps : 0;
  if (steps > kMaxCheckpointSteps - firstStep)
    return fail("--steps " + std::to_string(steps) + " after step " +
                std::to_string(firstStep) + " goes past step " +
                std::to_string(kMaxCheckpointSteps) +
                ", the last a run counts to");
  TrainOptions options;
  options.steps = steps;
  options.firstStep = firstStep;
  /// Loads the train step's (or its reference's) starting point.
  auto loaderFor = [&](const std::string &which) -> RankHook {
    if (start)
      return [&, which](Executor &executor, Communicator *) {
        loadCheckpoint(*start, executor, *plan, which, /*paramsOnly=*/false);
      };
    if (paramsDir)
      return paramsLoader(*plan, which, *paramsDir);
    return {};
  };
  options.beforeFirstStep = loaderFor(program);
  if (gate) {
    RankHook load = options.beforeFirstStep;
    options.beforeFirstStep = [this, load, firstStep](Executor &executor,
                                                      Communicator *comm) {
      if (load)
        load(executor, comm);
      gateTurn(comm, firstStep);
    };
    // train() has no hook before each step: the next step's turn comes
    // after this one's.
    options.afterStep = [this](Executor &, Communicator *comm,
                               const StepPoint &point) {
      gateDone(comm, point.step);
      if (!point.last)
        gateTurn(comm, point.step + 1);
    };
  }

  options.gatherFinalResults = args.flags.count("check") ||
                               args.has("save-params") || args.has("outputs");
  CheckpointSaveReport saved;
  if (saveDir) {
    CheckpointSaveOptions saveOptions = saveFaults;
    saveOptions.toolName = name;
    options.afterLastStep = [&, saveOptions](Executor &executor,
                                             Communicator *comm) {
      CheckpointSaveReport report =
          saveCheckpoint(executor, comm, *plan, program, *saveDir,
                         firstStep + steps, saveOptions);
      if (!comm || comm->rank() == 0)
        saved = std::move(report);
    };
  }
  int64_t lastStep = firstStep + steps;
  options.onStep = [&](int64_t step, double loss, double seconds) {
    std::cout << "step " << step + 1 << "/" << lastStep << "  loss "
              << format("%.4f", loss) << "  (" << format("%.1f", seconds * 1e3)
              << " ms)\n";
    std::cout.flush();
  };
  if (args.flags.count("print-batch"))
    options.onBatch = [&](int64_t step, const std::vector<Tensor> &batch) {
      std::cout << source.formatTokens(step, batch);
    };
  TrainRun run = train(plan, program, source, options, ranksOptions);
  if (std::optional<std::string> file = args.get("trace")) {
    std::string path = *file + (mpi ? ".rank" + std::to_string(mpi->rank()) : "");
    std::ofstream out(path);
    out << formatChromeTrace(run.traces);
    if (!out.good())
      return fail("--trace: cannot write '" + path + "'");
    if (printer && !mpi)
      std::cout << formatBubble(*plan, run.traces);
  }
  if (!printer)
    return 0;
  std::vector<ProgramValue> values = plan->results(program);
  if (options.gatherFinalResults && run.finalResults.size() != values.size())
    return fail("the train step returned " +
                std::to_string(run.finalResults.size()) +
                " results, its plan lists " + std::to_string(values.size()));
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
    writeNpyDirectory(dir, arrays);
  };
  if (std::optional<std::string> dir = args.get("save-params"))
    writeAll(*dir, /*paramsOnly=*/true);
  if (std::optional<std::string> dir = args.get("outputs"))
    writeAll(*dir, /*paramsOnly=*/false);
  for (double loss : run.losses)
    if (!std::isfinite(loss))
      return fail("the loss is not finite");
  if (saveDir) {
    std::cout << name << ": wrote checkpoint '" << *saveDir << "' after "
              << lastStep << " steps (" << saved.tensors
              << " parameter and state buffers)\n"
              << name << ": checkpoint shards by rank:";
    int64_t files = 0, bytes = 0;
    for (size_t r = 0; r < saved.files.size(); ++r) {
      std::cout << (r ? "; " : " ") << r << ": " << saved.files[r]
                << " files, " << saved.bytes[r] << " bytes";
      files += saved.files[r];
      bytes += saved.bytes[r];
    }
    std::cout << " (" << files << " files, " << bytes << " bytes in all)\n";
  }
  if (steps > 1)
    std::cout << name << ": loss " << format("%.4f", run.losses.front())
              << " at step " << firstStep + 1 << ", "
              << format("%.4f", run.losses.back()) << " at step " << lastStep
              << " ("
              << (run.losses.back() < run.losses.front() ? "fell"
                                                         : "did not fall")
              << ")\n";
  std::cout << formatProfile(run.profile, steps, run.seconds);
  if (ranksOptions.cudaBankReport)
    std::cout << formatBankReport(*ranksOptions.cudaBankReport,
                                  "all ranks and steps");
  if (args.flags.count("report-memory"))
    std::cout << formatMemory(*plan, run.memory, run.memoryByRank);
  if (args.flags.count("report-data")) {
    std::cout << name << ": tokens read from the data per rank:";
    for (int64_t n : run.tokensRead)
      std::cout << " " << n;
    std::cout << "\n";
  }
  if (!args.flags.count("check"))
    return 0;

  // The reference: the unpartitioned train step, one rank, same batches.
  RunOptions one;
  one.timeout = ranksOptions.timeout;
  one.overlapBuckets = ranksOptions.overlapBuckets;
  TrainOptions refOptions;
  refOptions.steps = steps;
  refOptions.firstStep = firstStep;
  refOptions.beforeFirstStep = loaderFor("reference");
  TrainRun ref = train(plan, "reference", source, refOptions, one);
  CheckReport report = compareTraining(
      *plan, program, run, ref, rtol, paramRtol < 0 ? rtol : paramRtol, atol);
  for (const std::string &line : report.lines)
    std::cout << line << "\n";
  if (!report.ok)
    return fail("training differs from the reference beyond --rtol");
  return 0;
}

} // namespace

void ignoreFileSizeSignal() { std::signal(SIGXFSZ, SIG_IGN); }

int runTool(const std::string &toolName, const std::vector<std::string> &args) {
  ignoreFileSizeSignal();
  return Tool(toolName).main(args);
}

} // namespace partita::runtime
