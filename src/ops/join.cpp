// Joining and splitting: cat (one op over any number of inputs), and stack, split, chunk and
// unbind as composites (stack = unsqueeze + cat; the splits are narrow/select views).
#include <algorithm>
#include <sstream>

#include "kiln/ops/function.h"
#include "kiln/ops/indexing.h"
#include "ops/indexing_utils.h"

namespace kiln {
namespace ops {
namespace {

// PyTorch keeps accepting 1-d empty tensors in cat whatever the other shapes (legacy).
bool skipped_in_cat(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

std::string shapes_of(std::span<const Tensor> ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) os << (i ? ", " : "") << ts[i].shape_str();
  return os.str();
}

// cat: inputs = the tensors; attrs [dim]
int cat_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  KILN_CHECK(!c.inputs.empty(), ValueError, "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < c.inputs.size(); ++i)
    KILN_CHECK(c.in(i).dim() > 0, ShapeError, "cat: zero-dimensional tensor (at position ", i,
               ") cannot be concatenated; got shapes ", shapes_of(c.inputs));
  const DType dt = result_type(c.inputs);
  auto first = std::find_if(c.inputs.begin(), c.inputs.end(),
                            [](const Tensor& t) { return !skipped_in_cat(t); });
  if (first == c.inputs.end()) return one_output(out, dt, Shape{0});
  const Tensor& ref = *first;
  const int64_t dim = wrap_dim(c.attrs.i(0), ref.dim(), "cat");
  Shape sizes = ref.sizes();
  sizes[dim] = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Tensor& t = c.in(i);
    if (skipped_in_cat(t)) continue;
    KILN_CHECK(t.dim() == ref.dim(), ShapeError,
               "cat: tensors must have the same number of dimensions: got ", ref.dim(), " and ",
               t.dim(), " (tensor ", i, "); shapes ", shapes_of(c.inputs));
    for (int64_t d = 0; d < t.dim(); ++d)
      KILN_CHECK(d == dim || t.size(d) == ref.size(d), ShapeError,
                 "cat: sizes of tensors must match except in dimension ", dim, ": expected size ",
                 ref.size(d), " but got size ", t.size(d), " at dim ", d, " for tensor ", i,
                 "; shapes ", shapes_of(c.inputs));
    sizes[dim] = checked_add(sizes[dim], t.size(dim), "cat", "the size of the result's dim");
  }
  checked_numel(sizes, "cat");
  return one_output(out, dt, std::move(sizes));
}

// Every input contiguous and of the output's dtype: the output is, row by row (rows = the
// dims before `dim`), the concatenation of the inputs' rows, so one threaded pass over the
// output's bytes copies everything with memcpy.
void cat_contiguous(const std::vector<Tensor>& ins, const Tensor& out, int64_t dim) {
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t isz = out.element_size();
  std::vector<int64_t> prefix{0};  // start of each input's segment within an output row
  std::vector<const char*> src;
  for (const Tensor& t : ins) {
    prefix.push_back(prefix.back() + t.size(dim) * inner);
    src.push_back(static_cast<const char*>(t.data_ptr()));
  }
  const int64_t row = prefix.back();
  char* dst = static_cast<char*>(out.data_ptr());
  kernels::parallel_range(out.numel(), kParallelGrain * 4, [&](int64_t b, int64_t e) {
    for (int64_t pos = b; pos < e;) {
      const int64_t o = pos / row, within = pos % row;
      const size_t i = static_cast<size_t>(std::upper_bound(prefix.begin(), prefix.end(), within) -
                                           prefix.begin() - 1);
      const int64_t seg = prefix[i + 1] - prefix[i], at = within - prefix[i];
      const int64_t n = std::min(e - pos, seg - at);
      std::memcpy(dst + pos * isz, src[i] + (o * seg + at) * isz, static_cast<size_t>(n * isz));
      pos += n;
    }
  });
}

void cat_kernel(const OpCall& c, std::span<Tensor> outs) {
  const Tensor& out = outs[0];
  if (out.numel() == 0) return;
  std::vector<Tensor> ins;
  for (const Tensor& t : c.inputs)
    if (!skipped_in_cat(t) && t.numel() > 0) ins.push_back(t);
  const int64_t dim = wrap_dim(c.attrs.i(0), out.dim(), "cat");
  const bool simple = std::all_of(ins.begin(), ins.end(), [&](const Tensor& t) {
    return t.is_contiguous() && t.dtype() == out.dtype();
  });
  if (simple) return cat_contiguous(ins, out, dim);
  int64_t at = 0;
  for (const Tensor& t : ins) {
    Shape strides = out.strides();
    Tensor slot = strided_view(out, t.sizes(), strides, out.storage_offset() + at * strides[dim]);
    strided_copy(slot, cast(t, out.dtype()));
    at += t.size(dim);
  }
}

// Each input gets its slice of the gradient along dim (the skipped legacy empty inputs none).
void cat_derivative(const BackwardCall& c, std::span<Tensor> g) {
  const Tensor& gr = c.grad();
  if (gr.dim() == 1 && gr.size(0) == 0) return;  // every input was a skipped empty one
  const int64_t dim = wrap_dim(c.attrs.i(0), gr.dim(), "cat");
  int64_t at = 0;
  for (size_t i = 0; i < c.input_meta.size(); ++i) {
    const Shape& s = c.input_meta[i].sizes;
    if (s.size() == 1 && s[0] == 0) continue;
    if (c.needs_grad(i)) g[i] = gr.narrow(dim, at, s[dim]);
    at += s[dim];
  }
}
const OpDef& cat_op = register_op({.name = "cat",
                                   .schema = "cat(Tensor[] tensors, int dim=0) -> Tensor",
                                   .kind = OpKind::Layout,
                                   .meta = cat_meta,
                                   .kernel = cat_kernel,
                                   .derivative = {.fn = cat_derivative}});

}  // namespace
}  // namespace ops

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  return dispatch1(ops::cat_op, tensors, {dim});
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), ValueError, "stack: expected a non-empty list of tensors");
  for (size_t i = 1; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError,
               "stack: expects each tensor to be equal size, but got ", tensors[0].shape_str(),
               " at entry 0 and ", tensors[i].shape_str(), " at entry ", i);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.dim() > 0, ShapeError, "split: expects at least a 1-dimensional tensor");
  KILN_CHECK(split_size >= 0, ValueError, "split: split_size must be non-negative, got ",
             split_size);
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.size(d);
  KILN_CHECK(split_size > 0 || n == 0, ValueError,
             "split: split_size can only be 0 if the dimension's size is 0, but dim ", d,
             " has size ", n);
  const int64_t pieces =
      split_size == 0 ? 1 : std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(pieces));
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t start = i * split_size;
    out.push_back(x.narrow(d, start, std::min(split_size, n - start)));
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, IntList split_sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, ShapeError, "split: expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, ValueError, "split: split_sizes must be non-negative, got ", split_sizes);
    total += s;
  }
  KILN_CHECK(total == x.size(d), ShapeError, "split: split_sizes ", split_sizes,
             " must sum exactly to ", x.size(d), " (the size of dim ", d, " of shape ",
             x.shape_str(), ")");
  std::vector<Tensor> out;
  out.reserve(split_sizes.size());
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(x.dim() > 0, ShapeError, "chunk: expects at least a 1-dimensional tensor");
  KILN_CHECK(chunks > 0, ValueError, "chunk: chunks must be greater than 0, got ", chunks);
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  // An empty dim still gives `chunks` (empty) pieces, as PyTorch.
  if (n == 0) return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);
  return split(x, (n + chunks - 1) / chunks, d);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dim() > 0, IndexError, "unbind: cannot unbind a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  out.reserve(static_cast<size_t>(x.size(d)));
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

