// Stub: these ops are not implemented yet; each throws NotImplementedError naming itself.
#include "kiln/kiln.h"

namespace kiln {

Tensor matmul(const Tensor& a, const Tensor& b) {
  throw NotImplementedError("matmul: not implemented yet");
}
Tensor mm(const Tensor& a, const Tensor& b) {
  throw NotImplementedError("mm: not implemented yet");
}
Tensor bmm(const Tensor& a, const Tensor& b) {
  throw NotImplementedError("bmm: not implemented yet");
}
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  throw NotImplementedError("addmm: not implemented yet");
}
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  throw NotImplementedError("linear: not implemented yet");
}
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b) {
  throw NotImplementedError("matmul_out: not implemented yet");
}

}  // namespace kiln
