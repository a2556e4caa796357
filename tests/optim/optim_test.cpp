// Optimizers against independent scalar-double transcriptions of PyTorch's update formulas;
// state dicts (through safetensors files), clipping, the schedule, and end-to-end training.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>
#include <vector>

#include "core/tensor_names.h"
#include "kiln/kiln.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::optim;

namespace {

using Vec = std::vector<double>;

Tensor param(const Vec& values, IntList shape, DType dt = DType::Float64) {
  Tensor p = tensor(values, shape).to(dt);
  p.requires_grad_();
  return p;
}

// A deterministic gradient for element j of parameter k at step t.
double grad_value(int k, int t, size_t j) {
  return 0.5 * std::sin(1.3 * static_cast<double>(j) + 0.7 * t + k) + 0.05 * t - 0.1 * k;
}

Vec grads_for(int k, int t, size_t n) {
  Vec g(n);
  for (size_t j = 0; j < n; ++j) g[j] = grad_value(k, t, j);
  return g;
}

void set_grads(std::vector<Tensor>& ps, int t) {
  for (size_t k = 0; k < ps.size(); ++k) {
    Vec g = grads_for(static_cast<int>(k), t, static_cast<size_t>(ps[k].numel()));
    ps[k].set_grad(tensor(g, ps[k].sizes()).to(ps[k].dtype()));
  }
}

void expect_near(const Tensor& t, const Vec& want, double tol, const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < want.size(); ++j)
    EXPECT_NEAR(got[j], want[j], tol * std::max(1.0, std::abs(want[j])))
        << what << " [" << j << "]";
}

// ---- the reference formulas (PyTorch's _single_tensor_sgd / _single_tensor_adam), in double ----

struct RefSGD {
  SGDOptions o;
  std::vector<Vec> buf;  // empty until a parameter's first step
  void step(std::vector<Vec>& ps, const std::vector<Vec>& gs) {
    buf.resize(ps.size());
    for (size_t k = 0; k < ps.size(); ++k) {
      const bool first = buf[k].empty();
      if (first) buf[k].assign(ps[k].size(), 0.0);
      for (size_t j = 0; j < ps[k].size(); ++j) {
        double g = o.maximize ? -gs[k][j] : gs[k][j];
        if (o.weight_decay != 0) g += o.weight_decay * ps[k][j];
        if (o.momentum != 0) {
          double& b = buf[k][j];
          b = first ? g : o.momentum * b + (1 - o.dampening) * g;
          g = o.nesterov ? g + o.momentum * b : b;
        }
        ps[k][j] -= o.lr * g;
      }
    }
  }
};

struct RefAdam {
  AdamOptions o;
  bool decoupled = false;
  std::vector<Vec> m, v, vmax;
  int t = 0;
  void step(std::vector<Vec>& ps, const std::vector<Vec>& gs) {
    if (m.empty()) {
      for (auto& p : ps) {
        m.emplace_back(p.size(), 0.0);
        v.emplace_back(p.size(), 0.0);
        vmax.emplace_back(p.size(), 0.0);
      }
    }
    ++t;
    const double b1 = o.betas.first, b2 = o.betas.second;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t k = 0; k < ps.size(); ++k) {
      for (size_t j = 0; j < ps[k].size(); ++j) {
        double g = o.maximize ? -gs[k][j] : gs[k][j];
        double& p = ps[k][j];
        if (decoupled)
          p *= 1 - o.lr * o.weight_decay;
        else
          g += o.weight_decay * p;
        m[k][j] = b1 * m[k][j] + (1 - b1) * g;
        v[k][j] = b2 * v[k][j] + (1 - b2) * g * g;
        double vv = v[k][j];
        if (o.amsgrad) vv = vmax[k][j] = std::max(vmax[k][j], vv);
        const double denom = std::sqrt(vv) / std::sqrt(bc2) + o.eps;
        p -= o.lr / bc1 * m[k][j] / denom;
      }
    }
  }
};

// PyTorch's _single_tensor_adagrad / _single_tensor_rmsprop / _single_tensor_adadelta.
struct RefAdagrad {
  AdagradOptions o;
  std::vector<Vec> sum;
  int t = 0;
  void step(std::vector<Vec>& ps, const std::vector<Vec>& gs) {
    if (sum.empty())
      for (auto& p : ps) sum.emplace_back(p.size(), o.initial_accumulator_value);
    ++t;
    const double clr = o.lr / (1 + (t - 1) * o.lr_decay);
    for (size_t k = 0; k < ps.size(); ++k)
      for (size_t j = 0; j < ps[k].size(); ++j) {
        double g = o.maximize ? -gs[k][j] : gs[k][j];
        g += o.weight_decay * ps[k][j];
        sum[k][j] += g * g;
        ps[k][j] -= clr * g / (std::sqrt(sum[k][j]) + o.eps);
      }
  }
};

struct RefRMSprop {
  RMSpropOptions o;
  std::vector<Vec> square_avg, grad_avg, buf;
  void step(std::vector<Vec>& ps, const std::vector<Vec>& gs) {
    if (square_avg.empty())
      for (auto& p : ps) {
        square_avg.emplace_back(p.size(), 0.0);
        grad_avg.emplace_back(p.size(), 0.0);
        buf.emplace_back(p.size(), 0.0);
      }
    for (size_t k = 0; k < ps.size(); ++k)
      for (size_t j = 0; j < ps[k].size(); ++j) {
        double g = o.maximize ? -gs[k][j] : gs[k][j];
        g += o.weight_decay * ps[k][j];
        double& sq = square_avg[k][j];
        sq = o.alpha * sq + (1 - o.alpha) * g * g;
        double avg;
        if (o.centered) {
          double& ga = grad_avg[k][j];
          ga += (1 - o.alpha) * (g - ga);
          avg = std::sqrt(sq - ga * ga) + o.eps;
        } else {
          avg = std::sqrt(sq) + o.eps;
        }
        if (o.momentum > 0) {
          double& b = buf[k][j];
          b = o.momentum * b + g / avg;
          ps[k][j] -= o.lr * b;
        } else {
          ps[k][j] -= o.lr * g / avg;
        }
      }
  }
};

