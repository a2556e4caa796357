// Invalid calls throw kiln::Error subclasses naming the op, before anything is written: the
// output keeps its values and version, the generator its offset, the allocator its counts.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

uint64_t version(const Tensor& t) { return t.impl()->storage()->version(); }

// Runs `bad` (which must throw E mentioning `needle`) and checks that `t` kept its values and
// version.
template <typename E, typename F>
void expect_untouched(Tensor t, const std::string& needle, F bad) {
  const std::vector<double> before = t.to_vector<double>();
  const uint64_t v = version(t);
  try {
    bad();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.to_vector<double>(), before);
  EXPECT_EQ(version(t), v);
}

TEST(Errors, InPlaceOpsValidateBeforeWriting) {
  Tensor x = arange(0, 6, 1, DType::Float32).view({2, 3});
  expect_untouched<ShapeError>(x, "add", [&] { x.add_(ones({4})); });
  expect_untouched<ShapeError>(x, "cannot change", [&] { x.add_(ones({2, 2, 3})); });
  expect_untouched<ShapeError>(x, "copy_", [&] { x.copy_(ones({3, 2})); });
  expect_untouched<DTypeError>(x, "mask", [&] { masked_fill_(x, ones({2, 3}), 1); });
  expect_untouched<ShapeError>(x, "masked_fill", [&] {
    masked_fill_(x, ones({4, 2, 3}, DType::Bool), 1);
  });
  expect_untouched<ValueError>(x, "clamp", [&] { clamp_(x, std::nullopt, std::nullopt); });
  expect_untouched<DTypeError>(x, "lerp", [&] { lerp_(x, ones({3}, DType::Int64), 0.5); });
  Tensor i = arange(6, DType::Int64);
  expect_untouched<DTypeError>(i, "can't be cast", [&] { i.div_(ones({6}, DType::Int64)); });
  expect_untouched<DTypeError>(i, "can't be cast", [&] { clamp_(i, 0.5, std::nullopt); });
  expect_untouched<DTypeError>(i, "can't be cast", [&] { exp_(i); });
  expect_untouched<ValueError>(i, "negative integer powers", [&] { pow_(i, -1); });
  Tensor b = ones({3}, DType::Bool);
  expect_untouched<DTypeError>(b, "can't be cast", [&] { b.add_(ones({3}, DType::Int32)); });
  expect_untouched<DTypeError>(b, "neg", [&] { neg_(b); });
}

TEST(Errors, IntegerDivisionByZeroWritesNothing) {
  Tensor out = full({4}, 9, DType::Int64);
  const OpDef* fd = find_op("floor_divide");
  ASSERT_NE(fd, nullptr);
  std::vector<Tensor> ins = {arange(4), tensor({1, 2, 0, 4})};
  expect_untouched<ValueError>(out, "division by zero", [&] { dispatch_into(*fd, ins, {}, out); });
  expect_untouched<ValueError>(out, "division by zero",
                               [&] { dispatch_into(*find_op("remainder"), ins, {}, out); });
  // In place into the dividend itself.
  Tensor a = arange(1, 5);
  expect_untouched<ValueError>(a, "division by zero", [&] {
    dispatch_into(*fd, std::vector<Tensor>{a, tensor({1, 0, 1, 1})}, {}, a);
  });
  // No division happens for an empty result, so nothing to complain about.
  EXPECT_EQ(floor_divide(zeros({0}, DType::Int64), zeros({1}, DType::Int64)).numel(), 0);
  EXPECT_EQ(remainder(zeros({2, 0}, DType::Int32), zeros({1}, DType::Int32)).numel(), 0);
}

