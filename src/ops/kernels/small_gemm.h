// c = alpha * a @ b + beta * c for matrices small enough to sit in the L1/L2 cache (attention
// over one head, batches of tiny products): rows of c accumulate in vector registers, a(i, p)
// broadcast and b's row p loaded, with no packing and no per-call set-up. Shared by linalg's
// batched products and the fused attention kernel, with the packing and transposition of an
// operand they need.
//
// Every element of c is one ascending sum over p of a(i, p) * b(p, j), started from zero and
// scaled by alpha at the end, whatever the column chunking: the result does not depend on how
// the columns are split into vectors.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/kernels/transpose_block.h"
#include "ops/kernels/vec.h"

namespace kiln::kernels {

// Rows [i0, i0 + R) of c, columns [j0, j0 + NV * W): R x NV accumulators in registers (R rows at
// once hide the FMA latency). UnitRows: a's row stride is 1 (a transposed matrix read in
// place), so the R values of a for one step of the sum are adjacent (one address, not R).
template <typename T, int NV, int R, bool UnitRows>
inline void small_gemm_tile(int64_t i0, int64_t j0, int64_t k, T alpha, const T* a, int64_t ars,
                            int64_t acs, const T* b, int64_t brs, T beta, T* c, int64_t ldc) {
  if constexpr (UnitRows) ars = 1;
  using V = vec::Vec<T>;
  constexpr int64_t W = V::width;
  V acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NV; ++q) acc[r][q] = V(T(0));
  for (int64_t p = 0; p < k; ++p) {
    V brow[NV];
    for (int q = 0; q < NV; ++q) brow[q] = V::load(b + p * brs + j0 + q * W);
    for (int r = 0; r < R; ++r) {
      const V arp(a[(i0 + r) * ars + p * acs]);
      for (int q = 0; q < NV; ++q) acc[r][q] = vec::fmadd(arp, brow[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NV; ++q) {
      T* dst = c + (i0 + r) * ldc + j0 + q * W;
      V out = acc[r][q] * V(alpha);
      if (beta != T(0)) out = vec::fmadd(V(beta), V::load(dst), out);
      out.store(dst);
    }
}

// Rows of c computed at once for NV vectors a row: as many as keep R x NV accumulators, b's NV
// vectors and a's broadcast in registers (32 vector registers with AVX-512VL, else 16).
template <int NV>
constexpr int small_gemm_rows_at_once() {
#ifdef __AVX512VL__
  return NV == 8 ? 2 : NV == 4 ? 6 : NV == 2 ? 8 : 12;
#else
  return NV == 1 ? 12 : NV == 2 ? 6 : NV == 4 ? 2 : 1;
#endif
}

// The widest column chunk, in vectors: with 16 registers (AVX2) two vectors a row over six
// rows (12 FMAs per 2 loads and 6 broadcasts) beat four over two (8 per 4 and 2): attention's
// 32-float heads, W7's backward 1.5x faster.
#ifdef __AVX512VL__
constexpr int kSmallGemmWidestChunk = 4;
#else
constexpr int kSmallGemmWidestChunk = 2;
#endif

// Columns [j0, j0 + NV * W) of every row of c.
template <typename T, int NV, bool UnitRows>
inline void small_gemm_columns(int64_t n, int64_t j0, int64_t k, T alpha, const T* a, int64_t ars,
                               int64_t acs, const T* b, int64_t brs, T beta, T* c, int64_t ldc) {
  constexpr int R = small_gemm_rows_at_once<NV>();
  int64_t i = 0;
  for (; i + R <= n; i += R)
    small_gemm_tile<T, NV, R, UnitRows>(i, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  if constexpr (R > 4)
    for (; i + 4 <= n; i += 4)
      small_gemm_tile<T, NV, 4, UnitRows>(i, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  if constexpr (R > 2)
    for (; i + 2 <= n; i += 2)
      small_gemm_tile<T, NV, 2, UnitRows>(i, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  for (; i < n; ++i)
    small_gemm_tile<T, NV, 1, UnitRows>(i, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
}

template <typename T, int NV>
inline void small_gemm_columns(int64_t n, int64_t j0, int64_t k, T alpha, const T* a, int64_t ars,
                               int64_t acs, const T* b, int64_t brs, T beta, T* c, int64_t ldc) {
  if (ars == 1)
    small_gemm_columns<T, NV, true>(n, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  else
    small_gemm_columns<T, NV, false>(n, j0, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
}

// c [n, m] (row stride ldc) = alpha * a [n, k] @ b [k, m] + beta * c. a is read element by
// element through its strides (so a transposed a costs nothing); b's rows must be contiguous
// (row stride brs). With beta == 0, c is not read (it may hold anything, NaN included).
template <typename T>
void small_gemm(int64_t n, int64_t m, int64_t k, T alpha, const T* a, int64_t ars, int64_t acs,
                const T* b, int64_t brs, T beta, T* c, int64_t ldc) {
  constexpr int64_t W = vec::Vec<T>::width;
  int64_t j = 0;
  if constexpr (kSmallGemmWidestChunk == 4)
    for (; j + 4 * W <= m; j += 4 * W)
      small_gemm_columns<T, 4>(n, j, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  for (; j + 2 * W <= m; j += 2 * W)
    small_gemm_columns<T, 2>(n, j, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
  if (j + W <= m) {
    small_gemm_columns<T, 1>(n, j, k, alpha, a, ars, acs, b, brs, beta, c, ldc);
    j += W;
  }
  // The last partial vector, element by element with the same fused multiply-adds.
  for (; j < m; ++j)
    for (int64_t i = 0; i < n; ++i) {
      T acc(0);
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a[i * ars + p * acs], b[p * brs + j], acc);
      T& dst = c[i * ldc + j];
      const T out = acc * alpha;
      dst = beta != T(0) ? std::fma(beta, dst, out) : out;
    }
}

// `rows` x `cols` of m (element strides rs, cs) as contiguous rows in buf; returns the rows'
// pointer and stride, m itself when its rows are already contiguous.
template <typename T>
std::pair<const T*, int64_t> contiguous_rows(const T* m, int64_t rows, int64_t cols, int64_t rs,
                                             int64_t cs, std::vector<T>& buf) {
  if (cs == 1 || cols <= 1) return {m, rs};
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) buf[static_cast<size_t>(r * cols + c)] = m[r * rs + c * cs];
  return {buf.data(), cols};
}

// ---- transposing a small matrix ----

// out [cols, rows] (row stride ldo >= rows) = the transpose of m [rows, cols] (element
// strides rs, cs).
template <typename T>
void transpose_into(const T* m, int64_t rows, int64_t cols, int64_t rs, int64_t cs, T* out,
                    int64_t ldo) {
  int64_t r_blocked = 0, c_blocked = 0;  // the part done in square blocks on registers
#if defined(KILN_VEC_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    if (cs == 1) {
      constexpr int B = kTransposeBlock;
      r_blocked = rows - rows % B;
      c_blocked = cols - cols % B;
      for (int64_t r = 0; r < r_blocked; r += B)
        for (int64_t c = 0; c < c_blocked; c += B)
          transpose_block(m + r * rs + c, rs, B, B, out + c * ldo + r, ldo);
    }
  }
#endif
  // The rest element by element, written in order: columns past the blocks for every row,
  // then rows past them of the blocked columns.
  for (int64_t c = c_blocked; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) out[c * ldo + r] = m[r * rs + c * cs];
  for (int64_t c = 0; c < c_blocked; ++c)
    for (int64_t r = r_blocked; r < rows; ++r) out[c * ldo + r] = m[r * rs + c * cs];
}

}  // namespace kiln::kernels
