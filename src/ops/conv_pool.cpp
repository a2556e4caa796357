// Convolution and pooling over 1-, 2- and 3-d inputs, as composites of public ops: the input
// (padded) is made into its windows [N, C, out..., kernel...] (strided slices), which a matrix
// product with the weight (convolution) or a reduction (max / avg pooling) turns into the
// output. Adaptive pooling is separable: per spatial dim, a product with an averaging matrix
// (avg), or a gather of each output's window and a max over it (max). Autograd and
// kiln::compile see the ops they are made of; the windows' gradient flows back into the input
// through the slices, adding where windows overlap.
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/conv_onednn.h"
#include "ops/windows.h"

namespace kiln {

namespace {

using Dims = std::vector<int64_t>;

// A per-dim parameter for `dims` spatial dims, from one value or one per dim.
Dims per_dim(const char* op, const char* what, IntList v, int64_t dims) {
  KILN_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == dims, ValueError, op, ": ", what,
             " must have 1 or ", dims, " values, got ", v);
  Dims out(static_cast<size_t>(dims));
  for (int64_t d = 0; d < dims; ++d) out[static_cast<size_t>(d)] = v[v.size() == 1 ? 0 : d];
  return out;
}

// The geometry of a sliding window over the spatial dims of x [N, C, *]. `overhang`: padding
// past the explicit one on the high side that ceil_mode's last window reaches.
struct Window {
  Dims kernel, stride, padding, dilation, out, overhang;
  int64_t dims() const { return static_cast<int64_t>(kernel.size()); }
  bool padded() const {
    for (size_t d = 0; d < kernel.size(); ++d)
      if (padding[d] || overhang[d]) return true;
    return false;
  }
};

Window window_of(const char* op, const Tensor& x, int64_t dims, IntList kernel, IntList stride,
                 IntList padding, IntList dilation, bool ceil_mode = false) {
  Window w{per_dim(op, "kernel_size", kernel, dims),
           per_dim(op, stride.empty() ? "kernel_size" : "stride", stride.empty() ? kernel : stride,
                   dims),
           per_dim(op, "padding", padding, dims),
           per_dim(op, "dilation", dilation, dims),
           Dims(static_cast<size_t>(dims)),
           Dims(static_cast<size_t>(dims))};
  for (size_t d = 0; d < static_cast<size_t>(dims); ++d) {
    KILN_CHECK(
        w.kernel[d] > 0 && w.stride[d] > 0 && w.dilation[d] > 0 && w.padding[d] >= 0, ValueError,
        op,
        ": kernel_size, stride and dilation must be positive and padding >= 0, got kernel_size ",
        IntList(w.kernel), ", stride ", IntList(w.stride), ", padding ", IntList(w.padding),
        ", dilation ", IntList(w.dilation));
    const int64_t span = w.dilation[d] * (w.kernel[d] - 1) + 1;
    const int64_t size = x.size(2 + static_cast<int64_t>(d));
    const int64_t in = size + 2 * w.padding[d];
    KILN_CHECK(in >= span, ShapeError, op, ": the input ", x.shape_str(), " padded by ",
               IntList(w.padding), " is smaller than the kernel ", IntList(w.kernel), " (dilation ",
               IntList(w.dilation), ")");
    int64_t out = (in - span + (ceil_mode ? w.stride[d] - 1 : 0)) / w.stride[d] + 1;
    // (As PyTorch: ceil_mode's last window starts inside the input or its low padding.)
    if (ceil_mode && (out - 1) * w.stride[d] >= size + w.padding[d]) --out;
    w.out[d] = out;
    w.overhang[d] = std::max<int64_t>(0, (out - 1) * w.stride[d] + span - in);
  }
  return w;
}

// x [N, C, *] with `dims` spatial dims, or unbatched [C, *], as a batch; floating.
Tensor as_batch(const char* op, const Tensor& x, int64_t dims) {
  static const char* const kLayouts[] = {"", "[N, C, L] or [C, L]", "[N, C, H, W] or [C, H, W]",
                                         "[N, C, D, H, W] or [C, D, H, W]"};
  KILN_CHECK(x.dim() == dims + 1 || x.dim() == dims + 2, ShapeError, op, ": expected an input ",
             kLayouts[dims], ", got ", x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating input, got dtype ",
             x.dtype());
  return x.dim() == dims + 1 ? x.unsqueeze(0) : x;
}
Tensor unbatched_like(const Tensor& out, const Tensor& input, int64_t dims) {
  return input.dim() == dims + 1 ? out.squeeze(0) : out;
}

// A pooling window: as window_of, padding at most half the kernel (as PyTorch).
Window pool_window(const char* op, const Tensor& x, int64_t dims, IntList kernel, IntList stride,
                   IntList padding, IntList dilation, bool ceil_mode) {
  const Window w = window_of(op, x, dims, kernel, stride, padding, dilation, ceil_mode);
  for (size_t d = 0; d < w.kernel.size(); ++d)
    KILN_CHECK(2 * w.padding[d] <= w.kernel[d], ValueError, op,
               ": padding should be at most half the kernel size, got padding ", IntList(w.padding),
               " and kernel_size ", IntList(w.kernel));
  return w;
}

// pad()'s list for the spatial dims (the last dim's pair first): `low`/`high` per dim.
Dims pad_list(const Dims& low, const Dims& high) {
  Dims p;
  for (size_t d = low.size(); d-- > 0;) {
    p.push_back(low[d]);
    p.push_back(high[d]);
  }
  return p;
}

// The windows of x [N, C, *] padded with `fill` (and, past it, ceil_mode's overhang with
// `overhang_fill`): [N, C, out..., kernel...] (ops/windows.h: one kernel each way, so the
// gradient is one pass adding each window element back, not a slice, pad and sum per kernel
// position).
Tensor windows(const Tensor& x, const Window& w, double fill, double overhang_fill,
               bool channels_last = false) {
  return ops::unfold_windows(x, IntList(w.kernel), IntList(w.stride), IntList(w.padding),
                             IntList(w.dilation), IntList(w.overhang), fill, overhang_fill,
                             channels_last);
}

// Dims [first, first + count).
Dims range(int64_t first, int64_t count) {
  Dims r(static_cast<size_t>(count));
  std::iota(r.begin(), r.end(), first);
  return r;
}

Tensor conv_nd(const char* op, int64_t dims, const Tensor& input, const Tensor& weight,
               const std::optional<Tensor>& bias, IntList stride, IntList padding, IntList dilation,
               int64_t groups) {
  const Tensor x = as_batch(op, input, dims);
  KILN_CHECK(weight.dim() == dims + 2, ShapeError, op,
             ": expected a weight [out_channels, in_channels / groups, kernel...] of ", dims + 2,
             " dims, got ", weight.shape_str());
  KILN_CHECK(weight.dtype() == x.dtype(), DTypeError, op, ": the input is ", x.dtype(),
             " but the weight is ", weight.dtype());
  const int64_t channels = x.size(1), out_channels = weight.size(0);
  KILN_CHECK(groups > 0 && channels % groups == 0 && out_channels % groups == 0, ValueError, op,
             ": groups (", groups, ") must be positive and divide the input's channels (", channels,
             ") and the weight's out_channels (", out_channels, ")");
  KILN_CHECK(weight.size(1) * groups == channels, ShapeError, op, ": the input ", x.shape_str(),
             " has ", channels, " channels but the weight ", weight.shape_str(), " expects ",
             weight.size(1) * groups, " (in_channels / groups = ", weight.size(1), ", groups ",
             groups, ")");
  if (bias)
    KILN_CHECK(bias->dim() == 1 && bias->size(0) == out_channels && bias->dtype() == x.dtype(),
               ShapeError, op, ": expected a bias [", out_channels, "] of ", x.dtype(), ", got ",
               bias->dtype(), bias->shape_str());
  const Dims kernel(weight.sizes().begin() + 2, weight.sizes().end());
  const Window w = window_of(op, x, dims, IntList(kernel), stride, padding, dilation);
  if (ops::onednn_convolution(x.dtype()))
    return unbatched_like(ops::onednn_conv(x, weight, bias, IntList(w.stride), IntList(w.padding),
                                           IntList(w.dilation), groups),
                          input, dims);
  const int64_t n = x.size(0);
  int64_t positions = n, per_group = channels / groups;
  for (int64_t d = 0; d < dims; ++d) {
    positions *= w.out[static_cast<size_t>(d)];
    per_group *= kernel[static_cast<size_t>(d)];
  }
  // [groups, N * out..., Cg * kernel...] @ [groups, Cg * kernel..., Og] -> [groups, N*out..., Og]
  // The windows channels last ([N, out..., C, kernel...]) are the first operand's rows as they
  // stand (one group) or one transposing copy away.
  const Tensor rows =
      windows(x, w, 0.0, 0.0, /*channels_last=*/true).reshape({positions, groups, per_group});
  const Tensor cols =
      groups == 1 ? rows.reshape({1, positions, per_group}) : rows.transpose(0, 1).contiguous();
  // (Both operands contiguous: the layout BLAS sees, and so its rounding, is the same eagerly
  // and in a compiled backward, which takes saved values contiguous.)
  const Tensor kernels =
      weight.reshape({groups, out_channels / groups, per_group}).transpose(1, 2).contiguous();
  Dims out_sizes = {n};
  out_sizes.insert(out_sizes.end(), w.out.begin(), w.out.end());
  out_sizes.push_back(out_channels);
  Dims to_channels_first = {0, dims + 1};
  for (int64_t d : range(1, dims)) to_channels_first.push_back(d);
  Tensor out = matmul(cols, kernels)
                   .transpose(0, 1)
                   .reshape(out_sizes)
                   .permute(to_channels_first)
                   .contiguous();
  if (bias) {
    Dims b = {1, out_channels};
    b.resize(static_cast<size_t>(2 + dims), 1);
    out = out + bias->reshape(b);
  }
  return unbatched_like(out, input, dims);
}

// padding Same (stride 1: the output as large as the input, the extra padding on the high
// side when the total is odd, as PyTorch) or Valid (none).
Tensor conv_nd_named_padding(const char* op, int64_t dims, const Tensor& input,
                             const Tensor& weight, const std::optional<Tensor>& bias,
                             IntList stride, ConvPadding padding, IntList dilation,
                             int64_t groups) {
  if (padding == ConvPadding::Valid)
    return conv_nd(op, dims, input, weight, bias, stride, {0}, dilation, groups);
  for (int64_t s : per_dim(op, "stride", stride, dims))
    KILN_CHECK(s == 1, ValueError, op,
               ": ConvPadding::Same is not supported for strided convolutions (stride ", stride,
               ")");
  KILN_CHECK(weight.dim() == dims + 2, ShapeError, op,
             ": expected a weight [out_channels, in_channels / groups, kernel...] of ", dims + 2,
             " dims, got ", weight.shape_str());
  const Dims dil = per_dim(op, "dilation", dilation, dims);
  Dims low, high;
  bool symmetric = true;
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t total = dil[static_cast<size_t>(d)] * (weight.size(2 + d) - 1);
    low.push_back(total / 2);
    high.push_back(total - total / 2);
    symmetric = symmetric && low.back() == high.back();
  }
  if (symmetric)
    return conv_nd(op, dims, input, weight, bias, stride, IntList(low), dilation, groups);
  const Tensor x = as_batch(op, input, dims);
  return unbatched_like(conv_nd(op, dims, pad(x, pad_list(low, high), 0.0), weight, bias, stride,
                                {0}, dilation, groups),
                        input, dims);
}

