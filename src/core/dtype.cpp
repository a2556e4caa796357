#include "kiln/core/dtype.h"

#include <cmath>
#include <limits>
#include <ostream>

#include "kiln/core/error.h"

#include "kiln/core/scalar.h"

namespace kiln {

namespace {
constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    {"bool", 1, DTypeCategory::Bool},        {"int32", 4, DTypeCategory::Integral},
    {"int64", 8, DTypeCategory::Integral},   {"float32", 4, DTypeCategory::Floating},
    {"float64", 8, DTypeCategory::Floating},
};
// Rank within the promotion lattice (a total order for the dtypes we have).
constexpr int kRank[kNumDTypes] = {0, 1, 2, 3, 4};
}  // namespace

const DTypeInfo& dtype_info(DType dt) { return kDTypeInfo[static_cast<int>(dt)]; }
std::string_view dtype_name(DType dt) { return dtype_info(dt).name; }
std::ostream& operator<<(std::ostream& os, DType dt) { return os << dtype_name(dt); }

DType promote_types(DType a, DType b) {
  return kRank[static_cast<int>(a)] >= kRank[static_cast<int>(b)] ? a : b;
}

bool can_cast(DType from, DType to) {
  return static_cast<int>(category(from)) <= static_cast<int>(category(to));
}

void check_scalar_fits(const Scalar& value, DType dtype, const char* op) {
  bool fits = true;
  switch (dtype) {
    case DType::Bool:
    case DType::Float64:
      break;
    case DType::Float32:
      // As PyTorch: NaN and infinities convert; a finite double beyond float's range does not.
      if (value.is_floating()) {
        const double v = value.to_double();
        fits = !std::isfinite(v) || std::fabs(v) <= std::numeric_limits<float>::max();
      }
      break;
    case DType::Int32:
    case DType::Int64: {
      const int64_t lo = dtype == DType::Int32 ? std::numeric_limits<int32_t>::min()
                                               : std::numeric_limits<int64_t>::min();
      const int64_t hi = dtype == DType::Int32 ? std::numeric_limits<int32_t>::max()
                                               : std::numeric_limits<int64_t>::max();
      if (value.is_floating()) {
        // Truncation toward zero must land in [lo, hi]; -2^63 is exact in double, 2^63 is not
        // representable in int64. NaN fails both comparisons.
        const double v = std::trunc(value.to_double());
        fits = v >= static_cast<double>(lo) &&
               (dtype == DType::Int32 ? v <= static_cast<double>(hi) : v < 0x1p63);
      } else if (value.is_integral()) {
        fits = value.to_int() >= lo && value.to_int() <= hi;
      }
      break;
    }
  }
  KILN_CHECK(fits, ValueError, op, ": value ", value, " cannot be converted to type ", dtype,
             " without overflow");
}

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.to<bool>() ? "true" : "false");
  if (s.is_integral()) return os << s.to<int64_t>();
  return os << s.to<double>();
}

}  // namespace kiln
