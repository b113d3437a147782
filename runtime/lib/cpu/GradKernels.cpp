//===- GradKernels.cpp - cpu kernels: input gradients of model-level ops --===//
//
// The backward kernels nn-autodiff's ops lower to: norms, attention (which
// recomputes its softmax rather than storing it), the embedding's
// scatter-add and cross-entropy's softmax-minus-onehot. Each takes the
// forward op's inputs and the result's cotangent dy. Statistics accumulate
// as in the forward kernels (in double; f32 layer norm rows in f32 blocks
// of 8 adds widened to double lanes, blockSums); contractions go to BLAS.
// rotary_grad is the forward rotation with the angle negated
// (NNKernels.cpp).
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace partita::runtime::cpu {

int64_t checkNormGrad(const KernelCall &call) {
  checkCall(call, 3, 1);
  const TensorView &x = call.inputs[0], &dy = call.inputs[2],
                   &dx = call.outputs[0];
  checkSameType(call.kind, dy, "input 2 (dy)", x, "input 0 (x)");
  checkSameType(call.kind, dx, "output 0", x, "input 0 (x)");
  int64_t hidden = normHidden(call.kind, x);
  checkVector(call.kind, call.inputs[1], "input 1 (gamma)", x, hidden);
  checkPositiveFinite(call.kind, "epsilon", call.attrs.epsilon);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  return hidden;
}

int64_t checkLayerNormGammaGrad(const KernelCall &call) {
  checkCall(call, 2, 1);
  const TensorView &x = call.inputs[0], &dy = call.inputs[1];
  checkSameType(call.kind, dy, "input 1 (dy)", x, "input 0 (x)");
  int64_t hidden = normHidden(call.kind, x);
  checkVector(call.kind, call.outputs[0], "output 0 (dgamma)", x, hidden);
  checkPositiveFinite(call.kind, "epsilon", call.attrs.epsilon);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  return hidden;
}

namespace {

/// P = exp(S - lse) over rows of `cols` in place (p holds S), row i's
/// masked columns (past attentionRowKeys) 0: the probabilities from the
/// forward's log-sum-exp, lse[i].
template <typename T>
PARTITA_VECTOR_CLONES void probabilitiesFromLse(T *p, int64_t rows,
                                                int64_t cols, bool causal,
                                                int64_t queryOffset,
                                                const T *lse) {
  for (int64_t i = 0; i < rows; ++i) {
    T *row = p + i * cols;
    int64_t n = attentionRowKeys(causal, queryOffset, i, cols);
    T shift = lse[i];
    for (int64_t j = 0; j < n; ++j)
      row[j] = std::exp(row[j] - shift);
    std::fill(row + n, row + cols, T(0));
  }
}

/// dS = P * (dP - D) over rows of `cols` (dp holds dP and becomes dS),
/// row i's D = rowsum(dy * O) from the forward's output (rows of `d` at
/// stride `ld`), in laneSum's fixed order.
template <typename T>
PARTITA_VECTOR_CLONES void softmaxGradRowsFromOutput(const T *p, T *dp,
                                                     int64_t rows,
                                                     int64_t cols,
                                                     const T *dy, const T *o,
                                                     int64_t ld, int64_t d) {
  for (int64_t i = 0; i < rows; ++i) {
    const T *dyi = dy + i * ld, *oi = o + i * ld;
    double dot = laneSum(d, [&](int64_t j) {
      return static_cast<double>(dyi[j]) * oi[j];
    });
    T s = static_cast<T>(dot);
    const T *pi = p + i * cols;
    T *dpi = dp + i * cols;
    for (int64_t j = 0; j < cols; ++j)
      dpi[j] = pi[j] * (dpi[j] - s);
  }
}

/// dS = P * (dP - rowsum(P * dP)) over rows of `cols` (dp holds dP and
/// becomes dS; masked columns have P = 0, so 0), the row sum in laneSum's
/// fixed order. Out of line in vector clones: inside attentionGrad's
/// lambda these loops ran as baseline x86-64 code.
template <typename T>
PARTITA_VECTOR_CLONES void softmaxGradRows(const T *p, T *dp, int64_t count,
                                           int64_t cols) {
  for (int64_t r = 0; r < count; r += cols) {
    const T *pi = p + r;
    T *dpi = dp + r;
    double dot = laneSum(cols, [&](int64_t j) {
      return static_cast<double>(pi[j]) * dpi[j];
    });
    T s = static_cast<T>(dot);
    for (int64_t j = 0; j < cols; ++j)
      dpi[j] = pi[j] * (dpi[j] - s);
  }
}

/// Any of dq, dk and dv of attention (those `g` asks for), one (batch, kv
/// head) pair at a time and, within it, the query heads of its group in
/// order:
///   S = scale Q K^T, P = softmax(S) (causal rows masked), O = P V,
///   dV += P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)),
///   dQ = scale dS K, dK += scale dS^T Q.
/// With the forward's output and lse (g.out, g.lse), P = exp(S - lse) and
/// rowsum(P * dP) = rowsum(dO * O), neither needing a pass over the row.
/// Causal query rows go in blocks of kCausalRowBlock, each over only the
/// keys its rows see. P is computed once per block for every output, dP
/// and dS once for dq and dk; each output's arithmetic is the same
/// whichever others are asked for, so one call asking for several gives
/// the bits of one call each.
/// The pairs run on the intra-op pool (ThreadPool.h): a pair owns its dk
/// and dv rows (the group's heads accumulate into them, in head order) and
/// its heads' dq rows, so no two threads write one element and the result
/// does not depend on the thread count. Each chunk has its own P and dP,
/// and each GEMM one thread when the pairs are split.
template <typename T>
void attentionGrad(const KernelCall &call, const AttentionGradCall &g) {
  const AttentionDims &a = g.dims;
  const T *q = call.inputs[0].as<T>(), *k = call.inputs[1].as<T>(),
          *v = call.inputs[2].as<T>(), *dy = call.inputs[3].as<T>();
  const T *o = g.out ? g.out->as<T>() : nullptr;
  const T *lse = g.lse ? g.lse->as<T>() : nullptr;
  T *dq = g.dq ? g.dq->as<T>() : nullptr;
  T *dk = g.dk ? g.dk->as<T>() : nullptr;
  T *dv = g.dv ? g.dv->as<T>() : nullptr;
  int64_t seqQ = a.seqQ, seqKV = a.seqKV, d = a.headDim;
  int64_t group = a.heads / a.kvHeads;
  int64_t ldq = a.heads * d, ldkv = a.kvHeads * d;
  KernelKind kind = call.kind;
  bool needDS = dq || dk;
  // About 2^20 multiply-adds a chunk at least: smaller work is not worth
  // waking a thread for.
  int64_t pairs = a.batch * a.kvHeads;
  int64_t minPairs = itemsForWork(group * seqQ * seqKV * d, int64_t(1) << 20);
  bool causal = call.attrs.causal;
  int64_t offset = call.attrs.queryOffset;
  // Causal queries in blocks, each over the keys it sees (kCausalRowBlock):
  // dk and dv rows past a block's keys get nothing from it (P = 0 there).
  int64_t rowBlock = attentionBlockRows(causal, seqQ);
  parallelFor(pairs, minPairs, [&](int64_t begin, int64_t end) {
    std::vector<T> p(rowBlock * seqKV), dp(needDS ? rowBlock * seqKV : 0);
    for (int64_t pair = begin; pair < end; ++pair) {
      int64_t b = pair / a.kvHeads, kvh = pair % a.kvHeads;
      const T *kh = k + b * seqKV * ldkv + kvh * d;
      const T *vh = v + b * seqKV * ldkv + kvh * d;
      T *dkh = dk ? dk + b * seqKV * ldkv + kvh * d : nullptr;
      T *dvh = dv ? dv + b * seqKV * ldkv + kvh * d : nullptr;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
        for (int64_t r0 = 0; r0 < seqQ; r0 += rowBlock) {
          int64_t rows = std::min(rowBlock, seqQ - r0);
          int64_t cols = attentionBlockKeys(causal, offset, r0, rows, seqKV);
          const T *qb = q + b * seqQ * ldq + h * d + r0 * ldq;
          const T *dyb = dy + b * seqQ * ldq + h * d + r0 * ldq;
          gemm(kind, false, true, rows, cols, d, static_cast<T>(a.scale), qb,
               ldq, kh, ldkv, T(0), p.data(), cols);
          if (lse)
            probabilitiesFromLse(p.data(), rows, cols, causal, offset + r0,
                                 lse + (b * a.heads + h) * seqQ + r0);
          else
            causalSoftmaxRows(p.data(), rows, cols, causal, offset + r0);
          if (dvh)
            gemm(kind, true, false, cols, d, rows, T(1), p.data(), cols, dyb,
                 ldq, T(1), dvh, ldkv);
          if (!needDS)
            continue;
          gemm(kind, false, true, rows, cols, d, T(1), dyb, ldq, vh, ldkv,
               T(0), dp.data(), cols);
          if (o)
            softmaxGradRowsFromOutput(p.data(), dp.data(), rows, cols, dyb,
                                      o + b * seqQ * ldq + h * d + r0 * ldq,
                                      ldq, d);
          else
            softmaxGradRows(p.data(), dp.data(), rows * cols, cols);
          if (dq)
            gemm(kind, false, false, rows, d, cols, static_cast<T>(a.scale),
                 dp.data(), cols, kh, ldkv, T(0),
                 dq + b * seqQ * ldq + h * d + r0 * ldq, ldq);
          if (dkh)
            gemm(kind, true, false, cols, d, rows, static_cast<T>(a.scale),
                 dp.data(), cols, qb, ldq, T(1), dkh, ldkv);
        }
    }
  });
}

int64_t labelAt(const TensorView &labels, int64_t t) {
  return labels.dtype == DType::I32 ? labels.as<int32_t>()[t]
                                    : labels.as<int64_t>()[t];
}

} // namespace

namespace {
/// f32 layer_norm_grad rows, the formula of runLayerNormGrad in f32 with
/// the statistics of layerNormStatsF32 (the same mean and rstd as the
/// forward's): one pass for the mean, one for the three sums of c^2, g and
/// g c (c = x - mean, g = dy gamma; blockSums), one for dx.
PARTITA_VECTOR_CLONES
void layerNormGradRowsF32(const float *x, const float *gamma, const float *dy,
                          float *dx, int64_t rows, int64_t hidden,
                          double epsilon) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *src = x + r * hidden, *dyr = dy + r * hidden;
    float *dst = dx + r * hidden;
    float m = rowMeanF32(src, hidden);
    double sums[3];
    blockSums<3>(
        hidden,
        [&](int64_t i, Lane16f t[3]) {
          Lane16f c = load16f(src + i) - m;
          Lane16f g = load16f(dyr + i) * load16f(gamma + i);
          t[0] = c * c;
          t[1] = g;
          t[2] = g * c;
        },
        [&](int64_t i, float t[3]) {
          float c = src[i] - m, g = dyr[i] * gamma[i];
          t[0] = c * c;
          t[1] = g;
          t[2] = g * c;
        },
        sums);
    float rstd = layerNormRstd(sums[0], hidden, epsilon);
    float meanG = static_cast<float>(sums[1] / hidden);
    float meanGX = static_cast<float>(sums[2] * rstd / hidden);
    int64_t i = 0;
    for (; i + 16 <= hidden; i += 16) {
      Lane16f g = load16f(dyr + i) * load16f(gamma + i);
      Lane16f xhat = (load16f(src + i) - m) * rstd;
      store16f(dst + i, rstd * (g - meanG - xhat * meanGX));
    }
    for (; i < hidden; ++i) {
      float g = dyr[i] * gamma[i];
      float xhat = (src[i] - m) * rstd;
      dst[i] = rstd * (g - meanG - xhat * meanGX);
    }
  }
}
} // namespace

