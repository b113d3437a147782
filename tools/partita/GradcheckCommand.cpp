//===- GradcheckCommand.cpp - `partita gradcheck`: VJPs vs finite differences //
//
// Checks nn-autodiff's gradients numerically: the model's forward function
// is promoted to f64, differentiated with nn-autodiff{optimizer=none} into
// @grads, and both are lowered to one unpartitioned plan in which the
// parameters are plain inputs (so the check sets their values). @grads runs
// once; then, per checked element of every parameter, the forward runs at
// x + h and x - h, and the central difference (L(x+h) - L(x-h)) / 2h is
// compared with the gradient element. An element passes when
// |g - fd| <= atol or |g - fd| <= rtol * max(|g|, |fd|).
//
// Compiled with exceptions: the runtime reports errors as runtime::Error.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "dialects/nn/IR/NNAttributes.h"
#include "passes/InitAllPasses.h"
#include "passes/plan/PlanLowering.h"
#include "tools/partita/Driver.h"
#include "tools/partita/ModelInput.h"

#include "partita/runtime/Executor.h"
#include "partita/runtime/Train.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand
    gradcheckCommand("gradcheck",
                     "Check nn-autodiff's gradients of a model against central "
                     "finite differences of its loss, in f64");

cl::opt<std::string> inputFile(cl::Positional, cl::sub(gradcheckCommand),
                               cl::desc("<model.mlir>"));
cl::opt<std::string> stepArg("step", cl::sub(gradcheckCommand),
                             cl::init("1e-6"), cl::value_desc("h"),
                             cl::desc("Finite-difference step (default 1e-6)"));
cl::opt<std::string>
    atolArg("atol", cl::sub(gradcheckCommand), cl::init("1e-8"),
            cl::value_desc("x"),
            cl::desc("Absolute error every element may have (default 1e-8)"));
cl::opt<std::string> rtolArg(
    "rtol", cl::sub(gradcheckCommand), cl::init("1e-6"), cl::value_desc("x"),
    cl::desc("Relative error, |g - fd| / max(|g|, |fd|), an element may have "
             "beyond --atol (default 1e-6)"));
cl::opt<std::string> maxElementsArg(
    "max-elements", cl::sub(gradcheckCommand), cl::init("64"),
    cl::value_desc("n"),
    cl::desc("Elements checked per parameter, evenly spaced (default 64; 0: "
             "all)"));
cl::opt<uint64_t> seedArg("seed", cl::sub(gradcheckCommand), cl::init(1),
                          cl::desc("Seed of the parameter and input values"));
cl::opt<double> injectErrorArg(
    "inject-gradient-error", cl::sub(gradcheckCommand), cl::init(0), cl::Hidden,
    cl::desc("Testing: add this to the first element of the first gradient, "
             "so the check must fail"));

constexpr StringLiteral kCommand = "gradcheck";

/// `type` with f64 elements when it is a tensor of another float type.
mlir::Type promote(mlir::Type type) {
  auto tensor = dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !isa<mlir::FloatType>(tensor.getElementType()) ||
      tensor.getElementType().isF64())
    return type;
  return tensor.clone(mlir::Float64Type::get(type.getContext()));
}

