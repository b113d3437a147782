//===- run-plan.cpp - runs a plan with Partita's runtime API --------------===//
//
// Usage: partita-embed-run-plan PLAN.pb [RANKS]
// Loads a plan, runs its step program on RANKS local ranks (threads of this
// process; default: the plan's device count) with generated inputs and
// prints every result; then, when the plan has an unpartitioned "reference"
// program, runs it on one rank with the same inputs and checks that every
// result matches (max difference relative to the largest reference value at
// most 1e-5). Exits non-zero on any error or mismatch.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <mutex>

namespace rt = partita::runtime;

namespace {
double element(const rt::Tensor &t, int64_t i) {
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
    throw rt::Error("run-plan handles f32, f64, i32 and i64 values only");
  }
}

/// A deterministic input: values in [-1, 1), or integers in [0, valueBound).
rt::Tensor makeInput(const rt::ProgramValue &v) {
  rt::Tensor t(v.dtype, v.globalShape);
  int64_t bound = v.valueBound > 0 ? v.valueBound : 16;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double x = std::fmod(i * 0.6180339887, 1.0) * 2 - 1;
    switch (v.dtype) {
    case rt::DType::F32:
      t.data<float>()[i] = float(x);
      break;
    case rt::DType::F64:
      t.data<double>()[i] = x;
      break;
    case rt::DType::I32:
      t.data<int32_t>()[i] = int32_t((i * 7) % bound);
      break;
    case rt::DType::I64:
      t.data<int64_t>()[i] = (i * 7) % bound;
      break;
    default:
      throw rt::Error("input '" + v.name + "' has a dtype run-plan cannot fill");
    }
  }
  return t;
}

/// Runs `program` on `ranks` local ranks (or once, unpartitioned) and returns
/// rank 0's results.
std::vector<rt::Tensor> run(std::shared_ptr<const rt::PlanFile> plan,
                            const std::string &program, int ranks,
                            const std::vector<rt::Tensor> &inputs) {
  std::vector<rt::Tensor> results;
  std::mutex mutex;
  auto body = [&](rt::Communicator *comm) {
    auto backend = rt::createCpuBackend(ranks > 1 ? 1 : 0);
    rt::Executor executor(plan, program, comm, *backend);
    executor.setInputs(inputs);
    executor.run();
    std::vector<rt::Tensor> gathered = executor.gatherResults();
    std::lock_guard<std::mutex> lock(mutex);
    if (!comm || comm->rank() == 0)
      results = std::move(gathered);
  };
  if (!plan->isPartitioned(program))
    body(nullptr);
  else
    rt::runLocalRanks(ranks, [&](rt::Communicator &comm) { body(&comm); });
  return results;
}
} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: " << argv[0] << " PLAN.pb [RANKS]\n";
    return 2;
  }
  try {
    std::shared_ptr<const rt::PlanFile> plan = rt::PlanFile::load(argv[1]);
    int ranks = argc > 2 ? std::atoi(argv[2]) : int(plan->numDevices());
    std::string program = plan->programNames().front();
    std::vector<rt::Tensor> inputs;
    for (const rt::ProgramValue &v : plan->inputs(program))
      inputs.push_back(makeInput(v));

    std::vector<rt::Tensor> results = run(plan, program, ranks, inputs);
    std::vector<rt::ProgramValue> values = plan->results(program);
    for (size_t i = 0; i < results.size(); ++i) {
      double sum = 0;
      for (int64_t e = 0; e < results[i].numElements(); ++e)
        sum += element(results[i], e);
      std::cout << program << " on " << ranks << " ranks: result '"
                << values[i].name << "' has " << results[i].numElements()
                << " elements, sum " << sum << "\n";
    }
    if (!plan->hasProgram("reference"))
      return 0;

    std::vector<rt::Tensor> reference = run(plan, "reference", 1, inputs);
    bool ok = reference.size() == results.size();
    for (size_t i = 0; ok && i < results.size(); ++i) {
      const rt::Tensor &a = results[i], &b = reference[i];
      if (a.getShape() != b.getShape())
        ok = false;
      double maxDiff = 0, maxRef = 0;
      for (int64_t e = 0; ok && e < a.numElements(); ++e) {
        double diff = std::fabs(element(a, e) - element(b, e));
        maxDiff = std::isnan(diff) ? INFINITY : std::max(maxDiff, diff);
        maxRef = std::max(maxRef, std::fabs(element(b, e)));
      }
      ok = ok && maxDiff <= 1e-5 * maxRef;
      std::cout << "check '" << values[i].name << "' against the reference: "
                << "max diff " << maxDiff << " (" << (ok ? "ok" : "FAILED")
                << ")\n";
    }
    if (!ok)
      std::cerr << "results differ from the reference program\n";
    return ok ? 0 : 1;
  } catch (const rt::Error &e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
