// Joining, splitting, indexing, scattering, sorting and other shape-changing ops that copy.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of pieces of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, IntList split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Out-of-place scatter: a copy of x with src values written at index along dim.
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 const Scalar& alpha = 1);
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                   const Scalar& alpha = 1);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
// Data-dependent output shapes (sync points under capture).
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor nonzero(const Tensor& x);  // [n, ndim] int64

Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);  // int64 result
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor repeat(const Tensor& x, IntList repeats);
Tensor flip(const Tensor& x, IntList dims);
Tensor roll(const Tensor& x, IntList shifts, IntList dims = {});
// pad as (left, right) pairs starting from the last dim, as torch.nn.functional.pad.
Tensor pad(const Tensor& x, IntList pad, const Scalar& value = 0);
// torch.nn.functional.pad's modes: Constant fills with `value` (negative pads crop); Reflect
// mirrors about the edge element without repeating it (each pad smaller than its dim), Replicate
// repeats the edge element, Circular wraps around (each pad at most its dim). The last three take
// pads >= 0 and differentiate as an index_select: each padded element's gradient goes back to
// the element it copies.
enum class PadMode { Constant, Reflect, Replicate, Circular };
Tensor pad(const Tensor& x, IntList pad, PadMode mode, const Scalar& value = 0);
// Values and int64 indices, sorted along dim (stable).
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);

}  // namespace kiln
