// Lowering a graph to fused kernels and extern calls (see schedule.h).
#include "backends/inductor/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>

#include "backends/inductor/lowering.h"
#include "diagnostics/diagnostics.h"
#include "kiln/ir/passes.h"
#include "ops/kernels/reduce.h"
#include "ops/op_utils.h"

namespace kiln::inductor {

namespace {

using ir::is_view;
using ir::root_of;

bool is_full(const ir::Node& n) { return lowering_as<FillLowering>(n) != nullptr; }

// What a kernel reads as the constant node n holds: a Constant node's or a full's value and dtype.
KernelConstant constant_of_node(const ir::Node& n) {
  return is_full(n) ? KernelConstant{n.attrs.scalar(1), n.attrs.dtype(2)}
                    : KernelConstant{n.attrs.scalar(0), n.attrs.dtype(1)};
}

// The dtype a Predicate-form op computes in: the inputs' promoted type, decided by the same
// function eager uses (on stand-in tensors with each input's dtype, rank and wrapped flag).
DType promoted_dtype(const ir::Graph& g, const ir::Node& n) {
  std::vector<Tensor> standins;
  for (ir::ValueRef v : n.inputs) {
    const ir::Node& p = g.nodes[static_cast<size_t>(v.node)];
    const TensorMeta& m = g.info(v);
    Tensor t = make_tensor(Shape(m.sizes.size(), 1), m.dtype);
    if (p.kind == ir::NodeKind::Constant) t.impl()->set_wrapped_number(true);
    standins.push_back(std::move(t));
  }
  return ops::result_type(standins);
}

// A group of fusable nodes being formed: one iteration space.
struct Group {
  Shape ranges;
  std::vector<int32_t> nodes;
  int32_t pos = -1;       // where the group runs among the steps (a node index)
  bool sealed = false;    // something outside reads it: pos is final
  bool row = false;       // holds a row op: a row kernel
  bool columns = false;   // holds a column reduction (then no other row op)
  bool by_index = false;  // computes ops by element index (never a row kernel)
  bool windowed = false;  // reads a pad, cat, flip, roll or repeat by index arithmetic
  std::set<std::pair<int32_t, int32_t>> reads;  // the values it reads from outside
  int64_t indirect_loads = 0;  // each takes two inputs of its own (not shared with other ops)
};

// At most this many operands (outputs and inputs) per kernel: block_loop_any's limit.
constexpr int64_t kMaxKernelOperands = 64;
// At most this many ops per kernel: a chain of thousands of ops is several kernels, so neither
// the scheduler's operand count (per member) nor the C++ compiler (one function per kernel)
// works on one of unbounded size.
constexpr size_t kMaxKernelOps = 256;

// The shape of a row kernel's per-row values: its ranges with the row dim 1.
Shape per_row_shape(Shape ranges) {
  ranges.back() = 1;
  return ranges;
}

// How a kernel over `rank` ranges reads value v (broadcast to the ranges, dims aligned right):
// the element index of its element [i...], relative to its root's first element.
KernelInput read_at(const ir::Graph& g, ir::ValueRef v, int64_t rank) {
  const ir::ValueRef r = root_of(g, v);
  const TensorMeta& m = g.info(v);
  const TensorMeta& root = g.info(r);
  KernelInput in{r, m.dtype, m.storage_offset - root.storage_offset,
                 Shape(static_cast<size_t>(rank), 0)};
  const int64_t lead = rank - m.sizes.ssize();
  for (int64_t d = 0; d < m.sizes.ssize(); ++d)
    if (m.sizes[d] != 1) in.strides[lead + d] = m.strides[d];
  return in;
}

// Value x read at [i - shift] where lo[d] <= i_d < hi[d] (its window over the ranges).
KernelInput read_shifted(const ir::Graph& g, ir::ValueRef x, const Shape& ranges,
                         const Shape& shift) {
  const int64_t rank = ranges.ssize();
  KernelInput in = read_at(g, x, rank);
  const Shape& sizes = g.info(x).sizes;
  in.window.resize(static_cast<size_t>(rank));
  for (int64_t d = rank - 1; d >= 0; --d) {  // (innermost first: see the strides below)
    in.window[d] = {std::max<int64_t>(shift[d], 0), std::min(ranges[d], shift[d] + sizes[d])};
    // Only i = shift is read along a dim x has one element in: any stride addresses it, and
    // the one continuing the next dim's lets the loop merge the two (launch_shape's coalescing).
    if (sizes[d] == 1 && d + 1 < rank) in.strides[d] = in.strides[d + 1] * ranges[d + 1];
    in.offset -= shift[d] * in.strides[d];
  }
  return in;
}

// A roll's net shift of each rolled dim in (0, size), by dim (a dim listed twice rolls twice).
std::map<int64_t, int64_t> roll_shifts(const ir::Graph& g, const ir::Node& n) {
  const Shape& sizes = g.info(n.inputs[0]).sizes;
  const auto shifts = n.attrs.ints(0), dims = n.attrs.ints(1);
  std::map<int64_t, int64_t> net;
  for (size_t i = 0; i < dims.size() && i < shifts.size() && !sizes.empty(); ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + sizes.ssize() : dims[i];
    const int64_t size = sizes[d];
    if (size > 0) net[d] = ((net[d] + shifts[i] % size) % size + size) % size;
  }
  std::erase_if(net, [](const auto& e) { return e.second == 0; });
  return net;
}

// Whether n (an embedding, an index_select of a 1-d index, or a gather, along a dim of a tensor
// with dims) can load its rows indirectly in a kernel: int32 or int64 indices, a table that is
// not a constant.
bool reads_indirectly(const ir::Graph& g, const ir::Node& n) {
  const TensorMeta& table = g.info(n.inputs[0]);
  const TensorMeta& index = g.info(n.inputs[1]);
  if (index.dtype != DType::Int64 && index.dtype != DType::Int32) return false;
  if (g.nodes[static_cast<size_t>(root_of(g, n.inputs[0]).node)].kind == ir::NodeKind::Constant ||
      g.nodes[static_cast<size_t>(root_of(g, n.inputs[1]).node)].kind == ir::NodeKind::Constant)
    return false;
  switch (lowering_as<IndirectLoadLowering>(n)->indices) {
    case IndirectLoadLowering::Indices::Rows:
      return table.sizes.size() == 2;
    case IndirectLoadLowering::Indices::PerElement:
      return !table.sizes.empty() && index.sizes == n.outputs[0].sizes;
    case IndirectLoadLowering::Indices::AlongDim:
      break;
  }
  return !table.sizes.empty() && index.sizes.size() == 1;
}

// The two inputs of a kernel reading embedding, index_select or gather node n by an indirect
// load over the node's output shape: the indices (an embedding's and an index_select's broadcast
// over the rows they pick, a gather's one per element), then the table.
void add_indirect_inputs(const ir::Graph& g, const ir::Node& n, Kernel& kernel) {
  const Shape& ranges = n.outputs[0].sizes;
  const auto rank = static_cast<size_t>(ranges.size());
  const auto indices = lowering_as<IndirectLoadLowering>(n)->indices;
  const bool embedding = indices == IndirectLoadLowering::Indices::Rows;
  const TensorMeta& table = g.info(n.inputs[0]);
  const TensorMeta& index = g.info(n.inputs[1]);
  const int64_t dim = indexed_dim(g, n);
  // Indices: embedding's over the leading ranges, index_select's along `dim`, gather's everywhere.
  const ir::ValueRef index_root = root_of(g, n.inputs[1]);
  const bool gather = indices == IndirectLoadLowering::Indices::PerElement;
  KernelInput idx = gather ? read_at(g, n.inputs[1], static_cast<int64_t>(rank))
                           : KernelInput{index_root, index.dtype,
                                         index.storage_offset - g.info(index_root).storage_offset,
                                         Shape(rank, 0)};
  for (size_t d = 0; d < index.sizes.size() && !gather; ++d)
    if (index.sizes[d] != 1)
      idx.strides[embedding ? d : static_cast<size_t>(dim)] = index.strides[d];
  // The table: its rows picked by the indices, its other dims read at the element's position.
  const ir::ValueRef table_root = root_of(g, n.inputs[0]);
  KernelInput rows{table_root, table.dtype,
                   table.storage_offset - g.info(table_root).storage_offset, Shape(rank, 0)};
  for (int64_t d = 0; d < table.sizes.ssize(); ++d) {
    if (d == dim) continue;
    const size_t at = embedding ? rank - 1 : static_cast<size_t>(d);  // embedding: the last range
    if (table.sizes[d] != 1) rows.strides[at] = table.strides[d];
  }
  rows.index_stride = table.strides[dim];
  rows.index = static_cast<int32_t>(kernel.inputs.size());
  kernel.inputs.push_back(std::move(idx));
  kernel.inputs.push_back(std::move(rows));
}

// How many times a repeat copies its input (the product of its repeats; any number above
// kMaxCatPieces counts as kMaxCatPieces + 1, so huge repeats cannot overflow).
int64_t repeat_copies(const ir::Node& n) {
  int64_t copies = 1;
  for (int64_t r : n.attrs.ints(0)) {
    if (r == 0) return 0;
    copies = std::min<int64_t>(copies * std::max<int64_t>(r, 1),
                               static_cast<int64_t>(kMaxCatPieces) + 1);
  }
  return copies;
}

// The inputs of a kernel reading pad, cat, flip, roll or repeat node w as index arithmetic,
// appended to its inputs (the first is the one ops read; a cat's or roll's other pieces follow it).
void add_windowed_inputs(const ir::Graph& g, int32_t w, Kernel& kernel) {
  const ir::Node& n = g.nodes[static_cast<size_t>(w)];
  const Shape& ranges = n.outputs[0].sizes;
  const int64_t rank = ranges.ssize();
  const WindowLowering::Kind kind = lowering_as<WindowLowering>(n)->kind;
  if (kind == WindowLowering::Kind::Flip) {
    // The input seen with negated strides along the flipped dims (no flipped dims: a copy).
    KernelInput in = read_at(g, n.inputs[0], rank);
    for (int64_t d : n.attrs.ints(0)) {
      d = d < 0 ? d + rank : d;
      in.offset += (ranges[d] - 1) * in.strides[d];
      in.strides[d] = -in.strides[d];
    }
    in.through = w;
    kernel.inputs.push_back(std::move(in));
    return;
  }
  if (kind == WindowLowering::Kind::Roll) {
    // out[i] = x[(i - s) mod size] along each rolled dim: per rolled dim two pieces, x shifted
    // by s over [s, size) and by s - size over [0, s).
    const std::map<int64_t, int64_t> net = roll_shifts(g, n);
    const size_t pieces = size_t{1} << net.size();
    for (size_t mask = 0; mask < pieces; ++mask) {
      Shape shift(static_cast<size_t>(rank), 0);
      size_t bit = 0;
      for (const auto& [d, s] : net) shift[d] = (mask >> bit++ & 1) ? s - ranges[d] : s;
      KernelInput in = read_shifted(g, n.inputs[0], ranges, shift);
      in.through = w;
      if (mask + 1 < pieces) in.otherwise = static_cast<int32_t>(kernel.inputs.size() + 1);
      kernel.inputs.push_back(std::move(in));
    }
    return;
  }
  if (kind == WindowLowering::Kind::Repeat) {
    // One piece per copy: the input shifted to the copy's place, windowed to it.
    const auto reps = n.attrs.ints(0);
    const Shape& sizes = g.info(n.inputs[0]).sizes;
    const int64_t copies = repeat_copies(n);
    for (int64_t c = 0; c < copies; ++c) {
      Shape shift(static_cast<size_t>(rank), 0);
      for (int64_t d = rank - 1, rest = c; d >= 0; --d) {
        shift[d] = rest % reps[d] * sizes[d];
        rest /= reps[d];
      }
      KernelInput in = read_shifted(g, n.inputs[0], ranges, shift);
      in.fill = Scalar(0);  // (never read: the copies cover the result)
      in.through = w;
      if (c + 1 < copies) in.otherwise = static_cast<int32_t>(kernel.inputs.size() + 1);
      kernel.inputs.push_back(std::move(in));
    }
    return;
  }
  if (kind == WindowLowering::Kind::Pad) {
    // pad holds (left, right) pairs from the last dim backwards; negative amounts crop.
    const auto pad = n.attrs.ints(0);
    Shape shift(static_cast<size_t>(rank), 0);
    for (size_t p = 0; p + 1 < pad.size(); p += 2) shift[rank - 1 - p / 2] = pad[p];
    KernelInput in = read_shifted(g, n.inputs[0], ranges, shift);
    in.fill = n.attrs.scalar(1);
    in.through = w;
    kernel.inputs.push_back(std::move(in));
    return;
  }
  const int64_t dim = n.attrs.i(0) < 0 ? n.attrs.i(0) + rank : n.attrs.i(0);
  Shape shift(static_cast<size_t>(rank), 0);
  for (size_t p = 0; p < n.inputs.size(); ++p) {
    KernelInput in = read_shifted(g, n.inputs[p], ranges, shift);
    in.fill = Scalar(0);  // (never read: the pieces cover the result)
    in.through = w;
    if (p + 1 < n.inputs.size()) in.otherwise = static_cast<int32_t>(kernel.inputs.size() + 1);
    kernel.inputs.push_back(std::move(in));
    shift[dim] += g.info(n.inputs[p]).sizes[dim];
  }
}

}  // namespace

RowOpKind row_op_kind(const ir::Graph& g, const ir::Node& n) {
  if (n.kind != ir::NodeKind::Call || n.inputs.empty()) return RowOpKind::None;
  const Lowering* lowering = lowering_of(n.op);
  if (!lowering) return RowOpKind::None;
  if (std::holds_alternative<RowNormLowering>(*lowering)) {
    // Normalised over the last dim alone (weight and bias: one value per column).
    const TensorMeta& x = g.info(n.inputs[0]);
    const int64_t cols = x.sizes.empty() ? 0 : x.sizes.back();
    const bool ok = n.attrs.ints(0).size() == 1 && is_floating(x.dtype) && cols >= 1 &&
                    cols <= kMaxRowElements && n.outputs[0].dtype == x.dtype;
    return ok ? RowOpKind::Norm : RowOpKind::None;
  }
  if (n.inputs.size() != 1) return RowOpKind::None;
  const auto* fold = std::get_if<RowFoldLowering>(lowering);
  if (std::holds_alternative<RowExtremeLowering>(*lowering) || (fold && fold->index_result)) {
    // Along the last dim (attributes: dim, keepdim) of a floating tensor whose rows are read in
    // place; an index per row (and max_dim's, min_dim's values: the element there), the same
    // however eager splits the row across threads.
    const TensorMeta& in = g.info(n.inputs[0]);
    const int64_t rank = in.sizes.ssize();
    if (rank == 0 || !is_floating(in.dtype) || !n.attrs.has(0)) return RowOpKind::None;
    const int64_t dim = n.attrs.i(0), cols = in.sizes.back();
    const bool ok = (dim == rank - 1 || dim == -1) && cols >= 1 && cols <= kMaxRowElements &&
                    (cols == 1 || in.strides.back() == 1);
    return ok ? RowOpKind::Reduction : RowOpKind::None;
  }
  if (n.outputs.size() != 1) return RowOpKind::None;
  const bool softmax = std::holds_alternative<SoftmaxLowering>(*lowering);
  if (!softmax && !fold) return RowOpKind::None;
  if (fold && fold->p_norm) {  // attributes: dims, keepdim, p; the 2-, 1- and inf-norms
    const double p = n.attrs.f(2);
    if (p != 2 && p != 1 && !std::isinf(p)) return RowOpKind::None;
  }
  const TensorMeta& in = g.info(n.inputs[0]);
  const TensorMeta& out = n.outputs[0];
  const int64_t rank = in.sizes.ssize();
  if (rank == 0 || in.dtype != out.dtype || !is_floating(out.dtype)) return RowOpKind::None;
  const int64_t cols = in.sizes.back();
  if (cols < 1 || cols > kMaxRowElements) return RowOpKind::None;
  if (softmax) {
    const int64_t dim = n.attrs.i(0);
    return dim == rank - 1 || dim == -1 ? RowOpKind::Softmax : RowOpKind::None;
  }
  if (fold->dtype_attr && n.attrs.has(2)) return RowOpKind::None;  // dtype=
  const auto dims = n.attrs.ints(0);
  if (fold->columns && rank >= 2 && reduces_all_but_last(dims, rank)) {
    // A column reduction, of a tensor eager folds by its outer path (kept dim contiguous).
    const bool ok = cols >= kMinColumns && checked_numel(in.sizes, "inductor") > 0 &&
                    same_addressing(in.sizes, in.strides, contiguous_strides(in.sizes));
    return ok ? RowOpKind::Columns : RowOpKind::None;
  }
  // sum / mean / prod / amax / amin / var / logsumexp / norm over the last dim alone (keepdim
  // either way), of a row eager reads in place and folds whole.
  if (dims.size() != 1 || (dims[0] != rank - 1 && dims[0] != -1)) return RowOpKind::None;
  if (cols > 1 && in.strides.back() != 1) return RowOpKind::None;
  if (!kernels::folds_rows_whole(checked_numel(in.sizes, "inductor") / cols, cols))
    return RowOpKind::None;
  return RowOpKind::Reduction;
}

bool draws_in_kernel(const ir::Graph& g, const ir::Node& n) {
  const DrawLowering* draw = lowering_as<DrawLowering>(n);
  if (!draw || n.outputs.size() != 1) return false;
  if (draw->kind == DrawLowering::Kind::Randint) return true;  // (its meta checked the range)
  if (!is_floating(n.outputs[0].dtype)) return false;
  if (draw->kind != DrawLowering::Kind::Bernoulli) return true;
  const ir::Node& p = g.nodes[static_cast<size_t>(n.inputs[0].node)];
  if (p.kind != ir::NodeKind::Constant && !is_full(p)) return false;
  const double probability = constant_of_node(p).value.to<double>();
  return probability >= 0 && probability <= 1;  // (NaN: no)
}

int64_t indexed_dim(const ir::Graph& g, const ir::Node& n) {
  if (lowering_as<IndirectLoadLowering>(n)->indices == IndirectLoadLowering::Indices::Rows)
    return 0;
  const int64_t dim = n.attrs.i(0);
  return dim < 0 ? dim + g.info(n.inputs[0]).sizes.ssize() : dim;
}

bool reduces_all_but_last(std::span<const int64_t> dims, int64_t rank) {
  if (dims.empty()) return false;  // no dims listed: a reduction over every dim
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    d = d < 0 ? d + rank : d;
    if (d < 0 || d >= rank - 1 || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return static_cast<int64_t>(dims.size()) == rank - 1;
}

bool same_addressing(IntList sizes, IntList a, IntList b) {
  if (a.size() != b.size() || a.size() != sizes.size()) return false;
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return true;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && a[d] != b[d]) return false;
  return true;
}

bool computed_by_index(const ir::Graph& g, const ir::Node& n) {
  if (draws_in_kernel(g, n)) return true;
  if (lowering_as<TriangleLowering>(n)) return n.outputs[0].sizes.size() >= 2;
  if (lowering_as<IndirectLoadLowering>(n)) return reads_indirectly(g, n);
  return false;
}

bool can_fuse(const ir::Graph& g, const ir::Node& n) {
  if (row_op_kind(g, n) != RowOpKind::None || computed_by_index(g, n)) return true;
  if (n.kind != ir::NodeKind::Call || n.op->kind != OpKind::Pointwise) return false;
  if (n.op->pointwise.functor.empty() || n.outputs.size() != 1) return false;
  // Integer division checks its divisors for zero in the eager kernel (a kiln::Error, where a
  // generated loop would trap): it stays an extern call.
  const PointwiseLowering* pointwise = lowering_as<PointwiseLowering>(n);
  if (!is_floating(n.outputs[0].dtype) && pointwise && pointwise->checks_integer_divisor)
    return false;
  for (ir::ValueRef v : n.inputs) {
    // A view of a constant (never recorded in practice) would need a materialised scalar.
    const ir::ValueRef r = root_of(g, v);
    if (r != v && g.nodes[static_cast<size_t>(r.node)].kind == ir::NodeKind::Constant) return false;
  }
  return true;
}

std::vector<bool> read_as_constant(const ir::Graph& g) {
  std::vector<bool> constant(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) constant[i] = is_full(g.nodes[i]);
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Call) continue;
    for (ir::ValueRef v : n.inputs)
      if (constant[static_cast<size_t>(v.node)])
        constant[static_cast<size_t>(v.node)] = !is_view(n) && n.op->kind != OpKind::Indexing &&
                                                can_fuse(g, n) &&
                                                row_op_kind(g, n) == RowOpKind::None;
  }
  for (ir::ValueRef v : g.outputs) constant[static_cast<size_t>(v.node)] = false;
  return constant;
}

