// What a warm start pays per cached module: loading it from the disk cache with every check
// (owner and mode on the descriptor, the trailer's size and checksum, dlopen through the
// folder's descriptor, the key symbol) against a bare dlopen of the same file, as Kiln did
// before the checks. Side by side in one run; the ratio is the cost of the checks.
//   KILN_CACHE_DIR=$(mktemp -d) ./build/release/bench/cache_load
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <string>

#include "backends/inductor/cpp_compiler.h"

namespace {

// A module about the size of a typical generated one (~17 KB): a few dozen small functions.
const std::string& source() {
  static const std::string text = [] {
    std::string s;
    for (int i = 0; i < 40; ++i)
      s += "extern \"C\" double kiln_bench_fn" + std::to_string(i) +
           "(const double* x, long n) { double a = 0; for (long j = 0; j < n; ++j) a += x[j] * " +
           std::to_string(i + 1) + ".5; return a; }\n";
    return s;
  }();
  return text;
}

void checked_load(benchmark::State& st) {
  const std::string path = kiln::inductor::compile_module(source(), nullptr)->path();
  for (auto _ : st) {
    kiln::inductor::forget_loaded_modules();  // as a new process: from the disk cache
    kiln::inductor::CompileStats stats;
    auto m = kiln::inductor::compile_module(source(), &stats);
    if (!stats.cache_hit) st.SkipWithError("the module was compiled again");
    benchmark::DoNotOptimize(m->symbol("kiln_bench_fn0"));
  }
  st.SetLabel(path);
}

void bare_dlopen(benchmark::State& st) {
  const std::string path = kiln::inductor::compile_module(source(), nullptr)->path();
  kiln::inductor::forget_loaded_modules();
  for (auto _ : st) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    benchmark::DoNotOptimize(dlsym(h, "kiln_bench_fn0"));
    dlclose(h);
  }
}

BENCHMARK(checked_load)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(bare_dlopen)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
