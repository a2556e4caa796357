// When a matrix product's sum is split across the threads (linalg.cpp's blas_gemm): declared
// here so that tests can check which products take the split.
#pragma once

#include <cstdint>

namespace kiln::ops {

// The slices a product c [n, m] = a [n, k] @ b [k, m] splits its sum into, one a thread, or 1
// (not split): products whose sum is at least twice as long as the output is wide or tall (a
// weight's gradient, summed over a batch's tokens), outside a parallel region.
int64_t split_sum_threads(int64_t n, int64_t m, int64_t k);

}  // namespace kiln::ops