std::vector<bool> read_by_index_arithmetic(const ir::Graph& g) {
  const size_t num_nodes = g.nodes.size();
  std::vector<bool> windowed(num_nodes, false);
  // A piece must be a realized value of the result's dtype and rank, with elements.
  auto piece_ok = [&](ir::ValueRef v, const TensorMeta& out) {
    const TensorMeta& m = g.info(v);
    return m.dtype == out.dtype && m.sizes.size() == out.sizes.size() &&
           checked_numel(m.sizes, "inductor") > 0 &&
           g.nodes[static_cast<size_t>(root_of(g, v).node)].kind != ir::NodeKind::Constant;
  };
  for (size_t i = 0; i < num_nodes; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Call || n.outputs.size() != 1) continue;
    const WindowLowering* window = lowering_as<WindowLowering>(n);
    if (!window) continue;
    const TensorMeta& out = n.outputs[0];
    bool handled = true;
    switch (window->kind) {
      case WindowLowering::Kind::Pad:
      case WindowLowering::Kind::Flip:
        break;
      case WindowLowering::Kind::Cat:
        handled = n.inputs.size() <= kMaxCatPieces;
        break;
      case WindowLowering::Kind::Roll:
        handled = roll_shifts(g, n).size() <= 2;
        break;
      case WindowLowering::Kind::Repeat:
        handled = n.attrs.ints(0).size() == g.info(n.inputs[0]).sizes.size() &&
                  repeat_copies(n) <= static_cast<int64_t>(kMaxCatPieces);
        break;
    }
    if (!handled || out.sizes.empty() || checked_numel(out.sizes, "inductor") == 0) continue;
    windowed[i] = std::all_of(n.inputs.begin(), n.inputs.end(),
                              [&](ir::ValueRef v) { return piece_ok(v, out); });
  }
  // Every reader a pointwise op over the same shape (row ops read whole rows).
  for (size_t i = 0; i < num_nodes; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Call) continue;
    for (ir::ValueRef v : n.inputs) {
      const auto w = static_cast<size_t>(v.node);
      if (!windowed[w]) continue;
      windowed[w] = !is_view(n) && n.op->kind != OpKind::Indexing && can_fuse(g, n) &&
                    row_op_kind(g, n) == RowOpKind::None && n.outputs[0].sizes == g.info(v).sizes;
    }
  }
  for (ir::ValueRef v : g.outputs) windowed[static_cast<size_t>(v.node)] = false;
  return windowed;
}

