// The sync point: a captured segment is collected (its outputs are the live pending tensors
// and the written storages), looked up in the compiled function's cache (compiled on a miss,
// as the stance and the cache limit allow), run, and its pending tensors made concrete. Each
// step is a named function; Tracer::flush lists them in order.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include "capture/dynamic_shapes.h"
#include "capture/tracer.h"
#include "core/clock.h"
#include "core/tensor_names.h"
#include "ir/attr_utils.h"
#include "ir/compare.h"
#include "kiln/ir/passes.h"
#include "ops/op_utils.h"

namespace kiln::capture {

namespace {

// The cached entry nearest to `g` (fewest differing nodes) at position `segment`, for a
// recompile reason.
const CacheEntry* nearest_entry(const detail::CompiledState& st, size_t segment,
                                const ir::Graph& g) {
  const CacheEntry* best = nullptr;
  int64_t best_score = INT64_MAX;
  auto consider = [&](const CacheEntry& e) {
    int64_t score = std::llabs(static_cast<int64_t>(e.graph.nodes.size()) -
                               static_cast<int64_t>(g.nodes.size())) *
                    1000;
    const size_t n = std::min(e.graph.nodes.size(), g.nodes.size());
    for (size_t i = 0; i < n; ++i) score += !ir::same_node_at(e.graph, g, i);
    if (score < best_score) best_score = score, best = &e;
  };
  for (const auto& [hash, list] : st.segments[segment])
    for (const auto& e : list) consider(*e);
  if (segment < st.dynamic_entries.size())
    for (const auto& e : st.dynamic_entries[segment]) consider(*e);
  return best;
}

// `g` compiled by `backend`, timed as "backend_compile".
CompiledGraph compile_with_backend(const Backend& backend, const ir::Graph& g,
                                   std::span<const TensorMeta> infos, const std::string& name) {
  diagnostics::CompilePhase phase("backend_compile");
  CompiledGraph compiled;
  {
    InBackend in_backend;
    // What the backend may ask while it compiles: the function's name (for its reports), and
    // whether a plain backend is compiling a graph gradients flow through (an AOT backend it
    // calls would lose its compiled backward: Backend::operator() warns).
    // (An input that requires grad: the graph's ops may be differentiated. Under no_grad that
    // over-warns; the capture does not know the grad mode of the call at this point.)
    const bool needs_grad = std::any_of(infos.begin(), infos.end(),
                                        [](const TensorMeta& m) { return m.requires_grad; });
    struct Compiling {
      const std::string* outer_name = diagnostics::tls_compiling_function;
      bool outer_plain = tls_plain_backend_with_grad;
      Compiling(const std::string* n, bool plain_with_grad) {
        diagnostics::tls_compiling_function = n;
        tls_plain_backend_with_grad = plain_with_grad;
      }
      ~Compiling() {
        diagnostics::tls_compiling_function = outer_name;
        tls_plain_backend_with_grad = outer_plain;
      }
    } compiling(&name, needs_grad && !backend.aot());
    compiled = backend(g, infos);
  }
  KILN_CHECK(compiled, Error, "kiln::compile: the backend of '", name,
             "' returned an empty callable");
  return compiled;
}

// Compiles `raw` with the function's backend: passes, then the backend, timed per phase.
// Observers (a debug dump) also get what the backend produced and this graph's times.
// `plain_now`: the graph is about to run without gradients (an AOT backend then compiles it
// now, so that observers see what the backend made of it).
// An instance of a dynamic entry (`instance`) is compiled the same way, quietly: its guards
// and its graph are the dynamic entry's, which observers saw.
std::shared_ptr<CacheEntry> compile_entry(detail::CompiledState& state, size_t segment,
                                          const ir::Graph& raw, std::span<const Tensor> inputs,
                                          bool plain_now, std::optional<ir::SymbolicSizes> symbolic,
                                          bool instance = false) {
  std::optional<diagnostics::GraphCompileCollector> collector;
  if (has_observers() && !instance) collector.emplace();
  diagnostics::CollectingInto collecting(collector ? &*collector : nullptr);
  auto entry = std::make_shared<CacheEntry>();
  entry->instance = instance;
  entry->graph = raw;
  entry->symbolic = std::move(symbolic);
  if (entry->symbolic) entry->sizes_hash = ir::hash_but_sizes(raw);
  diagnostics::CompilePhase passes("passes");
  // Passes may drop random ops: tag each runtime attribute with its index to map them after.
  ir::Graph g = raw;
  for (size_t k = 0; k < g.runtime_attrs.size(); ++k) {
    const ir::RuntimeAttr& r = g.runtime_attrs[k];
    ir::Node& n = g.nodes[r.node];
    n.attrs = ir::with_attr(n.attrs, static_cast<size_t>(r.attr), static_cast<int64_t>(k));
  }
  ir::eliminate_common_subexpressions(g);
  ir::eliminate_dead_code(g);
  const std::vector<int64_t> raw_values = raw.runtime_attr_values();
  for (const ir::RuntimeAttr& r : g.runtime_attrs) {
    ir::Node& n = g.nodes[r.node];
    const int64_t k = n.attrs.i(static_cast<size_t>(r.attr));
    entry->runtime_index.push_back(static_cast<int32_t>(k));
    n.attrs =
        ir::with_attr(n.attrs, static_cast<size_t>(r.attr), raw_values[static_cast<size_t>(k)]);
  }
  passes.finish();
  std::vector<TensorMeta> infos;
  for (const Tensor& t : inputs) infos.push_back(TensorMeta::of(t));
  const bool dynamic = entry->symbolic || instance;
  CompilingDynamic compiling_dynamic(dynamic);
  if (state.backend.aot() && !plain_now) {
    // Compiled at its first run without gradients (CacheEntry::plain): runs that need them
    // compile forward/backward pairs instead, and compiling the graph a third way for nothing
    // would double the compile time of a training step.
    entry->compile_plain = [backend = state.backend, g, infos, name = state.name, dynamic] {
      CompilingDynamic compiling_dynamic(dynamic);
      return compile_with_backend(backend, g, infos, name);
    };
  } else {
    try {
      entry->compiled = compile_with_backend(state.backend, g, infos, state.name);
    } catch (const std::exception& e) {
      if (collector) notify_compile_error(state, segment, g, e.what());
      throw;
    }
  }
  if (instance) return entry;
  if (log_enabled(LogTopic::Graphs))
    diagnostics::log(LogTopic::Graphs,
                     detail::concat(state.name, ": graph with ", g.num_calls(), " ops\n", g));
  if (log_enabled(LogTopic::Guards)) {
    for (const std::string& line : guard_lines(raw))
      diagnostics::log(LogTopic::Guards, detail::concat(state.name, ": guard ", line));
    if (entry->symbolic)
      for (const std::string& line : ir::symbolic_guard_lines(raw, *entry->symbolic))
        diagnostics::log(LogTopic::Guards, detail::concat(state.name, ": guard ", line));
  }
  notify_graph(state, g);
  if (collector) {
    diagnostics::tls_compile_collector = nullptr;  // the dump's own work is not the backend's
    notify_compiled(state,
                    CompiledGraphRecord{segment, raw, g, std::move(collector->outputs),
                                        std::move(collector->seconds), std::move(collector->counts),
                                        entry->symbolic ? &*entry->symbolic : nullptr});
  }
  return entry;
}

// ---- the compiled function's cache, per segment position ----

// Makes room for segment `segment` in the per-segment tables (kiln::reset() may have cleared
// them meanwhile). Called with st.mu held.
void ensure_segment(detail::CompiledState& st, size_t segment) {
  if (st.segments.size() <= segment) {
    st.segments.resize(segment + 1);
    st.dynamic_entries.resize(segment + 1);
    st.entry_count.resize(segment + 1, 0);
  }
}

// The cached entry for `graph` at position `segment`, or null. Called with st.mu held.
std::shared_ptr<CacheEntry> find_entry(detail::CompiledState& st, size_t segment,
                                       const ir::Graph& graph, uint64_t key) {
  ensure_segment(st, segment);
  auto& entries = st.segments[segment];
  if (auto it = entries.find(key); it != entries.end())
    for (const auto& e : it->second)
      if (ir::structurally_equal(e->graph, graph)) return e;
  return nullptr;
}

// A miss: whether to compile `graph` (true) or run it eagerly (false), as the stance, the
// frozen flag and cache_size_limit say; reports the recompile reason (log, observers, the
// limit warning) or throws RecompileError under fail_on_recompile. On true, `symbolic` gets
// the sizes the graph is compiled with as symbols (none: exact). Called with st.mu held.
bool should_compile(detail::CompiledState& st, size_t segment, const ir::Graph& graph, bool frozen,
                    std::span<const Tensor> inputs,
                    const std::function<std::string(int32_t)>& input_label,
                    const std::function<ir::SourceLoc(int32_t)>& call_site,
                    std::optional<ir::SymbolicSizes>& symbolic) {
  const int count = st.entry_count[segment];
  std::string dynamic_note;
  auto plan = [&] {
    symbolic = plan_dynamic(st, segment, graph, inputs, input_label, dynamic_note);
    if (symbolic && log_enabled(LogTopic::Dynamic))
      diagnostics::log(LogTopic::Dynamic,
                       detail::concat("'", st.name, "' graph ", segment, ": ", dynamic_note));
  };
  if (count == 0) {
    if (!frozen) plan();
    return !frozen;
  }
  // The reason: the guard of a dynamic entry of this structure that failed, else the first
  // difference from the nearest entry.
  std::string reason;
  const uint64_t sizes_hash = st.dynamic_entries[segment].empty() ? 0 : ir::hash_but_sizes(graph);
  for (const auto& e : st.dynamic_entries[segment])
    if (reason.empty() && e->sizes_hash == sizes_hash)
      ir::bind_sizes(e->graph, *e->symbolic, graph, &reason, input_label);
  const CacheEntry* near = reason.empty() ? nearest_entry(st, segment, graph) : nullptr;
  if (near) reason = ir::describe_difference(near->graph, graph, input_label);
  if (reason.empty()) reason = "the graph differs";
  // A branch or loop on a size: the ops differ from the nearest graph's where input sizes
  // changed. Each outcome compiles a graph of its own (a specialisation, which the reason says);
  // a dim marked with mark_dynamic must not be specialised.
  int32_t at = -1;
  if (near && ir::input_sizes_differ(near->graph, graph))
    if (const std::string diff = ir::structural_difference(near->graph, graph, &at);
        !diff.empty()) {
      // The user's line where this call's ops part from the cached graph's: the branch or loop
      // on a size is just before it.
      const ir::SourceLoc where = call_site(at);
      const std::string line = where.known() ? ", at " + where.str() : std::string();
      const std::string dim = changed_marked_dim(near->graph, graph, inputs, input_label);
      KILN_CHECK(dim.empty(), Error, "kiln::mark_dynamic: ", dim, " is marked dynamic, but '",
                 st.name, "' specialises it: its ops differ where the size changed (", diff, line,
                 "), as code that branches or loops on the size makes them; use "
                 "maybe_mark_dynamic to let each outcome compile a graph of its own");
      const std::string note = detail::concat(
          "the ops differ where the sizes changed (", diff, line,
          "): code that branches or loops on a size specialises it, each outcome a graph");
      reason += "; " + note;
      if (log_enabled(LogTopic::Dynamic))
        diagnostics::log(LogTopic::Dynamic,
                         detail::concat("'", st.name, "' graph ", segment, ": ", note));
    }
  const Stance now = stance();
  if (now == Stance::FailOnRecompile)
    throw RecompileError(detail::concat("kiln::compile: '", st.name, "' would recompile graph ",
                                        segment, " but the stance is fail_on_recompile: ", reason));
  if (now == Stance::EagerOnRecompile || frozen) return false;
  const int limit = st.options.cache_size_limit.value_or(compile_config().cache_size_limit);
  if (count >= limit) {
    st.run_eagerly = true;
    if (!st.warned_limit) {
      st.warned_limit = true;
      std::cerr << "[kiln] warning: '" << st.name << "' hit cache_size_limit (" << limit
                << ") recompiling graph " << segment
                << "; it runs eagerly from now on. Last reason: " << reason << "\n";
      notify_cache_limit(st, segment, limit, reason);
    }
    return false;
  }
  plan();
  if (symbolic) reason += "; " + dynamic_note;
  if (log_enabled(LogTopic::Recompiles))
    diagnostics::log(LogTopic::Recompiles,
                     detail::concat("recompiling '", st.name, "' graph ", segment, ": ", reason));
  notify_recompile(st, segment, reason);
  return true;
}

// Compiles `graph` (outside the lock: it may be slow) and adds it to the cache.
std::shared_ptr<CacheEntry> compile_and_add(detail::CompiledState& st, size_t segment,
                                            const ir::Graph& graph, uint64_t key,
                                            std::span<const Tensor> inputs, bool plain_now,
                                            std::optional<ir::SymbolicSizes> symbolic) {
  std::shared_ptr<CacheEntry> entry =
      compile_entry(st, segment, graph, inputs, plain_now, std::move(symbolic));
  std::lock_guard<std::mutex> lock(st.mu);
  ensure_segment(st, segment);
  if (entry->symbolic)
    st.dynamic_entries[segment].push_back(entry);
  else
    st.segments[segment][key].push_back(entry);
  ++st.entry_count[segment];
  return entry;
}

// Runs `graph`, which binds to dynamic entry `dyn` at sizes of its own, on an instance made for
// it (CacheEntry::symbolic): no recompile is counted, and the instance joins the exact table.
std::shared_ptr<CacheEntry> instantiate(detail::CompiledState& st, size_t segment,
                                        const std::shared_ptr<CacheEntry>& dyn,
                                        const ir::Graph& graph, std::span<const Tensor> inputs,
                                        bool plain_now) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CacheEntry> instance =
      compile_entry(st, segment, graph, inputs, plain_now, std::nullopt, /*instance=*/true);
  if (log_enabled(LogTopic::Dynamic)) {
    const std::optional<std::vector<int64_t>> values =
        ir::bind_sizes(dyn->graph, *dyn->symbolic, graph, nullptr);
    std::string sizes;
    for (size_t s = 0; values && s < values->size(); ++s)
      sizes += detail::concat(s ? ", " : "", "s", s, " = ", (*values)[s]);
    diagnostics::log(LogTopic::Dynamic,
                     detail::concat("'", st.name, "' graph ", segment, ": sizes ", sizes,
                                    " run on an instance of the dynamic graph (made in ",
                                    detail::seconds_since(t0) * 1e3, " ms)"));
  }
  const uint64_t key = graph.hash();
  std::lock_guard<std::mutex> lock(st.mu);
  ensure_segment(st, segment);
  // (kiln::reset() may have dropped the dynamic entry meanwhile: the instance then runs once.)
  if (std::ranges::find(st.dynamic_entries[segment], dyn) == st.dynamic_entries[segment].end())
    return instance;
  st.segments[segment][key].push_back(instance);
  dyn->instances.emplace_back(key, instance.get());
  if (dyn->instances.size() > CacheEntry::kMaxInstances) {
    const auto [old_key, old] = dyn->instances.front();
    dyn->instances.erase(dyn->instances.begin());
    auto& list = st.segments[segment][old_key];
    std::erase_if(list, [old = old](const auto& e) { return e.get() == old; });
    if (list.empty()) st.segments[segment].erase(old_key);
  }
  return instance;
}

// Puts `entry` first among the entries the next call at this position replays.
void remember_recent(detail::CompiledState& st, size_t segment,
                     const std::shared_ptr<CacheEntry>& entry) {
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.recent.size() <= segment) st.recent.resize(segment + 1);
  auto& recent = st.recent[segment];
  if (!recent.empty() && recent.front() == entry) return;
  std::erase(recent, entry);
  recent.insert(recent.begin(), entry);
  if (recent.size() > detail::CompiledState::kReplayCandidates) recent.pop_back();
}

}  // namespace

