// Optimizer base: parameter validation, zero_grad, state dicts; clip_grad_norm_ and the
// warmup + cosine schedule.
#include "kiln/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <numbers>
#include <set>

#include "core/tensor_names.h"
#include "kiln/autograd/autograd.h"
#include "kiln/core/parallel.h"
#include "kiln/ops/factory.h"
#include "kiln/ops/indexing.h"
#include "kiln/ops/pointwise.h"
#include "kiln/ops/reduction.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace detail {

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}
std::string format_bool(bool v) { return v ? "true" : "false"; }

double meta_double(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), ValueError, "load_state_dict: no '", key, "' in the metadata");
  const std::string& s = it->second;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty(), ValueError,
             "load_state_dict: metadata '", key, "' is not a number: '", s, "'");
  return v;
}

bool meta_bool(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  KILN_CHECK(it != m.end(), ValueError, "load_state_dict: no '", key, "' in the metadata");
  KILN_CHECK(it->second == "true" || it->second == "false", ValueError,
             "load_state_dict: metadata '", key, "' is not 'true' or 'false': '", it->second, "'");
  return it->second == "true";
}

// Written directly, not through an op: under kiln::compile the state is then created before
// the step's graph runs (as Dynamo initialises a torch optimizer's state eagerly), and the
// first step's graph reads it as an input exactly as every later step does: one graph for
// every step, not a first graph with the fills in it and a recompile at step 2.
Tensor filled_like_param(const Tensor& p, double value) {
  Tensor t = make_tensor(p.sizes(), p.dtype());
  const auto n = static_cast<size_t>(t.numel());
  if (value == 0.0)
    std::memset(t.data_ptr(), 0, n * static_cast<size_t>(t.element_size()));
  else if (t.dtype() == DType::Float32)
    std::fill_n(t.data_ptr<float>(), n, static_cast<float>(value));
  else if (t.dtype() == DType::Float64)
    std::fill_n(t.data_ptr<double>(), n, value);
  else
    t.fill_(value);  // (other floating dtypes: through the op)
  return t;
}

Tensor scalar_input(double value, DType dtype) {
  Tensor t = make_tensor({}, dtype);
  if (dtype == DType::Float32)
    *t.data_ptr<float>() = static_cast<float>(value);
  else
    *t.data_ptr<double>() = value;
  return t;
}

Tensor dense_grad(const Tensor& p, size_t index, const char* who) {
  Tensor g = p.grad();
  KILN_CHECK(g.sizes() == p.sizes(), ShapeError, who, ": parameter ", index, " has shape ",
             p.shape_str(), " but its gradient has shape ", g.shape_str());
  if (g.dtype() != p.dtype()) g = g.to(p.dtype());
  return g;
}

void check_non_negative(const char* who, const char* what, double value) {
  KILN_CHECK(std::isfinite(value) && value >= 0, ValueError, who, ": invalid ", what,
             " value: ", value);
}

Tensor decayed_grad(const Tensor& p, size_t index, const char* who, bool maximize,
                    double weight_decay, ScalarInputs& scalars) {
  Tensor g = dense_grad(p, index, who);
  if (maximize) g = -g;
  if (weight_decay != 0) g = g + p * scalars.get(weight_decay, p.dtype());
  return g;
}

Tensor ScalarInputs::get(double value, DType dtype) {
  for (auto& [key, t] : made_)
    if (key.second == dtype && std::memcmp(&key.first, &value, sizeof value) == 0) return t;
  made_.push_back({{value, dtype}, scalar_input(value, dtype)});
  return made_.back().second;
}

bool below_half_in(double value, DType dtype) {
  return dtype == DType::Float32 ? static_cast<float>(value) < 0.5f : value < 0.5;
}

}  // namespace detail

namespace {

int64_t parse_int(const std::string& s, const std::string& what) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  KILN_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty(), ValueError,
             "load_state_dict: ", what, " is not an integer: '", s, "'");
  return v;
}

