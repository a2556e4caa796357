// Reductions over any set of dims (an empty dim list means all dims), with keepdim; scans;
// softmax. Dims may be negative.
#pragma once

#include <optional>
#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

// Sum of bool/int tensors is int64 (as PyTorch) unless dtype is given.
Tensor sum(const Tensor& x, IntList dims = {}, bool keepdim = false,
           std::optional<DType> dtype = {});
Tensor mean(const Tensor& x, IntList dims = {}, bool keepdim = false);  // floating only
Tensor prod(const Tensor& x, IntList dims = {}, bool keepdim = false,
            std::optional<DType> dtype = {});
Tensor amax(const Tensor& x, IntList dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntList dims = {}, bool keepdim = false);
// Values and int64 indices of the max/min along one dim (first occurrence on ties; NaN wins).
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
// Index of the max/min; over the flattened tensor when dim is not given.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
// Variance with Bessel-style `correction` (1 = unbiased, as the default in PyTorch).
Tensor var(const Tensor& x, IntList dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, IntList dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim = false);
// p-norm (p = 2 by default; inf and -inf give max/min of |x|; 0 counts non-zeros).
Tensor norm(const Tensor& x, double p = 2.0, IntList dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, IntList dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, IntList dims = {}, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = {});
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = {});
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace kiln