// The backend contract: one fresh contiguous tensor per graph output, of the recorded dtype
// and size, or, for an output the graph writes back into an input (ir::InputWrite), that
// input's own memory. An output that otherwise aliases an input (a backend's shortcut) or
// another output (CSE merges equal values, e.g. two zeros_like) is cloned, since each buffer
// needs memory of its own.
void check_backend_outputs(const detail::CompiledState& st, const ir::Graph& graph,
                           std::span<const Tensor> inputs, std::vector<Tensor>& outs) {
  KILN_CHECK(outs.size() == graph.outputs.size(), Error, "kiln::compile: the backend of '", st.name,
             "' returned ", outs.size(), " outputs for a graph with ", graph.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const TensorMeta& want = graph.info(graph.outputs[i]);
    Tensor& o = outs[i];
    KILN_CHECK(
        o.defined() && o.dtype() == want.dtype && o.numel() == checked_numel(want.sizes, "capture"),
        Error, "kiln::compile: the backend of '", st.name, "' returned output ", i,
        o.defined() ? detail::concat(" of dtype ", o.dtype(), " and shape ", o.shape_str())
                    : std::string(" undefined"),
        "; the graph says ", want.dtype, IntList(want.sizes));
    // An output computed in the memory of the input it is written back to (ir::InputWrite)
    // stays: the write-back then has nothing to copy.
    int32_t written_input = -1;
    for (const ir::InputWrite& w : graph.input_writes)
      if (w.output == static_cast<int32_t>(i)) written_input = w.input;
    const bool written_in_place =
        written_input >= 0 && o.is_contiguous() &&
        inputs[static_cast<size_t>(written_input)].impl()->storage_if_concrete() ==
            o.impl()->storage_if_concrete() &&
        inputs[static_cast<size_t>(written_input)].storage_offset() == o.storage_offset();
    bool alias = !o.is_contiguous();
    for (const Tensor& in : inputs)
      alias = alias || (!written_in_place &&
                        in.impl()->storage_if_concrete() == o.impl()->storage_if_concrete());
    for (size_t j = 0; j < i && !alias; ++j)
      alias = outs[j].impl()->storage_if_concrete() == o.impl()->storage_if_concrete();
    if (alias) o = o.clone();
  }
}

