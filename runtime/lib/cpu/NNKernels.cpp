//===- NNKernels.cpp - cpu kernels: softmax, norms, rotary, attention, ... ===//
//
// The kernels of nn's model-level ops. Sums (softmax denominators, norm
// statistics, losses) accumulate in double for both f32 and f64 (f32 layer
// norm rows in f32 blocks of 8 adds widened to double lanes, blockSums);
// exponents are taken after subtracting the maximum, so no kernel overflows
// on large logits. Offsets in the attributes (positionOffset, queryOffset,
// vocabOffset) say where a local shard sits in the global tensor.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace partita::runtime::cpu {

void checkSameType(KernelKind kind, const TensorView &a, const char *aName,
                   const TensorView &b, const char *bName) {
  if (a.dtype != b.dtype || a.shape != b.shape)
    fail(kind, std::string(aName) + " is " + typeToString(a) + " but " + bName +
                   " is " + typeToString(b) + " (they must match)");
}

void checkPositiveFinite(KernelKind kind, const char *name, double value) {
  if (!(value > 0 && std::isfinite(value)))
    fail(kind, std::string(name) + " must be positive and finite, got " +
                   std::to_string(value));
}

int64_t normHidden(KernelKind kind, const TensorView &x) {
  if (x.rank() < 1)
    fail(kind, "input 0 must have rank >= 1, got a rank-0 tensor");
  return x.shape.back();
}

void checkVector(KernelKind kind, const TensorView &v, const char *name,
                 const TensorView &x, int64_t size) {
  checkDType(kind, v, name, x.dtype);
  checkShape(kind, v, name, {size});
}

PARTITA_VECTOR_CLONES
float rowMaxF32(const float *src, int64_t n) {
  // 16 lanes as one GCC vector (a plain array of lanes with NaN-keeping
  // selects stayed scalar: GCC 12 did not vectorize it), NaNs counted on the
  // side: a NaN anywhere gives NaN, as the sequential loop does.
  typedef float Lanes __attribute__((vector_size(64)));
  typedef int32_t Flags __attribute__((vector_size(64)));
  Lanes lane;
  Flags nan = {};
  for (int l = 0; l < 16; ++l)
    lane[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    Lanes x;
    std::memcpy(&x, src + j, sizeof x);
    lane = x > lane ? x : lane;
    nan |= x != x;
  }
  float m = -std::numeric_limits<float>::infinity();
  bool anyNan = false;
  for (; j < n; ++j) {
    m = src[j] > m ? src[j] : m;
    anyNan |= src[j] != src[j];
  }
  for (int l = 0; l < 16; ++l) {
    m = lane[l] > m ? lane[l] : m;
    anyNan |= nan[l] != 0;
  }
  return anyNan ? std::numeric_limits<float>::quiet_NaN() : m;
}

PARTITA_VECTOR_CLONES
double expShiftedSumF32(const float *src, float *dst, int64_t n, float m) {
  // Clamped, then masked by a product: GCC 12 vectorizes this form, not a
  // select between 0 and the exponential (control flow in the loop, so one
  // element at a time). Same values: 0 below -87, NaN stays NaN.
  for (int64_t j = 0; j < n; ++j) {
    float x = src[j] - m;
    float clamped = x < -87.0f ? -87.0f : x;
    dst[j] = expNonPositive(clamped) * float(x >= -87.0f); // NaN: NaN * 0
  }
  return laneSum(n, [&](int64_t j) { return double(dst[j]); });
}

namespace {
/// f32 softmax of one row: the scaling loop vectorizes in this clone (as a
/// template instance it ran as baseline x86-64 code).
PARTITA_VECTOR_CLONES
double softmaxRowF32(const float *src, float *dst, int64_t n) {
  float m = rowMaxF32(src, n);
  double sum = expShiftedSumF32(src, dst, n, m);
  float r = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j)
    dst[j] *= r;
  return m + std::log(sum);
}
} // namespace

template <typename T> double softmaxRow(const T *src, T *dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return softmaxRowF32(src, dst, n);
  } else {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j)
      m = (src[j] > m || src[j] != src[j]) ? src[j] : m;
    double sum = 0;
    for (int64_t j = 0; j < n; ++j)
      dst[j] = std::exp(src[j] - m);
    for (int64_t j = 0; j < n; ++j)
      sum += dst[j];
    T r = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j)
      dst[j] *= r;
    return m + std::log(sum);
  }
}
template double softmaxRow<float>(const float *, float *, int64_t);
template double softmaxRow<double>(const double *, double *, int64_t);

