// Optimizers (torch.optim): SGD, Adam, AdamW, Adagrad, RMSprop and Adadelta with PyTorch's
// update formulas and defaults,
// gradient-norm clipping, and a warmup + cosine learning-rate schedule. The guide is
// docs/optim.md.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/io/safetensors.h"

namespace kiln::optim {

// What state_dict() returns and load_state_dict() takes: the per-parameter state tensors
// ("state.<i>.<name>", e.g. "state.3.exp_avg", i being the parameter's position in the list the
// optimizer was made from) and string metadata: the optimizer kind ("kind"), the number of
// parameters ("num_params"), the hyper-parameters ("lr", "weight_decay", ...) and each stepped
// parameter's step count ("state.<i>.step"). Both halves fit a safetensors file directly:
//   save_safetensors(path, s.tensors, s.metadata);
//   auto f = load_safetensors(path); opt.load_state_dict({f.tensors, f.metadata});
struct OptimizerState {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// The base of all optimizers: one group of parameters sharing one set of hyper-parameters.
class Optimizer {
 public:
  // `params`: leaf tensors of a floating dtype that require grad, each listed once. Throws
  // ValueError for an empty list, an undefined tensor, a duplicate, a non-leaf or a tensor that
  // does not require grad, and DTypeError for a non-floating dtype.
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter whose grad() is defined (others are skipped and keep their
  // state). Runs without recording autograd history; writes the parameters in place.
  virtual void step() = 0;
  // Clears the gradients: set_to_none drops them (grad() becomes undefined, as PyTorch's
  // default), otherwise they are zeroed in place (and detached from any graph).
  void zero_grad(bool set_to_none = true);

  // The learning rate (for schedules: call set_lr before step()).
  double lr() const { return lr_; }
  void set_lr(double lr);
  // The lr the optimizer was made with (PyTorch's initial_lr): what a scheduler resuming a
  // schedule starts from.
  double initial_lr() const { return initial_lr_; }

  const std::vector<Tensor>& params() const { return params_; }
  // The momentum a scheduler cycles (OneCycleLR's cycle_momentum, as PyTorch's param group
  // "momentum" or "betas"[0]): SGD's and RMSprop's momentum, Adam's and AdamW's beta1; none
  // for Adagrad and Adadelta. set_momentum throws ValueError where there is none, or for a
  // value the optimizer rejects.
  virtual std::optional<double> momentum() const { return std::nullopt; }
  virtual void set_momentum(double value);
  // "SGD", "Adam", "AdamW", "Adagrad", "RMSprop" or "Adadelta".
  virtual std::string kind() const = 0;
  // The number of updates applied to parameter i (0 until its first step with a gradient).
  int64_t step_count(size_t i) const { return steps_.at(i); }

  // A snapshot (copies) of the optimizer's state; see OptimizerState.
  OptimizerState state_dict() const;
  // Restores a state_dict(), hyper-parameters included (as PyTorch). Validates everything first
  // (kind, number of parameters, hyper-parameter values, tensor names, shapes, dtypes, step
  // counts) and throws a ValueError / ShapeError / DTypeError naming the problem, leaving the
  // optimizer unchanged on failure.
  void load_state_dict(const OptimizerState& state);

 protected:
  // Per-parameter tensors (by name) for parameter i; empty until its first step.
  std::vector<std::map<std::string, Tensor>> state_;
  // Names parameter i's state tensors for diagnostics ("Adam.state[fc1.weight].exp_avg"; the
  // parameter's module name, or its position): call after making them.
  void name_state(size_t i) const;
  std::vector<int64_t> steps_;
  std::vector<Tensor> params_;
  double lr_;
  double initial_lr_;

  // Hyper-parameters other than lr, as strings for state_dict metadata.
  virtual std::map<std::string, std::string> hyper_parameters() const = 0;
  // Parses and validates hyper-parameters from metadata without applying them. Returns the state
  // tensor names a stepped parameter must have under them, and a function that applies them.
  struct StagedHyperParameters {
    std::vector<std::string> state_names;
    std::function<void()> apply;
  };
  virtual StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const = 0;
  // State that belongs to the optimizer rather than to one parameter (L-BFGS's history), under
  // names that start with "optimizer." in both the tensors and the metadata: written by
  // save_optimizer_state, validated by stage_optimizer_state (which returns what applies it).
  // The defaults have none and reject any.
  virtual void save_optimizer_state(OptimizerState& state) const;
  virtual std::function<void()> stage_optimizer_state(const OptimizerState& state) const;
};

// ---- SGD (torch.optim.SGD) ----
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};

// For each parameter p with gradient g (PyTorch's formulas):
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   b = g (first step) or momentum * b + (1 - dampening) * g  (if momentum != 0)
//   g = g + momentum * b (nesterov) or b            (if momentum != 0)
//   p = p - lr * g
// nesterov needs momentum > 0 and dampening == 0. maximize negates g first.
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;
  std::string kind() const override { return "SGD"; }
  SGDOptions options() const;
  std::optional<double> momentum() const override { return o_.momentum; }
  void set_momentum(double value) override;