// ---- running a segment ----

std::vector<Tensor> Tracer::run_segment(const ir::Graph& graph, std::shared_ptr<CacheEntry> hit,
                                        const GradRequest* grad) {
  PauseCapture pause;
  detail::CompiledState& st = *state_;
  std::shared_ptr<CacheEntry> entry = std::move(hit);
  const uint64_t key = entry ? 0 : graph.hash();
  bool compile = false;
  std::optional<ir::SymbolicSizes> symbolic;
  if (!entry) {
    std::lock_guard<std::mutex> lock(st.mu);
    entry = find_entry(st, segment_index_, graph, key);
    if (!entry) entry = find_dynamic_entry(st, segment_index_, graph);
    if (!entry)
      compile = should_compile(
          st, segment_index_, graph, frozen_, rec_.inputs,
          [this](int32_t input) { return input_label(input); },
          [this, &graph](int32_t node) {
            return &graph == &rec_.graph ? recorded_call_site(node) : ir::SourceLoc{};
          },
          symbolic);
  }
  std::vector<Tensor> outs;
  last_entry_ = nullptr;
  if (!entry && !compile) {
    outs = grad ? run_with_autograd(nullptr, graph, *grad) : ir::interpret(graph, rec_.inputs);
  } else {
    // (A replayed hit runs the entry's own graph: nothing to compare.)
    if (entry && entry->symbolic && &graph != &entry->graph &&
        !structurally_equal(entry->graph, graph))
      entry = instantiate(st, segment_index_, entry, graph, rec_.inputs, !grad);
    else if (!entry)
      entry =
          compile_and_add(st, segment_index_, graph, key, rec_.inputs, !grad, std::move(symbolic));
    // (A replay of the entry that was first and stayed so needs no update: candidates are only
    // fetched once replay switches or fails.)
    if (!(replay_.entry && replay_.candidates.empty())) remember_recent(st, segment_index_, entry);
    const std::vector<int64_t> values = runtime_values_for(*entry, graph);
    InBackend in_backend;  // the graph runs as part of kiln::compile: is_compiling() is true
    outs =
        grad ? run_with_autograd(entry.get(), graph, *grad) : entry->plain()(rec_.inputs, values);
    last_entry_ = entry;
  }
  check_backend_outputs(st, graph, rec_.inputs, outs);
  return outs;
}