template <typename T>
void causalSoftmaxRows(T *scores, int64_t rows, int64_t cols, bool causal,
                       int64_t queryOffset, T *lse) {
  for (int64_t i = 0; i < rows; ++i) {
    T *row = scores + i * cols;
    // Query i sits at global position queryOffset + i and sees keys
    // 0..queryOffset + i when causal.
    int64_t n = attentionRowKeys(causal, queryOffset, i, cols);
    double rowLse = softmaxRow(row, row, n);
    if (lse)
      lse[i] = static_cast<T>(rowLse);
    std::fill(row + n, row + cols, T(0));
  }
}
template void causalSoftmaxRows<float>(float *, int64_t, int64_t, bool,
                                       int64_t, float *);
template void causalSoftmaxRows<double>(double *, int64_t, int64_t, bool,
                                        int64_t, double *);

AttentionDims checkAttentionInputs(const KernelCall &call) {
  const TensorView &q = call.inputs[0], &k = call.inputs[1],
                   &v = call.inputs[2];
  KernelKind kind = call.kind;
  if (q.rank() != 4)
    fail(kind, "input 0 (query) must be [batch, seq_q, heads, head_dim], "
               "got " +
                   typeToString(q));
  if (k.rank() != 4)
    fail(kind, "input 1 (key) must be [batch, seq_kv, kv_heads, head_dim], "
               "got " +
                   typeToString(k));
  checkSameType(kind, v, "input 2 (value)", k, "input 1 (key)");
  checkDType(kind, k, "input 1 (key)", q.dtype);
  AttentionDims a;
  a.batch = q.shape[0];
  a.seqQ = q.shape[1];
  a.heads = q.shape[2];
  a.headDim = q.shape[3];
  a.seqKV = k.shape[1];
  a.kvHeads = k.shape[2];
  if (k.shape[0] != a.batch || k.shape[3] != a.headDim)
    fail(kind, "input 1 (key) " + typeToString(k) +
                   " does not share batch and head_dim with input 0 (query) " +
                   typeToString(q));
  if (a.kvHeads == 0 ? a.heads != 0 : a.heads % a.kvHeads != 0)
    fail(kind, "heads (" + std::to_string(a.heads) +
                   ") must be a multiple of kv_heads (" +
                   std::to_string(a.kvHeads) + ")");
  a.scale = call.attrs.scale ? *call.attrs.scale
                             : 1.0 / std::sqrt(static_cast<double>(a.headDim));
  if (call.attrs.scale &&
      !(*call.attrs.scale > 0 && std::isfinite(*call.attrs.scale)))
    fail(kind, "scale must be positive and finite, got " +
                   std::to_string(*call.attrs.scale));
  if (call.attrs.causal &&
      (call.attrs.queryOffset < 0 || call.attrs.queryOffset > a.seqKV - a.seqQ))
    fail(kind, "causal attention needs 0 <= queryOffset and queryOffset + "
               "seq_q <= seq_kv (the keys cover positions 0..seq_kv-1), got "
               "queryOffset " +
                   std::to_string(call.attrs.queryOffset) + ", seq_q " +
                   std::to_string(a.seqQ) + ", seq_kv " +
                   std::to_string(a.seqKV));
  return a;
}

void checkAttentionLse(KernelKind kind, const TensorView &lse,
                       const char *what, const AttentionDims &a, DType dtype) {
  checkDType(kind, lse, what, dtype);
  checkShape(kind, lse, what, {a.batch, a.heads, a.seqQ});
  if (a.headDim == 0 && lse.numElements() > 0)
    fail(kind, std::string(what) + " needs head_dim >= 1 (with none the "
                                   "output is empty and no kernel writes it)");
}

AttentionCall checkAttention(const KernelCall &call) {
  checkCall(call, 3, call.outputs.size() == 2 ? 2 : 1);
  AttentionCall c;
  c.dims = checkAttentionInputs(call);
  const TensorView &q = call.inputs[0];
  checkSameType(call.kind, call.outputs[0], "output 0", q, "input 0 (query)");
  if (call.outputs.size() == 2) {
    checkAttentionLse(call.kind, call.outputs[1], "output 1 (lse)", c.dims,
                      q.dtype);
    c.lse = &call.outputs[1];
  }
  checkNoOverlap(call, /*allowExactAlias=*/false);
  return c;
}

