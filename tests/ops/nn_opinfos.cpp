// OpInfos for softmax/log_softmax and the neural-network ops (layer_norm, rms_norm, the losses,
// dropout, scaled_dot_product_attention), checked against float64 references written as plain
// loops. Integer arguments (dims, counts of normalised dims) travel in a sample as trailing 0-d
// int64 tensors, so that one OpInfo covers many of them.
#include <cmath>
#include <limits>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::vector<DType> kF = kFloatDTypes;

Tensor mk(std::vector<int64_t> sizes, DType dt, double lo = -3, double hi = 3,
          Layout layout = Layout::Contiguous, uint32_t seed = 0) {
  return make_tensor_for_test(std::move(sizes), dt, lo, hi, layout, seed);
}
Tensor int_arg(int64_t v) { return scalar_tensor(v, DType::Int64); }
int64_t int_of(const Ref& r) { return static_cast<int64_t>(r.v.at(0)); }
int64_t wrap(int64_t d, int64_t nd) { return d < 0 ? d + std::max<int64_t>(nd, 1) : d; }

// Calls f(flat offsets of one slice along `dim`) for every slice of a row-major `sizes`.
void for_each_slice(const std::vector<int64_t>& sizes, int64_t dim,
                    const std::function<void(const std::vector<int64_t>&)>& f) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  if (nd == 0) return f({0});
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= sizes[d];
  for (int64_t d = dim + 1; d < nd; ++d) inner *= sizes[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> offs;
      for (int64_t k = 0; k < sizes[dim]; ++k) offs.push_back((o * sizes[dim] + k) * inner + i);
      f(offs);
    }
}

// ---- softmax ----
Ref ref_softmax(const Ref& x, int64_t dim, bool log) {
  Ref out = Ref::zeros(x.sizes, x.dtype);
  for_each_slice(x.sizes, wrap(dim, x.dim()), [&](const std::vector<int64_t>& offs) {
    double mx = -kInf;
    bool nan = false;
    for (int64_t o : offs) {
      nan = nan || std::isnan(x.v[o]);
      mx = std::max(mx, x.v[o]);
    }
    double sum = 0;
    for (int64_t o : offs) sum += std::exp(x.v[o] - mx);
    for (int64_t o : offs) {
      const double shifted = x.v[o] - mx;
      out.v[o] = nan ? kNaN : log ? shifted - std::log(sum) : std::exp(shifted) / sum;
    }
  });
  return out;
}

std::vector<Sample> softmax_samples(DType dt) {
  auto s = [&](std::string name, Tensor x, int64_t dim) {
    return Sample{name + " dim " + std::to_string(dim), {x, int_arg(dim)}};
  };
  Tensor with_inf = mk({4, 6}, dt);
  with_inf.select(0, 0).select(0, 2).fill_(-kInf);
  with_inf.select(0, 1).slice(0, 0, 5).fill_(-kInf);  // all but one entry -inf
  with_inf.select(0, 3).fill_(-kInf);                 // a whole row -inf: NaN, as PyTorch
  Tensor with_nan = mk({3, 5}, dt);
  with_nan.select(0, 1).select(0, 3).fill_(kNaN);
  Tensor with_pos_inf = mk({2, 9}, dt);
  with_pos_inf.select(0, 0).select(0, 4).fill_(kInf);
  return {
      s("0-d", mk({}, dt), 0),
      s("0-d", mk({}, dt), -1),
      s("1-d [13] (vector tail)", mk({13}, dt), 0),
      s("[5, 7]", mk({5, 7}, dt), -1),
      s("[5, 7]", mk({5, 7}, dt), 0),
      s("[3, 4, 5]", mk({3, 4, 5}, dt), 0),
      s("[3, 4, 5]", mk({3, 4, 5}, dt), 1),
      s("[3, 4, 5]", mk({3, 4, 5}, dt), 2),
      s("[3, 4, 5]", mk({3, 4, 5}, dt), -2),
      s("transposed [6, 9]", mk({6, 9}, dt, -3, 3, Layout::Transposed), 1),
      s("transposed [6, 9]", mk({6, 9}, dt, -3, 3, Layout::Transposed), 0),
      s("strided [2, 3, 5]", mk({2, 3, 5}, dt, -3, 3, Layout::Strided), -1),
      s("-inf entries [4, 6]", with_inf, 1),
      s("-inf entries [4, 6]", with_inf, 0),
      s("NaN entry [3, 5]", with_nan, 1),
      s("+inf entry [2, 9]", with_pos_inf, 1),
      s("large magnitudes [4, 40]", mk({4, 40}, dt, -1000, 1000), 1),
      s("large magnitudes [40, 4]", mk({40, 4}, dt, -1000, 1000), 0),
      s("row of one [5, 1]", mk({5, 1}, dt), 1),
      s("empty [2, 0, 3]", mk({2, 0, 3}, dt), 1),
      s("empty [2, 0, 3]", mk({2, 0, 3}, dt), 2),
      s("threaded rows [300, 257]", mk({300, 257}, dt, -3, 3, Layout::Contiguous, 3), -1),
      s("threaded columns [257, 300]", mk({257, 300}, dt, -3, 3, Layout::Contiguous, 4), 0),
      s("rows split across threads [3, 600, 70]", mk({3, 600, 70}, dt), 1),
      s("slices per thread [64, 30, 33]", mk({64, 30, 33}, dt), 1),
      // Rows growing by 4 per row: the max sits in the last thread's rows, far above the rest.
      s("rows split across threads, growing rows [2, 600, 70]",
        mk({2, 600, 70}, dt, -1, 1) + to_dtype(arange(600), dt).reshape({600, 1}) * 4.0, 1),
      s("threaded columns, growing rows [300, 150]",
        mk({300, 150}, dt, -1, 1) + to_dtype(arange(300), dt).reshape({300, 1}) * 4.0, 0),
  };
}

