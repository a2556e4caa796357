// OpInfos for softmax/log_softmax and the neural-network ops (layer_norm, rms_norm, the losses,
// dropout, scaled_dot_product_attention), checked against float64 references written as plain
// loops. Integer arguments (dims, counts of normalised dims) travel in a sample as trailing 0-d
// int64 tensors, so that one OpInfo covers many of them.
#include <cmath>
#include <limits>

#include "ops/batch_norm.h"
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
      s("streamed output, rows of mixed alignment [2100, 1001]", mk({2100, 1001}, dt), 1),
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
                               [=] {
                                 f(ones({2, 3}, DType::Int64), 1);
                               }),
      expect_error<DTypeError>("bool input", "floating", [=] { f(ones({2}, DType::Bool), 0); }),
      expect_error<IndexError>("dim out of range", "dimension out of range",
                               [=] {
                                 f(ones({2, 3}), 2);
                               }),
      expect_error<IndexError>("negative dim out of range", "dimension out of range",
                               [=] {
                                 f(ones({2, 3}), -3);
                               }),
      expect_error<IndexError>("0-d dim 1", "dimension out of range", [=] { f(ones({}), 1); }),
  };
}

KILN_OPINFO({
    .name = "softmax",
    .covers = {"softmax"},
    .dtypes = kF,
    .samples = softmax_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{softmax(in[0], in[1].item<int64_t>())};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_softmax(in[0], int_of(in[1]), false)};
        },
    .rtol32 = 1e-5,
    .atol32 = 1e-6,
    .errors = softmax_errors("softmax", [](const Tensor& x, int64_t d) { return softmax(x, d); }),
    .second_order = true,
});

KILN_OPINFO({
    .name = "log_softmax",
    .covers = {"log_softmax"},
    .dtypes = kF,
    .samples = softmax_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{log_softmax(in[0], in[1].item<int64_t>())};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_softmax(in[0], int_of(in[1]), true)};
        },
    .rtol32 = 1e-5,
    .atol32 = 1e-5,
    .errors = softmax_errors("log_softmax",
                             [](const Tensor& x, int64_t d) { return log_softmax(x, d); }),
    .second_order = true,
});

KILN_OPINFO({
    .name = "softmax_methods",
    .covers = {"softmax", "log_softmax"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{{"[3, 4]", {mk({3, 4}, dt)}}};
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{in[0].softmax(0), in[0].log_softmax(-1)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_softmax(in[0], 0, false), ref_softmax(in[0], -1, true)};
        },
    .rtol32 = 1e-5,
    .atol32 = 1e-5,
    .errors = {expect_error<IndexError>("dim", "dimension out of range",
                                        [] { ones({2}).softmax(3); })},
    .second_order = true,
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
      s("streamed output, rows of mixed alignment [2100, 1001]", mk({2100, 1001}, dt), 1),
  };
}

IntList trailing(const Tensor& x, int64_t k) {
  return IntList(x.sizes().data() + x.dim() - k, static_cast<size_t>(k));
}

std::vector<ErrorCase> layer_norm_errors() {
  return {
      expect_error<ShapeError>("trailing dims differ",
                               "normalized_shape [5] expects an input of shape [*, 5], got [2, 3]",
                               [] {
                                 layer_norm(ones({2, 3}), {5});
                               }),
      expect_error<ShapeError>("too many normalised dims", "expects an input of shape",
                               [] {
                                 layer_norm(ones({3}), {2, 3});
                               }),
      expect_error<ValueError>("empty normalized_shape", "at least one dim",
                               [] {
                                 layer_norm(ones({2, 3}), {});
                               }),
      expect_error<ShapeError>("weight shape", "weight of shape [4] does not match",
                               [] {
                                 layer_norm(ones({2, 3}), {3}, ones({4}));
                               }),
      expect_error<ShapeError>("bias shape", "bias of shape [1, 3] does not match",
                               [] {
                                 layer_norm(ones({2, 3}), {3}, ones({3}), ones({1, 3}));
                               }),
      expect_error<DTypeError>("weight dtype", "weight has dtype float64",
                               [] {
                                 layer_norm(ones({2, 3}), {3}, ones({3}, DType::Float64));
                               }),
      expect_error<DTypeError>("int input", "expected a floating input",
                               [] {
                                 layer_norm(ones({2, 3}, DType::Int64), {3});
                               }),
  };
}

KILN_OPINFO({
    .name = "layer_norm",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, true); },
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t k = in[3].item<int64_t>();
          return std::vector<Tensor>{layer_norm(in[0], trailing(in[0], k), in[1], in[2])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_norm(in, true, true, false, 1e-5).y};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_no_affine",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t k = in[1].item<int64_t>();
          return std::vector<Tensor>{layer_norm(in[0], trailing(in[0], k))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_norm(in, false, false, false, 1e-5).y};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_weight_only_eps",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t k = in[2].item<int64_t>();
          return std::vector<Tensor>{
              layer_norm(in[0], trailing(in[0], k), in[1], std::nullopt, 0.5)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_norm(in, true, false, false, 0.5).y};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

