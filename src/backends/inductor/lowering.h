// What the inductor backend knows about each op, in one place: one typed lowering per op, keyed
// by the op's definition. The scheduler asks it whether and how an op fuses (schedule.cpp), the
// renderer what to write for it (cpp_render.cpp); neither names an op. Adding an op to the
// backend is adding its entry in lowering.cpp (and, for a new row fold, the row function it
// names in runtime_exports.cpp).
//
// An op with no entry is fused with its functor when it is pointwise (OpDef::pointwise) and
// runs as an extern call to its eager kernel otherwise.
#pragma once

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/ops/op.h"

namespace kiln::inductor {

// A pointwise op, fused with its functor; the facts beyond the functor the backend needs.
struct PointwiseLowering {
  // Costs about 8 dependent steps in a chain, not 1 (the renderer's vector grouping).
  bool transcendental = false;
  // On integers the eager kernel checks each divisor for zero (a kiln::Error, where a generated
  // loop would trap): integer results stay extern calls.
  bool checks_integer_divisor = false;
};

// A reduction folded a row at a time with the eager reduction's own row function, so it stays
// bitwise equal to eager: over the last dim, or (`columns`) over every dim but the last.
struct RowFoldLowering {
  const char* fold = nullptr;  // inductor_rt::<fold>(row, cols[, argument])
  enum class Argument : uint8_t { None, IntAttr2, FloatAttr2 };
  Argument argument = Argument::None;  // var's correction, norm's p
  bool mean = false;                   // the fold divided by the number of elements folded
  bool columns = false;                // also a column reduction (bias and weight gradients)
  bool dtype_attr = false;             // attribute 2 may name an output dtype: then an extern call
  bool index_result = false;  // an int64 index per row (argmax, argmin): attributes dim, keepdim
  bool p_norm = false;        // the p-norm: only p = 1, 2, ±inf fold as eager does
};

// max_dim, min_dim: the row's extreme and the index where it first occurs (two outputs).
struct RowExtremeLowering {
  bool max = true;
};

// layer_norm, rms_norm over the last dim: the eager row function; its statistics are per-row
// outputs.
struct RowNormLowering {
  bool layer = true;  // layer_norm (mean and bias) rather than rms_norm
};

// softmax, log_softmax over the last dim: the eager row function.
struct SoftmaxLowering {
  bool log = false;
};

// A random draw computed from each element's index with the eager kernel's block function
// (the same Philox numbers).
struct DrawLowering {
  enum class Kind : uint8_t { Uniform, Normal, Randint, Bernoulli };
  Kind kind;
};

// tril, triu: each element kept or zeroed by its row and column.
struct TriangleLowering {
  bool lower = true;
};

// embedding, index_select, gather: rows of a table loaded through indices.
struct IndirectLoadLowering {
  // How the indices map onto the output: embedding's pick the rows of the last range's table
  // row (dim 0), index_select's pick along its dim, gather's are one per element.
  enum class Indices : uint8_t { Rows, AlongDim, PerElement };
  Indices indices;
};

// pad, cat, flip, roll, repeat: read by the kernels that read them as index arithmetic.
struct WindowLowering {
  enum class Kind : uint8_t { Pad, Cat, Flip, Roll, Repeat };
  Kind kind;
};

// full: read as the constant it holds.
struct FillLowering {};

// view: the one view op the graph rewrites look through (a flattening).
struct ViewLowering {};

using Lowering = std::variant<PointwiseLowering, RowFoldLowering, RowExtremeLowering,
                              RowNormLowering, SoftmaxLowering, DrawLowering, TriangleLowering,
                              IndirectLoadLowering, WindowLowering, FillLowering, ViewLowering>;

// The op's entry, or null.
const Lowering* lowering_of(const OpDef* op);
// Every entry, in the table's order (tests, docs).
std::vector<std::pair<const OpDef*, const Lowering*>> all_lowerings();

// The entry of call node `n` when it is of kind T, else null.
template <class T>
const T* lowering_as(const ir::Node& n) {
  if (n.kind != ir::NodeKind::Call) return nullptr;
  const Lowering* l = lowering_of(n.op);
  return l ? std::get_if<T>(l) : nullptr;
}
template <class T>
const T* lowering_as(const OpDef* op) {
  const Lowering* l = lowering_of(op);
  return l ? std::get_if<T>(l) : nullptr;
}

// Ops the backend's graph rewrites create (graph_rewrites.cpp).
const OpDef& view_op();
const OpDef& to_copy_op();

}  // namespace kiln::inductor
