//===- Train.cpp - runs programs and trains on N ranks --------------------===//

#include "partita/runtime/Train.h"
#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Npy.h"
#include "runtime/lib/core/FileIO.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include <sys/resource.h>

namespace partita::runtime {

namespace {

/// printf into a std::string (the report lines' number formats).
template <typename... Args>
std::string format(const char *fmt, Args... args) {
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), fmt, args...);
  if (n < int(sizeof(buf)))
    return std::string(buf, n > 0 ? size_t(n) : 0);
  std::string out(size_t(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, args...);
  out.resize(size_t(n));
  return out;
}

/// RunOptions::failRank: that rank fails before step failStep (`step`
/// counts from 0).
void maybeInjectFailure(const RunOptions &options, Communicator *comm,
                        int64_t step) {
  if (!comm || comm->rank() != options.failRank ||
      step + 1 != options.failStep)
    return;
  // A process of its own (mpi, or nccl over mpi): it exits.
  if (std::string(comm->kind()) == "mpi" ||
      (std::string(comm->kind()) == "nccl" && !options.cudaEmulate)) {
    io::writeErrorLine(options.toolName + ": rank " +
                       std::to_string(comm->rank()) +
                       ": injected failure, exiting");
    std::_Exit(1);
  }
  throw Error(step == 0 ? std::string("injected failure before the first step")
                        : "injected failure before step " +
                              std::to_string(step + 1));
}

ExecutorOptions executorOptions(const RunOptions &options) {
  ExecutorOptions out;
  out.overlapBuckets = options.overlapBuckets;
  out.profile = options.profile;
  out.profileEinsums = options.profileEinsums;
  out.trace = options.trace;
  out.captureGraph = options.cudaGraph;
  return out;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

} // namespace

std::string describe(const ProgramValue &v) {
  std::string s = v.name + " : " + toString(v.dtype) + "[";
  for (size_t i = 0; i < v.globalShape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(v.globalShape[i]);
  return s + "]";
}

Tensor generateUniform(const ProgramValue &v, uint64_t seed,
                       const std::string &key, const std::string &what,
                       const std::string &noBound,
                       const std::string &otherDType) {
  Tensor t(v.dtype, v.globalShape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double u = initialValue(seed, key, i, /*UNIFORM*/ 1, 0.0, 1.0);
    switch (v.dtype) {
    case DType::F32:
      t.data<float>()[i] = float(2 * u - 1);
      break;
    case DType::F64:
      t.data<double>()[i] = 2 * u - 1;
      break;
    case DType::I32:
    case DType::I64: {
      if (v.valueBound <= 0)
        throw Error("cannot generate " + what +
                    ": the plan gives no bound for its values" + noBound);
      int64_t value =
          std::min<int64_t>(int64_t(u * v.valueBound), v.valueBound - 1);
      if (v.dtype == DType::I32)
        t.data<int32_t>()[i] = int32_t(value);
      else
        t.data<int64_t>()[i] = value;
      break;
    }
    default:
      throw Error("cannot generate " + what + " of this dtype" + otherDType);
    }
  }
  return t;
}

Tensor generateInput(const ProgramValue &v, uint64_t seed) {
  return generateUniform(v, seed, "input:" + v.name, "input " + describe(v),
                         "; pass --inputs", "; pass --inputs");
}

double elementAsDouble(const Tensor &t, int64_t i) {
  switch (t.getDType()) {
  case DType::F32:
    return t.data<float>()[i];
  case DType::F64:
    return t.data<double>()[i];
  case DType::I32:
    return t.data<int32_t>()[i];
  case DType::I64:
    return double(t.data<int64_t>()[i]);
  case DType::F16:
  case DType::BF16:
    return widenFloat(t.data<uint16_t>()[i], t.getDType());
  }
  return NAN;
}

double relativeDifference(const Tensor &a, const Tensor &b, double &maxAbs) {
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

int mpiLauncherWorldSize() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::max(0, std::atoi(value));
  return 0;
}

std::unique_ptr<Backend> createRankBackend(const RunOptions &options,
                                           int rank) {
  if (options.backend == "cuda") {
    CudaBackendOptions cuda;
    cuda.emulate = options.cudaEmulate;
    cuda.device = options.cudaDevice;
    cuda.tf32 = options.cudaTf32;
    cuda.attention = options.cudaAttention;
    cuda.gemmAutotune = options.cudaGemmAutotune;
    if (options.cudaGemmAutotune)
      cuda.log = [tool = options.toolName](const std::string &line) {
        io::writeErrorLine(tool + ": " + line);
      };
    cuda.emulateAsync = options.cudaEmulateAsync;
    cuda.bankReport = options.cudaBankReport;
    const std::vector<int> &slow = options.cudaEmulatedDelayRanks;
    if (slow.empty() || std::count(slow.begin(), slow.end(), rank))
      cuda.emulatedComputeDelay = options.cudaEmulatedComputeDelay;
    // The emulator pays per simulated thread at every barrier, and several
    // ranks share this host's cores: one warp per block (the default of
    // cudaEmulatedBlock) keeps plan runs quick (the kernels' unit tests
    // cover blocks of 32 to 256 threads).
    if (options.cudaEmulate)
      cuda.blockSize = options.cudaEmulatedBlock;
    return createCudaBackend(cuda);
  }
  if (options.backend != "cpu")
    throw Error("unknown backend '" + options.backend + "' (cpu or cuda)");
  return createCpuBackend(options.ranks > 1 ? 1 : 0);
}

void onEveryRank(const PlanFile &plan, const std::string &program,
                 const RunOptions &options,
                 const std::function<void(Communicator *)> &body) {
  if (!plan.isPartitioned(program))
    body(nullptr);
  else if (options.mpi)
    body(options.mpi);
  else if (options.nccl)
    runLocalRanks(
        options.ranks,
        [&](Communicator &local) {
          NcclOptions nccl;
          nccl.emulate = true;
          nccl.emulatedDelay = options.ncclEmulatedDelay;
          std::unique_ptr<Communicator> comm =
              createNcclCommunicator(local, nccl);
          body(comm.get());
        },
        options.timeout);
  else
    runLocalRanks(
        options.ranks, [&](Communicator &comm) { body(&comm); },
        options.timeout);
}

ProgramRun runProgram(std::shared_ptr<const PlanFile> plan,
                      const std::string &program,
                      const std::vector<Tensor> &inputs, int64_t steps,
                      const RunOptions &options,
                      const std::function<void(Executor &, Communicator *)>
                          &beforeFirstStep) {
  ProgramRun out;
  std::mutex mutex;
  auto body = [&](Communicator *comm) {
    auto backend = createRankBackend(options, comm ? comm->rank() : 0);
    Executor executor(plan, program, comm, *backend, executorOptions(options));
    if (beforeFirstStep)
      beforeFirstStep(executor, comm);
    executor.setInputs(inputs);
    std::vector<double> seconds;
    for (int64_t step = 0; step < steps; ++step) {
      maybeInjectFailure(options, comm, step);
      if (options.beforeStep)
        options.beforeStep(comm, step);
      auto start = std::chrono::steady_clock::now();
      executor.run();
      seconds.push_back(secondsSince(start));
      if (options.afterStep)
        options.afterStep(comm, step);
    }
    std::vector<Tensor> gathered = executor.gatherResults();
    {
      std::lock_guard<std::mutex> lock(mutex);
      size_t rank = comm ? size_t(comm->rank()) : 0;
      if (out.memoryByRank.size() <= rank)
        out.memoryByRank.resize(rank + 1);
      out.memoryByRank[rank] = executor.memory();
    }
    if (!comm || comm->rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      out.profile = executor.profile();
      out.memory = executor.memory();
      out.results = std::move(gathered);
      out.seconds = std::move(seconds);
    }
  };
  onEveryRank(*plan, program, options, body);
  return out;
}

//===----------------------------------------------------------------------===//
// Batches
//===----------------------------------------------------------------------===//

BatchSource::BatchSource(std::vector<ProgramValue> inputs, Options options)
    : inputs(std::move(inputs)), options(std::move(options)) {
  for (size_t i = 0; i < this->inputs.size(); ++i) {
    if (this->inputs[i].name == "ids")
      idsIndex = int(i);
    if (this->inputs[i].name == "labels")
      labelsIndex = int(i);
  }
}

void BatchSource::load() {
  if (idsIndex < 0 || labelsIndex < 0) {
    if (options.dataPath)
      throw Error("--data feeds programs with 'ids' and 'labels' "
                  "inputs (gpt, llama); this one takes " +
                  inputList() + ", generated per step");
    return;
  }
  const ProgramValue &ids = inputs[idsIndex], &labels = inputs[labelsIndex];
  if (ids.globalShape.size() != 2 || ids.globalShape != labels.globalShape ||
      ids.dtype != DType::I32 || labels.dtype != DType::I32)
    throw Error("token data needs 'ids' and 'labels' inputs of one "
                "shape i32[batch x seq]; the program has " +
                describe(ids) + " and " + describe(labels));
  batch = ids.globalShape[0];
  seq = ids.globalShape[1];
  vocab = ids.valueBound;
  if (labels.valueBound > 0 && (vocab <= 0 || labels.valueBound < vocab))
    vocab = labels.valueBound;
  if (vocab <= 0)
    throw Error("the plan gives no vocabulary for 'ids' (no value "
                "bound), so token data cannot be checked against it");
  TokenData loaded = TokenData::load(
      options.dataPath ? *options.dataPath : kDefaultTrainData,
      options.tokenBytes);
  if (options.splitBegin != 0 || options.splitEnd != 1) {
    if (!(options.splitBegin >= 0 && options.splitBegin < options.splitEnd &&
          options.splitEnd <= 1))
      throw Error("the data split [" + std::to_string(options.splitBegin) +
                  ", " + std::to_string(options.splitEnd) +
                  ") is not a range within [0, 1]");
    loaded = loaded.slice(int64_t(options.splitBegin * loaded.size()),
                          int64_t(options.splitEnd * loaded.size()));
  }
  loaded.check(batch, seq, vocab);
  data = std::move(loaded);
}

std::vector<Tensor> BatchSource::make(int64_t step) const {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < inputs.size(); ++i)
    tensors.push_back(data && (int(i) == idsIndex || int(i) == labelsIndex)
                          ? Tensor(DType::I32, inputs[i].globalShape)
                          : generateInput(inputs[i], options.seed + step));
  if (data)
    data->batch(step, batch, seq, tensors[idsIndex].data<int32_t>(),
                tensors[labelsIndex].data<int32_t>());
  return tensors;
}

int64_t BatchSource::setRankInputs(Executor &executor, int64_t step) const {
  if (!data || inputs.size() != 2)
    return -1;
  Executor::Block idsBlock = executor.inputBlock(size_t(idsIndex));
  Executor::Block labelsBlock = executor.inputBlock(size_t(labelsIndex));
  // Rows [r0, r0 + rows) of the batch, full width; read once when ids and
  // labels are split alike (every plan so far), else once for each.
  int64_t read = 0;
  int64_t r0 = -1, rows = 0;
  std::vector<int32_t> ids, labels;
  for (int index : {idsIndex, labelsIndex}) {
    const Executor::Block &block =
        index == idsIndex ? idsBlock : labelsBlock;
    if (block.offsets[0] != r0 || block.shape[0] != rows) {
      r0 = block.offsets[0];
      rows = block.shape[0];
      ids.assign(size_t(rows * seq), 0);
      labels.assign(size_t(rows * seq), 0);
      read += data->rows(step, batch, seq, r0, r0 + rows, ids.data(),
                         labels.data());
    }
    const std::vector<int32_t> &from = index == idsIndex ? ids : labels;
    int64_t c0 = block.offsets[1], cols = block.shape[1];
    Tensor t(DType::I32, block.shape);
    int32_t *to = t.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        to[r * cols + c] = from[size_t(r * seq + c0 + c)];
    executor.setInputBlock(size_t(index), t.view());
  }
  return read;
}

std::string BatchSource::formatTokens(int64_t step,
                                      const std::vector<Tensor> &tensors) const {
  if (!data)
    return "";
  const int32_t *ids = tensors[idsIndex].data<int32_t>();
  const int32_t *labels = tensors[labelsIndex].data<int32_t>();
  std::string out;
  for (int64_t row = 0; row < batch; ++row) {
    out += "batch " + std::to_string(step + 1) + " row " +
           std::to_string(row) + ": ids";
    for (int64_t j = 0; j < seq; ++j)
      out += " " + std::to_string(ids[row * seq + j]);
    out += ", labels";
    for (int64_t j = 0; j < seq; ++j)
      out += " " + std::to_string(labels[row * seq + j]);
    out += "\n";
  }
  return out;
}

std::string BatchSource::describeSource() const {
  if (!data)
    return "inputs generated per step (" + inputList() + ")";
  return "data " + data->getPath() + " (" + std::to_string(data->size()) +
         " tokens), batch " + std::to_string(batch) + " x seq " +
         std::to_string(seq);
}

std::string BatchSource::inputList() const {
  std::string list;
  for (const ProgramValue &v : inputs)
    list += (list.empty() ? "" : ", ") + describe(v);
  return list.empty() ? "no inputs" : list;
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

size_t lossIndex(const PlanFile &plan, const std::string &program) {
  std::vector<ProgramValue> values = plan.results(program);
  size_t index = values.empty() ? 0 : values.size() - 1;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == "loss")
      index = i;
  return index;
}

int resultIndex(const PlanFile &plan, const std::string &program,
                const std::string &name) {
  std::vector<ProgramValue> values = plan.results(program);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name)
      return int(i);
  return -1;
}

