// Philox 4x32-10 and the draws of the random ops, which generated code computes too (uniform,
// normal, randint, bernoulli): element i of a draw that starts at `offset` is a pure function of
// (seed, offset + i) — docs/random.md — so the eager kernels (ops/random_ops.cpp) and fused loops
// (the inductor backend's runtime header) call the same functions here and give the same numbers,
// bit for bit. Depends only on the standard library and vec.h, so generated code can include it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/kernels/vec.h"  // the host's SIMD intrinsics (KILN_VEC_AVX512)

#ifdef KILN_VEC_AVX512
#define KILN_PHILOX_X16 1
#endif

namespace kiln::kernels {

inline std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * c[0], p1 = uint64_t{kM1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// The four random words of element `i` of a draw that starts at `offset`.
inline std::array<uint32_t, 4> philox_at(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t ctr = offset + static_cast<uint64_t>(i);
  return philox({static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0u, 0u},
                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
inline double u53(uint32_t hi, uint32_t lo) {  // [0, 1) with 53 random bits
  return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
}
inline float u24(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }  // [0, 1)

#ifdef KILN_PHILOX_X16
// Philox 4x32-10 of 16 consecutive elements at once: lane l of word w is philox_at(seed, offset,
// i + l)[w]. The same integer arithmetic as philox(), so the same bits.
struct Philox16 {
  __m512i w[4];
};
// (hi, lo) halves of the 32 x 32 -> 64-bit products m * a in every lane.
inline void mul_hi_lo(__m512i a, uint32_t m, __m512i& hi, __m512i& lo) {
  const __m512i mv = _mm512_set1_epi64(m);
  const __m512i even = _mm512_mul_epu32(a, mv);                        // lanes 0, 2, ...
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mv);  // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}
inline Philox16 philox16_at(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t ctr = offset + static_cast<uint64_t>(i);
  const __m512i first = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(ctr)),
                                         _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
  const __m512i second = _mm512_add_epi64(first, _mm512_set1_epi64(8));
  // The counters' low and high words, element order kept.
  const __m512i low_words =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  __m512i c0 = _mm512_permutex2var_epi32(first, low_words, second);
  __m512i c1 =
      _mm512_permutex2var_epi32(first, _mm512_add_epi32(low_words, _mm512_set1_epi32(1)), second);
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, 0xD2511F53u, hi0, lo0);
    mul_hi_lo(c2, 0xCD9E8D57u, hi1, lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c3 = lo0;
  }
  return {{c0, c1, c2, c3}};
}
// u53(hi, lo) of lanes [8 half, 8 half + 8) of two words, as doubles (exact: 53-bit integers).
inline __m512d u53_x8(__m512i hi, __m512i lo, int half) {
  const __m256i h = half ? _mm512_extracti64x4_epi64(hi, 1) : _mm512_castsi512_si256(hi);
  const __m256i l = half ? _mm512_extracti64x4_epi64(lo, 1) : _mm512_castsi512_si256(lo);
  const __m512i bits =
      _mm512_or_si512(_mm512_slli_epi64(_mm512_cvtepu32_epi64(h), 32), _mm512_cvtepu32_epi64(l));
  return _mm512_mul_pd(_mm512_cvtepu64_pd(_mm512_srli_epi64(bits, 11)), _mm512_set1_pd(0x1p-53));
}
// Element j's probability as a double, for lanes [8 half, 8 half + 8).
template <typename T>
__m512d probabilities_x8(const T* p, int half) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_cvtps_pd(_mm256_loadu_ps(p + 8 * half));
  else
    return _mm512_loadu_pd(p + 8 * half);
}
#endif

// bernoulli: out[j] = 1 where u53 < p[j] (element first + j of the draw), else 0.
template <typename T>
void bernoulli_block(T* out, const T* p, int64_t n, int64_t first, uint64_t seed, uint64_t offset) {
  int64_t j = 0;
#ifdef KILN_PHILOX_X16
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    for (; j + 16 <= n; j += 16) {
      const Philox16 r = philox16_at(seed, offset, first + j);
      const __mmask8 lower =
          _mm512_cmp_pd_mask(u53_x8(r.w[0], r.w[1], 0), probabilities_x8(p + j, 0), _CMP_LT_OQ);
      const __mmask8 upper =
          _mm512_cmp_pd_mask(u53_x8(r.w[0], r.w[1], 1), probabilities_x8(p + j, 1), _CMP_LT_OQ);
      if constexpr (std::is_same_v<T, float>) {
        const __mmask16 ones = static_cast<__mmask16>(lower | (upper << 8));
        _mm512_storeu_ps(out + j, _mm512_maskz_mov_ps(ones, _mm512_set1_ps(1.0f)));
      } else {
        _mm512_storeu_pd(out + j, _mm512_maskz_mov_pd(lower, _mm512_set1_pd(1.0)));
        _mm512_storeu_pd(out + j + 8, _mm512_maskz_mov_pd(upper, _mm512_set1_pd(1.0)));
      }
    }
  }
#endif
  for (; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    out[j] = u53(r[0], r[1]) < static_cast<double>(p[j]) ? T(1) : T(0);
  }
}