KILN_OPINFO({
    .name = "layer_norm_bias_only_stats",
    .covers = {"layer_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, true); },
    .fn =
        [](const std::vector<Tensor>& in) {
          // The op's statistics outputs (mean, rstd) too, through dispatch.
          const int64_t k = in[2].item<int64_t>();
          std::array<Tensor, kMaxOpOutputs> outs;
          const OpDef* op = find_op("layer_norm");
          const Tensor inputs[] = {in[0], in[1]};
          const int n = dispatch(*op, inputs, {trailing(in[0], k).vec(), 1e-5, false, true}, outs);
          EXPECT_EQ(n, 3);
          return std::vector<Tensor>{outs[0], outs[1], outs[2]};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          NormRef r = ref_norm(in, false, true, false, 1e-5);
          return std::vector<Ref>{r.y, r.mean, r.rstd};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = layer_norm_errors(),
});

std::vector<ErrorCase> rms_norm_errors() {
  return {
      expect_error<ShapeError>("trailing dims differ", "rms_norm: normalized_shape [4]",
                               [] {
                                 rms_norm(ones({2, 3}), {4});
                               }),
      expect_error<ShapeError>("weight shape", "weight of shape [2] does not match",
                               [] {
                                 rms_norm(ones({2, 3}), {3}, ones({2}));
                               }),
      expect_error<DTypeError>("int input", "expected a floating input",
                               [] {
                                 rms_norm(ones({2, 3}, DType::Int32), {3});
                               }),
      expect_error<ValueError>("empty normalized_shape", "at least one dim",
                               [] { rms_norm(ones({2}), {}); }),
  };
}

KILN_OPINFO({
    .name = "rms_norm",
    .covers = {"rms_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, true, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t k = in[2].item<int64_t>();
          return std::vector<Tensor>{rms_norm(in[0], trailing(in[0], k), in[1])};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          // Default eps: the machine epsilon of the dtype.
          const double eps =
              in[0].dtype == DType::Float32 ? 1.1920928955078125e-07 : 2.220446049250313e-16;
          return std::vector<Ref>{ref_norm(in, true, false, true, eps).y};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = rms_norm_errors(),
});

KILN_OPINFO({
    .name = "rms_norm_no_weight_eps",
    .covers = {"rms_norm"},
    .dtypes = kF,
    .samples = [](DType dt) { return norm_samples(dt, false, false); },
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t k = in[1].item<int64_t>();
          return std::vector<Tensor>{rms_norm(in[0], trailing(in[0], k), std::nullopt, 0.25)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_norm(in, false, false, true, 0.25).y};
        },
    .rtol32 = 1e-5,
    .atol32 = 2e-5,
    .errors = rms_norm_errors(),
});

// ---- losses ----
// Element of `r` for an index `idx` of a shape whose trailing dims r's dims align with
// (size-1 dims of r broadcast).
double at_aligned(const Ref& r, const std::vector<int64_t>& idx) {
  std::vector<int64_t> ri(static_cast<size_t>(r.dim()));
  const int64_t off = static_cast<int64_t>(idx.size()) - r.dim();
  for (int64_t d = 0; d < r.dim(); ++d) ri[d] = r.sizes[d] == 1 ? 0 : idx[off + d];
  return r.at(ri);
}

Ref reduce_ref(const Ref& loss, const std::vector<bool>& kept, const std::string& reduction) {
  if (reduction == "none") return loss;
  double total = 0, count = 0;
  for (size_t i = 0; i < loss.v.size(); ++i) {
    total += loss.v[i];
    count += kept[i] ? 1 : 0;
  }
  return Ref{{}, {reduction == "sum" ? total : total / count}, loss.dtype};
}

// cross_entropy (log_softmax = true) or nll_loss on class-index targets.
Ref ref_class_loss(const Ref& scores, const Ref& target, bool log_softmax, int64_t ignore_index,
                   double smoothing, const std::string& reduction) {
  const int64_t class_dim = scores.dim() == 1 ? 0 : 1, C = scores.sizes[class_dim];
  Ref loss = Ref::zeros(target.sizes, scores.dtype);
  std::vector<bool> kept(static_cast<size_t>(loss.numel()));
  for (int64_t p = 0; p < loss.numel(); ++p) {
    const std::vector<int64_t> tidx = target.unravel(p);
    auto score = [&](int64_t c) {
      std::vector<int64_t> idx = tidx;
      idx.insert(idx.begin() + class_dim, c);
      return scores.at(idx);
    };
    double lse = 0;
    if (log_softmax) {
      double mx = -kInf;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, score(c));
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp(score(c) - mx);
      lse = mx + std::log(sum);
    }
    const int64_t t = static_cast<int64_t>(target.v[p]);
    kept[p] = t != ignore_index;
    if (!kept[p]) continue;
    double uniform = 0;
    for (int64_t c = 0; c < C; ++c) uniform -= score(c) - lse;
    loss.v[p] = (1 - smoothing) * -(score(t) - lse) + smoothing / C * uniform;
  }
  return reduce_ref(loss, kept, reduction);
}

Tensor targets(std::vector<int64_t> values, std::vector<int64_t> sizes) {
  return tensor<int64_t>(values, sizes);
}
// Deterministic targets in [0, classes) for `count` rows, every 7th one ignored (-100).
Tensor many_targets(int64_t count, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < count; ++i) v.push_back(i % 7 == 3 ? -100 : (i * 37 + 11) % classes);
  return targets(v, {count});
}

std::vector<Sample> class_loss_samples(DType dt) {
  return {
      {"[4, 5], one ignored", {mk({4, 5}, dt), targets({0, 4, -100, 2}, {4})}},
      {"[C] with a 0-d target", {mk({6}, dt), targets({3}, {})}},
      {"[N, C, d] [3, 4, 2]", {mk({3, 4, 2}, dt), targets({0, 3, -100, 1, 2, 2}, {3, 2})}},
      {"transposed [5, 3]",
       {mk({5, 3}, dt, -3, 3, Layout::Transposed), targets({2, 0, 1, 1, 2}, {5})}},
      {"class 1 targets [4, 3]", {mk({4, 3}, dt), targets({1, 1, 0, 2}, {4})}},
      {"all ignored [2, 3]", {mk({2, 3}, dt), targets({-100, -100}, {2})}},
      {"large logits [8, 10]", {mk({8, 10}, dt, -50, 50), targets({0, 1, 2, 3, 4, 5, 6, 9}, {8})}},
      {"no rows [0, 4]", {mk({0, 4}, dt), targets({}, {0})}},
      {"threaded [300, 257]", {mk({300, 257}, dt), many_targets(300, 257)}},
  };
}

std::vector<ErrorCase> class_loss_errors(
    const std::string& op,
    std::function<Tensor(const Tensor&, const Tensor&, const std::string&)> f) {
  return {
      expect_error<DTypeError>("float target", op + ": expected int64 class indices",
                               [=] {
                                 f(ones({2, 3}), ones({2}), "mean");
                               }),
      expect_error<DTypeError>("int32 target", "int64 class indices",
                               [=] {
                                 f(ones({2, 3}), ones({2}, DType::Int32), "mean");
                               }),
      expect_error<DTypeError>("int scores", "expected floating scores",
                               [=] {
                                 f(ones({2, 3}, DType::Int64), targets({0, 1}, {2}), "mean");
                               }),
      expect_error<ShapeError>("target length",
                               "target of shape [3] does not match scores of shape [2, 3]",
                               [=] {
                                 f(ones({2, 3}), targets({0, 1, 2}, {3}), "mean");
                               }),
      expect_error<ShapeError>("[C] scores need a 0-d target", "a 0-d target",
                               [=] { f(ones({3}), targets({0}, {1}), "mean"); }),
      expect_error<ShapeError>("0-d scores", "0-d tensor",
                               [=] { f(ones({}), targets({0}, {}), "mean"); }),
      expect_error<ValueError>("bad reduction", "reduction must be",
                               [=] {
                                 f(ones({2, 3}), targets({0, 1}, {2}), "avg");
                               }),
      expect_error<IndexError>("class index too large",
                               op + ": a target class index is out of range",
                               [=] {
                                 f(ones({2, 3}), targets({0, 3}, {2}), "mean");
                               }),
      expect_error<IndexError>("negative class index", "out of range",
                               [=] {
                                 f(ones({2, 3}), targets({-1, 0}, {2}), "sum");
                               }),
  };
}

struct ClassLossVariant {
  std::string name;
  bool log_softmax;
  std::string reduction;
  double smoothing;
  int64_t ignore_index;
};

void register_class_loss(const ClassLossVariant& v) {
  auto call = [v](const Tensor& s, const Tensor& t, const std::string& reduction) {
    return v.log_softmax ? cross_entropy(s, t, v.ignore_index, v.smoothing, reduction)
                         : nll_loss(s, t, v.ignore_index, reduction);
  };
  const std::string op = v.log_softmax ? "cross_entropy" : "nll_loss";
  auto errors = class_loss_errors(op, call);
  if (v.log_softmax)
    errors.push_back(expect_error<ValueError>(
        "label_smoothing above 1", "label_smoothing must be in [0, 1]", [] {
          cross_entropy(ones({2, 3}), targets({0, 1}, {2}), -100, 1.5);
        }));
  opinfos().push_back(OpInfo{
      .name = v.name,
      .covers = v.log_softmax ? std::vector<std::string>{"log_softmax", "gather", "sum"}
                              : std::vector<std::string>{"gather", "sum"},
      .dtypes = kF,
      .samples =
          [v](DType dt) {
            // The samples mark ignored targets with -100: use this variant's ignore_index.
            std::vector<Sample> samples = class_loss_samples(dt);
            for (Sample& sample : samples)
              sample.inputs[1] =
                  masked_fill(sample.inputs[1], sample.inputs[1] == Scalar(-100), v.ignore_index);
            return samples;
          },
      .fn =
          [call, v](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{call(in[0], in[1], v.reduction)};
          },
      .ref =
          [v](const std::vector<Ref>& in) {
            return std::vector<Ref>{ref_class_loss(in[0], in[1], v.log_softmax, v.ignore_index,
                                                   v.smoothing, v.reduction)};
          },
      .rtol32 = 1e-5,
      .atol32 = 1e-5,
      .errors = errors,
  });
}

