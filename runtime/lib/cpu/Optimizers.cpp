//===- Optimizers.cpp - cpu kernels: sgd and adamw updates ----------------===//
//
// One elementwise pass per update, PyTorch's formulas (torch.optim.SGD with
// dampening 0 and nesterov off; torch.optim.AdamW) and stored in the
// parameter's dtype. SGD and f64 AdamW compute in double per element; f32
// AdamW computes in float as PyTorch's does, in the order of its
// single-tensor path (decay, moments, denominator sqrt(v)/sqrt(c2) + eps,
// p -= (lr/c1) m/denom), with every per-step scalar (bias corrections and
// their square root) computed once per call: in float the loop vectorizes to
// 16 lanes with one sqrt and one divide each, where the double loop ran at
// 8 lanes with two divides and a sqrt. Outputs may be exactly their inputs
// (p' over p, buf' over buf), since each element reads every input before
// it writes.
//
//===----------------------------------------------------------------------===//

#include "CpuKernels.h"
#include "ThreadPool.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace partita::runtime::cpu {

namespace {

void checkAttr(KernelKind kind, const char *name, double value, bool ok,
               const char *range) {
  if (!ok || !std::isfinite(value))
    fail(kind, std::string(name) + " must be finite and " + range + ", got " +
                   std::to_string(value));
}

/// Every input and output of an update has the parameter's type (input 0),
/// except the inputs listed as `scalars` (rank 0 of its dtype).
void checkUpdate(const KernelCall &call, size_t numInputs, size_t numOutputs,
                 size_t scalars) {
  checkCall(call, numInputs, numOutputs);
  const TensorView &p = call.inputs[0];
  checkFloat(call.kind, p, "input 0 (p)");
  static const char *const inNames[] = {"input 0", "input 1", "input 2",
                                        "input 3", "input 4"};
  static const char *const outNames[] = {"output 0", "output 1", "output 2"};
  for (size_t i = 1; i < numInputs - scalars; ++i)
    checkSameType(call.kind, call.inputs[i], inNames[i], p, "input 0 (p)");
  for (size_t i = numInputs - scalars; i < numInputs; ++i) {
    checkShape(call.kind, call.inputs[i], inNames[i], {});
    checkDType(call.kind, call.inputs[i], inNames[i], p.dtype);
  }
  for (size_t o = 0; o < numOutputs; ++o)
    checkSameType(call.kind, call.outputs[o], outNames[o], p, "input 0 (p)");
  checkNoOverlap(call, /*allowExactAlias=*/true);
}

/// The AdamW pass, its scalars passed by value (so that the stores cannot
/// be taken to change them and the loop vectorizes).
template <typename T>
PARTITA_VECTOR_CLONES void
adamwLoop(const T *p, const T *g, const T *m, const T *v, T *pOut, T *mOut,
          T *vOut, int64_t n, double beta1, double beta2, double lr, double eps,
          double decay, double c1, double c2) {
  for (int64_t i = 0; i < n; ++i) {
    double gi = g[i];
    double m2 = beta1 * double(m[i]) + (1 - beta1) * gi;
    double v2 = beta2 * double(v[i]) + (1 - beta2) * gi * gi;
    double next =
        double(p[i]) * decay - lr * (m2 / c1) / (std::sqrt(v2 / c2) + eps);
    mOut[i] = static_cast<T>(m2);
    vOut[i] = static_cast<T>(v2);
    pOut[i] = static_cast<T>(next);
  }
}

/// The f32 AdamW pass (see the file comment) in place: p, m and v are
/// read and overwritten, g is read; `stepSize` = lr / c1, `rsqrtC2` =
/// 1 / sqrt(c2). The four arrays are distinct (restrict): with seven
/// pointers that may alias, GCC needs more runtime alias checks than it
/// allows and left the loop scalar.
PARTITA_VECTOR_CLONES void
adamwInPlaceF32(float *__restrict p, const float *__restrict g,
                float *__restrict m, float *__restrict v, int64_t n,
                float beta1, float beta2, float stepSize, float eps,
                float decay, float rsqrtC2) {
  float oneMinusB1 = 1.0f - beta1, oneMinusB2 = 1.0f - beta2;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i];
    float m2 = beta1 * m[i] + oneMinusB1 * gi;
    float v2 = beta2 * v[i] + oneMinusB2 * gi * gi;
    float denom = std::sqrt(v2) * rsqrtC2 + eps;
    float next = p[i] * decay - stepSize * (m2 / denom);
    m[i] = m2;
    v[i] = v2;
    p[i] = next;
  }
}

} // namespace

/// The call's attributes with lr read from lrOnDevice when it is set (the
/// cpu device's memory is the host's).
static KernelAttrs withRate(const KernelAttrs &attrs) {
  KernelAttrs a = attrs;
  if (a.lrOnDevice)
    a.lr = *a.lrOnDevice;
  return a;
}

