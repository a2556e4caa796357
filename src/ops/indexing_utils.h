// Helpers shared by the joining, indexing, shape-copying and sorting ops: views that address
// blocks of an output, a strided copy between them, index-tensor validation, and a walker
// over the lines of a tensor along one dim.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>

#include "ops/kernels/loops.h"
#include "ops/op_utils.h"

namespace kiln::ops {

// A view over t's storage with the given geometry (kernels address sub-blocks of their
// outputs and inputs with these, without going through dispatch).
inline Tensor strided_view(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.impl()->storage(), offset, std::move(sizes),
                                             std::move(strides), t.dtype()));
}
// A 0-d tensor seen as [1] (kernels written over a dim then need no 0-d special case).
inline Tensor at_least_1d(const Tensor& t) {
  return t.dim() > 0 ? t : strided_view(t, Shape{1}, Shape{1}, t.storage_offset());
}

// dst = src for two tensors of the same shape and dtype with any strides (src may have zero
// or negative ones); threaded for large tensors.
inline void strided_copy(const Tensor& dst, const Tensor& src) {
  const size_t isz = static_cast<size_t>(dst.element_size());
  kernels::pointwise_loop<2>(dst, {&src}, [isz](const std::array<char*, 2>& p, int64_t n) {
    std::memcpy(p[0], p[1], static_cast<size_t>(n) * isz);
  });
}

// Runs f.template operator()<I>() for an int32 or int64 index dtype.
template <typename F>
void dispatch_index(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::Int32:
      return f.template operator()<int32_t>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    default:
      throw DTypeError(
          detail::concat(op, ": index must be an int64 or int32 tensor, got dtype ", dt));
  }
}

// DTypeError unless `index` is int64 (or int32 when the op accepts it, as PyTorch's do).
inline void check_index_dtype(const char* op, const Tensor& index, bool allow_int32) {
  const bool ok = index.dtype() == DType::Int64 || (allow_int32 && index.dtype() == DType::Int32);
  KILN_CHECK(ok, DTypeError, op, ": expected an index tensor of dtype int64",
             allow_int32 ? " or int32" : "", ", got ", describe(index));
}

// Throws IndexError naming `op` unless every value of the contiguous `index` lies in
// [0, size). Runs before a kernel writes anything; the scan is threaded for large indices.
inline void check_index_bounds(const char* op, const Tensor& index, int64_t size, int64_t dim) {
  dispatch_index(index.dtype(), op, [&]<typename I>() {
    const I* idx = index.data_ptr<I>();
    const int64_t n = index.numel();
    std::atomic<int64_t> first_bad{n};
    kernels::parallel_range(n, kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (idx[i] < 0 || idx[i] >= size) {
          int64_t cur = first_bad.load();
          while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
          }
          return;
        }
      }
    });
    const int64_t bad = first_bad.load();
    KILN_CHECK(bad == n, IndexError, op, ": index ", static_cast<int64_t>(idx[bad]),
               " is out of bounds for dimension ", dim, " with size ", size);
  });
}

// Walks the lines of `sizes` along `dim` (the positions whose coordinate at `dim` is 0),
// lines [begin, end) in row-major order, calling f(offsets, coords): offsets[k] is the element
// offset of the line's start under strides[k], coords its multi-index. `sizes` has >= 1 dim.
template <size_t N, typename F>
void for_each_line(IntList sizes, int64_t dim, const std::array<IntList, N>& strides, int64_t begin,
                   int64_t end, F&& f) {
  const int64_t nd = sizes.ssize();
  Shape coords(static_cast<size_t>(nd), 0);
  std::array<int64_t, N> off{};
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    if (d == dim || sizes[d] == 0) continue;
    coords[d] = rem % sizes[d];
    rem /= sizes[d];
    for (size_t k = 0; k < N; ++k) off[k] += coords[d] * strides[k][d];
  }
  for (int64_t line = begin; line < end; ++line) {
    f(static_cast<const std::array<int64_t, N>&>(off), static_cast<const Shape&>(coords));
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (d == dim) continue;
      if (++coords[d] < sizes[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= (sizes[d] - 1) * strides[k][d];
      coords[d] = 0;
    }
  }
}

// Number of lines of `sizes` along `dim`.
inline int64_t num_lines(IntList sizes, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = 0; d < sizes.ssize(); ++d)
    if (d != dim) n *= sizes[d];
  return n;
}

// Lines per parallel chunk so that a chunk holds about kParallelGrain elements.
inline int64_t line_grain(int64_t line_length) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(line_length, 1));
}

}  // namespace kiln::ops
