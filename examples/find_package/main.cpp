#include <kiln/kiln.h>

#include <cstring>
#include <iostream>

// Links an installed Kiln and runs eager code and a compiled function (the default backend,
// inductor, builds its C++ against the headers installed beside the library).
int main() {
  kiln::Tensor x = kiln::arange(6).view({2, 3}).to(kiln::DType::Float32);
  kiln::Tensor y = x * 2 + 1;
  std::cout << y << "\n";
  if (y.to_vector<float>()[5] != 11.0f) return 1;

  auto fn = [](const kiln::Tensor& t) { return (t * 0.5).tanh() + t.exp(); };
  auto compiled = kiln::compile(fn);
  kiln::Tensor a = kiln::randn({64, 32});
  const kiln::Tensor want = fn(a), got = compiled(a);
  const bool same = std::memcmp(want.data_ptr(), got.data_ptr(),
                                static_cast<size_t>(want.numel()) * sizeof(float)) == 0;
  std::cout << "compiled function " << (same ? "equals" : "DIFFERS FROM") << " eager\n";
  return same ? 0 : 1;
}
