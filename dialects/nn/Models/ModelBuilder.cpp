//===- ModelBuilder.cpp - write MLP, GPT and Llama models as nn IR --------===//
//
// The forward functions of the reference models, built op by op with the nn
// ops' generated builders. Parameter names and shapes follow the conventions
// in ModelBuilder.h exactly: sharding presets and tests match on them.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/Models/ModelBuilder.h"

#include "dialects/nn/IR/NNAttributes.h"
#include "dialects/nn/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace partita::models {

std::optional<ModelKind> parseModelKind(StringRef name) {
  return llvm::StringSwitch<std::optional<ModelKind>>(name)
      .Case("mlp", ModelKind::MLP)
      .Case("gpt", ModelKind::GPT)
      .Case("llama", ModelKind::Llama)
      .Default(std::nullopt);
}

StringRef stringifyModelKind(ModelKind kind) {
  switch (kind) {
  case ModelKind::MLP:
    return "mlp";
  case ModelKind::GPT:
    return "gpt";
  case ModelKind::Llama:
    return "llama";
  }
  llvm_unreachable("unknown model kind");
}

std::optional<DType> parseDType(StringRef name) {
  return llvm::StringSwitch<std::optional<DType>>(name)
      .Case("f32", DType::F32)
      .Case("bf16", DType::BF16)
      .Case("f16", DType::F16)
      .Default(std::nullopt);
}

//===----------------------------------------------------------------------===//
// Validation
//===----------------------------------------------------------------------===//

namespace {
llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Fails unless the product of `dims` fits in int64_t.
llvm::Error checkElementCount(ArrayRef<int64_t> dims, StringRef what) {
  int64_t count = 1;
  for (int64_t dim : dims)
    if (llvm::MulOverflow(count, dim, count))
      return configError(llvm::formatv(
          "model too large: the {0} tensor has more than 2^63 - 1 elements",
          what));
  return llvm::Error::success();
}
} // namespace

