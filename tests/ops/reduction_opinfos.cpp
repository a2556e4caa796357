// OpInfos for the reductions and scans: every op on every dtype it supports, over several dim
// sets (all dims, the last, the first with keepdim, a middle one, several at once), layouts
// (contiguous, transposed, strided), 0-d and zero-size inputs, and sizes that take the threaded
// paths (many outputs; few outputs with long reductions, which split the reduced range).
// References are plain float64 loops over each reduced slice.
#include <cmath>
#include <limits>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct ShapeSpec {
  std::string name;
  std::vector<int64_t> sizes;
  Layout layout = Layout::Contiguous;
};

// One way of calling a reduction: the dims it reduces (empty = all) and keepdim, with input
// shapes that suit those dims. Each becomes its own OpInfo, named op + suffix.
struct DimsCase {
  std::string suffix;
  std::vector<int64_t> dims;
  bool keepdim;
  std::vector<ShapeSpec> shapes;
};

const Layout kT = Layout::Transposed, kS = Layout::Strided;

const std::vector<DimsCase>& dims_cases() {
  static const std::vector<DimsCase> cases = {
      {"",
       {},
       false,
       {{"0-d", {}},
        {"empty [0]", {0}},
        {"empty [2, 0, 3]", {2, 0, 3}},
        {"1-d [13]", {13}},
        {"[5, 7]", {5, 7}},
        {"transposed [6, 9]", {6, 9}, kT},
        {"strided [2, 3, 5]", {2, 3, 5}, kS},
        {"large [300, 257] (split over threads)", {300, 257}},
        {"large transposed [129, 301]", {129, 301}, kT}}},
      {"_keepdim",
       {},
       true,
       {{"0-d", {}},
        {"[4, 5]", {4, 5}},
        {"empty [3, 0]", {3, 0}},
        {"strided [3, 4, 6]", {3, 4, 6}, kS}}},
      {"_dim_last",
       {-1},
       false,
       {{"0-d", {}},
        {"1-d [13]", {13}},
        {"[5, 7]", {5, 7}},
        {"transposed [6, 9] (outer loop)", {6, 9}, kT},
        {"strided [2, 3, 5] (made contiguous)", {2, 3, 5}, kS},
        {"zero-size reduced dim [3, 0]", {3, 0}},
        {"zero-size kept dim [0, 4]", {0, 4}},
        {"large [300, 257] (threaded over outputs)", {300, 257}},
        {"long rows [3, 20000] (reduced range split)", {3, 20000}},
        {"short rows [5000, 3]", {5000, 3}}}},
      {"_dim0_keepdim",
       {0},
       true,
       {{"1-d [13]", {13}},
        {"[5, 7]", {5, 7}},
        {"transposed [6, 9]", {6, 9}, kT},
        {"strided [4, 3, 5]", {4, 3, 5}, kS},
        {"zero-size kept dim [4, 0]", {4, 0}},
        {"large [300, 257] (outer loop, threaded)", {300, 257}},
        {"tall [20000, 3] (outer loop, reduced range split)", {20000, 3}},
        {"[3, 200, 70]", {3, 200, 70}}}},
      {"_dim_middle",
       {1},
       false,
       {{"[3, 4, 5]", {3, 4, 5}},
        {"transposed [3, 4, 5]", {3, 4, 5}, kT},
        {"strided [3, 4, 5]", {3, 4, 5}, kS},
        {"size-1 dim [2, 1, 5]", {2, 1, 5}},
        {"large [10, 200, 30]", {10, 200, 30}}}},
      {"_dims_first_last",
       {0, -1},
       false,
       {{"[3, 4, 5]", {3, 4, 5}},
        {"transposed [4, 5, 6]", {4, 5, 6}, kT},
        {"strided [3, 4, 5]", {3, 4, 5}, kS},
        {"zero-size kept dim [3, 0, 5]", {3, 0, 5}},
        {"large [30, 40, 50]", {30, 40, 50}}}},
      {"_dims_last_two_keepdim",
       {-2, 2},
       true,
       {{"[3, 4, 5]", {3, 4, 5}},
        {"transposed [4, 5, 6]", {4, 5, 6}, kT},
        {"large [8, 100, 80]", {8, 100, 80}}}},
  };
  return cases;
}

