// Tensor's op methods: each forwards to the functional form.
#include "kiln/ops/linalg.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln {

Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const {
  checked("add");
  return kiln::add(*this, o, alpha);
}
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const {
  checked("sub");
  return kiln::sub(*this, o, alpha);
}
Tensor Tensor::mul(const Tensor& o) const {
  checked("mul");
  return kiln::mul(*this, o);
}
Tensor Tensor::div(const Tensor& o) const {
  checked("div");
  return kiln::div(*this, o);
}
Tensor Tensor::pow(const Scalar& e) const {
  checked("pow");
  return kiln::pow(*this, e);
}
Tensor Tensor::neg() const {
  checked("neg");
  return kiln::neg(*this);
}
Tensor Tensor::abs() const {
  checked("abs");
  return kiln::abs(*this);
}
Tensor Tensor::exp() const {
  checked("exp");
  return kiln::exp(*this);
}
Tensor Tensor::log() const {
  checked("log");
  return kiln::log(*this);
}
Tensor Tensor::sqrt() const {
  checked("sqrt");
  return kiln::sqrt(*this);
}
Tensor Tensor::rsqrt() const {
  checked("rsqrt");
  return kiln::rsqrt(*this);
}
Tensor Tensor::tanh() const {
  checked("tanh");
  return kiln::tanh(*this);
}
Tensor Tensor::sigmoid() const {
  checked("sigmoid");
  return kiln::sigmoid(*this);
}
Tensor Tensor::relu() const {
  checked("relu");
  return kiln::relu(*this);
}
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  checked("clamp");
  return kiln::clamp(*this, min, max);
}
Tensor Tensor::sum() const {
  checked("sum");
  return kiln::sum(*this);
}
Tensor Tensor::sum(IntList dims, bool keepdim) const {
  checked("sum");
  return kiln::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const {
  checked("mean");
  return kiln::mean(*this);
}
Tensor Tensor::mean(IntList dims, bool keepdim) const {
  checked("mean");
  return kiln::mean(*this, dims, keepdim);
}
Tensor Tensor::amax(IntList dims, bool keepdim) const {
  checked("amax");
  return kiln::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(IntList dims, bool keepdim) const {
  checked("amin");
  return kiln::amin(*this, dims, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  checked("argmax");
  return kiln::argmax(*this, dim, keepdim);
}
Tensor Tensor::matmul(const Tensor& o) const {
  checked("matmul");
  return kiln::matmul(*this, o);
}
Tensor Tensor::softmax(int64_t dim) const {
  checked("softmax");
  return kiln::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  checked("log_softmax");
  return kiln::log_softmax(*this, dim);
}

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) const {
  checked("add_");
  return kiln::add_(mutable_self(), o, alpha);
}
Tensor& Tensor::add_(const Scalar& o) const {
  checked("add_");
  return kiln::add_(mutable_self(), wrap_scalar(o));
}
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) const {
  checked("sub_");
  return kiln::sub_(mutable_self(), o, alpha);
}
Tensor& Tensor::mul_(const Tensor& o) const {
  checked("mul_");
  return kiln::mul_(mutable_self(), o);
}
Tensor& Tensor::mul_(const Scalar& o) const {
  checked("mul_");
  return kiln::mul_(mutable_self(), wrap_scalar(o));
}
Tensor& Tensor::div_(const Tensor& o) const {
  checked("div_");
  return kiln::div_(mutable_self(), o);
}
Tensor& Tensor::div_(const Scalar& o) const {
  checked("div_");
  return kiln::div_(mutable_self(), wrap_scalar(o));
}
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const {
  checked("clamp_");
  return kiln::clamp_(mutable_self(), min, max);
}

}  // namespace kiln