llvm::Error verifyModelConfig(const ModelConfig &config) {
  bool transformer = config.kind != ModelKind::MLP;
  struct Size {
    StringRef flag;
    int64_t value;
    bool applies;
  };
  // Listed in the order a user reads the command line's help.
  Size sizes[] = {
      {"--layers", config.layers, true},
      {"--hidden", config.hidden, true},
      {"--heads", config.heads, transformer},
      {"--kv-heads", config.getKvHeads(), config.kind == ModelKind::Llama},
      {"--seq", config.seq, transformer},
      {"--vocab", config.vocab, true},
      {"--batch", config.batch, true},
  };
  for (const Size &size : sizes) {
    if (!size.applies)
      continue;
    if (size.value < 1)
      return configError(llvm::formatv("{0} must be at least 1, got {1}",
                                       size.flag, size.value));
    if (size.value > kMaxDimSize)
      return configError(llvm::formatv("{0} must be at most {1}, got {2}",
                                       size.flag, kMaxDimSize, size.value));
  }
  if (config.layers > kMaxLayers)
    return configError(llvm::formatv(
        "--layers must be at most {0}, got {1} (every layer adds its ops to "
        "the IR: a model this deep would not fit in memory)",
        kMaxLayers, config.layers));
  // The default ffn (4 * hidden) can exceed the limit when hidden does not.
  StringRef ffnFlag = config.ffn ? "--ffn" : "--ffn (default 4 * --hidden)";
  if (config.getFfn() < 1)
    return configError(
        llvm::formatv("{0} must be at least 1, got {1}", ffnFlag,
                      config.getFfn()));
  if (config.getFfn() > kMaxDimSize)
    return configError(llvm::formatv("{0} must be at most {1}, got {2}",
                                     ffnFlag, kMaxDimSize, config.getFfn()));

  if (config.kvHeads && config.kind != ModelKind::Llama)
    return configError(
        llvm::formatv("--kv-heads applies only to llama models, not {0}",
                      stringifyModelKind(config.kind)));
  if (config.tied && config.kind != ModelKind::GPT)
    return configError(
        llvm::formatv("--tied applies only to gpt models, not {0}",
                      stringifyModelKind(config.kind)));

  if (transformer && config.hidden % config.heads != 0)
    return configError(llvm::formatv(
        "--hidden {0} is not divisible by --heads {1}: the head dimension "
        "must be a whole number",
        config.hidden, config.heads));
  if (config.kind == ModelKind::Llama) {
    if (config.heads % config.getKvHeads() != 0)
      return configError(llvm::formatv(
          "--heads {0} is not divisible by --kv-heads {1}: every key/value "
          "head must serve the same number of query heads",
          config.heads, config.getKvHeads()));
    if (config.getHeadDim() % 2 != 0)
      return configError(llvm::formatv(
          "the head dimension (--hidden {0} / --heads {1} = {2}) must be even "
          "for llama: rotary embedding rotates pairs of elements",
          config.hidden, config.heads, config.getHeadDim()));
  }

  int64_t b = config.batch, s = config.seq, h = config.hidden,
          f = config.getFfn(), v = config.vocab;
  if (!transformer)
    s = 1;
  std::pair<SmallVector<int64_t, 3>, StringRef> shapes[] = {
      {{b, s, v}, "logits"},        {{b, s, f}, "feed-forward activation"},
      {{b, s, h}, "hidden state"},  {{v, h}, "embedding or head weight"},
      {{h, f}, "feed-forward weight"}, {{h, h}, "attention weight"},
  };
  for (auto &[dims, what] : shapes)
    if (llvm::Error err = checkElementCount(dims, what))
      return err;
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

namespace {
/// Writes one model's forward function. Parameters become block arguments
/// in the order they are declared; inputs always follow them.
class ModelWriter {
public:
  ModelWriter(MLIRContext &context, const ModelConfig &config)
      : context(context), config(config), builder(&context) {
    switch (config.dtype) {
    case DType::F32:
      elementType = builder.getF32Type();
      break;
    case DType::BF16:
      elementType = builder.getBF16Type();
      break;
    case DType::F16:
      elementType = builder.getF16Type();
      break;
    }
  }

  OwningOpRef<ModuleOp> build();

private:
  Location loc(const Twine &name) {
    return NameLoc::get(StringAttr::get(&context, name));
  }
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elementType);
  }
  RankedTensorType indexTensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getI32Type());
  }

  Value param(const Twine &name, ArrayRef<int64_t> shape);
  Value input(StringRef name, RankedTensorType type);

  Value einsum(StringRef spec, Value lhs, Value rhs, ArrayRef<int64_t> shape,
               const Twine &where) {
    return nn::EinsumOp::create(builder, loc(where), tensor(shape), spec,
                                ValueRange{lhs, rhs});
  }
  Value add(Value lhs, Value rhs, const Twine &where) {
    return nn::AddOp::create(builder, loc(where), lhs.getType(), lhs, rhs);
  }
  /// x + broadcast(bias), the bias's dimensions being x's trailing ones.
  /// The broadcast is named after the bias, the sum `where`.
  Value addBias(Value x, Value bias, const Twine &biasName,
                const Twine &where) {
    auto xType = cast<RankedTensorType>(x.getType());
    auto biasRank = cast<RankedTensorType>(bias.getType()).getRank();
    SmallVector<int64_t> dims;
    for (int64_t i = xType.getRank() - biasRank; i < xType.getRank(); ++i)
      dims.push_back(i);
    Value wide = nn::BroadcastOp::create(
        builder, loc(biasName + ".broadcast"), xType, bias, dims);
    return add(x, wide, where);
  }

  // One function per model kind; each returns (loss, logits).
  std::pair<Value, Value> buildMLP();
  std::pair<Value, Value> buildGPT();
  std::pair<Value, Value> buildLlama();
  Value gptLayer(Value x, int64_t layer);
  Value llamaLayer(Value x, int64_t layer);
  /// Runs `build` (which writes layer `layer`'s ops at the end of the body)
  /// and declares every op it wrote part of that layer (nn.layer), which
  /// is how passes find layers (recomputation, later pipeline stages).
  Value inLayer(int64_t layer, llvm::function_ref<Value()> build) {
    Operation *last = body->empty() ? nullptr : &body->back();
    Value out = build();
    auto begin = last ? std::next(last->getIterator()) : body->begin();
    for (Operation &op : llvm::make_range(begin, body->end()))
      nn::setLayerIndex(&op, layer);
    return out;
  }
  Value lossOf(Value logits, Value labels) {
    return nn::CrossEntropyOp::create(
        builder, loc("loss"), RankedTensorType::get({}, elementType),
        logits, labels);
  }

  MLIRContext &context;
  const ModelConfig &config;
  OpBuilder builder;
  Type elementType;
  Block *body = nullptr;
  SmallVector<std::string> paramNames;
  SmallVector<std::string> inputNames;
};