[[maybe_unused]] const bool kClassLossesRegistered = [] {
  for (const ClassLossVariant& v : std::vector<ClassLossVariant>{
           {"cross_entropy_mean", true, "mean", 0.0, -100},
           {"cross_entropy_sum", true, "sum", 0.0, -100},
           {"cross_entropy_none", true, "none", 0.0, -100},
           {"cross_entropy_smoothing_mean", true, "mean", 0.2, -100},
           {"cross_entropy_smoothing_sum", true, "sum", 0.1, -100},
           {"cross_entropy_smoothing_none", true, "none", 0.3, -100},
           {"cross_entropy_ignore_index_1", true, "mean", 0.0, 1},
           {"nll_loss_mean", false, "mean", 0.0, -100},
           {"nll_loss_sum", false, "sum", 0.0, -100},
           {"nll_loss_none", false, "none", 0.0, -100},
           {"nll_loss_ignore_index_2", false, "mean", 0.0, 2},
       })
    register_class_loss(v);
  return true;
}();

Ref ref_mse(const Ref& a, const Ref& b, const std::string& reduction) {
  const DType dt =
      a.dtype == DType::Float64 || b.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Ref sq =
      zip({a, b}, dt, [](const std::vector<double>& x) { return (x[0] - x[1]) * (x[0] - x[1]); });
  return reduce_ref(sq, std::vector<bool>(static_cast<size_t>(sq.numel()), true), reduction);
}

[[maybe_unused]] const bool kMseRegistered = [] {
  for (std::string reduction : {"mean", "sum", "none"}) {
    opinfos().push_back(OpInfo{
        .name = "mse_loss_" + reduction,
        .covers = {"sub", "mul", "sum", "mean"},
        .dtypes = kF,
        .samples =
            [](DType dt) {
              return std::vector<Sample>{
                  {"[4, 5]", {mk({4, 5}, dt), mk({4, 5}, dt, -3, 3, Layout::Contiguous, 1)}},
                  {"broadcast [3, 1] x [1, 4]", {mk({3, 1}, dt), mk({1, 4}, dt)}},
                  {"0-d", {mk({}, dt), mk({}, dt, -3, 3, Layout::Contiguous, 1)}},
                  {"transposed [6, 9]",
                   {mk({6, 9}, dt, -3, 3, Layout::Transposed), mk({6, 9}, dt)}},
                  {"empty [0, 3]", {mk({0, 3}, dt), mk({0, 3}, dt)}},
                  {"threaded [300, 257]",
                   {mk({300, 257}, dt), mk({300, 257}, dt, -3, 3, Layout::Contiguous, 2)}},
              };
            },
        .fn =
            [reduction](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{mse_loss(in[0], in[1], reduction)};
            },
        .ref =
            [reduction](const std::vector<Ref>& in) {
              return std::vector<Ref>{ref_mse(in[0], in[1], reduction)};
            },
        .rtol32 = 1e-5,
        .atol32 = 1e-5,
        .errors =
            {
                expect_error<ShapeError>("shapes do not broadcast", "mse_loss: shapes [2, 3], [4]",
                                         [reduction] {
                                           mse_loss(ones({2, 3}), ones({4}), reduction);
                                         }),
                expect_error<DTypeError>(
                    "int input", "expected floating tensors",
                    [reduction] { mse_loss(ones({2}, DType::Int64), ones({2}), reduction); }),
                expect_error<ValueError>("bad reduction", "reduction must be",
                                         [] { mse_loss(ones({2}), ones({2}), "max"); }),
            },
    });
  }
  return true;
}();

// ---- batch_norm, group_norm ----
// x [N, C, *], then a weight and a bias per channel.
std::vector<Tensor> with_channel_affine(std::vector<int64_t> sizes, DType dt, uint32_t seed) {
  const int64_t c = sizes[1];
  return {mk(sizes, dt, -3, 3, Layout::Contiguous, seed),
          mk({c}, dt, 0.5, 2, Layout::Contiguous, seed + 1),
          mk({c}, dt, -1, 1, Layout::Contiguous, seed + 2)};
}

// Normalises each group of x's elements (group_of(flat index)) by its mean and biased variance,
// then applies weight and bias per channel (dim 1). Returns y and each group's (mean, var).
struct ChannelGroupRef {
  Ref y;
  std::vector<double> mean, var;
  std::vector<int64_t> count;
};
ChannelGroupRef ref_normalise_groups(const Ref& x, int64_t groups,
                                     const std::function<int64_t(int64_t)>& group_of,
                                     const Ref* weight, const Ref* bias, double eps) {
  ChannelGroupRef out{x, std::vector<double>(static_cast<size_t>(groups), 0),
                      std::vector<double>(static_cast<size_t>(groups), 0),
                      std::vector<int64_t>(static_cast<size_t>(groups), 0)};
  const int64_t channels = x.sizes[1];
  int64_t inner = 1;
  for (size_t d = 2; d < x.sizes.size(); ++d) inner *= x.sizes[d];
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto g = static_cast<size_t>(group_of(i));
    out.mean[g] += x.v[static_cast<size_t>(i)];
    ++out.count[g];
  }
  for (size_t g = 0; g < out.mean.size(); ++g) out.mean[g] /= static_cast<double>(out.count[g]);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto g = static_cast<size_t>(group_of(i));
    const double d = x.v[static_cast<size_t>(i)] - out.mean[g];
    out.var[g] += d * d;
  }
  for (size_t g = 0; g < out.var.size(); ++g) out.var[g] /= static_cast<double>(out.count[g]);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto g = static_cast<size_t>(group_of(i));
    const auto c = static_cast<size_t>(i / inner % channels);
    double y = (x.v[static_cast<size_t>(i)] - out.mean[g]) / std::sqrt(out.var[g] + eps);
    if (weight) y *= weight->v[c];
    if (bias) y += bias->v[c];
    out.y.v[static_cast<size_t>(i)] = y;
  }
  return out;
}

int64_t inner_of(const std::vector<int64_t>& sizes) {
  int64_t inner = 1;
  for (size_t d = 2; d < sizes.size(); ++d) inner *= sizes[d];
  return inner;
}

std::vector<Sample> batch_norm_samples(DType dt) {
  auto with = [&](std::vector<int64_t> sizes, Layout layout, uint32_t seed) {
    const int64_t c = sizes[1];
    return std::vector<Tensor>{mk(sizes, dt, -3, 3, layout, seed),
                               mk({c}, dt, 0.5, 2, Layout::Contiguous, seed + 1),
                               mk({c}, dt, -1, 1, Layout::Contiguous, seed + 2)};
  };
  return {
      {"[6, 3] (1d)", with({6, 3}, Layout::Contiguous, 1)},
      {"[4, 3, 5]", with({4, 3, 5}, Layout::Contiguous, 3)},
      {"[2, 3, 4, 4] (2d)", with({2, 3, 4, 4}, Layout::Contiguous, 5)},
      {"threaded [64, 8, 33]", with({64, 8, 33}, Layout::Contiguous, 7)},
  };
}

