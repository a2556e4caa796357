// The small products and transposes of ops/kernels/small_gemm.h (attention's, batched
// matmul's) against plain loops: every column chunking (4, 2 and 1 vectors and the last partial
// vector), row tails, strided and transposed a, beta, and transposes in square register blocks
// with their edges. Also built for AVX2 (kiln_kernels_avx2_tests) on AVX-512 hosts, where the
// chunking and the transpose blocks differ.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ops/kernels/small_gemm.h"

namespace {

std::vector<float> random_floats(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(SmallGemm, MatchesFloat64ForEveryChunkingAndTail) {
  // m (columns of c) crosses every chunk width of 8- and 16-lane vectors, with tails; n (rows)
  // crosses the row tiles (12, 6, 4, 2, 1 at once).
  unsigned seed = 1;
  for (int64_t n : {1, 5, 7, 13, 32})
    for (int64_t m : {3, 8, 16, 24, 32, 40, 64, 72, 100})
      for (int64_t k : {1, 17, 64})
        for (bool a_transposed : {false, true})
          for (float beta : {0.0f, 0.5f}) {
            // a [n, k] read through strides: rows of k (+2 padding), or stored transposed.
            const int64_t lda = (a_transposed ? n : k) + 2;
            const std::vector<float> a =
                random_floats(static_cast<size_t>((a_transposed ? k : n) * lda), seed++);
            const int64_t ars = a_transposed ? 1 : lda, acs = a_transposed ? lda : 1;
            const int64_t ldb = m + 3, ldc = m + 1;
            const std::vector<float> b = random_floats(static_cast<size_t>(k * ldb), seed++);
            std::vector<float> c = random_floats(static_cast<size_t>(n * ldc), seed++);
            if (beta == 0.0f)
              for (float& x : c) x = std::numeric_limits<float>::quiet_NaN();  // never read
            const std::vector<float> before = c;
            kiln::kernels::small_gemm<float>(n, m, k, 1.5f, a.data(), ars, acs, b.data(), ldb, beta,
                                             c.data(), ldc);
            for (int64_t i = 0; i < n; ++i)
              for (int64_t j = 0; j < m; ++j) {
                double sum = 0, magnitude = 0;
                for (int64_t p = 0; p < k; ++p) {
                  const double term = double(a[i * ars + p * acs]) * b[p * ldb + j];
                  sum += term;
                  magnitude += std::abs(term);
                }
                const double old = beta == 0.0f ? 0.0 : before[i * ldc + j];
                const double want = 1.5 * sum + beta * old;
                const double bound = (k + 4) * std::numeric_limits<float>::epsilon() *
                                     (1.5 * magnitude + std::abs(beta * old));
                ASSERT_LE(std::abs(c[i * ldc + j] - want), bound)
                    << "c(" << i << ", " << j << ") for n=" << n << " m=" << m << " k=" << k
                    << " a_transposed=" << a_transposed << " beta=" << beta;
              }
          }
}

TEST(SmallGemm, TransposeIntoCopiesEveryElementAndNothingElse) {
  unsigned seed = 50;
  for (int64_t rows : {1, 7, 8, 16, 23, 40})
    for (int64_t cols : {1, 8, 9, 16, 31, 48})
      for (bool contiguous : {true, false}) {
        // m [rows, cols] with column stride 1 (blocks on registers) or 2 (element by element).
        const int64_t cs = contiguous ? 1 : 2, rs = cols * cs + 5;
        const std::vector<float> m = random_floats(static_cast<size_t>(rows * rs), seed++);
        const int64_t ldo = rows + 3;
        std::vector<float> out(static_cast<size_t>(cols * ldo), -7.0f);
        kiln::kernels::transpose_into(m.data(), rows, cols, rs, cs, out.data(), ldo);
        for (int64_t c = 0; c < cols; ++c)
          for (int64_t r = 0; r < ldo; ++r)
            ASSERT_EQ(out[c * ldo + r], r < rows ? m[r * rs + c * cs] : -7.0f)
                << "out(" << c << ", " << r << ") for rows=" << rows << " cols=" << cols
                << " contiguous=" << contiguous;
      }
}

}  // namespace
