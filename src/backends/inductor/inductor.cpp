// The "inductor" backend: schedule (fuse pointwise ops into kernels), render C++, compile and
// load it, and run the schedule — generated kernels and extern calls to the eager kernels — on
// a plan of buffers freed after their last reader. Mode "max-autotune" also times each large
// kernel on one thread and on all of them at its first run and keeps the faster (kept on disk
// beside the module).
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
#include "backends/inductor/cpp_compiler.h"
#include "backends/inductor/cpp_render.h"
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/lower.h"
#include "backends/inductor/module_cache.h"
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
using inductor::KernelGrainScope;
using inductor::Schedule;
using inductor::Step;
using KernelFn = void (*)(char* const* buffers, const Attrs* const* attrs, const int64_t* shape);

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

// Kernels smaller than this are not tuned: a parallel region costs more than they take.
constexpr int64_t kMinTunedElements = 4096;

// A graph compiled by inductor: the schedule, the loaded kernels, and the run plan.
class CompiledInductorGraph {
 public:
  CompiledInductorGraph(const ir::Graph& graph, bool max_autotune) {
    inductor::LoweredGraph lowered = inductor::lower_graph(graph);
    graph_ = std::move(lowered.graph);
    schedule_ = std::move(lowered.schedule);
    plan();
    if (!schedule_.kernels.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      source_ = renderer_.render(graph_, schedule_);
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
      kernel_grain_.assign(schedule_.kernels.size(), 0);
      if (max_autotune) load_tuning();
    }
    if (inductor::step_profiling()) profile_ = register_profile();
    if (diagnostics::wants_backend_output()) {
      int64_t externs = 0;
      for (const Step& st : schedule_.steps) externs += st.kind == Step::Kind::Extern;
      diagnostics::note_backend_count("inductor_kernels",
                                      static_cast<int64_t>(schedule_.kernels.size()));
      diagnostics::note_backend_count("inductor_extern_calls", externs);
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
  // Slots, liveness, attribute pointers and constants, computed once.
  void plan();
  void plan_donations();
  void plan_input_writes(const std::vector<int64_t>& last_read);
  struct InPlaceWrite;
  static bool can_write_in_place(const InPlaceWrite& write, std::span<const Tensor> inputs);
  // The slot of a value that is a tensor between steps (see plan()).
  size_t slot(ir::ValueRef v) const { return slot_of_[static_cast<size_t>(v.node)] + v.output; }
  static constexpr size_t kNoSlot = std::numeric_limits<size_t>::max();  // computed in a kernel
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

  // max-autotune. A kernel is tuned when it has kMinTunedElements or more; the choices are kept
  // in <module>.tune, one line per kernel: threads, elements, kernel name, grain.
  // (A column kernel splits its work as the eager reduction does, whatever the grain.)
  bool needs_tuning(size_t kernel) const {
    return kernel_shapes_[kernel][0] >= kMinTunedElements && get_num_threads() > 1 &&
           !schedule_.kernels[kernel].folds_columns();
  }
  std::string tuning_key(size_t kernel) const {
    return detail::concat(get_num_threads(), " ", kernel_shapes_[kernel][0], " ",
                          schedule_.kernels[kernel].name);
  }
  void tune_kernel(size_t kernel, char* const* buffers) const;
  // KILN_INDUCTOR_PROFILE: a label per step for the report at exit.
  std::shared_ptr<inductor::GraphProfile> register_profile() const;
  void load_tuning();
  void save_tuning() const;
  // The cache file of the tuning choices: beside the module, "<module file>.tune".
  std::string tuning_file() const {
    return std::filesystem::path(module_->path()).filename().string() + ".tune";
  }

  ir::Graph graph_;
  Schedule schedule_;
  const inductor::KernelRenderer& renderer_ = inductor::cpp_renderer();  // the C++ target
  std::string source_;
  std::shared_ptr<inductor::LoadedModule> module_;
  std::vector<KernelFn> kernel_fns_;
  std::vector<size_t> slot_of_;
  size_t num_slots_ = 0;
  struct Placeholder {
    int32_t node;  // its meta: what the input must be
    int32_t input;
  };
  std::vector<Placeholder> placeholders_;
  std::vector<std::vector<size_t>> release_after_;           // per step: slots dead after it
  std::vector<std::vector<const Attrs*>> kernel_attrs_;      // per kernel, per op
  std::vector<bool> kernel_draws_;                           // per kernel: holds a random op
  std::vector<std::vector<int32_t>> kernel_indirect_loads_;  // per kernel: their nodes
  std::vector<std::vector<int64_t>> kernel_shapes_;          // per kernel: its launch shape
  std::vector<std::vector<int64_t>> input_offsets_;          // per kernel, per input: bytes
  std::vector<std::vector<int64_t>> donor_slot_;  // per kernel, per output: a dying input's, or -1
  // An output computed in the memory of the graph input it is written back to
  // (ir::InputWrite). Other inputs may be the same memory in a call (the tensor read before it
  // was written: a placeholder of its own); whether they are is checked per run. One of
  // `late_inputs` (read after the kernel, or by it elsewhere than where it writes) must not
  // share the memory; one of `same_place_inputs` (read by the kernel only where it writes) may,
  // if it starts where the target does (then it is the same elements).
  struct InPlaceWrite {
    int32_t input;
    std::vector<int32_t> late_inputs, same_place_inputs;
  };
  std::vector<std::vector<std::optional<InPlaceWrite>>> in_place_;  // per kernel, per output
  std::vector<std::pair<size_t, Tensor>> constants_;                // slot, value
  mutable std::atomic<bool> verified_{false};
  // max-autotune: per kernel, the grain it runs with (0: its own); written once, by the first
  // run (under tune_mu_), before tuned_ is set.
  mutable std::vector<int64_t> kernel_grain_;
  mutable std::atomic<bool> tuned_{true};
  mutable std::mutex tune_mu_;
  std::shared_ptr<inductor::GraphProfile> profile_;  // null unless KILN_INDUCTOR_PROFILE is set
};

bool CompiledInductorGraph::can_write_in_place(const InPlaceWrite& write,
                                               std::span<const Tensor> inputs) {
  const Tensor& target = inputs[static_cast<size_t>(write.input)];
  if (!target.is_contiguous()) return false;
  const Storage* memory = target.impl()->storage_if_concrete().get();
  auto shares = [&](int32_t a) {
    return inputs[static_cast<size_t>(a)].impl()->storage_if_concrete().get() == memory;
  };
  for (int32_t a : write.late_inputs)
    if (shares(a)) return false;
  for (int32_t a : write.same_place_inputs)
    if (shares(a) && (inputs[static_cast<size_t>(a)].storage_offset() != target.storage_offset() ||
                      !inputs[static_cast<size_t>(a)].is_contiguous()))
      return false;
  return true;
}

std::shared_ptr<inductor::GraphProfile> CompiledInductorGraph::register_profile() const {
  static std::atomic<int> graphs{0};
  const std::string* fn = diagnostics::tls_compiling_function;
  const std::string title =
      detail::concat("'", fn ? *fn : std::string("?"), "', graph ", ++graphs, " compiled");
  std::vector<inductor::GraphProfile::StepInfo> steps;
  for (const Step& st : schedule_.steps) {
    if (st.kind == Step::Kind::Kernel) {
      const Kernel& k = schedule_.kernels[static_cast<size_t>(st.index)];
      std::string ops;
      int64_t count = 0;  // nodes (a layer_norm's statistics are ops of their own)
      for (const inductor::KernelOp& op : k.ops) {
        if (op.output != 0) continue;
        if (count < 4) ops += detail::concat(count ? ", " : "", op.op->name);
        ++count;
      }
      if (count > 4) ops += ", …";
      steps.push_back(
          {detail::concat(k.name, ": ", ops, " (", count, " ops) over ", IntList(k.ranges)),
           "generated kernels"});
    } else {
      const ir::Node& n = graph_.nodes[static_cast<size_t>(st.index)];
      steps.push_back({detail::concat("extern ", n.op->name, " %", st.index, " -> ",
                                      n.outputs[0].dtype, IntList(n.outputs[0].sizes)),
                       detail::concat("extern ", n.op->name)});
    }
  }
  return inductor::register_graph_profile(title, std::move(steps));
}

void CompiledInductorGraph::plan() {
  const ir::Graph& g = graph_;
  // Slots only for the values that are tensors between steps (inputs, constants, extern calls'
  // and kernels' outputs; views are made over their roots): a value computed inside a kernel has
  // none, so a call of a graph of 100 fused ops fills a handful of slots, not 100.
  std::vector<bool> materialized(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    materialized[i] =
        g.nodes[i].kind == ir::NodeKind::Placeholder || g.nodes[i].kind == ir::NodeKind::Constant;
  for (const Step& st : schedule_.steps) {
    if (st.kind == Step::Kind::Extern) {
      materialized[static_cast<size_t>(st.index)] = true;
    } else {
      for (const Kernel::Output& o : schedule_.kernels[static_cast<size_t>(st.index)].outputs)
        materialized[static_cast<size_t>(o.value.node)] = true;
    }
  }
  slot_of_.assign(g.nodes.size(), kNoSlot);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!materialized[i]) continue;
    slot_of_[i] = num_slots_;
    num_slots_ += g.nodes[i].outputs.size();
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Constant)
      constants_.emplace_back(slot_of_[i], ir::constant_value(n));
    if (n.kind == ir::NodeKind::Placeholder)
      placeholders_.push_back({static_cast<int32_t>(i), n.input_index});
  }
  // Last reader of each root slot (graph outputs live to the end).
  std::vector<int64_t> last(num_slots_, -1);
  const auto steps = static_cast<int64_t>(schedule_.steps.size());
  auto read = [&](ir::ValueRef v, int64_t step) {
    const size_t s = slot(root_of(g, v));
    last[s] = std::max(last[s], step);
  };
  for (int64_t k = 0; k < steps; ++k) {
    const Step& st = schedule_.steps[static_cast<size_t>(k)];
    if (st.kind == Step::Kind::Kernel) {
      for (const inductor::KernelInput& in :
           schedule_.kernels[static_cast<size_t>(st.index)].inputs)
        read(in.root, k);
    } else {
      for (ir::ValueRef v : g.nodes[static_cast<size_t>(st.index)].inputs) read(v, k);
    }
  }
  for (ir::ValueRef v : g.outputs) read(v, steps);
  release_after_.resize(schedule_.steps.size());
  for (size_t s = 0; s < num_slots_; ++s)
    if (last[s] >= 0 && last[s] < steps) release_after_[static_cast<size_t>(last[s])].push_back(s);
  for (const Kernel& k : schedule_.kernels) {
    std::vector<const Attrs*> attrs;
    for (const inductor::KernelOp& op : k.ops)
      attrs.push_back(&g.nodes[static_cast<size_t>(op.node)].attrs);
    kernel_attrs_.push_back(std::move(attrs));
    kernel_draws_.push_back(
        std::any_of(k.ops.begin(), k.ops.end(),
                    [](const inductor::KernelOp& op) { return op.op->kind == OpKind::Random; }));
    std::vector<int32_t> indirect;
    for (const inductor::KernelOp& op : k.ops)
      if (op.op->kind == OpKind::Indexing) indirect.push_back(op.node);
    kernel_indirect_loads_.push_back(std::move(indirect));
    kernel_shapes_.push_back(renderer_.launch_shape(k));
    std::vector<int64_t> offsets;
    for (const inductor::KernelInput& in : k.inputs)
      offsets.push_back(in.offset * itemsize(in.dtype));
    input_offsets_.push_back(std::move(offsets));
  }
  plan_donations();
  plan_input_writes(last);
}

