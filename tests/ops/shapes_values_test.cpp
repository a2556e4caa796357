// Issue 15, "Shapes and values": size arithmetic never overflows silently, Scalars entering
// integer tensors are checked, errors name what the user called, and allclose/isclose/equal
// behave as PyTorch's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Runs `f`, which must throw E whose message contains every one of `needles`, and no '-' sign
// directly before a digit inside a shape (a wrapped-around size printed as negative).
template <typename E, typename F>
std::string expect_throw(F f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
    return what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
  return {};
}

// ---------------------------------------------------------------- size arithmetic

TEST(SizeOverflow, CheckedHelpers) {
  int64_t r;
  EXPECT_FALSE(mul_overflows(3, 4, &r));
  EXPECT_EQ(r, 12);
  EXPECT_TRUE(mul_overflows(int64_t{1} << 32, int64_t{1} << 32, &r));
  EXPECT_TRUE(add_overflows(kMax, 1, &r));
  EXPECT_EQ(checked_mul(6, 7, "op", "x"), 42);
  expect_throw<ValueError>([] { checked_mul(kMax, 2, "myop", "the stride"); },
                           {"myop: the stride overflows int64"});
  expect_throw<ValueError>([] { checked_add(kMax, 1, "myop", "the offset"); },
                           {"myop: the offset overflows int64"});
  EXPECT_EQ(checked_numel({0, kMax, kMax}, "op"), 0);  // a zero size wins, as PyTorch
  expect_throw<ValueError>(
      [] {
        checked_numel({int64_t{1} << 32, int64_t{1} << 32}, "zeros");
      },
      {"zeros", "overflows int64", "[4294967296, 4294967296]"});
}

TEST(SizeOverflow, SliceWithHugeStepClamps) {
  Tensor x = arange(0, 6, 1, DType::Float32).view({2, 3});
  Tensor s = x.slice(1, 0, std::nullopt, kMax);  // was [2, -1]
  EXPECT_EQ(s.sizes(), Shape({2, 1}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 3}));
  Tensor t = x.slice(1, 1, kMax, kMax - 1);
  EXPECT_EQ(t.sizes(), Shape({2, 1}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 4}));
  // Downstream ops see the right values (was zeros).
  EXPECT_EQ(cat({s, s}, 1).to_vector<float>(), (std::vector<float>{0, 0, 3, 3}));
  EXPECT_EQ(matmul(s.t(), s).item<float>(), 9.0f);
  // Start and end clamp as PyTorch's x[:, a:b]; step must be positive.
  EXPECT_EQ(x.slice(1, kMin, kMax).sizes(), Shape({2, 3}));
  EXPECT_EQ(x.slice(1, kMax, kMin).sizes(), Shape({2, 0}));
  EXPECT_EQ(x.slice(1, -2, std::nullopt, 2).to_vector<float>(), (std::vector<float>{1, 4}));
  expect_throw<ValueError>([&] { x.slice(1, 0, 3, 0); }, {"slice", "step must be positive"});
  expect_throw<ValueError>([&] { x.slice(1, 0, 3, -1); }, {"slice", "step must be positive"});
}

TEST(SizeOverflow, SliceWithHugeStepHasAGradient) {
  Tensor x = arange(0, 6, 1, DType::Float64).view({2, 3}).requires_grad_();
  x.slice(1, 1, std::nullopt, kMax).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 0, 1, 0}));
}

TEST(SizeOverflow, ExpandBeyondInt64IsAnError) {
  Tensor x = ones({1, 1});
  const int64_t big = int64_t{1} << 32;
  std::string what = expect_throw<ValueError>(
      [&] {
        x.expand({big, big});
      },
      {"expand", "overflows int64"});
  EXPECT_EQ(what.find("-"), std::string::npos) << what;  // never a negative size
  // At the int64 limit exactly it is fine (a view: nothing is allocated).
  Tensor e = ones({1}).expand({kMax});
  EXPECT_EQ(e.numel(), kMax);
  // Broadcasting two such views reports the op.
  Tensor a = ones({1, 1}).expand({big, 1}), b = ones({1, 1}).expand({1, big});
  expect_throw<ValueError>([&] { a + b; }, {"add", "overflows int64"});
}

TEST(SizeOverflow, NarrowOutOfRangeIsAnError) {
  Tensor x = ones({4, 3});
  expect_throw<IndexError>([&] { x.narrow(0, 1, kMax); }, {"narrow", "exceeds the size of dim 0"});
  expect_throw<IndexError>([&] { x.narrow(0, 5, 0); }, {"narrow", "out of range"});
  expect_throw<IndexError>([&] { x.narrow(0, 0, -1); }, {"narrow", "non-negative"});
  EXPECT_EQ(x.narrow(0, -2, 2).sizes(), Shape({2, 3}));
  EXPECT_EQ(x.narrow(0, 4, 0).sizes(), Shape({0, 3}));
}

