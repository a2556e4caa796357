// Mode "max-autotune": the first run of a compiled graph times each of its kernels of
// kMinTunedElements or more on one thread and on all of them (one warm-up, then the fastest of
// three runs each; kernels write fresh buffers, so running one again changes nothing) and runs
// it the faster way from then on. The choices are kept beside the module in the cache folder,
// "<module file>.tune", one line per kernel, "<threads> <elements> <kernel name> <grain>", so
// another process with the same code and shapes starts tuned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/inductor/cpp_render.h"
#include "backends/inductor/run_plan.h"
#include "backends/inductor/schedule.h"

namespace kiln::inductor {

// Kernels smaller than this are not tuned: a parallel region costs more than they take.
inline constexpr int64_t kMinTunedElements = 4096;

class KernelTuning {
 public:
  // For the kernels of `schedule` as `plan` launches them, from the module at `module_path`.
  KernelTuning(const Schedule& schedule, const RunPlan& plan, const std::string& module_path);

  // The grain kernel k runs with (kGrainSerial, kGrainParallel, or 0: its own).
  int64_t grain(size_t k) const { return grain_[k]; }
  // Whether kernel k is tuned (large enough, more than one thread, not a column kernel, which
  // splits its work as the eager reduction does whatever the grain).
  bool needs_tuning(size_t k) const;
  // Reads the choices kept on disk; whether every kernel that needs one has it.
  bool load();
  // Keeps the choices on disk, merged with what is there (the module may serve other shapes).
  void save() const;
  // Times kernel k (`fn`, on `buffers`: its inputs, unchanged by running it) both ways and
  // keeps the faster.
  void tune(size_t k, KernelFn fn, char* const* buffers);

 private:
  std::string key(size_t k) const;
  const Schedule& schedule_;
  const RunPlan& plan_;
  std::string file_;  // "<module file>.tune", in the cache folder
  std::vector<int64_t> grain_;
};

}  // namespace kiln::inductor