// Whether kernel input i is read only at the element being written by op `writer`: the whole
// of its root, laid out as the kernel's iteration (one element per iteration, no other view of
// the root in the kernel), and read by no op after the writer. Then the writer may write its
// result into the input's memory: every element is read before it is overwritten.
bool read_only_where_written(const Kernel& kernel, size_t i, size_t writer, const ir::Graph& g) {
  const inductor::KernelInput& in = kernel.inputs[i];
  const TensorMeta& root = g.info(in.root);
  // (A pad, cat or roll read through a window reads its pieces elsewhere than where it writes;
  // an indirect load, anywhere.)
  if (in.windowed() || in.index >= 0 || root.strides != contiguous_strides(root.sizes) ||
      in.offset != 0 || in.strides != contiguous_strides(kernel.ranges))
    return false;
  for (size_t other = 0; other < kernel.inputs.size(); ++other)
    if (other != i && kernel.inputs[other].root == in.root) return false;
  // No op after the writer reads it, nor a column reduction anywhere: those fold a batch of rows
  // after the batch's other ops have written them.
  for (size_t j = 0; j < kernel.ops.size(); ++j) {
    if (j <= writer && kernel.ops[j].role != inductor::KernelOp::Role::ColumnFold) continue;
    for (const inductor::Operand& a : kernel.ops[j].args)
      if (a.kind == inductor::Operand::Kind::Input && a.index == static_cast<int32_t>(i))
        return false;
  }
  return true;
}

