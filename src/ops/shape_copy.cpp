// Ops that rearrange elements into a new tensor: tril, triu, repeat, flip, roll, pad. Most are
// one strided copy (or a few) between views of the input and of the output.
#include <algorithm>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/reduction.h"
#include "ops/indexing_utils.h"

namespace kiln {
namespace ops {

void fill_tensor(const Tensor& out, const Scalar& value);  // pointwise_ternary.cpp

namespace {

// ---- tril / triu: inputs [x (>= 2-d)]; attrs [diagonal] ----
int triangle_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.in(0).dim() >= 2, ShapeError, c.op.name,
             ": input must have at least 2 dimensions, got shape ", c.in(0).shape_str());
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
// Keeps x[..., i, j] where j - i <= diagonal (Lower) or j - i >= diagonal (upper); zero elsewhere.
template <bool Lower>
void triangle_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const int64_t last = x.dim() - 1, cols = x.size(last), xs = x.stride(last);
  // Beyond +-(rows + cols) every diagonal keeps all or nothing; clamping avoids overflow.
  const int64_t span = x.size(last - 1) + cols + 1;
  const int64_t diagonal = std::clamp<int64_t>(c.attrs.i(0), -span, span);
  KILN_DTYPE_SWITCH_ALL(x.dtype(), c.op.name.data(), [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* op = out.data_ptr<T>();
    kernels::parallel_range(
        num_lines(x.sizes(), last), line_grain(cols), [&](int64_t b, int64_t e) {
          for_each_line<2>(x.sizes(), last, {x.strides(), out.strides()}, b, e,
                           [&](const std::array<int64_t, 2>& off, const Shape& coords) {
                             const int64_t row = coords[last - 1];
                             // Columns [keep_lo, keep_hi) are kept.
                             int64_t keep_lo = Lower ? 0 : row + diagonal;
                             int64_t keep_hi = Lower ? row + diagonal + 1 : cols;
                             keep_lo = std::clamp<int64_t>(keep_lo, 0, cols);
                             keep_hi = std::clamp<int64_t>(keep_hi, keep_lo, cols);
                             T* o = op + off[1];
                             for (int64_t j = 0; j < keep_lo; ++j) o[j] = T(0);
                             for (int64_t j = keep_lo; j < keep_hi; ++j) o[j] = xp[off[0] + j * xs];
                             for (int64_t j = keep_hi; j < cols; ++j) o[j] = T(0);
                           });
        });
  });
}
const OpDef& tril_op =
    register_op({.name = "tril",
                 .schema = "tril(Tensor self, int diagonal=0) -> Tensor",
                 .kind = OpKind::Layout,
                 .meta = triangle_meta,
                 .kernel = triangle_kernel<true>,
                 .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
                   g[0] = tril(c.grad(), c.attrs.i(0));
                 }}});
const OpDef& triu_op =
    register_op({.name = "triu",
                 .schema = "triu(Tensor self, int diagonal=0) -> Tensor",
                 .kind = OpKind::Layout,
                 .meta = triangle_meta,
                 .kernel = triangle_kernel<false>,
                 .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
                   g[0] = triu(c.grad(), c.attrs.i(0));
                 }}});

// ---- repeat: inputs [x]; attrs [repeats] ----
Shape repeat_sizes(const Tensor& x, IntList repeats) {
  KILN_CHECK(repeats.ssize() >= x.dim(), ShapeError, "repeat: the number of repeats (",
             repeats.size(), ") cannot be smaller than the number of dims of the tensor (shape ",
             x.shape_str(), ")");
  const int64_t lead = repeats.ssize() - x.dim();
  Shape sizes;
  for (int64_t d = 0; d < repeats.ssize(); ++d) {
    KILN_CHECK(repeats[d] >= 0, ValueError, "repeat: repeats must be non-negative, got ", repeats);
    sizes.push_back(
        checked_mul(repeats[d], d < lead ? 1 : x.size(d - lead), "repeat", "a size of the result"));
  }
  checked_numel(sizes, "repeat");
  return sizes;
}
int repeat_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.in(0).dtype(), repeat_sizes(c.in(0), c.attrs.ints(0)));
}
// The output seen as [r0, s0, r1, s1, ...] (repeat count, input size per dim) receives the
// input broadcast along the r dims: a single strided copy.
void repeat_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const auto& repeats = c.attrs.ints(0);
  const int64_t lead = static_cast<int64_t>(repeats.size()) - x.dim();
  Shape sizes, out_strides, in_strides;
  for (int64_t d = 0; d < out.dim(); ++d) {
    const int64_t s = d < lead ? 1 : x.size(d - lead);
    sizes.push_back(repeats[d]);
    sizes.push_back(s);
    out_strides.push_back(s * out.stride(d));
    out_strides.push_back(out.stride(d));
    in_strides.push_back(0);
    in_strides.push_back(d < lead ? 0 : x.stride(d - lead));
  }
  strided_copy(strided_view(out, sizes, out_strides, out.storage_offset()),
               strided_view(x, sizes, in_strides, x.storage_offset()));
}
// The gradient seen as [r0, s0, r1, s1, ...] (as the kernel sees the output) summed over the
// repeat dims.
void repeat_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const auto& repeats = c.attrs.ints(0);
  const Shape& in = c.input_meta[0].sizes;
  const int64_t lead = static_cast<int64_t>(repeats.size()) - static_cast<int64_t>(in.size());
  std::vector<int64_t> split, dims;
  for (int64_t d = 0; d < static_cast<int64_t>(repeats.size()); ++d) {
    split.push_back(repeats[d]);
    split.push_back(d < lead ? 1 : in[d - lead]);
    dims.push_back(2 * d);
  }
  g[0] = sum(c.grad().reshape(split), dims).reshape(in);
}
const OpDef& repeat_op = register_op({.name = "repeat",
                                      .schema = "repeat(Tensor self, int[] repeats) -> Tensor",
                                      .kind = OpKind::Layout,
                                      .meta = repeat_meta,
                                      .kernel = repeat_kernel,
                                      .derivative = {.fn = repeat_derivative}});

