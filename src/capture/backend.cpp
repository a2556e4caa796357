// kiln::Backend: a plain backend (any compiling callable) or an AOT backend (aot_autograd),
// and wrapping one without losing what it is.
#include <iostream>
#include <mutex>

#include "capture/state.h"
#include "kiln/capture/compile.h"

namespace kiln {

CompiledGraph Backend::operator()(const ir::Graph& graph,
                                  std::span<const TensorMeta> inputs) const {
  KILN_CHECK(compile_, ValueError, "kiln: an empty backend was called to compile a graph");
  if (aot_ && capture::tls_plain_backend_with_grad) {
    // A user's callable around "inductor" (or another AOT backend): kiln::compile sees a plain
    // backend, so this graph's backward runs with eager autograd. Say so once, and how to keep it.
    static std::once_flag warned;
    const std::string* fn = diagnostics::tls_compiling_function;
    std::call_once(warned, [&] {
      std::cerr << "[kiln] warning: the backend of '" << (fn ? *fn : std::string("?"))
                << "' is a plain callable that calls an AOT backend (such as \"inductor\"): its "
                   "graphs' backward runs with eager autograd, not compiled. Wrap it with "
                   "Backend::wrapped (or give the callable to kiln::aot_autograd) to keep the "
                   "compiled backward.\n";
    });
  }
  return compile_(graph, inputs);
}

Backend Backend::wrapped(Wrapper wrapper) const {
  KILN_CHECK(compile_, ValueError, "Backend::wrapped: the backend is empty");
  KILN_CHECK(wrapper, ValueError, "Backend::wrapped: the wrapper is empty");
  auto around = [&wrapper](Backend compiler) -> Backend {
    return [wrapper, compiler](const ir::Graph& graph, std::span<const TensorMeta> inputs) {
      return wrapper(graph, inputs, compiler);
    };
  };
  if (aot_) return aot_autograd(around(aot_->forward), around(aot_->backward));
  return around(*this);
}

Backend aot_autograd(Backend fw_compiler, Backend bw_compiler) {
  KILN_CHECK(fw_compiler, ValueError, "aot_autograd: fw_compiler is empty");
  // An AOT backend given as a compiler contributes its own compiler of that part (given as the
  // only compiler, both of its own).
  if (const auto* inner = bw_compiler.aot()) bw_compiler = inner->backward;
  if (const auto* inner = fw_compiler.aot()) {
    if (!bw_compiler) bw_compiler = inner->backward;
    fw_compiler = inner->forward;
  }
  if (!bw_compiler) bw_compiler = fw_compiler;
  Backend out;
  auto compilers = std::make_shared<Backend::AotCompilers>(
      Backend::AotCompilers{std::move(fw_compiler), std::move(bw_compiler)});
  out.compile_ = [forward = compilers->forward](const ir::Graph& graph,
                                                std::span<const TensorMeta> inputs) {
    return forward(graph, inputs);
  };
  out.aot_ = std::move(compilers);
  return out;
}

}  // namespace kiln