namespace {
/// Each row's mean and rstd as layer_norm computes them: f32 rows by
/// layerNormStatsF32, others in double, rounded to T.
/// Rows [0, rows) of layerNormRowStats for f32, out of line in vector
/// clones: layerNormStatsF32 inlined into the pool's lambda ran as baseline
/// x86-64 code, and took half of layer_norm_gamma_grad's time.
PARTITA_VECTOR_CLONES
void layerNormRowStatsF32(const float *x, int64_t rows, int64_t hidden,
                          double epsilon, float *mean, float *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    auto [m, s] = layerNormStatsF32(x + r * hidden, hidden, epsilon);
    mean[r] = m;
    rstd[r] = s;
  }
}

template <typename T>
void layerNormRowStats(const T *x, int64_t rows, int64_t hidden,
                       double epsilon, T *mean, T *rstd) {
  parallelFor(rows, itemsForWork(hidden, 1 << 14), [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) {
      layerNormRowStatsF32(x + b * hidden, e - b, hidden, epsilon, mean + b,
                           rstd + b);
    } else {
      for (int64_t r = b; r < e; ++r) {
        auto [m, s] = layerNormStatsDouble(x + r * hidden, hidden, epsilon);
        mean[r] = static_cast<T>(m);
        rstd[r] = static_cast<T>(s);
      }
    }
  });
}

