// softmax and log_softmax along one dim, numerically stable (the row max is subtracted before
// exp). The common case — the last dim of a contiguous tensor — has a dedicated row kernel:
// one pass for the max, one computing exp(x - max) into the output while summing, one scaling
// it (the row is in cache for the last two). Outputs much larger than the caches are written
// only in the last pass, with streaming stores. Other dims view the tensor as [outer, dim, inner]
// and run the same three passes over whole inner rows, vectorised along inner.
#include <cstring>
#include <limits>
#include <vector>

#include <omp.h>

#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/softmax_row.h"
#include "ops/kernels/vec.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {
namespace {

using vec::Vec;

using kernels::kRowBuffer;
using kernels::load_partial;
using kernels::softmax_row;
using kernels::store_partial;
using kernels::vmax;

// ---- softmax along a dim other than the last: a contiguous [outer, d, inner] tensor ----
// Each pass walks whole rows of `inner` elements in memory order, updating per-column
// accumulators (max, then sum), so that memory is read as sequential streams.

// f(j, n) over [0, len) in vector steps (n < width for the tail).
template <typename T, typename F>
inline void each_vector(int64_t len, F&& f) {
  int64_t j = 0;
  for (; j + Vec<T>::width <= len; j += Vec<T>::width) f(j, Vec<T>::width);
  if (j < len) f(j, len - j);
}
template <typename T>
inline Vec<T> load_n(const T* p, int64_t n, T fill = T(0)) {
  return n == Vec<T>::width ? Vec<T>::load(p) : load_partial(p, n, fill);
}
template <typename T>
inline void store_n(Vec<T> v, T* p, int64_t n) {
  if (n == Vec<T>::width)
    v.store(p);
  else
    store_partial(v, p, n);
}

// mx = max(mx, rows [r0, r1) of x), column-wise.
template <typename T>
void max_rows(const T* x, int64_t inner, int64_t r0, int64_t r1, T* mx) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * inner;
    each_vector<T>(inner, [&](int64_t j, int64_t n) {
      store_n(vmax(load_n(mx + j, n, kNegInf), load_n(row + j, n, kNegInf)), mx + j, n);
    });
  }
}
// sum += exp(x - mx) over rows [r0, r1), also stored into y for softmax.
template <typename T, bool Log>
void exp_rows(const T* x, T* y, int64_t inner, int64_t r0, int64_t r1, const T* mx, T* sum) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * inner;
    T* out = y + r * inner;
    each_vector<T>(inner, [&](int64_t j, int64_t n) {
      const Vec<T> e = vec::exp(load_n(row + j, n) - load_n(mx + j, n));
      if constexpr (!Log) store_n(e, out + j, n);
      store_n(load_n(sum + j, n) + e, sum + j, n);
    });
  }
}
// Rows [r0, r1) of the result: y *= factor (softmax; factor = 1 / sum) or
// y = (x - mx) - factor (log_softmax; factor = log(sum)).
template <typename T, bool Log>
void finish_rows(const T* x, T* y, int64_t inner, int64_t r0, int64_t r1, const T* mx,
                 const T* factor) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = x + r * inner;
    T* out = y + r * inner;
    each_vector<T>(inner, [&](int64_t j, int64_t n) {
      if constexpr (Log) {
        store_n((load_n(row + j, n) - load_n(mx + j, n)) - load_n(factor + j, n), out + j, n);
      } else {
        store_n(load_n(out + j, n) * load_n(factor + j, n), out + j, n);
      }
    });
  }
}
template <typename T, bool Log>
void sum_to_factor(T* sum, int64_t inner) {
  for (int64_t j = 0; j < inner; ++j) sum[j] = Log ? std::log(sum[j]) : T(1) / sum[j];
}

// One [d, inner] slice on the calling thread; mx and sum are scratch of `inner` elements.
template <typename T, bool Log>
void softmax_slice(const T* x, T* y, int64_t d, int64_t inner, T* mx, T* sum) {
  std::fill(mx, mx + inner, -std::numeric_limits<T>::infinity());
  std::fill(sum, sum + inner, T(0));
  max_rows(x, inner, 0, d, mx);
  exp_rows<T, Log>(x, y, inner, 0, d, mx, sum);
  sum_to_factor<T, Log>(sum, inner);
  finish_rows<T, Log>(x, y, inner, 0, d, mx, sum);
}

