// The lowering table (see lowering.h): the only place the inductor backend names ops.
#include "backends/inductor/lowering.h"

#include <string_view>
#include <unordered_map>

#include "kiln/core/error.h"

namespace kiln::inductor {

namespace {

using Fold = RowFoldLowering;
using Arg = RowFoldLowering::Argument;

struct Entry {
  std::string_view op;
  Lowering lowering;
};

// Every entry, by op name; resolved to the ops' definitions once.
const Entry kEntries[] = {
    // Pointwise ops with more to say than their functor.
    {"exp", PointwiseLowering{.transcendental = true}},
    {"exp2", PointwiseLowering{.transcendental = true}},
    {"expm1", PointwiseLowering{.transcendental = true}},
    {"log", PointwiseLowering{.transcendental = true}},
    {"log2", PointwiseLowering{.transcendental = true}},
    {"log1p", PointwiseLowering{.transcendental = true}},
    {"tanh", PointwiseLowering{.transcendental = true}},
    {"sigmoid", PointwiseLowering{.transcendental = true}},
    {"erf", PointwiseLowering{.transcendental = true}},
    {"gelu", PointwiseLowering{.transcendental = true}},
    {"silu", PointwiseLowering{.transcendental = true}},
    {"sin", PointwiseLowering{.transcendental = true}},
    {"cos", PointwiseLowering{.transcendental = true}},
    {"tan", PointwiseLowering{.transcendental = true}},
    {"pow", PointwiseLowering{.transcendental = true}},
    {"atan2", PointwiseLowering{.transcendental = true}},
    {"floor_divide", PointwiseLowering{.checks_integer_divisor = true}},
    {"trunc_divide", PointwiseLowering{.checks_integer_divisor = true}},
    {"remainder", PointwiseLowering{.checks_integer_divisor = true}},
    // Row folds (runtime_exports.cpp's row functions, the eager reductions' own).
    {"sum", Fold{.fold = "row_sum", .columns = true, .dtype_attr = true}},
    {"mean", Fold{.fold = "row_sum", .mean = true, .columns = true}},
    {"prod", Fold{.fold = "row_prod", .dtype_attr = true}},
    {"amax", Fold{.fold = "row_max"}},
    {"amin", Fold{.fold = "row_min"}},
    {"var", Fold{.fold = "row_var", .argument = Arg::IntAttr2}},
    {"logsumexp", Fold{.fold = "row_logsumexp"}},
    {"norm", Fold{.fold = "row_norm", .argument = Arg::FloatAttr2, .p_norm = true}},
    {"argmax", Fold{.fold = "row_argmax", .index_result = true}},
    {"argmin", Fold{.fold = "row_argmin", .index_result = true}},
    {"max_dim", RowExtremeLowering{.max = true}},
    {"min_dim", RowExtremeLowering{.max = false}},
    {"layer_norm", RowNormLowering{.layer = true}},
    {"rms_norm", RowNormLowering{.layer = false}},
    {"softmax", SoftmaxLowering{.log = false}},
    {"log_softmax", SoftmaxLowering{.log = true}},
    // Computed from each element's index.
    {"uniform", DrawLowering{DrawLowering::Kind::Uniform}},
    {"normal", DrawLowering{DrawLowering::Kind::Normal}},
    {"randint", DrawLowering{DrawLowering::Kind::Randint}},
    {"bernoulli", DrawLowering{DrawLowering::Kind::Bernoulli}},
    {"tril", TriangleLowering{.lower = true}},
    {"triu", TriangleLowering{.lower = false}},
    {"embedding", IndirectLoadLowering{IndirectLoadLowering::Indices::Rows}},
    {"index_select", IndirectLoadLowering{IndirectLoadLowering::Indices::AlongDim}},
    {"gather", IndirectLoadLowering{IndirectLoadLowering::Indices::PerElement}},
    // Read by index arithmetic.
    {"pad", WindowLowering{WindowLowering::Kind::Pad}},
    {"cat", WindowLowering{WindowLowering::Kind::Cat}},
    {"flip", WindowLowering{WindowLowering::Kind::Flip}},
    {"roll", WindowLowering{WindowLowering::Kind::Roll}},
    {"repeat", WindowLowering{WindowLowering::Kind::Repeat}},
    {"full", FillLowering{}},
    {"view", ViewLowering{}},
};

const std::unordered_map<const OpDef*, Lowering>& table() {
  static const auto* by_op = [] {
    auto* m = new std::unordered_map<const OpDef*, Lowering>();
    for (const Entry& e : kEntries) {
      const OpDef* op = find_op(e.op);
      KILN_CHECK(op, Error, "inductor: internal error: the lowering table names op '", e.op,
                 "', which is not registered");
      m->emplace(op, e.lowering);
    }
    return m;
  }();
  return *by_op;
}

}  // namespace

std::vector<std::pair<const OpDef*, const Lowering*>> all_lowerings() {
  std::vector<std::pair<const OpDef*, const Lowering*>> out;
  for (const Entry& e : kEntries) {
    const OpDef* op = find_op(e.op);
    out.emplace_back(op, lowering_of(op));
  }
  return out;
}

const Lowering* lowering_of(const OpDef* op) {
  const auto& t = table();
  const auto it = t.find(op);
  return it == t.end() ? nullptr : &it->second;
}

const OpDef& view_op() {
  static const OpDef& op = *find_op("view");
  return op;
}

const OpDef& to_copy_op() {
  static const OpDef& op = *find_op("to_copy");
  return op;
}

}  // namespace kiln::inductor
