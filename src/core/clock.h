// Elapsed wall time, for compile-time accounting and profiles.
#pragma once

#include <chrono>

namespace kiln::detail {

// Seconds since `t` on the monotonic clock.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace kiln::detail
