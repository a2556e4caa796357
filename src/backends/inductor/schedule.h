// The inductor backend's middle: a captured graph lowered to a schedule of steps. Pointwise ops
// whose math generated code can compute (OpDef::pointwise) are grouped into fused kernels, each
// a loop over one iteration space whose body reads its inputs through affine index expressions
// (views and broadcasting are index arithmetic, not copies); every other op is an extern call
// to its eager kernel. Which values must exist in memory (realized buffers) follows from the
// grouping. A kernel holding a row op (softmax, log_softmax, sum, mean along the last dim) is a
// row kernel: it runs row by row, each op over a whole row before the next, so a row op sees its
// input's whole row and its prologue and epilogue fuse with it; a row reduction's result (one
// value per row) is read by the ops after it as a broadcast along the row. Rendering the kernels
// (C++ today) is cpp_render.h's business.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::inductor {

// A value of the kernel body: an input block, the result of a fused op, or a constant.
struct Operand {
  enum class Kind : uint8_t { Input, Op, Constant };
  Kind kind;
  int32_t index;  // into Kernel::inputs, Kernel::ops or Kernel::constants
};

// A tensor a kernel reads: element [i0, ..., ik] of the kernel's ranges is at
// root + offset + Σ strides[d]·i_d (in elements; a stride of 0 broadcasts).
//
// A flip is read that way too (negated strides), and a pad, cat, roll or repeat as index
// arithmetic with a condition (a *window*): the root holds elements only where window[d].first
// <= i_d < window[d].second in every range d; elsewhere the input reads kernel input `otherwise`
// (a cat's, roll's or repeat's next piece, itself windowed) or, when that is -1, `fill`. A piece
// reached only through `otherwise` is read by no op directly.
struct KernelInput {
  ir::ValueRef root;  // a realized value: a graph input, an extern's result, another kernel's
  DType dtype;
  int64_t offset = 0;                               // relative to the root tensor's first element
  Shape strides;                                    // one per kernel range
  std::vector<std::pair<int64_t, int64_t>> window;  // one per kernel range; empty: everywhere
  int32_t otherwise = -1;
  Scalar fill;
  int32_t through = -1;  // the pad, cat, flip, roll or repeat node read this way (-1: none)
  // An indirect load (embedding, index_select, gather; >= 0): element [i...] is at root + offset +
  // Σ strides[d]·i_d + index_stride · (element [i...] of kernel input `index`, the indices,
  // which the scheduler has checked nothing else in the kernel computes). Read by its op with
  // the element's flat index, never through the block loop.
  int32_t index = -1;
  int64_t index_stride = 0;
  bool windowed() const { return !window.empty(); }
};

struct KernelOp {
  int32_t node;  // the graph node it computes
  const OpDef* op;
  std::vector<Operand> args;
  DType dtype;    // its result's
  DType compute;  // what its functor computes in (a Predicate's inputs' promoted dtype)
  // How the kernel computes it. What it computes (functor, row function, draw, ...) is its
  // op's lowering (lowering.h).
  enum class Role : uint8_t {
    Elementwise,   // element by element with its functor (in a row kernel, over the whole row)
    ByIndex,       // from each element's flat index in the iteration space (computed_by_index:
                   // a random draw, tril, triu, an indirect load): plain kernels only
    PerRow,        // a pointwise op over per-row values in a row kernel: once per row
    RowOp,         // a row op whose result is a row (softmax; a normalisation's normalised row)
    RowReduction,  // a row op with one element per row (a row fold, max_dim; a normalisation's
                   // statistics)
    ColumnFold,    // a column reduction (RowOpKind::Columns): folds each row into one
                   // accumulator per column, its result written at the end
  };
  Role role = Role::Elementwise;
  // Which of the node's outputs it stands for. A row op with several (layer_norm's normalised
  // row, mean and rstd) is one op per output, in order: the first computes them all, the
  // others (no args) only name where the per-row statistics go.
  int32_t output = 0;
  // A row op: reads its input's whole row (see row_op_kind).
  bool row_op() const {
    return role == Role::RowOp || role == Role::RowReduction || role == Role::ColumnFold;
  }
  // Its result has one element per row, in a row kernel.
  bool per_row() const { return role == Role::PerRow || role == Role::RowReduction; }
};

struct KernelConstant {
  Scalar value;
  DType dtype;
};

// One fused loop: ops computed element by element over `ranges`, their results that the rest of
// the graph needs written to fresh contiguous buffers.
struct Kernel {
  Shape ranges;  // the iteration space (every op's output shape)
  // > 0 for a row kernel: the length of its rows (the last range), which it computes one at a
  // time, each op over the whole row before the next; 0: one pass over blocks of elements.
  int64_t row_size = 0;
  std::vector<KernelInput> inputs;
  std::vector<KernelConstant> constants;
  std::vector<KernelOp> ops;  // in dependency order
  struct Output {
    int32_t op;  // into ops
    ir::ValueRef value;
  };
  std::vector<Output> outputs;
  std::string name;  // "kernel_3", the symbol's suffix in the generated source
  bool reads_windows() const {
    for (const KernelInput& in : inputs)
      if (in.windowed()) return true;
    return false;
  }
  // A row kernel holding column reductions (RowOpKind::Columns): its rows are folded into
  // per-column accumulators, split across threads as the eager reduction splits them, so a
  // thread may see a segment of each row only; it holds no other row op.
  bool folds_columns() const {
    for (const KernelOp& op : ops)
      if (op.role == KernelOp::Role::ColumnFold) return true;
    return false;
  }
};

