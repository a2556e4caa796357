// Seeing what kiln::compile did: logs by topic, observers (explain, CompileProfiler), compile
// times, and the user's call site of a graph break.
#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <utility>

#include "backends/backend_lookup.h"
#include "capture/tracer.h"
#include "core/subprocess.h"

namespace kiln {

namespace capture {

// ---- observers ----
namespace {
std::mutex g_obs_mu;
std::vector<Observer*>& observers() {
  static auto* v = new std::vector<Observer*>();
  return *v;
}
std::atomic<int> g_num_observers{0};
template <class F>
void each_observer(F f) {
  std::lock_guard<std::mutex> lock(g_obs_mu);
  for (Observer* o : observers()) f(o);
}
}  // namespace
void add_observer(Observer* o) {
  std::lock_guard<std::mutex> lock(g_obs_mu);
  observers().push_back(o);
  ++g_num_observers;
}
void remove_observer(Observer* o) {
  std::lock_guard<std::mutex> lock(g_obs_mu);
  std::erase(observers(), o);
  --g_num_observers;
}
bool has_observers() { return g_num_observers.load(std::memory_order_relaxed) > 0; }
void notify_graph(const detail::CompiledState& fn, const ir::Graph& g) {
  each_observer([&](Observer* o) { o->on_graph(fn, g); });
}
std::vector<std::string> guard_lines(const ir::Graph& g) {
  std::vector<std::string> lines;
  for (const ir::Node& n : g.nodes) {
    if (n.kind != ir::NodeKind::Placeholder) continue;
    const TensorMeta& t = n.outputs[0];
    lines.push_back(detail::concat("input ", n.input_index, ": dtype ", t.dtype, ", shape ",
                                   IntList(t.sizes), ", strides ", IntList(t.strides),
                                   ", requires_grad ", t.requires_grad ? "true" : "false"));
  }
  return lines;
}
void notify_break(const detail::CompiledState& fn, size_t graph_index, const GraphBreak& br) {
  each_observer([&](Observer* o) { o->on_break(fn, graph_index, br); });
}
void notify_recompile(const detail::CompiledState& fn, size_t graph_index,
                      const std::string& reason) {
  each_observer([&](Observer* o) { o->on_recompile(fn, graph_index, reason); });
}
void notify_cache_limit(const detail::CompiledState& fn, size_t graph_index, int limit,
                        const std::string& reason) {
  each_observer([&](Observer* o) { o->on_cache_limit(fn, graph_index, limit, reason); });
}
void notify_compiled(const detail::CompiledState& fn, const CompiledGraphRecord& record) {
  each_observer([&](Observer* o) { o->on_compiled(fn, record); });
}
void notify_aot_compiled(const detail::CompiledState& fn, const AotGraphRecord& record) {
  each_observer([&](Observer* o) { o->on_aot_compiled(fn, record); });
}
void notify_compile_error(const detail::CompiledState& fn, size_t graph_index,
                          const ir::Graph& graph, const std::string& what) {
  each_observer([&](Observer* o) { o->on_compile_error(fn, graph_index, graph, what); });
}

// ---- call sites ----
namespace {
std::atomic<UserLocationFn> g_user_location{nullptr};
}  // namespace

namespace {
bool is_runtime_object(const char* path) {
  if (!path) return true;
  std::string_view p(path);
  for (std::string_view skip :
       {"libkiln.so", "libstdc++", "libc.so", "libgcc", "libgomp", "ld-linux", "libc-"})
    if (p.find(skip) != std::string_view::npos) return true;
  return false;
}
// addr2line reads one binary's line tables: seconds at most, even for a large program.
constexpr double kAddr2lineSeconds = 20;
// file:line and function of a return address, through addr2line (when installed); the
// function name alone from the dynamic symbol table otherwise.
ir::SourceLoc symbolize_uncached(void* pc) {
  ir::SourceLoc loc;
  Dl_info info{};
  if (!dladdr(pc, &info) || !info.dli_fname) return loc;
  // A return address points after the call: look up the call instruction itself.
  const auto addr = reinterpret_cast<uintptr_t>(pc) - 1;
  const auto base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (info.dli_sname) loc.function = info.dli_sname;
  // An argument vector, never a shell command: the program's path may hold any character.
  const detail::ProcessResult found = detail::run_process(
      {"addr2line", "-C", "-f", "-e", info.dli_fname, detail::concat("0x", std::hex, addr - base)},
      kAddr2lineSeconds);
  if (!found.succeeded()) return loc;
  std::istringstream lines(found.output);
  std::string f, w;
  if (std::getline(lines, f) && std::getline(lines, w)) {
    while (!f.empty() && f.back() == '\r') f.pop_back();
    while (!w.empty() && w.back() == '\r') w.pop_back();
    for (size_t a; (a = f.find("(anonymous namespace)::")) != std::string::npos;) f.erase(a, 23);
    if (auto paren = f.find('('); paren != std::string::npos) f = f.substr(0, paren);
    if (f != "??") loc.function = f;
    if (auto disc = w.find(" (discriminator"); disc != std::string::npos) w = w.substr(0, disc);
    if (auto colon = w.rfind(':'); colon != std::string::npos && w.substr(0, 2) != "??") {
      loc.file = w.substr(0, colon);
      loc.line = std::atoi(w.c_str() + colon + 1);
    }
  }
  return loc;
}
// A break in a loop reaches the same return address on every call: run addr2line once per
// address (a process start each time would dominate a logged or dumped run). The key includes
// the object's path, so a library loaded later at the same address is not mistaken for it.
ir::SourceLoc symbolize(void* pc) {
  static std::mutex mu;
  static auto* known = new std::map<std::pair<void*, std::string>, ir::SourceLoc>();
  Dl_info info{};
  if (!dladdr(pc, &info) || !info.dli_fname) return {};
  std::pair<void*, std::string> key{pc, info.dli_fname};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known->find(key); it != known->end()) return it->second;
  }
  ir::SourceLoc loc = symbolize_uncached(pc);
  std::lock_guard<std::mutex> lock(mu);
  known->emplace(std::move(key), loc);
  return loc;
}
}  // namespace

