//===- TrainCommand.cpp - `partita train`: a training run from a config ---===//
//
// `partita train CONFIG.toml [--section.key value ...] [--dry-run]` reads a
// TOML config (toml++), in which every key can also be given as a flag,
// builds or reads the model, compiles the train step through the compiler
// library (passes/Pipelines.h: compileToPlan) and runs it through the
// runtime library (TrainLoop.h: schedule, evaluation, metrics, periodic
// checkpoints, resume, SIGTERM). `--dry-run` prints the plan's explain and
// stops. The keys, their types and defaults are the table kKeys below (and
// docs/user-guide.md); an unknown key, a value of the wrong type or a
// missing file is an error naming the key and the file (or flag).
//
//===----------------------------------------------------------------------===//

#include "dialects/InitAllDialects.h"
#include "dialects/nn/Models/ModelBuilder.h"
#include "passes/Pipelines.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/sharding/Strategies.h"
#include "tools/partita/Driver.h"
#include "tools/partita/MeshSpec.h"
#include "tools/partita/ModelInput.h"

#include "partita/runtime/Metrics.h"
#include "partita/runtime/RunTool.h"
#include "partita/runtime/TrainLoop.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <unistd.h>

using namespace llvm;
namespace rt = partita::runtime;

namespace partita::driver {
namespace {
cl::SubCommand trainCommand(
    "train", "Train a model from a TOML config: compile the train step and "
             "run it with a schedule, evaluation, metrics and checkpoints "
             "(see 'partita train --help')");

constexpr StringLiteral kCommand = "train";

/// `value` as printf's `fmt` writes it.
std::string numberText(double value, const char *fmt = "%g") {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

enum class KeyType { Integer, Number, String, Bool };

const char *typeName(KeyType type) {
  switch (type) {
  case KeyType::Integer:
    return "an integer";
  case KeyType::Number:
    return "a number";
  case KeyType::String:
    return "a string";
  case KeyType::Bool:
    return "a boolean";
  }
  return "?";
}

/// Every key a config may hold ("section.key"), its type and help.
struct KeySpec {
  const char *key;
  KeyType type;
  const char *help;
};

const KeySpec kKeys[] = {
    {"model.family", KeyType::String,
     "built-in model: gpt, llama or mlp (or model.file)"},
    {"model.file", KeyType::String,
     "a model as nn IR (.mlir, e.g. from partita model), instead of family"},
    {"model.layers", KeyType::Integer, "layers (family)"},
    {"model.hidden", KeyType::Integer, "hidden size (family)"},
    {"model.heads", KeyType::Integer, "attention heads (family)"},
    {"model.kv_heads", KeyType::Integer, "key/value heads (llama)"},
    {"model.vocab", KeyType::Integer,
     "vocabulary (family; 256 for byte-level text)"},
    {"model.ffn", KeyType::Integer, "feed-forward width (family)"},
    {"model.tied", KeyType::Bool, "gpt: logits with wte (family)"},
    {"model.precision", KeyType::String,
     "fp32 (default; also f32), bf16-mixed or fp16-mixed (partita plan "
     "--precision)"},
    {"parallel.mesh", KeyType::String, "device mesh, e.g. dp=2,tp=2"},
    {"parallel.strategy", KeyType::String,
     "dp, zero1..3, fsdp, megatron, dp+megatron, ... (partita plan "
     "--strategy; default dp, or none on one device)"},
    {"parallel.bucket_bytes", KeyType::Integer,
     "gradient bucket cap in bytes (default 25 MiB)"},
    {"parallel.overlap_comm", KeyType::Bool,
     "issue gradient reductions early (default true)"},
    {"optimizer.name", KeyType::String, "adamw (default) or sgd"},
    {"optimizer.lr", KeyType::Number, "peak learning rate (default 1e-3)"},
    {"optimizer.beta1", KeyType::Number, "adamw beta1 (default 0.9)"},
    {"optimizer.beta2", KeyType::Number, "adamw beta2 (default 0.999)"},
    {"optimizer.eps", KeyType::Number, "adamw epsilon (default 1e-8)"},
    {"optimizer.weight_decay", KeyType::Number, "weight decay (default 0)"},
    {"optimizer.momentum", KeyType::Number, "sgd momentum (default 0)"},
    {"optimizer.clip_norm", KeyType::Number,
     "clip gradients to this global norm (0: off, the default)"},
    {"schedule.kind", KeyType::String,
     "constant (default), cosine or linear decay after the warmup"},
    {"schedule.warmup_steps", KeyType::Integer,
     "linear warmup steps (default 0)"},
    {"schedule.min_lr", KeyType::Number,
     "where the decay ends (default 0.1 * lr)"},
    {"schedule.decay_steps", KeyType::Integer,
     "step at which the decay reaches min_lr (default train.steps)"},
    {"train.steps", KeyType::Integer, "steps of the run (required)"},
    {"train.batch", KeyType::Integer, "global batch (family; default 8)"},
    {"train.seq", KeyType::Integer, "sequence length (family; default 64)"},
    {"train.seed", KeyType::Integer, "parameter initialization seed"},
    {"train.recompute", KeyType::String, "none, full or selective"},
    {"data.train", KeyType::String,
     "token file (default /usr/share/common-licenses/GPL-3, byte-level)"},
    {"data.format", KeyType::String,
     "bytes (text, 1 byte a token; default), uint16 (nanoGPT .bin) or "
     "uint32"},
    {"data.validation", KeyType::String, "validation token file"},
    {"data.val_fraction", KeyType::Number,
     "or: this last fraction of data.train is held out for validation"},
    {"eval.every", KeyType::Integer,
     "evaluate every k steps (0: after the last only; default 0)"},
    {"eval.batches", KeyType::Integer, "validation batches (default 4)"},
    {"checkpoint.dir", KeyType::String,
     "checkpoint directory (step-<k> inside); a rerun resumes from it"},
    {"checkpoint.every", KeyType::Integer,
     "save every k steps (0: after the last only)"},
    {"checkpoint.keep", KeyType::Integer,
     "keep the newest k checkpoints (0: all; default 3)"},
    {"checkpoint.resume", KeyType::Bool,
     "resume from the newest checkpoint (default true)"},
    {"log.metrics", KeyType::String, "JSONL metrics file"},
    {"log.tensorboard", KeyType::String,
     "directory for TensorBoard event files (scalars)"},
    {"log.every", KeyType::Integer,
     "console line every k steps (default 1; the files get every step)"},
    {"log.peak_flops", KeyType::Number,
     "peak FLOP/s of one device for MFU (default: measured BLAS peak)"},
    {"log.progress", KeyType::String,
     "auto (one rewritten line on a terminal; default), line or plain"},
};

const KeySpec *findKey(StringRef key) {
  for (const KeySpec &spec : kKeys)
    if (key == spec.key)
      return &spec;
  return nullptr;
}

/// A config value with where it came from ("cfg.toml:12", "--optimizer.lr").
struct Value {
  KeyType type;
  int64_t integer = 0;
  double number = 0;
  bool boolean = false;
  std::string string;
  std::string origin;
};

/// The merged config: the file's values, then the flags'.
class Config {
public:
  std::map<std::string, Value> values;
  std::string file;

  bool has(StringRef key) const { return values.count(key.str()); }
  const Value *get(StringRef key) const {
    auto it = values.find(key.str());
    return it == values.end() ? nullptr : &it->second;
  }
  int64_t integer(StringRef key, int64_t fallback) const {
    const Value *v = get(key);
    return v ? v->integer : fallback;
  }
  double number(StringRef key, double fallback) const {
    const Value *v = get(key);
    return v ? v->number : fallback;
  }
  std::string string(StringRef key, StringRef fallback) const {
    const Value *v = get(key);
    return v ? v->string : fallback.str();
  }
  bool boolean(StringRef key, bool fallback) const {
    const Value *v = get(key);
    return v ? v->boolean : fallback;
  }
  /// "'optimizer.lr' (cfg.toml:12)".
  std::string where(StringRef key) const {
    const Value *v = get(key);
    return "'" + key.str() + "'" + (v ? " (" + v->origin + ")" : "");
  }
};

/// Reads the TOML file into `config`. Returns 1 after reporting.
int readConfigFile(StringRef path, Config &config) {
  config.file = path.str();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path.str(), ec))
    return reportError(kCommand, "cannot read the config file '" + path +
                                     "': " +
                                     (std::filesystem::exists(path.str(), ec)
                                          ? "not a regular file"
                                          : "no such file"));
  toml::table table;
  try {
    table = toml::parse_file(path.str());
  } catch (const toml::parse_error &e) {
    return reportError(kCommand,
                       path + ":" + Twine(e.source().begin.line) + ":" +
                           Twine(e.source().begin.column) + ": " +
                           std::string(e.description()));
  }
  for (auto &&[sectionKey, section] : table) {
    std::string sectionName(sectionKey.str());
    auto line = [&](const toml::node &node) {
      return path.str() + ":" + std::to_string(node.source().begin.line);
    };
    const toml::table *inner = section.as_table();
    if (!inner)
      return reportError(kCommand,
                         line(section) + ": unknown key '" + sectionName +
                             "': keys live in sections ([model], "
                             "[parallel], [optimizer], [schedule], [train], "
                             "[data], [eval], [checkpoint], [log])");
    for (auto &&[key, node] : *inner) {
      std::string name = sectionName + "." + std::string(key.str());
      const KeySpec *spec = findKey(name);
      if (!spec)
        return reportError(kCommand, line(node) + ": unknown key '" + name +
                                         "' (see 'partita train --help')");
      Value value{spec->type};
      value.origin = line(node);
      bool ok = false;
      switch (spec->type) {
      case KeyType::Integer:
        if (auto v = node.value_exact<int64_t>()) {
          value.integer = *v;
          ok = true;
        }
        break;
      case KeyType::Number:
        if (auto v = node.value<double>()) {
          value.number = *v;
          ok = std::isfinite(*v);
        }
        break;
      case KeyType::String:
        if (auto v = node.value_exact<std::string>()) {
          value.string = *v;
          ok = true;
        }
        break;
      case KeyType::Bool:
        if (auto v = node.value_exact<bool>()) {
          value.boolean = *v;
          ok = true;
        }
        break;
      }
      if (!ok) {
        std::ostringstream got;
        got << node.type();
        return reportError(kCommand, line(node) + ": '" + name + "' must be " +
                                         typeName(spec->type) + ", got " +
                                         (spec->type == KeyType::Number &&
                                                  node.is_number()
                                              ? std::string("a non-finite number")
                                              : "a " + got.str()));
      }
      config.values[name] = value;
    }
  }
  return 0;
}

/// Sets `key` from the flag text `text`. Returns 1 after reporting.
int setFromFlag(Config &config, const std::string &key,
                const std::string &text) {
  const KeySpec *spec = findKey(key);
  if (!spec)
    return reportError(kCommand, "unknown option '--" + key +
                                     "' (see 'partita train --help')");
  Value value{spec->type};
  value.origin = "--" + key;
  bool ok = !text.empty();
  char *end = nullptr;
  errno = 0;
  switch (spec->type) {
  case KeyType::Integer:
    value.integer = std::strtoll(text.c_str(), &end, 10);
    ok = ok && !*end && !errno;
    break;
  case KeyType::Number:
    value.number = std::strtod(text.c_str(), &end);
    ok = ok && !*end && std::isfinite(value.number);
    break;
  case KeyType::String:
    value.string = text;
    break;
  case KeyType::Bool:
    ok = text == "true" || text == "false";
    value.boolean = text == "true";
    break;
  }
  if (!ok)
    return reportError(kCommand, "--" + key + " must be " +
                                     typeName(spec->type) + ", got '" + text +
                                     "'");
  config.values[key] = value;
  return 0;
}

std::string helpText() {
  std::string out =
      "OVERVIEW: Train a model from a TOML config: compile the train step, "
      "run it with a learning-rate schedule, evaluation, metrics and "
      "checkpoints; a rerun resumes from the newest checkpoint\n\n"
      "USAGE: partita train CONFIG.toml [--section.key value ...] "
      "[--dry-run]\n\n"
      "  --dry-run                  compile, print the plan's explain, stop\n"
      "  --SECTION.KEY=VALUE        set or override a config key\n\n"
      "KEYS:\n";
  for (const KeySpec &spec : kKeys) {
    std::string line = std::string("  ") + spec.key;
    line += line.size() < 28 ? std::string(28 - line.size(), ' ') : " ";
    out += line + spec.help + "\n";
  }
  return out;
}

/// The run: everything after the config is read.
class TrainRun {
public:
  explicit TrainRun(Config &config) : config(config) {}
  int run(bool dryRun);

private:
  int fail(const Twine &message) { return reportError(kCommand, message); }
  int checkPositive(StringRef key, int64_t min = 1);
  mlir::OwningOpRef<mlir::ModuleOp> makeModel(mlir::MLIRContext &context,
                                              SourceMgr &sourceMgr);
  int compilerOptions(CompilerOptions &options);
  double flopsPerStep(const rt::PlanFile &plan, int64_t tokens) const;