// Transposed convolution (the gradient of conv_nd with respect to its input): the input
// dilated by the stride (zeros between its elements), padded by dilation (kernel - 1) - padding
// on each side (cropped where that is negative) and output_padding more on the high side, then
// convolved with stride 1 by the weight flipped along every spatial dim, in and out channels
// swapped within each group.
Tensor conv_transpose_nd(const char* op, int64_t dims, const Tensor& input, const Tensor& weight,
                         const std::optional<Tensor>& bias, IntList stride_list,
                         IntList padding_list, IntList output_padding_list, int64_t groups,
                         IntList dilation_list) {
  const Tensor x = as_batch(op, input, dims);
  KILN_CHECK(weight.dim() == dims + 2, ShapeError, op,
             ": expected a weight [in_channels, out_channels / groups, kernel...] of ", dims + 2,
             " dims, got ", weight.shape_str());
  KILN_CHECK(weight.dtype() == x.dtype(), DTypeError, op, ": the input is ", x.dtype(),
             " but the weight is ", weight.dtype());
  const int64_t channels = x.size(1);
  KILN_CHECK(groups > 0 && channels % groups == 0, ValueError, op, ": groups (", groups,
             ") must be positive and divide the input's channels (", channels, ")");
  KILN_CHECK(weight.size(0) == channels, ShapeError, op, ": the input ", x.shape_str(), " has ",
             channels, " channels but the weight ", weight.shape_str(), " expects ",
             weight.size(0));
  const int64_t out_channels = weight.size(1) * groups;
  if (bias)
    KILN_CHECK(bias->dim() == 1 && bias->size(0) == out_channels && bias->dtype() == x.dtype(),
               ShapeError, op, ": expected a bias [", out_channels, "] of ", x.dtype(), ", got ",
               bias->dtype(), bias->shape_str());
  const Dims stride = per_dim(op, "stride", stride_list, dims);
  const Dims padding = per_dim(op, "padding", padding_list, dims);
  const Dims output_padding = per_dim(op, "output_padding", output_padding_list, dims);
  const Dims dilation = per_dim(op, "dilation", dilation_list, dims);
  Tensor y = x;
  for (int64_t d = 0; d < dims; ++d) {
    const auto u = static_cast<size_t>(d);
    const int64_t k = weight.size(2 + d), in = x.size(2 + d);
    KILN_CHECK(stride[u] > 0 && dilation[u] > 0 && padding[u] >= 0 && output_padding[u] >= 0,
               ValueError, op,
               ": stride and dilation must be positive, padding and output_padding >= 0, got "
               "stride ",
               stride_list, ", padding ", padding_list, ", output_padding ", output_padding_list,
               ", dilation ", dilation_list);
    KILN_CHECK(output_padding[u] < stride[u] || output_padding[u] < dilation[u], ValueError, op,
               ": output_padding must be smaller than either stride or dilation, got "
               "output_padding ",
               output_padding_list, ", stride ", stride_list, ", dilation ", dilation_list);
    const int64_t out =
        (in - 1) * stride[u] - 2 * padding[u] + dilation[u] * (k - 1) + output_padding[u] + 1;
    KILN_CHECK(out > 0, ShapeError, op, ": the output would be empty (", out,
               " positions along spatial dim ", d, ") for the input ", x.shape_str());
    const int64_t dim = 2 + d;
    if (stride[u] > 1) {  // zeros between the elements: [.., in, s] with zeros after each
      Dims zeros_sizes(y.sizes().begin(), y.sizes().end());
      zeros_sizes.insert(zeros_sizes.begin() + dim + 1, stride[u] - 1);
      Dims merged(y.sizes().begin(), y.sizes().end());
      merged[static_cast<size_t>(dim)] = in * stride[u];
      y = cat({y.unsqueeze(dim + 1), zeros(IntList(zeros_sizes), y.dtype())}, dim + 1)
              .reshape(IntList(merged))
              .narrow(dim, 0, (in - 1) * stride[u] + 1);
    }
    const int64_t low = dilation[u] * (k - 1) - padding[u];
    const int64_t high = low + output_padding[u];
    // Negative padding crops.
    const int64_t crop_low = std::max<int64_t>(0, -low), crop_high = std::max<int64_t>(0, -high);
    if (crop_low || crop_high) y = y.narrow(dim, crop_low, y.size(dim) - crop_low - crop_high);
    if (low > 0 || high > 0) {
      Dims lo(static_cast<size_t>(dims), 0), hi(static_cast<size_t>(dims), 0);
      lo[u] = std::max<int64_t>(0, low);
      hi[u] = std::max<int64_t>(0, high);
      y = pad(y, pad_list(lo, hi), 0.0);
    }
  }
  // [Cin, Cout/g, k...] -> [Cout, Cin/g, k...], flipped.
  Dims grouped = {groups, channels / groups, weight.size(1)};
  grouped.insert(grouped.end(), weight.sizes().begin() + 2, weight.sizes().end());
  Dims swapped = {out_channels, channels / groups};
  swapped.insert(swapped.end(), weight.sizes().begin() + 2, weight.sizes().end());
  const Tensor w = flip(weight.reshape(IntList(grouped)).transpose(1, 2).reshape(IntList(swapped)),
                        IntList(range(2, dims)));
  return unbatched_like(conv_nd(op, dims, y, w, bias, {1}, {0}, dilation_list, groups), input,
                        dims);
}

