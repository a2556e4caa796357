#include "workloads.h"

#include "kiln/kiln.h"

namespace kiln::bench {

namespace {

// W1: y = gelu(x*a + b) * sigmoid(x) + 0.5*x on 16M float32 elements (a, b scalars).
std::function<void()> w1() {
  auto x = std::make_shared<Tensor>(randn({16 * 1024 * 1024}));
  return [x] {
    const double a = 1.5, b = 0.25;
    Tensor y = gelu(*x * a + b) * sigmoid(*x) + 0.5 * *x;
    (void)y;
  };
}

// W2: softmax over the last dim of [4096, 1024].
std::function<void()> w2() {
  auto x = std::make_shared<Tensor>(randn({4096, 1024}));
  return [x] { Tensor y = softmax(*x, -1); };
}

// W3: layer_norm over the last dim of [8192, 1024] with weight and bias.
std::function<void()> w3() {
  auto x = std::make_shared<Tensor>(randn({8192, 1024}));
  auto w = std::make_shared<Tensor>(randn({1024}));
  auto b = std::make_shared<Tensor>(randn({1024}));
  return [x, w, b] { Tensor y = layer_norm(*x, {1024}, *w, *b); };
}

// W6: a chain of 100 small pointwise ops (alternating add, mul, tanh) on a [64] tensor.
std::function<void()> w6() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  return [x, c] {
    Tensor y = *x;
    for (int i = 0; i < 100; ++i) {
      switch (i % 3) {
        case 0:
          y = y + *c;
          break;
        case 1:
          y = y * *c;
          break;
        default:
          y = tanh(y);
          break;
      }
    }
  };
}

}  // namespace

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"W1", "pointwise chain gelu(x*a+b)*sigmoid(x)+0.5*x, 16M float32", "141-188 ms", w1},
      {"W2", "softmax over the last dim of [4096, 1024]", "1.9-2.1 ms", w2},
      {"W3", "layer_norm over the last dim of [8192, 1024], weight+bias", "13-14 ms", w3},
      {"W6", "100 small pointwise ops (add/mul/tanh) on [64]", "224 us", w6},
  };
  return all;
}

}  // namespace kiln::bench