KILN_OPINFO({
    .name = "batch_norm_training",
    .covers = {"batch_norm_training", "batch_norm_backward", "mul", "add"},
    .dtypes = kF,
    .samples = batch_norm_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          const int64_t c = in[0].size(1);
          Tensor rm = zeros({c}, in[0].dtype()), rv = ones({c}, in[0].dtype());
          Tensor y = batch_norm(in[0], rm, rv, in[1], in[2], /*training=*/true, 0.1, 1e-5);
          return std::vector<Tensor>{y, rm, rv};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const int64_t c = x.sizes[1], inner = inner_of(x.sizes);
          ChannelGroupRef r = ref_normalise_groups(
              x, c, [&](int64_t i) { return i / inner % c; }, &in[1], &in[2], 1e-5);
          Ref rm{{c}, {}, x.dtype}, rv{{c}, {}, x.dtype};
          for (size_t k = 0; k < static_cast<size_t>(c); ++k) {
            const double n = static_cast<double>(r.count[k]);
            rm.v.push_back(0.1 * r.mean[k]);
            rv.v.push_back(0.9 + 0.1 * r.var[k] * n / (n - 1));
          }
          return std::vector<Ref>{r.y, rm, rv};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        {
            expect_error<ValueError>(
                "one value per channel", "more than 1 value per channel",
                [] {
                  batch_norm(ones({1, 3}), zeros({3}), ones({3}), {}, {}, true);
                }),
            expect_error<ShapeError>("weight of another width",
                                     "batch_norm: weight must have shape [3]",
                                     [] {
                                       batch_norm(ones({2, 3}), {}, {}, ones({4}), {}, true);
                                     }),
            expect_error<ValueError>("eval without running stats", "needed when not training",
                                     [] {
                                       batch_norm(ones({2, 3}), {}, {});
                                     }),
            expect_error<DTypeError>(
                "weight of another dtype", "weight has dtype float32",
                [] {
                  batch_norm(ones({2, 3}, DType::Float64), {}, {}, ones({3}), {}, true);
                }),
        },
    .differentiable = true,
    .second_order = true,
});

// The training op itself, every output: the statistics' own gradients (which a second
// derivative sends back) are checked against finite differences here. Samples without weight
// and bias too.
std::vector<Sample> batch_norm_training_op_samples(DType dt) {
  std::vector<Sample> out = batch_norm_samples(dt);
  out.push_back({"[5, 2, 3] no affine", {mk({5, 2, 3}, dt, -3, 3, Layout::Contiguous, 21)}});
  out.push_back({"threaded [1024, 40] (1d)", with_channel_affine({1024, 40}, dt, 26)});
  out.push_back(
      {"[3, 4, 2, 3] transposed",
       {mk({3, 4, 2, 3}, dt, -3, 3, Layout::Transposed, 23),
        mk({4}, dt, 0.5, 2, Layout::Contiguous, 24), mk({4}, dt, -1, 1, Layout::Contiguous, 25)}});
  return out;
}
KILN_OPINFO({
    .name = "batch_norm_training_op",
    .covers = {"batch_norm_training", "batch_norm_backward"},
    .dtypes = kF,
    .samples = batch_norm_training_op_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          const bool affine = in.size() == 3;
          const ops::BatchNormTraining r =
              ops::batch_norm_training(in[0], affine ? std::optional<Tensor>(in[1]) : std::nullopt,
                                       affine ? std::optional<Tensor>(in[2]) : std::nullopt, 1e-5);
          return std::vector<Tensor>{r.y, r.mean, r.invstd, r.var};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const bool affine = in.size() == 3;
          const int64_t c = x.sizes[1], inner = inner_of(x.sizes);
          ChannelGroupRef r = ref_normalise_groups(
              x, c, [&](int64_t i) { return i / inner % c; }, affine ? &in[1] : nullptr,
              affine ? &in[2] : nullptr, 1e-5);
          Ref mean{{c}, r.mean, x.dtype}, var{{c}, r.var, x.dtype}, invstd{{c}, {}, x.dtype};
          for (double v : r.var) invstd.v.push_back(1 / std::sqrt(v + 1e-5));
          return std::vector<Ref>{r.y, mean, invstd, var};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors =
        {
            expect_error<ValueError>("one value per channel", "more than 1 value per channel",
                                     [] {
                                       ops::batch_norm_training(ones({1, 3}), {}, {}, 1e-5);
                                     }),
            expect_error<ShapeError>("a 1-d input", "at least 2 dims",
                                     [] { ops::batch_norm_training(ones({4}), {}, {}, 1e-5); }),
            expect_error<DTypeError>(
                "an integer input", "expected a floating input",
                [] {
                  ops::batch_norm_training(ones({2, 3}, DType::Int64), {}, {}, 1e-5);
                }),
        },
    .differentiable = true,
    .second_order = true,
});

// The backward op as a function of its own (independent) inputs [grad, x, mean, invstd,
// weight?]: its values against the formula, its derivative (batch_norm's second) against
// finite differences.
KILN_OPINFO({
    .name = "batch_norm_backward",
    .covers = {"batch_norm_backward"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          auto with = [&](std::vector<int64_t> sizes, bool weight, uint32_t seed) {
            const int64_t c = sizes[1];
            std::vector<Tensor> in{mk(sizes, dt, -2, 2, Layout::Contiguous, seed),
                                   mk(sizes, dt, -3, 3, Layout::Contiguous, seed + 1),
                                   mk({c}, dt, -1, 1, Layout::Contiguous, seed + 2),
                                   mk({c}, dt, 0.5, 2, Layout::Contiguous, seed + 3)};
            if (weight) in.push_back(mk({c}, dt, 0.5, 2, Layout::Contiguous, seed + 4));
            return in;
          };
          return std::vector<Sample>{
              {"[6, 3] (1d)", with({6, 3}, true, 31)},
              {"[2, 3, 4, 4]", with({2, 3, 4, 4}, true, 36)},
              {"[4, 2, 5] no weight", with({4, 2, 5}, false, 41)},
              {"threaded [32, 8, 300]", with({32, 8, 300}, true, 46)},
          };
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          std::vector<Tensor> args(in.begin(), in.end());
          std::array<Tensor, kMaxOpOutputs> outs;
          dispatch(*find_op("batch_norm_backward"), args, {in.size() == 5}, outs);
          return std::vector<Tensor>{outs[0], outs[1], outs[2]};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref &dy = in[0], &x = in[1], &mean = in[2], &invstd = in[3];
          const int64_t c = x.sizes[1], inner = inner_of(x.sizes);
          std::vector<double> s1(static_cast<size_t>(c)), s2(static_cast<size_t>(c));
          auto ch = [&](int64_t i) { return static_cast<size_t>(i / inner % c); };
          for (int64_t i = 0; i < x.numel(); ++i) {
            const auto k = ch(i), at = static_cast<size_t>(i);
            s1[k] += dy.v[at];
            s2[k] += dy.v[at] * (x.v[at] - mean.v[k]);
          }
          const double m = static_cast<double>(x.numel() / c);
          Ref gx = x, gw{{c}, {}, x.dtype}, gb{{c}, s1, x.dtype};
          for (int64_t i = 0; i < x.numel(); ++i) {
            const auto k = ch(i), at = static_cast<size_t>(i);
            const double s = invstd.v[k], w = in.size() == 5 ? in[4].v[k] : 1.0;
            gx.v[at] = (dy.v[at] - s1[k] / m - (x.v[at] - mean.v[k]) * s * s * s2[k] / m) * s * w;
          }
          for (size_t k = 0; k < static_cast<size_t>(c); ++k) gw.v.push_back(s2[k] * invstd.v[k]);
          return std::vector<Ref>{gx, gw, gb};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ShapeError>(
        "a gradient of another shape", "must have the input's shape",
        [] {
          std::array<Tensor, kMaxOpOutputs> outs;
          const Tensor in[] = {ones({2, 3}), ones({3, 3}), zeros({3}), ones({3})};
          dispatch(*find_op("batch_norm_backward"), in, {false}, outs);
        })},
    .differentiable = true,
    .second_order = true,
});

