// The "inductor" backend: lower (lower.h), render C++ (cpp_render.h), compile and load it
// (cpp_compiler.h), and run the schedule — generated kernels and extern calls to the eager
// kernels — on its run plan (run_plan.h: buffers freed after their last reader, donated,
// written in place). Mode "max-autotune" also times each large kernel at its first run
// (autotune.h); KILN_INDUCTOR_PROFILE times every step (step_profile.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "autograd/grad_mode.h"
#include "backends/backend_lookup.h"
#include "backends/inductor/autotune.h"
#include "backends/inductor/cpp_compiler.h"
#include "backends/inductor/cpp_render.h"
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/lower.h"
#include "backends/inductor/module_cache.h"
#include "backends/inductor/run_plan.h"
#include "backends/inductor/step_profile.h"
#include "core/clock.h"
#include "core/stack_tensors.h"
#include "diagnostics/diagnostics.h"
#include "ir/attr_utils.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"
#include "kiln/core/parallel.h"
#include "kiln/ir/passes.h"
#include "kiln/ops/pointwise.h"
#include "ops/indexing_utils.h"
#include "ops/op_utils.h"

namespace kiln::backends {

namespace {

using inductor::Kernel;
using inductor::KernelFn;
using inductor::KernelGrainScope;
using inductor::Schedule;
using inductor::Step;

int64_t nanoseconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

using ir::is_view;
using ir::root_of;

// Whether nothing but this handle holds t's buffer (so a kernel may overwrite it).
bool exclusively_owned(const Tensor& t) {
  return t.defined() && t.impl_ptr().use_count() == 1 &&
         t.impl()->storage_if_concrete().use_count() == 1;
}

// A graph compiled by inductor: the schedule, the loaded kernels, and the run plan.
class CompiledInductorGraph {
 public:
  CompiledInductorGraph(const ir::Graph& graph, bool max_autotune) {
    inductor::LoweredGraph lowered = inductor::lower_graph(graph);
    graph_ = std::move(lowered.graph);
    schedule_ = std::move(lowered.schedule);
    plan_ = inductor::make_run_plan(graph_, schedule_, renderer_);
    if (!schedule_.kernels.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      source_ = renderer_.render(graph_, schedule_, compiling_dynamic_graph());
      diagnostics::add_compile_time("inductor_codegen", detail::seconds_since(t0));
      inductor::CompileStats stats;
      module_ = inductor::compile_module(source_, &stats);
      diagnostics::add_compile_time("inductor_cxx", stats.cxx_seconds);
      diagnostics::add_compile_time("inductor_load", stats.load_seconds);
      if (log_enabled(LogTopic::OutputCode))
        diagnostics::log(LogTopic::OutputCode,
                         detail::concat("inductor: ", module_->path(), " (headers from ",
                                        inductor::runtime_headers().runtime_dir, ")\n", source_));
      for (const Kernel& k : schedule_.kernels)
        kernel_fns_.push_back(reinterpret_cast<KernelFn>(module_->kernel(k.name)));
      tuning_.emplace(schedule_, plan_, module_->path());
      if (max_autotune) tuned_.store(tuning_->load(), std::memory_order_release);
    }
    if (inductor::step_profiling()) profile_ = inductor::profile_graph(graph_, schedule_);
    if (diagnostics::wants_backend_output()) {
      const inductor::ScheduleSummary counts = inductor::summary_of(schedule_);
      diagnostics::note_backend_count("inductor_kernels", counts.kernels);
      diagnostics::note_backend_count("inductor_extern_calls", counts.extern_calls);
      if (schedule_.kernels.empty())
        diagnostics::note_backend_output({"inductor_schedule.txt", describe_schedule(), ""});
      else
        diagnostics::note_backend_output({"inductor.cpp", source_, module_->path()});
    }
  }

  std::vector<Tensor> run(std::span<const Tensor> inputs,
                          std::span<const int64_t> runtime_values) const;

  // For a graph without generated kernels (nothing to fuse): what runs instead.
  std::string describe_schedule() const {
    std::string text =
        "// inductor generated no C++ for this graph: every op runs as an extern call to its "
        "eager kernel, in this order\n";
    for (const Step& st : schedule_.steps) {
      const ir::Node& n = graph_.nodes[static_cast<size_t>(st.index)];
      text += detail::concat("extern %", st.index, " ", n.op ? n.op->name : "?", "\n");
    }
    return text;
  }

