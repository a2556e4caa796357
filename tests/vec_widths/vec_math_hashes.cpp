// Prints a hash of the float exp, tanh, sigmoid and erf of src/ops/kernels/vec.h over a dense grid
// and special values. Built twice (for the host, and for AVX2 only): the hashes must agree, i.e.
// the 16-lane AVX-512 and 8-lane AVX2 sections give the same bits lane for lane, so eager and
// compiled results do not depend on the host's vector width (see vec_math_hashes_compare.cmake).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/kernels/vec.h"

int main() {
  using kiln::vec::Vec;
  constexpr int kWidth = Vec<float>::width;
  std::vector<float> xs;
  for (int i = -2000000; i <= 2000000; ++i) xs.push_back(static_cast<float>(i) * 6.0e-5f);
  for (float s : {1e30f, -1e30f, -103.972084f, -104.5f, 88.8f, -87.33f, -87.34f, 20.0f, 1e-38f,
                  -0.0f, 3.84f, 4.0f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(s);
  while (xs.size() % 16 != 0) xs.push_back(0.5f);
  uint64_t hash[4] = {1469598103934665603ULL, 1469598103934665603ULL, 1469598103934665603ULL,
                      1469598103934665603ULL};
  for (size_t i = 0; i < xs.size(); i += kWidth) {
    const Vec<float> x = Vec<float>::load(&xs[i]);
    float out[4][kWidth];
    exp(x).store(out[0]);
    tanh(x).store(out[1]);
    erf(x).store(out[2]);
    sigmoid(x).store(out[3]);
    for (int f = 0; f < 4; ++f)
      for (int lane = 0; lane < kWidth; ++lane) {
        uint32_t bits;
        std::memcpy(&bits, &out[f][lane], sizeof bits);
        hash[f] = (hash[f] ^ bits) * 1099511628211ULL;  // FNV-1a over the result bits
      }
  }
  std::printf("exp %016llx tanh %016llx erf %016llx sigmoid %016llx\n",
              static_cast<unsigned long long>(hash[0]), static_cast<unsigned long long>(hash[1]),
              static_cast<unsigned long long>(hash[2]), static_cast<unsigned long long>(hash[3]));
  return 0;
}
