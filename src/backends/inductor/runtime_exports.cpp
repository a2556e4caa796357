// What libkiln exports for generated code to call: the block and row loops, compiled once here
// rather than once per generated kernel (it holds the OpenMP region and the gather/scatter of
// strided operands, most of a kernel's compile time when it was a template instantiated per
// kernel).
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/runtime/inductor_runtime.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "ops/kernels/reduce.h"

namespace kiln::inductor {
namespace {
thread_local int64_t tls_grain_override = 0;
}  // namespace

KernelGrainScope::KernelGrainScope(int64_t grain) : saved_(tls_grain_override) {
  tls_grain_override = grain;
}
KernelGrainScope::~KernelGrainScope() { tls_grain_override = saved_; }

}  // namespace kiln::inductor

extern "C" void kiln_inductor_block_loop(int num_operands, int num_outputs, const int64_t* shape,
                                         char* const* base, const int64_t* isz, int64_t grain,
                                         kiln::inductor_rt::BlockBody body, void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  kiln::kernels::block_loop_any(static_cast<size_t>(num_operands), static_cast<size_t>(num_outputs),
                                shape, base, isz, tuned ? tuned : grain,
                                [&](char* const* p, int64_t n) { body(p, n, context); });
}

extern "C" void kiln_inductor_window_loop(int num_operands, int num_outputs, const int64_t* shape,
                                          char* const* base, const int64_t* isz, char* const* fills,
                                          int64_t grain, kiln::inductor_rt::BlockBody body,
                                          void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  const int64_t* windows = shape + 2 + shape[1] * (1 + num_operands);  // after the strides
  kiln::kernels::block_loop_any(
      static_cast<size_t>(num_operands), static_cast<size_t>(num_outputs), shape, base, isz,
      tuned ? tuned : grain, [&](char* const* p, int64_t n) { body(p, n, context); }, windows,
      fills);
}

extern "C" void kiln_inductor_row_loop(int num_operands, const int64_t* shape, char* const* base,
                                       int num_row_buffers, int64_t grain,
                                       kiln::inductor_rt::RowBody body, void* context) {
  const int64_t numel = shape[0], cols = shape[1], nd = shape[2];
  if (numel == 0) return;
  const int64_t rows = numel / cols;
  const int64_t* sizes = shape + 3;  // innermost first
  const int64_t* outer_strides = sizes + nd;
  const int64_t* row_strides = outer_strides + nd * num_operands;
  const int64_t row_bytes = (cols * 8 + 63) / 64 * 64;
  const int64_t tuned = kiln::inductor::tls_grain_override;
  const int64_t rows_grain = std::max<int64_t>(1, (tuned ? tuned : grain) / cols);
  const auto n = static_cast<size_t>(num_operands);
  kiln::kernels::parallel_range(rows, rows_grain, [&](int64_t begin, int64_t end) {
    const auto scratch_bytes = static_cast<size_t>(num_row_buffers * row_bytes + 64);
    const std::unique_ptr<char[]> storage(new char[scratch_bytes]);
    char* scratch = storage.get() + (64 - reinterpret_cast<uintptr_t>(storage.get()) % 64);
    // The rows' pointers, advanced like an odometer over the outer dims.
    std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
    std::vector<char*> p(n);
    int64_t rem = begin;
    for (size_t o = 0; o < n; ++o) p[o] = base[o];
    for (int64_t d = 0; d < nd; ++d) {
      idx[static_cast<size_t>(d)] = rem % sizes[d];
      rem /= sizes[d];
      for (size_t o = 0; o < n; ++o)
        p[o] += idx[static_cast<size_t>(d)] *
                outer_strides[o * static_cast<size_t>(nd) + static_cast<size_t>(d)];
    }
    std::vector<char*> next(n);
    auto advance = [&](std::vector<char*>& q) {  // the odometer's next row
      for (int64_t d = 0; d < nd; ++d) {
        const auto du = static_cast<size_t>(d);
        for (size_t o = 0; o < n; ++o) q[o] += outer_strides[o * static_cast<size_t>(nd) + du];
        if (++idx[du] < sizes[d]) return;
        for (size_t o = 0; o < n; ++o)
          q[o] -= sizes[d] * outer_strides[o * static_cast<size_t>(nd) + du];
        idx[du] = 0;
      }
    };
    for (int64_t r = begin; r < end; ++r) {
      if (r + 1 < end) {
        next = p;
        advance(next);
      } else {
        std::fill(next.begin(), next.end(), nullptr);
      }
      body(p.data(), next.data(), row_strides, cols, scratch, row_bytes, context);
      std::swap(p, next);
    }
    kiln::vec::stream_fence();  // softmax_row's streaming stores, before anything reads them
  });
}

