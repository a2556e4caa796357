// Accuracy of the vectorised float32 math against double-precision std:: functions, in ULPs
// of the float32 result, over dense grids (including special values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(want)) return got == static_cast<float>(want) ? 0 : INFINITY;
  float w = static_cast<float>(want);
  double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  if (w == 0) ulp = std::numeric_limits<float>::denorm_min();
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

struct MathCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;
  double max_ulp;
};

class MathAccuracy : public ::testing::TestWithParam<MathCase> {};

TEST_P(MathAccuracy, Float32WithinUlpBound) {
  const MathCase& c = GetParam();
  const int64_t n = 200001;
  std::vector<float> xs;
  for (int64_t i = 0; i < n; ++i)
    xs.push_back(static_cast<float>(c.lo + (c.hi - c.lo) * i / (n - 1)));
  for (float special : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f}) {
    if (special >= c.lo && special <= c.hi) xs.push_back(special);
  }
  Tensor y = c.op(tensor(xs));
  std::vector<float> got = y.to_vector<float>();
  double worst = 0, at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double e = ulp_error(got[i], c.ref(static_cast<double>(xs[i])));
    if (e > worst) {
      worst = e;
      at = xs[i];
    }
  }
  EXPECT_LE(worst, c.max_ulp) << c.name << ": worst error " << worst << " ulp at x = " << at;
  // NaN in, NaN out; infinities map as the function does.
  Tensor special = c.op(tensor(std::vector<float>{NAN}));
  EXPECT_TRUE(std::isnan(special.item<float>())) << c.name << "(nan)";
}

// Far below the subnormals e^x is +0 (an attention mask's -inf and -1e30 scores), and the
// float just above where it becomes 0 still gives the smallest subnormal.
TEST(MathAccuracy, ExpOfVeryNegativeIsPositiveZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const float last_nonzero = std::nextafter(-103.972084f, 0.0f);
  std::vector<float> xs = {-inf,     -1e30f,       std::numeric_limits<float>::lowest(),
                           -1000.0f, -103.972084f, last_nonzero};
  for (int i = 0; i < 10; ++i) xs.push_back(i % 2 ? -inf : 1.0f);  // vector lanes mixed
  const std::vector<float> got = exp(tensor(xs)).to_vector<float>();
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got[i], 0.0f) << "exp(" << xs[i] << ")";
    EXPECT_FALSE(std::signbit(got[i])) << "exp(" << xs[i] << ")";
  }
  EXPECT_EQ(got[5], std::numeric_limits<float>::denorm_min());
  for (size_t i = 6; i < xs.size(); ++i)
    EXPECT_NEAR(got[i], xs[i] == 1.0f ? std::exp(1.0f) : 0.0f, 1e-6) << i;
}

// sigmoid is 0 where its result would be subnormal (x < -87.33: computing it costs a microcode
// assist per vector), 1 from where 1 + e^-x rounds to 1, and exact at the ends.
TEST(MathAccuracy, SigmoidEndsAndSubnormalRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> xs = {-inf,  -1e30f, -100.0f, -87.34f, -87.33f, 17.0f, 20.0f,
                                 1e30f, inf,    -0.0f,   0.0f,    1.0f,    -1.0f, -50.0f};
  const std::vector<float> got = sigmoid(tensor(xs)).to_vector<float>();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i], 0.0f) << "sigmoid(" << xs[i] << ")";
    EXPECT_FALSE(std::signbit(got[i])) << "sigmoid(" << xs[i] << ")";
  }
  EXPECT_GE(got[4], std::numeric_limits<float>::min()) << "sigmoid(-87.33) is normal";
  EXPECT_NEAR(got[4], 1.0 / (1.0 + std::exp(-static_cast<double>(xs[4]))), 3e-45);  // 2 ulp
  for (size_t i = 5; i < 9; ++i) EXPECT_EQ(got[i], 1.0f) << "sigmoid(" << xs[i] << ")";
  for (size_t i = 9; i < xs.size(); ++i)
    EXPECT_NEAR(got[i], 1.0 / (1.0 + std::exp(-static_cast<double>(xs[i]))),
                2e-7 * std::max(1e-20, 1.0 / (1.0 + std::exp(-static_cast<double>(xs[i])))))
        << "sigmoid(" << xs[i] << ")";
  // silu is x sigmoid(x): -0 below the normal range (x times +0), x where sigmoid is 1.
  const std::vector<float> silu_got = silu(tensor(xs)).to_vector<float>();
  EXPECT_EQ(silu_got[2], 0.0f);
  EXPECT_TRUE(std::signbit(silu_got[2]));
  EXPECT_EQ(silu_got[6], 20.0f);
}

INSTANTIATE_TEST_SUITE_P(
    Vectorised, MathAccuracy,
    ::testing::Values(MathCase{"exp", [](const Tensor& x) { return exp(x); },
                               [](double x) { return std::exp(x); }, -104, 89, 1.5},
                      // Through the subnormal results down to where exp takes every float to 0.
                      MathCase{"exp_underflow", [](const Tensor& x) { return exp(x); },
                               [](double x) { return std::exp(x); }, -110, -85, 1.5},
                      MathCase{"exp2", [](const Tensor& x) { return exp2(x); },
                               [](double x) { return std::exp2(x); }, -100, 100, 1.5},
                      MathCase{"expm1", [](const Tensor& x) { return expm1(x); },
                               [](double x) { return std::expm1(x); }, -20, 20, 1.5},
                      MathCase{"log", [](const Tensor& x) { return log(x); },
                               [](double x) { return std::log(x); }, 1e-6, 1e6, 1.5},
                      MathCase{"log2", [](const Tensor& x) { return log2(x); },
                               [](double x) { return std::log2(x); }, 1e-6, 1e6, 1.5},
                      MathCase{"log1p", [](const Tensor& x) { return log1p(x); },
                               [](double x) { return std::log1p(x); }, -0.999, 1e4, 1.5},
                      MathCase{"sqrt", [](const Tensor& x) { return sqrt(x); },
                               [](double x) { return std::sqrt(x); }, 0, 1e6, 0.5},
                      MathCase{"sin", [](const Tensor& x) { return sin(x); },
                               [](double x) { return std::sin(x); }, -100, 100, 1.5},
                      MathCase{"cos", [](const Tensor& x) { return cos(x); },
                               [](double x) { return std::cos(x); }, -100, 100, 1.5},
                      MathCase{"tan", [](const Tensor& x) { return tan(x); },
                               [](double x) { return std::tan(x); }, -1.5, 1.5, 1.5},
                      MathCase{"tanh", [](const Tensor& x) { return tanh(x); },
                               [](double x) { return std::tanh(x); }, -12, 12, 1.5},
                      MathCase{"erf", [](const Tensor& x) { return erf(x); },
                               [](double x) { return std::erf(x); }, -6, 6, 2.5},
                      MathCase{"sigmoid", [](const Tensor& x) { return sigmoid(x); },
                               [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -87.33, 30,
                               2.5},
                      MathCase{"silu", [](const Tensor& x) { return silu(x); },
                               [](double x) { return x / (1.0 + std::exp(-x)); }, -87.33, 30, 3.5},
                      MathCase{"tanh_near_0", [](const Tensor& x) { return tanh(x); },
                               [](double x) { return std::tanh(x); }, -1e-3, 1e-3, 1.5},
                      MathCase{"erf_near_0", [](const Tensor& x) { return erf(x); },
                               [](double x) { return std::erf(x); }, -1e-3, 1e-3, 2.5}),
    [](const ::testing::TestParamInfo<MathCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace kiln
