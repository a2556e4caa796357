#include "kiln/core/dtype.h"

#include <ostream>

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

std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_bool()) return os << (s.to<bool>() ? "true" : "false");
  if (s.is_integral()) return os << s.to<int64_t>();
  return os << s.to<double>();
}

}  // namespace kiln
