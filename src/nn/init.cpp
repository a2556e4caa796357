// torch.nn.init's functions (see kiln/nn/init.h).
#include "kiln/nn/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/autograd/autograd.h"
#include "kiln/core/random.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"

namespace kiln::nn::init {

namespace {
void check_defined(const Tensor& t, const char* who) {
  KILN_CHECK(t.defined(), ValueError, "nn::init::", who, ": the tensor is undefined");
  KILN_CHECK(is_floating(t.dtype()), DTypeError, "nn::init::", who,
             ": expected a floating tensor, got dtype ", t.dtype());
}
int64_t fan(const Tensor& t, const std::string& mode, const char* who) {
  const auto [in, out] = fan_in_and_fan_out(t);
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", ValueError, "nn::init::", who,
             ": mode must be \"fan_in\" or \"fan_out\", got \"", mode, "\"");
  const int64_t f = mode == "fan_in" ? in : out;
  KILN_CHECK(f > 0, ValueError, "nn::init::", who, ": cannot initialise a tensor with zero ", mode,
             " (shape ", t.shape_str(), ")");
  return f;
}
}  // namespace

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1 + slope * slope));
  }
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw ValueError(
      detail::concat("nn::init::calculate_gain: unsupported nonlinearity \"", nonlinearity, "\""));
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.defined() && t.dim() >= 2, ValueError,
             "nn::init: fan in and fan out need a tensor of at least 2 dims, got ",
             t.defined() ? t.shape_str() : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  check_defined(t, "uniform_");
  NoGradGuard no_grad;
  return kiln::uniform_(t, a, b, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check_defined(t, "normal_");
  NoGradGuard no_grad;
  return kiln::normal_(t, mean, std, gen);
}

namespace {
// The inverse of erf on (-1, 1): an approximation refined by Newton steps on std::erf.
double erfinv(double y) {
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    const double v = w - 2.5;
    x = y * (1.50140941 +
             v * (0.246640727 + v * (-0.00417768164 + v * (-0.00125372503 + v * 0.00021858087))));
  } else {
    const double v = std::sqrt(w) - 3.0;
    x = y * (2.83297682 +
             v * (1.00167406 + v * (0.00943887047 + v * (-0.0076224613 + v * 0.00573950773))));
  }
  for (int k = 0; k < 3; ++k) x -= (std::erf(x) - y) / (2.0 / std::sqrt(M_PI) * std::exp(-x * x));
  return x;
}
}  // namespace

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check_defined(t, "trunc_normal_");
  KILN_CHECK(std > 0 && std::isfinite(std) && std::isfinite(mean) && a < b, ValueError,
             "trunc_normal_: expected std > 0 and a < b, got mean ", mean, ", std ", std, ", [", a,
             ", ", b, "]");
  NoGradGuard no_grad;
  // u uniform between the bounds' CDF values, mapped back through the normal's inverse CDF.
  auto cdf = [&](double x) { return 0.5 * (1.0 + std::erf((x - mean) / (std * std::sqrt(2.0)))); };
  Tensor u = empty(t.sizes(), DType::Float64);
  kiln::uniform_(u, 2.0 * cdf(a) - 1.0, 2.0 * cdf(b) - 1.0, gen);
  std::vector<double> values = u.to_vector<double>();
  const double lo = std::nextafter(-1.0, 0.0), hi = std::nextafter(1.0, 0.0);
  for (double& v : values)
    v = std::clamp(mean + std * std::sqrt(2.0) * erfinv(std::clamp(v, lo, hi)), a, b);
  t.copy_(tensor(values, t.sizes()).to(t.dtype()));
  return t;
}

Tensor& constant_(Tensor& t, double value) {
  check_defined(t, "constant_");
  NoGradGuard no_grad;
  t.fill_(Scalar(value));
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& eye_(Tensor& t) {
  check_defined(t, "eye_");
  KILN_CHECK(t.dim() == 2, ValueError, "nn::init::eye_: expected a 2-D tensor, got shape ",
             t.shape_str());
  NoGradGuard no_grad;
  t.copy_(eye(t.size(0), t.size(1), t.dtype()));
  return t;
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check_defined(t, "xavier_uniform_");
  const auto [in, out] = fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  check_defined(t, "xavier_normal_");
  const auto [in, out] = fan_in_and_fan_out(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode,
                         const std::string& nonlinearity, Generator* gen) {
  check_defined(t, "kaiming_uniform_");
  const double std = calculate_gain(nonlinearity, a) /
                     std::sqrt(static_cast<double>(fan(t, mode, "kaiming_uniform_")));
  const double bound = std::sqrt(3.0) * std;
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode,
                        const std::string& nonlinearity, Generator* gen) {
  check_defined(t, "kaiming_normal_");
  const double std = calculate_gain(nonlinearity, a) /
                     std::sqrt(static_cast<double>(fan(t, mode, "kaiming_normal_")));
  return init::normal_(t, 0.0, std, gen);
}

Tensor& orthogonal_(Tensor& t, double gain, Generator* gen) {
  check_defined(t, "orthogonal_");
  KILN_CHECK(t.dim() >= 2, ValueError,
             "nn::init::orthogonal_: expected a tensor of at least 2 dims, got shape ",
             t.shape_str());
  const int64_t rows = t.size(0), cols = t.numel() / std::max<int64_t>(rows, 1);
  if (t.numel() == 0) return t;
  // Q of a tall matrix a (m >= n) by modified Gram-Schmidt, which gives R a positive diagonal:
  // PyTorch's q * sign(diag(r)). A wide tensor takes the transpose's Q, transposed back.
  const bool wide = rows < cols;
  const int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  std::vector<double> a = randn({m, n}, DType::Float64, gen).to_vector<double>();
  auto at = [&](int64_t i, int64_t j) -> double& { return a[static_cast<size_t>(i * n + j)]; };
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += at(i, k) * at(i, j);
      for (int64_t i = 0; i < m; ++i) at(i, j) -= dot * at(i, k);
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += at(i, j) * at(i, j);
    norm = std::sqrt(norm);
    KILN_CHECK(norm > 0, Error, "nn::init::orthogonal_: the random draw was rank-deficient");
    for (int64_t i = 0; i < m; ++i) at(i, j) /= norm;
  }
  Tensor q = tensor(a, {m, n});
  if (wide) q = q.transpose(0, 1);
  NoGradGuard no_grad;
  t.copy_((q * gain).reshape(t.sizes()).to(t.dtype()));
  return t;
}

}  // namespace kiln::nn::init
