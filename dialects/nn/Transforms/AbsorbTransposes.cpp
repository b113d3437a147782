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
/// The verifiers have checked the spec (one term per operand, one letter
/// per dimension) and every transpose's permutation.
struct Spec {
  SmallVector<std::string, 2> operands;
  std::string result;

  explicit Spec(EinsumOp op) : result(op.getResultTerm().str()) {
    for (StringRef term : op.getOperandTerms())
      operands.push_back(term.str());
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

/// Einsum operands that are transposes read the transposes' inputs.
void absorbOperands(EinsumOp op) {
  Spec spec(op);
  bool changed = false;
  for (auto [i, operand] : llvm::enumerate(op.getInputs())) {
    auto transpose = operand.getDefiningOp<TransposeOp>();
    if (!transpose)
      continue;
    spec.operands[i] = inputTerm(spec.operands[i], transpose.getPerm());
    op->setOperand(i, transpose.getInput());
    changed = true;
  }
  if (changed)
    op.setSpec(spec.str());
}

/// A transpose of an einsum that nothing else reads becomes the einsum's
/// result order.
bool absorbResult(TransposeOp op) {
  auto einsum = op.getInput().getDefiningOp<EinsumOp>();
  if (!einsum || !einsum->hasOneUse())
    return false;
  Spec spec(einsum);
  spec.result = resultTerm(spec.result, op.getPerm());
  OpBuilder b(op);
  auto fused = cast<EinsumOp>(b.clone(*einsum));
  fused.setSpec(spec.str());
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
