// Renders fused kernels as C++ (see cpp_render.h). A kernel is one block_loop over its
// coalesced iteration space; the body computes each op over a block of up to kBlock elements
// with the op's own functor (vec::map for vector functors, a plain loop for scalar ones), so
// every element is computed exactly as the eager kernel computes it.
#include "backends/inductor/cpp_render.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>

#include "backends/inductor/lowering.h"
#include "backends/inductor/runtime/inductor_runtime.h"
#include "ops/kernels/block_loop.h"
#include "ops/kernels/loops.h"

namespace kiln::inductor {

namespace {

// A kernel's limits and thresholds are the eager engine's (one definition each).
using kernels::kMaxDims;
using kernels::kStreamingStoreBytes;

const char* ctype(DType d) {
  switch (d) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32_t";
    case DType::Int64:
      return "int64_t";
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
  }
  return "?";
}

// `value` as a C++ expression of type T, exactly: a float as its shortest decimal that reads
// back to it (std::to_chars' guarantee, and C++ compilers round literals correctly), with its
// bits beside it ("2.0f /* 0x40000000 */"); infinities, NaNs and integers through their bits.
template <typename T>
std::string literal(T value) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (value ? "true" : "false");
  } else if constexpr (std::is_floating_point_v<T>) {
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    const Bits bits = std::bit_cast<Bits>(value);
    const char* suffix = sizeof(T) == 8 ? "ULL" : "U";
    if (!std::isfinite(value)) {
      os << "std::bit_cast<" << ctype(dtype_v<T>) << ">(" << bits << suffix << ")";
      return os.str();
    }
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    std::string text(buf, end);
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    os << text << (sizeof(T) == 8 ? "" : "f") << " /* 0x" << std::hex << bits << " */";
  } else {  // (through the bits too: the most negative value has no literal)
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    os << "std::bit_cast<" << ctype(dtype_v<T>) << ">(" << std::bit_cast<Bits>(value)
       << (sizeof(T) == 8 ? "ULL" : "U") << ")";
  }
  return os.str();
}

// A constant node's value as the eager path computes it: the Scalar made a 0-d tensor of the
// node's dtype, then cast to the dtype the op computes in.
std::string constant_literal(const KernelConstant& c, DType compute) {
  return KILN_DTYPE_SWITCH_ALL(c.dtype, "inductor", [&]<typename D>() {
    const D stored = c.value.to<D>();
    return KILN_DTYPE_SWITCH_ALL(compute, "inductor",
                                 [&]<typename T>() { return literal(static_cast<T>(stored)); });
  });
}

// The coalesced loop of a kernel: dims innermost first, byte strides per operand, and the
// windows of operands read through them (KernelInput::window; empty for the others).
struct LoopShape {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // per operand, per dim
  using Window = std::vector<std::pair<int64_t, int64_t>>;
  std::vector<Window> windows;  // per operand: per dim, or empty
};

// Two dims merge when every operand steps through both as through one; a windowed operand's
// window must then span the inner one whole, and its bounds along the outer one scale by the
// inner size. A dim of size 1 is dropped (an operand whose window excludes its one index is
// read nowhere: an empty window).
LoopShape coalesce(const Shape& ranges, const std::vector<std::vector<int64_t>>& byte_strides,
                   const std::vector<LoopShape::Window>& windows = {}) {
  LoopShape l;
  const size_t n = byte_strides.size();
  l.strides.resize(n);
  l.windows.resize(n);
  auto windowed = [&](size_t k) { return k < windows.size() && !windows[k].empty(); };
  std::vector<bool> nowhere(n, false);
  for (int64_t d = ranges.ssize() - 1; d >= 0; --d) {
    const int64_t size = ranges[d];
    if (size == 1) {
      for (size_t k = 0; k < n; ++k)
        nowhere[k] =
            nowhere[k] || (windowed(k) && windows[k][d] != std::pair<int64_t, int64_t>{0, 1});
      continue;
    }
    if (!l.sizes.empty()) {
      const int64_t inner = l.sizes.back();
      bool merge = true;
      for (size_t k = 0; k < n; ++k)
        merge = merge && byte_strides[k][d] == l.strides[k].back() * inner &&
                (!windowed(k) || l.windows[k].back() == std::pair<int64_t, int64_t>{0, inner});
      if (merge) {
        l.sizes.back() *= size;
        for (size_t k = 0; k < n; ++k)
          if (windowed(k))
            l.windows[k].back() = {windows[k][d].first * inner, windows[k][d].second * inner};
        continue;
      }
    }
    l.sizes.push_back(size);
    for (size_t k = 0; k < n; ++k) {
      l.strides[k].push_back(byte_strides[k][d]);
      if (windowed(k)) l.windows[k].push_back(windows[k][d]);
    }
  }
  if (l.sizes.empty()) {  // a single element
    l.sizes.push_back(1);
    for (size_t k = 0; k < n; ++k) {
      l.strides[k].push_back(0);
      if (windowed(k)) l.windows[k].push_back({0, 1});
    }
  }
  for (size_t k = 0; k < n; ++k)
    if (nowhere[k]) l.windows[k][0] = {0, 0};
  KILN_CHECK(l.sizes.size() <= static_cast<size_t>(kMaxDims), NotImplementedError,
             "inductor: a fused loop over ", l.sizes.size(), " non-mergeable dims (at most ",
             kMaxDims, ")");
  return l;
}

// Element sizes of a kernel's operands: outputs, then inputs.
std::vector<int64_t> operand_itemsizes(const Kernel& k) {
  std::vector<int64_t> item;
  for (const Kernel::Output& o : k.outputs)
    item.push_back(itemsize(k.ops[static_cast<size_t>(o.op)].dtype));
  for (const KernelInput& in : k.inputs) item.push_back(itemsize(in.dtype));
  return item;
}

}  // namespace

namespace {
// The launch shape's loop part (see launch_shape).
std::vector<int64_t> loop_shape(const Kernel& k);

// Whether op `op` of a plain kernel reads sizes of its own from the kernel's launch shape
// (launch_shape's index parameters): an indirect load, or tril/triu.
bool takes_index_parameters(const KernelOp& op) {
  return op.role == KernelOp::Role::ByIndex &&
         (op.op->kind == OpKind::Indexing || lowering_as<TriangleLowering>(op.op) != nullptr);
}
}  // namespace

std::vector<int64_t> launch_shape(const Kernel& k) {
  std::vector<int64_t> shape = loop_shape(k);
  if (k.row_size > 0) return shape;
  // The index parameters, per op that takes them (in op order): an indirect load's ranges,
  // table strides and index stride; tril's or triu's row and column counts.
  for (const KernelOp& op : k.ops) {
    if (!takes_index_parameters(op)) continue;
    if (op.op->kind == OpKind::Indexing) {
      const KernelInput& rows = k.inputs[static_cast<size_t>(op.args[0].index)];
      shape.insert(shape.end(), k.ranges.begin(), k.ranges.end());
      shape.insert(shape.end(), rows.strides.begin(), rows.strides.end());
      shape.push_back(rows.index_stride);
    } else {
      shape.push_back(k.ranges.end()[-2]);
      shape.push_back(k.ranges.back());
    }
  }
  return shape;
}

