// The backend registry: names to backends. "eager", "aot_eager" (AOT autograd around the eager
// interpreter) and "inductor" are built in.
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "backends/backend_lookup.h"
#include "backends/inductor/cpp_compiler.h"
#include "kiln/capture/compile.h"
#include "kiln/ops/factory.h"

namespace kiln {

namespace backends {
Backend make_eager_backend();                      // backends/eager/eager.cpp
Backend make_inductor_backend(bool max_autotune);  // backends/inductor/inductor.cpp

// inductor when its code can be built here (a C++ compiler and the runtime headers); otherwise
// one warning saying why and the eager backend in its place.
Backend inductor_or_eager(bool max_autotune) {
  if (inductor::unavailable_reason().empty()) return make_inductor_backend(max_autotune);
  Backend eager = make_eager_backend();
  return [eager](const ir::Graph& graph, std::span<const TensorMeta> inputs) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      std::cerr << "[kiln] warning: " << inductor::unavailable_reason()
                << ": backend \"inductor\" runs graphs with the eager kernels instead\n";
    });
    return eager(graph, inputs);
  };
}
}  // namespace backends

namespace {
struct BackendRegistry {
  std::mutex mu;
  std::map<std::string, Backend> backends;
  Backend inductor_max_autotune;  // inductor in mode "max-autotune", made at its first use
  BackendRegistry() {
    backends["eager"] = backends::make_eager_backend();
    backends["aot_eager"] = aot_autograd(backends::make_eager_backend());
    // As torch.compile's inductor: training graphs are compiled as forward/backward pairs.
    backends["inductor"] = aot_autograd(backends::inductor_or_eager(false));
  }
};
BackendRegistry& backend_registry() {
  static auto* r = new BackendRegistry();
  return *r;
}
bool is_reserved(const std::string& name) { return name == "aot_eager" || name == "inductor"; }
}  // namespace

void register_backend(const std::string& name, Backend backend) {
  KILN_CHECK(!name.empty(), ValueError, "register_backend: the name is empty");
  KILN_CHECK(backend, ValueError, "register_backend('", name, "'): the backend is empty");
  KILN_CHECK(!is_reserved(name), Error, "register_backend: '", name,
             "' is reserved for Kiln's own backend of that name");
  auto& r = backend_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  KILN_CHECK(!r.backends.count(name), Error, "register_backend: a backend named '", name,
             "' is already registered");
  r.backends[name] = std::move(backend);
}

std::vector<std::string> list_backends() {
  auto& r = backend_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, b] : r.backends) names.push_back(name);
  return names;
}

namespace {
// KILN_TESTING_ONLY_INJECT_BUG=<op>:crash|accuracy (torch's inject_relu_bug_TESTING_ONLY): a
// looked-up backend throws on, or adds 1 to the outputs of, every graph calling <op>. Lets the
// repro tests show that a repro rebuilt against an installed Kiln still fails (scripts/test.sh).
Backend with_injected_bug(Backend backend, const std::string& name) {
  const char* env = std::getenv("KILN_TESTING_ONLY_INJECT_BUG");
  if (!env || !*env) return backend;
  if (const auto* aot = backend.aot()) {
    // "inductor" is AOT autograd around the code generator: the bug goes into its compilers.
    // "aot_eager" and other AOT backends stay as they are.
    if (name != "inductor") return backend;
    return aot_autograd(with_injected_bug(aot->forward, name),
                        with_injected_bug(aot->backward, name));
  }
  const std::string spec = env;
  const size_t colon = spec.find(':');
  const std::string op = spec.substr(0, colon);
  const std::string how = colon == std::string::npos ? "" : spec.substr(colon + 1);
  KILN_CHECK(!op.empty() && (how == "crash" || how == "accuracy"), ValueError,
             "KILN_TESTING_ONLY_INJECT_BUG='", spec,
             "' is invalid: expected <op>:crash or <op>:accuracy");
  return [backend, op, how](const ir::Graph& graph, std::span<const TensorMeta> inputs) {
    bool calls_op = false;
    for (const ir::Node& n : graph.nodes) calls_op = calls_op || (n.op && n.op->name == op);
    KILN_CHECK(!(calls_op && how == "crash"), Error,
               "injected bug (KILN_TESTING_ONLY_INJECT_BUG): cannot compile ", op);
    CompiledGraph run = backend(graph, inputs);
    if (!calls_op) return run;
    return CompiledGraph([run](std::span<const Tensor> in, std::span<const int64_t> rt) {
      std::vector<Tensor> outs = run(in, rt);
      for (Tensor& o : outs)
        if (o.is_floating_point()) o = o.add(scalar_tensor(1.0, o.dtype()));
      return outs;
    });
  };
}
}  // namespace

namespace backends {
Backend lookup_backend_in_mode(const std::string& name, const std::string& mode) {
  if (mode.empty() || mode == "default") return lookup_backend(name);
  KILN_CHECK(mode == "max-autotune", ValueError, "kiln::compile: unknown mode '", mode,
             "' (modes: \"default\", \"max-autotune\")");
  KILN_CHECK(name == "inductor", ValueError,
             "kiln::compile: mode \"max-autotune\" tunes the "
             "kernels of backend \"inductor\"; backend '",
             name, "' has no modes");
  Backend tuned;
  {
    auto& r = backend_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.inductor_max_autotune) r.inductor_max_autotune = aot_autograd(inductor_or_eager(true));
    tuned = r.inductor_max_autotune;
  }
  return with_injected_bug(std::move(tuned), name);
}
}  // namespace backends

Backend lookup_backend(const std::string& name) {
  auto& r = backend_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(name);
  if (it != r.backends.end()) return with_injected_bug(it->second, name);
  std::string known;
  for (const auto& [n, b] : r.backends) known += (known.empty() ? "" : ", ") + n;
  throw Error(
      detail::concat("kiln::compile: unknown backend '", name, "' (registered: ", known, ")"));
}

}  // namespace kiln
