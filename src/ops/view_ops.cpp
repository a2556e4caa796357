// View ops: outputs share the input's storage (new sizes, strides and offset; no kernel).
#include "core/memory_overlap.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/op.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {
namespace {

Tensor make_view(const Tensor& x, Shape sizes, Shape strides, int64_t offset) {
  // A view of a pending tensor is pending on the same memory (no sync point).
  auto impl = std::make_shared<TensorImpl>(x.impl()->storage_if_concrete(), offset,
                                           std::move(sizes), std::move(strides), x.dtype());
  if (x.impl()->is_pending()) x.impl()->pending()->share_with(*x.impl(), impl);
  return Tensor(std::move(impl));
}

// Resolves one -1 in `sizes` against numel; ShapeError when impossible.
Shape infer_size(IntList sizes, int64_t numel, const char* op, const Tensor& x) {
  Shape out = sizes.shape();
  int64_t known = 1, infer = -1;
  for (int64_t i = 0; i < out.ssize(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, ShapeError, op, ": only one dimension can be inferred (-1) in ", sizes);
      infer = i;
    } else {
      KILN_CHECK(out[i] >= 0, ShapeError, op, ": invalid size ", out[i], " in ", sizes);
      // An overflowing product can't equal any tensor's numel: report it as a shape mismatch.
      KILN_CHECK(!mul_overflows(known, out[i], &known), ShapeError, op, ": shape ", sizes,
                 " is invalid for input of size ", numel, " (", describe(x),
                 "): its number of elements overflows int64");
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", sizes,
               " is invalid for input of size ", numel, " (", describe(x), ")");
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, ShapeError, op, ": shape ", sizes, " is invalid for input of size ",
               numel, " (", describe(x), ")");
  }
  return out;
}

// Strides for viewing `x` as `sizes` without a copy, if possible (PyTorch's computeStride):
// each run of dims of the new shape must map onto a run of dims of x that is contiguous
// in memory.
std::optional<Shape> view_strides(const Tensor& x, const Shape& sizes) {
  const auto& old_sizes = x.sizes();
  const auto& old_strides = x.strides();
  Shape strides(sizes.size(), 0);
  if (x.numel() == 0) return contiguous_strides(sizes);
  // A 0-d tensor is one element: any shape of one element views it (all strides 1).
  if (x.dim() == 0) return Shape(sizes.size(), 1);
  int64_t view_d = sizes.ssize() - 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = x.dim() - 1; td >= 0; --td) {
    tensor_numel *= old_sizes[td];
    if (td == 0 ||
        (old_sizes[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || sizes[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

int view_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.in(0).dtype(),
                    infer_size(c.attrs.ints(0), c.in(0).numel(), "view", c.in(0)));
}
Tensor view_fn(const OpCall& c) {
  const Tensor& x = c.in(0);
  Shape sizes = infer_size(c.attrs.ints(0), x.numel(), "view", x);
  auto strides = view_strides(x, sizes);
  KILN_CHECK(strides.has_value(), ShapeError, "view: shape ", IntList(sizes),
             " is not compatible with the input's sizes ", x.shape_str(), " and strides ",
             IntList(x.strides()),
             " (a dimension spans non-contiguous memory); use reshape() instead");
  return make_view(x, std::move(sizes), std::move(*strides), x.storage_offset());
}

Shape permuted(const Tensor& x, IntList dims, Shape* strides) {
  KILN_CHECK(dims.ssize() == x.dim(), ShapeError, "permute: number of dims in ", dims,
             " doesn't match the tensor's ", x.dim(), " dims (shape ", x.shape_str(), ")");
  Shape sizes(dims.size());
  if (strides) strides->resize(dims.size());
  SmallVector<int64_t, 6> seen(dims.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], x.dim(), "permute");
    KILN_CHECK(!seen[d], IndexError, "permute: dim ", d, " repeats in ", dims);
    seen[d] = 1;
    sizes[i] = x.size(d);
    if (strides) (*strides)[i] = x.stride(d);
  }
  return sizes;
}
int permute_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.in(0).dtype(), permuted(c.in(0), c.attrs.ints(0), nullptr));
}
Tensor permute_fn(const OpCall& c) {
  Shape strides;
  Shape sizes = permuted(c.in(0), c.attrs.ints(0), &strides);
  return make_view(c.in(0), std::move(sizes), std::move(strides), c.in(0).storage_offset());
}