namespace {

// Why a node did not join a kernel it could have joined (the "fusion" log, tests).
struct Refusal {
  enum class Kind : uint8_t {
    None,
    KernelFull,           // the kernel holds kMaxKernelOps ops
    TooManyOperands,      // its inputs and outputs would pass kMaxKernelOperands
    OtherShape,           // another iteration space
    ColumnsApart,         // a column reduction shares its kernel with pointwise ops only
    NeedsPlainLoop,       // windows and by-index ops are a plain loop's, not a row loop's
    NeedsRowLoop,         // a row op in a plain kernel that reads windows or computes by index
    ReadsThroughView,     // reads a member through a view (which needs it in memory)
    ReadsColumnResult,    // a column reduction's result is complete only when the kernel ends
    IndirectReadsMember,  // an indirect load reads its table and indices whole
    ReadsOtherElements,   // reads a member at other elements than the one being computed
    InputNotReady,        // reads a value made after the (sealed) kernel runs
  };
  Kind kind = Kind::None;
  ir::ValueRef value{-1, 0};  // the value read, where the reason is about one
  explicit operator bool() const { return kind != Kind::None; }
};

std::string shape_str(const Shape& s) { return detail::concat(IntList(s)); }

std::string value_str(ir::ValueRef v) {
  return v.output ? detail::concat("%", v.node, ".", v.output) : detail::concat("%", v.node);
}

// Lowers a graph to a schedule in three named passes: group (fusable nodes into kernels, in
// graph order), realize (which values must exist in memory), build kernels (their inputs,
// ops and outputs); the steps run in the order the grouping fixed.
class Scheduler {
 public:
  Scheduler(const ir::Graph& g, std::vector<std::string>* decisions);
  Schedule run() {
    group_nodes();
    realize_values();
    Schedule s = build_kernels();
    s.steps = order_steps();
    return s;
  }

