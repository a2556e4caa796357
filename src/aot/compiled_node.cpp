// Compiling a forward/backward pair and running it as one autograd node (see compiled_node.h).
#include "aot/compiled_node.h"

#include <chrono>

#include "aot/missing_tangents.h"
#include "autograd/grad_mode.h"
#include "capture/state.h"
#include "core/clock.h"
#include "ir/attr_utils.h"
#include "kiln/ir/passes.h"
#include "kiln/ops/factory.h"

namespace kiln::aot {

namespace {

std::vector<TensorMeta> placeholder_metas(const ir::Graph& g) {
  std::vector<TensorMeta> metas;
  for (const ir::Node& n : g.nodes)
    if (n.kind == ir::NodeKind::Placeholder) metas.push_back(n.outputs[0]);
  return metas;
}
// Per node and output: whether some node of `g` reads the value.
std::vector<std::vector<bool>> values_read(const ir::Graph& g) {
  std::vector<std::vector<bool>> read(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) read[i].assign(g.nodes[i].outputs.size(), false);
  for (const ir::Node& n : g.nodes)
    for (ir::ValueRef in : n.inputs)
      read[static_cast<size_t>(in.node)][static_cast<size_t>(in.output)] = true;
  return read;
}
// Per forward input: the differentiated values (tangent indices) an autograd path reaches from
// it — through values that require grad, as the eager engine's edges go.
std::vector<std::vector<int32_t>> tangents_reached(
    const ir::Graph& forward, std::span<const ir::ValueRef> values,
    const std::vector<std::vector<bool>>& gradient_flows) {
  const auto num_inputs = static_cast<size_t>(forward.num_inputs());
  // Per node output: the inputs that reach it.
  std::vector<std::vector<std::vector<bool>>> from(forward.nodes.size());
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const ir::Node& n = forward.nodes[i];
    from[i].assign(n.outputs.size(), std::vector<bool>(num_inputs, false));
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (!n.outputs[o].requires_grad) continue;
      if (n.kind == ir::NodeKind::Placeholder) {
        from[i][o][static_cast<size_t>(n.input_index)] = true;
        continue;
      }
      const std::vector<bool>& flows = gradient_flows[i];
      for (size_t j = 0; j < n.inputs.size(); ++j) {
        const ir::ValueRef v = n.inputs[j];
        // Only along a derivative that gives the input a gradient (not copy's to the tensor it
        // overwrites): otherwise the input would get a zero gradient where eager gives none.
        if (!forward.info(v).requires_grad || j >= flows.size() || !flows[j]) continue;
        const auto& r = from[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
        for (size_t in = 0; in < num_inputs; ++in)
          if (r[in]) from[i][o][in] = true;
      }
    }
  }
  std::vector<std::vector<int32_t>> out(num_inputs);
  for (size_t k = 0; k < values.size(); ++k) {
    const auto& r =
        from[static_cast<size_t>(values[k].node)][static_cast<size_t>(values[k].output)];
    for (size_t in = 0; in < num_inputs; ++in)
      if (r[in]) out[in].push_back(static_cast<int32_t>(k));
  }
  return out;
}
}  // namespace

Tensor copy_keeping_strides(const Tensor& t) {
  capture::PauseCapture pause;
  NoGradGuard no_grad;
  if (t.numel() == 0 || t.is_contiguous()) return t.clone();
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  const std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (strides[d] == 0) sizes[d] = 1;  // written once, expanded again below
    extent += (sizes[d] - 1) * strides[d];
  }
  try {
    Tensor storage = empty({extent}, t.dtype());
    storage.as_strided(IntList(sizes), t.strides(), 0)
        .copy_(t.as_strided(IntList(sizes), t.strides(), t.storage_offset()));
    return storage.as_strided(t.sizes(), t.strides(), 0);
  } catch (const Error&) {
    return t.clone();
  }
}

