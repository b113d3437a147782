//===- OneDnnGemm.cpp - bf16 GEMMs through oneDNN's matmul ----------------===//
//
// One oneDNN matmul per (batches, M, N, K, transposes, leading dimensions,
// batch strides, output type, thread count), made on first use and kept for
// the process (a step runs the same few shapes every time); operands are
// described by strides, so transposed ones are read in place, never copied.
// A shape counts as supported only when oneDNN's implementation for it runs
// on AMX ("amx" in its name): with AVX512-BF16 alone oneDNN 2.6's bf16 matmul
// was measured slower than sgemm on widened copies (bench/README.md), and a
// reference implementation far slower.
//
// Threads: oneDNN (Debian's build) runs on OpenMP threads, so each call sets
// the calling thread's OpenMP thread count to the size of the intra-op pool
// current on it (ThreadPool.h: the rank's thread count; 1 inside a pool's
// loop, or with no pool), and the primitive is keyed by it; but only when GNU
// OpenMP's idle threads sleep (OMP_WAIT_POLICY=PASSIVE or GOMP_SPINCOUNT=0
// in the environment: GNU OpenMP reads them once, when it loads, before
// main, so the runtime cannot set them). Spinning, they hold the cores the
// next kernels need: the 2-layer test GPT of mixed-precision-bf16.test
// (bf16-mixed) took 240 ms a step at 2 threads, against 1.8 ms passive and
// 1.6 ms at 1 thread. Otherwise the matmuls run on the calling thread
// alone. The scratchpad is the
// caller's (a thread-local buffer), so ranks running as threads can call at
// once. Results are deterministic for a given thread count: oneDNN's
// blocking depends on the shape and thread count alone.
//
// Numerics: products of bf16 values are exact in f32 and are summed in f32
// (in another order than sgemm's), and a bf16 result is rounded once to
// nearest even; AMX treats bf16 subnormal operands as zero.
//
//===----------------------------------------------------------------------===//

#include "OneDnnGemm.h"
#include "ThreadPool.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#if PARTITA_HAVE_ONEDNN
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>
#endif