void runSGD(const KernelCall &call) {
  checkUpdate(call, 3, 2, 0);
  const KernelAttrs a = withRate(call.attrs);
  checkAttr(call.kind, "lr", a.lr, a.lr >= 0, ">= 0");
  checkAttr(call.kind, "momentum", a.momentum, a.momentum >= 0, ">= 0");
  checkAttr(call.kind, "weightDecay", a.weightDecay, a.weightDecay >= 0,
            ">= 0");
  dispatchFloat(call.kind, call.inputs[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *p = call.inputs[0].as<T>(), *g = call.inputs[1].as<T>(),
            *buf = call.inputs[2].as<T>();
    T *pOut = call.outputs[0].as<T>(), *bufOut = call.outputs[1].as<T>();
    for (int64_t i = 0, n = call.inputs[0].numElements(); i < n; ++i) {
      double g2 = double(g[i]) + a.weightDecay * double(p[i]);
      double b = a.momentum * double(buf[i]) + g2;
      double next = double(p[i]) - a.lr * b;
      bufOut[i] = static_cast<T>(b);
      pOut[i] = static_cast<T>(next);
    }
  });
}

void runAdamW(const KernelCall &call) {
  checkUpdate(call, 5, 3, 1);
  const KernelAttrs a = withRate(call.attrs);
  checkAttr(call.kind, "lr", a.lr, a.lr >= 0, ">= 0");
  checkAttr(call.kind, "beta1", a.beta1, a.beta1 >= 0 && a.beta1 < 1,
            "in [0, 1)");
  checkAttr(call.kind, "beta2", a.beta2, a.beta2 >= 0 && a.beta2 < 1,
            "in [0, 1)");
  checkAttr(call.kind, "eps", a.eps, a.eps > 0, "> 0");
  checkAttr(call.kind, "weightDecay", a.weightDecay, a.weightDecay >= 0,
            ">= 0");
  dispatchFloat(call.kind, call.inputs[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    double t = double(*call.inputs[4].as<T>());
    // A NaN step skips the update (fp16-mixed's loss scaling on an
    // overflow): each output keeps its old value.
    if (std::isnan(t)) {
      for (auto [in, out] : {std::pair{0, 0}, {2, 1}, {3, 2}})
        if (call.outputs[out].data != call.inputs[in].data)
          std::memcpy(call.outputs[out].data, call.inputs[in].data,
                      call.inputs[in].numBytes());
      return;
    }
    // The bias corrections divide by 1 - beta^t: zero at t = 0.
    if (!(t >= 1 && std::isfinite(t)))
      fail(call.kind, "input 4 (step) must hold the step number t >= 1 (the "
                      "step function increments it before the update), "
                      "got " +
                          std::to_string(t));
    double c1 = 1 - std::pow(a.beta1, t), c2 = 1 - std::pow(a.beta2, t);
    double decay = 1 - a.lr * a.weightDecay;
    const T *p = call.inputs[0].as<T>(), *g = call.inputs[1].as<T>(),
            *m = call.inputs[2].as<T>(), *v = call.inputs[3].as<T>();
    T *pOut = call.outputs[0].as<T>(), *mOut = call.outputs[1].as<T>(),
      *vOut = call.outputs[2].as<T>();
    int64_t n = call.inputs[0].numElements();
    // f32 runs in place on the outputs (the inputs copied over first when
    // they are not the outputs already, as with donated updates), unless
    // an output is another input (exact aliases the checks allow; the
    // double loop then handles them). Elements are independent: chunks on
    // the intra-op pool (ThreadPool.h).
    auto own = [&](const T *out, const T *in) {
      return out == in || (out != p && out != g && out != m && out != v);
    };
    bool inPlace = std::is_same_v<T, float> && own(pOut, p) &&
                   own(mOut, m) && own(vOut, v);
    if (inPlace) {
      if (pOut != p)
        std::memcpy(pOut, p, n * sizeof(T));
      if (mOut != m)
        std::memcpy(mOut, m, n * sizeof(T));
      if (vOut != v)
        std::memcpy(vOut, v, n * sizeof(T));
    }
    parallelFor(n, 1 << 15, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) {
        if (inPlace) {
          adamwInPlaceF32(pOut + b, g + b, mOut + b, vOut + b, e - b,
                          float(a.beta1), float(a.beta2), float(a.lr / c1),
                          float(a.eps), float(decay),
                          float(1.0 / std::sqrt(c2)));
          return;
        }
      }
      adamwLoop(p + b, g + b, m + b, v + b, pOut + b, mOut + b, vOut + b,
                e - b, a.beta1, a.beta2, a.lr, a.eps, decay, c1, c2);
    });
  });
}

} // namespace partita::runtime::cpu
