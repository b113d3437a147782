//===- CpuKernelsBench.cpp - memory-pass kernels vs memcpy ----------------===//
//
// The kernels of a GPT train step that are not GEMMs each make one pass or
// a few over activations or parameters. For the shapes of the issue-16 GPT
// (batch 8 x seq 128 = 1024 rows, hidden 256, MLP 1024; AdamW over 1M
// parameters), times each through the cpu backend and, side by side in
// the same run, memcpy moving the same number of bytes (half read, half
// written), and prints the kernel's bytes per second as a ratio to
// memcpy's: near 1 the kernel runs at the copy rate of this cache level,
// well below 1 it is bound by its arithmetic. The attention kernels
// (causal, 4 heads of 64) are timed too, for their time only: their QK^T,
// PV and gradient products run through BLAS inside them. Threads:
// PARTITA_BENCH_THREADS (default 1; the intra-op pool's size).
//
//===----------------------------------------------------------------------===//

#include "../common/CpuBench.h"
#include "partita/runtime/Backend.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace partita::runtime;
using partita::bench::benchBackend;
using partita::bench::benchThreads;
using partita::bench::randomF32;

namespace {

constexpr int64_t kRows = 1024, kHidden = 256, kFfn = 1024,
                  kParams = 1 << 20;

/// One kernel call with its tensors, and the bytes it reads and writes.
struct Case {
  std::string name;
  std::vector<Tensor> tensors; // kept alive for the views in `call`
  KernelCall call;
  double bytes = 0;
  /// GEMMs run inside: no memcpy peer, the time alone.
  bool gemms = false;
};

Case makeCase(const std::string &name) {
  Case c;
  c.name = name;
  auto add = [&](Tensor t) {
    c.tensors.push_back(std::move(t));
    return c.tensors.back().view();
  };
  c.tensors.reserve(8);
  KernelCall &k = c.call;
  if (name == "layer_norm") {
    k.kind = KernelKind::LayerNorm;
    k.inputs = {add(randomF32({kRows, kHidden}, 1)),
                add(randomF32({kHidden}, 2)),
                add(randomF32({kHidden}, 3))};
    k.outputs = {add(Tensor(DType::F32, {kRows, kHidden}))};
    c.bytes = 2.0 * kRows * kHidden * 4;
  } else if (name == "layer_norm_grad") {
    k.kind = KernelKind::LayerNormGrad;
    k.inputs = {add(randomF32({kRows, kHidden}, 1)),
                add(randomF32({kHidden}, 2)),
                add(randomF32({kRows, kHidden}, 3))};
    k.outputs = {add(Tensor(DType::F32, {kRows, kHidden}))};
    c.bytes = 3.0 * kRows * kHidden * 4;
  } else if (name == "layer_norm_gamma_grad") {
    k.kind = KernelKind::LayerNormGammaGrad;
    k.inputs = {add(randomF32({kRows, kHidden}, 1)),
                add(randomF32({kRows, kHidden}, 3))};
    k.outputs = {add(Tensor(DType::F32, {kHidden}))};
    c.bytes = 2.0 * kRows * kHidden * 4;
  } else if (name == "gelu") {
    k.kind = KernelKind::Gelu;
    k.attrs.tanh = true;
    k.inputs = {add(randomF32({kRows, kFfn}, 1, -4, 4))};
    k.outputs = {add(Tensor(DType::F32, {kRows, kFfn}))};
    c.bytes = 2.0 * kRows * kFfn * 4;
  } else if (name == "gelu_grad") {
    k.kind = KernelKind::GeluGrad;
    k.attrs.tanh = true;
    k.inputs = {add(randomF32({kRows, kFfn}, 1, -4, 4)),
                add(randomF32({kRows, kFfn}, 2))};
    k.outputs = {add(Tensor(DType::F32, {kRows, kFfn}))};
    c.bytes = 3.0 * kRows * kFfn * 4;
  } else if (name == "reduce_sum_rows") {
    // A bias gradient: the column sums of [rows, ffn].
    k.kind = KernelKind::ReduceSum;
    k.attrs.dims = {0};
    k.inputs = {add(randomF32({kRows, kFfn}, 1))};
    k.outputs = {add(Tensor(DType::F32, {kFfn}))};
    c.bytes = 1.0 * kRows * kFfn * 4;
  } else if (name == "add") {
    k.kind = KernelKind::Add;
    k.inputs = {add(randomF32({kRows, kHidden}, 1)),
                add(randomF32({kRows, kHidden}, 2))};
    k.outputs = {add(Tensor(DType::F32, {kRows, kHidden}))};
    c.bytes = 3.0 * kRows * kHidden * 4;
  } else if (name == "adamw") {
    // In place, as a donated update runs: p, m, v read and written, g read.
    k.kind = KernelKind::AdamW;
    k.attrs.lr = 1e-3;
    k.attrs.weightDecay = 0.01;
    TensorView p = add(randomF32({kParams}, 1)),
               g = add(randomF32({kParams}, 2)),
               m = add(randomF32({kParams}, 3, -0.01f, 0.01f)),
               v = add(randomF32({kParams}, 4, 0, 0.01f));
    Tensor step(DType::F32, {});
    step.data<float>()[0] = 10;
    k.inputs = {p, g, m, v, add(std::move(step))};
    k.outputs = {p, m, v};
    c.bytes = 7.0 * kParams * 4;
  } else if (name == "attention" || name == "attention_grad") {
    // [batch 8, seq 128, heads 4, head_dim 64]: q, k, v (and dy) read, the
    // output (dq, dk, dv) written.
    std::vector<int64_t> shape{8, 128, 4, kHidden / 4};
    int64_t elements = kRows * kHidden;
    k.attrs.causal = true;
    k.inputs = {add(randomF32(shape, 1)), add(randomF32(shape, 2)),
                add(randomF32(shape, 3))};
    if (name == "attention") {
      k.kind = KernelKind::Attention;
      k.outputs = {add(Tensor(DType::F32, shape))};
      c.bytes = 4.0 * elements * 4;
    } else {
      k.kind = KernelKind::AttentionGrad;
      k.attrs.wrt = "qkv";
      k.inputs.push_back(add(randomF32(shape, 4)));
      k.outputs = {add(Tensor(DType::F32, shape)),
                   add(Tensor(DType::F32, shape)),
                   add(Tensor(DType::F32, shape))};
      c.bytes = 7.0 * elements * 4;
    }
    c.gemms = true;
  }
  return c;
}

const char *const kCases[] = {"layer_norm",      "layer_norm_grad",
                              "layer_norm_gamma_grad",
                              "gelu",            "gelu_grad",
                              "reduce_sum_rows", "add",
                              "adamw",           "attention",
                              "attention_grad"};

void benchKernel(benchmark::State &state, const std::string &name) {
  Case c = makeCase(name);
  for (auto _ : state) {
    benchBackend().run(c.call);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(c.bytes) * state.iterations());
}

/// memcpy of bytes / 2 from one buffer to another: the same bytes moved.
void benchMemcpy(benchmark::State &state, double bytes) {
  size_t half = size_t(bytes / 2);
  std::vector<char> from(half, 1), to(half, 0);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), half);
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(2 * half) * state.iterations());
}