Value ModelWriter::param(const Twine &name, ArrayRef<int64_t> shape) {
  std::string text = name.str();
  Value arg = body->insertArgument(paramNames.size(), tensor(shape), loc(text));
  paramNames.push_back(std::move(text));
  return arg;
}

Value ModelWriter::input(StringRef name, RankedTensorType type) {
  inputNames.push_back(name.str());
  return body->addArgument(type, loc(name));
}

OwningOpRef<ModuleOp> ModelWriter::build() {
  OwningOpRef<ModuleOp> module =
      ModuleOp::create(loc(stringifyModelKind(config.kind)));
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, loc("forward"), "forward",
                                   builder.getFunctionType({}, {}));
  body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  auto [loss, logits] = config.kind == ModelKind::MLP   ? buildMLP()
                        : config.kind == ModelKind::GPT ? buildGPT()
                                                        : buildLlama();
  func::ReturnOp::create(builder, loc("outputs"), ValueRange{loss, logits});

  func.setFunctionType(builder.getFunctionType(
      body->getArgumentTypes(), TypeRange{loss.getType(), logits.getType()}));
  SmallVector<DictionaryAttr> argAttrs;
  for (const std::string &name : paramNames)
    argAttrs.push_back(
        builder.getDictionaryAttr(nn::paramAttr.get(&context, name)));
  for (const std::string &name : inputNames)
    argAttrs.push_back(
        builder.getDictionaryAttr(nn::inputAttr.get(&context, name)));
  func.setAllArgAttrs(argAttrs);
  nn::outputAttr.setResult(func, 0, "loss");
  nn::outputAttr.setResult(func, 1, "logits");
  return module;
}

/// Residual blocks x + w2(relu(w1 x + b1)) + b2, then a linear head.
std::pair<Value, Value> ModelWriter::buildMLP() {
  int64_t b = config.batch, h = config.hidden, f = config.getFfn(),
          v = config.vocab;
  Value x = input("x", tensor({b, h}));
  Value labels = input("labels", indexTensor({b}));
  for (int64_t i = 0; i < config.layers; ++i) {
    x = inLayer(i, [&] {
      std::string p = llvm::formatv("layers.{0}.", i).str();
      Value w1 = param(p + "w1", {h, f});
      Value b1 = param(p + "b1", {f});
      Value w2 = param(p + "w2", {f, h});
      Value b2 = param(p + "b2", {h});
      Value t = einsum("bh,hf->bf", x, w1, {b, f}, p + "fc1.proj");
      t = addBias(t, b1, p + "b1", p + "fc1");
      t = nn::ReluOp::create(builder, loc(p + "relu"), t.getType(), t);
      Value y = einsum("bf,fh->bh", t, w2, {b, h}, p + "fc2.proj");
      y = addBias(y, b2, p + "b2", p + "fc2");
      return add(x, y, p + "residual");
    });
  }
  Value headW = param("head.w", {h, v});
  Value headB = param("head.b", {v});
  Value logits = einsum("bh,hv->bv", x, headW, {b, v}, "head.proj");
  logits = addBias(logits, headB, "head.b", "logits");
  return {lossOf(logits, labels), logits};
}

std::pair<Value, Value> ModelWriter::buildGPT() {
  int64_t b = config.batch, s = config.seq, h = config.hidden,
          v = config.vocab;
  Value ids = input("ids", indexTensor({b, s}));
  Value labels = input("labels", indexTensor({b, s}));
  Value wte = param("wte", {v, h});
  Value wpe = param("wpe", {s, h});
  Value x = nn::EmbeddingOp::create(builder, loc("embed.tokens"),
                                    tensor({b, s, h}), wte, ids);
  Value positions = nn::BroadcastOp::create(
      builder, loc("embed.positions"), tensor({b, s, h}), wpe,
      ArrayRef<int64_t>{1, 2});
  x = add(x, positions, "embed");
  for (int64_t i = 0; i < config.layers; ++i)
    x = inLayer(i, [&] { return gptLayer(x, i); });
  Value gamma = param("ln_f.gamma", {h});
  Value beta = param("ln_f.beta", {h});
  x = nn::LayerNormOp::create(builder, loc("ln_f"), x.getType(), x, gamma,
                              beta, builder.getF64FloatAttr(1e-5));
  Value head = config.tied ? wte : param("lm_head", {v, h});
  Value logits = einsum("bsh,vh->bsv", x, head, {b, s, v}, "logits");
  return {lossOf(logits, labels), logits};
}

