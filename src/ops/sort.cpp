// Sorting along a dim: sort (stable; values and int64 indices), argsort (its indices) and
// topk. NaN orders as the largest value, as in PyTorch. Each line along the dim is sorted on
// its own, lines split across threads.
#include <algorithm>
#include <cmath>

#include "kiln/ops/factory.h"
#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "ops/indexing_utils.h"

namespace kiln {
namespace ops {
namespace {

// a before b in ascending order, NaN last.
template <typename T>
bool ascending(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(b)) return !std::isnan(a);
  }
  return a < b;
}
// a before b in descending order, NaN first.
template <typename T>
bool descending(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
  }
  return a > b;
}

// Runs body(line values as (value, position) pairs, values out, indices out) for every line of
// x along dim; the outputs are contiguous with x's shape except that dim has `out_len` elements.
template <typename T, typename Body>
void for_each_sorted_line(const Tensor& x_in, int64_t dim, const Tensor& values_out,
                          const Tensor& indices_out, Body body) {
  const Tensor x = at_least_1d(x_in);
  const Tensor vals = at_least_1d(values_out), idxs = at_least_1d(indices_out);
  const int64_t n = x.size(dim), xs = x.stride(dim), vs = vals.stride(dim), is = idxs.stride(dim);
  const T* xp = x.data_ptr<T>();
  T* vp = vals.data_ptr<T>();
  int64_t* ip = idxs.data_ptr<int64_t>();
  const int64_t work = n * std::max<int64_t>(1, static_cast<int64_t>(std::log2(n + 1)));
  kernels::parallel_range(num_lines(x.sizes(), dim), line_grain(work), [&](int64_t b, int64_t e) {
    std::vector<std::pair<T, int64_t>> line(static_cast<size_t>(n));
    for_each_line<3>(x.sizes(), dim, {x.strides(), vals.strides(), idxs.strides()}, b, e,
                     [&](const std::array<int64_t, 3>& off, const Shape&) {
                       for (int64_t k = 0; k < n; ++k) line[k] = {xp[off[0] + k * xs], k};
                       const int64_t m = body(line);
                       for (int64_t k = 0; k < m; ++k) {
                         vp[off[1] + k * vs] = line[k].first;
                         ip[off[2] + k * is] = line[k].second;
                       }
                     });
  });
}

// ---- sort: inputs [x]; attrs [dim, descending] -> (values, int64 indices) ----
int sort_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  wrap_dim(c.attrs.i(0), c.in(0).dim(), "sort");
  out[0] = {c.in(0).dtype(), c.in(0).sizes()};
  out[1] = {DType::Int64, c.in(0).sizes()};
  return 2;
}
void sort_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  if (x.numel() == 0) return;
  const int64_t dim = wrap_dim(c.attrs.i(0), x.dim(), "sort");
  const bool desc = c.attrs.b(1);
  KILN_DTYPE_SWITCH_ALL(x.dtype(), "sort", [&]<typename T>() {
    using P = std::pair<T, int64_t>;
    for_each_sorted_line<T>(x, dim, outs[0], outs[1], [desc](std::vector<P>& line) {
      if (desc) {
        std::stable_sort(line.begin(), line.end(),
                         [](const P& a, const P& b) { return descending(a.first, b.first); });
      } else {
        std::stable_sort(line.begin(), line.end(),
                         [](const P& a, const P& b) { return ascending(a.first, b.first); });
      }
      return static_cast<int64_t>(line.size());
    });
  });
}
// ---- derivatives: the values' gradient goes back to the positions the indices name ----
template <size_t DimAttr>
void sorted_values_derivative(const BackwardCall& c, std::span<Tensor> g) {
  if (!c.needs_grad(0) || !c.grad(0).defined()) return;
  const int64_t nd = c.input_meta[0].sizes.ssize();
  const int64_t dim = nd == 0 ? 0 : wrap_dim(c.attrs.i(DimAttr), nd, c.op.name.data());
  const Tensor& grad = c.grad(0);
  g[0] = scatter_add(zeros(c.input_meta[0].sizes, grad.dtype()), dim, c.out(1), grad);
}

const OpDef& sort_op = register_op(
    {.name = "sort",
     .schema =
         "sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
     .kind = OpKind::Extern,
     .meta = sort_meta,
     .kernel = sort_kernel,
     .derivative = {.fn = sorted_values_derivative<0>, .saved_outputs = save({1})}});

// ---- topk: inputs [x]; attrs [k, dim, largest, sorted] -> (values, int64 indices) ----
int topk_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const Tensor& x = c.in(0);
  KILN_CHECK(x.dtype() != DType::Bool, DTypeError, "topk: not supported for dtype bool");
  const int64_t k = c.attrs.i(0);
  const int64_t dim = wrap_dim(c.attrs.i(1), x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  KILN_CHECK(k >= (x.dim() == 0 ? 1 : 0) && k <= n, IndexError, "topk: k (", k,
             ") is out of range for dimension ", dim, " with size ", n, " (shape ", x.shape_str(),
             ")");
  Shape sizes = x.sizes();
  if (x.dim() > 0) sizes[dim] = k;
  out[0] = {x.dtype(), sizes};
  out[1] = {DType::Int64, std::move(sizes)};
  return 2;
}
// Always returns the k elements in order (which `sorted=false` allows); ties keep the lower
// position first.
void topk_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& x = c.in(0);
  if (outs[0].numel() == 0) return;
  const int64_t k = c.attrs.i(0);
  const int64_t dim = wrap_dim(c.attrs.i(1), x.dim(), "topk");
  const bool largest = c.attrs.b(2);
  KILN_DTYPE_SWITCH_NUMERIC(x.dtype(), "topk", [&]<typename T>() {
    using P = std::pair<T, int64_t>;
    auto run = [&](auto before) {
      for_each_sorted_line<T>(x, dim, outs[0], outs[1], [&](std::vector<P>& line) {
        auto cmp = [&](const P& a, const P& b) {
          if (before(a.first, b.first)) return true;
          if (before(b.first, a.first)) return false;
          return a.second < b.second;
        };
        std::partial_sort(line.begin(), line.begin() + k, line.end(), cmp);
        return k;
      });
    };
    if (largest) {
      run([](T a, T b) { return descending(a, b); });
    } else {
      run([](T a, T b) { return ascending(a, b); });
    }
  });
}
const OpDef& topk_op =
    register_op({.name = "topk",
                 .schema = "topk(Tensor self, int k, int dim=-1, bool largest=True, "
                           "bool sorted=True) -> (Tensor values, Tensor indices)",
                 .kind = OpKind::Extern,
                 .meta = topk_meta,
                 .kernel = topk_kernel,
                 .derivative = {.fn = sorted_values_derivative<1>, .saved_outputs = save({1})}});

}  // namespace
}  // namespace ops

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor in[] = {x};
  dispatch(ops::sort_op, in, {dim, descending}, outs);
  return {std::move(outs[0]), std::move(outs[1])};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  return sort(x, dim, descending).second;
}
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  std::array<Tensor, kMaxOpOutputs> outs;
  const Tensor in[] = {x};
  dispatch(ops::topk_op, in, {k, dim, largest, sorted}, outs);
  return {std::move(outs[0]), std::move(outs[1])};
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
const FunctionDef& argsort_function = register_function(
    {.schema = "argsort(Tensor self, int dim=-1, bool descending=False) -> Tensor",
     .doc = "The indices that sort the tensor along dim (stable).",
     .call = [](const FunctionArgs& a) -> FunctionResult {
       return argsort(a.tensor(0), a.i(1), a.b(2));
     }});
}  // namespace

}  // namespace kiln
