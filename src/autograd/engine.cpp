// The backward engine: runs the nodes reachable from the roots in reverse creation order, each
// once all gradients for it have arrived, and accumulates into leaves (backward) or captures
// the gradients of chosen tensors (grad). Also the Tensor methods that read autograd state.
#include <algorithm>
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "kiln/autograd/autograd.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"

namespace kiln {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<size_t> next_hook_handle{1};
}  // namespace

// ---- Node ----
Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

namespace {
// The nodes waiting to be released by the outermost ~Node running on this thread (a plain
// pointer: trivially destructible, so safe however late a node dies).
thread_local std::vector<std::shared_ptr<Node>>* tls_release_stack = nullptr;
}  // namespace

void Node::add_input(const Tensor& t) {
  next_edges_.push_back(autograd::gradient_edge(t));
  input_meta_.emplace_back(t.dtype(), t.sizes());
}

void Node::add_output(const Tensor& t) { output_meta_.emplace_back(t.dtype(), t.sizes()); }

Node::~Node() {
  // Derived members (saved tensors, which may also hold the nodes below) are gone already, so
  // the edges hold the last references. Hand them to the outermost ~Node instead of letting
  // each release recurse into the next node's destructor.
  if (tls_release_stack) {
    for (Edge& e : next_edges_)
      if (e.fn) tls_release_stack->push_back(std::move(e.fn));
    return;
  }
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next_edges_)
    if (e.fn) stack.push_back(std::move(e.fn));
  if (stack.empty()) return;
  tls_release_stack = &stack;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n.reset();  // if this was the last reference, its ~Node pushes its own edges
  }
  tls_release_stack = nullptr;
}

size_t Node::add_pre_hook(uint32_t output_nr, TensorHook hook, bool run_last) {
  size_t h = next_hook_handle.fetch_add(1);
  pre_hooks_.push_back({h, output_nr, std::move(hook), run_last});
  return h;
}
void Node::remove_pre_hook(size_t handle) {
  std::erase_if(pre_hooks_, [&](const PreHook& p) { return p.handle == handle; });
}
namespace {
// A hook may replace a gradient only by one of the same shape and dtype.
Tensor checked_hook_result(const Tensor& grad, Tensor replaced, const std::string& where) {
  if (!replaced.defined()) return grad;
  KILN_CHECK(replaced.sizes() == grad.sizes(), ShapeError, "a hook on the gradient of ", where,
             " returned a gradient of shape ", replaced.shape_str(), " for one of shape ",
             grad.shape_str(), "; a hook must keep the shape");
  KILN_CHECK(replaced.dtype() == grad.dtype(), DTypeError, "a hook on the gradient of ", where,
             " returned a gradient of dtype ", replaced.dtype(), " for one of dtype ", grad.dtype(),
             "; a hook must keep the dtype");
  return replaced;
}
}  // namespace

Tensor Node::run_pre_hooks(uint32_t output_nr, Tensor grad) const {
  for (bool last : {false, true}) {
    for (const PreHook& h : pre_hooks_) {
      if (h.output_nr != output_nr || h.run_last != last || !grad.defined()) continue;
      grad = checked_hook_result(grad, h.fn(grad), "an output of " + name());
    }
  }
  return grad;
}

Tensor BackwardCall::grad_or_zeros(size_t i) const {
  if (grads[i].defined()) return grads[i];
  return zeros(output_meta[i].sizes, output_meta[i].dtype);
}