struct RefAdadelta {
  AdadeltaOptions o;
  std::vector<Vec> square_avg, acc_delta;
  void step(std::vector<Vec>& ps, const std::vector<Vec>& gs) {
    if (square_avg.empty())
      for (auto& p : ps) {
        square_avg.emplace_back(p.size(), 0.0);
        acc_delta.emplace_back(p.size(), 0.0);
      }
    for (size_t k = 0; k < ps.size(); ++k)
      for (size_t j = 0; j < ps[k].size(); ++j) {
        double g = o.maximize ? -gs[k][j] : gs[k][j];
        g += o.weight_decay * ps[k][j];
        double& sq = square_avg[k][j];
        double& acc = acc_delta[k][j];
        sq = o.rho * sq + (1 - o.rho) * g * g;
        const double delta = std::sqrt(acc + o.eps) / std::sqrt(sq + o.eps) * g;
        acc = o.rho * acc + (1 - o.rho) * delta * delta;
        ps[k][j] -= o.lr * delta;
      }
  }
};

// The inverse of a small matrix by Gauss-Jordan elimination (for expected values).
Tensor inverse_for_test(const Tensor& m) {
  const int64_t n = m.size(0);
  std::vector<double> a = m.to_vector<double>(), inv(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) inv[static_cast<size_t>(i * n + i)] = 1;
  for (int64_t c = 0; c < n; ++c) {
    const double pivot = a[static_cast<size_t>(c * n + c)];
    for (int64_t j = 0; j < n; ++j) {
      a[static_cast<size_t>(c * n + j)] /= pivot;
      inv[static_cast<size_t>(c * n + j)] /= pivot;
    }
    for (int64_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[static_cast<size_t>(r * n + c)];
      for (int64_t j = 0; j < n; ++j) {
        a[static_cast<size_t>(r * n + j)] -= f * a[static_cast<size_t>(c * n + j)];
        inv[static_cast<size_t>(r * n + j)] -= f * inv[static_cast<size_t>(c * n + j)];
      }
    }
  }
  return tensor(inv, {n, n});
}

const Vec kP0 = {0.5, -1.25, 2.0};
const Vec kP1 = {1.0, 0.25, -0.75, 3.5, -2.0, 0.125};

std::vector<Tensor> make_params(DType dt = DType::Float64) {
  return {param(kP0, {3}, dt), param(kP1, {2, 3}, dt)};
}

// Runs `steps` steps of opt and of the reference side by side, comparing after each.
template <typename Ref>
void compare_with_reference(Optimizer& opt, std::vector<Tensor>& ps, Ref& ref, int steps,
                            double tol, const std::string& what) {
  std::vector<Vec> rp = {kP0, kP1};
  for (int t = 1; t <= steps; ++t) {
    set_grads(ps, t);
    opt.step();
    ref.step(rp, {grads_for(0, t, 3), grads_for(1, t, 6)});
    for (size_t k = 0; k < ps.size(); ++k)
      expect_near(ps[k], rp[k], tol,
                  what + " step " + std::to_string(t) + " param " + std::to_string(k));
  }
}

}  // namespace

// ---- SGD ----

TEST(SGD, MatchesReferenceFormulas) {
  const std::vector<std::pair<std::string, SGDOptions>> cases = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.05, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.5}},
      {"nesterov", {.lr = 0.05, .momentum = 0.9, .nesterov = true}},
      {"weight_decay", {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1}},
      {"nesterov_wd", {.lr = 0.02, .momentum = 0.7, .weight_decay = 0.05, .nesterov = true}},
      {"maximize", {.lr = 0.1, .momentum = 0.5, .maximize = true}},
  };
  for (const auto& [name, o] : cases) {
    auto ps = make_params();
    SGD opt(ps, o);
    RefSGD ref{o, {}};
    compare_with_reference(opt, ps, ref, 6, 1e-13, "SGD " + name);
  }
}

TEST(SGD, Defaults) {
  SGDOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  EXPECT_EQ(o.momentum, 0);
  EXPECT_EQ(o.dampening, 0);
  EXPECT_EQ(o.weight_decay, 0);
  EXPECT_FALSE(o.nesterov);
  auto ps = make_params();
  SGD opt(ps);
  EXPECT_EQ(opt.lr(), 1e-3);
  EXPECT_EQ(opt.kind(), "SGD");
}

TEST(SGD, FirstStepBufferIsTheGradient) {
  // PyTorch: buf = clone(grad) on the first step, so momentum has no effect yet.
  auto ps = std::vector<Tensor>{param({1.0, 2.0}, {2})};
  SGD opt(ps, {.lr = 0.5, .momentum = 0.9, .dampening = 0.3});
  ps[0].set_grad(tensor({2.0, -4.0}, DType::Float64));
  opt.step();
  expect_near(ps[0], {0.0, 4.0}, 0, "after step 1");
  // Second step: buf = 0.9 * g1 + 0.7 * g2.
  ps[0].set_grad(tensor({1.0, 1.0}, DType::Float64));
  opt.step();
  expect_near(ps[0], {0.0 - 0.5 * (0.9 * 2 + 0.7), 4.0 - 0.5 * (0.9 * -4 + 0.7)}, 1e-15, "step 2");
}

// ---- Adam / AdamW ----

TEST(Adam, MatchesReferenceFormulas) {
  const std::vector<std::pair<std::string, AdamOptions>> cases = {
      {"default", {}},
      {"lr", {.lr = 0.05}},
      {"l2", {.lr = 0.01, .weight_decay = 0.1}},
      {"betas_eps", {.lr = 0.02, .betas = {0.8, 0.99}, .eps = 1e-6}},
      {"amsgrad", {.lr = 0.03, .weight_decay = 0.01, .amsgrad = true}},
      {"maximize", {.lr = 0.01, .maximize = true}},
  };
  for (const auto& [name, o] : cases) {
    auto ps = make_params();
    Adam opt(ps, o);
    RefAdam ref{o};
    compare_with_reference(opt, ps, ref, 8, 1e-12, "Adam " + name);
  }
}

TEST(AdamW, MatchesReferenceFormulas) {
  const std::vector<std::pair<std::string, AdamWOptions>> cases = {
      {"default", {}},
      {"wd", {.lr = 0.05, .weight_decay = 0.1}},
      {"amsgrad", {.lr = 0.03, .betas = {0.85, 0.995}, .amsgrad = true}},
      {"no_wd", {.lr = 0.01, .weight_decay = 0}},
  };
  for (const auto& [name, o] : cases) {
    auto ps = make_params();
    AdamW opt(ps, o);
    RefAdam ref{{.lr = o.lr,
                 .betas = o.betas,
                 .eps = o.eps,
                 .weight_decay = o.weight_decay,
                 .amsgrad = o.amsgrad},
                true};
    compare_with_reference(opt, ps, ref, 8, 1e-12, "AdamW " + name);
  }
}