 private:
  // A fusable node looking for a group: what decides where it may go.
  struct Joining {
    size_t node;
    RowOpKind row_kind;
    bool by_index;
    bool indirect;  // an indirect load (two kernel inputs of its own)
    Shape shape;    // the iteration space it needs: a row op's input's, else its output's
  };

  void group_nodes();
  void place(size_t i);
  void run_lone_softmaxes_as_externs();
  Refusal refusal(int32_t grp, const Joining& j) const;
  int64_t input_pieces(ir::ValueRef v) const;
  int64_t input_pieces_with(int32_t grp, const Joining& j) const;
  int64_t possible_outputs(int32_t grp, size_t joining) const;
  void seal_producer(ir::ValueRef v);
  void realize_values();
  Schedule build_kernels() const;
  Kernel build_kernel(size_t k, Schedule& s) const;
  std::vector<Step> order_steps() const;

  bool logging() const { return decisions_ != nullptr || log_enabled(LogTopic::Fusion); }
  void note(const std::string& line) const;
  std::string node_str(size_t i) const {
    return detail::concat("%", i, " (", g_.nodes[i].op->name, ")");
  }
  std::string describe(const Refusal& r, int32_t grp, const Joining& j) const;

  Group& group_at(int32_t grp) { return groups_[static_cast<size_t>(grp)]; }
  const Group& group_at(int32_t grp) const { return groups_[static_cast<size_t>(grp)]; }
  int32_t group_of_root(ir::ValueRef v) const {
    return group_of_[static_cast<size_t>(root_of(g_, v).node)];
  }
  // Whether value v has one element per row in its row kernel: a per-row node's result, or a
  // normalisation's statistics (its outputs after the first).
  bool value_per_row(ir::ValueRef v) const {
    return per_row_[static_cast<size_t>(v.node)] ||
           (v.output > 0 && row_op_[static_cast<size_t>(v.node)]);
  }
  // Whether value v is read as a constant (a Constant node, or a full read as one).
  bool constant_value(ir::ValueRef v) const {
    return g_.nodes[static_cast<size_t>(v.node)].kind == ir::NodeKind::Constant ||
           as_constant_[static_cast<size_t>(v.node)];
  }
  bool reads_windows(const ir::Node& n) const {
    return std::any_of(n.inputs.begin(), n.inputs.end(),
                       [&](ir::ValueRef v) { return windowed_[static_cast<size_t>(v.node)]; });
  }

