// Adadelta (torch.optim.Adadelta): composed of tensor ops, which inductor fuses into one loop
// per parameter under kiln::compile.
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

void check_options(const AdadeltaOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, ValueError, who, ": invalid learning rate ", o.lr);
  KILN_CHECK(o.rho >= 0 && o.rho <= 1, ValueError, who, ": invalid rho value: ", o.rho,
             " (must be in [0, 1])");
  detail::check_non_negative(who, "epsilon", o.eps);
  detail::check_non_negative(who, "weight_decay", o.weight_decay);
}

}  // namespace

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options)
    : Optimizer(std::move(params), options.lr), o_(options) {
  check_options(o_, "Adadelta");
}

AdadeltaOptions Adadelta::options() const {
  AdadeltaOptions o = o_;
  o.lr = lr_;
  return o;
}

void Adadelta::step() {
  NoGradGuard no_grad;
  detail::ScalarInputs scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const Tensor g =
        detail::decayed_grad(p, i, "Adadelta.step", o_.maximize, o_.weight_decay, scalars);
    auto& st = state_[i];
    if (steps_[i] == 0) {
      st["square_avg"] = detail::zeros_like_param(p);
      st["acc_delta"] = detail::zeros_like_param(p);
      name_state(i);
    }
    ++steps_[i];
    Tensor& square_avg = st.at("square_avg");
    Tensor& acc_delta = st.at("acc_delta");
    square_avg.mul_(o_.rho);
    addcmul_(square_avg, g, g, 1 - o_.rho);
    const Tensor std = sqrt(square_avg + o_.eps);
    const Tensor delta = sqrt(acc_delta + o_.eps) / std * g;
    acc_delta.mul_(o_.rho);
    addcmul_(acc_delta, delta, delta, 1 - o_.rho);
    addcmul_(p, delta, scalars.get(-lr_, p.dtype()));
  }
}

std::map<std::string, std::string> Adadelta::hyper_parameters() const {
  return {{"rho", detail::format_double(o_.rho)},
          {"eps", detail::format_double(o_.eps)},
          {"weight_decay", detail::format_double(o_.weight_decay)},
          {"maximize", detail::format_bool(o_.maximize)}};
}

Optimizer::StagedHyperParameters Adadelta::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  AdadeltaOptions o;
  o.lr = lr_;
  o.rho = detail::meta_double(m, "rho");
  o.eps = detail::meta_double(m, "eps");
  o.weight_decay = detail::meta_double(m, "weight_decay");
  o.maximize = detail::meta_bool(m, "maximize");
  check_options(o, "load_state_dict");
  StagedHyperParameters s;
  s.state_names = {"square_avg", "acc_delta"};
  auto* self = const_cast<Adadelta*>(this);
  s.apply = [self, o] { self->o_ = o; };
  return s;
}

}  // namespace kiln::optim
