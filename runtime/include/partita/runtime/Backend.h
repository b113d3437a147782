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

/// One per nn op; names follow the nn dialect's mnemonics.
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

/// The CPU backend (OpenBLAS for contractions); `numThreads` 0 = default.
std::unique_ptr<Backend> createCpuBackend(int numThreads = 0);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_BACKEND_H