std::string Tracer::input_label(int32_t index) const {
  if (index < 0 || static_cast<size_t>(index) >= rec_.inputs.size())
    return detail::concat("graph input ", index);
  const Tensor& t = rec_.inputs[static_cast<size_t>(index)];
  auto argument = [](const detail::ArgumentTensors::Arg& a) {
    return a.element < 0 ? detail::concat("argument ", a.position)
                         : detail::concat("argument ", a.position, "[", a.element, "]");
  };
  std::string what;
  for (const detail::ArgumentTensors::Arg& a : args_.list)
    if (a.impl == t.impl()) what = argument(a);
  if (what.empty()) what = detail::tensor_name(t, true).str();
  // A view of an argument (made before the call), or the whole memory of one written in place.
  if (what.empty())
    for (const detail::ArgumentTensors::Arg& a : args_.list)
      if (a.memory && a.memory == t.impl()->storage_if_concrete().get()) {
        what = "the memory of " + argument(a);
        break;
      }
  if (what.empty())
    what = detail::concat("a ", t.dtype(), t.shape_str(),
                          " tensor that is not an argument (captured or global)");
  return detail::concat(what, " (graph input ", index, ")");
}

std::vector<int64_t> Tracer::runtime_values_for(const CacheEntry& entry,
                                                const ir::Graph& graph) const {
  // A replayed segment collected this call's values while recording; otherwise the graph
  // holds them. The compiled graph takes those its passes kept.
  std::vector<int64_t> from_graph;
  if (!replay_.entry) from_graph = graph.runtime_attr_values();
  const std::vector<int64_t>& all = replay_.entry ? replay_.runtime_values : from_graph;
  std::vector<int64_t> values;
  values.reserve(entry.runtime_index.size());
  for (int32_t k : entry.runtime_index) values.push_back(all[static_cast<size_t>(k)]);
  return values;
}