namespace {
std::vector<int64_t> loop_shape(const Kernel& k) {
  const size_t num_out = k.outputs.size();
  const std::vector<int64_t> item = operand_itemsizes(k);
  // Byte strides over the ranges: outputs contiguous, inputs as the schedule says.
  std::vector<std::vector<int64_t>> byte_strides(item.size());
  const Shape contiguous = contiguous_strides(k.ranges);
  for (size_t o = 0; o < num_out; ++o) {
    if (k.ops[static_cast<size_t>(k.outputs[o].op)].per_row()) {
      // One element per row: contiguous over the rows, the same along the row.
      const Shape rows(k.ranges.begin(), k.ranges.end() - 1);
      for (int64_t s : contiguous_strides(rows)) byte_strides[o].push_back(s * item[o]);
      byte_strides[o].push_back(0);
      continue;
    }
    if (k.ops[static_cast<size_t>(k.outputs[o].op)].role == KernelOp::Role::ColumnFold) {
      // One element per column, written after the rows (the same place at every row).
      byte_strides[o].assign(k.ranges.size() - 1, 0);
      byte_strides[o].push_back(item[o]);
      continue;
    }
    for (int64_t s : contiguous) byte_strides[o].push_back(s * item[o]);
  }
  for (size_t i = 0; i < k.inputs.size(); ++i)
    for (int64_t s : k.inputs[i].strides)  // (an indirect load's table: its op reads it whole)
      byte_strides[num_out + i].push_back(k.inputs[i].index >= 0 ? 0 : s * item[num_out + i]);
  const int64_t numel = checked_numel(k.ranges, "inductor");
  if (k.row_size > 0) {
    // Rows: the outer ranges coalesced as a pointwise loop's, then each operand's stride along
    // the row.
    const Shape outer(k.ranges.begin(), k.ranges.end() - 1);
    std::vector<std::vector<int64_t>> outer_strides(item.size());
    std::vector<int64_t> row_strides;
    for (size_t o = 0; o < item.size(); ++o) {
      outer_strides[o].assign(byte_strides[o].begin(), byte_strides[o].end() - 1);
      row_strides.push_back(byte_strides[o].back());
    }
    const LoopShape loop = coalesce(outer, outer_strides);
    std::vector<int64_t> shape{numel, k.row_size, static_cast<int64_t>(loop.sizes.size())};
    shape.insert(shape.end(), loop.sizes.begin(), loop.sizes.end());
    for (const auto& st : loop.strides) shape.insert(shape.end(), st.begin(), st.end());
    shape.insert(shape.end(), row_strides.begin(), row_strides.end());
    return shape;
  }
  std::vector<LoopShape::Window> windows(item.size());
  for (size_t i = 0; i < k.inputs.size(); ++i) windows[num_out + i] = k.inputs[i].window;
  const LoopShape loop = coalesce(k.ranges, byte_strides, windows);
  std::vector<int64_t> shape{numel, static_cast<int64_t>(loop.sizes.size())};
  shape.insert(shape.end(), loop.sizes.begin(), loop.sizes.end());
  for (const auto& st : loop.strides) shape.insert(shape.end(), st.begin(), st.end());
  if (k.reads_windows()) {
    // Per operand (block_loop_any's `windows`): -2 (none), or what it reads outside (another
    // operand, or -1: its fill block), then the bounds per dim.
    for (size_t o = 0; o < item.size(); ++o) {
      const LoopShape::Window& w = loop.windows[o];
      const KernelInput* in = o >= num_out ? &k.inputs[o - num_out] : nullptr;
      shape.push_back(w.empty()           ? -2
                      : in->otherwise < 0 ? -1
                                          : static_cast<int64_t>(num_out) + in->otherwise);
      for (size_t d = 0; d < loop.sizes.size(); ++d) {
        shape.push_back(w.empty() ? 0 : w[d].first);
        shape.push_back(w.empty() ? loop.sizes[d] : w[d].second);
      }
    }
  }
  return shape;
}

// The ops' functors, built once per call as the eager kernel builds them, and the constant
// operands as filled blocks, one per dtype they are read in (named in the map returned).
std::map<std::pair<int32_t, DType>, std::string> render_functors_and_constants(
    std::ostringstream& os, const Kernel& k) {
  for (size_t j = 0; j < k.ops.size(); ++j) {
    const KernelOp& op = k.ops[j];
    if (op.row_op() || op.role == KernelOp::Role::ByIndex)
      continue;  // these call functions of their own
    os << "  const auto f" << j << " = inductor_rt::make_functor<" << op.op->pointwise.functor
       << "<" << ctype(op.compute) << ">>(attrs[" << j << "]);\n";
  }
  std::map<std::pair<int32_t, DType>, std::string> constant_blocks;
  for (const KernelOp& op : k.ops)
    for (const Operand& a : op.args)
      if (a.kind == Operand::Kind::Constant) {
        auto [it, fresh] = constant_blocks.try_emplace({a.index, op.compute}, "");
        if (!fresh) continue;
        it->second = detail::concat("c", a.index, "_", dtype_info(op.compute).name);
        os << "  alignas(64) " << ctype(op.compute) << " " << it->second
           << "[inductor_rt::kBlock];\n  std::fill_n(" << it->second << ", inductor_rt::kBlock, "
           << constant_literal(k.constants[static_cast<size_t>(a.index)], op.compute) << ");\n";
      }
  return constant_blocks;
}

// The dtype of operand a (a constant: its own).
DType operand_dtype(const Kernel& k, const Operand& a) {
  switch (a.kind) {
    case Operand::Kind::Input:
      return k.inputs[static_cast<size_t>(a.index)].dtype;
    case Operand::Kind::Op:
      return k.ops[static_cast<size_t>(a.index)].dtype;
    case Operand::Kind::Constant:
      return k.constants[static_cast<size_t>(a.index)].dtype;
  }
  return DType::Bool;
}

// Element j of the block `at` of dtype `have`, to be cast: a bool read as a byte (GCC
// vectorises neither a load of `bool` nor its conversion, which made a float times a bool mask,
// ReLU's derivative, cost ~0.6 ns an element).
std::string element_of(const std::string& at, DType have) {
  return have == DType::Bool ? detail::concat("reinterpret_cast<const uint8_t*>(", at, ")[j] != 0")
                             : at + "[j]";
}

// A scalar functor takes a bool operand (where's condition, masked_fill's mask) as it is: a
// bool converts to any parameter type exactly as through the compute dtype, and a mask
// converted to float and back cost a branch per element.
bool passes_bools_as_is(const KernelOp& op, DType operand) {
  return operand == DType::Bool && op.op->pointwise.form != PointwiseBody::Form::Vector;
}

// The loop of op j of kernel k, a scalar functor, over `count` elements of its operand blocks
// `args`. The functor is copied into the loop's scope (the kernel's lambdas capture it by
// reference, and a store through `out` might then alias its members), and bool blocks are read
// as bytes: GCC vectorises neither a load of `bool` nor a loop that may rewrite the functor, so
// `mask ? value : x` was a load and a branch per element.
std::string scalar_loop(const Kernel& k, size_t j, const std::string& out, const std::string& count,
                        const std::vector<std::string>& args) {
  const KernelOp& op = k.ops[j];
  std::string s = detail::concat("{ const auto g = f", j, "; for (int64_t j = 0; j < ", count,
                                 "; ++j) ", out, "[j] = g(");
  for (size_t i = 0; i < args.size(); ++i) {
    const Operand& a = op.args[i];
    const bool bool_block =
        op.compute == DType::Bool ||
        (a.kind != Operand::Kind::Constant && passes_bools_as_is(op, operand_dtype(k, a)));
    s += detail::concat(
        i ? ", " : "",
        bool_block ? detail::concat("(reinterpret_cast<const uint8_t*>(", args[i], ")[j] != 0)")
                   : args[i] + "[j]");
  }
  return s + "); }";
}

// Whether op j of kernel k can compute on registers in floating dtype t: a vector functor over
// the whole iteration (not a row op or a per-row value) computing in t, with a result and
// operands in t (constants are broadcast in t).
bool on_registers(const Kernel& k, size_t j, DType t) {
  const KernelOp& op = k.ops[j];
  if ((t != DType::Float32 && t != DType::Float64) || op.row_op() || op.per_row() ||
      op.role == KernelOp::Role::ByIndex || op.op->pointwise.form != PointwiseBody::Form::Vector ||
      op.dtype != t || op.compute != t)
    return false;
  for (const Operand& a : op.args)
    if (a.kind != Operand::Kind::Constant && operand_dtype(k, a) != t) return false;
  return true;
}

// The dtype of every value of plain kernel k when all its ops compute on registers in one
// floating dtype: then the kernel computes a vector at a time with all its ops (vector_loop).
// Otherwise (casts, predicates, scalar functors) op by op over blocks.
std::optional<DType> register_fusable(const Kernel& k) {
  if (k.row_size > 0 || k.ops.empty()) return std::nullopt;
  const DType t = k.ops[0].dtype;
  for (size_t j = 0; j < k.ops.size(); ++j)
    if (!on_registers(k, j, t)) return std::nullopt;
  return t;
}

// An operand of a vector_loop's body from outside the loop: loaded vector x[loaded] (one per
// group member), or, when loaded < 0, the named broadcast value (a constant, a per-row value).
struct LoopOperand {
  int64_t loaded = -1;
  std::string name;
};

// A vector_loop over `count` elements computing ops [first, end) of k in dtype t, one
// expression per op on vectors: it stores `stored` (pointers; ops whose y_of >= 0 write
// y[y_of]) and loads `loaded`; `operand` says where each other operand comes from. With
// group > 1 each op is applied to `group` vectors in turn (vector_loop's G): independent chains
// side by side. Shared by plain kernels (all their ops) and row kernels (a run of ops between
// row ops).
void render_vector_loop(std::ostream& os, const Kernel& k, DType t, size_t first, size_t end,
                        const std::string& stream, const std::string& count,
                        const std::vector<std::string>& stored,
                        const std::vector<std::string>& loaded, const std::vector<int>& y_of,
                        const std::function<LoopOperand(const Operand&)>& operand, int group = 1) {
  const char* T = ctype(t);
  const std::string V = detail::concat("vec::Vec<", T, ">");
  os << "    inductor_rt::vector_loop<" << T << ", " << stored.size() << ", " << loaded.size()
     << (group > 1 ? detail::concat(", ", group) : std::string()) << ">(" << stream << ", " << count
     << ", {";
  for (size_t i = 0; i < stored.size(); ++i) os << (i ? ", " : "") << stored[i];
  os << "}, {";
  for (size_t i = 0; i < loaded.size(); ++i) os << (i ? ", " : "") << loaded[i];
  os << "},\n        [&](const " << V << "* x, " << V << "* y) {\n";
  // Operand a of op j: a value of this loop, a loaded vector, or what `operand` names; `g`: the
  // group member's index expression ("" when group == 1).
  auto operand_text = [&](const Operand& arg, const std::string& g) {
    if (arg.kind == Operand::Kind::Op && static_cast<size_t>(arg.index) >= first)
      return detail::concat("t", arg.index, g.empty() ? "" : "[" + g + "]");
    const LoopOperand from = operand(arg);
    if (from.loaded < 0) return from.name;
    return g.empty() ? detail::concat("x[", from.loaded, "]")
                     : detail::concat("x[", from.loaded * group, " + ", g, "]");
  };
  for (size_t j = first; j < end; ++j) {
    const KernelOp& op = k.ops[j];
    std::string call = detail::concat("f", j, "(");
    const std::string g = group > 1 ? "g" : "";
    for (size_t a = 0; a < op.args.size(); ++a)
      call += detail::concat(a ? ", " : "", operand_text(op.args[a], g));
    call += ")";
    if (group == 1) {
      os << "          const " << V << " t" << j << " = " << call << ";  // " << op.op->name
         << "\n";
      if (y_of[j] >= 0) os << "          y[" << y_of[j] << "] = t" << j << ";\n";
      continue;
    }
    os << "          " << V << " t" << j << "[" << group << "];  // " << op.op->name
       << "\n          for (int g = 0; g < " << group << "; ++g) t" << j << "[g] = " << call
       << ";\n";
    if (y_of[j] >= 0)
      os << "          for (int g = 0; g < " << group << "; ++g) y[" << y_of[j] * group
         << " + g] = t" << j << "[g];\n";
  }
  os << "        });\n";
}

// How many vectors a register-fused kernel computes side by side (vector_loop's G). One vector's
// chain of dependent ops overlaps with the next vector's only while both fit the core's
// out-of-order window (a few hundred instructions); a longer chain (W6: 100 ops, a third of them
// tanh) waits on each result unless the body interleaves independent vectors: 4 at a time made
// it 1.7x faster. A short chain is already overlapped by the hardware, and grouping only adds
// code (and measured within noise, slightly slower, on W1's streaming kernel): 1 vector. The
// weight counts a transcendental function as ~8 dependent steps, anything else as 1.
int vector_group(const Kernel& k) {
  constexpr int kLongChain = 32;
  int weight = 0;
  for (const KernelOp& op : k.ops) {
    const PointwiseLowering* pointwise = lowering_as<PointwiseLowering>(op.op);
    weight += pointwise && pointwise->transcendental ? 8 : 1;
  }
  return weight >= kLongChain ? 4 : 1;
}

// Whether an op of k reads input i (a cat's later pieces are reached only through the first).
bool read_by_ops(const Kernel& k, size_t i) {
  for (const KernelOp& op : k.ops)
    for (const Operand& a : op.args)
      if (a.kind == Operand::Kind::Input && a.index == static_cast<int32_t>(i))
        return k.inputs[i].index < 0;  // (an indirect load's table: through `base`)
  return false;
}

// The inputs of register-fusable kernel k read as one element per block (a bit per operand,
// block_loop_any's scalar_inputs): those broadcast along the innermost range of its loop (a
// per-channel scale over [N, C, H, W]), which the body broadcasts into a register once per
// block instead of loading a filled block at every vector. Only when the source serves one set
// of sizes (a dynamic graph's kernel learns its strides per call), for inputs read as plain
// operands (not through a window, not an indirect load's table), and not where the loop's
// blocks span short runs (inductor_rt::spans_runs).
uint64_t scalar_inputs(const Kernel& k, bool sizes_vary) {
  if (sizes_vary || !register_fusable(k)) return 0;
  const std::vector<int64_t> shape = loop_shape(k);
  // (Where the shared loop's blocks span short runs, each block reads several elements of them.)
  const std::vector<int64_t> item = operand_itemsizes(k);
  if (inductor_rt::spans_runs(shape.data(), item.data(), k.outputs.size(), k.reads_windows()))
    return 0;
  const int64_t nd = shape[1];
  const size_t num_out = k.outputs.size();
  uint64_t mask = 0;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const size_t o = num_out + i;
    const int64_t inner_stride = shape[static_cast<size_t>(2 + nd + static_cast<int64_t>(o) * nd)];
    if (inner_stride == 0 && read_by_ops(k, i) && !k.inputs[i].windowed() && o < 64)
      mask |= uint64_t{1} << o;
  }
  return mask;
}

