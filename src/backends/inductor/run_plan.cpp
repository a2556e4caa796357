#include "backends/inductor/run_plan.h"

#include <algorithm>

#include "kiln/ir/passes.h"
#include "ops/op_utils.h"

namespace kiln::inductor {

using ir::root_of;

// Whether kernel input i is read only at the element being written by op `writer`: the whole
// of its root, laid out as the kernel's iteration (one element per iteration, no other view of
// the root in the kernel), and read by no op after the writer. Then the writer may write its
// result into the input's memory: every element is read before it is overwritten.
bool read_only_where_written(const Kernel& kernel, size_t i, size_t writer, const ir::Graph& g) {
  const KernelInput& in = kernel.inputs[i];
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
    if (j <= writer && kernel.ops[j].role != KernelOp::Role::ColumnFold) continue;
    for (const Operand& a : kernel.ops[j].args)
      if (a.kind == Operand::Kind::Input && a.index == static_cast<int32_t>(i)) return false;
  }
  return true;
}

namespace {

// A kernel output may take the buffer of an input that dies at the kernel instead of a fresh
// one (less memory, and the output lands in cache lines the kernel just read) when writing it
// in place cannot change what the kernel reads: the input is a whole intermediate of the
// output's dtype and shape, read only at the element being written (no other view of it in the
// kernel), and no op after the one writing the output reads it. Whether the buffer is really
// unshared is checked when the kernel runs.
void plan_donations(const ir::Graph& g, const Schedule& s, RunPlan& p) {
  p.donor_slot.resize(s.kernels.size());
  for (size_t k = 0; k < s.steps.size(); ++k) {
    const Step& st = s.steps[k];
    if (st.kind != Step::Kind::Kernel) continue;
    const Kernel& kernel = s.kernels[static_cast<size_t>(st.index)];
    std::vector<int64_t>& donors = p.donor_slot[static_cast<size_t>(st.index)];
    donors.assign(kernel.outputs.size(), -1);
    std::vector<bool> taken(kernel.inputs.size(), false);
    for (size_t o = 0; o < kernel.outputs.size(); ++o) {
      const auto writer = static_cast<size_t>(kernel.outputs[o].op);
      const TensorMeta& out = g.info(kernel.outputs[o].value);
      for (size_t i = 0; i < kernel.inputs.size() && donors[o] < 0; ++i) {
        const KernelInput& in = kernel.inputs[i];
        const ir::Node& producer = g.nodes[static_cast<size_t>(in.root.node)];
        const TensorMeta& root = g.info(in.root);
        const size_t s = p.slot(in.root);
        const bool ok = !taken[i] && producer.kind == ir::NodeKind::Call &&
                        root.dtype == out.dtype && root.sizes == out.sizes &&
                        std::find(p.release_after[k].begin(), p.release_after[k].end(), s) !=
                            p.release_after[k].end() &&
                        read_only_where_written(kernel, i, writer, g);
        if (!ok) continue;
        taken[i] = true;
        donors[o] = static_cast<int64_t>(s);
      }
    }
  }
}

void plan_input_writes(const ir::Graph& g, const Schedule& s, const std::vector<int64_t>& last_read,
                       RunPlan& p) {
  p.in_place.resize(s.kernels.size());
  for (size_t k = 0; k < s.kernels.size(); ++k) p.in_place[k].resize(s.kernels[k].outputs.size());
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
    const size_t target_slot = p.slot(target);
    for (size_t step = 0; step < s.steps.size(); ++step) {
      const Step& st = s.steps[step];
      if (st.kind != Step::Kind::Kernel) continue;
      const Kernel& kernel = s.kernels[static_cast<size_t>(st.index)];
      for (size_t o = 0; o < kernel.outputs.size(); ++o) {
        if (kernel.outputs[o].value != v) continue;
        // Nothing after this kernel reads the input's old value, and the kernel itself only
        // where it writes.
        bool ok = last_read[target_slot] <= static_cast<int64_t>(step);
        for (size_t i = 0; ok && i < kernel.inputs.size(); ++i)
          if (kernel.inputs[i].root == target)
            ok = read_only_where_written(kernel, i, static_cast<size_t>(kernel.outputs[o].op), g);
        if (!ok) continue;
        RunPlan::InPlaceWrite plan{w.input, {}, {}};
        for (size_t a = 0; a < placeholder_of.size(); ++a) {
          const ir::ValueRef other{placeholder_of[a], 0};
          const int64_t last = last_read[p.slot(other)];
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
        p.in_place[static_cast<size_t>(st.index)][o] = std::move(plan);
      }
    }
  }
}

}  // namespace

