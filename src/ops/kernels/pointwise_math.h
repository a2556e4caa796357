// The math of every pointwise op: one functor template F<T> per op, used by the op's eager
// kernel (ops/pointwise_defs.h instantiates it per dtype) and by generated code, which includes
// this header, so a fused pointwise graph computes bitwise what eager computes. Each OpDef
// names its functor and how it is called (OpDef::pointwise; see PointwiseBody):
//   Vector     Vec<T> operator()(Vec<T>...)  every input cast to the output dtype T
//   Predicate  bool operator()(T...)         T: the inputs' promoted dtype
//   Scalar     T operator()(T...)            every input cast to the output dtype T
// A functor with attributes is constructed from the call's Attrs; one without is
// default-constructed. Depends on vec.h, Attrs and the standard library only.
// Compile users with -ffp-contract=off: the compiler must not fuse a multiply and an add that
// the source keeps apart (explicit vec::fmadd calls stay fused).
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kiln/ops/op.h"
#include "ops/kernels/vec.h"

namespace kiln::ops {

using vec::Vec;

// ---- unary, Vector form: out = EXPR of Vec<T> x ----
#define KILN_UNARY_FN(NAME, EXPR)                      \
  template <typename T>                                \
  struct NAME##_fn {                                   \
    Vec<T> operator()(Vec<T> x) const { return EXPR; } \
  };

// Integers and floats, keeping the dtype.
KILN_UNARY_FN(neg, -x)
KILN_UNARY_FN(abs, vec::abs(x))
KILN_UNARY_FN(sign, vec::select(x > Vec<T>(T(0)), Vec<T>(T(1)),
                                vec::select(x < Vec<T>(T(0)), Vec<T>(T(-1)), Vec<T>(T(0)))))
KILN_UNARY_FN(relu, vec::select(x < Vec<T>(T(0)), Vec<T>(T(0)), x))
KILN_UNARY_FN(floor, vec::floor(x))
KILN_UNARY_FN(ceil, vec::ceil(x))
KILN_UNARY_FN(round, vec::round_even(x))
KILN_UNARY_FN(trunc, vec::trunc(x))
// Floating only.
KILN_UNARY_FN(exp, vec::exp(x))
KILN_UNARY_FN(exp2, vec::exp2(x))
KILN_UNARY_FN(expm1, vec::expm1(x))
KILN_UNARY_FN(log, vec::log(x))
KILN_UNARY_FN(log2, vec::log2(x))
KILN_UNARY_FN(log1p, vec::log1p(x))
KILN_UNARY_FN(sqrt, vec::sqrt(x))
KILN_UNARY_FN(rsqrt, Vec<T>(T(1)) / vec::sqrt(x))
KILN_UNARY_FN(reciprocal, Vec<T>(T(1)) / x)
KILN_UNARY_FN(sin, vec::sin(x))
KILN_UNARY_FN(cos, vec::cos(x))
KILN_UNARY_FN(tan, vec::tan(x))
KILN_UNARY_FN(tanh, vec::tanh(x))
KILN_UNARY_FN(erf, vec::erf(x))
KILN_UNARY_FN(sigmoid, vec::sigmoid(x))
KILN_UNARY_FN(silu, vec::sigmoid(x) * x)
#undef KILN_UNARY_FN

// gelu: the erf form, or the tanh approximation (attribute "tanh").
template <typename T>
struct gelu_fn {
  bool tanh_form;
  explicit gelu_fn(const Attrs& a) : tanh_form(a.str(0) == "tanh") {}
  Vec<T> operator()(Vec<T> x) const {
    const Vec<T> half(T(0.5)), one(T(1));
    if (tanh_form) {
      const Vec<T> k(T(0.7978845608028654)), c(T(0.044715));  // sqrt(2/pi)
      return half * x * (one + vec::tanh(k * vec::fmadd(c * x, x * x, x)));
    }
    return half * x * (one + vec::erf(x * Vec<T>(T(0.7071067811865476))));
  }
};

// clamp(x, min?, max?): NaN stays NaN (as PyTorch): x < lo and x > hi are false for NaN.
template <typename T>
struct clamp_fn {
  bool has_lo, has_hi;
  T lo{}, hi{};
  explicit clamp_fn(const Attrs& a) : has_lo(a.has(0)), has_hi(a.has(1)) {
    if (has_lo) lo = a.scalar(0).to<T>();
    if (has_hi) hi = a.scalar(1).to<T>();
  }
  Vec<T> operator()(Vec<T> x) const {
    if (has_lo) x = vec::select(x < Vec<T>(lo), Vec<T>(lo), x);
    if (has_hi) x = vec::select(x > Vec<T>(hi), Vec<T>(hi), x);
    return x;
  }
};

