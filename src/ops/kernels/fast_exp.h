// vec::exp_fast: exp for kernels where it dominates the cost (softmax, log_softmax). For float
// on AVX2 it is inlined (Cody-Waite reduction and a degree-6 polynomial, at most ~1.5 ulp
// against SLEEF's 1 ulp) and about 1.5x faster than SLEEF's exp, which is an out-of-line call
// that also forces the caller to spill its vector registers. The whole float range is handled:
// NaN propagates, large inputs give inf, small ones 0 through the denormals. Other types use
// vec::exp.
#pragma once

#include "ops/kernels/vec.h"

namespace kiln::vec {

template <typename T>
inline Vec<T> exp_fast(Vec<T> a) {
  return exp(a);
}

#ifdef KILN_VEC_AVX2
template <>
inline Vec<float> exp_fast(Vec<float> a) {
  // Clamp to where exp is neither inf nor 0 (max/min return the second operand when one is
  // NaN, so NaN passes through).
  __m256 x = _mm256_min_ps(_mm256_set1_ps(88.8f), _mm256_max_ps(_mm256_set1_ps(-104.0f), a.v));
  // x = n ln2 + r, |r| <= ln2 / 2, with ln2 split in two so that r is exact.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  // exp(r) = 1 + r + r^2 p(r).
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // Scale by 2^n as 2^(n/2) * 2^(n - n/2): n spans [-150, 128], which one exponent field
  // cannot hold (this keeps the denormal results and overflows to inf where exp does).
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}
#endif  // KILN_VEC_AVX2

}  // namespace kiln::vec