std::vector<ErrorCase> softmax_errors(const std::string& name,
                                      std::function<Tensor(const Tensor&, int64_t)> f) {
  return {
      expect_error<DTypeError>("int64 input", name + ": expected a floating tensor",
                               [=] { f(ones({2, 3}, DType::Int64), 1); }),
      expect_error<DTypeError>("bool input", "floating", [=] { f(ones({2}, DType::Bool), 0); }),
      expect_error<IndexError>("dim out of range", "dimension out of range",
                               [=] { f(ones({2, 3}), 2); }),
      expect_error<IndexError>("negative dim out of range", "dimension out of range",
                               [=] { f(ones({2, 3}), -3); }),
      expect_error<IndexError>("0-d dim 1", "dimension out of range", [=] { f(ones({}), 1); }),
  };
}

KILN_OPINFO({
    .name = "softmax",
    .covers = {"softmax"},
    .dtypes = kF,
    .samples = softmax_samples,
    .fn = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{softmax(in[0], in[1].item<int64_t>())};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_softmax(in[0], int_of(in[1]), false)};
    },
    .rtol32 = 1e-5, .atol32 = 1e-6,
    .errors = softmax_errors("softmax", [](const Tensor& x, int64_t d) { return softmax(x, d); }),
});

KILN_OPINFO({
    .name = "log_softmax",
    .covers = {"log_softmax"},
    .dtypes = kF,
    .samples = softmax_samples,
    .fn = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{log_softmax(in[0], in[1].item<int64_t>())};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_softmax(in[0], int_of(in[1]), true)};
    },
    .rtol32 = 1e-5, .atol32 = 1e-5,
    .errors = softmax_errors("log_softmax",
                             [](const Tensor& x, int64_t d) { return log_softmax(x, d); }),
});

KILN_OPINFO({
    .name = "softmax_methods",
    .covers = {"softmax", "log_softmax"},
    .dtypes = kF,
    .samples = [](DType dt) {
      return std::vector<Sample>{{"[3, 4]", {mk({3, 4}, dt)}}};
    },
    .fn = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{in[0].softmax(0), in[0].log_softmax(-1)};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_softmax(in[0], 0, false), ref_softmax(in[0], -1, true)};
    },
    .rtol32 = 1e-5, .atol32 = 1e-5,
    .errors = {expect_error<IndexError>("dim", "dimension out of range",
                                        [] { ones({2}).softmax(3); })},
});

