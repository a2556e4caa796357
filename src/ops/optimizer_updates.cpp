// adam_update and sgd_update: the optimizers' per-parameter updates as fused in-place ops (see
// kiln/ops/optimizer_updates.h). The kernel is one SIMD pass over the parameter and its state;
// the decomposition is the same formula in Kiln ops, operation for operation, so the two round
// identically (this file, like the pointwise ops, is compiled with -ffp-contract=off).
#include <cstring>

#include "kiln/ops/optimizer_updates.h"
#include "kiln/ops/pointwise.h"
#include "ops/kernels/loops.h"
#include "ops/kernels/vec.h"
#include "ops/op_utils.h"

namespace kiln {
namespace ops {

namespace {

// Input positions. Adam: the tensors the update walks, then its eight 0-d hyper-parameters,
// then max_exp_avg_sq when amsgrad. SGD: param and grad, four 0-d hyper-parameters, then the
// momentum buffer when there is one.
enum AdamInput : size_t {
  kAdamParam,
  kAdamGrad,
  kAdamExpAvg,
  kAdamExpAvgSq,
  kAdamWdFactor,
  kAdamWeightDecay,
  kAdamBeta1Weight,
  kAdamBeta2,
  kAdamOneMinusBeta2,
  kAdamBc2Sqrt,
  kAdamEps,
  kAdamNegStepSize,
  kAdamMaxExpAvgSq,
};
enum AdamAttr : size_t {
  kAdamDecoupled,
  kAdamL2,
  kAdamAmsgrad,
  kAdamMaximize,
  kAdamLerpFromExpAvg
};
enum SGDInput : size_t {
  kSgdParam,
  kSgdGrad,
  kSgdWeightDecay,
  kSgdMomentum,
  kSgdOneMinusDampening,
  kSgdNegLr,
  kSgdBuffer,
};
enum SGDAttr : size_t {
  kSgdHasBuffer,
  kSgdFirstStep,
  kSgdNesterov,
  kSgdMaximize,
  kSgdWeightDecayOn
};

// Checks what every update op asks of its operands: a floating parameter, state tensors of its
// shape and dtype, 0-d hyper-parameters of its dtype.
void check_update_operands(const OpCall& c, std::span<const size_t> state, const char* const* names,
                           size_t first_scalar, size_t num_scalars,
                           const char* const* scalar_names) {
  const Tensor& p = c.in(0);
  KILN_CHECK(is_floating(p.dtype()), DTypeError, c.op.name, ": the parameter has dtype ", p.dtype(),
             "; only float32 and float64 parameters can be updated");
  for (size_t k = 0; k < state.size(); ++k) {
    const Tensor& t = c.in(state[k]);
    KILN_CHECK(t.sizes() == p.sizes(), ShapeError, c.op.name, ": ", names[k], " has shape ",
               t.shape_str(), " but the parameter has shape ", p.shape_str());
    KILN_CHECK(t.dtype() == p.dtype(), DTypeError, c.op.name, ": ", names[k], " has dtype ",
               t.dtype(), " but the parameter has dtype ", p.dtype());
  }
  for (size_t k = 0; k < num_scalars; ++k) {
    const Tensor& s = c.in(first_scalar + k);
    KILN_CHECK(s.dim() == 0 && s.dtype() == p.dtype(), ValueError, c.op.name, ": ", scalar_names[k],
               " must be a 0-d tensor of the parameter's dtype ", p.dtype(), ", got shape ",
               s.shape_str(), " and dtype ", s.dtype());
  }
}

template <typename T>
T scalar_value(const Tensor& t) {
  return *static_cast<const T*>(t.data_ptr());
}

// Runs step(a, i) on vectors at i = 0, W, 2W, ... of n contiguous elements per operand (the
// first NOut written, the rest read); the tail goes through zero-padded copies, so that every
// element is computed by the same vector code wherever it sits.
template <typename T, size_t NOut, size_t N, typename Step>
void for_each_vector(const std::array<char*, N>& p, int64_t n, Step&& step) {
  constexpr int64_t W = vec::Vec<T>::width;
  std::array<T*, N> a;
  for (size_t k = 0; k < N; ++k) a[k] = reinterpret_cast<T*>(p[k]);
  int64_t i = 0;
  for (; i + W <= n; i += W) step(a, i);
  if (i == n) return;
  const size_t tail = static_cast<size_t>(n - i) * sizeof(T);
  alignas(64) T pad[N][W] = {};
  std::array<T*, N> b;
  for (size_t k = 0; k < N; ++k) {
    b[k] = pad[k];
    if (k >= NOut) std::memcpy(pad[k], a[k] + i, tail);
  }
  step(b, 0);
  for (size_t k = 0; k < NOut; ++k) std::memcpy(a[k] + i, pad[k], tail);
}

// ---- adam_update ----

const char* const kAdamStateNames[] = {"grad", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
const char* const kAdamScalarNames[] = {"wd_factor", "weight_decay",    "beta1_weight",
                                        "beta2",     "one_minus_beta2", "bc2_sqrt",
                                        "eps",       "neg_step_size"};

int adam_update_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const bool amsgrad = c.attrs.b(kAdamAmsgrad);
  const size_t want = amsgrad ? kAdamMaxExpAvgSq + 1 : kAdamMaxExpAvgSq;
  KILN_CHECK(c.inputs.size() == want, ValueError, "adam_update: expected ", want,
             " tensors (max_exp_avg_sq ", amsgrad ? "given" : "left out", " with amsgrad=", amsgrad,
             "), got ", c.inputs.size());
  KILN_CHECK(!(c.attrs.b(kAdamDecoupled) && c.attrs.b(kAdamL2)), ValueError,
             "adam_update: decoupled and l2 weight decay are mutually exclusive");
  const size_t state[] = {kAdamGrad, kAdamExpAvg, kAdamExpAvgSq, kAdamMaxExpAvgSq};
  check_update_operands(c, std::span(state, amsgrad ? 4 : 3), kAdamStateNames, kAdamWdFactor, 8,
                        kAdamScalarNames);
  const int n = amsgrad ? 4 : 3;
  for (int i = 0; i < n; ++i) out[i] = {c.in(0).dtype(), c.in(0).sizes()};
  return n;
}

template <typename T, bool kAmsgrad>
void adam_update_loop(const OpCall& c, std::span<Tensor> out) {
  using V = vec::Vec<T>;
  auto s = [&](size_t k) { return V(scalar_value<T>(c.in(k))); };
  const V wd_factor = s(kAdamWdFactor), wd = s(kAdamWeightDecay), w1 = s(kAdamBeta1Weight);
  const V one_minus_w1 = V(T(1)) - w1, b2 = s(kAdamBeta2), omb2 = s(kAdamOneMinusBeta2);
  const V bc2 = s(kAdamBc2Sqrt), eps = s(kAdamEps), nss = s(kAdamNegStepSize);
  const bool decoupled = c.attrs.b(kAdamDecoupled), l2 = c.attrs.b(kAdamL2);
  const bool maximize = c.attrs.b(kAdamMaximize), from_exp_avg = c.attrs.b(kAdamLerpFromExpAvg);
  // Operands: the outputs (param, exp_avg, exp_avg_sq[, max]), then param, grad, exp_avg,
  // exp_avg_sq[, max] as read.
  constexpr size_t NOut = kAmsgrad ? 4 : 3, N = 2 * NOut + 1;
  enum : size_t { P = 0, M = 1, Vs = 2, Vmax = 3 };
  constexpr size_t Pin = NOut, G = NOut + 1, Min = NOut + 2, Vin = NOut + 3, VmaxIn = NOut + 4;
  std::array<const Tensor*, N> operands;
  for (size_t k = 0; k < NOut; ++k) operands[k] = &out[k];
  operands[Pin] = &c.in(kAdamParam);
  operands[G] = &c.in(kAdamGrad);
  operands[Min] = &c.in(kAdamExpAvg);
  operands[Vin] = &c.in(kAdamExpAvgSq);
  if constexpr (kAmsgrad) operands[VmaxIn] = &c.in(kAdamMaxExpAvgSq);
  kernels::pointwise_loop_n<NOut>(operands, [&](const std::array<char*, N>& p, int64_t n) {
    for_each_vector<T, NOut>(p, n, [&](const std::array<T*, N>& a, int64_t i) {
      V g = V::load(a[G] + i);
      if (maximize) g = -g;
      V param = V::load(a[Pin] + i);
      if (l2) g = g + wd * param;
      if (decoupled) param = param * wd_factor;
      const V m0 = V::load(a[Min] + i);
      const V m = from_exp_avg ? m0 + w1 * (g - m0) : g - (g - m0) * one_minus_w1;
      V v = V::load(a[Vin] + i) * b2 + omb2 * g * g;
      m.store(a[M] + i);
      v.store(a[Vs] + i);
      if constexpr (kAmsgrad) {
        v = vec::max_nan(V::load(a[VmaxIn] + i), v);
        v.store(a[Vmax] + i);
      }
      const V denom = vec::sqrt(v) / bc2 + eps;
      (param + nss * m / denom).store(a[P] + i);
    });
  });
}

void adam_update_kernel(const OpCall& c, std::span<Tensor> out) {
  KILN_DTYPE_SWITCH_FLOATING(c.in(0).dtype(), "adam_update", [&]<typename T>() {
    if (c.attrs.b(kAdamAmsgrad))
      adam_update_loop<T, true>(c, out);
    else
      adam_update_loop<T, false>(c, out);
  });
}

void adam_update_decomposition(const OpCall& c, std::span<Tensor> results) {
  const Tensor& s_wd_factor = c.in(kAdamWdFactor);
  const Tensor& w1 = c.in(kAdamBeta1Weight);
  const Tensor& exp_avg = c.in(kAdamExpAvg);
  Tensor g = c.attrs.b(kAdamMaximize) ? -c.in(kAdamGrad) : c.in(kAdamGrad);
  Tensor param = c.in(kAdamParam);
  if (c.attrs.b(kAdamL2)) g = g + c.in(kAdamWeightDecay)*param;
  if (c.attrs.b(kAdamDecoupled)) param = param * s_wd_factor;
  const Tensor m = c.attrs.b(kAdamLerpFromExpAvg) ? exp_avg + w1 * (g - exp_avg)
                                                  : g - (g - exp_avg) * (1.0 - w1);
  Tensor v = c.in(kAdamExpAvgSq)*c.in(kAdamBeta2) + c.in(kAdamOneMinusBeta2)*g * g;
  results[1] = m;
  results[2] = v;
  if (c.attrs.b(kAdamAmsgrad)) {
    v = maximum(c.in(kAdamMaxExpAvgSq), v);
    results[3] = v;
  }
  const Tensor denom = sqrt(v) / c.in(kAdamBc2Sqrt) + c.in(kAdamEps);
  results[0] = param + c.in(kAdamNegStepSize)*m / denom;
}

// ---- sgd_update ----

const char* const kSgdStateNames[] = {"grad", "momentum_buffer"};
const char* const kSgdScalarNames[] = {"weight_decay", "momentum", "one_minus_dampening", "neg_lr"};

int sgd_update_meta(const OpCall& c, std::span<TensorMeta, kMaxOpOutputs> out) {
  const bool has_buffer = c.attrs.b(kSgdHasBuffer);
  const size_t want = has_buffer ? kSgdBuffer + 1 : kSgdBuffer;
  KILN_CHECK(c.inputs.size() == want, ValueError, "sgd_update: expected ", want,
             " tensors (momentum_buffer ", has_buffer ? "given" : "left out",
             " with has_momentum_buffer=", has_buffer, "), got ", c.inputs.size());
  KILN_CHECK(has_buffer || !c.attrs.b(kSgdNesterov), ValueError,
             "sgd_update: Nesterov momentum needs a momentum buffer");
  const size_t state[] = {kSgdGrad, kSgdBuffer};
  check_update_operands(c, std::span(state, has_buffer ? 2 : 1), kSgdStateNames, kSgdWeightDecay, 4,
                        kSgdScalarNames);
  const int n = has_buffer ? 2 : 1;
  for (int i = 0; i < n; ++i) out[i] = {c.in(0).dtype(), c.in(0).sizes()};
  return n;
}

template <typename T, bool kMomentum>
void sgd_update_loop(const OpCall& c, std::span<Tensor> out) {
  using V = vec::Vec<T>;
  auto s = [&](size_t k) { return V(scalar_value<T>(c.in(k))); };
  const V wd = s(kSgdWeightDecay), mom = s(kSgdMomentum), damp1 = s(kSgdOneMinusDampening);
  const V neg_lr = s(kSgdNegLr);
  const bool use_wd = c.attrs.b(kSgdWeightDecayOn), first = c.attrs.b(kSgdFirstStep);
  const bool nesterov = c.attrs.b(kSgdNesterov), maximize = c.attrs.b(kSgdMaximize);
  // Operands: the outputs (param[, buffer]), then param, grad[, buffer] as read.
  constexpr size_t NOut = kMomentum ? 2 : 1, N = 2 * NOut + 1;
  enum : size_t { P = 0, B = 1 };
  constexpr size_t Pin = NOut, G = NOut + 1, Bin = NOut + 2;
  std::array<const Tensor*, N> operands;
  for (size_t k = 0; k < NOut; ++k) operands[k] = &out[k];
  operands[Pin] = &c.in(kSgdParam);
  operands[G] = &c.in(kSgdGrad);
  if constexpr (kMomentum) operands[Bin] = &c.in(kSgdBuffer);
  kernels::pointwise_loop_n<NOut>(operands, [&](const std::array<char*, N>& p, int64_t n) {
    for_each_vector<T, NOut>(p, n, [&](const std::array<T*, N>& a, int64_t i) {
      V g = V::load(a[G] + i);
      if (maximize) g = -g;
      const V param = V::load(a[Pin] + i);
      if (use_wd) g = g + wd * param;
      if constexpr (kMomentum) {
        const V b = first ? g : V::load(a[Bin] + i) * mom + damp1 * g;
        b.store(a[B] + i);
        g = nesterov ? g + mom * b : b;
      }
      (param + neg_lr * g).store(a[P] + i);
    });
  });
}

void sgd_update_kernel(const OpCall& c, std::span<Tensor> out) {
  KILN_DTYPE_SWITCH_FLOATING(c.in(0).dtype(), "sgd_update", [&]<typename T>() {
    if (c.attrs.b(kSgdHasBuffer))
      sgd_update_loop<T, true>(c, out);
    else
      sgd_update_loop<T, false>(c, out);
  });
}

void sgd_update_decomposition(const OpCall& c, std::span<Tensor> results) {
  const Tensor& param = c.in(kSgdParam);
  Tensor g = c.attrs.b(kSgdMaximize) ? -c.in(kSgdGrad) : c.in(kSgdGrad);
  if (c.attrs.b(kSgdWeightDecayOn)) g = g + c.in(kSgdWeightDecay)*param;
  if (c.attrs.b(kSgdHasBuffer)) {
    const Tensor& mom = c.in(kSgdMomentum);
    const Tensor b =
        c.attrs.b(kSgdFirstStep) ? g : c.in(kSgdBuffer)*mom + c.in(kSgdOneMinusDampening)*g;
    results[1] = b;
    g = c.attrs.b(kSgdNesterov) ? g + mom * b : b;
  }
  results[0] = param + c.in(kSgdNegLr)*g;
}

}  // namespace

// Pointwise in-place ops with several outputs. No derivative: an optimizer step is not part of
// what autograd differentiates (optimizers run it under NoGradGuard).
const OpDef& adam_update_op = register_op(
    {.name = "adam_update",
     .schema = "adam_update(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, "
               "Tensor wd_factor, Tensor weight_decay, Tensor beta1_weight, Tensor beta2, "
               "Tensor one_minus_beta2, Tensor bc2_sqrt, Tensor eps, Tensor neg_step_size, "
               "Tensor? max_exp_avg_sq, bool decoupled, bool l2, bool amsgrad, bool maximize, "
               "bool lerp_from_exp_avg) -> (Tensor param, Tensor exp_avg, Tensor exp_avg_sq, "
               "Tensor max_exp_avg_sq)",
     .kind = OpKind::Pointwise,
     .meta = adam_update_meta,
     .kernel = adam_update_kernel,
     .decomposition = adam_update_decomposition,
     .internal = true});
const OpDef& sgd_update_op = register_op(
    {.name = "sgd_update",
     .schema = "sgd_update(Tensor param, Tensor grad, Tensor weight_decay, Tensor momentum, "
               "Tensor one_minus_dampening, Tensor neg_lr, Tensor? momentum_buffer, "
               "bool has_momentum_buffer, bool first_step, bool nesterov, bool maximize, "
               "bool weight_decay_on) -> (Tensor param, Tensor momentum_buffer)",
     .kind = OpKind::Pointwise,
     .meta = sgd_update_meta,
     .kernel = sgd_update_kernel,
     .decomposition = sgd_update_decomposition,
     .internal = true});

}  // namespace ops

void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamHyper& h) {
  KILN_CHECK(h.amsgrad == max_exp_avg_sq.defined(), ValueError, "adam_update_: ",
             h.amsgrad ? "amsgrad needs a max_exp_avg_sq tensor"
                       : "max_exp_avg_sq is given but amsgrad is off");
  std::vector<Tensor> inputs{
      param,          grad,    exp_avg,           exp_avg_sq, h.wd_factor, h.weight_decay,
      h.beta1_weight, h.beta2, h.one_minus_beta2, h.bc2_sqrt, h.eps,       h.neg_step_size};
  if (h.amsgrad) inputs.push_back(max_exp_avg_sq);
  std::array<Tensor, kMaxOpOutputs> outputs{param, exp_avg, exp_avg_sq, max_exp_avg_sq};
  dispatch(ops::adam_update_op, inputs,
           {h.decoupled, h.l2, h.amsgrad, h.maximize, h.lerp_from_exp_avg}, outputs);
}

void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                 const SGDHyper& h) {
  const bool has_buffer = momentum_buffer.defined();
  std::vector<Tensor> inputs{param,   grad, h.weight_decay, h.momentum, h.one_minus_dampening,
                             h.neg_lr};
  if (has_buffer) inputs.push_back(momentum_buffer);
  std::array<Tensor, kMaxOpOutputs> outputs{param, momentum_buffer};
  dispatch(ops::sgd_update_op, inputs,
           {has_buffer, h.first_step, h.nesterov, h.maximize, h.weight_decay_on}, outputs);
}

}  // namespace kiln
