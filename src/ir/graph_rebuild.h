// Rebuilding a graph node by node, for passes that replace some nodes by others (inductor's
// decompositions and rewrites): each node of the old graph is either copied, its inputs mapped
// to the new graph's values, or replaced by values the pass adds to out() itself.
#pragma once

#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::ir {

class GraphRebuild {
 public:
  explicit GraphRebuild(const Graph& from);

  Graph& out() { return out_; }
  // The new graph's value for old value v (its node already copied or replaced).
  ValueRef mapped(ValueRef v) const;
  std::vector<ValueRef> mapped_inputs(const Node& n) const;
  // Copies old node i: a placeholder (in order), a constant, or a call with its inputs mapped.
  void copy(size_t i);
  // Old node i's outputs are `values` of the new graph.
  void replace(size_t i, std::vector<ValueRef> values);
  // The new graph: the old outputs mapped, the same input writes (outputs and inputs keep their
  // positions), and the runtime attributes of the random ops (which must have been copied).
  Graph finish();

 private:
  const Graph& from_;
  Graph out_;
  std::vector<std::vector<ValueRef>> value_of_;
  std::vector<bool> replaced_;
};

}  // namespace kiln::ir
