// Type promotion as documented in docs/dtypes.md: every pair of dtypes, 0-d tensors against
// dimmed ones, and C++ numbers. The tables are literal, written from the documentation.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr DType B = DType::Bool, I32 = DType::Int32, I64 = DType::Int64, F32 = DType::Float32,
                F64 = DType::Float64;
const DType kAll[] = {B, I32, I64, F32, F64};

// promote_types, row x column.
const DType kPromote[5][5] = {
    {B, I32, I64, F32, F64},    //
    {I32, I32, I64, F32, F64},  //
    {I64, I64, I64, F32, F64},  //
    {F32, F32, F32, F32, F64},  //
    {F64, F64, F64, F64, F64},  //
};
// A dimmed tensor (row) with a 0-d tensor (column).
const DType kDimWithZeroDim[5][5] = {
    {B, I32, I64, F32, F64},    //
    {I32, I32, I32, F32, F64},  //
    {I64, I64, I64, F32, F64},  //
    {F32, F32, F32, F32, F32},  //
    {F64, F64, F64, F64, F64},  //
};
// A tensor (row) with the numbers true, 2 and 2.5.
const DType kWithNumber[5][3] = {
    {B, I64, F32},    //
    {I32, I32, F32},  //
    {I64, I64, F32},  //
    {F32, F32, F32},  //
    {F64, F64, F64},  //
};
const bool kCanCast[5][5] = {
    {true, true, true, true, true},     //
    {false, true, true, true, true},    //
    {false, true, true, true, true},    //
    {false, false, false, true, true},  //
    {false, false, false, true, true},  //
};

Scalar number(int k) { return k == 0 ? Scalar(true) : k == 1 ? Scalar(2) : Scalar(2.5); }

TEST(DTypes, Properties) {
  const int sizes[] = {1, 4, 8, 4, 8};
  const char* names[] = {"bool", "int32", "int64", "float32", "float64"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(itemsize(kAll[i]), sizes[i]);
    EXPECT_EQ(dtype_info(kAll[i]).itemsize, sizes[i]);
    EXPECT_EQ(dtype_name(kAll[i]), names[i]);
    EXPECT_EQ(zeros({2}, kAll[i]).element_size(), sizes[i]);
  }
  EXPECT_TRUE(is_floating(F32) && is_floating(F64) && !is_floating(I64) && !is_floating(B));
  EXPECT_TRUE(is_integral(I32) && is_integral(I64) && !is_integral(B) && is_integral(B, true));
  std::ostringstream os;
  os << F64 << " " << Scalar(true) << " " << Scalar(3) << " " << Scalar(0.5);
  EXPECT_EQ(os.str(), "float64 true 3 0.5");
}

TEST(DTypes, PromoteTypesEveryPair) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_EQ(promote_types(kAll[i], kAll[j]), kPromote[i][j]) << kAll[i] << " with " << kAll[j];
}

TEST(DTypes, CanCastEveryPair) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_EQ(can_cast(kAll[i], kAll[j]), kCanCast[i][j]) << kAll[i] << " -> " << kAll[j];
}

TEST(DTypes, ScalarCategories) {
  EXPECT_EQ(Scalar(true).dtype(), B);
  EXPECT_EQ(Scalar(3).dtype(), I64);
  EXPECT_EQ(Scalar(int64_t{3}).dtype(), I64);
  EXPECT_EQ(Scalar(2.5f).dtype(), F64);
  EXPECT_EQ(Scalar(2.5).to<int64_t>(), 2);
  EXPECT_EQ(Scalar(-7).to_double(), -7.0);
  EXPECT_TRUE(Scalar(1) == Scalar(1));
  EXPECT_FALSE(Scalar(1) == Scalar(1.0));
}

// The result dtype of an op sees every operand pair in both orders, through mul (which accepts
// every dtype), add, and a comparison (computed in the result type, so its output is bool).
TEST(DTypes, DimmedTensorsEveryPair) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      Tensor a = ones({3}, kAll[i]), b = ones({2, 3}, kAll[j]);
      EXPECT_EQ(mul(a, b).dtype(), kPromote[i][j]) << kAll[i] << " * " << kAll[j];
      EXPECT_EQ(mul(b, a).dtype(), kPromote[i][j]);
      EXPECT_EQ(maximum(a, b).dtype(), kPromote[i][j]);
      EXPECT_EQ(eq(a, b).dtype(), B);
    }
}

TEST(DTypes, ZeroDimTensorsCountOnlyByCategory) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      Tensor a = ones({3}, kAll[i]), s = ones({}, kAll[j]);
      EXPECT_EQ(mul(a, s).dtype(), kDimWithZeroDim[i][j]) << kAll[i] << "[3] * 0-d " << kAll[j];
      EXPECT_EQ(mul(s, a).dtype(), kDimWithZeroDim[i][j]);
      // Two 0-d tensors are one tier: plain promotion.
      Tensor s2 = ones({}, kAll[i]);
      EXPECT_EQ(mul(s2, s).dtype(), kPromote[i][j]);
    }
}

