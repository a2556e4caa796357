// Google Benchmark front end for the workloads. Example:
//   ./build/release/bench/kiln_bench --benchmark_repetitions=10
//   --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "workloads.h"

int main(int argc, char** argv) {
  kiln::set_num_threads(2);
  for (const auto& w : kiln::bench::workloads()) {
    benchmark::RegisterBenchmark((w.id + " " + w.description).c_str(),
                                 [&w](benchmark::State& st) {
                                   std::function<void()> step;
                                   try {
                                     step = w.setup();
                                     step();  // warm-up: allocator cache, page faults, thread pool
                                   } catch (const std::exception& e) {
                                     st.SkipWithError(e.what());
                                     return;
                                   }
                                   for (auto _ : st) step();
                                 })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