// ---- SavedTensor ----
SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output), saved_(true) {
  if (!t.defined()) return;
  KILN_CHECK(!t.impl()->is_inference() || autograd::inference_mode(), Error,
             "a tensor made in InferenceMode (shape ", t.shape_str(),
             ") cannot be saved for backward; make it outside InferenceMode or clone() it there");
  version_ = t.version();
  if (is_output) {
    output_nr_ = t.requires_grad() ? t.output_nr() : 0;
    data_ = t.detach();  // no history: the node that saves it is its grad_fn
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner, std::string_view node_name) const {
  KILN_CHECK(saved_, Error, "internal error: ", node_name, " read a tensor it did not save");
  if (!data_.defined()) return data_;  // an optional input left out
  KILN_CHECK(data_.version() == version_, Error,
             "one of the tensors needed for gradient computation has been modified by an "
             "in-place operation: the ",
             is_output_ ? "output" : "input", " of shape ", data_.shape_str(), " and dtype ",
             data_.dtype(), " saved by ", node_name, " is at version ", data_.version(),
             "; expected version ", version_, " instead");
  if (!is_output_ || !owner || !is_floating(data_.dtype())) return data_;
  Tensor t = data_.detach();
  AutogradMeta& m = autograd::meta(t);
  m.grad_fn = owner;
  m.output_nr = output_nr_;
  t.impl()->set_requires_grad(true);
  return t;
}

namespace autograd {

AutogradMeta& meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd_meta()) impl->set_autograd_meta(std::make_shared<AutogradMeta>());
  return *impl->autograd_meta();
}

// A tensor computed by a compiled graph still being captured gets its final history before a
// backward, grad() or a hook reads it: the graph runs, and may hand it another grad_fn.
void settle_history(const Tensor& t) {
  if (!t.defined()) return;
  if (const auto& m = t.impl()->autograd_meta(); m && m->grad_fn) m->grad_fn->before_backward();
}

void add_retain_grad_hook(const Tensor& t) {
  AutogradMeta& m = meta(t);  // (Tensor::retain_grad settled its history and checked grad_fn)
  std::weak_ptr<TensorImpl> self = t.impl_ptr();
  m.retain_grad_hook = m.grad_fn->add_pre_hook(
      m.output_nr,
      [self](const Tensor& g) {
        if (auto impl = self.lock()) {
          AutogradMeta& mm = *impl->autograd_meta();
          if (!mm.grad.defined()) {
            mm.grad = is_grad_enabled() ? g : g.detach().clone();
          } else {
            mm.grad = is_grad_enabled() ? mm.grad + g : mm.grad.detach() + g.detach();
          }
        }
        return Tensor();
      },
      /*run_last=*/true);
}

namespace {

// Accumulates the gradient of a leaf into its grad(). Holds the leaf weakly: a leaf that is
// gone needs no gradient.
// `g` itself when nothing else can see or change its memory (the engine's own result: kept,
// as PyTorch's AccumulateGrad steals it), else a copy. A contiguous view that is the only user
// of its base (a gradient computed as (a^T b)^T, or a sum's [1, C, 1, 1] viewed as [C]) counts
// too. A pending gradient (a captured backward's) is judged the same way on its pending value:
// every view or detach() of a pending tensor holds the value that owns the memory.
Tensor exclusive_or_copy(Tensor g) {
  TensorImpl* impl = g.impl();
  if (g.impl_ptr().use_count() != 1 || !g.is_contiguous() || g.requires_grad())
    return g.detach().clone();
  const std::shared_ptr<TensorImpl>& base = impl->view_base();
  const bool base_only_here = base && base.use_count() == 1 && !base->requires_grad();
  if (impl->is_pending()) {
    const std::shared_ptr<PendingValue>& p = impl->pending();
    if (p.use_count() == 1 && p->memory_is_private()) return g;
    // The base's value owns the memory, held by the base and by this view alone.
    if (p.use_count() == 1 && base_only_here && base->is_pending() &&
        base->pending()->memory_id() == p->memory_id() && base->pending().use_count() == 2)
      return g;
    return g.detach().clone();
  }
  const std::shared_ptr<Storage>& storage = impl->storage_if_concrete();
  if (storage && storage.use_count() == 1) return g;
  if (storage && storage.use_count() == 2 && base_only_here &&
      base->storage_if_concrete() == storage)
    return Tensor(std::make_shared<TensorImpl>(storage, impl->storage_offset(), impl->sizes(),
                                               impl->strides(), impl->dtype()));
  return g.detach().clone();
}

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {
    input_meta_.clear();
    add_output(leaf);
  }
  std::string name() const override { return "AccumulateGrad"; }
  // The leaf's tensor hooks, run by the engine before apply (or before kiln::grad captures the
  // leaf's gradient, which it must see modified too).
  bool has_pre_hooks() const override {
    std::shared_ptr<TensorImpl> leaf = leaf_.lock();
    return leaf && leaf->autograd_meta() && !leaf->autograd_meta()->hooks.empty();
  }
  Tensor run_pre_hooks(uint32_t, Tensor g) const override {
    std::shared_ptr<TensorImpl> leaf = leaf_.lock();
    if (!leaf || !g.defined()) return g;
    // A copy: a hook may register or remove hooks.
    std::vector<AutogradMeta::Hook> hooks = leaf->autograd_meta()->hooks;
    for (const AutogradMeta::Hook& h : hooks) g = checked_hook_result(g, h.fn(g), "a leaf");
    return g;
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    std::shared_ptr<TensorImpl> leaf = leaf_.lock();
    if (!leaf || !grads[0].defined()) return {};
    accumulate(*leaf->autograd_meta(), std::move(grads[0]));
    if (!leaf->autograd_meta()->post_accumulate_hooks.empty()) {
      // A copy: a hook may register or remove hooks.
      const auto hooks = leaf->autograd_meta()->post_accumulate_hooks;
      const Tensor as_tensor(leaf);
      for (const AutogradMeta::PostAccumulateHook& h : hooks) h.fn(as_tensor);
    }
    return {};
  }

