// Matrix products, through BLAS (OpenBLAS). Floating dtypes only.
#pragma once

#include <optional>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

// As torch.matmul: 1-d @ 1-d is a dot product; 1-d operands are promoted to matrices and the
// added dim removed after; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // [n,k] @ [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);  // [b,n,k] @ [b,k,m]
// beta * self + alpha * (a @ b); self broadcasts to [n, m].
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta = 1,
             const Scalar& alpha = 1);
// x @ weight^T + bias, weight [out, in].
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = {});
Tensor& matmul_out(Tensor& out, const Tensor& a, const Tensor& b);

// The BLAS that products outside Kiln's own kernels run on, and which of its kernel sets, e.g.
// "OpenBLAS 0.3.21 ... SkylakeX kernels" (as torch.__config__.show() reports its BLAS). Where
// OpenBLAS does not recognise the CPU and fell back to older kernels than the CPU supports,
// Kiln selected the better set when it loaded and says so here; OPENBLAS_CORETYPE, when set,
// is left to decide (docs/memory-and-threads.md).
std::string blas_config();

}  // namespace kiln