// The body of a register-fusable kernel (see register_fusable) inside its block loop; inputs
// marked in `scalars` (scalar_inputs) are one element each.
void render_register_fused_block(std::ostringstream& os, const Kernel& k, DType t,
                                 uint64_t scalars) {
  const size_t num_out = k.outputs.size(), num_in = k.inputs.size();
  const char* T = ctype(t);
  std::vector<int> y_of(k.ops.size(), -1);
  std::vector<std::string> stored, loaded;
  for (size_t o = 0; o < num_out; ++o) {
    y_of[static_cast<size_t>(k.outputs[o].op)] = static_cast<int>(o);
    stored.push_back(detail::concat("reinterpret_cast<", T, "*>(p[", o, "])"));
  }
  std::vector<int64_t> x_of(num_in, -1);
  for (size_t i = 0; i < num_in; ++i) {
    if (!read_by_ops(k, i)) continue;
    if (scalars >> (num_out + i) & 1) {
      os << "    const vec::Vec<" << T << "> s" << i << "(*reinterpret_cast<const " << T << "*>(p["
         << num_out + i << "]));  // broadcast along the block\n";
      continue;
    }
    x_of[i] = static_cast<int64_t>(loaded.size());
    loaded.push_back(detail::concat("reinterpret_cast<const ", T, "*>(p[", num_out + i, "])"));
  }
  render_vector_loop(
      os, k, t, 0, k.ops.size(),
      detail::concat("numel * ", itemsize(t), " >= ", kStreamingStoreBytes), "n", stored, loaded,
      y_of,
      [&](const Operand& a) {
        if (a.kind != Operand::Kind::Input) return LoopOperand{-1, detail::concat("c", a.index)};
        const int64_t x = x_of[static_cast<size_t>(a.index)];
        return x >= 0 ? LoopOperand{x, ""} : LoopOperand{-1, detail::concat("s", a.index)};
      },
      vector_group(k));
}

// Whether plain kernel k runs in short_run_loop at its sizes (inductor_rt::runs_short).
bool runs_short(const Kernel& k) {
  const std::vector<int64_t> shape = loop_shape(k);
  const std::vector<int64_t> item = operand_itemsizes(k);
  return inductor_rt::runs_short(shape.data(), item.data(), item.size(), k.outputs.size(),
                                 k.reads_windows());
}