 protected:
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;

 private:
  SGDOptions o_;
};

// ---- Adam (torch.optim.Adam) and AdamW (torch.optim.AdamW) ----
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool amsgrad = false;
  bool maximize = false;
};

// For each parameter p with gradient g, at step t (1, 2, ...), PyTorch's formulas:
//   Adam:  g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = m + (1 - beta1) * (g - m)            (lerp; m starts at 0)
//   v = beta2 * v + (1 - beta2) * g * g      (v starts at 0; amsgrad: vmax = max(vmax, v))
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p = p - lr / (1 - beta1^t) * m / denom
// The update is one fused pass over contiguous float tensors (no temporaries).
class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;
  std::string kind() const override { return decoupled_ ? "AdamW" : "Adam"; }
  AdamOptions options() const;
  std::optional<double> momentum() const override { return o_.betas.first; }
  void set_momentum(double beta1) override;

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled);
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;

 private:
  AdamOptions o_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamWOptions options() const;
};

// ---- Adagrad (torch.optim.Adagrad) ----
struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

// For each parameter p with gradient g, at step t (1, 2, ...), PyTorch's formulas:
//   g = g + weight_decay * p                 (maximize negates g first)
//   sum = sum + g * g                        (sum starts at initial_accumulator_value)
//   p = p - lr / (1 + (t - 1) * lr_decay) * g / (sqrt(sum) + eps)
// Composed of tensor ops (fused by inductor under kiln::compile); the learning rate is a graph
// input, so changing it recompiles nothing.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  void step() override;
  std::string kind() const override { return "Adagrad"; }
  AdagradOptions options() const;

 protected:
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;

 private:
  AdagradOptions o_;
};

// ---- RMSprop (torch.optim.RMSprop) ----
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// For each parameter p with gradient g, PyTorch's formulas:
//   g = g + weight_decay * p                 (maximize negates g first)
//   square_avg = alpha * square_avg + (1 - alpha) * g * g
//   centered:  grad_avg = lerp(grad_avg, g, 1 - alpha)
//              avg = sqrt(square_avg - grad_avg * grad_avg) + eps
//   else:      avg = sqrt(square_avg) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  p = p - lr * buf
//   else:          p = p - lr * g / avg
// (square_avg, grad_avg and buf start at 0.)
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  void step() override;
  std::string kind() const override { return "RMSprop"; }
  RMSpropOptions options() const;
  std::optional<double> momentum() const override { return o_.momentum; }
  void set_momentum(double value) override;

 protected:
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;

 private:
  RMSpropOptions o_;
};

// ---- Adadelta (torch.optim.Adadelta) ----
struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;
  bool maximize = false;
};

// For each parameter p with gradient g, PyTorch's formulas:
//   g = g + weight_decay * p                 (maximize negates g first)
//   square_avg = rho * square_avg + (1 - rho) * g * g
//   delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
//   acc_delta = rho * acc_delta + (1 - rho) * delta * delta
//   p = p - lr * delta
// (square_avg and acc_delta start at 0.)
class Adadelta : public Optimizer {
 public:
  explicit Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {});
  void step() override;
  std::string kind() const override { return "Adadelta"; }
  AdadeltaOptions options() const;

 protected:
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;

 private:
  AdadeltaOptions o_;
};

// ---- L-BFGS (torch.optim.LBFGS) ----
struct LBFGSOptions {
  double lr = 1;
  int64_t max_iter = 20;            // iterations per step(closure)
  std::optional<int64_t> max_eval;  // closure evaluations per step; default max_iter * 5 / 4
  double tolerance_grad = 1e-7;     // stop when every |gradient| is at most this
  double tolerance_change = 1e-9;   // ... or the step, or the loss change, is below this
  int64_t history_size = 100;
  std::string line_search_fn;  // "" (fixed step lr) or "strong_wolfe"
};