// nan_to_num(x, nan, posinf?, neginf?): infinities default to the dtype's extremes.
template <typename T>
struct nan_to_num_fn {
  T nan, posinf, neginf;
  explicit nan_to_num_fn(const Attrs& a)
      : nan(static_cast<T>(a.f(0))),
        posinf(a.has(1) ? static_cast<T>(a.f(1)) : std::numeric_limits<T>::max()),
        neginf(a.has(2) ? static_cast<T>(a.f(2)) : std::numeric_limits<T>::lowest()) {}
  Vec<T> operator()(Vec<T> x) const {
    x = vec::select(vec::isnan_mask(x), Vec<T>(nan), x);
    x = vec::select(x > Vec<T>(std::numeric_limits<T>::max()), Vec<T>(posinf), x);
    return vec::select(x < Vec<T>(std::numeric_limits<T>::lowest()), Vec<T>(neginf), x);
  }
};

// ---- unary, Predicate form ----
template <typename T>
struct isnan_fn {
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    return false;
  }
};
template <typename T>
struct isinf_fn {
  bool operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    return false;
  }
};
template <typename T>
struct logical_not_fn {
  bool operator()(T x) const { return !(x != T(0)); }
};

// ---- binary arithmetic, Vector form ----
// add and sub compute x +- alpha*y rounded once (as PyTorch's vectorised add): with alpha = 1
// that is exactly x +- y, and one FMA costs what the add does, where testing alpha == 1 per
// vector cost a compare and two branches in every fused loop that reads an add.
template <typename T>
struct add_fn {
  T alpha;
  explicit add_fn(const Attrs& a) : alpha(a.scalar(0).to<T>()) {}
  Vec<T> operator()(Vec<T> x, Vec<T> y) const {
    if constexpr (std::is_floating_point_v<T>) {
      return vec::fmadd(Vec<T>(alpha), y, x);
    } else {
      if (alpha == T(1)) return x + y;
      return x + Vec<T>(alpha) * y;
    }
  }
};
template <typename T>
struct sub_fn {
  T alpha;
  explicit sub_fn(const Attrs& a) : alpha(a.scalar(0).to<T>()) {}
  Vec<T> operator()(Vec<T> x, Vec<T> y) const {
    if constexpr (std::is_floating_point_v<T>) {
      return vec::fmadd(Vec<T>(-alpha), y, x);
    } else {
      if (alpha == T(1)) return x - y;
      return x - Vec<T>(alpha) * y;
    }
  }
};
template <typename T>
struct mul_fn {
  Vec<T> operator()(Vec<T> x, Vec<T> y) const { return x * y; }
};
template <typename T>
struct true_div_fn {
  Vec<T> operator()(Vec<T> x, Vec<T> y) const { return x / y; }
};

// a ** b for integers, by squaring (wrapping on overflow); negative exponents as PyTorch's
// tensor exponents: only +-1 survive.
template <typename T>
T int_pow(T base, T exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2 == 0) ? 1 : -1;
    return 0;
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (T e = exp; e; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}
template <typename T>
struct pow_fn {
  Vec<T> operator()(Vec<T> a, Vec<T> b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return vec::pow(a, b);
    } else if constexpr (std::is_same_v<T, bool>) {
      return Vec<T>(a.v || !b.v);
    } else {
      return Vec<T>(int_pow(a.v, b.v));
    }
  }
};
// maximum/minimum propagate NaN (as torch.maximum).
template <typename T>
struct maximum_fn {
  Vec<T> operator()(Vec<T> a, Vec<T> b) const { return vec::max_nan(a, b); }
};
template <typename T>
struct minimum_fn {
  Vec<T> operator()(Vec<T> a, Vec<T> b) const { return vec::min_nan(a, b); }
};
template <typename T>
struct atan2_fn {
  Vec<T> operator()(Vec<T> a, Vec<T> b) const { return vec::atan2(a, b); }
};

// ---- rounded division and remainder, Scalar form ----
// The integer forms need a nonzero divisor: their eager kernel checks every divisor before
// computing (integer division by zero raises), and so must any other caller.
template <typename T>
T floor_div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return div == 0 ? std::copysign(T(0), a / b) : fl;
  } else if constexpr (std::is_same_v<T, bool>) {
    return a;
  } else {
    if (b == -1)
      return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));  // no overflow trap
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
}
template <typename T>
T trunc_div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::trunc(a / b);
  } else if constexpr (std::is_same_v<T, bool>) {
    return a;
  } else {
    if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
    return a / b;
  }
}
template <typename T>
struct floor_div_fn {
  T operator()(T a, T b) const { return floor_div(a, b); }
};
template <typename T>
struct trunc_div_fn {
  T operator()(T a, T b) const { return trunc_div(a, b); }
};
// The remainder takes the divisor's sign (Python's %).
template <typename T>
struct remainder_fn {
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T mod = std::fmod(a, b);
      if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
      return mod;
    } else if constexpr (std::is_same_v<T, bool>) {
      return false;
    } else {
      if (b == -1) return 0;
      T mod = a % b;
      if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
      return mod;
    }
  }
};