// The cases whose dims are a single dim (for the ops that take one dim).
std::vector<DimsCase> single_dim_cases() {
  std::vector<DimsCase> out;
  for (const DimsCase& c : dims_cases())
    if (c.dims.size() == 1) out.push_back(c);
  return out;
}
const DimsCase& case_named(const std::string& suffix) {
  for (const DimsCase& c : dims_cases())
    if (c.suffix == suffix) return c;
  throw std::logic_error("no dims case " + suffix);
}

// Rewrites a test tensor's values in place (so its layout is kept): f(value, flat index).
Tensor rewrite(Tensor t, const std::function<double(double, int64_t)>& f) {
  std::vector<double> v = t.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(v[i], static_cast<int64_t>(i));
  t.copy_(tensor(v, t.sizes()).to(t.dtype()));
  return t;
}

// A few NaNs spread over the tensor, so some slices hold one and others do not.
Tensor with_nans(Tensor t) {
  const int64_t n = t.numel();
  return rewrite(t, [n](double x, int64_t i) {
    for (int64_t k = 0; k < 4; ++k)
      if (i == k * n / 5 + 3 || i == k * n / 5 + 5) return kNaN;
    return x;
  });
}

bool reduces_zero_size(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  for (int64_t d = 0; d < nd; ++d) {
    bool reduced = dims.empty();
    for (int64_t r : dims) reduced = reduced || (r < 0 ? r + nd : r) == d;
    if (reduced && sizes[d] == 0) return true;
  }
  return false;
}

struct Range {
  double lo = -5, hi = 5;
};

// How a family of reduction OpInfos builds its samples.
struct SampleRule {
  std::function<Range(DType)> range = [](DType) { return Range{}; };
  bool nonempty = false;  // no identity: leave out samples that reduce a zero-size dim
  bool nans = false;      // add copies of the samples with NaNs in them (floating dtypes)
  bool ties = false;      // add samples with many equal values
  std::function<Tensor(Tensor)> prepare;  // rewrites each sample's values
};

std::vector<Sample> make_samples(const DimsCase& dc, DType dt, const SampleRule& rule) {
  std::vector<Sample> out;
  const Range r = rule.range(dt);
  uint32_t seed = 0;
  for (const ShapeSpec& s : dc.shapes) {
    ++seed;
    if (rule.nonempty && reduces_zero_size(s.sizes, dc.dims)) continue;
    Tensor t = make_tensor_for_test(s.sizes, dt, r.lo, r.hi, s.layout, seed);
    if (rule.prepare) t = rule.prepare(t);
    out.push_back({s.name, {t}});
    if (rule.nans && is_floating(dt) && t.numel() > 1)
      out.push_back({s.name + " with NaN",
                     {with_nans(make_tensor_for_test(s.sizes, dt, r.lo, r.hi, s.layout, seed))}});
    if (rule.ties && t.numel() > 1)
      out.push_back({s.name + " with ties",
                     {rewrite(t.clone(), [](double x, int64_t) { return std::round(x / 3); })},
                     /*no_gradcheck=*/true});
  }
  return out;
}

// The reference reduction for one DimsCase (a 0-d input reduces to itself).
Ref reduce_ref(const Ref& a, const DimsCase& dc, DType out_dtype,
               const std::function<double(const std::vector<double>&)>& f) {
  return reduce(a, a.dim() == 0 ? std::vector<int64_t>{} : dc.dims, dc.keepdim, out_dtype, f);
}

// ---- slice folds for the references ----

double ref_sum(const std::vector<double>& s) {
  double acc = 0;
  for (double x : s) acc += x;
  return acc;
}
double ref_prod(const std::vector<double>& s) {
  double acc = 1;
  for (double x : s) acc *= x;
  return acc;
}
double ref_mean(const std::vector<double>& s) { return ref_sum(s) / static_cast<double>(s.size()); }
double ref_max(const std::vector<double>& s) {
  double m = -kInf;
  for (double x : s) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}
