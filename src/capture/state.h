// Internal state of the capture frontend: the compiled-graph cache of a compiled function, the
// per-thread capture stack, and the statistics that explain/logs/profiler read.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "diagnostics/diagnostics.h"
#include "ir/symbolic_sizes.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/debug.h"

namespace kiln::capture {

class Tracer;
struct AutogradPlans;

// One compiled graph of one segment, with the raw captured graph it was compiled from (the
// cache key is that graph: structure + input metadata + constants).
struct CacheEntry {
  ir::Graph graph;
  // The graph as the backend compiled it for runs that need no gradient. Under an AOT backend
  // a run that needs gradients uses an aot_plans pair instead, so this is compiled at the first
  // run that needs it (compile_plain), not when the entry is made.
  CompiledGraph compiled;
  std::function<CompiledGraph()> compile_plain;
  std::once_flag plain_once;
  const CompiledGraph& plain() {
    std::call_once(plain_once, [this] {
      if (!compile_plain) return;
      compiled = compile_plain();
      compile_plain = nullptr;
    });
    return compiled;
  }
  // For each runtime attribute the compiled graph takes, its index in the captured graph's
  // list (passes may remove random ops that nothing uses).
  std::vector<int32_t> runtime_index;
  // AOT autograd: the graph compiled as forward/backward pairs, one per set of differentiated
  // values, made on first use (capture/segment_autograd.h).
  std::mutex aot_mu;
  std::unique_ptr<AutogradPlans> aot_plans;
  // A dynamic entry (docs/dynamic_shapes.md): `graph`'s sizes as symbols, and its
  // hash_but_sizes. A call whose graph binds to them at other sizes runs an instance: the
  // entry's graph at the call's sizes, compiled by the backend as any graph (no recompile is
  // counted; a shape-generic backend shares its work between instances: inductor's module
  // cache), kept in the segment's exact table under its hash, at most kMaxInstances of them
  // (the oldest is dropped first). `instances` lists them (hash and entry), oldest first.
  std::optional<ir::SymbolicSizes> symbolic;
  uint64_t sizes_hash = 0;
  static constexpr size_t kMaxInstances = 64;
  std::vector<std::pair<uint64_t, const CacheEntry*>> instances;
  // Whether this is an instance of a dynamic entry (observers see the dynamic entry only).
  bool instance = false;
};

// Where a sync point came from: an explicit location, or return addresses symbolised lazily.
struct CallSite {
  ir::SourceLoc loc;
  std::vector<void*> frames;
  ir::SourceLoc resolve() const;
};
// The first frame of the caller outside Kiln and the C++ runtime.
CallSite user_call_site(std::source_location loc, bool loc_known);

}  // namespace kiln::capture

namespace kiln::detail {

class CompiledState {
 public:
  CompiledState(CompileOptions options, std::source_location loc);

  CompileOptions options;
  // options.dynamic came from compile_config().dynamic (KILN_DYNAMIC_SHAPES), not the caller.
  bool dynamic_from_config = false;
  Backend backend;
  std::string name;
  // Unique in the process (names may repeat): how debug dumps tell functions apart.
  uint64_t id = 0;

  std::mutex mu;
  // segments[i]: entries for the i-th graph segment of a call, by graph hash.
  std::vector<std::unordered_map<uint64_t, std::vector<std::shared_ptr<capture::CacheEntry>>>>
      segments;
  // Per segment: its dynamic entries, tried after the exact ones (by hash) miss.
  std::vector<std::vector<std::shared_ptr<capture::CacheEntry>>> dynamic_entries;
  std::vector<int> entry_count;  // per segment, dynamic entries included (once each)
  // Per segment: the entries that ran most recently, most recent first (at most
  // kReplayCandidates). The next call replays the first and may switch to another that shares
  // the prefix matched so far (see Tracer).
  static constexpr size_t kReplayCandidates = 4;
  std::vector<std::vector<std::shared_ptr<capture::CacheEntry>>> recent;
  // Bumped by kiln::reset(): a call that started replaying before it must not use the entry.
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> run_eagerly{false};  // the cache limit was hit
  bool warned_limit = false;
  // Pure mode (capture/pure.cpp): how to run recent graphs without calling the function, most
  // recent first; calls that ran one; whether the "cannot be pure" warning was given.
  std::vector<std::shared_ptr<const PurePlan>> pure_plans;
  uint64_t pure_hits = 0;
  bool warned_pure = false;
};

}  // namespace kiln::detail