// ---- the sync point ----

void Tracer::flush(const std::string& reason, const CallSite& site, bool is_return) {
  check_can_flush(reason);
  struct Flushing {
    bool& flag;
    explicit Flushing(bool& f) : flag(f) { flag = true; }
    ~Flushing() { flag = false; }
  } flushing(flushing_);
  if (!is_return) report_break(reason, site);
  if (pure_ && !is_return) ++pure_->breaks;
  SegmentOutputs outputs = collect_outputs();
  std::shared_ptr<CacheEntry> hit = finish_replay();
  if (!hit && (rec_.graph.num_calls() == 0 || rec_.graph.outputs.empty())) {
    drop_empty_segment(outputs);
    return;
  }
  release_written_storages();  // the graph reads them (old values) and writes them back
  std::vector<Tensor> values;
  try {
    const std::optional<GradRequest> grad = grad_request(outputs);
    values = run_segment(hit ? hit->graph : rec_.graph, hit,
                         grad && !grad->values.empty() ? &*grad : nullptr);
  } catch (...) {
    for (Buffer* b : outputs.buffers) b->output_slot = -1;
    abandon("running the captured graph failed");
    throw;
  }
  materialize(outputs, values);
  write_back(values);
  if (pure_) observe_for_pure(values);
  next_segment();
}

