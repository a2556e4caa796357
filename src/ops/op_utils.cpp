#include "ops/op_utils.h"

#include <algorithm>
#include <sstream>

#include "kiln/ops/pointwise.h"

namespace kiln::ops {

Shape broadcast_shapes(const char* op, std::span<const Tensor> inputs) {
  int64_t nd = 0;
  for (const Tensor& t : inputs) nd = std::max(nd, t.dim());
  Shape out(static_cast<size_t>(nd), 1);
  for (const Tensor& t : inputs) {
    for (int64_t d = 0; d < t.dim(); ++d) {
      int64_t od = nd - t.dim() + d, s = t.size(d);
      if (s == out[od] || s == 1) continue;
      if (out[od] == 1) {
        out[od] = s;
        continue;
      }
      std::ostringstream shapes;
      for (size_t i = 0; i < inputs.size(); ++i) shapes << (i ? ", " : "") << inputs[i].shape_str();
      throw ShapeError(detail::concat(op, ": shapes ", shapes.str(),
                                      " cannot be broadcast together (size ", s, " vs ", out[od],
                                      " at dim ", od, " of the result)"));
    }
  }
  checked_numel(out, op);  // [2^32, 1] and [1, 2^32] broadcast to more elements than int64 counts
  return out;
}

namespace {
// PyTorch's combine_categories: `higher` is the result of a more important tier.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}
}  // namespace

DType result_type(std::span<const Tensor> inputs) {
  std::optional<DType> dimmed, zero_dim, wrapped;
  auto add = [](std::optional<DType>& acc, DType dt) { acc = acc ? promote_types(*acc, dt) : dt; };
  for (const Tensor& t : inputs) {
    if (t.impl()->is_wrapped_number()) {
      // C++ numbers count by category: double -> default float, integer -> int64.
      add(wrapped, is_floating(t.dtype()) ? kDefaultFloat : t.dtype());
    } else if (t.dim() == 0) {
      add(zero_dim, t.dtype());
    } else {
      add(dimmed, t.dtype());
    }
  }
  return combine(combine(dimmed, zero_dim), wrapped).value_or(kDefaultFloat);
}

void check_wrapped_numbers(const char* op, std::span<const Tensor> inputs, DType dtype) {
  if (!is_integral(dtype)) return;
  for (const Tensor& t : inputs) {
    const TensorImpl& ti = *t.impl();
    // Wrapped numbers are made concrete (wrap_scalar), never pending.
    if (!ti.is_wrapped_number() || !ti.has_storage() || ti.is_pending()) continue;
    const char* p = static_cast<const char*>(ti.storage_if_concrete()->data()) +
                    ti.storage_offset() * itemsize(ti.dtype());
    Scalar v;
    KILN_DTYPE_SWITCH_ALL(ti.dtype(), op, [&]<typename T>() {
      v = std::is_same_v<T, bool> ? Scalar(static_cast<bool>(*reinterpret_cast<const T*>(p)))
          : std::is_floating_point_v<T>
              ? Scalar(static_cast<double>(*reinterpret_cast<const T*>(p)))
              : Scalar(static_cast<int64_t>(*reinterpret_cast<const T*>(p)));
    });
    check_scalar_fits(v, dtype, op);
  }
}

Tensor cast(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = make_tensor(t.sizes(), dtype);
  convert_into(out, t);
  return out;
}

SmallVector<int64_t, 6> reduction_dims(IntList dims, int64_t ndim, const char* op) {
  SmallVector<int64_t, 6> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i)
    KILN_CHECK(out[i] != out[i - 1], IndexError, op, ": dim ", out[i],
               " appears more than once in the list of dims ", dims);
  if (ndim == 0) out.clear();  // dim 0 / -1 of a 0-d tensor means the tensor itself
  return out;
}

std::string describe(const Tensor& t) {
  return detail::concat("tensor of shape ", t.shape_str(), " and dtype ", t.dtype());
}

Tensor unreduce(const Tensor& grad, IntList in_sizes, IntList dims, bool keepdim) {
  const int64_t nd = in_sizes.ssize();
  Tensor g = grad;
  if (!keepdim && nd > 0) {
    for (int64_t d : reduction_dims(dims, nd, "unreduce")) g = g.unsqueeze(d);
  }
  return g.expand(in_sizes);
}

bool is_contiguous_layout(const TensorMeta& m) {
  return m.storage_offset == 0 && (m.strides.empty() || m.strides == contiguous_strides(m.sizes));
}

int64_t reduced_count(IntList in_sizes, IntList dims) {
  int64_t n = 1;
  for (int64_t d : reduction_dims(dims, in_sizes.ssize(), "reduced_count"))
    n *= in_sizes.ssize() == 0 ? 1 : in_sizes[d];
  return n;
}

}  // namespace kiln::ops