// ---- flip: inputs [x]; attrs [dims] ----
int flip_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  if (!c.attrs.ints(0).empty()) reduction_dims(c.attrs.ints(0), c.in(0).dim(), "flip");
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
// A copy of the input seen with negated strides along the flipped dims.
void flip_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  if (!c.attrs.ints(0).empty()) {
    for (int64_t d : reduction_dims(c.attrs.ints(0), x.dim(), "flip")) {
      offset += (x.size(d) - 1) * strides[d];
      strides[d] = -strides[d];
    }
  }
  strided_copy(outs[0], strided_view(x, x.sizes(), strides, offset));
}
const OpDef& flip_op =
    register_op({.name = "flip",
                 .schema = "flip(Tensor self, int[] dims) -> Tensor",
                 .kind = OpKind::Layout,
                 .meta = flip_meta,
                 .kernel = flip_kernel,
                 .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
                   g[0] = flip(c.grad(), c.attrs.ints(0));
                 }}});

// ---- roll: inputs [x]; attrs [shifts, dims] (as many of each, >= 1) ----
// The net shift of each dim in [0, size) (a dim listed twice rolls twice, as PyTorch).
Shape roll_shifts(const Tensor& x, IntList shifts, IntList dims) {
  KILN_CHECK(!shifts.empty() && shifts.size() == dims.size(), ShapeError,
             "roll: shifts and dims must have the same (non-zero) length, got shifts ", shifts,
             " and dims ", dims);
  Shape net(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    if (n > 0) net[d] = ((net[d] + shifts[i] % n) % n + n) % n;
  }
  return net;
}
int roll_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  roll_shifts(c.in(0), c.attrs.ints(0), c.attrs.ints(1));
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
// out[(i + s) % n] = x[i] along each rolled dim: each rolled dim splits into two blocks
// (x[0, n-s) -> out[s, n) and x[n-s, n) -> out[0, s)), so k rolled dims are 2^k block copies.
void roll_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (x.numel() == 0) return;
  if (x.dim() == 0) return strided_copy(out, x);
  const Shape net = roll_shifts(x, c.attrs.ints(0), c.attrs.ints(1));
  std::vector<int64_t> rolled;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (net[d] != 0) rolled.push_back(d);
  for (uint64_t mask = 0; mask < (uint64_t{1} << rolled.size()); ++mask) {
    Shape sizes = x.sizes();
    int64_t x_off = x.storage_offset(), o_off = out.storage_offset();
    for (size_t k = 0; k < rolled.size(); ++k) {
      const int64_t d = rolled[k], n = x.size(d), s = net[d];
      if (mask >> k & 1) {  // the tail of x wraps to the front of out
        sizes[d] = s;
        x_off += (n - s) * x.stride(d);
      } else {
        sizes[d] = n - s;
        o_off += s * out.stride(d);
      }
    }
    strided_copy(strided_view(out, sizes, out.strides(), o_off),
                 strided_view(x, sizes, x.strides(), x_off));
  }
}
const OpDef& roll_op =
    register_op({.name = "roll",
                 .schema = "roll(Tensor self, int[] shifts, int[] dims) -> Tensor",
                 .kind = OpKind::Layout,
                 .meta = roll_meta,
                 .kernel = roll_kernel,
                 // rolled back by the opposite shifts
                 .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
                   std::vector<int64_t> back = c.attrs.ints(0);
                   for (int64_t& s : back) s = -s;
                   g[0] = roll(c.grad(), back, c.attrs.ints(1));
                 }}});