KILN_OPINFO({
    .name = "batch_norm_eval",
    .covers = {"rsqrt", "mul", "sub", "neg", "addcmul"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          std::vector<Sample> out;
          for (Sample s : batch_norm_samples(dt)) {
            const int64_t c = s.inputs[0].size(1);
            s.inputs.push_back(mk({c}, dt, -1, 1, Layout::Contiguous, 11));   // running mean
            s.inputs.push_back(mk({c}, dt, 0.5, 2, Layout::Contiguous, 12));  // running var
            out.push_back(std::move(s));
          }
          return out;
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{
              batch_norm(in[0], in[3], in[4], in[1], in[2], false, 0.1, 1e-5)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const int64_t c = x.sizes[1], inner = inner_of(x.sizes);
          Ref y = x;
          for (int64_t i = 0; i < x.numel(); ++i) {
            const auto k = static_cast<size_t>(i / inner % c);
            y.v[static_cast<size_t>(i)] = (x.v[static_cast<size_t>(i)] - in[3].v[k]) /
                                              std::sqrt(in[4].v[k] + 1e-5) * in[1].v[k] +
                                          in[2].v[k];
          }
          return std::vector<Ref>{y};
        },
    .errors = {expect_error<ValueError>(
        "running stats without each other", "must be given together",
        [] {
          batch_norm(ones({2, 3}), zeros({3}), std::nullopt, {}, {}, true);
        })},
});

KILN_OPINFO({
    .name = "group_norm",
    .covers = {"mean", "var", "sub", "rsqrt", "mul", "add"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{{"[4, 6, 5]", with_channel_affine({4, 6, 5}, dt, 1)},
                                     {"[2, 6, 3, 3]", with_channel_affine({2, 6, 3, 3}, dt, 3)},
                                     {"[3, 6]", with_channel_affine({3, 6}, dt, 5)}};
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{group_norm(in[0], 3, in[1], in[2], 1e-5)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const int64_t c = x.sizes[1], inner = inner_of(x.sizes), per_group = c / 3;
          ChannelGroupRef r = ref_normalise_groups(
              x, x.sizes[0] * 3,
              [&](int64_t i) { return (i / (inner * c)) * 3 + (i / inner % c) / per_group; },
              &in[1], &in[2], 1e-5);
          return std::vector<Ref>{r.y};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ValueError>("groups not dividing channels",
                                        "num_groups (4) must be positive and divide",
                                        [] {
                                          group_norm(ones({2, 6}), 4);
                                        })},
});

KILN_OPINFO({
    .name = "instance_norm",
    .covers = {"mean", "var", "sub", "rsqrt", "mul", "add"},
    .dtypes = kF,
    .samples =
        [](DType dt) {
          return std::vector<Sample>{{"[2, 3, 5]", with_channel_affine({2, 3, 5}, dt, 7)},
                                     {"[2, 2, 3, 4]", with_channel_affine({2, 2, 3, 4}, dt, 9)}};
        },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{instance_norm(in[0], in[1], in[2], 1e-5)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          const Ref& x = in[0];
          const int64_t inner = inner_of(x.sizes);
          ChannelGroupRef r = ref_normalise_groups(
              x, x.sizes[0] * x.sizes[1], [&](int64_t i) { return i / inner; }, &in[1], &in[2],
              1e-5);
          return std::vector<Ref>{r.y};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-4,
    .errors = {expect_error<ShapeError>("rank", "expected an input [N, C, *] of at least 3 dims",
                                        [] {
                                          instance_norm(ones({2, 6}));
                                        })},
    .differentiable = true,
});

// ---- elementwise losses: l1, smooth_l1, huber, binary cross-entropy, kl_div ----
struct ElementwiseLoss {
  std::string name;
  std::vector<std::string> covers;
  // The loss of inputs (input, target[, extra]) with a reduction.
  std::function<Tensor(const std::vector<Tensor>&, const std::string&)> fn;
  std::function<double(const std::vector<double>&)> ref;  // one element's loss
  double lo_x = -3, hi_x = 3, lo_t = -3, hi_t = 3;
  std::vector<std::string> reductions = {"mean", "sum", "none"};
  bool pos_weight = false;  // a third input: one weight per column (the last dim)
  std::vector<ErrorCase> errors;
};

std::vector<Sample> loss_samples(const ElementwiseLoss& l, DType dt) {
  auto pair = [&](std::vector<int64_t> sizes, Layout layout, uint32_t seed) {
    std::vector<Tensor> in{mk(sizes, dt, l.lo_x, l.hi_x, layout, seed),
                           mk(sizes, dt, l.lo_t, l.hi_t, Layout::Contiguous, seed + 1)};
    if (l.pos_weight) {
      const int64_t cols = sizes.empty() ? 1 : sizes.back();
      in.push_back(mk(sizes.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{cols}, dt, 0.2,
                      3, Layout::Contiguous, seed + 2));
    }
    return in;
  };
  return {
      {"[4, 5]", pair({4, 5}, Layout::Contiguous, 1)},
      {"0-d", pair({}, Layout::Contiguous, 3)},
      {"empty [0, 3]", pair({0, 3}, Layout::Contiguous, 5)},
      {"transposed [6, 9]", pair({6, 9}, Layout::Transposed, 7)},
      {"threaded [300, 257]", pair({300, 257}, Layout::Contiguous, 9)},
  };
}

void register_loss(const ElementwiseLoss& l) {
  for (const std::string& reduction : l.reductions) {
    opinfos().push_back(OpInfo{
        .name = l.name + "_" + reduction,
        .covers = l.covers,
        .dtypes = kF,
        .samples = [l](DType dt) { return loss_samples(l, dt); },
        .fn =
            [l, reduction](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{l.fn(in, reduction)};
            },
        .ref =
            [l, reduction](const std::vector<Ref>& in) {
              const DType dt = in[0].dtype;
              Ref loss = zip(in, dt, l.ref);
              if (reduction != "batchmean")
                return std::vector<Ref>{
                    reduce_ref(loss, std::vector<bool>(loss.v.size(), true), reduction)};
              Ref total = reduce_ref(loss, std::vector<bool>(loss.v.size(), true), "sum");
              total.v[0] /= loss.sizes.empty() ? 1.0 : static_cast<double>(loss.sizes[0]);
              return std::vector<Ref>{total};
            },
        .rtol32 = 1e-4,
        .atol32 = 1e-5,
        .errors = l.errors,
    });
  }
}

[[maybe_unused]] const bool kElementwiseLossesRegistered = [] {
  register_loss({
      .name = "l1_loss",
      .covers = {"sub", "abs", "sum", "mean"},
      .fn = [](const auto& in, const auto& r) { return l1_loss(in[0], in[1], r); },
      .ref = [](const std::vector<double>& v) { return std::abs(v[0] - v[1]); },
      .errors = {expect_error<ValueError>("bad reduction", "l1_loss: reduction must be",
                                          [] { l1_loss(ones({2}), ones({2}), "max"); }),
                 expect_error<DTypeError>("int input", "expected floating tensors",
                                          [] { l1_loss(ones({2}, DType::Int64), ones({2})); })},
  });
  register_loss({
      .name = "smooth_l1_loss",
      .covers = {"sub", "abs", "lt", "where", "mul", "sum", "mean"},
      .fn = [](const auto& in, const auto& r) { return smooth_l1_loss(in[0], in[1], r, 0.5); },
      .ref =
          [](const std::vector<double>& v) {
            const double d = std::abs(v[0] - v[1]);
            return d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
          },
      .errors = {expect_error<ValueError>(
          "negative beta", "beta must be finite and >= 0",
          [] { smooth_l1_loss(ones({2}), ones({2}), "mean", -1); })},
  });
  register_loss({
      .name = "huber_loss",
      .covers = {"sub", "abs", "lt", "where", "mul", "sum", "mean"},
      .fn = [](const auto& in, const auto& r) { return huber_loss(in[0], in[1], r, 0.7); },
      .ref =
          [](const std::vector<double>& v) {
            const double d = std::abs(v[0] - v[1]);
            return d < 0.7 ? 0.5 * d * d : 0.7 * (d - 0.35);
          },
      .errors = {expect_error<ValueError>("zero delta", "delta must be finite and > 0",
                                          [] { huber_loss(ones({2}), ones({2}), "mean", 0); })},
  });
  register_loss({
      .name = "binary_cross_entropy",
      .covers = {"log", "clamp", "rsub", "mul", "add", "neg", "sum", "mean"},
      .fn = [](const auto& in, const auto& r) { return binary_cross_entropy(in[0], in[1], r); },
      .ref =
          [](const std::vector<double>& v) {
            return -(v[1] * std::log(v[0]) + (1 - v[1]) * std::log(1 - v[0]));
          },
      .lo_x = 0.05,
      .hi_x = 0.95,
      .lo_t = 0,
      .hi_t = 1,
      .errors = {expect_error<ShapeError>("target of another shape",
                                          "binary_cross_entropy: target of shape [3] must have the "
                                          "input's shape [2, 3]",
                                          [] {
                                            binary_cross_entropy(full({2, 3}, 0.5), full({3}, 0.5));
                                          })},
  });
  register_loss({
      .name = "binary_cross_entropy_with_logits",
      .covers = {"relu", "neg", "abs", "exp", "log1p", "mul", "add", "sum", "mean"},
      .fn = [](const auto& in,
               const auto& r) { return binary_cross_entropy_with_logits(in[0], in[1], r); },
      .ref =
          [](const std::vector<double>& v) {
            return (1 - v[1]) * v[0] + std::max(-v[0], 0.0) + std::log1p(std::exp(-std::abs(v[0])));
          },
      .lo_t = 0,
      .hi_t = 1,
      .errors = {expect_error<ShapeError>(
          "target of another shape",
          "binary_cross_entropy_with_logits: target of shape [2, 3] must have the input's shape "
          "[3]",
          [] {
            binary_cross_entropy_with_logits(ones({3}), ones({2, 3}));
          })},
  });
  register_loss({
      .name = "binary_cross_entropy_with_logits_pos_weight",
      .covers = {"relu", "neg", "abs", "exp", "log1p", "mul", "add", "sum", "mean"},
      .fn =
          [](const auto& in, const auto& r) {
            return binary_cross_entropy_with_logits(in[0], in[1], std::nullopt, in[2], r);
          },
      .ref =
          [](const std::vector<double>& v) {
            const double log_weight = (v[2] - 1) * v[1] + 1;
            return (1 - v[1]) * v[0] +
                   log_weight * (std::max(-v[0], 0.0) + std::log1p(std::exp(-std::abs(v[0]))));
          },
      .lo_t = 0,
      .hi_t = 1,
      .pos_weight = true,
      .errors = {expect_error<DTypeError>("int pos_weight", "expected a floating pos_weight",
                                          [] {
                                            binary_cross_entropy_with_logits(
                                                ones({3}), ones({3}), std::nullopt,
                                                ones({3}, DType::Int64));
                                          }),
                 expect_error<ShapeError>("pos_weight of another width",
                                          "binary_cross_entropy_with_logits: shapes [2, 3], [4]",
                                          [] {
                                            binary_cross_entropy_with_logits(
                                                ones({2, 3}), ones({2, 3}), std::nullopt,
                                                ones({4}));
                                          })},
  });
  register_loss({
      .name = "kl_div",
      .covers = {"gt", "log", "where", "mul", "sub", "sum", "mean", "div"},
      .fn = [](const auto& in, const auto& r) { return kl_div(in[0], in[1], r); },
      .ref =
          [](const std::vector<double>& v) {
            return v[1] > 0 ? v[1] * (std::log(v[1]) - v[0]) : -v[1] * v[0];
          },
      .lo_x = -3,
      .hi_x = 0,
      .lo_t = 0.01,
      .hi_t = 1,
      .reductions = {"mean", "sum", "none", "batchmean"},
      .errors = {expect_error<ValueError>("bad reduction", "kl_div: reduction must be",
                                          [] { kl_div(ones({2}), ones({2}), "max"); })},
  });
  register_loss({
      .name = "kl_div_log_target",
      .covers = {"exp", "mul", "sub", "sum", "mean"},
      .fn = [](const auto& in, const auto& r) { return kl_div(in[0], in[1], r, true); },
      .ref = [](const std::vector<double>& v) { return std::exp(v[1]) * (v[1] - v[0]); },
      .lo_x = -3,
      .hi_x = 0,
      .lo_t = -3,
      .hi_t = 0,
      .errors = {expect_error<DTypeError>("int target", "kl_div: expected floating tensors",
                                          [] { kl_div(ones({2}), ones({2}, DType::Int64)); })},
  });
  return true;
}();

// ---- dropout ----
std::vector<Sample> dropout_samples(DType dt) {
  return {
      {"[4, 5]", {mk({4, 5}, dt)}},
      {"0-d", {mk({}, dt)}},
      {"empty [0, 3]", {mk({0, 3}, dt)}},
      {"transposed [6, 9]", {mk({6, 9}, dt, -3, 3, Layout::Transposed)}},
      {"threaded [300, 257]", {mk({300, 257}, dt)}},
  };
}
std::vector<ErrorCase> dropout_errors() {
  return {
      expect_error<ValueError>("p above 1", "dropout: probability must be in [0, 1], got 1.5",
                               [] { dropout(ones({3}), 1.5); }),
      expect_error<ValueError>("negative p", "probability must be in [0, 1]",
                               [] { dropout(ones({3}), -0.1); }),
      expect_error<DTypeError>("int input while training", "floating",
                               [] { dropout(ones({3}, DType::Int64), 0.5); }),
  };
}

KILN_OPINFO({
    .name = "dropout_kept_values_scaled",
    .covers = {"bernoulli", "mul"},
    .dtypes = kF,
    .samples = dropout_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          // Every element is either dropped (0) or kept and scaled by 1 / (1 - p).
          Generator gen(1234);
          const Tensor& x = in[0];
          Tensor y = dropout(x, 0.3, true, &gen);
          Tensor scaled_back = y * 0.7;
          Tensor ok = logical_or(y == Scalar(0), abs(scaled_back - x) <= abs(x) * 1e-5);
          return std::vector<Tensor>{ok, Tensor(scalar_tensor(y.sizes() == x.sizes()))};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          Ref all_true = map(in[0], DType::Bool, [](double) { return 1.0; });
          return std::vector<Ref>{all_true, Ref{{}, {1.0}, DType::Bool}};
        },
    .errors = dropout_errors(),
});

KILN_OPINFO({
    .name = "dropout_identity",
    .covers = {},
    .dtypes = kF,
    .samples = dropout_samples,
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{dropout(in[0], 0.5, false), dropout(in[0], 0.0, true)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{in[0], in[0]};
        },
    .errors = dropout_errors(),
});

KILN_OPINFO({
    .name = "dropout_p1_zeros",
    .covers = {},
    .dtypes = kF,
    .samples = dropout_samples,
    .fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{dropout(in[0], 1.0)}; },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{map(in[0], in[0].dtype, [](double) { return 0.0; })};
        },
    .errors = dropout_errors(),
});

