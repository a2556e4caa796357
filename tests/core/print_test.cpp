// Printing: exact strings in PyTorch's format (torch/_tensor_str.py), with Kiln's dtype names in
// place of "torch.<dtype>" in the dtype suffix.
#include <gtest/gtest.h>

#include <limits>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f32(std::vector<float> v) { return tensor(v); }
Tensor f64(std::vector<double> v) { return tensor(v); }

TEST(Print, FloatFixedPadsToTheWidestValue) {
  EXPECT_EQ(to_string(f32({1.0f, 2.5f, -3.25f})), "tensor([ 1.0000,  2.5000, -3.2500])");
  EXPECT_EQ(to_string(f32({0.125f, 0.5f})), "tensor([0.1250, 0.5000])");
  // 4 decimals, rounded.
  EXPECT_EQ(to_string(f64({3.14159265, -0.00015})),
            "tensor([ 3.1416e+00, -1.5000e-04], dtype=float64)");
  EXPECT_EQ(to_string(f64({3.14159265, 0.25})), "tensor([3.1416, 0.2500], dtype=float64)");
}

TEST(Print, IntegerValuedFloatsPrintWithATrailingPoint) {
  EXPECT_EQ(to_string(f32({1, 2, 30})), "tensor([ 1.,  2., 30.])");
  EXPECT_EQ(to_string(f32({0, 100})), "tensor([  0., 100.])");
  EXPECT_EQ(to_string(f32({0, -0.0f})), "tensor([0., -0.])");
  EXPECT_EQ(to_string(zeros({3})), "tensor([0., 0., 0.])");
  EXPECT_EQ(to_string(ones({2, 2}, DType::Float64)),
            "tensor([[1., 1.],\n        [1., 1.]], dtype=float64)");
}