TrainRun train(std::shared_ptr<const PlanFile> plan, const std::string &program,
               const BatchSource &source, const TrainOptions &options,
               const RunOptions &ranks) {
  int64_t firstStep = options.firstStep;
  int64_t steps = options.steps;
  size_t loss = lossIndex(*plan, program);
  int gradNormIndex = resultIndex(*plan, program, "grad_norm");
  TrainRun out;
  std::vector<int64_t> readByRank; // under MPI, this process's rank only
  std::vector<ExecutorMemory> memoryByRank; // likewise
  std::vector<std::vector<TraceEvent>> traces;
  std::mutex mutex;
  auto body = [&](Communicator *comm) {
    auto backend = createRankBackend(ranks, comm ? comm->rank() : 0);
    Executor executor(plan, program, comm, *backend, executorOptions(ranks));
    bool printer = !comm || comm->rank() == 0;
    if (options.beforeFirstStep)
      options.beforeFirstStep(executor, comm);
    std::vector<int> everyRank = allRanks(comm ? comm->size() : 0);
    TrainRun mine;
    int64_t tokensRead = 0;
    bool finite = true;
    for (int64_t step = 0; step < steps; ++step) {
      maybeInjectFailure(ranks, comm, step);
      // Each rank reads only its block's rows, unless rank 0 must see the
      // whole batch (onBatch) or the program takes more than tokens.
      int64_t read = options.onBatch
                         ? -1
                         : source.setRankInputs(executor, firstStep + step);
      if (read < 0) {
        std::vector<Tensor> batch = source.make(firstStep + step);
        if (printer && options.onBatch)
          options.onBatch(firstStep + step, batch);
        executor.setInputs(batch);
        read = source.tokensReadPerBatch();
      }
      tokensRead += read;
      if (options.learningRate)
        executor.setLearningRate(options.learningRate(firstStep + step));
      auto begin = std::chrono::steady_clock::now();
      executor.run();
      double seconds = secondsSince(begin);
      // Every rank decides alike whether to stop after this step.
      bool stopping = false;
      if (options.stopRequested) {
        float flag = options.stopRequested() ? 1.0f : 0.0f;
        if (comm)
          comm->allReduce(&flag, 1, DType::F32, ReduceOp::Max, everyRank);
        stopping = flag > 0 && step + 1 < steps;
      }
      // Collective: every rank gathers (so every rank knows the loss), rank
      // 0 keeps. Only the loss, but after the last step every result (the
      // updated parameters).
      bool last = step + 1 == steps || stopping;
      std::vector<Tensor> results;
      if (last && options.gatherFinalResults)
        results = executor.gatherResults();
      Tensor lossTensor = !results.empty() ? results.at(loss)
                                           : executor.gatherResult(loss);
      double value = elementAsDouble(lossTensor, 0);
      double gradNorm = NAN;
      if (gradNormIndex >= 0)
        gradNorm = elementAsDouble(last ? results.at(gradNormIndex)
                                        : executor.gatherResult(gradNormIndex),
                                   0);
      finite &= std::isfinite(value);
      if (printer) {
        mine.losses.push_back(value);
        mine.seconds.push_back(seconds);
        mine.lrs.push_back(executor.learningRate());
        mine.gradNorms.push_back(gradNorm);
        if (options.onStep)
          options.onStep(firstStep + step, value, seconds);
        if (options.onStepResult)
          options.onStepResult({firstStep + step, value, seconds,
                                executor.learningRate(), gradNorm});
        if (last)
          mine.finalResults = std::move(results);
      }
      if (options.afterStep && finite)
        options.afterStep(executor, comm, {firstStep + step, last, stopping});
      if (stopping) {
        mine.stopped = true;
        break;
      }
    }
    if (finite && options.afterLastStep)
      options.afterLastStep(executor, comm);
    {
      std::lock_guard<std::mutex> lock(mutex);
      int rank = comm ? comm->rank() : 0;
      if (readByRank.size() <= size_t(rank))
        readByRank.resize(size_t(rank) + 1, 0);
      readByRank[size_t(rank)] = tokensRead;
      if (memoryByRank.size() <= size_t(rank))
        memoryByRank.resize(size_t(rank) + 1);
      memoryByRank[size_t(rank)] = executor.memory();
      if (ranks.trace) {
        if (traces.size() <= size_t(rank))
          traces.resize(size_t(rank) + 1);
        traces[size_t(rank)] = executor.trace();
      }
    }
    if (printer) {
      std::lock_guard<std::mutex> lock(mutex);
      mine.profile = executor.profile();
      mine.memory = executor.memory();
      out = std::move(mine);
    }
  };
  onEveryRank(*plan, program, ranks, body);
  out.tokensRead = std::move(readByRank);
  out.traces = std::move(traces);
  out.memoryByRank = std::move(memoryByRank);
  return out;
}

