// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), with
// optional AMSGrad: torch.optim.Adam / torch.optim.AdamW. One fused pass per parameter.
#include <cmath>

#include "kiln/autograd/autograd.h"
#include "kiln/capture/compile.h"
#include "kiln/ops/pointwise.h"
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

struct AdamScalars {
  double wd_factor;     // AdamW: 1 - lr * weight_decay
  double weight_decay;  // Adam: L2 coefficient
  double beta1_weight;  // 1 - beta1 (lerp weight)
  double beta2, one_minus_beta2;
  double bc2_sqrt;  // sqrt(1 - beta2^t)
  double eps;
  double neg_step_size;  // -lr / (1 - beta1^t)
};

template <typename T, bool kDecoupled, bool kL2, bool kAmsgrad>
void adam_kernel(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                 T* __restrict vmax, int64_t n, bool maximize, const AdamScalars& s) {
  const T wd_factor = static_cast<T>(s.wd_factor), wd = static_cast<T>(s.weight_decay);
  const T w1 = static_cast<T>(s.beta1_weight), b2 = static_cast<T>(s.beta2);
  const T omb2 = static_cast<T>(s.one_minus_beta2), bc2 = static_cast<T>(s.bc2_sqrt);
  const T eps = static_cast<T>(s.eps), nss = static_cast<T>(s.neg_step_size);
  const T one_minus_w1 = T(1) - w1;
  const bool low_weight = w1 < T(0.5);
  detail::parallel_range(n, [&](int64_t b, int64_t e) {
    detail::simd_range<T>(b, e, [&]<typename X>(int64_t i) {
      X gi = detail::load<X>(g + i);
      if (maximize) gi = -gi;
      X pi = detail::load<X>(p + i);
      if constexpr (kL2) gi = gi + X(wd) * pi;           // grad.add(param, alpha=weight_decay)
      if constexpr (kDecoupled) pi = pi * X(wd_factor);  // param.mul_(1 - lr * weight_decay)
      // exp_avg.lerp_(grad, 1 - beta1), with PyTorch's two-sided lerp formula.
      const X m0 = detail::load<X>(m + i);
      const X mi = low_weight ? m0 + X(w1) * (gi - m0) : gi - (gi - m0) * X(one_minus_w1);
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
      X vi = detail::load<X>(v + i) * X(b2) + X(omb2) * gi * gi;
      detail::store(m + i, mi);
      detail::store(v + i, vi);
      if constexpr (kAmsgrad) {  // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=...)
        vi = detail::vmaximum(detail::load<X>(vmax + i), vi);
        detail::store(vmax + i, vi);
      }
      const X denom = detail::vsqrt(vi) / X(bc2) + X(eps);  // (v.sqrt() / bc2_sqrt).add_(eps)
      detail::store(p + i, pi + X(nss) * mi / denom);       // param.addcdiv_(m, denom, -step)
    });
  });
}

template <typename T>
void adam_dispatch(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, bool decoupled, bool l2,
                   bool amsgrad, bool maximize, const AdamScalars& s) {
  if (decoupled) {
    if (amsgrad)
      adam_kernel<T, true, false, true>(p, g, m, v, vmax, n, maximize, s);
    else
      adam_kernel<T, true, false, false>(p, g, m, v, vmax, n, maximize, s);
  } else if (l2) {
    if (amsgrad)
      adam_kernel<T, false, true, true>(p, g, m, v, vmax, n, maximize, s);
    else
      adam_kernel<T, false, true, false>(p, g, m, v, vmax, n, maximize, s);
  } else {
    if (amsgrad)
      adam_kernel<T, false, false, true>(p, g, m, v, vmax, n, maximize, s);
    else
      adam_kernel<T, false, false, false>(p, g, m, v, vmax, n, maximize, s);
  }
}

