// Threads: Kiln's kernels and OpenBLAS share one OpenMP pool (OpenBLAS is its OpenMP build).
#pragma once

#include <cstdint>

namespace kiln {

// Threads used by kernels and BLAS (default: the number of cores, or OMP_NUM_THREADS).
void set_num_threads(int n);
int get_num_threads();

// Loops with fewer elements than this stay on one thread: a parallel region costs a few
// microseconds, more than small tensors take to compute.
inline constexpr int64_t kParallelGrain = 32768;

}  // namespace kiln
