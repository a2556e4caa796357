// SGD with momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD).
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"
#include "kiln/ops/pointwise.h"
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

// One pass over n elements: p, g and (when momentum != 0) buf are contiguous arrays of T.
template <typename T, bool kMomentum>
void sgd_kernel(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, bool first,
                const SGDOptions& o, double lr) {
  const T wd = static_cast<T>(o.weight_decay), mom = static_cast<T>(o.momentum);
  const T damp1 = static_cast<T>(1 - o.dampening), neg_lr = static_cast<T>(-lr);
  const bool use_wd = o.weight_decay != 0, nesterov = o.nesterov, maximize = o.maximize;
  detail::parallel_range(n, [&](int64_t b, int64_t e) {
    detail::simd_range<T>(b, e, [&]<typename X>(int64_t i) {
      X gi = detail::load<X>(g + i);
      if (maximize) gi = -gi;
      const X pi = detail::load<X>(p + i);
      if (use_wd) gi = gi + X(wd) * pi;  // grad.add(param, alpha=weight_decay)
      if constexpr (kMomentum) {
        // First step: buf = clone(grad); then buf.mul_(momentum).add_(grad, alpha=1-dampening).
        const X bi = first ? gi : detail::load<X>(buf + i) * X(mom) + X(damp1) * gi;
        detail::store(buf + i, bi);
        gi = nesterov ? gi + X(mom) * bi : bi;
      }
      detail::store(p + i, pi + X(neg_lr) * gi);  // param.add_(grad, alpha=-lr)
    });
  });
}

// The same update in Kiln ops, operation for operation (bit-identical), for kiln::compile:
// recorded into the graph instead of a sync point; scalars are 0-d graph inputs.
template <typename T>
void sgd_step_in_ops(Tensor& p, const Tensor& g, Tensor& buf, bool first, const SGDOptions& o,
                     double lr) {
  auto S = [](T value) { return detail::scalar_input(static_cast<double>(value), dtype_v<T>); };
  Tensor gi = o.maximize ? -g : g;
  if (o.weight_decay != 0) gi = gi + S(static_cast<T>(o.weight_decay)) * p;
  if (buf.defined()) {
    Tensor bi =
        first ? gi : buf * S(static_cast<T>(o.momentum)) + S(static_cast<T>(1 - o.dampening)) * gi;
    buf.copy_(bi);
    gi = o.nesterov ? gi + S(static_cast<T>(o.momentum)) * bi : bi;
  }
  p.copy_(p + S(static_cast<T>(-lr)) * gi);
}

template <typename T>
void sgd_dispatch(T* p, const T* g, T* buf, int64_t n, bool first, const SGDOptions& o, double lr) {
  if (buf)
    sgd_kernel<T, true>(p, g, buf, n, first, o, lr);
  else
    sgd_kernel<T, false>(p, g, buf, n, first, o, lr);
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
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = detail::dense_grad(p, i, "SGD.step");
    const bool first = steps_[i] == 0;
    Tensor buf;
    if (o_.momentum != 0) {
      if (first) state_[i]["momentum_buffer"] = detail::zeros_like_param(p);
      buf = state_[i].at("momentum_buffer");
    }
    if (is_dynamo_compiling()) {
      if (p.dtype() == DType::Float32)
        sgd_step_in_ops<float>(p, g, buf, first, o_, lr_);
      else
        sgd_step_in_ops<double>(p, g, buf, first, o_, lr_);
      ++steps_[i];
      continue;
    }
    detail::update_param(p, [&](void* pd) {
      if (p.dtype() == DType::Float32)
        sgd_dispatch(static_cast<float*>(pd), g.data_ptr<float>(),
                     buf.defined() ? buf.data_ptr<float>() : nullptr, p.numel(), first, o_, lr_);
      else
        sgd_dispatch(static_cast<double*>(pd), g.data_ptr<double>(),
                     buf.defined() ? buf.data_ptr<double>() : nullptr, p.numel(), first, o_, lr_);
    });
    ++steps_[i];
  }
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
