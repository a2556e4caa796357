// In-place ops whose inputs alias their output: the result must equal the out-of-place one
// computed from the original values, whatever the overlap; and every in-place write bumps the
// version counter shared by all views of a storage.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Sizes large enough that the pointwise loop works in several blocks and threads.
constexpr int64_t kBig = 100000;

TEST(Aliasing, SelfAsBothOperands) {
  for (int64_t n : {int64_t{7}, kBig}) {
    Tensor x = arange(0, n, 1, DType::Float64);
    Tensor want = add(x, x);
    x.add_(x);
    EXPECT_EQ(values(x), values(want));
    Tensor y = arange(0, n, 1, DType::Int64);
    Tensor want_y = mul(y, y);
    mul_(y, y);
    EXPECT_EQ(values(y), values(want_y));
  }
}

TEST(Aliasing, ShiftedOverlappingViews) {
  for (int64_t n : {int64_t{10}, kBig}) {
    // x[1:] += x[:-1]: a forward loop reading as it writes would accumulate a prefix sum.
    Tensor x = arange(0, n, 1, DType::Float64);
    Tensor want = add(x.slice(0, 1), x.slice(0, 0, n - 1));
    Tensor dst = x.slice(0, 1);
    dst.add_(x.slice(0, 0, n - 1));
    EXPECT_EQ(values(x.slice(0, 1)), values(want));
    EXPECT_EQ(x.select(0, 0).item<double>(), 0.0);
    // x[:-1] += x[1:] (the other direction).
    Tensor y = arange(0, n, 1, DType::Float64);
    Tensor want_y = add(y.slice(0, 0, n - 1), y.slice(0, 1));
    Tensor dst_y = y.slice(0, 0, n - 1);
    dst_y.add_(y.slice(0, 1));
    EXPECT_EQ(values(y.slice(0, 0, n - 1)), values(want_y));
  }
}

TEST(Aliasing, AsStridedOverlap) {
  // y = every other element of x; x[:n/2] += y overlaps y in an interleaved way.
  const int64_t n = 2000;
  Tensor x = arange(0, n, 1, DType::Float32);
  Tensor y = x.as_strided({n / 2}, {2});
  Tensor want = add(x.slice(0, 0, n / 2), y);
  Tensor dst = x.slice(0, 0, n / 2);
  dst.add_(y);
  EXPECT_EQ(values(x.slice(0, 0, n / 2)), values(want));
  // A self-overlapping input (stride 0 view of the output's own first element).
  Tensor z = arange(1, 1001, 1, DType::Float64);
  Tensor first = z.as_strided({1000}, {0});
  Tensor want_z = mul(z, first);
  z.mul_(first);
  EXPECT_EQ(values(z), values(want_z));
}

TEST(Aliasing, BroadcastElementOfSelf) {
  // x += x[0]: the 0-d view is read for every element, including after x[0] is written.
  Tensor x = arange(3, kBig + 3, 1, DType::Int64);
  Tensor want = add(x, x.select(0, 0));
  x.add_(x.select(0, 0));
  EXPECT_EQ(values(x), values(want));
  Tensor m = arange(0, 100, 1, DType::Float64).view({10, 10});
  Tensor want_m = sub(m, m.select(1, 3).unsqueeze(1));
  m.sub_(m.select(1, 3).unsqueeze(1));
  EXPECT_EQ(values(m), values(want_m));
}

TEST(Aliasing, TransposedSelf) {
  for (int64_t n : {int64_t{5}, int64_t{300}}) {
    Tensor x = arange(0, n * n, 1, DType::Float64).view({n, n});
    Tensor want = add(x, x.t());
    x.add_(x.t());
    EXPECT_EQ(values(x), values(want));
    Tensor c = arange(0, n * n, 1, DType::Int32).view({n, n});
    Tensor want_c = c.t().contiguous();
    c.copy_(c.t());
    EXPECT_EQ(values(c), values(want_c));
  }
}

