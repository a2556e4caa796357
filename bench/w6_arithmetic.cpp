// W6's arithmetic alone: the 100-op chain (add, mul, tanh in turn) on four vectors of Vec<float>,
// as its fused kernel computes [64] floats, without the call around it. What W6p (pure mode)
// costs beyond this is the per-call floor W6sp measures. One thread; the best of 50 runs of
// 10,000 chains, in ns per chain.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "ops/kernels/vec.h"

namespace {
using V = kiln::vec::Vec<float>;
constexpr int kElements = 64;
constexpr int kVectors = kElements / V::width;

[[gnu::noinline]] void chain(const float* x, const float* c, float* y) {
  V t[kVectors], cv[kVectors];
  for (int g = 0; g < kVectors; ++g) {
    t[g] = V::load(x + V::width * g);
    cv[g] = V::load(c + V::width * g);
  }
  for (int i = 0; i < 100; ++i)
    for (int g = 0; g < kVectors; ++g)
      t[g] = i % 3 == 0   ? kiln::vec::fmadd(V(1.0f), cv[g], t[g])  // add_fn: x + 1 * y, one FMA
             : i % 3 == 1 ? t[g] * cv[g]
                          : kiln::vec::tanh(t[g]);
  for (int g = 0; g < kVectors; ++g) t[g].store(y + V::width * g);
}
}  // namespace

int main() {
  alignas(64) float x[kElements], c[kElements], y[kElements];
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (int i = 0; i < kElements; ++i) {
    x[i] = normal(gen);
    c[i] = normal(gen);
  }
  double best = 1e30;
  for (int run = 0; run < 50; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; k < 10000; ++k) {
      chain(x, c, y);
      asm volatile("" ::: "memory");  // (no call is dropped or merged with the next)
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        10000;
    best = std::min(best, ns);
  }
  std::printf("W6's arithmetic (%d-lane vectors): %.0f ns per chain of 100 ops on [%d]\n", V::width,
              best, kElements);
  return 0;
}