std::string
formatChromeTrace(const std::vector<std::vector<TraceEvent>> &traces) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  for (size_t rank = 0; rank < traces.size(); ++rank) {
    if (traces[rank].empty())
      continue;
    out += std::string(first ? "" : ",\n") +
           "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, "
           "\"tid\": " + std::to_string(rank) +
           ", \"args\": {\"name\": \"rank " + std::to_string(rank) + "\"}}";
    first = false;
    for (const TraceEvent &e : traces[rank])
      out += ",\n{\"name\": \"" + e.name + "\", \"cat\": \"" +
             (e.compute ? "compute" : "comm") +
             "\", \"ph\": \"X\", \"pid\": 0, \"tid\": " +
             std::to_string(rank) + ", \"ts\": " +
             format("%.3f", e.begin * 1e6) + ", \"dur\": " +
             format("%.3f", (e.end - e.begin) * 1e6) +
             ", \"args\": {\"step\": " + std::to_string(e.step + 1) + "}}";
  }
  return out + "\n]}\n";
}

std::string formatBubble(const PlanFile &plan,
                         const std::vector<std::vector<TraceEvent>> &traces) {
  if (!plan.isPipelined())
    return "";
  pipeline::Schedule schedule = plan.pipelineSchedule();
  int64_t steps = 0;
  for (const auto &events : traces)
    for (const TraceEvent &e : events)
      steps = std::max(steps, e.step + 1);
  if (steps < 2)
    return "";
  // Measured, per step after the first: idle over ranks x step time.
  std::vector<double> bubbles;
  int ranks = 0;
  for (const auto &events : traces)
    ranks += !events.empty();
  for (int64_t step = 1; step < steps; ++step) {
    double begin = INFINITY, end = -INFINITY, busy = 0;
    for (const auto &events : traces)
      for (const TraceEvent &e : events)
        if (e.step == step) {
          begin = std::min(begin, e.begin);
          end = std::max(end, e.end);
          if (e.compute)
            busy += e.end - e.begin;
        }
    if (end > begin)
      bubbles.push_back(1 - busy / (ranks * (end - begin)));
  }
  std::sort(bubbles.begin(), bubbles.end());
  double measured = bubbles[bubbles.size() / 2];
  // Simulated with each stage's mean measured times: F, B (a full
  // backward, or zb-h1's input gradient), W and the update; a full
  // backward is B + W in the simulation, half each.
  size_t stages = size_t(schedule.ranks) * size_t(schedule.chunks);
  std::vector<double> sum(stages * 4, 0), count(sum.size(), 0);
  for (size_t rank = 0; rank < traces.size(); ++rank)
    for (const TraceEvent &e : traces[rank]) {
      if (e.step == 0 || !e.compute)
        continue;
      int kind = e.name[0] == 'F' ? 0 : e.name[0] == 'B' ? 1 : e.name[0] == 'W' ? 2 : 3;
      // "F3 c1": chunk 1's stage (interleaved).
      size_t at = e.name.rfind(" c");
      int chunk = at == std::string::npos ? 0 : std::stoi(e.name.substr(at + 2));
      size_t k = size_t(chunk * schedule.ranks + plan.pipelineStageOf(int(rank))) * 4 +
                 size_t(kind);
      sum[k] += e.end - e.begin;
      count[k] += 1;
    }
  std::vector<pipeline::ActionCosts> costs(stages);
  auto mean = [&](size_t k) { return count[k] ? sum[k] / count[k] : 0.0; };
  for (size_t st = 0; st < costs.size(); ++st) {
    costs[st].forward = mean(st * 4);
    if (count[st * 4 + 2]) {
      costs[st].backwardInput = mean(st * 4 + 1);
      costs[st].backwardWeight = mean(st * 4 + 2);
    } else {
      costs[st].backwardInput = costs[st].backwardWeight = mean(st * 4 + 1) / 2;
    }
    costs[st].optimizer = mean(st * 4 + 3);
  }
  // The executor posts its sends and goes on (it waits for one only when
  // it needs the slot again): buffered sends.
  pipeline::Simulation sim =
      pipeline::simulate(schedule, costs, pipeline::SendMode::Buffered);
  return "pipeline bubble: measured " + format("%.4f", measured) +
         " (median over steps 2.." + std::to_string(steps) +
         "), simulated " + format("%.4f", sim.bubbleFraction) + " ('" +
         schedule.kind + "' with each stage's measured mean forward, "
         "backward and update times, sends buffered); measured/simulated " +
         format("%.3f", measured / sim.bubbleFraction) + "\n";
}