Shape expanded(const Tensor& x, IntList sizes, Shape* strides) {
  KILN_CHECK(sizes.ssize() >= x.dim(), ShapeError, "expand: the number of sizes provided (",
             sizes.size(), ") must be greater or equal to the number of dimensions in the tensor (",
             x.dim(), ")");
  const int64_t nd = sizes.ssize(), off = nd - x.dim();
  Shape out(static_cast<size_t>(nd));
  if (strides) strides->resize(static_cast<size_t>(nd));
  for (int64_t d = nd - 1; d >= 0; --d) {
    int64_t want = sizes[d];
    if (d < off) {
      KILN_CHECK(want >= 0, ShapeError, "expand: size -1 is not allowed in a new leading dim (",
                 sizes, ")");
      out[d] = want;
      if (strides) (*strides)[d] = 0;
      continue;
    }
    int64_t have = x.size(d - off);
    if (want == -1) want = have;
    KILN_CHECK(want >= 0, ShapeError, "expand: invalid size ", want, " at dim ", d, " (target ",
               sizes, ", tensor ", x.shape_str(), ")");
    KILN_CHECK(have == want || have == 1, ShapeError, "expand: the expanded size ", want,
               " must match the existing size ", have, " at non-singleton dim ", d, " (target ",
               sizes, ", tensor ", x.shape_str(), ")");
    out[d] = want;
    if (strides) (*strides)[d] = have == want ? x.stride(d - off) : 0;
  }
  checked_numel(out, "expand");
  return out;
}
int expand_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.in(0).dtype(), expanded(c.in(0), c.attrs.ints(0), nullptr));
}
Tensor expand_fn(const OpCall& c) {
  Shape strides;
  Shape sizes = expanded(c.in(0), c.attrs.ints(0), &strides);
  return make_view(c.in(0), std::move(sizes), std::move(strides), c.in(0).storage_offset());
}

// slice(dim, start, end, step): attrs [dim, start?, end?, step]
struct SliceGeom {
  int64_t dim, start, len, step;
};
// start and end clamp into [0, n] as PyTorch's (negative ones count from the end); the length
// is computed without overflow for any step; a slice of at most one element has step 1 (its
// stride is never used, and a huge step must not overflow the stride or the derivative).
SliceGeom slice_geometry(int64_t dim, int64_t n, std::optional<int64_t> start_attr,
                         std::optional<int64_t> end_attr, int64_t step) {
  KILN_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  auto clampi = [n](int64_t v) { return v < 0 ? std::max<int64_t>(v + n, 0) : std::min(v, n); };
  int64_t start = start_attr ? clampi(*start_attr) : 0;
  int64_t end = end_attr ? clampi(*end_attr) : n;
  int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  return {dim, start, len, len > 1 ? step : 1};
}
std::optional<int64_t> opt_int(const Attrs& attrs, size_t i) {
  return attrs.has(i) ? std::optional<int64_t>(attrs.i(i)) : std::nullopt;
}
SliceGeom slice_geom(const OpCall& c) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.dim() > 0, IndexError, "slice: cannot slice a 0-d tensor");
  int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), "slice");
  return slice_geometry(dim, x.size(dim), opt_int(c.attrs, 1), opt_int(c.attrs, 2), c.attrs.i(3));
}
int slice_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  SliceGeom g = slice_geom(c);
  Shape sizes = c.in(0).sizes();
  sizes[g.dim] = g.len;
  return one_output(out, c.in(0).dtype(), std::move(sizes));
}
Tensor slice_fn(const OpCall& c) {
  const Tensor& x = c.in(0);
  SliceGeom g = slice_geom(c);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[g.dim] = g.len;
  // In bounds (len > 1 means step < n), so these only overflow for strides no storage has.
  strides[g.dim] = checked_mul(strides[g.dim], g.step, "slice", "the stride");
  return make_view(
      x, std::move(sizes), std::move(strides),
      checked_add(x.storage_offset(), checked_mul(g.start, x.stride(g.dim), "slice", "the offset"),
                  "slice", "the offset"));
}

std::pair<int64_t, int64_t> select_geom(const OpCall& c) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.dim() > 0, IndexError, "select: cannot index a 0-d tensor");
  int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), "select");
  int64_t n = x.size(dim), index = c.attrs.i(1);
  KILN_CHECK(index >= -n && index < n, IndexError, "select: index ", index,
             " is out of bounds for dimension ", dim, " with size ", n);
  return {dim, index < 0 ? index + n : index};
}
int select_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  auto [dim, index] = select_geom(c);
  Shape sizes = c.in(0).sizes();
  sizes.erase(static_cast<size_t>(dim));
  return one_output(out, c.in(0).dtype(), std::move(sizes));
}
Tensor select_fn(const OpCall& c) {
  const Tensor& x = c.in(0);
  auto [dim, index] = select_geom(c);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes.erase(static_cast<size_t>(dim));
  strides.erase(static_cast<size_t>(dim));
  return make_view(x, std::move(sizes), std::move(strides),
                   x.storage_offset() + index * x.stride(dim));
}