CompiledGraph AotPlan::compile_part(const std::string& part, const std::string& missing,
                                    const Backend& compiler, const ir::Graph& graph) const {
  if (!observer) return compiler(graph, placeholder_metas(graph));
  diagnostics::GraphCompileCollector collector;
  CompiledGraph compiled;
  const auto t0 = std::chrono::steady_clock::now();
  {
    diagnostics::CollectingInto collecting(&collector);
    compiled = compiler(graph, placeholder_metas(graph));
  }
  collector.seconds["backend_compile"] += detail::seconds_since(t0);
  observer(part, missing, graph, std::move(collector.outputs), std::move(collector.seconds));
  return compiled;
}

std::shared_ptr<const AotPlan> compile_plan(const ir::Graph& forward,
                                            std::span<const ir::ValueRef> values,
                                            const Backend& fw_compiler, const Backend& bw_compiler,
                                            AotPartObserver observer) {
  diagnostics::CompilePhase aot_autograd("aot_autograd");
  auto plan = std::make_shared<AotPlan>();
  plan->observer = std::move(observer);
  JointGraph joint;
  try {
    joint = trace_joint(forward, values);
  } catch (const Error& e) {
    plan->eager_autograd = true;
    plan->why = e.what();
    if (log_enabled(LogTopic::GraphBreaks))
      diagnostics::log(LogTopic::GraphBreaks,
                       detail::concat("AOT autograd could not trace a backward (", plan->why,
                                      "); the graph runs with eager autograd"));
    return plan;
  }
  plan->partition = partition_min_cut(joint);
  plan->num_outputs = forward.outputs.size();
  plan->missing_derivative = joint.missing_derivative;
  int32_t next = 0;
  for (const auto& g : joint.input_grads) plan->grad_output_of_input.push_back(g ? next++ : -1);
  plan->tangents_of_input = tangents_reached(forward, values, joint.gradient_flows);
  const std::vector<std::vector<bool>> read = values_read(forward);
  for (ir::ValueRef v : values)
    plan->used_inside.push_back(read[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
  aot_autograd.finish();
  diagnostics::CompilePhase backend_compile("backend_compile");
  plan->dynamic = compiling_dynamic_graph();
  plan->forward = plan->compile_part("forward", "", fw_compiler, plan->partition.forward);
  const Backend& bw = bw_compiler ? bw_compiler : fw_compiler;
  plan->backward_compiler = bw;
  plan->backward = plan->compile_part("backward", "", bw, plan->partition.backward);
  KILN_CHECK(plan->forward && plan->backward, Error,
             "kiln::compile: an AOT autograd compiler returned an empty callable");
  return plan;
}

const AotPlan::PartialBackward& AotPlan::backward_without(const std::vector<bool>& arrived) const {
  std::lock_guard<std::mutex> lock(partial_mutex_);
  std::unique_ptr<PartialBackward>& entry = partial_[arrived];
  if (!entry) {
    diagnostics::CompilePhase backend_compile("backend_compile");
    const int64_t num_saved = static_cast<int64_t>(partition.saved.size());
    BackwardWithoutTangents pruned =
        backward_without_tangents(partition.backward, num_saved, arrived);
    auto made = std::make_unique<PartialBackward>();
    std::string missing;
    for (size_t t = 0; t < arrived.size(); ++t)
      if (!arrived[t]) missing += detail::concat(missing.empty() ? "" : ", ", t);
    capture::CompilingDynamic compiling_dynamic(dynamic);
    made->run = compile_part("backward_partial", missing, backward_compiler, pruned.graph);
    made->output_of = std::move(pruned.output_of);
    made->runtime_kept = std::move(pruned.runtime_kept);
    entry = std::move(made);
  }
  return *entry;
}

std::vector<std::vector<Tensor>> run_with_eager_autograd(const ir::Graph& graph,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const int64_t> runtime_values) {
  std::vector<std::vector<Tensor>> values(graph.nodes.size());
  size_t next_runtime = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& n = graph.nodes[i];
    switch (n.kind) {
      case ir::NodeKind::Placeholder:
        values[i] = {inputs[static_cast<size_t>(n.input_index)]};
        break;
      case ir::NodeKind::Constant:
        values[i] = {ir::constant_value(n)};
        break;
      case ir::NodeKind::Call: {
        std::vector<Tensor> ins;
        for (ir::ValueRef v : n.inputs)
          ins.push_back(values[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
        Attrs attrs = n.attrs;
        while (next_runtime < graph.runtime_attrs.size() &&
               graph.runtime_attrs[next_runtime].node == static_cast<int32_t>(i)) {
          attrs = ir::with_attr(attrs, static_cast<size_t>(graph.runtime_attrs[next_runtime].attr),
                                runtime_values[next_runtime]);
          ++next_runtime;
        }
        if (Attrs moved; ir::as_strided_attrs_at(graph, n, ins, moved)) attrs = std::move(moved);
        bool grad = false;
        for (const TensorMeta& m : n.outputs) grad = grad || m.requires_grad;
        AutoGradMode mode(grad);
        std::array<Tensor, kMaxOpOutputs> outs;
        const int k = dispatch(*n.op, ins, attrs, outs);
        values[i].assign(outs.begin(), outs.begin() + k);
        break;
      }
    }
  }
  return values;
}

uint32_t CompiledFunctionNode::add_slot(ir::ValueRef v, const Tensor& t) {
  // Two tensors holding one value share its slot (its gradients are summed by the engine).
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(v.node)) << 32) |
                       static_cast<uint32_t>(v.output);
  auto [it, inserted] = slot_of_value_.try_emplace(key, static_cast<uint32_t>(slots_.size()));
  if (!inserted) return it->second;
  slots_.push_back(v);
  add_output(t);
  return it->second;
}

void CompiledFunctionNode::activate(std::shared_ptr<const AotPlan> plan,
                                    std::vector<int32_t> tangent_of_slot,
                                    std::span<const Tensor> inputs, std::span<const Tensor> saved,
                                    std::vector<int64_t> runtime_values) {
  plan_ = std::move(plan);
  tangent_of_slot_ = std::move(tangent_of_slot);
  for (const Tensor& t : inputs) add_input(t);
  for (const Tensor& t : saved) {
    saved_.emplace_back(t, false);
    saved_memory_.push_back(t.impl()->memory_id());
  }
  runtime_values_ = std::move(runtime_values);
  sync_ = nullptr;  // the tracer may be gone by the time backward runs
}

void CompiledFunctionNode::preserve_saved_before_write(const Tensor& target) {
  if (released_) return;
  const void* memory = target.impl()->memory_id();
  for (size_t i = 0; i < saved_.size(); ++i) {
    if (saved_memory_[i] != memory) continue;
    Tensor value;
    try {
      value = saved_[i].unpack(nullptr, name());
    } catch (const Error&) {
      continue;  // already overwritten: backward reports it, as eager's would
    }
    saved_[i] = SavedTensor(copy_keeping_strides(value), false);
    saved_memory_[i] = nullptr;
  }
}

void CompiledFunctionNode::abandon(std::string why) {
  abandoned_ = std::move(why);
  sync_ = nullptr;
}

bool CompiledFunctionNode::inline_allowed() const {
  // grad() runs only the nodes leading to its inputs: a node it would not reach could not run
  // its traced backward later (its graph ends meanwhile), so grad() runs the graph first.
  const autograd::BackwardRequest* request = autograd::current_backward_request();
  return request && !request->keep_graph && !request->create_graph && request->grad_inputs.empty();
}

void CompiledFunctionNode::begin_inline(std::span<const Tensor> inputs,
                                        std::vector<ir::ValueRef> input_values) {
  for (const Tensor& t : inputs) add_input(t);
  inline_input_values_ = std::move(input_values);
  inlined_ = true;
}

void CompiledFunctionNode::before_backward() {
  // Traces the backward into the graph being captured when it can (see begin_inline), else
  // runs the graph if it has not run. When its backward cannot be traced, the run gives the
  // node's tensors eager histories and abandons this node: a backward that re-reads their
  // grad_fn (the engine does for its roots) goes on without it; apply() names the reason.
  if (plan_) return check_grad_inputs_observable();
  if (inlined_ || !abandoned_.empty() || !sync_) return;
  if (inline_tracer_ && inline_allowed() && inline_tracer_->begin_inline_backward(*this)) return;
  auto sync = sync_;
  sync();  // (may destroy this node, see above: nothing may follow)
}

void CompiledFunctionNode::check_grad_inputs_observable() const {
  // grad() of one of this node's values: the engine sees the gradient flowing into it from
  // outside the graph only, so a use inside the graph would be missed (as for a hook). grad()
  // settles its inputs' history after its outputs', so the graph has run by then.
  const autograd::BackwardRequest* request = autograd::current_backward_request();
  if (!request) return;
  for (const Tensor& t : request->grad_inputs) {
    if (!t.defined()) continue;  // (grad() reports it)
    const auto& m = t.impl()->autograd_meta();
    if (!m || m->grad_fn.get() != this) continue;
    const int32_t tangent = tangent_of_slot_[m->output_nr];
    KILN_CHECK(tangent < 0 || !plan_->used_inside[static_cast<size_t>(tangent)],
               NotImplementedError, "grad() with respect to a tensor (shape ", t.shape_str(),
               ") that ops of the same compiled graph (AOT autograd) already used: its gradient "
               "from those uses is computed inside the compiled backward and cannot be "
               "observed. Call graph_break() after computing it, or compile with the \"eager\" "
               "backend");
  }
}

void CompiledFunctionNode::ensure_ran(const char* what) {
  if (plan_) return;
  KILN_CHECK(abandoned_.empty(), Error, what,
             " reached a tensor computed by a compiled function whose capture was abandoned (",
             abandoned_, ")");
  KILN_CHECK(sync_, Error, "internal error: ", name(), " has neither run nor a way to run");
  auto sync = sync_;
  sync();
  KILN_CHECK(plan_, Error, "internal error: ", name(), " did not run at its sync point");
}

size_t CompiledFunctionNode::add_pre_hook(uint32_t output_nr, TensorHook hook, bool run_last) {
  // After its backward was traced inline the node is spent, as an eager node after backward():
  // the hook is kept, and a second backward through it fails in apply().
  if (inlined_) return Node::add_pre_hook(output_nr, std::move(hook), run_last);
  // A hook sees the gradient flowing into a value from outside the graph. Running the graph
  // first makes every later use of the value an outside one; a use inside the graph already
  // captured would feed the value's gradient inside the backward, where no hook can see it.
  ensure_ran("register_hook() or retain_grad()");
  const int32_t tangent = tangent_of_slot_[output_nr];
  KILN_CHECK(tangent < 0 || !plan_->used_inside[static_cast<size_t>(tangent)], NotImplementedError,
             "register_hook() / retain_grad() on a tensor that ops of the same compiled graph "
             "(AOT autograd) already used: its gradient from those uses is computed inside the "
             "compiled backward and cannot be observed. Register the hook before using the "
             "tensor, or compile with the \"eager\" backend");
  return Node::add_pre_hook(output_nr, std::move(hook), run_last);
}

std::vector<Tensor> CompiledFunctionNode::apply(std::vector<Tensor>&& grads) {
  if (inlined_) return apply_inline(grads);
  ensure_ran("backward()");
  KILN_CHECK(plan_->missing_derivative.empty(), NotImplementedError, "the derivative of '",
             plan_->missing_derivative,
             "' is not implemented, so gradients cannot flow through it (", name(), ")");
  // The compiled backward computes without recording, so its gradients have no history.
  KILN_CHECK(!is_grad_enabled(), NotImplementedError,
             "double backward (create_graph=true) through a graph compiled with AOT autograd (",
             name(),
             ") is not supported, as in torch.compile; compile with the \"eager\" "
             "backend to differentiate twice");
  KILN_CHECK(!released_, Error, "trying to run ", name(),
             " a second time: its saved tensors were freed after the first backward pass. Pass "
             "retain_graph=true to the first backward() (or grad()) to keep them");
  std::vector<Tensor> outs;
  std::vector<bool> tangent_arrived;
  {
    capture::PauseCapture pause;  // (backward() may be called inside a compiled function)
    capture::InBackend in_backend;
    std::vector<Tensor> inputs;
    for (const SavedTensor& s : saved_) inputs.push_back(s.unpack(nullptr, name()));
    const size_t first_tangent = inputs.size();
    inputs.resize(static_cast<size_t>(plan_->partition.backward.num_inputs()));
    tangent_arrived.assign(inputs.size() - first_tangent, false);
    for (size_t slot = 0; slot < tangent_of_slot_.size(); ++slot) {
      const int32_t k = tangent_of_slot_[slot];
      const bool has_grad = slot < grads.size() && grads[slot].defined();
      if (k < 0) {
        KILN_CHECK(!has_grad, Error, "internal error: ", name(),
                   " got a gradient for an output no gradient can reach");
        continue;
      }
      const TensorMeta& m = output_meta()[slot];
      tangent_arrived[static_cast<size_t>(k)] = has_grad;
      inputs[first_tangent + static_cast<size_t>(k)] = !has_grad ? zeros(m.sizes, m.dtype)
                                                       : grads[slot].is_contiguous()
                                                           ? grads[slot]
                                                           : grads[slot].contiguous();
    }
    std::vector<int64_t> values;
    for (int32_t k : plan_->partition.backward_runtime_index)
      values.push_back(runtime_values_[static_cast<size_t>(k)]);
    if (std::find(tangent_arrived.begin(), tangent_arrived.end(), false) == tangent_arrived.end()) {
      outs = plan_->backward(inputs, values);
    } else {
      // Some outputs got no gradient: the backward without them (zeros instead could turn a
      // gradient eager computes finite into NaN: 0 * inf).
      const AotPlan::PartialBackward& partial = plan_->backward_without(tangent_arrived);
      std::vector<int64_t> kept;
      for (int32_t k : partial.runtime_kept) kept.push_back(values[static_cast<size_t>(k)]);
      const std::vector<Tensor> got = partial.run(inputs, kept);
      outs.assign(partial.output_of.size(), Tensor());
      for (size_t k = 0; k < outs.size(); ++k)
        if (partial.output_of[k] >= 0) outs[k] = got[static_cast<size_t>(partial.output_of[k])];
    }
  }
  std::vector<Tensor> grad_inputs(next_edges_.size());
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    const int32_t k = plan_->grad_output_of_input[i];
    if (k < 0 || !next_edges_[i].valid()) continue;
    bool reached = false;
    for (int32_t t : plan_->tangents_of_input[i])
      reached = reached || tangent_arrived[static_cast<size_t>(t)];
    if (reached) grad_inputs[i] = outs[static_cast<size_t>(k)];  // (undefined if none arrives)
  }
  return grad_inputs;
}