  const ir::Graph& g_;
  std::vector<std::string>* decisions_;
  const size_t num_nodes_;
  // What the graph's analyses decided before grouping.
  const std::vector<bool> windowed_;     // read through windows (read_by_index_arithmetic)
  const std::vector<bool> as_constant_;  // read as constants (read_as_constant)
  // Who reads each node's values directly (as realize_values sees reads), and whether something
  // reads them otherwise (through a view, or returned): what may make a member of a group one
  // of its kernel's outputs.
  std::vector<std::vector<int32_t>> direct_readers_;
  std::vector<bool> read_otherwise_;

  // The grouping's state.
  std::vector<Group> groups_;
  std::vector<int32_t> group_of_;  // per node; -1: in no group
  // Per value read by some group from outside: the latest such group (horizontal fusion's lead).
  std::map<std::pair<int32_t, int32_t>, int32_t> last_group_reading_;
  std::vector<int32_t> externs_;  // nodes run by their eager kernels
  int32_t last_joined_ = -1;      // the group the previous fusable node went to
  std::vector<bool> per_row_;     // computed once per row of a row kernel
  std::vector<bool> row_op_;      // a row op (row_op_kind), in a kernel
  std::vector<bool> column_op_;   // a column reduction, in a kernel

  // Per node output: whether it exists in memory (realize_values).
  std::vector<std::vector<bool>> realized_;
};

Scheduler::Scheduler(const ir::Graph& g, std::vector<std::string>* decisions)
    : g_(g),
      decisions_(decisions),
      num_nodes_(g.nodes.size()),
      windowed_(read_by_index_arithmetic(g)),
      as_constant_(read_as_constant(g)),
      direct_readers_(num_nodes_),
      read_otherwise_(num_nodes_, false),
      group_of_(num_nodes_, -1),
      per_row_(num_nodes_, false),
      row_op_(num_nodes_, false),
      column_op_(num_nodes_, false) {
  for (size_t i = 0; i < num_nodes_; ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Call || is_view(n)) continue;
    for (ir::ValueRef v : n.inputs) {
      const ir::ValueRef r = root_of(g, v);
      if (r != v)
        read_otherwise_[static_cast<size_t>(r.node)] = true;
      else
        direct_readers_[static_cast<size_t>(r.node)].push_back(static_cast<int32_t>(i));
    }
  }
  for (ir::ValueRef v : g.outputs) read_otherwise_[static_cast<size_t>(root_of(g, v).node)] = true;
}

void Scheduler::note(const std::string& line) const {
  if (decisions_) decisions_->push_back(line);
  if (log_enabled(LogTopic::Fusion)) diagnostics::log(LogTopic::Fusion, line);
}

std::string Scheduler::describe(const Refusal& r, int32_t grp, const Joining& j) const {
  const Group& to = group_at(grp);
  const std::string v = value_str(r.value);
  switch (r.kind) {
    case Refusal::Kind::None:
      break;
    case Refusal::Kind::KernelFull:
      return detail::concat("the kernel holds ", kMaxKernelOps, " ops already");
    case Refusal::Kind::TooManyOperands:
      return detail::concat("the kernel would have more than ", kMaxKernelOperands,
                            " inputs and outputs");
    case Refusal::Kind::OtherShape:
      return detail::concat("it iterates over ", shape_str(j.shape), ", the kernel over ",
                            shape_str(to.ranges));
    case Refusal::Kind::ColumnsApart:
      return "a column reduction shares its kernel with pointwise ops only";
    case Refusal::Kind::NeedsPlainLoop:
      return "it reads a window or computes by element index, which a row kernel cannot";
    case Refusal::Kind::NeedsRowLoop:
      return "a row op cannot join a kernel that reads windows or computes by element index";
    case Refusal::Kind::ReadsThroughView:
      return detail::concat("it reads ", value_str(root_of(g_, r.value)),
                            " through a view, which needs it in memory");
    case Refusal::Kind::ReadsColumnResult:
      return detail::concat("it reads column reduction ", v,
                            ", whose result is complete only when the kernel ends");
    case Refusal::Kind::IndirectReadsMember:
      return detail::concat("an indirect load reads ", v, " whole, not element by element");
    case Refusal::Kind::ReadsOtherElements:
      return detail::concat("it reads ", v, " at other elements than the one being computed");
    case Refusal::Kind::InputNotReady:
      return detail::concat("it reads ", v, ", which is made after the kernel must run");
  }
  return "";
}