// Opens a plain kernel's body, `body`, a lambda over one block, and returns the loop that runs
// it, to follow the body: block_loop, or window_loop with the fill block of each input read
// through a window when the kernel reads a pad, cat or roll, or short_run_loop (with or without
// fills) when its innermost range is short (runs_short). With `sizes_vary` the choice between
// short_run_loop and the other is made per call, so that the source is the same for every size.
// Each loop is told which inputs the body reads as one element (`scalar_mask`: scalar_inputs).
std::string render_loop_call(std::ostringstream& os, const Kernel& k, bool sizes_vary,
                             uint64_t scalar_mask) {
  const size_t num_out = k.outputs.size(), n = num_out + k.inputs.size();
  const std::string scalars = scalar_mask ? detail::concat("uint64_t{", scalar_mask, "}") : "0";
  // (A kernel with ops computed by index also takes the flat index of the block's first element.)
  const bool by_index = std::any_of(k.ops.begin(), k.ops.end(), [](const KernelOp& op) {
    return op.role == KernelOp::Role::ByIndex;
  });
  const std::string params = detail::concat("<", n, ", ", num_out, ">");
  // (With both loops in the source, short_run_loop takes the body through a pointer: the loop is
  // compiled once per operand count, the body once.)
  const std::string short_body = sizes_vary ? "inductor_rt::BodyRef(body)" : "body";
  std::string short_loop, long_loop;
  if (!k.reads_windows()) {
    short_loop = "inductor_rt::short_run_loop" + params + "(shape, base, item, nullptr, " +
                 scalars + ", " + short_body + ");";
    long_loop = "inductor_rt::block_loop" + params + "(shape, base, item, " + scalars + ", body);";
  } else {
    std::vector<std::string> fills(n, "nullptr");
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const KernelInput& in = k.inputs[i];
      if (!in.windowed() || in.otherwise >= 0) continue;
      const std::string name = detail::concat("fill", i);
      os << "  alignas(64) " << ctype(in.dtype) << " " << name << "[inductor_rt::kBlock];  // "
         << "input " << i << " outside its window\n"
         << "  std::fill_n(" << name << ", inductor_rt::kBlock, "
         << KILN_DTYPE_SWITCH_ALL(in.dtype, "inductor",
                                  [&]<typename T>() { return literal(in.fill.to<T>()); })
         << ");\n";
      fills[num_out + i] = detail::concat("reinterpret_cast<char*>(", name, ")");
    }
    os << "  const std::array<char*, " << n << "> fills = {";
    for (size_t i = 0; i < n; ++i) os << (i ? ", " : "") << fills[i];
    os << "};\n";
    short_loop = "inductor_rt::short_run_loop" + params + "(shape, base, item, fills.data(), " +
                 scalars + ", " + short_body + ");";
    long_loop =
        "inductor_rt::window_loop" + params + "(shape, base, item, fills, " + scalars + ", body);";
  }
  os << "  auto body = "
     << (by_index ? "[&](char* const* p, int64_t n, int64_t first) {\n"
                  : "[&](char* const* p, int64_t n) {\n");
  if (sizes_vary)
    return detail::concat("  if (inductor_rt::runs_short(shape, item.data(), ", n, ", ", num_out,
                          ", ", k.reads_windows() ? "true" : "false", "))\n    ", short_loop,
                          "\n  else\n    ", long_loop, "\n");
  return detail::concat("  ", runs_short(k) ? short_loop : long_loop, "\n");
}

// Op j of plain kernel k, an indirect load (embedding, index_select, gather: args [table,
// indices]), over the block: each element's row of the table picked by its index, the rest of
// its position from its flat index (inductor_rt::gather_block), with the sizes and strides of
// the index parameters at index_shape + `at`. Its result goes to output `slot`, or (slot < 0)
// to a block named `result`, which this sets.
void render_indirect_load(std::ostringstream& os, const Kernel& k, size_t j, int slot,
                          std::string& result, size_t at) {
  const KernelOp& op = k.ops[j];
  const auto table = static_cast<size_t>(op.args[0].index);
  const char* t = ctype(op.dtype);
  if (slot >= 0) {
    result = detail::concat("out", slot);
    os << "    " << t << "* " << result << " = reinterpret_cast<" << t << "*>(p[" << slot
       << "]);\n";
  } else {
    result = detail::concat("v", j);
    os << "    alignas(64) " << t << " " << result << "[inductor_rt::kBlock];\n";
  }
  const size_t rank = k.ranges.size();
  os << "    // " << op.op->name << " (an indirect load)\n"
     << "    inductor_rt::gather_block<" << rank << ">(" << result << ", reinterpret_cast<const "
     << t << "*>(base[" << k.outputs.size() + table << "]), in" << op.args[1].index
     << ", n, first, index_shape + " << at << ", index_shape + " << at + rank << ", index_shape["
     << at + 2 * rank << "]);\n";
}

