//===- Einsum.cpp - cpu kernel: einsum as batched GEMM through BLAS -------===//
//
// The spec's letters fall into classes: batch (in both operands and the
// result), free-left / free-right (in one operand and the result),
// contracted (in both operands, not the result) and summed (in one operand
// only). Size-1 letters are dropped first: they do not change any layout.
// Summed letters are reduced away per operand; then each operand is viewed
// as [batch, free, contracted] or [batch, contracted, free] (a BLAS
// transpose flag), and permuted into that form only when it is neither;
// the result is written by the GEMM directly when it is [batch, freeL,
// freeR] (or [batch, freeR, freeL]: the operands swap roles), else through
// a temporary and a permutation. One cblas_?gemm call per batch element
// (OpenBLAS 0.3.21 has no gemm_batch). Single-operand einsum is a sum over
// the missing letters followed by a permutation.
//
// A two-operand einsum may take a third input, an addend broadcast to the
// result by `dims` (as the broadcast kernel's): the plan's fusion of a
// linear layer's bias add, or of a gradient added to another. The addend
// is copied into the output first (unless the output is the addend
// itself, Buffer.reuses), and the GEMM accumulates onto it (beta = 1);
// a result written through a temporary is added to it.
//
// bf16 operands with a bf16 result (runEinsumBF16) take the same route with
// 2-byte elements, permuted but never widened, and one batched oneDNN matmul
// (OneDnnGemm.h) in place of the GEMM loop; a spec with summed letters, or a
// shape oneDNN cannot run on AMX, is left to the widened f32 kernel.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "OneDnnGemm.h"
#include "ThreadPool.h"
#include "runtime/lib/core/HalfFloat.h"

#include <array>
#include <chrono>
#include <cstring>
#include <type_traits>