// squeeze: attrs [dims] (empty list = every size-1 dim)
SmallVector<int64_t, 6> squeeze_keep(const OpCall& c) {
  const Tensor& x = c.in(0);
  SmallVector<int64_t, 6> drop(static_cast<size_t>(x.dim()), 0);
  const auto& dims = c.attrs.ints(0);
  if (dims.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) drop[d] = x.size(d) == 1;
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, x.dim(), "squeeze");
      if (x.dim() > 0) drop[w] = x.size(w) == 1;
    }
  }
  return drop;
}
Tensor squeeze_fn(const OpCall& c) {
  const Tensor& x = c.in(0);
  auto drop = squeeze_keep(c);
  Shape sizes, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (drop[d]) continue;
    sizes.push_back(x.size(d));
    strides.push_back(x.stride(d));
  }
  return make_view(x, std::move(sizes), std::move(strides), x.storage_offset());
}
int squeeze_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  auto drop = squeeze_keep(c);
  Shape sizes;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!drop[d]) sizes.push_back(x.size(d));
  return one_output(out, x.dtype(), std::move(sizes));
}

int64_t unsqueeze_dim(const OpCall& c) {
  return wrap_dim(c.attrs.i(0), c.in(0).dim() + 1, "unsqueeze");
}
Tensor unsqueeze_fn(const OpCall& c) {
  const Tensor& x = c.in(0);
  int64_t d = unsqueeze_dim(c);
  Shape sizes = x.sizes(), strides = x.strides();
  int64_t st = d < x.dim() ? checked_mul(x.stride(d), x.size(d), "unsqueeze", "the new stride") : 1;
  sizes.insert(static_cast<size_t>(d), 1);
  strides.insert(static_cast<size_t>(d), st);
  return make_view(x, std::move(sizes), std::move(strides), x.storage_offset());
}
int unsqueeze_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  Shape sizes = c.in(0).sizes();
  sizes.insert(static_cast<size_t>(unsqueeze_dim(c)), 1);
  return one_output(out, c.in(0).dtype(), std::move(sizes));
}

// as_strided: attrs [sizes, strides, offset?]; checked against the storage's bounds.
void check_as_strided(const OpCall& c) {
  const Tensor& x = c.in(0);
  const auto& sizes = c.attrs.ints(0);
  const auto& strides = c.attrs.ints(1);
  KILN_CHECK(sizes.size() == strides.size(), ShapeError, "as_strided: sizes ", IntList(sizes),
             " and strides ", IntList(strides), " must have the same length");
  int64_t offset = c.attrs.has(2) ? c.attrs.i(2) : x.storage_offset();
  KILN_CHECK(offset >= 0, ValueError, "as_strided: negative storage offset ", offset);
  int64_t last = offset;
  bool empty = false, overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK(sizes[i] >= 0, ValueError, "as_strided: negative size in ", IntList(sizes));
    KILN_CHECK(strides[i] >= 0, ValueError, "as_strided: negative stride in ", IntList(strides));
    empty = empty || sizes[i] == 0;
    int64_t extent = 0;
    // Huge sizes/strides must not wrap around into an in-bounds-looking element.
    if (sizes[i] > 0) {
      overflow = overflow || mul_overflows(sizes[i] - 1, strides[i], &extent) ||
                 add_overflows(last, extent, &last);
    }
  }
  if (empty) return;
  KILN_CHECK(!overflow, IndexError, "as_strided: sizes ", IntList(sizes), " and strides ",
             IntList(strides), " reach beyond the int64 range: out of bounds for any storage");
  const TensorImpl& xi = *x.impl();
  const int64_t capacity =
      xi.is_pending() ? xi.pending()->capacity()
                      : static_cast<int64_t>(xi.storage_if_concrete()->nbytes()) / x.element_size();
  KILN_CHECK(last < capacity, IndexError, "as_strided: sizes ", IntList(sizes), ", strides ",
             IntList(strides), " and offset ", offset, " reach element ", last,
             ", out of bounds for storage of ", capacity, " elements");
}
int as_strided_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_as_strided(c);
  return one_output(out, c.in(0).dtype(), Shape(c.attrs.ints(0)));
}
Tensor as_strided_fn(const OpCall& c) {
  check_as_strided(c);
  int64_t offset = c.attrs.has(2) ? c.attrs.i(2) : c.in(0).storage_offset();
  return make_view(c.in(0), Shape(c.attrs.ints(0)), Shape(c.attrs.ints(1)), offset);
}

