// Helpers shared by the optimizer sources (not installed).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/vec.h"

namespace kiln::optim::detail {

// Splits [0, n) across the OpenMP threads when n is large (the kernels' own splitter).
template <typename F>
void parallel_range(int64_t n, F&& f) {
  kernels::parallel_range(n, kParallelGrain, std::forward<F>(f));
}

// Runs body.template operator()<X>(i) over [begin, end): X = vec::Vec<T> on whole SIMD blocks,
// X = T on the tail. The body is written once for both with the helpers below.
template <typename T, typename Body>
void simd_range(int64_t begin, int64_t end, Body&& body) {
  using V = vec::Vec<T>;
  int64_t i = begin;
  if constexpr (V::width > 1)
    for (; i + V::width <= end; i += V::width) body.template operator()<V>(i);
  for (; i < end; ++i) body.template operator()<T>(i);
}
template <typename X, typename T>
inline X load(const T* p) {
  if constexpr (std::is_same_v<X, T>)
    return *p;
  else
    return X::load(p);
}
template <typename X, typename T>
inline void store(T* p, X x) {
  if constexpr (std::is_same_v<X, T>)
    *p = x;
  else
    x.store(p);
}
template <typename X>
inline X vsqrt(X x) {
  if constexpr (std::is_floating_point_v<X>)
    return std::sqrt(x);
  else
    return vec::sqrt(x);
}
// torch.maximum: the larger, NaN when either is NaN.
template <typename X>
inline X vmaximum(X a, X b) {
  if constexpr (std::is_floating_point_v<X>) {
    return (a > b || std::isnan(a)) ? a : b;
  } else {
    X m = vec::select(a > b, a, b);
    return vec::select(vec::isnan_mask(a), a, m);
  }
}

// The round-trip (shortest exact) decimal form of v.
std::string format_double(double v);
std::string format_bool(bool v);
// Reads metadata[key] as a double / bool; throws ValueError naming the key when it is missing or
// malformed.
double meta_double(const std::map<std::string, std::string>& m, const std::string& key);
bool meta_bool(const std::map<std::string, std::string>& m, const std::string& key);

// A zero-filled contiguous tensor shaped and typed as p.
Tensor zeros_like_param(const Tensor& p);
// A concrete 0-d tensor holding `value` (made without dispatch, so under kiln::compile it is a
// graph input whose value is not part of the guard: optimizer scalars that change every step).
Tensor scalar_input(double value, DType dtype);

// The gradient of p ready for a fused kernel: p's dtype, contiguous, shape-checked.
Tensor dense_grad(const Tensor& p, size_t index, const char* who);

// Runs `update(T* p_data)` on the contiguous data of p: in place when p is contiguous (bumping
// its version), else on a contiguous copy that is then copied back.
template <typename F>
void update_param(Tensor& p, F&& update) {
  if (p.is_contiguous()) {
    update(p.data_ptr());
    p.impl()->storage()->bump_version();
  } else {
    Tensor c = p.contiguous();
    update(c.data_ptr());
    p.copy_(c);
  }
}

}  // namespace kiln::optim::detail
