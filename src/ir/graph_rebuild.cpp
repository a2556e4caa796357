#include "ir/graph_rebuild.h"

#include "kiln/core/error.h"

namespace kiln::ir {

GraphRebuild::GraphRebuild(const Graph& from)
    : from_(from), value_of_(from.nodes.size()), replaced_(from.nodes.size(), false) {}

ValueRef GraphRebuild::mapped(ValueRef v) const {
  return value_of_[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
}

std::vector<ValueRef> GraphRebuild::mapped_inputs(const Node& n) const {
  std::vector<ValueRef> ins;
  ins.reserve(n.inputs.size());
  for (ValueRef v : n.inputs) ins.push_back(mapped(v));
  return ins;
}

void GraphRebuild::copy(size_t i) {
  const Node& n = from_.nodes[i];
  switch (n.kind) {
    case NodeKind::Placeholder:
      KILN_CHECK(n.input_index == out_.num_inputs(), Error,
                 "internal error: a graph rebuild met placeholders out of order");
      value_of_[i] = {out_.add_placeholder(n.outputs[0])};
      return;
    case NodeKind::Constant:
      value_of_[i] = {out_.add_constant(n.attrs.scalar(0), n.attrs.dtype(1))};
      return;
    case NodeKind::Call: {
      const ValueRef first = out_.add_call(*n.op, mapped_inputs(n), n.attrs, n.outputs, n.loc);
      value_of_[i].clear();
      for (int32_t k = 0; k < static_cast<int32_t>(n.outputs.size()); ++k)
        value_of_[i].push_back({first.node, k});
      return;
    }
  }
}

void GraphRebuild::replace(size_t i, std::vector<ValueRef> values) {
  value_of_[i] = std::move(values);
  replaced_[i] = true;
}

Graph GraphRebuild::finish() {
  for (ValueRef v : from_.outputs) out_.outputs.push_back(mapped(v));
  out_.input_writes = from_.input_writes;
  for (const RuntimeAttr& r : from_.runtime_attrs) {
    const auto node = static_cast<size_t>(r.node);
    KILN_CHECK(!replaced_[node], Error, "internal error: the random op '",
               from_.nodes[node].op->name, "' was replaced in a graph rebuild");
    out_.runtime_attrs.push_back({value_of_[node][0].node, r.attr});
  }
  return std::move(out_);
}

}  // namespace kiln::ir
