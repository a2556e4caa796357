// The Tensor handle's API (issue 15): members of an undefined tensor throw naming the member;
// in-place methods are callable on a const Tensor& (as LibTorch's); size arithmetic is checked.
#include <gtest/gtest.h>

#include <limits>
#include <sstream>

#include "kiln/kiln.h"

namespace kiln {
namespace {

// Runs `f`, which must throw kiln::Error whose message contains `needle`.
template <typename F>
void expect_error(const std::string& needle, F f) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

#define EXPECT_UNDEFINED(member, expr) \
  expect_error("Tensor::" member "() called on an undefined tensor", [&] { (void)(expr); })

TEST(UndefinedTensor, OnlyDefinedAnswers) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_UNDEFINED("shape_str", t.shape_str());
  EXPECT_UNDEFINED("data_ptr", t.data_ptr());
  EXPECT_UNDEFINED("data_ptr", t.data_ptr<float>());
  EXPECT_UNDEFINED("dim", t.dim());
  EXPECT_UNDEFINED("ndim", t.ndim());
  EXPECT_UNDEFINED("numel", t.numel());
  EXPECT_UNDEFINED("sizes", t.sizes());
  EXPECT_UNDEFINED("shape", t.shape());
  EXPECT_UNDEFINED("strides", t.strides());
  EXPECT_UNDEFINED("size", t.size(0));
  EXPECT_UNDEFINED("stride", t.stride(0));
  EXPECT_UNDEFINED("dtype", t.dtype());
  EXPECT_UNDEFINED("element_size", t.element_size());
  EXPECT_UNDEFINED("storage_offset", t.storage_offset());
  EXPECT_UNDEFINED("is_contiguous", t.is_contiguous());
  EXPECT_UNDEFINED("is_floating_point", t.is_floating_point());
  EXPECT_UNDEFINED("requires_grad", t.requires_grad());
  EXPECT_UNDEFINED("requires_grad_", t.requires_grad_());
  EXPECT_UNDEFINED("version", t.version());
  EXPECT_UNDEFINED("item", t.item<float>());
  EXPECT_UNDEFINED("item_scalar", t.item_scalar());
  EXPECT_UNDEFINED("to_vector", t.to_vector<float>());
  EXPECT_UNDEFINED("operator bool", static_cast<bool>(t));
}

TEST(UndefinedTensor, ViewsCopiesAndOpsThrow) {
  Tensor t;
  Tensor x = ones({2, 3});
  EXPECT_UNDEFINED("view", t.view({1}));
  EXPECT_UNDEFINED("reshape", t.reshape({1}));
  EXPECT_UNDEFINED("permute", t.permute({0}));
  EXPECT_UNDEFINED("transpose", t.transpose(0, 1));
  EXPECT_UNDEFINED("t", t.t());
  EXPECT_UNDEFINED("mT", t.mT());
  EXPECT_UNDEFINED("expand", t.expand({2}));
  EXPECT_UNDEFINED("expand_as", t.expand_as(x));
  EXPECT_UNDEFINED("slice", t.slice(0, 0, 1));
  EXPECT_UNDEFINED("select", t.select(0, 0));
  EXPECT_UNDEFINED("select", t[0]);
  EXPECT_UNDEFINED("narrow", t.narrow(0, 0, 1));
  EXPECT_UNDEFINED("squeeze", t.squeeze());
  EXPECT_UNDEFINED("unsqueeze", t.unsqueeze(0));
  EXPECT_UNDEFINED("flatten", t.flatten());
  EXPECT_UNDEFINED("unflatten", t.unflatten(0, {1}));
  EXPECT_UNDEFINED("as_strided", t.as_strided({1}, {1}));
  EXPECT_UNDEFINED("diagonal", t.diagonal());
  EXPECT_UNDEFINED("contiguous", t.contiguous());
  EXPECT_UNDEFINED("clone", t.clone());
  EXPECT_UNDEFINED("to", t.to(DType::Float64));
  EXPECT_UNDEFINED("detach", t.detach());
  EXPECT_UNDEFINED("copy_", t.copy_(x));
  EXPECT_UNDEFINED("fill_", t.fill_(1));
  EXPECT_UNDEFINED("zero_", t.zero_());
  EXPECT_UNDEFINED("add", t.add(x));
  EXPECT_UNDEFINED("mul", t.mul(x));
  EXPECT_UNDEFINED("pow", t.pow(2));
  EXPECT_UNDEFINED("sum", t.sum());
  EXPECT_UNDEFINED("sum", t.sum({0}));
  EXPECT_UNDEFINED("matmul", t.matmul(x));
  EXPECT_UNDEFINED("softmax", t.softmax(0));
  EXPECT_UNDEFINED("add_", t.add_(x));
  EXPECT_UNDEFINED("add_", t.add_(1));
  EXPECT_UNDEFINED("mul_", t.mul_(2));
  EXPECT_UNDEFINED("clamp_", t.clamp_(0, 1));
  // Autograd members.
  EXPECT_UNDEFINED("grad", t.grad());
  EXPECT_UNDEFINED("set_grad", t.set_grad(x));
  EXPECT_UNDEFINED("grad_fn", t.grad_fn());
  EXPECT_UNDEFINED("is_leaf", t.is_leaf());
  EXPECT_UNDEFINED("output_nr", t.output_nr());
  EXPECT_UNDEFINED("backward", t.backward());
  EXPECT_UNDEFINED("register_hook", t.register_hook([](const Tensor& g) { return g; }));
  EXPECT_UNDEFINED("retain_grad", t.retain_grad());
  EXPECT_UNDEFINED("retains_grad", t.retains_grad());
  // Functional ops and operators name the op and the argument.
  expect_error("add: input 0 is an undefined tensor", [&] { (void)kiln::add(t, x); });
  expect_error("add: input 1 is an undefined tensor", [&] { (void)(x + t); });
  expect_error("is an undefined tensor", [&] { (void)kiln::exp(t); });
  // Printing an undefined tensor is not an error (as PyTorch's "[ Tensor (undefined) ]").
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), "tensor(undefined)");
}

