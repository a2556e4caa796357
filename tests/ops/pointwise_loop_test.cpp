// The strided block loop under eager pointwise kernels (src/ops/kernels/block_loop.h): when the
// innermost run is short, blocks span several runs, gathering the operands not laid out
// contiguously (a per-channel operand, a transposed one) run by run. Checked against the same
// op on copies of those operands laid out contiguously by the test itself, element by element
// (one run over the whole tensor: no gathering), which must give the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

// t broadcast to `sizes` (4 dims) as a contiguous tensor, copied here element by element
// through its strides (not by a Kiln copy, which runs the loop under test).
Tensor materialize(const Tensor& t, IntList sizes) {
  const Tensor view = t.expand(sizes);
  const auto isz = static_cast<size_t>(view.element_size());
  std::vector<char> bytes(static_cast<size_t>(view.numel()) * isz);
  const char* from = static_cast<const char*>(view.data_ptr());
  size_t at = 0;
  for (int64_t a = 0; a < sizes[0]; ++a)
    for (int64_t b = 0; b < sizes[1]; ++b)
      for (int64_t c = 0; c < sizes[2]; ++c)
        for (int64_t d = 0; d < sizes[3]; ++d, at += isz) {
          const int64_t offset =
              a * view.stride(0) + b * view.stride(1) + c * view.stride(2) + d * view.stride(3);
          std::memcpy(bytes.data() + at, from + offset * static_cast<int64_t>(isz), isz);
        }
  return from_blob(bytes.data(), sizes, view.dtype()).clone();
}

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_TRUE(equal(got, want)) << what << ": " << got << " vs " << want;
}

// Shapes whose innermost runs are short (3, 4, 7, 64, 121 elements: blocks span runs) or not
// (144), one large enough to be split between threads in the middle of a run
// ([65, 9, 11, 7]: 45045 elements).
const std::vector<std::vector<int64_t>> kShapes = {{5, 6, 1, 3}, {16, 32, 2, 2}, {65, 9, 11, 7},
                                                   {4, 5, 8, 8}, {3, 4, 11, 11}, {2, 3, 12, 12}};

TEST(PointwiseLoop, ShortRunsWithAPerChannelOperandSpanBlocks) {
  manual_seed(31);
  for (const auto& sizes : kShapes) {
    const int64_t c = sizes[1];
    Tensor x = randn(IntList(sizes)), s = randn({1, c, 1, 1}), t = randn({1, c, 1, 1});
    const std::string what = "shape " + x.shape_str();
    Tensor s_full = materialize(s, IntList(sizes)), t_full = materialize(t, IntList(sizes));
    expect_same_bits(x * s, x * s_full, what + ", x * s");
    expect_same_bits(addcmul(t, x, s), addcmul(t_full, x, s_full), what + ", addcmul");
    // float64, and integer and bool elements of 8 and 1 bytes.
    Tensor xd = x.to(DType::Float64), sd = s.to(DType::Float64);
    expect_same_bits(xd - sd, xd - materialize(sd, IntList(sizes)), what + ", float64");
    Tensor xi = (x * 100).to(DType::Int64), si = (s * 100).to(DType::Int64);
    expect_same_bits(xi + si, xi + materialize(si, IntList(sizes)), what + ", int64");
    Tensor xb = gt(x, wrap_scalar(0)), sb = gt(s, wrap_scalar(0));
    expect_same_bits(logical_xor(xb, sb), logical_xor(xb, materialize(sb, IntList(sizes))),
                     what + ", bool");
  }
}

TEST(PointwiseLoop, ShortRunsWithATransposedOperandSpanBlocks) {
  manual_seed(32);
  for (const auto& sizes : kShapes) {
    std::vector<int64_t> swapped = sizes;
    std::swap(swapped[2], swapped[3]);
    Tensor x = randn(IntList(sizes)), y = randn(IntList(swapped)).transpose(2, 3);
    const std::string what = "shape " + x.shape_str();
    Tensor c = randn({1, sizes[1], 1, 1});
    expect_same_bits(x * y + c, x * materialize(y, IntList(sizes)) + materialize(c, IntList(sizes)),
                     what + ", x * transposed y + c");
    // Written in place through a transposed view: its output is not laid out contiguously, so
    // the loop keeps one block per run.
    Tensor out = randn(IntList(swapped)), expected = out.clone();
    out.transpose(2, 3).add_(c);
    expected.add_(materialize(c.transpose(2, 3), IntList(swapped)));
    expect_same_bits(out, expected, what + ", in place through a transposed view");
  }
}

}  // namespace
}  // namespace kiln
