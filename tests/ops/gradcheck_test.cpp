// Gradient checks for every differentiable OpInfo: on each float64 sample, the gradients that
// autograd computes (the ops' derivatives, written in ops) must match central finite
// differences, and for ops marked second_order so must the gradients of the gradients
// (create_graph). The function checked is L = sum_k sum(out_k * w_k) with fixed random w_k,
// which exercises every output element.
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "kiln/autograd/autograd.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

// At most this many elements of each input are perturbed (chosen evenly through it), so the
// large threaded samples stay cheap while every sample still gets checked.
constexpr int64_t kMaxCheckedElements = 24;

struct Case {
  size_t info;
  DType dtype;
};
void PrintTo(const Case& c, std::ostream* os) { *os << opinfos()[c.info].name << " (float64)"; }
constexpr double kEps = 1e-6;

// Pointer to the element with row-major index `linear` of a float64 tensor (any strides).
double* element(const Tensor& t, int64_t linear) {
  double* base = static_cast<double*>(t.data_ptr());
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.size(d);
    offset += (linear % size) * t.stride(d);
    linear /= size;
  }
  return base + offset;
}

struct Prepared {
  std::vector<Tensor> inputs;  // the sample's inputs, leaves in place of differentiated ones
  std::vector<Tensor> leaves;  // per input: the leaf (undefined if not differentiated)
  std::vector<size_t> diff;    // indices of the inputs that are differentiated
};

// The sample's float64 non-wrapped inputs become leaves that require grad; the op is called
// on `leaf.clone()` (a recorded copy), so in-place variants work on a non-leaf and every
// derivative receives an input with history.
Prepared prepare(const OpInfo& info, const Sample& s) {
  Prepared p;
  const size_t first_param = s.inputs.size() - static_cast<size_t>(info.trailing_params);
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const Tensor& t = s.inputs[i];
    const bool differentiable = t.dtype() == DType::Float64 && !t.impl()->is_wrapped_number() &&
                                t.numel() > 0 && i < first_param;
    if (!differentiable) {
      p.inputs.push_back(t);
      p.leaves.emplace_back();
      continue;
    }
    Tensor leaf = t.detach().clone();
    leaf.requires_grad_(true);
    p.leaves.push_back(leaf);
    p.inputs.push_back(leaf);
    p.diff.push_back(i);
  }
  return p;
}

// Calls the op on recorded copies of the leaves. The other inputs are passed detached, so that an
// in-place op whose destination is not differentiated (an empty tensor) gives history to a fresh
// tensor each call rather than to the shared sample (whose history a later call would then
// backpropagate into).
std::vector<Tensor> call_op(const OpInfo& info, const Prepared& p) {
  std::vector<Tensor> in = p.inputs;
  for (Tensor& t : in)
    if (t.defined() && !t.impl()->is_wrapped_number()) t = t.detach();
  for (size_t i : p.diff) in[i] = p.leaves[i].clone();
  return info.fn(in);
}

// Finite differences are only meaningful in float64 and on finite values: samples whose
// floating outputs are lower precision (promotion with a float32 operand) or not finite are
// left to the forward conformance suite.
bool checkable_outputs(const std::vector<Tensor>& outs) {
  for (const Tensor& o : outs) {
    if (!is_floating(o.dtype())) continue;
    if (o.dtype() != DType::Float64) return false;
    NoGradGuard no_grad;
    if (o.numel() > 0 && any(isnan(o) | isinf(o)).item<bool>()) return false;
  }
  return true;
}

bool all_finite(const Sample& s) {
  for (const Tensor& t : s.inputs)
    if (is_floating(t.dtype()) && t.numel() > 0 && any(isnan(t) | isinf(t)).item<bool>())
      return false;
  return true;
}

// L = sum_k sum(out_k * w_k) over the floating outputs.
Tensor scalarize(const std::vector<Tensor>& outs, const std::vector<Tensor>& weights) {
  Tensor total;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!weights[k].defined()) continue;
    Tensor term = sum(outs[k].to(DType::Float64) * weights[k]);
    total = total.defined() ? total + term : term;
  }
  return total;
}

