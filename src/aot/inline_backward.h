// The seam between AOT autograd and the capture that runs it, for inline backward (see
// CompiledFunctionNode::set_inline_tracer): what the node asks of the capturing tracer.
// capture::Tracer implements it; AOT autograd includes nothing of the tracer.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::aot {

class CompiledFunctionNode;

// What inline backward needs of the capture that is running (capture::Tracer implements it):
// AOT autograd asks through this, and includes nothing of the tracer.
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
