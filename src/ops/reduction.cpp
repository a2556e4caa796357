// Stub: these ops are not implemented yet; each throws NotImplementedError naming itself.
#include "kiln/kiln.h"

namespace kiln {

Tensor sum(const Tensor& x, IntList dims, bool keepdim, std::optional<DType> dtype) {
  throw NotImplementedError("sum: not implemented yet");
}
Tensor mean(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("mean: not implemented yet");
}
Tensor prod(const Tensor& x, IntList dims, bool keepdim, std::optional<DType> dtype) {
  throw NotImplementedError("prod: not implemented yet");
}
Tensor amax(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("amax: not implemented yet");
}
Tensor amin(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("amin: not implemented yet");
}
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  throw NotImplementedError("max: not implemented yet");
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  throw NotImplementedError("min: not implemented yet");
}
Tensor max(const Tensor& x) {
  throw NotImplementedError("max: not implemented yet");
}
Tensor min(const Tensor& x) {
  throw NotImplementedError("min: not implemented yet");
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  throw NotImplementedError("argmax: not implemented yet");
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  throw NotImplementedError("argmin: not implemented yet");
}
Tensor var(const Tensor& x, IntList dims, int64_t correction, bool keepdim) {
  throw NotImplementedError("var: not implemented yet");
}
Tensor std(const Tensor& x, IntList dims, int64_t correction, bool keepdim) {
  throw NotImplementedError("std: not implemented yet");
}
Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("logsumexp: not implemented yet");
}
Tensor norm(const Tensor& x, double p, IntList dims, bool keepdim) {
  throw NotImplementedError("norm: not implemented yet");
}
Tensor all(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("all: not implemented yet");
}
Tensor any(const Tensor& x, IntList dims, bool keepdim) {
  throw NotImplementedError("any: not implemented yet");
}
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  throw NotImplementedError("cumsum: not implemented yet");
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  throw NotImplementedError("cumprod: not implemented yet");
}

}  // namespace kiln