TEST(SizeOverflow, FactoriesAndViewsCheckTheirSizes) {
  const int64_t big = int64_t{1} << 32;
  expect_throw<ValueError>([&] { zeros({big, big}); }, {"zeros", "overflows int64"});
  expect_throw<ValueError>([&] { empty({big, big}); }, {"empty", "overflows int64"});
  // Element count fits, bytes don't.
  expect_throw<ValueError>([&] { empty({int64_t{1} << 62}, DType::Float64); },
                           {"empty", "more bytes than int64 can count"});
  // A zero-size dim: no elements, but the contiguous strides themselves would overflow.
  expect_throw<ValueError>([&] { empty({0, big, big, big}); }, {"empty", "strides"});
  // view/reshape sizes whose product wraps around to the input's numel.
  Tensor x = ones({6});
  expect_throw<ShapeError>([&] { x.view({-1, big, big}); }, {"view", "overflows int64"});
  expect_throw<ShapeError>([&] { x.unflatten(0, {big, big, 6}); }, {"unflatten", "overflows"});
  expect_throw<IndexError>([&] { x.as_strided({2, 2}, {kMax, kMax}); }, {"as_strided"});
  // arange lengths near and beyond the int64 range.
  expect_throw<ValueError>([] { arange(kMin, kMax, 1); }, {"arange", "overflows int64"});
  expect_throw<ValueError>([] { arange(0.0, 1e30, 1.0); }, {"arange", "overflows int64"});
  // repeat and pad sizes (a wrapped product or sum could look valid).
  expect_throw<ValueError>(
      [&] {
        repeat(x.view({1, 6}), {kMax, 2});
      },
      {"repeat", "overflows int64"});
  expect_throw<ValueError>([&] { pad(x, {kMax, kMax}); }, {"pad", "overflows int64"});
  // cat of huge expanded views.
  Tensor h = ones({1}).expand({kMax});
  expect_throw<ValueError>([&] { cat({h, h}); }, {"cat", "overflows int64"});
}

// ---------------------------------------------------------------- scalar casts

TEST(ScalarCast, CheckScalarFits) {
  EXPECT_NO_THROW(check_scalar_fits(Scalar(kNaN), DType::Float32, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(kInf), DType::Float32, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(1e300), DType::Float64, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(2.5), DType::Int64, "op"));  // truncates, as PyTorch
  EXPECT_NO_THROW(check_scalar_fits(Scalar(-9.2e18), DType::Int64, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(kMin), DType::Int64, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(int64_t{2147483647}), DType::Int32, "op"));
  EXPECT_NO_THROW(check_scalar_fits(Scalar(kNaN), DType::Bool, "op"));
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(1e300), DType::Float32, "op"); },
                           {"op: value 1e+300 cannot be converted to type float32"});
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(kNaN), DType::Int64, "op"); },
                           {"cannot be converted to type int64 without overflow"});
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(kInf), DType::Int32, "op"); }, {"int32"});
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(9.3e18), DType::Int64, "op"); },
                           {"int64"});
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(0x1p63), DType::Int64, "op"); },
                           {"int64"});
  expect_throw<ValueError>(
      [] { check_scalar_fits(Scalar(int64_t{2147483648}), DType::Int32, "op"); }, {"int32"});
  expect_throw<ValueError>([] { check_scalar_fits(Scalar(3e9), DType::Int32, "op"); }, {"int32"});
}

