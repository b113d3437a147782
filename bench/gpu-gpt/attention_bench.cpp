//===- attention_bench.cpp - the cuda backend's attention, timed ----------===//
//
// Times attention and attention_grad (dq, dk, dv one a call, then all three
// in one "qkv" call; then the forward writing its lse and the qkv call
// reading the saved output and lse, what a compiled train step runs) of the
// cuda backend at the GPT benchmark shape (batch
// 16, seq 1024, 12 heads, head_dim 64, causal, f32) and prints milliseconds
// and TFLOP/s (GFLOP/s on the cpu backend) per call, and the qkv call's time over the three single
// calls'. Built by the runtime CMake when CUDA is on
// (build-rt/bin/partita-attention-bench):
//
//   partita-attention-bench [--batch B] [--seq S] [--heads H] [--kv-heads K]
//       [--dim D] [--no-causal] [--f64] [--iters N] [--block T] [--check]
//       [--emulate [--banks]] [--attention KIND] [--tf32] [--cpu THREADS]
//
// --banks (with --emulate) counts the kernels' shared-memory requests and
// bank wavefronts in the block emulator (partita-run --emulate-banks) and
// prints them per kernel at the end: a layout's bank conflicts at the
// benchmark's shapes and block size, without a GPU.
// --cpu THREADS times the cpu backend instead (createCpuBackend(THREADS):
// OpenBLAS and the intra-op pool at that many threads), no GPU needed.
//
// Timing: after a warm-up call, N calls are queued back to back on the
// backend's compute stream and the host waits for the stream: wall time /
// N (the launch overhead of a few microseconds is inside it).
// FLOPs count 2 per multiply-add over the (query, key) pairs a causal mask
// keeps:
//   executed: forward 4 D pairs; dq and dk 10 D pairs (a statistics pass
//   of 4 D, then s, dP and the product); dv 6 D pairs (statistics without
//   the value product: 2 D, then s and dv); qkv counts the useful 10 D, and
//   so does "qkv saved" (on tensor cores it skips the statistics pass);
//   the step's "useful" rate counts forward 4 D and backward 10 D pairs
//   (what one fused flash-attention backward needs) over the time of the
//   forward and the backward (three single calls, or the one qkv call).
// --check runs the cpu backend on the same inputs (slow at full size) and
// prints max |gpu - cpu| / max |cpu| per output.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Backend.h"
#include "partita/runtime/CudaBackend.h"
#include "partita/runtime/Train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace partita::runtime;

namespace {

struct Options {
  int64_t batch = 16, seq = 1024, heads = 12, kvHeads = 0, dim = 64;
  bool causal = true, f64 = false, check = false, emulate = false;
  bool banks = false;
  CudaAttention attention = CudaAttention::Gemm;
  bool tf32 = false;
  int iters = 20, block = 256;
  int cpuThreads = 0; // > 0: time the cpu backend at that many threads
};

[[noreturn]] void usage(const char *why) {
  std::fprintf(stderr,
               "partita-attention-bench: %s\nusage: partita-attention-bench "
               "[--batch B] [--seq S] [--heads H] [--kv-heads K] [--dim D] "
               "[--no-causal] [--f64] [--iters N] [--block T] [--check] "
               "[--emulate [--banks]] [--attention KIND] [--tf32] [--cpu THREADS]\n"
               "  --attention gemm|simt|tensor: as partita run's (default "
               "gemm: GEMMs and the row kernel)\n"
               "  --cpu THREADS: the cpu backend at THREADS threads\n",
               why);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> int64_t {
      if (i + 1 >= argc)
        usage(("missing value after " + a).c_str());
      char *end = nullptr;
      long long v = std::strtoll(argv[++i], &end, 10);
      if (*end || v < 1)
        usage(("bad value for " + a).c_str());
      return v;
    };
    if (a == "--batch") o.batch = value();
    else if (a == "--seq") o.seq = value();
    else if (a == "--heads") o.heads = value();
    else if (a == "--kv-heads") o.kvHeads = value();
    else if (a == "--dim") o.dim = value();
    else if (a == "--iters") o.iters = int(value());
    else if (a == "--block") o.block = int(value());
    else if (a == "--attention") {
      if (i + 1 >= argc)
        usage("missing value after --attention");
      std::optional<CudaAttention> kind = parseCudaAttention(argv[++i]);
      if (!kind)
        usage("--attention takes gemm, simt or tensor");
      o.attention = *kind;
    }
    else if (a == "--tf32") o.tf32 = true;
    else if (a == "--no-causal") o.causal = false;
    else if (a == "--f64") o.f64 = true;
    else if (a == "--check") o.check = true;
    else if (a == "--emulate") o.emulate = true;
    else if (a == "--banks") o.banks = true;
    else if (a == "--cpu") o.cpuThreads = int(value());
    else usage(("unknown argument " + a).c_str());
  }
  if (o.kvHeads == 0)
    o.kvHeads = o.heads;
  return o;
}