// diagonal: attrs [offset, dim1, dim2]
struct DiagGeom {
  int64_t d1, d2, len, start;
};
DiagGeom diag_geom(const OpCall& c) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.dim() >= 2, ShapeError, "diagonal: needs at least 2 dims, got ", describe(x));
  int64_t d1 = wrap_dim(c.attrs.i(1), x.dim(), "diagonal");
  int64_t d2 = wrap_dim(c.attrs.i(2), x.dim(), "diagonal");
  KILN_CHECK(d1 != d2, ValueError, "diagonal: dim1 and dim2 cannot be the same (", d1, ")");
  int64_t off = c.attrs.i(0);
  int64_t len =
      off >= 0 ? std::min(x.size(d1), x.size(d2) - off) : std::min(x.size(d1) + off, x.size(d2));
  len = std::max<int64_t>(len, 0);
  int64_t start = x.storage_offset();
  if (len > 0) start += off >= 0 ? off * x.stride(d2) : -off * x.stride(d1);
  return {d1, d2, len, start};
}
Shape diag_shape(const Tensor& x, const DiagGeom& g, Shape* strides) {
  Shape sizes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == g.d1 || d == g.d2) continue;
    sizes.push_back(x.size(d));
    if (strides) strides->push_back(x.stride(d));
  }
  sizes.push_back(g.len);
  if (strides) strides->push_back(x.stride(g.d1) + x.stride(g.d2));
  return sizes;
}
int diagonal_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, c.in(0).dtype(), diag_shape(c.in(0), diag_geom(c), nullptr));
}
Tensor diagonal_fn(const OpCall& c) {
  DiagGeom g = diag_geom(c);
  Shape strides;
  Shape sizes = diag_shape(c.in(0), g, &strides);
  return make_view(c.in(0), std::move(sizes), std::move(strides), g.start);
}

// ---- derivatives: each rebuilds the input's shape from the gradient with out-of-place ops
// (reshape, permute, pad, mul), so that they differentiate again ----

// pad() amounts that pad dim `dim` of an ndim-d tensor by (left, right); negative amounts crop.
std::vector<int64_t> pad_amounts(int64_t ndim, int64_t dim, int64_t left, int64_t right) {
  std::vector<int64_t> p(static_cast<size_t>(2 * (ndim - dim)), 0);
  p[static_cast<size_t>(2 * (ndim - 1 - dim))] = left;
  p[static_cast<size_t>(2 * (ndim - 1 - dim) + 1)] = right;
  return p;
}
Tensor pad_dim(const Tensor& t, int64_t dim, int64_t left, int64_t right) {
  return pad(t, pad_amounts(t.dim(), dim, left, right), 0);
}
const Shape& in_sizes(const BackwardCall& c) { return c.input_meta[0].sizes; }

void reshape_back_derivative(const BackwardCall& c, std::span<Tensor> g) {
  g[0] = c.grad().reshape(in_sizes(c));
}
void permute_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const auto& dims = c.attrs.ints(0);
  const int64_t nd = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inverse(dims.size());
  for (int64_t i = 0; i < nd; ++i)
    inverse[static_cast<size_t>(wrap_dim(dims[i], nd, "permute"))] = i;
  g[0] = c.grad().permute(inverse);
}
// Autograd sums the gradient over the expanded (new leading and size-1) dims.
void expand_derivative(const BackwardCall& c, std::span<Tensor> g) { g[0] = c.grad(); }

// The slice's elements sit at start, start + step, ... of dim: interleave step - 1 zeros after
// each gradient element (pad a new dim, then merge it), then pad the dim out to its size.
void slice_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Shape& in = in_sizes(c);
  const int64_t dim = wrap_dim(c.attrs.i(0), static_cast<int64_t>(in.size()), "slice");
  const int64_t n = in[dim];
  const SliceGeom sg =
      slice_geometry(dim, n, opt_int(c.attrs, 1), opt_int(c.attrs, 2), c.attrs.i(3));
  const int64_t start = sg.start, len = sg.len, step = sg.step;
  if (len == 0) {
    g[0] = zeros(in, c.grad().dtype());
    return;
  }
  Tensor gr = c.grad();
  if (step > 1) {
    Shape merged = gr.sizes();
    merged[dim] = len * step;
    gr = pad_dim(gr.unsqueeze(dim + 1), dim + 1, 0, step - 1).reshape(merged);
  }
  g[0] = pad_dim(gr, dim, start, n - start - len * step);
}
void select_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Shape& in = in_sizes(c);
  const int64_t dim = wrap_dim(c.attrs.i(0), static_cast<int64_t>(in.size()), "select");
  const int64_t n = in[dim];
  const int64_t index = c.attrs.i(1) < 0 ? c.attrs.i(1) + n : c.attrs.i(1);
  g[0] = pad_dim(c.grad().unsqueeze(dim), dim, index, n - index - 1);
}

