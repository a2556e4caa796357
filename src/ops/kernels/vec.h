// Vec<T>: a SIMD register of T with arithmetic and vectorised math (SLEEF), used by the
// pointwise loops. On AVX-512 hosts float and double are 16- and 8-wide, on AVX2+FMA hosts 8-
// and 4-wide; everything else is a one-element "vector" with the same interface, so each op's
// functor is written once. The library and generated code are both compiled for the host
// (-march=native), so eager kernels and compiled graphs always use the same width.
// Internal to the kernels: never included by public headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12 warns (-W[maybe-]uninitialized) inside many AVX-512 intrinsics once they are inlined:
// a false positive on their undefined pass-through registers (fixed in GCC 13 by this same
// pragma inside its headers). A warning's state is taken where its text is, i.e. here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <sleef.h>
#define KILN_VEC_AVX2 1  // a SIMD Vec<float> and Vec<double> (256 or 512 bits)
#if defined(__AVX512F__) && defined(__AVX512DQ__)
#define KILN_VEC_AVX512 1  // ... of 512 bits
#endif
#endif

namespace kiln::vec {

// ---- the scalar fallback: width 1 ----
template <typename T>
struct Vec {
  static constexpr int width = 1;
  using Mask = bool;
  T v;
  Vec() = default;
  Vec(T x) : v(x) {}
  static Vec load(const T* p) { return Vec(*p); }
  void store(T* p) const { *p = v; }
  T lane(int) const { return v; }
};
// Integer +, -, * and negation wrap around in two's complement (as PyTorch's do) rather than
// being undefined on overflow: they are computed in the unsigned type.
template <typename T>
inline constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T, typename F>
T arith(T a, T b, F f) {
  if constexpr (kWraps<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<T>(f(a, b));
  }
}
template <typename T>
Vec<T> operator+(Vec<T> a, Vec<T> b) {
  return arith(a.v, b.v, std::plus());
}
template <typename T>
Vec<T> operator-(Vec<T> a, Vec<T> b) {
  return arith(a.v, b.v, std::minus());
}
template <typename T>
Vec<T> operator*(Vec<T> a, Vec<T> b) {
  return arith(a.v, b.v, std::multiplies());
}
template <typename T>
Vec<T> operator/(Vec<T> a, Vec<T> b) {
  return static_cast<T>(a.v / b.v);
}
template <typename T>
Vec<T> operator-(Vec<T> a) {
  return arith(T(0), a.v, std::minus<>());
}
template <typename T>
bool operator<(Vec<T> a, Vec<T> b) {
  return a.v < b.v;
}
template <typename T>
bool operator>(Vec<T> a, Vec<T> b) {
  return a.v > b.v;
}
template <typename T>
Vec<T> select(bool m, Vec<T> a, Vec<T> b) {
  return m ? a : b;
}
template <typename T>
bool isnan_mask(Vec<T> a) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(a.v);
  return false;
}
template <typename T>
Vec<T> fmadd(Vec<T> a, Vec<T> b, Vec<T> c) {
  return static_cast<T>(a.v * b.v + c.v);
}

#define KILN_SCALAR_MATH(name, expr) \
  template <typename T>              \
  Vec<T> name(Vec<T> a) {            \
    using std::name;                 \
    return static_cast<T>(expr);     \
  }
KILN_SCALAR_MATH(exp, exp(a.v))
KILN_SCALAR_MATH(exp2, exp2(a.v))
KILN_SCALAR_MATH(expm1, expm1(a.v))
KILN_SCALAR_MATH(log, log(a.v))
KILN_SCALAR_MATH(log2, log2(a.v))
KILN_SCALAR_MATH(log1p, log1p(a.v))
KILN_SCALAR_MATH(sqrt, sqrt(a.v))
KILN_SCALAR_MATH(sin, sin(a.v))
KILN_SCALAR_MATH(cos, cos(a.v))
KILN_SCALAR_MATH(tan, tan(a.v))
KILN_SCALAR_MATH(tanh, tanh(a.v))
KILN_SCALAR_MATH(erf, erf(a.v))
#undef KILN_SCALAR_MATH
// 1 / (1 + e^-x); float has its own, below. (exp is found at instantiation, by argument type.)
template <typename T>
Vec<T> sigmoid(Vec<T> x) {
  return Vec<T>(T(1)) / (Vec<T>(T(1)) + exp(-x));
}
template <typename T>
Vec<T> abs(Vec<T> a) {
  if constexpr (kWraps<T>) {
    return a.v < 0 ? -a : a;  // abs(INT_MIN) wraps to INT_MIN, as in PyTorch
  } else {
    return static_cast<T>(std::abs(a.v));
  }
}
// Rounding is the identity on integers; going through double would lose int64 values >= 2^53.
#define KILN_SCALAR_ROUNDING(name, expr)   \
  template <typename T>                    \
  Vec<T> name(Vec<T> a) {                  \
    if constexpr (std::is_integral_v<T>) { \
      return a;                            \
    } else {                               \
      return static_cast<T>(expr);         \
    }                                      \
  }
