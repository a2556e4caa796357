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

// torch._dynamo.explain's result. Printing it gives the reference FAQ's report.
struct ExplainOutput {
  int64_t graph_count = 0;
  int64_t graph_break_count = 0;
  int64_t op_count = 0;
  std::vector<GraphBreak> break_reasons;
  std::vector<int64_t> ops_per_graph;
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
// Topics: graph_breaks, recompiles, guards, graphs, output_code. Each event is one line tagged
// "[kiln:<topic>]" on stderr (or the sink). Also switched on by KILN_LOGS="graph_breaks,recompiles"
// (or "all") in the environment, read once at start-up.
enum class LogTopic : unsigned {
  GraphBreaks = 1,
  Recompiles = 2,
  Guards = 4,
  Graphs = 8,
  OutputCode = 16
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

// The recompilation profiler (torch._dynamo.utils.CompileProfiler): while it is alive, every
// compiled function's graphs, recompiles (with reasons) and ops per graph are recorded.
class CompileProfiler {
 public:
  CompileProfiler();
  ~CompileProfiler();
  CompileProfiler(const CompileProfiler&) = delete;
  CompileProfiler& operator=(const CompileProfiler&) = delete;
  std::string report() const;
  // The reference FAQ's form, `torch.compile(model, backend=prof)`: an observation-only
  // backend (it runs graphs as "eager" does) for compile(fn, {.backend = prof.backend()}).
  // Recording does not depend on it: every compiled function is observed while prof lives.
  Backend backend() const;

  struct FunctionStats {
    int64_t graphs = 0;
    int64_t graph_breaks = 0;
    std::vector<std::string> recompile_reasons;
    std::vector<int64_t> ops_per_graph;
  };
  std::map<std::string, FunctionStats> stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