TEST(Dropout, DropsAboutPAndIsReproducible) {
  Tensor x = ones({200000});
  Generator g1(7), g2(7);
  Tensor a = dropout(x, 0.25, true, &g1), b = dropout(x, 0.25, true, &g2);
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  EXPECT_EQ(va, vb);
  int64_t zeros_count = 0;
  double total = 0;
  for (float v : va) {
    zeros_count += v == 0.0f;
    total += v;
  }
  EXPECT_NEAR(static_cast<double>(zeros_count) / va.size(), 0.25, 0.01);
  EXPECT_NEAR(total / va.size(), 1.0, 0.02);  // the scaling keeps the mean
  Tensor c = dropout(x, 0.25, true, &g1);     // the generator advanced: a new mask
  EXPECT_NE(c.to_vector<float>(), va);
}

// ---- scaled_dot_product_attention ----
// Inputs q, k, v [, mask]; batch dims of q, k, v broadcast.
Ref ref_sdpa(const std::vector<Ref>& in, bool causal, std::optional<double> scale_opt,
             bool zero_weights = false) {
  const Ref &q = in[0], &k = in[1], &v = in[2];
  const Ref* mask = in.size() > 3 ? &in[3] : nullptr;
  const int64_t L = q.sizes[q.dim() - 2], E = q.sizes.back(), S = k.sizes[k.dim() - 2];
  const int64_t Ev = v.sizes.back();
  const double scale = scale_opt.value_or(1.0 / std::sqrt(static_cast<double>(E)));
  Ref qb{std::vector<int64_t>(q.sizes.begin(), q.sizes.end() - 2), {}},
      kb{std::vector<int64_t>(k.sizes.begin(), k.sizes.end() - 2), {}},
      vb{std::vector<int64_t>(v.sizes.begin(), v.sizes.end() - 2), {}};
  std::vector<int64_t> out_sizes = broadcast({&qb, &kb, &vb});
  const size_t nb = out_sizes.size();
  out_sizes.push_back(L);
  out_sizes.push_back(Ev);
  Ref out = Ref::zeros(out_sizes, q.dtype);
  std::vector<double> w(static_cast<size_t>(S));
  for (int64_t o = 0; o < out.numel(); o += Ev) {
    std::vector<int64_t> idx = out.unravel(o);
    const int64_t i = idx[nb];
    auto with = [&](int64_t a, int64_t b) {
      std::vector<int64_t> r(idx.begin(), idx.begin() + static_cast<int64_t>(nb));
      r.push_back(a);
      r.push_back(b);
      return r;
    };
    double mx = -kInf;
    for (int64_t j = 0; j < S; ++j) {
      double s = 0;
      for (int64_t e = 0; e < E; ++e) s += at_aligned(q, with(i, e)) * at_aligned(k, with(j, e));
      s *= scale;
      if (causal && j > i) s = -kInf;
      if (mask && mask->dtype == DType::Bool && at_aligned(*mask, with(i, j)) == 0) s = -kInf;
      if (mask && mask->dtype != DType::Bool) s += at_aligned(*mask, with(i, j));
      w[j] = s;
      mx = std::max(mx, s);
    }
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) sum += std::exp(w[j] - mx);
    for (int64_t j = 0; j < S; ++j) w[j] = zero_weights ? 0.0 : std::exp(w[j] - mx) / sum;
    for (int64_t c = 0; c < Ev; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < S; ++j) acc += w[j] * at_aligned(v, with(j, c));
      out.v[o + c] = acc;
    }
  }
  return out;
}