KILN_SCALAR_ROUNDING(floor, std::floor(a.v))
KILN_SCALAR_ROUNDING(ceil, std::ceil(a.v))
KILN_SCALAR_ROUNDING(trunc, std::trunc(a.v))
KILN_SCALAR_ROUNDING(round_even, std::nearbyint(a.v))
#undef KILN_SCALAR_ROUNDING
template <typename T>
Vec<T> pow(Vec<T> a, Vec<T> b) {
  return static_cast<T>(std::pow(a.v, b.v));
}
template <typename T>
Vec<T> atan2(Vec<T> a, Vec<T> b) {
  return static_cast<T>(std::atan2(a.v, b.v));
}

// Coefficients of the float exp, tanh and erf below (fitted by tools/mathfit: fit_float_exp.py,
// fit_float_erf_tanh.py), shared by the AVX2 and AVX-512 sections, which compute the same
// polynomials lane for lane.
namespace fitted {
// exp: e^r = 1 + r + r^2 Q(r) on |r| <= ln2 / 2.
inline constexpr float kExpQ[] = {4.999998860e-01f, 1.666651846e-01f, 4.166953311e-02f,
                                  8.368916341e-03f, 1.375140790e-03f};
// tanh: x + x^3 P(x^2) for |x| < 0.625.
inline constexpr float kTanhP[] = {-3.333333135e-01f, 1.333288997e-01f, -5.386392027e-02f,
                                   2.104570158e-02f, -6.155215669e-03f};
// erf: on |x| in [k/2, (k+1)/2), sum_d kErfCoefficients[d][k] u^d with u = |x| - k/2.
alignas(32) inline constexpr float kErfCoefficients[8][8] = {
    {0.000000000e+00f, 5.204998851e-01f, 8.427007794e-01f, 9.661051631e-01f, 9.953222871e-01f,
     9.995930195e-01f, 9.999778867e-01f, 9.999992847e-01f},
    {1.128379226e+00f, 8.787826896e-01f, 4.151073098e-01f, 1.189303026e-01f, 2.066701837e-02f,
     2.178282244e-03f, 1.392504200e-04f, 5.399042493e-06f},
    {-1.567211143e-06f, -4.393952787e-01f, -4.151001871e-01f, -1.783960313e-01f, -4.133534059e-02f,
     -5.445629358e-03f, -4.176474758e-04f, -1.888146471e-05f},
    {-3.760776222e-01f, -1.463955492e-01f, 1.382515579e-01f, 1.387603283e-01f, 4.824527353e-02f,
     8.348903619e-03f, 7.872835267e-04f, 4.202240962e-05f},
    {-5.635012058e-04f, 1.824944615e-01f, 7.011342794e-02f, -4.465005174e-02f, -3.462458774e-02f,
     -8.614395745e-03f, -1.029789564e-03f, -6.547313387e-05f},
    {1.158746034e-01f, 1.013186853e-02f, -7.316770405e-02f, -1.474296208e-02f, 1.388240326e-02f,
     6.092574447e-03f, 9.521118482e-04f, 7.187109441e-05f},
    {-8.001619950e-03f, -5.788244680e-02f, 1.404379308e-02f, 1.943241805e-02f, -1.516892808e-03f,
     -2.780527342e-03f, -5.775522441e-04f, -5.069561303e-05f},
    {-1.797866449e-02f, 1.788549498e-02f, 3.745110473e-03f, -5.933099426e-03f, -7.215270307e-04f,
     6.358153187e-04f, 1.735964470e-04f, 1.714467908e-05f}};
}  // namespace fitted
inline constexpr float kExpZeroFrom = -103.972084f;  // the largest float the float exp takes to 0