// ---- pad (constant): inputs [x]; attrs [pad, value] ----
// pad holds (left, right) pairs from the last dim backwards; negative amounts crop.
Shape padded_sizes(const Tensor& x, IntList pad) {
  KILN_CHECK(pad.size() % 2 == 0, ValueError, "pad: padding length must be divisible by 2, got ",
             pad);
  KILN_CHECK(pad.ssize() / 2 <= x.dim(), ValueError, "pad: padding ", pad, " pads ", pad.size() / 2,
             " dims but the input has only ", x.dim(), " (shape ", x.shape_str(), ")");
  Shape sizes = x.sizes();
  for (int64_t i = 0; i < pad.ssize() / 2; ++i) {
    const int64_t d = x.dim() - 1 - i;
    sizes[d] = checked_add(checked_add(x.size(d), pad[2 * i], "pad", "a padded size"),
                           pad[2 * i + 1], "pad", "a padded size");
    KILN_CHECK(sizes[d] >= 0, ValueError, "pad: the input size ", x.size(d), " at dim ", d,
               " plus padding ", pad[2 * i], " and ", pad[2 * i + 1],
               " gives a negative output size ", sizes[d]);
  }
  return sizes;
}
int pad_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  Shape sizes = padded_sizes(c.in(0), c.attrs.ints(0));
  checked_numel(sizes, "pad");
  return one_output(out, c.in(0).dtype(), std::move(sizes));
}
// Fills the border with the value, then copies the (possibly cropped) input into the interior.
void pad_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  const auto& pad = c.attrs.ints(0);
  Shape sizes = x.sizes();
  int64_t x_off = x.storage_offset(), o_off = out.storage_offset();
  bool border = false;
  for (int64_t i = 0; i < static_cast<int64_t>(pad.size()) / 2; ++i) {
    const int64_t d = x.dim() - 1 - i, left = pad[2 * i], right = pad[2 * i + 1];
    border = border || left > 0 || right > 0;
    sizes[d] = out.size(d) - std::max<int64_t>(left, 0) - std::max<int64_t>(right, 0);
    sizes[d] = std::max<int64_t>(sizes[d], 0);
    x_off += std::max<int64_t>(-left, 0) * x.stride(d);
    o_off += std::max<int64_t>(left, 0) * out.stride(d);
  }
  if (border) {
    // Only the border is filled (the copy writes the rest): per padded dim, outermost first, the
    // slabs before and after the copied range, within the ranges of the dims handled before
    // (so no element is written twice).
    Shape start(static_cast<size_t>(out.dim()), 0), extent = out.sizes();
    auto fill_slab = [&](int64_t d, int64_t begin, int64_t length) {
      if (length <= 0) return;
      Shape slab = extent;
      slab[d] = length;
      int64_t offset = out.storage_offset() + begin * out.stride(d);
      for (int64_t e = 0; e < out.dim(); ++e)
        if (e != d) offset += start[e] * out.stride(e);
      fill_tensor(strided_view(out, slab, out.strides(), offset), c.attrs.scalar(1));
    };
    for (int64_t d = 0; d < out.dim(); ++d) {
      const int64_t i = out.dim() - 1 - d;  // its (left, right) pair
      if (i >= static_cast<int64_t>(pad.size()) / 2) continue;
      const int64_t left = std::max<int64_t>(pad[2 * i], 0);
      fill_slab(d, 0, left);
      fill_slab(d, left + sizes[d], out.size(d) - left - sizes[d]);
      start[d] = left;
      extent[d] = sizes[d];
    }
  }
  if (checked_numel(sizes, "pad") == 0) return;
  strided_copy(strided_view(out, sizes, out.strides(), o_off),
               strided_view(x, sizes, x.strides(), x_off));
}
const OpDef& pad_op =
    register_op({.name = "pad",
                 .schema = "pad(Tensor self, int[] pad, Scalar value=0) -> Tensor",
                 .kind = OpKind::Layout,
                 .meta = pad_meta,
                 .kernel = pad_kernel,
                 // the opposite padding crops the border off the gradient
                 // (and pads with zeros where the input was cropped)
                 .derivative = {.fn = [](const BackwardCall& c, std::span<Tensor> g) {
                   std::vector<int64_t> back = c.attrs.ints(0);
                   for (int64_t& p : back) p = -p;
                   g[0] = pad(c.grad(), back, 0);
                 }}});

}  // namespace
}  // namespace ops

