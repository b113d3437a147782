//===- Backend.h - kernels of the runtime -----------------------*- C++ -*-===//
//
// The abstract kernel provider. Each nn op has one kernel kind; a kernel
// call names the kind, its attributes, and input/output views whose shapes
// are the *local* shapes of the partitioned program. Backends: cpu (BLAS for
// contractions), cuda (cuBLAS and CUDA kernels).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_BACKEND_H
#define PARTITA_RUNTIME_BACKEND_H

#include "partita/runtime/Tensor.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace partita::runtime {

/// One per nn op; names follow the nn dialect's mnemonics (nn.reduce's
/// kinds are separate kernels: "reduce_sum", "reduce_max", "reduce_mean").
///
/// Inputs -> outputs of each kind (shapes local; T is f32 or f64 unless
/// said otherwise; every kind throws Error on anything else):
///   einsum                 1 or 2 x T -> T, attrs.spec ("bsh,hf->bsf")
///   add sub mul div max    a, b -> c, one type (also i32/i64)
///   neg exp log tanh relu silu rsqrt sqrt gelu   x -> y, one type
///                          (gelu: attrs.tanh for the tanh approximation)
///   broadcast              x -> y, attrs.dims (y dim of each x dim), any dtype
///   reduce_sum/max/mean    x -> y, attrs.dims (reduced dims, dropped);
///                          mean divides by attrs.meanCount when > 0
///   transpose              x -> y, attrs.dims (perm: y dim i = x dim perm[i]),
///                          any dtype
///   reshape                x -> y, same dtype and count, any dtype
///   softmax                x -> y, attrs.dim
///   layer_norm             x, gamma[H], beta[H] -> y (last dim), attrs.epsilon
///   rms_norm               x, gamma[H] -> y (last dim), attrs.epsilon
///   rotary                 x[B,S,heads,D] -> y, attrs.theta, positionOffset
///   attention              q[B,Sq,heads,D], k[B,Skv,kvHeads,D], v (as k)
///                          -> o (as q); attrs.causal, scale, queryOffset
///   embedding              table[V,H], ids (i32/i64) -> ids.shape + [H],
///                          attrs.vocabOffset
///   cross_entropy          logits[..., V], labels (i32/i64) -> 0-d loss of
///                          the logits' dtype, attrs.meanCount
///   fill                   () -> y (f32/f64/i32/i64), attrs.fillValue
/// Outputs must not overlap inputs, except that elementwise kinds and
/// reshape may write exactly over one of their inputs (in place).
enum class KernelKind : uint8_t {
  Einsum,
  Add, Sub, Mul, Div, Max,
  Neg, Exp, Log, Tanh, Relu, Silu, Rsqrt, Sqrt, Gelu,
  Broadcast, ReduceSum, ReduceMax, ReduceMean, Transpose, Reshape,
  Softmax, LayerNorm, RMSNorm, Rotary, Attention, Embedding, CrossEntropy,
  Fill,
};

/// "einsum", "layer_norm", ...; and the inverse (nullopt when unknown).
const char *toString(KernelKind kind);
std::optional<KernelKind> kernelKindFromString(const std::string &name);

/// The attributes any kernel may read; each kind documents which it uses.
struct KernelAttrs {
  std::string spec;             // einsum
  std::vector<int64_t> dims;    // broadcast (result dim per operand dim),
                                // reduce (reduced dims), transpose (perm)
  int64_t dim = -1;             // softmax
  double epsilon = 1e-5;        // layer_norm, rms_norm
  double theta = 10000.0;       // rotary
  int64_t positionOffset = 0;   // rotary: global position of local row 0
  bool causal = false;          // attention
  std::optional<double> scale;  // attention (default 1/sqrt(head_dim))
  int64_t queryOffset = 0;      // attention: global position of local query 0
  bool tanh = false;            // gelu
  int64_t vocabOffset = 0;      // embedding / cross_entropy: first local row
  int64_t meanCount = 0;        // reduce mean / cross_entropy: global count to
                                // divide by (0: the local count)
  double fillValue = 0.0;       // fill (constants)
};

struct KernelCall {
  KernelKind kind;
  KernelAttrs attrs;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
};

class Backend {
public:
  virtual ~Backend() = default;
  /// "cpu", "cuda".
  virtual const char *name() const = 0;
  /// Runs one kernel; throws Error naming the kernel and what is wrong when
  /// the shapes or dtypes do not fit it.
  virtual void run(const KernelCall &call) = 0;
};

/// The CPU backend (OpenBLAS for contractions; other kernels run on the
/// calling thread). `numThreads` > 0 sets OpenBLAS's thread count, which is
/// process-wide; 0 keeps OpenBLAS's default.
std::unique_ptr<Backend> createCpuBackend(int numThreads = 0);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_BACKEND_H
