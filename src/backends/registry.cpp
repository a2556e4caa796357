// The backend registry: names to backends. "eager" is built in; "aot_eager" and "inductor" are
// reserved for the backends of the next layers and are an error until they exist.
#include <map>
#include <mutex>

#include "kiln/capture/compile.h"

namespace kiln {

namespace backends {
Backend make_eager_backend();  // backends/eager/eager.cpp
}

namespace {
struct BackendRegistry {
  std::mutex mu;
  std::map<std::string, Backend> backends;
  BackendRegistry() { backends["eager"] = backends::make_eager_backend(); }
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

Backend lookup_backend(const std::string& name) {
  KILN_CHECK(!is_reserved(name), NotImplementedError, "kiln::compile: backend '", name,
             "' is not implemented yet (it comes with AOT autograd and the optimizing backend); "
             "use backend \"eager\" for now");
  auto& r = backend_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backends.find(name);
  if (it != r.backends.end()) return it->second;
  std::string known;
  for (const auto& [n, b] : r.backends) known += (known.empty() ? "" : ", ") + n;
  throw Error(
      detail::concat("kiln::compile: unknown backend '", name, "' (registered: ", known, ")"));
}

}  // namespace kiln
