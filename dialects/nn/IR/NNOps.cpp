//===- NNOps.cpp - nn operations ------------------------------------------===//
//
// Verifiers and folders of the nn operations.
//
// ODS has already checked what the declarations say (static shapes, float or
// integer elements, the AllTypesMatch groups) by the time a verifier here
// runs, so these check only the relations between shapes and attributes.
// Every message names the operand, dimension and sizes involved; each one
// has a case in test/Dialect/nn/invalid.mlir.
//
//===----------------------------------------------------------------------===//

#include "dialects/nn/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/SmallVectorExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <string>

using namespace mlir;
using namespace partita::nn;

// `nn.reduce sum %x ...`: the kind as a bare keyword. The enum attribute's own
// printer starts with a space, which the op format would double.
static ParseResult parseReduceKind(OpAsmParser &parser, ReduceKindAttr &kind) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (failed(parser.parseOptionalKeyword(&keyword)))
    return parser.emitError(
        loc, "expected a reduction kind: 'sum', 'max' or 'mean'");
  std::optional<ReduceKind> value = symbolizeReduceKind(keyword);
  if (!value)
    return parser.emitError(loc, "unknown reduction kind '")
           << keyword << "'; expected 'sum', 'max' or 'mean'";
  kind = ReduceKindAttr::get(parser.getContext(), *value);
  return success();
}

static void printReduceKind(OpAsmPrinter &printer, Operation *,
                            ReduceKindAttr kind) {
  printer << stringifyReduceKind(kind.getValue());
}

// `wrt = q|k|v`: the members as keywords joined by `|`, each at most once.
static ParseResult parseAttentionGradWrt(OpAsmParser &parser,
                                         AttentionGradWrtAttr &wrt) {
  AttentionGradWrt members{};
  do {
    SMLoc loc = parser.getCurrentLocation();
    StringRef keyword;
    if (failed(parser.parseOptionalKeyword(&keyword)))
      return parser.emitError(loc, "expected 'q', 'k' or 'v'");
    std::optional<AttentionGradWrt> member =
        symbolizeAttentionGradWrt(keyword);
    if (!member || !llvm::has_single_bit(static_cast<uint32_t>(*member)))
      return parser.emitError(loc, "unknown attention operand '")
             << keyword << "'; expected 'q', 'k' or 'v'";
    if (bitEnumContainsAny(members, *member))
      return parser.emitError(loc, "'") << keyword << "' appears twice in wrt";
    members = members | *member;
  } while (succeeded(parser.parseOptionalVerticalBar()));
  wrt = AttentionGradWrtAttr::get(parser.getContext(), members);
  return success();
}

static void printAttentionGradWrt(OpAsmPrinter &printer, Operation *,
                                  AttentionGradWrtAttr wrt) {
  printer << stringifyAttentionGradWrt(wrt.getValue());
}

#define GET_OP_CLASSES
#include "dialects/nn/IR/NNOps.cpp.inc"

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

// "[2, 8, 64]": shapes in messages read the same everywhere.
std::string formatShape(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << '[';
  llvm::interleaveComma(shape, os);
  os << ']';
  return text;
}

// Shortest readable form of an attribute value: 1e-05, 0.5, -1, nan.
std::string formatNumber(double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::format("%g", value);
  return text;
}

// Epsilon, theta and scale must be usable as they are: a zero, negative,
// infinite or NaN value makes the op's math meaningless.
LogicalResult verifyPositiveFinite(Operation *op, StringRef name,
                                   const llvm::APFloat &value) {
  double number = value.convertToDouble();
  if (number > 0 && std::isfinite(number))
    return success();
  return op->emitOpError() << name
                           << " must be a positive finite number, but is "
                           << formatNumber(number);
}

LogicalResult verifySameElementType(Operation *op, StringRef what, Type type,
                                    StringRef reference, Type referenceType) {
  Type element = cast<ShapedType>(type).getElementType();
  Type referenceElement = cast<ShapedType>(referenceType).getElementType();
  if (element == referenceElement)
    return success();
  return op->emitOpError("element type of ")
         << what << " (" << element << ") differs from that of " << reference
         << " (" << referenceElement << ")";
}