void CompiledInductorGraph::plan_input_writes(const std::vector<int64_t>& last_read) {
  const ir::Graph& g = graph_;
  in_place_.resize(schedule_.kernels.size());
  for (size_t k = 0; k < schedule_.kernels.size(); ++k)
    in_place_[k].resize(schedule_.kernels[k].outputs.size());
  std::vector<int32_t> placeholder_of(static_cast<size_t>(g.num_inputs()), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == ir::NodeKind::Placeholder)
      placeholder_of[static_cast<size_t>(g.nodes[i].input_index)] = static_cast<int32_t>(i);
  for (const ir::InputWrite& w : g.input_writes) {
    if (w.output < 0 || static_cast<size_t>(w.output) >= g.outputs.size() || w.input < 0 ||
        w.input >= g.num_inputs())
      continue;
    const ir::ValueRef v = g.outputs[static_cast<size_t>(w.output)];
    if (std::count(g.outputs.begin(), g.outputs.end(), v) != 1) continue;  // returned twice
    const ir::ValueRef target{placeholder_of[static_cast<size_t>(w.input)], 0};
    const TensorMeta& tm = g.info(target);
    const TensorMeta& vm = g.info(v);
    if (tm.dtype != vm.dtype || tm.strides != contiguous_strides(tm.sizes) ||
        checked_numel(tm.sizes, "inductor") != checked_numel(vm.sizes, "inductor"))
      continue;
    const size_t target_slot = slot(target);
    for (size_t step = 0; step < schedule_.steps.size(); ++step) {
      const Step& st = schedule_.steps[step];
      if (st.kind != Step::Kind::Kernel) continue;
      const Kernel& kernel = schedule_.kernels[static_cast<size_t>(st.index)];
      for (size_t o = 0; o < kernel.outputs.size(); ++o) {
        if (kernel.outputs[o].value != v) continue;
        // Nothing after this kernel reads the input's old value, and the kernel itself only
        // where it writes.
        bool ok = last_read[target_slot] <= static_cast<int64_t>(step);
        for (size_t i = 0; ok && i < kernel.inputs.size(); ++i)
          if (kernel.inputs[i].root == target)
            ok = read_only_where_written(kernel, i, static_cast<size_t>(kernel.outputs[o].op), g);
        if (!ok) continue;
        InPlaceWrite plan{w.input, {}, {}};
        for (size_t a = 0; a < placeholder_of.size(); ++a) {
          const ir::ValueRef other{placeholder_of[a], 0};
          const int64_t last = last_read[slot(other)];
          if (static_cast<int32_t>(a) == w.input || last < static_cast<int64_t>(step)) continue;
          const TensorMeta& om = g.info(other);
          bool same_place =
              last == static_cast<int64_t>(step) && om.strides == contiguous_strides(om.sizes) &&
              checked_numel(om.sizes, "inductor") == checked_numel(tm.sizes, "inductor");
          for (size_t i = 0; same_place && i < kernel.inputs.size(); ++i)
            if (kernel.inputs[i].root == other)
              same_place =
                  read_only_where_written(kernel, i, static_cast<size_t>(kernel.outputs[o].op), g);
          (same_place ? plan.same_place_inputs : plan.late_inputs)
              .push_back(static_cast<int32_t>(a));
        }
        in_place_[static_cast<size_t>(st.index)][o] = std::move(plan);
      }
    }
  }
}