// Max pooling as torch computes it: where each window's (first) maximum is, then the values
// gathered from the input's planes at those places, so that the gradient is one scatter-add of
// the output's gradient into the input (not a pass over every window element, as a max over
// the windows would differentiate to).
std::pair<Tensor, Tensor> max_pool_nd(const char* op, int64_t dims, const Tensor& input,
                                      IntList kernel_size, IntList stride, IntList padding,
                                      IntList dilation, bool ceil_mode) {
  const Tensor x = as_batch(op, input, dims);
  const Window w = pool_window(op, x, dims, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor index =
      ops::window_argmax(x.detach(), IntList(w.kernel), IntList(w.stride), IntList(w.padding),
                         IntList(w.dilation), IntList(w.overhang));
  const Tensor values = gather(x.flatten(2), 2, index.flatten(2)).reshape(index.sizes());
  return {unbatched_like(values, input, dims), unbatched_like(index, input, dims)};
}

Tensor avg_pool_nd(const char* op, int64_t dims, const Tensor& input, IntList kernel_size,
                   IntList stride, IntList padding, bool ceil_mode, bool count_include_pad,
                   std::optional<int64_t> divisor_override) {
  const Tensor x = as_batch(op, input, dims);
  const Window w = pool_window(op, x, dims, kernel_size, stride, padding, {1}, ceil_mode);
  const Dims window_dims = range(2 + dims, dims);
  const Tensor sums = sum(windows(x, w, 0.0, 0.0), IntList(window_dims));
  if (divisor_override) {
    KILN_CHECK(*divisor_override != 0, ValueError, op, ": divisor_override must not be zero");
    return unbatched_like(sums / static_cast<double>(*divisor_override), input, dims);
  }
  // Each window's divisor, as PyTorch: its elements inside the input (and, with
  // count_include_pad, the explicit padding), never ceil_mode's overhang.
  if (!w.padded()) {
    int64_t size = 1;
    for (int64_t k : w.kernel) size *= k;
    return unbatched_like(sums / static_cast<double>(size), input, dims);
  }
  Dims ones_sizes = {1, 1};
  for (int64_t d = 0; d < dims; ++d) ones_sizes.push_back(x.size(2 + d));
  const Tensor inside = ones(IntList(ones_sizes), x.dtype());
  const Tensor counts =
      sum(windows(inside, w, count_include_pad ? 1.0 : 0.0, 0.0), IntList(window_dims));
  return unbatched_like(sums / counts, input, dims);
}

Dims adaptive_sizes(const char* op, const Tensor& x, int64_t dims, IntList output_size) {
  const Dims out = per_dim(op, "output_size", output_size, dims);
  for (int64_t d = 0; d < dims; ++d) {
    KILN_CHECK(out[static_cast<size_t>(d)] > 0, ValueError, op,
               ": output_size must be positive, got ", output_size);
    KILN_CHECK(x.size(2 + d) > 0, ShapeError, op, ": the input ", x.shape_str(),
               " is empty along a spatial dim");
  }
  return out;
}

Tensor adaptive_avg_pool_nd(const char* op, int64_t dims, const Tensor& input,
                            IntList output_size) {
  const Tensor x = as_batch(op, input, dims);
  const Dims out = adaptive_sizes(op, x, dims, output_size);
  Tensor y = x;
  for (int64_t d = 0; d < dims; ++d) {
    // Along dim d: a product with the [in, out] matrix averaging each output's window.
    const int64_t in = x.size(2 + d), o = out[static_cast<size_t>(d)];
    std::vector<double> m(static_cast<size_t>(in * o), 0.0);
    for (int64_t i = 0; i < o; ++i) {
      const int64_t s = ops::adaptive_begin(i, in, o), e = ops::adaptive_end(i, in, o);
      for (int64_t j = s; j < e; ++j)
        m[static_cast<size_t>(j * o + i)] = 1.0 / static_cast<double>(e - s);
    }
    const Tensor averaging = tensor(m, {in, o}).to(x.dtype());
    y = matmul(y.transpose(2 + d, -1), averaging).transpose(2 + d, -1);
  }
  return unbatched_like(y.contiguous(), input, dims);
}

// As max pooling: where each cell's maximum is, then its value gathered from there (so the
// gradient goes to that one element, as PyTorch's).
std::pair<Tensor, Tensor> adaptive_max_pool_nd(const char* op, int64_t dims, const Tensor& input,
                                               IntList output_size) {
  const Tensor x = as_batch(op, input, dims);
  const Dims out = adaptive_sizes(op, x, dims, output_size);
  const Tensor index = ops::adaptive_window_argmax(x.detach(), IntList(out));
  const Tensor values = gather(x.flatten(2), 2, index.flatten(2)).reshape(index.sizes());
  return {unbatched_like(values, input, dims), unbatched_like(index, input, dims)};
}

}  // namespace

