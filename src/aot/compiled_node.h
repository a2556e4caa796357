// AOT autograd, step 3: a captured graph compiled as a forward/backward pair (AotPlan), and
// the one autograd node through which its outputs reach the eager autograd engine.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "aot/inline_backward.h"
#include "aot/partition.h"
#include "capture/segment_autograd.h"
#include "diagnostics/diagnostics.h"
#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"

namespace kiln::aot {

// Told of each graph compiled for a plan (see capture::CompiledPartObserver).
using AotPartObserver = capture::CompiledPartObserver;

// A forward graph differentiated at some of its values, partitioned and compiled.
struct AotPlan {
  Partition partition;
  CompiledGraph forward, backward;
  size_t num_outputs = 0;  // the forward graph's own outputs (the saved values follow)
  // Per forward input: which backward output is its gradient (-1: none, i.e. zero).
  std::vector<int32_t> grad_output_of_input;
  // Per forward input: the differentiated values (tangents) an autograd path reaches from it.
  // When none of their gradients arrived, the input's gradient is left undefined, as the eager
  // engine leaves a tensor no gradient reaches (an optimizer then skips it rather than apply
  // decay and momentum to zeros).
  std::vector<std::vector<int32_t>> tangents_of_input;
  std::string missing_derivative;  // see JointGraph
  // Per differentiated value: whether a forward op reads it (its gradient then has parts that
  // the backward computes inside and no hook on the value could see).
  std::vector<bool> used_inside;
  // The backward could not be traced (a derivative formula reads a tensor's value, say): the
  // graph runs op by op with eager autograd instead (run_with_eager_autograd), as torch falls
  // back for what it cannot trace. `why` says what failed.
  bool eager_autograd = false;
  std::string why;

  // The backward of a call in which the tangents `arrived` says are missing did not arrive
  // (missing_tangents.h), compiled on first use by the backward compiler and kept.
  struct PartialBackward {
    CompiledGraph run;
    std::vector<int32_t> output_of;     // per full backward output: its output here, or -1
    std::vector<int32_t> runtime_kept;  // the runtime values it takes (indices into the full's)
  };
  const PartialBackward& backward_without(const std::vector<bool>& arrived) const;
  Backend backward_compiler;
  // Made for a dynamic graph or an instance of one (kiln::compiling_dynamic_graph()): so are the
  // partial backwards, compiled later, during a backward pass.
  bool dynamic = false;
  AotPartObserver observer;  // empty: nobody is looking

  // `compiler` on `graph`, what it produced collected for `observer` (when there is one).
  CompiledGraph compile_part(const std::string& part, const std::string& missing,
                             const Backend& compiler, const ir::Graph& graph) const;

 private:
  mutable std::mutex partial_mutex_;
  mutable std::map<std::vector<bool>, std::unique_ptr<PartialBackward>> partial_;
};

// Runs `graph` op by op through dispatch with autograd recording (ops recorded under no_grad
// stay unrecorded), `runtime_values` in Graph::runtime_attrs order. Returns every node's
// outputs, so that each value's tensor carries its eager autograd history.
std::vector<std::vector<Tensor>> run_with_eager_autograd(const ir::Graph& graph,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const int64_t> runtime_values);

// Traces the joint graph of `forward` at `values`, partitions it with the min-cut and compiles
// both halves (`fw_compiler`, `bw_compiler`), telling `observer` (may be empty) of each.
std::shared_ptr<const AotPlan> compile_plan(const ir::Graph& forward,
                                            std::span<const ir::ValueRef> values,
                                            const Backend& fw_compiler, const Backend& bw_compiler,
                                            AotPartObserver observer = {});

// A copy of a saved input whose memory is about to be overwritten, with the input's strides (at
// storage offset 0): a backward compiled for the input's layout (inductor specializes on
// strides) reads the copy as it would have read the input. Expanded (stride-0) dims stay
// expanded; a layout that cannot be rebuilt so (overlapping strides) gets a contiguous copy,
// which such a backward rejects with a clear error.
Tensor copy_keeping_strides(const Tensor& t);

// The autograd node of one run of a captured graph ("CompiledFunctionBackward", as torch names
// it). While the graph is being captured its outputs that require grad are its outputs (one
// slot per value); when the graph runs, the forward's saved values are handed over and its
// inputs become its edges. Backward runs the compiled backward graph.
class CompiledFunctionNode final : public Node {
 public:
  // `sync`: runs the captured graph now (a backward or a hook reaching the node before it ran).
  explicit CompiledFunctionNode(std::function<void()> sync) : sync_(std::move(sync)) {}
  std::string name() const override { return "CompiledFunctionBackward"; }

  // Capture: `t`, holding graph value `v`, becomes output `slot` of this node.
  uint32_t add_slot(ir::ValueRef v, const Tensor& t);
  ir::ValueRef slot_value(uint32_t slot) const { return slots_[slot]; }
  size_t num_slots() const { return slots_.size(); }
  bool ran() const { return plan_ != nullptr; }

  // The graph ran: `inputs` (its placeholders' tensors) become the edges; `tangent_of_slot`
  // maps each slot to the plan's tangent for it (-1: no gradient can reach it).
  void activate(std::shared_ptr<const AotPlan> plan, std::vector<int32_t> tangent_of_slot,
                std::span<const Tensor> inputs, std::span<const Tensor> saved,
                std::vector<int64_t> runtime_values);
  // The capture was given up: reaching the node is an error saying why.
  void abandon(std::string why);
  // `target` is about to be written in place eagerly: a saved value over its memory is copied
  // first. The partition may save an input or output where eager's formulas saved another
  // value, so a write eager allows must not invalidate what the compiled backward reads.
  void preserve_saved_before_write(const Tensor& target);

  // Inline backward. While the graph is still being captured, a backward() on the capturing
  // thread (without retain_graph or create_graph; not grad()) does not run the graph: the capture
  // traces the node's backward from the derivative formulas into the same graph
  // (InlineBackwardTracer::begin_inline_backward), so that a training step with backward()
  // inside stays one graph. The tracer set here is cleared when its segment ends.
  void set_inline_tracer(InlineBackwardTracer* tracer) { inline_tracer_ = tracer; }
  // The capture takes this node's backward inline: `inputs` (graph inputs that require grad)
  // become its edges, `input_values` their placeholders.
  void begin_inline(std::span<const Tensor> inputs, std::vector<ir::ValueRef> input_values);
  // Its capture's segment ended: the tracer is no longer there to trace with.
  void end_inline();

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  void release_saved() override;
  void before_backward() override;
  size_t add_pre_hook(uint32_t output_nr, TensorHook hook, bool run_last) override;

 private:
  void ensure_ran(const char* what);
  bool inline_allowed() const;
  void check_grad_inputs_observable() const;
  std::vector<Tensor> apply_inline(const std::vector<Tensor>& grads);

  std::function<void()> sync_;
  std::string abandoned_;
  std::vector<ir::ValueRef> slots_;
  std::unordered_map<uint64_t, uint32_t> slot_of_value_;
  std::shared_ptr<const AotPlan> plan_;
  std::vector<int32_t> tangent_of_slot_;
  std::vector<SavedTensor> saved_;
  std::vector<const void*> saved_memory_;  // per saved value: its memory (memory_id)
  std::vector<int64_t> runtime_values_;
  bool released_ = false;
  InlineBackwardTracer* inline_tracer_ = nullptr;
  bool inlined_ = false;
  std::vector<ir::ValueRef> inline_input_values_;  // per edge: its graph input
};

}  // namespace kiln::aot
