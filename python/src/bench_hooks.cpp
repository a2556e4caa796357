// Timing helpers for bench/python_overhead.py: what a call costs in C++ with no Python around it,
// so that the benchmark can report the binding's own overhead per op.
#include <chrono>

#include "bindings.h"
#include "kiln/ops/pointwise.h"

namespace kiln::python {

void bind_bench_hooks(nb::module_& m) {
  nb::module_ bench = m.def_submodule("_bench", "Timing helpers for the benchmarks.");
  bench.def(
      "cpp_add_seconds",
      [](const Tensor& a, const Tensor& b, int64_t calls) {
        nb::gil_scoped_release unlocked;
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < calls; ++i) {
          Tensor r = add(a, b);
          (void)r;
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
               static_cast<double>(calls);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("calls"),
      "Seconds per kiln::add(a, b) called from C++ (the GIL released).");
}

}  // namespace kiln::python