 private:
  static void accumulate(AutogradMeta& m, Tensor g) {
    if (is_grad_enabled()) {  // create_graph: the sum stays differentiable
      m.grad = m.grad.defined() ? m.grad + g : g;
      return;
    }
    if (!m.grad.defined()) {
      m.grad = exclusive_or_copy(std::move(g));
    } else if (m.grad.requires_grad() || m.grad.impl()->is_inference()) {
      // Not in place: a grad with history must keep it, and a grad made by a backward pass
      // run inside InferenceMode may not be changed in place outside it.
      m.grad = m.grad.detach() + g;
    } else {
      m.grad.add_(g);
    }
  }

  std::weak_ptr<TensorImpl> leaf_;
};

}  // namespace

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  refresh_view_history(t);
  if (!t.requires_grad()) return {};
  AutogradMeta& m = meta(t);
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

void set_history(std::span<Tensor> outputs, const std::shared_ptr<Node>& node) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& t = outputs[i];
    if (!t.defined() || !is_floating(t.dtype())) continue;
    AutogradMeta& m = meta(t);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(i);
    m.grad = Tensor();
    t.impl()->set_requires_grad(true);
  }
}

// ---- gradients to input shapes ----
Tensor gradient_for_input(const TensorMeta& want, Tensor g, std::string_view who, size_t i) {
  if (g.sizes() != want.sizes) {
    // Gradients computed at the broadcast shape are summed back to the input's shape.
    KILN_CHECK(g.dim() >= static_cast<int64_t>(want.sizes.size()), Error, "internal error: ", who,
               " returned a gradient of shape ", g.shape_str(), " for input ", i, " of shape ",
               IntList(want.sizes));
    const int64_t lead = g.dim() - static_cast<int64_t>(want.sizes.size());
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
    for (int64_t d = 0; d < static_cast<int64_t>(want.sizes.size()); ++d) {
      if (want.sizes[d] == g.size(lead + d)) continue;
      KILN_CHECK(want.sizes[d] == 1, Error, "internal error: ", who,
                 " returned a gradient of shape ", g.shape_str(), " for input ", i, " of shape ",
                 IntList(want.sizes));
      dims.push_back(lead + d);
    }
    g = sum(g, dims, true);
    if (lead > 0) g = g.reshape(want.sizes);
  }
  if (g.dtype() != want.dtype) g = g.to(want.dtype);
  return g;
}

