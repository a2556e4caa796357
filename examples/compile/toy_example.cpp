// The reference FAQ's toy_example, in C++: compiled, then explained. Printing text does not
// break the graph; the `if` on a tensor's value does.
//   ./build/release/examples/toy_example
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"

using kiln::Tensor;

Tensor toy_example(Tensor a, Tensor b) {
  Tensor x = a / (kiln::abs(a) + 1);
  std::printf("woo\n");         // plain C++: runs on every call, never breaks the graph
  if (b.sum() < 0) b = b * -1;  // needs a tensor's value: a graph break
  return x * b;
}

int main() {
  kiln::manual_seed(0);
  Tensor a = kiln::randn({10}), b = kiln::randn({10});
  auto compiled = kiln::compile(toy_example);
  const std::vector<double> got = compiled(a, b).to_vector<double>();
  const std::vector<double> want = toy_example(a, b).to_vector<double>();
  std::cout << "compiled == eager: " << (got == want ? "yes" : "NO") << "\n";
  std::cout << kiln::explain(toy_example, a, b);
  return got == want ? 0 : 1;
}
