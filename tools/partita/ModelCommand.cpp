//===- ModelCommand.cpp - `partita model`: write a model as nn IR ---------===//
//
// Reads the model's shape from the command line, checks it, builds the
// forward function with the PartitaNNModels library and prints it.
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "dialects/nn/Models/ModelBuilder.h"
#include "tools/partita/Driver.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

using namespace llvm;
using namespace partita::models;

namespace partita::driver {
namespace {
cl::SubCommand modelCommand("model",
                            "Write a reference model (mlp, gpt, llama) as nn IR");

cl::opt<std::string> kindArg(cl::Positional, cl::sub(modelCommand),
                             cl::value_desc("mlp|gpt|llama"),
                             cl::desc("<mlp|gpt|llama>"));

// Sizes are read as text so that a bad number is reported with the flag's
// name (see parseInteger); the defaults are ModelConfig's.
using SizeOpt = cl::opt<std::string>;
SizeOpt layers("layers", cl::sub(modelCommand), cl::value_desc("n"),
               cl::desc("Number of layers, residual blocks for mlp "
                        "(default 2)"));
SizeOpt hidden("hidden", cl::sub(modelCommand), cl::value_desc("n"),
               cl::desc("Hidden size (default 64)"));
SizeOpt heads("heads", cl::sub(modelCommand), cl::value_desc("n"),
              cl::desc("Attention heads, gpt and llama (default 4)"));
SizeOpt kvHeads("kv-heads", cl::sub(modelCommand), cl::value_desc("n"),
                cl::desc("Key/value heads for grouped-query attention, llama "
                         "only (default: --heads)"));
SizeOpt seq("seq", cl::sub(modelCommand), cl::value_desc("n"),
            cl::desc("Sequence length, gpt and llama (default 16)"));
SizeOpt vocab("vocab", cl::sub(modelCommand), cl::value_desc("n"),
              cl::desc("Vocabulary size; number of classes for mlp "
                       "(default 256: a byte-level language model, which "
                       "trains on partita run's default data)"));
SizeOpt batch("batch", cl::sub(modelCommand), cl::value_desc("n"),
              cl::desc("Batch size (default 2)"));
SizeOpt ffn("ffn", cl::sub(modelCommand), cl::value_desc("n"),
            cl::desc("Feed-forward width (default 4 * --hidden)"));
cl::opt<std::string> dtype("dtype", cl::sub(modelCommand), cl::init("f32"),
                           cl::value_desc("f32|bf16|f16"),
                           cl::desc("Element type of parameters, "
                                    "activations and loss"));
cl::opt<bool> tied("tied", cl::sub(modelCommand),
                   cl::desc("gpt: compute the logits with wte (no lm_head)"));
cl::opt<bool> untied("untied", cl::sub(modelCommand),
                     cl::desc("gpt: separate lm_head parameter (default)"));
cl::opt<std::string> output("o", cl::sub(modelCommand), cl::init("-"),
                            cl::value_desc("file"),
                            cl::desc("Output file (default: stdout)"));

/// Options that make no sense for some model kinds; giving one is an error
/// rather than silently ignored.
bool appliesTo(const cl::Option &option, ModelKind kind) {
  if (kind == ModelKind::MLP)
    return &option != &heads && &option != &seq && &option != &kvHeads &&
           &option != &tied && &option != &untied;
  if (kind == ModelKind::GPT)
    return &option != &kvHeads;
  return &option != &tied && &option != &untied;
}

int runModel() {
  const char *name = "model";
  if (kindArg.empty())
    return reportError(name, "missing the model kind: mlp, gpt or llama "
                             "(see 'partita model --help')");
  std::optional<ModelKind> kind = parseModelKind(kindArg);
  if (!kind)
    return reportError(name, "unknown model kind '" + kindArg +
                                 "': expected mlp, gpt or llama");
  for (const cl::Option *option :
       std::initializer_list<const cl::Option *>{&heads, &kvHeads, &seq, &tied,
                                                 &untied})
    if (option->getNumOccurrences() && !appliesTo(*option, *kind))
      return reportError(name, "--" + option->ArgStr + " does not apply to " +
                                   stringifyModelKind(*kind) + " models");
  if (tied && untied)
    return reportError(name, "--tied and --untied contradict each other");

  ModelConfig config;
  config.kind = *kind;
  config.tied = tied;
  // Only the flags given override the defaults.
  auto read = [&](const SizeOpt &option, auto &field) -> bool {
    if (!option.getNumOccurrences())
      return true;
    int64_t value;
    if (parseInteger(name, option, value))
      return false;
    field = value;
    return true;
  };
  if (!read(layers, config.layers) || !read(hidden, config.hidden) ||
      !read(heads, config.heads) || !read(kvHeads, config.kvHeads) ||
      !read(seq, config.seq) || !read(vocab, config.vocab) ||
      !read(batch, config.batch) || !read(ffn, config.ffn))
    return 1;
  std::optional<DType> elementType = parseDType(dtype);
  if (!elementType)
    return reportError(name, "--dtype must be f32, bf16 or f16, got '" +
                                 dtype + "'");
  config.dtype = *elementType;
  if (Error err = verifyModelConfig(config))
    return reportError(name, toString(std::move(err)));

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  // The builder is exercised by tests; should it still build something the
  // verifier rejects, say so at the op rather than print bad IR.
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
      buildModel(context, config);
  if (failed(module))
    return reportError(name, "the built model failed to verify (a bug in "
                             "partita model; please report it)");
  return writeModule(name, module->get(), output);
}
} // namespace

Command getModelCommand() { return {modelCommand, runModel}; }

} // namespace partita::driver
