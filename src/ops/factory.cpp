// Factories. `full` and `arange`-style ops go through dispatch (kind Factory) so that a
// captured graph can record them as nodes with their arguments as constants.
#include "kiln/ops/factory.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/ops/pointwise.h"
#include "ops/kernels/loops.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {

void fill_tensor(const Tensor& out, const Scalar& value);  // pointwise_ternary.cpp

namespace {
// full: attrs [size, value, dtype]
int full_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  checked_numel(c.attrs.ints(0), "full");
  check_scalar_fits(c.attrs.scalar(1), c.attrs.dtype(2), "full");
  return one_output(out, c.attrs.dtype(2), Shape(c.attrs.ints(0)));
}
void full_kernel(const OpCall& c, std::span<Tensor> outs) {
  fill_tensor(outs[0], c.attrs.scalar(1));
}

// arange: attrs [start, end, step, dtype]; linspace shares the kernel (value = start + i*step).
int64_t arange_length(const Scalar& start, const Scalar& end, const Scalar& step) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, ValueError, "arange: step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), ValueError, "arange: start (", start,
             ") and end (", end, ") must be finite");
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), ValueError,
             "arange: upper bound and step are inconsistent (start ", start, ", end ", end,
             ", step ", step, ")");
  if (start.is_integral() && end.is_integral() && step.is_integral()) {
    // Exact in uint64 for any int64 bounds (|end - start| < 2^64, |step| <= 2^63).
    const int64_t a = start.to_int(), b = end.to_int(), k = step.to_int();
    const uint64_t span = k > 0 ? static_cast<uint64_t>(b) - static_cast<uint64_t>(a)
                                : static_cast<uint64_t>(a) - static_cast<uint64_t>(b);
    const uint64_t mag = k > 0 ? static_cast<uint64_t>(k) : 0 - static_cast<uint64_t>(k);
    const uint64_t n = span == 0 ? 0 : (span - 1) / mag + 1;
    KILN_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), ValueError,
               "arange: the number of elements from ", start, " to ", end, " by ", step,
               " overflows int64");
    return static_cast<int64_t>(n);
  }
  const double n = std::ceil((e - s) / st);
  KILN_CHECK(n < 0x1p63, ValueError, "arange: the number of elements from ", start, " to ", end,
             " by ", step, " overflows int64");
  return static_cast<int64_t>(n);
}
int arange_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.attrs.dtype(3) != DType::Bool, DTypeError, "arange: dtype bool is not supported");
  int64_t n = arange_length(c.attrs.scalar(0), c.attrs.scalar(1), c.attrs.scalar(2));
  return one_output(out, c.attrs.dtype(3), Shape{n});
}
void arange_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  const Scalar start = c.attrs.scalar(0), step = c.attrs.scalar(2);
  KILN_DTYPE_SWITCH_NUMERIC(out.dtype(), "arange", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    if (start.is_integral() && step.is_integral()) {
      int64_t s = start.to_int(), k = step.to_int();
      for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<T>(s + i * k);
    } else {
      double s = start.to_double(), k = step.to_double();
      for (int64_t i = 0; i < out.numel(); ++i)
        p[i] = static_cast<T>(s + static_cast<double>(i) * k);
    }
  });
}
// linspace: attrs [start, end, steps, dtype]; symmetric from both ends as PyTorch does.
int linspace_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.attrs.i(2) >= 0, ValueError, "linspace: number of steps must be non-negative, got ",
             c.attrs.i(2));
  KILN_CHECK(c.attrs.dtype(3) != DType::Bool, DTypeError, "linspace: dtype bool is not supported");
  return one_output(out, c.attrs.dtype(3), Shape{c.attrs.i(2)});
}
void linspace_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  const double a = c.attrs.f(0), b = c.attrs.f(1);
  const int64_t n = c.attrs.i(2);
  const double step = n > 1 ? (b - a) / static_cast<double>(n - 1) : 0.0;
  KILN_DTYPE_SWITCH_NUMERIC(out.dtype(), "linspace", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    const int64_t half = n / 2;
    for (int64_t i = 0; i < n; ++i) {
      // (A single step is `start`, as in PyTorch.)
      double v = i < half || n == 1 ? a + step * static_cast<double>(i)
                                    : b - step * static_cast<double>(n - 1 - i);
      p[i] = static_cast<T>(v);
    }
  });
}
// eye: attrs [n, m, dtype]
int eye_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.attrs.i(0) >= 0 && c.attrs.i(1) >= 0, ValueError, "eye: n (", c.attrs.i(0),
             ") and m (", c.attrs.i(1), ") must be non-negative");
  return one_output(out, c.attrs.dtype(2), Shape{c.attrs.i(0), c.attrs.i(1)});
}
void eye_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  fill_tensor(out, 0);
  const int64_t n = c.attrs.i(0), m = c.attrs.i(1);
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "eye", [&]<typename T>() {
    T* p = out.data_ptr<T>();
    for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = T(1);
  });
}
}  // namespace