std::vector<std::string> updatedParameters(const PlanFile &plan,
                                           const std::string &program) {
  std::set<std::string> params;
  for (const ProgramValue &v : plan.persistent(program))
    if (v.isParameter)
      params.insert(v.name);
  std::vector<std::string> names;
  for (const ProgramValue &v : plan.results(program))
    names.push_back(params.count(v.replaces) ? v.replaces : std::string());
  return names;
}

//===----------------------------------------------------------------------===//
// --check
//===----------------------------------------------------------------------===//

/// Appends "<label>: max abs diff ..., max rel diff ... (ok|FAILED, rtol
/// ...)" for `a` against the reference `b` to `report`. The relative
/// difference is against the reference's largest magnitude, so a value
/// that is zero in exact arithmetic (a key bias's gradient) has none to
/// speak of: `atol` is the floor below which any difference passes.
static void compareTensor(const std::string &label, const Tensor &a,
                          const Tensor &b, double rtol, double atol,
                          CheckReport &report) {
  if (a.getShape() != b.getShape() || a.getDType() != b.getDType()) {
    report.lines.push_back(label +
                           ": shape or dtype differs from the reference "
                           "(FAILED)");
    report.ok = false;
    return;
  }
  double maxAbs;
  double rel = relativeDifference(a, b, maxAbs);
  bool relOk = rel <= rtol, absOk = maxAbs <= atol;
  report.ok &= relOk || absOk;
  report.lines.push_back(
      label + ": max abs diff " + format("%.3e", maxAbs) + ", max rel diff " +
      format("%.3e", rel) + " (" +
      (relOk ? "ok" : absOk ? "ok by atol " + format("%g", atol) : "FAILED") +
      ", rtol " + format("%g", rtol) + ")");
}