TEST(Print, ScientificNotation) {
  // A non-zero value below 1e-4.
  EXPECT_EQ(to_string(f32({1e-5f, 1.0f})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(to_string(f32({-1e-5f, 2.0f})), "tensor([-1.0000e-05,  2.0000e+00])");
  // Values above 1e8, even integer-valued ones.
  EXPECT_EQ(to_string(f32({1e10f, 1.0f})), "tensor([1.0000e+10, 1.0000e+00])");
  // A ratio above 1000 between the largest and smallest non-zero magnitudes, in int mode too.
  EXPECT_EQ(to_string(f32({1.0f, 10000.0f})), "tensor([1.0000e+00, 1.0000e+04])");
  EXPECT_EQ(to_string(f32({0.5f, 1000.5f})), "tensor([5.0000e-01, 1.0005e+03])");
  // Zeros do not count towards the choice.
  EXPECT_EQ(to_string(f32({0.0f, 1e-5f})), "tensor([0.0000e+00, 1.0000e-05])");
  EXPECT_EQ(to_string(full({}, 1e-5)), "tensor(1.0000e-05)");
  EXPECT_EQ(to_string(f64({1e-100, 1.0})), "tensor([1.0000e-100,  1.0000e+00], dtype=float64)");
}

TEST(Print, NanAndInfinity) {
  // Non-finite values do not set the width (PyTorch measures the finite non-zero ones).
  EXPECT_EQ(to_string(f32({static_cast<float>(kNaN), 1.0f})), "tensor([nan, 1.])");
  EXPECT_EQ(to_string(f32({-static_cast<float>(kInf), 1.0f})), "tensor([-inf, 1.])");
  EXPECT_EQ(to_string(f32({-static_cast<float>(kInf), 1.0f, 2.5f})),
            "tensor([  -inf, 1.0000, 2.5000])");
  EXPECT_EQ(to_string(f32({static_cast<float>(kNaN)})), "tensor([nan])");
  EXPECT_EQ(to_string(f64({kNaN, kInf, -kInf})), "tensor([nan, inf, -inf], dtype=float64)");
  EXPECT_EQ(to_string(f32({-static_cast<float>(kNaN), 0.0f})), "tensor([nan, 0.])");
  EXPECT_EQ(to_string(full({}, kNaN)), "tensor(nan)");
  EXPECT_EQ(to_string(full({}, -kInf, DType::Float64)), "tensor(-inf, dtype=float64)");
}

TEST(Print, IntegersAndBools) {
  EXPECT_EQ(to_string(arange(5)), "tensor([0, 1, 2, 3, 4])");
  EXPECT_EQ(to_string(tensor({-1, 20, 3}, DType::Int32)), "tensor([-1, 20,  3], dtype=int32)");
  EXPECT_EQ(to_string(tensor(std::vector<bool>{true, false})), "tensor([ True, False])");
  EXPECT_EQ(to_string(tensor(std::vector<bool>{true, true})), "tensor([True, True])");
  // int64 values print exactly (not through double).
  EXPECT_EQ(to_string(tensor(std::vector<int64_t>{9007199254740993LL, -9223372036854775807LL - 1})),
            "tensor([    9007199254740993, -9223372036854775808])");
}

TEST(Print, ZeroDim) {
  EXPECT_EQ(to_string(full({}, 3.5)), "tensor(3.5000)");
  EXPECT_EQ(to_string(scalar_tensor(7)), "tensor(7)");
  EXPECT_EQ(to_string(scalar_tensor(2.0, DType::Float64)), "tensor(2., dtype=float64)");
  EXPECT_EQ(to_string(scalar_tensor(true)), "tensor(True)");
  EXPECT_EQ(to_string(scalar_tensor(-4, DType::Int32)), "tensor(-4, dtype=int32)");
}

TEST(Print, MultiDimensional) {
  EXPECT_EQ(to_string(arange(6).view({2, 3})), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
  EXPECT_EQ(to_string(arange(8).view({2, 2, 2})),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]])");
  // Non-contiguous tensors print in logical order.
  EXPECT_EQ(to_string(arange(6).view({2, 3}).t()),
            "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])");
  EXPECT_EQ(to_string(ones({1, 1, 1})), "tensor([[[1.]]])");
}

TEST(Print, Empty) {
  EXPECT_EQ(to_string(zeros({0})), "tensor([])");
  EXPECT_EQ(to_string(zeros({2, 0})), "tensor([], size=(2, 0))");
  // An empty tensor shows every dtype but the default, since no value reveals it.
  EXPECT_EQ(to_string(zeros({0}, DType::Int64)), "tensor([], dtype=int64)");
  EXPECT_EQ(to_string(zeros({3, 0, 2}, DType::Bool)), "tensor([], size=(3, 0, 2), dtype=bool)");
}

TEST(Print, RowsWrapAtTheLineWidth) {
  EXPECT_EQ(to_string(arange(30)),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
  std::vector<float> eighths;
  for (int i = 0; i < 12; ++i) eighths.push_back(0.125f * static_cast<float>(i));
  EXPECT_EQ(to_string(tensor(eighths)),
            "tensor([0.0000, 0.1250, 0.2500, 0.3750, 0.5000, 0.6250, 0.7500, 0.8750, 1.0000,\n"
            "        1.1250, 1.2500, 1.3750])");
  EXPECT_EQ(to_string(arange(0, 30, 1, DType::Float64)),
            "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
            "        28., 29.], dtype=float64)");
}

TEST(Print, SuffixMovesToItsOwnLineWhenTooLong) {
  EXPECT_EQ(to_string(arange(0, 17, 1, DType::Int32)),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16],\n"
            "       dtype=int32)");
}

TEST(Print, SummarisesLargeTensors) {
  EXPECT_EQ(to_string(arange(2000)), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(to_string(arange(1500).view({50, 30})),
            "tensor([[   0,    1,    2,  ...,   27,   28,   29],\n"
            "        [  30,   31,   32,  ...,   57,   58,   59],\n"
            "        [  60,   61,   62,  ...,   87,   88,   89],\n"
            "        ...,\n"
            "        [1410, 1411, 1412,  ..., 1437, 1438, 1439],\n"
            "        [1440, 1441, 1442,  ..., 1467, 1468, 1469],\n"
            "        [1470, 1471, 1472,  ..., 1497, 1498, 1499]])");
  // The formatter sees only the values shown: the elided 1e9 does not force scientific mode.
  Tensor t = zeros({2000});
  t.narrow(0, 1000, 1).fill_(1e9);
  t.narrow(0, 0, 1).fill_(0.5);
  EXPECT_EQ(to_string(t), "tensor([0.5000, 0.0000, 0.0000,  ..., 0.0000, 0.0000, 0.0000])");
}

TEST(Print, RequiresGradSuffix) {
  Tensor t = zeros({2});
  t.requires_grad_();
  EXPECT_EQ(to_string(t), "tensor([0., 0.], requires_grad=True)");
  Tensor d = zeros({2}, DType::Float64);
  d.requires_grad_();
  EXPECT_EQ(to_string(d), "tensor([0., 0.], dtype=float64, requires_grad=True)");
}

TEST(Print, OptionsAndStreams) {
  const PrintOptions saved = get_printoptions();
  PrintOptions p = saved;
  p.precision = 2;
  set_printoptions(p);
  EXPECT_EQ(to_string(f32({1.12345f})), "tensor([1.12])");
  p = saved;
  p.threshold = 5;
  set_printoptions(p);
  EXPECT_EQ(to_string(arange(10)), "tensor([0, 1, 2,  ..., 7, 8, 9])");
  set_printoptions(saved);
  EXPECT_EQ(to_string(arange(10)), "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])");
  PrintOptions bad = saved;
  bad.linewidth = 0;
  EXPECT_THROW(set_printoptions(bad), ValueError);

  std::ostringstream os;
  os << arange(3) << " " << Tensor();
  EXPECT_EQ(os.str(), "tensor([0, 1, 2]) tensor(undefined)");
}

}  // namespace
}  // namespace kiln
