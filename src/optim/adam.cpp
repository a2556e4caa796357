// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), with
// optional AMSGrad: torch.optim.Adam / torch.optim.AdamW. One adam_update op per parameter
// (kiln/ops/optimizer_updates.h): one fused pass eagerly, one graph node under kiln::compile.
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/optimizer_updates.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

void check_options(const AdamOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, ValueError, who, ": invalid learning rate ", o.lr);
  KILN_CHECK(o.eps >= 0 && std::isfinite(o.eps), ValueError, who, ": invalid epsilon ", o.eps);
  KILN_CHECK(o.betas.first >= 0 && o.betas.first < 1, ValueError, who,
             ": invalid beta parameter at index 0: ", o.betas.first, " (must be in [0, 1))");
  KILN_CHECK(o.betas.second >= 0 && o.betas.second < 1, ValueError, who,
             ": invalid beta parameter at index 1: ", o.betas.second, " (must be in [0, 1))");
  KILN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, ValueError, who,
             ": invalid weight_decay ", o.weight_decay);
}

AdamOptions from_adamw(const AdamWOptions& o) {
  return {.lr = o.lr,
          .betas = o.betas,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), options.lr), o_(options), decoupled_(decoupled) {
  check_options(o_, decoupled ? "AdamW" : "Adam");
}

AdamOptions Adam::options() const {
  AdamOptions o = o_;
  o.lr = lr_;
  return o;
}

void Adam::step() {
  NoGradGuard no_grad;
  const auto [beta1, beta2] = o_.betas;
  detail::ScalarInputs scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = detail::dense_grad(p, i, decoupled_ ? "AdamW.step" : "Adam.step");
    auto& st = state_[i];
    if (steps_[i] == 0) {
      st["exp_avg"] = detail::zeros_like_param(p);
      st["exp_avg_sq"] = detail::zeros_like_param(p);
      if (o_.amsgrad) st["max_exp_avg_sq"] = detail::zeros_like_param(p);
      name_state(i);
    }
    const int64_t step = ++steps_[i];
    const double t = static_cast<double>(step);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    const DType dt = p.dtype();
    AdamHyper h{.wd_factor = scalars.get(1 - lr_ * o_.weight_decay, dt),
                .weight_decay = scalars.get(o_.weight_decay, dt),
                .beta1_weight = scalars.get(1 - beta1, dt),
                .beta2 = scalars.get(beta2, dt),
                .one_minus_beta2 = scalars.get(1 - beta2, dt),
                .bc2_sqrt = scalars.get(std::sqrt(bc2), dt),
                .eps = scalars.get(o_.eps, dt),
                .neg_step_size = scalars.get(-(lr_ / bc1), dt),
                .decoupled = decoupled_ && o_.weight_decay != 0,
                .l2 = !decoupled_ && o_.weight_decay != 0,
                .amsgrad = o_.amsgrad,
                .maximize = o_.maximize,
                .lerp_from_exp_avg = detail::below_half_in(1 - beta1, dt)};
    adam_update_(p, g, st.at("exp_avg"), st.at("exp_avg_sq"),
                 o_.amsgrad ? st.at("max_exp_avg_sq") : Tensor(), h);
  }
}

void Adam::set_momentum(double beta1) {
  AdamOptions o = o_;
  o.betas.first = beta1;
  check_options(o, decoupled_ ? "AdamW.set_momentum" : "Adam.set_momentum");
  o_ = o;
}

std::map<std::string, std::string> Adam::hyper_parameters() const {
  return {{"beta1", detail::format_double(o_.betas.first)},
          {"beta2", detail::format_double(o_.betas.second)},
          {"eps", detail::format_double(o_.eps)},
          {"weight_decay", detail::format_double(o_.weight_decay)},
          {"amsgrad", detail::format_bool(o_.amsgrad)},
          {"maximize", detail::format_bool(o_.maximize)}};
}

Optimizer::StagedHyperParameters Adam::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  AdamOptions o;
  o.lr = lr_;
  o.betas = {detail::meta_double(m, "beta1"), detail::meta_double(m, "beta2")};
  o.eps = detail::meta_double(m, "eps");
  o.weight_decay = detail::meta_double(m, "weight_decay");
  o.amsgrad = detail::meta_bool(m, "amsgrad");
  o.maximize = detail::meta_bool(m, "maximize");
  check_options(o, "load_state_dict");
  StagedHyperParameters s;
  s.state_names = {"exp_avg", "exp_avg_sq"};
  if (o.amsgrad) s.state_names.push_back("max_exp_avg_sq");
  auto* self = const_cast<Adam*>(this);
  s.apply = [self, o] { self->o_ = o; };
  return s;
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::move(params), from_adamw(options), true) {}

AdamWOptions AdamW::options() const {
  AdamOptions o = Adam::options();
  return {.lr = o.lr,
          .betas = o.betas,
          .eps = o.eps,
          .weight_decay = o.weight_decay,
          .amsgrad = o.amsgrad,
          .maximize = o.maximize};
}

}  // namespace kiln::optim