namespace {

template <typename T> T maxOf(T x, T y) { return (x > y || x != x) ? x : y; }

//===----------------------------------------------------------------------===//
// softmax
//===----------------------------------------------------------------------===//

template <typename T>
void softmax(const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {
  if (inner == 1) {
    parallelFor(outer, itemsForWork(n, 1 << 14),
                [&](int64_t b, int64_t e) {
                  for (int64_t o = b; o < e; ++o)
                    softmaxRow(x + o * n, y + o * n, n);
                });
    return;
  }
  // Softmax along a non-innermost dimension: keep `inner` running maxima and
  // sums, so every pass reads contiguous rows.
  std::vector<T> m(inner);
  std::vector<double> sum(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const T *src = x + o * n * inner;
    T *dst = y + o * n * inner;
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i)
        m[i] = maxOf(m[i], src[j * inner + i]);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i) {
        T e = std::exp(src[j * inner + i] - m[i]);
        dst[j * inner + i] = e;
        sum[i] += e;
      }
    for (int64_t i = 0; i < inner; ++i)
      m[i] = static_cast<T>(1.0 / sum[i]); // reuse as the reciprocal
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < inner; ++i)
        dst[j * inner + i] *= m[i];
  }
}

//===----------------------------------------------------------------------===//
// attention
//===----------------------------------------------------------------------===//

template <typename T>
void attention(const KernelCall &call, int64_t batch, int64_t seqQ,
               int64_t seqKV, int64_t heads, int64_t kvHeads, int64_t headDim,
               double scale) {
  const T *q = call.inputs[0].as<T>(), *k = call.inputs[1].as<T>(),
          *v = call.inputs[2].as<T>();
  T *out = call.outputs[0].as<T>();
  // The optional lse output, [batch, heads, seq_q].
  T *lse = call.outputs.size() > 1 ? call.outputs[1].as<T>() : nullptr;
  bool causal = call.attrs.causal;
  int64_t offset = call.attrs.queryOffset;
  int64_t group = heads / kvHeads;
  // Row strides of one head's [seq, head_dim] slice inside [b, s, h, d].
  int64_t ldq = heads * headDim, ldkv = kvHeads * headDim;
  // The (batch, head) pairs on the intra-op pool, about 2^20 multiply-adds
  // a chunk at least; their GEMMs then run serially (ThreadPool.h). A pair
  // writes only its own output slice.
  int64_t minPairs = itemsForWork(seqQ * seqKV * headDim, int64_t(1) << 20);
  int64_t rowBlock = attentionBlockRows(causal, seqQ);
  parallelFor(batch * heads, minPairs, [&](int64_t begin, int64_t end) {
    std::vector<T> scores(rowBlock * seqKV);
    for (int64_t pair = begin; pair < end; ++pair) {
      int64_t b = pair / heads, h = pair % heads;
      int64_t g = h / group; // the kv head this query head reads
      const T *qh = q + b * seqQ * ldq + h * headDim;
      const T *kh = k + b * seqKV * ldkv + g * headDim;
      const T *vh = v + b * seqKV * ldkv + g * headDim;
      T *oh = out + b * seqQ * ldq + h * headDim;
      for (int64_t r0 = 0; r0 < seqQ; r0 += rowBlock) {
        int64_t rows = std::min(rowBlock, seqQ - r0);
        int64_t cols = attentionBlockKeys(causal, offset, r0, rows, seqKV);
        // scores = scale * Q K^T, the block's rows and the keys they see.
        gemm(KernelKind::Attention, false, true, rows, cols, headDim,
             static_cast<T>(scale), qh + r0 * ldq, ldq, kh, ldkv, T(0),
             scores.data(), cols);
        // Query i sits at global position offset + i and sees keys
        // 0..offset + i when causal.
        causalSoftmaxRows(scores.data(), rows, cols, causal, offset + r0,
                          lse ? lse + pair * seqQ + r0 : nullptr);
        // out = P V
        gemm(KernelKind::Attention, false, false, rows, headDim, cols, T(1),
             scores.data(), cols, vh, ldkv, T(0), oh + r0 * ldq, ldq);
      }
    }
  });
}

} // namespace

