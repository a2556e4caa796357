// Debug dumps (docs/debugging.md): run with KILN_DEBUG_DIR=dir and this program writes
// dir/run-<time>-<pid>/ with every graph it compiles, a graph break and two recompiles; then
// `kiln report dir/run-... -o report.html` draws the page.
#include <kiln/kiln.h>

#include <iostream>

using namespace kiln;

// A normalisation with a data-dependent branch: item() reads a value, so the graph breaks.
Tensor normalize(Tensor x) {
  Tensor centered = x - x.mean();
  const float spread = centered.abs().amax().item<float>();  // graph break: item()
  // `spread` is a C++ number, so it is a constant of the next graph: a new value recompiles
  // it, and the report says so ("constant at node 1 changed ..."). Dividing by the 0-d
  // tensor instead would not recompile.
  if (spread > 1.0f) centered = centered / spread;
  return centered.tanh() * 2;
}

int main() {
  manual_seed(0);
  // One function on the eager backend (its output is the interpreter plan), one on the default
  // backend, inductor (its output is the generated C++).
  auto eager_backend =
      kiln::compile(normalize, {.backend = std::string("eager"), .name = "normalize"});
  auto fused = kiln::compile([](Tensor a, Tensor b) { return (a * b + 1).sigmoid() - a; },
                             {.name = "fused_pointwise"});
  for (int64_t n : {8, 8, 16}) {  // the third call has a new shape: recompiles
    Tensor x = randn({n}) * 3;
    std::cout << "normalize(" << n << "): " << eager_backend(x).sum().item<float>() << "\n";
    std::cout << "fused(" << n << "): " << fused(x, x.exp()).sum().item<float>() << "\n";
  }
  std::cout << "debug run: "
            << (debug_run_dir().empty() ? "(off: set KILN_DEBUG_DIR)" : debug_run_dir()) << "\n";
}