// The body of kernel k's function, from its opening brace: it does not depend on which graph
// nodes the kernel computes (only on their ops, dtypes and constants), so kernels that compute
// the same thing (the layers of a model, the updates of its parameters) have the same body.
void render_kernel_body(std::ostringstream& os, const Kernel& k, bool sizes_vary) {
  const size_t num_out = k.outputs.size(), num_in = k.inputs.size();
  const size_t n = num_out + num_in;
  const std::vector<int64_t> item = operand_itemsizes(k);
  const std::optional<DType> fused_type = register_fusable(k);
  os << "{\n";
  os << "  using namespace kiln;\n";
  os << "  (void)attrs;\n";
  os << "  const int64_t numel = shape[0];\n";
  os << "  static constexpr std::array<int64_t, " << n << "> item = {";
  for (size_t k2 = 0; k2 < n; ++k2) os << (k2 ? ", " : "") << item[k2];
  os << "};\n";
  os << "  const std::array<char*, " << n << "> base = {";
  for (size_t k2 = 0; k2 < n; ++k2) os << (k2 ? ", " : "") << "buffers[" << k2 << "]";
  os << "};\n";
  if (fused_type) {
    for (size_t j = 0; j < k.ops.size(); ++j)
      os << "  const auto f" << j << " = inductor_rt::make_functor<"
         << k.ops[j].op->pointwise.functor << "<" << ctype(*fused_type) << ">>(attrs[" << j
         << "]);\n";
    for (size_t c = 0; c < k.constants.size(); ++c)
      os << "  const vec::Vec<" << ctype(*fused_type) << "> c" << c << "("
         << constant_literal(k.constants[c], *fused_type) << ");\n";
    const uint64_t scalars = scalar_inputs(k, sizes_vary);
    const std::string loop = render_loop_call(os, k, sizes_vary, scalars);
    render_register_fused_block(os, k, *fused_type, scalars);
    os << "  };\n" << loop << "}\n\n";
    return;
  }
  const auto constant_blocks = render_functors_and_constants(os, k);
  // A random op's seed and offset: this call's (its runtime attributes).
  for (size_t j = 0; j < k.ops.size(); ++j)
    if (k.ops[j].op->kind == OpKind::Random)
      os << "  const uint64_t seed" << j << " = static_cast<uint64_t>(attrs[" << j << "]->i("
         << static_cast<int>(k.ops[j].op->philox_attrs[0]) << ")), offset" << j
         << " = static_cast<uint64_t>(attrs[" << j << "]->i("
         << static_cast<int>(k.ops[j].op->philox_attrs[1]) << "));\n";
  // Where the index parameters start (launch_shape: after the loop's sizes, strides and
  // windows, whose count depends on the call's shape), and each op's among them.
  std::vector<size_t> index_at(k.ops.size(), 0);
  size_t index_count = 0;
  for (size_t j = 0; j < k.ops.size(); ++j) {
    if (!takes_index_parameters(k.ops[j])) continue;
    index_at[j] = index_count;
    index_count += k.ops[j].op->kind == OpKind::Indexing ? 2 * k.ranges.size() + 1 : 2;
  }
  if (index_count > 0)
    os << "  const int64_t* index_shape = shape + 2 + shape[1] * " << n + 1
       << (k.reads_windows() ? detail::concat(" + ", n, " * (1 + 2 * shape[1])") : "") << ";\n";
  const std::string loop = render_loop_call(os, k, sizes_vary, 0);  // (not register-fused)
  // Where each op's result lives in the body: an output block or a temporary.
  std::vector<std::string> result(k.ops.size());
  std::vector<int> output_slot(k.ops.size(), -1);
  for (size_t o = 0; o < num_out; ++o)
    output_slot[static_cast<size_t>(k.outputs[o].op)] = static_cast<int>(o);
  for (size_t i = 0; i < num_in; ++i)
    if (read_by_ops(k, i))
      os << "    const " << ctype(k.inputs[i].dtype) << "* in" << i << " = reinterpret_cast<const "
         << ctype(k.inputs[i].dtype) << "*>(p[" << num_out + i << "]);\n";
  // An operand as a pointer to a block of `want` (converted by static_cast, as eager's cast).
  std::map<std::pair<std::string, DType>, std::string> converted;
  auto block_of = [&](const Operand& a, DType want) -> std::string {
    std::string name;
    DType have = want;  // (every Kind sets it; GCC cannot tell)
    switch (a.kind) {
      case Operand::Kind::Constant:
        return constant_blocks.at({a.index, want});
      case Operand::Kind::Input:
        name = detail::concat("in", a.index);
        have = k.inputs[static_cast<size_t>(a.index)].dtype;
        break;
      case Operand::Kind::Op:
        name = result[static_cast<size_t>(a.index)];
        have = k.ops[static_cast<size_t>(a.index)].dtype;
        break;
    }
    if (have == want) return name;
    auto [it, fresh] =
        converted.try_emplace({name, want}, name + "_as_" + std::string(dtype_info(want).name));
    if (fresh)
      os << "    alignas(64) " << ctype(want) << " " << it->second << "[inductor_rt::kBlock];\n"
         << "    for (int64_t j = 0; j < n; ++j) " << it->second << "[j] = static_cast<"
         << ctype(want) << ">(" << element_of(name, have) << ");\n";
    return it->second;
  };
  for (size_t j = 0; j < k.ops.size(); ++j) {
    const KernelOp& op = k.ops[j];
    if (op.op->kind == OpKind::Indexing) {
      render_indirect_load(os, k, j, output_slot[j], result[j], index_at[j]);
      continue;
    }
    std::vector<std::string> args;
    for (const Operand& a : op.args)
      args.push_back(block_of(
          a, a.kind != Operand::Kind::Constant && passes_bools_as_is(op, operand_dtype(k, a))
                 ? DType::Bool
                 : op.compute));
    const char* out_t = ctype(op.dtype);
    if (output_slot[j] >= 0) {
      result[j] = detail::concat("out", output_slot[j]);
      os << "    " << out_t << "* " << result[j] << " = reinterpret_cast<" << out_t << "*>(p["
         << output_slot[j] << "]);\n";
    } else {
      result[j] = detail::concat("v", j);
      os << "    alignas(64) " << out_t << " " << result[j] << "[inductor_rt::kBlock];\n";
    }
    os << "    // " << op.op->name << "\n";
    const TriangleLowering* triangle = lowering_as<TriangleLowering>(op.op);
    if (op.role == KernelOp::Role::ByIndex && triangle) {
      // Elements first .. first + n - 1: kept or zero by their row and column.
      os << "    inductor_rt::triangle_block<" << (triangle->lower ? "true" : "false") << ">("
         << result[j] << ", " << args[0] << ", n, first, index_shape[" << index_at[j]
         << "], index_shape[" << index_at[j] + 1 << "], attrs[" << j << "]->i(0));\n";
    } else if (op.role == KernelOp::Role::ByIndex) {
      // Elements first .. first + n - 1 of the draw, as the eager kernel draws them.
      // (uniform, normal, randint: attrs [size, dtype, a, b, seed, offset], a and b their
      // from and to, mean and std, low and high.)
      const DrawLowering::Kind kind = lowering_as<DrawLowering>(op.op)->kind;
      const std::string draw = detail::concat(result[j], ", n, first, seed", j, ", offset", j);
      if (kind == DrawLowering::Kind::Bernoulli)
        os << "    kernels::bernoulli_block(" << result[j] << ", " << args[0] << ", n, first, seed"
           << j << ", offset" << j << ");\n";
      else if (kind == DrawLowering::Kind::Randint)
        os << "    kernels::randint_block(" << draw << ", attrs[" << j
           << "]->i(2), static_cast<uint64_t>(attrs[" << j
           << "]->i(3)) - static_cast<uint64_t>(attrs[" << j << "]->i(2)));\n";
      else
        os << "    kernels::"
           << (kind == DrawLowering::Kind::Normal ? "normal_block(" : "uniform_block(") << draw
           << ", attrs[" << j << "]->f(2), attrs[" << j << "]->f(3));\n";
    } else if (op.op->pointwise.form == PointwiseBody::Form::Vector) {
      os << "    vec::map<" << out_t << ">(f" << j << ", "
         << (output_slot[j] >= 0
                 ? detail::concat("numel * ", itemsize(op.dtype), " >= ", kStreamingStoreBytes)
                 : std::string("false"))
         << ", " << result[j] << ", n";
      for (const std::string& a : args) os << ", " << a;
      os << ");\n";
    } else {
      os << "    " << scalar_loop(k, j, result[j], "n", args) << "\n";
    }
  }
  os << "  };\n" << loop << "}\n\n";
}

// The body of row kernel k (see Kernel::row_size): row_loop hands it one row of every operand
// at a time (contiguous along the row or not), and the ops run in order, each over the whole
// row: a pointwise op in blocks of up to kBlock elements with its functor, a row op with its
// row function. Values not written to an output live in row buffers, from `scratch`. One
// write_* function per way an op is computed (KernelOp::Role, and a row op's lowering).
class RowKernelWriter {
 public:
  RowKernelWriter(std::ostringstream& os, const ir::Graph& graph, const Kernel& k);
  void write();

 private:
  using Role = KernelOp::Role;
  // A row buffer of `d` elements, from the thread's scratch.
  std::string row_buffer(DType d) {
    return detail::concat("reinterpret_cast<", ctype(d), "*>(scratch + ", num_row_buffers_++,
                          " * row_bytes)");
  }
  std::string name_of(const Operand& a) const {
    return a.kind == Operand::Kind::Input ? detail::concat("in", a.index)
                                          : result_[static_cast<size_t>(a.index)];
  }
  DType dtype_of(const Operand& a) const {
    return a.kind == Operand::Kind::Input ? k_.inputs[static_cast<size_t>(a.index)].dtype
                                          : k_.ops[static_cast<size_t>(a.index)].dtype;
  }
  bool is_output(size_t j) const { return output_slot_[j] >= 0; }
  std::string output_name(size_t j) const {
    return is_output(j) ? detail::concat("out", output_slot_[j]) : detail::concat("v", j);
  }
  // Declares op j's result: its output, one value (per row), or a row buffer.
  void declare_result(size_t j, bool one_value);
  std::string operand_as(size_t j, const Operand& a, size_t slot, const std::string& at,
                         const char* count, const char* indent);
  void apply(size_t j, const std::vector<std::string>& args, const std::string& out,
             const char* count, const char* indent);
  std::string next_row(const KernelOp& op, const char* limit) const;
  void broadcast_if_read(size_t j);
  std::string streams(size_t j) const;

  void write_register_run(size_t first, size_t end);
  void write_column_fold(size_t j);
  void write_row_extreme(size_t j, const RowExtremeLowering& extreme);
  void write_row_fold(size_t j, const RowFoldLowering& fold);
  void write_row_norm(size_t j, const RowNormLowering& norm);
  void write_softmax(size_t j, const SoftmaxLowering& softmax);
  void write_per_row(size_t j);
  void write_elementwise(size_t j);
  void write_row_loop();
  void write_column_loop();

  std::ostringstream& os_;
  const ir::Graph& graph_;
  const Kernel& k_;
  const size_t num_out_, num_in_, n_;
  std::map<std::pair<int32_t, DType>, std::string> constant_blocks_;
  std::ostringstream body_;  // written first: the number of row buffers goes before it
  int num_row_buffers_ = 0;
  std::vector<int> output_slot_;          // per op: its output's slot, or -1
  std::vector<std::string> result_;       // per op: the name its value goes by
  int num_accumulators_ = 0;              // a column kernel's, per column
  std::vector<const char*> folded_type_;  // the type each accumulator folds
  std::vector<int> accumulator_of_;       // per column reduction
  // Per-row values that ops over the whole row read: also kept as a block filled with the
  // row's value (a broadcast along the row).
  std::vector<bool> read_broadcast_;
  // The last reader of each op's value (k.ops.size() for a kernel output).
  std::vector<size_t> last_reader_;
};