Tensor tril(const Tensor& x, int64_t diagonal) { return ops::call(ops::tril_op, {x}, {diagonal}); }
Tensor triu(const Tensor& x, int64_t diagonal) { return ops::call(ops::triu_op, {x}, {diagonal}); }
Tensor repeat(const Tensor& x, IntList repeats) {
  return ops::call(ops::repeat_op, {x}, {ops::ints_attr(repeats)});
}
Tensor flip(const Tensor& x, IntList dims) {
  return ops::call(ops::flip_op, {x}, {ops::ints_attr(dims)});
}
Tensor roll(const Tensor& x, IntList shifts, IntList dims) {
  if (dims.empty()) {
    // Rolls the flattened tensor, as PyTorch.
    KILN_CHECK(shifts.size() == 1, ShapeError,
               "roll: without dims, shifts must hold exactly one value, got ", shifts);
    if (x.dim() == 0)
      return ops::call(ops::roll_op, {x}, {ops::ints_attr(shifts), std::vector<int64_t>{0}});
    Tensor flat = x.reshape({-1});
    return ops::call(ops::roll_op, {flat}, {ops::ints_attr(shifts), std::vector<int64_t>{0}})
        .view(x.sizes());
  }
  return ops::call(ops::roll_op, {x}, {ops::ints_attr(shifts), ops::ints_attr(dims)});
}
Tensor pad(const Tensor& x, IntList pad, const Scalar& value) {
  return ops::call(ops::pad_op, {x}, {ops::ints_attr(pad), value});
}

namespace {
const char* pad_mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "?";
}
// Where each element of a dim of `size` padded by (left, right) is read from.
std::vector<int64_t> padded_positions(PadMode mode, int64_t size, int64_t left, int64_t right) {
  std::vector<int64_t> at;
  at.reserve(static_cast<size_t>(size + left + right));
  for (int64_t p = -left; p < size + right; ++p) {
    int64_t q = p;
    if (mode == PadMode::Reflect)
      q = p < 0 ? -p : p >= size ? 2 * (size - 1) - p : p;
    else if (mode == PadMode::Replicate)
      q = std::clamp<int64_t>(p, 0, size - 1);
    else
      q = (p % size + size) % size;
    at.push_back(q);
  }
  return at;
}
}  // namespace

Tensor pad(const Tensor& x, IntList pad_list, PadMode mode, const Scalar& value) {
  if (mode == PadMode::Constant) return pad(x, pad_list, value);
  const char* name = pad_mode_name(mode);
  KILN_CHECK(pad_list.size() % 2 == 0 && static_cast<int64_t>(pad_list.size()) <= 2 * x.dim(),
             ValueError, "pad(mode=\"", name, "\"): expected (left, right) pairs for at most ",
             x.dim(), " dims of ", x.shape_str(), ", got ", pad_list);
  Tensor y = x;
  for (size_t i = 0; i < pad_list.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i), size = x.size(d);
    const int64_t left = pad_list[2 * i], right = pad_list[2 * i + 1];
    KILN_CHECK(left >= 0 && right >= 0, ValueError, "pad(mode=\"", name,
               "\"): pads must be >= 0, got ", pad_list);
    if (left == 0 && right == 0) continue;
    KILN_CHECK(mode != PadMode::Reflect || (left < size && right < size), ValueError,
               "pad(mode=\"reflect\"): each pad must be smaller than its dim, got (", left, ", ",
               right, ") for dim ", d, " of size ", size, " in ", x.shape_str());
    KILN_CHECK(mode != PadMode::Circular || (left <= size && right <= size), ValueError,
               "pad(mode=\"circular\"): each pad must be at most its dim, got (", left, ", ", right,
               ") for dim ", d, " of size ", size, " in ", x.shape_str());
    KILN_CHECK(size > 0, ValueError, "pad(mode=\"", name, "\"): dim ", d, " of ", x.shape_str(),
               " is empty: there is nothing to repeat");
    y = index_select(y, d, tensor(padded_positions(mode, size, left, right)));
  }
  return y;
}

namespace {
PadMode pad_mode_of(const std::string& mode) {
  for (PadMode m : {PadMode::Constant, PadMode::Reflect, PadMode::Replicate, PadMode::Circular})
    if (mode == pad_mode_name(m)) return m;
  throw ValueError(
      "pad: mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", "
      "not \"" +
      mode + "\"");
}
const FunctionDef& pad_function = register_function(
    {.schema = "pad(Tensor input, int[] pad, str mode=\"constant\", Scalar? value=None) -> Tensor",
     .doc = "Pads the last dims by (left, right) pairs, the last dim's first: with a value "
            "(constant) or by reflecting, replicating or wrapping the edges.",
     .call = [](const FunctionArgs& a) -> FunctionResult {
       const PadMode mode = pad_mode_of(a.str(2));
       KILN_CHECK(!a.has(3) || mode == PadMode::Constant, ValueError,
                  "pad: a value is only taken by mode \"constant\", not \"", a.str(2), "\"");
       return pad(a.tensor(0), a.ints(1), mode, a.has(3) ? a.scalar(3) : Scalar(0));
     },
     .module = "nn.functional"});
}  // namespace

}  // namespace kiln
