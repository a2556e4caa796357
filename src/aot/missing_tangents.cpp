// The backward graph without the tangents that did not arrive (see missing_tangents.h).
#include "aot/missing_tangents.h"

#include "kiln/ir/passes.h"
#include "ops/op_utils.h"

namespace kiln::ops {
extern const OpDef& to_copy_op;
}  // namespace kiln::ops

namespace kiln::aot {

namespace {

bool same_layout(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides &&
         a.storage_offset == b.storage_offset;
}

}  // namespace

BackwardWithoutTangents backward_without_tangents(const ir::Graph& backward, int64_t num_saved,
                                                  const std::vector<bool>& arrived) {
  const ir::Graph& g = backward;
  BackwardWithoutTangents out;
  ir::Graph& h = out.graph;
  static const OpDef& full = *find_op("full");
  // Per value of g: its value in h (node -1: absent), and whether a tangent reaches it.
  std::vector<std::vector<ir::ValueRef>> value_of(g.nodes.size());
  std::vector<std::vector<bool>> from_tangent(g.nodes.size());
  auto absent = [&](ir::ValueRef v) {
    return value_of[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)].node < 0;
  };
  auto tangential = [&](ir::ValueRef v) {
    return static_cast<bool>(
        from_tangent[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
  };
  std::vector<int32_t> new_index(g.nodes.size(), -1);  // for the runtime attributes
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    value_of[i].assign(n.outputs.size(), ir::ValueRef{-1, 0});
    from_tangent[i].assign(n.outputs.size(), false);
    switch (n.kind) {
      case ir::NodeKind::Placeholder: {
        const ir::ValueRef p = h.add_placeholder(n.outputs[0]);
        KILN_CHECK(h.nodes[static_cast<size_t>(p.node)].input_index == n.input_index, Error,
                   "internal error: a backward graph's placeholders are out of order");
        const int64_t t = n.input_index - num_saved;
        from_tangent[i][0] = t >= 0;
        if (t < 0 || arrived[static_cast<size_t>(t)]) value_of[i][0] = p;
        continue;
      }
      case ir::NodeKind::Constant:
        value_of[i][0] = h.add_constant(n.attrs.scalar(0), n.attrs.dtype(1));
        continue;
      case ir::NodeKind::Call:
        break;
    }
    // Gradients are linear in the tangents. A sum of gradient parts (add, sub) keeps the parts
    // that exist — also a part no tangent reaches, such as the zeros of round's derivative,
    // which eager would have added too; with alpha 1, a part plus an absent one is that part,
    // as eager passes it on (no `+ 0` turning -0 into 0). Any other op whose every
    // tangent-carrying input is absent (a product with a saved value, a view, a sum) computes
    // nothing that exists; with only some of them absent (cat, index_add), an absent part is a
    // part of zeros.
    bool any_tangential = false, all_absent = true, any_absent = false;
    for (ir::ValueRef v : n.inputs) {
      if (!tangential(v)) continue;
      any_tangential = true;
      all_absent = all_absent && absent(v);
      any_absent = any_absent || absent(v);
    }
    const std::string_view name = n.op->name;
    const bool sum_of_parts = (name == "add" || name == "sub") && n.inputs.size() == 2;
    if (sum_of_parts && any_absent) {
      const bool a_absent = absent(n.inputs[0]), b_absent = absent(n.inputs[1]);
      const bool unit = n.attrs.scalar(0).to<double>() == 1.0;
      if (a_absent && b_absent) {
        for (size_t o = 0; o < n.outputs.size(); ++o) from_tangent[i][o] = true;
        continue;
      }
      const ir::ValueRef part = a_absent ? n.inputs[1] : n.inputs[0];
      const TensorMeta& kept = g.info(part);
      const TensorMeta& sum = n.outputs[0];
      const bool passes_on = kept.dtype == sum.dtype && kept.sizes == sum.sizes &&
                             (b_absent || (unit && name == "add"));
      // The part stands for the sum only in the sum's layout (or copied into it, contiguous).
      if (passes_on && (same_layout(kept, sum) || ops::is_contiguous_layout(sum))) {
        ir::ValueRef v = value_of[static_cast<size_t>(part.node)][static_cast<size_t>(part.output)];
        if (!same_layout(kept, sum))
          v = h.add_call(ops::to_copy_op, {v}, Attrs{sum.dtype}, {sum}, n.loc);
        value_of[i][0] = v;
        from_tangent[i][0] = tangential(part);
        continue;
      }
      // (Otherwise the absent part becomes zeros, below.)
    } else if (any_tangential && all_absent) {
      for (size_t o = 0; o < n.outputs.size(); ++o) from_tangent[i][o] = true;
      continue;
    }
    std::vector<ir::ValueRef> inputs;
    for (ir::ValueRef v : n.inputs) {
      if (!absent(v)) {
        inputs.push_back(value_of[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
        continue;
      }
      // Zeros, contiguous whatever the absent value's layout: an absent value is either a
      // tangent (contiguous) or computed from one (op outputs are contiguous; its views are
      // absent too), and the ops that take a part of zeros (cat, index_add, sub) compute fresh
      // outputs, so no recorded layout depends on it.
      const TensorMeta& m = g.info(v);
      inputs.push_back(h.add_call(full, {}, Attrs{ops::ints_attr(m.sizes), Scalar(0), m.dtype},
                                  {TensorMeta::contiguous(m.dtype, m.sizes)}));
    }
    const ir::ValueRef r = h.add_call(*n.op, std::move(inputs), n.attrs, n.outputs, n.loc);
    new_index[i] = r.node;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      value_of[i][o] = {r.node, static_cast<int32_t>(o)};
      from_tangent[i][o] = any_tangential;
    }
  }
  for (ir::ValueRef v : g.outputs) {
    if (absent(v)) {
      out.output_of.push_back(-1);
      continue;
    }
    out.output_of.push_back(static_cast<int32_t>(h.outputs.size()));
    h.outputs.push_back(value_of[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
  }
  // The runtime attributes of the random ops still computed (dead code removed, as below).
  std::vector<bool> live(h.nodes.size(), false);
  for (ir::ValueRef v : h.outputs) live[static_cast<size_t>(v.node)] = true;
  for (size_t i = h.nodes.size(); i-- > 0;) {
    if (h.nodes[i].kind == ir::NodeKind::Placeholder) live[i] = true;
    if (!live[i]) continue;
    for (ir::ValueRef v : h.nodes[i].inputs) live[static_cast<size_t>(v.node)] = true;
  }
  for (size_t k = 0; k < g.runtime_attrs.size(); ++k) {
    const int32_t node = new_index[static_cast<size_t>(g.runtime_attrs[k].node)];
    if (node < 0 || !live[static_cast<size_t>(node)]) continue;
    h.runtime_attrs.push_back({node, g.runtime_attrs[k].attr});
    out.runtime_kept.push_back(static_cast<int32_t>(k));
  }
  ir::eliminate_dead_code(h);
  return out;
}

}  // namespace kiln::aot