// The same update written in Kiln ops, operation for operation as adam_kernel computes it (so
// the results are bit-identical), for use under kiln::compile: the ops are recorded into the
// captured graph instead of reading parameter data (which would be a sync point). Every scalar
// is a concrete 0-d tensor, a graph input, so that a new learning rate or step count does not
// change the graph (no recompile).
template <typename T>
void adam_step_in_ops(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& vmax,
                      bool decoupled, bool l2, bool amsgrad, bool maximize, const AdamScalars& s) {
  auto S = [](T value) { return detail::scalar_input(static_cast<double>(value), dtype_v<T>); };
  const T w1 = static_cast<T>(s.beta1_weight);
  Tensor gi = maximize ? -g : g;
  Tensor pi = p;
  if (l2) gi = gi + S(static_cast<T>(s.weight_decay)) * pi;
  if (decoupled) pi = pi * S(static_cast<T>(s.wd_factor));
  Tensor mi = w1 < T(0.5) ? m + S(w1) * (gi - m) : gi - (gi - m) * S(T(1) - w1);
  Tensor vi = v * S(static_cast<T>(s.beta2)) + S(static_cast<T>(s.one_minus_beta2)) * gi * gi;
  m.copy_(mi);
  v.copy_(vi);
  if (amsgrad) {
    vi = maximum(vmax, vi);
    vmax.copy_(vi);
  }
  Tensor denom = sqrt(vi) / S(static_cast<T>(s.bc2_sqrt)) + S(static_cast<T>(s.eps));
  p.copy_(pi + S(static_cast<T>(s.neg_step_size)) * mi / denom);
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
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    Tensor g = detail::dense_grad(p, i, decoupled_ ? "AdamW.step" : "Adam.step");
    auto& st = state_[i];
    if (steps_[i] == 0) {
      st["exp_avg"] = detail::zeros_like_param(p);
      st["exp_avg_sq"] = detail::zeros_like_param(p);
      if (o_.amsgrad) st["max_exp_avg_sq"] = detail::zeros_like_param(p);
    }
    const int64_t step = ++steps_[i];
    const double t = static_cast<double>(step);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    AdamScalars s{.wd_factor = 1 - lr_ * o_.weight_decay,
                  .weight_decay = o_.weight_decay,
                  .beta1_weight = 1 - beta1,
                  .beta2 = beta2,
                  .one_minus_beta2 = 1 - beta2,
                  .bc2_sqrt = std::sqrt(bc2),
                  .eps = o_.eps,
                  .neg_step_size = -(lr_ / bc1)};
    const bool decoupled = decoupled_ && o_.weight_decay != 0;
    const bool l2 = !decoupled_ && o_.weight_decay != 0;
    Tensor m = st.at("exp_avg"), v = st.at("exp_avg_sq");
    Tensor vmax = o_.amsgrad ? st.at("max_exp_avg_sq") : Tensor();
    if (is_dynamo_compiling()) {
      if (p.dtype() == DType::Float32)
        adam_step_in_ops<float>(p, g, m, v, vmax, decoupled, l2, o_.amsgrad, o_.maximize, s);
      else
        adam_step_in_ops<double>(p, g, m, v, vmax, decoupled, l2, o_.amsgrad, o_.maximize, s);
      continue;
    }
    detail::update_param(p, [&](void* pd) {
      if (p.dtype() == DType::Float32)
        adam_dispatch(static_cast<float*>(pd), g.data_ptr<float>(), m.data_ptr<float>(),
                      v.data_ptr<float>(), vmax.defined() ? vmax.data_ptr<float>() : nullptr,
                      p.numel(), decoupled, l2, o_.amsgrad, o_.maximize, s);
      else
        adam_dispatch(static_cast<double*>(pd), g.data_ptr<double>(), m.data_ptr<double>(),
                      v.data_ptr<double>(), vmax.defined() ? vmax.data_ptr<double>() : nullptr,
                      p.numel(), decoupled, l2, o_.amsgrad, o_.maximize, s);
    });
  }
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
