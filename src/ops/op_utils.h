// Helpers shared by op definitions: broadcasting, type promotion, argument checks, and the
// small glue that turns a functional call into a dispatch.
#pragma once

#include <span>
#include <string>

#include "kiln/ops/op.h"

namespace kiln::ops {

// NumPy/PyTorch broadcasting of the inputs' shapes; ShapeError naming `op` and every shape.
Shape broadcast_shapes(const char* op, std::span<const Tensor> inputs);
// PyTorch's result_type: tensors with dims outrank 0-d tensors, which outrank wrapped C++
// numbers; a lower rank only matters when its category (bool < int < float) is higher.
DType result_type(std::span<const Tensor> inputs);
// Every wrapped C++ number among `inputs` (x + 2, where(c, x, 7), ...) must fit `dtype`, the
// op's computation dtype, when that is an integer dtype: check_scalar_fits, naming `op`.
void check_wrapped_numbers(const char* op, std::span<const Tensor> inputs, DType dtype);
// `t` converted to dtype (t itself when it already has it). For use inside kernels: it runs
// the conversion directly, not through dispatch.
Tensor cast(const Tensor& t, DType dtype);
// Writes src, broadcast to out's shape and converted to out's dtype, into out (a kernel).
void convert_into(const Tensor& out, const Tensor& src);
// Sorted, de-duplicated, wrapped dims; all dims when `dims` is empty.
SmallVector<int64_t, 6> reduction_dims(IntList dims, int64_t ndim, const char* op);
// "op: ... got tensor of shape [2, 3] and dtype float32"-style description.
std::string describe(const Tensor& t);

// ---- helpers for derivatives ----
// The gradient of a reduction over `dims` (empty = all) broadcast back to the input's shape
// `in_sizes`: the reduced dims are re-inserted (when !keepdim) and expanded.
Tensor unreduce(const Tensor& grad, IntList in_sizes, IntList dims, bool keepdim);
// Number of elements a reduction over `dims` (empty = all) of `in_sizes` combines.
int64_t reduced_count(IntList in_sizes, IntList dims);
// Whether `m` is laid out contiguously from offset 0 (empty strides, a meta function's output,
// count as contiguous). Exact: a dim of size 1 must have its contiguous stride too.
bool is_contiguous_layout(const TensorMeta& m);

// Fills meta slot 0 and returns 1 (the common single-output case).
inline int one_output(std::span<TensorMeta, kMaxOpOutputs> out, DType dtype, Shape sizes) {
  out[0] = TensorMeta(dtype, std::move(sizes));
  return 1;
}

// Shorthands for calling dispatch from the functional API.
inline Tensor call(const OpDef& op, std::initializer_list<Tensor> inputs, Attrs attrs = {}) {
  return dispatch1(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}
inline Tensor& call_into(Tensor& out, const OpDef& op, std::initializer_list<Tensor> inputs,
                         Attrs attrs = {}) {
  return dispatch_into(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs, out);
}

// Optional<Scalar> as an attribute (monostate when absent).
inline AttrValue opt_attr(const std::optional<Scalar>& s) {
  return s ? AttrValue(*s) : AttrValue(std::monostate{});
}
inline AttrValue ints_attr(IntList l) { return AttrValue(l.vec()); }

}  // namespace kiln::ops