/// Pre-LN block: x + attn(ln1(x)), then x + mlp(ln2(x)).
Value ModelWriter::gptLayer(Value x, int64_t layer) {
  int64_t b = config.batch, s = config.seq, h = config.hidden,
          n = config.heads, d = config.getHeadDim(), f = config.getFfn();
  std::string p = llvm::formatv("layers.{0}.", layer).str();
  // Declared in the conventional order, which is the arguments' order.
  Value ln1Gamma = param(p + "ln1.gamma", {h});
  Value ln1Beta = param(p + "ln1.beta", {h});
  Value wq = param(p + "attn.wq", {h, n, d});
  Value wk = param(p + "attn.wk", {h, n, d});
  Value wv = param(p + "attn.wv", {h, n, d});
  Value bq = param(p + "attn.bq", {n, d});
  Value bk = param(p + "attn.bk", {n, d});
  Value bv = param(p + "attn.bv", {n, d});
  Value wo = param(p + "attn.wo", {n, d, h});
  Value bo = param(p + "attn.bo", {h});
  Value ln2Gamma = param(p + "ln2.gamma", {h});
  Value ln2Beta = param(p + "ln2.beta", {h});
  Value w1 = param(p + "mlp.w1", {h, f});
  Value b1 = param(p + "mlp.b1", {f});
  Value w2 = param(p + "mlp.w2", {f, h});
  Value b2 = param(p + "mlp.b2", {h});

  FloatAttr eps = builder.getF64FloatAttr(1e-5);
  Value hn = nn::LayerNormOp::create(builder, loc(p + "ln1"), x.getType(), x,
                                     ln1Gamma, ln1Beta, eps);
  auto project = [&](Value w, Value bias, StringRef name) {
    Value y = einsum("bsh,hnd->bsnd", hn, w, {b, s, n, d},
                     p + "attn." + name + ".proj");
    return addBias(y, bias, p + "attn.b" + name, p + "attn." + name);
  };
  Value q = project(wq, bq, "q");
  Value k = project(wk, bk, "k");
  Value v = project(wv, bv, "v");
  Value o = nn::AttentionOp::create(builder, loc(p + "attn"), q.getType(), q,
                                    k, v, /*causal=*/true, /*scale=*/nullptr)
                .getResult();
  Value a = einsum("bsnd,ndh->bsh", o, wo, {b, s, h}, p + "attn.o.proj");
  a = addBias(a, bo, p + "attn.bo", p + "attn.o");
  x = add(x, a, p + "attn.residual");

  hn = nn::LayerNormOp::create(builder, loc(p + "ln2"), x.getType(), x,
                               ln2Gamma, ln2Beta, eps);
  Value t = einsum("bsh,hf->bsf", hn, w1, {b, s, f}, p + "mlp.fc1.proj");
  t = addBias(t, b1, p + "mlp.b1", p + "mlp.fc1");
  t = nn::GeluOp::create(builder, loc(p + "mlp.gelu"), t.getType(), t,
                         /*tanh=*/true);
  Value y = einsum("bsf,fh->bsh", t, w2, {b, s, h}, p + "mlp.fc2.proj");
  y = addBias(y, b2, p + "mlp.b2", p + "mlp.fc2");
  return add(x, y, p + "mlp.residual");
}