namespace partita::runtime::cpu {

namespace {

#if PARTITA_HAVE_ONEDNN

/// PARTITA_ONEDNN=OFF (or 0, off, false) in the environment turns the
/// native path off at run time, e.g. to time the widened one.
bool disabledByEnvironment() {
  const char *value = std::getenv("PARTITA_ONEDNN");
  if (!value)
    return false;
  std::string v = value;
  return v == "OFF" || v == "off" || v == "0" || v == "false" || v == "FALSE";
}

using Tag = dnnl::memory::data_type;

dnnl::engine &engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

struct Key {
  bool transA, transB;
  int64_t batches, m, n, k, lda, strideA, ldb, strideB, ldc, strideC;
  DType cType;
  int threads;
  bool accumulate;
  auto tie() const {
    return std::tie(transA, transB, batches, m, n, k, lda, strideA, ldb,
                    strideB, ldc, strideC, cType, threads, accumulate);
  }
  bool operator<(const Key &other) const { return tie() < other.tie(); }
};

struct Entry {
  bool supported = false;
  std::string impl;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

/// The primitive descriptor for `key`, or an empty one when oneDNN has no
/// implementation.
dnnl::matmul::primitive_desc makeDesc(const Key &key) {
  using dims = dnnl::memory::dims;
  // op(A)[b, i, l] is at a[b * strideA + i * lda + l] (transA: + l * lda + i).
  dims aDims{key.batches, key.m, key.k}, bDims{key.batches, key.k, key.n},
      cDims{key.batches, key.m, key.n};
  dims aStrides = key.transA ? dims{key.strideA, 1, key.lda}
                             : dims{key.strideA, key.lda, 1};
  dims bStrides = key.transB ? dims{key.strideB, 1, key.ldb}
                             : dims{key.strideB, key.ldb, 1};
  dims cStrides{key.strideC, key.ldc, 1};
  dnnl::memory::desc aDesc(aDims, Tag::bf16, aStrides);
  dnnl::memory::desc bDesc(bDims, Tag::bf16, bStrides);
  dnnl::memory::desc cDesc(
      cDims, key.cType == DType::BF16 ? Tag::bf16 : Tag::f32, cStrides);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc desc(aDesc, bDesc, cDesc);
  return dnnl::matmul::primitive_desc(desc, attr, engine());
}

std::mutex cacheMutex;
std::map<Key, std::unique_ptr<Entry>> cache;

/// The cached entry of `key`, made on first use.
const Entry &entryFor(const Key &key) {
  std::lock_guard<std::mutex> lock(cacheMutex);
  std::unique_ptr<Entry> &slot = cache[key];
  if (slot)
    return *slot;
  slot = std::make_unique<Entry>();
  try {
    slot->pd = makeDesc(key);
    slot->impl = slot->pd.impl_info_str();
    slot->supported = slot->impl.find("amx") != std::string::npos;
    if (slot->supported)
      slot->primitive = dnnl::matmul(slot->pd);
  } catch (const dnnl::error &) {
    slot->supported = false; // no implementation: the caller widens
  }
  return *slot;
}

/// Whether GNU OpenMP's idle threads sleep rather than spin (see above).
bool openMPThreadsSleep() {
  std::string policy, spin;
  if (const char *v = std::getenv("OMP_WAIT_POLICY"))
    policy = v;
  if (const char *v = std::getenv("GOMP_SPINCOUNT"))
    spin = v;
  for (char &c : policy)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return policy == "passive" || spin == "0";
}

struct Availability {
  bool available = false;
  bool threaded = false; // may use more than the calling thread
  std::string description;
};

const Availability &availability() {
  static const Availability result = [] {
    Availability a;
    const dnnl_version_t *v = dnnl_version();
    std::string version = "oneDNN " + std::to_string(v->major) + "." +
                          std::to_string(v->minor) + "." +
                          std::to_string(v->patch);
    const char *widened = "widened to f32 (OpenBLAS sgemm): ";
    if (disabledByEnvironment()) {
      a.description = widened + std::string("PARTITA_ONEDNN=") +
                      std::getenv("PARTITA_ONEDNN");
      return a;
    }
    // A probe shape of the kind a training step runs.
    Key probe{false,     false, 1,         256, 256,       256,         256,
              256 * 256, 256,   256 * 256, 256, 256 * 256, DType::BF16, 1,
              false};
    std::string impl;
    try {
      impl = makeDesc(probe).impl_info_str();
    } catch (const dnnl::error &e) {
      impl = std::string("none (") + e.what() + ")";
    }
    if (impl.find("amx") == std::string::npos) {
      a.description =
          widened + version + " would run " + impl + " (no AMX on this CPU)";
      return a;
    }
    a.available = true;
    a.threaded = openMPThreadsSleep();
    a.description = version + " bf16 matmul (" + impl + ")" +
                    (a.threaded ? ""
                                : ", on the calling thread only "
                                  "(OMP_WAIT_POLICY is not PASSIVE)");
    return a;
  }();
  return result;
}

#endif // PARTITA_HAVE_ONEDNN

} // namespace

#if PARTITA_HAVE_ONEDNN

bool nativeBF16GemmAvailable() { return availability().available; }

const std::string &describeNativeBF16Gemm() {
  return availability().description;
}

bool gemmBF16(bool transA, bool transB, int64_t batches, int64_t m, int64_t n,
              int64_t k, const uint16_t *a, int64_t lda, int64_t strideA,
              const uint16_t *b, int64_t ldb, int64_t strideB, void *c,
              DType cType, int64_t ldc, int64_t strideC, bool accumulate) {
  if (!nativeBF16GemmAvailable() ||
      (cType != DType::BF16 && cType != DType::F32))
    return false;
  if (batches <= 0 || m <= 0 || n <= 0 || k <= 0)
    return false; // the callers' empty cases, which have nothing to gain
  ThreadPool *pool = currentPool();
  int threads = availability().threaded && pool ? pool->size() : 1;
  Key key{transA,  transB, batches, m,     n,       k,
          lda,     strideA, ldb,    strideB, ldc, strideC, cType, threads,
          accumulate};
  // oneDNN sizes its parallel regions (at creation and at execution) by the
  // calling thread's OpenMP count.
  omp_set_num_threads(threads);
  const Entry &entry = entryFor(key);
  if (!entry.supported)
    return false;
  thread_local std::vector<uint8_t> scratch;
  size_t scratchBytes = entry.pd.scratchpad_desc().get_size();
  if (scratch.size() < scratchBytes)
    scratch.resize(scratchBytes);
  dnnl::engine &eng = engine();
  try {
    dnnl::memory aMem(entry.pd.src_desc(), eng, const_cast<uint16_t *>(a));
    dnnl::memory bMem(entry.pd.weights_desc(), eng, const_cast<uint16_t *>(b));
    dnnl::memory cMem(entry.pd.dst_desc(), eng, c);
    dnnl::memory scratchMem(entry.pd.scratchpad_desc(), eng,
                            scratchBytes ? scratch.data() : nullptr);
    dnnl::stream stream(eng);
    entry.primitive.execute(stream, {{DNNL_ARG_SRC, aMem},
                                     {DNNL_ARG_WEIGHTS, bMem},
                                     {DNNL_ARG_DST, cMem},
                                     {DNNL_ARG_SCRATCHPAD, scratchMem}});
    stream.wait();
  } catch (const dnnl::error &e) {
    // The output may be partly written: an error, not a fallback.
    throw Error(std::string("einsum: oneDNN's bf16 matmul (") + entry.impl +
                ") failed: " + e.what());
  }
  return true;
}

#else // !PARTITA_HAVE_ONEDNN

bool nativeBF16GemmAvailable() { return false; }

const std::string &describeNativeBF16Gemm() {
  static const std::string description =
      "widened to f32 (OpenBLAS sgemm): this build has no oneDNN";
  return description;
}

bool gemmBF16(bool, bool, int64_t, int64_t, int64_t, int64_t, const uint16_t *,
              int64_t, int64_t, const uint16_t *, int64_t, int64_t, void *,
              DType, int64_t, int64_t, bool) {
  return false;
}

#endif // PARTITA_HAVE_ONEDNN

} // namespace partita::runtime::cpu
