// Which generated kernels run on several threads. A generated kernel parallelises its loop when
// it has more elements than its grain (kParallelGrain, as the eager kernels); mode
// "max-autotune" measures both ways per kernel and runs each with the faster one, by setting
// this thread's override around the kernel's call.
#pragma once

#include <cstdint>
#include <limits>

namespace kiln::inductor {

// Grains for the override: a kernel of n > 1 elements runs on all threads, or on one.
inline constexpr int64_t kGrainParallel = 1;
inline constexpr int64_t kGrainSerial = std::numeric_limits<int64_t>::max();

// Sets the grain the generated kernels called on this thread use (0: their own) for its scope.
class KernelGrainScope {
 public:
  explicit KernelGrainScope(int64_t grain);
  ~KernelGrainScope();
  KernelGrainScope(const KernelGrainScope&) = delete;
  KernelGrainScope& operator=(const KernelGrainScope&) = delete;

 private:
  int64_t saved_;
};

}  // namespace kiln::inductor