namespace kiln::capture {

// Everything known about one compiled graph once its backend returned.
struct CompiledGraphRecord {
  size_t graph_index;      // the graph's position in a call (0: before the first break)
  const ir::Graph& raw;    // as captured: the cache key, and what the guards are read from
  const ir::Graph& graph;  // after the passes: what the backend compiled
  std::vector<diagnostics::BackendOutput> backend_outputs;
  std::map<std::string, double> seconds;        // this graph's compile time per phase
  std::map<std::string, int64_t> counts;        // what the backend counted (note_backend_count)
  const ir::SymbolicSizes* symbolic = nullptr;  // a dynamic graph's symbols (null: exact)
};

// A graph AOT autograd made from a captured one and compiled: its forward, its backward, or a
// backward without some tangents (aot/missing_tangents.h), compiled when first needed.
struct AotGraphRecord {
  size_t graph_index;      // the captured graph's position in a call
  std::string part;        // "forward", "backward", "backward_partial"
  std::string missing;     // backward_partial: the tangents that did not arrive ("0, 2")
  const ir::Graph& graph;  // what the AOT compiler was given
  std::vector<diagnostics::BackendOutput> backend_outputs;
  std::map<std::string, double> seconds;
};

// Observers that see every event (explain, CompileProfiler, debug dumps): registered globally.
// Callbacks run one at a time (under the observer lock) and must not add or remove observers.
struct Observer {
  virtual ~Observer() = default;
  virtual void on_graph(const detail::CompiledState& fn, const ir::Graph& graph) {}
  virtual void on_compiled(const detail::CompiledState& fn, const CompiledGraphRecord& record) {}
  virtual void on_aot_compiled(const detail::CompiledState& fn, const AotGraphRecord& record) {}
  // The backend threw while compiling `graph` (after the passes).
  virtual void on_compile_error(const detail::CompiledState& fn, size_t graph_index,
                                const ir::Graph& graph, const std::string& what) {}
  // A break after graph `graph_index` of a call.
  virtual void on_break(const detail::CompiledState& fn, size_t graph_index, const GraphBreak& br) {
  }
  virtual void on_recompile(const detail::CompiledState& fn, size_t graph_index,
                            const std::string& reason) {}
  // A miss past cache_size_limit: the function runs eagerly from now on.
  virtual void on_cache_limit(const detail::CompiledState& fn, size_t graph_index, int limit,
                              const std::string& reason) {}
};
void add_observer(Observer* o);
void remove_observer(Observer* o);
bool has_observers();
void notify_graph(const detail::CompiledState& fn, const ir::Graph& graph);
void notify_compiled(const detail::CompiledState& fn, const CompiledGraphRecord& record);
void notify_aot_compiled(const detail::CompiledState& fn, const AotGraphRecord& record);
void notify_compile_error(const detail::CompiledState& fn, size_t graph_index,
                          const ir::Graph& graph, const std::string& what);
// One line per guarded input of a graph: what a cache hit requires of it.
std::vector<std::string> guard_lines(const ir::Graph& graph);
void notify_break(const detail::CompiledState& fn, size_t graph_index, const GraphBreak& br);
void notify_recompile(const detail::CompiledState& fn, size_t graph_index,
                      const std::string& reason);
void notify_cache_limit(const detail::CompiledState& fn, size_t graph_index, int limit,
                        const std::string& reason);

// Debug dumps (debug_dump.cpp): reads KILN_DEBUG_DIR once, at the first kiln::compile.
void debug_dump_first_use();

// The per-thread capture stack: a Tracer per active capture, or a null entry for a region
// where capture is off (disable). The top decides what dispatch does.
struct Frame {
  Tracer* tracer;  // null: an eager region
  bool recursive;  // eager region: compiled functions called inside also run eagerly
};
std::vector<Frame>& frames();
Tracer* current_tracer();
// Turns interception and autograd recording off for a scope: what runs inside (a backend
// compiling or running a graph) computes eagerly.
class PauseCapture {
 public:
  PauseCapture() { frames().push_back({nullptr, true}); }
  ~PauseCapture() { frames().pop_back(); }
  PauseCapture(const PauseCapture&) = delete;
  PauseCapture& operator=(const PauseCapture&) = delete;

 private:
  InterceptorScope no_interceptor_{nullptr};
  AutoGradMode no_grad_{false};
};

// How many backends are compiling or running a graph on this thread (is_compiling()).
extern thread_local int tls_in_backend;
struct InBackend {
  InBackend() { ++tls_in_backend; }
  ~InBackend() { --tls_in_backend; }
  InBackend(const InBackend&) = delete;
  InBackend& operator=(const InBackend&) = delete;
};

// Whether the graph compiled on this thread is a dynamic one or an instance of one
// (kiln::compiling_dynamic_graph).
extern thread_local bool tls_compiling_dynamic;
struct CompilingDynamic {
  bool outer = tls_compiling_dynamic;
  explicit CompilingDynamic(bool dynamic) { tls_compiling_dynamic = dynamic; }
  ~CompilingDynamic() { tls_compiling_dynamic = outer; }
  CompilingDynamic(const CompilingDynamic&) = delete;
  CompilingDynamic& operator=(const CompilingDynamic&) = delete;
};

// Whether a plain backend (no AOT compilers) is compiling, on this thread, a graph that takes
// inputs requiring gradients: an AOT backend called inside it warns that its compiled backward
// is lost (Backend::wrapped keeps it).
extern thread_local bool tls_plain_backend_with_grad;

// Cache hits this thread found by replaying a cached graph (no recording, no lookup): read
// by the tests that pin replay down.
extern thread_local uint64_t tls_replay_hits;

// Makes every pending tensor concrete (a sync point), if a capture is active on this thread.
void sync_current(const std::string& reason, std::source_location loc, bool loc_known);

// Asked by the tracer before it records each op on this thread: a reason ("" for none) ends
// the graph before the op (a graph break), as DistributedDataParallel's forward does at each
// gradient bucket's first parameter, so that every bucket's parameters are in a graph of
// their own (src/distributed/data_parallel.cpp).
using BreakBeforeOp = std::function<std::string(const OpDef& op, std::span<const Tensor> inputs)>;
extern thread_local const BreakBeforeOp* tls_break_before_op;
class BreakBeforeOpScope {
 public:
  explicit BreakBeforeOpScope(const BreakBeforeOp* check)
      : previous_(std::exchange(tls_break_before_op, check)) {}
  ~BreakBeforeOpScope() { tls_break_before_op = previous_; }
  BreakBeforeOpScope(const BreakBeforeOpScope&) = delete;
  BreakBeforeOpScope& operator=(const BreakBeforeOpScope&) = delete;

 private:
  const BreakBeforeOp* previous_;
};

}  // namespace kiln::capture