// The kernel inputs value v takes when read from outside a group (none for a constant).
int64_t Scheduler::input_pieces(ir::ValueRef v) const {
  const ir::Node& p = g_.nodes[static_cast<size_t>(v.node)];
  if (constant_value(v)) return 0;
  if (!windowed_[static_cast<size_t>(v.node)]) return 1;
  switch (lowering_as<WindowLowering>(p)->kind) {
    case WindowLowering::Kind::Pad:
    case WindowLowering::Kind::Flip:
      return 1;
    case WindowLowering::Kind::Roll:
      return int64_t{1} << roll_shifts(g_, p).size();
    case WindowLowering::Kind::Repeat:
      return repeat_copies(p);
    case WindowLowering::Kind::Cat:
      break;
  }
  return static_cast<int64_t>(p.inputs.size());  // a cat: one per piece
}

// The kernel inputs group `grp` would take with the joining node in it.
int64_t Scheduler::input_pieces_with(int32_t grp, const Joining& j) const {
  std::set<std::pair<int32_t, int32_t>> reads = group_at(grp).reads;
  for (ir::ValueRef v : g_.nodes[j.node].inputs)
    if (group_of_root(v) != grp) reads.insert({v.node, v.output});
  int64_t count = 2 * (group_at(grp).indirect_loads + (j.indirect ? 1 : 0));
  for (const auto& [node, output] : reads) count += input_pieces({node, output});
  return count;
}

// The kernel outputs group `grp` may end up with if node `joining` joins it: the members
// something outside the group may still read (all of them for a long chain would split it into
// kernels of kMaxKernelOperands ops; only its last member is one).
int64_t Scheduler::possible_outputs(int32_t grp, size_t joining) const {
  int64_t count = static_cast<int64_t>(g_.nodes[joining].outputs.size());
  for (int32_t m : group_at(grp).nodes) {
    const auto& readers = direct_readers_[static_cast<size_t>(m)];
    const bool outside =
        read_otherwise_[static_cast<size_t>(m)] ||
        std::any_of(readers.begin(), readers.end(), [&](int32_t r) {
          return static_cast<size_t>(r) != joining && group_of_[static_cast<size_t>(r)] != grp;
        });
    if (outside) count += static_cast<int64_t>(g_.nodes[static_cast<size_t>(m)].outputs.size());
  }
  return count;
}

void Scheduler::seal_producer(ir::ValueRef v) {
  const int32_t grp = group_of_root(v);
  if (grp >= 0) group_at(grp).sealed = true;
}

// Why the joining node may not join group `grp` (none: it may). A fusable node may join a
// group over its own iteration space when every input it reads is there at the group's
// position: a member read elementwise, or a value made before it (for an unsealed group, whose
// position moves to the node, that is every value not in the group).
Refusal Scheduler::refusal(int32_t grp, const Joining& j) const {
  using Kind = Refusal::Kind;
  const ir::Node& n = g_.nodes[j.node];
  const Group& to = group_at(grp);
  if (to.nodes.size() >= kMaxKernelOps) return {Kind::KernelFull};
  if (possible_outputs(grp, j.node) + input_pieces_with(grp, j) > kMaxKernelOperands)
    return {Kind::TooManyOperands};
  // Over the group's whole rows, or (a pointwise op in a row kernel) once per row.
  const bool once_per_row = j.row_kind == RowOpKind::None && to.row && !to.columns &&
                            to.ranges != j.shape && !to.ranges.empty() &&
                            j.shape == per_row_shape(to.ranges);
  if (to.ranges != j.shape && !once_per_row) return {Kind::OtherShape};
  // Column reductions share a kernel with pointwise ops only (a thread may see part of a row).
  if (j.row_kind != RowOpKind::None && to.row && (j.row_kind == RowOpKind::Columns) != to.columns)
    return {Kind::ColumnsApart};
  // Windows and ops computed by element index are a plain loop's (block_loop_any's), not a
  // row loop's.
  if (to.row && (reads_windows(n) || j.by_index)) return {Kind::NeedsPlainLoop};
  if ((to.windowed || to.by_index) && j.row_kind != RowOpKind::None) return {Kind::NeedsRowLoop};
  for (ir::ValueRef v : n.inputs) {
    const ir::ValueRef r = root_of(g_, v);
    const ir::Node& producer = g_.nodes[static_cast<size_t>(r.node)];
    if (producer.kind != ir::NodeKind::Call || constant_value(r)) continue;  // inputs, constants
    const int32_t from = group_of_[static_cast<size_t>(r.node)];
    if (from == grp) {
      if (r != v) return {Kind::ReadsThroughView, v};
      if (column_op_[static_cast<size_t>(r.node)]) return {Kind::ReadsColumnResult, v};
      if (j.indirect) return {Kind::IndirectReadsMember, v};
      const Shape& got = g_.info(v).sizes;
      // A member read at the element being computed, or a per-row member read by a pointwise
      // op (a broadcast along the row: the value is complete by then).
      const bool elementwise = got == (once_per_row ? per_row_shape(to.ranges) : to.ranges) &&
                               value_per_row(r) == once_per_row;
      const bool broadcast = j.row_kind == RowOpKind::None && !once_per_row && value_per_row(r) &&
                             got == per_row_shape(to.ranges);
      if (!elementwise && !broadcast) return {Kind::ReadsOtherElements, v};
    } else if (to.sealed) {
      const int32_t ready_at = from >= 0 ? group_at(from).pos : r.node;
      if (ready_at >= to.pos) return {Kind::InputNotReady, v};
    }
  }
  return {};
}