// One [d, inner] slice split by rows across the threads: each pass accumulates per-thread
// columns, which one thread then combines. `scratch` holds (threads + 1) * 2 * inner elements.
template <typename T, bool Log>
void softmax_slice_parallel(const T* x, T* y, int64_t d, int64_t inner, T* scratch) {
  T* mx = scratch;
  T* sum = scratch + inner;
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (d + nt - 1) / nt, r0 = std::min(d, tid * chunk);
    const int64_t r1 = std::min(d, r0 + chunk);
    T* my_mx = scratch + (tid + 1) * 2 * inner;
    T* my_sum = my_mx + inner;
    std::fill(my_mx, my_mx + inner, -std::numeric_limits<T>::infinity());
    std::fill(my_sum, my_sum + inner, T(0));
    max_rows(x, inner, r0, r1, my_mx);
#pragma omp barrier
#pragma omp single
    {
      std::fill(mx, mx + inner, -std::numeric_limits<T>::infinity());
      for (int64_t t = 0; t < nt; ++t) max_rows(scratch + (t + 1) * 2 * inner, inner, 0, 1, mx);
    }
    exp_rows<T, Log>(x, y, inner, r0, r1, mx, my_sum);
#pragma omp barrier
#pragma omp single
    {
      std::fill(sum, sum + inner, T(0));
      for (int64_t t = 0; t < nt; ++t) {
        const T* part = scratch + (t + 1) * 2 * inner + inner;
        for (int64_t j = 0; j < inner; ++j) sum[j] += part[j];
      }
      sum_to_factor<T, Log>(sum, inner);
    }
    finish_rows<T, Log>(x, y, inner, r0, r1, mx, sum);
  }
}

int softmax_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  wrap_dim(c.attrs.i(0), x.dim(), c.op.name.data());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, c.op.name,
             ": expected a floating tensor (float32 or float64), got dtype ", x.dtype(),
             "; convert it with .to(DType::Float32) first");
  return one_output(out, x.dtype(), x.sizes());
}

template <bool Log>
void softmax_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const Tensor x = c.in(0).contiguous();
  const int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), c.op.name.data());
  int64_t outer = 1, inner = 1;
  const int64_t d = x.dim() == 0 ? 1 : x.size(dim);
  for (int64_t k = 0; k < dim; ++k) outer *= x.size(k);
  for (int64_t k = dim + 1; k < x.dim(); ++k) inner *= x.size(k);
  KILN_DTYPE_SWITCH_FLOATING(x.dtype(), c.op.name.data(), [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* yp = out.data_ptr<T>();
    if (inner == 1) {
      const bool stream =
          out.numel() * static_cast<int64_t>(sizeof(T)) >= kernels::kStreamingStoreBytes;
      kernels::parallel_range(
          outer, std::max<int64_t>(1, kParallelGrain / 4 / d), [&](int64_t b, int64_t e) {
            alignas(64) T buf[kRowBuffer];
            for (int64_t r = b; r < e; ++r)
              softmax_row<T, Log>(xp + r * d, yp + r * d, d, stream, buf,
                                  r + 1 < e && d <= kRowBuffer ? xp + (r + 1) * d : nullptr);
            if (stream) vec::stream_fence();
          });
      return;
    }
    const int64_t threads = omp_get_max_threads();
    const bool split_slices =
        threads > 1 && !omp_in_parallel() && outer < 2 * threads && d * inner >= kParallelGrain;
    if (split_slices) {
      std::vector<T> scratch(static_cast<size_t>((threads + 1) * 2 * inner));
      for (int64_t o = 0; o < outer; ++o)
        softmax_slice_parallel<T, Log>(xp + o * d * inner, yp + o * d * inner, d, inner,
                                       scratch.data());
      return;
    }
    // Whole slices per thread, each with its own scratch (one, when already inside a parallel
    // region: parallel_range then runs on the calling thread).
    const bool nested = omp_in_parallel();
    std::vector<T> scratch(static_cast<size_t>((nested ? 1 : threads) * 2 * inner));
    kernels::parallel_range(outer, std::max<int64_t>(1, kParallelGrain / 4 / (d * inner)),
                            [&](int64_t b, int64_t e) {
                              const int64_t slot = nested ? 0 : omp_get_thread_num();
                              T* mine = scratch.data() + slot * 2 * inner;
                              for (int64_t o = b; o < e; ++o)
                                softmax_slice<T, Log>(xp + o * d * inner, yp + o * d * inner, d,
                                                      inner, mine, mine + inner);
                            });
  });
}

}  // namespace

// Extern: fused kernels; the optimizing backend can later decompose them (amax, sub, exp, sum).
// ---- derivatives (from the saved output y) ----
void softmax_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& y = c.out(0);
  const Tensor gy = c.grad() * y;
  g[0] = gy - y * sum(gy, {c.attrs.i(0)}, true);
}
void log_softmax_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& grad = c.grad();
  g[0] = grad - exp(c.out(0)) * sum(grad, {c.attrs.i(0)}, true);
}

const OpDef& softmax_op =
    register_op({.name = "softmax",
                 .schema = "softmax(Tensor self, int dim) -> Tensor",
                 .kind = OpKind::Composite,
                 .meta = softmax_meta,
                 .kernel = softmax_kernel<false>,
                 .derivative = {.fn = softmax_derivative, .saved_outputs = save({0})}});
const OpDef& log_softmax_op =
    register_op({.name = "log_softmax",
                 .schema = "log_softmax(Tensor self, int dim) -> Tensor",
                 .kind = OpKind::Composite,
                 .meta = softmax_meta,
                 .kernel = softmax_kernel<true>,
                 .derivative = {.fn = log_softmax_derivative, .saved_outputs = save({0})}});

}  // namespace ops

Tensor softmax(const Tensor& x, int64_t dim) { return ops::call(ops::softmax_op, {x}, {dim}); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return ops::call(ops::log_softmax_op, {x}, {dim});
}

}  // namespace kiln