RowKernelWriter::RowKernelWriter(std::ostringstream& os, const ir::Graph& graph, const Kernel& k)
    : os_(os),
      graph_(graph),
      k_(k),
      num_out_(k.outputs.size()),
      num_in_(k.inputs.size()),
      n_(num_out_ + num_in_),
      output_slot_(k.ops.size(), -1),
      result_(k.ops.size()),
      accumulator_of_(k.ops.size(), -1),
      read_broadcast_(k.ops.size(), false),
      last_reader_(k.ops.size(), 0) {
  for (size_t o = 0; o < num_out_; ++o)
    output_slot_[static_cast<size_t>(k.outputs[o].op)] = static_cast<int>(o);
  for (const KernelOp& op : k.ops)
    for (const Operand& a : op.args)
      if (!op.per_row() && a.kind == Operand::Kind::Op &&
          k.ops[static_cast<size_t>(a.index)].per_row())
        read_broadcast_[static_cast<size_t>(a.index)] = true;
  for (size_t j = 0; j < k.ops.size(); ++j)
    for (const Operand& a : k.ops[j].args)
      if (a.kind == Operand::Kind::Op) last_reader_[static_cast<size_t>(a.index)] = j;
  for (size_t o = 0; o < num_out_; ++o)
    last_reader_[static_cast<size_t>(k.outputs[o].op)] = k.ops.size();
}

void RowKernelWriter::declare_result(size_t j, bool one_value) {
  const char* t = ctype(k_.ops[j].dtype);
  result_[j] = output_name(j);
  if (is_output(j))
    body_ << "    " << t << "* " << result_[j] << " = reinterpret_cast<" << t << "*>(p["
          << output_slot_[j] << "]);\n";
  else if (one_value)
    body_ << "    alignas(64) " << t << " " << result_[j] << "[1];\n";
  else
    body_ << "    " << t << "* " << result_[j] << " = " << row_buffer(k_.ops[j].dtype) << ";\n";
}

// An operand as `count` elements of `want` for op j (converted by static_cast, as eager's
// cast, into a block when its dtype differs); `at` is where its elements start.
std::string RowKernelWriter::operand_as(size_t j, const Operand& a, size_t slot,
                                        const std::string& at, const char* count,
                                        const char* indent) {
  const KernelOp& op = k_.ops[j];
  if (a.kind == Operand::Kind::Constant) return constant_blocks_.at({a.index, op.compute});
  if (dtype_of(a) == op.compute || passes_bools_as_is(op, dtype_of(a))) return at;
  const std::string cvt = detail::concat("a", j, "_", slot);
  body_ << indent << "alignas(64) " << ctype(op.compute) << " " << cvt << "[inductor_rt::kBlock];\n"
        << indent << "for (int64_t j = 0; j < " << count << "; ++j) " << cvt << "[j] = static_cast<"
        << ctype(op.compute) << ">(" << element_of(at, dtype_of(a)) << ");\n";
  return cvt;
}

void RowKernelWriter::apply(size_t j, const std::vector<std::string>& args, const std::string& out,
                            const char* count, const char* indent) {
  const KernelOp& op = k_.ops[j];
  if (op.op->pointwise.form == PointwiseBody::Form::Vector) {
    body_ << indent << "vec::map<" << ctype(op.dtype) << ">(f" << j << ", false, " << out << ", "
          << count;
    for (const std::string& a : args) body_ << ", " << a;
    body_ << ");\n";
  } else {
    body_ << indent << scalar_loop(k_, j, out, count, args) << "\n";
  }
}

// A row op's next input row, for prefetching: when it reads an input in place, rows up to
// `limit` long, as the eager kernel prefetches.
std::string RowKernelWriter::next_row(const KernelOp& op, const char* limit) const {
  if (op.args[0].kind != Operand::Kind::Input) return "nullptr";
  const size_t slot = num_out_ + static_cast<size_t>(op.args[0].index);
  return detail::concat("next[", slot, "] && row_stride[", slot, "] == ", itemsize(op.dtype),
                        " && cols <= ", limit, " ? reinterpret_cast<const ", ctype(op.dtype),
                        "*>(next[", slot, "]) : nullptr");
}

// A per-row value that ops over the row read: kept as a block filled with it too.
void RowKernelWriter::broadcast_if_read(size_t j) {
  if (!read_broadcast_[j]) return;
  body_ << "    alignas(64) " << ctype(k_.ops[j].dtype) << " " << result_[j]
        << "_b[inductor_rt::kBlock];\n    std::fill_n(" << result_[j]
        << "_b, std::min<int64_t>(cols, inductor_rt::kBlock), " << result_[j] << "[0]);\n";
}

// Whether op j's row function streams its output past the caches (a large kernel output).
std::string RowKernelWriter::streams(size_t j) const {
  return is_output(j)
             ? detail::concat("numel * ", itemsize(k_.ops[j].dtype), " >= ", kStreamingStoreBytes)
             : std::string("false");
}

// A run of two or more elementwise ops [first, end) as one loop over the row: a vector at a
// time through all of them, storing only the values read after the run.
void RowKernelWriter::write_register_run(size_t first, size_t end) {
  const DType t = k_.ops[first].dtype;
  const std::string T = ctype(t), V = detail::concat("vec::Vec<", T, ">");
  std::vector<std::string> stored, loaded;  // row pointers: the loop's outputs and inputs
  std::vector<int> y_of(k_.ops.size(), -1);
  std::map<std::pair<int, int32_t>, LoopOperand> operand_of;  // by (kind, index)
  body_ << "    // ";
  for (size_t j = first; j < end; ++j) body_ << (j > first ? ", " : "") << k_.ops[j].op->name;
  body_ << " (on registers)\n";
  for (size_t j = first; j < end; ++j) {
    for (const Operand& a : k_.ops[j].args) {
      const auto key = std::make_pair(static_cast<int>(a.kind), a.index);
      if (operand_of.count(key) ||
          (a.kind == Operand::Kind::Op && static_cast<size_t>(a.index) >= first))
        continue;
      // (Named after the run too: another run of the row may broadcast the same values.)
      if (a.kind == Operand::Kind::Constant) {
        operand_of[key].name = detail::concat("k", a.index, "_", first);
        body_ << "    const " << V << " " << operand_of[key].name << "("
              << constant_literal(k_.constants[static_cast<size_t>(a.index)], t) << ");\n";
      } else if (a.kind == Operand::Kind::Op && k_.ops[static_cast<size_t>(a.index)].per_row()) {
        operand_of[key].name = detail::concat("b", a.index, "_", first);
        body_ << "    const " << V << " " << operand_of[key].name << "(" << name_of(a) << "[0]);\n";
      } else {
        operand_of[key].loaded = static_cast<int64_t>(loaded.size());
        loaded.push_back(detail::concat("static_cast<const ", T, "*>(", name_of(a), ")"));
      }
    }
    result_[j] = output_name(j);
    if (last_reader_[j] < end) continue;  // read only inside the run: stays in a register
    if (is_output(j))
      body_ << "    " << T << "* " << result_[j] << " = reinterpret_cast<" << T << "*>(p["
            << output_slot_[j] << "]);\n";
    else
      body_ << "    " << T << "* " << result_[j] << " = " << row_buffer(t) << ";\n";
    y_of[j] = static_cast<int>(stored.size());
    stored.push_back(result_[j]);
  }
  render_vector_loop(body_, k_, t, first, end, "false", "cols", stored, loaded, y_of,
                     [&](const Operand& a) {
                       return operand_of.at({static_cast<int>(a.kind), a.index});
                     });
}

// A column reduction: the row it reads, noted for the pass that adds the whole batch to its
// accumulators (its result is written after the loop).
void RowKernelWriter::write_column_fold(size_t j) {
  const KernelOp& op = k_.ops[j];
  body_ << "    // " << op.op->name << " (into accumulators " << num_accumulators_ << ")\n"
        << "    fold" << num_accumulators_ << "[b] = " << name_of(op.args[0]) << ";\n";
  folded_type_.push_back(ctype(dtype_of(op.args[0])));
  accumulator_of_[j] = num_accumulators_++;
}