// The storage index of every element of a view with these sizes, strides and offset (int64).
Tensor storage_indices(IntList sizes, IntList strides, int64_t offset) {
  Tensor idx = full({}, offset, DType::Int64);
  const int64_t nd = sizes.ssize();
  for (int64_t d = 0; d < nd; ++d) {
    std::vector<int64_t> shape(static_cast<size_t>(nd), 1);
    shape[static_cast<size_t>(d)] = sizes[d];
    idx = idx + arange(sizes[d], DType::Int64).view(shape) * strides[d];
  }
  return idx.expand(sizes).reshape({-1});
}
int64_t last_index(IntList sizes, IntList strides, int64_t offset) {
  for (int64_t s : sizes)
    if (s == 0) return -1;
  for (int64_t d = 0; d < sizes.ssize(); ++d) offset += (sizes[d] - 1) * strides[d];
  return offset;
}
// The gradient is accumulated into a zero "storage" at the view's element positions
// (index_add), then read back at the input's positions (index_select). Inputs that overlap
// themselves (an expanded dim, windows) have no well-defined gradient here.
void as_strided_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.is_contiguous() || internal_overlap(x.sizes(), x.strides()) == Overlap::kNone,
             NotImplementedError,
             "as_strided: the derivative is not implemented for an input that overlaps itself "
             "(shape ",
             x.shape_str(), ", strides ", IntList(x.strides()), ")");
  const auto& sizes = c.attrs.ints(0);
  const auto& strides = c.attrs.ints(1);
  const int64_t offset = c.attrs.has(2) ? c.attrs.i(2) : x.storage_offset();
  const int64_t top = std::max(last_index(sizes, strides, offset),
                               last_index(x.sizes(), x.strides(), x.storage_offset()));
  if (top < 0 || x.numel() == 0) {
    g[0] = zeros(x.sizes(), c.grad().dtype());
    return;
  }
  Tensor storage = zeros({top + 1}, c.grad().dtype());
  storage = index_add(storage, 0, storage_indices(sizes, strides, offset), c.grad().reshape({-1}));
  g[0] = index_select(storage, 0, storage_indices(x.sizes(), x.strides(), x.storage_offset()))
             .view(x.sizes());
}

// The diagonal (last dim of the gradient) is embedded as a [len, len] matrix (times the
// identity), padded out to the two diagonal dims' sizes at the offset, and moved back to dims
// dim1 and dim2.
void diagonal_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Shape& in = in_sizes(c);
  const int64_t nd = static_cast<int64_t>(in.size());
  const int64_t d1 = wrap_dim(c.attrs.i(1), nd, "diagonal");
  const int64_t d2 = wrap_dim(c.attrs.i(2), nd, "diagonal");
  const int64_t off = c.attrs.i(0);
  const Tensor& gr = c.grad();
  const int64_t len = gr.size(gr.dim() - 1);
  if (len == 0) {
    g[0] = zeros(in, gr.dtype());
    return;
  }
  Tensor m = gr.unsqueeze(-1) * eye(len, len, gr.dtype());  // [..., len(d1), len(d2)]
  const int64_t n1 = in[d1], n2 = in[d2];
  const int64_t r0 = off >= 0 ? 0 : -off, c0 = off >= 0 ? off : 0;
  m = pad_dim(m, nd - 2, r0, n1 - r0 - len);
  m = pad_dim(m, nd - 1, c0, n2 - c0 - len);
  std::vector<int64_t> current;  // the input dim each dim of m stands for
  for (int64_t d = 0; d < nd; ++d)
    if (d != d1 && d != d2) current.push_back(d);
  current.push_back(d1);
  current.push_back(d2);
  std::vector<int64_t> perm(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) perm[static_cast<size_t>(current[i])] = i;
  g[0] = m.permute(perm);
}

}  // namespace

