// SGD with momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD): one
// sgd_update op per parameter (kiln/ops/optimizer_updates.h).
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/ops/optimizer_updates.h"
#include "kiln/optim/optimizer.h"
#include "optim_internal.h"

namespace kiln::optim {

namespace {

void check_options(const SGDOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.lr) && o.lr >= 0, ValueError, who, ": invalid learning rate ", o.lr);
  KILN_CHECK(std::isfinite(o.momentum) && o.momentum >= 0, ValueError, who, ": invalid momentum ",
             o.momentum);
  KILN_CHECK(std::isfinite(o.dampening), ValueError, who, ": invalid dampening ", o.dampening);
  KILN_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, ValueError, who,
             ": invalid weight_decay ", o.weight_decay);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError, who,
             ": Nesterov momentum requires a momentum > 0 and zero dampening");
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), o_(options) {
  check_options(o_, "SGD");
}

SGDOptions SGD::options() const {
  SGDOptions o = o_;
  o.lr = lr_;
  return o;
}

void SGD::step() {
  NoGradGuard no_grad;
  detail::ScalarInputs scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = detail::dense_grad(p, i, "SGD.step");
    // The buffer starts as the gradient (PyTorch's first step), also when momentum is turned
    // on later (a OneCycleLR cycling it from 0).
    const bool first = o_.momentum != 0 && !state_[i].count("momentum_buffer");
    Tensor buf;
    if (o_.momentum != 0) {
      if (first) {
        state_[i]["momentum_buffer"] = detail::zeros_like_param(p);
        name_state(i);
      }
      buf = state_[i].at("momentum_buffer");
    }
    const DType dt = p.dtype();
    sgd_update_(p, g, buf,
                {.weight_decay = scalars.get(o_.weight_decay, dt),
                 .momentum = scalars.get(o_.momentum, dt),
                 .one_minus_dampening = scalars.get(1 - o_.dampening, dt),
                 .neg_lr = scalars.get(-lr_, dt),
                 .weight_decay_on = o_.weight_decay != 0,
                 .first_step = first,
                 .nesterov = o_.nesterov,
                 .maximize = o_.maximize});
    ++steps_[i];
  }
}

void SGD::set_momentum(double value) {
  SGDOptions o = o_;
  o.momentum = value;
  check_options(o, "SGD.set_momentum");
  o_ = o;
}

std::map<std::string, std::string> SGD::hyper_parameters() const {
  return {{"momentum", detail::format_double(o_.momentum)},
          {"dampening", detail::format_double(o_.dampening)},
          {"weight_decay", detail::format_double(o_.weight_decay)},
          {"nesterov", detail::format_bool(o_.nesterov)},
          {"maximize", detail::format_bool(o_.maximize)}};
}

Optimizer::StagedHyperParameters SGD::stage_hyper_parameters(
    const std::map<std::string, std::string>& m) const {
  SGDOptions o;
  o.lr = lr_;
  o.momentum = detail::meta_double(m, "momentum");
  o.dampening = detail::meta_double(m, "dampening");
  o.weight_decay = detail::meta_double(m, "weight_decay");
  o.nesterov = detail::meta_bool(m, "nesterov");
  o.maximize = detail::meta_bool(m, "maximize");
  check_options(o, "load_state_dict");
  StagedHyperParameters s;
  if (o.momentum != 0) s.state_names = {"momentum_buffer"};
  auto* self = const_cast<SGD*>(this);
  s.apply = [self, o] { self->o_ = o; };
  return s;
}

}  // namespace kiln::optim
