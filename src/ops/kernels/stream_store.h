// Non-temporal ("streaming") stores for row kernels whose outputs are far larger than the
// caches: a full vector is written without first reading its destination cache line. Use for
// outputs of at least kernels::kStreamingStoreBytes, and call stream_fence() before the data
// is read by another thread.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/kernels/vec.h"

namespace kiln::vec {

// Stores a full vector to 32-byte aligned `p`, bypassing the caches where the target allows.
template <typename T>
inline void store_stream(Vec<T> v, T* p) {
#ifdef KILN_VEC_AVX2
  if constexpr (std::is_same_v<T, float>) {
    _mm256_stream_ps(p, v.v);
  } else if constexpr (std::is_same_v<T, double>) {
    _mm256_stream_pd(p, v.v);
  } else {
    v.store(p);
  }
#else
  v.store(p);
#endif
}

inline bool stream_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 32 == 0; }

// Orders this thread's streaming stores before whatever it does next.
inline void stream_fence() {
#ifdef KILN_VEC_AVX2
  _mm_sfence();
#endif
}

}  // namespace kiln::vec