std::vector<Tensor> CompiledFunctionNode::apply_inline(const std::vector<Tensor>& grads) {
  KILN_CHECK(!released_, Error, "trying to run ", name(),
             " a second time: its backward already ran inside the compiled function. Pass "
             "retain_graph=true to the first backward() (or grad()) to differentiate twice");
  KILN_CHECK(inline_tracer_, Error, name(),
             ": its backward was to be traced into a compiled graph whose capture has ended "
             "(did the compiled function throw?)");
  std::vector<std::pair<ir::ValueRef, Tensor>> seeds;
  for (size_t slot = 0; slot < slots_.size() && slot < grads.size(); ++slot)
    if (grads[slot].defined()) seeds.emplace_back(slots_[slot], grads[slot]);
  std::string missing;
  std::vector<Tensor> grad_inputs =
      inline_tracer_->trace_inline_backward(seeds, inline_input_values_, missing);
  KILN_CHECK(missing.empty(), NotImplementedError, "the derivative of '", missing,
             "' is not implemented, so gradients cannot flow through it (", name(), ")");
  for (size_t i = 0; i < grad_inputs.size(); ++i)
    if (!next_edges_[i].valid()) grad_inputs[i] = Tensor();
  return grad_inputs;
}

void CompiledFunctionNode::end_inline() { inline_tracer_ = nullptr; }

void CompiledFunctionNode::release_saved() {
  if (inlined_) released_ = true;
  if (saved_.empty()) return;
  for (SavedTensor& s : saved_) s.release();
  released_ = true;
}

}  // namespace kiln::aot
