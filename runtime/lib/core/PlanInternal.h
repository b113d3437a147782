//===- PlanInternal.h - the parsed plan behind PlanFile ---------*- C++ -*-===//

#ifndef PARTITA_RUNTIME_LIB_CORE_PLANINTERNAL_H
#define PARTITA_RUNTIME_LIB_CORE_PLANINTERNAL_H

#include "partita/runtime/Executor.h"
#include "runtime/plan/PlanChecksum.h"
#include "runtime/plan/plan.pb.h"

#include <map>
#include <optional>
#include <string>

namespace partita::runtime {

/// Plan.trailer of every complete plan ("PLAN" little-endian).
constexpr uint32_t kPlanTrailer = plan::kPlanTrailer;

/// Every arena offset is a multiple of this (the compiler's memory plan
/// places buffers so, and Device memory is as aligned): kernels may then
/// read any dtype, and vectors of it, from an arena buffer.
constexpr int64_t kArenaAlignment = 64;

DType toDType(int dtype);

/// The kernel kind of plan::Kernel::Kind `kind`; nullopt for
/// KIND_UNSPECIFIED or a number this runtime does not know.
std::optional<KernelKind> kernelKindFromPlan(int kind);

/// Why this runtime cannot run `plan`'s pipeline schedule ("" when it can,
/// or when there is none), prefixed by `what` (the plan's file). Loading
/// checks only what any schedule must be, so explain can draw the rest.
std::string pipelineUnrunnable(const plan::Plan &plan, const std::string &what);

struct PlanFile::Impl {
  plan::Plan proto;
  std::map<std::string, int> programs;
  std::map<std::string, int64_t> axisSizes;
  int64_t numDevices = 1;
  /// pipelineUnrunnable() of the loaded plan, thrown by the Executor.
  std::string pipelineUnrunnable;
  const plan::Program &program(const std::string &name) const;
  /// The programs a step of `name` is made of: for program 0 of a
  /// pipelined plan (isPipelined) every stage's once-per-step program, in
  /// stage order (their results, in that order, are the step's results);
  /// else the program alone.
  std::vector<const plan::Program *> stepPrograms(const std::string &name) const;
};

/// The mesh position of device `rank`: its index in Mesh.devices, or the
/// rank itself when the mesh gives no device order.
int64_t meshPosition(const plan::Mesh &mesh, int rank);
/// A mesh position's coordinate along each axis (row-major, the first axis
/// major).
std::map<std::string, int64_t> meshCoordinates(const plan::Mesh &mesh,
                                               int64_t position);

/// Whether `plan` is pipelined: its schedule's stages have backward
/// programs of their own (dist-stage-split). A microbatched one-rank step
/// whose forward program runs the backward too is not.
bool isPipelined(const plan::Plan &plan);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_LIB_CORE_PLANINTERNAL_H