double ref_min(const std::vector<double>& s) {
  double m = kInf;
  for (double x : s) {
    if (std::isnan(x)) return x;
    m = std::min(m, x);
  }
  return m;
}
// First index of the first NaN, else of the first max (or min).
template <bool IsMax>
double ref_arg(const std::vector<double>& s) {
  size_t best = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isnan(s[i])) return static_cast<double>(i);
    if (IsMax ? s[i] > s[best] : s[i] < s[best]) best = i;
  }
  return static_cast<double>(best);
}
double ref_var(const std::vector<double>& s, int64_t correction) {
  const double n = static_cast<double>(s.size()), m = ref_mean(s);
  double acc = 0;
  for (double x : s) acc += (x - m) * (x - m);
  return acc / std::max(0.0, n - static_cast<double>(correction));
}
double ref_logsumexp(const std::vector<double>& s) {
  double m = ref_max(s);
  if (std::isnan(m)) return m;
  if (std::isinf(m)) m = 0;
  double acc = 0;
  for (double x : s) acc += std::exp(x - m);
  return std::log(acc) + m;
}
double ref_norm(const std::vector<double>& s, double p) {
  if (p == kInf || p == -kInf) {
    double m = p > 0 ? 0 : kInf;
    for (double x : s) {
      if (std::isnan(x)) return x;
      m = p > 0 ? std::max(m, std::fabs(x)) : std::min(m, std::fabs(x));
    }
    return m;
  }
  double acc = 0;
  for (double x : s) acc += p == 0 ? (x != 0) : std::pow(std::fabs(x), p);
  return p == 0 ? acc : std::pow(acc, 1 / p);
}

// ---- error cases ----

using ReduceCall = std::function<void(const Tensor&, IntList)>;

std::vector<ErrorCase> dim_errors(const ReduceCall& call) {
  return {
      expect_error<IndexError>("dim out of range", "dimension out of range",
                               [=] {
                                 call(zeros({2, 3}), {2});
                               }),
      expect_error<IndexError>("negative dim out of range", "dimension out of range",
                               [=] {
                                 call(zeros({2, 3}), {-3});
                               }),
      expect_error<IndexError>("duplicate dim", "appears more than once",
                               [=] {
                                 call(zeros({2, 3}), {1, -1});
                               }),
  };
}
std::vector<ErrorCase> floating_errors(const ReduceCall& call) {
  auto e = dim_errors(call);
  e.push_back(expect_error<DTypeError>("integer input", "expected a floating-point input", [=] {
    call(zeros({2, 3}, DType::Int64), {});
  }));
  e.push_back(expect_error<DTypeError>("bool input", "expected a floating-point input",
                                       [=] { call(zeros({2}, DType::Bool), {0}); }));
  return e;
}
std::vector<ErrorCase> nonempty_errors(const ReduceCall& call) {
  auto e = dim_errors(call);
  e.push_back(
      expect_error<IndexError>("zero-size reduced dim", "cannot reduce over a zero-size", [=] {
        call(zeros({2, 0}), {1});
      }));
  e.push_back(
      expect_error<IndexError>("empty tensor, all dims", "cannot reduce over a zero-size", [=] {
        call(zeros({0, 3}), {});
      }));
  return e;
}

// ---- registration ----

struct ReductionSpec {
  std::string name;
  std::vector<std::string> covers;
  std::vector<DType> dtypes;
  SampleRule rule;
  std::function<Tensor(const Tensor&, IntList, bool)> fn;
  std::function<DType(DType)> out_dtype = [](DType d) { return d; };
  std::function<double(const std::vector<double>&)> ref;
  std::vector<ErrorCase> errors;
  bool second_order = false;  // gradcheck the second derivatives too
  std::string no_gradcheck;   // why the gradient checks leave it out
};

// One OpInfo per dims case: name + suffix.
void add_reduction(const ReductionSpec& spec, const std::vector<DimsCase>& cases) {
  for (const DimsCase& dc : cases) {
    OpInfo info;
    info.name = spec.name + dc.suffix;
    info.covers = spec.covers;
    info.dtypes = spec.dtypes;
    info.samples = [dc, rule = spec.rule](DType dt) { return make_samples(dc, dt, rule); };
    info.fn = [dc, fn = spec.fn](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{fn(in[0], dc.dims, dc.keepdim)};
    };
    info.ref = [dc, spec](const std::vector<Ref>& in) {
      return std::vector<Ref>{reduce_ref(in[0], dc, spec.out_dtype(in[0].dtype), spec.ref)};
    };
    info.errors = spec.errors;
    info.second_order = spec.second_order;
    info.no_gradcheck = spec.no_gradcheck;
    opinfos().push_back(std::move(info));
  }
}

DType sum_dtype(DType d) { return is_floating(d) ? d : DType::Int64; }

