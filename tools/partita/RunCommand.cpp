//===- RunCommand.cpp - `partita run`: execute a plan
//----------------------===//
//
// Loads a plan, runs its step program on N ranks (threads on the local
// communicator, or MPI processes), and prints every result. Inputs come from
// .npy files or are generated (counter-based, so every rank and every run
// sees the same values; integer inputs in [0, bound) from the plan). With
// --check it also runs the plan's unpartitioned "reference" program on one
// rank with the same parameters and inputs and compares every result.
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "tools/partita/Driver.h"

#include "partita/runtime/Executor.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
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
                              cl::desc("Steps to run (default 1)"));
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
                                 "allowed (max |a-b| / max |b| per result)"));
cl::opt<uint64_t> seedArg("input-seed", cl::sub(runCommand), cl::init(1),
                          cl::desc("Seed of generated inputs"));
cl::opt<unsigned> timeoutArg("timeout-ms", cl::sub(runCommand), cl::init(60000),
                             cl::desc("Collective timeout in milliseconds"));

cl::opt<int> failRankArg(
    "inject-failure-rank", cl::sub(runCommand), cl::init(-1), cl::Hidden,
    cl::desc("Testing: this rank fails before its first step (local: throws; "
             "mpi: the process exits), so the others must fail in their "
             "first collective instead of hanging"));

constexpr StringLiteral kCommand = "run";

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
  for (const rt::ProgramValue &v : inputs) {
    rt::Tensor t(v.dtype, v.globalShape);
    std::string key = "input:" + v.name;
    for (int64_t i = 0; i < t.numElements(); ++i) {
      double u = rt::initialValue(seedArg, key, i, /*UNIFORM*/ 1, 0.0, 1.0);
      switch (v.dtype) {
      case rt::DType::F32:
        t.data<float>()[i] = float(2 * u - 1);
        break;
      case rt::DType::F64:
        t.data<double>()[i] = 2 * u - 1;
        break;
      case rt::DType::I32:
      case rt::DType::I64: {
        if (v.valueBound <= 0)
          throw rt::Error("cannot generate input " + describe(v) +
                          ": the plan gives no bound for its values; pass "
                          "--inputs");
        int64_t value =
            std::min<int64_t>(int64_t(u * v.valueBound), v.valueBound - 1);
        if (v.dtype == rt::DType::I32)
          t.data<int32_t>()[i] = int32_t(value);
        else
          t.data<int64_t>()[i] = value;
        break;
      }
      default:
        throw rt::Error("cannot generate input " + describe(v) +
                        " of this dtype; pass --inputs");
      }
    }
    tensors.push_back(std::move(t));
  }
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
    rt::Executor executor(plan, program, comm, *backend);
    executor.setInputs(inputs);
    if (comm && comm->rank() == failRankArg) {
      if (std::string(comm->kind()) == "mpi") {
        errs() << "partita run: rank " << comm->rank()
               << ": injected failure, exiting\n";
        errs().flush();
        std::_Exit(1);
      }
      throw rt::Error("injected failure before the first step");
    }
    std::vector<double> seconds;
    for (int64_t step = 0; step < steps; ++step) {
      auto start = std::chrono::steady_clock::now();
      executor.run();
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
    }
    std::vector<rt::Tensor> gathered = executor.gatherResults();
    if (!comm || comm->rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      results = std::move(gathered);
      stepSeconds = seconds;
    }
  };
  if (!plan->isPartitioned(program))
    body(nullptr);
  else if (mpi)
    body(mpi);
  else
    rt::runLocalRanks(
        ranks, [&](rt::Communicator &comm) { body(&comm); },
        std::chrono::milliseconds(timeoutArg));
  return results;
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
           << "), arena " << plan->arenaBytes(program) << " bytes per rank\n";
    for (size_t step = 0; step < seconds.size(); ++step)
      outs() << "step " << step << ": " << format("%.6f", seconds[step])
             << " s\n";
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
