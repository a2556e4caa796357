#include <kiln/kiln.h>

#include <iostream>

int main() {
  kiln::Tensor x = kiln::arange(6).view({2, 3}).to(kiln::DType::Float32);
  kiln::Tensor y = x * 2 + 1;
  std::cout << y << "\n";
  return y.to_vector<float>()[5] == 11.0f ? 0 : 1;
}
