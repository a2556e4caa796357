// Reverse-mode automatic differentiation: gradient-recording scopes, kiln::grad, and
// user-defined autograd functions. Tensor::backward, grad(), register_hook live on Tensor.
// The guide is docs/autograd.md.
#pragma once

#include <any>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/autograd/node.h"

namespace kiln {

// ---- gradient recording scopes (per thread) ----
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
bool is_inference_mode_enabled();

// Sets grad mode for a scope, restoring the previous mode on exit.
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled);
  ~AutoGradMode();
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};
// torch.no_grad(): ops in the scope are not recorded.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};
// torch.enable_grad(): recording on again inside a no_grad scope.
class EnableGradGuard : public AutoGradMode {
 public:
  EnableGradGuard() : AutoGradMode(true) {}
};
// torch.inference_mode(): no recording, and tensors made in the scope are *inference tensors*,
// which can never be saved for a later backward pass nor changed in place outside the scope.
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool prev_grad_, prev_inference_;
};

// ---- running backward ----
// Accumulates into the leaves' grad() the gradients of `outputs` (weighted by grad_outputs;
// may be omitted for one-element outputs). retain_graph defaults to create_graph.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              std::optional<bool> retain_graph = {}, bool create_graph = false);
// Returns d(outputs)/d(inputs) without touching any grad(). An input that outputs do not depend
// on is an error unless allow_unused (then its gradient is undefined).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = {}, bool create_graph = false,
                         bool allow_unused = false);

namespace autograd {

// Runs `callback` once the backward pass now running has finished (every node run, every
// gradient accumulated): torch's Variable._execution_engine.queue_callback, which
// data-parallel training uses to wait for its gradient allreduces. Callbacks run in the order
// queued, on the thread that runs the backward; one may queue another. Only during backward()
// (a hook or a node's apply): anywhere else it is an Error.
void queue_callback(std::function<void()> callback);

// ---- user-defined functions (torch.autograd.Function) ----
// The state a custom function's forward hands to its backward.
class FunctionContext {
 public:
  // Tensors the backward needs (checked for in-place changes when read back).
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> get_saved_variables() const;
  // Any other values (sizes, flags, ...).
  std::map<std::string, std::any> saved_data;
  // Whether the gradient of forward argument i is wanted.
  bool needs_input_grad(size_t i) const;

  // Internal: filled by Function<T>::apply.
  std::vector<bool> needs_input_grad_;
  std::vector<SavedTensor> saved_;
  std::vector<Tensor> to_save_;
  std::weak_ptr<Node> owner_;  // weak: the node owns this context
  bool packed_ = false;
  bool released_ = false;
};

namespace detail {
// The node of one call of a user-defined function: calls `backward` on the saved context.
class CustomFunctionNode : public Node {
 public:
  using BackwardFn = std::vector<Tensor> (*)(FunctionContext*, std::vector<Tensor>);
  CustomFunctionNode(std::string name, BackwardFn backward, std::vector<int> tensor_arg_positions,
                     size_t num_args)
      : name_(std::move(name)),
        backward_(backward),
        tensor_args_(std::move(tensor_arg_positions)),
        num_args_(num_args) {}
  std::string name() const override;
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  void release_saved() override;
  FunctionContext ctx;

 private:
  std::string name_;
  BackwardFn backward_;
  std::vector<int> tensor_args_;
  size_t num_args_;
};
// Wires a custom function's outputs into the graph (defined in function.cpp).
void connect_custom_function(const std::shared_ptr<CustomFunctionNode>& node,
                             const std::vector<Tensor>& tensor_args, std::vector<Tensor>& outputs);

template <typename A>
void collect_tensor(const A& a, int pos, std::vector<Tensor>& tensors,
                    std::vector<int>& positions) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    tensors.push_back(a);
    positions.push_back(pos);
  }
}
}  // namespace detail

// A user-defined differentiable function, as torch::autograd::Function in C++:
//
//   struct Square : kiln::autograd::Function<Square> {
//     static Tensor forward(FunctionContext* ctx, const Tensor& x) {
//       ctx->save_for_backward({x});
//       return x * x;
//     }
//     static std::vector<Tensor> backward(FunctionContext* ctx, std::vector<Tensor> grads) {
//       Tensor x = ctx->get_saved_variables()[0];
//       return {grads[0] * 2 * x};
//     }
//   };
//   Tensor y = Square::apply(x);
//
// forward runs with recording off and returns a Tensor or std::vector<Tensor>; its arguments
// may be tensors or any other values. backward gets one gradient per output (zeros where none
// flowed) and returns one gradient per forward argument (undefined for non-tensors and for
// inputs that need none), or one per tensor argument.
template <class Derived>
struct Function {
  template <typename... Args>
  static auto apply(Args&&... args) {
    std::vector<Tensor> tensors;
    std::vector<int> positions;
    int pos = 0;
    (detail::collect_tensor(args, pos++, tensors, positions), ...);
    bool record = is_grad_enabled();
    bool any_requires = false;
    for (const Tensor& t : tensors)
      any_requires = any_requires || (t.defined() && t.requires_grad());
    record = record && any_requires;
    auto node = record ? std::make_shared<detail::CustomFunctionNode>(
                             std::string(typeid(Derived).name()), &backward_trampoline, positions,
                             sizeof...(Args))
                       : nullptr;
    FunctionContext local;
    FunctionContext* ctx = node ? &node->ctx : &local;
    ctx->needs_input_grad_.assign(sizeof...(Args), false);
    for (size_t k = 0; k < tensors.size(); ++k)
      ctx->needs_input_grad_[static_cast<size_t>(positions[k])] =
          tensors[k].defined() && tensors[k].requires_grad();
    auto result = [&] {
      NoGradGuard no_grad;
      return Derived::forward(ctx, std::forward<Args>(args)...);
    }();
    if (node) {
      if constexpr (std::is_same_v<decltype(result), Tensor>) {
        std::vector<Tensor> outs{result};
        detail::connect_custom_function(node, tensors, outs);
        return outs[0];
      } else {
        detail::connect_custom_function(node, tensors, result);
        return result;
      }
    }
    return result;
  }

 private:
  static std::vector<Tensor> backward_trampoline(FunctionContext* ctx, std::vector<Tensor> grads) {
    return Derived::backward(ctx, std::move(grads));
  }
};

}  // namespace autograd
}  // namespace kiln