TEST(AdamW, DefaultsAndKind) {
  AdamWOptions w;
  EXPECT_EQ(w.lr, 1e-3);
  EXPECT_EQ(w.betas.first, 0.9);
  EXPECT_EQ(w.betas.second, 0.999);
  EXPECT_EQ(w.eps, 1e-8);
  EXPECT_EQ(w.weight_decay, 1e-2);
  AdamOptions a;
  EXPECT_EQ(a.weight_decay, 0);
  EXPECT_EQ(a.lr, 1e-3);
  auto ps = make_params();
  AdamW opt(ps);
  EXPECT_EQ(opt.kind(), "AdamW");
  EXPECT_EQ(opt.options().weight_decay, 1e-2);
  auto ps2 = make_params();
  Adam opt2(ps2);
  EXPECT_EQ(opt2.kind(), "Adam");
}

TEST(Adam, Float32CloseToDoubleReference) {
  auto ps = make_params(DType::Float32);
  AdamW opt(ps, {.lr = 0.01, .weight_decay = 0.1});
  RefAdam ref{{.lr = 0.01, .weight_decay = 0.1}, true};
  compare_with_reference(opt, ps, ref, 10, 2e-6, "AdamW float32");
}

TEST(Adam, NonContiguousParameterMatchesContiguous) {
  Tensor base = tensor(kP1, {3, 2}).to(DType::Float64);
  Tensor strided = base.t();  // [2, 3], not contiguous; a leaf
  ASSERT_FALSE(strided.is_contiguous());
  strided.requires_grad_();
  Tensor dense = param(strided.contiguous().to_vector<double>(), {2, 3});
  std::vector<Tensor> a = {strided}, b = {dense};
  Adam oa(a, {.lr = 0.1, .weight_decay = 0.01});
  Adam ob(b, {.lr = 0.1, .weight_decay = 0.01});
  for (int t = 1; t <= 3; ++t) {
    Tensor g = tensor(grads_for(0, t, 6), {2, 3}).to(DType::Float64);
    strided.set_grad(g.clone());
    dense.set_grad(g.clone());
    oa.step();
    ob.step();
  }
  EXPECT_EQ(strided.contiguous().to_vector<double>(), dense.to_vector<double>());
  // The update went into the original storage.
  EXPECT_EQ(base.t().contiguous().to_vector<double>(), dense.to_vector<double>());
}

TEST(Optimizer, StepBumpsVersionAndRecordsNoHistory) {
  auto ps = make_params();
  SGD opt(ps, {.lr = 0.1});
  set_grads(ps, 1);
  const uint64_t v0 = ps[0].version();
  opt.step();
  EXPECT_GT(ps[0].version(), v0);
  EXPECT_TRUE(ps[0].is_leaf());
  EXPECT_TRUE(ps[0].requires_grad());
  EXPECT_EQ(ps[0].grad_fn(), nullptr);
}

// ---- skipping, zero_grad, construction errors ----

TEST(Optimizer, ParametersWithoutGradAreSkipped) {
  auto ps = make_params();
  Adam opt(ps, {.lr = 0.1});
  ps[0].set_grad(tensor(grads_for(0, 1, 3), {3}).to(DType::Float64));
  opt.step();
  EXPECT_EQ(ps[1].to_vector<double>(), kP1);  // untouched
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 0);
  OptimizerState s = opt.state_dict();
  for (const auto& [name, t] : s.tensors) EXPECT_EQ(name.rfind("state.0.", 0), 0u) << name;
  EXPECT_EQ(s.metadata.count("state.1.step"), 0u);
  // Parameter 1's first step later is a first step (bias correction with t = 1).
  ps[0].set_grad(Tensor());
  ps[1].set_grad(tensor(grads_for(1, 1, 6), {2, 3}).to(DType::Float64));
  opt.step();
  RefAdam ref{{.lr = 0.1}};
  std::vector<Vec> rp = {kP1};
  ref.step(rp, {grads_for(1, 1, 6)});
  expect_near(ps[1], rp[0], 1e-13, "param 1 first step");
  EXPECT_EQ(opt.step_count(0), 1);
  EXPECT_EQ(opt.step_count(1), 1);
}

TEST(Optimizer, ZeroGrad) {
  auto ps = make_params();
  SGD opt(ps, {.lr = 0.1});
  set_grads(ps, 1);
  opt.zero_grad(false);
  ASSERT_TRUE(ps[0].grad().defined());
  EXPECT_EQ(ps[0].grad().to_vector<double>(), Vec(3, 0.0));
  EXPECT_EQ(ps[1].grad().sizes(), ps[1].sizes());
  opt.zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
  EXPECT_FALSE(ps[1].grad().defined());
  opt.step();  // nothing to do
  EXPECT_EQ(ps[0].to_vector<double>(), kP0);
  opt.zero_grad();  // no grads: fine
}

// ---- Adagrad, RMSprop, Adadelta ----

TEST(Adagrad, MatchesReferenceFormulas) {
  for (const AdagradOptions& o : {AdagradOptions{}, AdagradOptions{.lr = 0.1,
                                                    .lr_decay = 0.05,
                                                    .weight_decay = 0.2,
                                                    .initial_accumulator_value = 0.3,
                                                    .maximize = true}}) {
    auto ps = make_params();
    Adagrad opt(ps, o);
    RefAdagrad ref{o};
    compare_with_reference(opt, ps, ref, 6, 1e-12, "Adagrad");
  }
}

TEST(RMSprop, MatchesReferenceFormulas) {
  for (const RMSpropOptions& o :
       {RMSpropOptions{}, RMSpropOptions{.lr = 0.01, .alpha = 0.9, .weight_decay = 0.1},
        RMSpropOptions{.momentum = 0.8, .centered = true},
        RMSpropOptions{.lr = 0.02, .eps = 1e-3, .momentum = 0.5, .maximize = true}}) {
    auto ps = make_params();
    RMSprop opt(ps, o);
    RefRMSprop ref{o};
    compare_with_reference(opt, ps, ref, 6, 1e-12, "RMSprop");
  }
}