// Horner's rule for a polynomial in z with float coefficients c[0] + c[1] z + ...
template <typename V, size_t N>
inline V horner(V z, const float (&c)[N]) {
  V r(c[N - 1]);
  for (int k = static_cast<int>(N) - 2; k >= 0; --k) r = fmadd(r, z, V(c[k]));
  return r;
}

#if defined(KILN_VEC_AVX512)
}  // namespace kiln::vec
#include "ops/kernels/vec_avx512.h"
namespace kiln::vec {
#elif defined(KILN_VEC_AVX2)
// ---- float x 8 ----
template <>
struct Vec<float> {
  static constexpr int width = 8;
  struct Mask {
    __m256 m;
  };
  __m256 v;
  Vec() = default;
  Vec(__m256 x) : v(x) {}
  Vec(float x) : v(_mm256_set1_ps(x)) {}
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
};
inline Vec<float> operator+(Vec<float> a, Vec<float> b) { return _mm256_add_ps(a.v, b.v); }
inline Vec<float> operator-(Vec<float> a, Vec<float> b) { return _mm256_sub_ps(a.v, b.v); }
inline Vec<float> operator*(Vec<float> a, Vec<float> b) { return _mm256_mul_ps(a.v, b.v); }
inline Vec<float> operator/(Vec<float> a, Vec<float> b) { return _mm256_div_ps(a.v, b.v); }
inline Vec<float> operator-(Vec<float> a) { return _mm256_xor_ps(a.v, _mm256_set1_ps(-0.0f)); }
inline Vec<float>::Mask operator<(Vec<float> a, Vec<float> b) {
  return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)};
}
inline Vec<float>::Mask operator>(Vec<float> a, Vec<float> b) {
  return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)};
}
inline Vec<float> select(Vec<float>::Mask m, Vec<float> a, Vec<float> b) {
  return _mm256_blendv_ps(b.v, a.v, m.m);
}
inline Vec<float>::Mask isnan_mask(Vec<float> a) { return {_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)}; }
inline Vec<float> fmadd(Vec<float> a, Vec<float> b, Vec<float> c) {
  return _mm256_fmadd_ps(a.v, b.v, c.v);
}
inline Vec<float> exp2(Vec<float> a) { return Sleef_exp2f8_u10(a.v); }
inline Vec<float> expm1(Vec<float> a) { return Sleef_expm1f8_u10(a.v); }
inline Vec<float> log(Vec<float> a) { return Sleef_logf8_u10(a.v); }
inline Vec<float> log2(Vec<float> a) { return Sleef_log2f8_u10(a.v); }
inline Vec<float> log1p(Vec<float> a) { return Sleef_log1pf8_u10(a.v); }
inline Vec<float> sqrt(Vec<float> a) { return _mm256_sqrt_ps(a.v); }
inline Vec<float> sin(Vec<float> a) { return Sleef_sinf8_u10(a.v); }
inline Vec<float> cos(Vec<float> a) { return Sleef_cosf8_u10(a.v); }
inline Vec<float> tan(Vec<float> a) { return Sleef_tanf8_u10(a.v); }

