// The pointwise math header (src/ops/kernels/pointwise_math.h) against the eager ops: every
// pointwise op names the functor that computes it, and calling that functor directly over an
// array, as generated code will (Vec<T> loads and stores, the tail as a padded full vector),
// gives bitwise what the eager op gives. This file is compiled with the eager kernels' flags
// (KILN_POINTWISE_MATH_FLAGS: host CPU, -ffp-contract=off).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/ops/op.h"
#include "ops/kernels/pointwise_math.h"

namespace kiln {
namespace {

using Form = PointwiseBody::Form;
using vec::Vec;

TEST(PointwiseMath, EveryPointwiseOpNamesItsFunctor) {
  int pointwise = 0;
  for (const OpDef* op : all_ops()) {
    const std::string_view f = op->pointwise.functor;
    if (op->kind != OpKind::Pointwise) {
      EXPECT_TRUE(f.empty()) << op->name << " is not Pointwise but names functor " << f;
      continue;
    }
    ++pointwise;
    // A pointwise op is either one functor map or (the multi-output optimizer updates) a
    // fused kernel whose decomposition into functor-mapped ops is what generated code uses.
    if (f.empty()) {
      EXPECT_TRUE(op->decomposition)
          << op->name << ": Pointwise op with neither a pointwise.functor nor a decomposition";
      continue;
    }
    EXPECT_TRUE(f.starts_with("kiln::ops::") && f.ends_with("_fn"))
        << op->name << ": functor " << f << " is not a kiln::ops::*_fn template";
    EXPECT_LE(static_cast<int>(op->pointwise.form), static_cast<int>(Form::Scalar)) << op->name;
  }
  EXPECT_GE(pointwise, 50);
}

// The registered body of `op` is `functor` in `form`.
void expect_body(std::string_view op, std::string_view functor, Form form) {
  const OpDef* def = find_op(op);
  ASSERT_NE(def, nullptr) << op;
  EXPECT_EQ(def->pointwise.functor, functor) << op;
  EXPECT_EQ(def->pointwise.form, form) << op;
}

template <template <typename> class Fn, typename T>
Fn<T> make(const Attrs& attrs) {
  if constexpr (std::is_constructible_v<Fn<T>, const Attrs&>) {
    return Fn<T>(attrs);
  } else {
    return Fn<T>{};
  }
}

// Form::Vector over whole arrays: full vectors, then the tail as one zero-padded vector of
// which only the first n - i lanes are kept (the loop engine's rule).
template <template <typename> class Fn, typename T, typename... In>
std::vector<T> run_vector(const Attrs& attrs, const std::vector<In>&... in) {
  const Fn<T> f = make<Fn, T>(attrs);
  constexpr int64_t W = Vec<T>::width;
  const int64_t n = static_cast<int64_t>(std::array{in.size()...}[0]);
  std::vector<T> out(static_cast<size_t>(n));
  int64_t i = 0;
  for (; i + W <= n; i += W) f(Vec<T>::load(in.data() + i)...).store(out.data() + i);
  if (i < n) {
    const int64_t rem = n - i;
    auto pad = [&](const std::vector<T>& v) {
      alignas(64) T buf[W] = {};
      std::memcpy(buf, v.data() + i, static_cast<size_t>(rem) * sizeof(T));
      return Vec<T>::load(buf);
    };
    alignas(64) T tail[W];
    f(pad(in)...).store(tail);
    std::memcpy(out.data() + i, tail, static_cast<size_t>(rem) * sizeof(T));
  }
  return out;
}

// Element values as stored, bool as one byte (std::vector<bool> packs bits).
template <typename T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// Form::Predicate and Form::Scalar: element by element on plain values.
template <template <typename> class Fn, typename T, typename Out, typename... In>
std::vector<Stored<Out>> run_scalar(const Attrs& attrs, const std::vector<In>&... in) {
  const Fn<T> f = make<Fn, T>(attrs);
  const size_t n = std::array{in.size()...}[0];
  std::vector<Stored<Out>> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = f(static_cast<T>(in[i])...);
  return out;
}

template <typename T>
std::vector<Stored<T>> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<Stored<T>>(p, p + c.numel());
}

// Bitwise equality, except that any NaN equals any NaN (as in the conformance suites): which
// NaN a multiply of two NaNs returns is the first operand's on x86, and the compiler may
// commute the operands, so NaN signs and payloads differ between separately compiled copies
// of one functor (the ASan build's gelu gave -nan in the test and nan in the library).
template <typename T>
void expect_bitwise_equal(const std::vector<T>& direct, const Tensor& eager,
                          const std::string& what) {
  const std::vector<T> e = values_of<T>(eager);
  ASSERT_EQ(direct.size(), e.size()) << what;
  int mismatches = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    if (std::memcmp(&direct[i], &e[i], sizeof(T)) == 0) continue;
    if constexpr (std::is_floating_point_v<T>)
      if (std::isnan(direct[i]) && std::isnan(e[i])) continue;
    if (++mismatches <= 5)
      ADD_FAILURE() << what << ": element " << i << ": functor gives " << +direct[i]
                    << ", eager gives " << +e[i];
  }
  EXPECT_EQ(mismatches, 0) << what;
}