const bool registered_reductions = [] {
  // sum, prod: bool/int results are int64; dtype= picks the result type.
  add_reduction({.name = "sum",
                 .covers = {"sum"},
                 .dtypes = kAllDTypes,
                 .fn = [](const Tensor& x, IntList d, bool k) { return sum(x, d, k); },
                 .out_dtype = sum_dtype,
                 .ref = ref_sum,
                 .errors = dim_errors([](const Tensor& x, IntList d) { sum(x, d); }),
                 .second_order = true},
                dims_cases());
  add_reduction(
      {.name = "sum_dtype_float64",
       .covers = {"sum"},
       .dtypes = kAllDTypes,
       .fn = [](const Tensor& x, IntList d, bool k) { return sum(x, d, k, DType::Float64); },
       .out_dtype = [](DType) { return DType::Float64; },
       .ref = ref_sum,
       .errors = dim_errors([](const Tensor& x, IntList d) { sum(x, d, false, DType::Float64); }),
       .second_order = true},
      {case_named(""), case_named("_dim0_keepdim")});
  add_reduction(
      {.name = "sum_dtype_int32",
       .covers = {"sum"},
       .dtypes = kAllDTypes,
       .fn = [](const Tensor& x, IntList d, bool k) { return sum(x, d, k, DType::Int32); },
       .out_dtype = [](DType) { return DType::Int32; },
       // dtype= converts the input first, so floats are truncated before summing.
       .ref =
           [](const std::vector<double>& s) {
             double acc = 0;
             for (double x : s) acc += std::trunc(x);
             return acc;
           },
       .errors = dim_errors([](const Tensor& x, IntList d) { sum(x, d, false, DType::Int32); }),
       .no_gradcheck = "an int32 result: nothing to differentiate"},
      {case_named("_dim_last")});
  // Products stay in range: floats near 1, small integers (whose long products are 0).
  SampleRule prod_rule{.range = [](DType d) {
    return is_floating(d) ? Range{0.95, 1.05} : Range{-2, 2};
  }};
  add_reduction({.name = "prod",
                 .covers = {"prod"},
                 .dtypes = kAllDTypes,
                 .rule = prod_rule,
                 .fn = [](const Tensor& x, IntList d, bool k) { return prod(x, d, k); },
                 .out_dtype = sum_dtype,
                 .ref = ref_prod,
                 .errors = dim_errors([](const Tensor& x, IntList d) { prod(x, d); }),
                 .second_order = true},
                dims_cases());
  add_reduction(
      {.name = "prod_dtype_float64",
       .covers = {"prod"},
       .dtypes = kAllDTypes,
       .rule = prod_rule,
       .fn = [](const Tensor& x, IntList d, bool k) { return prod(x, d, k, DType::Float64); },
       .out_dtype = [](DType) { return DType::Float64; },
       .ref = ref_prod,
       .errors = dim_errors([](const Tensor& x, IntList d) { prod(x, d, false, DType::Float64); }),
       .second_order = true},
      {case_named("_dim_last")});

  // mean: floating only; the mean of nothing is NaN.
  add_reduction({.name = "mean",
                 .covers = {"mean"},
                 .dtypes = kFloatDTypes,
                 .rule = {.nans = true},
                 .fn = [](const Tensor& x, IntList d, bool k) { return mean(x, d, k); },
                 .ref = ref_mean,
                 .errors = floating_errors([](const Tensor& x, IntList d) { mean(x, d); }),
                 .second_order = true},
                dims_cases());

  // amax, amin: NaN propagates; no identity, so zero-size reductions are errors.
  const SampleRule extreme_rule{.nonempty = true, .nans = true, .ties = true};
  add_reduction({.name = "amax",
                 .covers = {"amax"},
                 .dtypes = kAllDTypes,
                 .rule = extreme_rule,
                 .fn = [](const Tensor& x, IntList d, bool k) { return amax(x, d, k); },
                 .ref = ref_max,
                 .errors = nonempty_errors([](const Tensor& x, IntList d) { amax(x, d); })},
                dims_cases());
  add_reduction({.name = "amin",
                 .covers = {"amin"},
                 .dtypes = kAllDTypes,
                 .rule = extreme_rule,
                 .fn = [](const Tensor& x, IntList d, bool k) { return amin(x, d, k); },
                 .ref = ref_min,
                 .errors = nonempty_errors([](const Tensor& x, IntList d) { amin(x, d); })},
                dims_cases());
  // max(x), min(x): over all elements.
  add_reduction(
      {.name = "max_all",
       .covers = {"amax"},
       .dtypes = kAllDTypes,
       .rule = extreme_rule,
       .fn = [](const Tensor& x, IntList, bool) { return max(x); },
       .ref = ref_max,
       .errors = {expect_error<IndexError>("empty tensor", "max: cannot reduce over a zero-size",
                                           [] {
                                             max(zeros({3, 0}));
                                           })}},
      {case_named("")});
  add_reduction(
      {.name = "min_all",
       .covers = {"amin"},
       .dtypes = kAllDTypes,
       .rule = extreme_rule,
       .fn = [](const Tensor& x, IntList, bool) { return min(x); },
       .ref = ref_min,
       .errors = {expect_error<IndexError>("empty tensor", "min: cannot reduce over a zero-size",
                                           [] { min(zeros({0})); })}},
      {case_named("")});

  // var, std: Bessel-style correction; a correction >= n divides by zero (inf or NaN).
  for (int64_t correction : {1, 0, 3}) {
    const std::string suffix = correction == 1 ? "" : "_correction" + std::to_string(correction);
    const auto cases = correction == 1 ? dims_cases()
                                       : std::vector<DimsCase>{case_named("_dim_last"),
                                                               case_named("_dims_first_last")};
    add_reduction(
        {.name = "var" + suffix,
         .covers = {"var"},
         .dtypes = kFloatDTypes,
         .rule = {.nans = true},
         .fn = [correction](const Tensor& x, IntList d,
                            bool k) { return var(x, d, correction, k); },
         .ref = [correction](const std::vector<double>& s) { return ref_var(s, correction); },
         .errors = floating_errors([](const Tensor& x, IntList d) { var(x, d); }),
         .second_order = true},
        cases);
    add_reduction(
        {.name = "std" + suffix,
         .covers = {"var"},
         .dtypes = kFloatDTypes,
         .fn = [correction](const Tensor& x, IntList d,
                            bool k) { return kiln::std(x, d, correction, k); },
         .ref = [correction](
                    const std::vector<double>& s) { return std::sqrt(ref_var(s, correction)); },
         .errors = floating_errors([](const Tensor& x, IntList d) { kiln::std(x, d); }),
         .second_order = true,
         .no_gradcheck = correction == 0
                             ? "the 0-d sample has std = sqrt(0), where the derivative is infinite"
                             : ""},
        cases);
  }

  // logsumexp: large values (no overflow thanks to the max shift), and infinities.
  add_reduction({.name = "logsumexp",
                 .covers = {"logsumexp"},
                 .dtypes = kFloatDTypes,
                 .rule = {.range =
                              [](DType) {
                                return Range{-50, 50};
                              },
                          .nans = true},
                 .fn = [](const Tensor& x, IntList d, bool k) { return logsumexp(x, d, k); },
                 .ref = ref_logsumexp,
                 .errors = floating_errors([](const Tensor& x, IntList d) { logsumexp(x, d); }),
                 .second_order = true},
                dims_cases());
  add_reduction({.name = "logsumexp_infinities",
                 .covers = {"logsumexp"},
                 .dtypes = kFloatDTypes,
                 .rule = {.prepare =
                              [](Tensor t) {
                                // Row 0 all -inf, row 1 holds +inf, row 2 one -inf, row 3 huge
                                // values.
                                const int64_t cols = t.size(-1);
                                return rewrite(t, [cols](double x, int64_t i) {
                                  const int64_t row = i / cols;
                                  if (row == 0 || (row == 2 && i % cols == 1)) return -kInf;
                                  if (row == 1 && i % cols == 2) return kInf;
                                  if (row == 3) return x * 1e3;
                                  return x;
                                });
                              }},
                 .fn = [](const Tensor& x, IntList d, bool k) { return logsumexp(x, d, k); },
                 .ref = ref_logsumexp,
                 .errors = floating_errors([](const Tensor& x, IntList d) { logsumexp(x, d); })},
                {{"_rows", {-1}, false, {{"[5, 7]", {5, 7}}, {"transposed [6, 9]", {6, 9}, kT}}}});

  // norm: p = 2 by default; 1, inf, -inf, 0 (count of non-zeros) and general p.
  add_reduction({.name = "norm",
                 .covers = {"norm"},
                 .dtypes = kFloatDTypes,
                 .rule = {.nans = true},
                 .fn = [](const Tensor& x, IntList d, bool k) { return norm(x, 2, d, k); },
                 .ref = [](const std::vector<double>& s) { return ref_norm(s, 2); },
                 .errors = floating_errors([](const Tensor& x, IntList d) { norm(x, 2, d); }),
                 .second_order = true},
                dims_cases());
  for (auto [p, label] : std::vector<std::pair<double, std::string>>{{1, "1"},
                                                                     {kInf, "inf"},
                                                                     {-kInf, "neginf"},
                                                                     {0, "0"},
                                                                     {3, "3"},
                                                                     {0.5, "0_5"},
                                                                     {-1.5, "neg1_5"}}) {
    const bool inf = std::isinf(p);
    auto errors = floating_errors([p](const Tensor& x, IntList d) { norm(x, p, d); });
    if (inf) {
      errors.push_back(expect_error<IndexError>("empty tensor", "cannot reduce over a zero-size",
                                                [p] { norm(zeros({0}), p); }));
    }
    errors.push_back(
        expect_error<ValueError>("p is NaN", "p must be a number", [] { norm(zeros({2}), kNaN); }));
    add_reduction({.name = "norm_p" + label,
                   .covers = {"norm"},
                   .dtypes = kFloatDTypes,
                   // Some zeros, for p = 0 and negative p (whole zero slices too: no second
                   // derivative there, so these are checked to first order only).
                   .rule = {.nonempty = inf,
                            .prepare =
                                [](Tensor t) {
                                  return rewrite(
                                      t, [](double x, int64_t i) { return i % 5 == 1 ? 0.0 : x; });
                                }},
                   .fn = [p](const Tensor& x, IntList d, bool k) { return norm(x, p, d, k); },
                   .ref = [p](const std::vector<double>& s) { return ref_norm(s, p); },
                   .errors = errors},
                  {case_named(""), case_named("_dim_last"), case_named("_dim0_keepdim")});
  }

  // all, any: bool results for every dtype. Values are mostly non-zero for all (mostly zero
  // for any) so both outcomes occur; NaN counts as true.
  auto sparse = [](int64_t every, bool zeros_are_rare) {
    return [=](Tensor t) {
      const bool floating = is_floating(t.dtype());
      return rewrite(t, [=](double x, int64_t i) {
        const bool hit = (static_cast<uint64_t>(i) * 2654435761u >> 7) % every == 0;
        const double nonzero = x != 0 ? x : 1;
        if (zeros_are_rare) return hit ? 0.0 : nonzero;
        return hit ? (floating && i % 3 == 0 ? kNaN : nonzero) : 0.0;
      });
    };
  };
  add_reduction({.name = "all",
                 .covers = {"all"},
                 .dtypes = kAllDTypes,
                 .rule = {.prepare = sparse(23, true)},
                 .fn = [](const Tensor& x, IntList d, bool k) { return all(x, d, k); },
                 .out_dtype = [](DType) { return DType::Bool; },
                 .ref =
                     [](const std::vector<double>& s) {
                       for (double x : s)
                         if (x == 0) return 0.0;
                       return 1.0;
                     },
                 .errors = dim_errors([](const Tensor& x, IntList d) { all(x, d); })},
                dims_cases());
  add_reduction({.name = "any",
                 .covers = {"any"},
                 .dtypes = kAllDTypes,
                 .rule = {.prepare = sparse(9, false)},
                 .fn = [](const Tensor& x, IntList d, bool k) { return any(x, d, k); },
                 .out_dtype = [](DType) { return DType::Bool; },
                 .ref =
                     [](const std::vector<double>& s) {
                       for (double x : s)
                         if (x != 0) return 1.0;
                       return 0.0;
                     },
                 .errors = dim_errors([](const Tensor& x, IntList d) { any(x, d); })},
                dims_cases());
  return true;
}();

