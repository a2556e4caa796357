#include "ops/opinfo.h"

#include <cctype>
#include <random>
#include <sstream>

namespace kiln::testing {

std::vector<OpInfo>& opinfos() {
  static std::vector<OpInfo> infos;
  return infos;
}

Tensor make_tensor_for_test(std::vector<int64_t> sizes, DType dtype, double lo, double hi,
                            Layout layout, uint32_t seed) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(n) * 31u + static_cast<uint32_t>(dtype));
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> vals(static_cast<size_t>(n));
  for (auto& v : vals) {
    double x = dist(rng);
    if (dtype == DType::Bool)
      x = (rng() & 1) ? 1 : 0;
    else if (!is_floating(dtype))
      x = std::round(x);
    vals[&v - vals.data()] = x;
  }
  Tensor t = tensor(vals, sizes).to(dtype);
  if (layout == Layout::Contiguous || sizes.empty()) return t;
  if (layout == Layout::Transposed) {
    // Same values, stored with reversed dim order.
    std::vector<int64_t> perm;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) perm.push_back(d);
    Tensor stored = t.permute(perm).contiguous();
    Tensor back = stored.permute(perm);
    EXPECT_TRUE(sizes.size() < 2 || !back.is_contiguous() || n <= 1);
    return back;
  }
  // Strided: every other element of a tensor twice as long in the last dim.
  std::vector<int64_t> big = sizes;
  big.back() *= 2;
  Tensor wide = zeros(big, dtype);
  Tensor view = wide.slice(-1, 0, std::nullopt, 2);
  view.copy_(t);
  return view;
}

std::vector<Sample> unary_samples(DType dt, double lo, double hi) {
  auto m = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous, uint32_t seed = 0) {
    return make_tensor_for_test(s, dt, lo, hi, l, seed);
  };
  return {
      {"0-d", {m({})}},
      {"empty [0]", {m({0})}},
      {"empty [2, 0, 3]", {m({2, 0, 3})}},
      {"1-d [13] (vector tail)", {m({13})}},
      {"2-d [5, 7]", {m({5, 7})}},
      {"transposed [6, 9]", {m({6, 9}, Layout::Transposed)}},
      {"strided [2, 3, 5]", {m({2, 3, 5}, Layout::Strided)}},
      {"large [300, 257] (threaded)", {m({300, 257}, Layout::Contiguous, 3)}},
  };
}

std::vector<Sample> binary_samples(DType dt, double lo, double hi, double lo2, double hi2) {
  auto a = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
    return make_tensor_for_test(s, dt, lo, hi, l, 1);
  };
  auto b = [&](std::vector<int64_t> s, Layout l = Layout::Contiguous) {
    return make_tensor_for_test(s, dt, lo2, hi2, l, 2);
  };
  // A C++ number operand of this dtype's category, within [lo2, hi2].
  auto number = [&]() {
    double v = (lo2 + hi2) / 2 + (hi2 - lo2) / 7;
    if (dt == DType::Bool) return wrap_scalar(true);
    if (!is_floating(dt)) return wrap_scalar(static_cast<int64_t>(std::round(v)));
    return wrap_scalar(v);
  };
  return {
      {"same shape [4, 5]", {a({4, 5}), b({4, 5})}},
      {"0-d with 0-d", {a({}), b({})}},
      {"broadcast [3, 1] x [1, 4]", {a({3, 1}), b({1, 4})}},
      {"broadcast [4] x [3, 4]", {a({4}), b({3, 4})}},
      {"0-d x [2, 3]", {a({}), b({2, 3})}},
      {"[2, 3] x number", {a({2, 3}), number()}},
      {"number x [2, 3]", {number(), b({2, 3})}},
      {"zero-size [2, 0] x [1]", {a({2, 0}), b({1})}},
      {"transposed x contiguous [6, 9]", {a({6, 9}, Layout::Transposed), b({6, 9})}},
      {"strided x transposed [3, 4, 5]",
       {a({3, 4, 5}, Layout::Strided), b({3, 4, 5}, Layout::Transposed)}},
      {"large [200, 300] x [300] (threaded)", {a({200, 300}), b({300})}},
  };
}

namespace {
int category_rank(DType d) {
  return d == DType::Bool ? 0 : (d == DType::Int32 || d == DType::Int64) ? 1 : 2;
}
int width_rank(DType d) {
  switch (d) {
    case DType::Bool:
      return 0;
    case DType::Int32:
      return 1;
    case DType::Int64:
      return 2;
    case DType::Float32:
      return 3;
    case DType::Float64:
      return 4;
  }
  return 0;
}
DType wider(DType a, DType b) { return width_rank(a) >= width_rank(b) ? a : b; }
}  // namespace

DType expected_result_type(const std::vector<Ref>& ins) {
  // Tiers: tensors with dims, then 0-d tensors, then C++ numbers. A lower tier changes the
  // result only when its category is higher, and then to (for numbers) the default dtype of
  // that category.
  bool have[3] = {false, false, false};
  DType tier[3] = {DType::Bool, DType::Bool, DType::Bool};
  for (const Ref& r : ins) {
    int t = r.wrapped ? 2 : (r.dim() == 0 ? 1 : 0);
    DType d = r.dtype;
    if (r.wrapped && category_rank(d) == 2) d = DType::Float32;
    tier[t] = have[t] ? wider(tier[t], d) : d;
    have[t] = true;
  }
  bool any = false;
  DType result = DType::Float32;
  for (int t = 0; t < 3; ++t) {
    if (!have[t]) continue;
    if (!any) {
      result = tier[t];
      any = true;
    } else if (category_rank(tier[t]) > category_rank(result)) {
      result = wider(result, tier[t]);
    }
  }
  return result;
}

DType expected_float_result_type(const std::vector<Ref>& ins) {
  DType d = expected_result_type(ins);
  return is_floating(d) ? d : DType::Float32;
}

void expect_matches(const Tensor& got, const Ref& want, double rtol, double atol,
                    const std::string& context) {
  ASSERT_TRUE(got.defined()) << context;
  ASSERT_EQ(got.sizes().vec(), want.sizes) << context << ": shape";
  ASSERT_EQ(got.dtype(), want.dtype) << context << ": dtype";
  std::vector<double> g = got.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    double x = g[i], y = want.v[i];
    bool ok;
    if (std::isnan(y))
      ok = std::isnan(x);
    else if (std::isinf(y))
      ok = x == y;
    else if (!is_floating(want.dtype))
      ok = x == y;
    else
      ok = std::fabs(x - y) <= atol + rtol * std::fabs(y);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << context << ": element " << i << " is " << x << ", expected " << y
                    << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
}

void PrintTo(const OpInfoCase& c, std::ostream* os) {
  *os << opinfos()[c.info].name << " on " << dtype_name(c.dtype);
}

std::vector<OpInfoCase> all_opinfo_cases() {
  std::vector<OpInfoCase> out;
  for (size_t i = 0; i < opinfos().size(); ++i)
    for (DType d : opinfos()[i].dtypes) out.push_back({i, d});
  return out;
}

std::string opinfo_case_name(const ::testing::TestParamInfo<OpInfoCase>& p) {
  std::string n = opinfos()[p.param.info].name + "_" + std::string(dtype_name(p.param.dtype));
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

}  // namespace kiln::testing
