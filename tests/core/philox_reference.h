// An independent implementation of docs/random.md for the tests: Philox 4x32-10 written from
// its published definition (Salmon et al., SC 2011; Random123), and the mapping from
// (seed, offset, element index) to each distribution's values. Kiln's kernels are checked
// against it bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

namespace kiln::testing::philox_ref {

struct Words {
  uint32_t w[4];
};

// The high and low 32-bit halves of a * b.
inline void mulhilo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product & 0xFFFFFFFFu);
}

// Philox4x32 with R rounds; the key is bumped by the Weyl constants before rounds 2..R.
inline Words philox4x32(Words ctr, uint32_t key0, uint32_t key1, int rounds = 10) {
  const uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  const uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int r = 0; r < rounds; ++r) {
    if (r != 0) {
      key0 = key0 + kWeyl0;
      key1 = key1 + kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kMul0, ctr.w[0], &hi0, &lo0);
    mulhilo32(kMul1, ctr.w[2], &hi1, &lo1);
    Words next;
    next.w[0] = hi1 ^ ctr.w[1] ^ key0;
    next.w[1] = lo1;
    next.w[2] = hi0 ^ ctr.w[3] ^ key1;
    next.w[3] = lo0;
    ctr = next;
  }
  return ctr;
}

// The words of element i of a draw made at generator state (seed, offset).
inline Words element_words(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t c = offset + i;
  Words ctr{{static_cast<uint32_t>(c & 0xFFFFFFFFu), static_cast<uint32_t>(c >> 32), 0u, 0u}};
  return philox4x32(ctr, static_cast<uint32_t>(seed & 0xFFFFFFFFu),
                    static_cast<uint32_t>(seed >> 32));
}

inline double unit24(uint32_t w) { return std::ldexp(static_cast<double>(w >> 8), -24); }
inline double unit53(uint32_t a, uint32_t b) {
  const uint64_t bits = ((static_cast<uint64_t>(a) << 32) | b) >> 11;
  return std::ldexp(static_cast<double>(bits), -53);
}

// Each distribution's value for element i; `is_double` selects the float64 formulas. The value
// returned is already rounded to the dtype (float32 values are exactly representable in double).
inline double uniform(uint64_t seed, uint64_t offset, uint64_t i, bool is_double, double from,
                      double to) {
  const Words r = element_words(seed, offset, i);
  const double u = is_double ? unit53(r.w[0], r.w[1]) : unit24(r.w[0]);
  const double v = std::fma(u, to - from, from);
  if (is_double) {
    const double top = to > from ? std::nextafter(to, from) : to;
    return v > top ? top : v;
  }
  const float lo = static_cast<float>(from), hi = static_cast<float>(to);
  const float top = hi > lo ? std::nextafter(hi, lo) : hi;
  const float vf = static_cast<float>(v);
  return vf > top ? top : vf;
}

inline double normal(uint64_t seed, uint64_t offset, uint64_t i, bool is_double, double mean,
                     double stdev) {
  const Words r = element_words(seed, offset, i);
  double u1, u2;
  if (is_double) {
    u1 = unit53(r.w[0], r.w[1]) + std::ldexp(1.0, -53);
    u2 = unit53(r.w[2], r.w[3]);
  } else {
    u1 = std::ldexp(static_cast<double>(r.w[0] >> 8) + 1.0, -24);
    u2 = unit24(r.w[1]);
  }
  const double two_pi = 2.0 * 3.14159265358979323846;
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
  const double v = std::fma(stdev, z, mean);
  return is_double ? v : static_cast<double>(static_cast<float>(v));
}

// randint before the conversion to the dtype.
inline int64_t randint(uint64_t seed, uint64_t offset, uint64_t i, int64_t low, int64_t high) {
  const Words r = element_words(seed, offset, i);
  const uint64_t w = (static_cast<uint64_t>(r.w[0]) << 32) | r.w[1];
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return static_cast<int64_t>(static_cast<uint64_t>(low) + w % range);
}

inline double bernoulli(uint64_t seed, uint64_t offset, uint64_t i, double p) {
  const Words r = element_words(seed, offset, i);
  return unit53(r.w[0], r.w[1]) < p ? 1.0 : 0.0;
}

}  // namespace kiln::testing::philox_ref