const OpDef& full_op =
    register_op({.name = "full",
                 .schema = "full(int[] size, Scalar fill_value, ScalarType dtype) -> Tensor",
                 .kind = OpKind::Factory,
                 .meta = full_meta,
                 .kernel = full_kernel,
                 .internal = true});
const OpDef& arange_op = register_op(
    {.name = "arange",
     .schema = "arange(Scalar start, Scalar end, Scalar step, ScalarType dtype) -> Tensor",
     .kind = OpKind::Factory,
     .meta = arange_meta,
     .kernel = arange_kernel,
     .internal = true});
const OpDef& linspace_op = register_op(
    {.name = "linspace",
     .schema = "linspace(float start, float end, int steps, ScalarType dtype) -> Tensor",
     .kind = OpKind::Factory,
     .meta = linspace_meta,
     .kernel = linspace_kernel,
     .internal = true});
const OpDef& eye_op = register_op({.name = "eye",
                                   .schema = "eye(int n, int m, ScalarType dtype) -> Tensor",
                                   .kind = OpKind::Factory,
                                   .meta = eye_meta,
                                   .kernel = eye_kernel,
                                   .internal = true});

}  // namespace ops

Tensor empty(IntList sizes, DType dtype) { return make_tensor(sizes, dtype); }
Tensor full(IntList sizes, const Scalar& value, std::optional<DType> dtype) {
  DType dt = dtype.value_or(value.is_floating() ? kDefaultFloat : value.dtype());
  return ops::call(ops::full_op, {}, {ops::ints_attr(sizes), value, dt});
}
// zeros and ones check their sizes themselves, so that an error names what the user called.
Tensor zeros(IntList sizes, DType dtype) {
  checked_numel(sizes, "zeros");
  return full(sizes, 0, dtype);
}
Tensor ones(IntList sizes, DType dtype) {
  checked_numel(sizes, "ones");
  return full(sizes, 1, dtype);
}
Tensor scalar_tensor(const Scalar& value, std::optional<DType> dtype) {
  return full({}, value, dtype);
}
Tensor empty_like(const Tensor& t, std::optional<DType> dtype) {
  return empty(t.sizes(), dtype.value_or(t.dtype()));
}
Tensor zeros_like(const Tensor& t, std::optional<DType> dtype) {
  return zeros(t.sizes(), dtype.value_or(t.dtype()));
}
Tensor ones_like(const Tensor& t, std::optional<DType> dtype) {
  return ones(t.sizes(), dtype.value_or(t.dtype()));
}
Tensor full_like(const Tensor& t, const Scalar& value, std::optional<DType> dtype) {
  return full(t.sizes(), value, dtype.value_or(t.dtype()));
}

Tensor arange(const Scalar& end, std::optional<DType> dtype) { return arange(0, end, 1, dtype); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step,
              std::optional<DType> dtype) {
  bool all_int = start.is_integral() && end.is_integral() && step.is_integral();
  DType dt = dtype.value_or(all_int ? DType::Int64 : kDefaultFloat);
  return ops::call(ops::arange_op, {}, {start, end, step, dt});
}
Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  return ops::call(ops::linspace_op, {}, {start, end, steps, dtype});
}
Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  return ops::call(ops::eye_op, {}, {n, m.value_or(n), dtype});
}

Tensor from_blob(const void* data, IntList sizes, DType dtype) {
  Tensor t = make_tensor(sizes, dtype);
  if (t.numel() > 0) {
    KILN_CHECK(data != nullptr, ValueError, "from_blob: data is null for a tensor of shape ",
               sizes);
    std::memcpy(t.data_ptr(), data, static_cast<size_t>(t.numel() * itemsize(dtype)));
  }
  return t;
}

template <typename T>
Tensor tensor(const std::vector<T>& values, IntList sizes) {
  int64_t n = checked_numel(sizes, "tensor");
  KILN_CHECK(n == static_cast<int64_t>(values.size()), ShapeError, "tensor: ", values.size(),
             " values cannot fill shape ", sizes, " (", n, " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_blob(bytes.data(), sizes, DType::Bool);
  } else {
    return from_blob(values.data(), sizes, dtype_v<T>);
  }
}
template <typename T>
Tensor tensor(const std::vector<T>& values) {
  return tensor(values, {static_cast<int64_t>(values.size())});
}
#define KILN_INSTANTIATE(T)                                  \
  template Tensor tensor<T>(const std::vector<T>&, IntList); \
  template Tensor tensor<T>(const std::vector<T>&);
KILN_INSTANTIATE(bool)
KILN_INSTANTIATE(int32_t)
KILN_INSTANTIATE(int64_t)
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
#undef KILN_INSTANTIATE

Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return to_dtype(tensor(std::vector<double>(values)), dtype);
}
Tensor tensor(std::initializer_list<int> values, DType dtype) {
  return to_dtype(tensor(std::vector<int64_t>(values.begin(), values.end())), dtype);
}

}  // namespace kiln