// ---- AOT autograd at the sync point ----

std::optional<GradRequest> Tracer::grad_request(const SegmentOutputs& outputs) const {
  if (!autograd_) return std::nullopt;
  std::vector<uint64_t> versions;
  for (const Buffer* b : outputs.buffers) versions.push_back(b->version);
  return autograd_->grad_request(outputs.live, std::move(versions));
}

std::vector<Tensor> Tracer::run_with_autograd(CacheEntry* entry, const ir::Graph& graph,
                                              const GradRequest& request) {
  // (The entry's forward/backward pairs are compiled here, at their first use.)
  CompilingDynamic compiling_dynamic(entry && (entry->symbolic || entry->instance));
  CompiledPartObserver observer;
  if (has_observers() && !(entry && entry->instance))
    // Weakly: the plan lives in the function's cache (a strong reference would be a cycle).
    observer = [state = std::weak_ptr(state_), segment = segment_index_](
                   const std::string& part, const std::string& missing, const ir::Graph& g,
                   std::vector<diagnostics::BackendOutput> outputs,
                   std::map<std::string, double> seconds) {
      if (const auto fn = state.lock())
        notify_aot_compiled(
            *fn, AotGraphRecord{segment, part, missing, g, std::move(outputs), std::move(seconds)});
    };
  return autograd_->run({entry, graph, request, rec_.inputs,
                         // This call's random seeds and offsets, in the captured graph's order.
                         replay_.entry ? replay_.runtime_values : graph.runtime_attr_values(),
                         [this](const Storage* s) { return written_.storages.count(s) != 0; },
                         std::move(observer)});
}