/// acc[i] += dy[r][i] * xhat[r][i] over rows [0, rows) of columns [0, n)
/// (rows `ld` apart), xhat = (x - mean[r]) * rstd[r] rounded to T and the
/// product too, as layer_norm, mul and reduce_sum would give them: the
/// terms added in double four rows a pass, in accumulateRows' order.
template <typename T>
PARTITA_VECTOR_CLONES void
accumulateGammaRows(const T *x, const T *dy, const T *mean, const T *rstd,
                    int64_t ld, int64_t rows, double *acc, int64_t n) {
  auto term = [&](int64_t r, int64_t i) {
    T xhat = (x[r * ld + i] - mean[r]) * rstd[r];
    return static_cast<double>(static_cast<T>(dy[r * ld + i] * xhat));
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    for (int64_t i = 0; i < n; ++i)
      acc[i] = acc[i] + term(r, i) + term(r + 1, i) + term(r + 2, i) +
               term(r + 3, i);
  for (; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      acc[i] += term(r, i);
}
} // namespace

void runLayerNormGammaGrad(const KernelCall &call) {
  int64_t hidden = checkLayerNormGammaGrad(call);
  const TensorView &x = call.inputs[0], &dy = call.inputs[1],
                   &dgamma = call.outputs[0];
  // The sum over rows of dy * xhat: the bits of layer_norm(x, 1, 0), mul
  // and reduce_sum over the leading dimensions, without writing xhat or the
  // product. The rows' statistics first, then column blocks on the
  // intra-op pool, each adding its columns' terms in row order.
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    T *out = dgamma.as<T>();
    std::vector<T> mean(static_cast<size_t>(rows)),
        rstd(static_cast<size_t>(rows));
    layerNormRowStats(x.as<T>(), rows, hidden, call.attrs.epsilon,
                      mean.data(), rstd.data());
    // Chunks of at least 512 columns: a row's terms then go 32 vectors at
    // a time between loads of its statistics (reduce_sum's 16-column chunks
    // left 4 vectors).
    constexpr int64_t kBlock = 2048, kMinColumns = 512;
    parallelFor(hidden, std::max(kMinColumns, itemsForWork(rows, 1 << 16)),
                [&](int64_t begin, int64_t end) {
                  std::vector<double> acc(size_t(std::min(kBlock, end - begin)));
                  for (int64_t c0 = begin; c0 < end; c0 += kBlock) {
                    int64_t w = std::min(kBlock, end - c0);
                    std::fill(acc.begin(), acc.begin() + w, 0.0);
                    accumulateGammaRows(x.as<T>() + c0, dy.as<T>() + c0,
                                        mean.data(), rstd.data(), hidden, rows,
                                        acc.data(), w);
                    for (int64_t j = 0; j < w; ++j)
                      out[c0 + j] = static_cast<T>(acc[size_t(j)]);
                  }
                });
  });
}