// Shared by layer_norm and rms_norm: statistics over the last dimension,
// a 1-D scale (and shift, of the same type as the scale by ODS) of its size.
LogicalResult verifyNorm(Operation *op, Value input, Value gamma,
                         const llvm::APFloat &epsilon,
                         StringRef gammaName = "gamma") {
  RankedTensorType inputType = tensorType(input);
  RankedTensorType gammaType = tensorType(gamma);
  if (inputType.getRank() == 0)
    return op->emitOpError("input must have rank >= 1 (it is normalized over "
                           "its last dimension), but has rank 0");
  if (gammaType.getRank() != 1)
    return op->emitOpError() << gammaName << " must be 1-D, but has rank "
                             << gammaType.getRank();
  int64_t last = inputType.getDimSize(inputType.getRank() - 1);
  if (gammaType.getDimSize(0) != last)
    return op->emitOpError()
           << gammaName << " has size " << gammaType.getDimSize(0)
           << ", but the input's last dimension (" << inputType.getRank() - 1
           << ") has size " << last;
  if (failed(verifySameElementType(op, gammaName, gammaType, "the input",
                                   inputType)))
    return failure();
  return verifyPositiveFinite(op, "epsilon", epsilon);
}

// Shared by reduce's dims and transpose's perm: every entry names a
// dimension of the input, and none twice. `twice` opens the message for a
// repeated entry, which each op words for what the list means.
LogicalResult verifyDimensionList(Operation *op, StringRef name,
                                  ArrayRef<int64_t> list, int64_t rank,
                                  StringRef twice) {
  SmallVector<bool> seen(rank, false);
  for (auto [index, dim] : llvm::enumerate(list)) {
    if (dim < 0 || dim >= rank)
      return op->emitOpError()
             << name << "[" << index << "] = " << dim
             << " is out of range for an input of rank " << rank;
    if (seen[dim])
      return op->emitOpError(twice) << dim << " twice";
    seen[dim] = true;
  }
  return success();
}

// Shared by reduce and transpose: the result shape is `expected`, the input
// shape changed by `how` (e.g. "without dims") `list`.
LogicalResult verifyResultShape(Operation *op, RankedTensorType inputType,
                                RankedTensorType resultType, StringRef how,
                                ArrayRef<int64_t> list,
                                ArrayRef<int64_t> expected) {
  if (resultType.getShape() == expected)
    return success();
  return op->emitOpError("result shape ")
         << formatShape(resultType.getShape()) << " must be the input shape "
         << formatShape(inputType.getShape()) << " " << how << " "
         << formatShape(list) << ", i.e. " << formatShape(expected);
}

/// Checks the log-sum-exp `lse` of attention's rows: [batch, heads, seq_q]
/// of the query's element type (`what` names it in the message).
LogicalResult verifyAttentionLse(Operation *op, StringRef what, Value lse,
                                 RankedTensorType queryType) {
  auto type = cast<RankedTensorType>(lse.getType());
  ArrayRef<int64_t> expected =
      AttentionOp::getLseType(queryType).getShape();
  if (type.getShape() != expected)
    return op->emitOpError()
           << what << " " << formatShape(type.getShape())
           << " must be [batch, heads, seq_q] of the query, i.e. "
           << formatShape(expected);
  if (queryType.getDimSize(3) == 0)
    return op->emitOpError()
           << what << " needs head_dim >= 1 (with none, attention's output "
           << "is empty and no kernel writes the lse)";
  return verifySameElementType(op, what, type, "the query", queryType);
}

} // namespace

//===----------------------------------------------------------------------===//
// Contraction
//===----------------------------------------------------------------------===//

