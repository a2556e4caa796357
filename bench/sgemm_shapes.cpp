// Kiln's own float32 GEMM (src/ops/sgemm.h) against OpenBLAS's cblas_sgemm, shape by shape, on
// the same operands, alternating call by call: the measurement behind own_sgemm_applies's
// shape rule (docs/performance.md, "What made the difference": Kiln's own sgemm). Not part of
// the build:
//
//   g++ -O2 -std=c++20 -fopenmp -Isrc -Iinclude bench/sgemm_shapes.cpp -o /tmp/sgemm_shapes \
//       -Lbuild/release/src -lkiln -lopenblas -Wl,-rpath,$PWD/build/release/src
//   OMP_NUM_THREADS=2 /tmp/sgemm_shapes            # W7's and W5's products and a grid
//   OMP_NUM_THREADS=2 /tmp/sgemm_shapes 2048 128 384 # one shape: m n k
//   OMP_NUM_THREADS=2 /tmp/sgemm_shapes --cold ...   # caches flushed before every call
//
// Prints, per shape and layout (N: as stored, T: transposed; a then b; * where Kiln sends the
// product to OpenBLAS), the median time of Kiln's kernel over OpenBLAS's (below 1: Kiln's is
// faster) and OpenBLAS's median in ms.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "ops/sgemm.h"

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// --cold: 64 MiB written before every call, so the operands come from memory as in a training
// step (where the previous kernel wrote other data since) rather than hot from the last call.
bool cold = false;
std::vector<float> evict;

void flush_caches() {
  if (!cold) return;
  evict.resize(size_t{16} << 20);
  for (float& x : evict) x += 1.0f;
}

void compare(long m, long n, long k) {
  std::vector<float> a(m * k), b(k * n), c(m * n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  std::printf("m=%5ld n=%4ld k=%4ld:", m, n, k);
  for (int layout = 0; layout < 3; ++layout) {  // NN (dX), NT (forward), TN (weight gradient)
    const bool ta = layout == 2, tb = layout == 1;
    const long lda = ta ? m : k, ldb = tb ? k : n;
    const int reps = static_cast<int>(std::clamp(400000000L / (m * n * k), 5L, 41L));
    std::vector<double> times[2];
    for (int r = 0; r < reps; ++r) {
      for (int own = 0; own < 2; ++own) {
        flush_caches();
        const double start = now_ms();
        if (own)
          kiln::ops::own_sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
                               n);
        else
          cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                      m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n);
        times[own].push_back(now_ms() - start);
      }
    }
    for (auto& t : times) std::sort(t.begin(), t.end());
    // (*: Kiln sends this product to OpenBLAS.)
    std::printf("  %s%s%s %.2f (%.3f ms)", ta ? "T" : "N", tb ? "T" : "N",
                kiln::ops::own_sgemm_applies(ta, tb, m, n, k) ? "" : "*",
                times[1][reps / 2] / times[0][reps / 2], times[0][reps / 2]);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--cold") {
    cold = true;
    --argc;
    ++argv;
  }
  if (argc == 4) {
    compare(std::atol(argv[1]), std::atol(argv[2]), std::atol(argv[3]));
    return 0;
  }
  // W7 (2048 tokens, width 128, MLP 512, vocabulary 96), W5 (1024 tokens, width 256), a grid.
  const long shapes[][3] = {
      {2048, 384, 128},   {2048, 128, 128},   {2048, 512, 128}, {2048, 128, 512}, {2048, 96, 128},
      {384, 128, 2048},   {128, 512, 2048},   {512, 128, 2048}, {1024, 768, 256}, {1024, 1024, 256},
      {1024, 256, 1024},  {256, 1024, 1024},  {128, 128, 2048}, {96, 128, 2048},  {256, 256, 256},
      {1024, 1024, 1024}, {2048, 1024, 2048}, {8192, 64, 128},  {8192, 16, 2048}, {64, 256, 1024}};
  for (const auto& s : shapes) compare(s[0], s[1], s[2]);
}