void runLayerNormGrad(const KernelCall &call) {
  int64_t hidden = checkNormGrad(call);
  const TensorView &x = call.inputs[0], &dx = call.outputs[0];
  // y = xhat * gamma + beta, xhat = (x - mean) * rstd. With g = dy * gamma:
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *gamma = call.inputs[1].as<T>();
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    if constexpr (std::is_same_v<T, float>) {
      // Rows are independent: chunks of rows on the intra-op pool.
      parallelFor(rows, itemsForWork(hidden, 1 << 14),
                  [&](int64_t b, int64_t e) {
                    layerNormGradRowsF32(x.as<T>() + b * hidden, gamma,
                                         call.inputs[2].as<T>() + b * hidden,
                                         dx.as<T>() + b * hidden, e - b, hidden,
                                         call.attrs.epsilon);
                  });
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T *src = x.as<T>() + r * hidden;
      const T *dy = call.inputs[2].as<T>() + r * hidden;
      T *dst = dx.as<T>() + r * hidden;
      auto [mean, rstd] =
          layerNormStatsDouble(src, hidden, call.attrs.epsilon);
      double meanG = 0, meanGX = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        double g = static_cast<double>(dy[i]) * gamma[i];
        meanG += g;
        meanGX += g * (src[i] - mean) * rstd;
      }
      meanG /= hidden;
      meanGX /= hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        double g = static_cast<double>(dy[i]) * gamma[i];
        double xhat = (src[i] - mean) * rstd;
        dst[i] = static_cast<T>(rstd * (g - meanG - xhat * meanGX));
      }
    }
  });
}

