// Philox 4x32-10 and the draws of the random ops, which generated code computes too (uniform,
// normal, randint, bernoulli): element i of a draw that starts at `offset` is a pure function of
// (seed, offset + i) — docs/random.md — so the eager kernels (ops/random_ops.cpp) and fused loops
// (the inductor backend's runtime header) call the same functions here and give the same numbers,
// bit for bit. Depends only on the standard library, so generated code can include it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace kiln::kernels {

inline std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t{kM0} * c[0], p1 = uint64_t{kM1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// The four random words of element `i` of a draw that starts at `offset`.
inline std::array<uint32_t, 4> philox_at(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t ctr = offset + static_cast<uint64_t>(i);
  return philox({static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0u, 0u},
                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
inline double u53(uint32_t hi, uint32_t lo) {  // [0, 1) with 53 random bits
  return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
}
inline float u24(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }  // [0, 1)

// bernoulli: out[j] = 1 where u53 < p[j] (element first + j of the draw), else 0.
template <typename T>
void bernoulli_block(T* out, const T* p, int64_t n, int64_t first, uint64_t seed, uint64_t offset) {
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    out[j] = u53(r[0], r[1]) < static_cast<double>(p[j]) ? T(1) : T(0);
  }
}

// uniform on [from, to): out[j] from element first + j of the draw (24 random bits for float,
// 53 for double), scaled with one rounding (fma, whatever the compiler's contraction settings)
// and kept below `to`.
template <typename T>
void uniform_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, double from,
                   double to) {
  const T lo = static_cast<T>(from), hi = static_cast<T>(to);
  const T top = hi > lo ? std::nextafter(hi, lo) : hi;
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    const double u = std::is_same_v<T, float> ? double(u24(r[0])) : u53(r[0], r[1]);
    const T v = static_cast<T>(std::fma(u, to - from, from));
    out[j] = v > top ? top : v;
  }
}

// normal(mean, stdev): out[j] from element first + j of the draw, by Box-Muller's cosine branch
// (u1 in (0, 1] so that its log is finite; 24 random bits each for float, 53 for double), in
// double, scaled with one rounding.
template <typename T>
void normal_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, double mean,
                  double stdev) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    double u1, u2;
    if constexpr (std::is_same_v<T, float>) {
      u1 = (static_cast<double>(r[0] >> 8) + 1.0) * 0x1p-24;
      u2 = static_cast<double>(r[1] >> 8) * 0x1p-24;
    } else {
      u1 = u53(r[0], r[1]) + 0x1p-53;
      u2 = u53(r[2], r[3]);
    }
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
    out[j] = static_cast<T>(std::fma(stdev, z, mean));
  }
}

// randint on [low, low + range) (range = high - low in unsigned arithmetic, >= 1): out[j] from
// element first + j of the draw, 64 random bits modulo the range.
template <typename T>
void randint_block(T* out, int64_t n, int64_t first, uint64_t seed, uint64_t offset, int64_t low,
                   uint64_t range) {
  for (int64_t j = 0; j < n; ++j) {
    const auto r = philox_at(seed, offset, first + j);
    const uint64_t w = (uint64_t{r[0]} << 32) | r[1];
    out[j] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + w % range));
  }
}

}  // namespace kiln::kernels