CallSite user_call_site(std::source_location loc, bool loc_known) {
  CallSite site;
  // A front end in another language knows the user's line better than any C++ location,
  // which is then one of its bindings'.
  if (const UserLocationFn provider = g_user_location.load(std::memory_order_acquire)) {
    site.loc = provider();
    if (site.loc.known()) return site;
  }
  if (loc_known) {
    site.loc = {loc.file_name(), static_cast<int>(loc.line()), loc.function_name()};
    return site;
  }
  void* buf[32];
  const int n = backtrace(buf, 32);
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (dladdr(buf[i], &info) && !is_runtime_object(info.dli_fname)) {
      site.frames.push_back(buf[i]);
      break;
    }
  }
  return site;
}

ir::SourceLoc CallSite::resolve() const {
  if (loc.known() || frames.empty()) return loc;
  return symbolize(frames.front());
}

}  // namespace capture

void set_user_location_provider(UserLocationFn provider) {
  capture::g_user_location.store(provider, std::memory_order_release);
}

// ---- explain ----
namespace {
struct ExplainObserver final : capture::Observer {
  ExplainOutput* out;
  const detail::CompiledState* only = nullptr;
  void on_graph(const detail::CompiledState& fn, const ir::Graph& g) override {
    if (&fn != only) return;
    out->graphs.push_back(g);
    out->ops_per_graph.push_back(g.num_calls());
    const backends::InductorCounts lowered = backends::inductor_counts(g);
    out->kernels_per_graph.push_back(lowered.kernels);
    out->extern_calls_per_graph.push_back(lowered.extern_calls);
    out->op_count += g.num_calls();
    out->guards.push_back(capture::guard_lines(g));
  }
  void on_break(const detail::CompiledState& fn, size_t, const GraphBreak& br) override {
    if (&fn == only) out->break_reasons.push_back(br);
  }
};
}  // namespace

struct detail::ExplainSession::Impl {
  ExplainObserver obs;
  double before = 0;
};

detail::ExplainSession::ExplainSession(ExplainOutput& out) : impl_(std::make_unique<Impl>()) {
  impl_->obs.out = &out;
  impl_->before = compile_times()["total"];
}
void detail::ExplainSession::watch(const std::shared_ptr<CompiledState>& state) {
  impl_->obs.only = state.get();
  capture::add_observer(&impl_->obs);
}
detail::ExplainSession::~ExplainSession() {
  if (impl_->obs.only) capture::remove_observer(&impl_->obs);
}
void detail::ExplainSession::finish() {
  capture::remove_observer(&impl_->obs);
  impl_->obs.only = nullptr;
  ExplainOutput& out = *impl_->obs.out;
  out.compile_seconds = compile_times()["total"] - impl_->before;
  out.graph_count = static_cast<int64_t>(out.graphs.size());
  out.graph_break_count = static_cast<int64_t>(out.break_reasons.size());
}

