// OpInfos of the optimizers' fused updates (adam_update, sgd_update): each variant of the
// formula against a float64 reference of torch.optim's single-tensor update. The decomposition
// test (conformance_test.cpp) checks that the op-level form equals the kernel bit for bit.
#include "kiln/ops/optimizer_updates.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

// A copy of t with t's layout (a transposed sample stays transposed), so that the update's
// outputs are written through the same strides.
Tensor copy_with_layout(const Tensor& t) {
  if (t.dim() == 2 && !t.is_contiguous()) return t.t().contiguous().t();
  return t.clone();
}

Tensor scalar(double v, DType dt) { return full({}, v, dt); }

struct AdamVariant {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad, maximize;
  int64_t step;
};

AdamHyper adam_hyper(const AdamVariant& a, DType dt) {
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  const double w1 = 1 - a.beta1;
  return {.wd_factor = scalar(1 - a.lr * a.weight_decay, dt),
          .weight_decay = scalar(a.weight_decay, dt),
          .beta1_weight = scalar(w1, dt),
          .beta2 = scalar(a.beta2, dt),
          .one_minus_beta2 = scalar(1 - a.beta2, dt),
          .bc2_sqrt = scalar(std::sqrt(bc2), dt),
          .eps = scalar(a.eps, dt),
          .neg_step_size = scalar(-a.lr / bc1, dt),
          .decoupled = a.decoupled && a.weight_decay != 0,
          .l2 = !a.decoupled && a.weight_decay != 0,
          .amsgrad = a.amsgrad,
          .maximize = a.maximize,
          .lerp_from_exp_avg = dt == DType::Float32 ? static_cast<float>(w1) < 0.5f : w1 < 0.5};
}

// Inputs: param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq].
std::vector<Sample> update_samples(DType dt, int num_states) {
  auto make = [&](std::vector<int64_t> sizes, Layout layout, uint32_t seed) {
    std::vector<Tensor> in{make_tensor_for_test(sizes, dt, -1, 1, layout, seed),
                           make_tensor_for_test(sizes, dt, -1, 1, Layout::Contiguous, seed + 1)};
    for (int k = 0; k < num_states; ++k)  // states are >= 0 (exp_avg_sq must be)
      in.push_back(make_tensor_for_test(sizes, dt, 0, 0.05, layout, seed + 2 + k));
    return in;
  };
  return {{"0-d", make({}, Layout::Contiguous, 1)},
          {"[7] (vector tail only)", make({7}, Layout::Contiguous, 2)},
          {"[4, 37]", make({4, 37}, Layout::Contiguous, 3)},
          {"transposed param and state [6, 9]", make({6, 9}, Layout::Transposed, 4)},
          {"empty [0, 3]", make({0, 3}, Layout::Contiguous, 5)},
          {"large [300, 257] (threaded)", make({300, 257}, Layout::Contiguous, 6)}};
}

OpInfo adam_info(std::string name, AdamVariant a) {
  return OpInfo{
      .name = std::move(name),
      .covers = {"adam_update"},
      .dtypes = kFloatDTypes,
      .samples = [a](DType dt) { return update_samples(dt, a.amsgrad ? 3 : 2); },
      .fn =
          [a](const std::vector<Tensor>& in) {
            const AdamHyper h = adam_hyper(a, in[0].dtype());
            Tensor p = copy_with_layout(in[0]), m = copy_with_layout(in[2]);
            Tensor v = copy_with_layout(in[3]);
            Tensor vmax = a.amsgrad ? copy_with_layout(in[4]) : Tensor();
            adam_update_(p, in[1], m, v, vmax, h);
            std::vector<Tensor> out{p, m, v};
            if (a.amsgrad) out.push_back(vmax);
            return out;
          },
      .ref =
          [a](const std::vector<Ref>& in) {
            Ref p = in[0], m = in[2], v = in[3], vmax = a.amsgrad ? in[4] : in[3];
            const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
            const double bc2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
            for (size_t i = 0; i < p.v.size(); ++i) {
              double g = a.maximize ? -in[1].v[i] : in[1].v[i];
              if (!a.decoupled) g += a.weight_decay * p.v[i];
              if (a.decoupled) p.v[i] *= 1 - a.lr * a.weight_decay;
              m.v[i] += (1 - a.beta1) * (g - m.v[i]);
              v.v[i] = v.v[i] * a.beta2 + (1 - a.beta2) * g * g;
              double vi = v.v[i];
              if (a.amsgrad) vi = vmax.v[i] = std::max(vmax.v[i], vi);
              p.v[i] -= a.lr / bc1 * m.v[i] / (std::sqrt(vi) / std::sqrt(bc2) + a.eps);
            }
            std::vector<Ref> out{p, m, v};
            if (a.amsgrad) out.push_back(vmax);
            return out;
          },
      .rtol32 = 1e-4,
      .atol32 = 1e-5,
      .errors = {expect_error<ShapeError>("grad shape", "grad has shape",
                                          [a] {
                                            adam_update_(ones({3}), ones({4}), zeros({3}),
                                                         zeros({3}),
                                                         a.amsgrad ? zeros({3}) : Tensor(),
                                                         adam_hyper(a, DType::Float32));
                                          }),
                 expect_error<DTypeError>("integer parameter", "only float32 and float64",
                                          [a] {
                                            adam_update_(
                                                ones({3}, DType::Int64), ones({3}, DType::Int64),
                                                zeros({3}, DType::Int64), zeros({3}, DType::Int64),
                                                a.amsgrad ? zeros({3}, DType::Int64) : Tensor(),
                                                adam_hyper(a, DType::Float32));
                                          }),
                 expect_error<ValueError>("hyper-parameter not 0-d", "must be a 0-d tensor",
                                          [a] {
                                            AdamHyper h = adam_hyper(a, DType::Float32);
                                            h.eps = ones({2});
                                            adam_update_(ones({3}), ones({3}), zeros({3}),
                                                         zeros({3}),
                                                         a.amsgrad ? zeros({3}) : Tensor(), h);
                                          }),
                 expect_error<ValueError>("amsgrad without its state", "max_exp_avg_sq",
                                          [a] {
                                            AdamHyper h = adam_hyper(a, DType::Float32);
                                            h.amsgrad = !a.amsgrad;
                                            adam_update_(ones({3}), ones({3}), zeros({3}),
                                                         zeros({3}),
                                                         a.amsgrad ? zeros({3}) : Tensor(), h);
                                          })},
      .no_gradcheck = "an optimizer update is not differentiated (it runs under no_grad)"};
}

