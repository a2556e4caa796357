// The C++ renderer: writes a schedule's kernels as one translation unit of plain loops over
// the eager kernels' functors (runtime/inductor_runtime.h). CPU assumptions (block size,
// threading threshold, vector width through Vec<T>) live here and in the runtime header, so
// another target renders the same kernels without touching the scheduler.
#pragma once

#include <string>

#include "backends/inductor/schedule.h"

namespace kiln::inductor {

// The source of every kernel in `schedule`: for kernel K an
//   extern "C" void kiln_<K.name>(char* const* buffers, const kiln::Attrs* const* attrs)
// where buffers are the data pointers of K's outputs (fresh, contiguous) then of its inputs'
// root tensors (kernel.inputs order), and attrs the attributes of K's ops (kernel.ops order).
std::string render_cpp(const ir::Graph& graph, const Schedule& schedule);

}  // namespace kiln::inductor
