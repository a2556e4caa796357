// The sliding windows of convolution and pooling as two ops (src/ops/windows.cpp): unfold
// (im2col) reads each window of x [N, C, in...] into [N, C, out..., kernel...]; fold (col2im),
// its adjoint, adds each window element back to where it was read. One kernel each, so a
// convolution's backward is one pass over the windows instead of a slice, pad and sum per kernel
// position.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::ops {

// The windows of x [N, C, in...] (1 to 3 spatial dims) for `kernel`, `stride`, `padding` and
// `dilation` (one value per dim), and `overhang` past the high padding (ceil_mode's last
// windows): [N, C, out..., kernel...]. A position in the padding reads `fill`, one in the
// overhang `overhang_fill`. Floating dtypes. `channels_last`: [N, out..., C, kernel...] instead
// (a convolution's product reads each output position's row of every channel's window: this
// layout is its operand as it stands, where the other one needs a transposing copy).
Tensor unfold_windows(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                      IntList dilation, IntList overhang, double fill, double overhang_fill,
                      bool channels_last = false);
// The adjoint: windows [N, C, out..., kernel...] summed into [N, C, input_spatial...]
// (positions in the padding or overhang are dropped).
Tensor fold_windows(const Tensor& windows, IntList input_spatial, IntList kernel, IntList stride,
                    IntList padding, IntList dilation, IntList overhang);

// Where each window's maximum is (max pooling's indices): [N, C, out...] int64, the flat index
// in x's [N, C] plane of the window's first maximum in kernel order (NaN counting as the
// largest); padding and overhang are never chosen. Not differentiable (integer output).
Tensor window_argmax(const Tensor& x, IntList kernel, IntList stride, IntList padding,
                     IntList dilation, IntList overhang);

// Adaptive pooling's cells: cell i of a dim of `in` split into `out` covers
// [adaptive_begin, adaptive_end) = [floor(i in / out), ceil((i + 1) in / out)), as PyTorch's.
inline int64_t adaptive_begin(int64_t i, int64_t in, int64_t out) { return i * in / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// Where each cell's maximum is (adaptive max pooling's indices): x [N, C, in...] split into
// output_size cells per spatial dim (cell i of a dim of `in` covers [floor(i in / out),
// ceil((i + 1) in / out)), PyTorch's), [N, C, output_size...] int64 flat indices in x's [N, C]
// plane of each cell's first maximum in order (NaN counting as the largest). Not
// differentiable.
Tensor adaptive_window_argmax(const Tensor& x, IntList output_size);

}  // namespace kiln::ops