TEST(Aliasing, TernaryWithShiftedOperands) {
  const int64_t n = 5000;
  Tensor x = arange(0, n, 1, DType::Float64).div_(wrap_scalar(n));
  Tensor dst = x.slice(0, 1);
  Tensor t1 = x.slice(0, 0, n - 1), t2 = x.slice(0, 1);
  Tensor want = addcmul(dst, t1, t2, 0.5);
  addcmul_(dst, t1, t2, 0.5);
  EXPECT_EQ(values(x.slice(0, 1)), values(want));
  Tensor y = arange(0, n, 1, DType::Float64);
  Tensor ydst = y.slice(0, 0, n - 1);
  Tensor want_y = lerp(ydst, y.slice(0, 1), 0.25);
  lerp_(ydst, y.slice(0, 1), 0.25);
  EXPECT_EQ(values(y.slice(0, 0, n - 1)), values(want_y));
}

TEST(Aliasing, OutArgumentAliasingAnInput) {
  Tensor a = arange(0, 1000, 1, DType::Float64), b = full({1000}, 2.0, DType::Float64);
  Tensor want = add(a.slice(0, 0, 999), a.slice(0, 1), 3);
  Tensor out = a.slice(0, 1);
  add_out(out, a.slice(0, 0, 999), a.slice(0, 1), 3);
  EXPECT_EQ(values(a.slice(0, 1)), values(want));
  Tensor want_b = mul(b, b);
  mul_out(b, b, b);
  EXPECT_EQ(values(b), values(want_b));
}

// ---- version counter ----

uint64_t version(const Tensor& t) { return t.impl()->storage()->version(); }

TEST(VersionCounter, InPlaceWritesBumpIt) {
  Tensor x = zeros({4});
  const uint64_t v0 = version(x);
  x.add_(1);
  EXPECT_GT(version(x), v0);
  uint64_t v = version(x);
  x.mul_(ones({4}));
  EXPECT_GT(version(x), v);
  v = version(x);
  x.copy_(ones({4}, DType::Int64));
  EXPECT_GT(version(x), v);
  v = version(x);
  x.fill_(3);
  EXPECT_GT(version(x), v);
  v = version(x);
  x.zero_();
  EXPECT_GT(version(x), v);
  v = version(x);
  x.clamp_(0, 1);
  EXPECT_GT(version(x), v);
  v = version(x);
  masked_fill_(x, ones({4}, DType::Bool), 2);
  EXPECT_GT(version(x), v);
  v = version(x);
  uniform_(x);
  EXPECT_GT(version(x), v);
  v = version(x);
  exp_(x);
  EXPECT_GT(version(x), v);
  v = version(x);
  Tensor out = zeros({4});
  add_out(out, x, x);
  EXPECT_GT(version(out), 0u);
}

TEST(VersionCounter, SharedByViews) {
  Tensor base = zeros({4, 4});
  Tensor row = base.select(0, 1), col = base.t().select(0, 2);
  const uint64_t v = version(base);
  row.add_(1);
  EXPECT_GT(version(base), v);
  EXPECT_EQ(version(col), version(base));
  const uint64_t v2 = version(base);
  // A write through a non-contiguous view.
  col.add_(ones({4}, DType::Int64));
  EXPECT_GT(version(base), v2);
  EXPECT_EQ(values(base.select(1, 2)), (std::vector<double>{1, 2, 1, 1}));
}

TEST(VersionCounter, OutOfPlaceAndFailedOpsLeaveItAlone) {
  Tensor x = ones({3});
  const uint64_t v = version(x);
  Tensor y = add(x, x);
  Tensor z = x.view({3, 1}).t();
  Tensor c = x.clone();
  EXPECT_EQ(version(x), v);
  EXPECT_THROW(x.add_(ones({2})), ShapeError);
  EXPECT_THROW(x.copy_(ones({4})), ShapeError);
  Tensor xi = ones({3}, DType::Int32);
  const uint64_t vi = version(xi);
  EXPECT_THROW(xi.mul_(0.5), DTypeError);
  EXPECT_EQ(version(x), v);
  EXPECT_EQ(version(xi), vi);
}

}  // namespace
}  // namespace kiln
