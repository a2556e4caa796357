// Conformance OpInfos for the pointwise ops (pointwise_unary/binary/ternary.cpp): every op on
// every dtype it supports, with per-op domains, NaN/inf where meaningful, type promotion across
// dtypes, 0-d tensors and C++ numbers, in-place and out= forms, the C++ operators, and invalid
// calls. References are float64 loops written from each op's definition (PyTorch semantics).
#include <cmath>
#include <limits>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using UnaryFn = std::function<double(double)>;
using NaryFn = std::function<double(const std::vector<double>&)>;

std::string dname(DType d) { return std::string(dtype_name(d)); }

Tensor floats(const std::vector<double>& v, DType dt) { return tensor(v).to(dt); }
Tensor ints(const std::vector<int64_t>& v, DType dt) { return tensor(v).to(dt); }

// How an op's result dtype follows from its operands.
enum class Result {
  Promote,  // PyTorch's result_type
  Float,    // result_type, integers and bool becoming float32
  Bool,     // bool, computed in result_type
};

DType result_dtype(Result r, const std::vector<Ref>& ins) {
  if (r == Result::Bool) return DType::Bool;
  return r == Result::Float ? expected_float_result_type(ins) : expected_result_type(ins);
}
DType compute_dtype(Result r, const std::vector<Ref>& ins) {
  return r == Result::Bool ? expected_result_type(ins) : result_dtype(r, ins);
}

// Elementwise reference: operands cast to the compute dtype, f in float64, the value stored as
// the result dtype would store it.
Ref elementwise(const std::vector<Ref>& ins, Result r, const NaryFn& f) {
  const DType out = result_dtype(r, ins), comp = compute_dtype(r, ins);
  return zip(ins, out, [&](const std::vector<double>& x) {
    std::vector<double> c(x.size());
    for (size_t i = 0; i < x.size(); ++i) c[i] = cast_to(x[i], comp);
    return cast_to(f(c), out);
  });
}
// The same, written back into operand 0 (in-place forms): the value is cast to its dtype.
Ref inplace(const std::vector<Ref>& ins, Result r, const NaryFn& f) {
  Ref out = elementwise(ins, r, f);
  out.dtype = ins[0].dtype;
  for (double& v : out.v) v = cast_to(v, out.dtype);
  return out;
}
NaryFn lift(UnaryFn f) {
  return [f](const std::vector<double>& x) { return f(x[0]); };
}
NaryFn lift(std::function<double(double, double)> f) {
  return [f](const std::vector<double>& x) { return f(x[0], x[1]); };
}

// Runs `op` through dispatch's out= path into `out`.
Tensor run_into(const char* op, std::vector<Tensor> inputs, Attrs attrs, Tensor out) {
  const OpDef* def = find_op(op);
  if (!def) throw std::runtime_error(std::string("no op named ") + op);
  dispatch_into(*def, inputs, attrs, out);
  return out;
}

// Replaces zeros of integer/bool tensors by one (integer division has no value for them).
Tensor no_int_zeros(Tensor t) {
  if (!is_floating(t.dtype()) && t.numel() > 0) masked_fill_(t, t == wrap_scalar(0), 1);
  return t;
}

// Operands of `dt` against operands of every other dtype (dimmed, 0-d, C++ numbers), keeping
// the pairs whose promoted type `supported` accepts.
std::vector<Sample> promotion_samples(DType dt, double lo, double hi, double lo2, double hi2,
                                      const std::vector<DType>& others,
                                      const std::function<bool(DType)>& supported,
                                      bool numbers_float = true, bool numbers_int = true) {
  std::vector<Sample> out;
  auto a = [&](std::vector<int64_t> s) {
    return make_tensor_for_test(s, dt, lo, hi, Layout::Contiguous, 5);
  };
  auto keep = [&](Sample s) {
    std::vector<Ref> refs;
    for (const Tensor& t : s.inputs) refs.push_back(Ref::of(t));
    if (supported(expected_result_type(refs))) out.push_back(std::move(s));
  };
  for (DType o : others) {
    if (o == dt) continue;
    auto b = [&](std::vector<int64_t> s) {
      return make_tensor_for_test(s, o, lo2, hi2, Layout::Contiguous, 6);
    };
    keep({"[2, 3] x [3] " + dname(o), {a({2, 3}), b({3})}});
    keep({"[3] x [2, 3] " + dname(o), {a({3}), b({2, 3})}});
    keep({"[2, 3] x 0-d " + dname(o), {a({2, 3}), b({})}});
    keep({"0-d x [2, 3] " + dname(o), {a({}), b({2, 3})}});
  }
  std::vector<std::pair<std::string, Tensor>> numbers = {{"true", wrap_scalar(true)}};
  const double mid = std::round((lo2 + hi2) / 2 + (hi2 - lo2) / 5);
  if (numbers_int)
    numbers.push_back({"int", wrap_scalar(static_cast<int64_t>(mid == 0 ? 1 : mid))});
  if (numbers_float) numbers.push_back({"double", wrap_scalar(mid + 0.375)});
  for (auto& [n, num] : numbers) {
    keep({"[2, 3] x number " + n, {a({2, 3}), num}});
    keep({"number " + n + " x [2, 3]", {num, a({2, 3})}});
    keep({"0-d x number " + n, {a({}), num}});
  }
  return out;
}

bool any_dtype(DType) { return true; }
bool numeric_dtype(DType d) { return d != DType::Bool; }
bool integral_dtype(DType d) { return !is_floating(d); }

// An out= error common to every op: the result shape differs from the output's.
ErrorCase wrong_out_shape(std::string op, std::vector<Tensor> ins, Attrs attrs = {}) {
  return expect_error<ShapeError>("out= tensor of the wrong shape", "cannot change", [=] {
    run_into(op.c_str(), ins, attrs, zeros({7, 7}, DType::Float64));
  });
}

// ================================ unary ================================

const std::vector<double> kSpecial = {kNaN, kInf, -kInf, 0.0,   -0.0, 1.0,
                                      -1.0, 0.5,  -2.5,  1e-30, 1e30};

struct UnarySpec {
  std::string name;
  std::string opdef;
  std::function<Tensor(const Tensor&)> call;
  UnaryFn f;
  Result result;
  std::vector<DType> dtypes;
  double lo = -5, hi = 5;
  std::vector<double> special = kSpecial;
  double rtol32 = 1e-5, atol32 = 1e-5;
};

std::vector<Sample> unary_op_samples(const UnarySpec& s, DType dt) {
  std::vector<Sample> out = unary_samples(dt, s.lo, s.hi);
  if (is_floating(dt) && !s.special.empty()) {
    out.push_back({"special values", {floats(s.special, dt)}});
    const int64_t n = static_cast<int64_t>(s.special.size());
    std::vector<double> twice = s.special;
    twice.insert(twice.end(), s.special.begin(), s.special.end());
    out.push_back({"special values, transposed", {floats(twice, dt).view({2, n}).t()}});
  }
  if (!is_floating(dt)) {
    // Integer extremes of the domain, stored exactly.
    out.push_back({"integer range",
                   {ints({static_cast<int64_t>(s.lo), static_cast<int64_t>(s.hi), 0, 1}, dt)}});
  }
  return out;
}

OpInfo unary_info(UnarySpec s) {
  OpInfo info;
  info.name = s.name;
  info.covers = {s.opdef};
  info.dtypes = s.dtypes;
  info.samples = [s](DType dt) { return unary_op_samples(s, dt); };
  auto call = s.call;
  info.fn = [call](const std::vector<Tensor>& in) { return std::vector<Tensor>{call(in[0])}; };
  auto f = s.f;
  auto r = s.result;
  info.ref = [f, r](const std::vector<Ref>& in) {
    return std::vector<Ref>{elementwise(in, r, lift(f))};
  };
  info.rtol32 = s.rtol32;
  info.atol32 = s.atol32;
  info.second_order = true;
  std::string opname = s.opdef;
  info.errors.push_back(wrong_out_shape(opname, {ones({3})},
                                        opname == "gelu" ? Attrs{std::string("none")} : Attrs{}));
  if (s.result == Result::Float) {
    info.errors.push_back(
        expect_error<DTypeError>("float result into an int64 output", "can't be cast", [opname] {
          Attrs attrs = opname == "gelu" ? Attrs{std::string("none")} : Attrs{};
          run_into(opname.c_str(), {ones({3}, DType::Int64)}, attrs, zeros({3}, DType::Int64));
        }));
  } else if (s.result == Result::Promote) {
    info.errors.push_back(
        expect_error<DTypeError>("bool input", "bool", [call] { call(ones({3}, DType::Bool)); }));
  }
  return info;
}

double ref_round_half_even(double x) {
  if (!std::isfinite(x)) return x;
  double f = std::floor(x), d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}
double ref_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }  // NaN -> 0, as PyTorch
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

const std::vector<double> kHalves = {0.5,    1.5,     2.5,  -0.5, -1.5,  -2.5,
                                     2.4999, -3.5001, kNaN, kInf, -kInf, -0.0};

