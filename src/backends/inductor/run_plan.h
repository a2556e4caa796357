// How a compiled graph's steps run, decided once when it is compiled: where each value lives
// between steps (slots: inputs, constants, extern calls' and kernels' outputs; a value computed
// inside a kernel has none, and a view is made over its root's slot), when each slot dies, which
// kernel outputs take the buffer of an input that dies at the kernel (donation) or are computed
// in the memory of the graph input they are written back to, and what each kernel is launched
// with. Plain data from the lowered graph and its schedule: no compiled code is involved, so
// the tests build plans from graph text.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backends/inductor/cpp_render.h"
#include "backends/inductor/schedule.h"
#include "kiln/ir/graph.h"

namespace kiln::inductor {

struct RunPlan {
  static constexpr size_t kNoSlot = std::numeric_limits<size_t>::max();  // computed in a kernel
  std::vector<size_t> slot_of;  // per node: its first output's slot, or kNoSlot
  size_t num_slots = 0;
  // The slot of a value that is a tensor between steps.
  size_t slot(ir::ValueRef v) const { return slot_of[static_cast<size_t>(v.node)] + v.output; }

  struct Placeholder {
    int32_t node;  // its meta: what the input must be
    int32_t input;
  };
  std::vector<Placeholder> placeholders;
  std::vector<std::pair<size_t, Tensor>> constants;  // slot, value
  std::vector<std::vector<size_t>> release_after;    // per step: slots dead after it

  // Per kernel.
  std::vector<std::vector<const Attrs*>> kernel_attrs;      // per op (pointing into the graph)
  std::vector<bool> kernel_draws;                           // holds a random op
  std::vector<std::vector<int32_t>> kernel_indirect_loads;  // their nodes
  std::vector<std::vector<int64_t>> kernel_shapes;          // its launch shape
  std::vector<std::vector<int64_t>> input_offsets;          // per input: bytes
  std::vector<std::vector<int64_t>> donor_slot;  // per output: a dying input's slot, or -1

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
  std::vector<std::vector<std::optional<InPlaceWrite>>> in_place;  // per kernel, per output
  // Whether `write` may be done in this call's memory of its input.
  static bool can_write_in_place(const InPlaceWrite& write, std::span<const Tensor> inputs);
};

// The plan of `graph` (lowered) run as `schedule`, its kernels launched as `renderer` renders
// them. The plan points into the graph (kernel_attrs): the graph must outlive it, unmoved.
RunPlan make_run_plan(const ir::Graph& graph, const Schedule& schedule,
                      const KernelRenderer& renderer);

// Whether kernel input i is read only at the element being written by op `writer` (see
// run_plan.cpp): then the writer may write its result into the input's memory.
bool read_only_where_written(const Kernel& kernel, size_t i, size_t writer, const ir::Graph& g);

}  // namespace kiln::inductor
