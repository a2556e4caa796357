#include <gtest/gtest.h>

#include <limits>

#include "kiln/kiln.h"

namespace kiln {
namespace {

TEST(Tensor, MetadataWithoutData) {
  Tensor t = zeros({2, 3}, DType::Float64);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dtype(), DType::Float64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor a = arange(12).view({3, 4});
  Tensor col = a.select(1, 2);
  col.fill_(-1);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, -1, 3, 4, 5, -1, 7, 8, 9, -1, 11}));
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.to_vector<int64_t>()[1], 4);
}

TEST(Tensor, ItemAndBool) {
  Tensor s = full({}, 2.5);
  EXPECT_DOUBLE_EQ(s.item<double>(), 2.5);
  EXPECT_TRUE(static_cast<bool>(s > 1));
  EXPECT_THROW(static_cast<void>(static_cast<bool>(ones({2}))), ValueError);
  EXPECT_THROW(ones({2}).item<float>(), ValueError);
}

TEST(Tensor, ContiguityAndStrides) {
  EXPECT_TRUE(zeros({}).is_contiguous());
  EXPECT_EQ(zeros({}).numel(), 1);
  EXPECT_EQ(zeros({}).dim(), 0);
  EXPECT_TRUE(zeros({0, 3}).is_contiguous());
  EXPECT_EQ(zeros({0, 3}).numel(), 0);
  EXPECT_EQ(zeros({2, 0, 3}).strides().vec(), (std::vector<int64_t>{3, 3, 1}));
  Tensor a = zeros({2, 3, 4});
  EXPECT_EQ(a.strides().vec(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_FALSE(a.transpose(0, 2).is_contiguous());
  EXPECT_EQ(a.transpose(0, 2).strides().vec(), (std::vector<int64_t>{1, 4, 12}));
  // Size-1 dims do not break contiguity, whatever their stride.
  EXPECT_TRUE(a.unsqueeze(1).is_contiguous());
  EXPECT_TRUE(zeros({3, 1}).t().is_contiguous());
  EXPECT_TRUE(zeros({1, 4}).expand({1, 4}).is_contiguous());
  EXPECT_FALSE(zeros({1, 4}).expand({3, 4}).is_contiguous());
  Tensor s = a.select(1, 2);
  EXPECT_EQ(s.storage_offset(), 8);
  EXPECT_EQ(s.strides().vec(), (std::vector<int64_t>{12, 1}));
  EXPECT_FALSE(s.is_contiguous());
  Tensor sl = a.slice(2, 1, 4, 2);
  EXPECT_EQ(sl.sizes().vec(), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(sl.strides().vec(), (std::vector<int64_t>{12, 4, 2}));
  EXPECT_EQ(sl.storage_offset(), 1);
  EXPECT_EQ(a.size(-1), 4);
  EXPECT_EQ(a.stride(-3), 12);
  EXPECT_EQ(a.shape_str(), "[2, 3, 4]");
  // A 0-d tensor has no size to read, as in PyTorch (was an out-of-bounds read; kiln fuzz).
  const Tensor scalar = scalar_tensor(2.0);
  for (int64_t d : {0, -1}) {
    EXPECT_THROW((void)scalar.size(d), IndexError);
    EXPECT_THROW((void)scalar.stride(d), IndexError);
  }
}

TEST(Tensor, CopiesShareAndClonesDoNot) {
  Tensor a = arange(4);
  Tensor b = a;  // a handle: same TensorImpl
  EXPECT_TRUE(b.is_same(a));
  b.add_(1);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  Tensor c = a.clone();
  EXPECT_FALSE(c.is_same(a));
  c.zero_();
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4}));
  Tensor d = a.detach();
  EXPECT_FALSE(d.is_same(a));
  EXPECT_EQ(d.impl()->storage(), a.impl()->storage());
  EXPECT_TRUE(a.to(DType::Int64).is_same(a));
  EXPECT_FALSE(a.to(DType::Int32).is_same(a));
  EXPECT_TRUE(a.contiguous().is_same(a));
}

TEST(Tensor, ToVectorAndItemConvert) {
  Tensor t = arange(6).view({2, 3}).t();  // non-contiguous: logical order
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.to_vector<bool>(), (std::vector<bool>{false, true, true, true, true, true}));
  EXPECT_EQ(full({}, -2.75).item<int32_t>(), -2);
  EXPECT_EQ(full({1, 1}, 7).item<int64_t>(), 7);
  EXPECT_EQ(tensor(std::vector<int64_t>{9007199254740993LL}).item<int64_t>(), 9007199254740993LL);
  EXPECT_TRUE(full({}, true).item_scalar().is_bool());
  EXPECT_TRUE(full({}, 3).item_scalar().is_integral());
  EXPECT_EQ(full({}, 0.5).item_scalar().to_double(), 0.5);
  EXPECT_FALSE(static_cast<bool>(zeros({})));
  EXPECT_TRUE(zeros({0}).to_vector<float>().empty());
  // Any layout reads in row-major order: a storage offset with outer strides, a broadcast
  // (stride 0) dim, a permutation of three dims, a 0-d tensor, a zero-size dim.
  Tensor base = arange(24).view({2, 3, 4});
  EXPECT_EQ(base.slice(1, 1, 3).slice(2, 1, 3).to_vector<int64_t>(),
            (std::vector<int64_t>{5, 6, 9, 10, 17, 18, 21, 22}));
  EXPECT_EQ(arange(3).view({3, 1}).expand({3, 2}).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(base.permute({2, 0, 1}).slice(0, 3, 4).to_vector<int32_t>(),
            (std::vector<int32_t>{3, 7, 11, 15, 19, 23}));
  EXPECT_EQ(full({}, 1.5).to_vector<double>(), (std::vector<double>{1.5}));
  EXPECT_TRUE(zeros({2, 0, 3}).to_vector<float>().empty());
}

