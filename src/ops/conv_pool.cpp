// Convolution and pooling over 2-d images, as composites of public ops: the input (padded) is
// viewed as its windows [N, C, OH, OW, kh, kw] (as_strided), which a matrix product with the
// weight (conv2d) or a reduction (max / avg pooling) turns into the output. Autograd and
// kiln::compile see the ops they are made of; the windows' gradient scatters back into the
// input (as_strided's derivative), adding where windows overlap.
#include <array>
#include <cmath>
#include <limits>

#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln {

namespace {

IntList il(const std::array<int64_t, 2>& a) { return IntList(a.data(), a.size()); }

// A pair of per-dim parameters (height, width) from one value or two.
std::array<int64_t, 2> pair_of(const char* op, const char* what, IntList v) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, ValueError, op, ": ", what,
             " must have 1 or 2 values, got ", v);
  return {v[0], v[v.size() - 1]};
}

// The geometry of a 2-d sliding window over x [N, C, H, W].
struct Window {
  std::array<int64_t, 2> kernel, stride, padding, dilation, out;
};

Window window_of(const char* op, const Tensor& x, IntList kernel, IntList stride, IntList padding,
                 IntList dilation) {
  Window w{pair_of(op, "kernel_size", kernel),
           stride.empty() ? pair_of(op, "kernel_size", kernel) : pair_of(op, "stride", stride),
           pair_of(op, "padding", padding),
           pair_of(op, "dilation", dilation),
           {}};
  for (int d = 0; d < 2; ++d) {
    KILN_CHECK(
        w.kernel[d] > 0 && w.stride[d] > 0 && w.dilation[d] > 0 && w.padding[d] >= 0, ValueError,
        op,
        ": kernel_size, stride and dilation must be positive and padding >= 0, got kernel_size ",
        il(w.kernel), ", stride ", il(w.stride), ", padding ", il(w.padding), ", dilation ",
        il(w.dilation));
    const int64_t span = w.dilation[d] * (w.kernel[d] - 1) + 1;
    const int64_t in = x.size(2 + d) + 2 * w.padding[d];
    KILN_CHECK(in >= span, ShapeError, op, ": the input ", x.shape_str(), " padded by ",
               il(w.padding), " is smaller than the kernel ", il(w.kernel), " (dilation ",
               il(w.dilation), ")");
    w.out[d] = (in - span) / w.stride[d] + 1;
  }
  return w;
}

// x [N, C, H, W] or unbatched [C, H, W] as a batch; floating.
Tensor as_batch(const char* op, const Tensor& x) {
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, op,
             ": expected an input [N, C, H, W] or [C, H, W], got ", x.shape_str());
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": expected a floating input, got dtype ",
             x.dtype());
  return x.dim() == 3 ? x.unsqueeze(0) : x;
}

// A pooling window: as window_of, padding at most half the kernel (as PyTorch), no ceil_mode.
Window pool_window(const char* op, const Tensor& x, IntList kernel, IntList stride, IntList padding,
                   IntList dilation, bool ceil_mode) {
  KILN_CHECK(!ceil_mode, NotImplementedError, op, ": ceil_mode=true is not implemented");
  const Window w = window_of(op, x, kernel, stride, padding, dilation);
  for (int d = 0; d < 2; ++d)
    KILN_CHECK(2 * w.padding[d] <= w.kernel[d], ValueError, op,
               ": padding should be at most half the kernel size, got padding ", il(w.padding),
               " and kernel_size ", il(w.kernel));
  return w;
}

// The windows of x [N, C, H, W] padded with `fill`: [N, C, OH, OW, kh, kw].
Tensor windows(const Tensor& x, const Window& w, double fill) {
  Tensor padded = x;
  if (w.padding[0] || w.padding[1])
    padded = pad(x, {w.padding[1], w.padding[1], w.padding[0], w.padding[0]}, fill);
  padded = padded.contiguous();
  const int64_t c = padded.size(1), h = padded.size(2), width = padded.size(3);
  return padded.as_strided({padded.size(0), c, w.out[0], w.out[1], w.kernel[0], w.kernel[1]},
                           {c * h * width, h * width, w.stride[0] * width, w.stride[1],
                            w.dilation[0] * width, w.dilation[1]},
                           padded.storage_offset());
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
              IntList stride, IntList padding, IntList dilation, int64_t groups) {
  const char* op = "conv2d";
  const Tensor x = as_batch(op, input);
  KILN_CHECK(weight.dim() == 4, ShapeError, op,
             ": expected a weight [out_channels, "
             "in_channels / groups, kh, kw], got ",
             weight.shape_str());
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
  const Window w = window_of(op, x, {weight.size(2), weight.size(3)}, stride, padding, dilation);
  const int64_t n = x.size(0), positions = n * w.out[0] * w.out[1];
  const int64_t per_group = channels / groups * w.kernel[0] * w.kernel[1];
  // [groups, N * OH * OW, Cg * kh * kw] @ [groups, Cg * kh * kw, Og] -> [groups, N*OH*OW, Og]
  const Tensor cols = windows(x, w, 0.0)
                          .permute({0, 2, 3, 1, 4, 5})
                          .reshape({positions, groups, per_group})
                          .transpose(0, 1)
                          .contiguous();
  // (Both operands contiguous: the layout BLAS sees, and so its rounding, is the same eagerly
  // and in a compiled backward, which takes saved values contiguous.)
  const Tensor kernels =
      weight.reshape({groups, out_channels / groups, per_group}).transpose(1, 2).contiguous();
  Tensor out = matmul(cols, kernels)
                   .transpose(0, 1)
                   .reshape({n, w.out[0], w.out[1], out_channels})
                   .permute({0, 3, 1, 2})
                   .contiguous();
  if (bias) out = out + bias->reshape({1, out_channels, 1, 1});
  return input.dim() == 3 ? out.squeeze(0) : out;
}

Tensor max_pool2d(const Tensor& input, IntList kernel_size, IntList stride, IntList padding,
                  IntList dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  const Tensor x = as_batch(op, input);
  const Window w = pool_window(op, x, kernel_size, stride, padding, dilation, ceil_mode);
  const Tensor out = amax(windows(x, w, -std::numeric_limits<double>::infinity()), {4, 5});
  return input.dim() == 3 ? out.squeeze(0) : out;
}

Tensor avg_pool2d(const Tensor& input, IntList kernel_size, IntList stride, IntList padding,
                  bool ceil_mode, bool count_include_pad) {
  const char* op = "avg_pool2d";
  const Tensor x = as_batch(op, input);
  const Window w = pool_window(op, x, kernel_size, stride, padding, {1}, ceil_mode);
  Tensor out = mean(windows(x, w, 0.0), {4, 5});
  if (!count_include_pad && (w.padding[0] || w.padding[1])) {
    // Divide by the window's elements inside the image, not by its whole size.
    const Tensor inside = ones({1, 1, x.size(2), x.size(3)}, x.dtype());
    const Tensor counts = sum(windows(inside, w, 0.0), {4, 5});
    out = out * (reciprocal(counts) * static_cast<double>(w.kernel[0] * w.kernel[1]));
  }
  return input.dim() == 3 ? out.squeeze(0) : out;
}

}  // namespace kiln