/// Rewrites every float tensor of `func` (arguments, results, constants) to
/// f64. Returns whether anything changed.
bool promoteToF64(mlir::func::FuncOp func) {
  bool changed = false;
  auto retype = [&](mlir::Value value) {
    mlir::Type promoted = promote(value.getType());
    if (promoted != value.getType()) {
      value.setType(promoted);
      changed = true;
    }
  };
  for (mlir::BlockArgument arg : func.getArguments())
    retype(arg);
  func.walk([&](mlir::Operation *op) {
    for (mlir::Value result : op->getResults())
      retype(result);
    for (mlir::NamedAttribute attr : op->getAttrs()) {
      auto dense = dyn_cast<mlir::DenseFPElementsAttr>(attr.getValue());
      if (!dense || promote(dense.getType()) == dense.getType())
        continue;
      SmallVector<double> values =
          llvm::map_to_vector(dense.getValues<APFloat>(), [](const APFloat &v) {
            return v.convertToDouble();
          });
      auto type = cast<mlir::ShapedType>(promote(dense.getType()));
      op->setAttr(
          attr.getName(),
          dense.isSplat()
              ? mlir::DenseElementsAttr::get(type, values.front())
              : mlir::DenseElementsAttr::get(type, ArrayRef<double>(values)));
    }
  });
  SmallVector<mlir::Type> results = llvm::map_to_vector(
      func.getResultTypes(), [](mlir::Type t) { return promote(t); });
  func.setType(mlir::FunctionType::get(
      func.getContext(), func.getBody().getArgumentTypes(), results));
  return changed;
}

/// Turns every `nn.param` argument into an input of the same name, so the
/// lowered program takes the parameters' values from the caller.
void paramsToInputs(mlir::func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto name = nn::paramAttr.getArg(func, i)) {
      nn::paramAttr.removeArg(func, i);
      nn::inputAttr.setArg(func, i, name.getValue());
    }
}

/// Values for every argument of a program: parameters and float inputs
/// uniform in [-1, 1), integers uniform in [0, bound).
std::vector<rt::Tensor> makeArguments(const rt::PlanFile &plan,
                                      const std::string &program) {
  std::vector<rt::Tensor> tensors;
  for (const rt::ProgramValue &v : plan.inputs(program)) {
    if (v.dtype != rt::DType::F64 && v.dtype != rt::DType::I32 &&
        v.dtype != rt::DType::I64)
      throw rt::Error("argument '" + v.name + "' is " +
                      rt::toString(v.dtype) +
                      " after promotion; gradcheck runs f64 and integers");
    tensors.push_back(rt::generateUniform(
        v, seedArg, "gradcheck:" + v.name, "integer input '" + v.name + "'",
        " (is it used as embedding ids or cross_entropy labels?)", ""));
  }
  return tensors;
}

struct ParamCheck {
  std::string name;
  std::vector<int64_t> shape;
  int64_t checked = 0;
  double maxAbs = 0, maxRel = 0;
  int64_t failures = 0;
};