inline Vec<float> floor(Vec<float> a) { return _mm256_floor_ps(a.v); }
inline Vec<float> ceil(Vec<float> a) { return _mm256_ceil_ps(a.v); }
inline Vec<float> trunc(Vec<float> a) {
  return _mm256_round_ps(a.v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline Vec<float> round_even(Vec<float> a) {
  return _mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec<float> abs(Vec<float> a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v); }
inline Vec<float> pow(Vec<float> a, Vec<float> b) { return Sleef_powf8_u10(a.v, b.v); }
inline Vec<float> atan2(Vec<float> a, Vec<float> b) { return Sleef_atan2f8_u10(a.v, b.v); }

// tanh and erf for float (coefficients fitted by tools/mathfit/fit_float_erf_tanh.py): tanh a
// polynomial around 0 and expf elsewhere (written once for both widths, below the ISA sections),
// erf piecewise polynomials. SLEEF's u10 versions cost 4-6x its expf here; these measure
// <= 1.2 ulp (tanh) and <= 2.3 ulp (erf), checked by math_accuracy_test.
inline Vec<float> copy_sign_of(Vec<float> magnitude, Vec<float> x) {
  return _mm256_or_ps(magnitude.v, _mm256_and_ps(x.v, _mm256_set1_ps(-0.0f)));
}
// exp for float: n = round(x / ln2), r = x - n ln2 (two-part ln2), e^r = 1 + r + r^2 Q(r)
// (fitted by tools/mathfit/fit_float_exp.py), times 2^n built in two halves so that results in
// the subnormal range come out right. <= 1 ulp; ~3x faster than SLEEF's expf_u10 here.
// Lanes whose result is 0 (x <= kExpZeroFrom, masked attention scores among them) are computed
// from 0 and zeroed after: computing them underflows through the subnormals, which Intel cores
// finish in microcode, ~100 cycles a vector (it made a causal softmax 3x slower).
inline Vec<float> exp(Vec<float> x) {
  const __m256 zero_lanes = _mm256_cmp_ps(x.v, _mm256_set1_ps(kExpZeroFrom), _CMP_LE_OQ);
  // Clamp (a NaN in the second operand of min/max is kept): beyond these e^x is inf or 0.
  const __m256 xc = _mm256_andnot_ps(
      zero_lanes,
      _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x.v)));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.442695041e+00f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606820e-06f), r);
  const Vec<float> rv(r);
  const Vec<float> p = fmadd(rv * rv, horner(rv, fitted::kExpQ), rv) + Vec<float>(1.0f);
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_andnot_ps(zero_lanes, _mm256_mul_ps(_mm256_mul_ps(p.v, s1), s2));
}

