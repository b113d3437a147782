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

#include "partita/runtime/Device.h"
#include "partita/runtime/Tensor.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace partita::runtime {

/// One per nn op; names follow the nn dialect's mnemonics (nn.reduce's
/// kinds are separate kernels: "reduce_sum", "reduce_max", "reduce_mean").
///
/// Inputs -> outputs of each kind (shapes local; T is f32 or f64 unless
/// said otherwise; every kind throws Error on anything else):
///   einsum                 1 or 2 x T -> T, attrs.spec ("bsh,hf->bsf");
///                          two operands may take a third input, an addend
///                          broadcast by attrs.dims (as broadcast's): out =
///                          einsum + addend; out may be the addend itself
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
///                          -> o (as q) [, lse [B,heads,Sq]: each row's
///                          log-sum-exp]; attrs.causal, scale, queryOffset
///   embedding              table[V,H], ids (i32/i64) -> ids.shape + [H],
///                          attrs.vocabOffset
///   cross_entropy          logits[..., V], labels (i32/i64) -> 0-d loss of
///                          the logits' dtype, attrs.meanCount
///   fill                   () -> y (f32/f64/i32/i64), attrs.fillValue
///
/// Backward and optimizer kinds (what nn-autodiff emits):
///   relu_grad silu_grad gelu_grad   x, dy -> dx, one type: dy times the
///                          derivative at x (gelu_grad: attrs.tanh as gelu)
///   greater_equal          a, b -> c, one type: 1 where a >= b, else 0
///   layer_norm_grad        x, gamma[H], dy -> dx: the input gradient of
///                          layer_norm (last dim), attrs.epsilon
///   rms_norm_grad          x, gamma[H], dy -> dx, attrs.epsilon
///   layer_norm_gamma_grad  x, dy (as x) -> dgamma[H]: the sum over the
///                          leading dimensions of dy * xhat, xhat the
///                          layer_norm statistics' normalized x (last dim);
///                          attrs.epsilon
///   rotary_grad            dy[B,S,heads,D] -> dx: rotation by minus the
///                          angle; attrs.theta, positionOffset
///   attention_grad         q, k, v, dy (as q) [, o, lse: the forward's
///                          output and lse, read instead of recomputed]
///                          -> one output per letter of
///                          attrs.wrt, distinct letters of q, k, v in that
///                          order ("q", "k", "v", "qk", "qv", "kv", "qkv"):
///                          dq (as q), dk, dv (as k), e.g. "kv" -> dk, dv;
///                          attention's causal, scale, queryOffset; the
///                          softmax is recomputed, once for all outputs
///                          (the bits of one call per letter); with GQA
///                          dk/dv sum their query heads
///   embedding_grad         dy[ids..., H], ids (i32/i64) -> dtable[V, H]:
///                          row id - attrs.vocabOffset accumulates dy's rows
///                          of that id; ids outside the local rows add nothing
///   cross_entropy_grad     logits[..., V], labels (i32/i64), dloss (0-d, the
///                          logits' dtype) -> dlogits: (softmax(logits) -
///                          onehot(label)) * dloss / N, N = attrs.meanCount
///                          when > 0 (the global token count), else the
///                          local one; a token with a negative label gets 0
///   convert                x -> y, same shape, another float dtype: f32 <->
///                          f64, f32 <-> bf16 and f32 <-> f16 (storage;
///                          rounds to nearest even), or a copy
///   sgd                    p, g, buf -> p', buf' (one type): PyTorch SGD
///                          with dampening 0: g2 = g + weightDecay * p, buf'
///                          = momentum * buf + g2, p' = p - lr * buf'
///   adamw                  p, g, m, v, step (0-d, p's dtype, t >= 1) ->
///                          p', m', v': PyTorch AdamW; attrs.lr, beta1,
///                          beta2, eps, weightDecay
///
/// custom                   a kernel outside this list, named by
///                          KernelCall::customName and run by the kernel
///                          registered under that name for the backend
///                          (KernelRegistry.h); its attributes are
///                          attrs.custom.
/// Outputs must not overlap inputs, except that elementwise kinds (the
/// *_grad of relu, silu and gelu, greater_equal, sgd and adamw included) and
/// reshape may write exactly over one of their inputs (in place).
enum class KernelKind : uint8_t {
  Einsum,
  Add, Sub, Mul, Div, Max,
  Neg, Exp, Log, Tanh, Relu, Silu, Rsqrt, Sqrt, Gelu,
  Broadcast, ReduceSum, ReduceMax, ReduceMean, Transpose, Reshape,
  Softmax, LayerNorm, RMSNorm, Rotary, Attention, Embedding, CrossEntropy,
  Fill,
  ReluGrad, SiluGrad, GeluGrad, GreaterEqual, LayerNormGrad, RMSNormGrad,
  RotaryGrad, AttentionGrad, EmbeddingGrad, CrossEntropyGrad, Convert, SGD,
  AdamW,
  Custom,
  // After Custom: plan.proto numbers the kinds in this order.
  LayerNormGammaGrad,
};

/// "einsum", "layer_norm", ...; and the inverse (nullopt when unknown).
const char *toString(KernelKind kind);
std::optional<KernelKind> kernelKindFromString(const std::string &name);

/// A custom kernel's attribute value: an integer, a float, a bool, a string
/// or a list of integers (plan.proto's AttrValue).
using AttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;