// Splits "state.<i>.<rest>" into (i, rest); false when the name has another form.
bool split_state_name(const std::string& name, int64_t& index, std::string& rest) {
  if (name.rfind("state.", 0) != 0) return false;
  const size_t dot = name.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 == name.size()) return false;
  const char* b = name.data() + 6;
  const char* e = name.data() + dot;
  auto [p, ec] = std::from_chars(b, e, index);
  if (ec != std::errc() || p != e || index < 0) return false;
  rest = name.substr(dot + 1);
  return true;
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(lr), initial_lr_(lr) {
  KILN_CHECK(!params_.empty(), ValueError, "optimizer got an empty parameter list");
  KILN_CHECK(std::isfinite(lr) && lr >= 0, ValueError, "optimizer: invalid learning rate ", lr,
             " (must be finite and >= 0)");
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    KILN_CHECK(p.defined(), ValueError, "optimizer: parameter ", i, " is an undefined tensor");
    KILN_CHECK(p.is_floating_point(), DTypeError, "optimizer: parameter ", i, " has dtype ",
               p.dtype(), "; only floating-point tensors can be optimized");
    KILN_CHECK(p.is_leaf(), ValueError, "optimizer: parameter ", i,
               " is not a leaf tensor (it was computed by an op recorded for autograd); "
               "optimize the tensors it was made from, or detach() it and call requires_grad_()");
    KILN_CHECK(p.requires_grad(), ValueError, "optimizer: parameter ", i,
               " does not require grad; call requires_grad_() on it first");
    KILN_CHECK(seen.insert(p.impl()).second, ValueError, "optimizer: parameter ", i,
               " appears more than once in the parameter list");
  }
  state_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void Optimizer::set_lr(double lr) {
  KILN_CHECK(std::isfinite(lr) && lr >= 0, ValueError, "set_lr: invalid learning rate ", lr,
             " (must be finite and >= 0)");
  lr_ = lr;
}

void Optimizer::set_momentum(double) {
  KILN_CHECK(false, ValueError, kind(), " has no momentum (nor a beta1) to set");
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad();
      if (g.grad_fn()) {
        g = g.detach();
        p.set_grad(g);
      }
      g.zero_();
    }
  }
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  s.metadata = hyper_parameters();
  s.metadata["kind"] = kind();
  s.metadata["num_params"] = std::to_string(params_.size());
  s.metadata["lr"] = detail::format_double(lr_);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (steps_[i] == 0) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    s.metadata[prefix + "step"] = std::to_string(steps_[i]);
    for (const auto& [name, t] : state_[i]) s.tensors.emplace_back(prefix + name, t.clone());
  }
  save_optimizer_state(s);
  return s;
}