// max_dim, min_dim: values and indices (the next op): where the row's extreme first occurs,
// and the element there (so -0 or 0 as the row has it), as the eager max(dim) and min(dim)
// give them.
void RowKernelWriter::write_row_extreme(size_t j, const RowExtremeLowering& extreme) {
  const KernelOp& op = k_.ops[j];
  const size_t at = j + 1;
  result_[at] = output_name(at);
  if (is_output(at))
    body_ << "    int64_t* " << result_[at] << " = reinterpret_cast<int64_t*>(p["
          << output_slot_[at] << "]);\n";
  else
    body_ << "    alignas(64) int64_t " << result_[at] << "[1];\n";
  body_ << "    " << result_[at]
        << "[0] = inductor_rt::" << (extreme.max ? "row_argmax(" : "row_argmin(")
        << name_of(op.args[0]) << ", cols);\n"
        << "    " << result_[j] << "[0] = " << name_of(op.args[0]) << "[" << result_[at]
        << "[0]];\n";
  broadcast_if_read(at);
}

// A row reduction: the row folded as the eager reduction folds it.
void RowKernelWriter::write_row_fold(size_t j, const RowFoldLowering& fold) {
  const KernelOp& op = k_.ops[j];
  using Arg = RowFoldLowering::Argument;
  body_ << "    " << result_[j] << "[0] = static_cast<" << ctype(op.dtype)
        << ">(inductor_rt::" << fold.fold << "(" << name_of(op.args[0]) << ", cols"
        << (fold.argument == Arg::IntAttr2     ? detail::concat(", attrs[", j, "]->i(2)")
            : fold.argument == Arg::FloatAttr2 ? detail::concat(", attrs[", j, "]->f(2)")
                                               : std::string())
        << ")" << (fold.mean ? " / static_cast<double>(cols)" : "") << ");\n";
}

// layer_norm, rms_norm: the eager kernel's row function; its statistics (the ops after it)
// are per-row values.
void RowKernelWriter::write_row_norm(size_t j, const RowNormLowering& norm) {
  const KernelOp& op = k_.ops[j];
  const char* out_t = ctype(op.dtype);
  const bool layer = norm.layer;
  std::vector<std::string> stats;
  for (size_t s = j + 1; s < k_.ops.size() && k_.ops[s].node == op.node; ++s) {
    declare_result(s, /*one_value=*/true);
    stats.push_back(result_[s]);
  }
  const std::string next = next_row(op, "kernels::kPrefetchRow");
  // The op's attributes: layer_norm [shape, eps, has_weight, has_bias], rms_norm [shape, eps,
  // has_weight]; its inputs x, then the weight and bias it has.
  const Attrs& attrs = graph_.nodes[static_cast<size_t>(op.node)].attrs;
  const bool has_w = attrs.b(2), has_b = layer && attrs.b(3);
  auto arg_or_null = [&](bool has, size_t a) {
    return has ? name_of(op.args[a]) : std::string("nullptr");
  };
  body_ << "    kernels::" << (layer ? "layer_norm_row<" : "rms_norm_row<") << out_t << ", "
        << (has_w ? "true" : "false");
  if (layer) body_ << ", " << (has_b ? "true" : "false");
  body_ << ">(" << name_of(op.args[0]) << ", " << result_[j] << ", cols, static_cast<" << out_t
        << ">(attrs[" << j << "]->f(1)), " << arg_or_null(has_w, 1) << ", ";
  if (layer) body_ << arg_or_null(has_b, 1 + has_w) << ", ";
  body_ << streams(j) << ", " << next;
  for (const std::string& st : stats) body_ << ", " << st;
  body_ << ");\n";
  for (size_t s = j + 1; s < k_.ops.size() && k_.ops[s].node == op.node; ++s) broadcast_if_read(s);
}

// softmax, log_softmax: the whole row at once, as the eager kernel; a large output streams
// past the caches.
void RowKernelWriter::write_softmax(size_t j, const SoftmaxLowering& softmax) {
  const KernelOp& op = k_.ops[j];
  // An input read in place: the next row is prefetched while this one is summed, as the
  // eager kernel does (its first pass would otherwise wait on memory).
  const std::string next = next_row(op, "kernels::kRowBuffer");
  body_ << "    kernels::softmax_row<" << ctype(op.dtype) << ", "
        << (softmax.log ? "true" : "false") << ">(" << name_of(op.args[0]) << ", " << result_[j]
        << ", cols, "
        << (is_output(j) ? detail::concat(streams(j), ", ", row_buffer(op.dtype))
                         : std::string("false, nullptr"))
        << ", " << next << ");\n";
}

// A pointwise op once per row: every operand is one value per row (or a constant).
void RowKernelWriter::write_per_row(size_t j) {
  std::vector<std::string> args;
  for (const Operand& a : k_.ops[j].args)
    args.push_back(operand_as(j, a, args.size(), name_of(a), "1", "    "));
  apply(j, args, result_[j], "1", "    ");
}

// A pointwise op over the whole row, a block at a time; per-row operands read as blocks
// filled with the row's value.
void RowKernelWriter::write_elementwise(size_t j) {
  body_ << "    for (int64_t c = 0; c < cols; c += inductor_rt::kBlock) {\n"
        << "      const int64_t n = std::min<int64_t>(inductor_rt::kBlock, cols - c);\n";
  std::vector<std::string> args;
  for (const Operand& a : k_.ops[j].args) {
    const bool broadcast =
        a.kind == Operand::Kind::Op && k_.ops[static_cast<size_t>(a.index)].per_row();
    // (detail::concat, not "(" + std::string: GCC 12 warns -Wrestrict, falsely, inside that +.)
    const std::string at = broadcast ? name_of(a) + "_b" : detail::concat("(", name_of(a), " + c)");
    args.push_back(operand_as(j, a, args.size(), at, "n", "      "));
  }
  apply(j, args, detail::concat("(", result_[j], " + c)"), "n", "      ");
  body_ << "    }\n";
}

void RowKernelWriter::write() {
  os_ << "{\n";
  os_ << "  using namespace kiln;\n";
  os_ << "  (void)attrs;\n";
  os_ << "  const int64_t numel = shape[0];\n";
  os_ << "  (void)numel;\n";
  os_ << "  const std::array<char*, " << n_ << "> base = {";
  for (size_t k2 = 0; k2 < n_; ++k2) os_ << (k2 ? ", " : "") << "buffers[" << k2 << "]";
  os_ << "};\n";
  constant_blocks_ = render_functors_and_constants(os_, k_);
  for (size_t i = 0; i < num_in_; ++i) {
    const char* t = ctype(k_.inputs[i].dtype);
    body_ << "    const " << t << "* in" << i << " = inductor_rt::row_of<" << t << ">(p["
          << num_out_ + i << "], row_stride[" << num_out_ + i << "], cols, "
          << row_buffer(k_.inputs[i].dtype) << ");\n";
  }
  for (size_t j = 0; j < k_.ops.size(); ++j) {
    const KernelOp& op = k_.ops[j];
    if (on_registers(k_, j, op.dtype)) {
      size_t end = j + 1;
      while (end < k_.ops.size() && on_registers(k_, end, op.dtype)) ++end;
      if (end - j >= 2) {
        write_register_run(j, end);
        j = end - 1;
        continue;
      }
    }
    if (op.output > 0) continue;  // a statistic its row op (just before) computed
    if (op.role == Role::ColumnFold) {
      write_column_fold(j);
      continue;
    }
    declare_result(j, op.per_row() && !is_output(j));
    body_ << "    // " << op.op->name << "\n";
    if (op.row_op()) {
      std::visit(
          [&](const auto& lowering) {
            using L = std::decay_t<decltype(lowering)>;
            if constexpr (std::is_same_v<L, RowExtremeLowering>)
              write_row_extreme(j, lowering);
            else if constexpr (std::is_same_v<L, RowFoldLowering>)
              write_row_fold(j, lowering);
            else if constexpr (std::is_same_v<L, RowNormLowering>)
              write_row_norm(j, lowering);
            else if constexpr (std::is_same_v<L, SoftmaxLowering>)
              write_softmax(j, lowering);
            else
              KILN_CHECK(false, Error, "inductor: internal error: ", op.op->name,
                         " is a row op without a row lowering");
          },
          *lowering_of(op.op));
    } else if (op.role == Role::PerRow) {
      write_per_row(j);
    } else {
      write_elementwise(j);
    }
    broadcast_if_read(j);
  }
  if (k_.folds_columns())
    write_column_loop();
  else
    write_row_loop();
}