// A kernel output may take the buffer of an input that dies at the kernel instead of a fresh
// one (less memory, and the output lands in cache lines the kernel just read) when writing it
// in place cannot change what the kernel reads: the input is a whole intermediate of the
// output's dtype and shape, read only at the element being written (no other view of it in the
// kernel), and no op after the one writing the output reads it. Whether the buffer is really
// unshared is checked when the kernel runs.
void CompiledInductorGraph::plan_donations() {
  const ir::Graph& g = graph_;
  donor_slot_.resize(schedule_.kernels.size());
  for (size_t k = 0; k < schedule_.steps.size(); ++k) {
    const Step& st = schedule_.steps[k];
    if (st.kind != Step::Kind::Kernel) continue;
    const Kernel& kernel = schedule_.kernels[static_cast<size_t>(st.index)];
    std::vector<int64_t>& donors = donor_slot_[static_cast<size_t>(st.index)];
    donors.assign(kernel.outputs.size(), -1);
    const Shape elementwise = contiguous_strides(kernel.ranges);
    std::vector<bool> taken(kernel.inputs.size(), false);
    for (size_t o = 0; o < kernel.outputs.size(); ++o) {
      const auto writer = static_cast<size_t>(kernel.outputs[o].op);
      const TensorMeta& out = g.info(kernel.outputs[o].value);
      for (size_t i = 0; i < kernel.inputs.size() && donors[o] < 0; ++i) {
        const inductor::KernelInput& in = kernel.inputs[i];
        const ir::Node& producer = g.nodes[static_cast<size_t>(in.root.node)];
        const TensorMeta& root = g.info(in.root);
        const size_t s = slot(in.root);
        const bool ok = !taken[i] && producer.kind == ir::NodeKind::Call &&
                        root.dtype == out.dtype && root.sizes == out.sizes &&
                        std::find(release_after_[k].begin(), release_after_[k].end(), s) !=
                            release_after_[k].end() &&
                        read_only_where_written(kernel, i, writer, g);
        if (!ok) continue;
        taken[i] = true;
        donors[o] = static_cast<int64_t>(s);
      }
    }
  }
}

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
  Tensor* out = &slots[slot_of_[static_cast<size_t>(node)]];
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
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> result = run_steps(inputs, runtime_values, true);
  save_tuning();
  tuned_.store(true, std::memory_order_release);
  diagnostics::add_compile_time("inductor_autotune", detail::seconds_since(t0));
  return result;
}