/// A kernel call's inputs and outputs in a backend's device memory.
struct DeviceCall {
  Device &dev;
  std::vector<DeviceBuffer> buffers;
  KernelCall call;
  DeviceCall(Backend &backend, KernelKind kind, const KernelAttrs &attrs,
             const std::vector<Tensor> &inputs,
             const std::vector<const Tensor *> &outputsLike)
      : dev(backend.device()), call{kind, attrs, {}, {}} {
    for (const Tensor &t : inputs) {
      TensorView view{nullptr, t.getDType(), t.getShape()};
      buffers.push_back(dev.allocateBuffer(view.numBytes()));
      view.data = buffers.back().get();
      dev.copyFromHost(view.data, t.data<unsigned char>(), view.numBytes(),
                       dev.computeStream());
      call.inputs.push_back(view);
    }
    for (const Tensor *like : outputsLike) {
      TensorView out{nullptr, like->getDType(), like->getShape()};
      buffers.push_back(dev.allocateBuffer(out.numBytes()));
      out.data = buffers.back().get();
      call.outputs.push_back(out);
    }
    dev.computeStream().synchronize();
  }
  Tensor result(size_t o) {
    const TensorView &v = call.outputs[o];
    Tensor t(v.dtype, v.shape);
    dev.copyToHost(t.data<unsigned char>(), v.data, v.numBytes(),
                   dev.computeStream());
    dev.computeStream().synchronize();
    return t;
  }
};

Tensor random(DType dtype, std::vector<int64_t> shape, uint64_t seed,
              double lo, double hi) {
  Tensor t(dtype, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (dtype == DType::F32)
      t.data<float>()[i] = float(dist(rng));
    else
      t.data<double>()[i] = dist(rng);
  }
  return t;
}

double at(const Tensor &t, int64_t i) {
  return t.getDType() == DType::F32 ? double(t.data<float>()[i])
                                    : t.data<double>()[i];
}

