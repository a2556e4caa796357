// Scalar: a host number (bool, integer or floating) passed to ops, e.g. `x * 0.5`.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <type_traits>

#include "kiln/core/dtype.h"

namespace kiln {

class Scalar {
 public:
  Scalar() : Scalar(int64_t{0}) {}
  Scalar(bool v) : dtype_(DType::Bool) { i_ = v; }
  template <typename T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) Scalar(T v) : dtype_(DType::Int64) {
    i_ = static_cast<int64_t>(v);
  }
  template <typename T>
  requires std::is_floating_point_v<T> Scalar(T v) : dtype_(DType::Float64) {
    d_ = static_cast<double>(v);
  }

  // Bool, Int64 or Float64: the category is what matters for type promotion.
  DType dtype() const { return dtype_; }
  bool is_floating() const { return dtype_ == DType::Float64; }
  bool is_integral() const { return dtype_ == DType::Int64; }
  bool is_bool() const { return dtype_ == DType::Bool; }

  template <typename T>
  T to() const {
    if (dtype_ == DType::Float64) return static_cast<T>(d_);
    return static_cast<T>(i_);
  }
  double to_double() const { return to<double>(); }
  int64_t to_int() const { return to<int64_t>(); }

  friend bool operator==(const Scalar& a, const Scalar& b) {
    if (a.dtype_ != b.dtype_) return false;
    return a.dtype_ == DType::Float64 ? a.d_ == b.d_ : a.i_ == b.i_;
  }

 private:
  DType dtype_;
  union {
    int64_t i_;
    double d_;
  };
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

// Checks that `value` can be stored in a tensor of `dtype` without changing it beyond rounding
// (as PyTorch): into an integer dtype, a NaN, an infinity or an out-of-range number is a
// ValueError naming `op` ("value cannot be converted to type int32 without overflow"); a
// fractional float truncates, as in PyTorch. Floating and bool dtypes take any value. Every place
// where a Scalar enters an integer tensor (full, fill_, binary ops with a Scalar, clamp, where,
// masked_fill, ...) calls this one helper.
void check_scalar_fits(const Scalar& value, DType dtype, const char* op);

}  // namespace kiln