std::string ExplainOutput::str() const {
  std::ostringstream os;
  os << "Kiln produced " << graph_count << (graph_count == 1 ? " graph" : " graphs") << ", with "
     << graph_break_count << (graph_break_count == 1 ? " graph break" : " graph breaks") << " and "
     << op_count << (op_count == 1 ? " op" : " ops") << ".\n";
  if (!break_reasons.empty()) {
    os << "Break reasons:\n";
    for (size_t i = 0; i < break_reasons.size(); ++i) {
      const GraphBreak& b = break_reasons[i];
      os << "  " << i + 1 << ". " << b.reason << "\n";
      if (b.loc.known()) os << "     " << b.loc.str() << "\n";
    }
  }
  os << "Ops per graph:";
  for (size_t i = 0; i < ops_per_graph.size(); ++i) os << (i ? ", " : " ") << ops_per_graph[i];
  os << "\n";
  if (!kernels_per_graph.empty()) {
    os << "Inductor per graph (generated kernels + extern calls):";
    for (size_t i = 0; i < kernels_per_graph.size(); ++i)
      os << (i ? ", " : " ") << kernels_per_graph[i] << " + " << extern_calls_per_graph[i];
    os << "\n";
  }
  for (size_t i = 0; i < graphs.size(); ++i) {
    os << "Graph " << i << ":\n" << graphs[i];
    if (i < guards.size() && !guards[i].empty()) {
      os << "  guards:\n";
      for (const std::string& g : guards[i]) os << "    " << g << "\n";
    }
  }
  os << "Compile time: " << std::fixed << std::setprecision(4) << compile_seconds << " s\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const ExplainOutput& e) { return os << e.str(); }

// ---- CompileProfiler ----
struct CompileProfiler::Impl final : capture::Observer {
  bool recording = true;  // registered as an observer
  mutable std::mutex mu;
  std::map<std::string, FunctionStats> stats;
  void on_graph(const detail::CompiledState& fn, const ir::Graph& g) override {
    std::lock_guard<std::mutex> lock(mu);
    auto& s = stats[fn.name];
    ++s.graphs;
    s.ops_per_graph.push_back(g.num_calls());
  }
  void on_break(const detail::CompiledState& fn, size_t, const GraphBreak&) override {
    std::lock_guard<std::mutex> lock(mu);
    ++stats[fn.name].graph_breaks;
  }
  void on_recompile(const detail::CompiledState& fn, size_t, const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu);
    stats[fn.name].recompile_reasons.push_back(reason);
  }
  void on_compiled(const detail::CompiledState& fn,
                   const capture::CompiledGraphRecord& r) override {
    // (Counted by the inductor backend as it compiled the graph: what runs.)
    const auto kernels = r.counts.find("inductor_kernels");
    const auto externs = r.counts.find("inductor_extern_calls");
    if (kernels == r.counts.end() || externs == r.counts.end()) return;
    std::lock_guard<std::mutex> lock(mu);
    auto& s = stats[fn.name];
    s.kernels_per_graph.push_back(kernels->second);
    s.extern_calls_per_graph.push_back(externs->second);
  }
};

CompileProfiler::CompileProfiler() : impl_(std::make_shared<Impl>()) {
  capture::add_observer(impl_.get());
}
CompileProfiler::~CompileProfiler() { stop(); }
void CompileProfiler::stop() {
  if (std::exchange(impl_->recording, false)) capture::remove_observer(impl_.get());
}

std::map<std::string, CompileProfiler::FunctionStats> CompileProfiler::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

Backend CompileProfiler::backend() const { return lookup_backend("eager"); }

std::string CompileProfiler::report() const {
  std::ostringstream os;
  auto all = stats();
  os << "Compile profiler report: " << all.size() << " compiled function"
     << (all.size() == 1 ? "" : "s") << "\n";
  for (const auto& [name, s] : all) {
    os << "- " << name << ": " << s.graphs << " graph" << (s.graphs == 1 ? "" : "s") << ", "
       << s.graph_breaks << " graph break" << (s.graph_breaks == 1 ? "" : "s") << ", "
       << s.recompile_reasons.size() << " recompile" << (s.recompile_reasons.size() == 1 ? "" : "s")
       << "; ops per graph:";
    for (int64_t n : s.ops_per_graph) os << " " << n;
    if (!s.kernels_per_graph.empty()) {
      os << "; inductor kernels + extern calls per graph:";
      for (size_t i = 0; i < s.kernels_per_graph.size(); ++i)
        os << " " << s.kernels_per_graph[i] << "+" << s.extern_calls_per_graph[i];
    }
    os << "\n";
    for (size_t i = 0; i < s.recompile_reasons.size(); ++i)
      os << "    recompile " << i + 1 << ": " << s.recompile_reasons[i] << "\n";
  }
  return os.str();
}

}  // namespace kiln