void CompiledInductorGraph::tune_kernel(size_t kernel, char* const* buffers) const {
  // Kernels are pure functions of their inputs into fresh outputs, so running one again is
  // harmless. Each way: one warm-up, then the fastest of three.
  auto fastest = [&](int64_t grain) {
    KernelGrainScope scope(grain);
    double best = 1e300;
    for (int rep = 0; rep < 4; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      kernel_fns_[kernel](buffers, kernel_attrs_[kernel].data(), kernel_shapes_[kernel].data());
      if (rep > 0) best = std::min(best, detail::seconds_since(t0));
    }
    return best;
  };
  const double serial = fastest(inductor::kGrainSerial);
  const double parallel = fastest(inductor::kGrainParallel);
  kernel_grain_[kernel] = parallel < serial ? inductor::kGrainParallel : inductor::kGrainSerial;
  if (log_enabled(LogTopic::OutputCode))
    diagnostics::log(
        LogTopic::OutputCode,
        detail::concat("inductor max-autotune: ", schedule_.kernels[kernel].name, " (",
                       kernel_shapes_[kernel][0], " elements): one thread ", serial * 1e6, " us, ",
                       get_num_threads(), " threads ", parallel * 1e6, " us -> ",
                       parallel < serial ? "threads" : "one thread"));
}

void CompiledInductorGraph::load_tuning() {
  bool complete = true;
  const std::optional<std::string> text = inductor::ModuleFolder::instance().read(tuning_file());
  std::istringstream in(text.value_or(""));
  std::map<std::string, int64_t> known;
  for (std::string line; std::getline(in, line);) {
    // "<threads> <elements> <kernel> <grain>"; anything else (a torn write) is skipped.
    const size_t last = line.rfind(' ');
    if (last == std::string::npos) continue;
    const std::string grain = line.substr(last + 1);
    if (grain == std::to_string(inductor::kGrainParallel))
      known[line.substr(0, last)] = inductor::kGrainParallel;
    else if (grain == std::to_string(inductor::kGrainSerial))
      known[line.substr(0, last)] = inductor::kGrainSerial;
  }
  for (size_t k = 0; k < schedule_.kernels.size(); ++k) {
    if (!needs_tuning(k)) continue;
    auto it = known.find(tuning_key(k));
    if (it != known.end())
      kernel_grain_[k] = it->second;
    else
      complete = false;
  }
  tuned_.store(complete, std::memory_order_release);
}