 private:
  size_t slot(ir::ValueRef v) const { return plan_.slot(v); }
  // The tensor of value v: its slot, or a view made over its root's slot from the recorded
  // metadata (views cost no copy).
  Tensor value(std::span<Tensor> slots, ir::ValueRef v) const;
  void run_extern(int32_t node, std::span<Tensor> slots,
                  std::span<const int64_t> runtime_values) const;
  // Throws the eager kernel's error unless every index of indirect load `node` (an embedding,
  // index_select or gather a kernel computes) picks a row of its table: before the kernel writes
  // anything.
  void check_indices(int32_t node, std::span<Tensor> slots) const;
  // Node's attributes with this call's runtime values (a random op's seed and offset).
  Attrs attrs_this_call(int32_t node, std::span<const int64_t> runtime_values) const;
  std::vector<Tensor> run_steps(std::span<const Tensor> inputs,
                                std::span<const int64_t> runtime_values, bool tune) const;

  ir::Graph graph_;
  Schedule schedule_;
  const inductor::KernelRenderer& renderer_ = inductor::cpp_renderer();  // the C++ target
  std::string source_;
  std::shared_ptr<inductor::LoadedModule> module_;
  std::vector<KernelFn> kernel_fns_;
  inductor::RunPlan plan_;
  mutable std::atomic<bool> verified_{false};
  // Per kernel, the grain it runs with (max-autotune's choice, or 0: its own); the choices are
  // made once, by the first run (under tune_mu_), before tuned_ is set. Made when there are
  // kernels.
  mutable std::optional<inductor::KernelTuning> tuning_;
  mutable std::atomic<bool> tuned_{true};
  mutable std::mutex tune_mu_;
  std::shared_ptr<inductor::GraphProfile> profile_;  // null unless KILN_INDUCTOR_PROFILE is set
};

Tensor CompiledInductorGraph::value(std::span<Tensor> slots, ir::ValueRef v) const {
  const ir::ValueRef r = root_of(graph_, v);
  const Tensor& root = slots[slot(r)];
  if (r == v) return root;
  const TensorMeta& m = graph_.info(v);
  const TensorMeta& rm = graph_.info(r);
  return Tensor(std::make_shared<TensorImpl>(
      root.impl()->storage(), root.storage_offset() + m.storage_offset - rm.storage_offset, m.sizes,
      m.strides, m.dtype));
}

void CompiledInductorGraph::check_indices(int32_t node, std::span<Tensor> slots) const {
  const ir::Node& n = graph_.nodes[static_cast<size_t>(node)];
  // (An empty result reads no row: eager does not check its indices either.)
  if (checked_numel(n.outputs[0].sizes, "inductor") == 0) return;
  const Shape& table = graph_.info(n.inputs[0]).sizes;
  const int64_t dim = inductor::indexed_dim(graph_, n);
  ops::check_index_bounds(n.op->name.data(), value(slots, n.inputs[1]).contiguous(),
                          table[static_cast<size_t>(dim)], dim);
}

Attrs CompiledInductorGraph::attrs_this_call(int32_t node,
                                             std::span<const int64_t> runtime_values) const {
  Attrs patched = graph_.nodes[static_cast<size_t>(node)].attrs;
  for (size_t r = 0; r < graph_.runtime_attrs.size(); ++r)
    if (graph_.runtime_attrs[r].node == node)
      patched = ir::with_attr(patched, static_cast<size_t>(graph_.runtime_attrs[r].attr),
                              runtime_values[r]);
  return patched;
}

void CompiledInductorGraph::run_extern(int32_t node, std::span<Tensor> slots,
                                       std::span<const int64_t> runtime_values) const {
  const ir::Node& n = graph_.nodes[static_cast<size_t>(node)];
  std::vector<Tensor> ins;
  ins.reserve(n.inputs.size());
  for (ir::ValueRef v : n.inputs) ins.push_back(value(slots, v));
  const Attrs* attrs = &n.attrs;
  Attrs patched;
  if (!runtime_values.empty() && n.op->kind == OpKind::Random) {
    patched = attrs_this_call(node, runtime_values);
    attrs = &patched;
  }
  Tensor* out = &slots[plan_.slot_of[static_cast<size_t>(node)]];
  const auto m = static_cast<int>(n.outputs.size());
  const bool direct = n.op->kind != OpKind::Opaque && n.op->kind != OpKind::DataDependent;
  if (direct && verified_.load(std::memory_order_acquire)) {
    run_kernel_fresh(OpCall{*n.op, ins, *attrs}, n.outputs,
                     std::span<Tensor>(out, static_cast<size_t>(m)));
    return;
  }
  // First run (or an op that allocates its own results): dispatch, and check the results
  // against the metadata the graph records.
  std::array<Tensor, kMaxOpOutputs> results;
  const int got = dispatch_no_autograd(*n.op, ins, *attrs, results);
  KILN_CHECK(got == m, Error, "inductor: node ", node, " (", n.op->name, ") made ", got,
             " outputs but the graph records ", m);
  for (int k = 0; k < m; ++k) {
    const TensorMeta& want = n.outputs[static_cast<size_t>(k)];
    const Tensor& r = results[static_cast<size_t>(k)];
    KILN_CHECK(r.dtype() == want.dtype && r.sizes() == want.sizes && r.is_contiguous(), Error,
               "inductor: node ", node, " (", n.op->name, ") output ", k, " is ", r.dtype(),
               r.shape_str(), " but the graph records a contiguous ", want.dtype,
               IntList(want.sizes));
    out[k] = std::move(results[static_cast<size_t>(k)]);
  }
}

std::vector<Tensor> CompiledInductorGraph::run(std::span<const Tensor> inputs,
                                               std::span<const int64_t> runtime_values) const {
  if (tuned_.load(std::memory_order_acquire)) [[likely]]
    return run_steps(inputs, runtime_values, false);
  // The first run of a graph compiled with max-autotune tunes its kernels on the real inputs
  // (other threads calling meanwhile wait for the choices).
  std::lock_guard<std::mutex> lock(tune_mu_);
  if (tuned_.load(std::memory_order_acquire)) return run_steps(inputs, runtime_values, false);
  diagnostics::CompilePhase phase("inductor_autotune");
  std::vector<Tensor> result = run_steps(inputs, runtime_values, true);
  tuning_->save();
  tuned_.store(true, std::memory_order_release);
  return result;
}

std::vector<Tensor> CompiledInductorGraph::run_steps(std::span<const Tensor> inputs,
                                                     std::span<const int64_t> runtime_values,
                                                     bool tune) const {
  const ir::Graph& g = graph_;
  KILN_CHECK(inputs.size() == static_cast<size_t>(g.num_inputs()), Error,
             "inductor: the graph takes ", g.num_inputs(), " inputs, got ", inputs.size());
  InterceptorScope no_interceptor(nullptr);
  AutoGradMode no_grad(false);
  StackTensors<8> slot_list(plan_.num_slots);  // (this runs on every call)
  const std::span<Tensor> slots = slot_list.span();
  for (const inductor::RunPlan::Placeholder& ph : plan_.placeholders) {
    const Tensor& t = inputs[static_cast<size_t>(ph.input)];
    const TensorMeta& want = g.nodes[static_cast<size_t>(ph.node)].outputs[0];
    KILN_CHECK(t.defined() && t.dtype() == want.dtype && t.sizes() == want.sizes &&
                   inductor::same_addressing(want.sizes, t.strides(), want.strides),
               Error, "inductor: input ", ph.input, " is ",
               t.defined()
                   ? detail::concat(t.dtype(), t.shape_str(), " strides ", IntList(t.strides()))
                   : "undefined",
               " but the graph was compiled for ", want.dtype, IntList(want.sizes), " strides ",
               IntList(want.strides));
    slots[plan_.slot_of[static_cast<size_t>(ph.node)]] = t;
  }
  for (const auto& [s, t] : plan_.constants) slots[s] = t;
  SmallVector<char*, 16> buffers;
  inductor::GraphProfile* const profile = tune ? nullptr : profile_.get();
  // (The clock is read only while profiling: this loop runs on every call.)
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = profile ? Clock::now() : Clock::time_point{};
  for (size_t k = 0; k < schedule_.steps.size(); ++k) {
    const Step& st = schedule_.steps[k];
    const Clock::time_point step_start = profile ? Clock::now() : run_start;
    if (st.kind == Step::Kind::Extern) {
      run_extern(st.index, slots, runtime_values);
    } else {
      const Kernel& kernel = schedule_.kernels[static_cast<size_t>(st.index)];
      buffers.clear();
      const auto ki = static_cast<size_t>(st.index);
      for (size_t o = 0; o < kernel.outputs.size(); ++o) {
        const TensorMeta& m = g.info(kernel.outputs[o].value);
        Tensor& t = slots[slot(kernel.outputs[o].value)];
        // (Not while tuning: the kernel runs again and must find its inputs unchanged.)
        const bool retuned = tune && tuning_->needs_tuning(ki);
        const int64_t donor = retuned ? -1 : plan_.donor_slot[ki][o];
        const std::optional<inductor::RunPlan::InPlaceWrite>& write = plan_.in_place[ki][o];
        if (write && !retuned && inductor::RunPlan::can_write_in_place(*write, inputs)) {
          const Tensor& target = inputs[static_cast<size_t>(write->input)];
          t = Tensor(std::make_shared<TensorImpl>(target.impl()->storage(), target.storage_offset(),
                                                  m.sizes, contiguous_strides(m.sizes), m.dtype));
        } else if (donor >= 0 && exclusively_owned(slots[static_cast<size_t>(donor)])) {
          t = slots[static_cast<size_t>(donor)];  // the donor's slot is released after this step
        } else {
          t = make_tensor(m.sizes, m.dtype);
        }
        buffers.push_back(static_cast<char*>(t.data_ptr()));
      }
      for (size_t i = 0; i < kernel.inputs.size(); ++i)
        buffers.push_back(static_cast<char*>(slots[slot(kernel.inputs[i].root)].data_ptr()) +
                          plan_.input_offsets[ki][i]);
      // (Before the kernel runs, tuned or not: it must not read outside a table.)
      for (int32_t node : plan_.kernel_indirect_loads[ki]) check_indices(node, slots);
      if (tune && tuning_->needs_tuning(ki)) tuning_->tune(ki, kernel_fns_[ki], buffers.data());
      KernelGrainScope grain(tuning_->grain(ki));
      const Attrs* const* attrs = plan_.kernel_attrs[ki].data();
      // A kernel drawing random numbers draws with this call's seeds and offsets.
      std::vector<Attrs> random_attrs;
      std::vector<const Attrs*> attrs_now;
      if (!runtime_values.empty() && plan_.kernel_draws[ki]) [[unlikely]] {
        attrs_now = plan_.kernel_attrs[ki];
        random_attrs.reserve(kernel.ops.size());
        for (size_t j = 0; j < kernel.ops.size(); ++j)
          if (kernel.ops[j].op->kind == OpKind::Random) {
            random_attrs.push_back(attrs_this_call(kernel.ops[j].node, runtime_values));
            attrs_now[j] = &random_attrs.back();
          }
        attrs = attrs_now.data();
      }
      kernel_fns_[ki](buffers.data(), attrs, plan_.kernel_shapes[ki].data());
      if (autograd::inference_mode()) [[unlikely]]
        for (const Kernel::Output& o : kernel.outputs)
          slots[slot(o.value)].impl()->set_inference(true);
    }
    if (profile) [[unlikely]]
      profile->add_step(k, nanoseconds_since(step_start));
    for (size_t s : plan_.release_after[k]) slots[s] = Tensor();
  }
  verified_.store(true, std::memory_order_release);
  std::vector<Tensor> result;
  result.reserve(g.outputs.size());
  for (ir::ValueRef v : g.outputs) result.push_back(value(slots, v));
  if (profile) [[unlikely]]
    profile->add_run(nanoseconds_since(run_start));
  return result;
}

}  // namespace

Backend make_eager_backend();  // backends/eager/eager.cpp

Backend make_inductor_backend(bool max_autotune) {
  return [max_autotune](const ir::Graph& graph,
                        std::span<const TensorMeta> inputs) -> CompiledGraph {
    std::shared_ptr<const CompiledInductorGraph> compiled;
    try {
      compiled = std::make_shared<const CompiledInductorGraph>(graph, max_autotune);
    } catch (const inductor::CompileTimeoutError& e) {
      // As when no compiler exists: the graph runs, with the eager kernels.
      static std::once_flag warned;
      std::call_once(warned, [&] {
        std::cerr << "[kiln] warning: " << e.what()
                  << ". This graph (and any other whose compile runs out of time) runs with the "
                     "eager kernels instead.\n";
      });
      return make_eager_backend()(graph, inputs);
    }
    return [compiled](std::span<const Tensor> inputs, std::span<const int64_t> runtime_values) {
      return compiled->run(inputs, runtime_values);
    };
  };
}

InductorCounts inductor_counts(const ir::Graph& graph) {
  const inductor::ScheduleSummary s = inductor::summarize(graph);
  return {s.kernels, s.extern_calls};
}

}  // namespace kiln::backends

namespace kiln::inductor {
Backend source_collecting_backend(std::vector<std::string>& sources) {
  // AOT autograd around the collector, as "inductor" is around the code generator: the same
  // graphs reach it (forward and backward halves, backward() inside traced into the graph).
  return aot_autograd([&sources, eager = backends::make_eager_backend()](
                          const ir::Graph& g, std::span<const TensorMeta> infos) {
    try {
      const LoweredGraph lowered = lower_graph(g);
      if (!lowered.schedule.kernels.empty())
        sources.push_back(render_cpp(lowered.graph, lowered.schedule, compiling_dynamic_graph()));
    } catch (const Error&) {
      // the real run meets and reports it
    }
    return eager(g, infos);
  });
}
}  // namespace kiln::inductor
