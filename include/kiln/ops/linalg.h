// Matrix products, through BLAS (OpenBLAS). Floating dtypes only.
#pragma once

#include <optional>

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

}  // namespace kiln
