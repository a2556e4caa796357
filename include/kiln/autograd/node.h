// The autograd graph: a Node per recorded op call, linked to the nodes that made its inputs by
// Edges. A tensor that requires grad carries AutogradMeta (its grad, its grad_fn, its hooks).
// Nodes compute input gradients from output gradients with Kiln ops, so running them with
// gradient recording on (create_graph) records the backward pass itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

class Node;

// Where a gradient goes: input `input_nr` of node `fn` (the node's output of that number in
// forward terms). A null fn means the input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  // Releases the nodes this one points to iteratively, so that dropping a graph millions of
  // nodes deep does not overflow the stack.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // "MulBackward"-style name, for errors and graph printing.
  virtual std::string name() const = 0;
  // Gradients of the forward outputs (one per output; undefined = zero) → gradients of the
  // forward inputs (one per next edge).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // Frees what was saved for backward (after a backward pass without retain_graph).
  virtual void release_saved() {}
  // Called by the engine when a backward pass reaches the node, before it reads next_edges():
  // a node whose edges exist only once its graph has run (a compiled graph still being
  // captured) runs it here.
  virtual void before_backward() {}

  // One per forward input: where its gradient goes.
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  // dtype and shape of each forward input (gradients are cast and summed to these).
  const std::vector<TensorMeta>& input_meta() const { return input_meta_; }
  // dtype and shape of each forward output.
  const std::vector<TensorMeta>& output_meta() const { return output_meta_; }
  // Creation order: the engine runs later nodes first.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Hooks on the gradient of forward output `output_nr` (tensor hooks of non-leaves).
  // `run_last` hooks run after all others whatever the order of registration (retain_grad's,
  // so that .grad is the gradient after the tensor's hooks, as in PyTorch).
  // (Virtual: a node computing several ops at once may first have to run its graph.)
  virtual size_t add_pre_hook(uint32_t output_nr, TensorHook hook, bool run_last = false);
  void remove_pre_hook(size_t handle);
  // Runs the hooks on output_nr's gradient; each may replace it. The engine runs them before
  // the node and before kiln::grad captures the gradient (leaves' accumulators run the leaf's
  // tensor hooks here).
  virtual Tensor run_pre_hooks(uint32_t output_nr, Tensor grad) const;
  virtual bool has_pre_hooks() const { return !pre_hooks_.empty(); }

  // What the creator of a node calls once per forward input and then once per forward output,
  // in order: an input gets its gradient edge and metadata, an output its metadata.
  void add_input(const Tensor& t);
  void add_output(const Tensor& t);

 protected:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;

 private:
  struct PreHook {
    size_t handle;
    uint32_t output_nr;
    TensorHook fn;
    bool run_last;
  };
  uint64_t sequence_nr_;
  std::vector<PreHook> pre_hooks_;
};

// What autograd keeps on a tensor that requires grad.
struct AutogradMeta {
  Tensor grad;                           // accumulated gradient (leaves, retain_grad)
  std::shared_ptr<Node> grad_fn;         // null for leaves
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that accumulates into grad
  uint32_t output_nr = 0;                // which output of grad_fn this tensor is
  struct Hook {
    size_t handle;
    TensorHook fn;
  };
  std::vector<Hook> hooks;  // leaves' tensor hooks (non-leaves keep theirs on grad_fn)
  struct PostAccumulateHook {
    size_t handle;
    std::function<void(const Tensor&)> fn;
  };
  std::vector<PostAccumulateHook> post_accumulate_hooks;  // leaves: after grad is accumulated
  bool retains_grad = false;
  size_t retain_grad_hook = 0;  // handle of retain_grad's hook on grad_fn
};

// A tensor saved for backward: checks, when unpacked, that no in-place op changed it since.
class SavedTensor {
 public:
  SavedTensor() = default;
  // `is_output`: t is an output of the node that saves it (kept without its history, so the
  // node and the tensor do not own each other).
  SavedTensor(const Tensor& t, bool is_output);
  // The saved tensor; outputs get `owner` back as their grad_fn. Throws if it was modified in
  // place or freed by an earlier backward pass.
  Tensor unpack(const std::shared_ptr<Node>& owner, std::string_view node_name) const;
  bool defined() const { return saved_; }
  void release() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool saved_ = false;
};

namespace autograd {
// The edge a gradient for `t` flows along: its grad_fn, or its leaf accumulator.
Edge gradient_edge(const Tensor& t);
// Gives each output of `node` that requires grad (floating dtype) its history.
void set_history(std::span<Tensor> outputs, const std::shared_ptr<Node>& node);
// A view whose memory was written (through its base or another view) since its history was
// set, while the base has history: its history becomes that region of the base's current value
// (PyTorch regenerates such a view's grad_fn the same way). Called wherever a tensor's history
// is read: gradient_edge, and dispatch before it decides whether to record.
void refresh_view_history(const Tensor& t);
// AutogradMeta of t, created on first use.
AutogradMeta& meta(const Tensor& t);
// Registers retain_grad's hook on t's grad_fn (again after an in-place op gave t a new one).
void add_retain_grad_hook(const Tensor& t);
}  // namespace autograd

}  // namespace kiln