std::vector<Sample> sdpa_samples(DType dt, int mask_kind /* 0 none, 1 bool, 2 float */) {
  auto s = [&](std::string name, std::vector<int64_t> qs, std::vector<int64_t> ks,
               std::vector<int64_t> vs, std::vector<int64_t> ms, bool k_transposed = false) {
    std::vector<Tensor> in{
        mk(qs, dt, -2, 2, Layout::Contiguous, 1),
        mk(ks, dt, -2, 2, k_transposed ? Layout::Transposed : Layout::Contiguous, 2),
        mk(vs, dt, -2, 2, Layout::Contiguous, 3)};
    if (mask_kind == 1)
      in.push_back(make_tensor_for_test(ms, DType::Bool, 0, 1, Layout::Contiguous, 4));
    if (mask_kind == 2) in.push_back(mk(ms, dt, -2, 2, Layout::Contiguous, 4));
    return Sample{name, in};
  };
  return {
      s("[2, 3, 5, 4] x [2, 3, 6, 4], value dim 7", {2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 7},
        {5, 6}),
      s("2-d [5, 4] x [6, 4]", {5, 4}, {6, 4}, {6, 3}, {5, 6}),
      s("broadcast batch", {2, 3, 5, 4}, {3, 6, 4}, {1, 6, 4}, {1, 6}),
      s("query longer than key [7, 4] x [3, 4]", {7, 4}, {3, 4}, {3, 2}, {7, 3}),
      s("single query [1, 8] x [5, 8]", {1, 8}, {5, 8}, {5, 8}, {1, 5}),
      s("transposed key [2, 6, 4] x [2, 6, 4]", {2, 6, 4}, {2, 6, 4}, {2, 6, 4}, {2, 6, 6}, true),
      s("larger [2, 4, 33, 16]", {2, 4, 33, 16}, {2, 4, 33, 16}, {2, 4, 33, 16}, {33, 33}),
      // Whole 16 x 16 blocks for the fused kernel's transposes, and two query blocks.
      s("blocks [1, 2, 40, 32] x [1, 2, 36, 32]", {1, 2, 40, 32}, {1, 2, 36, 32}, {1, 2, 36, 16},
        {40, 36}),
  };
}

std::vector<ErrorCase> sdpa_errors() {
  using O = std::optional<Tensor>;
  return {
      expect_error<ShapeError>(
          "1-d query", "need at least 2 dims",
          [] {
            scaled_dot_product_attention(ones({4}), ones({3, 4}), ones({3, 4}));
          }),
      expect_error<ShapeError>(
          "embedding dims differ", "differ in the embedding dim (4 != 5)",
          [] {
            scaled_dot_product_attention(ones({2, 4}), ones({3, 5}), ones({3, 4}));
          }),
      expect_error<ShapeError>(
          "key/value lengths differ", "differ in the sequence dim (3 != 2)",
          [] {
            scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({2, 4}));
          }),
      expect_error<DTypeError>(
          "dtypes differ", "share one floating dtype",
          [] {
            scaled_dot_product_attention(ones({2, 4}), ones({3, 4}, DType::Float64), ones({3, 4}));
          }),
      expect_error<DTypeError>("int inputs", "share one floating dtype",
                               [] {
                                 scaled_dot_product_attention(ones({2, 4}, DType::Int64),
                                                              ones({3, 4}, DType::Int64),
                                                              ones({3, 4}, DType::Int64));
                               }),
      expect_error<ValueError>("mask and is_causal", "not both",
                               [] {
                                 scaled_dot_product_attention(ones({2, 4}), ones({3, 4}),
                                                              ones({3, 4}), O(ones({2, 3})), 0.0,
                                                              true);
                               }),
      expect_error<DTypeError>("int mask", "attn_mask must be bool",
                               [] {
                                 scaled_dot_product_attention(ones({2, 4}), ones({3, 4}),
                                                              ones({3, 4}),
                                                              O(ones({2, 3}, DType::Int64)));
                               }),
      expect_error<ShapeError>(
          "mask shape", "attn_mask of shape [3, 3] cannot be broadcast",
          [] {
            scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({3, 4}), O(ones({3, 3})));
          }),
      expect_error<ValueError>(
          "dropout_p above 1", "dropout_p must be in [0, 1]",
          [] {
            scaled_dot_product_attention(ones({2, 4}), ones({3, 4}), ones({3, 4}), O(), 2.0);
          }),
  };
}

