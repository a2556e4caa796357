// Running a captured segment at a sync point: guard lookup in the compiled function's cache,
// compile on a miss (with the stance, the cache limit and recompile reasons), run, and make the
// pending tensors concrete.
#include <chrono>
#include <iostream>
#include <sstream>

#include "capture/tracer.h"
#include "ir/attr_utils.h"
#include "ir/compare.h"
#include "kiln/ir/passes.h"
#include "ops/op_utils.h"

namespace kiln::capture {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The cached entry nearest to `g` (fewest differing nodes), for a recompile reason.
const CacheEntry* nearest_entry(
    const std::unordered_map<uint64_t, std::vector<std::shared_ptr<CacheEntry>>>& entries,
    const ir::Graph& g) {
  const CacheEntry* best = nullptr;
  int64_t best_score = INT64_MAX;
  for (const auto& [hash, list] : entries)
    for (const auto& e : list) {
      int64_t score = std::llabs(static_cast<int64_t>(e->graph.nodes.size()) -
                                 static_cast<int64_t>(g.nodes.size())) *
                      1000;
      const size_t n = std::min(e->graph.nodes.size(), g.nodes.size());
      for (size_t i = 0; i < n; ++i) score += !ir::same_node_at(e->graph, g, i);
      if (score < best_score) best_score = score, best = e.get();
    }
  return best;
}

// Compiles `raw` with the function's backend: passes, then the backend, timed per phase.
std::shared_ptr<CacheEntry> compile_entry(detail::CompiledState& state, const ir::Graph& raw,
                                          std::span<const Tensor> inputs) {
  auto entry = std::make_shared<CacheEntry>();
  entry->graph = raw;
  auto t0 = std::chrono::steady_clock::now();
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
  add_compile_time("passes", seconds_since(t0));
  std::vector<TensorMeta> infos;
  for (const Tensor& t : inputs)
    infos.push_back(TensorMeta::of(t));
  auto t1 = std::chrono::steady_clock::now();
  {
    InBackend in_backend;
    entry->compiled = state.backend(g, infos);
  }
  KILN_CHECK(entry->compiled, Error, "kiln::compile: the backend of '", state.name,
             "' returned an empty callable");
  add_compile_time("backend_compile", seconds_since(t1));
  if (log_enabled(LogTopic::Graphs))
    log(LogTopic::Graphs, detail::concat(state.name, ": graph with ", g.num_calls(), " ops\n", g));
  if (log_enabled(LogTopic::Guards))
    for (const std::string& line : guard_lines(raw))
      log(LogTopic::Guards, detail::concat(state.name, ": guard ", line));
  notify_graph(state, g);
  return entry;
}

}  // namespace

