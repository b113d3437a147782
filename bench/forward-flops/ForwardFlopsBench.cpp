//===- ForwardFlopsBench.cpp - a forward step's FLOP/s vs raw sgemm -------===//
//
// Loads a plan's step program (one rank, unpartitioned, as `partita run`
// runs it: the same Executor and CPU backend), times N forward steps after
// warm-up, and counts the step's FLOPs from its einsum kernels: 2 x the
// product of every index size of the spec (2*M*N*K per GEMM, times any batch
// dims). Then, in the same process and with the same OpenBLAS thread count,
// it times raw cblas_sgemm calls on the same GEMM shapes (row-major
// A[M,K] B[K,N], one call per batch element) and prints both FLOP/s and
// the ratio. The step time includes the non-GEMM kernels (norms, adds,
// softmax, loss) and the einsum kernel's layout copies, so the ratio is the
// share of BLAS's speed the whole step achieves.
//
//   partita-bench-forward-flops PLAN.pb [--steps N] [--threads T]
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Executor.h"
#include "runtime/plan/plan.pb.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace rt = partita::runtime;

namespace {

struct Gemm {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  double flops() const { return 2.0 * batch * m * n * k; }
};

/// The GEMM an einsum "A,B->C" performs: letters in all three are batch,
/// in A and C only M, in B and C only N, in A and B only K.
bool einsumGemm(const std::string &spec, const std::vector<int64_t> &a,
                const std::vector<int64_t> &b, Gemm &gemm, double &flops) {
  size_t comma = spec.find(','), arrow = spec.find("->");
  if (comma == std::string::npos || arrow == std::string::npos)
    return false;
  std::string sa = spec.substr(0, comma),
              sb = spec.substr(comma + 1, arrow - comma - 1),
              sc = spec.substr(arrow + 2);
  if (sa.size() != a.size() || sb.size() != b.size())
    return false;
  std::map<char, int64_t> size;
  for (size_t i = 0; i < sa.size(); ++i)
    size[sa[i]] = a[i];
  for (size_t i = 0; i < sb.size(); ++i)
    size[sb[i]] = b[i];
  flops = 2;
  for (auto &[letter, n] : size)
    flops *= double(n);
  for (auto &[letter, n] : size) {
    bool inA = sa.find(letter) != std::string::npos,
         inB = sb.find(letter) != std::string::npos,
         inC = sc.find(letter) != std::string::npos;
    if (inA && inB && inC)
      gemm.batch *= n;
    else if (inA && inC)
      gemm.m *= n;
    else if (inB && inC)
      gemm.n *= n;
    else if (inA && inB)
      gemm.k *= n;
    else
      gemm.m *= n; // summed in one operand only: counted, folded into M
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  std::string planPath;
  int steps = 10, threads = 1;
  if (const char *env = std::getenv("PARTITA_BENCH_THREADS"))
    threads = std::atoi(env);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (argv[i][0] != '-' && planPath.empty())
      planPath = argv[i];
    else {
      std::fprintf(stderr, "usage: %s PLAN.pb [--steps N] [--threads T]\n",
                   argv[0]);
      return 1;
    }
  }
  if (planPath.empty() || steps < 1 || threads < 1) {
    std::fprintf(stderr, "usage: %s PLAN.pb [--steps N>=1] [--threads T>=1]\n",
                 argv[0]);
    return 1;
  }
  try {
    std::shared_ptr<const rt::PlanFile> plan = rt::PlanFile::load(planPath);
    std::string program = plan->programNames().front();
    if (plan->isPartitioned(program) && plan->numDevices() != 1)
      throw rt::Error("the bench runs one rank; the plan's program is "
                      "partitioned over " +
                      std::to_string(plan->numDevices()) + " devices");
    partita::plan::Plan proto;
    std::ifstream in(planPath, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    const partita::plan::Program *prog = nullptr;
    if (proto.ParseFromString(bytes.str()))
      for (const auto &p : proto.programs())
        if (p.name() == program)
          prog = &p;
    if (!prog)
      throw rt::Error("cannot read the plan file '" + planPath + "' again");

    // FLOPs and GEMM shapes of the step's einsums.
    std::vector<Gemm> gemms;
    double stepFlops = 0;
    for (const auto &inst : prog->instructions()) {
      if (!inst.has_kernel() || inst.kernel().kind() !=
                                    partita::plan::Kernel::EINSUM ||
          inst.kernel().inputs_size() != 2)
        continue;
      const auto &bufA = prog->buffers(inst.kernel().inputs(0));
      const auto &bufB = prog->buffers(inst.kernel().inputs(1));
      std::vector<int64_t> a(bufA.local_shape().begin(), bufA.local_shape().end());
      std::vector<int64_t> b(bufB.local_shape().begin(), bufB.local_shape().end());
      Gemm gemm;
      double flops = 0;
      if (!einsumGemm(inst.kernel().attrs().spec(), a, b, gemm, flops))
        throw rt::Error("cannot read einsum '" + inst.kernel().attrs().spec() +
                        "'");
      gemms.push_back(gemm);
      stepFlops += flops;
      std::printf("einsum %-16s batch=%lld M=%lld N=%lld K=%lld  %.3f GFLOP\n",
                  inst.kernel().attrs().spec().c_str(), (long long)gemm.batch,
                  (long long)gemm.m, (long long)gemm.n, (long long)gemm.k,
                  flops / 1e9);
    }

    // Partita: the executor's forward step.
    auto backend = rt::createCpuBackend(threads);
    rt::Executor exec(plan, program, nullptr, *backend);
    std::vector<rt::Tensor> inputs;
    for (const rt::ProgramValue &v : plan->inputs(program)) {
      rt::Tensor t(v.dtype, v.globalShape);
      for (int64_t i = 0; i < t.numElements(); ++i) {
        if (v.dtype == rt::DType::F32)
          t.data<float>()[i] = float((i * 37 % 101) / 101.0 - 0.5);
        else if (v.dtype == rt::DType::I32)
          t.data<int32_t>()[i] =
              int32_t(v.valueBound > 0 ? i * 7919 % v.valueBound : 0);
        else if (v.dtype == rt::DType::I64)
          t.data<int64_t>()[i] = v.valueBound > 0 ? i * 7919 % v.valueBound : 0;
      }
      inputs.push_back(std::move(t));
    }
    exec.setInputs(inputs);
    // OpenBLAS: the same GEMMs, raw, same thread count (OpenBLAS's own
    // threads; the backend splits its GEMMs over its pool with OpenBLAS on
    // one thread, so the count is set around the raw calls only). The two
    // sides alternate step by step, so a change of load on a shared machine
    // hits both alike.
    std::vector<std::vector<float>> bufs;
    for (const Gemm &g : gemms) {
      bufs.emplace_back(size_t(g.m * g.k), 0.5f);
      bufs.emplace_back(size_t(g.k * g.n), 0.25f);
      bufs.emplace_back(size_t(g.m * g.n), 0.0f);
    }
    using clock = std::chrono::steady_clock;
    std::vector<double> stepTimes, gemmTimes;
    for (int s = 0; s < steps + 2; ++s) {
      auto t0 = clock::now();
      exec.run();
      auto t1 = clock::now();
      openblas_set_num_threads(threads);
      for (size_t i = 0; i < gemms.size(); ++i) {
        const Gemm &g = gemms[i];
        for (int64_t r = 0; r < g.batch; ++r)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.m),
                      int(g.n), int(g.k), 1.0f, bufs[3 * i].data(), int(g.k),
                      bufs[3 * i + 1].data(), int(g.n), 0.0f,
                      bufs[3 * i + 2].data(), int(g.n));
      }
      auto t2 = clock::now();
      openblas_set_num_threads(1);
      if (s >= 2) {
        stepTimes.push_back(std::chrono::duration<double>(t1 - t0).count());
        gemmTimes.push_back(std::chrono::duration<double>(t2 - t1).count());
      }
    }
    double tStep = median(stepTimes), tGemm = median(gemmTimes);
    double partitaRate = stepFlops / tStep, blasRate = stepFlops / tGemm;
    std::printf("threads %d, %d timed steps after 2 warm-up (sides alternating), medians\n",
                threads, steps);
    std::printf("step FLOPs (einsums, 2*M*N*K each): %.3f GFLOP\n",
                stepFlops / 1e9);
    std::printf("partita forward step: %.6f s  %.2f GFLOP/s\n", tStep,
                partitaRate / 1e9);
    std::printf("cblas_sgemm same GEMMs: %.6f s  %.2f GFLOP/s\n", tGemm,
                blasRate / 1e9);
    std::printf("ratio partita/sgemm: %.3f\n", partitaRate / blasRate);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "partita-bench-forward-flops: error: %s\n", e.what());
    return 1;
  }
}