TEST(Errors, ExpandedAndOverlappingOutputsAreRefused) {
  Tensor base = arange(0, 3, 1, DType::Float32);
  Tensor expanded = base.expand({4, 3});
  expect_untouched<ValueError>(base, "expanded", [&] { expanded.add_(1); });
  expect_untouched<ValueError>(base, "expanded", [&] { expanded.fill_(0); });
  expect_untouched<ValueError>(base, "expanded", [&] { expanded.copy_(zeros({4, 3})); });
  expect_untouched<ValueError>(base, "expanded", [&] { expanded.mul_(2); });
  expect_untouched<ValueError>(base, "expanded", [&] { uniform_(expanded); });
  // Overlapping windows made with as_strided: two indices address one element, so the result
  // would depend on the order of the writes (PyTorch lets these through).
  Tensor storage = arange(0, 9, 1, DType::Float32);
  Tensor windows = storage.as_strided({8, 2}, {1, 1});
  expect_untouched<ValueError>(storage, "elements overlap", [&] { windows.sub_(windows); });
  expect_untouched<ValueError>(storage, "elements overlap", [&] { windows.zero_(); });
  expect_untouched<ValueError>(storage, "elements overlap", [&] { windows.copy_(zeros({8, 2})); });
  // Strides that interleave without meeting are written: offsets 0, 3, 2, 5, 4, 7.
  Tensor interleaved_storage = zeros({8});
  Tensor interleaved = interleaved_storage.as_strided({3, 2}, {2, 3});
  interleaved.add_(1);
  EXPECT_TRUE(
      equal(interleaved_storage, tensor({1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0}, DType::Float32)));
  // Reading overlapping windows is fine; their gradient is defined too.
  Tensor x = arange(0, 4, 1, DType::Float32).requires_grad_();
  x.as_strided({3, 2}, {1, 1}).sum().backward();
  EXPECT_TRUE(equal(x.grad(), tensor({1.0, 2.0, 2.0, 1.0}, DType::Float32)));
  // as_strided over an input that overlaps itself has no gradient here (before, the shared
  // elements' gradient was counted once per index: [1, 0, 2, 0] where PyTorch has [1, 0, 1, 0]).
  Tensor y = arange(0, 4, 1, DType::Float32).requires_grad_();
  Tensor of_windows = y.as_strided({3, 2}, {1, 1}).as_strided({2}, {2});
  EXPECT_THROW(of_windows.sum().backward(), NotImplementedError);
}

TEST(Errors, RandomOpsLeaveTheGeneratorAlone) {
  Generator g(7);
  g.set_offset(100);
  Tensor t = zeros({3});
  expect_untouched<ValueError>(t, "from <= to", [&] { uniform_(t, 2.0, 1.0, &g); });
  expect_untouched<ValueError>(t, "non-negative", [&] { normal_(t, 0.0, -1.0, &g); });
  Tensor ti = zeros({3}, DType::Int64);
  expect_untouched<DTypeError>(ti, "floating", [&] { uniform_(ti, 0.0, 1.0, &g); });
  EXPECT_THROW(rand({2}, DType::Int32, &g), DTypeError);
  EXPECT_THROW(randint(5, 5, {2}, DType::Int64, &g), ValueError);
  EXPECT_THROW(randint(0, 2, {2}, DType::Bool, &g), DTypeError);
  EXPECT_THROW(randn({-2}, DType::Float32, &g), ValueError);
  EXPECT_THROW(bernoulli(ones({2}, DType::Int64), &g), DTypeError);
  EXPECT_THROW(bernoulli({2}, 1.5, DType::Float32, &g), ValueError);
  EXPECT_EQ(g.offset(), 100u) << "a refused draw reserves no counters";
  EXPECT_EQ(g.seed(), 7u);
}

TEST(Errors, ViewsAndFactoriesValidateArguments) {
  const MemoryStats before = memory_stats();
  EXPECT_THROW(ones({4}).as_strided({2}, {4}), IndexError);
  EXPECT_THROW(ones({4}).as_strided({3}, {std::numeric_limits<int64_t>::max() / 2 + 1}),
               IndexError);
  EXPECT_THROW(ones({4}).expand({-3}), ShapeError);
  EXPECT_THROW(ones({2, 3}).t().view({6}), ShapeError);
  EXPECT_THROW(zeros({-1}), ValueError);
  EXPECT_THROW(arange(3, DType::Bool), DTypeError);
  EXPECT_THROW(linspace(0, 1, 4, DType::Bool), DTypeError);
  EXPECT_THROW(eye(-2), ValueError);
  EXPECT_THROW(full({int64_t{1} << 62, 4}, 1.0), ValueError);
  EXPECT_EQ(memory_stats().allocated, before.allocated);
}

TEST(Errors, MessagesNameTheOpShapesAndDtypes) {
  try {
    add(ones({2, 3}), ones({4}));
    FAIL();
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  try {
    bitwise_and(ones({2}), ones({2}));
    FAIL();
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bitwise_and"), std::string::npos) << m;
    EXPECT_NE(m.find("float32"), std::string::npos) << m;
  }
  try {
    ones({3, 4}).select(1, 9);
    FAIL();
  } catch (const IndexError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("select"), std::string::npos) << m;
    EXPECT_NE(m.find("9"), std::string::npos) << m;
  }
  EXPECT_THROW(add(Tensor(), ones({2})), Error);
  EXPECT_THROW(Tensor().clone(), Error);
  EXPECT_THROW(Tensor().to(DType::Int32), Error);
  EXPECT_THROW(Tensor().contiguous(), Error);
  EXPECT_THROW(ones({2}).data_ptr<double>(), DTypeError);
  EXPECT_THROW(ones({2}).size(2), IndexError);
  EXPECT_THROW(ones({2}).stride(-2), IndexError);
}

}  // namespace
}  // namespace kiln