// uniform on [from, to): out[j] from element first + j of the draw (24 random bits for float,
// 53 for double), scaled with one rounding (fma, whatever the compiler's contraction settings)
// and kept below `to`.
template <typename T>
void uniform_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, double from,
                   double to) {
  const T lo = static_cast<T>(from), hi = static_cast<T>(to);
  const T top = hi > lo ? std::nextafter(hi, lo) : hi;
  int64_t j = 0;
#ifdef KILN_PHILOX_X16
  if constexpr (std::is_same_v<T, float>) {
    const __m512d width = _mm512_set1_pd(to - from), start = _mm512_set1_pd(from);
    for (; j + 16 <= n; j += 16) {
      const Philox16 r = philox16_at(seed, offset, first + j);
      const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r.w[0], 8)),
                                     _mm512_set1_ps(0x1p-24f));  // u24, exact
      const __m256 v0 = _mm512_cvtpd_ps(
          _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(u)), width, start));
      const __m256 v1 = _mm512_cvtpd_ps(_mm512_fmadd_pd(
          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1))), width,
          start));
      const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(v0), v1, 1);
      // v > top ? top : v (min would differ only for a NaN v, which a finite range never gives)
      _mm512_storeu_ps(
          out + j, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(top), _CMP_GT_OQ), v,
                                        _mm512_set1_ps(top)));
    }
  }
#endif
  for (; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    const double u = std::is_same_v<T, float> ? double(u24(r[0])) : u53(r[0], r[1]);
    const T v = static_cast<T>(std::fma(u, to - from, from));
    out[j] = v > top ? top : v;
  }
}

// normal(mean, stdev): out[j] from element first + j of the draw, by Box-Muller's cosine branch
// (u1 in (0, 1] so that its log is finite; 24 random bits each for float, 53 for double), in
// double, scaled with one rounding.
template <typename T>
void normal_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, double mean,
                  double stdev) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    double u1, u2;
    if constexpr (std::is_same_v<T, float>) {
      u1 = (static_cast<double>(r[0] >> 8) + 1.0) * 0x1p-24;
      u2 = static_cast<double>(r[1] >> 8) * 0x1p-24;
    } else {
      u1 = u53(r[0], r[1]) + 0x1p-53;
      u2 = u53(r[2], r[3]);
    }
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
    out[j] = static_cast<T>(std::fma(stdev, z, mean));
  }
}

// randint on [low, low + range) (range = high - low in unsigned arithmetic, >= 1): out[j] from
// element first + j of the draw, 64 random bits modulo the range.
template <typename T>
void randint_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, int64_t low,
                   uint64_t range) {
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    const uint64_t w = (uint64_t{r[0]} << 32) | r[1];
    out[j] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + w % range));
  }
}

}  // namespace kiln::kernels