#define KILN_VIEW_OP(NAME, SCHEMA, DERIV, SAVED)              \
  const OpDef& NAME##_op = register_op({.name = #NAME,        \
                                        .schema = SCHEMA,     \
                                        .kind = OpKind::View, \
                                        .meta = NAME##_meta,  \
                                        .view = NAME##_fn,    \
                                        .derivative = {.fn = DERIV, .saved_inputs = SAVED}});
KILN_VIEW_OP(view, "view(Tensor self, int[] size) -> Tensor", reshape_back_derivative, 0)
KILN_VIEW_OP(permute, "permute(Tensor self, int[] dims) -> Tensor", permute_derivative, 0)
KILN_VIEW_OP(expand, "expand(Tensor self, int[] size) -> Tensor", expand_derivative, 0)
KILN_VIEW_OP(slice,
             "slice(Tensor self, int dim=0, int? start=None, int? end=None, int step=1) -> Tensor",
             slice_derivative, 0)
KILN_VIEW_OP(select, "select(Tensor self, int dim, int index) -> Tensor", select_derivative, 0)
KILN_VIEW_OP(squeeze, "squeeze(Tensor self, int[] dim=[]) -> Tensor", reshape_back_derivative, 0)
KILN_VIEW_OP(unsqueeze, "unsqueeze(Tensor self, int dim) -> Tensor", reshape_back_derivative, 0)
// as_strided reads the input's strides and offset, so it keeps the input.
KILN_VIEW_OP(
    as_strided,
    "as_strided(Tensor self, int[] size, int[] stride, int? storage_offset=None) -> Tensor",
    as_strided_derivative, save({0}))
KILN_VIEW_OP(diagonal, "diagonal(Tensor self, int offset=0, int dim1=0, int dim2=1) -> Tensor",
             diagonal_derivative, 0)
#undef KILN_VIEW_OP

extern const OpDef& to_copy_op;  // pointwise_ternary.cpp

// ---- as_strided_scatter: a copy of self (read as contiguous) with the elements at
// (size, stride, storage_offset) replaced by src. The functional form of writing through a
// view: graph capture records in-place writes to part of a buffer with it.
extern const OpDef& as_strided_scatter_op;
namespace {
int as_strided_scatter_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& self = c.in(0);
  const Tensor& src = c.in(1);
  const auto& sizes = c.attrs.ints(0);
  KILN_CHECK(src.sizes() == Shape(sizes), ShapeError, "as_strided_scatter: src has shape ",
             src.shape_str(), " but the region has shape ", IntList(sizes));
  KILN_CHECK(can_cast(src.dtype(), self.dtype()), DTypeError, "as_strided_scatter: src dtype ",
             src.dtype(), " can't be cast to ", self.dtype());
  const auto& strides = c.attrs.ints(1);
  KILN_CHECK(sizes.size() == strides.size(), ShapeError, "as_strided_scatter: sizes ",
             IntList(sizes), " and strides ", IntList(strides), " must have the same length");
  const int64_t last = last_index(sizes, strides, c.attrs.i(2));
  KILN_CHECK(c.attrs.i(2) >= 0 && last < self.numel(), IndexError,
             "as_strided_scatter: the region reaches element ", last, " of a tensor of ",
             self.numel(), " elements");
  return one_output(out, self.dtype(), self.sizes());
}
void as_strided_scatter_kernel(const OpCall& c, std::span<Tensor> outs) {
  convert_into(outs[0], c.in(0));
  Tensor region(std::make_shared<TensorImpl>(outs[0].impl()->storage(), c.attrs.i(2),
                                             Shape(c.attrs.ints(0)), Shape(c.attrs.ints(1)),
                                             outs[0].dtype()));
  convert_into(region, c.in(1));
}
void as_strided_scatter_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const auto& sizes = c.attrs.ints(0);
  const auto& strides = c.attrs.ints(1);
  const int64_t offset = c.attrs.i(2);
  Tensor grad = c.grad().contiguous();
  if (c.needs_grad(0))
    g[0] = call(as_strided_scatter_op, {grad, zeros(sizes, grad.dtype())}, c.attrs);
  if (c.needs_grad(1)) g[1] = grad.as_strided(sizes, strides, grad.storage_offset() + offset);
}
}  // namespace
const OpDef& as_strided_scatter_op = register_op(
    {.name = "as_strided_scatter",
     .schema = "as_strided_scatter(Tensor self, Tensor src, int[] size, int[] stride, int "
               "storage_offset) -> Tensor",
     .kind = OpKind::Layout,
     .meta = as_strided_scatter_meta,
     .kernel = as_strided_scatter_kernel,
     .derivative = {.fn = as_strided_scatter_derivative},
     .internal = true});