void Optimizer::save_optimizer_state(OptimizerState&) const {}
std::function<void()> Optimizer::stage_optimizer_state(const OptimizerState& s) const {
  for (const auto& [name, t] : s.tensors)
    KILN_CHECK(name.rfind("optimizer.", 0) != 0, ValueError, "load_state_dict: unexpected tensor '",
               name, "': a ", kind(), " optimizer keeps no state of its own");
  for (const auto& [key, value] : s.metadata)
    KILN_CHECK(key.rfind("optimizer.", 0) != 0, ValueError,
               "load_state_dict: unexpected metadata '", key, "': a ", kind(),
               " optimizer keeps no state of its own");
  return [] {};
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  const auto& md = s.metadata;
  auto kind_it = md.find("kind");
  KILN_CHECK(kind_it != md.end(), ValueError,
             "load_state_dict: no 'kind' in the metadata (not an optimizer state dict?)");
  KILN_CHECK(kind_it->second == kind(), ValueError, "load_state_dict: the state is from a ",
             kind_it->second, " optimizer but this one is ", kind());
  auto n_it = md.find("num_params");
  KILN_CHECK(n_it != md.end(), ValueError, "load_state_dict: no 'num_params' in the metadata");
  const int64_t n = parse_int(n_it->second, "metadata 'num_params'");
  const size_t np = params_.size();
  KILN_CHECK(n == static_cast<int64_t>(np), ValueError, "load_state_dict: the state is for ", n,
             " parameters but this optimizer has ", np);
  const double lr = detail::meta_double(md, "lr");
  KILN_CHECK(std::isfinite(lr) && lr >= 0, ValueError, "load_state_dict: invalid 'lr' ", lr);
  StagedHyperParameters staged = stage_hyper_parameters(md);
  const std::function<void()> apply_optimizer_state = stage_optimizer_state(s);

  std::vector<int64_t> steps(np, 0);
  for (const auto& [key, value] : md) {
    if (key.rfind("state.", 0) != 0) continue;
    int64_t i = 0;
    std::string rest;
    KILN_CHECK(split_state_name(key, i, rest) && rest == "step", ValueError,
               "load_state_dict: unexpected metadata key '", key,
               "' (expected 'state.<index>.step')");
    KILN_CHECK(i < n, ValueError, "load_state_dict: metadata '", key, "' names parameter ", i,
               " but there are only ", n);
    const int64_t st = parse_int(value, "metadata '" + key + "'");
    KILN_CHECK(st >= 1, ValueError, "load_state_dict: metadata '", key, "' is ", st,
               "; a step count must be >= 1");
    steps[i] = st;
  }

  std::vector<std::map<std::string, Tensor>> state(np);
  const std::set<std::string> allowed(staged.state_names.begin(), staged.state_names.end());
  for (const auto& [name, t] : s.tensors) {
    if (name.rfind("optimizer.", 0) == 0) continue;  // (checked by stage_optimizer_state)
    int64_t i = 0;
    std::string rest;
    KILN_CHECK(split_state_name(name, i, rest), ValueError, "load_state_dict: unexpected tensor '",
               name, "' (expected 'state.<index>.<name>')");
    KILN_CHECK(i < n, ValueError, "load_state_dict: tensor '", name, "' names parameter ", i,
               " but there are only ", n);
    KILN_CHECK(allowed.count(rest), ValueError, "load_state_dict: unexpected tensor '", name,
               "': a ", kind(), " optimizer with these hyper-parameters has no '", rest, "' state");
    KILN_CHECK(t.defined(), ValueError, "load_state_dict: tensor '", name, "' is undefined");
    KILN_CHECK(steps[i] >= 1, ValueError, "load_state_dict: tensor '", name,
               "' is present but there is no 'state.", i, ".step' in the metadata");
    const Tensor& p = params_[i];
    KILN_CHECK(t.sizes() == p.sizes(), ShapeError, "load_state_dict: tensor '", name,
               "' has shape ", t.shape_str(), " but parameter ", i, " has shape ", p.shape_str());
    KILN_CHECK(t.dtype() == p.dtype(), DTypeError, "load_state_dict: tensor '", name,
               "' has dtype ", t.dtype(), " but parameter ", i, " has dtype ", p.dtype());
    KILN_CHECK(!state[i].count(rest), ValueError, "load_state_dict: tensor '", name,
               "' appears more than once");
    Tensor copy = make_tensor(p.sizes(), p.dtype());
    copy.copy_(t.detach());
    state[i].emplace(rest, std::move(copy));
  }
  for (size_t i = 0; i < np; ++i) {
    if (steps[i] == 0) continue;
    for (const std::string& want : staged.state_names)
      KILN_CHECK(state[i].count(want), ValueError, "load_state_dict: parameter ", i, " has step ",
                 steps[i], " but no 'state.", i, ".", want, "' tensor");
  }

  // Everything is valid: commit.
  staged.apply();
  apply_optimizer_state();
  lr_ = lr;
  steps_ = std::move(steps);
  state_ = std::move(state);
  for (size_t i = 0; i < np; ++i) name_state(i);
}

void Optimizer::name_state(size_t i) const {
  const kiln::detail::TensorName param = kiln::detail::tensor_name(params_[i], true);
  const std::string label =
      kind() + ".state[" + (param.kind == "parameter" ? param.name : "param " + std::to_string(i)) +
      "].";
  for (const auto& [name, t] : state_[i])
    kiln::detail::set_tensor_name(t, "optimizer state", label + name);
}

// ---- clip_grad_norm_ ----

