// What every compiler layer reports while it works, below capture, AOT autograd and the
// backends, which all report here and read nothing of each other's for it: log lines by topic,
// compile time per phase, and what a backend produced while compiling a graph (generated source,
// a plan, counts) for the observers that asked (debug dumps, CompileProfiler). The user's
// controls (set_logs, set_log_sink, compile_times) are declared in kiln/capture/debug.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/capture/debug.h"

namespace kiln::diagnostics {

// One event under `topic`, tagged "[kiln:<topic>]", to the log sink (default stderr). Callers
// test log_enabled(topic) first when the line costs something to make.
void log(LogTopic topic, const std::string& line);

// A compile phase running on this thread, timed from construction to finish() (or the end of
// its scope). Phases nest: one opened while another is open on the same thread is a part of
// it (inductor_cxx of backend_compile), listed under it by compile_times_str() and not counted
// again in "total", which is the wall time during which any thread was in an outermost phase.
class CompilePhase {
 public:
  explicit CompilePhase(const char* name);
  ~CompilePhase() { finish(); }
  // Ends the phase now (phases end in the reverse order they began).
  void finish();
  const char* name() const { return name_; }
  CompilePhase(const CompilePhase&) = delete;
  CompilePhase& operator=(const CompilePhase&) = delete;

 private:
  const char* name_;
  CompilePhase* outer_;
  double start_;  // steady-clock seconds
  bool done_ = false;
};

// Adds `seconds`, measured by the caller, to `phase` (kiln::compile_times()) as a part of the
// phase open on this thread (at the outermost level, to "total" too), and to the graph being
// collected.
void add_compile_time(const char* phase, double seconds);
void reset_compile_times();

// Something a backend produced while compiling a graph, for debug dumps: generated source
// (inductor), a description of its run plan (eager).
struct BackendOutput {
  std::string kind;  // the dump file's suffix, saying what it is: "inductor.cpp", "eager_plan.txt"
  std::string text;
  std::string path;  // where it lives on disk (a compiled module), "" if nowhere
};

// While a graph is being compiled with observers present, what its backend produced, the time
// of each phase and the backend's counts ("inductor_kernels") are collected on the compiling
// thread (capture's compile_entry and AOT autograd set this up).
struct GraphCompileCollector {
  std::vector<BackendOutput> outputs;
  std::map<std::string, double> seconds;
  std::map<std::string, int64_t> counts;
};
extern thread_local GraphCompileCollector* tls_compile_collector;
// Collects into `c` (none: stops collecting) for the scope's life, then restores the previous.
class CollectingInto {
 public:
  explicit CollectingInto(GraphCompileCollector* c) : previous_(tls_compile_collector) {
    tls_compile_collector = c;
  }
  ~CollectingInto() { tls_compile_collector = previous_; }
  CollectingInto(const CollectingInto&) = delete;
  CollectingInto& operator=(const CollectingInto&) = delete;

 private:
  GraphCompileCollector* previous_;
};
// Whether someone (a debug dump, the profiler) will look at backend outputs: backends skip
// making them otherwise.
inline bool wants_backend_output() { return tls_compile_collector != nullptr; }
void note_backend_output(BackendOutput output);
// A number the backend reports about the graph it compiled ("inductor_kernels": its generated
// loops, "inductor_extern_calls": ops it runs with their eager kernels).
void note_backend_count(const std::string& what, int64_t value);

// The name of the compiled function whose graph a backend is compiling on this thread (null
// when none is): backends use it to label what they report.
extern thread_local const std::string* tls_compiling_function;

}  // namespace kiln::diagnostics
