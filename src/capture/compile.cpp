// kiln::compile's call path (CallScope), the per-thread capture stack, the fine-grained
// controls (disable, graph_break, disallow_in_graph, is_compiling), stances and configuration.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "backends/backend_lookup.h"
#include "capture/tracer.h"
#include "kiln/capture/repro.h"

namespace kiln {

namespace capture {

thread_local int tls_in_backend = 0;
thread_local bool tls_compiling_dynamic = false;
thread_local bool tls_plain_backend_with_grad = false;
thread_local uint64_t tls_replay_hits = 0;
thread_local const BreakBeforeOp* tls_break_before_op = nullptr;

std::vector<Frame>& frames() {
  thread_local std::vector<Frame> stack;
  return stack;
}

Tracer* current_tracer() {
  auto& f = frames();
  return f.empty() ? nullptr : f.back().tracer;
}

void sync_current(const std::string& reason, std::source_location loc, bool loc_known) {
  if (Tracer* t = current_tracer()) t->flush(reason, user_call_site(loc, loc_known), false);
}

namespace {
// Installs the interceptor that the top of the capture stack asks for.
void apply_top() { set_interceptor(current_tracer()); }
}  // namespace

}  // namespace capture

// ---- configuration and stances ----
namespace {
CompileConfig config_from_environment() {
  CompileConfig config;
  if (const char* env = std::getenv("KILN_COMPILE_TIMEOUT"); env && *env) {
    char* end = nullptr;
    const double seconds = std::strtod(env, &end);
    KILN_CHECK(*end == '\0' && seconds >= 0 && std::isfinite(seconds), ValueError,
               "KILN_COMPILE_TIMEOUT = '", env, "' is invalid: expected seconds, a number >= 0 ",
               "(0: no limit)");
    config.compile_timeout = seconds;
  }
  if (const char* env = std::getenv("KILN_CACHE_STRICT"); env && *env) {
    const std::string v = env;
    KILN_CHECK(v == "0" || v == "1", ValueError, "KILN_CACHE_STRICT = '", v,
               "' is invalid: expected 0 or 1");
    config.strict_cache = v == "1";
  }
  if (const char* env = std::getenv("KILN_DYNAMIC_SHAPES"); env && *env) {
    const std::string v = env;
    KILN_CHECK(v == "0" || v == "1", ValueError, "KILN_DYNAMIC_SHAPES = '", v,
               "' is invalid: expected 0 (static sizes) or 1 (dynamic from the first call)");
    config.dynamic = v == "1";
  }
  return config;
}
}  // namespace

CompileConfig& compile_config() {
  static CompileConfig config = config_from_environment();
  return config;
}

namespace {
std::atomic<Stance> g_stance{Stance::Default};
std::mutex g_states_mu;
std::vector<std::weak_ptr<detail::CompiledState>>& all_states() {
  static auto* v = new std::vector<std::weak_ptr<detail::CompiledState>>();
  return *v;
}
std::atomic<int> g_unnamed{0};
}  // namespace

void set_stance(Stance s) { g_stance = s; }
Stance stance() { return g_stance; }

void reset() {
  std::lock_guard<std::mutex> lock(g_states_mu);
  for (auto& w : all_states())
    if (auto st = w.lock()) {
      std::lock_guard<std::mutex> l(st->mu);
      st->segments.clear();
      st->dynamic_entries.clear();
      st->entry_count.clear();
      st->recent.clear();
      ++st->generation;
      st->run_eagerly = false;
      st->warned_limit = false;
      st->pure_plans.clear();
    }
  diagnostics::reset_compile_times();
}

namespace detail {

CompiledState::CompiledState(CompileOptions opts, std::source_location loc)
    : options(std::move(opts)) {
  if (!options.dynamic && !options.pure && compile_config().dynamic) {
    options.dynamic = compile_config().dynamic;
    dynamic_from_config = true;
  }
  KILN_CHECK(
      !options.cache_size_limit || *options.cache_size_limit >= 0, ValueError,
      "kiln::compile: CompileOptions::cache_size_limit = ", options.cache_size_limit.value_or(0),
      " is invalid: expected an integer >= 0 (0 keeps only the first graph)");
  KILN_CHECK(compile_config().cache_size_limit >= 0, ValueError,
             "kiln::compile: compile_config().cache_size_limit = ",
             compile_config().cache_size_limit, " is invalid: expected an integer >= 0");
  KILN_CHECK(options.pure_verify_every >= 0, ValueError,
             "kiln::compile: CompileOptions::pure_verify_every = ", options.pure_verify_every,
             " is invalid: expected an integer >= 0 (0: never verify)");
  for (char c : options.name)
    KILN_CHECK(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, ValueError,
               "kiln::compile: CompileOptions::name contains control character 0x", std::hex,
               static_cast<int>(static_cast<unsigned char>(c)), std::dec,
               ": expected printable text (it names the function in logs and reports)");
  // The default is the optimizing backend (itself the eager one, with a warning, where no C++
  // compiler is installed).
  const std::string default_backend = "inductor";
  if (const auto* name = std::get_if<std::string>(&options.backend)) {
    backend =
        backends::lookup_backend_in_mode(name->empty() ? default_backend : *name, options.mode);
  } else {
    KILN_CHECK(options.mode.empty() || options.mode == "default", ValueError,
               "kiln::compile: mode '", options.mode,
               "' needs a backend given by name (\"inductor\"), not a callable");
    backend = std::get<Backend>(options.backend);
  }
  KILN_CHECK(backend, Error, "kiln::compile: the backend callable is empty");
  KILN_CHECK(!options.dynamic.value_or(false) || !options.pure, ValueError,
             "kiln::compile: dynamic=true and pure=true: pure mode's graphs are exact (each plan "
             "runs at the sizes it learnt)");
  // KILN_REPRO_AFTER: failures of this backend are written as standalone repros.
  if (const auto* name = std::get_if<std::string>(&options.backend))
    backend =
        repro::wrap_backend_for_repro(std::move(backend), name->empty() ? default_backend : *name);
  else
    backend = repro::wrap_backend_for_repro(std::move(backend), "");
  name = options.name;
  if (name.empty()) {
    std::string file = loc.file_name();
    if (auto slash = file.find_last_of('/'); slash != std::string::npos)
      file = file.substr(slash + 1);
    name = detail::concat("compiled@", file, ":", loc.line());
    if (file.empty()) name = detail::concat("compiled#", ++g_unnamed);
  }
}

std::shared_ptr<CompiledState> make_compiled_state(CompileOptions options,
                                                   std::source_location loc) {
  capture::debug_dump_first_use();
  static std::atomic<uint64_t> next_id{0};
  auto st = std::make_shared<CompiledState>(std::move(options), loc);
  st->id = ++next_id;
  std::lock_guard<std::mutex> lock(g_states_mu);
  auto& v = all_states();
  std::erase_if(v, [](const auto& w) { return w.expired(); });
  v.push_back(st);
  return st;
}

CallScope::CallScope(const std::shared_ptr<CompiledState>& state, bool frozen,
                     const ArgumentTensors& args)
    : state_(state) {
  auto& f = capture::frames();
  if (!f.empty()) {
    // Inside a capture: inline into it. Inside a recursive disable: run eagerly. Inside a
    // non-recursive disable: this function compiles on its own.
    if (f.back().tracer || f.back().recursive) return;
  }
  if (stance() == Stance::ForceEager || state->run_eagerly) return;
  f.push_back({new capture::Tracer(state, frozen, args), false});
  capture::apply_top();
  started_ = true;
}

void CallScope::finish() {
  if (!started_ || finished_) return;
  finished_ = true;
  auto& f = capture::frames();
  capture::Tracer* t = f.back().tracer;
  try {
    t->flush("return", {}, true);
  } catch (...) {
    f.pop_back();
    delete t;
    capture::apply_top();
    throw;
  }
  pure_ = t->pure_observation();
  f.pop_back();
  delete t;
  capture::apply_top();
}

CallScope::~CallScope() {
  if (!started_ || finished_) return;
  // fn threw. As in eager mode, what it did before the throw takes effect: run the segment
  // recorded so far (in-place writes land, escaped tensors get their values). If that fails
  // too, the pending tensors it left behind cannot be computed.
  auto& f = capture::frames();
  capture::Tracer* t = f.back().tracer;
  try {
    t->flush("the function threw an exception", {}, true);
  } catch (...) {
    t->abandon("the function threw an exception");
  }
  f.pop_back();
  delete t;
  capture::apply_top();
}

DisableScope::DisableScope(const char* what, bool recursive, std::source_location loc) {
  // The location is the user's: where the function was wrapped, or where the guard stands.
  if (capture::current_tracer())
    capture::sync_current(detail::concat("call to ", what, " (kiln::disable)"), loc, true);
  capture::frames().push_back({nullptr, recursive});
  capture::apply_top();
}

DisableScope::~DisableScope() {
  capture::frames().pop_back();
  capture::apply_top();
}

}  // namespace detail

// ---- controls ----
void graph_break(std::source_location loc) {
  capture::sync_current("graph_break() was called", loc, true);
}

// An allowed function's metadata-only run is tracing below the frontend (as AOT autograd traces
// through torch.compiler.allow_in_graph functions): compiling, but not the frontend's capture.
bool is_dynamo_compiling() {
  const capture::Tracer* t = capture::current_tracer();
  return t && !t->metadata_only();
}
bool is_compiling() { return capture::current_tracer() != nullptr || capture::tls_in_backend > 0; }
bool compiling_dynamic_graph() { return capture::tls_compiling_dynamic; }

namespace {
std::shared_mutex g_disallowed_mu;
std::set<const OpDef*>& disallowed() {
  static auto* s = new std::set<const OpDef*>();
  return *s;
}
std::atomic<bool> g_any_disallowed{false};
const OpDef& op_named(const std::string& name, const char* api) {
  const OpDef* op = find_op(name);
  KILN_CHECK(op, Error, api, ": there is no op named '", name, "'");
  return *op;
}
}  // namespace

void disallow_in_graph(const std::string& op_name) {
  const OpDef& op = op_named(op_name, "disallow_in_graph");
  std::unique_lock lock(g_disallowed_mu);
  disallowed().insert(&op);
  g_any_disallowed = true;
}

void allow_in_graph(const std::string& op_name) {
  const OpDef& op = op_named(op_name, "allow_in_graph");
  std::unique_lock lock(g_disallowed_mu);
  disallowed().erase(&op);
  g_any_disallowed = !disallowed().empty();
}

bool is_disallowed_in_graph(const OpDef& op) {
  if (!g_any_disallowed.load(std::memory_order_relaxed)) return false;
  std::shared_lock lock(g_disallowed_mu);
  return disallowed().count(&op) > 0;
}

}  // namespace kiln