/// The names by which --check matches results: the plan's name, or
/// "result #i" for an unnamed one (and for the second of a repeated name).
static std::vector<std::string> checkNames(const PlanFile &plan,
                                           const std::string &program) {
  std::vector<ProgramValue> values = plan.results(program);
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (size_t i = 0; i < values.size(); ++i)
    names.push_back(values[i].name.empty() || !seen.insert(values[i].name).second
                        ? "result #" + std::to_string(i)
                        : values[i].name);
  return names;
}

CheckReport compareResults(const PlanFile &plan, const std::string &program,
                           const std::vector<Tensor> &results,
                           const std::vector<Tensor> &reference, double rtol,
                           double atol) {
  if (reference.size() != results.size())
    throw Error("the reference program has " +
                std::to_string(reference.size()) + " results, the step "
                "program " + std::to_string(results.size()));
  // By name, not position: a step program that reorders or drops a result
  // must not be compared against another result of the reference.
  std::vector<std::string> names = checkNames(plan, program);
  std::vector<std::string> refNames = checkNames(plan, "reference");
  names.resize(results.size());
  refNames.resize(reference.size());
  std::map<std::string, size_t> refIndex;
  for (size_t i = 0; i < refNames.size(); ++i)
    refIndex.emplace(refNames[i], i);
  CheckReport report;
  std::set<std::string> compared;
  for (size_t i = 0; i < results.size(); ++i) {
    auto it = refIndex.find(names[i]);
    if (it == refIndex.end()) {
      report.lines.push_back("check " + names[i] +
                             ": the reference has no result of that name "
                             "(FAILED)");
      report.ok = false;
      continue;
    }
    compared.insert(names[i]);
    compareTensor("check " + names[i], results[i], reference[it->second],
                  rtol, atol, report);
  }
  for (const std::string &name : refNames)
    if (!compared.count(name)) {
      report.lines.push_back("check " + name +
                             ": the step program has no result of that name "
                             "(FAILED)");
      report.ok = false;
    }
  return report;
}

