//===- CpuGemmBench.cpp - einsum kernel vs raw cblas_sgemm ----------------===//
//
// For GEMM-heavy einsums of a transformer layer (projections, MLP, logits,
// weight gradients, attention scores), times the cpu backend's einsum
// kernel and a raw cblas_sgemm loop on operands already laid out for it,
// side by side in one run, and prints einsum GFLOP/s as a ratio to sgemm's.
// A ratio near 1 means the kernel adds no copies; below 1 measures its
// permutations (e.g. the scores einsum, whose heads sit between seq and
// head_dim). BLAS threads: PARTITA_BENCH_THREADS (default 1), the same for
// both sides.
//
//===----------------------------------------------------------------------===//

#include "../common/CpuBench.h"
#include "partita/runtime/Backend.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace partita::runtime;
using partita::bench::benchBackend;
using partita::bench::benchThreads;
using partita::bench::randomF32;

namespace {

struct Shape {
  const char *name;
  const char *spec;
  std::vector<int64_t> a, b, c; // einsum operand and result shapes
  // The equivalent raw GEMMs: `batch` row-major calls of op(A)[m,k] op(B)[k,n].
  int64_t batch, m, n, k;
  bool transA, transB;
};

const Shape kShapes[] = {
    // B=4, S=256, H=512, F=2048, V=4096, n=8 heads, d=64.
    {"mlp-up",
     "bsh,hf->bsf",
     {4, 256, 512},
     {512, 2048},
     {4, 256, 2048},
     1,
     1024,
     2048,
     512,
     false,
     false},
    {"mlp-down",
     "bsf,fh->bsh",
     {4, 256, 2048},
     {2048, 512},
     {4, 256, 512},
     1,
     1024,
     512,
     2048,
     false,
     false},
    {"qkv-proj",
     "bsh,hnd->bsnd",
     {4, 256, 512},
     {512, 8, 64},
     {4, 256, 8, 64},
     1,
     1024,
     512,
     512,
     false,
     false},
    {"attn-out",
     "bsnd,ndh->bsh",
     {4, 256, 8, 64},
     {8, 64, 512},
     {4, 256, 512},
     1,
     1024,
     512,
     512,
     false,
     false},
    {"logits",
     "bsh,vh->bsv",
     {4, 256, 512},
     {4096, 512},
     {4, 256, 4096},
     1,
     1024,
     4096,
     512,
     false,
     true},
    {"weight-grad",
     "bsh,bsf->hf",
     {4, 256, 512},
     {4, 256, 2048},
     {512, 2048},
     1,
     512,
     2048,
     1024,
     true,
     false},
    {"square",
     "ij,jk->ik",
     {1024, 1024},
     {1024, 1024},
     {1024, 1024},
     1,
     1024,
     1024,
     1024,
     false,
     false},
    // Raw side: q and k already [b, h, s, d]; the einsum permutes both.
    {"scores",
     "bqhd,bkhd->bhqk",
     {4, 256, 8, 64},
     {4, 256, 8, 64},
     {4, 8, 256, 256},
     32,
     256,
     256,
     64,
     false,
     true},
};

double flopsOf(const Shape &s) { return 2.0 * s.batch * s.m * s.n * s.k; }

void benchEinsum(benchmark::State &state, const Shape &s) {
  Tensor a = randomF32(s.a, 1), b = randomF32(s.b, 2);
  Tensor c(DType::F32, s.c);
  KernelCall call;
  call.kind = KernelKind::Einsum;
  call.attrs.spec = s.spec;
  call.inputs = {a.view(), b.view()};
  call.outputs = {c.view()};
  for (auto _ : state) {
    benchBackend().run(call);
    benchmark::DoNotOptimize(c.data<float>());
    benchmark::ClobberMemory();
  }
}

void benchSgemm(benchmark::State &state, const Shape &s) {
  benchBackend(); // same BLAS thread count as the einsum side
  Tensor a = randomF32({s.batch, s.m * s.k}, 1);
  Tensor b = randomF32({s.batch, s.k * s.n}, 2);
  Tensor c(DType::F32, {s.batch, s.m * s.n});
  int lda = s.transA ? s.m : s.k, ldb = s.transB ? s.k : s.n;
  for (auto _ : state) {
    for (int64_t i = 0; i < s.batch; ++i)
      cblas_sgemm(CblasRowMajor, s.transA ? CblasTrans : CblasNoTrans,
                  s.transB ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                  a.data<float>() + i * s.m * s.k, lda,
                  b.data<float>() + i * s.k * s.n, ldb, 0.0f,
                  c.data<float>() + i * s.m * s.n, s.n);
    benchmark::DoNotOptimize(c.data<float>());
    benchmark::ClobberMemory();
  }
}

/// The console output, plus GFLOP/s per benchmark for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
public:
  std::map<std::string, double> gflops;
  std::map<std::string, double> flopsByName;

  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred ||
          run.real_accumulated_time <= 0)
        continue;
      std::string name = run.benchmark_name();
      name = name.substr(0, name.find("/real_time"));
      auto it = flopsByName.find(name);
      if (it != flopsByName.end())
        gflops[name] =
            it->second * run.iterations / run.real_accumulated_time / 1e9;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

} // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  for (const Shape &s : kShapes) {
    std::string e = std::string("einsum/") + s.name;
    std::string g = std::string("sgemm/") + s.name;
    reporter.flopsByName[e] = reporter.flopsByName[g] = flopsOf(s);
    benchmark::RegisterBenchmark(e.c_str(), benchEinsum, s)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(g.c_str(), benchSgemm, s)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nBLAS threads: %d\n", benchThreads());
  std::printf("%-12s %-18s %14s %14s %8s\n", "shape", "spec", "einsum GFLOP/s",
              "sgemm GFLOP/s", "ratio");
  for (const Shape &s : kShapes) {
    auto e = reporter.gflops.find(std::string("einsum/") + s.name);
    auto g = reporter.gflops.find(std::string("sgemm/") + s.name);
    if (e == reporter.gflops.end() || g == reporter.gflops.end())
      continue; // filtered out
    std::printf("%-12s %-18s %14.1f %14.1f %8.3f\n", s.name, s.spec, e->second,
                g->second, e->second / g->second);
  }
  benchmark::Shutdown();
  return 0;
}