// ---- comparisons and logical ops, Predicate form ----
#define KILN_PREDICATE_FN(NAME, EXPR)                \
  template <typename T>                              \
  struct NAME##_fn {                                 \
    bool operator()(T a, T b) const { return EXPR; } \
  };
KILN_PREDICATE_FN(eq, a == b)
KILN_PREDICATE_FN(ne, a != b)
KILN_PREDICATE_FN(lt, a < b)
KILN_PREDICATE_FN(le, a <= b)
KILN_PREDICATE_FN(gt, a > b)
KILN_PREDICATE_FN(ge, a >= b)
KILN_PREDICATE_FN(logical_and, (a != T(0)) && (b != T(0)))
KILN_PREDICATE_FN(logical_or, (a != T(0)) || (b != T(0)))
KILN_PREDICATE_FN(logical_xor, (a != T(0)) != (b != T(0)))
#undef KILN_PREDICATE_FN
// isclose(a, b; rtol, atol, equal_nan): |a - b| <= atol + rtol * |b| (as torch.isclose). Equal
// values (equal infinities included) are close; NaN only to NaN, and only when equal_nan.
// Floating types compute the tolerance in T, as PyTorch; integers and bool in double (exact for
// |values| < 2^53, where PyTorch's integer subtraction could overflow).
template <typename T>
struct isclose_fn {
  using C = std::conditional_t<std::is_floating_point_v<T>, T, double>;
  C rtol, atol;
  bool equal_nan;
  explicit isclose_fn(const Attrs& a)
      : rtol(static_cast<C>(a.f(0))), atol(static_cast<C>(a.f(1))), equal_nan(a.b(2)) {}
  bool operator()(T a, T b) const {
    if (a == b) return true;
    const C x = static_cast<C>(a), y = static_cast<C>(b);
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x) || std::isnan(y)) return equal_nan && std::isnan(x) && std::isnan(y);
    }
    const C err = std::abs(x - y);
    return std::isfinite(err) && err <= atol + std::abs(rtol * y);
  }
};

// ---- bitwise ops (integers and bool), Scalar form ----
#define KILN_BITWISE_FN(NAME, EXPR)                               \
  template <typename T>                                           \
  struct NAME##_fn {                                              \
    T operator()(T a, T b) const { return static_cast<T>(EXPR); } \
  };
KILN_BITWISE_FN(bitwise_and, a& b)
KILN_BITWISE_FN(bitwise_or, a | b)
KILN_BITWISE_FN(bitwise_xor, a ^ b)
#undef KILN_BITWISE_FN

// ---- ternary, Vector form ----
// lerp(s, e, w): from the nearer end, so that w = 1 gives e exactly.
template <typename T>
struct lerp_fn {
  Vec<T> operator()(Vec<T> s, Vec<T> e, Vec<T> w) const {
    const Vec<T> d = e - s;
    return vec::select(vec::abs(w) < Vec<T>(T(0.5)), s + w * d, e - d * (Vec<T>(T(1)) - w));
  }
};
template <typename T>
struct addcmul_fn {
  T value;
  explicit addcmul_fn(const Attrs& a) : value(a.scalar(0).to<T>()) {}
  Vec<T> operator()(Vec<T> s, Vec<T> a, Vec<T> b) const { return s + Vec<T>(value) * a * b; }
};
template <typename T>
struct addcdiv_fn {
  T value;
  explicit addcdiv_fn(const Attrs& a) : value(a.scalar(0).to<T>()) {}
  Vec<T> operator()(Vec<T> s, Vec<T> a, Vec<T> b) const { return s + Vec<T>(value) * a / b; }
};

// ---- selection, copies and fills, Scalar form ----
// A bool operand (where's condition, masked_fill's mask) may arrive as bool or as T: the
// conversion to the bool parameter is exact either way.
template <typename T>
struct where_fn {
  T operator()(bool condition, T x, T y) const { return condition ? x : y; }
};
template <typename T>
struct masked_fill_fn {
  T value;
  explicit masked_fill_fn(const Attrs& a) : value(a.scalar(0).to<T>()) {}
  T operator()(T x, bool mask) const { return mask ? value : x; }
};
// to_copy(x, dtype): the conversion to T is the cast of the input itself.
template <typename T>
struct to_copy_fn {
  T operator()(T x) const { return x; }
};
// copy(self, src): src (cast to self's dtype) replaces self's values.
template <typename T>
struct copy_fn {
  T operator()(T /*self*/, T src) const { return src; }
};
// fill(self, value): every element becomes value (self's values are not read).
template <typename T>
struct fill_fn {
  T value;
  explicit fill_fn(const Attrs& a) : value(a.scalar(0).to<T>()) {}
  T operator()(T /*self*/) const { return value; }
};

}  // namespace kiln::ops
