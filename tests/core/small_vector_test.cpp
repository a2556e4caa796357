// SmallVector (inline storage, spilling to the heap) and IntList (a borrowed list of ints).
#include <gtest/gtest.h>

#include <sstream>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using SV = SmallVector<int64_t, 4>;

TEST(SmallVector, InlineThenHeap) {
  SV v;
  EXPECT_TRUE(v.empty());
  for (int64_t i = 0; i < 4; ++i) v.push_back(i);
  const int64_t* inline_data = v.data();
  EXPECT_EQ(v.size(), 4u);
  for (int64_t i = 4; i < 100; ++i) v.push_back(i);  // spills to the heap
  EXPECT_NE(v.data(), inline_data);
  EXPECT_EQ(v.ssize(), 100);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(v[i], i);
  EXPECT_EQ(v.back(), 99);
  v.pop_back();
  EXPECT_EQ(v.back(), 98);
}

TEST(SmallVector, ConstructionAndAssignment) {
  SV a = {1, 2, 3};
  SV b(5, 7);
  EXPECT_EQ(b.vec(), (std::vector<int64_t>{7, 7, 7, 7, 7}));
  std::vector<int64_t> src = {4, 5, 6, 7, 8, 9};
  SV c(src);
  EXPECT_EQ(c.vec(), src);
  SV d(src.begin(), src.begin() + 2);
  EXPECT_EQ(d.vec(), (std::vector<int64_t>{4, 5}));
  SV e(std::span<const int64_t>(src.data(), 3));
  EXPECT_EQ(e.vec(), (std::vector<int64_t>{4, 5, 6}));
  // Copies are deep, inline or on the heap.
  SV a2 = a, c2 = c;
  a2[0] = 100;
  c2[0] = 100;
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(c[0], 4);
  a2 = c;  // inline <- heap
  EXPECT_EQ(a2, c);
  c2 = a;  // heap <- inline
  EXPECT_EQ(c2, a);
  c2 = c2;  // self-assignment
  EXPECT_EQ(c2, a);
}

TEST(SmallVector, Moves) {
  SV small = {1, 2};
  SV big(10, 3);
  const int64_t* heap = big.data();
  SV moved_big = std::move(big);
  EXPECT_EQ(moved_big.data(), heap) << "a heap buffer is taken over, not copied";
  EXPECT_EQ(moved_big.size(), 10u);
  EXPECT_TRUE(big.empty());
  SV moved_small = std::move(small);
  EXPECT_EQ(moved_small.vec(), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(small.empty());
  moved_small = std::move(moved_big);
  EXPECT_EQ(moved_small.size(), 10u);
  big.push_back(5);  // a moved-from vector is usable
  EXPECT_EQ(big.vec(), (std::vector<int64_t>{5}));
}

TEST(SmallVector, InsertEraseResize) {
  SV v = {1, 2, 3};
  v.insert(0, 0);
  v.insert(4, 4);
  v.insert(2, 9);
  EXPECT_EQ(v.vec(), (std::vector<int64_t>{0, 1, 9, 2, 3, 4}));
  v.erase(2);
  v.erase(0);
  EXPECT_EQ(v.vec(), (std::vector<int64_t>{1, 2, 3, 4}));
  v.resize(6, -1);
  EXPECT_EQ(v.vec(), (std::vector<int64_t>{1, 2, 3, 4, -1, -1}));
  v.resize(2);
  EXPECT_EQ(v.vec(), (std::vector<int64_t>{1, 2}));
  v.clear();
  EXPECT_TRUE(v.empty());
  SV w = {1, 2};
  EXPECT_FALSE(w == SV({1, 2, 3}));
  EXPECT_FALSE(w == SV({1, 3}));
}

TEST(IntList, BorrowsFromEverySource) {
  std::vector<int64_t> v = {2, 3, 4};
  Shape s = {5, 6};
  const int64_t raw[] = {7, 8};
  auto sum = [](IntList l) {
    int64_t t = 0;
    for (int64_t x : l) t += x;
    return t;
  };
  EXPECT_EQ(sum({1, 2, 3}), 6);
  EXPECT_EQ(sum(v), 9);
  EXPECT_EQ(sum(s), 11);
  EXPECT_EQ(sum(IntList(raw, 2)), 15);
  EXPECT_EQ(sum(std::span<const int64_t>(v)), 9);
  EXPECT_EQ(sum({}), 0);
  IntList l(v);
  EXPECT_EQ(l.size(), 3u);
  EXPECT_EQ(l.ssize(), 3);
  EXPECT_EQ(l[1], 3);
  EXPECT_EQ(l.data(), v.data()) << "no copy";
  EXPECT_EQ(l.vec(), v);
  EXPECT_EQ(l.shape(), Shape({2, 3, 4}));
  EXPECT_TRUE(IntList().empty());
  std::ostringstream os;
  os << IntList(v) << IntList();
  EXPECT_EQ(os.str(), "[2, 3, 4][]");
}

TEST(IntList, ShapesOfOrdinaryTensorsStayInline) {
  // Shapes up to 6 dims live inside the tensor (no heap), more spill but still work.
  Tensor t = zeros({1, 2, 1, 2, 1, 2});
  EXPECT_EQ(t.sizes().size(), 6u);
  Tensor u = zeros({1, 1, 1, 1, 1, 1, 1, 2});
  EXPECT_EQ(u.dim(), 8);
  EXPECT_EQ(u.numel(), 2);
  EXPECT_EQ(u.strides().vec(), (std::vector<int64_t>{2, 2, 2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(u.squeeze().dim(), 1);
  EXPECT_EQ(u.add(u).numel(), 2);
}

}  // namespace
}  // namespace kiln