  Config &config;
  std::optional<models::ModelConfig> family;
};

int TrainRun::checkPositive(StringRef key, int64_t min) {
  if (const Value *v = config.get(key))
    if (v->integer < min)
      return fail(config.where(key) + " must be at least " + Twine(min) +
                  ", got " + Twine(v->integer));
  return 0;
}

mlir::OwningOpRef<mlir::ModuleOp>
TrainRun::makeModel(mlir::MLIRContext &context, SourceMgr &sourceMgr) {
  if (config.has("model.file")) {
    std::string file = config.string("model.file", "");
    // Relative to the config file, so a config and its model travel
    // together.
    if (!sys::path::is_absolute(file) && !sys::fs::exists(file)) {
      SmallString<256> beside(sys::path::parent_path(config.file));
      sys::path::append(beside, file);
      if (sys::fs::exists(beside))
        file = beside.str().str();
    }
    if (!sys::fs::exists(file)) {
      fail(config.where("model.file") + ": cannot read the model '" + file +
           "': no such file");
      return nullptr;
    }
    return readModel(kCommand, file, context, sourceMgr);
  }
  FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> module =
      models::buildModel(context, *family);
  if (failed(module))
    return nullptr;
  return std::move(*module);
}

int TrainRun::compilerOptions(CompilerOptions &options) {
  options.train = true;
  autodiff::NNAutodiffOptions &ad = options.autodiff;
  std::string optimizer = config.string("optimizer.name", "adamw");
  if (optimizer != "adamw" && optimizer != "sgd")
    return fail(config.where("optimizer.name") + ": unknown optimizer '" +
                optimizer + "': expected adamw or sgd");
  ad.optimizer = optimizer;
  struct {
    const char *key;
    double &into;
    double min;
    bool exclusive;
    double max;
    const char *onlyFor;
  } numbers[] = {
      {"optimizer.lr", ad.lr, 0, false, INFINITY, nullptr},
      {"optimizer.beta1", ad.beta1, 0, false, 1, "adamw"},
      {"optimizer.beta2", ad.beta2, 0, false, 1, "adamw"},
      {"optimizer.eps", ad.eps, 0, true, INFINITY, "adamw"},
      {"optimizer.weight_decay", ad.weightDecay, 0, false, INFINITY, nullptr},
      {"optimizer.momentum", ad.momentum, 0, false, INFINITY, "sgd"},
      {"optimizer.clip_norm", ad.clipNorm, 0, false, INFINITY, nullptr},
  };
  ad.lr = 1e-3;
  for (auto &n : numbers) {
    const Value *v = config.get(n.key);
    if (!v)
      continue;
    if (n.onlyFor && optimizer != n.onlyFor)
      return fail(config.where(n.key) + " applies only to optimizer " +
                  n.onlyFor + ", not " + optimizer);
    bool low = n.exclusive ? v->number <= n.min : v->number < n.min;
    if (low || v->number >= n.max)
      return fail(config.where(n.key) + " must be " +
                  (n.max == 1 ? "in [0, 1)"
                   : n.exclusive ? "greater than 0"
                                 : "at least 0") +
                  ", got " + numberText(v->number));
    n.into = v->number;
  }
  if (config.has("train.recompute")) {
    std::string r = config.string("train.recompute", "none");
    if (r != "none" && r != "full" && r != "selective")
      return fail(config.where("train.recompute") + ": expected none, full "
                                                    "or selective, got '" +
                  r + "'");
    ad.recompute = r;
  }
  std::string precision = config.string("model.precision", "fp32");
  if (precision == "f32")
    precision = "fp32";
  if (!autodiff::parsePrecision(precision))
    return fail(config.where("model.precision") +
                ": expected fp32, bf16-mixed or fp16-mixed, got '" +
                precision + "'");
  ad.precision = precision;

  std::string mesh = config.string("parallel.mesh", "");
  std::string strategy =
      config.string("parallel.strategy", mesh.empty() ? "none" : "dp");
  if (strategy != "none" && !sharding::lookupStrategy(strategy))
    return fail(config.where("parallel.strategy") + ": unknown strategy '" +
                strategy + "'");
  if (strategy != "none") {
    if (mesh.empty())
      return fail("'parallel.strategy' " + strategy +
                  " needs 'parallel.mesh' (e.g. dp=2)");
    Expected<SmallVector<MeshAxisSpec>> axes = parseMeshSpec(mesh);
    if (!axes)
      return fail(config.where("parallel.mesh") + ": " +
                  toString(axes.takeError()));
    options.annotate.mesh = printMeshSpec(*axes);
  } else if (!mesh.empty()) {
    return fail(config.where("parallel.mesh") +
                " needs a 'parallel.strategy' other than none");
  }
  options.annotate.strategy = strategy;
  options.annotate.meshName = "mesh";
  options.overlapComm = config.boolean("parallel.overlap_comm", true);
  options.optimizeComm.bucketBytes = config.integer("parallel.bucket_bytes",
                                                    25 << 20);
  if (options.optimizeComm.bucketBytes < 0)
    return fail(config.where("parallel.bucket_bytes") + " must be >= 0");
  options.seed = uint64_t(config.integer("train.seed", 0));
  return 0;
}

double TrainRun::flopsPerStep(const rt::PlanFile &plan, int64_t tokens) const {
  // 6 FLOPs per parameter per token (forward 2, backward 4), plus the
  // attention scores and values of a built-in family (12 L H T per token;
  // PaLM appendix B, as nanoGPT's estimate_mfu counts them).
  double params = 0;
  for (const rt::ProgramValue &v : plan.persistent("train_step")) {
    if (!v.isParameter)
      continue;
    double n = 1;
    for (int64_t d : v.globalShape)
      n *= double(d);
    params += n;
  }
  double perToken = 6 * params;
  if (family && family->kind != models::ModelKind::MLP)
    perToken += 12.0 * double(family->layers) * double(family->hidden) *
                double(family->seq);
  return perToken * double(tokens);
}

int TrainRun::run(bool dryRun) {
  if (!config.has("train.steps"))
    return fail("missing 'train.steps' in " + config.file +
                " (the run's length)");
  for (const char *key :
       {"train.steps", "train.batch", "train.seq", "model.layers",
        "model.hidden", "model.heads", "model.kv_heads", "model.vocab",
        "model.ffn", "eval.batches", "log.every"})
    if (checkPositive(key))
      return 1;
  for (const char *key : {"eval.every", "checkpoint.every", "checkpoint.keep",
                          "schedule.warmup_steps", "train.seed"})
    if (checkPositive(key, 0))
      return 1;
  if (config.has("model.file") == config.has("model.family"))
    return fail("give one of 'model.family' (gpt, llama, mlp) and "
                "'model.file' in " +
                config.file);
  if (config.has("model.file")) {
    for (const KeySpec &spec : kKeys) {
      StringRef key = spec.key;
      bool sizeKey = (key.starts_with("model.") && key != "model.file" &&
                      key != "model.precision") ||
                     key == "train.batch" || key == "train.seq";
      if (sizeKey && config.has(key))
        return fail(config.where(key) +
                    " does not apply to 'model.file': the IR fixes the "
                    "model's sizes, batch and sequence");
    }
  } else {
    std::optional<models::ModelKind> kind =
        models::parseModelKind(config.string("model.family", ""));
    if (!kind)
      return fail(config.where("model.family") + ": unknown family '" +
                  config.string("model.family", "") +
                  "': expected gpt, llama or mlp");
    models::ModelConfig m;
    m.kind = *kind;
    m.layers = config.integer("model.layers", m.layers);
    m.hidden = config.integer("model.hidden", m.hidden);
    m.heads = config.integer("model.heads", m.heads);
    if (config.has("model.kv_heads"))
      m.kvHeads = config.integer("model.kv_heads", 1);
    m.vocab = config.integer("model.vocab", 256);
    if (config.has("model.ffn"))
      m.ffn = config.integer("model.ffn", 1);
    m.tied = config.boolean("model.tied", false);
    m.batch = config.integer("train.batch", 8);
    m.seq = config.integer("train.seq", 64);
    if (Error err = models::verifyModelConfig(m))
      return fail(config.file + ": " + toString(std::move(err)));
    family = m;
  }

  // Data, checked before the (slow) compile.
  rt::BatchSource::Options data;
  if (config.has("data.train"))
    data.dataPath = config.string("data.train", "");
  std::string format = config.string("data.format", "bytes");
  if (format == "bytes")
    data.tokenBytes = 1;
  else if (format == "uint16")
    data.tokenBytes = 2;
  else if (format == "uint32")
    data.tokenBytes = 4;
  else
    return fail(config.where("data.format") + ": expected bytes, uint16 or "
                                              "uint32, got '" +
                format + "'");
  // A dry run compiles and explains; it reads no data, so a config written
  // for another machine's data (gpt2-124m.toml) can be explained anywhere.
  for (const char *key : {"data.train", "data.validation"})
    if (config.has(key) && !dryRun) {
      std::string path = config.string(key, "");
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec))
        return fail(config.where(key) + ": cannot read '" + path +
                    "': no such file");
    }
  std::optional<rt::BatchSource::Options> validation;
  if (config.has("data.validation") && config.has("data.val_fraction"))
    return fail("give one of 'data.validation' and 'data.val_fraction'");
  if (config.has("data.val_fraction")) {
    double f = config.number("data.val_fraction", 0);
    if (!(f > 0 && f < 1))
      return fail(config.where("data.val_fraction") +
                  " must be in (0, 1), got " + numberText(f));
    validation = data;
    validation->splitBegin = 1 - f;
    data.splitEnd = 1 - f;
  } else if (config.has("data.validation")) {
    validation = data;
    validation->dataPath = config.string("data.validation", "");
  }
  if (!validation && (config.has("eval.every") || config.has("eval.batches")))
    return fail("'eval' needs validation data: 'data.validation' or "
                "'data.val_fraction'");

  rt::TrainLoopOptions loop;
  loop.steps = config.integer("train.steps", 1);
  loop.data = data;
  loop.validation = validation;
  loop.evalEvery = config.integer("eval.every", 0);
  loop.evalBatches = config.integer("eval.batches", 4);
  if (config.has("schedule.kind") || config.has("schedule.warmup_steps")) {
    rt::LrSchedule s;
    try {
      s.kind = rt::parseScheduleKind(config.string("schedule.kind",
                                                   "constant"));
    } catch (const rt::Error &e) {
      return fail(config.where("schedule.kind") + ": " + e.what());
    }
    s.lr = config.number("optimizer.lr", 1e-3);
    s.minLr = config.number("schedule.min_lr", 0.1 * s.lr);
    s.warmupSteps = config.integer("schedule.warmup_steps", 0);
    s.decaySteps = config.integer("schedule.decay_steps", loop.steps);
    try {
      rt::checkSchedule(s);
    } catch (const rt::Error &e) {
      return fail("[schedule] in " + config.file + ": " + e.what());
    }
    loop.schedule = s;
  } else {
    for (const char *key : {"schedule.min_lr", "schedule.decay_steps"})
      if (config.has(key))
        return fail(config.where(key) + " needs 'schedule.kind'");
  }
  loop.checkpointDir = config.string("checkpoint.dir", "");
  if (loop.checkpointDir.empty())
    for (const char *key :
         {"checkpoint.every", "checkpoint.keep", "checkpoint.resume"})
      if (config.has(key))
        return fail(config.where(key) + " needs 'checkpoint.dir'");
  loop.checkpointEvery = config.integer("checkpoint.every", 0);
  loop.keep = config.integer("checkpoint.keep", 3);
  loop.resume = config.boolean("checkpoint.resume", true);
  loop.metricsPath = config.string("log.metrics", "");
  loop.tensorboardDir = config.string("log.tensorboard", "");
  loop.logEvery = config.integer("log.every", 1);
  std::string progress = config.string("log.progress", "auto");
  if (progress != "auto" && progress != "line" && progress != "plain")
    return fail(config.where("log.progress") +
                ": expected auto, line or plain, got '" + progress + "'");
  loop.progressLine =
      progress == "line" || (progress == "auto" && isatty(STDOUT_FILENO));
  if (config.has("log.peak_flops") && !(config.number("log.peak_flops", 0) > 0))
    return fail(config.where("log.peak_flops") + " must be greater than 0");

  CompilerOptions options;
  if (compilerOptions(options))
    return 1;

  // Under mpirun every process is one rank of the job: never N copies.
  int worldSize = rt::mpiLauncherWorldSize();
  std::unique_ptr<rt::Communicator> mpi;
  bool printer = true;
  if (worldSize > 1 && !dryRun) {
    mpi = rt::createMpiCommunicator();
    if (!mpi)
      return fail("running under mpirun (" + Twine(worldSize) +
                  " processes), but the Partita runtime was built without "
                  "MPI: run without mpirun (ranks are threads)");
    printer = mpi->rank() == 0;
  }

  mlir::DialectRegistry registry;
  registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.disableMultithreading();
  context.printOpOnDiagnostic(false);
  context.loadAllAvailableDialects();
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler printerHandler(sourceMgr, &context);
  DiagnosticCap cap(context, sourceMgr, printerHandler);
  Progress progressLines(kCommand, !printer);
  mlir::OwningOpRef<mlir::ModuleOp> module = makeModel(context, sourceMgr);
  if (!module)
    return 1;
  progressLines.done(
      family ? "built the " + models::stringifyModelKind(family->kind).str() +
                   " model"
             : "read " + config.string("model.file", ""));
  progressLines.start();
  FailureOr<plan::Plan> compiled = compileToPlan(*module, options);
  if (failed(compiled))
    return 1;
  progressLines.done("compiled the train step (" + options.annotate.strategy +
                     (options.annotate.mesh.empty()
                          ? std::string()
                          : " on " + options.annotate.mesh) +
                     ")");
  std::string bytes = compiled->SerializeAsString();

  if (dryRun) {
    SmallString<128> path;
    int fd;
    if (sys::fs::createTemporaryFile("partita-train", "pb", fd, path))
      return fail("cannot create a temporary plan file");
    {
      raw_fd_ostream os(fd, /*shouldClose=*/true);
      os << bytes;
    }
    int rc = explainPlanFile(path);
    sys::fs::remove(path);
    return rc;
  }

  try {
    std::shared_ptr<const rt::PlanFile> plan =
        rt::PlanFile::parse(bytes, "the compiled plan");
    std::string program = plan->programNames().front();
    int64_t devices = plan->isPartitioned(program) ? plan->numDevices() : 1;
    rt::RunOptions ranks;
    ranks.ranks = int(devices);
    ranks.toolName = "partita train";
    if (mpi) {
      if (plan->isPartitioned(program) && mpi->size() != devices)
        return fail("the job has " + Twine(mpi->size()) +
                    " MPI processes, but the plan's mesh " +
                    options.annotate.mesh + " needs " + Twine(devices));
      ranks.mpi = mpi.get();
    }
    // An MLP's step processes `batch` examples (rows of x), not batch x seq
    // tokens: counting seq too inflated its MFU 64-fold.
    int64_t tokens = 0;
    if (family)
      tokens = family->kind == models::ModelKind::MLP
                   ? family->batch
                   : family->batch * family->seq;
    if (!family)
      for (const rt::ProgramValue &v : plan->inputs(program))
        if (v.name == "ids" && v.globalShape.size() == 2)
          tokens = v.globalShape[0] * v.globalShape[1];
    loop.flopsPerStep = flopsPerStep(*plan, tokens);
    loop.peakFlops = config.number("log.peak_flops", 0) * double(devices);
    if (printer)
      std::cout << "partita train: " << program << " on " << devices
                << " rank" << (devices == 1 ? "" : "s") << " ("
                << (mpi ? "mpi" : "local") << "), " << loop.steps
                << " steps, arena " << plan->arenaBytes(program)
                << " bytes per rank\n";
    rt::TrainLoopResult result =
        rt::trainLoop(plan, program, loop, ranks, std::cout);
    if (!printer)
      return 0;
    if (result.stopped) {
      std::cout << "partita train: stopped by a signal after step "
                << result.stepsDone << "/" << loop.steps << "; "
                << (result.lastCheckpoint.empty()
                        ? std::string("no checkpoint.dir, nothing saved")
                        : "saved '" + result.lastCheckpoint +
                              "'; run the same command to resume")
                << "\n";
      return 0;
    }
    std::cout << "partita train: done, " << result.stepsDone << " steps";
    if (result.stepsDone > result.firstStep)
      std::cout << ", final loss " << numberText(result.lastLoss, "%.4f");
    if (!std::isnan(result.lastValLoss))
      std::cout << ", val loss " << numberText(result.lastValLoss, "%.4f");
    if (!result.lastCheckpoint.empty())
      std::cout << ", checkpoint '" << result.lastCheckpoint << "'";
    std::cout << "\n";
  } catch (const rt::Error &e) {
    return fail(e.what());
  } catch (const std::exception &e) {
    return fail(Twine("unexpected failure: ") + e.what());
  }
  return 0;
}

int runWithArgs(int argc, char **argv) {
  runtime::ignoreFileSizeSignal();
  Config config;
  std::string configPath;
  bool dryRun = false;
  std::vector<std::pair<std::string, std::string>> flags;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h") {
      std::cout << helpText();
      return 0;
    }
    if (arg == "--dry-run") {
      dryRun = true;
      continue;
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string key = arg.substr(2), value;
      if (size_t eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key.resize(eq);
      } else if (findKey(key) && findKey(key)->type == KeyType::Bool &&
                 (i + 1 >= argc || (std::string(argv[i + 1]) != "true" &&
                                    std::string(argv[i + 1]) != "false"))) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return reportError(kCommand, "--" + key + " needs a value");
      }
      flags.emplace_back(key, value);
      continue;
    }
    if (!configPath.empty())
      return reportError(kCommand, "unexpected argument '" + arg +
                                       "' (one config file, then options)");
    configPath = arg;
  }
  if (configPath.empty())
    return reportError(kCommand, "missing the config file (partita train "
                                 "CONFIG.toml; see 'partita train --help')");
  if (readConfigFile(configPath, config))
    return 1;
  for (auto &[key, value] : flags)
    if (setFromFlag(config, key, value))
      return 1;
  return TrainRun(config).run(dryRun);
}

/// Unreachable: partita.cpp hands `train` its arguments before llvm::cl
/// parses them.
int runParsed() { return runWithArgs(0, nullptr); }
} // namespace

Command getTrainCommand() { return {trainCommand, runParsed, runWithArgs}; }

} // namespace partita::driver