// ---- the engine ----
namespace {

struct NodeState {
  int dependencies = 0;
  std::vector<Tensor> buffer;  // gradient of each forward output, summed as they arrive
  bool needed = true;
};

// Casts/sums a gradient produced for input `i` of `node` to that input's dtype and shape.
Tensor validate_gradient(const Node& node, size_t i, Tensor g) {
  return gradient_for_input(node.input_meta()[i], std::move(g), node.name(), i);
}

struct ByPriority {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// The callbacks queued (queue_callback) during the backward pass running on this thread.
thread_local std::vector<std::function<void()>>* tls_final_callbacks = nullptr;

// Runs backward from roots. With `captures`, returns the gradient arriving at each captured
// edge and runs only the nodes leading to one (no accumulation into leaves).
std::vector<Tensor> execute(const std::vector<Edge>& roots, std::vector<Tensor> root_grads,
                            bool keep_graph, bool create_graph, const std::vector<Edge>* captures) {
  std::unordered_map<Node*, NodeState> state;
  // Discover the graph and count, for each node, the edges that will bring it a gradient.
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (e.valid() && state.emplace(e.fn.get(), NodeState{}).second) stack.push_back(e.fn.get());
  std::vector<Node*> order;  // discovery order, for the needed-set pass
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    n->before_backward();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      auto [it, fresh] = state.emplace(e.fn.get(), NodeState{});
      it->second.dependencies++;
      if (fresh) stack.push_back(e.fn.get());
    }
  }
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> capture_at;
  if (captures) {
    for (size_t k = 0; k < captures->size(); ++k) {
      const Edge& e = (*captures)[k];
      if (e.valid()) capture_at[e.fn.get()].push_back({e.input_nr, k});
    }
    // Needed: a capture point, or a node with a path to one. Nodes without edges are decided
    // first; then ascending creation order visits a node after every node it feeds into.
    std::vector<Node*> by_seq;
    for (Node* n : order) {
      state[n].needed = capture_at.count(n) > 0;
      if (!n->next_edges().empty()) by_seq.push_back(n);
    }
    std::sort(by_seq.begin(), by_seq.end(),
              [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); });
    for (Node* n : by_seq)
      for (const Edge& e : n->next_edges())
        if (e.valid() && state[e.fn.get()].needed) state[n].needed = true;
  }
  std::vector<Tensor> captured(captures ? captures->size() : 0);

  AutoGradMode grad_mode(create_graph);
  std::vector<std::function<void()>> final_callbacks;
  struct CallbacksScope {
    std::vector<std::function<void()>>* previous;
    explicit CallbacksScope(std::vector<std::function<void()>>* mine)
        : previous(std::exchange(tls_final_callbacks, mine)) {}
    ~CallbacksScope() { tls_final_callbacks = previous; }
  } callbacks_scope(&final_callbacks);
  std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
  auto deliver = [&](const Edge& e, Tensor g) {
    NodeState& s = state[e.fn.get()];
    if (g.defined()) {
      if (s.buffer.size() < e.fn->output_meta().size()) s.buffer.resize(e.fn->output_meta().size());
      Tensor& slot = s.buffer[e.input_nr];
      slot = slot.defined() ? slot + g : std::move(g);
    }
  };
  for (size_t r = 0; r < roots.size(); ++r)
    if (roots[r].valid()) deliver(roots[r], std::move(root_grads[r]));
  for (const Edge& e : roots)
    if (e.valid() && state[e.fn.get()].dependencies == 0) {
      state[e.fn.get()].dependencies = -1;  // queued once even if it is a root twice
      ready.push(e.fn.get());
    }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    NodeState& s = state[n];
    std::vector<Tensor> grads = std::move(s.buffer);
    grads.resize(n->output_meta().size());
    if (n->has_pre_hooks())
      for (size_t i = 0; i < grads.size(); ++i)
        grads[i] = n->run_pre_hooks(static_cast<uint32_t>(i), std::move(grads[i]));
    if (auto it = capture_at.find(n); it != capture_at.end())
      for (auto [nr, k] : it->second) captured[k] = grads[nr];
    std::vector<Tensor> input_grads;
    // With captures, a node runs only when a captured gradient lies beyond it (a capture point
    // itself has no more to compute: running it would waste work and free its saved tensors).
    bool run = !captures;
    if (captures && s.needed)
      for (const Edge& e : n->next_edges()) run = run || (e.valid() && state[e.fn.get()].needed);
    const bool any_grad =
        std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
    if (run && any_grad) {
      input_grads = n->apply(std::move(grads));
      if (!keep_graph) n->release_saved();
    }
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < input_grads.size() && input_grads[i].defined())
        deliver(e, validate_gradient(*n, i, std::move(input_grads[i])));
      NodeState& next = state[e.fn.get()];
      if (--next.dependencies == 0) ready.push(e.fn.get());
    }
  }
  for (size_t i = 0; i < final_callbacks.size(); ++i) {
    std::function<void()> callback = std::move(final_callbacks[i]);  // may queue more
    callback();
  }
  return captured;
}