void Tracer::observe_for_pure(std::span<const Tensor> values) {
  PureObservation& p = *pure_;
  ++p.segments;
  p.wrote = p.wrote || !written_.order.empty();
  p.entry = last_entry_;
  p.generation = state_->generation.load();
  p.inputs = rec_.inputs;
  p.outputs.assign(values.begin(), values.end());
}

void Tracer::check_can_flush(const std::string& reason) const {
  KILN_CHECK(metadata_only_.empty(), Error, metadata_only_,
             ": the function needs a tensor's value (", reason,
             "), but functions allowed in graphs must not depend on tensor values");
  KILN_CHECK(!tracing_backward_, Error, "internal error: kiln::compile: '", state_->name,
             "': a derivative formula read a tensor's value (", reason,
             ") while its backward was traced into the graph; please report it");
  KILN_CHECK(!flushing_, Error, "kiln::compile: '", state_->name,
             "': a tensor of the graph being run was read while it runs (", reason,
             "; from a backend, a log sink or an observer?)");
}

void Tracer::report_break(const std::string& reason, const CallSite& site) {
  const detail::CompiledState& st = *state_;
  if (st.options.fullgraph) {
    const ir::SourceLoc where = site.resolve();
    abandon("fullgraph=true and a graph break was reached");
    throw GraphBreakError(detail::concat(
        "kiln::compile(fullgraph=true) of '", st.name, "': graph break at ",
        where.known() ? where.str() : std::string("an unknown location"), ": ", reason));
  }
  if (!log_enabled(LogTopic::GraphBreaks) && !has_observers()) return;
  GraphBreak br{reason, site.resolve()};
  if (log_enabled(LogTopic::GraphBreaks))
    diagnostics::log(
        LogTopic::GraphBreaks,
        detail::concat(st.name, ": graph break after graph ", segment_index_, " at ",
                       br.loc.known() ? br.loc.str() : "an unknown location", ": ", reason));
  notify_break(st, segment_index_, br);
}