TEST(ScalarCast, EveryEntryIntoAnIntegerTensorIsChecked) {
  expect_throw<ValueError>([] { full({2}, kNaN, DType::Int64); },
                           {"full: value nan cannot be converted to type int64 without overflow"});
  expect_throw<ValueError>([] { full({2}, 1e20, DType::Int64); }, {"full", "int64"});
  expect_throw<ValueError>([] { full({2}, int64_t{1} << 40, DType::Int32); }, {"full", "int32"});
  EXPECT_EQ(full({2}, 2.9, DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  Tensor i32 = zeros({3}, DType::Int32);
  expect_throw<ValueError>([&] { i32.fill_(kInf); }, {"fill_", "int32"});
  expect_throw<ValueError>([&] { i32.fill_(int64_t{1} << 33); }, {"fill_", "int32"});
  // Binary ops with a C++ number keep the tensor's integer dtype: the number must fit it.
  expect_throw<ValueError>([&] { i32 + (int64_t{1} << 40); }, {"add", "int32"});
  expect_throw<ValueError>([&] { i32*(int64_t{1} << 40); }, {"mul", "int32"});
  expect_throw<ValueError>([&] { i32.add_(int64_t{1} << 40); }, {"add", "int32"});
  expect_throw<ValueError>([&] { i32.mul_(int64_t{1} << 40); }, {"mul", "int32"});
  expect_throw<ValueError>([&] { add(i32, i32, int64_t{1} << 40); }, {"add", "int32"});
  EXPECT_EQ((i32 + 2).to_vector<int32_t>(), (std::vector<int32_t>{2, 2, 2}));
  EXPECT_EQ((i32 + 2.5).dtype(), DType::Float32);  // a float number promotes: nothing to check
  expect_throw<ValueError>([&] { i32.clamp(0, int64_t{1} << 40); }, {"clamp", "int32"});
  EXPECT_EQ(i32.clamp(-1, 5).dtype(), DType::Int32);
  Tensor mask = tensor({1, 0, 1}, DType::Bool);
  expect_throw<ValueError>([&] { where(mask, i32, wrap_scalar(int64_t{1} << 40)); },
                           {"where", "int32"});
  expect_throw<ValueError>([&] { masked_fill(i32, mask, kNaN); }, {"masked_fill", "int32"});
  // Nothing was written by the failed in-place calls.
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
}

TEST(ScalarCast, IntegerPowers) {
  // A negative scalar exponent is an error, as PyTorch.
  expect_throw<ValueError>([] { pow(ones({2}, DType::Int64), -1); },
                           {"pow", "integers to negative integer powers are not allowed"});
  // A tensor exponent follows PyTorch's integer pow: 1 and -1 stay exact, other bases give 0.
  Tensor r = pow(tensor({2, 1, -1, -1}, DType::Int64), tensor({-1, -3, -3, -2}, DType::Int64));
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, -1, 1}));
}

// ---------------------------------------------------------------- error attribution

TEST(ErrorNames, FactoriesNameWhatWasCalled) {
  std::string what = expect_throw<ValueError>([] { zeros({-1}); }, {"zeros:"});
  EXPECT_EQ(what.find("full"), std::string::npos) << what;
  what = expect_throw<ValueError>([] { ones({2, -3}); }, {"ones:"});
  EXPECT_EQ(what.find("full"), std::string::npos) << what;
  what = expect_throw<ValueError>([] { randn({-2}); }, {"randn:"});
  EXPECT_EQ(what.find("normal_"), std::string::npos) << what;
  what = expect_throw<ValueError>([] { rand({-2}); }, {"rand:"});
  EXPECT_EQ(what.find("uniform_"), std::string::npos) << what;
  what = expect_throw<DTypeError>([] { randn({2}, DType::Int64); }, {"randn:", "floating"});
  expect_throw<ValueError>([] { randint(0, 5, {-1}); }, {"randint:"});
  expect_throw<ValueError>([] { bernoulli({-1}, 0.5); }, {"bernoulli:"});
}

TEST(ErrorNames, LinearNamesTheBias) {
  // nn::Linear's own messages are tested in tests/nn/nn_test.cpp (Linear.ErrorsNameTheModule).
  Tensor x = ones({2, 4}), w = ones({3, 4});
  for (const Tensor& bad : {ones({4}), ones({2, 5})}) {
    std::string what = expect_throw<ShapeError>([&] { linear(x, w, bad); },
                                                {"linear: bias of shape", "out_features 3"});
    EXPECT_EQ(what.find("addmm"), std::string::npos) << what;
  }
  EXPECT_EQ(linear(x, w, ones({3})).sizes(), Shape({2, 3}));
  EXPECT_EQ(linear(ones({2, 2, 4}), w, ones({1})).sizes(), Shape({2, 2, 3}));  // broadcasts
}

// ---------------------------------------------------------------- isclose, allclose, equal

TEST(Closeness, IscloseDefaultsAndSpecialValues) {
  Tensor a = tensor({1.0, 1.0, 0.0, kInf, -kInf, kInf, kNaN, kNaN, 1e-9, 100.0});
  Tensor b = tensor({1.0 + 1e-6, 1.0 + 1e-4, 1e-9, kInf, -kInf, -kInf, kNaN, 1.0, 0.0, 100.001});
  Tensor c = isclose(a, b);
  EXPECT_EQ(c.dtype(), DType::Bool);
  EXPECT_EQ(c.to_vector<bool>(),
            (std::vector<bool>{true, false, true, true, true, false, false, false, true, true}));
  EXPECT_EQ(isclose(a, b, 1e-5, 1e-8, /*equal_nan=*/true).to_vector<bool>()[6], true);
  EXPECT_EQ(
      isclose(a, b, 0, 0).to_vector<bool>(),
      (std::vector<bool>{false, false, false, true, true, false, false, false, false, false}));
  // rtol scales with |other| (asymmetric, as PyTorch).
  EXPECT_TRUE(isclose(tensor({0.0}), tensor({10.0}), 1.0, 0.0).item<bool>());
  EXPECT_FALSE(isclose(tensor({10.0}), tensor({0.0}), 1.0, 0.0).item<bool>());
  expect_throw<ValueError>([&] { isclose(a, b, -1.0); }, {"isclose", "rtol"});
  expect_throw<ValueError>([&] { isclose(a, b, 1e-5, -1.0); }, {"isclose", "atol"});
}