namespace {
// The sum of one contiguous row as the eager sum and mean fold it (reduce_loop's inner path,
// with kernels::folds_rows_whole): in double, from 0, with the reducer's row().
template <typename T>
double row_sum(const T* x, int64_t n) {
  const auto r = kiln::kernels::make_reducer<T, T>(
      0.0, kiln::kernels::IdentityMap{}, kiln::kernels::fold::Add{},
      [](double a, int64_t) { return static_cast<T>(a); });
  double acc = r.identity;
  r.row(acc, x, n, 0);
  return acc;
}

// The largest (smallest) element of a contiguous row, folded as the eager amax (amin) folds it
// (NaN wins; which of -0 and 0 depends on the order, so the order is eager's).
template <bool IsMax, typename T>
T row_extreme(const T* x, int64_t n) {
  using Fold = std::conditional_t<IsMax, kiln::kernels::fold::Max, kiln::kernels::fold::Min>;
  const auto r = kiln::kernels::make_reducer<T, T>(
      IsMax ? kiln::kernels::lowest_value<T>() : kiln::kernels::highest_value<T>(),
      kiln::kernels::IdentityMap{}, Fold{}, [](T a, int64_t) { return a; });
  T acc = r.identity;
  r.row(acc, x, n, 0);
  return acc;
}

// The variance of a contiguous row as the eager var computes it: the mean (in double), then the
// sum of squared deviations from it, divided by max(0, n - correction).
template <typename T>
T row_var(const T* x, int64_t n, int64_t correction) {
  namespace k = kiln::kernels;
  const double count = static_cast<double>(n);
  const double denom = std::max(0.0, count - static_cast<double>(correction));
  const auto mean_of = k::make_reducer<T, double>(0.0, k::IdentityMap{}, k::fold::Add{},
                                                  [count](double a, int64_t) { return a / count; });
  double sum = mean_of.identity;
  mean_of.row(sum, x, n, 0);
  const double mean = mean_of.finish(sum, 0);
  auto squared_deviation = [](auto v, auto m) {
    auto d = v - m;
    return d * d;
  };
  const auto deviations = k::make_reducer<T, T>(
      0.0, squared_deviation, k::fold::Add{},
      [denom](double a, int64_t) { return static_cast<T>(a / denom); }, &mean);
  auto acc = deviations.identity;
  deviations.row(acc, x, n, 0);
  return deviations.finish(acc, 0);
}
}  // namespace

extern "C" float kiln_inductor_row_var_float(const float* x, int64_t n, int64_t correction) {
  return row_var(x, n, correction);
}
extern "C" double kiln_inductor_row_var_double(const double* x, int64_t n, int64_t correction) {
  return row_var(x, n, correction);
}
extern "C" double kiln_inductor_row_sum_float(const float* x, int64_t n) { return row_sum(x, n); }
extern "C" double kiln_inductor_row_sum_double(const double* x, int64_t n) { return row_sum(x, n); }
extern "C" float kiln_inductor_row_max_float(const float* x, int64_t n) {
  return row_extreme<true>(x, n);
}
extern "C" double kiln_inductor_row_max_double(const double* x, int64_t n) {
  return row_extreme<true>(x, n);
}
extern "C" float kiln_inductor_row_min_float(const float* x, int64_t n) {
  return row_extreme<false>(x, n);
}
extern "C" double kiln_inductor_row_min_double(const double* x, int64_t n) {
  return row_extreme<false>(x, n);
}