int64_t checkNorm(const KernelCall &call, bool hasBeta) {
  checkCall(call, hasBeta ? 3 : 2, 1);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  checkSameType(call.kind, x, "input 0", y, "output 0");
  int64_t hidden = normHidden(call.kind, x);
  checkVector(call.kind, call.inputs[1], "input 1 (gamma)", x, hidden);
  if (hasBeta)
    checkVector(call.kind, call.inputs[2], "input 2 (beta)", x, hidden);
  checkPositiveFinite(call.kind, "epsilon", call.attrs.epsilon);
  checkNoOverlap(call, /*allowExactAlias=*/false);
  return hidden;
}

void runSoftmax(const KernelCall &call) {
  checkCall(call, 1, 1);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  checkSameType(call.kind, x, "input 0", y, "output 0");
  checkNoOverlap(call, /*allowExactAlias=*/false);
  int64_t dim = call.attrs.dim;
  if (dim < 0 || dim >= x.rank())
    fail(call.kind, "dim " + std::to_string(dim) +
                        " is out of range for input 0 of rank " +
                        std::to_string(x.rank()));
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    softmax(x.as<T>(), y.as<T>(), product(x.shape, 0, dim), x.shape[dim],
            product(x.shape, dim + 1, x.shape.size()));
  });
}

namespace {
/// f32 layer_norm rows: the statistics of layerNormStatsF32, then
/// (x - mean) * rstd * gamma + beta in f32; the row stays in L1 between
/// the passes.
PARTITA_VECTOR_CLONES
void layerNormRowsF32(const float *x, const float *gamma, const float *beta,
                      float *y, int64_t rows, int64_t hidden, double epsilon) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *src = x + r * hidden;
    float *dst = y + r * hidden;
    auto [m, rstd] = layerNormStatsF32(src, hidden, epsilon);
    int64_t i = 0;
    for (; i + 16 <= hidden; i += 16)
      store16f(dst + i, (load16f(src + i) - m) * rstd * load16f(gamma + i) +
                            load16f(beta + i));
    for (; i < hidden; ++i)
      dst[i] = (src[i] - m) * rstd * gamma[i] + beta[i];
  }
}
} // namespace

void runLayerNorm(const KernelCall &call) {
  int64_t hidden = checkNorm(call, /*hasBeta=*/true);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *gamma = call.inputs[1].as<T>(), *beta = call.inputs[2].as<T>();
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    if constexpr (std::is_same_v<T, float>) {
      // Rows are independent: chunks of rows on the intra-op pool.
      parallelFor(rows, itemsForWork(hidden, 1 << 14),
                  [&](int64_t b, int64_t e) {
                    layerNormRowsF32(x.as<T>() + b * hidden, gamma, beta,
                                     y.as<T>() + b * hidden, e - b, hidden,
                                     call.attrs.epsilon);
                  });
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T *src = x.as<T>() + r * hidden;
      T *dst = y.as<T>() + r * hidden;
      auto [mean, inv] = layerNormStatsDouble(src, hidden, call.attrs.epsilon);
      T m = static_cast<T>(mean);
      T rstd = static_cast<T>(inv);
      for (int64_t i = 0; i < hidden; ++i)
        dst[i] = (src[i] - m) * rstd * gamma[i] + beta[i];
    }
  });
}

void runRMSNorm(const KernelCall &call) {
  int64_t hidden = checkNorm(call, /*hasBeta=*/false);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *gamma = call.inputs[1].as<T>();
    int64_t rows = hidden ? x.numElements() / hidden : 0;
    for (int64_t r = 0; r < rows; ++r) {
      const T *src = x.as<T>() + r * hidden;
      T *dst = y.as<T>() + r * hidden;
      double sq = 0;
      for (int64_t i = 0; i < hidden; ++i)
        sq += static_cast<double>(src[i]) * src[i];
      T rms = static_cast<T>(1.0 / std::sqrt(sq / hidden + call.attrs.epsilon));
      for (int64_t i = 0; i < hidden; ++i)
        dst[i] = src[i] * rms * gamma[i];
    }
  });
}

void runRotary(const KernelCall &call) { rotate(call, /*inverse=*/false); }