void runRMSNormGrad(const KernelCall &call) {
  int64_t hidden = checkNormGrad(call);
  const TensorView &x = call.inputs[0], &dx = call.outputs[0];
  // y = x * r * gamma, r = (mean(x^2) + eps)^(-1/2). With g = dy * gamma:
  // dx = r * g - x * r^3 * mean(g * x).
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *gamma = call.inputs[1].as<T>();
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T *src = x.as<T>() + r * hidden;
      const T *dy = call.inputs[2].as<T>() + r * hidden;
      T *dst = dx.as<T>() + r * hidden;
      double sq = 0, gx = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        sq += static_cast<double>(src[i]) * src[i];
        gx += static_cast<double>(dy[i]) * gamma[i] * src[i];
      }
      double rms = 1.0 / std::sqrt(sq / hidden + call.attrs.epsilon);
      double c = rms * rms * rms * gx / hidden;
      for (int64_t i = 0; i < hidden; ++i)
        dst[i] = static_cast<T>(rms * static_cast<double>(dy[i]) * gamma[i] -
                                c * src[i]);
    }
  });
}

AttentionGradCall checkAttentionGrad(const KernelCall &call) {
  KernelKind kind = call.kind;
  const std::string &wrt = call.attrs.wrt;
  const std::string quoted = "wrt \"" + wrt + "\"";
  if (wrt.empty())
    fail(kind, "wrt is empty: it names the gradients to compute, distinct "
               "letters of q, k, v in that order (\"q\", \"kv\", \"qkv\", "
               "...)");
  static const std::string kLetters = "qkv";
  size_t next = 0; // the first letter of kLetters the next one may be
  for (size_t i = 0; i < wrt.size(); ++i) {
    size_t at = kLetters.find(wrt[i]);
    std::string letter = "'" + std::string(1, wrt[i]) + "'";
    if (at == std::string::npos)
      fail(kind, quoted + " has " + letter + " at position " +
                     std::to_string(i) + ": its letters must be q, k or v");
    if (wrt.find(wrt[i]) < i)
      fail(kind, quoted + " names " + letter + " twice");
    if (at < next)
      fail(kind, quoted + " has " + letter + " after '" + wrt[i - 1] +
                     "': its letters must come in the order q, k, v");
    next = at + 1;
  }
  bool saved = call.inputs.size() == 6;
  if ((call.inputs.size() == 4 || saved) &&
      call.outputs.size() != wrt.size())
    fail(kind, quoted + " asks for " + std::to_string(wrt.size()) +
                   " gradient(s), one output each, but the call has " +
                   std::to_string(call.outputs.size()) + " output(s)");
  checkCall(call, saved ? 6 : 4, wrt.size());
  AttentionGradCall g;
  g.dims = checkAttentionInputs(call);
  const TensorView &q = call.inputs[0], &k = call.inputs[1];
  checkSameType(kind, call.inputs[3], "input 3 (dy)", q, "input 0 (query)");
  if (saved) {
    checkSameType(kind, call.inputs[4], "input 4 (o)", q, "input 0 (query)");
    checkAttentionLse(kind, call.inputs[5], "input 5 (lse)", g.dims, q.dtype);
    g.out = &call.inputs[4];
    g.lse = &call.inputs[5];
  }
  for (size_t o = 0; o < wrt.size(); ++o) {
    const TensorView &out = call.outputs[o];
    std::string name = "output " + std::to_string(o) + " (d" + wrt[o] + ")";
    if (wrt[o] == 'q') {
      checkSameType(kind, out, name.c_str(), q, "input 0 (query)");
      g.dq = &out;
    } else {
      checkSameType(kind, out, name.c_str(), k, "input 1 (key)");
      (wrt[o] == 'k' ? g.dk : g.dv) = &out;
    }
  }
  checkNoOverlap(call, /*allowExactAlias=*/false);
  return g;
}