/// A custom kernel's attributes by name. The getters throw Error naming the
/// attribute when it is missing or of another kind; those with a default
/// return it when the attribute is missing.
class CustomAttrs {
public:
  void set(const std::string &name, AttrValue value);
  bool has(const std::string &name) const;
  int64_t getInt(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t defaultValue) const;
  /// A float; an integer attribute converts.
  double getFloat(const std::string &name) const;
  double getFloat(const std::string &name, double defaultValue) const;
  bool getBool(const std::string &name) const;
  bool getBool(const std::string &name, bool defaultValue) const;
  const std::string &getString(const std::string &name) const;
  const std::vector<int64_t> &getInts(const std::string &name) const;
  const std::map<std::string, AttrValue> &values() const { return byName; }

private:
  const AttrValue &get(const std::string &name, const char *kind) const;
  std::map<std::string, AttrValue> byName;
};

/// The attributes any kernel may read; each kind documents which it uses.
struct KernelAttrs {
  std::string spec;             // einsum
  std::vector<int64_t> dims;    // broadcast (result dim per operand dim),
                                // reduce (reduced dims), transpose (perm)
  int64_t dim = -1;             // softmax
  double epsilon = 1e-5;        // layer_norm, rms_norm (and their grads)
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
  std::string wrt;              // attention_grad: "q", "kv", "qkv", ...
  double lr = 0.0;              // sgd, adamw: learning rate
  /// sgd, adamw: when set, the learning rate is read here (one f64 in the
  /// device's memory) when the kernel runs, instead of `lr`: a step
  /// recorded as a graph (ExecutorOptions::captureGraph) keeps its kernels'
  /// parameters, so a learning-rate schedule reaches them this way.
  const double *lrOnDevice = nullptr;
  double momentum = 0.0;        // sgd
  double beta1 = 0.9;           // adamw
  double beta2 = 0.999;         // adamw
  double eps = 1e-8;            // adamw (epsilon is the norms')
  double weightDecay = 0.0;     // sgd (L2 added to g), adamw (decoupled)
  CustomAttrs custom;           // custom kernels
};

struct KernelCall {
  KernelKind kind;
  KernelAttrs attrs;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  /// KernelKind::Custom: the registered kernel's name.
  std::string customName;
};

class Backend {
public:
  virtual ~Backend() = default;
  /// "cpu", "cuda".
  virtual const char *name() const = 0;
  /// The device whose memory the kernels read and write; kernels run in
  /// order on its compute stream.
  virtual Device &device() = 0;
  /// Runs one kernel; throws Error naming the kernel and what is wrong when
  /// the shapes or dtypes do not fit it.
  virtual void run(const KernelCall &call) = 0;
  /// Throws Error for a fault in the data that a kernel found on the
  /// device, where the host could not look before launching it (the cuda
  /// backend's cross entropy kernels record a label outside the vocabulary,
  /// its integer division a zero divisor or MIN / -1, its AdamW a step
  /// below 1), and forgets it. The
  /// Executor calls it when a step's work is done; backends that check on
  /// the host before running a kernel have nothing to report.
  virtual void checkDeviceErrors() {}

  /// For a profile (ExecutorOptions::profile): while on, the backend times
  /// parts of kernels that a profile shows as rows of their own: the
  /// matrix products inside kernels of other kinds (attention's and
  /// attention_grad's QK^T, PV and their gradients), GEMM time; and an
  /// einsum's copy of its addend into its output, not GEMM time. The cpu
  /// backend does; the default times nothing.
  virtual void setTimeKernelParts(bool on) { (void)on; }
  struct KernelPartSeconds {
    /// The inner products: wall time on one thread; with the work split
    /// over T threads, their summed time / T.
    double innerGemms = 0;
    /// The addend copies: wall time.
    double einsumAddends = 0;
  };
  /// Seconds of each part since the last call.
  virtual KernelPartSeconds takeKernelPartSeconds() { return {}; }
};

/// The CPU backend on a cpu device of its own: OpenBLAS for contractions,
/// every kernel on an intra-op pool of `numThreads` threads (0: OpenBLAS's
/// count, OPENBLAS_NUM_THREADS or the cores), which also splits the large
/// GEMMs; OpenBLAS itself is set to one thread, process-wide
/// (docs/runtime.md). The first call also runs configureBlasKernels().
std::unique_ptr<Backend> createCpuBackend(int numThreads = 0);

struct CpuBackendOptions {
  /// As createCpuBackend's `numThreads`.
  int numThreads = 0;
  /// bf16 contractions (einsum) as oneDNN bf16 matmuls where
  /// describeBF16Gemm() says they can run so; false: always on f32 copies
  /// through sgemm, as bf16 kernels of every other kind.
  bool nativeBF16Gemm = true;
};
std::unique_ptr<Backend> createCpuBackend(const CpuBackendOptions &options);

/// What runs the cpu backend's bf16 contractions: "oneDNN 2.6.3 bf16 matmul
/// (brg:avx512_core_amx_bf16)" when this build has oneDNN and oneDNN runs
/// bf16 matmuls on AMX here (and PARTITA_ONEDNN is not OFF in the
/// environment), else "widened to f32 (OpenBLAS sgemm): " and why.
const std::string &describeBF16Gemm();

/// Once per process: when OpenBLAS (DYNAMIC_ARCH) has fallen back to kernels
/// without AVX2 / AVX-512 on a CPU that has them (0.3.21 does not know
/// Sapphire Rapids and picks Prescott) and OPENBLAS_CORETYPE is not set,
/// selects OpenBLAS's SkylakeX (AVX-512) or Haswell (AVX2) kernels instead.
/// Call it before any BLAS call runs (createCpuBackend does). Returns a
/// line saying which kernels run, e.g. "OpenBLAS SkylakeX kernels (chosen
/// by Partita: OpenBLAS detected Prescott on a CPU with AVX-512)".
const std::string &configureBlasKernels();

/// OpenBLAS's name for the kernels it runs now ("SkylakeX", "Haswell",
/// "Prescott", ...).
std::string blasCoreName();

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_BACKEND_H
