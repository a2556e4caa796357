// DType: the element types a tensor can hold, their properties, and PyTorch's type promotion.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace kiln {

// Adding a dtype (bfloat16, float16) means: a row here, a row in kDTypeInfo (dtype.cpp), a case
// in KILN_DTYPE_SWITCH_* below, and a C++ type with arithmetic operators; kernels are written as
// templates over the C++ type and pick it up through the dispatch macros.
enum class DType : uint8_t { Bool, Int32, Int64, Float32, Float64 };
inline constexpr int kNumDTypes = 5;

// The order of categories for promotion: bool < integral < floating.
enum class DTypeCategory : uint8_t { Bool = 0, Integral = 1, Floating = 2 };

struct DTypeInfo {
  std::string_view name;  // "float32"
  int itemsize;           // bytes per element
  DTypeCategory category;
};

const DTypeInfo& dtype_info(DType dt);
inline int itemsize(DType dt) {
  constexpr int sizes[kNumDTypes] = {1, 4, 8, 4, 8};
  return sizes[static_cast<int>(dt)];
}
inline DTypeCategory category(DType dt) {
  constexpr DTypeCategory cats[kNumDTypes] = {DTypeCategory::Bool, DTypeCategory::Integral,
                                              DTypeCategory::Integral, DTypeCategory::Floating,
                                              DTypeCategory::Floating};
  return cats[static_cast<int>(dt)];
}
inline bool is_floating(DType dt) { return category(dt) == DTypeCategory::Floating; }
inline bool is_integral(DType dt, bool include_bool = false) {
  return category(dt) == DTypeCategory::Integral || (include_bool && dt == DType::Bool);
}
std::string_view dtype_name(DType dt);
std::ostream& operator<<(std::ostream& os, DType dt);

// The smallest dtype that can hold both (PyTorch's promote_types): bool < int32 < int64 <
// float32 < float64, with any integral + floating -> that floating type.
DType promote_types(DType a, DType b);
// True when a value of `from` may be written into `to` in place (no category demotion).
bool can_cast(DType from, DType to);

// The default floating dtype (float32), used for factories and int -> float promotion (e.g. mean
// of an int tensor is an error, as in PyTorch, but sqrt of an int tensor is float32).
inline constexpr DType kDefaultFloat = DType::Float32;

template <typename T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

}  // namespace kiln

// Switch on a runtime dtype to a generic lambda taking a type tag (not to be confused with op
// dispatch, kiln::dispatch):
//   KILN_DTYPE_SWITCH_ALL(dt, "op", [&]<typename T>() { ... });
// Each macro lists the dtypes it accepts; any other dtype throws DTypeError naming the op.
#define KILN_DTYPE_CASE(DT, CT, ...) \
  case ::kiln::DType::DT:            \
    return __VA_ARGS__.template operator()<CT>();

#define KILN_DTYPE_SWITCH_FAIL(dt, opname) \
  default:                                 \
    throw ::kiln::DTypeError(::kiln::detail::concat(opname, ": dtype ", dt, " is not supported"));

#define KILN_DTYPE_SWITCH_ALL(dt, opname, ...)      \
  [&] {                                             \
    switch (dt) {                                   \
      KILN_DTYPE_CASE(Bool, bool, __VA_ARGS__)      \
      KILN_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Float32, float, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Float64, double, __VA_ARGS__) \
      KILN_DTYPE_SWITCH_FAIL(dt, opname)            \
    }                                               \
  }()

#define KILN_DTYPE_SWITCH_NUMERIC(dt, opname, ...)  \
  [&] {                                             \
    switch (dt) {                                   \
      KILN_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Float32, float, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Float64, double, __VA_ARGS__) \
      KILN_DTYPE_SWITCH_FAIL(dt, opname)            \
    }                                               \
  }()

#define KILN_DTYPE_SWITCH_FLOATING(dt, opname, ...) \
  [&] {                                             \
    switch (dt) {                                   \
      KILN_DTYPE_CASE(Float32, float, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Float64, double, __VA_ARGS__) \
      KILN_DTYPE_SWITCH_FAIL(dt, opname)            \
    }                                               \
  }()

#define KILN_DTYPE_SWITCH_INTEGRAL(dt, opname, ...) \
  [&] {                                             \
    switch (dt) {                                   \
      KILN_DTYPE_CASE(Bool, bool, __VA_ARGS__)      \
      KILN_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)  \
      KILN_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)  \
      KILN_DTYPE_SWITCH_FAIL(dt, opname)            \
    }                                               \
  }()