// ---- layer_norm / rms_norm ----
// Inputs: x, [weight], [bias], then the count k of normalised (trailing) dims.
struct NormRef {
  Ref y, mean, rstd;
};
NormRef ref_norm(const std::vector<Ref>& in, bool has_w, bool has_b, bool rms, double eps) {
  const Ref& x = in[0];
  const int64_t k = int_of(in.back());
  int64_t n = 1;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) n *= x.sizes[d];
  int64_t rows = 1;
  std::vector<int64_t> stats_sizes = x.sizes;
  for (int64_t d = 0; d < x.dim() - k; ++d) rows *= x.sizes[d];
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) stats_sizes[d] = 1;
  NormRef r{Ref::zeros(x.sizes, x.dtype), Ref::zeros(stats_sizes, x.dtype),
            Ref::zeros(stats_sizes, x.dtype)};
  for (int64_t row = 0; row < rows; ++row) {
    const double* p = x.v.data() + row * n;
    double mean = 0, var = 0;
    if (rms) {
      for (int64_t i = 0; i < n; ++i) var += p[i] * p[i];
      var /= static_cast<double>(n);
    } else {
      for (int64_t i = 0; i < n; ++i) mean += p[i];
      mean /= static_cast<double>(n);
      for (int64_t i = 0; i < n; ++i) var += (p[i] - mean) * (p[i] - mean);
      var /= static_cast<double>(n);
    }
    const double rstd = 1.0 / std::sqrt(var + eps);
    r.mean.v[row] = n == 0 ? kNaN : mean;
    r.rstd.v[row] = n == 0 ? kNaN : rstd;
    for (int64_t i = 0; i < n; ++i) {
      double y = (p[i] - mean) * rstd;
      if (has_w) y *= in[1].v[i];
      if (has_b) y += in[1 + has_w].v[i];
      r.y.v[row * n + i] = y;
    }
  }
  return r;
}

std::vector<Sample> norm_samples(DType dt, bool has_w, bool has_b) {
  auto s = [&](std::string name, Tensor x, int64_t k) {
    std::vector<int64_t> shape(x.sizes().end() - k, x.sizes().end());
    std::vector<Tensor> in{x};
    if (has_w) in.push_back(mk(shape, dt, 0.5, 2, Layout::Contiguous, 7));
    if (has_b) in.push_back(mk(shape, dt, -1, 1, Layout::Contiguous, 8));
    in.push_back(int_arg(k));
    return Sample{name + " over " + std::to_string(k) + " dims", in};
  };
  return {
      s("[5, 7]", mk({5, 7}, dt), 1),
      s("[2, 3, 4]", mk({2, 3, 4}, dt), 2),
      s("[2, 3, 4]", mk({2, 3, 4}, dt), 3),
      s("1-d [13]", mk({13}, dt), 1),
      s("[3, 100] (vector accumulators and tail)", mk({3, 100}, dt), 1),
      s("[4, 77]", mk({4, 77}, dt), 1),
      s("[2, 1030]", mk({2, 1030}, dt), 1),
      s("transposed [6, 9]", mk({6, 9}, dt, -3, 3, Layout::Transposed), 1),
      s("strided [2, 3, 5]", mk({2, 3, 5}, dt, -3, 3, Layout::Strided), 1),
      s("offset mean 100 [4, 64]", mk({4, 64}, dt, 99, 101), 1),
      s("single element rows [4, 1]", mk({4, 1}, dt), 1),
      s("constant rows [3, 16]", full({3, 16}, 2.5, dt), 1),
      s("no rows [0, 8]", mk({0, 8}, dt), 1),
      s("empty rows [3, 0]", mk({3, 0}, dt), 1),
      s("threaded [300, 257]", mk({300, 257}, dt, -3, 3, Layout::Contiguous, 3), 1),
  };
}

std::optional<Tensor> opt_at(const std::vector<Tensor>& in, bool present, size_t i) {
  return present ? std::optional<Tensor>(in[i]) : std::nullopt;
}
IntList trailing(const Tensor& x, int64_t k) {
  return IntList(x.sizes().data() + x.dim() - k, static_cast<size_t>(k));
}

std::vector<ErrorCase> layer_norm_errors() {
  return {
      expect_error<ShapeError>("trailing dims differ",
                               "normalized_shape [5] expects an input of shape [*, 5], got [2, 3]",
                               [] { layer_norm(ones({2, 3}), {5}); }),
      expect_error<ShapeError>("too many normalised dims", "expects an input of shape",
                               [] { layer_norm(ones({3}), {2, 3}); }),
      expect_error<ValueError>("empty normalized_shape", "at least one dim",
                               [] { layer_norm(ones({2, 3}), {}); }),
      expect_error<ShapeError>("weight shape", "weight of shape [4] does not match",
                               [] { layer_norm(ones({2, 3}), {3}, ones({4})); }),
      expect_error<ShapeError>("bias shape", "bias of shape [1, 3] does not match",
                               [] { layer_norm(ones({2, 3}), {3}, ones({3}), ones({1, 3})); }),
      expect_error<DTypeError>("weight dtype", "weight has dtype float64",
                               [] { layer_norm(ones({2, 3}), {3}, ones({3}, DType::Float64)); }),
      expect_error<DTypeError>("int input", "expected a floating input",
                               [] { layer_norm(ones({2, 3}, DType::Int64), {3}); }),
  };
}

