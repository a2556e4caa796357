// Kiln's own float32 matrix product for AVX-512 and AVX2 hosts, used in place of OpenBLAS's
// sgemm for the shapes where it measured faster: the products of a Linear layer's forward and
// backward (AVX-512: a batch's tokens against a weight of up to ~1024 columns, and the weight's
// gradient; AVX2: against a weight of up to 128 columns).
// Row-major like the rest of linalg; see sgemm.cpp for the blocking and why it wins.
#pragma once

#include <cstdint>

namespace kiln::ops {

// Whether own_sgemm computes a [m, n] result with k-long sums, a and b laid out as given (see
// own_sgemm), on this host (and the KILN_SGEMM environment variable does not say "openblas").
bool own_sgemm_applies(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);

// c (row-major [m, n], row stride ldc) = alpha * op(a) @ op(b) + beta * c, where op(a) is
// a ([m, k], row stride lda) or, with trans_a, the transpose of a ([k, m]); likewise b. With
// beta == 0, c is only written (it may hold anything, NaN included). With a `row_bias` (n
// floats), beta scales row_bias[j] in every row instead of c (addmm's bias, fused: c is only
// written). Threads: OpenMP's count, or one inside a parallel region. Each element is summed
// over k in ascending order by one thread, so results do not depend on the thread count.
void own_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, const float* row_bias = nullptr);

}  // namespace kiln::ops