namespace {

// The defined gradients of `params`, after checking clip_grad_norm_'s arguments.
std::vector<Tensor> grads_to_clip(const char* who, const std::vector<Tensor>& params,
                                  double max_norm, double norm_type) {
  KILN_CHECK(!std::isnan(norm_type) && norm_type > 0, ValueError, who,
             ": norm_type must be > 0 (or infinity), got ", norm_type);
  KILN_CHECK(!std::isnan(max_norm), ValueError, who, ": max_norm is NaN");
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) {
      KILN_CHECK(p.grad().is_floating_point(), DTypeError, who, ": a gradient has dtype ",
                 p.grad().dtype());
      grads.push_back(p.grad());
    }
  return grads;
}

}  // namespace

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                              bool error_if_nonfinite) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads =
      grads_to_clip("clip_grad_norm_tensor_", params, max_norm, norm_type);
  DType dtype = DType::Float32;
  for (const Tensor& g : grads)
    if (g.dtype() == DType::Float64) dtype = DType::Float64;
  if (grads.empty()) return zeros({}, dtype);
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) norms.push_back(norm(g, norm_type).to(dtype));
  const Tensor total = norms.size() == 1 ? norms[0] : norm(stack(norms), norm_type);
  if (error_if_nonfinite) {
    const double t = total.item<double>();
    KILN_CHECK(std::isfinite(t), ValueError, "clip_grad_norm_tensor_: the total ", norm_type,
               "-norm of the gradients is ", t,
               ", so they cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  }
  // Multiplied even when the coefficient is 1 (no value is read to decide), as PyTorch.
  const Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (const Tensor& g0 : grads) {
    Tensor g = g0;
    g.mul_(g.dtype() == dtype ? coef : coef.to(g.dtype()));
  }
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_to_clip("clip_grad_norm_", params, max_norm, norm_type);
  if (grads.empty()) return 0.0;

  const bool inf_norm = std::isinf(norm_type);
  double acc = 0;  // sum of |g|^p, or max |g|
  for (const Tensor& g0 : grads) {
    Tensor g = g0.contiguous();
    const int64_t n = g.numel();
    auto reduce = [&]<typename T>(const T* d) {
      double total = 0;
      if (inf_norm) {
        bool nan = false;  // NaN propagates (as torch.linalg.vector_norm)
#pragma omp parallel for reduction(max : total) reduction(|| : nan) if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) {
          const double a = std::abs(static_cast<double>(d[i]));
          nan = nan || std::isnan(a);
          total = a > total ? a : total;
        }
        if (nan) total = std::numeric_limits<double>::quiet_NaN();
        acc = (total > acc || std::isnan(total)) ? total : acc;
      } else if (norm_type == 2.0) {
#pragma omp parallel for simd reduction(+ : total) if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) total += static_cast<double>(d[i]) * d[i];
        acc += total;
      } else if (norm_type == 1.0) {
#pragma omp parallel for simd reduction(+ : total) if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i) total += std::abs(static_cast<double>(d[i]));
        acc += total;
      } else {
#pragma omp parallel for simd reduction(+ : total) if (n > kParallelGrain)
        for (int64_t i = 0; i < n; ++i)
          total += std::pow(std::abs(static_cast<double>(d[i])), norm_type);
        acc += total;
      }
    };
    if (g.dtype() == DType::Float32)
      reduce(g.data_ptr<float>());
    else
      reduce(g.data_ptr<double>());
  }
  const double total = inf_norm           ? acc
                       : norm_type == 2.0 ? std::sqrt(acc)
                       : norm_type == 1.0 ? acc
                                          : std::pow(acc, 1.0 / norm_type);
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total), ValueError, "clip_grad_norm_: the total ",
             norm_type, "-norm of the gradients is ", total,
             ", so they cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1.0)) {  // clamp(coef, max=1): a NaN coefficient is applied too, as PyTorch
    // A 0-d tensor, not a C++ number: under kiln::compile a number would be a constant of the
    // graph and every new coefficient a recompile.
    for (Tensor g : grads) g.mul_(detail::scalar_input(coef, g.dtype()));
  }
  return total;
}

// ---- WarmupCosineSchedule ----

WarmupCosineSchedule::WarmupCosineSchedule(double base_lr, int64_t warmup_steps,
                                           int64_t total_steps, double min_lr)
    : base_lr_(base_lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps) {
  KILN_CHECK(std::isfinite(base_lr) && base_lr >= 0, ValueError,
             "WarmupCosineSchedule: base_lr must be finite and >= 0, got ", base_lr);
  KILN_CHECK(std::isfinite(min_lr) && min_lr >= 0, ValueError,
             "WarmupCosineSchedule: min_lr must be finite and >= 0, got ", min_lr);
  KILN_CHECK(warmup_steps >= 0, ValueError, "WarmupCosineSchedule: warmup_steps must be >= 0, got ",
             warmup_steps);
  KILN_CHECK(total_steps >= warmup_steps, ValueError, "WarmupCosineSchedule: total_steps (",
             total_steps, ") must be >= warmup_steps (", warmup_steps, ")");
}

double WarmupCosineSchedule::lr_at(int64_t step) const {
  KILN_CHECK(step >= 0, ValueError, "WarmupCosineSchedule::lr_at: step must be >= 0, got ", step);
  if (step < warmup_) return base_lr_ * static_cast<double>(step) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  const double progress =
      static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
  return min_lr_ + (base_lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double WarmupCosineSchedule::apply(Optimizer& opt, int64_t step) const {
  const double lr = lr_at(step);
  opt.set_lr(lr);
  return lr;
}

}  // namespace kiln::optim
