// Adagrad (torch.optim.Adagrad): composed of tensor ops, which inductor fuses into one loop per
// parameter under kiln::compile.
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/pointwise.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

void check_options(const AdagradOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, ValueError, who, ": invalid learning rate ", o.lr);
  detail::check_non_negative(who, "lr_decay", o.lr_decay);
  detail::check_non_negative(who, "weight_decay", o.weight_decay);
  detail::check_non_negative(who, "initial_accumulator_value", o.initial_accumulator_value);
  detail::check_non_negative(who, "epsilon", o.eps);
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Optimizer(std::move(params), options.lr), o_(options) {
  check_options(o_, "Adagrad");
}

AdagradOptions Adagrad::options() const {
  AdagradOptions o = o_;
  o.lr = lr_;
  return o;
}

void Adagrad::step() {
  NoGradGuard no_grad;
  detail::ScalarInputs scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const Tensor g =
        detail::decayed_grad(p, i, "Adagrad.step", o_.maximize, o_.weight_decay, scalars);
    if (steps_[i] == 0) {
      state_[i]["sum"] = detail::filled_like_param(p, o_.initial_accumulator_value);
      name_state(i);
    }
    const int64_t t = ++steps_[i];
    const double clr = lr_ / (1 + static_cast<double>(t - 1) * o_.lr_decay);
    Tensor& sum = state_[i].at("sum");
    addcmul_(sum, g, g);
    const Tensor std = sqrt(sum) + scalars.get(o_.eps, p.dtype());
    add_(p, scalars.get(-clr, p.dtype()) * g / std);
  }
}

std::map<std::string, std::string> Adagrad::hyper_parameters() const {
  return {{"lr_decay", detail::format_double(o_.lr_decay)},
          {"weight_decay", detail::format_double(o_.weight_decay)},
          {"initial_accumulator_value", detail::format_double(o_.initial_accumulator_value)},
          {"eps", detail::format_double(o_.eps)},
          {"maximize", detail::format_bool(o_.maximize)}};
}

Optimizer::StagedHyperParameters Adagrad::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  AdagradOptions o;
  o.lr = lr_;
  o.lr_decay = detail::meta_double(m, "lr_decay");
  o.weight_decay = detail::meta_double(m, "weight_decay");
  o.initial_accumulator_value = detail::meta_double(m, "initial_accumulator_value");
  o.eps = detail::meta_double(m, "eps");
  o.maximize = detail::meta_bool(m, "maximize");
  check_options(o, "load_state_dict");
  StagedHyperParameters s;
  s.state_names = {"sum"};
  auto* self = const_cast<Adagrad*>(this);
  s.apply = [self, o] { self->o_ = o; };
  return s;
}

}  // namespace kiln::optim