void RowKernelWriter::write_row_loop() {
  os_ << "  inductor_rt::row_loop<" << n_ << ">(shape, base, " << num_row_buffers_
      << ", [&](char* const* p, char* const* next, const int64_t* row_stride, int64_t cols, "
         "char* scratch, int64_t row_bytes) {\n"
      << "    (void)next;\n    (void)row_stride;\n    (void)scratch;\n    (void)row_bytes;\n"
      << body_.str() << "  });\n}\n\n";
}

// A column kernel: the rows folded into per-column accumulators, then each reduction's result
// made from them as the eager reduction finishes it (a mean divides by the rows' count).
// Each batch of rows is computed row by row, then folded into the accumulators in one pass.
void RowKernelWriter::write_column_loop() {
  os_ << "  const int64_t columns = shape[1];\n"
      << "  std::unique_ptr<double[]> folded(new double[" << num_accumulators_ << " * columns]);\n"
      << "  inductor_rt::column_loop<" << n_ << ">(shape, base, " << num_row_buffers_ << ", "
      << num_accumulators_ << ", folded.get(), [&](char* const* rows, int64_t batch, "
      << "const int64_t* row_stride, int64_t cols, char* batch_scratch, int64_t row_bytes, "
      << "double* acc, int64_t acc_stride) {\n";
  for (int a = 0; a < num_accumulators_; ++a)
    os_ << "    const " << folded_type_[static_cast<size_t>(a)] << "* fold" << a
        << "[inductor_rt::kFoldBatch];\n";
  os_ << "    for (int64_t b = 0; b < batch; ++b) {\n"
      << "      char* const* p = rows + b * " << n_ << ";\n"
      << "      char* scratch = batch_scratch + b * " << num_row_buffers_ << " * row_bytes;\n"
      << "      (void)scratch;\n";
  std::istringstream row_body(body_.str());  // indented one more level, inside the batch's loop
  for (std::string line; std::getline(row_body, line);) os_ << "  " << line << "\n";
  os_ << "    }\n";
  for (int a = 0; a < num_accumulators_; ++a)
    os_ << "    inductor_rt::fold_columns(acc + " << a << " * acc_stride, fold" << a
        << ", batch, cols);\n";
  os_ << "  });\n";
  for (size_t j = 0; j < k_.ops.size(); ++j) {
    if (accumulator_of_[j] < 0 || output_slot_[j] < 0) continue;
    const char* t = ctype(k_.ops[j].dtype);
    const bool mean = lowering_as<RowFoldLowering>(k_.ops[j].op)->mean;
    os_ << "  {  // " << k_.ops[j].op->name << "\n"
        << "    " << t << "* out = reinterpret_cast<" << t << "*>(buffers[" << output_slot_[j]
        << "]);\n"
        << "    const double* a = folded.get() + " << accumulator_of_[j] << " * columns;\n";
    if (mean) os_ << "    const double count = static_cast<double>(numel / columns);\n";
    os_ << "    for (int64_t c = 0; c < columns; ++c) out[c] = static_cast<" << t << ">(a[c]"
        << (mean ? " / count" : "") << ");\n  }\n";
  }
  os_ << "}\n\n";
}

}  // namespace

std::string render_cpp(const ir::Graph& graph, const Schedule& schedule, bool sizes_vary) {
  std::ostringstream os;
  os << "// Generated by Kiln's inductor backend: one function per fused kernel.\n"
     << "#ifndef KILN_INDUCTOR_RUNTIME_H  // (included once when several modules share a library)\n"
     << "#include \"backends/inductor/runtime/inductor_runtime.h\"\n#endif\n\n"
     << "// Kernel symbols: kiln_<name>, or another prefix when several modules share one "
        "library.\n"
     << "#ifndef KILN_KERNEL\n#define KILN_KERNEL(name) kiln_##name\n#endif\n\n"
     << "// A large module compiles as KILN_PARTS objects in parallel (cpp_compiler.cpp): part\n"
     << "// KILN_PART holds every KILN_PARTS-th distinct kernel body and the kernels calling it.\n"
     << "#ifndef KILN_PARTS\n#define KILN_IN_PART(body) 1\n#else\n"
     << "#define KILN_IN_PART(body) ((body) % KILN_PARTS == KILN_PART)\n#endif\n\n";
  // A kernel whose body another kernel already has calls that one: its code is compiled once.
  struct Body {
    std::string kernel;
    int index;
  };
  std::map<std::string, Body> kernel_with_body;
  for (const Kernel& k : schedule.kernels) {
    // What the kernel computes, in the graph's names: each op with its operands (inputs as the
    // body names them, in<i>), then which graph value each input and output is. Kept out of the
    // body, which names operands by position so that equal bodies are compiled once.
    os << "// " << k.name << ":";
    auto operand_name = [&](const Operand& a) {
      switch (a.kind) {
        case Operand::Kind::Input:
          return detail::concat("in", a.index);
        case Operand::Kind::Op:
          return detail::concat("%", k.ops[static_cast<size_t>(a.index)].node);
        case Operand::Kind::Constant:
          break;
      }
      return detail::concat(k.constants[static_cast<size_t>(a.index)].value);
    };
    for (const KernelOp& op : k.ops) {
      if (op.output != 0) continue;
      os << " %" << op.node << " = " << op.op->name << "(";
      for (size_t a = 0; a < op.args.size(); ++a) os << (a ? ", " : "") << operand_name(op.args[a]);
      os << ");";
    }
    for (size_t i = 0; i < k.inputs.size(); ++i)
      os << " in" << i << " = %" << k.inputs[i].root.node
         << (k.inputs[i].root.output ? detail::concat(".", k.inputs[i].root.output) : "") << ";";
    for (size_t o = 0; o < k.outputs.size(); ++o)
      os << " out" << o << " = %" << k.outputs[o].value.node
         << (k.outputs[o].value.output ? detail::concat(".", k.outputs[o].value.output) : "")
         << ";";
    int32_t last_through = -1;
    for (const KernelInput& in : k.inputs)
      if (in.through >= 0 && in.through != last_through) {
        last_through = in.through;
        os << " reads %" << in.through << " = "
           << graph.nodes[static_cast<size_t>(in.through)].op->name << " as index arithmetic;";
      }
    os << "\n";
    const char* signature =
        ")(char* const* buffers, const kiln::Attrs* const* attrs, const int64_t* shape) ";
    std::ostringstream body;
    if (k.row_size > 0)
      RowKernelWriter(body, graph, k).write();
    else
      render_kernel_body(body, k, sizes_vary);
    const int next_index = static_cast<int>(kernel_with_body.size());
    auto [it, fresh] = kernel_with_body.try_emplace(body.str(), Body{k.name, next_index});
    os << "#if KILN_IN_PART(" << it->second.index << ")\n";
    if (fresh) {
      os << "extern \"C\" void KILN_KERNEL(" << k.name << signature << body.str();
    } else {
      os << "// (the same code as " << it->second.kernel << ")\n"
         << "extern \"C\" void KILN_KERNEL(" << k.name << signature << "{\n  KILN_KERNEL("
         << it->second.kernel << ")(buffers, attrs, shape);\n}\n";
    }
    os << "#endif\n\n";
  }
  os << "// distinct kernel bodies: " << kernel_with_body.size() << "\n";
  return os.str();
}

const KernelRenderer& cpp_renderer() {
  struct CppRenderer final : KernelRenderer {
    std::string render(const ir::Graph& graph, const Schedule& schedule,
                       bool sizes_vary) const override {
      return render_cpp(graph, schedule, sizes_vary);
    }
    std::vector<int64_t> launch_shape(const Kernel& k) const override {
      return inductor::launch_shape(k);
    }
  };
  static const CppRenderer renderer;
  return renderer;
}

}  // namespace kiln::inductor
