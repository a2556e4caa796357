// Seeing what kiln::compile did: explain(), logs by topic, compile times, CompileProfiler.
// The guide is docs/compile.md ("Seeing what happened").
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/capture/compile.h"

namespace kiln {

// One graph break: why, and where in the user's code.
struct GraphBreak {
  std::string reason;
  ir::SourceLoc loc;
};

// Where the user's code is when a graph breaks, for a front end in another language (the Python
// package reads the running Python frame): a provider returning a known location takes the place
// of the C++ call site in break reasons, logs and explain(); an unknown one falls back to it.
// Called with no lock held, on the thread that reached the sync point. Null: none (the default).
using UserLocationFn = ir::SourceLoc (*)();
void set_user_location_provider(UserLocationFn provider);

// torch._dynamo.explain's result. Printing it gives the reference FAQ's report.
struct ExplainOutput {
  int64_t graph_count = 0;
  int64_t graph_break_count = 0;
  int64_t op_count = 0;
  std::vector<GraphBreak> break_reasons;
  std::vector<int64_t> ops_per_graph;
  // What the inductor backend generates for each graph (lowered, not compiled): fused loops,
  // and ops left to their eager kernels.
  std::vector<int64_t> kernels_per_graph;
  std::vector<int64_t> extern_calls_per_graph;
  std::vector<ir::Graph> graphs;
  std::vector<std::vector<std::string>> guards;  // per graph: one line per guarded input
  double compile_seconds = 0;
  std::string str() const;
};
std::ostream& operator<<(std::ostream& os, const ExplainOutput& e);

namespace detail {
// Collects what one explain() run compiles and breaks on (an observer while alive).
class ExplainSession {
 public:
  explicit ExplainSession(ExplainOutput& out);
  ~ExplainSession();
  ExplainSession(const ExplainSession&) = delete;
  ExplainSession& operator=(const ExplainSession&) = delete;
  void watch(const std::shared_ptr<CompiledState>& state);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
}  // namespace detail

// Runs fn(args...) once under capture (eager backend) and reports its graphs and breaks.
template <class F, class... Args>
ExplainOutput explain(F&& fn, Args&&... args) {
  ExplainOutput out;
  detail::ExplainSession session(out);
  CompileOptions options;
  options.backend = std::string("eager");
  options.name = "explain";
  // The result stays alive until the capture ends, so it counts as the graph's output.
  auto compiled = compile([&]() -> decltype(auto) { return std::invoke(fn, args...); }, options);
  session.watch(compiled.state());
  {
    StanceGuard stance(Stance::Default);
    compiled();
  }
  session.finish();
  return out;
}

// ---- logs ----
// Topics: graph_breaks, recompiles, guards, graphs, output_code, fusion (inductor's scheduler:
// where each fusable op went, and why it did not fuse into a kernel it tried, as in "cannot fuse
// %5 (softmax) into kernel_2: it iterates over [4, 8], the kernel over [4]"). Each event is one
// line tagged
// "[kiln:<topic>]" on stderr (or the sink). Also switched on by KILN_LOGS="graph_breaks,recompiles"
// (or "all") in the environment, read once at start-up.
enum class LogTopic : unsigned {
  GraphBreaks = 1,
  Recompiles = 2,
  Guards = 4,
  Graphs = 8,
  OutputCode = 16,
  Fusion = 32,
  Dynamic = 64
};
void set_logs(const std::vector<LogTopic>& topics);
void set_logs(const std::string& spec);  // "graph_breaks,recompiles", "all", "" (off)
bool log_enabled(LogTopic topic);
// Where log lines go (default stderr); an empty function restores stderr.
void set_log_sink(std::function<void(const std::string& line)> sink);

// ---- compile times ----
// Total seconds per phase since start-up (or kiln::reset()): "passes" (CSE, DCE),
// "backend_compile", and "total".
std::map<std::string, double> compile_times();
// The same as a table, one phase a line (torch._dynamo.utils.compile_times()).
std::string compile_times_str();

// ---- debug dumps (TORCH_COMPILE_DEBUG / TORCH_TRACE) ----
// Writes what every compiled function does into a folder per run, `path/run-<UTC time>-<pid>/`:
// each compiled graph (text form that ir::parse_graph reads back, listing, Graphviz picture),
// its guards, what the backend made of it (inductor: the generated C++; eager: the interpreter's
// plan), its compile times, and the run's graph breaks (with the user's line) and recompiles
// (with reasons), listed in an index (index.jsonl, one JSON object a line). `kiln report` turns
// a run folder into an HTML page. The environment variable KILN_DEBUG_DIR does the same from the
// first kiln::compile on. An empty path turns dumping off. Never throws and never changes
// results: a folder that cannot be written gives one warning on stderr and dumping stops.
// docs/debugging.md describes the folder.
void set_debug_dir(const std::string& path);
// The folder this run is being written to; "" when dumping is off.
std::string debug_run_dir();

// The recompilation profiler (torch._dynamo.utils.CompileProfiler): while it is alive, every
// compiled function's graphs, recompiles (with reasons) and ops per graph are recorded.
class CompileProfiler {
 public:
  CompileProfiler();
  ~CompileProfiler();
  CompileProfiler(const CompileProfiler&) = delete;
  CompileProfiler& operator=(const CompileProfiler&) = delete;
  std::string report() const;
  // Stops recording (the end of Python's `with CompileProfiler() as prof:` block); report()
  // and stats() keep what was recorded. Destroying the profiler stops it too.
  void stop();
  // The reference FAQ's form, `torch.compile(model, backend=prof)`: an observation-only
  // backend (it runs graphs as "eager" does) for compile(fn, {.backend = prof.backend()}).
  // Recording does not depend on it: every compiled function is observed while prof lives.
  Backend backend() const;

  struct FunctionStats {
    int64_t graphs = 0;
    int64_t graph_breaks = 0;
    std::vector<std::string> recompile_reasons;
    std::vector<int64_t> ops_per_graph;
    // Graphs the inductor backend compiled, in order: its generated loops and extern calls.
    std::vector<int64_t> kernels_per_graph;
    std::vector<int64_t> extern_calls_per_graph;
  };
  std::map<std::string, FunctionStats> stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