TEST(UndefinedTensor, UsableAsAValueOnceAssigned) {
  Tensor t;
  t = ones({2});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 2);
  EXPECT_EQ(t.shape_str(), "[2]");
}

// LibTorch-style code: in-place methods called through a const Tensor& (a tensor is a handle;
// the methods change the tensor it names). This test is mostly that this function compiles.
void scale_in_place(const Tensor& t) {
  t.mul_(2);
  t.add_(ones({3}));
  t.add_(1);
  t.sub_(ones({3}), 2);
  t.mul_(ones({3}));
  t.div_(ones({3}));
  t.div_(1);
  t.clamp_(-100, 100);
}

TEST(ConstTensor, InPlaceMethodsWorkThroughAConstReference) {
  Tensor x = tensor({1.0f, 2.0f, 3.0f});
  scale_in_place(x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2.0f, 4.0f, 6.0f}));
  const Tensor& c = x;
  c.copy_(tensor({5.0f, 6.0f, 7.0f}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{5.0f, 6.0f, 7.0f}));
  c.fill_(3);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3.0f, 3.0f, 3.0f}));
  c.zero_();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  const Tensor p = ones({2});
  p.requires_grad_();
  EXPECT_TRUE(p.requires_grad());
  // They return this very handle, so chains and `Tensor&` bindings keep working.
  Tensor& r = c.add_(1).mul_(3);
  EXPECT_TRUE(&r == &x);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3.0f, 3.0f, 3.0f}));
  Tensor y = ones({2}).requires_grad_();
  EXPECT_TRUE(y.requires_grad());
}

}  // namespace
}  // namespace kiln