// ---- Python-facing forms (kiln/ops/function.h) ----
namespace {
using Args = const FunctionArgs&;
const FunctionDef& stack_function = register_function(
    {.schema = "stack(Tensor[] tensors, int dim=0) -> Tensor",
     .doc = "The tensors (of one shape) joined along a new dim.",
     .call = [](Args a) -> FunctionResult { return stack(a.tensors(0), a.i(1)); }});
const FunctionDef& split_function = register_function(
    {.schema = "split(Tensor self, int[] split_size_or_sections, int dim=0) -> Tensor[]",
     .doc = "Views of consecutive pieces along dim: of split_size elements each (the last may "
            "be shorter), or of the sizes listed.",
     .call = [](Args a) -> FunctionResult {
       const std::vector<int64_t>& sizes = a.ints(1);
       if (sizes.size() == 1) return split(a.tensor(0), sizes[0], a.i(2));
       return split(a.tensor(0), IntList(sizes), a.i(2));
     }});
const FunctionDef& chunk_function = register_function(
    {.schema = "chunk(Tensor self, int chunks, int dim=0) -> Tensor[]",
     .doc = "At most `chunks` views of (nearly) equal size along dim.",
     .call = [](Args a) -> FunctionResult { return chunk(a.tensor(0), a.i(1), a.i(2)); }});
const FunctionDef& unbind_function = register_function(
    {.schema = "unbind(Tensor self, int dim=0) -> Tensor[]",
     .doc = "Every slice along dim, as views without that dim.",
     .call = [](Args a) -> FunctionResult { return unbind(a.tensor(0), a.i(1)); }});
}  // namespace

}  // namespace kiln