/// The console output, plus bytes per second per benchmark for the table.
class RatioReporter : public benchmark::ConsoleReporter {
public:
  std::map<std::string, double> rate;
  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred ||
          run.real_accumulated_time <= 0)
        continue;
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) {
        std::string name = run.benchmark_name();
        rate[name.substr(0, name.find("/real_time"))] = it->second;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  std::map<std::string, double> bytes;
  std::map<std::string, bool> gemms;
  for (const char *name : kCases) {
    Case c = makeCase(name);
    bytes[name] = c.bytes;
    gemms[name] = c.gemms;
    benchmark::RegisterBenchmark((std::string("kernel/") + name).c_str(),
                                 benchKernel, std::string(name))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    if (c.gemms)
      continue;
    benchmark::RegisterBenchmark((std::string("memcpy/") + name).c_str(),
                                 benchMemcpy, bytes[name])
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nintra-op threads: %d; rows %lld, hidden %lld, MLP %lld, "
              "AdamW %lld parameters\n",
              benchThreads(), (long long)kRows, (long long)kHidden,
              (long long)kFfn, (long long)kParams);
  std::printf("%-22s %10s %12s %12s %8s %10s\n", "kernel", "MB moved",
              "kernel GB/s", "memcpy GB/s", "ratio", "us a call");
  for (const char *name : kCases) {
    auto k = reporter.rate.find(std::string("kernel/") + name);
    auto m = reporter.rate.find(std::string("memcpy/") + name);
    if (k == reporter.rate.end())
      continue; // filtered out
    double us = bytes[name] / k->second * 1e6;
    if (gemms[name]) {
      std::printf("%-22s %10.2f %12s %12s %8s %10.1f  (GEMMs inside)\n", name,
                  bytes[name] / 1e6, "-", "-", "-", us);
      continue;
    }
    if (m == reporter.rate.end())
      continue;
    std::printf("%-22s %10.2f %12.1f %12.1f %8.3f %10.1f\n", name,
                bytes[name] / 1e6, k->second / 1e9, m->second / 1e9,
                k->second / m->second, us);
  }
  benchmark::Shutdown();
  return 0;
}
