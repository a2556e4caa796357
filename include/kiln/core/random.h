// Randomness: one counter-based Philox 4x32-10 generator whose state is (seed, offset), shared
// by eager kernels and (later) generated code, so both draw bit-identical numbers.
// The exact mapping from (seed, offset, element index) to values is in docs/random.md.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

// Philox 4x32-10: 128-bit counter, 64-bit key -> four 32-bit random words.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ULL) : seed_(seed) {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  uint64_t offset() const;
  void set_offset(uint64_t offset);
  // Reserves `n` counters and returns the offset of the first (thread-safe).
  uint64_t advance(uint64_t n);

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The global generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

Tensor rand(IntList sizes, DType dtype = kDefaultFloat, Generator* gen = nullptr);   // [0, 1)
Tensor randn(IntList sizes, DType dtype = kDefaultFloat, Generator* gen = nullptr);  // N(0, 1)
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, IntList sizes, DType dtype = DType::Int64,
               Generator* gen = nullptr);
// 1 with probability p (per element of p, or a scalar p), as x's dtype.
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
Tensor bernoulli(IntList sizes, double p, DType dtype = kDefaultFloat, Generator* gen = nullptr);
Tensor& uniform_(Tensor& self, double from = 0.0, double to = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& self, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);

}  // namespace kiln
