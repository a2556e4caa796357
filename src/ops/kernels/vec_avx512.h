// Vec<float> x 16 and Vec<double> x 8 on AVX-512 hosts (AVX512F + AVX512DQ). Included by vec.h
// only, in place of its AVX2 section: the same interface and, lane for lane, the same operations
// in the same order, so a kernel's per-element results are those of the AVX2 build; only what
// depends on the width (the order of a reduction's partial sums) differs between the two.
#pragma once

namespace kiln::vec {

// ---- float x 16 ----
template <>
struct Vec<float> {
  static constexpr int width = 16;
  struct Mask {
    __mmask16 m;
  };
  __m512 v;
  Vec() = default;
  Vec(__m512 x) : v(x) {}
  Vec(float x) : v(_mm512_set1_ps(x)) {}
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
};
inline Vec<float> operator+(Vec<float> a, Vec<float> b) { return _mm512_add_ps(a.v, b.v); }
inline Vec<float> operator-(Vec<float> a, Vec<float> b) { return _mm512_sub_ps(a.v, b.v); }
inline Vec<float> operator*(Vec<float> a, Vec<float> b) { return _mm512_mul_ps(a.v, b.v); }
inline Vec<float> operator/(Vec<float> a, Vec<float> b) { return _mm512_div_ps(a.v, b.v); }
inline Vec<float> operator-(Vec<float> a) { return _mm512_xor_ps(a.v, _mm512_set1_ps(-0.0f)); }
inline Vec<float>::Mask operator<(Vec<float> a, Vec<float> b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)};
}
inline Vec<float>::Mask operator>(Vec<float> a, Vec<float> b) {
  return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)};
}
inline Vec<float> select(Vec<float>::Mask m, Vec<float> a, Vec<float> b) {
  return _mm512_mask_blend_ps(m.m, b.v, a.v);
}
inline Vec<float>::Mask isnan_mask(Vec<float> a) {
  return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)};
}
inline Vec<float> fmadd(Vec<float> a, Vec<float> b, Vec<float> c) {
  return _mm512_fmadd_ps(a.v, b.v, c.v);
}
inline Vec<float> exp2(Vec<float> a) { return Sleef_exp2f16_u10(a.v); }
inline Vec<float> expm1(Vec<float> a) { return Sleef_expm1f16_u10(a.v); }
inline Vec<float> log(Vec<float> a) { return Sleef_logf16_u10(a.v); }
inline Vec<float> log2(Vec<float> a) { return Sleef_log2f16_u10(a.v); }
inline Vec<float> log1p(Vec<float> a) { return Sleef_log1pf16_u10(a.v); }
inline Vec<float> sqrt(Vec<float> a) { return _mm512_sqrt_ps(a.v); }
inline Vec<float> sin(Vec<float> a) { return Sleef_sinf16_u10(a.v); }
inline Vec<float> cos(Vec<float> a) { return Sleef_cosf16_u10(a.v); }
inline Vec<float> tan(Vec<float> a) { return Sleef_tanf16_u10(a.v); }
inline Vec<float> floor(Vec<float> a) {
  return _mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
inline Vec<float> ceil(Vec<float> a) {
  return _mm512_roundscale_ps(a.v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
inline Vec<float> trunc(Vec<float> a) {
  return _mm512_roundscale_ps(a.v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline Vec<float> round_even(Vec<float> a) {
  return _mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec<float> abs(Vec<float> a) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), a.v); }
inline Vec<float> pow(Vec<float> a, Vec<float> b) { return Sleef_powf16_u10(a.v, b.v); }
inline Vec<float> atan2(Vec<float> a, Vec<float> b) { return Sleef_atan2f16_u10(a.v, b.v); }

// exp and erf for float: the AVX2 section's algorithms (see vec.h), with the same
// coefficients (vec::fitted), written for 16 lanes.
inline Vec<float> copy_sign_of(Vec<float> magnitude, Vec<float> x) {
  return _mm512_or_ps(magnitude.v, _mm512_and_ps(x.v, _mm512_set1_ps(-0.0f)));
}
inline Vec<float> exp(Vec<float> x) {
  const __mmask16 kept = _mm512_cmp_ps_mask(x.v, _mm512_set1_ps(kExpZeroFrom), _CMP_NLE_UQ);
  // max/min return their second operand when either is NaN, as on AVX2: a NaN x is kept.
  const __m512 xc = _mm512_maskz_mov_ps(
      kept, _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x.v)));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.442695041e+00f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606820e-06f), r);
  const Vec<float> rv(r);
  const Vec<float> p = fmadd(rv * rv, horner(rv, fitted::kExpQ), rv) + Vec<float>(1.0f);
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_maskz_mov_ps(kept, _mm512_mul_ps(_mm512_mul_ps(p.v, s1), s2));
}
// The width-specific helpers of the shared float math (see the AVX2 section).
inline Vec<float> clamp_keeping_nan(Vec<float> x, float lo, float hi) {
  return _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), x.v));
}
inline Vec<float> at_most(Vec<float> x, float hi) { return _mm512_min_ps(_mm512_set1_ps(hi), x.v); }
inline Vec<float> two_to_rounded(Vec<float> t) {
  const __m512i n =
      _mm512_sub_epi32(_mm512_castps_si512(t.v), _mm512_castps_si512(_mm512_set1_ps(12582912.0f)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
}
inline Vec<float> erf(Vec<float> x) {
  const __m512 a = _mm512_min_ps(_mm512_set1_ps(4.0f), abs(x).v);
  const __m512i interval =
      _mm512_min_epu32(_mm512_set1_epi32(7), _mm512_cvttps_epi32(_mm512_add_ps(a, a)));
  const __m512 u =
      _mm512_fnmadd_ps(_mm512_cvtepi32_ps(interval), _mm512_set1_ps(0.5f), a);  // exact
  // An 8-entry table in both halves of a register; the interval (0..7) picks the entry.
  const auto table = [&](int k) {
    return _mm512_broadcast_f32x8(_mm256_load_ps(fitted::kErfCoefficients[k]));
  };
  __m512 r = _mm512_permutexvar_ps(interval, table(7));
  for (int k = 6; k >= 0; --k) r = _mm512_fmadd_ps(r, u, _mm512_permutexvar_ps(interval, table(k)));
  return copy_sign_of(Vec<float>(r), x);
}

// ---- double x 8 ----
template <>
struct Vec<double> {
  static constexpr int width = 8;
  struct Mask {
    __mmask8 m;
  };
  __m512d v;
  Vec() = default;
  Vec(__m512d x) : v(x) {}
  Vec(double x) : v(_mm512_set1_pd(x)) {}
  static Vec load(const double* p) { return _mm512_loadu_pd(p); }
  void store(double* p) const { _mm512_storeu_pd(p, v); }
};
inline Vec<double> operator+(Vec<double> a, Vec<double> b) { return _mm512_add_pd(a.v, b.v); }
inline Vec<double> operator-(Vec<double> a, Vec<double> b) { return _mm512_sub_pd(a.v, b.v); }
inline Vec<double> operator*(Vec<double> a, Vec<double> b) { return _mm512_mul_pd(a.v, b.v); }
inline Vec<double> operator/(Vec<double> a, Vec<double> b) { return _mm512_div_pd(a.v, b.v); }
inline Vec<double> operator-(Vec<double> a) { return _mm512_xor_pd(a.v, _mm512_set1_pd(-0.0)); }
inline Vec<double>::Mask operator<(Vec<double> a, Vec<double> b) {
  return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_LT_OQ)};
}
inline Vec<double>::Mask operator>(Vec<double> a, Vec<double> b) {
  return {_mm512_cmp_pd_mask(a.v, b.v, _CMP_GT_OQ)};
}
inline Vec<double> select(Vec<double>::Mask m, Vec<double> a, Vec<double> b) {
  return _mm512_mask_blend_pd(m.m, b.v, a.v);
}
inline Vec<double>::Mask isnan_mask(Vec<double> a) {
  return {_mm512_cmp_pd_mask(a.v, a.v, _CMP_UNORD_Q)};
}
inline Vec<double> fmadd(Vec<double> a, Vec<double> b, Vec<double> c) {
  return _mm512_fmadd_pd(a.v, b.v, c.v);
}
inline Vec<double> exp(Vec<double> a) { return Sleef_expd8_u10(a.v); }
inline Vec<double> exp2(Vec<double> a) { return Sleef_exp2d8_u10(a.v); }
inline Vec<double> expm1(Vec<double> a) { return Sleef_expm1d8_u10(a.v); }
inline Vec<double> log(Vec<double> a) { return Sleef_logd8_u10(a.v); }
inline Vec<double> log2(Vec<double> a) { return Sleef_log2d8_u10(a.v); }
inline Vec<double> log1p(Vec<double> a) { return Sleef_log1pd8_u10(a.v); }
inline Vec<double> sqrt(Vec<double> a) { return _mm512_sqrt_pd(a.v); }
inline Vec<double> sin(Vec<double> a) { return Sleef_sind8_u10(a.v); }
inline Vec<double> cos(Vec<double> a) { return Sleef_cosd8_u10(a.v); }
inline Vec<double> tan(Vec<double> a) { return Sleef_tand8_u10(a.v); }
inline Vec<double> tanh(Vec<double> a) { return Sleef_tanhd8_u10(a.v); }
inline Vec<double> erf(Vec<double> a) { return Sleef_erfd8_u10(a.v); }
inline Vec<double> floor(Vec<double> a) {
  return _mm512_roundscale_pd(a.v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
}
inline Vec<double> ceil(Vec<double> a) {
  return _mm512_roundscale_pd(a.v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
}
inline Vec<double> trunc(Vec<double> a) {
  return _mm512_roundscale_pd(a.v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline Vec<double> round_even(Vec<double> a) {
  return _mm512_roundscale_pd(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec<double> abs(Vec<double> a) { return _mm512_andnot_pd(_mm512_set1_pd(-0.0), a.v); }
inline Vec<double> pow(Vec<double> a, Vec<double> b) { return Sleef_powd8_u10(a.v, b.v); }
inline Vec<double> atan2(Vec<double> a, Vec<double> b) { return Sleef_atan2d8_u10(a.v, b.v); }

}  // namespace kiln::vec