std::vector<UnarySpec> unary_specs() {
  const auto& all = kAllDTypes;
  const auto& num = kNumericDTypes;
  std::vector<UnarySpec> v = {
      {"neg", "neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; },
       Result::Promote, num},
      {"abs", "abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); },
       Result::Promote, num},
      {"sign", "sign", [](const Tensor& x) { return sign(x); }, ref_sign, Result::Promote, num},
      {"relu", "relu", [](const Tensor& x) { return relu(x); },
       [](double x) { return std::isnan(x) ? x
                             : x < 0       ? 0.0
                                           : x; }, Result::Promote, num},
      {"floor", "floor", [](const Tensor& x) { return floor(x); },
       [](double x) { return std::floor(x); }, Result::Promote, num},
      {"ceil", "ceil", [](const Tensor& x) { return ceil(x); },
       [](double x) { return std::ceil(x); }, Result::Promote, num},
      {"round", "round", [](const Tensor& x) { return round(x); }, ref_round_half_even,
       Result::Promote, num, -5, 5, kHalves},
      {"trunc", "trunc", [](const Tensor& x) { return trunc(x); },
       [](double x) { return std::trunc(x); }, Result::Promote, num},
      {"exp",
       "exp",
       [](const Tensor& x) { return exp(x); },
       [](double x) { return std::exp(x); },
       Result::Float,
       all,
       -5,
       5,
       {kNaN, kInf, -kInf, 0.0, -0.0, 100.0, -100.0, 700.0, -750.0, 1e-30}},
      {"exp2",
       "exp2",
       [](const Tensor& x) { return exp2(x); },
       [](double x) { return std::exp2(x); },
       Result::Float,
       all,
       -5,
       5,
       {kNaN, kInf, -kInf, 0.0, -0.0, 130.0, -130.0, 1030.0, -1080.0, 0.5}},
      {"expm1",
       "expm1",
       [](const Tensor& x) { return expm1(x); },
       [](double x) { return std::expm1(x); },
       Result::Float,
       all,
       -5,
       5,
       {kNaN, kInf, -kInf, 0.0, -0.0, 1e-10, -1e-10, 100.0, -100.0, 1e-30}},
      {"log",
       "log",
       [](const Tensor& x) { return log(x); },
       [](double x) { return std::log(x); },
       Result::Float,
       all,
       0.05,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, -1.0, 1.0, 1e-30, 1e30, 2.0}},
      {"log2",
       "log2",
       [](const Tensor& x) { return log2(x); },
       [](double x) { return std::log2(x); },
       Result::Float,
       all,
       0.05,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, -1.0, 1.0, 1e-30, 1e30, 1024.0}},
      {"log1p",
       "log1p",
       [](const Tensor& x) { return log1p(x); },
       [](double x) { return std::log1p(x); },
       Result::Float,
       all,
       -0.9,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, -1.0, -2.0, 1e-10, 1e-30, 1e30}},
      {"sqrt",
       "sqrt",
       [](const Tensor& x) { return sqrt(x); },
       [](double x) { return std::sqrt(x); },
       Result::Float,
       all,
       0,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, -1.0, 1e-30, 1e30, 2.0}},
      {"rsqrt",
       "rsqrt",
       [](const Tensor& x) { return rsqrt(x); },
       [](double x) { return 1.0 / std::sqrt(x); },
       Result::Float,
       all,
       0.05,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, -1.0, 1e-30, 1e30, 4.0}},
      {"reciprocal", "reciprocal", [](const Tensor& x) { return reciprocal(x); },
       [](double x) { return 1.0 / x; }, Result::Float, all},
      {"sin",
       "sin",
       [](const Tensor& x) { return sin(x); },
       [](double x) { return std::sin(x); },
       Result::Float,
       all,
       -7,
       7,
       {kNaN, kInf, -kInf, 0.0, -0.0, M_PI, -M_PI / 2, 1e-30, 100.0}},
      {"cos",
       "cos",
       [](const Tensor& x) { return cos(x); },
       [](double x) { return std::cos(x); },
       Result::Float,
       all,
       -7,
       7,
       {kNaN, kInf, -kInf, 0.0, -0.0, M_PI, M_PI / 2, 1e-30, 100.0}},
      // Poles of tan are avoided: |x| < 1.4 (and integer inputs never hit one).
      {"tan",
       "tan",
       [](const Tensor& x) { return tan(x); },
       [](double x) { return std::tan(x); },
       Result::Float,
       all,
       -1.4,
       1.4,
       {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 1e-30, 3.0}},
      {"tanh", "tanh", [](const Tensor& x) { return tanh(x); },
       [](double x) { return std::tanh(x); }, Result::Float, all},
      {"erf", "erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); },
       Result::Float, all, -3, 3},
      {"sigmoid",
       "sigmoid",
       [](const Tensor& x) { return sigmoid(x); },
       ref_sigmoid,
       Result::Float,
       all,
       -10,
       10,
       {kNaN, kInf, -kInf, 0.0, -0.0, 50.0, -50.0, 1e-30, 1e30, -1e30}},
      {"silu",
       "silu",
       [](const Tensor& x) { return silu(x); },
       [](double x) { return x / (1.0 + std::exp(-x)); },
       Result::Float,
       all,
       -10,
       10,
       {kNaN, kInf, 0.0, -0.0, 50.0, -50.0, 1e-30, 1e30}},
      {"gelu",
       "gelu",
       [](const Tensor& x) { return gelu(x); },
       ref_gelu,
       Result::Float,
       all,
       -5,
       5,
       {kNaN, kInf, 0.0, -0.0, 10.0, -10.0, 1e-30, 1e30}},
      {"gelu_tanh",
       "gelu",
       [](const Tensor& x) { return gelu(x, "tanh"); },
       ref_gelu_tanh,
       Result::Float,
       all,
       -5,
       5,
       {kNaN, kInf, 0.0, -0.0, 10.0, -10.0, 1e-30, 1e30, -1e30}},
  };
  return v;
}

const bool kUnaryRegistered = [] {
  for (UnarySpec& s : unary_specs()) RegisterOpInfo{unary_info(s)};
  return true;
}();

// In-place unary forms write into the (possibly non-contiguous) tensor itself.
struct InplaceUnary {
  std::string name;
  Tensor& (*call)(Tensor&);
  UnaryFn f;
  std::vector<DType> dtypes;
  double lo, hi;
};
const bool kInplaceUnaryRegistered = [] {
  std::vector<InplaceUnary> v = {
      {"neg_", neg_, [](double x) { return -x; }, kNumericDTypes, -5, 5},
      {"exp_", exp_, [](double x) { return std::exp(x); }, kFloatDTypes, -5, 5},
      {"sqrt_", sqrt_, [](double x) { return std::sqrt(x); }, kFloatDTypes, 0, 10},
      {"relu_", relu_, [](double x) { return x < 0 ? 0.0 : x; }, kNumericDTypes, -5, 5},
      {"sigmoid_", sigmoid_, ref_sigmoid, kFloatDTypes, -5, 5},
      {"tanh_", tanh_, [](double x) { return std::tanh(x); }, kFloatDTypes, -5, 5},
  };
  for (const InplaceUnary& u : v) {
    OpInfo info;
    info.name = u.name;
    std::string base = u.name.substr(0, u.name.size() - 1);
    info.covers = {base};
    info.dtypes = u.dtypes;
    const double lo = u.lo, hi = u.hi;
    info.samples = [lo, hi](DType dt) { return unary_samples(dt, lo, hi); };
    auto call = u.call;
    info.fn = [call](const std::vector<Tensor>& in) {
      Tensor x = in[0];
      const uint64_t version = x.numel() ? x.impl()->storage()->version() : 0;
      Tensor& r = call(x);
      EXPECT_TRUE(r.is_same(x)) << "an in-place op must return its tensor";
      if (x.numel()) {
        EXPECT_GT(x.impl()->storage()->version(), version) << "version not bumped";
      }
      return std::vector<Tensor>{x};
    };
    auto f = u.f;
    info.ref = [f](const std::vector<Ref>& in) {
      return std::vector<Ref>{inplace(in, Result::Promote, lift(f))};
    };
    if (u.dtypes == kFloatDTypes) {
      info.errors.push_back(
          expect_error<DTypeError>("int tensor in place", "can't be cast", [call] {
            Tensor x = ones({3}, DType::Int64);
            call(x);
          }));
    }
    info.errors.push_back(expect_error<ValueError>("expanded tensor in place", "expanded", [call] {
      Tensor x = ones({1}, DType::Float32).expand({4});
      call(x);
    }));
    info.second_order = true;
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

// ---- nan_to_num ----
double nan_to_num_ref(double x, DType dt, double nan, std::optional<double> posinf,
                      std::optional<double> neginf) {
  const double mx =
      dt == DType::Float32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  if (std::isnan(x)) return nan;
  if (x == kInf) return posinf.value_or(mx);
  if (x == -kInf) return neginf.value_or(-mx);
  return x;
}
void register_nan_to_num(std::string name, double nan, std::optional<double> posinf,
                         std::optional<double> neginf) {
  OpInfo info;
  info.name = name;
  info.covers = {"nan_to_num"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) {
    auto s = unary_samples(dt);
    if (is_floating(dt)) {
      s.push_back({"special values", {floats(kSpecial, dt)}});
      s.push_back({"special values [2, 11] transposed",
                   {floats(
                        [] {
                          std::vector<double> v = kSpecial;
                          v.insert(v.end(), kSpecial.rbegin(), kSpecial.rend());
                          return v;
                        }(),
                        dt)
                        .view({11, 2})
                        .t()}});
    }
    return s;
  };
  info.fn = [=](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{nan_to_num(in[0], nan, posinf, neginf)};
  };
  info.ref = [=](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    return std::vector<Ref>{map(in[0], dt, [=](double x) {
      return cast_to(nan_to_num_ref(x, dt, nan, posinf, neginf), dt);
    })};
  };
  info.errors.push_back(
      wrong_out_shape("nan_to_num", {ones({3})}, Attrs{0.0, AttrValue(), AttrValue()}));
  info.errors.push_back(
      expect_error<DTypeError>("int input through the OpDef", "not supported", [] {
        run_into("nan_to_num", {ones({3}, DType::Int64)}, Attrs{0.0, AttrValue(), AttrValue()},
                 zeros({3}, DType::Int64));
      }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}
const bool kNanToNumRegistered = [] {
  register_nan_to_num("nan_to_num", 0.0, std::nullopt, std::nullopt);
  register_nan_to_num("nan_to_num_values", 1.5, 2.0, -3.0);
  return true;
}();

// ---- predicates: bool results ----
const bool kPredicatesRegistered = [] {
  struct P {
    std::string name;
    Tensor (*call)(const Tensor&);
    UnaryFn f;
  };
  std::vector<P> v = {
      {"isnan", isnan, [](double x) { return std::isnan(x) ? 1.0 : 0.0; }},
      {"isinf", isinf, [](double x) { return std::isinf(x) ? 1.0 : 0.0; }},
      {"logical_not", logical_not, [](double x) { return x == 0 ? 1.0 : 0.0; }},
  };
  for (const P& p : v) {
    UnarySpec s{p.name, p.name, p.call, p.f, Result::Bool, kAllDTypes};
    RegisterOpInfo{unary_info(s)};
  }
  // operator! is logical_not.
  OpInfo info;
  info.name = "operator_not";
  info.covers = {"logical_not"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) { return unary_samples(dt); };
  info.fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{!in[0]}; };
  info.ref = [](const std::vector<Ref>& in) {
    return std::vector<Ref>{
        elementwise(in, Result::Bool, lift([](double x) { return x == 0 ? 1.0 : 0.0; }))};
  };
  info.errors.push_back(wrong_out_shape("logical_not", {ones({3})}));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
  return true;
}();

// ---- clamp ----
double clamp_ref(double x, std::optional<double> lo, std::optional<double> hi) {
  if (std::isnan(x)) return x;
  if (lo && x < *lo) x = *lo;
  if (hi && x > *hi) x = *hi;
  return x;
}
std::vector<Ref> clamp_refs(const std::vector<Ref>& in, std::optional<Scalar> lo,
                            std::optional<Scalar> hi, bool in_place) {
  // The bounds take part in type promotion as C++ numbers.
  std::vector<Ref> ops = {in[0]};
  for (const auto& b : {lo, hi})
    if (b) ops.push_back(Ref{{}, {b->to_double()}, b->dtype(), true});
  const DType out = expected_result_type(ops);
  std::optional<double> l, h;
  if (lo) l = cast_to(lo->to_double(), out);
  if (hi) h = cast_to(hi->to_double(), out);
  Ref r = map(in[0], out, [&](double x) { return cast_to(clamp_ref(cast_to(x, out), l, h), out); });
  if (in_place) r.dtype = in[0].dtype;
  return {r};
}
void register_clamp(std::string name, std::optional<Scalar> lo, std::optional<Scalar> hi,
                    std::vector<DType> dtypes, bool in_place = false, bool use_clip = false) {
  OpInfo info;
  info.name = name;
  info.covers = {"clamp"};
  info.dtypes = dtypes;
  info.samples = [](DType dt) {
    auto s = unary_samples(dt);
    if (is_floating(dt)) s.push_back({"special values", {floats(kSpecial, dt)}});
    return s;
  };
  info.fn = [=](const std::vector<Tensor>& in) {
    if (!in_place)
      return std::vector<Tensor>{use_clip ? clip(in[0], lo, hi) : clamp(in[0], lo, hi)};
    Tensor x = in[0];
    Tensor& r = x.clamp_(lo, hi);
    EXPECT_TRUE(r.is_same(x));
    return std::vector<Tensor>{x};
  };
  info.ref = [=](const std::vector<Ref>& in) { return clamp_refs(in, lo, hi, in_place); };
  info.errors.push_back(expect_error<ValueError>(
      "neither bound", "at least one", [] { clamp(ones({2}), std::nullopt, std::nullopt); }));
  info.errors.push_back(expect_error<DTypeError>(
      "bool tensor", "bool", [] { clamp(ones({2}, DType::Bool), true, std::nullopt); }));
  info.errors.push_back(
      expect_error<DTypeError>("in place on int64 with a float bound", "can't be cast", [] {
        Tensor x = ones({2}, DType::Int64);
        clamp_(x, 0.5, std::nullopt);
      }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}
const bool kClampRegistered = [] {
  register_clamp("clamp_min", Scalar(-1), std::nullopt, kNumericDTypes);
  register_clamp("clamp_max", std::nullopt, Scalar(2), kNumericDTypes);
  register_clamp("clamp_both", Scalar(-2), Scalar(3), kNumericDTypes);
  register_clamp("clamp_min_above_max", Scalar(3), Scalar(-1), kNumericDTypes);
  register_clamp("clamp_float_bounds", Scalar(-1.5), Scalar(2.25), kNumericDTypes);
  register_clamp("clamp_bool_tensor_int_bound", Scalar(0), Scalar(1), {DType::Bool});
  register_clamp("clip", Scalar(-2.5), Scalar(0.5), kFloatDTypes, false, true);
  register_clamp("clamp_inplace", Scalar(-2), Scalar(3), kNumericDTypes, true);
  register_clamp("clamp_inplace_min", Scalar(0.25), std::nullopt, kFloatDTypes, true);
  return true;
}();

// ================================ binary ================================

struct BinarySpec {
  std::string name;
  std::vector<std::string> covers;
  std::vector<DType> dtypes;
  std::function<Tensor(const Tensor&, const Tensor&)> call;
  std::function<double(double, double)> f;
  Result result;
  std::function<bool(DType)> supported = any_dtype;  // promoted dtypes the op accepts
  double lo = -5, hi = 5, lo2 = -5, hi2 = 5;
  std::vector<double> special_a = {}, special_b = {};  // float operands crossed [n,1] x [1,m]
  bool divisor = false;  // integer zeros of operand 1 are replaced (integer division)
  std::vector<ErrorCase> errors = {};
  bool numbers_float = true;
};

std::vector<Sample> binary_op_samples(const BinarySpec& s, DType dt) {
  std::vector<Sample> out = binary_samples(dt, s.lo, s.hi, s.lo2, s.hi2);
  for (Sample& p :
       promotion_samples(dt, s.lo, s.hi, s.lo2, s.hi2, kAllDTypes, s.supported, s.numbers_float))
    out.push_back(std::move(p));
  if (is_floating(dt) && !s.special_a.empty()) {
    const int64_t n = static_cast<int64_t>(s.special_a.size()),
                  m = static_cast<int64_t>(s.special_b.size());
    out.push_back({"special values crossed",
                   {floats(s.special_a, dt).view({n, 1}), floats(s.special_b, dt).view({1, m})}});
  }
  if (s.divisor)
    for (Sample& p : out) p.inputs[1] = no_int_zeros(p.inputs[1]);
  return out;
}

OpInfo binary_info(BinarySpec s) {
  OpInfo info;
  info.name = s.name;
  info.covers = s.covers;
  info.dtypes = s.dtypes;
  info.samples = [s](DType dt) { return binary_op_samples(s, dt); };
  auto call = s.call;
  info.fn = [call](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{call(in[0], in[1])};
  };
  auto f = s.f;
  auto r = s.result;
  info.ref = [f, r](const std::vector<Ref>& in) {
    return std::vector<Ref>{elementwise(in, r, lift(f))};
  };
  info.errors = s.errors;
  info.second_order = true;
  const DType dt = s.dtypes.back();
  info.errors.push_back(
      expect_error<ShapeError>("shapes that don't broadcast", "cannot be broadcast", [call, dt] {
        call(ones({2, 3}, dt), ones({4}, dt));
      }));
  return info;
}

// Python's floor division and modulo (sign of the divisor); IEEE results for a zero divisor.
// Floor division as Python defines it (and PyTorch follows): the floor of the exact quotient;
// an infinite dividend has no such floor (NaN), and a finite one over an infinite divisor is
// -0 + an infinitesimal whose floor is -1 when the signs differ.
double floor_div_ref(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (b == 0) return a / b;
  if (std::isinf(a)) return kNaN;
  if (std::isinf(b)) return a == 0 || (a < 0) == (b < 0) ? 0.0 : -1.0;
  return std::floor(a / b);
}
double trunc_div_ref(double a, double b) { return std::trunc(a / b); }
double remainder_ref(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}
// PyTorch's integer powers: negative exponents leave only the bases 1 and -1.
double int_pow_ref(double a, double b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (std::fmod(b, 2) == 0 ? 1 : -1) : 0;
  double r = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(b); ++i) r *= a;
  return r;
}
double max_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
}
double min_ref(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
}
double b2d(bool b) { return b ? 1.0 : 0.0; }

ErrorCase bool_unsupported(const char* what,
                           std::function<Tensor(const Tensor&, const Tensor&)> call,
                           std::string needle = "bool") {
  return expect_error<DTypeError>(what, needle,
                                  [call] { call(ones({3}, DType::Bool), ones({3}, DType::Bool)); });
}
ErrorCase float_unsupported(const char* what,
                            std::function<Tensor(const Tensor&, const Tensor&)> call) {
  return expect_error<DTypeError>(what, "float32",
                                  [call] { call(ones({3}), ones({3}, DType::Int64)); });
}
ErrorCase int_div_by_zero(std::function<Tensor(const Tensor&, const Tensor&)> call) {
  return expect_error<ValueError>("integer division by zero", "division by zero", [call] {
    call(ones({3}, DType::Int64), tensor({2, 0, 1}, DType::Int64));
  });
}

const std::vector<double> kSpecialA = {kNaN, kInf, -kInf, 0.0, -0.0, 3.0, -2.5, 1e30};
const std::vector<double> kSpecialB = {kNaN, kInf, -kInf, 0.0, -0.0, 2.0, -0.5, 1e-30};

using BinFn = std::function<Tensor(const Tensor&, const Tensor&)>;

std::vector<BinarySpec> binary_specs() {
  auto add2 = [](double a, double b) { return a + b; };
  auto sub2 = [](double a, double b) { return a - b; };
  std::vector<BinarySpec> v;
  v.push_back({"add",
               {"add"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return add(a, b); },
               add2,
               Result::Promote,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  v.push_back({"add_alpha",
               {"add"},
               kNumericDTypes,
               [](const Tensor& a, const Tensor& b) { return add(a, b, 3); },
               [](double a, double b) { return a + 3 * b; },
               Result::Promote,
               numeric_dtype});
  v.push_back({"add_float_alpha",
               {"add"},
               kFloatDTypes,
               [](const Tensor& a, const Tensor& b) { return add(a, b, -0.5); },
               [](double a, double b) { return a - 0.5 * b; },
               Result::Promote,
               [](DType d) { return is_floating(d); }});
  v.push_back({"add_bool_alpha",
               {"add"},
               {DType::Bool},
               [](const Tensor& a, const Tensor& b) { return add(a, b, true); },
               [](double a, double b) { return a + b; },
               Result::Promote,
               any_dtype});
  v.back().errors.push_back(expect_error<DTypeError>("float alpha with int inputs", "alpha", [] {
    add(ones({2}, DType::Int32), ones({2}, DType::Int32), 0.5);
  }));
  v.back().errors.push_back(expect_error<DTypeError>("int alpha with bool inputs", "alpha", [] {
    add(ones({2}, DType::Bool), ones({2}, DType::Bool), 2);
  }));
  v.push_back({"sub",
               {"sub"},
               kNumericDTypes,
               [](const Tensor& a, const Tensor& b) { return sub(a, b); },
               sub2,
               Result::Promote,
               numeric_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB,
               false,
               {bool_unsupported(
                   "bool - bool", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
                   "logical_xor")}});
  v.push_back({"sub_alpha",
               {"sub"},
               kNumericDTypes,
               [](const Tensor& a, const Tensor& b) { return sub(a, b, 2); },
               [](double a, double b) { return a - 2 * b; },
               Result::Promote,
               numeric_dtype});
  v.push_back({"mul",
               {"mul"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return mul(a, b); },
               [](double a, double b) { return a * b; },
               Result::Promote,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  // True division: integers (zero divisors included) become float32.
  v.push_back({"div",
               {"div"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return div(a, b); },
               [](double a, double b) { return a / b; },
               Result::Float,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  v.back().errors.push_back(
      expect_error<DTypeError>("float result into an int output", "can't be cast", [] {
        run_into("div", {ones({2}, DType::Int64), ones({2}, DType::Int64)}, {},
                 zeros({2}, DType::Int64));
      }));
  v.push_back(
      {"div_floor",
       {"floor_divide"},
       kNumericDTypes,
       [](const Tensor& a, const Tensor& b) { return div(a, b, "floor"); },
       floor_div_ref,
       Result::Promote,
       numeric_dtype,
       -9,
       9,
       -4,
       4,
       kSpecialA,
       kSpecialB,
       true,
       {int_div_by_zero([](const Tensor& a, const Tensor& b) { return div(a, b, "floor"); }),
        bool_unsupported("bool // bool",
                         [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }),
        expect_error<ValueError>("unknown rounding mode", "rounding_mode",
                                 [] { div(ones({2}), ones({2}), "round"); })}});
  v.push_back(
      {"floor_divide",
       {"floor_divide"},
       kNumericDTypes,
       [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); },
       floor_div_ref,
       Result::Promote,
       numeric_dtype,
       -9,
       9,
       -4,
       4,
       {},
       {},
       true,
       {int_div_by_zero([](const Tensor& a, const Tensor& b) { return floor_divide(a, b); })}});
  v.push_back(
      {"div_trunc",
       {"trunc_divide"},
       kNumericDTypes,
       [](const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); },
       trunc_div_ref,
       Result::Promote,
       numeric_dtype,
       -9,
       9,
       -4,
       4,
       kSpecialA,
       kSpecialB,
       true,
       {int_div_by_zero([](const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); }),
        bool_unsupported("bool trunc-div bool",
                         [](const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); })}});
  v.push_back({"remainder",
               {"remainder"},
               kNumericDTypes,
               [](const Tensor& a, const Tensor& b) { return remainder(a, b); },
               remainder_ref,
               Result::Promote,
               numeric_dtype,
               -9,
               9,
               -4,
               4,
               kSpecialA,
               kSpecialB,
               true,
               {int_div_by_zero([](const Tensor& a, const Tensor& b) { return remainder(a, b); }),
                bool_unsupported("bool % bool", [](const Tensor& a, const Tensor& b) {
                  return remainder(a, b);
                })}});
  // pow with tensor exponents: float bases kept positive (real results); integer exponents >= 0
  // here, negative integer exponents in their own OpInfo.
  v.push_back({"pow",
               {"pow"},
               kNumericDTypes,
               [](const Tensor& a, const Tensor& b) { return pow(a, b); },
               [](double a, double b) { return std::pow(a, b); },
               Result::Promote,
               numeric_dtype,
               0.25,
               3,
               0,
               4,
               {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, -2.0, 0.5},
               {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 2.0, 3.0, 0.5, -2.5},
               false,
               {bool_unsupported("bool ** bool",
                                 [](const Tensor& a, const Tensor& b) { return pow(a, b); })}});
  v.push_back({"pow_int_negative_exponents",
               {"pow"},
               {DType::Int32, DType::Int64},
               [](const Tensor& a, const Tensor& b) { return pow(a, b); },
               int_pow_ref,
               Result::Promote,
               integral_dtype,
               -3,
               3,
               -4,
               4,
               {},
               {},
               false,
               {},
               false});
  v.push_back({"maximum",
               {"maximum"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
               max_ref,
               Result::Promote,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  v.push_back({"minimum",
               {"minimum"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
               min_ref,
               Result::Promote,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  v.push_back({"atan2",
               {"atan2"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return atan2(a, b); },
               [](double a, double b) { return std::atan2(a, b); },
               Result::Float,
               any_dtype,
               -5,
               5,
               -5,
               5,
               kSpecialA,
               kSpecialB});
  struct Cmp {
    const char* name;
    Tensor (*call)(const Tensor&, const Tensor&);
    std::function<double(double, double)> f;
  };
  for (const Cmp& c : std::vector<Cmp>{
           {"eq", eq, [](double a, double b) { return b2d(a == b); }},
           {"ne", ne, [](double a, double b) { return b2d(a != b); }},
           {"lt", lt, [](double a, double b) { return b2d(a < b); }},
           {"le", le, [](double a, double b) { return b2d(a <= b); }},
           {"gt", gt, [](double a, double b) { return b2d(a > b); }},
           {"ge", ge, [](double a, double b) { return b2d(a >= b); }},
           {"logical_and", logical_and, [](double a, double b) { return b2d(a != 0 && b != 0); }},
           {"logical_or", logical_or, [](double a, double b) { return b2d(a != 0 || b != 0); }},
           {"logical_xor", logical_xor,
            [](double a, double b) { return b2d((a != 0) != (b != 0)); }},
       }) {
    // Small integer ranges so that equal values actually occur.
    v.push_back({c.name,
                 {c.name},
                 kAllDTypes,
                 c.call,
                 c.f,
                 Result::Bool,
                 any_dtype,
                 -2,
                 2,
                 -2,
                 2,
                 kSpecialA,
                 kSpecialB});
  }
  // isclose at its defaults (and with equal_nan / other tolerances): a bool predicate with
  // attrs, on small integer-valued operands so that equal and near values occur.
  auto isclose_ref = [](double rtol, double atol, bool equal_nan) {
    return [=](double a, double b) {
      if (a == b) return 1.0;
      if (std::isnan(a) || std::isnan(b)) return b2d(equal_nan && std::isnan(a) && std::isnan(b));
      const double err = std::fabs(a - b);
      return b2d(std::isfinite(err) && err <= atol + std::fabs(rtol * b));
    };
  };
  v.push_back({"isclose",
               {"isclose"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return isclose(a, b); },
               isclose_ref(1e-5, 1e-8, false),
               Result::Bool,
               any_dtype,
               -2,
               2,
               -2,
               2,
               kSpecialA,
               kSpecialB,
               false,
               {expect_error<ValueError>("negative rtol", "rtol must be non-negative",
                                         [] { isclose(ones({2}), ones({2}), -1.0); }),
                expect_error<ValueError>("negative atol", "atol must be non-negative",
                                         [] { isclose(ones({2}), ones({2}), 0.0, -1.0); })}});
  v.push_back({"isclose_tolerances_equal_nan",
               {"isclose"},
               kAllDTypes,
               [](const Tensor& a, const Tensor& b) { return isclose(a, b, 0.25, 1.0, true); },
               isclose_ref(0.25, 1.0, true),
               Result::Bool,
               any_dtype,
               -4,
               4,
               -4,
               4,
               kSpecialA,
               kSpecialB});
  struct Bit {
    const char* name;
    Tensor (*call)(const Tensor&, const Tensor&);
    std::function<double(double, double)> f;
  };
  for (const Bit& b : std::vector<Bit>{
           {"bitwise_and", bitwise_and,
            [](double a, double b) {
              return double(static_cast<int64_t>(a) & static_cast<int64_t>(b));
            }},
           {"bitwise_or", bitwise_or,
            [](double a, double b) {
              return double(static_cast<int64_t>(a) | static_cast<int64_t>(b));
            }},
           {"bitwise_xor", bitwise_xor,
            [](double a, double b) {
              return double(static_cast<int64_t>(a) ^ static_cast<int64_t>(b));
            }},
       }) {
    auto call = b.call;
    v.push_back(
        {b.name,
         {b.name},
         {DType::Bool, DType::Int32, DType::Int64},
         call,
         b.f,
         Result::Promote,
         integral_dtype,
         -40,
         40,
         -40,
         40,
         {},
         {},
         false,
         {float_unsupported("float operand", call),
          expect_error<DTypeError>("float C++ number", "float32",
                                   [call] { call(ones({2}, DType::Int32), wrap_scalar(1.5)); })},
         false});
  }
  return v;
}

const bool kBinaryRegistered = [] {
  for (BinarySpec& s : binary_specs()) {
    OpInfo info = binary_info(s);
    if (s.covers[0] == "floor_divide" || s.covers[0] == "trunc_divide" ||
        s.covers[0] == "remainder") {
      // Rounded quotients jump wherever a / b crosses an integer: in the large sample a [300]
      // divisor is shared by 200 rows, so perturbing one of its elements moves some quotient
      // across a jump and finite differences see a spike. The gradient checks leave it out.
      auto samples = info.samples;
      info.grad_samples = [samples](DType dt) {
        std::vector<Sample> kept;
        for (Sample& x : samples(dt))
          if (x.name.find("threaded") == std::string::npos) kept.push_back(std::move(x));
        return kept;
      };
    }
    info.second_order = true;
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

// ---- pow with a C++ number exponent or base ----
void register_pow_scalar(std::string name, Scalar exponent, std::vector<DType> dtypes, double lo,
                         double hi) {
  OpInfo info;
  info.name = name;
  info.covers = {"pow"};
  info.dtypes = dtypes;
  info.samples = [lo, hi](DType dt) {
    auto s = unary_samples(dt, lo, hi);
    if (is_floating(dt)) s.push_back({"special values", {floats(kSpecial, dt)}});
    return s;
  };
  info.fn = [exponent](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{pow(in[0], exponent), in[0].pow(exponent)};
  };
  info.ref = [exponent](const std::vector<Ref>& in) {
    std::vector<Ref> ops = {in[0], Ref{{}, {exponent.to_double()}, exponent.dtype(), true}};
    Ref r = elementwise(ops, Result::Promote, lift([](double a, double b) {
                          return std::floor(b) == b && b >= 0 && std::fabs(a) < 1e6
                                     ? int_pow_ref(a, b)
                                     : std::pow(a, b);
                        }));
    return std::vector<Ref>{r, r};
  };
  info.errors.push_back(expect_error<ValueError>("int tensor to a negative int power",
                                                 "negative integer powers",
                                                 [] { pow(ones({2}, DType::Int64), -2); }));
  info.errors.push_back(expect_error<DTypeError>("bool tensor to a bool power", "bool",
                                                 [] { pow(ones({2}, DType::Bool), true); }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}
const bool kPowScalarRegistered = [] {
  register_pow_scalar("pow_scalar_2", 2, kNumericDTypes, -5, 5);
  register_pow_scalar("pow_scalar_3_bool", 3, {DType::Bool}, -5, 5);
  register_pow_scalar("pow_scalar_half", 0.5, kAllDTypes, 0, 9);
  register_pow_scalar("pow_scalar_minus_1", -1.0, kFloatDTypes, -5, 5);
  register_pow_scalar("pow_scalar_minus_2_5", -2.5, kAllDTypes, 0.1, 5);

  OpInfo info;
  info.name = "pow_scalar_base";
  info.covers = {"pow"};
  info.dtypes = kNumericDTypes;
  info.samples = [](DType dt) { return unary_samples(dt, 0, 6); };
  info.fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{pow(2, in[0]), pow(1.5, in[0])};
  };
  info.ref = [](const std::vector<Ref>& in) {
    Ref two{{}, {2.0}, DType::Int64, true}, onehalf{{}, {1.5}, DType::Float64, true};
    const bool int_result = !is_floating(expected_result_type({two, in[0]}));
    return std::vector<Ref>{
        elementwise({two, in[0]}, Result::Promote,
                    int_result ? lift(int_pow_ref)
                               : lift([](double a, double b) { return std::pow(a, b); })),
        elementwise({onehalf, in[0]}, Result::Promote,
                    lift([](double a, double b) { return std::pow(a, b); }))};
  };
  info.errors.push_back(expect_error<DTypeError>("bool base and bool exponent", "bool",
                                                 [] { pow(true, ones({2}, DType::Bool)); }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
  return true;
}();

// ================================ in-place and out= binary ================================

// self (written in place) against others of every dtype whose promotion with self's can be
// written back; self in several layouts.
std::vector<Sample> inplace_binary_samples(DType dt, double lo, double hi, double lo2, double hi2,
                                           const std::function<bool(DType)>& supported,
                                           bool divisor) {
  auto a = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
    return make_tensor_for_test(s, dt, lo, hi, l, 11);
  };
  std::vector<Sample> out;
  auto keep = [&](Sample s) {
    std::vector<Ref> refs;
    for (const Tensor& t : s.inputs) refs.push_back(Ref::of(t));
    const DType r = expected_result_type(refs);
    if (!supported(r) || !can_cast(r, dt)) return;
    if (divisor) s.inputs[1] = no_int_zeros(s.inputs[1]);
    out.push_back(std::move(s));
  };
  for (DType o : kAllDTypes) {
    auto b = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, o, lo2, hi2, l, 12);
    };
    const std::string on = " (other " + dname(o) + ")";
    keep({"[4, 5] += [4, 5]" + on, {a({4, 5}), b({4, 5})}});
    keep({"[4, 5] += [5]" + on, {a({4, 5}), b({5})}});
    keep({"[4, 5] += 0-d" + on, {a({4, 5}), b({})}});
    keep({"transposed [6, 9] += [6, 1]" + on, {a({6, 9}, Layout::Transposed), b({6, 1})}});
    keep({"strided [3, 4, 5] += transposed [3, 4, 5]" + on,
          {a({3, 4, 5}, Layout::Strided), b({3, 4, 5}, Layout::Transposed)}});
    keep({"0-d += 0-d" + on, {a({}), b({})}});
    keep({"empty [2, 0] += [1]" + on, {a({2, 0}), b({1})}});
    keep({"large [300, 200] += [200]" + on, {a({300, 200}), b({200})}});
  }
  keep({"[4, 5] += number true", {a({4, 5}), wrap_scalar(true)}});
  keep({"[4, 5] += number 3", {a({4, 5}), wrap_scalar(3)}});
  keep({"[4, 5] += number -1.25", {a({4, 5}), wrap_scalar(-1.25)}});
  return out;
}

struct InplaceBinary {
  std::string name;
  std::string opdef;
  std::vector<DType> dtypes;
  std::function<Tensor&(Tensor&, const Tensor&)> call;
  std::function<double(double, double)> f;
  Result result;
  std::function<bool(DType)> supported = any_dtype;
  bool divisor = false;
};

void register_inplace_binary(InplaceBinary s) {
  OpInfo info;
  info.name = s.name;
  info.covers = {s.opdef};
  info.dtypes = s.dtypes;
  auto supported = s.supported;
  const bool divisor = s.divisor;
  info.samples = [supported, divisor](DType dt) {
    return inplace_binary_samples(dt, -5, 5, -5, 5, supported, divisor);
  };
  auto call = s.call;
  info.fn = [call](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    const Shape strides = x.strides();
    const int64_t offset = x.storage_offset();
    const uint64_t version = x.numel() ? x.impl()->storage()->version() : 0;
    Tensor& r = call(x, in[1]);
    EXPECT_TRUE(r.is_same(x)) << "an in-place op must return its tensor";
    EXPECT_EQ(x.strides(), strides) << "in-place ops keep the layout";
    EXPECT_EQ(x.storage_offset(), offset);
    if (x.numel()) {
      EXPECT_GT(x.impl()->storage()->version(), version) << "version not bumped";
    }
    return std::vector<Tensor>{x};
  };
  auto f = s.f;
  auto r = s.result;
  info.ref = [f, r](const std::vector<Ref>& in) {
    return std::vector<Ref>{inplace(in, r, lift(f))};
  };
  info.errors.push_back(
      expect_error<ShapeError>("in place would change the shape", "cannot change", [call] {
        Tensor x = ones({3});
        call(x, ones({2, 3}));
      }));
  info.errors.push_back(
      expect_error<ValueError>("in place into an expanded tensor", "expanded", [call] {
        Tensor x = ones({1, 3}).expand({4, 3});
        call(x, ones({4, 3}));
      }));
  info.errors.push_back(
      expect_error<DTypeError>("in place needing a narrowing cast", "can't be cast", [call] {
        Tensor x = ones({3}, DType::Int64);
        call(x, ones({3}, DType::Float32));
      }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}

const bool kInplaceBinaryRegistered = [] {
  register_inplace_binary({"add_", "add", kAllDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return add_(a, b); },
                           [](double a, double b) { return a + b; }, Result::Promote});
  register_inplace_binary({"add_alpha_", "add", kNumericDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a.add_(b, 2); },
                           [](double a, double b) { return a + 2 * b; }, Result::Promote,
                           numeric_dtype});
  register_inplace_binary({"sub_", "sub", kNumericDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a.sub_(b, 3); },
                           [](double a, double b) { return a - 3 * b; }, Result::Promote,
                           numeric_dtype});
  register_inplace_binary({"mul_", "mul", kAllDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a.mul_(b); },
                           [](double a, double b) { return a * b; }, Result::Promote});
  register_inplace_binary({"div_", "div", kFloatDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a.div_(b); },
                           [](double a, double b) { return a / b; }, Result::Float});
  register_inplace_binary({"operator_plus_eq", "add", kAllDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a += b; },
                           [](double a, double b) { return a + b; }, Result::Promote});
  register_inplace_binary({"operator_minus_eq", "sub", kNumericDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a -= b; },
                           [](double a, double b) { return a - b; }, Result::Promote,
                           numeric_dtype});
  register_inplace_binary({"operator_times_eq", "mul", kAllDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a *= b; },
                           [](double a, double b) { return a * b; }, Result::Promote});
  register_inplace_binary({"operator_div_eq", "div", kFloatDTypes,
                           [](Tensor& a, const Tensor& b) -> Tensor& { return a /= b; },
                           [](double a, double b) { return a / b; }, Result::Float});
  return true;
}();

// In-place forms taking a C++ number: Tensor::add_/mul_/div_(Scalar), +=, -=, *=, /= and pow_.
const bool kInplaceScalarRegistered = [] {
  OpInfo info;
  info.name = "inplace_scalar_forms";
  info.covers = {"add", "sub", "mul", "div", "pow"};
  info.dtypes = kFloatDTypes;
  info.samples = [](DType dt) { return unary_samples(dt, 0.5, 4); };
  info.fn = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> out;
    auto fresh = [&] { return in[0].clone(); };
    Tensor t;
    t = fresh();
    out.push_back(t.add_(2));
    t = fresh();
    out.push_back(t.mul_(-1.5));
    t = fresh();
    out.push_back(t.div_(4));
    t = fresh();
    out.push_back(t += 1.25);
    t = fresh();
    out.push_back(t -= 3);
    t = fresh();
    out.push_back(t *= 2);
    t = fresh();
    out.push_back(t /= 0.5);
    t = fresh();
    out.push_back(pow_(t, 2));
    t = fresh();
    out.push_back(pow_(t, 0.5));
    return out;
  };
  info.ref = [](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    auto m = [&](UnaryFn f) { return map(in[0], dt, [&](double x) { return cast_to(f(x), dt); }); };
    return std::vector<Ref>{
        m([](double x) { return x + 2; }),       m([](double x) { return x * -1.5; }),
        m([](double x) { return x / 4; }),       m([](double x) { return x + 1.25; }),
        m([](double x) { return x - 3; }),       m([](double x) { return x * 2; }),
        m([](double x) { return x / 0.5; }),     m([](double x) { return x * x; }),
        m([](double x) { return std::sqrt(x); })};
  };
  info.errors.push_back(
      expect_error<DTypeError>("int tensor divided in place", "can't be cast", [] {
        Tensor x = ones({2}, DType::Int32);
        x.div_(2);
      }));
  info.errors.push_back(
      expect_error<DTypeError>("int tensor times a float in place", "can't be cast", [] {
        Tensor x = ones({2}, DType::Int32);
        x *= 0.5;
      }));
  info.errors.push_back(
      expect_error<DTypeError>("int tensor to a float power in place", "can't be cast", [] {
        Tensor x = ones({2}, DType::Int32);
        pow_(x, 0.5);
      }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
  return true;
}();

// out= forms: add_out / mul_out into contiguous, transposed and other-dtype outputs.
const bool kOutRegistered = [] {
  OpInfo info;
  info.name = "add_out_mul_out";
  info.covers = {"add", "mul"};
  info.dtypes = kNumericDTypes;
  info.samples = [](DType dt) {
    std::vector<Sample> s;
    for (const Sample& b : binary_samples(dt)) s.push_back(b);
    return s;
  };
  info.fn = [](const std::vector<Tensor>& in) {
    std::vector<Ref> r = {Ref::of(in[0]), Ref::of(in[1])};
    Ref shape = zip(r, DType::Float64, [](const std::vector<double>&) { return 0.0; });
    const DType dt = expected_result_type(r);
    Tensor o1 = zeros(shape.sizes, dt);
    add_out(o1, in[0], in[1], 2);
    // A transposed float64 output: the result is cast and written through the strides.
    std::vector<int64_t> rev(shape.sizes.rbegin(), shape.sizes.rend());
    std::vector<int64_t> perm;
    for (int64_t d = static_cast<int64_t>(rev.size()) - 1; d >= 0; --d) perm.push_back(d);
    Tensor o2 = zeros(rev, DType::Float64).permute(perm);
    mul_out(o2, in[0], in[1]);
    return std::vector<Tensor>{o1, o2};
  };
  info.ref = [](const std::vector<Ref>& in) {
    Ref a = elementwise(in, Result::Promote, lift([](double a, double b) { return a + 2 * b; }));
    Ref m = elementwise(in, Result::Promote, lift([](double a, double b) { return a * b; }));
    m.dtype = DType::Float64;
    return std::vector<Ref>{a, m};
  };
  info.errors.push_back(expect_error<ShapeError>("out of the wrong shape", "cannot change", [] {
    Tensor o = zeros({3});
    add_out(o, ones({2, 3}), ones({3}));
  }));
  info.errors.push_back(
      expect_error<DTypeError>("float result into an int out", "can't be cast", [] {
        Tensor o = zeros({3}, DType::Int64);
        mul_out(o, ones({3}), ones({3}));
      }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
  return true;
}();

// ================================ C++ operators ================================

const bool kOperatorsRegistered = [] {
  // Arithmetic operators on tensors and numbers.
  OpInfo arith;
  arith.name = "operators_arith";
  arith.covers = {"add", "sub", "mul", "div", "remainder", "neg"};
  arith.dtypes = kNumericDTypes;
  arith.samples = [](DType dt) {
    std::vector<Sample> s;
    for (Sample& b : binary_samples(dt, -5, 5, 1, 4)) {
      b.inputs[1] = no_int_zeros(b.inputs[1]);
      s.push_back(std::move(b));
    }
    return s;
  };
  arith.fn = [](const std::vector<Tensor>& in) {
    const Tensor &a = in[0], &b = in[1];
    return std::vector<Tensor>{a + b, a - b, a * b, a / b, a % b,   -a,    a + 2, a - 1.5,
                               a * 3, a / 2, a % 3, 2 + a, 2.5 - a, 3 * a, 1 / b};
  };
  arith.ref = [](const std::vector<Ref>& in) {
    const Ref &a = in[0], &b = in[1];
    auto num = [](double v, bool is_float) {
      return Ref{{}, {v}, is_float ? DType::Float64 : DType::Int64, true};
    };
    auto add2 = lift([](double x, double y) { return x + y; });
    auto sub2 = lift([](double x, double y) { return x - y; });
    auto mul2 = lift([](double x, double y) { return x * y; });
    auto div2 = lift([](double x, double y) { return x / y; });
    auto rem2 = lift(remainder_ref);
    return std::vector<Ref>{
        elementwise({a, b}, Result::Promote, add2),
        elementwise({a, b}, Result::Promote, sub2),
        elementwise({a, b}, Result::Promote, mul2),
        elementwise({a, b}, Result::Float, div2),
        elementwise({a, b}, Result::Promote, rem2),
        elementwise({a}, Result::Promote, lift([](double x) { return -x; })),
        elementwise({a, num(2, false)}, Result::Promote, add2),
        elementwise({a, num(1.5, true)}, Result::Promote, sub2),
        elementwise({a, num(3, false)}, Result::Promote, mul2),
        elementwise({a, num(2, false)}, Result::Float, div2),
        elementwise({a, num(3, false)}, Result::Promote, rem2),
        elementwise({num(2, false), a}, Result::Promote, add2),
        elementwise({num(2.5, true), a}, Result::Promote, sub2),
        elementwise({num(3, false), a}, Result::Promote, mul2),
        elementwise({num(1, false), b}, Result::Float, div2),
    };
  };
  arith.errors.push_back(
      expect_error<DTypeError>("-bool", "bool", [] { return -ones({2}, DType::Bool); }));
  arith.errors.push_back(expect_error<ValueError>("int % 0", "division by zero",
                                                  [] { return ones({2}, DType::Int32) % 0; }));
  arith.errors.push_back(expect_error<ShapeError>("[2] + [3]", "cannot be broadcast",
                                                  [] { return ones({2}) + ones({3}); }));
  arith.second_order = true;
  RegisterOpInfo{std::move(arith)};

  // Comparison operators (tensor and number operands) and bitwise operators.
  OpInfo cmp;
  cmp.name = "operators_compare";
  cmp.covers = {"eq", "ne", "lt", "le", "gt", "ge"};
  cmp.dtypes = kAllDTypes;
  cmp.samples = [](DType dt) { return binary_samples(dt, -2, 2, -2, 2); };
  cmp.fn = [](const std::vector<Tensor>& in) {
    const Tensor &a = in[0], &b = in[1];
    return std::vector<Tensor>{a == b, a != b, a<b, a <= b, a> b,       a >= b,
                               a == 1, a != 0, a<0.5, a <= 1, a> - 1.5, a >= true};
  };
  cmp.ref = [](const std::vector<Ref>& in) {
    const Ref &a = in[0], &b = in[1];
    auto num = [](double v, DType d) { return Ref{{}, {v}, d, true}; };
    auto c = [](const Ref& x, const Ref& y, std::function<bool(double, double)> f) {
      return elementwise({x, y}, Result::Bool,
                         lift([f](double p, double q) { return b2d(f(p, q)); }));
    };
    auto eqf = [](double p, double q) { return p == q; };
    auto nef = [](double p, double q) { return p != q; };
    auto ltf = [](double p, double q) { return p < q; };
    auto lef = [](double p, double q) { return p <= q; };
    auto gtf = [](double p, double q) { return p > q; };
    auto gef = [](double p, double q) { return p >= q; };
    return std::vector<Ref>{c(a, b, eqf),
                            c(a, b, nef),
                            c(a, b, ltf),
                            c(a, b, lef),
                            c(a, b, gtf),
                            c(a, b, gef),
                            c(a, num(1, DType::Int64), eqf),
                            c(a, num(0, DType::Int64), nef),
                            c(a, num(0.5, DType::Float64), ltf),
                            c(a, num(1, DType::Int64), lef),
                            c(a, num(-1.5, DType::Float64), gtf),
                            c(a, num(1, DType::Bool), gef)};
  };
  cmp.errors.push_back(expect_error<ShapeError>("[2] == [3]", "cannot be broadcast",
                                                [] { return ones({2}) == ones({3}); }));
  cmp.second_order = true;
  RegisterOpInfo{std::move(cmp)};

  OpInfo bits;
  bits.name = "operators_bitwise";
  bits.covers = {"bitwise_and", "bitwise_or", "bitwise_xor"};
  bits.dtypes = {DType::Bool, DType::Int32, DType::Int64};
  bits.samples = [](DType dt) { return binary_samples(dt, -20, 20, -20, 20); };
  bits.fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] & in[1], in[0] | in[1], in[0] ^ in[1]};
  };
  bits.ref = [](const std::vector<Ref>& in) {
    auto i = [](double x) { return static_cast<int64_t>(x); };
    return std::vector<Ref>{
        elementwise(in, Result::Promote,
                    lift([i](double a, double b) { return double(i(a) & i(b)); })),
        elementwise(in, Result::Promote,
                    lift([i](double a, double b) { return double(i(a) | i(b)); })),
        elementwise(in, Result::Promote,
                    lift([i](double a, double b) { return double(i(a) ^ i(b)); }))};
  };
  bits.errors.push_back(
      expect_error<DTypeError>("float & float", "float32", [] { return ones({2}) & ones({2}); }));
  bits.second_order = true;
  RegisterOpInfo{std::move(bits)};
  return true;
}();

// ================================ ternary ================================

const bool kWhereRegistered = [] {
  OpInfo info;
  info.name = "where";
  info.covers = {"where"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) {
    auto c = [](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, DType::Bool, 0, 1, l, 21);
    };
    auto x = [&](std::vector<int64_t> s, DType d, Layout l = Layout::Contiguous,
                 uint32_t seed = 22) { return make_tensor_for_test(s, d, -5, 5, l, seed); };
    std::vector<Sample> s = {
        {"same shape", {c({4, 5}), x({4, 5}, dt), x({4, 5}, dt, Layout::Contiguous, 23)}},
        {"broadcast condition [5]", {c({5}), x({4, 5}, dt), x({4, 5}, dt, Layout::Contiguous, 23)}},
        {"broadcast all three",
         {c({3, 1, 1}), x({1, 4, 1}, dt), x({5}, dt, Layout::Contiguous, 23)}},
        {"0-d operands", {c({3}), x({}, dt), x({}, dt, Layout::Contiguous, 23)}},
        {"all 0-d", {c({}), x({}, dt), x({}, dt, Layout::Contiguous, 23)}},
        {"empty", {c({0, 3}), x({0, 3}, dt), x({3}, dt)}},
        {"non-contiguous",
         {c({6, 9}, Layout::Transposed), x({6, 9}, dt, Layout::Strided),
          x({6, 9}, dt, Layout::Transposed)}},
        {"large", {c({300, 200}), x({300, 200}, dt), x({200}, dt)}},
    };
    for (DType o : kAllDTypes)
      if (o != dt) {
        s.push_back({"other operand " + dname(o), {c({2, 3}), x({2, 3}, dt), x({2, 3}, o)}});
        s.push_back({"0-d other operand " + dname(o), {c({2, 3}), x({2, 3}, dt), x({}, o)}});
      }
    return s;
  };
  info.fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{where(in[0], in[1], in[2])};
  };
  info.ref = [](const std::vector<Ref>& in) {
    const DType out = expected_result_type({in[1], in[2]});
    return std::vector<Ref>{zip(in, out, [out](const std::vector<double>& v) {
      return cast_to(v[0] != 0 ? v[1] : v[2], out);
    })};
  };
  info.errors.push_back(expect_error<DTypeError>("float condition", "condition must be a bool",
                                                 [] { where(ones({2}), ones({2}), ones({2})); }));
  info.errors.push_back(
      expect_error<ShapeError>("shapes that don't broadcast", "cannot be broadcast",
                               [] { where(ones({2}, DType::Bool), ones({3}), ones({2})); }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
  return true;
}();

// PyTorch's lerp: start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 - w),
// which is exact at both ends (and decides which infinities/NaNs appear).
double lerp_ref(double s, double e, double w) {
  return std::fabs(w) < 0.5 ? s + w * (e - s) : e - (e - s) * (1 - w);
}

const bool kLerpRegistered = [] {
  auto samples = [](DType dt) {
    auto t = [&](std::vector<int64_t> s, double lo, double hi, uint32_t seed,
                 Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, dt, lo, hi, l, seed);
    };
    return std::vector<Sample>{
        {"same shape", {t({4, 5}, -5, 5, 1), t({4, 5}, -5, 5, 2), t({4, 5}, -0.5, 1.5, 3)}},
        {"broadcast weight", {t({4, 5}, -5, 5, 1), t({4, 5}, -5, 5, 2), t({5}, 0, 1, 3)}},
        {"broadcast all", {t({3, 1}, -5, 5, 1), t({1, 4}, -5, 5, 2), t({}, 0, 1, 3)}},
        {"non-contiguous",
         {t({6, 9}, -5, 5, 1, Layout::Transposed), t({6, 9}, -5, 5, 2, Layout::Strided),
          t({6, 9}, 0, 1, 3)}},
        {"empty", {t({0}, -5, 5, 1), t({0}, -5, 5, 2), t({0}, 0, 1, 3)}},
        {"large", {t({300, 200}, -5, 5, 1), t({300, 200}, -5, 5, 2), t({200}, 0, 1, 3)}},
        {"special",
         {floats({kNaN, kInf, 0.0, 1.0, -2.0}, dt), floats({1.0, 1.0, kInf, kNaN, 4.0}, dt),
          floats({0.5, 0.0, 0.25, 0.75, 1.0}, dt)}},
    };
  };
  auto errors = [](OpInfo& info) {
    info.errors.push_back(expect_error<DTypeError>("integer inputs", "not supported", [] {
      lerp(ones({2}, DType::Int64), ones({2}, DType::Int64), 0.5);
    }));
    info.errors.push_back(expect_error<ShapeError>("shapes that don't broadcast",
                                                   "cannot be broadcast",
                                                   [] { lerp(ones({2}), ones({3}), 0.5); }));
  };
  OpInfo t;
  t.name = "lerp";
  t.covers = {"lerp"};
  t.dtypes = kFloatDTypes;
  t.samples = samples;
  t.fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{lerp(in[0], in[1], in[2])};
  };
  t.ref = [](const std::vector<Ref>& in) {
    return std::vector<Ref>{elementwise(in, Result::Promote, [](const std::vector<double>& v) {
      return lerp_ref(v[0], v[1], v[2]);
    })};
  };
  errors(t);
  t.second_order = true;
  RegisterOpInfo{std::move(t)};

  OpInfo s;
  s.name = "lerp_scalar_weight";
  s.covers = {"lerp"};
  s.dtypes = kFloatDTypes;
  s.samples = [samples](DType dt) {
    auto v = samples(dt);
    for (auto& x : v) x.inputs.pop_back();
    return v;
  };
  s.fn = [](const std::vector<Tensor>& in) {
    Tensor r1 = lerp(in[0], in[1], 0.3), r2 = lerp(in[0], in[1], 0.75);
    Tensor x = empty_like(r2);  // start broadcast to the result's shape, then lerp_ in place
    x.copy_(in[0]);
    Tensor& r = lerp_(x, in[1], 0.75);
    EXPECT_TRUE(r.is_same(x));
    return std::vector<Tensor>{r1, r2, x};
  };
  s.ref = [](const std::vector<Ref>& in) {
    auto w = [&](double wt) {
      return elementwise({in[0], in[1], Ref{{}, {wt}, DType::Float64, true}}, Result::Promote,
                         [](const std::vector<double>& v) { return lerp_ref(v[0], v[1], v[2]); });
    };
    return std::vector<Ref>{w(0.3), w(0.75), w(0.75)};
  };
  errors(s);
  s.errors.push_back(
      expect_error<ShapeError>("lerp_ that would change the shape", "cannot change", [] {
        Tensor x = ones({3});
        lerp_(x, ones({2, 3}), 0.5);
      }));
  s.second_order = true;
  RegisterOpInfo{std::move(s)};
  return true;
}();

void register_addc(std::string name, bool is_div, Scalar value, std::vector<DType> dtypes,
                   bool in_place) {
  OpInfo info;
  info.name = name;
  info.covers = {is_div ? "addcdiv" : "addcmul"};
  info.dtypes = dtypes;
  info.samples = [is_div](DType dt) {
    // Divisors stay away from zero: [0.5, 4] with either sign.
    const double lo2 = is_div ? 0.5 : -5, hi2 = is_div ? 4 : 5;
    auto t = [&](std::vector<int64_t> s, double lo, double hi, uint32_t seed,
                 Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, dt, lo, hi, l, seed);
    };
    std::vector<Sample> v = {
        {"same shape", {t({4, 5}, -5, 5, 1), t({4, 5}, -5, 5, 2), t({4, 5}, lo2, hi2, 3)}},
        {"broadcast", {t({4, 5}, -5, 5, 1), t({5}, -5, 5, 2), t({4, 1}, lo2, hi2, 3)}},
        {"0-d operands", {t({3}, -5, 5, 1), t({}, -5, 5, 2), t({}, lo2, hi2, 3)}},
        {"non-contiguous",
         {t({6, 9}, -5, 5, 1, Layout::Transposed), t({6, 9}, -5, 5, 2, Layout::Strided),
          t({6, 9}, lo2, hi2, 3, Layout::Transposed)}},
        {"empty", {t({2, 0}, -5, 5, 1), t({1}, -5, 5, 2), t({1}, lo2, hi2, 3)}},
        {"large", {t({300, 200}, -5, 5, 1), t({300, 200}, -5, 5, 2), t({200}, lo2, hi2, 3)}},
    };
    if (is_floating(dt))
      v.push_back({"negative divisors", {t({4}, -5, 5, 1), t({4}, -5, 5, 2), t({4}, -4, -0.5, 3)}});
    return v;
  };
  info.fn = [is_div, value, in_place](const std::vector<Tensor>& in) {
    if (!in_place)
      return std::vector<Tensor>{is_div ? addcdiv(in[0], in[1], in[2], value)
                                        : addcmul(in[0], in[1], in[2], value)};
    Tensor x = in[0];
    Tensor& r = is_div ? addcdiv_(x, in[1], in[2], value) : addcmul_(x, in[1], in[2], value);
    EXPECT_TRUE(r.is_same(x));
    return std::vector<Tensor>{x};
  };
  info.ref = [is_div, value, in_place](const std::vector<Ref>& in) {
    const DType dt = expected_result_type(in);
    // The value is converted to the computation's dtype first (as PyTorch's kernels do).
    const double v = cast_to(value.to_double(), dt);
    auto f = [is_div, v](const std::vector<double>& x) {
      return is_div ? x[0] + v * x[1] / x[2] : x[0] + v * x[1] * x[2];
    };
    return std::vector<Ref>{in_place ? inplace(in, Result::Promote, f)
                                     : elementwise(in, Result::Promote, f)};
  };
  if (is_div) {
    info.errors.push_back(expect_error<DTypeError>("integer division", "integer division", [] {
      addcdiv(ones({2}, DType::Int64), ones({2}, DType::Int64), ones({2}, DType::Int64));
    }));
  } else {
    info.errors.push_back(expect_error<DTypeError>("bool operands", "bool", [] {
      addcmul(ones({2}, DType::Bool), ones({2}, DType::Bool), ones({2}, DType::Bool));
    }));
  }
  info.errors.push_back(expect_error<ShapeError>("shapes that don't broadcast",
                                                 "cannot be broadcast",
                                                 [] { addcmul(ones({2}), ones({3}), ones({2})); }));
  if (in_place) {
    info.errors.push_back(
        expect_error<ShapeError>("in place would change the shape", "cannot change", [is_div] {
          Tensor x = ones({3});
          if (is_div)
            addcdiv_(x, ones({2, 3}), ones({3}));
          else
            addcmul_(x, ones({2, 3}), ones({3}));
        }));
  }
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}
const bool kAddcRegistered = [] {
  register_addc("addcmul", false, 1, kNumericDTypes, false);
  register_addc("addcmul_value", false, -0.5, kFloatDTypes, false);
  register_addc("addcmul_int_value", false, 3, {DType::Int32, DType::Int64}, false);
  register_addc("addcmul_", false, 2, kNumericDTypes, true);
  register_addc("addcdiv", true, 1, kFloatDTypes, false);
  register_addc("addcdiv_value", true, 0.25, kFloatDTypes, false);
  register_addc("addcdiv_", true, -2, kFloatDTypes, true);
  return true;
}();

// ---- masked_fill ----
void register_masked_fill(std::string name, Scalar value, bool in_place) {
  OpInfo info;
  info.name = name;
  info.covers = {"masked_fill"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) {
    auto m = [](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, DType::Bool, 0, 1, l, 31);
    };
    auto x = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, dt, -5, 5, l, 32);
    };
    return std::vector<Sample>{
        {"same shape", {x({4, 5}), m({4, 5})}},
        {"broadcast mask [5]", {x({4, 5}), m({5})}},
        {"broadcast mask [4, 1]", {x({4, 5}), m({4, 1})}},
        {"0-d mask", {x({4, 5}), m({})}},
        {"0-d tensor", {x({}), m({})}},
        {"empty", {x({0, 5}), m({5})}},
        {"non-contiguous tensor and mask",
         {x({6, 9}, Layout::Transposed), m({6, 9}, Layout::Strided)}},
        {"strided tensor", {x({2, 3, 5}, Layout::Strided), m({3, 5}, Layout::Transposed)}},
        {"large", {x({300, 200}), m({300, 200})}},
    };
  };
  info.fn = [value, in_place](const std::vector<Tensor>& in) {
    if (!in_place) return std::vector<Tensor>{masked_fill(in[0], in[1], value)};
    Tensor x = in[0];
    Tensor& r = masked_fill_(x, in[1], value);
    EXPECT_TRUE(r.is_same(x));
    return std::vector<Tensor>{x};
  };
  info.ref = [value](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    const double v = cast_to(value.to_double(), dt);
    return std::vector<Ref>{
        zip(in, dt, [v](const std::vector<double>& x) { return x[1] != 0 ? v : x[0]; })};
  };
  info.errors.push_back(expect_error<DTypeError>("float mask", "mask must be a bool",
                                                 [] { masked_fill(ones({3}), ones({3}), 0); }));
  info.errors.push_back(
      expect_error<ShapeError>("mask larger than the tensor", "cannot be broadcast", [] {
        masked_fill(ones({3}), ones({2, 3}, DType::Bool), 0);
      }));
  if (in_place) {
    info.errors.push_back(
        expect_error<ValueError>("in place into an expanded tensor", "expanded", [] {
          Tensor x = ones({1, 3}).expand({2, 3});
          masked_fill_(x, ones({2, 3}, DType::Bool), 0);
        }));
  }
  info.second_order = true;
  RegisterOpInfo{std::move(info)};
}
const bool kMaskedFillRegistered = [] {
  register_masked_fill("masked_fill", 7, false);
  register_masked_fill("masked_fill_float_value", -2.5, false);
  register_masked_fill("masked_fill_bool_value", true, false);
  register_masked_fill("masked_fill_", 3, true);
  return true;
}();

// ================================ copy, fill ================================

// copy_(dst, src): dst of the OpInfo's dtype in various layouts, src of every dtype, broadcast.
const bool kCopyRegistered = [] {
  OpInfo info;
  info.name = "copy_";
  info.covers = {"copy"};
  info.dtypes = kAllDTypes;
  info.samples = [](DType dt) {
    auto d = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
      return make_tensor_for_test(s, dt, -5, 5, l, 41);
    };
    std::vector<Sample> v;
    for (DType o : kAllDTypes) {
      auto s = [&](std::vector<int64_t> sz, Layout l = Layout::Contiguous) {
        return make_tensor_for_test(sz, o, -9, 9, l, 42);
      };
      const std::string on = " from " + dname(o);
      v.push_back({"contiguous" + on, {d({4, 5}), s({4, 5})}});
      v.push_back({"broadcast [5]" + on, {d({4, 5}), s({5})}});
      v.push_back({"broadcast 0-d" + on, {d({4, 5}), s({})}});
      v.push_back({"into transposed" + on, {d({6, 9}, Layout::Transposed), s({6, 9})}});
      v.push_back({"into strided from transposed" + on,
                   {d({3, 4, 5}, Layout::Strided), s({3, 4, 5}, Layout::Transposed)}});
      v.push_back({"0-d" + on, {d({}), s({})}});
      v.push_back({"empty" + on, {d({0, 3}), s({3})}});
      v.push_back({"large" + on, {d({400, 300}), s({400, 300})}});
    }
    return v;
  };
  info.fn = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    const Shape strides = x.strides();
    Tensor& r = x.copy_(in[1]);
    EXPECT_TRUE(r.is_same(x));
    EXPECT_EQ(x.strides(), strides);
    return std::vector<Tensor>{x};
  };
  info.ref = [](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    Ref r = zip(in, dt, [dt](const std::vector<double>& v) { return cast_to(v[1], dt); });
    return std::vector<Ref>{r};
  };
  info.errors.push_back(
      expect_error<ShapeError>("source that doesn't broadcast", "cannot be broadcast", [] {
        Tensor x = zeros({3});
        x.copy_(ones({2, 3}));
      }));
  info.errors.push_back(expect_error<ValueError>("into an expanded tensor", "expanded", [] {
    Tensor x = zeros({1, 3}).expand({2, 3});
    x.copy_(ones({2, 3}));
  }));
  info.second_order = true;
  RegisterOpInfo{std::move(info)};

  // copy_ from an overlapping view of the same storage must read before it writes.
  OpInfo overlap;
  overlap.name = "copy_overlapping";
  overlap.covers = {"copy"};
  overlap.dtypes = kAllDTypes;
  overlap.samples = [](DType dt) {
    return std::vector<Sample>{{"[10]", {make_tensor_for_test({10}, dt, -9, 9)}},
                               {"[1000]", {make_tensor_for_test({1000}, dt, -9, 9)}}};
  };
  overlap.fn = [](const std::vector<Tensor>& in) {
    const int64_t n = in[0].numel();
    Tensor a = in[0].clone(), b = in[0].clone();
    Tensor dst = a.slice(0, 1);
    dst.copy_(a.slice(0, 0, n - 1));  // shift right by one
    Tensor rdst = b.slice(0, 0, n - 1);
    rdst.copy_(b.slice(0, 1));  // shift left by one
    return std::vector<Tensor>{a, b};
  };
  overlap.ref = [](const std::vector<Ref>& in) {
    Ref a = in[0], b = in[0];
    for (size_t i = 1; i < a.v.size(); ++i) a.v[i] = in[0].v[i - 1];
    for (size_t i = 0; i + 1 < b.v.size(); ++i) b.v[i] = in[0].v[i + 1];
    return std::vector<Ref>{a, b};
  };
  overlap.errors.push_back(
      expect_error<ShapeError>("overlapping source of the wrong shape", "cannot be broadcast", [] {
        Tensor a = zeros({4});
        Tensor d = a.slice(0, 1);
        d.copy_(a);
      }));
  overlap.no_gradcheck =
      "copies into views (slices of a clone): in-place changes to views under gradient "
      "recording throw NotImplementedError";
  RegisterOpInfo{std::move(overlap)};

  // fill_ / zero_ with values of each category, through every layout.
  OpInfo fill;
  fill.name = "fill_";
  fill.covers = {"fill"};
  fill.dtypes = kAllDTypes;
  fill.samples = [](DType dt) { return unary_samples(dt); };
  fill.fn = [](const std::vector<Tensor>& in) {
    Tensor a = in[0].clone(), b = in[0].clone(), c = in[0].clone();
    Tensor x = in[0];
    Tensor& r = x.fill_(-3.75);
    EXPECT_TRUE(r.is_same(x));
    fill_(a, 7);
    fill_(b, true);
    c.zero_();
    return std::vector<Tensor>{x, a, b, c};
  };
  fill.ref = [](const std::vector<Ref>& in) {
    const DType dt = in[0].dtype;
    auto f = [&](double v) { return map(in[0], dt, [=](double) { return cast_to(v, dt); }); };
    return std::vector<Ref>{f(-3.75), f(7), f(1), f(0)};
  };
  fill.errors.push_back(expect_error<ValueError>("fill_ of an expanded tensor", "expanded", [] {
    Tensor x = zeros({1}).expand({5});
    x.fill_(1);
  }));
  fill.second_order = true;
  RegisterOpInfo{std::move(fill)};
  return true;
}();

}  // namespace
}  // namespace kiln::testing
