// The "eager" backend: runs the captured graph node by node with the eager kernels. What it
// checks is the capture itself (the reference FAQ's first triage step).
#include "kiln/capture/compile.h"

namespace kiln::backends {

Backend make_eager_backend() {
  return [](const ir::Graph& graph, std::span<const ir::TensorInfo>) -> CompiledGraph {
    auto g = std::make_shared<const ir::Graph>(graph);
    return [g](std::span<const Tensor> inputs, std::span<const int64_t> runtime_values) {
      return ir::interpret(*g, inputs, runtime_values);
    };
  };
}

}  // namespace kiln::backends