namespace partita::runtime::cpu {

namespace {

constexpr KernelKind kEinsum = KernelKind::Einsum;

bool isLetter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

EinsumSpec parseSpec(const std::string &spec, size_t numInputs, bool addend) {
  auto bad = [&](const std::string &why) {
    fail(kEinsum, "spec \"" + spec + "\": " + why);
  };
  size_t arrow = spec.find("->");
  if (arrow == std::string::npos ||
      spec.find("->", arrow + 1) != std::string::npos)
    bad("needs exactly one '->'");
  EinsumSpec s;
  std::string lhs = spec.substr(0, arrow);
  s.result = spec.substr(arrow + 2);
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    s.terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (s.terms.size() != numInputs)
    bad("has " + std::to_string(s.terms.size()) + " operand term(s) but " +
        std::to_string(numInputs) + " input(s) were given" +
        (addend ? " besides the addend (input 2)" : ""));
  auto checkTerm = [&](const std::string &term, const std::string &what) {
    bool seen[128] = {};
    for (char c : term) {
      if (!isLetter(c))
        bad(what + " has '" + std::string(1, c) +
            "', not an ASCII letter (no spaces or ellipsis)");
      if (seen[static_cast<int>(c)])
        bad(what + " repeats '" + std::string(1, c) +
            "' (diagonals are not supported)");
      seen[static_cast<int>(c)] = true;
    }
  };
  for (size_t i = 0; i < s.terms.size(); ++i)
    checkTerm(s.terms[i], "operand term " + std::to_string(i));
  checkTerm(s.result, "the result term");
  for (char c : s.result) {
    bool found = false;
    for (const std::string &term : s.terms)
      found |= term.find(c) != std::string::npos;
    if (!found)
      bad("result letter '" + std::string(1, c) + "' is in no operand");
  }
  return s;
}

LetterSizes bindSizes(const KernelCall &call, const EinsumSpec &s) {
  LetterSizes size;
  size.fill(-1);
  std::vector<std::string> owner(128);
  auto bind = [&](const std::string &term, const TensorView &view,
                  const std::string &what) {
    if (static_cast<int64_t>(term.size()) != view.rank())
      fail(kEinsum, what + " (" + typeToString(view) + ") has rank " +
                        std::to_string(view.rank()) + " but its term \"" +
                        term + "\" has " + std::to_string(term.size()) +
                        " letters");
    for (size_t i = 0; i < term.size(); ++i) {
      int c = term[i];
      if (size[c] < 0) {
        size[c] = view.shape[i];
        owner[c] = what;
      } else if (size[c] != view.shape[i]) {
        fail(kEinsum, "letter '" + std::string(1, term[i]) + "' is " +
                          std::to_string(view.shape[i]) + " in " + what +
                          " but " + std::to_string(size[c]) + " in " +
                          owner[c]);
      }
    }
  };
  for (size_t i = 0; i < s.terms.size(); ++i)
    bind(s.terms[i], call.inputs[i], "input " + std::to_string(i));
  bind(s.result, call.outputs[0], "output 0");
  return size;
}

bool has(const std::string &term, char c) {
  return term.find(c) != std::string::npos;
}

std::string dropUnitLetters(const std::string &term, const LetterSizes &size) {
  std::string out;
  for (char c : term)
    if (size[static_cast<int>(c)] != 1)
      out += c;
  return out;
}

std::vector<int64_t> shapeOf(const std::string &term, const LetterSizes &size) {
  std::vector<int64_t> shape;
  for (char c : term)
    shape.push_back(size[static_cast<int>(c)]);
  return shape;
}

int64_t countOf(const std::string &term, const LetterSizes &size) {
  int64_t n = 1;
  for (char c : term)
    n *= size[static_cast<int>(c)];
  return n;
}

/// Letters of `term`, in its order, that satisfy `pred`.
template <typename Pred>
std::string lettersOf(const std::string &term, Pred pred) {
  std::string out;
  for (char c : term)
    if (pred(c))
      out += c;
  return out;
}

/// Writes `in` (letters `term`) as `outTerm`, summing the letters of `term`
/// missing from `outTerm`.
template <typename T>
void sumAndPermute(const T *in, const std::string &term, T *out,
                   const std::string &outTerm, const LetterSizes &size) {
  std::vector<int64_t> shape = shapeOf(term, size);
  std::string kept = lettersOf(term, [&](char c) { return has(outTerm, c); });
  const T *source = in;
  std::vector<T> reduced;
  if (kept.size() != term.size()) {
    if constexpr (std::is_floating_point_v<T>) {
      std::vector<bool> mask;
      for (char c : term)
        mask.push_back(!has(outTerm, c));
      T *target = out;
      if (kept != outTerm) {
        reduced.resize(countOf(kept, size));
        target = reduced.data();
      }
      reduce(in, target, shape, mask, ReduceKind::Sum, 1.0);
      if (kept == outTerm)
        return;
      source = reduced.data();
      shape = shapeOf(kept, size);
    } else {
      // bf16 bits (uint16_t) are only permuted: runEinsumBF16 leaves specs
      // with summed letters to the widened kernel.
      fail(kEinsum, "cannot sum 16-bit operands without widening them");
    }
  }
  if (kept == outTerm) {
    std::memcpy(out, source, countOf(kept, size) * sizeof(T));
    return;
  }
  std::vector<int64_t> perm;
  for (char c : outTerm)
    perm.push_back(static_cast<int64_t>(kept.find(c)));
  permute(source, out, sizeof(T), shape, perm);
}

/// An operand on its way to GEMM form; `data` points at the caller's buffer
/// or at `storage`.
template <typename T> struct Operand {
  const T *data;
  std::string term;
  std::vector<T> storage;
};

enum class Layout { None, FreeContracted, ContractedFree };

Layout layoutOf(const std::string &term, const std::string &batch,
                const std::string &free, const std::string &contracted) {
  if (term == batch + free + contracted)
    return Layout::FreeContracted;
  if (term == batch + contracted + free)
    return Layout::ContractedFree;
  return Layout::None;
}

/// Rewrites `op` as `target` (a permutation of its letters).
template <typename T>
void permuteOperand(Operand<T> &op, const std::string &target,
                    const LetterSizes &size) {
  std::vector<T> buffer(countOf(target, size));
  sumAndPermute(op.data, op.term, buffer.data(), target, size);
  op.storage = std::move(buffer);
  op.data = op.storage.data();
  op.term = target;
}

/// `batchedGemm(transL, transR, batches, m, n, k, l, ldl, strideL, r, ldr,
/// strideR, beta, c, ldc, strideC)` runs the GEMMs and returns false when
/// it cannot (nothing is written to the output then, and einsumTwo returns
/// false). `accumulate`: the output holds the addend, and the product is
/// added to it.
template <typename T, typename BatchedGemm>
bool einsumTwo(const KernelCall &call, const EinsumSpec &spec,
               const LetterSizes &size, bool accumulate,
               BatchedGemm &&batchedGemm) {
  std::string result = dropUnitLetters(spec.result, size);
  Operand<T> ops[2];
  for (int i = 0; i < 2; ++i) {
    ops[i].data = call.inputs[i].as<T>();
    ops[i].term = dropUnitLetters(spec.terms[i], size);
  }
  T *out = call.outputs[0].as<T>();
  int64_t outCount = call.outputs[0].numElements();
  if (outCount == 0)
    return true;
  if (call.inputs[0].numElements() == 0 || call.inputs[1].numElements() == 0) {
    // A summed or contracted letter has size 0: an empty sum (all bits zero
    // is +0 in bf16 too).
    if (!accumulate)
      std::fill(out, out + outCount, T(0));
    return true;
  }

  // Sum away letters that only one operand has.
  for (int i = 0; i < 2; ++i) {
    const std::string &other = ops[1 - i].term;
    std::string kept = lettersOf(
        ops[i].term, [&](char c) { return has(other, c) || has(result, c); });
    if (kept != ops[i].term) {
      if constexpr (!std::is_floating_point_v<T>)
        return false; // a sum: widen
      permuteOperand(ops[i], kept, size);
    }
  }
  const std::string &a = ops[0].term, &b = ops[1].term;
  auto inA = [&](char c) { return has(a, c); };
  auto inB = [&](char c) { return has(b, c); };
  auto inR = [&](char c) { return has(result, c); };

  // Group orders: from the result when it is grouped, else from the
  // operands (the result is permuted anyway then).
  std::string batch =
      lettersOf(result, [&](char c) { return inA(c) && inB(c); });
  std::string freeA =
      lettersOf(result, [&](char c) { return inA(c) && !inB(c); });
  std::string freeB =
      lettersOf(result, [&](char c) { return inB(c) && !inA(c); });
  bool resultDirect =
      result == batch + freeA + freeB || result == batch + freeB + freeA;
  if (!resultDirect) {
    batch = lettersOf(a, [&](char c) { return inB(c) && inR(c); });
    freeA = lettersOf(a, [&](char c) { return !inB(c); });
    freeB = lettersOf(b, [&](char c) { return !inA(c); });
  }
  // The contracted order: the one that lets more operands be used as they
  // are.
  std::string contracted;
  {
    std::string kA = lettersOf(a, [&](char c) { return inB(c) && !inR(c); });
    std::string kB = lettersOf(b, [&](char c) { return inA(c) && !inR(c); });
    auto score = [&](const std::string &k) {
      return (layoutOf(a, batch, freeA, k) != Layout::None) +
             (layoutOf(b, batch, freeB, k) != Layout::None);
    };
    contracted = score(kB) > score(kA) ? kB : kA;
  }
  if (layoutOf(a, batch, freeA, contracted) == Layout::None)
    permuteOperand(ops[0], batch + freeA + contracted, size);
  if (layoutOf(b, batch, freeB, contracted) == Layout::None)
    permuteOperand(ops[1], batch + contracted + freeB, size);
  Layout layoutA = layoutOf(ops[0].term, batch, freeA, contracted);
  Layout layoutB = layoutOf(ops[1].term, batch, freeB, contracted);

  // Rows come from `left`, columns from `right`.
  bool swap = resultDirect && result != batch + freeA + freeB;
  const Operand<T> &left = swap ? ops[1] : ops[0];
  const Operand<T> &right = swap ? ops[0] : ops[1];
  Layout layoutL = swap ? layoutB : layoutA, layoutR = swap ? layoutA : layoutB;
  int64_t m = countOf(swap ? freeB : freeA, size);
  int64_t n = countOf(swap ? freeA : freeB, size);
  int64_t k = countOf(contracted, size);
  int64_t batches = countOf(batch, size);
  bool transL = layoutL == Layout::ContractedFree;
  bool transR = layoutR == Layout::FreeContracted;
  int64_t ldl = transL ? m : k, ldr = transR ? k : n;

  if constexpr (!std::is_floating_point_v<T>)
    if (accumulate && !resultDirect)
      return false; // runEinsumBF16 adds the product to the addend itself
  std::vector<T> temp;
  T *c = out;
  if (!resultDirect) {
    temp.resize(batches * m * n);
    c = temp.data();
  }
  T beta = accumulate && resultDirect ? T(1) : T(0);
  if (!batchedGemm(transL, transR, batches, m, n, k, left.data, ldl, m * k,
                   right.data, ldr, k * n, beta, c, n, m * n))
    return false;
  if (resultDirect)
    return true;
  if (!accumulate) {
    sumAndPermute(temp.data(), batch + freeA + freeB, out, result, size);
    return true;
  }
  if constexpr (std::is_floating_point_v<T>) {
    std::vector<T> permuted(outCount);
    sumAndPermute(temp.data(), batch + freeA + freeB, permuted.data(), result,
                  size);
    for (int64_t i = 0; i < outCount; ++i)
      out[i] += permuted[i];
  }
  return true;
}

/// One cblas_?gemm per batch element.
template <typename T>
bool blasGemms(bool transL, bool transR, int64_t batches, int64_t m, int64_t n,
               int64_t k, const T *l, int64_t ldl, int64_t strideL, const T *r,
               int64_t ldr, int64_t strideR, T beta, T *c, int64_t ldc,
               int64_t strideC) {
  for (int64_t i = 0; i < batches; ++i)
    gemm(kEinsum, transL, transR, m, n, k, T(1), l + i * strideL, ldl,
         r + i * strideR, ldr, beta, c + i * strideC, ldc);
  return true;
}

/// Writes the addend, broadcast, into the output, unless it is the output;
/// a profile times it (KernelPartCounters::einsumAddendNanos).
void copyAddend(const KernelCall &call, const EinsumCheck &c) {
  const TensorView &addend = call.inputs[2], &out = call.outputs[0];
  if (addend.data == out.data)
    return;
  KernelPartCounters *counters = kernelPartCounters();
  auto start = std::chrono::steady_clock::now();
  stridedCopy(addend.data, out.data, sizeOf(out.dtype), out.shape,
              c.addendStrides);
  if (counters)
    addNanosSince(counters->einsumAddendNanos, start);
}

template <typename T>
void einsumOne(const KernelCall &call, const EinsumSpec &spec,
               const LetterSizes &size) {
  T *out = call.outputs[0].as<T>();
  int64_t outCount = call.outputs[0].numElements();
  if (outCount == 0)
    return;
  if (call.inputs[0].numElements() == 0) {
    std::fill(out, out + outCount, T(0));
    return;
  }
  sumAndPermute(call.inputs[0].as<T>(), dropUnitLetters(spec.terms[0], size),
                out, dropUnitLetters(spec.result, size), size);
}

} // namespace

EinsumCheck checkEinsum(const KernelCall &call) {
  if (call.inputs.empty() || call.inputs.size() > 3)
    fail(kEinsum, "expects one or two operands and, after two, an optional "
                  "addend; got " +
                      std::to_string(call.inputs.size()) + " inputs");
  checkCall(call, call.inputs.size(), 1);
  const TensorView &out = call.outputs[0];
  for (size_t i = 0; i < call.inputs.size(); ++i)
    if (call.inputs[i].dtype != out.dtype)
      fail(kEinsum, "input " + std::to_string(i) + " has dtype " +
                        toString(call.inputs[i].dtype) + " but output 0 has " +
                        toString(out.dtype));
  bool hasAddend = call.inputs.size() == 3;
  KernelCall operands = call;
  if (hasAddend)
    operands.inputs.pop_back();
  checkNoOverlap(operands, /*allowExactAlias=*/false);
  EinsumCheck c;
  c.spec = parseSpec(call.attrs.spec, operands.inputs.size(), hasAddend);
  c.size = bindSizes(operands, c.spec);
  if (hasAddend) {
    checkAliasOrApart(call, 2);
    c.addendStrides = broadcastStrides(kEinsum, call.inputs[2],
                                       "input 2 (the addend)", out,
                                       call.attrs.dims);
  }
  return c;
}

void runEinsum(const KernelCall &call) {
  EinsumCheck c = checkEinsum(call);
  const TensorView &out = call.outputs[0];
  checkFloat(kEinsum, out, "output 0");
  bool accumulate = call.inputs.size() == 3;
  if (accumulate)
    copyAddend(call, c);
  dispatchFloat(kEinsum, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (call.inputs.size() == 1)
      einsumOne<T>(call, c.spec, c.size);
    else
      einsumTwo<T>(call, c.spec, c.size, accumulate, blasGemms<T>);
  });
}