int runGradcheck() {
  if (inputFile.empty())
    return reportError(kCommand, "missing the model file (partita gradcheck "
                                 "MODEL.mlir)");
  double step, atol, rtol;
  int64_t maxElements;
  if (parseNumber(kCommand, stepArg, step) ||
      parseNumber(kCommand, atolArg, atol) ||
      parseNumber(kCommand, rtolArg, rtol) ||
      parseInteger(kCommand, maxElementsArg, maxElements))
    return 1;
  if (step <= 0)
    return reportError(kCommand,
                       "--step must be greater than 0, got " + stepArg);
  if (atol < 0 || rtol < 0)
    return reportError(kCommand, "--atol and --rtol must be at least 0");
  if (maxElements < 0)
    return reportError(kCommand, "--max-elements must be at least 0 (0: "
                                 "every element)");

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  registerAllPasses();
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  context.printOpOnDiagnostic(false);
  context.loadAllAvailableDialects();
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler printer(sourceMgr, &context);

  mlir::OwningOpRef<mlir::ModuleOp> module =
      readModel(kCommand, inputFile, context, sourceMgr);
  if (!module)
    return 1;
  auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) {
    auto funcs = module->getOps<mlir::func::FuncOp>();
    if (std::distance(funcs.begin(), funcs.end()) != 1)
      return reportError(kCommand, inputFile +
                                       " has no func.func @forward "
                                       "(and not exactly one function)");
    forward = *funcs.begin();
    // nn-autodiff differentiates @forward.
    forward.setSymName("forward");
  }
  bool promoted = promoteToF64(forward);
  if (failed(mlir::verify(*module)))
    return reportError(kCommand, "the model does not verify after promotion "
                                 "to f64 (see above)");
  SmallVector<std::string> params;
  for (unsigned i = 0; i < forward.getNumArguments(); ++i)
    if (auto name = nn::paramAttr.getArg(forward, i))
      params.push_back(name.getValue().str());
  if (params.empty())
    return reportError(kCommand, "@forward has no nn.param argument: nothing "
                                 "to differentiate");

  // @grads from a copy; the forward itself stays for the loss.
  mlir::OwningOpRef<mlir::ModuleOp> differentiated = module->clone();
  {
    mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
    std::string message;
    raw_string_ostream os(message);
    if (failed(mlir::parsePassPipeline("nn-autodiff{optimizer=none}", pm, os)))
      return reportError(kCommand, "cannot build nn-autodiff: " +
                                       StringRef(message).split('\n').first);
    if (failed(pm.run(*differentiated)))
      return 1;
  }
  auto grads = differentiated->lookupSymbol<mlir::func::FuncOp>("grads");
  if (!grads)
    return reportError(kCommand, "nn-autodiff{optimizer=none} left no @grads");
  // Which result holds which parameter's gradient, and the loss.
  std::vector<int> gradOfParam(params.size(), -1);
  int gradsLoss = -1;
  for (unsigned r = 0; r < grads.getNumResults(); ++r) {
    if (auto name = nn::gradAttr.getResult(grads, r)) {
      auto it = llvm::find(params, name.getValue().str());
      if (it != params.end())
        gradOfParam[it - params.begin()] = int(r);
    }
    if (auto out = nn::outputAttr.getResult(grads, r))
      if (out.getValue() == "loss")
        gradsLoss = int(r);
  }
  for (size_t p = 0; p < params.size(); ++p)
    if (gradOfParam[p] < 0)
      return reportError(kCommand,
                         "@grads returns no gradient for parameter '" +
                             params[p] + "' (no nn.grad result)");
  if (gradsLoss < 0)
    return reportError(kCommand, "@grads has no result nn.output = \"loss\"");
  int forwardLoss = -1;
  for (unsigned r = 0; r < forward.getNumResults(); ++r) {
    auto out = nn::outputAttr.getResult(forward, r);
    auto type = dyn_cast<mlir::RankedTensorType>(forward.getResultTypes()[r]);
    if ((out && out.getValue() == "loss") ||
        (!out && forwardLoss < 0 && type && type.getRank() == 0))
      forwardLoss = int(r);
  }
  if (forwardLoss < 0)
    return reportError(kCommand, "@forward has no loss result (nn.output = "
                                 "\"loss\", or a rank-0 result)");

  paramsToInputs(forward);
  paramsToInputs(grads);
  plan_lowering::LowerToPlanOptions options;
  options.function = "grads";
  FailureOr<partita::plan::Plan> plan =
      plan_lowering::lowerToPlan(*differentiated, options);
  if (failed(plan))
    return 1;
  bool haveMesh = false;
  if (failed(plan_lowering::lowerFunction(forward, options,
                                          *plan->mutable_mesh(), haveMesh,
                                          *plan->add_programs())))
    return 1;
  partita::plan::sealPlan(*plan);

  try {
    std::shared_ptr<const rt::PlanFile> file =
        rt::PlanFile::parse(plan->SerializeAsString(), "gradcheck plan");
    std::vector<rt::Tensor> args = makeArguments(*file, "grads");
    std::vector<rt::ProgramValue> gradArgs = file->inputs("grads");
    std::vector<rt::ProgramValue> fwdArgs = file->inputs("forward");
    // Parameter p is argument p of both programs (parameters come first).
    for (size_t p = 0; p < params.size(); ++p)
      if (p >= gradArgs.size() || gradArgs[p].name != params[p] ||
          p >= fwdArgs.size() || fwdArgs[p].name != params[p])
        throw rt::Error("the lowered programs do not take parameter '" +
                        params[p] + "' as argument " + std::to_string(p));
    // The forward takes the model's inputs in the same order.
    if (fwdArgs.size() != gradArgs.size())
      throw rt::Error("@forward and @grads take different arguments");

    auto backend = rt::createCpuBackend(0);
    rt::Executor gradsExec(file, "grads", nullptr, *backend);
    gradsExec.setInputs(args);
    gradsExec.run();
    std::vector<rt::Tensor> gradResults = gradsExec.gatherResults();
    double loss = gradResults.at(gradsLoss).data<double>()[0];
    if (injectErrorArg != 0)
      gradResults.at(gradOfParam[0]).data<double>()[0] += injectErrorArg;

    rt::Executor fwdExec(file, "forward", nullptr, *backend);
    auto lossAt = [&](const std::vector<rt::Tensor> &values) {
      fwdExec.setInputs(values);
      fwdExec.run();
      return fwdExec.gatherResults().at(forwardLoss).data<double>()[0];
    };
    double forwardValue = lossAt(args);

    outs() << "partita gradcheck: @grads of " << inputFile << " in f64"
           << (promoted ? " (promoted)" : "") << ", loss "
           << format("%.10g", loss) << " (forward "
           << format("%.10g", forwardValue) << "), step " << stepArg
           << ", atol " << atolArg << ", rtol " << rtolArg << "\n";
    bool ok =
        std::fabs(loss - forwardValue) <= atol + rtol * std::fabs(forwardValue);
    if (!ok)
      outs() << "loss of @grads differs from @forward's (FAILED)\n";
    int64_t failedParams = 0;
    for (size_t p = 0; p < params.size(); ++p) {
      rt::Tensor &x = args[p];
      const rt::Tensor &g = gradResults.at(gradOfParam[p]);
      if (g.getShape() != x.getShape())
        throw rt::Error("the gradient of '" + params[p] +
                        "' has another shape than the parameter");
      ParamCheck check{params[p], x.getShape()};
      int64_t n = x.numElements();
      int64_t count = maxElements == 0 ? n : std::min(n, maxElements);
      for (int64_t k = 0; k < count; ++k) {
        // Evenly spaced, first and last included.
        int64_t e = count == 1 ? 0 : k * (n - 1) / (count - 1);
        double saved = x.data<double>()[e];
        x.data<double>()[e] = saved + step;
        double plus = lossAt(args);
        x.data<double>()[e] = saved - step;
        double minus = lossAt(args);
        x.data<double>()[e] = saved;
        double fd = (plus - minus) / (2 * step);
        double grad = g.data<double>()[e];
        double err = std::fabs(grad - fd);
        double scale = std::max(std::fabs(grad), std::fabs(fd));
        double rel = err == 0 ? 0 : scale == 0 ? INFINITY : err / scale;
        if (std::isnan(err))
          err = rel = INFINITY;
        check.maxAbs = std::max(check.maxAbs, err);
        check.maxRel = std::max(check.maxRel, rel);
        if (!(err <= atol || rel <= rtol))
          ++check.failures;
        ++check.checked;
      }
      outs() << "param " << check.name << " [";
      for (size_t d = 0; d < check.shape.size(); ++d)
        outs() << (d ? "x" : "") << check.shape[d];
      outs() << "]: " << check.checked << "/" << n << " elements, max abs err "
             << format("%.2e", check.maxAbs) << ", max rel err "
             << format("%.2e", check.maxRel) << " ("
             << (check.failures ? "FAILED" : "ok") << ")\n";
      if (check.failures)
        ++failedParams;
    }
    outs().flush();
    if (failedParams)
      return reportError(kCommand, "the gradients of " + Twine(failedParams) +
                                       " parameter" +
                                       (failedParams == 1 ? "" : "s") +
                                       " differ from finite differences");
    if (!ok)
      return reportError(kCommand, "@grads' loss differs from @forward's");
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

Command getGradcheckCommand() { return {gradcheckCommand, runGradcheck}; }

} // namespace partita::driver