void rotate(const KernelCall &call, bool inverse) {
  checkCall(call, 1, 1);
  const TensorView &x = call.inputs[0], &y = call.outputs[0];
  checkSameType(call.kind, x, "input 0", y, "output 0");
  checkNoOverlap(call, /*allowExactAlias=*/false);
  if (x.rank() != 4)
    fail(call.kind, "input 0 must be [batch, seq, heads, head_dim], got " +
                        typeToString(x));
  int64_t batch = x.shape[0], seq = x.shape[1], heads = x.shape[2],
          headDim = x.shape[3];
  if (headDim % 2 != 0)
    fail(call.kind, "head_dim must be even, got " + std::to_string(headDim));
  double theta = call.attrs.theta;
  checkPositiveFinite(call.kind, "theta", theta);
  if (call.attrs.positionOffset < 0)
    fail(call.kind, "positionOffset must be >= 0, got " +
                        std::to_string(call.attrs.positionOffset));
  dispatchFloat(call.kind, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t half = headDim / 2;
    // Angles in double: positions reach the tens of thousands.
    std::vector<T> cosTable(seq * half), sinTable(seq * half);
    for (int64_t s = 0; s < seq; ++s) {
      double p = static_cast<double>(call.attrs.positionOffset + s);
      for (int64_t i = 0; i < half; ++i) {
        // The transpose of a rotation is the rotation by minus the angle.
        double angle = p * std::pow(theta, -2.0 * i / headDim);
        cosTable[s * half + i] = static_cast<T>(std::cos(angle));
        sinTable[s * half + i] =
            static_cast<T>(inverse ? -std::sin(angle) : std::sin(angle));
      }
    }
    const T *src = x.as<T>();
    T *dst = y.as<T>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq; ++s) {
        const T *c = cosTable.data() + s * half,
                *sn = sinTable.data() + s * half;
        for (int64_t h = 0; h < heads; ++h) {
          int64_t base = ((b * seq + s) * heads + h) * headDim;
          for (int64_t i = 0; i < half; ++i) {
            T x0 = src[base + 2 * i], x1 = src[base + 2 * i + 1];
            dst[base + 2 * i] = x0 * c[i] - x1 * sn[i];
            dst[base + 2 * i + 1] = x0 * sn[i] + x1 * c[i];
          }
        }
      }
  });
}

void runAttention(const KernelCall &call) {
  AttentionDims a = checkAttention(call).dims;
  const TensorView &q = call.inputs[0], &out = call.outputs[0];
  if (out.numElements() == 0)
    return;
  if (a.seqKV == 0)
    fail(call.kind,
         "there are no keys (seq_kv is 0): the softmax is undefined");
  dispatchFloat(call.kind, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    attention<T>(call, a.batch, a.seqQ, a.seqKV, a.heads, a.kvHeads, a.headDim,
                 a.scale);
  });
}

void runEmbedding(const KernelCall &call) {
  checkCall(call, 2, 1);
  const TensorView &table = call.inputs[0], &ids = call.inputs[1],
                   &out = call.outputs[0];
  KernelKind kind = call.kind;
  if (table.rank() != 2)
    fail(kind,
         "input 0 (table) must be [vocab, hidden], got " + typeToString(table));
  checkIndex(kind, ids, "input 1 (ids)");
  checkDType(kind, out, "output 0", table.dtype);
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(table.shape[1]);
  checkShape(kind, out, "output 0", shape);
  int64_t offset = call.attrs.vocabOffset;
  if (offset < 0)
    fail(kind, "vocabOffset must be >= 0, got " + std::to_string(offset));
  checkNoOverlap(call, /*allowExactAlias=*/false);
  int64_t vocab = table.shape[0], hidden = table.shape[1];
  dispatchFloat(kind, table.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto gather = [&](auto *idData) {
      const T *rows = table.as<T>();
      T *dst = out.as<T>();
      for (int64_t t = 0, n = ids.numElements(); t < n; ++t, dst += hidden) {
        int64_t id = static_cast<int64_t>(idData[t]);
        // The shard holds global rows [offset, offset + vocab); other ids
        // give zeros (the all-reduce over the vocab axis sums the shards).
        if (id >= offset && id - offset < vocab)
          std::copy(rows + (id - offset) * hidden,
                    rows + (id - offset + 1) * hidden, dst);
        else
          std::fill(dst, dst + hidden, T(0));
      }
    };
    if (ids.dtype == DType::I32)
      gather(ids.as<int32_t>());
    else
      gather(ids.as<int64_t>());
  });
}