bool runEinsumBF16(const KernelCall &call) {
  if ((call.inputs.size() != 2 && call.inputs.size() != 3) ||
      call.outputs.size() != 1 || !nativeBF16GemmAvailable())
    return false;
  for (const TensorView &v : call.inputs)
    if (v.dtype != DType::BF16)
      return false;
  if (call.outputs[0].dtype != DType::BF16)
    return false;
  EinsumCheck c = checkEinsum(call);
  // beta is 0, or T(1) from einsumTwo to accumulate: oneDNN's sum post-op.
  auto oneDnn = [](bool transL, bool transR, int64_t batches, int64_t m,
                   int64_t n, int64_t k, const uint16_t *l, int64_t ldl,
                   int64_t strideL, const uint16_t *r, int64_t ldr,
                   int64_t strideR, uint16_t beta, uint16_t *c, int64_t ldc,
                   int64_t strideC) {
    return gemmBF16(transL, transR, batches, m, n, k, l, ldl, strideL, r, ldr,
                    strideR, c, DType::BF16, ldc, strideC,
                    /*accumulate=*/beta != 0);
  };
  if (call.inputs.size() == 2)
    return einsumTwo<uint16_t>(call, c.spec, c.size, /*accumulate=*/false,
                               oneDnn);
  // With an addend: copied into the output, and the product added to it
  // in f32 (one rounding) where the result is the GEMM's own and oneDNN
  // runs it; else (nothing written but the addend) the product into a
  // bf16 temporary, then added in f32 and rounded, as the add kernel would.
  copyAddend(call, c);
  if (einsumTwo<uint16_t>(call, c.spec, c.size, /*accumulate=*/true, oneDnn))
    return true;
  const TensorView &out = call.outputs[0];
  std::vector<uint16_t> product(size_t(out.numElements()));
  KernelCall two = call;
  two.inputs.pop_back();
  two.outputs[0].data = product.data();
  if (!einsumTwo<uint16_t>(two, c.spec, c.size, /*accumulate=*/false, oneDnn))
    return false; // the caller widens, reading the addend (input 2) again
  auto *o = out.as<uint16_t>();
  for (size_t i = 0; i < product.size(); ++i)
    o[i] = half::toBF16(half::fromBF16(o[i]) + half::fromBF16(product[i]));
  return true;
}

} // namespace partita::runtime::cpu