struct Step {
  enum class Kind : uint8_t { Kernel, Extern };
  Kind kind;
  int32_t index;  // Kernel: into Schedule::kernels; Extern: the graph node
};

struct Schedule {
  std::vector<Kernel> kernels;
  std::vector<Step> steps;  // in an order that respects every dependency
  // Per node: whether its outputs are computed inside a kernel and never stored.
  std::vector<bool> fused_away;
};

// Lowers `graph` (inductor's lowered graph: lower.h) to a schedule. What the scheduler decided
// for each fusable node, and why it did not fuse it into a kernel it tried ("cannot fuse %5
// (softmax) into kernel_2: it iterates over [4, 8], the kernel over [4]"), is logged under the
// "fusion" topic and, when `decisions` is given, appended to it one line each.
Schedule schedule_graph(const ir::Graph& graph, std::vector<std::string>* decisions = nullptr);

// Pads, cats, flips, rolls and repeats read as index arithmetic (KernelInput::window, negated
// strides) by the kernels of every node that reads them, never stored: a `pad` (constant
// value), a `cat` of at most kMaxCatPieces non-empty pieces of its dtype, a `flip`, a `roll` of
// at most two dims, or a `repeat` (as many repeats as its input has dims) of at most
// kMaxCatPieces copies, whose every reader is a pointwise op over the same shape outside a row
// kernel, and which the graph does not return.
inline constexpr size_t kMaxCatPieces = 8;
std::vector<bool> read_by_index_arithmetic(const ir::Graph& graph);

// Random ops generated code computes (in plain kernels only: element i of the kernel's
// iteration space is element i of the draw), with the eager kernels' own Philox mapping
// (ops/kernels/philox.h), so they draw the same numbers: `uniform`, `normal` (libm's log, cos
// and sqrt in both), `randint`, and `bernoulli` whose
// probabilities are a constant in [0, 1] (a `full` or a number: eager checks a tensor of them
// element by element, with an error, which stays its kernel's job). Their seed and offset are
// the call's (runtime attributes), as for an extern call.
bool draws_in_kernel(const ir::Graph& graph, const ir::Node& node);

// Ops generated code computes from each element's flat index in the kernel's iteration space
// (plain kernels only, whose block loop hands the body the index of each block's first
// element): the random ops of draws_in_kernel, tril and triu (an element is its input's or
// zero, by its row and column: a pointwise op with an index condition), and embedding,
// index_select and gather (indirect loads: KernelInput::index; the indices are checked against
// the bound before the kernel runs, with the eager kernel's error).
bool computed_by_index(const ir::Graph& graph, const ir::Node& node);

// The dim of its table an indirect load's indices pick along (embedding: 0; index_select and
// gather: their dim attribute, wrapped).
int64_t indexed_dim(const ir::Graph& graph, const ir::Node& node);

// Whether a tensor of `sizes` laid out with strides a is addressed as with strides b: a
// dimension of size 1 is never stepped along, so its stride does not matter, and an empty
// tensor is not addressed at all.
bool same_addressing(IntList sizes, IntList a, IntList b);

// Whether reduction dims `dims` (negative: from the end) are every dim of a rank-`rank` tensor
// but the last, each once (a column reduction's).
bool reduces_all_but_last(std::span<const int64_t> dims, int64_t rank);

// `full` nodes read by generated code as the constant they hold (never stored): those whose
// every reader is an op a kernel computes elementwise (not a row op or a view), and which the
// graph does not return.
std::vector<bool> read_as_constant(const ir::Graph& graph);

// Ops generated code computes through their decomposition: pointwise ops that have one — the
// optimizers' multi-output updates (no functor of their own) and gelu (so that its erf is
// shared with its derivative's) — and indexing ops that have one: gather's gradient when it is
// a one-hot (a loss's target), which then fuses with what reads it. Every other op is fused as
// itself or runs as an extern call to its kernel.
bool decomposed_in_generated_code(const ir::Node& node);

// Whether generated code can compute `node` (a pointwise op with a generated body, or a row op,
// on dtypes and inputs the renderer handles).
bool can_fuse(const ir::Graph& graph, const ir::Node& node);

// Row ops: ops along the last dim of a floating tensor whose rows are at most kMaxRowElements
// long, which generated code computes a row at a time with the eager kernel's row function,
// so that they stay bitwise equal to eager: softmax and log_softmax (ops/kernels/softmax_row.h),
// sum, mean, prod, amax, amin, var, norm (p = 2, 1, ±inf) and logsumexp over the last dim alone
// (reduce.h's MapFold::row; only where the eager reduction also folds each row whole,
// kernels::folds_rows_whole, and reads it in place), argmax, argmin, max_dim and min_dim over
// the last dim (an int64 index per row, and the element there; read in place), and layer_norm
// and rms_norm over the last dim (ops/kernels/norm_row.h; their statistics are per-row
// outputs).
//
// Column reductions: sum and mean of a contiguous floating tensor over every dim but the last,
// at least kMinColumns long (bias and normalisation-weight gradients). The kernel iterates over
// the input's rows; each row is folded into one double accumulator per column, in row order,
// the rows split across threads (with partial accumulators merged in thread order) exactly
// where the eager reduction's outer path splits them (kernels::run_units), so the result is
// eager's bit for bit. Their prologue fuses; what reads their result runs after the kernel.
inline constexpr int64_t kMaxRowElements = 16384;
inline constexpr int64_t kMinColumns = 32;
enum class RowOpKind : uint8_t { None, Softmax, Reduction, Norm, Columns };
RowOpKind row_op_kind(const ir::Graph& graph, const ir::Node& node);

}  // namespace kiln::inductor