std::vector<Tensor> Tracer::run_segment(const ir::Graph& graph, std::shared_ptr<CacheEntry> hit) {
  PauseCapture pause;
  detail::CompiledState& st = *state_;
  std::shared_ptr<CacheEntry> entry = std::move(hit);
  bool eager = false;
  const uint64_t key = entry ? 0 : graph.hash();
  if (!entry) {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.segments.size() <= segment_index_) {
      st.segments.resize(segment_index_ + 1);
      st.entry_count.resize(segment_index_ + 1, 0);
    }
    auto& entries = st.segments[segment_index_];
    if (auto it = entries.find(key); it != entries.end())
      for (const auto& e : it->second)
        if (ir::structurally_equal(e->graph, graph)) entry = e;
    if (!entry) {
      const int count = st.entry_count[segment_index_];
      const Stance stance_now = stance();
      if (count > 0) {
        const CacheEntry* near = nearest_entry(entries, graph);
        std::string reason = near ? ir::describe_difference(near->graph, graph) : "";
        if (reason.empty()) reason = "the graph differs";
        if (stance_now == Stance::FailOnRecompile)
          throw RecompileError(detail::concat("kiln::compile: '", st.name,
                                              "' would recompile graph ", segment_index_,
                                              " but the stance is fail_on_recompile: ", reason));
        if (stance_now == Stance::EagerOnRecompile || frozen_) {
          eager = true;
        } else if (count >= compile_config().cache_size_limit) {
          eager = true;
          st.run_eagerly = true;
          if (!st.warned_limit) {
            st.warned_limit = true;
            std::cerr << "[kiln] warning: '" << st.name << "' hit cache_size_limit ("
                      << compile_config().cache_size_limit << ") recompiling graph "
                      << segment_index_ << "; it runs eagerly from now on. Last reason: " << reason
                      << "\n";
          }
        } else {
          if (log_enabled(LogTopic::Recompiles))
            log(LogTopic::Recompiles,
                detail::concat("recompiling '", st.name, "' graph ", segment_index_, ": ", reason));
          notify_recompile(st, reason);
        }
      } else if (frozen_) {
        eager = true;
      }
    }
  }
  std::vector<Tensor> outs;
  if (eager) {
    outs = ir::interpret(graph, inputs_);
  } else {
    if (!entry) {
      auto fresh = compile_entry(st, graph, inputs_);  // outside the lock: may be slow
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.segments.size() <= segment_index_) {  // kiln::reset() ran meanwhile
        st.segments.resize(segment_index_ + 1);
        st.entry_count.resize(segment_index_ + 1, 0);
      }
      st.segments[segment_index_][key].push_back(fresh);
      ++st.entry_count[segment_index_];
      entry = fresh;
    }
    // The next call replays what ran now first. (A replay of the entry that was first and
    // stayed so needs no update: candidates_ is only fetched once replay switches or fails.)
    if (!(replay_ && candidates_.empty())) {
      std::lock_guard<std::mutex> lock(st.mu);
      if (st.recent.size() <= segment_index_) st.recent.resize(segment_index_ + 1);
      auto& recent = st.recent[segment_index_];
      if (recent.empty() || recent.front() != entry) {
        std::erase(recent, entry);
        recent.insert(recent.begin(), entry);
        if (recent.size() > detail::CompiledState::kReplayCandidates) recent.pop_back();
      }
    }
    // A replayed segment collected its runtime values while recording; otherwise the graph
    // holds them.
    std::vector<int64_t> from_graph;
    if (!replay_) from_graph = graph.runtime_attr_values();
    const std::vector<int64_t>& all = replay_ ? replay_runtime_values_ : from_graph;
    std::vector<int64_t> values;
    values.reserve(entry->runtime_index.size());
    for (int32_t k : entry->runtime_index) values.push_back(all[static_cast<size_t>(k)]);
    InBackend in_backend;  // the graph runs as part of kiln::compile: is_compiling() is true
    outs = entry->compiled(inputs_, values);
  }
  // The backend contract: one fresh contiguous tensor per graph output.
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
    // Each buffer needs memory of its own: an output may alias an input (a backend's
    // shortcut) or another output (CSE merges equal values, e.g. two zeros_like).
    bool alias = !o.is_contiguous();
    for (const Tensor& in : inputs_)
      alias = alias || in.impl()->storage_if_concrete() == o.impl()->storage_if_concrete();
    for (size_t j = 0; j < i && !alias; ++j)
      alias = outs[j].impl()->storage_if_concrete() == o.impl()->storage_if_concrete();
    if (alias) o = o.clone();
  }
  return outs;
}