CheckReport compareTraining(const PlanFile &plan, const std::string &program,
                            const TrainRun &run, const TrainRun &ref,
                            double rtol, double paramRtol, double atol) {
  if (ref.finalResults.size() != run.finalResults.size())
    throw Error("the reference program has " +
                std::to_string(ref.finalResults.size()) +
                " results, the train step " +
                std::to_string(run.finalResults.size()));
  CheckReport report;
  int64_t steps = int64_t(run.losses.size());
  double worstLoss = 0;
  for (int64_t step = 0; step < steps; ++step) {
    double a = run.losses[step],
           b = step < int64_t(ref.losses.size()) ? ref.losses[step] : NAN;
    double rel = a == b   ? 0
                 : b == 0 ? INFINITY
                          : std::fabs(a - b) / std::fabs(b);
    if (std::isnan(rel))
      rel = INFINITY;
    worstLoss = std::max(worstLoss, rel);
    bool pass = rel <= rtol;
    report.ok &= pass;
    report.lines.push_back("check step " + std::to_string(step + 1) +
                           "/" + std::to_string(steps) + ": loss " +
                           format("%.6f", a) + ", reference " +
                           format("%.6f", b) + ", rel diff " +
                           format("%.3e", rel) + (pass ? "" : " (FAILED)"));
  }
  report.lines.push_back("check loss: max rel diff " +
                         format("%.3e", worstLoss) + " over " +
                         std::to_string(steps) + " step" +
                         (steps == 1 ? "" : "s") + " (" +
                         (worstLoss <= rtol ? "ok" : "FAILED") + ", rtol " +
                         format("%g", rtol) + ")");
  std::vector<std::string> paramOf = updatedParameters(plan, program);
  std::vector<std::string> refParamOf = updatedParameters(plan, "reference");
  std::map<std::string, size_t> refIndex;
  for (size_t i = 0; i < refParamOf.size() && i < ref.finalResults.size(); ++i)
    if (!refParamOf[i].empty())
      refIndex.emplace(refParamOf[i], i);
  std::set<std::string> compared;
  for (size_t i = 0; i < paramOf.size() && i < run.finalResults.size(); ++i) {
    if (paramOf[i].empty())
      continue;
    compared.insert(paramOf[i]);
    auto it = refIndex.find(paramOf[i]);
    if (it == refIndex.end()) {
      report.lines.push_back("check param " + paramOf[i] +
                             ": the reference does not update it (FAILED)");
      report.ok = false;
      continue;
    }
    compareTensor("check param " + paramOf[i], run.finalResults[i],
                  ref.finalResults[it->second], paramRtol, atol, report);
  }
  // Every parameter either program names is compared: one the step program
  // stopped updating would otherwise drop out of the check unnoticed.
  std::set<std::string> named;
  for (const std::string &p : {program, std::string("reference")})
    for (const ProgramValue &v : plan.persistent(p))
      if (v.isParameter)
        named.insert(v.name);
  for (const std::string &param : named)
    if (!compared.count(param)) {
      report.lines.push_back("check param " + param +
                             ": the train step does not update it (FAILED)");
      report.ok = false;
    }
  return report;
}