void runAttentionGrad(const KernelCall &call) {
  AttentionGradCall g = checkAttentionGrad(call);
  KernelKind kind = call.kind;
  const TensorView &q = call.inputs[0];
  dispatchFloat(kind, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    // dk and dv accumulate over the query heads of a group (and are zero
    // where no query attends).
    bool anyOutput = false;
    for (const TensorView &out : call.outputs) {
      std::fill(out.as<T>(), out.as<T>() + out.numElements(), T(0));
      anyOutput = anyOutput || out.numElements() > 0;
    }
    if (!anyOutput || q.numElements() == 0)
      return;
    if (g.dims.seqKV == 0)
      fail(kind, "there are no keys (seq_kv is 0): the softmax is undefined");
    attentionGrad<T>(call, g);
  });
}

void runEmbeddingGrad(const KernelCall &call) {
  checkCall(call, 2, 1);
  const TensorView &dy = call.inputs[0], &ids = call.inputs[1],
                   &out = call.outputs[0];
  KernelKind kind = call.kind;
  if (out.rank() != 2)
    fail(kind,
         "output 0 (dtable) must be [vocab, hidden], got " + typeToString(out));
  checkFloat(kind, dy, "input 0 (dy)");
  checkIndex(kind, ids, "input 1 (ids)");
  checkDType(kind, out, "output 0 (dtable)", dy.dtype);
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(out.shape[1]);
  checkShape(kind, dy, "input 0 (dy)", shape);
  int64_t offset = call.attrs.vocabOffset;
  if (offset < 0)
    fail(kind, "vocabOffset must be >= 0, got " + std::to_string(offset));
  checkNoOverlap(call, /*allowExactAlias=*/false);
  int64_t vocab = out.shape[0], hidden = out.shape[1];
  dispatchFloat(kind, dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    T *rows = out.as<T>();
    std::fill(rows, rows + out.numElements(), T(0));
    const T *src = dy.as<T>();
    for (int64_t t = 0, n = ids.numElements(); t < n; ++t, src += hidden) {
      int64_t id =
          ids.dtype == DType::I32 ? ids.as<int32_t>()[t] : ids.as<int64_t>()[t];
      // The shard holds global rows [offset, offset + vocab); the other
      // shards take the other ids (as the forward lookup gave them zeros).
      if (id < offset || id - offset >= vocab)
        continue;
      T *dst = rows + (id - offset) * hidden;
      for (int64_t i = 0; i < hidden; ++i)
        dst[i] += src[i];
    }
  });
}