KILN_OPINFO({
    .name = "layer_norm",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, true); },
    .fn = [](const std::vector<Tensor>& in) {
      const int64_t k = in[3].item<int64_t>();
      return std::vector<Tensor>{layer_norm(in[0], trailing(in[0], k), in[1], in[2])};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_norm(in, true, true, false, 1e-5).y};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_no_affine",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, false); },
    .fn = [](const std::vector<Tensor>& in) {
      const int64_t k = in[1].item<int64_t>();
      return std::vector<Tensor>{layer_norm(in[0], trailing(in[0], k))};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_norm(in, false, false, false, 1e-5).y};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_weight_only_eps",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, false); },
    .fn = [](const std::vector<Tensor>& in) {
      const int64_t k = in[2].item<int64_t>();
      return std::vector<Tensor>{layer_norm(in[0], trailing(in[0], k), in[1], std::nullopt, 0.5)};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_norm(in, true, false, false, 0.5).y};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_bias_only_stats",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, true); },
    .fn = [](const std::vector<Tensor>& in) {
      // The op's statistics outputs (mean, rstd) too, through dispatch.
      const int64_t k = in[2].item<int64_t>();
      std::array<Tensor, kMaxOpOutputs> outs;
      const OpDef* op = find_op("layer_norm");
      const Tensor inputs[] = {in[0], in[1]};
      const int n = dispatch(*op, inputs, {trailing(in[0], k).vec(), 1e-5, false, true}, outs);
      EXPECT_EQ(n, 3);
      return std::vector<Tensor>{outs[0], outs[1], outs[2]};
    },
    .ref = [](const std::vector<Ref>& in) {
      NormRef r = ref_norm(in, false, true, false, 1e-5);
      return std::vector<Ref>{r.y, r.mean, r.rstd};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

std::vector<ErrorCase> rms_norm_errors() {
  return {
      expect_error<ShapeError>("trailing dims differ", "rms_norm: normalized_shape [4]",
                               [] { rms_norm(ones({2, 3}), {4}); }),
      expect_error<ShapeError>("weight shape", "weight of shape [2] does not match",
                               [] { rms_norm(ones({2, 3}), {3}, ones({2})); }),
      expect_error<DTypeError>("int input", "expected a floating input",
                               [] { rms_norm(ones({2, 3}, DType::Int32), {3}); }),
      expect_error<ValueError>("empty normalized_shape", "at least one dim",
                               [] { rms_norm(ones({2}), {}); }),
  };
}

KILN_OPINFO({
    .name = "rms_norm",
    .covers = {"rms_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, false); },
    .fn = [](const std::vector<Tensor>& in) {
      const int64_t k = in[2].item<int64_t>();
      return std::vector<Tensor>{rms_norm(in[0], trailing(in[0], k), in[1])};
    },
    .ref = [](const std::vector<Ref>& in) {
      // Default eps: the machine epsilon of the dtype.
      const double eps = in[0].dtype == DType::Float32 ? 1.1920928955078125e-07 : 2.220446049250313e-16;
      return std::vector<Ref>{ref_norm(in, true, false, true, eps).y};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = rms_norm_errors(),
});

KILN_OPINFO({
    .name = "rms_norm_no_weight_eps",
    .covers = {"rms_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, false); },
    .fn = [](const std::vector<Tensor>& in) {
      const int64_t k = in[1].item<int64_t>();
      return std::vector<Tensor>{rms_norm(in[0], trailing(in[0], k), std::nullopt, 0.25)};
    },
    .ref = [](const std::vector<Ref>& in) {
      return std::vector<Ref>{ref_norm(in, false, false, true, 0.25).y};
    },
    .rtol32 = 1e-5, .atol32 = 2e-5,
    .errors = rms_norm_errors(),
});

}  // namespace
}  // namespace kiln::testing