// Pass 1: grouping in graph order. Each group runs as one step at its position `pos`: the
// index of its last member while nothing outside reads it, frozen when something does (the
// group is then sealed: it must run before that reader).
void Scheduler::group_nodes() {
  for (size_t i = 0; i < num_nodes_; ++i) {
    const ir::Node& n = g_.nodes[i];
    if (n.kind != ir::NodeKind::Call) continue;  // placeholders and constants: no step
    if (is_view(n) || windowed_[i] || as_constant_[i]) {
      // Views are index arithmetic over their root, which must then be in memory: a later
      // node of the group could not read it at other positions of the same loop. So are pads
      // and cats read through windows, over their pieces. (A full read as a constant: nothing.)
      for (ir::ValueRef v : n.inputs) seal_producer(v);
      continue;
    }
    if (!can_fuse(g_, n)) {
      for (ir::ValueRef v : n.inputs) seal_producer(v);
      externs_.push_back(static_cast<int32_t>(i));
      continue;
    }
    place(i);
  }
  run_lone_softmaxes_as_externs();
}

// A softmax or log_softmax in a kernel of its own, fused with nothing, runs as an extern call:
// its generated row loop would call the very row function eager's kernel calls, plus a
// per-row indirection (W2, softmax over [4096, 1024]: 1.02x eager's time, paired, on AVX-512
// and AVX2 builds alike), and there is nothing to compile.
void Scheduler::run_lone_softmaxes_as_externs() {
  std::vector<int32_t> renumbered(groups_.size(), -1);
  std::vector<Group> kept;
  for (size_t k = 0; k < groups_.size(); ++k) {
    Group& grp = groups_[k];
    const int32_t node = grp.nodes.front();
    if (grp.nodes.size() == 1 &&
        row_op_kind(g_, g_.nodes[static_cast<size_t>(node)]) == RowOpKind::Softmax) {
      externs_.push_back(node);
      group_of_[static_cast<size_t>(node)] = -1;
      row_op_[static_cast<size_t>(node)] = false;
      per_row_[static_cast<size_t>(node)] = false;
      if (logging())
        note(detail::concat(node_str(static_cast<size_t>(node)),
                            " is alone in its kernel: it runs as an extern call (eager's kernel)"));
      continue;
    }
    renumbered[k] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(grp));
  }
  groups_ = std::move(kept);
  for (int32_t& g : group_of_)
    if (g >= 0) g = renumbered[static_cast<size_t>(g)];
}

// Puts fusable node i in a group. Candidates, in order: the groups it reads from (vertical
// fusion), the groups reading one of its inputs (horizontal fusion: that input is loaded once),
// the group the previous fusable node joined; else it starts a group.
void Scheduler::place(size_t i) {
  const ir::Node& n = g_.nodes[i];
  // A row op iterates over its input's rows (a reduction's result has one element per row);
  // a pointwise op over its output.
  Joining j{i, row_op_kind(g_, n), computed_by_index(g_, n), false, {}};
  j.indirect = j.by_index && n.op->kind == OpKind::Indexing;
  j.shape = j.row_kind == RowOpKind::None ? n.outputs[0].sizes : g_.info(n.inputs[0]).sizes;
  std::set<int32_t> refused;  // (each refusal logged once)
  auto joinable = [&](int32_t grp) {
    if (grp < 0 || refused.count(grp)) return false;
    const Refusal why = refusal(grp, j);
    if (!why) return true;
    refused.insert(grp);
    if (logging())
      note(detail::concat("cannot fuse ", node_str(i), " into kernel_", grp, ": ",
                          describe(why, grp, j)));
    return false;
  };
  int32_t target = -1;
  const char* how = "";
  for (ir::ValueRef v : n.inputs) {
    const int32_t grp = group_of_root(v);
    if (grp > target && joinable(grp)) target = grp, how = "reads its result";
  }
  if (target < 0) {
    for (ir::ValueRef v : n.inputs) {
      auto it = last_group_reading_.find({v.node, v.output});
      if (it != last_group_reading_.end() && it->second > target && joinable(it->second))
        target = it->second, how = "reads an input it reads";
    }
  }
  if (target < 0 && joinable(last_joined_)) target = last_joined_, how = "the previous op's";
  // Every other group n reads from now has an outside reader.
  for (ir::ValueRef v : n.inputs)
    if (group_of_root(v) != target) seal_producer(v);
  if (target < 0) {
    target = static_cast<int32_t>(groups_.size());
    groups_.push_back({j.shape, {}});
    if (logging())
      note(detail::concat(node_str(i), " starts kernel_", target, " over ", shape_str(j.shape)));
  } else if (logging()) {
    note(detail::concat("fused ", node_str(i), " into kernel_", target, " (", how, ")"));
  }
  Group& grp = group_at(target);
  row_op_[i] = j.row_kind != RowOpKind::None;
  column_op_[i] = j.row_kind == RowOpKind::Columns;
  per_row_[i] = j.row_kind == RowOpKind::Reduction ||
                (j.row_kind == RowOpKind::None && grp.row && grp.ranges != j.shape);
  grp.row = grp.row || j.row_kind != RowOpKind::None;
  grp.columns = grp.columns || j.row_kind == RowOpKind::Columns;
  grp.by_index = grp.by_index || j.by_index;
  grp.indirect_loads += j.indirect ? 1 : 0;
  grp.windowed = grp.windowed || reads_windows(n);
  grp.nodes.push_back(static_cast<int32_t>(i));
  if (!grp.sealed) grp.pos = static_cast<int32_t>(i);
  group_of_[i] = target;
  last_joined_ = target;
  for (ir::ValueRef v : n.inputs)
    if (group_of_root(v) != target) grp.reads.insert({v.node, v.output});
  for (ir::ValueRef v : n.inputs)
    if (group_of_[static_cast<size_t>(v.node)] != target && !constant_value(v))
      last_group_reading_[{v.node, v.output}] = target;
}

// The steps, by position: each extern where its node stands, each kernel at its `pos`.
std::vector<Step> Scheduler::order_steps() const {
  std::vector<std::pair<int32_t, Step>> keyed;
  for (int32_t node : externs_) keyed.push_back({node, {Step::Kind::Extern, node}});
  for (size_t k = 0; k < groups_.size(); ++k)
    keyed.push_back({groups_[k].pos, {Step::Kind::Kernel, static_cast<int32_t>(k)}});
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Step> order;
  for (const auto& [key, step] : keyed) order.push_back(step);
  return order;
}