RunPlan make_run_plan(const ir::Graph& g, const Schedule& s, const KernelRenderer& renderer) {
  RunPlan p;
  // Slots only for the values that are tensors between steps (inputs, constants, extern calls'
  // and kernels' outputs; views are made over their roots): a value computed inside a kernel has
  // none, so a call of a graph of 100 fused ops fills a handful of slots, not 100.
  std::vector<bool> materialized(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    materialized[i] =
        g.nodes[i].kind == ir::NodeKind::Placeholder || g.nodes[i].kind == ir::NodeKind::Constant;
  for (const Step& st : s.steps) {
    if (st.kind == Step::Kind::Extern) {
      materialized[static_cast<size_t>(st.index)] = true;
    } else {
      for (const Kernel::Output& o : s.kernels[static_cast<size_t>(st.index)].outputs)
        materialized[static_cast<size_t>(o.value.node)] = true;
    }
  }
  p.slot_of.assign(g.nodes.size(), RunPlan::kNoSlot);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!materialized[i]) continue;
    p.slot_of[i] = p.num_slots;
    p.num_slots += g.nodes[i].outputs.size();
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind == ir::NodeKind::Constant)
      p.constants.emplace_back(p.slot_of[i], ir::constant_value(n));
    if (n.kind == ir::NodeKind::Placeholder)
      p.placeholders.push_back({static_cast<int32_t>(i), n.input_index});
  }
  // Last reader of each root slot (graph outputs live to the end).
  std::vector<int64_t> last(p.num_slots, -1);
  const auto steps = static_cast<int64_t>(s.steps.size());
  auto read = [&](ir::ValueRef v, int64_t step) {
    const size_t s = p.slot(root_of(g, v));
    last[s] = std::max(last[s], step);
  };
  for (int64_t k = 0; k < steps; ++k) {
    const Step& st = s.steps[static_cast<size_t>(k)];
    if (st.kind == Step::Kind::Kernel) {
      for (const KernelInput& in : s.kernels[static_cast<size_t>(st.index)].inputs)
        read(in.root, k);
    } else {
      for (ir::ValueRef v : g.nodes[static_cast<size_t>(st.index)].inputs) read(v, k);
    }
  }
  for (ir::ValueRef v : g.outputs) read(v, steps);
  p.release_after.resize(s.steps.size());
  for (size_t s = 0; s < p.num_slots; ++s)
    if (last[s] >= 0 && last[s] < steps) p.release_after[static_cast<size_t>(last[s])].push_back(s);
  for (const Kernel& k : s.kernels) {
    std::vector<const Attrs*> attrs;
    for (const KernelOp& op : k.ops) attrs.push_back(&g.nodes[static_cast<size_t>(op.node)].attrs);
    p.kernel_attrs.push_back(std::move(attrs));
    p.kernel_draws.push_back(std::any_of(k.ops.begin(), k.ops.end(), [](const KernelOp& op) {
      return op.op->kind == OpKind::Random;
    }));
    std::vector<int32_t> indirect;
    for (const KernelOp& op : k.ops)
      if (op.op->kind == OpKind::Indexing) indirect.push_back(op.node);
    p.kernel_indirect_loads.push_back(std::move(indirect));
    p.kernel_shapes.push_back(renderer.launch_shape(k));
    std::vector<int64_t> offsets;
    for (const KernelInput& in : k.inputs) offsets.push_back(in.offset * itemsize(in.dtype));
    p.input_offsets.push_back(std::move(offsets));
  }
  plan_donations(g, s, p);
  plan_input_writes(g, s, last, p);
  return p;
}

bool RunPlan::can_write_in_place(const InPlaceWrite& write, std::span<const Tensor> inputs) {
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

}  // namespace kiln::inductor