void Tracer::flush(const std::string& reason, const CallSite& site, bool is_return) {
  detail::CompiledState& st = *state_;
  KILN_CHECK(metadata_only_.empty(), Error, metadata_only_,
             ": the function needs a tensor's value (", reason,
             "), but functions allowed in graphs must not depend on tensor values");
  KILN_CHECK(!flushing_, Error, "kiln::compile: '", st.name,
             "': a tensor of the graph being run was read while it runs (", reason,
             "; from a backend, a log sink or an observer?)");
  struct Flushing {
    bool& flag;
    explicit Flushing(bool& f) : flag(f) { flag = true; }
    ~Flushing() { flag = false; }
  } flushing(flushing_);
  if (!is_return) {
    if (st.options.fullgraph) {
      const ir::SourceLoc where = site.resolve();
      abandon("fullgraph=true and a graph break was reached");
      throw GraphBreakError(detail::concat(
          "kiln::compile(fullgraph=true) of '", st.name, "': graph break at ",
          where.known() ? where.str() : std::string("an unknown location"), ": ", reason));
    }
    if (log_enabled(LogTopic::GraphBreaks) || has_observers()) {
      GraphBreak br{reason, site.resolve()};
      if (log_enabled(LogTopic::GraphBreaks))
        log(LogTopic::GraphBreaks,
            detail::concat(st.name, ": graph break after graph ", segment_index_, " at ",
                           br.loc.known() ? br.loc.str() : "an unknown location", ": ", reason));
      notify_break(st, br);
    }
  }
  // Outputs: the buffer of every pending tensor still referenced, and every written storage.
  std::vector<std::pair<std::shared_ptr<TensorImpl>, PendingTensor*>> live;
  std::vector<Buffer*> buffers;
  graph_.outputs.clear();
  auto add_output = [&](Buffer* b) {
    if (b->output_slot >= 0) return;
    b->output_slot = static_cast<int32_t>(graph_.outputs.size());
    graph_.outputs.push_back(b->value);
    buffers.push_back(b);
  };
  for (auto& w : pending_) {
    std::shared_ptr<TensorImpl> impl = w.lock();
    if (!impl || !impl->is_pending()) continue;
    auto* p = dynamic_cast<PendingTensor*>(impl->pending().get());
    if (!p || p->tracer != this) continue;
    add_output(&p->buffer());
    live.emplace_back(std::move(impl), p);
  }
  for (Buffer* b : written_order_) add_output(b);
  const size_t segment = segment_index_;
  // A replay that matched a cached graph to its end, outputs included, is a cache hit (the
  // same ops returning other values may be another recent entry).
  std::shared_ptr<CacheEntry> hit;
  if (replay_) {
    auto complete = [&](const CacheEntry& e) {
      return cursor_ == e.graph.nodes.size() && graph_.outputs == e.graph.outputs;
    };
    if (!complete(*replay_)) switch_replay(complete);
    if (complete(*replay_) && st.generation.load() == replay_generation_) {
      hit = replay_;
      ++tls_replay_hits;
    } else {
      stop_replay();
    }
  }
  if (!hit && (graph_.num_calls() == 0 || graph_.outputs.empty())) {
    for (Buffer* b : buffers) b->output_slot = -1;
    release_written_storages();
    reset_segment();
    start_replay();  // the same position: the next ops may still repeat its cached graph
    return;
  }
  std::vector<Tensor> outs;
  release_written_storages();  // the graph reads them (old values) and writes them back
  try {
    outs = run_segment(hit ? hit->graph : graph_, hit);
  } catch (...) {
    for (Buffer* b : buffers) b->output_slot = -1;
    abandon("running the captured graph failed");
    throw;
  }
  for (auto& [impl, p] : live) {
    const Tensor& o = outs[static_cast<size_t>(p->buffer().output_slot)];
    const uint64_t version = p->buffer().version;
    impl->set_storage(o.impl()->storage(), o.storage_offset() + impl->storage_offset());
    impl->storage_if_concrete()->set_version(version);
  }
  for (Buffer* b : written_order_) {
    const Tensor& o = outs[static_cast<size_t>(b->output_slot)];
    Tensor flat(std::make_shared<TensorImpl>(o.impl()->storage(), o.storage_offset(),
                                             Shape{b->numel}, Shape{1}, o.dtype()));
    ops::convert_into(b->concrete_flat, flat);
  }
  reset_segment();
  segment_index_ = segment + 1;
  start_replay();
}

}  // namespace kiln::capture
