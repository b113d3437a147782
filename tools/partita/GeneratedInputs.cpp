//===- GeneratedInputs.cpp - counter-based program inputs -----------------===//

#include "tools/partita/GeneratedInputs.h"

#include <algorithm>

namespace partita::driver {

namespace rt = partita::runtime;

rt::Tensor generateUniform(const rt::ProgramValue &v, uint64_t seed,
                           const std::string &key, const std::string &what,
                           const std::string &noBound,
                           const std::string &otherDType) {
  rt::Tensor t(v.dtype, v.globalShape);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    double u = rt::initialValue(seed, key, i, /*UNIFORM*/ 1, 0.0, 1.0);
    switch (v.dtype) {
    case rt::DType::F32:
      t.data<float>()[i] = float(2 * u - 1);
      break;
    case rt::DType::F64:
      t.data<double>()[i] = 2 * u - 1;
      break;
    case rt::DType::I32:
    case rt::DType::I64: {
      if (v.valueBound <= 0)
        throw rt::Error("cannot generate " + what +
                        ": the plan gives no bound for its values" + noBound);
      int64_t value =
          std::min<int64_t>(int64_t(u * v.valueBound), v.valueBound - 1);
      if (v.dtype == rt::DType::I32)
        t.data<int32_t>()[i] = int32_t(value);
      else
        t.data<int64_t>()[i] = value;
      break;
    }
    default:
      throw rt::Error("cannot generate " + what + " of this dtype" +
                      otherDType);
    }
  }
  return t;
}

} // namespace partita::driver