// Pass 2: realized values — read outside their group (or through a view), or returned.
void Scheduler::realize_values() {
  realized_.assign(num_nodes_, {});
  for (size_t i = 0; i < num_nodes_; ++i) realized_[i].assign(g_.nodes[i].outputs.size(), false);
  auto realize = [&](ir::ValueRef v) {
    const ir::ValueRef r = root_of(g_, v);
    realized_[static_cast<size_t>(r.node)][static_cast<size_t>(r.output)] = true;
  };
  for (size_t i = 0; i < num_nodes_; ++i) {
    const ir::Node& n = g_.nodes[i];
    if (n.kind != ir::NodeKind::Call || is_view(n)) continue;
    for (ir::ValueRef v : n.inputs) {
      // (A pad or cat read through windows: its pieces are. A full read as a constant: nothing.)
      if (windowed_[static_cast<size_t>(v.node)] || as_constant_[static_cast<size_t>(v.node)])
        continue;
      const ir::ValueRef r = root_of(g_, v);
      const int32_t producer_group = group_of_[static_cast<size_t>(r.node)];
      if (group_of_[i] < 0 || producer_group != group_of_[i] || r != v) realize(v);
    }
  }
  for (ir::ValueRef v : g_.outputs) realize(v);
}

// Pass 3: the kernels.
Schedule Scheduler::build_kernels() const {
  Schedule s;
  s.fused_away.assign(num_nodes_, false);
  for (size_t k = 0; k < groups_.size(); ++k) s.kernels.push_back(build_kernel(k, s));
  for (size_t i = 0; i < num_nodes_; ++i)
    if (as_constant_[i]) s.fused_away[i] = true;
  return s;
}

Kernel Scheduler::build_kernel(size_t k, Schedule& s) const {
  const Group& grp = groups_[k];
  Kernel kernel;
  kernel.ranges = grp.ranges;
  kernel.name = "kernel_" + std::to_string(k);
  std::map<std::pair<int32_t, int32_t>, int32_t> op_of;     // node output → ops index
  std::map<std::pair<int32_t, int32_t>, int32_t> input_of;  // value → inputs index
  std::map<int32_t, int32_t> constant_of;                   // constant node → constants index
  const int64_t rank = grp.ranges.ssize();
  auto operand = [&](ir::ValueRef v) -> Operand {
    const ir::Node& p = g_.nodes[static_cast<size_t>(v.node)];
    if (auto it = op_of.find({v.node, v.output}); it != op_of.end())
      return {Operand::Kind::Op, it->second};
    if (constant_value(v)) {
      auto [it, fresh] =
          constant_of.try_emplace(v.node, static_cast<int32_t>(kernel.constants.size()));
      if (fresh) kernel.constants.push_back(constant_of_node(p));
      return {Operand::Kind::Constant, it->second};
    }
    auto [it, fresh] =
        input_of.try_emplace({v.node, v.output}, static_cast<int32_t>(kernel.inputs.size()));
    if (fresh && windowed_[static_cast<size_t>(v.node)]) {
      add_windowed_inputs(g_, v.node, kernel);
    } else if (fresh) {
      kernel.inputs.push_back(read_at(g_, v, rank));
    }
    return {Operand::Kind::Input, it->second};
  };
  for (int32_t node : grp.nodes) {
    const ir::Node& n = g_.nodes[static_cast<size_t>(node)];
    KernelOp op{node, n.op, {}, n.outputs[0].dtype, n.outputs[0].dtype};
    if (n.op->kind == OpKind::Indexing) {
      // An indirect load: its own two inputs (indices, then the table), read by it alone.
      add_indirect_inputs(g_, n, kernel);
      const auto rows = static_cast<int32_t>(kernel.inputs.size() - 1);
      op.args = {{Operand::Kind::Input, rows}, {Operand::Kind::Input, rows - 1}};
    } else {
      for (ir::ValueRef v : n.inputs) op.args.push_back(operand(v));
    }
    const auto at = static_cast<size_t>(node);
    using Role = KernelOp::Role;
    op.role = column_op_[at]                ? Role::ColumnFold
              : row_op_[at] && per_row_[at] ? Role::RowReduction
              : row_op_[at]                 ? Role::RowOp
              : per_row_[at]                ? Role::PerRow
              : computed_by_index(g_, n)    ? Role::ByIndex
                                            : Role::Elementwise;
    if (grp.row) kernel.row_size = kernel.ranges.back();
    if (!op.row_op() && n.op->pointwise.form == PointwiseBody::Form::Predicate)
      op.compute = promoted_dtype(g_, n);
    s.fused_away[static_cast<size_t>(node)] = true;
    // One op per output (only row ops have several: see KernelOp::output).
    for (int32_t o = 0; o < static_cast<int32_t>(n.outputs.size()); ++o) {
      KernelOp each = o == 0 ? op : KernelOp{node,
                                             n.op,
                                             {},
                                             n.outputs[o].dtype,
                                             n.outputs[o].dtype,
                                             KernelOp::Role::RowReduction,
                                             o};
      op_of[{node, o}] = static_cast<int32_t>(kernel.ops.size());
      kernel.ops.push_back(std::move(each));
      if (realized_[static_cast<size_t>(node)][static_cast<size_t>(o)]) {
        kernel.outputs.push_back({static_cast<int32_t>(kernel.ops.size() - 1), {node, o}});
        s.fused_away[static_cast<size_t>(node)] = false;
      }
    }
  }
  KILN_CHECK(
      static_cast<int64_t>(kernel.inputs.size() + kernel.outputs.size()) <= kMaxKernelOperands,
      Error, "inductor: internal error: kernel ", k, " has ", kernel.inputs.size(), " inputs and ",
      kernel.outputs.size(), " outputs, more than the ", kMaxKernelOperands,
      " operands a kernel may have");
  return kernel;
}

}  // namespace

Schedule schedule_graph(const ir::Graph& g, std::vector<std::string>* decisions) {
  return Scheduler(g, decisions).run();
}

bool decomposed_in_generated_code(const ir::Node& n) {
  return n.kind == ir::NodeKind::Call &&
         (n.op->kind == OpKind::Pointwise || n.op->kind == OpKind::Indexing) &&
         n.op->has_decomposition(n.attrs);
}

}  // namespace kiln::inductor
