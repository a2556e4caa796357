// The structural hash behind Graph::hash and hash_but_sizes: a 64-bit mix that means the same
// in every process and build (disk caches key on it).
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

#include "kiln/ops/op.h"

namespace kiln::ir {

struct Hasher {
  uint64_t h = 0xcbf29ce484222325ULL;
  void add(uint64_t v) {  // 64-bit mix (splitmix-style), order-sensitive
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  void add_bytes(std::string_view s) {
    uint64_t fnv = 0xcbf29ce484222325ULL;  // FNV-1a: stable across processes and builds
    for (char c : s) fnv = (fnv ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    add(fnv);
    add(s.size());
  }
  void add(const Shape& s) {
    add(s.size());
    for (int64_t v : s) add(static_cast<uint64_t>(v));
  }
  void add_guarded(const TensorMeta& t) {  // what same_guarded_meta compares
    add(static_cast<uint64_t>(t.dtype));
    add(t.sizes);
    add(t.strides);
    add(t.requires_grad);
  }
  void add(const Scalar& s) {
    add(static_cast<uint64_t>(s.dtype()));
    add(s.is_floating() ? std::bit_cast<uint64_t>(s.to_double())
                        : static_cast<uint64_t>(s.to_int()));
  }
  void add(const AttrValue& v) {
    add(v.index());
    std::visit(
        [&](const auto& x) {
          using X = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<X, std::monostate>) {
          } else if constexpr (std::is_same_v<X, double>) {
            add(std::bit_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, DType>) {
            add(static_cast<uint64_t>(x));
          } else if constexpr (std::is_same_v<X, Scalar>) {
            add(x);
          } else if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
            add(x.size());
            for (int64_t e : x) add(static_cast<uint64_t>(e));
          } else if constexpr (std::is_same_v<X, std::string>) {
            add_bytes(x);
          } else {
            add(static_cast<uint64_t>(x));
          }
        },
        v);
  }
};

}  // namespace kiln::ir
