//===- RuntimeModule.cpp - partita._runtime: running plans from Python ----===//
//
// Binds the runtime library (runtime/include/partita/runtime: PlanFile,
// Executor, onEveryRank) and nothing of LLVM, so `import partita.runtime`
// works where plans only run. Arrays come in as nanobind ndarrays (numpy, or
// torch CPU tensors through DLPack) and are read in place: the executor gets
// views of their memory (Executor::setInputViews), so no staging copy is
// made. Results go out as numpy arrays owning the runtime's tensors.
//
// The GIL is released while ranks run. The per-step callback of train() runs
// on rank 0's thread with the GIL taken for it; an exception it raises stops
// every rank (the local communicator's poisoning) and is re-raised here.
//
//===----------------------------------------------------------------------===//

#include "Errors.h"

#include "partita/runtime/Backend.h"
#include "partita/runtime/Executor.h"
#include "partita/runtime/Train.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nb = nanobind;
namespace rt = partita::runtime;
using partita::python::raiseError;

namespace {

using Array = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// A loaded plan, shared by every run of it.
struct LoadedPlan {
  std::shared_ptr<const rt::PlanFile> file;
};

/// Addresses the last run() or train() read its inputs from (for the test
/// that arrays are read in place).
std::vector<uintptr_t> lastInputAddresses;
std::mutex lastInputMutex;

rt::DType toDType(const nb::dlpack::dtype &dtype, const std::string &what) {
  using Code = nb::dlpack::dtype_code;
  auto code = Code(dtype.code);
  if (dtype.lanes == 1) {
    if (code == Code::Float && dtype.bits == 32)
      return rt::DType::F32;
    if (code == Code::Float && dtype.bits == 64)
      return rt::DType::F64;
    if (code == Code::Float && dtype.bits == 16)
      return rt::DType::F16;
    if (code == Code::Bfloat && dtype.bits == 16)
      return rt::DType::BF16;
    if (code == Code::Int && dtype.bits == 32)
      return rt::DType::I32;
    if (code == Code::Int && dtype.bits == 64)
      return rt::DType::I64;
  }
  raiseError(what + ": unsupported element type (code " +
             std::to_string(dtype.code) + ", " + std::to_string(dtype.bits) +
             " bits)");
}

rt::TensorView toView(const Array &array, const std::string &what) {
  rt::TensorView view;
  view.data = const_cast<void *>(array.data());
  view.dtype = toDType(array.dtype(), what);
  for (size_t d = 0; d < array.ndim(); ++d)
    view.shape.push_back(int64_t(array.shape(d)));
  return view;
}

nb::object toNumpy(rt::Tensor tensor) {
  nb::dlpack::dtype dtype;
  switch (tensor.getDType()) {
  case rt::DType::F32:
    dtype = nb::dtype<float>();
    break;
  case rt::DType::F64:
    dtype = nb::dtype<double>();
    break;
  case rt::DType::I32:
    dtype = nb::dtype<int32_t>();
    break;
  case rt::DType::I64:
    dtype = nb::dtype<int64_t>();
    break;
  case rt::DType::F16:
    dtype = {uint8_t(nb::dlpack::dtype_code::Float), 16, 1};
    break;
  case rt::DType::BF16:
    raiseError("a bf16 result has no numpy type");
  }
  auto *owned = new rt::Tensor(std::move(tensor));
  nb::capsule owner(owned, [](void *p) noexcept {
    delete static_cast<rt::Tensor *>(p);
  });
  std::vector<size_t> shape(owned->getShape().begin(),
                            owned->getShape().end());
  return nb::ndarray<nb::numpy>(owned->data<unsigned char>(), shape.size(),
                                shape.data(), owner, nullptr, dtype)
      .cast();
}

nb::list describeValues(const std::vector<rt::ProgramValue> &values) {
  nb::list out;
  for (const rt::ProgramValue &v : values) {
    nb::dict d;
    d["name"] = v.name;
    d["dtype"] = std::string(rt::toString(v.dtype));
    d["shape"] = v.globalShape;
    d["parameter"] = v.isParameter;
    d["state"] = v.isState;
    d["replaces"] = v.replaces;
    d["value_bound"] = v.valueBound;
    out.append(d);
  }
  return out;
}

struct NamedView {
  std::string name;
  rt::TensorView view;
};

std::vector<NamedView> toNamedViews(
    const std::vector<std::pair<std::string, Array>> &params) {
  std::vector<NamedView> out;
  for (const auto &[name, array] : params)
    out.push_back({name, toView(array, "parameter '" + name + "'")});
  return out;
}

rt::RunOptions runOptions(const LoadedPlan &plan, std::optional<int> ranks,
                          std::optional<int64_t> timeoutMs) {
  rt::RunOptions options;
  if (timeoutMs) {
    if (*timeoutMs < 100)
      raiseError("timeout_ms=" + std::to_string(*timeoutMs) +
                 ": a collective's deadline must be at least 100 ms");
    options.timeout = std::chrono::milliseconds(*timeoutMs);
  }
  options.ranks = ranks.value_or(int(plan.file->numDevices()));
  if (options.ranks != plan.file->numDevices())
    raiseError("the plan's mesh has " +
               std::to_string(plan.file->numDevices()) + " devices, ranks=" +
               std::to_string(options.ranks) + " asks for another number");
  options.toolName = "partita";
  return options;
}

/// Runs `program` once on `inputs` (global arrays in the program's input
/// order), with parameters `params` set first (the others keep the plan's
/// initial values); returns every result as a global numpy array.
nb::list runPlan(LoadedPlan &plan, const std::string &program,
                 const std::vector<Array> &inputs,
                 const std::vector<std::pair<std::string, Array>> &params,
                 std::optional<int> ranks, std::optional<int64_t> timeoutMs) {
  if (!plan.file->hasProgram(program))
    raiseError("the plan has no program '" + program + "'");
  rt::RunOptions options = runOptions(plan, ranks, timeoutMs);
  std::vector<rt::TensorView> views;
  std::vector<uintptr_t> addresses;
  for (size_t i = 0; i < inputs.size(); ++i) {
    views.push_back(toView(inputs[i], "input " + std::to_string(i)));
    addresses.push_back(uintptr_t(inputs[i].data()));
  }
  std::vector<NamedView> paramViews = toNamedViews(params);
  {
    std::lock_guard<std::mutex> lock(lastInputMutex);
    lastInputAddresses = addresses;
  }
  std::vector<rt::Tensor> results;
  std::string error;
  {
    nb::gil_scoped_release release;
    std::mutex mutex;
    try {
      rt::onEveryRank(*plan.file, program, options, [&](rt::Communicator *comm) {
        auto backend = rt::createCpuBackend(options.ranks > 1 ? 1 : 0);
        rt::Executor executor(plan.file, program, comm, *backend);
        for (const NamedView &p : paramViews)
          executor.setPersistentView(p.name, p.view);
        executor.setInputViews(views);
        executor.run();
        std::vector<rt::Tensor> gathered = executor.gatherResults();
        if (!comm || comm->rank() == 0) {
          std::lock_guard<std::mutex> lock(mutex);
          results = std::move(gathered);
        }
      });
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  if (!error.empty())
    raiseError(error);
  nb::list out;
  for (rt::Tensor &t : results)
    out.append(toNumpy(std::move(t)));
  return out;
}

/// Trains `program` (a train step) for `steps` steps on `batches[step]`
/// (global arrays in input order). `onStep(metrics)` runs after each step on
/// rank 0. Returns {"losses", "seconds", "parameters"} (the final parameters
/// as global arrays, by name).
nb::dict trainPlan(LoadedPlan &plan, const std::string &program,
                   const std::vector<std::vector<Array>> &batches,
                   int64_t steps,
                   const std::vector<std::pair<std::string, Array>> &params,
                   std::optional<int> ranks, nb::object onStep,
                   std::optional<int64_t> timeoutMs) {
  if (!plan.file->hasProgram(program))
    raiseError("the plan has no program '" + program + "'");
  if (steps < 0 || int64_t(batches.size()) < steps)
    raiseError("train: " + std::to_string(steps) + " steps need as many " +
               "batches, got " + std::to_string(batches.size()));
  rt::RunOptions options = runOptions(plan, ranks, timeoutMs);
  std::vector<std::vector<rt::TensorView>> views(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s)
    for (size_t i = 0; i < batches[s].size(); ++i)
      views[s].push_back(toView(batches[s][i], "batch " + std::to_string(s) +
                                                   " input " +
                                                   std::to_string(i)));
  std::vector<NamedView> paramViews = toNamedViews(params);
  size_t lossIndex = rt::lossIndex(*plan.file, program);
  std::vector<std::string> paramNames;
  for (const rt::ProgramValue &v : plan.file->persistent(program))
    if (v.isParameter)
      paramNames.push_back(v.name);

  std::vector<double> losses, seconds;
  std::vector<rt::Tensor> finalParams;
  std::optional<nb::python_error> callbackError;
  std::string error;
  {
    nb::gil_scoped_release release;
    std::mutex mutex;
    try {
      rt::onEveryRank(*plan.file, program, options, [&](rt::Communicator *comm) {
        bool first = !comm || comm->rank() == 0;
        auto backend = rt::createCpuBackend(options.ranks > 1 ? 1 : 0);
        rt::Executor executor(plan.file, program, comm, *backend);
        for (const NamedView &p : paramViews)
          executor.setPersistentView(p.name, p.view);
        for (int64_t step = 0; step < steps; ++step) {
          auto start = std::chrono::steady_clock::now();
          executor.setInputViews(views[step]);
          executor.run();
          rt::Tensor loss = executor.gatherResult(lossIndex);
          double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count();
          if (!first)
            continue;
          double value = rt::elementAsDouble(loss, 0);
          losses.push_back(value);
          seconds.push_back(elapsed);
          if (onStep.is_none())
            continue;
          nb::gil_scoped_acquire acquire;
          try {
            nb::dict metrics;
            metrics["step"] = step;
            metrics["loss"] = value;
            metrics["seconds"] = elapsed;
            onStep(metrics);
          } catch (nb::python_error &e) {
            callbackError.emplace(std::move(e));
            throw rt::Error("train: the step callback raised at step " +
                            std::to_string(step));
          }
        }
        // Every rank takes part in each gather; only rank 0 keeps what it
        // gathers, and the others drop each tensor at once (8 local ranks
        // holding GPT-2's 0.5 GB each did not fit a 24 GB machine).
        std::vector<rt::Tensor> gathered;
        for (const std::string &name : paramNames) {
          rt::Tensor whole = executor.gatherPersistent(name);
          if (first)
            gathered.push_back(std::move(whole));
        }
        if (first) {
          std::lock_guard<std::mutex> lock(mutex);
          finalParams = std::move(gathered);
        }
      });
    } catch (const std::exception &e) {
      error = e.what();
    }
  }
  if (callbackError) {
    callbackError->restore();
    throw nb::python_error();
  }
  if (!error.empty())
    raiseError(error);
  nb::dict out;
  out["losses"] = losses;
  out["seconds"] = seconds;
  nb::dict parameters;
  for (size_t i = 0; i < paramNames.size() && i < finalParams.size(); ++i)
    parameters[paramNames[i].c_str()] = toNumpy(std::move(finalParams[i]));
  out["parameters"] = parameters;
  return out;
}

} // namespace

NB_MODULE(_runtime, m) {
  m.doc() = "Partita's runtime (no LLVM); use it through `partita.runtime`.";
  // Whatever the runtime throws from a binding's own frames (a bad program
  // name, a shape mismatch) is a partita.Error too.
  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const rt::Error &e) {
      raiseError(e.what());
    }
  });

  nb::class_<LoadedPlan>(m, "LoadedPlan")
      .def("__init__",
           [](LoadedPlan *self, nb::bytes bytes, const std::string &what) {
             std::string data(static_cast<const char *>(bytes.data()),
                              bytes.size());
             std::shared_ptr<const rt::PlanFile> file;
             std::string error;
             try {
               file = rt::PlanFile::parse(data, what);
             } catch (const std::exception &e) {
               error = e.what();
             }
             if (!error.empty())
               raiseError(error);
             new (self) LoadedPlan{std::move(file)};
           },
           nb::arg("data"), nb::arg("what"))
      .def_prop_ro("num_devices",
                   [](LoadedPlan &p) { return p.file->numDevices(); })
      .def_prop_ro("programs",
                   [](LoadedPlan &p) { return p.file->programNames(); })
      .def("is_partitioned",
           [](LoadedPlan &p, const std::string &program) {
             return p.file->isPartitioned(program);
           })
      .def("inputs",
           [](LoadedPlan &p, const std::string &program) {
             return describeValues(p.file->inputs(program));
           })
      .def("results",
           [](LoadedPlan &p, const std::string &program) {
             return describeValues(p.file->results(program));
           })
      .def("persistent", [](LoadedPlan &p, const std::string &program) {
        return describeValues(p.file->persistent(program));
      });

  m.def("run", &runPlan, nb::arg("plan"), nb::arg("program"),
        nb::arg("inputs"), nb::arg("params"), nb::arg("ranks").none(),
        nb::arg("timeout_ms").none());
  m.def("train", &trainPlan, nb::arg("plan"), nb::arg("program"),
        nb::arg("batches"), nb::arg("steps"), nb::arg("params"),
        nb::arg("ranks").none(), nb::arg("on_step").none(),
        nb::arg("timeout_ms").none());
  m.def("_last_input_addresses", [] {
    std::lock_guard<std::mutex> lock(lastInputMutex);
    return lastInputAddresses;
  });
}
