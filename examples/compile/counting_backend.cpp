// A user backend: counts the ops of every graph it compiles and runs graphs with the planned
// interpreter (what the built-in "eager" backend does). See docs/compile.md, "Backends".
//   ./build/release/examples/counting_backend
#include <atomic>
#include <iostream>

#include "kiln/ir/interpreter.h"
#include "kiln/kiln.h"

namespace {
std::atomic<int64_t> ops_seen{0};
std::atomic<int> graphs_seen{0};
}  // namespace

int main() {
  using namespace kiln;
  register_backend("counting", [](const ir::Graph& graph, std::span<const TensorMeta>) {
    ops_seen += graph.num_calls();
    ++graphs_seen;
    std::cout << "compiling a graph of " << graph.num_calls() << " ops:\n" << graph;
    auto plan = std::make_shared<const ir::Interpreter>(std::make_shared<const ir::Graph>(graph));
    return CompiledGraph(
        [plan](std::span<const Tensor> inputs, std::span<const int64_t> runtime_values) {
          return plan->run(inputs, runtime_values);
        });
  });

  auto f = compile([](Tensor x) { return (x * 2).exp().sum(); },
                   CompileOptions{.backend = std::string("counting")});
  const double first = f(ones({4})).item<double>();
  const double second = f(ones({4})).item<double>();  // a cache hit: not compiled again
  std::cout << "results " << first << ", " << second << "; graphs compiled: " << graphs_seen.load()
            << ", ops seen: " << ops_seen.load() << "\n";
  return graphs_seen == 1 && ops_seen == 3 && first == second ? 0 : 1;
}