TEST(DTypes, CppNumbersCountOnlyByCategory) {
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 3; ++k) {
      Tensor a = ones({3}, kAll[i]);
      EXPECT_EQ(mul(a, wrap_scalar(number(k))).dtype(), kWithNumber[i][k])
          << kAll[i] << " * " << number(k);
      EXPECT_EQ(mul(wrap_scalar(number(k)), a).dtype(), kWithNumber[i][k]);
      EXPECT_EQ((a * number(k)).dtype(), kWithNumber[i][k]);
      EXPECT_EQ((number(k) * a).dtype(), kWithNumber[i][k]);
      // 0-d tensors outrank numbers the same way.
      Tensor s = ones({}, kAll[i]);
      EXPECT_EQ((s * number(k)).dtype(), kWithNumber[i][k])
          << "0-d " << kAll[i] << " * " << number(k);
    }
  // Numbers among themselves: int64, or float32 for a double.
  EXPECT_EQ(mul(wrap_scalar(2), wrap_scalar(true)).dtype(), I64);
  EXPECT_EQ(mul(wrap_scalar(2), wrap_scalar(0.5)).dtype(), F32);
}

TEST(DTypes, ThreeTiers) {
  // A dimmed int32 with a 0-d int64: int32 (no category is higher).
  EXPECT_EQ(where(ones({3}, B), ones({3}, I32), ones({}, I64)).dtype(), I32);
  // A 0-d float64 raises an int tensor to float64; a number 2.5 then adds nothing.
  EXPECT_EQ(addcmul(ones({3}, I32), ones({}, F64), wrap_scalar(2.5)).dtype(), F64);
  // A bool tensor with a 0-d int32 and a number: int32.
  EXPECT_EQ(addcmul(ones({3}, B), ones({}, I32), wrap_scalar(3)).dtype(), I32);
  // A float32 tensor, a 0-d bool, a number 2.5: float32.
  EXPECT_EQ(addcmul(ones({3}, F32), ones({}, B), wrap_scalar(2.5)).dtype(), F32);
}

TEST(DTypes, FloatResultOps) {
  for (DType d : kAll) {
    const DType want = is_floating(d) ? d : F32;
    EXPECT_EQ(exp(ones({2}, d)).dtype(), want) << d;
    EXPECT_EQ(sqrt(ones({}, d)).dtype(), want);
    EXPECT_EQ(div(ones({2}, d), ones({2}, d)).dtype(), want);
    EXPECT_EQ((ones({2}, d) / 2).dtype(), want);
    EXPECT_EQ(atan2(ones({2}, d), ones({2}, d)).dtype(), want);
  }
  EXPECT_EQ(div(ones({2}, I32), ones({}, F64)).dtype(), F64);
  EXPECT_EQ(div(ones({2}, I64), wrap_scalar(2)).dtype(), F32);
}

TEST(DTypes, InPlaceCastRules) {
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      Tensor self = ones({3}, kAll[i]);
      const DType result = kPromote[i][j];
      if (can_cast(result, kAll[i])) {
        EXPECT_NO_THROW(mul_(self, ones({3}, kAll[j]))) << kAll[i] << " *= " << kAll[j];
        EXPECT_EQ(self.dtype(), kAll[i]);
      } else {
        EXPECT_THROW(mul_(self, ones({3}, kAll[j])), DTypeError) << kAll[i] << " *= " << kAll[j];
      }
    }
  Tensor i32 = ones({2}, I32);
  i32 += ones({2}, I64);  // computed in int64, stored as int32
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{2, 2}));
  EXPECT_THROW(i32 *= 0.5, DTypeError);
  Tensor b = ones({2}, B);
  EXPECT_THROW(b += 1, DTypeError);
}

TEST(DTypes, ClampBoundsPromote) {
  EXPECT_EQ(clamp(ones({2}, I32), 0.5, std::nullopt).dtype(), F32);
  EXPECT_EQ(clamp(ones({2}, I32), 0, 3).dtype(), I32);
  EXPECT_EQ(clamp(ones({2}, B), 0, 3).dtype(), I64);
  EXPECT_EQ(clamp(ones({2}, F64), 0, 3).dtype(), F64);
  EXPECT_EQ(clamp(ones({2}, I64), std::nullopt, 2.5).to_vector<double>(),
            (std::vector<double>{1, 1}));
  Tensor x = ones({2}, I64);
  EXPECT_THROW(clamp_(x, 0.5, std::nullopt), DTypeError);
}

TEST(DTypes, FactoryDefaults) {
  EXPECT_EQ(zeros({2}).dtype(), F32);
  EXPECT_EQ(full({2}, 1).dtype(), I64);
  EXPECT_EQ(full({2}, 1.0).dtype(), F32);
  EXPECT_EQ(full({2}, false).dtype(), B);
  EXPECT_EQ(arange(3).dtype(), I64);
  EXPECT_EQ(arange(0, 3, 0.5).dtype(), F32);
  EXPECT_EQ(linspace(0, 1, 3).dtype(), F32);
  EXPECT_EQ(eye(2).dtype(), F32);
  EXPECT_EQ(rand({2}).dtype(), F32);
  EXPECT_EQ(randint(0, 3, {2}).dtype(), I64);
}

}  // namespace
}  // namespace kiln
