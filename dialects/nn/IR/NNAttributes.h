//===- NNAttributes.h - the nn dialect's declared attributes ----*- C++ -*-===//
//
// Typed accessors of the discardable attributes the nn dialect declares, so
// that no pass spells an attribute name or guesses its type. The dialect's
// verifier (NNDialect.cpp) checks each one's type wherever it appears and
// rejects any other `nn.` attribute.
//
//   on function arguments   nn.param, nn.state, nn.input     string (a name)
//   on function results     nn.param, nn.state, nn.output,   string
//                           nn.grad
//   on ops                  nn.layer        integer >= 0 (model layer index)
//                           nn.grad_kind    "B" | "W" | "update" (GradKind)
//                           nn.recompute    unit
//                           nn.mean_count   integer >= 1
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECTS_NN_IR_NNATTRIBUTES_H
#define PARTITA_DIALECTS_NN_IR_NNATTRIBUTES_H

#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace partita::nn {

/// A declared attribute whose value is a name (a StringAttr), on function
/// arguments and results: `nn::paramAttr.getArg(func, i)`.
class NameAttrDecl {
public:
  constexpr explicit NameAttrDecl(llvm::StringLiteral name) : name(name) {}

  /// "nn.param", ...: for diagnostics and IR-writing code only.
  constexpr llvm::StringLiteral getName() const { return name; }

  mlir::StringAttr getArg(mlir::FunctionOpInterface func,
                          unsigned index) const {
    return func.getArgAttrOfType<mlir::StringAttr>(index, name);
  }
  mlir::StringAttr getResult(mlir::FunctionOpInterface func,
                             unsigned index) const {
    return func.getResultAttrOfType<mlir::StringAttr>(index, name);
  }
  /// Whether argument `index` carries the attribute, of any type (the
  /// verifier has rejected other types by the time a pass runs).
  bool onArg(mlir::FunctionOpInterface func, unsigned index) const {
    return static_cast<bool>(func.getArgAttr(index, name));
  }
  void setArg(mlir::FunctionOpInterface func, unsigned index,
              llvm::StringRef value) const {
    func.setArgAttr(index, name,
                    mlir::StringAttr::get(func->getContext(), value));
  }
  void setResult(mlir::FunctionOpInterface func, unsigned index,
                 llvm::StringRef value) const {
    func.setResultAttr(index, name,
                       mlir::StringAttr::get(func->getContext(), value));
  }
  void removeArg(mlir::FunctionOpInterface func, unsigned index) const {
    func.removeArgAttr(index, name);
  }
  /// The attribute as a (name, value) pair, for building attribute lists.
  mlir::NamedAttribute get(mlir::MLIRContext *context,
                           llvm::StringRef value) const {
    return mlir::NamedAttribute(mlir::StringAttr::get(context, name),
                                mlir::StringAttr::get(context, value));
  }

private:
  llvm::StringLiteral name;
};

/// A parameter's name (arguments; results of a train step: its new value).
inline constexpr NameAttrDecl paramAttr("nn.param");
/// Optimizer state ("<param>.m", "<param>.v", "<param>.momentum", "step").
inline constexpr NameAttrDecl stateAttr("nn.state");
/// A model input ("ids", "labels", ...).
inline constexpr NameAttrDecl inputAttr("nn.input");
/// A result the caller reads ("loss", "logits").
inline constexpr NameAttrDecl outputAttr("nn.output");
/// The gradient of the parameter named (results of @grads).
inline constexpr NameAttrDecl gradAttr("nn.grad");
/// On optimizer state (arguments, beside nn.state): the f32 master copy of
/// the parameter named, which a mixed-precision step updates and narrows
/// into the parameter; initialized with that parameter's initializer.
inline constexpr NameAttrDecl masterAttr("nn.master");

/// Op attribute names, for the verifier and diagnostics.
inline constexpr llvm::StringLiteral kLayerAttrName = "nn.layer";
inline constexpr llvm::StringLiteral kGradKindAttrName = "nn.grad_kind";
inline constexpr llvm::StringLiteral kRecomputeAttrName = "nn.recompute";
inline constexpr llvm::StringLiteral kMeanCountAttrName = "nn.mean_count";
/// On a widening nn.convert: a partial sum stays partial through it, so its
/// reduction runs in the wider result type (a mixed-precision step's
/// gradients under reduce-dtype=fp32).
inline constexpr llvm::StringLiteral kWideSumAttrName = "nn.wide_sum";
/// On an optimizer-state argument (beside nn.state): the constant it starts
/// from (a float), instead of zero (fp16-mixed's loss scale).
inline constexpr llvm::StringLiteral kInitValueAttrName = "nn.init_value";

/// The index of the model layer `op` belongs to (`partita model` writes it
/// on every op of a repeated block); std::nullopt outside any layer.
std::optional<int64_t> getLayerIndex(mlir::Operation *op);
void setLayerIndex(mlir::Operation *op, int64_t layer);

/// What a backward op computes (nn-autodiff writes it on every op it
/// emits); std::nullopt on forward ops.
std::optional<GradKind> getGradKind(mlir::Operation *op);
void setGradKind(mlir::Operation *op, GradKind kind);

/// Whether `op` is a forward op that nn-autodiff cloned into the backward.
bool isRecomputed(mlir::Operation *op);
void setRecomputed(mlir::Operation *op);

/// The global row count a (partitioned) nn.cross_entropy_grad divides by;
/// std::nullopt: its local label count.
std::optional<int64_t> getMeanCount(mlir::Operation *op);
void setMeanCount(mlir::Operation *op, int64_t count);

} // namespace partita::nn

#endif // PARTITA_DIALECTS_NN_IR_NNATTRIBUTES_H
