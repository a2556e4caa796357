// What libkiln exports for generated code to call: the block loop, compiled once here rather
// than once per generated kernel (it holds the OpenMP region and the gather/scatter of strided
// operands, most of a kernel's compile time when it was a template instantiated per kernel).
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/runtime/inductor_runtime.h"

namespace kiln::inductor {
namespace {
thread_local int64_t tls_grain_override = 0;
}  // namespace

KernelGrainScope::KernelGrainScope(int64_t grain) : saved_(tls_grain_override) {
  tls_grain_override = grain;
}
KernelGrainScope::~KernelGrainScope() { tls_grain_override = saved_; }

}  // namespace kiln::inductor

extern "C" void kiln_inductor_block_loop(int num_operands, int num_outputs, const int64_t* shape,
                                         char* const* base, const int64_t* isz, int64_t grain,
                                         kiln::inductor_rt::BlockBody body, void* context) {
  const int64_t tuned = kiln::inductor::tls_grain_override;
  kiln::kernels::block_loop_any(static_cast<size_t>(num_operands), static_cast<size_t>(num_outputs),
                                shape, base, isz, tuned ? tuned : grain,
                                [&](char* const* p, int64_t n) { body(p, n, context); });
}