TEST(Tensor, RequiresGradOnlyForFloats) {
  Tensor f = zeros({2});
  EXPECT_FALSE(f.requires_grad());
  f.requires_grad_();
  EXPECT_TRUE(f.requires_grad());
  f.requires_grad_(false);
  EXPECT_FALSE(f.requires_grad());
  Tensor i = zeros({2}, DType::Int64);
  EXPECT_THROW(i.requires_grad_(), DTypeError);
  EXPECT_NO_THROW(i.requires_grad_(false));
}

TEST(Tensor, SizeHelpers) {
  EXPECT_EQ(checked_numel({2, 3, 4}, "t"), 24);
  EXPECT_EQ(checked_numel({}, "t"), 1);
  EXPECT_EQ(checked_numel({5, 0}, "t"), 0);
  EXPECT_THROW(checked_numel({2, -1}, "t"), ValueError);
  EXPECT_THROW(checked_numel({int64_t{1} << 40, int64_t{1} << 40}, "t"), ValueError);
  EXPECT_EQ(wrap_dim(-1, 3, "t"), 2);
  EXPECT_EQ(wrap_dim(0, 0, "t"), 0);
  EXPECT_EQ(wrap_dim(-1, 0, "t"), 0);
  EXPECT_THROW(wrap_dim(3, 3, "t"), IndexError);
  EXPECT_THROW(wrap_dim(-4, 3, "t"), IndexError);
  EXPECT_THROW(wrap_dim(1, 0, "t"), IndexError);
  EXPECT_EQ(contiguous_strides({2, 3, 4}).vec(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}).size(), 0u);
}

// Rounding ops are the identity on integers, exactly (not through a double).
TEST(Tensor, IntegerRoundingIsExact) {
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor t = tensor(std::vector<int64_t>{big, -big, std::numeric_limits<int64_t>::max()});
  for (Tensor r : {floor(t), ceil(t), round(t), trunc(t)}) {
    EXPECT_EQ(r.dtype(), DType::Int64);
    EXPECT_EQ(r.to_vector<int64_t>(), t.to_vector<int64_t>());
  }
  EXPECT_EQ(abs(tensor(std::vector<int64_t>{-big})).item<int64_t>(), big);
  EXPECT_EQ(clamp(tensor(std::vector<int64_t>{big}), 0, big).item<int64_t>(), big);
  EXPECT_EQ(sign(tensor(std::vector<int64_t>{-big})).item<int64_t>(), -1);
}

// Integer arithmetic wraps around in two's complement, as in PyTorch.
TEST(Tensor, IntegerOverflowWraps) {
  const int32_t max32 = std::numeric_limits<int32_t>::max(),
                min32 = std::numeric_limits<int32_t>::min();
  const int64_t max64 = std::numeric_limits<int64_t>::max(),
                min64 = std::numeric_limits<int64_t>::min();
  Tensor a = tensor(std::vector<int32_t>{max32, min32, max32});
  EXPECT_EQ((a + 1).to_vector<int32_t>(), (std::vector<int32_t>{min32, min32 + 1, min32}));
  EXPECT_EQ((a - 1).to_vector<int32_t>(), (std::vector<int32_t>{max32 - 1, max32, max32 - 1}));
  EXPECT_EQ((a * 2).to_vector<int32_t>(), (std::vector<int32_t>{-2, 0, -2}));
  EXPECT_EQ(neg(a).to_vector<int32_t>(), (std::vector<int32_t>{-max32, min32, -max32}));
  EXPECT_EQ(abs(a).to_vector<int32_t>(), (std::vector<int32_t>{max32, min32, max32}));
  Tensor b = tensor(std::vector<int64_t>{max64, min64});
  EXPECT_EQ(add(b, b).to_vector<int64_t>(), (std::vector<int64_t>{-2, 0}));
  EXPECT_EQ(mul(b, b).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(add(b, b, 3).to_vector<int64_t>(), (std::vector<int64_t>{-4, 0}));  // 4 * b mod 2^64
  EXPECT_EQ(floor_divide(b, tensor(std::vector<int64_t>{-1, -1})).to_vector<int64_t>(),
            (std::vector<int64_t>{-max64, min64}));
  Tensor c = tensor(std::vector<int64_t>{5});
  c.copy_(c);  // copying onto itself is a no-op
  EXPECT_EQ(c.item<int64_t>(), 5);
}

TEST(Tensor, RegistryListsEveryOpOnce) {
  std::vector<const OpDef*> ops = all_ops();
  ASSERT_FALSE(ops.empty());
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_LT(ops[i - 1]->name, ops[i]->name);
  EXPECT_NE(find_op("add"), nullptr);
  EXPECT_EQ(find_op("no_such_op"), nullptr);
  EXPECT_THROW(register_op({.name = "add", .schema = "add()", .kind = OpKind::Pointwise}), Error);
}

}  // namespace
}  // namespace kiln