void CompiledInductorGraph::save_tuning() const {
  // Merged with what is there (the module may serve other shapes); written to a temporary file
  // and renamed, so a reader never sees half a file. A cache that cannot be written keeps the
  // choices in this process only.
  inductor::ModuleFolder& folder = inductor::ModuleFolder::instance();
  std::map<std::string, std::string> lines;
  {
    std::istringstream in(folder.read(tuning_file()).value_or(""));
    for (std::string line; std::getline(in, line);)
      if (const size_t last = line.rfind(' '); last != std::string::npos)
        lines[line.substr(0, last)] = line;
  }
  for (size_t k = 0; k < schedule_.kernels.size(); ++k)
    if (needs_tuning(k) && kernel_grain_[k] != 0)
      lines[tuning_key(k)] = tuning_key(k) + " " + std::to_string(kernel_grain_[k]);
  std::string text;
  for (const auto& [key, line] : lines) text += line + "\n";
  try {
    folder.write_atomically(tuning_file(), text);
  } catch (const Error&) {
    // A full or read-only disk: the choices stay in this process.
  }
}

std::vector<Tensor> CompiledInductorGraph::run_steps(std::span<const Tensor> inputs,
                                                     std::span<const int64_t> runtime_values,
                                                     bool tune) const {
  const ir::Graph& g = graph_;
  KILN_CHECK(inputs.size() == static_cast<size_t>(g.num_inputs()), Error,
             "inductor: the graph takes ", g.num_inputs(), " inputs, got ", inputs.size());
  InterceptorScope no_interceptor(nullptr);
  AutoGradMode no_grad(false);
  StackTensors<8> slot_list(num_slots_);  // (this runs on every call)
  const std::span<Tensor> slots = slot_list.span();
  for (const Placeholder& ph : placeholders_) {
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
    slots[slot_of_[static_cast<size_t>(ph.node)]] = t;
  }
  for (const auto& [s, t] : constants_) slots[s] = t;
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
        const bool retuned = tune && needs_tuning(ki);
        const int64_t donor = retuned ? -1 : donor_slot_[ki][o];
        const std::optional<InPlaceWrite>& write = in_place_[ki][o];
        if (write && !retuned && can_write_in_place(*write, inputs)) {
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
                          input_offsets_[ki][i]);
      // (Before the kernel runs, tuned or not: it must not read outside a table.)
      for (int32_t node : kernel_indirect_loads_[ki]) check_indices(node, slots);
      if (tune && needs_tuning(ki)) tune_kernel(ki, buffers.data());
      KernelGrainScope grain(kernel_grain_[ki]);
      const Attrs* const* attrs = kernel_attrs_[ki].data();
      // A kernel drawing random numbers draws with this call's seeds and offsets.
      std::vector<Attrs> random_attrs;
      std::vector<const Attrs*> attrs_now;
      if (!runtime_values.empty() && kernel_draws_[ki]) [[unlikely]] {
        attrs_now = kernel_attrs_[ki];
        random_attrs.reserve(kernel.ops.size());
        for (size_t j = 0; j < kernel.ops.size(); ++j)
          if (kernel.ops[j].op->kind == OpKind::Random) {
            random_attrs.push_back(attrs_this_call(kernel.ops[j].node, runtime_values));
            attrs_now[j] = &random_attrs.back();
          }
        attrs = attrs_now.data();
      }
      kernel_fns_[ki](buffers.data(), attrs, kernel_shapes_[ki].data());
      if (autograd::inference_mode()) [[unlikely]]
        for (const Kernel::Output& o : kernel.outputs)
          slots[slot(o.value)].impl()->set_inference(true);
    }
    if (profile) [[unlikely]]
      profile->add_step(k, nanoseconds_since(step_start));
    for (size_t s : release_after_[k]) slots[s] = Tensor();
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
        sources.push_back(render_cpp(lowered.graph, lowered.schedule));
    } catch (const Error&) {
      // the real run meets and reports it
    }
    return eager(g, infos);
  });
}
}  // namespace kiln::inductor