Tracer::SegmentOutputs Tracer::collect_outputs() {
  // The buffer of every pending tensor still referenced, and every written storage.
  SegmentOutputs out;
  rec_.graph.outputs.clear();
  auto add_output = [&](Buffer* b) {
    if (b->output_slot >= 0) return;
    b->output_slot = static_cast<int32_t>(rec_.graph.outputs.size());
    rec_.graph.outputs.push_back(b->value);
    out.buffers.push_back(b);
  };
  for (auto& w : rec_.pending) {
    std::shared_ptr<TensorImpl> impl = w.lock();
    PendingTensor* p = impl ? own_pending(*impl) : nullptr;
    if (!p) continue;
    add_output(&p->buffer());
    out.live.emplace_back(std::move(impl), p);
  }
  for (Buffer* b : written_.order) add_output(b);
  // Each written memory's final value goes back into it after the run: a backend may write it
  // there directly (see ir::InputWrite).
  rec_.graph.input_writes.clear();
  for (Buffer* b : written_.order)
    rec_.graph.input_writes.push_back({b->output_slot, b->input_index});
  return out;
}

std::shared_ptr<CacheEntry> Tracer::finish_replay() {
  // A replay that matched a cached graph to its end, outputs included, is a cache hit (the
  // same ops returning other values may be another recent entry).
  if (!replay_.entry) return nullptr;
  auto complete = [&](const CacheEntry& e) {
    return replay_.cursor == e.graph.nodes.size() && rec_.graph.outputs == e.graph.outputs &&
           rec_.graph.input_writes == e.graph.input_writes;
  };
  if (!complete(*replay_.entry)) switch_replay(complete);
  if (complete(*replay_.entry) && state_->generation.load() == replay_.generation) {
    ++tls_replay_hits;
    return replay_.entry;
  }
  stop_replay();
  return nullptr;
}

void Tracer::drop_empty_segment(const SegmentOutputs& outputs) {
  for (Buffer* b : outputs.buffers) b->output_slot = -1;
  release_written_storages();
  reset_segment();
  start_replay();  // the same position: the next ops may still repeat its cached graph
}

void Tracer::materialize(const SegmentOutputs& outputs, std::span<const Tensor> values) {
  for (const auto& [impl, p] : outputs.live) {
    const Tensor& o = values[static_cast<size_t>(p->buffer().output_slot)];
    const uint64_t version = p->buffer().version;
    impl->set_storage(o.impl()->storage(), o.storage_offset() + impl->storage_offset());
    impl->storage_if_concrete()->set_version(version);
  }
}

void Tracer::write_back(std::span<const Tensor> values) {
  for (Buffer* b : written_.order) {
    const Tensor& o = values[static_cast<size_t>(b->output_slot)];
    // A backend that computed the value in the memory itself (ir::InputWrite): nothing to copy.
    if (o.impl()->storage_if_concrete() == b->concrete && o.storage_offset() == 0 &&
        o.is_contiguous())
      continue;
    Tensor flat(std::make_shared<TensorImpl>(o.impl()->storage(), o.storage_offset(),
                                             Shape{b->numel}, Shape{1}, o.dtype()));
    ops::convert_into(b->concrete_flat, flat);
  }
}

void Tracer::next_segment() {
  const size_t segment = segment_index_;
  reset_segment();
  segment_index_ = segment + 1;
  start_replay();
}

}  // namespace kiln::capture