// Helpers of the float math below that differ by width (vec_avx512.h has the 16-lane ones).
// min(hi, max(lo, x)), a NaN x kept (min/max return their second operand on a NaN).
inline Vec<float> clamp_keeping_nan(Vec<float> x, float lo, float hi) {
  return _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x.v));
}
// min(x, hi), a NaN x kept.
inline Vec<float> at_most(Vec<float> x, float hi) { return _mm256_min_ps(_mm256_set1_ps(hi), x.v); }
// 2^n for t = n + 1.5 * 2^23 (n an integer rounded by that sum, -126 <= n <= 127), as a float
// built from n's bits: exact.
inline Vec<float> two_to_rounded(Vec<float> t) {
  const __m256i n =
      _mm256_sub_epi32(_mm256_castps_si256(t.v), _mm256_castps_si256(_mm256_set1_ps(12582912.0f)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}
inline Vec<float> erf(Vec<float> x) {
  // |x| in 8 intervals of width 0.5 on [0, 4): a degree-7 polynomial in the offset u into the
  // interval, its coefficients picked per lane from 8-entry tables
  // (fitted::kErfCoefficients[k][interval]); no exp and no second branch. |x| is capped at 4,
  // where interval 7's polynomial gives exactly 1 (erf rounds to 1 in float from 3.84); a NaN is
  // kept by the cap and goes through the polynomial. Interval 0 has no constant term, so
  // erf(x) ~ 1.128 x stays accurate for tiny x (and erf(-0) = -0). (The same bits, for every
  // float, as the earlier form with a select of 1 for |x| >= 4, in two fewer instructions.)
  const __m256 a = _mm256_min_ps(_mm256_set1_ps(4.0f), abs(x).v);
  // The interval: trunc(2|x|) in [0, 7] (a NaN converts to INT_MIN, which as unsigned is > 7).
  const __m256i interval =
      _mm256_min_epu32(_mm256_set1_epi32(7), _mm256_cvttps_epi32(_mm256_add_ps(a, a)));
  const __m256 u =
      _mm256_fnmadd_ps(_mm256_cvtepi32_ps(interval), _mm256_set1_ps(0.5f), a);  // exact
  __m256 r = _mm256_permutevar8x32_ps(_mm256_load_ps(fitted::kErfCoefficients[7]), interval);
  for (int k = 6; k >= 0; --k)
    r = _mm256_fmadd_ps(
        r, u, _mm256_permutevar8x32_ps(_mm256_load_ps(fitted::kErfCoefficients[k]), interval));
  return copy_sign_of(Vec<float>(r), x);
}

// ---- double x 4 ----
template <>
struct Vec<double> {
  static constexpr int width = 4;
  struct Mask {
    __m256d m;
  };
  __m256d v;
  Vec() = default;
  Vec(__m256d x) : v(x) {}
  Vec(double x) : v(_mm256_set1_pd(x)) {}
  static Vec load(const double* p) { return _mm256_loadu_pd(p); }
  void store(double* p) const { _mm256_storeu_pd(p, v); }
};
inline Vec<double> operator+(Vec<double> a, Vec<double> b) { return _mm256_add_pd(a.v, b.v); }
inline Vec<double> operator-(Vec<double> a, Vec<double> b) { return _mm256_sub_pd(a.v, b.v); }
inline Vec<double> operator*(Vec<double> a, Vec<double> b) { return _mm256_mul_pd(a.v, b.v); }
inline Vec<double> operator/(Vec<double> a, Vec<double> b) { return _mm256_div_pd(a.v, b.v); }
inline Vec<double> operator-(Vec<double> a) { return _mm256_xor_pd(a.v, _mm256_set1_pd(-0.0)); }
inline Vec<double>::Mask operator<(Vec<double> a, Vec<double> b) {
  return {_mm256_cmp_pd(a.v, b.v, _CMP_LT_OQ)};
}
inline Vec<double>::Mask operator>(Vec<double> a, Vec<double> b) {
  return {_mm256_cmp_pd(a.v, b.v, _CMP_GT_OQ)};
}
inline Vec<double> select(Vec<double>::Mask m, Vec<double> a, Vec<double> b) {
  return _mm256_blendv_pd(b.v, a.v, m.m);
}
inline Vec<double>::Mask isnan_mask(Vec<double> a) {
  return {_mm256_cmp_pd(a.v, a.v, _CMP_UNORD_Q)};
}
inline Vec<double> fmadd(Vec<double> a, Vec<double> b, Vec<double> c) {
  return _mm256_fmadd_pd(a.v, b.v, c.v);
}
inline Vec<double> exp(Vec<double> a) { return Sleef_expd4_u10(a.v); }
inline Vec<double> exp2(Vec<double> a) { return Sleef_exp2d4_u10(a.v); }
inline Vec<double> expm1(Vec<double> a) { return Sleef_expm1d4_u10(a.v); }
inline Vec<double> log(Vec<double> a) { return Sleef_logd4_u10(a.v); }
inline Vec<double> log2(Vec<double> a) { return Sleef_log2d4_u10(a.v); }
inline Vec<double> log1p(Vec<double> a) { return Sleef_log1pd4_u10(a.v); }
inline Vec<double> sqrt(Vec<double> a) { return _mm256_sqrt_pd(a.v); }
inline Vec<double> sin(Vec<double> a) { return Sleef_sind4_u10(a.v); }
inline Vec<double> cos(Vec<double> a) { return Sleef_cosd4_u10(a.v); }
inline Vec<double> tan(Vec<double> a) { return Sleef_tand4_u10(a.v); }
inline Vec<double> tanh(Vec<double> a) { return Sleef_tanhd4_u10(a.v); }
inline Vec<double> erf(Vec<double> a) { return Sleef_erfd4_u10(a.v); }
inline Vec<double> floor(Vec<double> a) { return _mm256_floor_pd(a.v); }
inline Vec<double> ceil(Vec<double> a) { return _mm256_ceil_pd(a.v); }
inline Vec<double> trunc(Vec<double> a) {
  return _mm256_round_pd(a.v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}
inline Vec<double> round_even(Vec<double> a) {
  return _mm256_round_pd(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
inline Vec<double> abs(Vec<double> a) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), a.v); }
inline Vec<double> pow(Vec<double> a, Vec<double> b) { return Sleef_powd4_u10(a.v, b.v); }
inline Vec<double> atan2(Vec<double> a, Vec<double> b) { return Sleef_atan2d4_u10(a.v, b.v); }
#endif  // KILN_VEC_AVX512, KILN_VEC_AVX2

#if defined(KILN_VEC_AVX2)
// tanh for float, one definition for both widths: |x| < 0.625: x + x^3 P(x^2); else
// 1 - 2 / (e + 1) for e = exp(2b), b = min(|x|, 10) (beyond 10 tanh rounds to 1 in float), with
// its sign. e + 1 = 2^n (1 + q) + 1 for q = e^r - 1 is one fused multiply-add, 2^n q + (2^n + 1)
// (2^n + 1 exact for n <= 23, and beyond that e + 1 rounds as e does); n is rounded by adding
// 1.5 * 2^23 (one fused multiply-add, not a multiply and a round: only a product within
// rounding of k + 1/2 could round the other way, and either n is right). <= 1.2 ulp over every
// float in [0, 11] (docs/performance.md, stop 37), and a short dependency chain (W6 chains 33).
inline Vec<float> tanh(Vec<float> x) {
  const Vec<float> one(1.0f), a = abs(x), z = x * x, magic(12582912.0f);
  const Vec<float> small = fmadd(x * z, horner(z, fitted::kTanhP), x);
  const Vec<float> b = at_most(a, 10.0f);
  const Vec<float> t = fmadd(b, Vec<float>(2.0f * 1.442695041e+00f), magic);  // n + magic
  const Vec<float> n = t - magic;
  const Vec<float> r =
      fmadd(n, Vec<float>(-1.428606820e-06f), fmadd(n, Vec<float>(-0.693145751953125f), b + b));
  const Vec<float> q = fmadd(r * r, horner(r, fitted::kExpQ), r);
  const Vec<float> s = two_to_rounded(t);
  const Vec<float> big = copy_sign_of(one - Vec<float>(2.0f) / fmadd(s, q, s + one), x);
  return select(a < Vec<float>(0.625f), small, big);
}

// sigmoid for float, one definition for both widths (through their clamp_keeping_nan and
// two_to_rounded): 1 / (1 + e^-x) with e^-x computed for x in [-87.33, 20] only, as tanh's exp
// (n rounded by adding 1.5 * 2^23, 2^n one factor): beyond 20 the sum rounds to 1 anyway, and
// below -87.33 the result would be subnormal (a microcode assist per vector on Intel cores), so
// it is 0 there, as in exp's zero lanes. 1.2x cheaper than 1 / (1 + exp(-x)) in W1's fused
// loop; within 2.5 ulp, as that was. (A reciprocal estimate and a Newton step in place of the
// division was 1.1x faster again with AVX-512, but AVX2 has no estimate as good as AVX-512's,
// and both widths must give the same bits.)
inline Vec<float> sigmoid(Vec<float> x) {
  const Vec<float> xc = clamp_keeping_nan(x, -87.33f, 20.0f), magic(12582912.0f), one(1.0f);
  const Vec<float> t = fmadd(xc, Vec<float>(-1.442695041e+00f), magic);  // round(-x / ln2) + magic
  const Vec<float> n = t - magic;
  const Vec<float> minus_r =
      fmadd(n, Vec<float>(1.428606820e-06f), fmadd(n, Vec<float>(0.693145751953125f), xc));
  const Vec<float> r = -minus_r;  // -x - n ln2
  const Vec<float> p = fmadd(r * r, horner(r, fitted::kExpQ), r) + one;
  const Vec<float> s = one / fmadd(p, two_to_rounded(t), one);
  return select(x < Vec<float>(-87.33f), Vec<float>(0.0f), s);  // (a NaN x is not < : kept)
}
#endif

// Loads Vec<C>::width elements of T, converted to C.
template <typename C, typename T>
Vec<C> load_as(const T* p) {
  using V = Vec<C>;
  if constexpr (std::is_same_v<C, T>) {
    return V::load(p);
#if defined(KILN_VEC_AVX512)
  } else if constexpr (std::is_same_v<C, double> && std::is_same_v<T, float>) {
    return V(_mm512_cvtps_pd(_mm256_loadu_ps(p)));
  } else if constexpr (std::is_same_v<C, float> && std::is_same_v<T, double>) {
    return V(_mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_loadu_pd(p))),
                                _mm512_cvtpd_ps(_mm512_loadu_pd(p + 8)), 1));
#elif defined(KILN_VEC_AVX2)
  } else if constexpr (std::is_same_v<C, double> && std::is_same_v<T, float>) {
    return V(_mm256_cvtps_pd(_mm_loadu_ps(p)));
  } else if constexpr (std::is_same_v<C, float> && std::is_same_v<T, double>) {
    return V(_mm256_set_m128(_mm256_cvtpd_ps(_mm256_loadu_pd(p + 4)),
                             _mm256_cvtpd_ps(_mm256_loadu_pd(p))));
#endif
  } else {
    alignas(64) C buf[V::width];
    for (int i = 0; i < V::width; ++i) buf[i] = static_cast<C>(p[i]);
    return V::load(buf);
  }
}

