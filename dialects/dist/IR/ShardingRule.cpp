//===- ShardingRule.cpp - factor-based sharding rules ---------------------===//
//
// Building, checking and printing ShardingRule values.
//
//===----------------------------------------------------------------------===//

#include "dialects/dist/IR/ShardingRule.h"

#include "dialects/dist/IR/DistDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace partita::dist;

StringRef partita::dist::stringifyFactorKind(FactorKind kind) {
  switch (kind) {
  case FactorKind::Parallel:
    return "parallel";
  case FactorKind::Reduction:
    return "reduction";
  case FactorKind::Whole:
    return "whole";
  case FactorKind::Collective:
    return "collective";
  }
  return "unknown";
}

int64_t ShardingRule::addFactor(int64_t size, FactorKind kind, StringRef name,
                                FactorRole role) {
  Factor factor;
  factor.size = size;
  factor.kind = kind;
  factor.role = role;
  factor.name = name.empty() ? "f" + std::to_string(factors.size()) : name.str();
  factors.push_back(std::move(factor));
  return factors.size() - 1;
}

FailureOr<ShardingRule>
ShardingRule::fromSpec(StringRef spec, ArrayRef<ArrayRef<int64_t>> operandShapes,
                       ArrayRef<ArrayRef<int64_t>> resultShapes) {
  auto [lhs, rhs] = spec.split("->");
  if (!spec.contains("->"))
    return failure();
  SmallVector<StringRef> ins, outs;
  lhs.split(ins, ',');
  rhs.split(outs, ',');
  if (ins.size() != operandShapes.size() || outs.size() != resultShapes.size())
    return failure();

  ShardingRule rule;
  int64_t factorOf[256];
  std::fill(std::begin(factorOf), std::end(factorOf), -1);
  std::string inResult;
  for (StringRef out : outs)
    inResult += out.str();

  auto addTensor = [&](StringRef letters, ArrayRef<int64_t> shape,
                       bool isResult) -> LogicalResult {
    letters = letters.trim();
    if (letters.size() != shape.size())
      return failure();
    TensorFactors dims;
    for (auto [d, entry] : llvm::enumerate(llvm::zip(letters, shape))) {
      auto [c, size] = entry;
      unsigned char key = c;
      if (!llvm::isAlpha(c))
        return failure();
      // A letter twice in one term (a diagonal) is not a factorization: one
      // factor cannot split two dimensions of one tensor.
      if (letters.take_front(d).contains(c))
        return failure();
      if (factorOf[key] < 0) {
        FactorKind kind = StringRef(inResult).contains(c) ? FactorKind::Parallel
                                                          : FactorKind::Reduction;
        factorOf[key] = rule.addFactor(size, kind, StringRef(&c, 1));
      } else if (rule.factors[factorOf[key]].size != size) {
        return failure();
      }
      dims.push_back({factorOf[key]});
    }
    if (isResult)
      rule.addResult(std::move(dims));
    else
      rule.addOperand(std::move(dims));
    return success();
  };
  for (auto [letters, shape] : llvm::zip(ins, operandShapes))
    if (failed(addTensor(letters, shape, /*isResult=*/false)))
      return failure();
  for (auto [letters, shape] : llvm::zip(outs, resultShapes))
    if (failed(addTensor(letters, shape, /*isResult=*/true)))
      return failure();
  return rule;
}

std::optional<int64_t> ShardingRule::findFactor(FactorRole role) const {
  if (role == FactorRole::None)
    return std::nullopt;
  for (auto [i, factor] : llvm::enumerate(factors))
    if (factor.role == role)
      return i;
  return std::nullopt;
}

void ShardingRule::setKind(StringRef name, FactorKind kind,
                           ReductionKind partialKind) {
  for (Factor &factor : factors) {
    if (factor.name == name) {
      factor.kind = kind;
      factor.partialKind = partialKind;
      return;
    }
  }
  llvm_unreachable("setKind: no factor with this name");
}