std::vector<Tensor> make_weights(const std::vector<Tensor>& outs, uint32_t seed) {
  std::vector<Tensor> w;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype()) || !outs[k].requires_grad()) {
      w.emplace_back();
      continue;
    }
    w.push_back(make_tensor_for_test(outs[k].sizes().vec(), DType::Float64, -1, 1,
                                     Layout::Contiguous, seed + static_cast<uint32_t>(k)));
  }
  return w;
}

std::vector<int64_t> checked_elements(int64_t numel) {
  std::vector<int64_t> idx;
  if (numel <= kMaxCheckedElements) {
    for (int64_t i = 0; i < numel; ++i) idx.push_back(i);
  } else {
    for (int64_t k = 0; k < kMaxCheckedElements; ++k)
      idx.push_back(k * (numel - 1) / (kMaxCheckedElements - 1));
  }
  return idx;
}

// Compares analytic gradients with central differences of f (a scalar function of the
// inputs' current values).
void compare(const OpInfo& info, const std::string& ctx, const Prepared& p,
             const std::vector<Tensor>& analytic, const std::function<double()>& f) {
  for (size_t k = 0; k < p.diff.size(); ++k) {
    const Tensor& x = p.inputs[p.diff[k]];
    for (int64_t e : checked_elements(x.numel())) {
      double* px = element(x, e);
      const double orig = *px;
      *px = orig + kEps;
      const double fp = f();
      *px = orig - kEps;
      const double fm = f();
      *px = orig;
      const double numeric = (fp - fm) / (2 * kEps);
      // The difference quotient's own rounding error: f's last bits (a few ulps of a sum over
      // many outputs) divided by 2 eps; it matters only where f is large (~1e5 for log_softmax
      // of rows growing to 2400, where it reaches 1e-5).
      const double fd_rounding = 8 * std::numeric_limits<double>::epsilon() *
                                 std::max(std::abs(fp), std::abs(fm)) / (2 * kEps);
      const double got =
          analytic[k].defined() ? *element(analytic[k].contiguous(), e) : 0.0;  // unused = 0
      EXPECT_NEAR(got, numeric, info.grad_atol + info.grad_rtol * std::abs(numeric) + fd_rounding)
          << ctx << ": d/d(input " << p.diff[k] << ")[" << e << "]";
    }
  }
}

std::vector<Case> differentiable_cases() {
  std::vector<Case> out;
  for (size_t i = 0; i < opinfos().size(); ++i) {
    const OpInfo& info = opinfos()[i];
    bool f64 =
        std::find(info.dtypes.begin(), info.dtypes.end(), DType::Float64) != info.dtypes.end();
    const OpDef* op = info.covers.empty() ? nullptr : find_op(info.covers[0]);
    const bool has_derivative = op && op->derivative.fn;
    if ((info.differentiable || has_derivative) && f64) out.push_back({i, DType::Float64});
  }
  return out;
}

// G (below) sums every output element's second-order terms, so its rounding error grows with
// the output's size and the finite differences of G on the large (threaded) samples are noise
// (about ulp(G) / eps); those samples are checked to first order only.
constexpr int64_t kMaxSecondOrderNumel = 4096;
bool too_large_for_second_order(const std::vector<Tensor>& outs) {
  for (const Tensor& o : outs)
    if (o.numel() > kMaxSecondOrderNumel) return true;
  return false;
}

std::vector<Sample> gradcheck_samples(const OpInfo& info) {
  return info.grad_samples ? info.grad_samples(DType::Float64) : info.samples(DType::Float64);
}

class GradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheck, FirstDerivativesMatchFiniteDifferences) {
  const OpInfo& info = opinfos()[GetParam().info];
  if (!info.no_gradcheck.empty()) GTEST_SKIP() << info.name << ": " << info.no_gradcheck;
  uint32_t seed = 1;
  int checked = 0;
  for (const Sample& s : gradcheck_samples(info)) {
    const std::string ctx = info.name + " " + s.name;
    if (!all_finite(s) || s.no_gradcheck) continue;  // finite values, off kinks
    Prepared p = prepare(info, s);
    if (p.diff.empty()) continue;
    std::vector<Tensor> outs = call_op(info, p);
    if (!checkable_outputs(outs)) continue;
    ++checked;
    std::vector<Tensor> w = make_weights(outs, seed++);
    Tensor L = scalarize(outs, w);
    if (!L.defined() || !L.requires_grad()) {
      ADD_FAILURE() << ctx << ": no output requires grad although the op is differentiable";
      continue;
    }
    std::vector<Tensor> diff_inputs;
    for (size_t i : p.diff) diff_inputs.push_back(p.inputs[i]);
    std::vector<Tensor> analytic;
    try {
      analytic = grad({L}, diff_inputs, {}, {}, false, /*allow_unused=*/true);
    } catch (const std::exception& e) {
      ADD_FAILURE() << ctx << ": backward threw " << e.what();
      continue;
    }
    for (size_t k = 0; k < analytic.size(); ++k)
      if (analytic[k].defined()) {
        EXPECT_EQ(analytic[k].sizes(), diff_inputs[k].sizes()) << ctx;
        EXPECT_EQ(analytic[k].dtype(), diff_inputs[k].dtype()) << ctx;
      }
    compare(info, ctx, p, analytic, [&] {
      NoGradGuard no_grad;
      return scalarize(call_op(info, p), w).item<double>();
    });
  }
  if (checked == 0) GTEST_SKIP() << info.name << ": no sample has float64 inputs and outputs";
}

TEST_P(GradCheck, SecondDerivativesMatchFiniteDifferences) {
  const OpInfo& info = opinfos()[GetParam().info];
  if (!info.no_gradcheck.empty()) GTEST_SKIP() << info.name << ": " << info.no_gradcheck;
  if (!info.second_order) GTEST_SKIP() << info.name << " is checked to first order only";
  uint32_t seed = 100;
  int checked = 0;
  for (const Sample& s : gradcheck_samples(info)) {
    const std::string ctx = info.name + " " + s.name + " (second order)";
    if (!all_finite(s) || s.no_gradcheck) continue;  // finite values, off kinks
    Prepared p = prepare(info, s);
    if (p.diff.empty()) continue;
    std::vector<Tensor> diff_inputs;
    for (size_t i : p.diff) diff_inputs.push_back(p.inputs[i]);
    std::vector<Tensor> outs = call_op(info, p);
    if (!checkable_outputs(outs) || too_large_for_second_order(outs)) continue;
    ++checked;
    std::vector<Tensor> w = make_weights(outs, seed);
    std::vector<Tensor> v;  // weights on the first gradients
    for (size_t k = 0; k < diff_inputs.size(); ++k)
      v.push_back(make_tensor_for_test(diff_inputs[k].sizes().vec(), DType::Float64, -1, 1,
                                       Layout::Contiguous, seed + 50 + static_cast<uint32_t>(k)));
    ++seed;
    // G = sum_k sum(dL/dx_k * v_k), a function of the inputs through the first derivatives.
    auto G = [&](bool create_graph) {
      Tensor L = scalarize(call_op(info, p), w);
      std::vector<Tensor> g = grad({L}, diff_inputs, {}, {}, create_graph, true);
      Tensor total = zeros({}, DType::Float64);
      for (size_t k = 0; k < g.size(); ++k)
        if (g[k].defined()) total = total + sum(g[k] * v[k]);
      return total;
    };
    Tensor g2 = G(true);
    std::vector<Tensor> analytic(diff_inputs.size());
    if (g2.requires_grad()) {
      try {
        analytic = grad({g2}, diff_inputs, {}, {}, false, true);
      } catch (const std::exception& e) {
        ADD_FAILURE() << ctx << ": double backward threw " << e.what();
        continue;
      }
    }
    compare(info, ctx, p, analytic, [&] { return G(false).item<double>(); });
  }
  if (checked == 0) GTEST_SKIP() << info.name << ": no sample has float64 inputs and outputs";
}

// Every op with a derivative is checked by some OpInfo (the first op an OpInfo covers is the
// one it checks).
TEST(GradCheckCoverage, EveryDerivativeIsChecked) {
  std::set<std::string> checked;
  for (const Case& c : differentiable_cases()) checked.insert(opinfos()[c.info].covers[0]);
  for (const OpDef* op : all_ops()) {
    if (op->derivative.fn && op->name != "fill") {
      EXPECT_TRUE(checked.count(std::string(op->name)))
          << "op '" << op->name << "' has a derivative but no float64 OpInfo checks it";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(differentiable_cases()),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           std::string n = opinfos()[p.param.info].name;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GradCheck);

}  // namespace
}  // namespace kiln::testing