bool can_view(const Tensor& x, IntList sizes) {
  return view_strides(x, infer_size(sizes, x.numel(), "reshape", x)).has_value();
}

}  // namespace ops

// ---- Tensor view methods ----
Tensor Tensor::view(IntList sizes) const {
  checked("view");
  return ops::call(ops::view_op, {*this}, {ops::ints_attr(sizes)});
}
Tensor Tensor::reshape(IntList sizes) const {
  checked("reshape");
  if (ops::can_view(*this, sizes)) return view(sizes);
  return contiguous().view(sizes);
}
Tensor Tensor::permute(IntList dims) const {
  checked("permute");
  return ops::call(ops::permute_op, {*this}, {ops::ints_attr(dims)});
}
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  checked("transpose");
  if (dim() == 0) {
    wrap_dim(dim0, 0, "transpose");
    wrap_dim(dim1, 0, "transpose");
    return permute({});
  }
  int64_t a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  std::vector<int64_t> perm(static_cast<size_t>(dim()));
  for (int64_t i = 0; i < dim(); ++i) perm[i] = i;
  std::swap(perm[a], perm[b]);
  return permute(perm);
}
Tensor Tensor::t() const {
  checked("t");
  KILN_CHECK(dim() <= 2, ShapeError, "t: expects a tensor with <= 2 dimensions, got ", dim(),
             " (shape ", shape_str(), "); use transpose() or mT()");
  return dim() < 2 ? permute(dim() == 1 ? std::vector<int64_t>{0} : std::vector<int64_t>{})
                   : transpose(0, 1);
}
Tensor Tensor::mT() const {
  checked("mT");
  KILN_CHECK(dim() >= 2, ShapeError, "mT: expects a tensor with >= 2 dimensions, got shape ",
             shape_str());
  return transpose(-2, -1);
}
Tensor Tensor::expand(IntList sizes) const {
  checked("expand");
  return ops::call(ops::expand_op, {*this}, {ops::ints_attr(sizes)});
}
Tensor Tensor::expand_as(const Tensor& other) const {
  checked("expand_as");
  return expand(other.sizes());
}
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  checked("slice");
  auto opt = [](std::optional<int64_t> v) { return v ? AttrValue(*v) : AttrValue(); };
  return ops::call(ops::slice_op, {*this}, {dim, opt(start), opt(end), step});
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  checked("select");
  return ops::call(ops::select_op, {*this}, {dim, index});
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  checked("narrow");
  KILN_CHECK(this->dim() > 0, IndexError, "narrow: cannot narrow a 0-d tensor");
  int64_t d = wrap_dim(dim, this->dim(), "narrow");
  int64_t n = size(d);
  if (start < 0) start += n;
  KILN_CHECK(start >= 0 && start <= n, IndexError, "narrow: start ", start,
             " is out of range for dim ", d, " of size ", n);
  // start <= n, so n - start can't overflow (start + length could).
  KILN_CHECK(length >= 0, IndexError, "narrow: length must be non-negative, got ", length);
  KILN_CHECK(length <= n - start, IndexError, "narrow: start (", start, ") + length (", length,
             ") exceeds the size of dim ", d, " (", n, ")");
  return slice(d, start, start + length, 1);
}
Tensor Tensor::squeeze() const {
  checked("squeeze");
  return ops::call(ops::squeeze_op, {*this}, {std::vector<int64_t>{}});
}
Tensor Tensor::squeeze(int64_t dim) const {
  checked("squeeze");
  return ops::call(ops::squeeze_op, {*this}, {std::vector<int64_t>{dim}});
}
Tensor Tensor::unsqueeze(int64_t dim) const {
  checked("unsqueeze");
  return ops::call(ops::unsqueeze_op, {*this}, {dim});
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  checked("flatten");
  if (dim() == 0) {
    wrap_dim(start_dim, 0, "flatten");
    wrap_dim(end_dim, 0, "flatten");
    return reshape({1});
  }
  int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK(s <= e, ValueError, "flatten: start_dim (", s, ") cannot come after end_dim (", e,
             ")");
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < s; ++d) sizes.push_back(size(d));
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= size(d);  // a sub-product of numel(): no overflow
  sizes.push_back(m);
  for (int64_t d = e + 1; d < dim(); ++d) sizes.push_back(size(d));
  return reshape(sizes);
}
Tensor Tensor::unflatten(int64_t dim, IntList sizes) const {
  checked("unflatten");
  int64_t d = wrap_dim(dim, this->dim(), "unflatten");
  KILN_CHECK(!sizes.empty(), ShapeError, "unflatten: sizes must be non-empty");
  std::vector<int64_t> out;
  for (int64_t i = 0; i < d; ++i) out.push_back(size(i));
  for (int64_t s : sizes) out.push_back(s);
  for (int64_t i = d + 1; i < this->dim(); ++i) out.push_back(size(i));
  int64_t known = 1;
  bool infer = false;
  for (int64_t s : sizes) {
    if (s == -1) {
      infer = true;
    } else {
      KILN_CHECK(s >= 0, ShapeError, "unflatten: invalid size ", s, " in ", sizes);
      KILN_CHECK(!mul_overflows(known, s, &known), ShapeError, "unflatten: sizes ", sizes,
                 " don't multiply up to the size of dim ", d, " (", size(d),
                 "): their product overflows int64");
    }
  }
  KILN_CHECK(infer ? (known != 0 && size(d) % known == 0) : known == size(d), ShapeError,
             "unflatten: sizes ", sizes, " don't multiply up to the size of dim ", d, " (", size(d),
             ")");
  return view(out);
}
Tensor Tensor::as_strided(IntList sizes, IntList strides, std::optional<int64_t> offset) const {
  checked("as_strided");
  return ops::call(
      ops::as_strided_op, {*this},
      {ops::ints_attr(sizes), ops::ints_attr(strides), offset ? AttrValue(*offset) : AttrValue()});
}
Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  checked("diagonal");
  return ops::call(ops::diagonal_op, {*this}, {offset, dim1, dim2});
}
Tensor Tensor::contiguous() const {
  checked("contiguous");
  return is_contiguous() ? *this : clone();
}
Tensor Tensor::clone() const {
  checked("clone");
  return ops::call(ops::to_copy_op, {*this}, {dtype()});
}
Tensor Tensor::detach() const {
  checked("detach");
  auto impl = std::make_shared<TensorImpl>(impl_->storage_if_concrete(), storage_offset(), sizes(),
                                           strides(), dtype());
  if (impl_->is_pending()) impl_->pending()->share_with(*impl_, impl);
  return Tensor(std::move(impl));
}
Tensor Tensor::to(DType dt) const {
  checked("to");
  return to_dtype(*this, dt);
}
Tensor& Tensor::copy_(const Tensor& src) const {
  checked("copy_");
  return kiln::copy_(mutable_self(), src);
}
Tensor& Tensor::fill_(const Scalar& value) const {
  checked("fill_");
  return kiln::fill_(mutable_self(), value);
}
Tensor& Tensor::zero_() const {
  checked("zero_");
  return kiln::zero_(mutable_self());
}