KILN_OPINFO(adam_info("adam_update", {.lr = 1e-2,
                                      .beta1 = 0.9,
                                      .beta2 = 0.999,
                                      .eps = 1e-8,
                                      .weight_decay = 0.1,
                                      .decoupled = false,
                                      .amsgrad = false,
                                      .maximize = false,
                                      .step = 3}));
// beta1 = 0.3: the lerp weight 0.7 takes the other side of the two-sided formula.
KILN_OPINFO(adam_info("adam_update_adamw_amsgrad_maximize", {.lr = 3e-3,
                                                             .beta1 = 0.3,
                                                             .beta2 = 0.99,
                                                             .eps = 1e-6,
                                                             .weight_decay = 0.05,
                                                             .decoupled = true,
                                                             .amsgrad = true,
                                                             .maximize = true,
                                                             .step = 1}));

struct SGDVariant {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first_step;
};

SGDHyper sgd_hyper(const SGDVariant& s, DType dt) {
  return {.weight_decay = scalar(s.weight_decay, dt),
          .momentum = scalar(s.momentum, dt),
          .one_minus_dampening = scalar(1 - s.dampening, dt),
          .neg_lr = scalar(-s.lr, dt),
          .weight_decay_on = s.weight_decay != 0,
          .first_step = s.first_step,
          .nesterov = s.nesterov,
          .maximize = s.maximize};
}

OpInfo sgd_info(std::string name, SGDVariant s) {
  const bool has_buffer = s.momentum != 0;
  return OpInfo{
      .name = std::move(name),
      .covers = {"sgd_update"},
      .dtypes = kFloatDTypes,
      .samples = [has_buffer](DType dt) { return update_samples(dt, has_buffer ? 1 : 0); },
      .fn =
          [s, has_buffer](const std::vector<Tensor>& in) {
            Tensor p = copy_with_layout(in[0]);
            Tensor buf = has_buffer ? copy_with_layout(in[2]) : Tensor();
            sgd_update_(p, in[1], buf, sgd_hyper(s, in[0].dtype()));
            return has_buffer ? std::vector<Tensor>{p, buf} : std::vector<Tensor>{p};
          },
      .ref =
          [s, has_buffer](const std::vector<Ref>& in) {
            Ref p = in[0], buf = has_buffer ? in[2] : in[0];
            for (size_t i = 0; i < p.v.size(); ++i) {
              double g = s.maximize ? -in[1].v[i] : in[1].v[i];
              g += s.weight_decay * p.v[i];
              if (has_buffer) {
                buf.v[i] = s.first_step ? g : buf.v[i] * s.momentum + (1 - s.dampening) * g;
                g = s.nesterov ? g + s.momentum * buf.v[i] : buf.v[i];
              }
              p.v[i] -= s.lr * g;
            }
            return has_buffer ? std::vector<Ref>{p, buf} : std::vector<Ref>{p};
          },
      .errors = {expect_error<ShapeError>("grad shape", "grad has shape",
                                          [s, has_buffer] {
                                            sgd_update_(ones({3}), ones({2, 3}),
                                                        has_buffer ? zeros({3}) : Tensor(),
                                                        sgd_hyper(s, DType::Float32));
                                          }),
                 expect_error<DTypeError>("buffer dtype", "momentum_buffer has dtype",
                                          [s] {
                                            sgd_update_(ones({3}), ones({3}),
                                                        zeros({3}, DType::Float64),
                                                        sgd_hyper(s, DType::Float32));
                                          })},
      .no_gradcheck = "an optimizer update is not differentiated (it runs under no_grad)"};
}

KILN_OPINFO(sgd_info("sgd_update_momentum", {.lr = 0.1,
                                             .momentum = 0.9,
                                             .dampening = 0.1,
                                             .weight_decay = 0.01,
                                             .nesterov = false,
                                             .maximize = false,
                                             .first_step = false}));
KILN_OPINFO(sgd_info("sgd_update_nesterov_first_step_maximize", {.lr = 0.05,
                                                                 .momentum = 0.8,
                                                                 .dampening = 0,
                                                                 .weight_decay = 0,
                                                                 .nesterov = true,
                                                                 .maximize = true,
                                                                 .first_step = true}));
KILN_OPINFO(sgd_info("sgd_update_plain", {.lr = 0.5,
                                          .momentum = 0,
                                          .dampening = 0,
                                          .weight_decay = 0.2,
                                          .nesterov = false,
                                          .maximize = false,
                                          .first_step = false}));

}  // namespace
}  // namespace kiln::testing