LogicalResult EinsumOp::verify() {
  OperandRange inputs = getInputs();
  if (inputs.empty() || inputs.size() > 2)
    return emitOpError("takes 1 or 2 operands, but has ") << inputs.size();

  StringRef spec = getSpec();
  size_t arrow = spec.find("->");
  if (arrow == StringRef::npos)
    return emitOpError("spec '")
           << spec << "' has no '->' between the operands and the result "
           << "(expected e.g. 'bsh,hf->bsf')";
  StringRef operandPart = spec.take_front(arrow);
  StringRef resultPart = spec.drop_front(arrow + 2);
  for (auto [position, c] : llvm::enumerate(spec)) {
    bool isArrow = position == arrow || position == arrow + 1;
    bool allowed =
        llvm::isAlpha(c) || isArrow || (c == ',' && position < arrow);
    if (!allowed)
      return emitOpError("spec '")
             << spec << "' has '" << spec.substr(position, 1)
             << "' at position " << position
             << "; only letters, ',' between operands and one '->' are allowed";
  }

  SmallVector<StringRef> operandSpecs;
  operandPart.split(operandSpecs, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/true);
  if (operandSpecs.size() != inputs.size())
    return emitOpError("spec '")
           << spec << "' describes " << operandSpecs.size()
           << (operandSpecs.size() == 1 ? " operand" : " operands")
           << ", but the op has " << inputs.size();

  // Where each letter was first seen: its size and operand.
  struct Occurrence {
    int64_t size;
    unsigned operand;
  };
  llvm::SmallDenseMap<char, Occurrence> letters;
  Type elementType = tensorType(inputs[0]).getElementType();
  for (auto [index, input] : llvm::enumerate(inputs)) {
    RankedTensorType type = tensorType(input);
    StringRef operandSpec = operandSpecs[index];
    if (static_cast<int64_t>(operandSpec.size()) != type.getRank())
      return emitOpError("spec '") << spec << "' names " << operandSpec.size()
                                   << " dimensions for operand #" << index
                                   << " of rank " << type.getRank();
    if (type.getElementType() != elementType)
      return emitOpError("operand #")
             << index << " has element type " << type.getElementType()
             << ", but operand #0 has " << elementType;
    for (auto [dim, c] : llvm::enumerate(operandSpec)) {
      StringRef letter = operandSpec.substr(dim, 1);
      if (operandSpec.take_front(dim).contains(c))
        return emitOpError("spec '")
               << spec << "' repeats letter '" << letter << "' in operand #"
               << index << " (a letter names one dimension per operand)";
      int64_t size = type.getDimSize(dim);
      auto [it, inserted] = letters.try_emplace(
          c, Occurrence{size, static_cast<unsigned>(index)});
      if (!inserted && it->second.size != size)
        return emitOpError("operand #")
               << index << " dimension " << dim << " ('" << letter
               << "') has size " << size << ", but '" << letter << "' has size "
               << it->second.size << " in operand #" << it->second.operand;
    }
  }

  RankedTensorType resultType = tensorType(getResult());
  if (resultType.getElementType() != elementType)
    return emitOpError("result has element type ")
           << resultType.getElementType() << ", but the operands have "
           << elementType;
  if (static_cast<int64_t>(resultPart.size()) != resultType.getRank())
    return emitOpError("spec '")
           << spec << "' names " << resultPart.size()
           << " dimensions for the result of rank " << resultType.getRank();
  for (auto [dim, c] : llvm::enumerate(resultPart)) {
    StringRef letter = resultPart.substr(dim, 1);
    if (resultPart.take_front(dim).contains(c))
      return emitOpError("spec '")
             << spec << "' repeats letter '" << letter << "' in the result";
    auto it = letters.find(c);
    if (it == letters.end())
      return emitOpError("result letter '")
             << letter << "' does not appear in any input";
    if (resultType.getDimSize(dim) != it->second.size)
      return emitOpError("result dimension ")
             << dim << " ('" << letter << "') has size "
             << resultType.getDimSize(dim) << ", but '" << letter
             << "' has size " << it->second.size << " in operand #"
             << it->second.operand;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise: ODS's AllTypesMatch and element type constraints say it all.
//===----------------------------------------------------------------------===//


//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

LogicalResult BroadcastOp::verify() {
  RankedTensorType inputType = tensorType(getInput());
  RankedTensorType resultType = tensorType(getResult());
  if (failed(verifySameElementType(*this, "the result", resultType, "the input",
                                   inputType)))
    return failure();
  ArrayRef<int64_t> dims = getDims();
  if (static_cast<int64_t>(dims.size()) != inputType.getRank())
    return emitOpError("dims has ")
           << dims.size() << " entries, but the input has rank "
           << inputType.getRank() << " (one entry per input dimension)";
  for (auto [index, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= resultType.getRank())
      return emitOpError("dims[") << index << "] = " << dim
                                  << " is out of range for a result of rank "
                                  << resultType.getRank();
    if (index > 0 && dim <= dims[index - 1])
      return emitOpError("dims must be strictly increasing, but dims[")
             << index << "] = " << dim << " follows dims[" << index - 1
             << "] = " << dims[index - 1];
    int64_t inputSize = inputType.getDimSize(index);
    int64_t resultSize = resultType.getDimSize(dim);
    if (inputSize != resultSize && inputSize != 1)
      return emitOpError("input dimension ")
             << index << " has size " << inputSize << ", but result dimension "
             << dim << " (dims[" << index << "]) has size " << resultSize
             << "; it must be equal or 1";
  }
  return success();
}

LogicalResult ReduceOp::verify() {
  RankedTensorType inputType = tensorType(getInput());
  RankedTensorType resultType = tensorType(getResult());
  if (failed(verifySameElementType(*this, "the result", resultType, "the input",
                                   inputType)))
    return failure();
  ArrayRef<int64_t> dims = getDims();
  if (failed(verifyDimensionList(*this, "dims", dims, inputType.getRank(),
                                 "dims names dimension ")))
    return failure();
  SmallVector<int64_t> expected;
  for (auto [dim, size] : llvm::enumerate(inputType.getShape()))
    if (!llvm::is_contained(dims, static_cast<int64_t>(dim)))
      expected.push_back(size);
  return verifyResultShape(*this, inputType, resultType, "without dims", dims,
                           expected);
}

LogicalResult TransposeOp::verify() {
  RankedTensorType inputType = tensorType(getInput());
  RankedTensorType resultType = tensorType(getResult());
  if (failed(verifySameElementType(*this, "the result", resultType, "the input",
                                   inputType)))
    return failure();
  ArrayRef<int64_t> perm = getPerm();
  if (static_cast<int64_t>(perm.size()) != inputType.getRank())
    return emitOpError("perm has ")
           << perm.size() << " entries, but the input has rank "
           << inputType.getRank();
  if (failed(verifyDimensionList(
          *this, "perm", perm, inputType.getRank(),
          "perm is not a permutation: it names dimension ")))
    return failure();
  SmallVector<int64_t> expected = llvm::map_to_vector(
      perm, [&](int64_t dim) { return inputType.getDimSize(dim); });
  return verifyResultShape(*this, inputType, resultType, "permuted by perm",
                           perm, expected);
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType inputType = tensorType(getInput());
  RankedTensorType resultType = tensorType(getResult());
  if (failed(verifySameElementType(*this, "the result", resultType, "the input",
                                   inputType)))
    return failure();
  if (inputType.getNumElements() != resultType.getNumElements())
    return emitOpError("input shape ")
           << formatShape(inputType.getShape()) << " has "
           << inputType.getNumElements() << " elements, but result shape "
           << formatShape(resultType.getShape()) << " has "
           << resultType.getNumElements();
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization and activation over a dimension
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  int64_t rank = tensorType(getInput()).getRank();
  // Read the attribute signed: getDim() is unsigned and would turn -1 into a
  // huge index. Negative dims are rejected rather than wrapped so that every
  // consumer (sharding rules, kernels) sees the one canonical index.
  int64_t dim = getDimAttr().getValue().getSExtValue();
  if (rank == 0)
    return emitOpError("input must have rank >= 1, but has rank 0");
  if (dim < 0)
    return emitOpError("dim ")
           << dim << " is negative; name the dimension by its index in [0, "
           << rank << ") (the last one is " << rank - 1 << ")";
  if (dim >= rank)
    return emitOpError("dim ")
           << dim << " is out of range for an input of rank " << rank;
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyNorm(*this, getInput(), getGamma(), getEpsilon());
}

LogicalResult RMSNormOp::verify() {
  return verifyNorm(*this, getInput(), getGamma(), getEpsilon());
}

//===----------------------------------------------------------------------===//
// Transformer blocks
//===----------------------------------------------------------------------===//

LogicalResult RotaryOp::verify() {
  RankedTensorType type = tensorType(getInput());
  if (type.getRank() != 4)
    return emitOpError("input must be [batch, seq, heads, head_dim] (rank 4), "
                       "but has rank ")
           << type.getRank();
  if (type.getDimSize(3) % 2 != 0)
    return emitOpError("head_dim (dimension 3) must be even, but is ")
           << type.getDimSize(3);
  return verifyPositiveFinite(*this, "theta", getTheta());
}

RankedTensorType AttentionOp::getLseType(RankedTensorType queryType) {
  return RankedTensorType::get({queryType.getDimSize(0),
                                queryType.getDimSize(2),
                                queryType.getDimSize(1)},
                               queryType.getElementType());
}

LogicalResult AttentionOp::verify() {
  RankedTensorType queryType = tensorType(getQuery());
  RankedTensorType keyType = tensorType(getKey());
  if (queryType.getRank() != 4)
    return emitOpError("query must be [batch, seq_q, heads, head_dim] (rank "
                       "4), but has rank ")
           << queryType.getRank();
  // ODS makes value's type key's, so checking key covers both.
  if (keyType.getRank() != 4)
    return emitOpError("key and value must be [batch, seq_kv, kv_heads, "
                       "head_dim] (rank 4), but have rank ")
           << keyType.getRank();
  if (failed(verifySameElementType(*this, "the key", keyType, "the query",
                                   queryType)))
    return failure();
  if (keyType.getDimSize(0) != queryType.getDimSize(0))
    return emitOpError("key batch size (dimension 0) is ")
           << keyType.getDimSize(0) << ", but the query's is "
           << queryType.getDimSize(0);
  if (keyType.getDimSize(3) != queryType.getDimSize(3))
    return emitOpError("key head_dim (dimension 3) is ")
           << keyType.getDimSize(3) << ", but the query's is "
           << queryType.getDimSize(3);
  int64_t heads = queryType.getDimSize(2);
  int64_t kvHeads = keyType.getDimSize(2);
  if (kvHeads == 0)
    return emitOpError("kv_heads (key dimension 2) must be at least 1");
  if (heads % kvHeads != 0)
    return emitOpError("query heads (")
           << heads << ") must be a multiple of kv_heads (" << kvHeads << ")";
  if (getCausal() && queryType.getDimSize(1) != keyType.getDimSize(1))
    return emitOpError("causal attention needs seq_q == seq_kv, but seq_q is ")
           << queryType.getDimSize(1) << " and seq_kv is "
           << keyType.getDimSize(1);
  if (std::optional<llvm::APFloat> scale = getScale())
    if (failed(verifyPositiveFinite(*this, "scale", *scale)))
      return failure();
  if (Value lse = getLse())
    return verifyAttentionLse(*this, "the lse result", lse, queryType);
  return success();
}

LogicalResult EmbeddingOp::verify() {
  RankedTensorType tableType = tensorType(getTable());
  RankedTensorType idsType = tensorType(getIds());
  RankedTensorType resultType = tensorType(getResult());
  if (tableType.getRank() != 2)
    return emitOpError("table must be [vocab, hidden] (rank 2), but has rank ")
           << tableType.getRank();
  if (failed(verifySameElementType(*this, "the result", resultType, "the table",
                                   tableType)))
    return failure();
  SmallVector<int64_t> expected(idsType.getShape());
  expected.push_back(tableType.getDimSize(1));
  if (resultType.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result shape ")
           << formatShape(resultType.getShape())
           << " must be ids.shape + [hidden], i.e. " << formatShape(expected);
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  RankedTensorType logitsType = tensorType(getLogits());
  RankedTensorType labelsType = tensorType(getLabels());
  RankedTensorType resultType = tensorType(getResult());
  if (logitsType.getRank() == 0)
    return emitOpError(
        "logits must be [..., vocab] (rank >= 1), but has rank 0");
  ArrayRef<int64_t> leading = logitsType.getShape().drop_back();
  if (labelsType.getShape() != leading)
    return emitOpError("labels shape ")
           << formatShape(labelsType.getShape())
           << " must be the logits shape without its last dimension, i.e. "
           << formatShape(leading);
  if (resultType.getRank() != 0)
    return emitOpError("result must be a 0-d tensor (the mean loss), but has "
                       "type ")
           << resultType;
  return verifySameElementType(*this, "the result", resultType, "the logits",
                               logitsType);
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

// ODS checks that the value's type is the result type (AllTypesMatch).

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

// The elementwise gradients: ODS's AllTypesMatch and float constraints say
// it all.

// dy and the result have the input's type by ODS; the rest is the forward
// norm's contract.
LogicalResult LayerNormGradOp::verify() {
  return verifyNorm(*this, getInput(), getGamma(), getEpsilon());
}

// The result stands where gamma stands in the others.
LogicalResult LayerNormGammaGradOp::verify() {
  return verifyNorm(*this, getInput(), getResult(), getEpsilon(), "result");
}

LogicalResult RMSNormGradOp::verify() {
  return verifyNorm(*this, getInput(), getGamma(), getEpsilon());
}

LogicalResult RotaryGradOp::verify() {
  RankedTensorType type = tensorType(getDy());
  if (type.getRank() != 4)
    return emitOpError("dy must be [batch, seq, heads, head_dim] (rank 4), "
                       "but has rank ")
           << type.getRank();
  if (type.getDimSize(3) % 2 != 0)
    return emitOpError("head_dim (dimension 3) must be even, but is ")
           << type.getDimSize(3);
  return verifyPositiveFinite(*this, "theta", getTheta());
}

LogicalResult AttentionGradOp::verify() {
  // The forward op's contract on query, key, value, causal and scale. dy has
  // the query's type and value the key's by ODS.
  RankedTensorType queryType = tensorType(getQuery());
  RankedTensorType keyType = tensorType(getKey());
  if (queryType.getRank() != 4)
    return emitOpError("query must be [batch, seq_q, heads, head_dim] (rank "
                       "4), but has rank ")
           << queryType.getRank();
  if (keyType.getRank() != 4)
    return emitOpError("key and value must be [batch, seq_kv, kv_heads, "
                       "head_dim] (rank 4), but have rank ")
           << keyType.getRank();
  if (failed(verifySameElementType(*this, "the key", keyType, "the query",
                                   queryType)))
    return failure();
  if (keyType.getDimSize(0) != queryType.getDimSize(0))
    return emitOpError("key batch size (dimension 0) is ")
           << keyType.getDimSize(0) << ", but the query's is "
           << queryType.getDimSize(0);
  if (keyType.getDimSize(3) != queryType.getDimSize(3))
    return emitOpError("key head_dim (dimension 3) is ")
           << keyType.getDimSize(3) << ", but the query's is "
           << queryType.getDimSize(3);
  int64_t heads = queryType.getDimSize(2);
  int64_t kvHeads = keyType.getDimSize(2);
  if (kvHeads == 0)
    return emitOpError("kv_heads (key dimension 2) must be at least 1");
  if (heads % kvHeads != 0)
    return emitOpError("query heads (")
           << heads << ") must be a multiple of kv_heads (" << kvHeads << ")";
  if (getCausal() && queryType.getDimSize(1) != keyType.getDimSize(1))
    return emitOpError("causal attention needs seq_q == seq_kv, but seq_q is ")
           << queryType.getDimSize(1) << " and seq_kv is "
           << keyType.getDimSize(1);
  if (std::optional<llvm::APFloat> scale = getScale())
    if (failed(verifyPositiveFinite(*this, "scale", *scale)))
      return failure();

  if (bool(getOut()) != bool(getLse()))
    return emitOpError("saved needs both the forward's result and its lse");
  if (Value out = getOut()) {
    if (out.getType() != getDy().getType())
      return emitOpError("the saved forward result has type ")
             << out.getType() << ", but must have dy's type "
             << getDy().getType();
    if (failed(verifyAttentionLse(*this, "the saved lse", getLse(),
                                  queryType)))
      return failure();
  }

  SmallVector<AttentionGradWrt, 3> members = getWrtMembers();
  if (members.empty())
    return emitOpError("wrt must name at least one of q, k and v");
  if (getNumResults() != members.size())
    return emitOpError("has ")
           << getNumResults() << " results, but wrt = "
           << stringifyAttentionGradWrt(getWrt()) << " asks for "
           << members.size() << " (one per member, in the order q, k, v)";
  for (auto [member, result] : llvm::zip(members, getResults())) {
    Type expected = getGradientType(member);
    if (result.getType() != expected)
      return emitOpError("result #")
             << cast<OpResult>(result).getResultNumber() << " (the gradient "
             << "with respect to " << stringifyAttentionGradWrt(member)
             << ") has type " << result.getType() << ", but must have the "
             << (member == AttentionGradWrt::Query ? "query's" : "key's")
             << " type " << expected;
  }
  return success();
}

SmallVector<AttentionGradWrt, 3>
AttentionGradOp::membersOf(AttentionGradWrt wrt) {
  SmallVector<AttentionGradWrt, 3> members;
  for (AttentionGradWrt member : {AttentionGradWrt::Query,
                                  AttentionGradWrt::Key, AttentionGradWrt::Value})
    if (bitEnumContainsAll(wrt, member))
      members.push_back(member);
  return members;
}

Value AttentionGradOp::getGradient(AttentionGradWrt member) {
  for (auto [m, result] : llvm::zip(getWrtMembers(), getResults()))
    if (m == member)
      return result;
  return nullptr;
}

LogicalResult EmbeddingGradOp::verify() {
  RankedTensorType dyType = tensorType(getDy());
  RankedTensorType idsType = tensorType(getIds());
  RankedTensorType resultType = tensorType(getResult());
  if (resultType.getRank() != 2)
    return emitOpError("result must be the [vocab, hidden] table gradient "
                       "(rank 2), but has rank ")
           << resultType.getRank();
  if (dyType.getRank() == 0)
    return emitOpError("dy must be ids.shape + [hidden] (rank >= 1), but has "
                       "rank 0");
  if (failed(verifySameElementType(*this, "the result", resultType, "dy",
                                   dyType)))
    return failure();
  int64_t hidden = dyType.getDimSize(dyType.getRank() - 1);
  SmallVector<int64_t> expected(idsType.getShape());
  expected.push_back(hidden);
  if (dyType.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("dy shape ")
           << formatShape(dyType.getShape())
           << " must be ids.shape + [hidden], i.e. " << formatShape(expected);
  if (resultType.getDimSize(1) != hidden)
    return emitOpError("result hidden size (dimension 1) is ")
           << resultType.getDimSize(1) << ", but dy's last dimension has size "
           << hidden;
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  RankedTensorType logitsType = tensorType(getLogits());
  RankedTensorType labelsType = tensorType(getLabels());
  RankedTensorType dlossType = tensorType(getDloss());
  if (logitsType.getRank() == 0)
    return emitOpError(
        "logits must be [..., vocab] (rank >= 1), but has rank 0");
  ArrayRef<int64_t> leading = logitsType.getShape().drop_back();
  if (labelsType.getShape() != leading)
    return emitOpError("labels shape ")
           << formatShape(labelsType.getShape())
           << " must be the logits shape without its last dimension, i.e. "
           << formatShape(leading);
  if (dlossType.getRank() != 0)
    return emitOpError("dloss must be a 0-d tensor (the gradient of the mean "
                       "loss), but has type ")
           << dlossType;
  return verifySameElementType(*this, "dloss", dlossType, "the logits",
                               logitsType);
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

LogicalResult ConvertOp::verify() {
  RankedTensorType inputType = tensorType(getInput());
  RankedTensorType resultType = tensorType(getResult());
  if (inputType.getShape() != resultType.getShape())
    return emitOpError("result shape ")
           << formatShape(resultType.getShape())
           << " must be the input shape " << formatShape(inputType.getShape())
           << " (convert changes only the element type)";
  return success();
}

OpFoldResult ConvertOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

namespace {

// An optimizer hyperparameter must be finite and >= 0 (lr, momentum,
// weight_decay).
LogicalResult verifyNonNegativeFinite(Operation *op, StringRef name,
                                      const llvm::APFloat &value) {
  double number = value.convertToDouble();
  if (number >= 0 && std::isfinite(number))
    return success();
  return op->emitOpError() << name
                           << " must be a finite number >= 0, but is "
                           << formatNumber(number);
}

// Adam's decay rates: in [0, 1), so that 1 - beta^t is never 0.
LogicalResult verifyDecayRate(Operation *op, StringRef name,
                              const llvm::APFloat &value) {
  double number = value.convertToDouble();
  if (number >= 0 && number < 1)
    return success();
  return op->emitOpError() << name << " must be in [0, 1), but is "
                           << formatNumber(number);
}

} // namespace

// Parameter, gradient, buffer and both results have one type by ODS.
LogicalResult SGDOp::verify() {
  if (failed(verifyNonNegativeFinite(*this, "lr", getLr())) ||
      failed(verifyNonNegativeFinite(*this, "momentum", getMomentum())))
    return failure();
  return verifyNonNegativeFinite(*this, "weight_decay", getWeightDecay());
}

// Parameter, gradient, moments and the three results have one type by ODS.
LogicalResult AdamWOp::verify() {
  RankedTensorType paramType = tensorType(getParam());
  RankedTensorType stepType = tensorType(getStep());
  auto expectedStep = RankedTensorType::get({}, paramType.getElementType());
  if (stepType != expectedStep)
    return emitOpError("step must be a 0-d tensor of the parameter's element "
                       "type (")
           << expectedStep << "), but has type " << stepType;
  if (failed(verifyNonNegativeFinite(*this, "lr", getLr())) ||
      failed(verifyDecayRate(*this, "beta1", getBeta1())) ||
      failed(verifyDecayRate(*this, "beta2", getBeta2())) ||
      failed(verifyPositiveFinite(*this, "epsilon", getEpsilon())))
    return failure();
  return verifyNonNegativeFinite(*this, "weight_decay", getWeightDecay());
}