TEST(Adadelta, MatchesReferenceFormulas) {
  for (const AdadeltaOptions& o :
       {AdadeltaOptions{},
        AdadeltaOptions{
            .lr = 0.5, .rho = 0.8, .eps = 1e-4, .weight_decay = 0.1, .maximize = true}}) {
    auto ps = make_params();
    Adadelta opt(ps, o);
    RefAdadelta ref{o};
    compare_with_reference(opt, ps, ref, 6, 1e-12, "Adadelta");
  }
}

TEST(Adagrad, Float32CloseToDoubleReferenceAndTheirKinds) {
  auto ps = make_params(DType::Float32);
  Adagrad adagrad(ps, {.lr = 0.1});
  RefAdagrad ra{{.lr = 0.1}};
  compare_with_reference(adagrad, ps, ra, 5, 1e-5, "Adagrad float32");
  ps = make_params(DType::Float32);
  RMSprop rmsprop(ps, {.momentum = 0.9, .centered = true});
  RefRMSprop rr{{.momentum = 0.9, .centered = true}};
  compare_with_reference(rmsprop, ps, rr, 5, 1e-4, "RMSprop float32");
  ps = make_params(DType::Float32);
  Adadelta adadelta(ps);
  RefAdadelta rd;
  compare_with_reference(adadelta, ps, rd, 5, 1e-5, "Adadelta float32");
  EXPECT_EQ(adagrad.kind(), "Adagrad");
  EXPECT_EQ(rmsprop.kind(), "RMSprop");
  EXPECT_EQ(adadelta.kind(), "Adadelta");
  // PyTorch's defaults.
  EXPECT_EQ(adagrad.options().eps, 1e-10);
  EXPECT_EQ(RMSprop(ps).options().alpha, 0.99);
  EXPECT_EQ(adadelta.options().lr, 1.0);
  EXPECT_EQ(adadelta.options().rho, 0.9);
}

// Each step of the three, compiled whole (forward, backward, update) with a learning rate that
// changes every step, is one graph and computes what eager computes.
TEST(Adagrad, CompiledStepsOfTheComposedOptimizersAreOneGraphEach) {
  auto check = [](auto make, const std::string& name) {
    SCOPED_TRACE(name);
    manual_seed(7);
    nn::Linear eager_model(4, 3), compiled_model(4, 3);
    compiled_model.load_state_dict(eager_model.state_dict());
    auto eager_opt = make(eager_model.parameters());
    auto compiled_opt = make(compiled_model.parameters());
    auto step = [](nn::Linear& m, Optimizer& opt, const Tensor& x) {
      opt.zero_grad();
      Tensor loss = m.forward(x).pow(2).mean();
      loss.backward();
      opt.step();
      return loss;
    };
    CompileProfiler prof;
    auto compiled = compile([&](const Tensor& x) { return step(compiled_model, *compiled_opt, x); },
                            CompileOptions{.backend = "inductor", .name = name});
    for (int i = 0; i < 4; ++i) {
      Tensor x = randn({5, 4});
      const Tensor want = step(eager_model, *eager_opt, x), got = compiled(x);
      EXPECT_NEAR(want.item<double>(), got.item<double>(), 1e-6);
      eager_opt->set_lr(eager_opt->lr() * 0.7);
      compiled_opt->set_lr(compiled_opt->lr() * 0.7);
    }
    auto pe = eager_model.parameters(), pc = compiled_model.parameters();
    for (size_t k = 0; k < pe.size(); ++k)
      EXPECT_TRUE(allclose(pe[k], pc[k], 1e-5, 1e-6)) << "parameter " << k;
    EXPECT_EQ(prof.stats()[name].graphs, 1);
    EXPECT_EQ(prof.stats()[name].graph_breaks, 0);
  };
  check(
      [](std::vector<Tensor> ps) {
        return std::make_unique<Adagrad>(ps, AdagradOptions{.lr = 0.1, .lr_decay = 0.01});
      },
      "adagrad_step");
  check(
      [](std::vector<Tensor> ps) {
        return std::make_unique<RMSprop>(ps, RMSpropOptions{.momentum = 0.5, .centered = true});
      },
      "rmsprop_step");
  check(
      [](std::vector<Tensor> ps) {
        return std::make_unique<Adadelta>(ps, AdadeltaOptions{.weight_decay = 0.01});
      },
      "adadelta_step");
}

// ---- LBFGS ----

// 0.5 x^T A x - b^T x with A symmetric positive definite: minimised at A^-1 b.
TEST(LBFGS, MinimisesAQuadraticWithAndWithoutALineSearch) {
  const Tensor a =
      tensor({4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0}, DType::Float64).reshape({3, 3});
  const Tensor b = tensor({1.0, -2.0, 0.5}, DType::Float64);
  const Tensor want = matmul(inverse_for_test(a), b.unsqueeze(1)).squeeze(1);
  for (const std::string ls : {"strong_wolfe", ""}) {
    Tensor x = zeros({3}, DType::Float64).requires_grad_();
    LBFGS opt({x}, {.lr = ls.empty() ? 0.2 : 1.0, .max_iter = 100, .line_search_fn = ls});
    auto closure = [&] {
      opt.zero_grad();
      Tensor loss = 0.5 * (x * matmul(a, x.unsqueeze(1)).squeeze(1)).sum() - (b * x).sum();
      loss.backward();
      return loss;
    };
    const Tensor first = opt.step(closure);
    EXPECT_EQ(first.item<double>(), 0.0) << ls;  // the loss at the start
    // (A fixed step of 0.2 stops on tolerance_change, the loss changing by under 1e-9, a few
    // digits short of the line search's accuracy.)
    const double tol = ls.empty() ? 1e-3 : 1e-6;
    EXPECT_TRUE(allclose(x.detach(), want, tol, tol)) << ls << ": " << x;
    EXPECT_GT(opt.n_iter(), 1) << ls;
    EXPECT_LE(opt.func_evals(), 125) << ls;  // max_eval = max_iter * 5 / 4
  }
}