static std::string formatRankMemory(const ExecutorMemory &m,
                                    const std::string &who) {
  return "memory (" + who + "): high-water mark " +
         std::to_string(m.highWaterMark) +
      " B = arena " + std::to_string(m.arena) + " + parameters " +
      std::to_string(m.parameters) + " + state " + std::to_string(m.state) +
      " + inputs " + std::to_string(m.inputs) + " + buckets " +
      std::to_string(m.bucketBuffers) + " + scratch " +
      std::to_string(m.collectiveScratch) + " + staging " +
      std::to_string(m.staging) +
      (m.pipelineSlots ? " + pipeline slots " + std::to_string(m.pipelineSlots)
                       : std::string()) +
      " (bytes the executor allocated from its device); largest gather " +
      std::to_string(m.largestGather) + " B, outside the steps\n";
}

/// The process: every local rank, the plan, BLAS and thread stacks.
static std::string formatProcessMemory() {
  std::string text;
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0)
    text += "memory (process): peak resident set " +
            std::to_string(int64_t(usage.ru_maxrss) * 1024) + " B\n";
  return text;
}

std::string formatMemory(const ExecutorMemory &m) {
  return formatRankMemory(m, "rank 0") + formatProcessMemory();
}

std::string formatMemory(const PlanFile &plan, const ExecutorMemory &m,
                         const std::vector<ExecutorMemory> &byRank) {
  std::string text = formatRankMemory(m, "rank 0");
  if (plan.isPipelined()) {
    pipeline::Schedule schedule = plan.pipelineSchedule();
    // The first rank of each pipeline rank after 0 (its other mesh
    // positions hold the same stages, sharded alike).
    std::vector<bool> shown(size_t(schedule.ranks), false);
    shown[0] = true;
    for (size_t rank = 1; rank < byRank.size(); ++rank) {
      int p = plan.pipelineStageOf(int(rank));
      if (p < 0 || p >= schedule.ranks || shown[size_t(p)])
        continue;
      shown[size_t(p)] = true;
      std::string stages;
      for (int c = 0; c < schedule.chunks; ++c)
        stages += (c ? ", " : "") + std::to_string(c * schedule.ranks + p);
      text += formatRankMemory(byRank[rank],
                               "rank " + std::to_string(rank) + ", stage" +
                                   (schedule.chunks > 1 ? "s " : " ") + stages);
    }
  }
  return text + formatProcessMemory();
}