// Root edges and their initial gradients (ones for one-element outputs).
void make_roots(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                const char* api, std::vector<Edge>& roots, std::vector<Tensor>& grads) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError, api,
             ": got ", outputs.size(), " outputs but ", grad_outputs.size(), " grad_outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    KILN_CHECK(out.defined(), ValueError, api, ": output ", i, " is an undefined tensor");
    KILN_CHECK(out.requires_grad(), Error, api, ": output ", i, " (shape ", out.shape_str(),
               ") does not require grad and has no grad_fn: nothing to differentiate (was it "
               "computed under no_grad, or from tensors without requires_grad?)");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      KILN_CHECK(out.numel() == 1, Error, api,
                 ": a gradient can be created implicitly only for one-element outputs, but "
                 "output ",
                 i, " has shape ", out.shape_str(), "; pass its gradient explicitly");
      g = ones(out.sizes(), out.dtype());
    } else {
      KILN_CHECK(g.sizes() == out.sizes(), ShapeError, api, ": the gradient for output ", i,
                 " has shape ", g.shape_str(), " but the output has shape ", out.shape_str());
      KILN_CHECK(is_floating(g.dtype()), DTypeError, api, ": the gradient for output ", i,
                 " must be floating, got dtype ", g.dtype());
    }
    settle_history(out);
    roots.push_back(gradient_edge(out));
    grads.push_back(g.dtype() == out.dtype() ? std::move(g) : g.to(out.dtype()));
  }
}

}  // namespace
}  // namespace autograd

namespace autograd {
namespace {
thread_local const BackwardRequest* tls_backward_request = nullptr;
}  // namespace
const BackwardRequest* current_backward_request() { return tls_backward_request; }
void queue_callback(std::function<void()> callback) {
  KILN_CHECK(tls_final_callbacks != nullptr, Error,
             "queue_callback: no backward pass is running on this thread (call it from a hook or "
             "a node's backward)");
  tls_final_callbacks->push_back(std::move(callback));
}
BackwardRequestScope::BackwardRequestScope(const BackwardRequest& request)
    : previous_(tls_backward_request) {
  tls_backward_request = &request;
}
BackwardRequestScope::~BackwardRequestScope() { tls_backward_request = previous_; }
}  // namespace autograd

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  const autograd::BackwardRequest request{retain_graph.value_or(create_graph), create_graph, {}};
  autograd::BackwardRequestScope scope(request);
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  autograd::make_roots(outputs, grad_outputs, "backward", roots, grads);
  autograd::execute(roots, std::move(grads), retain_graph.value_or(create_graph), create_graph,
                    nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  const autograd::BackwardRequest request{retain_graph.value_or(create_graph), create_graph,
                                          inputs};
  autograd::BackwardRequestScope scope(request);
  std::vector<Edge> roots;
  std::vector<Tensor> grads;
  autograd::make_roots(outputs, grad_outputs, "grad", roots, grads);
  std::vector<Edge> captures;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].defined() && inputs[i].requires_grad(), Error, "grad: input ", i,
               inputs[i].defined() ? " (shape " + inputs[i].shape_str() + ")" : std::string(),
               " does not require grad");
    autograd::settle_history(inputs[i]);
    captures.push_back(autograd::gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result = autograd::execute(
      roots, std::move(grads), retain_graph.value_or(create_graph), create_graph, &captures);
  for (size_t i = 0; i < result.size(); ++i) {
    KILN_CHECK(result[i].defined() || allow_unused, Error, "grad: input ", i, " (shape ",
               inputs[i].shape_str(),
               ") was not used to compute the outputs; pass allow_unused=true to get an "
               "undefined gradient for it");
    if (result[i].defined() && result[i].dtype() != inputs[i].dtype())
      result[i] = result[i].to(inputs[i].dtype());
  }
  return result;
}

