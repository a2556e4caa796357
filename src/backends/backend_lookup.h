// What the capture frontend asks of the backends, without knowing their insides: the backend a
// kiln::compile call asked for (with its mode, CompileOptions::mode), and what inductor would
// make of a graph (explain()).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/capture/compile.h"

namespace kiln::backends {

// The backend registered as `name`, in `mode`: "" or "default" is lookup_backend(name);
// "max-autotune" exists for "inductor" only (it tunes each large kernel's threads at its first
// run). kiln::ValueError for an unknown mode or one the backend does not have.
Backend lookup_backend_in_mode(const std::string& name, const std::string& mode);

// What the inductor backend would make of `graph` (a graph after capture's passes), lowered as
// it lowers, nothing compiled: its generated loops and the ops it runs with their eager kernels.
struct InductorCounts {
  int64_t kernels = 0;
  int64_t extern_calls = 0;
};
InductorCounts inductor_counts(const ir::Graph& graph);

}  // namespace kiln::backends