// ---- max/min along a dim (values + indices), argmax, argmin ----

template <bool IsMax>
void add_index_reductions() {
  const std::string mm = IsMax ? "max" : "min", arg = IsMax ? "argmax" : "argmin";
  const SampleRule rule{.nonempty = true, .nans = true, .ties = true};
  auto values_ref = IsMax ? ref_max : ref_min;
  for (const DimsCase& dc : single_dim_cases()) {
    const int64_t dim = dc.dims[0];
    OpInfo info;
    info.name = mm + "_dim" + dc.suffix;
    info.covers = {mm + "_dim"};
    info.dtypes = kAllDTypes;
    info.samples = [dc, rule](DType dt) { return make_samples(dc, dt, rule); };
    info.fn = [dc, dim](const std::vector<Tensor>& in) {
      auto [v, i] = IsMax ? max(in[0], dim, dc.keepdim) : min(in[0], dim, dc.keepdim);
      return std::vector<Tensor>{v, i};
    };
    info.ref = [dc, values_ref](const std::vector<Ref>& in) {
      return std::vector<Ref>{reduce_ref(in[0], dc, in[0].dtype, values_ref),
                              reduce_ref(in[0], dc, DType::Int64, ref_arg<IsMax>)};
    };
    info.errors = {
        expect_error<IndexError>("dim out of range", "dimension out of range",
                                 [] {
                                   IsMax ? max(zeros({2, 3}), 2) : min(zeros({2, 3}), 2);
                                 }),
        expect_error<IndexError>("zero-size dim", "cannot reduce over a zero-size dimension",
                                 [] {
                                   IsMax ? max(zeros({2, 0}), 1) : min(zeros({2, 0}), 1);
                                 }),
    };
    opinfos().push_back(info);
  }
  // argmax/argmin: over one dim, or over the flattened tensor when no dim is given.
  std::vector<DimsCase> cases = single_dim_cases();
  cases.push_back(case_named(""));
  cases.push_back(case_named("_keepdim"));
  for (const DimsCase& dc : cases) {
    const std::optional<int64_t> dim =
        dc.dims.empty() ? std::nullopt : std::optional<int64_t>(dc.dims[0]);
    OpInfo info;
    info.name = arg + dc.suffix;
    info.covers = {arg};
    info.dtypes = kAllDTypes;
    info.samples = [dc, rule](DType dt) { return make_samples(dc, dt, rule); };
    info.fn = [dc, dim](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{IsMax ? argmax(in[0], dim, dc.keepdim)
                                       : argmin(in[0], dim, dc.keepdim)};
    };
    info.ref = [dc](const std::vector<Ref>& in) {
      return std::vector<Ref>{reduce_ref(in[0], dc, DType::Int64, ref_arg<IsMax>)};
    };
    info.errors = {
        expect_error<IndexError>("dim out of range", "dimension out of range",
                                 [] {
                                   IsMax ? argmax(zeros({2, 3}), -3) : argmin(zeros({2, 3}), -3);
                                 }),
        expect_error<IndexError>("zero-size dim", "cannot reduce over a zero-size dimension",
                                 [] {
                                   IsMax ? argmax(zeros({0, 3}), 0) : argmin(zeros({0, 3}), 0);
                                 }),
        expect_error<IndexError>("empty tensor", "cannot reduce over a zero-size dimension",
                                 [] { IsMax ? argmax(zeros({0})) : argmin(zeros({0})); }),
    };
    opinfos().push_back(info);
  }
}