std::pair<Value, Value> ModelWriter::buildLlama() {
  int64_t b = config.batch, s = config.seq, h = config.hidden,
          v = config.vocab;
  Value ids = input("ids", indexTensor({b, s}));
  Value labels = input("labels", indexTensor({b, s}));
  Value wte = param("wte", {v, h});
  Value x = nn::EmbeddingOp::create(builder, loc("embed.tokens"),
                                    tensor({b, s, h}), wte, ids);
  for (int64_t i = 0; i < config.layers; ++i)
    x = inLayer(i, [&] { return llamaLayer(x, i); });
  Value gamma = param("norm_f.gamma", {h});
  x = nn::RMSNormOp::create(builder, loc("norm_f"), x.getType(), x, gamma,
                            builder.getF64FloatAttr(1e-5));
  Value head = param("lm_head", {v, h});
  Value logits = einsum("bsh,vh->bsv", x, head, {b, s, v}, "logits");
  return {lossOf(logits, labels), logits};
}

/// x + attn(rms_norm(x)) with rotary q/k and grouped-query attention, then
/// x + w2(silu(w1 h) * (w3 h)).
Value ModelWriter::llamaLayer(Value x, int64_t layer) {
  int64_t b = config.batch, s = config.seq, h = config.hidden,
          n = config.heads, kv = config.getKvHeads(), d = config.getHeadDim(),
          f = config.getFfn();
  std::string p = llvm::formatv("layers.{0}.", layer).str();
  Value attnNorm = param(p + "attn_norm.gamma", {h});
  Value wq = param(p + "attn.wq", {h, n, d});
  Value wk = param(p + "attn.wk", {h, kv, d});
  Value wv = param(p + "attn.wv", {h, kv, d});
  Value wo = param(p + "attn.wo", {n, d, h});
  Value mlpNorm = param(p + "mlp_norm.gamma", {h});
  Value w1 = param(p + "mlp.w1", {h, f});
  Value w3 = param(p + "mlp.w3", {h, f});
  Value w2 = param(p + "mlp.w2", {f, h});

  FloatAttr eps = builder.getF64FloatAttr(1e-5);
  FloatAttr theta = builder.getF64FloatAttr(10000.0);
  Value hn = nn::RMSNormOp::create(builder, loc(p + "attn_norm"), x.getType(),
                                   x, attnNorm, eps);
  Value q = einsum("bsh,hnd->bsnd", hn, wq, {b, s, n, d}, p + "attn.q");
  Value k = einsum("bsh,hnd->bsnd", hn, wk, {b, s, kv, d}, p + "attn.k");
  Value v = einsum("bsh,hnd->bsnd", hn, wv, {b, s, kv, d}, p + "attn.v");
  q = nn::RotaryOp::create(builder, loc(p + "attn.q.rotary"), q.getType(), q,
                           theta);
  k = nn::RotaryOp::create(builder, loc(p + "attn.k.rotary"), k.getType(), k,
                           theta);
  Value o = nn::AttentionOp::create(builder, loc(p + "attn"), q.getType(), q,
                                    k, v, /*causal=*/true, /*scale=*/nullptr)
                .getResult();
  Value a = einsum("bsnd,ndh->bsh", o, wo, {b, s, h}, p + "attn.o");
  x = add(x, a, p + "attn.residual");

  hn = nn::RMSNormOp::create(builder, loc(p + "mlp_norm"), x.getType(), x,
                             mlpNorm, eps);
  Value gate = einsum("bsh,hf->bsf", hn, w1, {b, s, f}, p + "mlp.gate");
  gate = nn::SiluOp::create(builder, loc(p + "mlp.silu"), gate.getType(), gate);
  Value up = einsum("bsh,hf->bsf", hn, w3, {b, s, f}, p + "mlp.up");
  Value t = nn::MulOp::create(builder, loc(p + "mlp.gated"), gate.getType(),
                              gate, up);
  Value y = einsum("bsf,fh->bsh", t, w2, {b, s, h}, p + "mlp.down");
  return add(x, y, p + "mlp.residual");
}
} // namespace

FailureOr<OwningOpRef<ModuleOp>> buildModel(MLIRContext &context,
                                            const ModelConfig &config) {
  context.loadDialect<nn::NNDialect, func::FuncDialect>();
  // A bad config would build ill-formed shapes (or divide by zero).
  if (llvm::Error err = verifyModelConfig(config)) {
    emitError(UnknownLoc::get(&context)) << llvm::toString(std::move(err));
    return failure();
  }
  OwningOpRef<ModuleOp> module = ModelWriter(context, config).build();
  if (failed(verify(*module)))
    return failure();
  return module;
}

} // namespace partita::models