// Rosenbrock's valley from (-1.5, 2): L-BFGS with the strong-Wolfe search reaches (1, 1).
TEST(LBFGS, FindsRosenbrocksMinimum) {
  Tensor x = tensor({-1.5, 2.0}, DType::Float64).requires_grad_();
  LBFGS opt({x}, {.line_search_fn = "strong_wolfe"});
  auto closure = [&] {
    opt.zero_grad();
    const Tensor x0 = x.narrow(0, 0, 1), x1 = x.narrow(0, 1, 1);
    Tensor loss = ((1 - x0).pow(2) + 100 * (x1 - x0.pow(2)).pow(2)).sum();
    loss.backward();
    return loss;
  };
  // PyTorch 2.15's LBFGS from the same start, the same options (recorded): after one step
  // x = [-0.08511855589860293, -0.028757058413769698] with n_iter 19, func_evals 25; after two,
  // [0.9995835472529905, 0.9991550319577943], 38 and 50.
  opt.step(closure);
  EXPECT_TRUE(allclose(x.detach(),
                       tensor({-0.08511855589860293, -0.028757058413769698}, DType::Float64), 1e-9,
                       1e-9))
      << x;
  EXPECT_EQ(opt.n_iter(), 19);
  EXPECT_EQ(opt.func_evals(), 25);
  opt.step(closure);
  EXPECT_TRUE(allclose(x.detach(), tensor({0.9995835472529905, 0.9991550319577943}, DType::Float64),
                       1e-9, 1e-9))
      << x;
  EXPECT_EQ(opt.func_evals(), 50);
  for (int i = 0; i < 8; ++i) opt.step(closure);
  EXPECT_TRUE(allclose(x.detach(), tensor({1.0, 1.0}, DType::Float64), 1e-5, 1e-5)) << x;
  EXPECT_LT(closure().item<double>(), 1e-8);
}

TEST(LBFGS, NeedsAClosureAndValidOptions) {
  Tensor x = zeros({2}, DType::Float64).requires_grad_();
  LBFGS opt({x});
  EXPECT_THROW(opt.step(), ValueError);
  EXPECT_THROW(LBFGS({x}, {.line_search_fn = "backtracking"}), ValueError);
  EXPECT_THROW(LBFGS({x}, {.history_size = 0}), ValueError);
}

// A run resumed from state_dict (through a safetensors file, into a fresh optimizer) takes the
// very steps the uninterrupted run takes: the history, counters and options all come back.
TEST(LBFGS, AResumedRunTakesTheSameStepsThroughASafetensorsFile) {
  auto rosenbrock = [](Tensor& x, LBFGS& opt) {
    return [&x, &opt] {
      opt.zero_grad();
      const Tensor x0 = x.narrow(0, 0, 1), x1 = x.narrow(0, 1, 1);
      Tensor loss = ((1 - x0).pow(2) + 100 * (x1 - x0.pow(2)).pow(2)).sum();
      loss.backward();
      return loss;
    };
  };
  const LBFGSOptions options{.max_iter = 5, .history_size = 4, .line_search_fn = "strong_wolfe"};
  Tensor x = tensor({-1.5, 2.0}, DType::Float64).requires_grad_();
  LBFGS opt({x}, options);
  for (int i = 0; i < 2; ++i) opt.step(rosenbrock(x, opt));
  const OptimizerState saved = opt.state_dict();
  const std::string path = ::testing::TempDir() + "lbfgs_state.safetensors";
  save_safetensors(path, saved.tensors, saved.metadata);
  const Tensor x_saved = x.detach().clone();
  for (int i = 0; i < 3; ++i) opt.step(rosenbrock(x, opt));

  Tensor y = x_saved.clone().requires_grad_();
  LBFGS resumed({y}, {.lr = 0.5});  // (options come from the state, lr included)
  const auto file = load_safetensors(path);
  resumed.load_state_dict({file.tensors, file.metadata});
  EXPECT_EQ(resumed.options().history_size, 4);
  EXPECT_EQ(resumed.lr(), 1.0);
  EXPECT_EQ(resumed.func_evals(), saved.metadata.count("optimizer.func_evals")
                                      ? std::stoll(saved.metadata.at("optimizer.func_evals"))
                                      : -1);
  for (int i = 0; i < 3; ++i) resumed.step(rosenbrock(y, resumed));
  EXPECT_TRUE(equal(y.detach(), x.detach())) << y << " vs " << x;
  EXPECT_EQ(resumed.n_iter(), opt.n_iter());
  EXPECT_EQ(resumed.func_evals(), opt.func_evals());
  // A state whose history does not fit is refused, the optimizer unchanged.
  OptimizerState bad = saved;
  for (auto& [name, t] : bad.tensors)
    if (name == "optimizer.old_dirs") t = zeros({t.size(0), 3}, DType::Float64);
  EXPECT_THROW(resumed.load_state_dict(bad), ShapeError);
  EXPECT_EQ(resumed.n_iter(), opt.n_iter());
  // Other optimizers have no state of their own.
  SGD sgd({y}, {.lr = 0.1});
  OptimizerState foreign = sgd.state_dict();
  foreign.tensors.emplace_back("optimizer.d", zeros({2}, DType::Float64));
  EXPECT_THROW(sgd.load_state_dict(foreign), ValueError);
}