// n values (not a multiple of any vector width) over [lo, hi], with special values at the
// start and in the tail.
template <typename T>
std::vector<T> sample(unsigned seed, double lo, double hi, int64_t n = 1003) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(dist(gen));
  using L = std::numeric_limits<T>;
  const T specials[] = {T(0),     -T(0),         T(1),           T(-1),          T(0.5),
                        T(-0.5),  L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(),
                        L::max(), L::lowest(),   T(1e-3),        T(20),          T(-20)};
  size_t k = 0;
  for (T s : specials) v[k++] = s;
  v[v.size() - 1] = L::quiet_NaN();
  v[v.size() - 2] = -T(0);
  v[v.size() - 3] = L::infinity();
  return v;
}

template <typename T>
Tensor tensor_of(const std::vector<T>& v) {
  return tensor(v);
}

#define EXPECT_VECTOR_OP(OP, FN, ATTRS, EAGER, ...)                                         \
  do {                                                                                      \
    expect_body(OP, "kiln::ops::" #FN, Form::Vector);                                       \
    expect_bitwise_equal(run_vector<ops::FN, T>(ATTRS, __VA_ARGS__), EAGER,                 \
                         std::string(OP) + " " + std::string(dtype_info(dtype_v<T>).name)); \
  } while (0)

template <typename T>
void check_vector_ops() {
  const std::vector<T> x = sample<T>(1, -6, 6), y = sample<T>(2, -3, 3), w = sample<T>(3, -1, 2);
  const Tensor tx = tensor_of(x), ty = tensor_of(y), tw = tensor_of(w);
  const Attrs none;
  EXPECT_VECTOR_OP("add", add_fn, Attrs{Scalar(1)}, add(tx, ty), x, y);
  // alpha != 1 is a multiply and an add: they must not be fused into one FMA.
  EXPECT_VECTOR_OP("add", add_fn, Attrs{Scalar(2.5)}, add(tx, ty, 2.5), x, y);
  EXPECT_VECTOR_OP("sub", sub_fn, Attrs{Scalar(0.3)}, sub(tx, ty, 0.3), x, y);
  EXPECT_VECTOR_OP("mul", mul_fn, none, mul(tx, ty), x, y);
  EXPECT_VECTOR_OP("div", true_div_fn, none, div(tx, ty), x, y);
  EXPECT_VECTOR_OP("gelu", gelu_fn, Attrs{std::string("none")}, gelu(tx, "none"), x);
  EXPECT_VECTOR_OP("gelu", gelu_fn, Attrs{std::string("tanh")}, gelu(tx, "tanh"), x);
  EXPECT_VECTOR_OP("exp", exp_fn, none, exp(tx), x);
  EXPECT_VECTOR_OP("tanh", tanh_fn, none, tanh(tx), x);
  EXPECT_VECTOR_OP("erf", erf_fn, none, erf(tx), x);
  EXPECT_VECTOR_OP("sigmoid", sigmoid_fn, none, sigmoid(tx), x);
  EXPECT_VECTOR_OP("lerp", lerp_fn, none, lerp(tx, ty, tw), x, y, w);
  EXPECT_VECTOR_OP("addcmul", addcmul_fn, Attrs{Scalar(0.7)}, addcmul(tx, ty, tw, 0.7), x, y, w);
  EXPECT_VECTOR_OP("maximum", maximum_fn, none, maximum(tx, ty), x, y);
}

TEST(PointwiseMath, VectorFunctorsMatchEagerFloat32) { check_vector_ops<float>(); }
TEST(PointwiseMath, VectorFunctorsMatchEagerFloat64) { check_vector_ops<double>(); }

template <typename T>
void check_predicates() {
  const std::vector<T> a = sample<T>(4, -2, 2);
  std::vector<T> b = sample<T>(5, -2, 2);
  for (size_t i = 0; i < b.size(); i += 3) b[i] = a[i];  // some ties
  const Tensor ta = tensor_of(a), tb = tensor_of(b);
  const std::string dt(dtype_info(dtype_v<T>).name);
  expect_body("lt", "kiln::ops::lt_fn", Form::Predicate);
  expect_bitwise_equal(run_scalar<ops::lt_fn, T, bool>({}, a, b), lt(ta, tb), "lt " + dt);
  expect_body("eq", "kiln::ops::eq_fn", Form::Predicate);
  expect_bitwise_equal(run_scalar<ops::eq_fn, T, bool>({}, a, b), eq(ta, tb), "eq " + dt);
  expect_body("isnan", "kiln::ops::isnan_fn", Form::Predicate);
  expect_bitwise_equal(run_scalar<ops::isnan_fn, T, bool>({}, a), isnan(ta), "isnan " + dt);
  // Scalar form: floor division of floats, and where (its bool condition converts exactly).
  expect_body("floor_divide", "kiln::ops::floor_div_fn", Form::Scalar);
  expect_bitwise_equal(run_scalar<ops::floor_div_fn, T, T>({}, a, b), floor_divide(ta, tb),
                       "floor_divide " + dt);
  std::vector<T> cond_as_t(a.size());
  for (size_t i = 0; i < a.size(); ++i) cond_as_t[i] = a[i] < b[i] ? T(1) : T(0);
  expect_body("where", "kiln::ops::where_fn", Form::Scalar);
  expect_bitwise_equal(run_scalar<ops::where_fn, T, T>({}, cond_as_t, a, b),
                       where(lt(ta, tb), ta, tb), "where " + dt);
}

TEST(PointwiseMath, PredicateAndScalarFunctorsMatchEagerFloat32) { check_predicates<float>(); }
TEST(PointwiseMath, PredicateAndScalarFunctorsMatchEagerFloat64) { check_predicates<double>(); }

template <typename T>
void check_bitwise() {
  std::mt19937_64 gen(7);
  std::vector<T> a(1003), b(1003);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<T>(gen());
    b[i] = static_cast<T>(gen());
  }
  a[0] = std::numeric_limits<T>::min();
  b[0] = T(-1);
  const Tensor ta = tensor_of(a), tb = tensor_of(b);
  const std::string dt(dtype_info(dtype_v<T>).name);
  expect_body("bitwise_xor", "kiln::ops::bitwise_xor_fn", Form::Scalar);
  expect_bitwise_equal(run_scalar<ops::bitwise_xor_fn, T, T>({}, a, b), bitwise_xor(ta, tb),
                       "bitwise_xor " + dt);
  expect_body("bitwise_and", "kiln::ops::bitwise_and_fn", Form::Scalar);
  expect_bitwise_equal(run_scalar<ops::bitwise_and_fn, T, T>({}, a, b), bitwise_and(ta, tb),
                       "bitwise_and " + dt);
}

TEST(PointwiseMath, BitwiseFunctorsMatchEagerInt32) { check_bitwise<int32_t>(); }
TEST(PointwiseMath, BitwiseFunctorsMatchEagerInt64) { check_bitwise<int64_t>(); }

}  // namespace
}  // namespace kiln