TEST(Closeness, IsclosePromotesAndBroadcasts) {
  Tensor i = tensor({1, 2, 3}, DType::Int64);
  Tensor f = tensor({1.0f, 2.00001f, 3.5f});
  EXPECT_EQ(isclose(i, f).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(isclose(i, i).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(isclose(i, tensor({2}, DType::Int32), 0.0, 1.0).to_vector<bool>(),
            (std::vector<bool>{true, true, true}));
  // Integer differences beyond int64 don't wrap around into "close".
  Tensor big = tensor(std::vector<int64_t>{kMax}), small = tensor(std::vector<int64_t>{kMin});
  EXPECT_FALSE(isclose(big, small).item<bool>());
  Tensor col = tensor({1.0, 2.0}).view({2, 1}), row = tensor({1.0, 2.0, 3.0}).view({1, 3});
  Tensor c = isclose(col, row);
  EXPECT_EQ(c.sizes(), Shape({2, 3}));
  EXPECT_EQ(c.to_vector<bool>(), (std::vector<bool>{true, false, false, false, true, false}));
  EXPECT_EQ(isclose(tensor({true, false}), tensor({true, true})).to_vector<bool>(),
            (std::vector<bool>{true, false}));
  expect_throw<ShapeError>([] { isclose(ones({2}), ones({3})); }, {"isclose", "broadcast"});
}

TEST(Closeness, AllcloseAndEqual) {
  Tensor a = tensor({1.0, 2.0, kNaN});
  EXPECT_FALSE(allclose(a, a));
  EXPECT_TRUE(allclose(a, a, 1e-5, 1e-8, /*equal_nan=*/true));
  EXPECT_TRUE(allclose(tensor({1.0, 2.0}), tensor({1.0 + 1e-7, 2.0})));
  EXPECT_FALSE(allclose(tensor({1.0, 2.0}), tensor({1.1, 2.0})));
  EXPECT_TRUE(allclose(tensor({1.0, 2.0}), tensor({1.1, 2.0}), 0.1));
  EXPECT_TRUE(allclose(ones({2, 3}), ones({3})));  // broadcasts, as torch.allclose
  EXPECT_TRUE(allclose(ones({0}), ones({0})));
  EXPECT_TRUE(allclose(ones({3}, DType::Int32), ones({3}, DType::Float64)));
  expect_throw<ShapeError>([] { allclose(ones({2}), ones({3})); }, {"isclose"});

  EXPECT_TRUE(equal(tensor({1.0, 2.0}), tensor({1.0, 2.0})));
  EXPECT_FALSE(equal(tensor({1.0, 2.0}), tensor({1.0, 2.5})));
  EXPECT_FALSE(equal(a, a));                     // NaN != NaN
  EXPECT_FALSE(equal(ones({2, 3}), ones({3})));  // same values, different shapes
  EXPECT_FALSE(equal(ones({1, 3}), ones({3})));
  EXPECT_TRUE(equal(ones({0, 2}), ones({0, 2})));
  EXPECT_FALSE(equal(ones({0, 2}), ones({2, 0})));
  EXPECT_TRUE(equal(ones({3}, DType::Int64), ones({3})));  // compared after promotion
  Tensor t = arange(0, 6, 1, DType::Float32).view({2, 3});
  EXPECT_TRUE(equal(t.t(), t.t().contiguous()));  // layout doesn't matter
  expect_throw<Error>([] { equal(Tensor(), ones({1})); }, {"equal", "undefined"});
}

TEST(Closeness, UnderCompileTheyAreSyncPoints) {
  auto f = kiln::compile([](Tensor a, Tensor b) {
    Tensor c = isclose(a * 2, b);
    return allclose(a * 2, b) && equal(a, a) ? c.to(DType::Float32) : -c.to(DType::Float32);
  });
  Tensor a = tensor({1.0f, 2.0f}), b = tensor({2.0f, 4.0f});
  EXPECT_EQ(f(a, b).to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(f(a, b + 1).to_vector<float>(), (std::vector<float>{-0.0f, -0.0f}));
}

}  // namespace
}  // namespace kiln