TEST(Optimizer, ConstructionErrors) {
  auto expect_error = [](auto&& make, const std::string& fragment) {
    try {
      make();
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error([] { SGD opt({}); }, "empty parameter list");
  Tensor p = param({1.0, 2.0}, {2});
  expect_error([&] { SGD opt({p, p}); }, "more than once");
  Tensor i = tensor({1, 2});
  expect_error([&] { Adam opt({i}); }, "only floating-point");
  Tensor nl = p * 2.0;
  expect_error([&] { Adam opt({nl}); }, "not a leaf");
  Tensor nrg = tensor({1.0, 2.0});
  expect_error([&] { AdamW opt({nrg}); }, "does not require grad");
  expect_error([&] { SGD opt({p}, {.lr = -1}); }, "invalid learning rate");
  expect_error([&] { SGD opt({p}, {.lr = 0.1, .nesterov = true}); }, "Nesterov");
  expect_error([&] { Adagrad opt({p}, {.lr_decay = -1}); }, "Adagrad: invalid lr_decay value: -1");
  expect_error([&] { Adagrad opt({p}, {.initial_accumulator_value = -0.5}); },
               "invalid initial_accumulator_value");
  expect_error([&] { RMSprop opt({p}, {.alpha = -0.1}); }, "RMSprop: invalid alpha value");
  expect_error([&] { RMSprop opt({p}, {.momentum = -1}); }, "invalid momentum value");
  expect_error([&] { Adadelta opt({p}, {.rho = 1.5}); }, "Adadelta: invalid rho value: 1.5");
  expect_error([&] { Adadelta opt({p}, {.eps = -1}); }, "invalid epsilon value");
  expect_error(
      [&] { SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
      "Nesterov");
  expect_error([&] { Adam opt({p}, {.betas = {1.0, 0.999}}); }, "beta parameter at index 0");
  expect_error([&] { AdamW opt({p}, {.betas = {0.9, -0.1}}); }, "beta parameter at index 1");
  expect_error([&] { Adam opt({p}, {.eps = -1}); }, "invalid epsilon");
  expect_error([&] { AdamW opt({p}, {.weight_decay = -1}); }, "invalid weight_decay");
  SGD ok({p});
  expect_error([&] { ok.set_lr(-0.5); }, "invalid learning rate");
  ok.set_lr(0.25);
  EXPECT_EQ(ok.lr(), 0.25);
  EXPECT_EQ(ok.options().lr, 0.25);
}

// ---- state dicts ----

class OptimTempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "kiln_optim_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using MakeOpt = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>&)>;

// Runs 3 steps, saves to a file, then compares 4 more steps of the original against a fresh
// optimizer (on fresh parameters holding the same values) that loaded the file.
void check_resume(const MakeOpt& make, const std::string& file) {
  auto ps = make_params();
  auto opt = make(ps);
  opt->set_lr(opt->lr() * 0.5);  // the saved lr is restored too
  for (int t = 1; t <= 3; ++t) {
    set_grads(ps, t);
    if (t == 2) ps[1].set_grad(Tensor());  // parameter 1 skips a step
    opt->step();
  }
  OptimizerState s = opt->state_dict();
  save_safetensors(file, s.tensors, s.metadata);

  std::vector<Tensor> qs = {param(ps[0].to_vector<double>(), {3}),
                            param(ps[1].to_vector<double>(), {2, 3})};
  auto resumed = make(qs);
  SafetensorsContents f = load_safetensors(file);
  resumed->load_state_dict({f.tensors, f.metadata});
  EXPECT_EQ(resumed->lr(), opt->lr());
  EXPECT_EQ(resumed->step_count(0), 3);
  EXPECT_EQ(resumed->step_count(1), 2);
  for (int t = 4; t <= 7; ++t) {
    set_grads(ps, t);
    set_grads(qs, t);
    opt->step();
    resumed->step();
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(ps[k].to_vector<double>(), qs[k].to_vector<double>())
          << opt->kind() << " step " << t << " param " << k;
  }
}

TEST_F(OptimTempDir, StateDictRoundTripContinuesIdentically) {
  check_resume(
      [](auto& ps) {
        return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
      },
      path("sgd.safetensors"));
  check_resume([](auto& ps) { return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1}); },
               path("sgd_plain.safetensors"));
  check_resume(
      [](auto& ps) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 0.05, .amsgrad = true}); },
      path("adam.safetensors"));
  check_resume(
      [](auto& ps) {
        return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
      },
      path("adamw.safetensors"));
  check_resume(
      [](auto& ps) {
        return std::make_unique<Adagrad>(
            ps, AdagradOptions{.lr = 0.1, .lr_decay = 0.1, .initial_accumulator_value = 0.2});
      },
      path("adagrad.safetensors"));
  check_resume(
      [](auto& ps) {
        return std::make_unique<RMSprop>(ps, RMSpropOptions{.momentum = 0.9, .centered = true});
      },
      path("rmsprop.safetensors"));
  check_resume([](auto& ps) { return std::make_unique<Adadelta>(ps, AdadeltaOptions{.rho = 0.8}); },
               path("adadelta.safetensors"));
}

TEST(StateDict, NamesAndMetadata) {
  auto ps = make_params();
  AdamW opt(ps, {.lr = 0.01, .weight_decay = 0.1});
  set_grads(ps, 1);
  opt.step();
  OptimizerState s = opt.state_dict();
  std::vector<std::string> names;
  for (const auto& [n, t] : s.tensors) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq",
                                             "state.1.exp_avg", "state.1.exp_avg_sq"}));
  EXPECT_EQ(s.metadata.at("kind"), "AdamW");
  EXPECT_EQ(s.metadata.at("num_params"), "2");
  EXPECT_EQ(s.metadata.at("lr"), "0.01");
  EXPECT_EQ(s.metadata.at("weight_decay"), "0.1");
  EXPECT_EQ(s.metadata.at("beta2"), "0.999");
  EXPECT_EQ(s.metadata.at("state.1.step"), "1");
  // A snapshot: stepping further does not change it.
  Tensor before = s.tensors[0].second.clone();
  set_grads(ps, 2);
  opt.step();
  EXPECT_EQ(s.tensors[0].second.to_vector<double>(), before.to_vector<double>());
}

