// Inline backward (see CompiledFunctionNode::set_inline_tracer): what a segment's autograd node
// asks of AOT autograd's side of the capture that made it (segment_autograd.cpp implements it,
// through capture::SegmentHost).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::aot {

class CompiledFunctionNode;

class InlineBackwardTracer {
 public:
  virtual ~InlineBackwardTracer() = default;
  // Whether `node`, the capturing segment's autograd node, can have its backward traced into the
  // graph being captured now; if so it gets its edges (node.begin_inline) and is retired.
  virtual bool begin_inline_backward(CompiledFunctionNode& node) = 0;
  // Records the backward of the segment's graph from `seeds` (value, gradient) to `wanted`
  // (graph inputs); returns their gradients (undefined: none reaches one).
  virtual std::vector<Tensor> trace_inline_backward(
      std::span<const std::pair<ir::ValueRef, Tensor>> seeds, std::span<const ir::ValueRef> wanted,
      std::string& missing_derivative) = 0;
};

}  // namespace kiln::aot