#define KILN_CONV_POOL(D)                                                                          \
  Tensor conv##D##d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,      \
                    IntList stride, IntList padding, IntList dilation, int64_t groups) {           \
    return conv_nd("conv" #D "d", D, x, weight, bias, stride, padding, dilation, groups);          \
  }                                                                                                \
  Tensor conv##D##d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,      \
                    IntList stride, ConvPadding padding, IntList dilation, int64_t groups) {       \
    return conv_nd_named_padding("conv" #D "d", D, x, weight, bias, stride, padding, dilation,     \
                                 groups);                                                          \
  }                                                                                                \
  Tensor max_pool##D##d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding,     \
                        IntList dilation, bool ceil_mode) {                                        \
    return max_pool_nd("max_pool" #D "d", D, x, kernel_size, stride, padding, dilation, ceil_mode) \
        .first;                                                                                    \
  }                                                                                                \
  std::tuple<Tensor, Tensor> max_pool##D##d_with_indices(const Tensor& x, IntList kernel_size,     \
                                                         IntList stride, IntList padding,          \
                                                         IntList dilation, bool ceil_mode) {       \
    return max_pool_nd("max_pool" #D "d", D, x, kernel_size, stride, padding, dilation,            \
                       ceil_mode);                                                                 \
  }                                                                                                \
  Tensor avg_pool##D##d(const Tensor& x, IntList kernel_size, IntList stride, IntList padding,     \
                        bool ceil_mode, bool count_include_pad,                                    \
                        std::optional<int64_t> divisor_override) {                                 \
    return avg_pool_nd("avg_pool" #D "d", D, x, kernel_size, stride, padding, ceil_mode,           \
                       count_include_pad, divisor_override);                                       \
  }                                                                                                \
  Tensor conv_transpose##D##d(const Tensor& x, const Tensor& weight,                               \
                              const std::optional<Tensor>& bias, IntList stride, IntList padding,  \
                              IntList output_padding, int64_t groups, IntList dilation) {          \
    return conv_transpose_nd("conv_transpose" #D "d", D, x, weight, bias, stride, padding,         \
                             output_padding, groups, dilation);                                    \
  }                                                                                                \
  Tensor adaptive_avg_pool##D##d(const Tensor& x, IntList output_size) {                           \
    return adaptive_avg_pool_nd("adaptive_avg_pool" #D "d", D, x, output_size);                    \
  }                                                                                                \
  Tensor adaptive_max_pool##D##d(const Tensor& x, IntList output_size) {                           \
    return adaptive_max_pool_nd("adaptive_max_pool" #D "d", D, x, output_size).first;              \
  }                                                                                                \
  std::tuple<Tensor, Tensor> adaptive_max_pool##D##d_with_indices(const Tensor& x,                 \
                                                                  IntList output_size) {           \
    return adaptive_max_pool_nd("adaptive_max_pool" #D "d", D, x, output_size);                    \
  }
KILN_CONV_POOL(1)
KILN_CONV_POOL(2)
KILN_CONV_POOL(3)
#undef KILN_CONV_POOL

// ---- Python-facing forms: torch.nn.functional's names, order and defaults
// (kiln/ops/function.h). Arguments Kiln does not implement are errors, never ignored. ----
namespace {
using Args = const FunctionArgs&;
ConvPadding named_padding(const std::string& padding) {
  KILN_CHECK(padding == "same" || padding == "valid", ValueError,
             "conv: padding must be \"same\", \"valid\" or sizes, not \"", padding, "\"");
  return padding == "same" ? ConvPadding::Same : ConvPadding::Valid;
}
// A missing optional list (a pool's stride=None): the C++ default, an empty list.
std::vector<int64_t> ints_or_empty(Args a, size_t k) {
  return a.has(k) ? a.ints(k) : std::vector<int64_t>{};
}
#define KILN_CONV_POOL_FUNCTIONS(D)                                                               \
  const FunctionDef& conv##D##d_function = register_function(                                     \
      {.schema = "conv" #D "d(Tensor input, Tensor weight, Tensor? bias=None, int[] stride=1, "   \
                 "int[] padding=0, int[] dilation=1, int groups=1) -> Tensor",                    \
       .doc = "A " #D "-d convolution (cross-correlation) with weight [O, C / groups, k...].",    \
       .call = [](Args a) -> FunctionResult {                                                     \
         return conv##D##d(a.tensor(0), a.tensor(1), a.opt_tensor(2), a.ints(3), a.ints(4),       \
                           a.ints(5), a.i(6));                                                    \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& conv##D##d_named_padding_function = register_function(                       \
      {.schema = "conv" #D "d(Tensor input, Tensor weight, Tensor? bias=None, int[] stride=1, "   \
                 "str padding=\"valid\", int[] dilation=1, int groups=1) -> Tensor",              \
       .doc = "padding \"same\" keeps the input's size (stride 1), \"valid\" pads nothing.",      \
       .call = [](Args a) -> FunctionResult {                                                     \
         return conv##D##d(a.tensor(0), a.tensor(1), a.opt_tensor(2), a.ints(3),                  \
                           named_padding(a.str(4)), a.ints(5), a.i(6));                           \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& conv_transpose##D##d_function = register_function(                           \
      {.schema = "conv_transpose" #D "d(Tensor input, Tensor weight, Tensor? bias=None, "         \
                 "int[] stride=1, int[] padding=0, int[] output_padding=0, int groups=1, "        \
                 "int[] dilation=1) -> Tensor",                                                   \
       .doc = "A " #D "-d transposed convolution with weight [C, O / groups, k...].",             \
       .call = [](Args a) -> FunctionResult {                                                     \
         return conv_transpose##D##d(a.tensor(0), a.tensor(1), a.opt_tensor(2), a.ints(3),        \
                                     a.ints(4), a.ints(5), a.i(6), a.ints(7));                    \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& max_pool##D##d_function = register_function(                                 \
      {.schema = "max_pool" #D "d(Tensor input, int[] kernel_size, int[]? stride=None, "          \
                 "int[] padding=0, int[] dilation=1, bool ceil_mode=False, "                      \
                 "bool return_indices=False) -> Tensor",                                          \
       .doc = "The maximum of each window (stride: the kernel size by default).",                 \
       .call = [](Args a) -> FunctionResult {                                                     \
         if (!a.b(6))                                                                             \
           return max_pool##D##d(a.tensor(0), a.ints(1), ints_or_empty(a, 2), a.ints(3),          \
                                 a.ints(4), a.b(5));                                              \
         auto [values, indices] = max_pool##D##d_with_indices(                                    \
             a.tensor(0), a.ints(1), ints_or_empty(a, 2), a.ints(3), a.ints(4), a.b(5));          \
         return std::vector<Tensor>{values, indices};                                             \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& avg_pool##D##d_function = register_function(                                 \
      {.schema = "avg_pool" #D "d(Tensor input, int[] kernel_size, int[]? stride=None, "          \
                 "int[] padding=0, bool ceil_mode=False, bool count_include_pad=True, "           \
                 "int? divisor_override=None) -> Tensor",                                         \
       .doc = "The mean of each window (stride: the kernel size by default).",                    \
       .call = [](Args a) -> FunctionResult {                                                     \
         return avg_pool##D##d(a.tensor(0), a.ints(1), ints_or_empty(a, 2), a.ints(3), a.b(4),    \
                               a.b(5), a.has(6) ? std::optional<int64_t>(a.i(6)) : std::nullopt); \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& adaptive_avg_pool##D##d_function = register_function(                        \
      {.schema = "adaptive_avg_pool" #D "d(Tensor input, int[] output_size) -> Tensor",           \
       .doc = "The mean over windows that split the input into output_size cells.",               \
       .call = [](Args a) -> FunctionResult {                                                     \
         return adaptive_avg_pool##D##d(a.tensor(0), a.ints(1));                                  \
       },                                                                                         \
       .module = "nn.functional"});                                                               \
  const FunctionDef& adaptive_max_pool##D##d_function = register_function(                        \
      {.schema = "adaptive_max_pool" #D "d(Tensor input, int[] output_size, "                     \
                 "bool return_indices=False) -> Tensor",                                          \
       .doc = "The maximum over windows that split the input into output_size cells.",            \
       .call = [](Args a) -> FunctionResult {                                                     \
         if (!a.b(2)) return adaptive_max_pool##D##d(a.tensor(0), a.ints(1));                     \
         auto [values, indices] = adaptive_max_pool##D##d_with_indices(a.tensor(0), a.ints(1));   \
         return std::vector<Tensor>{values, indices};                                             \
       },                                                                                         \
       .module = "nn.functional"});
KILN_CONV_POOL_FUNCTIONS(1)
KILN_CONV_POOL_FUNCTIONS(2)
KILN_CONV_POOL_FUNCTIONS(3)
#undef KILN_CONV_POOL_FUNCTIONS
}  // namespace

}  // namespace kiln
