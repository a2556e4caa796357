// What libkiln exports for generated code to call: the block and row loops, compiled once here
// rather than once per generated kernel (it holds the OpenMP region and the gather/scatter of
// strided operands, most of a kernel's compile time when it was a template instantiated per
// kernel).
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/runtime/inductor_runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
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
                                         char* const* base, const int64_t* isz,
                                         uint64_t scalar_inputs, int64_t grain,
                                         kiln::inductor_rt::BlockBody body, void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  kiln::kernels::block_loop_any(
      static_cast<size_t>(num_operands), static_cast<size_t>(num_outputs), shape, base, isz,
      tuned ? tuned : grain,
      [&](char* const* p, int64_t n, int64_t first) { body(p, n, first, context); }, nullptr,
      nullptr, scalar_inputs);
}

extern "C" void kiln_inductor_window_loop(int num_operands, int num_outputs, const int64_t* shape,
                                          char* const* base, const int64_t* isz, char* const* fills,
                                          uint64_t scalar_inputs, int64_t grain,
                                          kiln::inductor_rt::BlockBody body, void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  const int64_t* windows = shape + 2 + shape[1] * (1 + num_operands);  // after the strides
  kiln::kernels::block_loop_any(
      static_cast<size_t>(num_operands), static_cast<size_t>(num_outputs), shape, base, isz,
      tuned ? tuned : grain,
      [&](char* const* p, int64_t n, int64_t first) { body(p, n, first, context); }, windows, fills,
      scalar_inputs);
}

extern "C" void kiln_inductor_parallel_runs(int64_t runs, int64_t run_length, int64_t grain,
                                            kiln::inductor_rt::RunsBody body, void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  const int64_t runs_grain = std::max<int64_t>(1, (tuned ? tuned : grain) / run_length);
  kiln::kernels::parallel_range(runs, runs_grain,
                                [&](int64_t begin, int64_t end) { body(begin, end, context); });
}

namespace {

// The rows of a row kernel's launch shape (see kiln_inductor_row_loop) walked in order: each
// row's operand pointers, written out once. Rows a fixed stride apart (outer dims that merge into
// one: the common case) are computed from the first row's; other rows are reached by an
// odometer over the outer dims. (Copying a row's pointers and then advancing the copy stalled on
// store forwarding: ~15% of a 128-wide normalisation's backward.)
class RowWalk {
 public:
  RowWalk(int num_operands, const int64_t* shape, char* const* base)
      : n_(static_cast<size_t>(num_operands)),
        nd_(shape[2]),
        sizes_(shape + 3),
        outer_strides_(sizes_ + nd_),
        base_(base) {}
  const int64_t* row_strides() const { return outer_strides_ + nd_ * static_cast<int64_t>(n_); }

  // Starts the walk at row r, `column` elements into it.
  void start(int64_t r, int64_t column = 0) {
    idx_.assign(static_cast<size_t>(nd_), 0);
    at_.assign(base_, base_ + n_);
    for (int64_t d = 0; d < nd_; ++d) {
      idx_[static_cast<size_t>(d)] = r % sizes_[d];
      r /= sizes_[d];
      for (size_t o = 0; o < n_; ++o) at_[o] += idx_[static_cast<size_t>(d)] * stride(o, d);
    }
    for (size_t o = 0; o < n_; ++o) at_[o] += column * row_strides()[o];
    walked_ = 0;
  }
  // Writes the next row's operand pointers (the first: start's row) to out.
  void next(char** out) {
    if (nd_ == 1) {
      for (size_t o = 0; o < n_; ++o) out[o] = at_[o] + walked_ * outer_strides_[o];
    } else {
      if (walked_ > 0) advance();
      std::copy_n(at_.data(), n_, out);
    }
    ++walked_;
  }

