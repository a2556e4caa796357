// AOT autograd's side of a capture (capture/segment_autograd.h): the segment's autograd node
// (CompiledFunctionNode), made when the first op with gradients is recorded; the nodes whose
// backward was traced into the graph; the call's earlier nodes, whose saved values eager writes
// must not clobber; and running a graph as its compiled forward/backward pair.
#include <algorithm>

#include "aot/compiled_node.h"
#include "aot/joint.h"
#include "capture/segment_autograd.h"
#include "capture/state.h"

namespace kiln::aot {

namespace {

// A cache entry's forward/backward pairs, one per set of differentiated values (node, output).
struct PlanCache final : capture::AutogradPlans {
  std::map<std::vector<std::pair<int32_t, int32_t>>, std::shared_ptr<const AotPlan>> plans;
};

class SegmentNodes final : public capture::SegmentAutograd, public InlineBackwardTracer {
 public:
  SegmentNodes(capture::SegmentHost& host, const Backend::AotCompilers& compilers)
      : host_(host), compilers_(compilers) {}
  ~SegmentNodes() override { forget_inline_nodes(); }

  void on_record(std::span<Tensor> outputs, std::span<const ir::ValueRef> values) override {
    if (!node_) {
      // Lazily, so that the node is newer than every autograd node its inputs came from.
      node_ = std::make_shared<CompiledFunctionNode>([host = &host_] { host->run_for_gradient(); });
      if (!host_.metadata_only()) node_->set_inline_tracer(this);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      Tensor& t = outputs[k];
      if (!is_floating(t.dtype())) continue;
      const uint32_t slot = node_->add_slot(values[k], t);
      AutogradMeta& m = autograd::meta(t);
      m.grad_fn = node_;
      m.output_nr = slot;
      t.impl()->set_requires_grad(true);
    }
  }

  void on_write_without_grad(std::span<Tensor> written) override {
    // Recording on, nothing that requires grad went into the new value: it has no history any
    // more (as in eager). With recording off, the tensor keeps the history it had.
    if (!is_grad_enabled()) return;
    for (Tensor& t : written)
      if (const auto& m = t.impl()->autograd_meta(); m && t.impl()->requires_grad()) {
        m->grad_fn = nullptr;
        t.impl()->set_requires_grad(false);
      }
  }

  bool has_segment_history(const AutogradMeta* m) const override {
    if (!m || !m->grad_fn) return false;
    if (m->grad_fn == std::static_pointer_cast<Node>(node_)) return true;
    return std::ranges::any_of(inlined_, [m](const auto& node) {
      return m->grad_fn == std::static_pointer_cast<Node>(node);
    });
  }

  bool traced_backward() const override { return !inlined_.empty(); }

  void before_write(const Tensor& target) override {
    for (const auto& weak : ran_)
      if (auto node = weak.lock()) node->preserve_saved_before_write(target);
  }

  std::optional<capture::GradRequest> grad_request(
      LiveTensors live, std::vector<uint64_t> output_versions) const override {
    if (!node_) return std::nullopt;
    capture::GradRequest r;
    r.tangent_of_slot.assign(node_->num_slots(), -1);
    for (const auto& [impl, pending] : live) {
      const AutogradMeta* m = impl->autograd_meta().get();
      if (!m || m->grad_fn != std::static_pointer_cast<Node>(node_)) continue;
      r.live.emplace_back(impl.get(), m->output_nr);
      int32_t& tangent = r.tangent_of_slot[m->output_nr];
      if (tangent >= 0) continue;
      tangent = static_cast<int32_t>(r.values.size());
      r.values.push_back(node_->slot_value(m->output_nr));
    }
    r.output_versions = std::move(output_versions);
    return r;
  }

  std::vector<Tensor> run(Run run) override;

  void end_segment() override {
    // A node whose graph ran without it (no live tensor needed a gradient) can never be reached.
    if (node_ && !node_->ran())
      node_->abandon("none of its graph's live results needed a gradient");
    forget_inline_nodes();
    node_.reset();
    inlined_.clear();
  }