// ---- Tensor's autograd methods ----
namespace {
const Tensor kUndefined;
const std::shared_ptr<Node> kNoNode;
}  // namespace

const Tensor& Tensor::grad() const {
  checked("grad");
  const auto& m = impl_->autograd_meta();
  return m ? m->grad : kUndefined;
}
void Tensor::set_grad(const Tensor& g) {
  checked("set_grad");
  if (g.defined()) {
    KILN_CHECK(g.sizes() == sizes(), ShapeError, "set_grad: gradient of shape ", g.shape_str(),
               " for a tensor of shape ", shape_str());
    KILN_CHECK(g.dtype() == dtype(), DTypeError, "set_grad: gradient of dtype ", g.dtype(),
               " for a tensor of dtype ", dtype());
  }
  if (!g.defined() && !impl_->autograd_meta()) return;
  autograd::meta(*this).grad = g;
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  checked("grad_fn");
  const auto& m = impl_->autograd_meta();
  return m ? m->grad_fn : kNoNode;
}
bool Tensor::is_leaf() const {
  checked("is_leaf");
  return grad_fn() == nullptr;
}
uint32_t Tensor::output_nr() const {
  checked("output_nr");
  const auto& m = impl_->autograd_meta();
  return m ? m->output_nr : 0;
}
void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph,
                      bool create_graph) const {
  checked("backward");
  kiln::backward({*this}, {gradient}, retain_graph, create_graph);
}
size_t Tensor::register_hook(TensorHook hook) const {
  checked("register_hook");
  autograd::settle_history(*this);
  KILN_CHECK(requires_grad(), Error, "register_hook: the tensor (shape ", shape_str(),
             ") does not require grad, so no gradient will ever reach a hook on it");
  AutogradMeta& m = autograd::meta(*this);
  if (m.grad_fn) return m.grad_fn->add_pre_hook(m.output_nr, std::move(hook));
  size_t h = next_hook_handle.fetch_add(1);
  m.hooks.push_back({h, std::move(hook)});
  return h;
}
void Tensor::remove_hook(size_t handle) const {
  checked("remove_hook");
  const auto& m = impl_->autograd_meta();
  if (!m) return;
  if (m->grad_fn) m->grad_fn->remove_pre_hook(handle);
  std::erase_if(m->hooks, [&](const AutogradMeta::Hook& h) { return h.handle == handle; });
  std::erase_if(m->post_accumulate_hooks,
                [&](const AutogradMeta::PostAccumulateHook& h) { return h.handle == handle; });
}
void Tensor::retain_grad() const {
  checked("retain_grad");
  autograd::settle_history(*this);
  KILN_CHECK(requires_grad(), Error, "retain_grad: the tensor (shape ", shape_str(),
             ") does not require grad");
  AutogradMeta& m = autograd::meta(*this);
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep their grad anyway
  m.retains_grad = true;
  autograd::add_retain_grad_hook(*this);
}
size_t Tensor::register_post_accumulate_grad_hook(
    std::function<void(const Tensor& leaf)> hook) const {
  checked("register_post_accumulate_grad_hook");
  KILN_CHECK(requires_grad() && is_leaf(), Error,
             "register_post_accumulate_grad_hook: the tensor (shape ", shape_str(), ") is ",
             requires_grad() ? "not a leaf" : "a tensor that does not require grad",
             ": only leaves that require grad accumulate a gradient");
  size_t h = next_hook_handle.fetch_add(1);
  autograd::meta(*this).post_accumulate_hooks.push_back({h, std::move(hook)});
  return h;
}
bool Tensor::retains_grad() const {
  checked("retains_grad");
  const auto& m = impl_->autograd_meta();
  return m && m->retains_grad;
}

}  // namespace kiln