// Vocab-parallel cross-entropy (logits sharded over the vocab, vocabOffset
// the first local row) is not this kernel: it will be three local pieces
// joined by all-reduces over the vocab axis:
//   1. m_t = max over the local vocab of logits[t]          -> all-reduce max
//   2. s_t = sum over the local vocab of exp(logits[t] - m_t)
//      (with the global m_t)                                -> all-reduce sum
//   3. z_t = logits[t, label_t - vocabOffset] when the label falls in the
//      shard, else 0                                        -> all-reduce sum
// and then loss = sum_t (m_t + log s_t - z_t) / meanCount. Until those
// kernels exist, a nonzero vocabOffset is an error here.
void runCrossEntropy(const KernelCall &call) {
  checkCall(call, 2, 1);
  const TensorView &logits = call.inputs[0], &labels = call.inputs[1],
                   &out = call.outputs[0];
  KernelKind kind = call.kind;
  if (logits.rank() < 1)
    fail(kind, "input 0 (logits) must be [..., vocab], got a rank-0 tensor");
  checkFloat(kind, logits, "input 0 (logits)");
  checkIndex(kind, labels, "input 1 (labels)");
  checkShape(
      kind, labels, "input 1 (labels)",
      std::vector<int64_t>(logits.shape.begin(), logits.shape.end() - 1));
  checkShape(kind, out, "output 0", {});
  checkDType(kind, out, "output 0", logits.dtype);
  if (call.attrs.vocabOffset != 0)
    fail(kind, "vocab-parallel cross_entropy (vocabOffset " +
                   std::to_string(call.attrs.vocabOffset) +
                   ") is not supported yet");
  if (call.attrs.meanCount < 0)
    fail(kind,
         "meanCount must be >= 0, got " + std::to_string(call.attrs.meanCount));
  checkNoOverlap(call, /*allowExactAlias=*/false);
  int64_t vocab = logits.shape.back();
  int64_t tokens = labels.numElements();
  auto labelAt = [&](int64_t t) -> int64_t {
    return labels.dtype == DType::I32 ? labels.as<int32_t>()[t]
                                      : labels.as<int64_t>()[t];
  };
  // A negative label marks a token to skip (it adds 0 to the sum, and the
  // mean still divides by every token): dist-partition gives padded tokens
  // label -1 (dist.mask) so they add nothing.
  for (int64_t t = 0; t < tokens; ++t)
    if (labelAt(t) >= vocab)
      fail(kind, "label " + std::to_string(labelAt(t)) + " of token " +
                     std::to_string(t) + " is outside [0, " +
                     std::to_string(vocab) + ")");
  double total = 0;
  dispatchFloat(kind, logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    // f32: the exponentials in f32 without libm (expShiftedSumF32), summed
    // in double; f64 keeps libm's exp.
    // Rows on the intra-op pool, each row's loss kept and the losses added
    // in token order afterwards (the same sum at any thread count).
    std::vector<double> rowLoss(tokens, 0.0);
    parallelFor(
        tokens, itemsForWork(vocab, 1 << 14),
        [&](int64_t begin, int64_t end) {
          std::vector<float> scratch(std::is_same_v<T, float> ? vocab : 0);
          for (int64_t t = begin; t < end; ++t) {
            if (labelAt(t) < 0)
              continue;
            const T *row = logits.as<T>() + t * vocab;
            T m = -std::numeric_limits<T>::infinity();
            if constexpr (std::is_same_v<T, float>)
              m = rowMaxF32(row, vocab);
            else
              for (int64_t j = 0; j < vocab; ++j)
                m = maxOf(m, row[j]);
            double sum = 0;
            if constexpr (std::is_same_v<T, float>) {
              sum = expShiftedSumF32(row, scratch.data(), vocab, m);
            } else {
              for (int64_t j = 0; j < vocab; ++j)
                sum += std::exp(static_cast<double>(row[j]) - m);
            }
            rowLoss[t] =
                static_cast<double>(m) + std::log(sum) - row[labelAt(t)];
          }
        });
    for (int64_t t = 0; t < tokens; ++t)
      if (labelAt(t) >= 0)
        total += rowLoss[t];
  });
  // Mean over tokens; a shard divides by the global count so the partial
  // losses only need an all-reduce sum. No tokens and no count: 0/0 = NaN.
  int64_t count = call.attrs.meanCount > 0 ? call.attrs.meanCount : tokens;
  double loss = count > 0 ? total / static_cast<double>(count)
                          : std::numeric_limits<double>::quiet_NaN();
  dispatchFloat(kind, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    *out.as<T>() = static_cast<T>(loss);
  });
}

} // namespace partita::runtime::cpu
