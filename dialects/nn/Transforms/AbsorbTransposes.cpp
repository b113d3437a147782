//===- AbsorbTransposes.cpp - einsums read and write any layout -----------===//
//
// nn-absorb-transposes: an nn.einsum operand that is an nn.transpose reads
// the transpose's input instead, and an nn.transpose of an einsum (its one
// use) becomes that einsum's result order (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

namespace partita::nn {
#define GEN_PASS_DEF_NNABSORBTRANSPOSES
#include "dialects/nn/Transforms/Passes.h.inc"
} // namespace partita::nn

using namespace mlir;
using namespace partita;
using namespace partita::nn;

namespace {

/// An einsum spec split into its terms: the operands' and the result's.
struct Spec {
  SmallVector<std::string, 2> operands;
  std::string result;

  static std::optional<Spec> parse(StringRef spec) {
    auto [lhs, result] = spec.split("->");
    if (result.size() == spec.size())
      return std::nullopt;
    Spec s;
    SmallVector<StringRef, 2> terms;
    lhs.split(terms, ',');
    for (StringRef term : terms)
      s.operands.push_back(term.str());
    s.result = result.str();
    return s;
  }
  std::string str() const {
    return llvm::join(operands, ",") + "->" + result;
  }
};

/// The term of a transpose's input whose result has `term`: result
/// dimension d is input dimension perm[d].
std::string inputTerm(StringRef term, ArrayRef<int64_t> perm) {
  std::string in(term.size(), ' ');
  for (auto [d, from] : llvm::enumerate(perm))
    in[from] = term[d];
  return in;
}

/// The term of a transpose's result whose input has `term`.
std::string resultTerm(StringRef term, ArrayRef<int64_t> perm) {
  std::string out;
  for (int64_t from : perm)
    out.push_back(term[from]);
  return out;
}

/// Whether `op`'s permutation matches `term` (the verifier's contract, which
/// a pass must not assume of IR that failed it).
bool permutes(TransposeOp op, StringRef term) {
  ArrayRef<int64_t> perm = op.getPerm();
  if (perm.size() != term.size())
    return false;
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t from : perm) {
    if (from < 0 || from >= int64_t(perm.size()) || seen[from])
      return false;
    seen[from] = true;
  }
  return true;
}

/// Einsum operands that are transposes read the transposes' inputs.
bool absorbOperands(EinsumOp op) {
  std::optional<Spec> spec = Spec::parse(op.getSpec());
  if (!spec || spec->operands.size() != op.getInputs().size())
    return false;
  bool changed = false;
  for (auto [i, operand] : llvm::enumerate(op.getInputs())) {
    auto transpose = operand.getDefiningOp<TransposeOp>();
    if (!transpose || !permutes(transpose, spec->operands[i]))
      continue;
    spec->operands[i] = inputTerm(spec->operands[i], transpose.getPerm());
    op->setOperand(i, transpose.getInput());
    changed = true;
  }
  if (changed)
    op.setSpec(spec->str());
  return changed;
}

/// A transpose of an einsum that nothing else reads becomes the einsum's
/// result order.
bool absorbResult(TransposeOp op) {
  auto einsum = op.getInput().getDefiningOp<EinsumOp>();
  if (!einsum || !einsum->hasOneUse())
    return false;
  std::optional<Spec> spec = Spec::parse(einsum.getSpec());
  if (!spec || !permutes(op, spec->result))
    return false;
  spec->result = resultTerm(spec->result, op.getPerm());
  OpBuilder b(op);
  auto fused = cast<EinsumOp>(b.clone(*einsum));
  fused.setSpec(spec->str());
  fused.getResult().setType(op.getType());
  op.replaceAllUsesWith(fused.getResult());
  op.erase();
  einsum.erase();
  return true;
}

struct NNAbsorbTransposesPass
    : public nn::impl::NNAbsorbTransposesBase<NNAbsorbTransposesPass> {
  void runOnOperation() override {
    SmallVector<EinsumOp> einsums;
    getOperation()->walk([&](EinsumOp op) { einsums.push_back(op); });
    for (EinsumOp op : einsums)
      absorbOperands(op);
    SmallVector<TransposeOp> transposes;
    getOperation()->walk([&](TransposeOp op) { transposes.push_back(op); });
    for (TransposeOp op : transposes)
      if (!absorbResult(op) && op->use_empty())
        op.erase();
  }
};

} // namespace