 private:
  // Moves the odometer (and at_) to the next row.
  void advance() {
    for (int64_t d = 0; d < nd_; ++d) {
      const auto du = static_cast<size_t>(d);
      for (size_t o = 0; o < n_; ++o) at_[o] += stride(o, d);
      if (++idx_[du] < sizes_[d]) return;
      for (size_t o = 0; o < n_; ++o) at_[o] -= sizes_[d] * stride(o, d);
      idx_[du] = 0;
    }
  }
  int64_t stride(size_t o, int64_t d) const {
    return outer_strides_[o * static_cast<size_t>(nd_) + static_cast<size_t>(d)];
  }
  size_t n_;
  int64_t nd_;
  const int64_t* sizes_;
  const int64_t* outer_strides_;
  char* const* base_;
  std::vector<int64_t> idx_;
  std::vector<char*> at_;  // start's row, or (odometer) the last row written
  int64_t walked_ = 0;     // rows written since start
};

// Scratch a column kernel's batch of rows may fill before the L1 cache would no longer hold it.
constexpr int64_t kL1Budget = 32 * 1024;

// 64-byte aligned scratch of `bytes`, freed with the object.
class Scratch {
 public:
  explicit Scratch(int64_t bytes) : storage_(new char[static_cast<size_t>(bytes) + 64]) {}
  char* get() const {
    return storage_.get() + (64 - reinterpret_cast<uintptr_t>(storage_.get()) % 64);
  }

 private:
  std::unique_ptr<char[]> storage_;
};

}  // namespace

extern "C" void kiln_inductor_row_loop(int num_operands, const int64_t* shape, char* const* base,
                                       int num_row_buffers, int64_t grain,
                                       kiln::inductor_rt::RowBody body, void* context) {
  const int64_t numel = shape[0], cols = shape[1];
  if (numel == 0) return;
  const int64_t rows = numel / cols;
  const int64_t row_bytes = (cols * 8 + 63) / 64 * 64;
  const int64_t tuned = kiln::inductor::tls_grain_override;
  const int64_t rows_grain = std::max<int64_t>(1, (tuned ? tuned : grain) / cols);
  kiln::kernels::parallel_range(rows, rows_grain, [&](int64_t begin, int64_t end) {
    const Scratch scratch(num_row_buffers * row_bytes);
    RowWalk walk(num_operands, shape, base);
    std::vector<char*> row(static_cast<size_t>(num_operands)), next(row.size());
    walk.start(begin);
    walk.next(row.data());
    for (int64_t r = begin; r < end; ++r) {
      if (r + 1 < end)
        walk.next(next.data());
      else
        std::fill(next.begin(), next.end(), nullptr);
      body(row.data(), next.data(), walk.row_strides(), cols, scratch.get(), row_bytes, context);
      std::swap(row, next);
    }
    kiln::vec::stream_fence();  // softmax_row's streaming stores, before anything reads them
  });
}

extern "C" void kiln_inductor_column_loop(int num_operands, const int64_t* shape, char* const* base,
                                          int num_row_buffers, int num_accumulators, double* result,
                                          kiln::inductor_rt::ColumnBody body, void* context) {
  namespace k = kiln::kernels;
  namespace rt = kiln::inductor_rt;
  const int64_t numel = shape[0], cols = shape[1];
  const int64_t per_thread = num_accumulators * cols;
  std::fill(result, result + per_thread, 0.0);
  if (numel == 0) return;
  const int64_t rows = numel / cols;
  const auto n = static_cast<size_t>(num_operands);
  // Folds rows [r0, r1), columns [c0, c1), into acc (num_accumulators rows of cols), handing the
  // body up to kFoldBatch rows at a time: it folds a batch into each accumulator in one pass
  // (loaded and stored once per batch, not once per row), in the same order as row by row.
  auto fold = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, double* acc) {
    const int64_t row_bytes = ((c1 - c0) * 8 + 63) / 64 * 64;
    // Each row of a batch has its own row buffers (the folded values may live there); a batch
    // of them stays within the L1 cache where it can.
    const int64_t row_set = std::max<int64_t>(1, num_row_buffers) * row_bytes;
    const int64_t batch = std::clamp<int64_t>(kL1Budget / row_set, 1, rt::kFoldBatch);
    const Scratch scratch(batch * num_row_buffers * row_bytes);
    RowWalk walk(num_operands, shape, base);
    std::vector<char*> at(static_cast<size_t>(batch) * n);
    walk.start(r0, c0);
    for (int64_t r = r0; r < r1;) {
      const int64_t rows_now = std::min(batch, r1 - r);
      for (int64_t b = 0; b < rows_now; ++b, ++r) walk.next(at.data() + b * num_operands);
      body(at.data(), rows_now, walk.row_strides(), c1 - c0, scratch.get(), row_bytes, acc + c0,
           cols, context);
    }
  };
  // The eager reduction's outer path (kernels::reduce_loop, run_units): blocks of kColumnBlock
  // columns are its units; one thread over the blocks, or threads over the blocks (each column
  // folds every row in order), or, with too few blocks to go round, threads over chunks of rows
  // with partial accumulators merged in thread order.
  const int64_t units = (cols + k::kColumnBlock - 1) / k::kColumnBlock;
  auto fold_blocks = [&](int64_t ub, int64_t ue, int64_t r0, int64_t r1, double* acc) {
    for (int64_t u = ub; u < ue; ++u)
      fold(r0, r1, u * k::kColumnBlock, std::min(cols, (u + 1) * k::kColumnBlock), acc);
  };
  const int64_t nt = k::max_threads();
  if (numel <= kiln::kParallelGrain || nt == 1) return fold_blocks(0, units, 0, rows, result);
  if (!k::splits_reduced_range(units, rows, numel, nt)) {
    k::parallel_range(units, 0,
                      [&](int64_t ub, int64_t ue) { fold_blocks(ub, ue, 0, rows, result); });
    return;
  }
  std::vector<double> partial(static_cast<size_t>(nt * per_thread), 0.0);
  const int threads = static_cast<int>(nt);