// ---- the Python-facing forms of the view methods (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& reshape_function = register_function(
    {.schema = "reshape(Tensor self, int[] shape) -> Tensor",
     .doc = "The same elements in another shape (one size may be -1): a view when the strides "
            "allow it, else a copy.",
     .call = [](Args a) -> FunctionResult { return a.tensor(0).reshape(a.ints(1)); }});
const FunctionDef& transpose_function = register_function(
    {.schema = "transpose(Tensor self, int dim0, int dim1) -> Tensor",
     .doc = "A view with dims dim0 and dim1 swapped.",
     .call = [](Args a) -> FunctionResult { return a.tensor(0).transpose(a.i(1), a.i(2)); }});
const FunctionDef& t_function =
    register_function({.schema = "t(Tensor self) -> Tensor",
                       .doc = "The transpose of a matrix (a 0-d or 1-d tensor is returned as is).",
                       .call = [](Args a) -> FunctionResult { return a.tensor(0).t(); }});
const FunctionDef& flatten_function = register_function(
    {.schema = "flatten(Tensor self, int start_dim=0, int end_dim=-1) -> Tensor",
     .doc = "Dims start_dim..end_dim merged into one.",
     .call = [](Args a) -> FunctionResult { return a.tensor(0).flatten(a.i(1), a.i(2)); }});
const FunctionDef& unflatten_function = register_function(
    {.schema = "unflatten(Tensor self, int dim, int[] sizes) -> Tensor",
     .doc = "Dim dim split into the given sizes (one may be -1).",
     .call = [](Args a) -> FunctionResult { return a.tensor(0).unflatten(a.i(1), a.ints(2)); }});
const FunctionDef& narrow_function = register_function(
    {.schema = "narrow(Tensor self, int dim, int start, int length) -> Tensor",
     .doc = "A view of length elements of dim dim from start.",
     .call = [](Args a) -> FunctionResult { return a.tensor(0).narrow(a.i(1), a.i(2), a.i(3)); }});
}  // namespace

}  // namespace kiln