TEST(StateDict, LoadErrorsLeaveTheOptimizerUnchanged) {
  auto ps = make_params();
  Adam opt(ps, {.lr = 0.05});
  set_grads(ps, 1);
  opt.step();
  const OptimizerState good = opt.state_dict();

  auto expect_rejected = [&](OptimizerState bad, const std::string& fragment) {
    auto qs = make_params();
    Adam target(qs, {.lr = 0.3, .betas = {0.5, 0.6}});
    try {
      target.load_state_dict(bad);
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(target.lr(), 0.3);
    EXPECT_EQ(target.options().betas.first, 0.5);
    EXPECT_EQ(target.step_count(0), 0);
    EXPECT_TRUE(target.state_dict().tensors.empty());
  };
  auto with_meta = [&](const std::string& k, const std::string& v) {
    OptimizerState s = good;
    s.metadata[k] = v;
    return s;
  };

  {  // wrong kind: SGD's state, and AdamW's (same tensors, other kind)
    auto qs = make_params();
    SGD sgd(qs, {.lr = 0.1, .momentum = 0.9});
    set_grads(qs, 1);
    sgd.step();
    expect_rejected(sgd.state_dict(), "from a SGD optimizer but this one is Adam");
    expect_rejected(with_meta("kind", "AdamW"), "from a AdamW optimizer");
  }
  {
    OptimizerState s = good;
    s.metadata.erase("kind");
    expect_rejected(s, "no 'kind'");
  }
  expect_rejected(with_meta("num_params", "3"), "for 3 parameters but this optimizer has 2");
  expect_rejected(with_meta("num_params", "two"), "not an integer");
  expect_rejected(with_meta("beta1", "1.5"), "beta parameter at index 0");
  expect_rejected(with_meta("eps", "abc"), "'eps' is not a number");
  expect_rejected(with_meta("state.0.step", "0"), "must be >= 1");
  expect_rejected(with_meta("state.7.step", "1"), "names parameter 7");
  expect_rejected(with_meta("state.0.stepp", "1"), "unexpected metadata key");
  {  // wrong shape
    OptimizerState s = good;
    s.tensors[1].second = zeros({4}, DType::Float64);
    expect_rejected(s, "has shape [4] but parameter 0 has shape [3]");
  }
  {  // wrong dtype
    OptimizerState s = good;
    s.tensors[0].second = zeros({3}, DType::Float32);
    expect_rejected(s, "has dtype float32 but parameter 0 has dtype float64");
  }
  {  // missing tensor
    OptimizerState s = good;
    s.tensors.erase(s.tensors.begin() + 3);
    expect_rejected(s, "no 'state.1.exp_avg_sq' tensor");
  }
  {  // unexpected tensor (momentum_buffer is SGD's; max_exp_avg_sq needs amsgrad)
    OptimizerState s = good;
    s.tensors.emplace_back("state.0.momentum_buffer", zeros({3}, DType::Float64));
    expect_rejected(s, "no 'momentum_buffer' state");
    s = good;
    s.tensors.emplace_back("state.0.max_exp_avg_sq", zeros({3}, DType::Float64));
    expect_rejected(s, "no 'max_exp_avg_sq' state");
    s = good;
    s.tensors.emplace_back("bogus", zeros({3}, DType::Float64));
    expect_rejected(s, "unexpected tensor 'bogus'");
  }
  {  // tensors without a step count
    OptimizerState s = good;
    s.metadata.erase("state.1.step");
    expect_rejected(s, "no 'state.1.step'");
  }
  // The good one loads.
  auto qs = make_params();
  Adam target(qs);
  target.load_state_dict(good);
  EXPECT_EQ(target.lr(), 0.05);
  EXPECT_EQ(target.step_count(1), 1);
}

// ---- clip_grad_norm_ ----

TEST(ClipGradNorm, ScalesWhenAboveMax) {
  Tensor a = param({0, 0}, {2}), b = param({0}, {1}), c = param({1}, {1});
  a.set_grad(tensor({3.0, 4.0}, DType::Float64));
  b.set_grad(tensor({12.0}, DType::Float64));
  // c has no grad: ignored.
  const double total = clip_grad_norm_({a, b, c}, 1.0);
  EXPECT_DOUBLE_EQ(total, 13.0);
  const double coef = 1.0 / (13.0 + 1e-6);
  expect_near(a.grad(), {3 * coef, 4 * coef}, 1e-15, "a");
  expect_near(b.grad(), {12 * coef}, 1e-15, "b");
  EXPECT_FALSE(c.grad().defined());
}

TEST(ClipGradNorm, LeavesSmallGradients) {
  Tensor a = param({0, 0}, {2}, DType::Float32);
  a.set_grad(tensor({0.3, 0.4}, DType::Float32));
  EXPECT_NEAR(clip_grad_norm_({a}, 1.0), 0.5, 1e-7);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.3f, 0.4f}));
  EXPECT_EQ(clip_grad_norm_({param({1}, {1})}, 1.0), 0.0);  // no grads at all
}

TEST(ClipGradNorm, OtherNorms) {
  Tensor a = param({0, 0, 0}, {3});
  a.set_grad(tensor({1.0, -5.0, 2.0}, DType::Float64));
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a}, 100.0, std::numeric_limits<double>::infinity()), 5.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a}, 100.0, 1.0), 8.0);
  EXPECT_NEAR(clip_grad_norm_({a}, 100.0, 3.0), std::cbrt(1 + 125 + 8), 1e-12);
  const double total = clip_grad_norm_({a}, 2.0, 1.0);
  EXPECT_DOUBLE_EQ(total, 8.0);
  expect_near(a.grad(), {2.0 / (8 + 1e-6), -10.0 / (8 + 1e-6), 4.0 / (8 + 1e-6)}, 1e-15, "l1");
  EXPECT_THROW(clip_grad_norm_({a}, 1.0, 0.0), ValueError);
}

TEST(ClipGradNorm, NonFinite) {
  Tensor a = param({0, 0}, {2});
  a.set_grad(tensor({std::numeric_limits<double>::infinity(), 1.0}, DType::Float64));
  try {
    clip_grad_norm_({a}, 1.0, 2.0, /*error_if_nonfinite=*/true);
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("is inf"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.grad().to_vector<double>()[1], 1.0);     // unchanged
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a}, 1.0)));  // without the flag: no error
  Tensor b = param({0}, {1});
  b.set_grad(tensor({std::nan("")}, DType::Float64));
  EXPECT_TRUE(std::isnan(clip_grad_norm_({b}, 1.0, std::numeric_limits<double>::infinity())));
}

TEST(ClipGradNormTensor, AgreesWithTheDoubleForm) {
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    Tensor a = param({0, 0}, {2}), b = param({0}, {1}), c = param({1}, {1});
    Tensor a2 = param({0, 0}, {2}), b2 = param({0}, {1});
    for (Tensor* t : {&a, &a2}) t->set_grad(tensor({3.0, -4.0}, DType::Float64));
    for (Tensor* t : {&b, &b2}) t->set_grad(tensor({12.0}, DType::Float64));
    const Tensor total = clip_grad_norm_tensor_({a, b, c}, 1.0, norm_type);
    const double want = clip_grad_norm_({a2, b2}, 1.0, norm_type);
    EXPECT_EQ(total.dim(), 0);
    EXPECT_EQ(total.dtype(), DType::Float64);
    EXPECT_NEAR(total.item<double>(), want, 1e-12) << norm_type;
    expect_near(a.grad(), a2.grad().to_vector<double>(), 1e-15, "a");
    expect_near(b.grad(), b2.grad().to_vector<double>(), 1e-15, "b");
    EXPECT_FALSE(c.grad().defined());
  }
  // Below the maximum: multiplied by exactly 1.
  Tensor s = param({0, 0}, {2}, DType::Float32);
  s.set_grad(tensor({0.3, 0.4}, DType::Float32));
  EXPECT_NEAR(clip_grad_norm_tensor_({s}, 1.0).item<double>(), 0.5, 1e-7);
  EXPECT_EQ(s.grad().to_vector<float>(), (std::vector<float>{0.3f, 0.4f}));
  EXPECT_EQ(clip_grad_norm_tensor_({param({1}, {1})}, 1.0).item<double>(), 0.0);
  EXPECT_THROW(clip_grad_norm_tensor_({s}, 1.0, -1.0), ValueError);
}