  void abandon(const std::string& why) override {
    if (node_) node_->abandon(why);
    forget_inline_nodes();
    node_.reset();
    inlined_.clear();
  }

  // ---- inline backward (InlineBackwardTracer) ----
  bool begin_inline_backward(CompiledFunctionNode& node) override;
  std::vector<Tensor> trace_inline_backward(std::span<const std::pair<ir::ValueRef, Tensor>> seeds,
                                            std::span<const ir::ValueRef> wanted,
                                            std::string& missing_derivative) override;

 private:
  std::shared_ptr<const AotPlan> plan_for(const Run& run) const;
  // The segment's nodes stop pointing to this capture (they may outlive it).
  void forget_inline_nodes() {
    if (node_) node_->end_inline();
    for (const auto& node : inlined_) node->end_inline();
  }

  capture::SegmentHost& host_;
  const Backend::AotCompilers& compilers_;
  std::shared_ptr<CompiledFunctionNode> node_;  // the segment's, made lazily
  // The segment's earlier nodes, whose backward was traced inline (begin_inline_backward).
  std::vector<std::shared_ptr<CompiledFunctionNode>> inlined_;
  // The nodes of the call's earlier segments, for writes that run eagerly after a break.
  std::vector<std::weak_ptr<CompiledFunctionNode>> ran_;
};

bool SegmentNodes::begin_inline_backward(CompiledFunctionNode& node) {
  if (&node != node_.get() || !host_.recording_here() || host_.metadata_only()) return false;
  // A formula that reads a tensor's value would need the graph run in the middle of tracing
  // it: such graphs run first, as before (the node's backward then runs as compiled, or with
  // eager autograd).
  const size_t num_nodes = host_.num_recorded_nodes();
  auto node_at = [this](int32_t i) -> const ir::Node& {
    return host_.recorded_node(static_cast<size_t>(i));
  };
  for (size_t i = 0; i < num_nodes; ++i) {
    const ir::Node& n = host_.recorded_node(i);
    if (n.kind != ir::NodeKind::Call || !n.op->derivative.fn) continue;
    const bool grad =
        std::ranges::any_of(n.outputs, [](const TensorMeta& m) { return m.requires_grad; });
    if (grad && !derivative_traces_without_values(n, node_at)) return false;
  }
  std::vector<Tensor> inputs;
  std::vector<ir::ValueRef> values;
  for (size_t i = 0; i < num_nodes; ++i) {
    const ir::Node& n = host_.recorded_node(i);
    if (n.kind != ir::NodeKind::Placeholder || !n.outputs[0].requires_grad) continue;
    inputs.push_back(host_.graph_input(n.input_index));
    values.push_back({static_cast<int32_t>(i), 0});
  }
  node.begin_inline(inputs, std::move(values));
  inlined_.push_back(std::move(node_));
  return true;
}

std::vector<Tensor> SegmentNodes::trace_inline_backward(
    std::span<const std::pair<ir::ValueRef, Tensor>> seeds, std::span<const ir::ValueRef> wanted,
    std::string& missing_derivative) {
  KILN_CHECK(host_.recording_here(), Error,
             "internal error: a backward traced inline ran outside the capture of its graph");
  // The formulas record as under a plain backend: one that runs autograd itself
  // (allow_in_graph's derivative re-runs the function) gets per-op nodes, not this graph's.
  struct Tracing {
    capture::SegmentHost& host;
    explicit Tracing(capture::SegmentHost& h) : host(h) { host.set_tracing_backward(true); }
    ~Tracing() { host.set_tracing_backward(false); }
  } tracing(host_);
  const ForwardNodes nodes{
      static_cast<int32_t>(host_.num_recorded_nodes()),
      [this](int32_t i) -> const ir::Node& { return host_.recorded_node(static_cast<size_t>(i)); },
      [this](ir::ValueRef v) { return host_.value_tensor(v); }};
  return trace_backward(nodes, seeds, wanted, missing_derivative);
}

std::shared_ptr<const AotPlan> SegmentNodes::plan_for(const Run& run) const {
  auto compile = [&] {
    return compile_plan(run.graph, run.request.values, compilers_.forward, compilers_.backward,
                        run.observer);
  };
  if (!run.entry) return compile();  // the function runs uncompiled (stance, cache limit)
  std::vector<std::pair<int32_t, int32_t>> key;
  for (ir::ValueRef v : run.request.values) key.emplace_back(v.node, v.output);
  std::lock_guard<std::mutex> lock(run.entry->aot_mu);
  if (!run.entry->aot_plans) run.entry->aot_plans = std::make_unique<PlanCache>();
  std::shared_ptr<const AotPlan>& slot = static_cast<PlanCache&>(*run.entry->aot_plans).plans[key];
  if (!slot) slot = compile();
  return slot;
}

std::vector<Tensor> SegmentNodes::run(Run run) {
  const std::shared_ptr<const AotPlan> plan = plan_for(run);
  const capture::GradRequest& request = run.request;
  if (plan->eager_autograd) {
    // Every live tensor of the node takes its value's eager history instead.
    std::vector<std::vector<Tensor>> values;
    {
      capture::InBackend in_backend;
      values = run_with_eager_autograd(run.graph, run.inputs, run.runtime_values);
    }
    for (const auto& [impl, slot] : request.live) {
      const ir::ValueRef v = node_->slot_value(slot);
      const Tensor& eager = values[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
      AutogradMeta& m = *impl->autograd_meta();
      m.grad_fn = eager.grad_fn();
      m.output_nr = eager.impl()->autograd_meta() ? eager.impl()->autograd_meta()->output_nr : 0;
      impl->set_requires_grad(eager.requires_grad());
    }
    node_->abandon(plan->why);
    std::vector<Tensor> results;
    for (ir::ValueRef v : run.graph.outputs)
      results.push_back(
          values[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)].detach());
    return results;
  }
  std::vector<int64_t> forward_values;
  for (int32_t k : plan->partition.forward_runtime_index)
    forward_values.push_back(run.runtime_values[static_cast<size_t>(k)]);
  std::vector<Tensor> results;
  {
    capture::InBackend in_backend;
    results = plan->forward(run.inputs, forward_values);
  }
  // An output's memory is at its buffer's version (the writes recorded into it), as the capture
  // will say when it hands the output over: a saved output must expect that version.
  for (size_t k = 0; k < request.output_versions.size(); ++k) {
    Storage* s = results[k].impl()->storage_if_concrete().get();
    const bool an_input = std::ranges::any_of(
        run.inputs, [s](const Tensor& in) { return in.impl()->storage_if_concrete().get() == s; });
    if (s && !an_input) s->set_version(request.output_versions[k]);
  }
  std::vector<Tensor> saved;
  for (const SavedValue& s : plan->partition.saved) {
    if (!s.is_input) {
      // The backward graph takes a saved value as a fresh contiguous tensor (extract); a
      // backend may hand one back as a view into another of its buffers (inductor: a slice of
      // an intermediate, read as index arithmetic).
      const Tensor& value = results[static_cast<size_t>(s.index)];
      if (value.is_contiguous()) {
        saved.push_back(value);
      } else {
        capture::PauseCapture pause;
        saved.push_back(value.contiguous());
      }
      continue;
    }
    // An input whose memory this graph writes holds its old value only until the write-back
    // after this: the backward gets a copy of that value.
    const Tensor& in = run.inputs[static_cast<size_t>(s.index)];
    saved.push_back(run.written(in.impl()->storage_if_concrete().get()) ? copy_keeping_strides(in)
                                                                        : in);
  }
  node_->activate(plan, request.tangent_of_slot, run.inputs, saved, std::move(run.runtime_values));
  std::erase_if(ran_, [](const auto& node) { return node.expired(); });
  ran_.push_back(node_);
  results.resize(plan->num_outputs);
  return results;
}

}  // namespace

}  // namespace kiln::aot

namespace kiln::capture {

std::unique_ptr<SegmentAutograd> make_segment_autograd(SegmentHost& host,
                                                       const Backend::AotCompilers& compilers) {
  return std::make_unique<aot::SegmentNodes>(host, compilers);
}

}  // namespace kiln::capture
