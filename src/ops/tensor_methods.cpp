// Tensor's op methods: each forwards to the functional form.
#include "kiln/ops/linalg.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln {

Tensor Tensor::add(const Tensor& o, const Scalar& alpha) const {
  return kiln::add(*this, o, alpha);
}
Tensor Tensor::sub(const Tensor& o, const Scalar& alpha) const {
  return kiln::sub(*this, o, alpha);
}
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return kiln::div(*this, o); }
Tensor Tensor::pow(const Scalar& e) const { return kiln::pow(*this, e); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return kiln::clamp(*this, min, max);
}
Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(IntList dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(IntList dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::amax(IntList dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::amin(IntList dims, bool keepdim) const { return kiln::amin(*this, dims, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return kiln::argmax(*this, dim, keepdim);
}
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::softmax(int64_t dim) const { return kiln::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return kiln::log_softmax(*this, dim); }

Tensor& Tensor::add_(const Tensor& o, const Scalar& alpha) { return kiln::add_(*this, o, alpha); }
Tensor& Tensor::add_(const Scalar& o) { return kiln::add_(*this, wrap_scalar(o)); }
Tensor& Tensor::sub_(const Tensor& o, const Scalar& alpha) { return kiln::sub_(*this, o, alpha); }
Tensor& Tensor::mul_(const Tensor& o) { return kiln::mul_(*this, o); }
Tensor& Tensor::mul_(const Scalar& o) { return kiln::mul_(*this, wrap_scalar(o)); }
Tensor& Tensor::div_(const Tensor& o) { return kiln::div_(*this, o); }
Tensor& Tensor::div_(const Scalar& o) { return kiln::div_(*this, wrap_scalar(o)); }
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  return kiln::clamp_(*this, min, max);
}

}  // namespace kiln
