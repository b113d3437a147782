//===- GeneratedInputs.h - counter-based program inputs ---------*- C++ -*-===//
//
// `partita run` (without --inputs) and `partita gradcheck` feed programs
// generated values: the runtime's counter-based initializer
// (runtime::initialValue) under a key per input, so every rank and every run
// sees the same numbers.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TOOLS_PARTITA_GENERATEDINPUTS_H
#define PARTITA_TOOLS_PARTITA_GENERATEDINPUTS_H

#include "partita/runtime/Executor.h"

#include <cstdint>
#include <string>

namespace partita::driver {

/// A tensor of `v`'s dtype and global shape: floats uniform in [-1, 1),
/// integers uniform in [0, v.valueBound), element i from
/// initialValue(seed, key, i). Throws runtime::Error "cannot generate
/// <what>: the plan gives no bound for its values<noBound>" for an integer
/// without a bound, and "cannot generate <what> of this dtype<otherDType>"
/// for a dtype it does not fill (f16, bf16, i1).
runtime::Tensor generateUniform(const runtime::ProgramValue &v, uint64_t seed,
                                const std::string &key, const std::string &what,
                                const std::string &noBound,
                                const std::string &otherDType);

} // namespace partita::driver

#endif // PARTITA_TOOLS_PARTITA_GENERATEDINPUTS_H