// Without a mask or dropout (and with equal batch dims) the fused kernel runs; samples with
// broadcast batch dims take the composite.
KILN_OPINFO({
    .name = "scaled_dot_product_attention",
    .covers = {"fused_attention", "fused_attention_backward", "matmul", "softmax"},
    .dtypes = kF,
    .samples = [](DType dt) { return sdpa_samples(dt, 0); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2])};
        },
    .ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_sdpa(in, false, {})}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-5,
    .errors = sdpa_errors(),
});

KILN_OPINFO({
    .name = "scaled_dot_product_attention_causal_scaled",
    .covers = {"fused_attention", "fused_attention_backward", "matmul", "softmax", "masked_fill"},
    .dtypes = kF,
    .samples = [](DType dt) { return sdpa_samples(dt, 0); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{
              scaled_dot_product_attention(in[0], in[1], in[2], std::nullopt, 0.0, true),
              scaled_dot_product_attention(in[0], in[1], in[2], std::nullopt, 0.0, true, 0.3)};
        },
    .ref =
        [](const std::vector<Ref>& in) {
          return std::vector<Ref>{ref_sdpa(in, true, {}), ref_sdpa(in, true, 0.3)};
        },
    .rtol32 = 1e-4,
    .atol32 = 1e-5,
    .errors = sdpa_errors(),
});

KILN_OPINFO({
    .name = "scaled_dot_product_attention_bool_mask",
    .covers = {"matmul", "softmax", "where"},
    .dtypes = kF,
    .samples = [](DType dt) { return sdpa_samples(dt, 1); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], in[3])};
        },
    .ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_sdpa(in, false, {})}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-5,
    .errors = sdpa_errors(),
});

KILN_OPINFO({
    .name = "scaled_dot_product_attention_float_mask",
    .covers = {"matmul", "softmax", "add"},
    .dtypes = kF,
    .samples = [](DType dt) { return sdpa_samples(dt, 2); },
    .fn =
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2], in[3])};
        },
    .ref = [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_sdpa(in, false, {})}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-5,
    .errors = sdpa_errors(),
});

KILN_OPINFO({
    .name = "scaled_dot_product_attention_dropout_all",
    .covers = {"matmul", "softmax"},
    .dtypes = kF,
    .samples = [](DType dt) { return sdpa_samples(dt, 0); },
    .fn =
        [](const std::vector<Tensor>& in) {
          // dropout_p = 1 drops every attention weight.
          return std::vector<Tensor>{
              scaled_dot_product_attention(in[0], in[1], in[2], std::nullopt, 1.0)};
        },
    .ref =
        [](const std::vector<Ref>& in) { return std::vector<Ref>{ref_sdpa(in, false, {}, true)}; },
    .rtol32 = 1e-4,
    .atol32 = 1e-5,
    .errors = sdpa_errors(),
});

// The fused kernel against the composite (an all-true or lower-triangular bool mask takes the
// composite path) at a transformer's shapes: q, k, v as strided views of one projection, the
// gradient reaching it through both.
TEST(ScaledDotProductAttention, FusedKernelMatchesTheComposite) {
  for (bool causal : {false, true}) {
    const int64_t B = 3, T = 70, H = 2, D = 32;
    Tensor qkv =
        make_tensor_for_test({B, T, 3 * H * D}, DType::Float32, -2, 2, Layout::Contiguous, 7)
            .requires_grad_(true);
    Tensor h = qkv.view({B, T, 3, H, D});
    Tensor q = h.select(2, 0).transpose(1, 2), k = h.select(2, 1).transpose(1, 2),
           v = h.select(2, 2).transpose(1, 2);
    Tensor fused = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, causal);
    // The fused op's output, sequence-major [B, T, H, D], seen back as [B, H, T, D]: taking
    // the heads back out of the sequence (as the model does next) is a view, no copy.
    ASSERT_EQ(fused.grad_fn()->name(), "PermuteBackward");
    ASSERT_EQ(fused.grad_fn()->next_edges().at(0).fn->name(), "FusedAttentionBackward");
    EXPECT_TRUE(fused.transpose(1, 2).is_contiguous());
    Tensor mask = causal ? tril(ones({T, T}, DType::Bool)) : ones({T, T}, DType::Bool);
    Tensor composite = scaled_dot_product_attention(q, k, v, mask);
    Tensor w =
        make_tensor_for_test(fused.sizes().vec(), DType::Float32, -1, 1, Layout::Contiguous, 8);
    Tensor g_fused = grad({sum(fused * w)}, {qkv})[0];
    Tensor g_composite = grad({sum(composite * w)}, {qkv})[0];
    EXPECT_LT(max(abs(fused - composite)).item<float>(), 1e-5f) << "causal " << causal;
    EXPECT_LT(max(abs(g_fused - g_composite)).item<float>(), 1e-4f) << "causal " << causal;
  }
}

// As PyTorch's fused kernels, the fused backward has no derivative of its own: a double
// backward through it says so, naming it.
TEST(ScaledDotProductAttention, DoubleBackwardThroughTheFusedKernelThrows) {
  Tensor q = make_tensor_for_test({2, 5, 4}, DType::Float64, -1, 1, Layout::Contiguous, 1)
                 .requires_grad_(true);
  Tensor k = make_tensor_for_test({2, 6, 4}, DType::Float64, -1, 1, Layout::Contiguous, 2);
  Tensor v = make_tensor_for_test({2, 6, 3}, DType::Float64, -1, 1, Layout::Contiguous, 3);
  Tensor y = scaled_dot_product_attention(q, k, v);
  Tensor gq = grad({sum(y * y)}, {q}, {}, {}, /*create_graph=*/true)[0];
  try {
    grad({sum(gq)}, {q});
    FAIL() << "expected a NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("fused_attention_backward"), std::string::npos)
        << e.what();
  }
}

// The fused kernel's causal mask compares positions as floats: it refuses 2^24 positions or
// more (expanded operands: the check needs no data) rather than mask them wrongly.
TEST(ScaledDotProductAttention, FusedKernelRefusesPositionsItCannotMask) {
  const int64_t n = int64_t{1} << 24;
  const Tensor q = zeros({1, 4}).expand({n, 4});
  const Tensor inputs[] = {q, q, q};
  try {
    dispatch1(*find_op("fused_attention"), inputs, Attrs{0.5, true, false});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("2^24 positions"), std::string::npos) << e.what();
  }
}

TEST(ScaledDotProductAttention, DropoutKeepsRowsUnbiased) {
  // With dropout_p = 0.5 on a uniform attention (all scores equal) and value rows of ones,
  // each output is (kept count) * 2 / S; across many rows the mean stays 1.
  Generator gen(3);
  const int64_t L = 2000, S = 64;
  Tensor q = zeros({L, 8}), k = zeros({S, 8}), v = ones({S, 1});
  Tensor out = scaled_dot_product_attention(q, k, v, std::nullopt, 0.5, false, {}, &gen);
  std::vector<float> o = out.to_vector<float>();
  double mean = 0;
  for (float x : o) mean += x;
  EXPECT_NEAR(mean / L, 1.0, 0.02);
}

}  // namespace
}  // namespace kiln::testing