const bool registered_index_reductions = [] {
  add_index_reductions<true>();
  add_index_reductions<false>();
  return true;
}();

// ---- cumsum, cumprod ----

// Running fold along `dim` of a (a 0-d tensor is its own scan).
Ref scan_ref(const Ref& a, int64_t dim, DType out_dtype, bool is_prod) {
  // The input is converted to the result dtype first; then each element folds in its
  // predecessor along dim (which has a smaller flat index, so it is already final).
  Ref out{a.sizes, a.v, out_dtype};
  for (double& x : out.v) x = cast_to(x, out_dtype);
  if (a.dim() == 0) return out;
  const int64_t d = dim < 0 ? dim + a.dim() : dim;
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = a.unravel(i);
    if (idx[d] == 0) continue;
    --idx[d];
    const double prev = out.v[static_cast<size_t>(a.ravel(idx))];
    out.v[i] = is_prod ? prev * out.v[i] : prev + out.v[i];
  }
  return out;
}

const bool registered_scans = [] {
  struct ScanCase {
    std::string suffix;
    int64_t dim;
    std::optional<DType> dtype;
    std::vector<ShapeSpec> shapes;
  };
  const std::vector<ScanCase> cases = {
      {"",
       -1,
       {},
       {{"0-d", {}},
        {"empty [0]", {0}},
        {"1-d [13]", {13}},
        {"[5, 7]", {5, 7}},
        {"transposed [6, 9]", {6, 9}, kT},
        {"strided [2, 3, 5]", {2, 3, 5}, kS},
        {"zero-size [3, 0]", {3, 0}},
        {"large [300, 257] (threaded)", {300, 257}}}},
      {"_dim0",
       0,
       {},
       {{"[5, 7]", {5, 7}},
        {"transposed [6, 9]", {6, 9}, kT},
        {"zero-size [0, 4]", {0, 4}},
        {"wide [40, 300] (column blocks)", {40, 300}}}},
      {"_dim_middle", 1, {}, {{"[3, 4, 5]", {3, 4, 5}}, {"strided [3, 4, 5]", {3, 4, 5}, kS}}},
      {"_dtype_float64",
       -1,
       DType::Float64,
       {{"[5, 7]", {5, 7}}, {"transposed [6, 9]", {6, 9}, kT}}},
  };
  for (bool is_prod : {false, true}) {
    const std::string name = is_prod ? "cumprod" : "cumsum";
    for (const ScanCase& sc : cases) {
      OpInfo info;
      info.name = name + sc.suffix;
      info.covers = {name};
      info.dtypes = kAllDTypes;
      info.samples = [sc, is_prod](DType dt) {
        std::vector<Sample> out;
        const Range r = is_prod && is_floating(dt) ? Range{0.95, 1.05}
                        : is_prod                  ? Range{-2, 2}
                                                   : Range{};
        uint32_t seed = 0;
        for (const ShapeSpec& s : sc.shapes)
          out.push_back(
              {s.name, {make_tensor_for_test(s.sizes, dt, r.lo, r.hi, s.layout, ++seed)}});
        return out;
      };
      info.fn = [sc, is_prod](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{is_prod ? cumprod(in[0], sc.dim, sc.dtype)
                                           : cumsum(in[0], sc.dim, sc.dtype)};
      };
      info.ref = [sc, is_prod](const std::vector<Ref>& in) {
        const DType out = sc.dtype ? *sc.dtype : sum_dtype(in[0].dtype);
        return std::vector<Ref>{scan_ref(in[0], sc.dim, out, is_prod)};
      };
      info.second_order = true;
      info.errors = {
          expect_error<IndexError>("dim out of range", "dimension out of range", [is_prod] {
            is_prod ? cumprod(zeros({2, 3}), 2) : cumsum(zeros({2, 3}), -3);
          })};
      opinfos().push_back(info);
    }
  }
  return true;
}();