LogicalResult ShardingRule::verify(Operation *op) const {
  for (const Factor &factor : factors)
    if (factor.size < 0)
      return op->emitError() << "sharding rule factor '" << factor.name
                             << "' has negative size " << factor.size;
  auto check = [&](ArrayRef<TensorFactors> all, TypeRange types,
                   StringRef what) -> LogicalResult {
    if (all.size() != types.size())
      return op->emitError() << "sharding rule has " << all.size() << " "
                             << what << "s, op has " << types.size();
    for (auto [i, entry] : llvm::enumerate(llvm::zip(all, types))) {
      auto [dims, type] = entry;
      auto shaped = dyn_cast<ShapedType>(type);
      if (!shaped || !shaped.hasRank()) {
        if (!dims.empty())
          return op->emitError() << "sharding rule gives dimensions to unranked "
                                 << what << " #" << i;
        continue;
      }
      if ((int64_t)dims.size() != shaped.getRank())
        return op->emitError() << "sharding rule gives " << dims.size()
                               << " dimensions to " << what << " #" << i
                               << " of rank " << shaped.getRank();
      llvm::SmallDenseSet<int64_t> used;
      for (auto [d, dimFactors] : llvm::enumerate(dims)) {
        int64_t product = 1;
        for (int64_t f : dimFactors) {
          if (f < 0 || f >= (int64_t)factors.size())
            return op->emitError() << "sharding rule names factor " << f
                                   << " of " << factors.size();
          // Splitting one factor cannot split two dimensions of one tensor.
          if (!used.insert(f).second)
            return op->emitError()
                   << "sharding rule uses factor '" << factors[f].name
                   << "' twice in " << what << " #" << i;
          if (what == "result" && factors[f].kind == FactorKind::Reduction)
            return op->emitError()
                   << "sharding rule puts reduction factor '"
                   << factors[f].name << "' in result #" << i
                   << " (reduction factors are carried by operands only)";
          product *= factors[f].size;
        }
        if (product != shaped.getDimSize(d))
          return op->emitError()
                 << "sharding rule factors of " << what << " #" << i
                 << " dimension " << d << " multiply to " << product
                 << ", not " << shaped.getDimSize(d);
      }
    }
    return success();
  };
  if (failed(check(operands, op->getOperandTypes(), "operand")) ||
      failed(check(results, op->getResultTypes(), "result")))
    return failure();
  // Keeping a partial sum through the op is exact only when each result
  // element is a sum of the same element of every operand.
  if (additive &&
      (results.size() != 1 ||
       llvm::any_of(operands,
                    [&](const TensorFactors &dims) {
                      return dims != results.front();
                    }) ||
       llvm::any_of(factors, [](const Factor &factor) {
         return factor.kind != FactorKind::Parallel;
       })))
    return op->emitError() << "sharding rule is additive but does not give "
                              "every operand the result's parallel factors";
  return success();
}

std::string ShardingRule::toString() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    os << "(";
    llvm::interleave(tensors, os, [&](const TensorFactors &dims) {
      os << "[";
      llvm::interleave(
          dims, os,
          [&](const SmallVector<int64_t, 2> &fs) {
            if (fs.empty()) {
              os << "1";
              return;
            }
            llvm::interleave(
                fs, os, [&](int64_t f) { os << factors[f].name; }, "*");
          },
          ",");
      os << "]";
    }, ",");
    os << ")";
  };
  printTensors(operands);
  os << "->";
  printTensors(results);
  os << " {";
  llvm::interleave(
      factors, os,
      [&](const Factor &factor) { os << factor.name << "=" << factor.size; },
      ",");
  os << "}";
  for (FactorKind kind :
       {FactorKind::Reduction, FactorKind::Whole, FactorKind::Collective}) {
    SmallVector<std::string> names;
    for (const Factor &factor : factors) {
      if (factor.kind != kind)
        continue;
      // Reductions that combine by max print as "name:max".
      names.push_back(factor.name +
                      (kind == FactorKind::Reduction &&
                               factor.partialKind == ReductionKind::Max
                           ? ":max"
                           : ""));
    }
    if (!names.empty())
      os << " " << stringifyFactorKind(kind) << "={" << llvm::join(names, ",")
         << "}";
  }
  SmallVector<std::string> roles;
  for (const Factor &factor : factors)
    if (factor.role != FactorRole::None)
      roles.push_back(factor.name + ":" +
                      stringifyFactorRole(factor.role).str());
  if (!roles.empty())
    os << " roles={" << llvm::join(roles, ",") << "}";
  if (additive)
    os << " additive";
  return out;
}
