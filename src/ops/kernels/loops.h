// The pointwise loop engine: walks the broadcast index space of an output and its inputs
// (any strides, broadcasting by stride 0), coalescing dims, splitting the work across OpenMP
// threads for large tensors, and handing the kernel body contiguous blocks: operands whose
// innermost stride is not contiguous are gathered into (and the output scattered from) small
// per-thread buffers. A body is therefore always a simple loop over arrays, which the compiler
// vectorises (or which uses vec::map for SLEEF math).
#pragma once

#include <omp.h>

#include <array>
#include <cstring>
#include <utility>

#include "kiln/core/parallel.h"
#include "kiln/core/tensor.h"
#include "ops/kernels/block_loop.h"
#include "ops/kernels/vec.h"

namespace kiln::kernels {

// Strides (in bytes) of `t` broadcast against `sizes` (t's dims align to the right).
inline Shape broadcast_byte_strides(const Tensor& t, IntList sizes) {
  const int64_t nd = sizes.ssize(), td = t.dim(), isz = t.element_size();
  Shape s(static_cast<size_t>(nd), 0);
  for (int64_t d = 0; d < td; ++d) {
    int64_t od = nd - td + d;
    s[od] = t.size(d) == 1 ? 0 : t.stride(d) * isz;
  }
  return s;
}

// N operands of one shape, the first NOut of them outputs (written), the rest inputs (read,
// broadcast to the outputs' shape). `body(std::array<char*, N> ptrs, int64_t n)` receives
// contiguous arrays of n elements of each operand's dtype (an input broadcast along the block
// arrives as a filled buffer; a non-contiguous output is scattered after the body).
template <size_t NOut, size_t N, typename Body>
void pointwise_loop_n(const std::array<const Tensor*, N>& operands, Body&& body,
                      int64_t grain = kParallelGrain) {
  static_assert(NOut >= 1 && NOut <= N);
  const Tensor& out = *operands[0];
  const int64_t numel = out.numel();
  if (numel == 0) return;
  std::array<char*, N> base;
  std::array<int64_t, N> isz;
  for (size_t k = 0; k < N; ++k) {
    base[k] = static_cast<char*>(operands[k]->data_ptr());
    isz[k] = operands[k]->element_size();
  }
  // Fast path: every operand contiguous with the outputs' shape — one flat run.
  bool flat = true;
  for (size_t k = 0; k < N && flat; ++k)
    flat = operands[k]->is_contiguous() && operands[k]->sizes() == out.sizes();
  if (flat) {
    parallel_range(numel, grain, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; j += kBlock) {
        std::array<char*, N> ptrs;
        for (size_t k = 0; k < N; ++k) ptrs[k] = base[k] + j * isz[k];
        body(ptrs, std::min(kBlock, end - j));
      }
    });
    return;
  }
  std::array<Shape, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_byte_strides(*operands[k], out.sizes());
  // Coalesce: drop size-1 dims and merge a dim into the next when every operand is contiguous
  // across the pair. dims are kept innermost-first from here on.
  Shape sizes;
  std::array<Shape, N> st;
  for (int64_t d = out.dim() - 1; d >= 0; --d) {
    int64_t sz = out.size(d);
    if (sz == 1) continue;
    if (!sizes.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge = merge && strides[k][d] == st[k].back() * sizes.back();
      if (merge) {
        sizes.back() *= sz;
        continue;
      }
    }
    sizes.push_back(sz);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) st[k].push_back(0);
  }
  // The shared block loop's shape: {numel, nd, sizes, then each operand's strides}.
  SmallVector<int64_t, 32> shape{numel, sizes.ssize()};
  for (int64_t s : sizes) shape.push_back(s);
  for (size_t k = 0; k < N; ++k)
    for (int64_t s : st[k]) shape.push_back(s);
  block_loop<N, NOut>(shape.data(), base, isz, grain, [&](char* const* p, int64_t n) {
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) ptrs[k] = p[k];
    body(ptrs, n);
  });
}

// One output (operand 0) and N - 1 inputs.
template <size_t N, typename Body>
void pointwise_loop(const Tensor& out, const std::array<const Tensor*, N - 1>& inputs, Body&& body,
                    int64_t grain = kParallelGrain) {
  std::array<const Tensor*, N> operands;
  operands[0] = &out;
  for (size_t k = 0; k + 1 < N; ++k) operands[k + 1] = inputs[k];
  pointwise_loop_n<1>(operands, std::forward<Body>(body), grain);
}

// out[i] = f(in[i]...) with every operand of type T, using Vec<T> (f takes and returns Vec<T>).
// Outputs at least this large are written with non-temporal stores (they cannot stay in the
// caches anyway, and skipping the read-for-ownership saves memory bandwidth).
inline constexpr int64_t kStreamingStoreBytes = int64_t{8} << 20;

template <typename T, typename F, typename... Ins>
void map_vec(const Tensor& out, F f, const Ins&... ins) {
  constexpr size_t N = sizeof...(Ins) + 1;
  const bool stream = out.numel() * static_cast<int64_t>(sizeof(T)) >= kStreamingStoreBytes;
  pointwise_loop<N>(out, {&ins...}, [&](const std::array<char*, N>& p, int64_t n) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      vec::map<T>(f, stream, reinterpret_cast<T*>(p[0]), n,
                  reinterpret_cast<const T*>(p[I + 1])...);
    }
    (std::make_index_sequence<N - 1>{});
  });
}

// out[i] = f(in[i]...) elementwise on plain values (for mixed types: comparisons, casts, where).
template <typename Out, typename... In, typename F>
void map_scalar(const Tensor& out, F f, const std::array<const Tensor*, sizeof...(In)>& ins) {
  constexpr size_t N = sizeof...(In) + 1;
  pointwise_loop<N>(out, ins, [&](const std::array<char*, N>& p, int64_t n) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(reinterpret_cast<const In*>(p[I + 1])[i]...);
    }
    (std::make_index_sequence<N - 1>{});
  });
}

}  // namespace kiln::kernels
