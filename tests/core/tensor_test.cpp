#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln
