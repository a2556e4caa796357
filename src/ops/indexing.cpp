// Indexing with index tensors: index_select, embedding, gather, scatter, scatter_add,
// index_add (and their in-place forms), masked_select, nonzero and one_hot. Every kernel checks
// all index values against their bound before it writes anything.
#include "kiln/ops/indexing.h"
#include "kiln/ops/function.h"

#include <algorithm>

#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "ops/indexing_utils.h"

namespace kiln {
namespace ops {
namespace {

// Sizes with a 0-d tensor seen as [1] (PyTorch's index ops treat a scalar as one element).
Shape sizes_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.sizes(); }

// out[o, j, :] = x[o, index[j], :] for x viewed as contiguous [outer, X, inner] and out as
// [outer, n, inner] (n = index.numel()): one memcpy per row, rows split across threads.
void select_rows(const Tensor& x_in, const Tensor& index, const Tensor& out, int64_t dim,
                 const char* op) {
  if (out.numel() == 0) return;
  const Tensor x = at_least_1d(x_in).contiguous();
  const Tensor idx_t = index.contiguous();
  check_index_bounds(op, idx_t, x.size(dim), dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const int64_t n = idx_t.numel(), rows_in = x.size(dim);
  const size_t row_bytes = static_cast<size_t>(inner * x.element_size());
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  dispatch_index(idx_t.dtype(), op, [&]<typename I>() {
    const I* idx = idx_t.data_ptr<I>();
    kernels::parallel_range(outer * n, line_grain(inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / n, j = r % n;
        std::memcpy(
            dst + static_cast<size_t>(r) * row_bytes,
            src + static_cast<size_t>(o * rows_in + static_cast<int64_t>(idx[j])) * row_bytes,
            row_bytes);
      }
    });
  });
}

// ---- derivatives (in Kiln ops; index and mask inputs get none) ----
Tensor zeros_of(const BackwardCall& c, size_t input) {
  return zeros(c.input_meta[input].sizes, c.grad().dtype());
}
// A gradient computed at index's shape, zero-padded at the end of each dim up to `sizes`
// (scatter's src may be larger than its index).
Tensor pad_to(const Tensor& g, IntList sizes) {
  if (g.sizes() == sizes.shape()) return g;
  std::vector<int64_t> amounts;
  for (int64_t d = g.dim() - 1; d >= 0; --d) {
    amounts.push_back(0);
    amounts.push_back(sizes[d] - g.size(d));
  }
  return pad(g, amounts);
}
void index_select_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = index_add(zeros_of(c, 0), c.attrs.i(0), c.in(1), c.grad());
}
void embedding_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (!c.needs_grad(0)) return;
  const Tensor& grad = c.grad();
  const int64_t width = c.input_meta[0].sizes[1];
  g[0] = index_add(zeros_of(c, 0), 0, c.in(1).reshape({-1}), grad.reshape({-1, width}));
}
Tensor call_gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                            const Shape& input_sizes);
void gather_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0))
    g[0] = call_gather_backward(c.grad(), c.attrs.i(0), c.in(1), c.input_meta[0].sizes);
}
void scatter_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const int64_t dim = c.attrs.i(0);
  const Tensor& index = c.in(1);
  // The overwritten positions of self receive nothing; src gets the gradient it was sent to.
  if (c.needs_grad(0)) g[0] = scatter(c.grad(), dim, index, zeros(index.sizes(), c.grad().dtype()));
  if (c.needs_grad(2)) {
    // With duplicate indices only the last write (row-major) reached the output: mark, for
    // each index element, whether it is the one that won its target.
    const Tensor ids = arange(index.numel()).reshape(index.sizes());
    const Tensor owner = scatter(zeros(c.input_meta[0].sizes, DType::Int64), dim, index, ids);
    const Tensor won = eq(gather(owner, dim, index), ids);
    g[2] = pad_to(gather(c.grad(), dim, index) * won, c.input_meta[2].sizes);
  }
}
void scatter_add_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(2))
    g[2] = pad_to(gather(c.grad(), c.attrs.i(0), c.in(1)), c.input_meta[2].sizes);
}
void index_add_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = c.grad();
  if (c.needs_grad(2)) {
    const double alpha = c.attrs.scalar(1).to<double>();
    Tensor gs = index_select(c.grad(), c.attrs.i(0), c.in(1));
    if (alpha != 1.0) gs = gs * alpha;
    // A 0-d self with a one-element source: the selection is 0-d.
    if (gs.dim() != c.input_meta[2].sizes.ssize()) gs = gs.reshape(c.input_meta[2].sizes);
    g[2] = gs;
  }
}
// The selected elements' gradients go back to the mask's true positions (of the broadcast
// shape), found with nonzero on the flattened mask.
void masked_select_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (!c.needs_grad(0)) return;
  Shape shape = c.input_meta[0].sizes;
  {
    const Tensor ins[] = {zeros(shape, DType::Bool), c.in(1)};
    shape = broadcast_shapes("masked_select", ins);
  }
  const Tensor positions = nonzero(c.in(1).expand(shape).reshape({-1})).reshape({-1});
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  g[0] = index_add(zeros({numel}, c.grad().dtype()), 0, positions, c.grad()).reshape(shape);
}

// ---- index_select: inputs [x, index]; attrs [dim] ----
int index_select_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  const Tensor& index = c.in(1);
  check_index_dtype("index_select", index, /*allow_int32=*/true);
  KILN_CHECK(index.dim() <= 1, ShapeError,
             "index_select: index must be a 1-d (or 0-d) tensor, got shape ", index.shape_str());
  const int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), "index_select");
  if (x.dim() == 0) {
    KILN_CHECK(index.numel() == 1, ShapeError,
               "index_select: the index into a 0-d tensor must have exactly one value, got ",
               index.numel());
    return one_output(out, x.dtype(), Shape{});
  }
  Shape sizes = x.sizes();
  sizes[dim] = index.numel();
  return one_output(out, x.dtype(), std::move(sizes));
}
void index_select_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t dim = wrap_dim(c.attrs.i(0), c.in(0).dim(), "index_select");
  select_rows(c.in(0), c.in(1), outs[0], dim, "index_select");
}
const OpDef& index_select_op =
    register_op({.name = "index_select",
                 .schema = "index_select(Tensor self, int dim, Tensor index) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = index_select_meta,
                 .kernel = index_select_kernel,
                 .derivative = {.fn = index_select_derivative, .saved_inputs = save({1})}});

// ---- embedding: inputs [weight [V, D], indices (any shape)] -> [..., D] ----
int embedding_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& weight = c.in(0);
  const Tensor& indices = c.in(1);
  KILN_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be 2-d [num_embeddings, ",
             "embedding_dim], got shape ", weight.shape_str());
  check_index_dtype("embedding", indices, /*allow_int32=*/true);
  Shape sizes = indices.sizes();
  sizes.push_back(weight.size(1));
  return one_output(out, weight.dtype(), std::move(sizes));
}
void embedding_kernel(const OpCall& c, std::span<Tensor> outs) {
  select_rows(c.in(0), c.in(1), outs[0], 0, "embedding");
}
const OpDef& embedding_op =
    register_op({.name = "embedding",
                 .schema = "embedding(Tensor weight, Tensor indices) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = embedding_meta,
                 .kernel = embedding_kernel,
                 .derivative = {.fn = embedding_derivative, .saved_inputs = save({1})},
                 .internal = true});

// ---- gather / scatter / scatter_add: inputs [x, index(, src)]; attrs [dim] ----
// PyTorch's shape rules: index has x's number of dims (and src's); index.size(d) <=
// x.size(d) for d != dim, and <= src.size(d) for every d.
int64_t check_scatter_gather(const OpCall& c, const char* op, const Tensor* src) {
  const Tensor& x = c.in(0);
  const Tensor& index = c.in(1);
  check_index_dtype(op, index, /*allow_int32=*/false);
  const int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), op);
  KILN_CHECK(index.dim() == x.dim(), ShapeError, op,
             ": index must have as many dims as the input; got index of shape ", index.shape_str(),
             " and input of shape ", x.shape_str());
  if (src) {
    KILN_CHECK(src->dtype() == x.dtype(), DTypeError, op,
               ": expected self and src to have the same dtype, got ", x.dtype(), " and ",
               src->dtype());
    KILN_CHECK(src->dim() == x.dim(), ShapeError, op,
               ": src must have as many dims as the input; got src of shape ", src->shape_str(),
               " and input of shape ", x.shape_str());
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool fits_x = d == dim || index.size(d) <= x.size(d);
    const bool fits_src = !src || index.size(d) <= src->size(d);
    KILN_CHECK(fits_x && fits_src, ShapeError, op, ": index of shape ", index.shape_str(),
               " must be no larger than the input ", x.shape_str(), " apart from dimension ", dim,
               src ? " and no larger than src " : "", src ? src->shape_str() : "",
               " (mismatch at dim ", d, ")");
  }
  return dim;
}

int gather_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_scatter_gather(c, "gather", nullptr);
  return one_output(out, c.in(0).dtype(), c.in(1).sizes());
}
void gather_kernel(const OpCall& c, std::span<Tensor> outs) {
  if (outs[0].numel() == 0) return;
  const int64_t dim = wrap_dim(c.attrs.i(0), c.in(0).dim(), "gather");
  const Tensor x = at_least_1d(c.in(0));
  const Tensor index = at_least_1d(c.in(1).contiguous());
  const Tensor out = at_least_1d(outs[0]);
  check_index_bounds("gather", index, x.size(dim), dim);
  const int64_t len = index.size(dim), xs = x.stride(dim), is = index.stride(dim),
                os = out.stride(dim);
  KILN_DTYPE_SWITCH_ALL(x.dtype(), "gather", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    const int64_t* ip = index.data_ptr<int64_t>();
    T* op = out.data_ptr<T>();
    kernels::parallel_range(
        num_lines(index.sizes(), dim), line_grain(len), [&](int64_t b, int64_t e) {
          for_each_line<3>(index.sizes(), dim, {index.strides(), x.strides(), out.strides()}, b, e,
                           [&](const std::array<int64_t, 3>& off, const Shape&) {
                             for (int64_t k = 0; k < len; ++k)
                               op[off[2] + k * os] = xp[off[1] + ip[off[0] + k * is] * xs];
                           });
        });
  });
}
const OpDef& gather_op =
    register_op({.name = "gather",
                 .schema = "gather(Tensor self, int dim, Tensor index) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = gather_meta,
                 .kernel = gather_kernel,
                 .derivative = {.fn = gather_derivative, .saved_inputs = save({1})}});

// For every position p of index (contiguous), in row-major order: write(out[..., index[p], ...],
// src[p]). Lines along dim never write the same element as another line, so they run in
// parallel; within a line the writes run in order (for scatter, the last duplicate wins).
template <typename T, typename Write>
void write_along_lines(const Tensor& index, const Tensor& src, const Tensor& out, int64_t dim,
                       Write&& write) {
  const int64_t len = index.size(dim), ss = src.stride(dim), is = index.stride(dim),
                os = out.stride(dim);
  const T* sp = src.data_ptr<T>();
  const int64_t* ip = index.data_ptr<int64_t>();
  T* op = out.data_ptr<T>();
  kernels::parallel_range(
      num_lines(index.sizes(), dim), line_grain(len), [&](int64_t b, int64_t e) {
        for_each_line<3>(index.sizes(), dim, {index.strides(), src.strides(), out.strides()}, b, e,
                         [&](const std::array<int64_t, 3>& off, const Shape&) {
                           for (int64_t k = 0; k < len; ++k)
                             write(op[off[2] + ip[off[0] + k * is] * os], sp[off[1] + k * ss]);
                         });
      });
}

// ---- gather_backward: inputs [grad, index]; attrs [dim, input_sizes, one_per_line] ----
// gather's gradient: zeros of the input's shape with each grad element added where gather
// read it. `one_per_line`: index picks one position along dim per line and matches the
// input's other sizes (a loss's target, as nll_loss gathers it); then each position is written
// once, and the decomposition is the one-hot where(arange == index, grad, 0), which generated
// code fuses with what reads the gradient (cross entropy's softmax) instead of materialising
// zeros and scattering into them.
bool one_per_line(const Tensor& index, int64_t dim, const Shape& input_sizes) {
  if (index.dim() != static_cast<int64_t>(input_sizes.size()) || index.dim() == 0) return false;
  for (int64_t d = 0; d < index.dim(); ++d)
    if (index.size(d) != (d == dim ? 1 : input_sizes[d])) return false;
  return true;
}
int gather_backward_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const char* op = "gather_backward";
  const Tensor &grad = c.in(0), &index = c.in(1);
  check_index_dtype(op, index, /*allow_int32=*/false);
  KILN_CHECK(is_floating(grad.dtype()), DTypeError, op, ": expected a floating gradient, got ",
             grad.dtype());
  KILN_CHECK(grad.sizes() == index.sizes(), ShapeError, op, ": the gradient ", grad.shape_str(),
             " must have the index's shape ", index.shape_str());
  const Shape sizes(c.attrs.ints(1).begin(), c.attrs.ints(1).end());
  KILN_CHECK(static_cast<int64_t>(sizes.size()) == std::max<int64_t>(index.dim(), 1) ||
                 (index.dim() == 0 && sizes.empty()),
             ShapeError, op, ": index of shape ", index.shape_str(), " against input sizes ",
             IntList(sizes));
  const int64_t dim = wrap_dim(c.attrs.i(0), std::max<int64_t>(sizes.ssize(), 1), op);
  KILN_CHECK(!c.attrs.b(2) || one_per_line(index, dim, sizes), ValueError, op,
             ": one_per_line is set but index ", index.shape_str(),
             " does not pick one position per line of ", IntList(sizes));
  return one_output(out, grad.dtype(), sizes);
}
void gather_backward_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& result = outs[0];
  result.zero_();
  const Tensor index = at_least_1d(c.in(1).contiguous());
  if (index.numel() == 0) return;
  const Tensor out = at_least_1d(result), src = at_least_1d(c.in(0));
  const int64_t dim = wrap_dim(c.attrs.i(0), out.dim(), "gather_backward");
  check_index_bounds("gather_backward", index, out.size(dim), dim);
  const bool once = c.attrs.b(2);
  KILN_DTYPE_SWITCH_FLOATING(out.dtype(), "gather_backward", [&]<typename T>() {
    // (written once, a -0.0 stays -0.0, as the decomposition's)
    write_along_lines<T>(index, src, out, dim, [once](T& dst, T v) { dst = once ? v : dst + v; });
  });
}
void gather_backward_decomposition(const OpCall& c, std::span<Tensor> results) {
  const Tensor &grad = c.in(0), &index = c.in(1);
  const int64_t rank = index.dim(), dim = wrap_dim(c.attrs.i(0), rank, "gather_backward");
  std::vector<int64_t> along(static_cast<size_t>(rank), 1);
  along[static_cast<size_t>(dim)] = c.attrs.ints(1)[static_cast<size_t>(dim)];
  const Tensor positions = arange(along[static_cast<size_t>(dim)]).reshape(along);
  results[0] = where(eq(positions, index), grad, zeros({}, grad.dtype()));
}
void gather_backward_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (c.needs_grad(0)) g[0] = gather(c.grad(), c.attrs.i(0), c.in(1));
}
const OpDef& gather_backward_op = register_op(
    {.name = "gather_backward",
     .schema = "gather_backward(Tensor grad, Tensor index, int dim, int[] input_sizes, "
               "bool one_per_line) -> Tensor",
     .kind = OpKind::Indexing,
     .meta = gather_backward_meta,
     .kernel = gather_backward_kernel,
     .derivative = {.fn = gather_backward_derivative, .saved_inputs = save({1})},
     .decomposition = gather_backward_decomposition,
     .decomposes = [](const Attrs& a) { return a.b(2); },
     .doc = "gather's gradient: zeros of the input's shape with each gradient element added "
            "where gather read it.",
     .internal = true});
Tensor call_gather_backward(const Tensor& grad, int64_t dim, const Tensor& index,
                            const Shape& input_sizes) {
  const int64_t d = input_sizes.empty() ? 0 : wrap_dim(dim, input_sizes.ssize(), "gather");
  return call(gather_backward_op, {grad, index},
              {dim, ints_attr(IntList(input_sizes)), one_per_line(index, d, input_sizes)});
}

int scatter_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  check_scatter_gather(c, c.op.name.data(), &c.in(2));
  return one_output(out, c.in(0).dtype(), c.in(0).sizes());
}
// out = x, then out[..., index[p], ...] = src[p] (or +=) for every position p of index.
template <bool Accumulate>
void scatter_kernel(const OpCall& c, std::span<Tensor> outs) {
  const char* name = c.op.name.data();
  const int64_t dim = wrap_dim(c.attrs.i(0), c.in(0).dim(), name);
  const Tensor index = at_least_1d(c.in(1).contiguous());
  const Tensor out = at_least_1d(outs[0]);
  const Tensor src = at_least_1d(c.in(2));
  if (index.numel() > 0) check_index_bounds(name, index, out.size(dim), dim);
  strided_copy(out, at_least_1d(c.in(0)));
  if (index.numel() == 0) return;
  KILN_DTYPE_SWITCH_ALL(out.dtype(), name, [&]<typename T>() {
    write_along_lines<T>(index, src, out, dim, [](T& dst, T v) {
      if constexpr (!Accumulate) {
        dst = v;
      } else if constexpr (std::is_same_v<T, bool>) {
        dst = dst || v;
      } else {
        dst += v;
      }
    });
  });
}
const OpDef& scatter_op =
    register_op({.name = "scatter",
                 .schema = "scatter(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = scatter_meta,
                 .kernel = scatter_kernel<false>,
                 .derivative = {.fn = scatter_derivative, .saved_inputs = save({1})}});
const OpDef& scatter_add_op =
    register_op({.name = "scatter_add",
                 .schema = "scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = scatter_meta,
                 .kernel = scatter_kernel<true>,
                 .derivative = {.fn = scatter_add_derivative, .saved_inputs = save({1})}});

// ---- index_add: inputs [x, index, source]; attrs [dim, alpha] ----
int index_add_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  const Tensor& index = c.in(1);
  const Tensor& source = c.in(2);
  check_index_dtype("index_add", index, /*allow_int32=*/true);
  KILN_CHECK(index.dim() <= 1, ShapeError,
             "index_add: index must be a 1-d (or 0-d) tensor, got shape ", index.shape_str());
  KILN_CHECK(source.dtype() == x.dtype(), DTypeError,
             "index_add: self and source must have the same dtype, got ", x.dtype(), " and ",
             source.dtype());
  const Scalar& alpha = c.attrs.scalar(1);
  KILN_CHECK(is_floating(x.dtype()) || !alpha.is_floating(), DTypeError,
             "index_add: for integral input tensors alpha must not be a floating point number, "
             "got ",
             alpha);
  const int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), "index_add");
  const Shape xs = sizes_1d(x), ss = sizes_1d(source);
  bool ok = xs.size() == ss.size() && ss[dim] == index.numel();
  for (int64_t d = 0; ok && d < xs.ssize(); ++d) ok = d == dim || xs[d] == ss[d];
  KILN_CHECK(ok, ShapeError, "index_add: source of shape ", source.shape_str(),
             " must match the input's shape ", x.shape_str(), " except at dim ", dim,
             ", where its size must equal the number of indices (", index.numel(), ")");
  return one_output(out, x.dtype(), x.sizes());
}
// out = x; out[o, index[j], i] += alpha * source[o, j, i]. Work is split over (o, block of i)
// units, each of which runs every j in order, so no two threads touch the same element.
void index_add_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t dim = wrap_dim(c.attrs.i(0), c.in(0).dim(), "index_add");
  const Tensor idx_t = c.in(1).contiguous();
  const Tensor out = at_least_1d(outs[0]);
  if (idx_t.numel() > 0) check_index_bounds("index_add", idx_t, out.size(dim), dim);
  strided_copy(out, at_least_1d(c.in(0)));
  if (out.numel() == 0 || idx_t.numel() == 0) return;
  const Tensor src = at_least_1d(c.in(2)).contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t n = idx_t.numel(), rows_out = out.size(dim);
  // Up to 8 blocks per row, so that a single row (dim 0 of a matrix) still splits.
  const int64_t blk = std::clamp<int64_t>((inner + 7) / 8, 16, 1024);
  const int64_t blocks = (inner + blk - 1) / blk;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (n * std::min(inner, blk)));
  KILN_DTYPE_SWITCH_ALL(out.dtype(), "index_add", [&]<typename T>() {
    const T alpha = c.attrs.scalar(1).to<T>();
    const T* sp = src.data_ptr<T>();
    T* op = out.data_ptr<T>();
    dispatch_index(idx_t.dtype(), "index_add", [&]<typename I>() {
      const I* idx = idx_t.data_ptr<I>();
      kernels::parallel_range(outer * blocks, grain, [&](int64_t b, int64_t e) {
        for (int64_t u = b; u < e; ++u) {
          const int64_t o = u / blocks, i0 = (u % blocks) * blk, i1 = std::min(inner, i0 + blk);
          for (int64_t j = 0; j < n; ++j) {
            T* dst = op + (o * rows_out + static_cast<int64_t>(idx[j])) * inner;
            const T* s = sp + (o * n + j) * inner;
            for (int64_t i = i0; i < i1; ++i) {
              if constexpr (std::is_same_v<T, bool>) {
                dst[i] = dst[i] || (alpha && s[i]);
              } else {
                dst[i] += alpha * s[i];
              }
            }
          }
        }
      });
    });
  });
}
const OpDef& index_add_op =
    register_op({.name = "index_add",
                 .schema = "index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar "
                           "alpha=1) -> Tensor",
                 .kind = OpKind::Indexing,
                 .meta = index_add_meta,
                 .kernel = index_add_kernel,
                 .derivative = {.fn = index_add_derivative, .saved_inputs = save({1})}});

// ---- masked_select: inputs [x, mask] -> 1-d (data-dependent size) ----
int masked_select_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.in(1).dtype() == DType::Bool, DTypeError,
             "masked_select: mask must be a bool tensor, got dtype ", c.in(1).dtype());
  broadcast_shapes("masked_select", c.inputs);
  return one_output(out, c.in(0).dtype(), Shape{});
}
void masked_select_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Shape shape = broadcast_shapes("masked_select", c.inputs);
  const Tensor x = at_least_1d(c.in(0).expand(shape));
  const Tensor mask = at_least_1d(c.in(1).expand(shape));
  const int64_t last = x.dim() - 1, len = x.size(last);
  const int64_t lines = num_lines(x.sizes(), last);
  const bool* mp = mask.data_ptr<bool>();
  const int64_t ms = mask.stride(last);
  int64_t count = 0;
  for_each_line<1>(mask.sizes(), last, {mask.strides()}, 0, lines,
                   [&](const std::array<int64_t, 1>& off, const Shape&) {
                     for (int64_t k = 0; k < len; ++k) count += mp[off[0] + k * ms];
                   });
  outs[0] = make_tensor({count}, x.dtype());
  if (count == 0) return;
  KILN_DTYPE_SWITCH_ALL(x.dtype(), "masked_select", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    T* op = outs[0].data_ptr<T>();
    const int64_t xs = x.stride(last);
    int64_t w = 0;
    for_each_line<2>(x.sizes(), last, {x.strides(), mask.strides()}, 0, lines,
                     [&](const std::array<int64_t, 2>& off, const Shape&) {
                       for (int64_t k = 0; k < len; ++k)
                         if (mp[off[1] + k * ms]) op[w++] = xp[off[0] + k * xs];
                     });
  });
}
const OpDef& masked_select_op =
    register_op({.name = "masked_select",
                 .schema = "masked_select(Tensor self, Tensor mask) -> Tensor",
                 .kind = OpKind::DataDependent,
                 .meta = masked_select_meta,
                 .kernel = masked_select_kernel,
                 .derivative = {.fn = masked_select_derivative, .saved_inputs = save({1})}});

// ---- nonzero: [n, ndim] int64 coordinates of the nonzero elements, in row-major order ----
int nonzero_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  return one_output(out, DType::Int64, Shape{});
}
void nonzero_kernel(const OpCall& c, std::span<Tensor> outs) {
  const int64_t nd = c.in(0).dim();
  const Tensor x = at_least_1d(c.in(0));
  const int64_t last = x.dim() - 1, len = x.size(last), xs = x.stride(last);
  const int64_t lines = num_lines(x.sizes(), last);
  KILN_DTYPE_SWITCH_ALL(x.dtype(), "nonzero", [&]<typename T>() {
    const T* xp = x.data_ptr<T>();
    int64_t count = 0;
    for_each_line<1>(x.sizes(), last, {x.strides()}, 0, lines,
                     [&](const std::array<int64_t, 1>& off, const Shape&) {
                       for (int64_t k = 0; k < len; ++k) count += xp[off[0] + k * xs] != T(0);
                     });
    outs[0] = make_tensor({count, nd}, DType::Int64);
    int64_t* op = outs[0].data_ptr<int64_t>();
    for_each_line<1>(x.sizes(), last, {x.strides()}, 0, lines,
                     [&](const std::array<int64_t, 1>& off, const Shape& coords) {
                       for (int64_t k = 0; k < len; ++k) {
                         if (xp[off[0] + k * xs] == T(0)) continue;
                         for (int64_t d = 0; d + 1 < nd; ++d) *op++ = coords[d];
                         if (nd > 0) *op++ = k;
                       }
                     });
  });
}
const OpDef& nonzero_op = register_op({.name = "nonzero",
                                       .schema = "nonzero(Tensor self) -> Tensor",
                                       .kind = OpKind::DataDependent,
                                       .meta = nonzero_meta,
                                       .kernel = nonzero_kernel});

// ---- one_hot: inputs [indices int64]; attrs [num_classes >= 0] -> int64 [..., num_classes] ----
int one_hot_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(c.in(0).dtype() == DType::Int64, DTypeError,
             "one_hot: indices must be an int64 tensor, got dtype ", c.in(0).dtype());
  const int64_t classes = c.attrs.i(0);
  KILN_CHECK(classes >= 0, ValueError, "one_hot: num_classes must be non-negative (or -1 to ",
             "infer it), got ", classes);
  Shape sizes = c.in(0).sizes();
  sizes.push_back(classes);
  checked_numel(sizes, "one_hot");
  return one_output(out, DType::Int64, std::move(sizes));
}
void one_hot_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor idx_t = c.in(0).contiguous();
  const int64_t classes = c.attrs.i(0);
  const int64_t* idx = idx_t.data_ptr<int64_t>();
  const int64_t n = idx_t.numel();
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(idx[i] >= 0, IndexError, "one_hot: class values must be non-negative, got ", idx[i]);
    KILN_CHECK(idx[i] < classes, IndexError, "one_hot: class values must be smaller than ",
               "num_classes (", classes, "), got ", idx[i]);
  }
  int64_t* op = outs[0].data_ptr<int64_t>();
  kernels::parallel_range(n, line_grain(classes), [&](int64_t b, int64_t e) {
    std::fill(op + b * classes, op + e * classes, int64_t{0});
    for (int64_t i = b; i < e; ++i) op[i * classes + idx[i]] = 1;
  });
}
const OpDef& one_hot_op = register_op({.name = "one_hot",
                                       .schema = "one_hot(Tensor self, int num_classes) -> Tensor",
                                       .kind = OpKind::Indexing,
                                       .meta = one_hot_meta,
                                       .kernel = one_hot_kernel,
                                       .internal = true});

}  // namespace
}  // namespace ops

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return ops::call(ops::index_select_op, {x, index}, {dim});
}
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return ops::call(ops::embedding_op, {weight, indices});
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return ops::call(ops::gather_op, {x, index}, {dim});
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call(ops::scatter_op, {x, index, src}, {dim});
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value) {
  // The value broadcast to index's shape: scatter's shape rules then hold by construction.
  Tensor src = scalar_tensor(value, x.dtype()).expand(index.sizes());
  return scatter(x, dim, index, src);
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call(ops::scatter_add_op, {x, index, src}, {dim});
}
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                 const Scalar& alpha) {
  return ops::call(ops::index_add_op, {x, index, source}, {dim, alpha});
}
Tensor& scatter_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call_into(self, ops::scatter_op, {self, index, src}, {dim});
}
Tensor& scatter_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return ops::call_into(self, ops::scatter_add_op, {self, index, src}, {dim});
}
Tensor& index_add_(Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                   const Scalar& alpha) {
  return ops::call_into(self, ops::index_add_op, {self, index, source}, {dim, alpha});
}
Tensor masked_select(const Tensor& x, const Tensor& mask) {
  return ops::call(ops::masked_select_op, {x, mask});
}
Tensor nonzero(const Tensor& x) { return ops::call(ops::nonzero_op, {x}); }

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  if (num_classes == -1) {
    // The number of classes depends on the data (a sync point under capture, as in PyTorch).
    KILN_CHECK(indices.dtype() == DType::Int64, DTypeError,
               "one_hot: indices must be an int64 tensor, got dtype ", indices.dtype());
    KILN_CHECK(indices.numel() > 0, ValueError,
               "one_hot: cannot infer the number of classes from an empty tensor");
    std::vector<int64_t> values = indices.to_vector<int64_t>();
    num_classes = *std::max_element(values.begin(), values.end()) + 1;
    num_classes = std::max<int64_t>(num_classes, 0);  // all negative: the kernel reports it
  }
  return ops::call(ops::one_hot_op, {indices}, {num_classes});
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& one_hot_function = register_function(
    {.schema = "one_hot(Tensor self, int num_classes=-1) -> Tensor",
     .doc = "int64 one-hot rows of the class indices; num_classes -1: one more than the largest "
            "index (which reads the values: a sync point under compile).",
     .call = [](Args a) -> FunctionResult { return one_hot(a.tensor(0), a.i(1)); },
     .module = "nn.functional"});
const FunctionDef& embedding_function = register_function(
    {.schema = "embedding(Tensor input, Tensor weight) -> Tensor",
     .doc = "The rows of weight that input's indices name.",
     .call = [](Args a) -> FunctionResult { return embedding(a.tensor(1), a.tensor(0)); },
     .module = "nn.functional"});
}  // namespace

}  // namespace kiln