std::string formatBankReport(SharedBankReport &report,
                             const std::string &over) {
  std::lock_guard<std::mutex> lock(report.mutex);
  std::string text;
  auto part = [](const char *what, const SharedBankCounts &c) {
    if (c.requests == 0)
      return std::string(what) + " none";
    return format("%s %llu requests in %llu wavefronts (%.2fx the ideal %llu)",
                  what, (unsigned long long)c.requests,
                  (unsigned long long)c.wavefronts,
                  double(c.wavefronts) / double(c.ideal),
                  (unsigned long long)c.ideal);
  };
  for (const auto &[kernel, t] : report.kernels)
    if (t.loads.requests + t.stores.requests > 0)
      text += format("  %-24s ", kernel.c_str()) + part("loads", t.loads) +
              "; " + part("stores", t.stores) + "\n";
  if (text.empty())
    return "";
  return "shared-memory banks (the block emulator's model of 32 banks, " +
         over + "):\n" + text;
}

std::string formatProfile(const std::vector<ProfileEntry> &profile,
                          int64_t steps, const std::vector<double> &seconds) {
  if (profile.empty() || steps < 1)
    return "";
  double total = 0, measured = 0;
  // The label column: 42 wide, or the longest label's width.
  int width = 42;
  for (const ProfileEntry &e : profile) {
    total += e.seconds;
    width = std::max(width, int(e.what.size()));
  }
  for (double s : seconds)
    measured += s;
  std::string out = "profile of rank 0, per step (mean of " +
                    std::to_string(steps) + "):\n";
  for (const ProfileEntry &e : profile) {
    out += format("  %-*s %7.1f calls %9.3f ms %6.1f%%", width, e.what.c_str(),
                  double(e.calls) / steps, e.seconds / steps * 1e3,
                  total > 0 ? 100 * e.seconds / total : 0.0);
    if (e.flops > 0 && e.seconds > 0)
      out += format(" %8.1f GFLOP/s, %.6g MFLOP a call",
                    e.flops / e.seconds * 1e-9, e.flops / e.calls * 1e-6);
    out += "\n";
  }
  out += format("  %-*s %13s %9.3f ms (measured step: %.3f ms)\n", width,
                "sum", "",
                total / steps * 1e3,
                measured / std::max<size_t>(seconds.size(), 1) * 1e3);
  return out;
}

} // namespace partita::runtime
