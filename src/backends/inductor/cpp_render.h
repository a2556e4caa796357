// The C++ renderer: writes a schedule's kernels as one translation unit of plain loops over
// the eager kernels' functors (runtime/inductor_runtime.h). CPU assumptions (block size,
// threading threshold, vector width through Vec<T>) live here and in the runtime header, so
// another target renders the same kernels without touching the scheduler.
#pragma once

#include <string>
#include <vector>

#include "backends/inductor/schedule.h"

namespace kiln::inductor {

// The source of every kernel in `schedule`: for kernel K an
//   extern "C" void KILN_KERNEL(<K.name>)(char* const* buffers, const kiln::Attrs* const* attrs,
//                                         const int64_t* shape)
// (KILN_KERNEL(name) is kiln_<name> unless the includer defines it: see LoadedModule::kernel)
// where buffers are the data pointers of K's outputs (fresh, contiguous) then of its inputs'
// root tensors (kernel.inputs order) advanced by each input's offset, and attrs the attributes
// of K's ops (kernel.ops order).
// Sizes and strides arrive per call in `shape` (below), so graphs that differ only in shapes
// share one compiled module (docs/dynamic_shapes.md), but for the loop a plain kernel runs in
// (short_run_loop when its innermost range is short), chosen here for the graph's sizes, or per
// call when `sizes_vary` (a dynamic graph: kiln::compiling_dynamic_graph()).
std::string render_cpp(const ir::Graph& graph, const Schedule& schedule, bool sizes_vary = false);
// A loaded kernel of that convention.
using KernelFn = void (*)(char* const* buffers, const Attrs* const* attrs, const int64_t* shape);

// A target's renderer: a schedule's kernels as source in the target's language, each a function
// with the calling convention above and launched with launch_shape's argument. The C++ renderer
// (cpp_renderer(): render_cpp and launch_shape below) is the one target today; another (CUDA)
// renders the same schedule through the same interface, and the scheduler does not change.
class KernelRenderer {
 public:
  virtual ~KernelRenderer() = default;
  virtual std::string render(const ir::Graph& graph, const Schedule& schedule,
                             bool sizes_vary) const = 0;
  virtual std::vector<int64_t> launch_shape(const Kernel& k) const = 0;
};
const KernelRenderer& cpp_renderer();

// The `shape` argument of kernel k: {numel, nd, sizes[nd] (coalesced, innermost first), then
// per operand (outputs, then inputs) its byte strides[nd]}; when some inputs are read through
// windows (Kernel::reads_windows), then per operand what it reads outside its window and its
// bounds per dim (kernels::block_loop_any's `windows`); then the index parameters of the ops
// of a plain kernel that compute by index and read sizes: per indirect load (in op order) the
// kernel's ranges, its table's strides and its index stride; per tril or triu, the kernel's
// row and column counts.
std::vector<int64_t> launch_shape(const Kernel& k);

}  // namespace kiln::inductor
