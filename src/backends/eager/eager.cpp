// The "eager" backend: runs the captured graph node by node with the eager kernels. What it
// checks is the capture itself (the reference FAQ's first triage step).
#include "diagnostics/diagnostics.h"
#include "kiln/capture/compile.h"
#include "kiln/ir/interpreter.h"

namespace kiln::backends {

Backend make_eager_backend() {
  Backend eager = [](const ir::Graph& graph, std::span<const TensorMeta>) -> CompiledGraph {
    auto interpreter =
        std::make_shared<const ir::Interpreter>(std::make_shared<const ir::Graph>(graph));
    if (diagnostics::wants_backend_output())
      diagnostics::note_backend_output({"eager_plan.txt", interpreter->describe_plan(), ""});
    return [interpreter](std::span<const Tensor> inputs, std::span<const int64_t> runtime_values) {
      return interpreter->run(inputs, runtime_values);
    };
  };
  return eager;
}

}  // namespace kiln::backends