// max/min that propagate NaN (as torch.maximum), and treat the comparison the same in every lane.
template <typename V>
V max_nan(V a, V b) {
  return select(isnan_mask(a), a, select(isnan_mask(b), b, select(a > b, a, b)));
}
template <typename V>
V min_nan(V a, V b) {
  return select(isnan_mask(a), a, select(isnan_mask(b), b, select(a < b, a, b)));
}

// ---- non-temporal ("streaming") stores, for outputs far larger than the caches ----

// Stores a full vector to vector-aligned `p`, bypassing the caches where the target allows.
template <typename T>
inline void store_stream(Vec<T> v, T* p) {
#if defined(KILN_VEC_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    _mm512_stream_ps(p, v.v);
  } else if constexpr (std::is_same_v<T, double>) {
    _mm512_stream_pd(p, v.v);
  } else {
    v.store(p);
  }
#elif defined(KILN_VEC_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    _mm256_stream_ps(p, v.v);
  } else if constexpr (std::is_same_v<T, double>) {
    _mm256_stream_pd(p, v.v);
  } else {
    v.store(p);
  }
#else
  v.store(p);
#endif
}

#ifdef KILN_VEC_AVX512
inline constexpr uintptr_t kVectorBytes = 64;
#else
inline constexpr uintptr_t kVectorBytes = 32;
#endif
inline bool stream_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0;
}