double relativeDifference(const Tensor &a, const Tensor &b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numElements(); ++i) {
    diff = std::max(diff, std::fabs(at(a, i) - at(b, i)));
    scale = std::max(scale, std::fabs(at(b, i)));
  }
  return scale > 0 ? diff / scale : diff;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  if (o.banks && (!o.emulate || o.cpuThreads > 0))
    usage("--banks needs --emulate (the block emulator counts them)");
  try {
    if (!o.emulate && o.cpuThreads == 0) {
      std::string error = cudaDeviceError();
      if (!error.empty()) {
        std::fprintf(stderr, "partita-attention-bench: no usable CUDA device: "
                             "%s\n", error.c_str());
        return 1;
      }
    }
    CudaBackendOptions options;
    options.emulate = o.emulate;
    if (o.banks)
      options.bankReport = std::make_shared<SharedBankReport>();
    options.blockSize = o.block;
    options.attention = o.attention;
    options.tf32 = o.tf32;
    std::unique_ptr<Backend> gpu = o.cpuThreads > 0
                                       ? createCpuBackend(o.cpuThreads)
                                       : createCudaBackend(options);
    DType dtype = o.f64 ? DType::F64 : DType::F32;
    std::vector<int64_t> qShape{o.batch, o.seq, o.heads, o.dim};
    std::vector<int64_t> kvShape{o.batch, o.seq, o.kvHeads, o.dim};
    Tensor q = random(dtype, qShape, 1, -1, 1), k = random(dtype, kvShape, 2, -1, 1),
           v = random(dtype, kvShape, 3, -1, 1), dy = random(dtype, qShape, 4, -1, 1);
    double pairs = o.causal ? double(o.seq) * double(o.seq + 1) / 2
                            : double(o.seq) * double(o.seq);
    double unit = double(o.batch) * double(o.heads) * pairs * double(o.dim);
    if (o.cpuThreads > 0)
      std::printf("path: the cpu backend, %d thread(s)\n", o.cpuThreads);
    else
      std::printf("path: %s%s\n",
                  o.attention == CudaAttention::Tensor
                      ? "flash-style kernels on tensor cores"
                  : o.attention == CudaAttention::Simt
                      ? "flash-style kernels on CUDA cores"
                      : "GEMMs and the row kernel",
                  o.tf32 ? ", TF32" : "");
    std::printf("attention %s [batch %lld, seq %lld, heads %lld/%lld, dim "
                "%lld]%s, block %d, %s, %d iterations\n",
                o.f64 ? "f64" : "f32", (long long)o.batch, (long long)o.seq,
                (long long)o.heads, (long long)o.kvHeads, (long long)o.dim,
                o.causal ? " causal" : "", o.block,
                o.cpuThreads > 0 ? "CPU" : o.emulate ? "emulated" : "GPU",
                o.iters);
    struct Job {
      const char *name, *wrt;
      double flops; // executed, in units of D * pairs * batch * heads
      bool saved = false; // forward: also the lse; grad: read o and lse
    } jobs[] = {{"forward", "", 4},       {"dq", "q", 10},
                {"dk", "k", 10},          {"dv", "v", 6},
                {"qkv", "qkv", 10},       {"fwd+lse", "", 4, true},
                {"qkv saved", "qkv", 10, true}};
    std::unique_ptr<Backend> cpu = o.check ? createCpuBackend(0) : nullptr;
    double forward = 0, singles = 0, qkv = 0, forwardLse = 0, qkvSaved = 0;
    // The forward's output and lse, as fwd+lse wrote them, for qkv saved.
    Tensor lseLike(dtype, {o.batch, o.heads, o.seq}), savedO, savedLse;
    // FLOP/s in the unit that reads on the device: GFLOP/s on a CPU.
    double rate = o.cpuThreads > 0 ? 1e9 : 1e12;
    const char *rateName = o.cpuThreads > 0 ? "GFLOP/s" : "TFLOP/s";
    for (const Job &job : jobs) {
      KernelAttrs a;
      a.causal = o.causal;
      a.wrt = job.wrt;
      bool grad = *job.wrt != 0;
      KernelKind kind = grad ? KernelKind::AttentionGrad : KernelKind::Attention;
      std::vector<Tensor> inputs = {q, k, v};
      if (grad)
        inputs.push_back(dy);
      if (grad && job.saved) {
        inputs.push_back(savedO);
        inputs.push_back(savedLse);
      }
      std::vector<const Tensor *> like;
      for (const char *c = job.wrt; *c; ++c)
        like.push_back(*c == 'q' ? &q : &k);
      if (!grad)
        like.push_back(&q);
      if (!grad && job.saved)
        like.push_back(&lseLike);
      DeviceCall call(*gpu, kind, a, inputs, like);
      gpu->run(call.call); // warm-up
      call.dev.computeStream().synchronize();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iters; ++i)
        gpu->run(call.call);
      call.dev.computeStream().synchronize();
      double seconds = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count() /
                       o.iters;
      if (job.saved) {
        (grad ? qkvSaved : forwardLse) += seconds;
        if (!grad) {
          savedO = call.result(0);
          savedLse = call.result(1);
        }
      } else {
        (!grad ? forward : job.wrt[1] ? qkv : singles) += seconds;
      }
      std::printf("  %-8s %9.3f ms  %7.2f %s %s\n", job.name,
                  seconds * 1e3, job.flops * unit / seconds / rate, rateName,
                  job.wrt[0] && job.wrt[1] ? "useful" : "executed");
      if (cpu) {
        DeviceCall ref(*cpu, kind, a, inputs, like);
        cpu->run(ref.call);
        for (size_t r = 0; r < like.size(); ++r)
          std::printf("           check: max |gpu - cpu| / max |cpu| = %.3g"
                      " (output %zu)\n",
                      relativeDifference(call.result(r), ref.result(r)), r);
      }
    }
    std::printf("  qkv / (dq + dk + dv) = %.3f\n", qkv / singles);
    struct Backward {
      const char *what;
      double seconds;
      double forward;
    } backwards[] = {{"dq, dk, dv calls", singles, forward},
                     {"one qkv call", qkv, forward},
                     {"one qkv call reading the forward's o and lse",
                      qkvSaved, forwardLse}};
    for (const Backward &b : backwards)
      std::printf("  step     %9.3f ms  %7.2f %s useful (forward 4 + "
                  "backward 10 D per pair; backward: %s)\n",
                  (b.forward + b.seconds) * 1e3,
                  14 * unit / (b.forward + b.seconds) / rate, rateName,
                  b.what);
    if (options.bankReport)
      std::printf("%s", formatBankReport(*options.bankReport,
                                         "every call above, warm-ups too")
                            .c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "partita-attention-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