// ---- behaviour the OpInfos do not show directly ----

TEST(Reductions, Float32SumIsAccurateOverManyElements) {
  // 1e6 copies of 0.1f: a float32 running sum drifts by about 1%; the result must not.
  Tensor x = full({1000000}, 0.1, DType::Float32);
  const double want = 1e6 * static_cast<double>(0.1f);
  EXPECT_NEAR(sum(x).item<double>(), want, want * 1e-6);
  EXPECT_NEAR(mean(x).item<double>(), static_cast<double>(0.1f), 1e-7);
  EXPECT_NEAR(sum(x.view({1000, 1000}), {0}).sum().item<double>(), want, want * 1e-6);
}

TEST(Reductions, VarianceIsStableForLargeOffsets) {
  // Values 1e9 + {0, 1, 2, 3}: a one-pass sum of squares would lose every digit.
  Tensor x = tensor({1e9, 1e9 + 1, 1e9 + 2, 1e9 + 3}, DType::Float64);
  EXPECT_DOUBLE_EQ(var(x).item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(var(x, {}, 0).item<double>(), 1.25);
}

TEST(Reductions, IntegerSumsWrapLikeInt64) {
  Tensor x = full({2}, Scalar(int64_t{1} << 62), DType::Int64);
  EXPECT_EQ(sum(x).item<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(sum(tensor({1, 2, 3}, DType::Int32)).dtype(), DType::Int64);
  EXPECT_EQ(sum(tensor({1, 2, 3}, DType::Int32), {}, false, DType::Int32).dtype(), DType::Int32);
}

TEST(Reductions, ArgmaxOfFlattenedNonContiguousTensorUsesLogicalOrder) {
  // Transposed storage: the logical (row-major) order decides the index.
  Tensor x = tensor({1.0, 9.0, 3.0, 9.0, 5.0, 6.0}, DType::Float32).view({2, 3}).t();
  // x = [[1, 9], [9, 5], [3, 6]]: the first 9 is at flat index 1.
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmax(x, 1, true).sizes().vec(), (std::vector<int64_t>{3, 1}));
}

}  // namespace
}  // namespace kiln::testing