TEST(ClipGradNormTensor, NonFiniteIsAnErrorOnlyWhenAskedFor) {
  Tensor a = param({0, 0}, {2});
  a.set_grad(tensor({std::numeric_limits<double>::infinity(), 1.0}, DType::Float64));
  EXPECT_THROW(clip_grad_norm_tensor_({a}, 1.0, 2.0, /*error_if_nonfinite=*/true), ValueError);
  EXPECT_EQ(a.grad().to_vector<double>()[1], 1.0);  // unchanged
  EXPECT_TRUE(std::isinf(clip_grad_norm_tensor_({a}, 1.0).item<double>()));
}

// Under kiln::compile the tensor form is recorded with the step: no graph break.
TEST(ClipGradNormTensor, ATrainingStepWithClippingIsOneGraph) {
  manual_seed(3);
  nn::Linear eager_model(4, 3), compiled_model(4, 3);
  compiled_model.load_state_dict(eager_model.state_dict());
  AdamW eager_opt(eager_model.parameters(), {.lr = 0.01});
  AdamW compiled_opt(compiled_model.parameters(), {.lr = 0.01});
  auto step = [](nn::Linear& m, AdamW& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x).pow(2).mean() * 100;
    loss.backward();
    clip_grad_norm_tensor_(m.parameters(), 0.5);
    opt.step();
    return loss;
  };
  auto compiled = compile([&](const Tensor& x) { return step(compiled_model, compiled_opt, x); },
                          {.fullgraph = true});  // a graph break would throw
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({5, 4});
    EXPECT_EQ(step(eager_model, eager_opt, x).item<double>(), compiled(x).item<double>());
  }
  auto pe = eager_model.parameters(), pc = compiled_model.parameters();
  for (size_t k = 0; k < pe.size(); ++k)
    EXPECT_EQ(pe[k].to_vector<double>(), pc[k].to_vector<double>());
}

// ---- schedule ----

TEST(WarmupCosineSchedule, ValuesAtKeySteps) {
  WarmupCosineSchedule s(1.0, 10, 110, 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(35), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);
  EXPECT_NEAR(s.lr_at(110), 0.1, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(111), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(100000), 0.1);
  for (int64_t t = 11; t <= 110; ++t) EXPECT_LE(s.lr_at(t), s.lr_at(t - 1));

  WarmupCosineSchedule no_warmup(2.0, 0, 4);
  EXPECT_DOUBLE_EQ(no_warmup.lr_at(0), 2.0);
  EXPECT_NEAR(no_warmup.lr_at(2), 1.0, 1e-15);
  EXPECT_NEAR(no_warmup.lr_at(4), 0.0, 1e-15);

  auto ps = make_params();
  SGD opt(ps);
  EXPECT_DOUBLE_EQ(s.apply(opt, 5), 0.5);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
}

TEST(WarmupCosineSchedule, Errors) {
  EXPECT_THROW(WarmupCosineSchedule(1.0, 10, 5), ValueError);
  EXPECT_THROW(WarmupCosineSchedule(1.0, -1, 5), ValueError);
  EXPECT_THROW(WarmupCosineSchedule(-1.0, 0, 5), ValueError);
  EXPECT_THROW(WarmupCosineSchedule(1.0, 0, 5).lr_at(-1), ValueError);
}

// ---- end to end ----

TEST(EndToEnd, MinimisesAQuadratic) {
  // loss = sum(a * (x - c)^2) + (x0 * x1)^2 / 10: a small, mildly coupled quadratic-ish bowl.
  const Vec target = {1.0, -2.0, 3.0, 0.5};
  Tensor c = tensor(target, {4});
  Tensor a = tensor(Vec{1.0, 4.0, 0.5, 2.0}, {4});
  auto run = [&](auto make) {
    Tensor x = zeros({4});
    x.requires_grad_();
    std::vector<Tensor> ps = {x};
    auto opt = make(ps);
    double loss_value = 0;
    for (int it = 0; it < 600; ++it) {
      opt->zero_grad();
      Tensor d = x - c;
      Tensor loss = (a * d * d).sum();
      loss.backward();
      opt->step();
      loss_value = loss.item<double>();
    }
    return std::make_pair(x.to_vector<double>(), loss_value);
  };
  auto check = [&](auto result, double tol, const std::string& what) {
    for (size_t j = 0; j < target.size(); ++j)
      EXPECT_NEAR(result.first[j], target[j], tol) << what << " [" << j << "]";
    EXPECT_LT(result.second, 1e-4) << what;
  };
  check(run([](auto& ps) {
          return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.05, .momentum = 0.9});
        }),
        1e-4, "SGD");
  check(run([](auto& ps) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 0.05}); }), 1e-2,
        "Adam");
  check(run([](auto& ps) {
          return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 0.05, .weight_decay = 1e-4});
        }),
        1e-2, "AdamW");
}

namespace {
// Diagnostics call an optimizer's state by its parameter's module name (recompile reasons).
struct StateOf : Adam {
  using Adam::Adam;
  const Tensor& state(size_t i, const std::string& name) const { return state_[i].at(name); }
};
}  // namespace

TEST(Optimizer, StateTensorsAreNamedAfterTheirParametersForDiagnostics) {
  struct Net : nn::Module {
    std::shared_ptr<nn::Linear> fc;
    Net() : Module("Net") { fc = register_module("fc", std::make_shared<nn::Linear>(3, 2)); }
  } net;
  StateOf opt(net.parameters(), {.lr = 0.1});
  net.fc->forward(ones({1, 3})).sum().backward();
  opt.step();
  EXPECT_EQ(kiln::detail::tensor_name(net.fc->weight).str(), "parameter 'fc.weight'");
  EXPECT_EQ(kiln::detail::tensor_name(opt.state(0, "exp_avg")).str(),
            "optimizer state 'Adam.state[fc.weight].exp_avg'");
  EXPECT_EQ(kiln::detail::tensor_name(opt.state(1, "exp_avg_sq")).str(),
            "optimizer state 'Adam.state[fc.bias].exp_avg_sq'");
  // A view of a named tensor's memory goes by its name; an unnamed tensor has none.
  EXPECT_EQ(kiln::detail::tensor_name(net.fc->weight.view({-1}), true).name, "fc.weight");
  EXPECT_TRUE(kiln::detail::tensor_name(net.fc->weight.view({-1})).empty());
  EXPECT_TRUE(kiln::detail::tensor_name(ones({2})).empty());
}