void runCrossEntropyGrad(const KernelCall &call) {
  checkCall(call, 3, 1);
  const TensorView &logits = call.inputs[0], &labels = call.inputs[1],
                   &dloss = call.inputs[2], &out = call.outputs[0];
  KernelKind kind = call.kind;
  if (logits.rank() < 1)
    fail(kind, "input 0 (logits) must be [..., vocab], got a rank-0 tensor");
  checkFloat(kind, logits, "input 0 (logits)");
  checkIndex(kind, labels, "input 1 (labels)");
  checkShape(
      kind, labels, "input 1 (labels)",
      std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1));
  checkShape(kind, dloss, "input 2 (dloss)", {});
  checkDType(kind, dloss, "input 2 (dloss)", logits.dtype);
  checkSameType(kind, out, "output 0", logits, "input 0 (logits)");
  if (call.attrs.vocabOffset != 0)
    fail(kind, "vocab-parallel cross_entropy_grad (vocabOffset " +
                   std::to_string(call.attrs.vocabOffset) +
                   ") is not supported yet");
  if (call.attrs.meanCount < 0)
    fail(kind,
         "meanCount must be >= 0, got " + std::to_string(call.attrs.meanCount));
  checkNoOverlap(call, /*allowExactAlias=*/false);
  int64_t vocab = logits.shape.back();
  int64_t tokens = labels.numElements();
  for (int64_t t = 0; t < tokens; ++t)
    if (labelAt(labels, t) >= vocab)
      fail(kind, "label " + std::to_string(labelAt(labels, t)) + " of token " +
                     std::to_string(t) + " is outside [0, " +
                     std::to_string(vocab) + ")");
  if (out.numElements() == 0)
    return;
  // The forward loss is a mean over meanCount tokens (the global count when
  // tokens are split), so each row's gradient carries dloss / count.
  int64_t count = call.attrs.meanCount > 0 ? call.attrs.meanCount : tokens;
  dispatchFloat(kind, logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    double scale = static_cast<double>(*dloss.as<T>()) / count;
    // Rows are independent: chunks of rows on the intra-op pool.
    parallelFor(
        tokens, itemsForWork(vocab, 1 << 14),
        [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const T *row = logits.as<T>() + t * vocab;
            T *dst = out.as<T>() + t * vocab;
            int64_t label = labelAt(labels, t);
            // A negative label marks a skipped token (padding): the forward
            // added nothing for it, so its gradient is 0.
            if (label < 0) {
              std::fill(dst, dst + vocab, T(0));
              continue;
            }
            T m = -std::numeric_limits<T>::infinity();
            if constexpr (std::is_same_v<T, float>)
              m = rowMaxF32(row, vocab);
            else
              for (int64_t j = 0; j < vocab; ++j)
                m = (row[j] > m || row[j] != row[j]) ? row[j] : m;
            if constexpr (std::is_same_v<T, float>) {
              // One f32 exponential per element, without libm (the double path
              // below takes two): dst holds exp(x - m) until it is scaled.
              double sum = expShiftedSumF32(row, dst, vocab, m);
              float r = static_cast<float>(scale / sum);
              for (int64_t j = 0; j < vocab; ++j)
                dst[j] *= r;
              dst[label] -= static_cast<float>(scale);
            } else {
              double sum = 0;
              for (int64_t j = 0; j < vocab; ++j)
                sum += std::exp(static_cast<double>(row[j]) - m);
              for (int64_t j = 0; j < vocab; ++j) {
                double p = std::exp(static_cast<double>(row[j]) - m) / sum;
                dst[j] = static_cast<T>((p - (j == label ? 1.0 : 0.0)) * scale);
              }
            }
          }
        });
  });
}

} // namespace partita::runtime::cpu
