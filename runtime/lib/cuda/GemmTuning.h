//===- GemmTuning.h - choosing among cuBLASLt's GEMM algorithms -*- C++ -*-===//
//
// `partita run --gemm-autotune`: for each GEMM shape the real device layer
// (CudaApi.cpp) asks cuBLASLt's heuristic for several algorithms instead of
// its first, times each on the device and keeps one. What to keep and how
// to say it are decided here, apart from CUDA, so they are tested without a
// GPU.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CUDA_GEMMTUNING_H
#define PARTITA_RUNTIME_LIB_CUDA_GEMMTUNING_H

#include <string>
#include <vector>

namespace partita::runtime::gpu {

/// Candidates asked of cuBLASLt's heuristic per shape when tuning.
constexpr int kGemmTuneCandidates = 8;

/// Timed runs of each candidate (after one untimed run).
constexpr int kGemmTuneRuns = 3;

/// The candidate to keep, given each one's measured milliseconds per call
/// in the heuristic's order (negative: it could not run): the fastest,
/// unless it is less than `margin` (relative) faster than the heuristic's
/// first, which then stays, so that timing noise does not trade the
/// heuristic's choice for nothing. -1 when none ran.
int chooseGemmAlgorithm(const std::vector<double> &ms, double margin = 0.03);

/// One line for the log: the shape, how many candidates ran, the
/// heuristic's first and the kept one with their times, e.g. "f32 GEMM m
/// 16384 n 768 k 768: 6 of 8 algorithms ran; heuristic's first 0.512 ms,
/// kept #3 0.468 ms (1.09x)".
std::string describeGemmTuning(const std::string &shape,
                               const std::vector<double> &ms, int kept);

} // namespace partita::runtime::gpu

#endif // PARTITA_RUNTIME_LIB_CUDA_GEMMTUNING_H
