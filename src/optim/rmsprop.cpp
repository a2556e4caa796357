// RMSprop (torch.optim.RMSprop), centered or not, with momentum: composed of tensor ops, which
// inductor fuses into one loop per parameter under kiln::compile.
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

void check_options(const RMSpropOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, ValueError, who, ": invalid learning rate ", o.lr);
  detail::check_non_negative(who, "epsilon", o.eps);
  detail::check_non_negative(who, "momentum", o.momentum);
  detail::check_non_negative(who, "weight_decay", o.weight_decay);
  detail::check_non_negative(who, "alpha", o.alpha);
}

std::vector<std::string> state_names(const RMSpropOptions& o) {
  std::vector<std::string> names = {"square_avg"};
  if (o.momentum > 0) names.push_back("momentum_buffer");
  if (o.centered) names.push_back("grad_avg");
  return names;
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : Optimizer(std::move(params), options.lr), o_(options) {
  check_options(o_, "RMSprop");
}

RMSpropOptions RMSprop::options() const {
  RMSpropOptions o = o_;
  o.lr = lr_;
  return o;
}

void RMSprop::step() {
  NoGradGuard no_grad;
  detail::ScalarInputs scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const Tensor g =
        detail::decayed_grad(p, i, "RMSprop.step", o_.maximize, o_.weight_decay, scalars);
    auto& st = state_[i];
    // (A buffer missing now: the first step, or momentum turned on since.)
    bool made = false;
    for (const std::string& name : state_names(o_))
      if (!st.count(name)) st[name] = detail::zeros_like_param(p), made = true;
    if (made) name_state(i);
    ++steps_[i];
    Tensor& square_avg = st.at("square_avg");
    square_avg.mul_(o_.alpha);
    addcmul_(square_avg, g, g, 1 - o_.alpha);
    Tensor avg;
    if (o_.centered) {
      Tensor& grad_avg = st.at("grad_avg");
      lerp_(grad_avg, g, 1 - o_.alpha);
      avg = sqrt(addcmul(square_avg, grad_avg, grad_avg, -1));
    } else {
      avg = sqrt(square_avg);
    }
    avg.add_(o_.eps);
    const Tensor neg_lr = scalars.get(-lr_, p.dtype());
    if (o_.momentum > 0) {
      Tensor& buf = st.at("momentum_buffer");
      buf.mul_(o_.momentum);
      addcdiv_(buf, g, avg);
      addcmul_(p, buf, neg_lr);
    } else {
      add_(p, neg_lr * g / avg);
    }
  }
}

void RMSprop::set_momentum(double value) {
  RMSpropOptions o = o_;
  o.momentum = value;
  check_options(o, "RMSprop.set_momentum");
  o_ = o;
}

std::map<std::string, std::string> RMSprop::hyper_parameters() const {
  return {{"alpha", detail::format_double(o_.alpha)},
          {"eps", detail::format_double(o_.eps)},
          {"weight_decay", detail::format_double(o_.weight_decay)},
          {"momentum", detail::format_double(o_.momentum)},
          {"centered", detail::format_bool(o_.centered)},
          {"maximize", detail::format_bool(o_.maximize)}};
}

Optimizer::StagedHyperParameters RMSprop::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  RMSpropOptions o;
  o.lr = lr_;
  o.alpha = detail::meta_double(m, "alpha");
  o.eps = detail::meta_double(m, "eps");
  o.weight_decay = detail::meta_double(m, "weight_decay");
  o.momentum = detail::meta_double(m, "momentum");
  o.centered = detail::meta_bool(m, "centered");
  o.maximize = detail::meta_bool(m, "maximize");
  check_options(o, "load_state_dict");
  StagedHyperParameters s;
  s.state_names = state_names(o);
  auto* self = const_cast<RMSprop*>(this);
  s.apply = [self, o] { self->o_ = o; };
  return s;
}

}  // namespace kiln::optim