// Software prefetch for streams far larger than the caches: asks for the cache line
// kPrefetchBytes past `p`. Measured on the 2-vCPU AVX-512 VM (16M floats, 2 threads): the
// hardware prefetchers alone leave a pass's memory time and arithmetic adding up; 4 KiB ahead
// made `gelu` 1.2x and W1's fused pass 1.1x faster (docs/performance.md, stop 40). A prefetch
// past the end of an array is harmless: it never faults.
inline constexpr int64_t kPrefetchBytes = 4096;
inline void prefetch_ahead(const void* p) {
#ifdef KILN_VEC_AVX2
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
#else
  (void)p;
#endif
}

// Orders this thread's streaming stores before whatever it does next.
inline void stream_fence() {
#ifdef KILN_VEC_AVX2
  _mm_sfence();
#endif
}

// out[i] = f(in[i]...) over n contiguous elements. The tail is computed as a padded full
// vector, so an element's value never depends on where it sits in the array.
//
// Streaming (`stream` = true, for outputs much larger than the caches): full vectors are
// written with non-temporal stores when `out` is vector aligned, which skips reading the
// destination's cache lines before overwriting them (a third of a binary op's memory traffic),
// and the inputs are prefetched ahead.
template <typename T, typename F, typename... In>
inline void map(F&& f, T* out, int64_t n, const In*... in) {
  map<T>(f, false, out, n, in...);
}
template <typename T, typename F, typename... In>
inline void map(F&& f, bool stream, T* out, int64_t n, const In*... in) {
  constexpr int W = Vec<T>::width;
  int64_t i = 0;
#ifdef KILN_VEC_AVX2
  if constexpr (W > 1) {
    if (stream && stream_aligned(out)) {
      for (; i + W <= n; i += W) {  // (W elements are at most one cache line)
        (prefetch_ahead(in + i), ...);
        store_stream(f(Vec<T>::load(in + i)...), out + i);
      }
      stream_fence();  // order the non-temporal stores before anything that follows
    }
  }
#endif
  for (; i + W <= n; i += W) f(Vec<T>::load(in + i)...).store(out + i);
  if (i < n) {
    if constexpr (W == 1) {
      return;
    } else {
      const int64_t rem = n - i;
      alignas(64) T tmp_out[W];
      auto pad = [&](const T* p) {
        alignas(64) T buf[W] = {};
        std::memcpy(buf, p + i, static_cast<size_t>(rem) * sizeof(T));
        return Vec<T>::load(buf);
      };
      f(pad(in)...).store(tmp_out);
      std::memcpy(out + i, tmp_out, static_cast<size_t>(rem) * sizeof(T));
    }
  }
}

}  // namespace kiln::vec
