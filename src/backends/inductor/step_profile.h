// Where a compiled graph's time goes. With KILN_INDUCTOR_PROFILE=1 in the environment every
// graph inductor compiles times each of its steps (a generated kernel or an extern call to an
// eager kernel) on every run, and the process prints, at exit, per graph: the time of a run,
// the time per kind of step (generated kernels, each extern op) and the 15 slowest steps
// (KILN_INDUCTOR_PROFILE=N: the N slowest).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/inductor/schedule.h"

namespace kiln::inductor {

// KILN_INDUCTOR_PROFILE, read once; set_step_profiling overrides it (tests). Graphs compiled
// while it is on are timed; the report at exit is printed if it is still on then.
bool step_profiling();
void set_step_profiling(bool on);

class GraphProfile {
 public:
  struct StepInfo {
    std::string label;  // "kernel_5: gelu, mul, … (11 ops) over [32, 64, 512]"
    std::string kind;   // "generated kernels" or "extern addmm"
  };
  GraphProfile(std::string title, std::vector<StepInfo> steps);

  void add_step(size_t step, int64_t nanoseconds) {
    step_ns_[step].fetch_add(nanoseconds, std::memory_order_relaxed);
  }
  void add_run(int64_t nanoseconds) {
    run_ns_.fetch_add(nanoseconds, std::memory_order_relaxed);
    runs_.fetch_add(1, std::memory_order_relaxed);
  }
  // The table for this graph; "" before its first run. `slowest`: how many steps to list.
  std::string report(size_t slowest) const;

 private:
  std::string title_;
  std::vector<StepInfo> steps_;
  std::unique_ptr<std::atomic<int64_t>[]> step_ns_;
  std::atomic<int64_t> run_ns_{0}, runs_{0};
};

// A profile kept for the report at exit (and for step_profile_report) as long as the process
// lives: a graph freed earlier still shows where its time went.
std::shared_ptr<GraphProfile> register_graph_profile(std::string title,
                                                     std::vector<GraphProfile::StepInfo> steps);
// A registered profile for a graph compiled as `schedule` (the compiled function being compiled
// on this thread names it): a label per step, "kernel_5: gelu, mul, … (11 ops) over [...]" or
// "extern addmm %7 -> float32[...]".
std::shared_ptr<GraphProfile> profile_graph(const ir::Graph& graph, const Schedule& schedule);
// Every registered graph's report, in the order they were compiled.
std::string step_profile_report();

}  // namespace kiln::inductor