// PyTorch's L-BFGS: per step(closure), up to max_iter iterations of the two-loop recursion over
// the last history_size (step, gradient change) pairs, each step scaled by lr (the first by
// min(1, 1 / |g|_1) lr) or found by a strong-Wolfe line search with cubic interpolation
// (c1 1e-4, c2 0.9, 25 evaluations at most), stopping early on the tolerances or max_eval; the
// history carries over between calls. The closure zeroes the gradients, computes the loss, calls
// backward() and returns the loss; step(closure) returns the closure's first loss. The
// parameters are treated as one flat vector, its arithmetic in double. step() without a closure
// throws. state_dict() holds the history (float64 tensors "optimizer.old_dirs" [h, n],
// "optimizer.old_stps", "optimizer.ro", "optimizer.d", "optimizer.prev_flat_grad"; the scalars
// and counters in the metadata), so a resumed run takes the very steps an uninterrupted one does.
class LBFGS : public Optimizer {
 public:
  explicit LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  void step() override;
  Tensor step(const std::function<Tensor()>& closure);
  std::string kind() const override { return "LBFGS"; }
  const LBFGSOptions& options() const { return o_; }
  // Closure evaluations and iterations since construction (PyTorch's state func_evals, n_iter).
  int64_t func_evals() const { return func_evals_; }
  int64_t n_iter() const { return n_iter_; }

 protected:
  std::map<std::string, std::string> hyper_parameters() const override;
  StagedHyperParameters stage_hyper_parameters(
      const std::map<std::string, std::string>& metadata) const override;
  void save_optimizer_state(OptimizerState& state) const override;
  std::function<void()> stage_optimizer_state(const OptimizerState& state) const override;

 private:
  std::vector<double> flat_grad() const;
  void add_to_params(double t, const std::vector<double>& d);
  std::vector<double> flat_params() const;
  void set_params(const std::vector<double>& x);
  // Evaluates the loss and gradient at x + t d, then puts the parameters back to x.
  std::pair<double, std::vector<double>> evaluate_at(const std::function<Tensor()>& closure,
                                                     const std::vector<double>& x, double t,
                                                     const std::vector<double>& d);
  LBFGSOptions o_;
  int64_t func_evals_ = 0, n_iter_ = 0;
  // The history: the last direction and step size, (y, s) pairs with 1 / y.s, H's diagonal.
  std::vector<double> d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<std::vector<double>> old_dirs_, old_stps_;
  std::vector<double> ro_;
};

// ---- gradient clipping (torch.nn.utils.clip_grad_norm_) ----
// The norm (of order norm_type; infinity for the max norm) of all defined gradients together,
// computed in double. When max_norm / (total + 1e-6) < 1 every gradient is multiplied by that
// coefficient in place (as PyTorch; a NaN total makes the gradients NaN, as there). Returns the
// total norm before clipping (0 when no parameter has a gradient). With error_if_nonfinite, a
// NaN or infinite total throws ValueError and leaves the gradients unchanged.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
// PyTorch's form: the total norm as a 0-d tensor (the gradients' floating dtype; float64 when
// any gradient is float64), computed with ops (each gradient's norm, then the norm of those),
// and every gradient multiplied by clamp(max_norm / (total + 1e-6), max=1) without reading a
// value, so that under kiln::compile clipping is part of the graph instead of a graph break.
// error_if_nonfinite reads the total (a sync point, as in PyTorch). 0 when no gradient.
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm,
                              double norm_type = 2.0, bool error_if_nonfinite = false);

// ---- learning-rate schedule ----
// Linear warmup from 0 to base_lr over warmup_steps, then cosine decay from base_lr to min_lr at
// total_steps, and min_lr after:
//   step < warmup:           base_lr * step / warmup_steps
//   warmup <= step <= total: min_lr + (base_lr - min_lr) * (1 + cos(pi * (step - warmup) /
//                            (total - warmup))) / 2
//   step > total:            min_lr
// (With warmup_steps == total_steps the schedule goes straight to min_lr after the warmup.)
class WarmupCosineSchedule {
 public:
  WarmupCosineSchedule(double base_lr, int64_t warmup_steps, int64_t total_steps,
                       double min_lr = 0);
  double lr_at(int64_t step) const;
  // Sets opt's learning rate to lr_at(step) and returns it.
  double apply(Optimizer& opt, int64_t step) const;

  double base_lr() const { return base_lr_; }
  double min_lr() const { return min_lr_; }
  int64_t warmup_steps() const { return warmup_; }
  int64_t total_steps() const { return total_; }

 private:
  double base_lr_, min_lr_;
  int64_t warmup_, total_;
};

}  // namespace kiln::optim
