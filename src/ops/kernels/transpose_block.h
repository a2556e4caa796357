// A square block of floats transposed on vector registers (16 x 16 with AVX-512, 8 x 8 with
// AVX2): shuffles where element by element it takes a load and a store per float. Used by
// Kiln's own sgemm (packing a transposed b) and the small products' transposes (attention).
#pragma once

#include <cstdint>

#include "ops/kernels/vec.h"

namespace kiln::kernels {

#if defined(KILN_VEC_AVX2)
#if defined(KILN_VEC_AVX512)
constexpr int kTransposeBlock = 16;
#else
constexpr int kTransposeBlock = 8;
#endif

// Rows [0, rows) of the kTransposeBlock-square block at `src` (row stride lds; the first `cols`
// floats of each read, the rest taken as zero) transposed: dst[c * ldd + r] = src[r * lds + c]
// for c < cols, each of those rows of dst written whole (kTransposeBlock floats, zeros past
// `rows`).
inline void transpose_block(const float* src, int64_t lds, int rows, int cols, float* dst,
                            int64_t ldd) {
#if defined(KILN_VEC_AVX512)
  const __mmask16 live = cols >= 16  ? __mmask16(0xFFFF)
                         : cols <= 0 ? __mmask16(0)
                                     : __mmask16((1u << cols) - 1);
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(live, src + i * lds) : _mm512_setzero_ps();
  // Pairs of rows interleaved, then quads: u[4g + q]'s 128-bit lane L holds rows 4g..4g+3 at
  // column 4L + q.
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    const __m512d lo0 = _mm512_castps_pd(t[4 * g]), hi0 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d lo1 = _mm512_castps_pd(t[4 * g + 2]), hi1 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
  }
  // Then lane L of the four groups side by side: column 4L + q.
  for (int q = 0; q < 4; ++q) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
    const __m512 w[4] = {_mm512_shuffle_f32x4(v0, v2, 0x88), _mm512_shuffle_f32x4(v0, v2, 0xDD),
                         _mm512_shuffle_f32x4(v1, v3, 0x88), _mm512_shuffle_f32x4(v1, v3, 0xDD)};
    for (int l = 0; l < 4; ++l)
      if (4 * l + q < cols) _mm512_storeu_ps(dst + (4 * l + q) * ldd, w[l]);
  }
#else
  const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols < 0 ? 0 : cols),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 r[8];
  for (int i = 0; i < 8; ++i)
    r[i] = i < rows ? _mm256_maskload_ps(src + i * lds, live) : _mm256_setzero_ps();
  // Pairs of rows interleaved, then quads: s[4h + q] holds column q (low 128 bits) and
  // column 4 + q (high) of rows 4h..4h+3.
  __m256 s[8];
  for (int h = 0; h < 2; ++h) {
    const __m256 lo01 = _mm256_unpacklo_ps(r[4 * h], r[4 * h + 1]);
    const __m256 hi01 = _mm256_unpackhi_ps(r[4 * h], r[4 * h + 1]);
    const __m256 lo23 = _mm256_unpacklo_ps(r[4 * h + 2], r[4 * h + 3]);
    const __m256 hi23 = _mm256_unpackhi_ps(r[4 * h + 2], r[4 * h + 3]);
    s[4 * h + 0] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(lo01, lo23, _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(hi01, hi23, _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    if (q < cols) _mm256_storeu_ps(dst + q * ldd, _mm256_permute2f128_ps(s[q], s[4 + q], 0x20));
    if (4 + q < cols)
      _mm256_storeu_ps(dst + (4 + q) * ldd, _mm256_permute2f128_ps(s[q], s[4 + q], 0x31));
  }
#endif
}
#endif  // KILN_VEC_AVX2

}  // namespace kiln::kernels