#pragma omp parallel num_threads(threads)
  {
    const int64_t nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (rows + nth - 1) / nth;
    const int64_t rb = std::min(rows, tid * chunk), re = std::min(rows, rb + chunk);
    if (rb < re) fold_blocks(0, units, rb, re, partial.data() + tid * per_thread);
  }
  std::copy_n(partial.begin(), per_thread, result);
  for (int64_t t = 1; t < nt; ++t)
    for (int64_t j = 0; j < per_thread; ++j)
      result[j] += partial[static_cast<size_t>(t * per_thread + j)];
}

// The row folds of KILN_INDUCTOR_ROW_FOLDS (inductor_runtime.h), each over a contiguous row of n
// elements with the argument generated code passes (ignored by the folds that take none).
namespace row_fold {
// The sum of the row as the eager sum and mean fold it (reduce_loop's inner path,
// with kernels::folds_rows_whole): in double, from 0, with the reducer's row().
template <typename T>
double sum(const T* x, int64_t n, double /*argument*/) {
  const auto r = kiln::kernels::make_reducer<T, T>(
      0.0, kiln::kernels::IdentityMap{}, kiln::kernels::fold::Add{},
      [](double a, int64_t) { return static_cast<T>(a); });
  double acc = r.identity;
  r.row(acc, x, n, 0);
  return acc;
}

// The product of the row as the eager prod folds it (as sum, from 1).
template <typename T>
double prod(const T* x, int64_t n, double /*argument*/) {
  const auto r = kiln::kernels::make_reducer<T, T>(
      1.0, kiln::kernels::IdentityMap{}, kiln::kernels::fold::Mul{},
      [](double a, int64_t) { return static_cast<T>(a); });
  double acc = r.identity;
  r.row(acc, x, n, 0);
  return acc;
}

// The largest (smallest) element of a contiguous row, folded as the eager amax (amin) folds it
// (NaN wins; which of -0 and 0 depends on the order, so the order is eager's).
template <bool IsMax, typename T>
T extreme(const T* x, int64_t n) {
  using Fold = std::conditional_t<IsMax, kiln::kernels::fold::Max, kiln::kernels::fold::Min>;
  const auto r = kiln::kernels::make_reducer<T, T>(
      IsMax ? kiln::kernels::lowest_value<T>() : kiln::kernels::highest_value<T>(),
      kiln::kernels::IdentityMap{}, Fold{}, [](T a, int64_t) { return a; });
  T acc = r.identity;
  r.row(acc, x, n, 0);
  return acc;
}

// Where the largest (smallest) element of a contiguous row first occurs (the first NaN, if
// any), as the eager argmax (argmin) finds it: whichever way eager splits a row across threads,
// the answer is this one.
template <bool IsMax, typename T>
int64_t arg_extreme(const T* x, int64_t n) {
  return kiln::kernels::find_first(x, n, extreme<IsMax>(x, n));
}
template <typename T>
T max(const T* x, int64_t n, double /*argument*/) {
  return extreme<true>(x, n);
}
template <typename T>
T min(const T* x, int64_t n, double /*argument*/) {
  return extreme<false>(x, n);
}
template <typename T>
int64_t argmax(const T* x, int64_t n, double /*argument*/) {
  return arg_extreme<true>(x, n);
}
template <typename T>
int64_t argmin(const T* x, int64_t n, double /*argument*/) {
  return arg_extreme<false>(x, n);
}

// log(sum(exp(x))) of a contiguous row as the eager logsumexp computes it: the row's max (in
// double; an infinite max is not subtracted), then the sum of exp(x - max) (exp in the row's
// dtype, summed in double), whose log the max is added to.
template <typename T>
T logsumexp(const T* x, int64_t n, double /*argument*/) {
  namespace k = kiln::kernels;
  const auto max_of = k::make_reducer<T, double>(
      -std::numeric_limits<double>::infinity(), k::IdentityMap{}, k::fold::Max{},
      [](double m, int64_t) { return std::isinf(m) ? 0.0 : m; });
  double m = max_of.identity;
  max_of.row(m, x, n, 0);
  const double shift = max_of.finish(m, 0);
  const auto sum_of_exp = k::make_reducer_in<T, T, T>(
      0.0, [](auto v, auto s) { return k::exp_any(v - s); }, k::fold::Add{},
      [shift](double a, int64_t) { return static_cast<T>(std::log(a) + shift); }, &shift);
  auto acc = sum_of_exp.identity;
  sum_of_exp.row(acc, x, n, 0);
  return sum_of_exp.finish(acc, 0);
}

// The p-norm of a contiguous row (p = 2, 1, inf or -inf) as the eager norm folds it: squares
// summed in double then the root, magnitudes summed, or the largest (smallest) magnitude.
template <typename T>
T norm(const T* x, int64_t n, double p) {
  namespace k = kiln::kernels;
  auto fold_row = [&](double identity, auto map, auto fold, auto finish) {
    const auto r = k::make_reducer<T, T>(identity, map, fold, finish);
    auto acc = r.identity;
    r.row(acc, x, n, 0);
    return r.finish(acc, 0);
  };
  auto as_out = [](double a, int64_t) { return static_cast<T>(a); };
  auto magnitude = [](auto v, auto) { return k::abs_any(v); };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (p == 2)
    return fold_row(
        0.0, [](auto v, auto) { return v * v; }, k::fold::Add{},
        [](double a, int64_t) { return static_cast<T>(std::sqrt(a)); });
  if (p == 1) return fold_row(0.0, magnitude, k::fold::Add{}, as_out);
  if (p == kInf) return fold_row(0.0, magnitude, k::fold::Max{}, as_out);
  return fold_row(kInf, magnitude, k::fold::Min{}, as_out);  // p = -inf
}

// The variance of a contiguous row as the eager var computes it: the mean (in double), then the
// sum of squared deviations from it, divided by max(0, n - correction).
template <typename T>
T var(const T* x, int64_t n, double correction) {
  namespace k = kiln::kernels;
  const double count = static_cast<double>(n);
  const double denom = std::max(0.0, count - correction);
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
}  // namespace row_fold

#define KILN_INDUCTOR_DEFINE_ROW_FOLD(name, FloatResult, DoubleResult)                  \
  extern "C" FloatResult kiln_inductor_row_##name##_float(const float* x, int64_t n,    \
                                                          double argument) {            \
    return row_fold::name(x, n, argument);                                              \
  }                                                                                     \
  extern "C" DoubleResult kiln_inductor_row_##name##_double(const double* x, int64_t n, \
                                                            double argument) {          \
    return row_fold::name(x, n, argument);                                              \
  }
KILN_INDUCTOR_ROW_FOLDS(KILN_INDUCTOR_DEFINE_ROW_FOLD)
#undef KILN_INDUCTOR_DEFINE_ROW_FOLD
