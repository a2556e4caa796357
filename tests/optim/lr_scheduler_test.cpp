// Learning-rate schedulers against PyTorch's formulas written out by hand, resuming, their
// argument checks, and a compiled training step whose lr a schedule changes every step.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <optional>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using namespace kiln::optim;

namespace {

Tensor leaf() { return zeros({2}, DType::Float64).requires_grad_(); }

// The lr the scheduler sets at epochs 0..n-1 (epoch 0 by its constructor, then by step()).
template <class Scheduler>
std::vector<double> lrs(Scheduler& s, Optimizer& opt, int n) {
  std::vector<double> out{opt.lr()};
  for (int e = 1; e < n; ++e) {
    s.step();
    EXPECT_EQ(s.last_lr(), opt.lr());
    out.push_back(opt.lr());
  }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "epoch " << i;
}

TEST(LRScheduler, StepLRAndMultiStepLR) {
  SGD opt({leaf()}, {.lr = 1.0});
  StepLR step(opt, 3, 0.5);
  expect_near(lrs(step, opt, 8), {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25});
  SGD opt2({leaf()}, {.lr = 2.0});
  MultiStepLR multi(opt2, {2, 5}, 0.1);
  expect_near(lrs(multi, opt2, 7), {2, 2, 0.2, 0.2, 0.2, 0.02, 0.02});
  EXPECT_EQ(multi.base_lr(), 2.0);
}

TEST(LRScheduler, ExponentialCosineLinearAndLambda) {
  SGD a({leaf()}, {.lr = 1.0});
  ExponentialLR exp(a, 0.9);
  expect_near(lrs(exp, a, 4), {1, 0.9, 0.81, 0.729});

  SGD b({leaf()}, {.lr = 1.0});
  CosineAnnealingLR cosine(b, 10, 0.1);
  const std::vector<double> c = lrs(cosine, b, 21);
  EXPECT_NEAR(c[0], 1.0, 1e-12);
  EXPECT_NEAR(c[5], 0.55, 1e-12);
  EXPECT_NEAR(c[10], 0.1, 1e-12);
  EXPECT_NEAR(c[3], 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * 0.3)) / 2, 1e-12);
  EXPECT_NEAR(c[20], 1.0, 1e-12);  // past t_max it rises again, as PyTorch's does

  SGD d({leaf()}, {.lr = 1.0});
  LinearLR linear(d, 0.5, 1.0, 4);
  expect_near(lrs(linear, d, 7), {0.5, 0.625, 0.75, 0.875, 1, 1, 1});

  SGD e({leaf()}, {.lr = 3.0});
  LambdaLR lambda(e, [](int64_t epoch) { return 1.0 / static_cast<double>(epoch + 1); });
  expect_near(lrs(lambda, e, 3), {3, 1.5, 1});
}

// Resuming as PyTorch does: an optimizer made with the original lr and given the saved state
// (here its lr), and a scheduler told the epoch reached, continue where the first run was.
TEST(LRScheduler, ResumingContinuesWhereTheFirstRunWas) {
  SGD first({leaf()}, {.lr = 1.0});
  StepLR schedule(first, 2, 0.5);
  for (int e = 0; e < 5; ++e) schedule.step();
  EXPECT_EQ(schedule.last_epoch(), 5);
  EXPECT_NEAR(first.lr(), 0.25, 1e-15);

  SGD again({leaf()}, {.lr = 1.0});
  again.set_lr(first.lr());  // (what load_state_dict restores)
  StepLR resumed(again, 2, 0.5, /*last_epoch=*/schedule.last_epoch());
  schedule.step();
  EXPECT_EQ(resumed.last_epoch(), schedule.last_epoch());
  EXPECT_EQ(resumed.base_lr(), 1.0);
  EXPECT_NEAR(again.lr(), first.lr(), 1e-15);
  EXPECT_NEAR(again.lr(), 0.125, 1e-15);
}

TEST(LRScheduler, BadArgumentsAreValueErrors) {
  SGD opt({leaf()}, {.lr = 1.0});
  EXPECT_THROW(StepLR(opt, 0), ValueError);
  EXPECT_THROW(StepLR(opt, 2, -1.0), ValueError);
  EXPECT_THROW(StepLR(opt, 2, 0.5, -2), ValueError);
  EXPECT_THROW(MultiStepLR(opt, {5, 2}), ValueError);
  EXPECT_THROW(CosineAnnealingLR(opt, 0), ValueError);
  EXPECT_THROW(LinearLR(opt, 0.0), ValueError);
  EXPECT_THROW(LambdaLR(opt, nullptr), ValueError);
  EXPECT_THROW(ReduceLROnPlateau(opt, {.mode = "lowest"}), ValueError);
  EXPECT_THROW(ReduceLROnPlateau(opt, {.factor = 1.0}), ValueError);
  StepLR ok(opt, 2);
  EXPECT_THROW(ok.lr_at(-1), ValueError);
}

// OneCycleLR against PyTorch's phases worked out by hand: max_lr 1 over 10 steps, pct_start
// 0.3 (the rise ends at step 2), initial lr 1/25, final 1/25/1e4.
TEST(OneCycleLR, TheLrRisesThenFallsAndTheMomentumMovesOpposite) {
  SGD opt({leaf()}, {.lr = 0.1, .momentum = 0.9});
  OneCycleLR cos(opt, {.max_lr = 1.0, .total_steps = 10});
  EXPECT_NEAR(opt.lr(), 0.04, 1e-15);
  EXPECT_NEAR(*opt.momentum(), 0.95, 1e-15);
  const double lo = 0.04 / 1e4;
  std::vector<double> want_lr = {0.04, 1 - 0.96 / 2, 1.0};
  std::vector<double> want_m = {0.95, 0.9, 0.85};
  for (int s = 3; s < 10; ++s) {
    const double pct = (s - 2) / 7.0;
    want_lr.push_back(lo + (1 - lo) / 2 * (std::cos(std::numbers::pi * pct) + 1));
    want_m.push_back(0.95 + (0.85 - 0.95) / 2 * (std::cos(std::numbers::pi * pct) + 1));
  }
  std::vector<double> got_m = {*opt.momentum()};
  std::vector<double> got_lr = {opt.lr()};
  for (int s = 1; s < 10; ++s) {
    cos.step();
    got_lr.push_back(opt.lr());
    got_m.push_back(*opt.momentum());
  }
  expect_near(got_lr, want_lr);
  expect_near(got_m, want_m);
  EXPECT_NEAR(got_lr.back(), lo, 1e-15);
  // Step 10 is allowed (as PyTorch); an eleventh step is an error that changes nothing.
  cos.step();
  EXPECT_THROW(cos.step(), ValueError);
  EXPECT_EQ(cos.last_epoch(), 10);

  // Linear, and three phases (rise to step 2, back to the initial lr at step 4, then down).
  SGD opt2({leaf()}, {.lr = 0.1});
  OneCycleLR lin(
      opt2,
      {.max_lr = 1.0, .total_steps = 10, .anneal_strategy = "linear", .cycle_momentum = false});
  EXPECT_EQ(*opt2.momentum(), 0.0);  // not cycled
  expect_near(lrs(lin, opt2, 4), {0.04, 0.52, 1.0, 1.0 + (lo - 1.0) / 7});
  Adam adam({leaf()}, {.lr = 0.1});
  OneCycleLR three(adam, {.max_lr = 1.0, .epochs = 2, .steps_per_epoch = 5, .three_phase = true});
  EXPECT_EQ(three.total_steps(), 10);
  expect_near(lrs(three, adam, 6), {0.04, 0.52, 1.0, 0.52, 0.04,
                                    0.04 + (lo - 0.04) / 2 * (1 - std::cos(std::numbers::pi / 5))});
  EXPECT_NEAR(adam.options().betas.first, three.momentum_at(5), 1e-15);  // beta1 cycles
  EXPECT_NEAR(three.momentum_at(4), 0.95, 1e-15);
}

TEST(OneCycleLR, BadArguments) {
  SGD opt({leaf()}, {.lr = 0.1});
  EXPECT_THROW(OneCycleLR(opt, {.max_lr = 1.0}), ValueError);  // no length
  EXPECT_THROW(OneCycleLR(opt, {.max_lr = 0, .total_steps = 5}), ValueError);
  EXPECT_THROW(OneCycleLR(opt, {.max_lr = 1, .total_steps = 5, .pct_start = 1.5}), ValueError);
  EXPECT_THROW(OneCycleLR(opt, {.max_lr = 1, .total_steps = 5, .anneal_strategy = "exp"}),
               ValueError);
  Adagrad adagrad({leaf()});
  try {
    OneCycleLR(adagrad, {.max_lr = 1, .total_steps = 5});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(
        e.what(),
        "OneCycleLR: Adagrad has no momentum or beta1 to cycle; pass cycle_momentum = false");
  }
  OneCycleLR ok(adagrad, {.max_lr = 1, .total_steps = 5, .cycle_momentum = false});
  EXPECT_THROW(adagrad.set_momentum(0.9), ValueError);
}

// A compiled AdamW step under OneCycleLR: the lr and beta1 change every step, and nothing
// recompiles (both reach the graph as inputs); eager computes the same.
TEST(OneCycleLR, ACompiledStepFollowsItWithoutRecompiling) {
  manual_seed(8);
  nn::Linear eager_model(4, 3), compiled_model(4, 3);
  compiled_model.load_state_dict(eager_model.state_dict());
  AdamW eager_opt(eager_model.parameters()), compiled_opt(compiled_model.parameters());
  OneCycleLR eager_sched(eager_opt, {.max_lr = 0.05, .total_steps = 6});
  OneCycleLR compiled_sched(compiled_opt, {.max_lr = 0.05, .total_steps = 6});
  auto step = [](nn::Linear& m, AdamW& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x).pow(2).mean();
    loss.backward();
    opt.step();
    return loss;
  };
  CompileProfiler prof;
  auto compiled = compile([&](const Tensor& x) { return step(compiled_model, compiled_opt, x); },
                          {.backend = std::string("inductor"), .name = "one_cycle_step"});
  for (int i = 0; i < 6; ++i) {
    Tensor x = randn({5, 4});
    const Tensor want = step(eager_model, eager_opt, x), got = compiled(x);
    EXPECT_NEAR(want.item<double>(), got.item<double>(), 1e-6) << i;
    eager_sched.step();
    compiled_sched.step();
  }
  EXPECT_EQ(prof.stats()["one_cycle_step"].graphs, 1);
  auto pe = eager_model.parameters(), pc = compiled_model.parameters();
  for (size_t k = 0; k < pe.size(); ++k) EXPECT_TRUE(allclose(pe[k], pc[k], 1e-5, 1e-6));
}

TEST(ReduceLROnPlateau, LowersTheLrAfterPatienceAndWaitsOutTheCooldown) {
  SGD opt({leaf()}, {.lr = 1.0});
  ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 2, .cooldown = 1, .min_lr = 0.2});
  const std::vector<double> metrics{1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5};
  std::vector<double> got;
  for (double m : metrics) {
    plateau.step(m);
    got.push_back(opt.lr());
  }
  // Epoch 0 improves on +inf; epochs 1, 2, 3 are bad: the lr is lowered at 3 (0.5, a cooldown
  // of 1); epoch 4 is the cooldown (its bad count reset); 5, 6 bad; 7 improves (best 0.5); 8, 9,
  // 10 bad: lowered at 10 (0.25); 11 is the cooldown.
  expect_near(got, {1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25});
  EXPECT_EQ(plateau.best(), 0.5);
  // min_lr bounds it, and a reduction below eps is not made.
  for (int i = 0; i < 20; ++i) plateau.step(0.5);
  EXPECT_NEAR(opt.lr(), 0.2, 1e-15);
  // mode "max": a rising metric is an improvement.
  SGD opt2({leaf()}, {.lr = 1.0});
  ReduceLROnPlateau accuracy(opt2, {.mode = "max", .patience = 0});
  accuracy.step(0.5);
  accuracy.step(0.6);
  EXPECT_EQ(opt2.lr(), 1.0);
  accuracy.step(0.6);
  EXPECT_NEAR(opt2.lr(), 0.1, 1e-15);
}

// The lr reaches a compiled step as a graph input: a schedule changing it every step neither
// recompiles nor gives other values than eager.
TEST(LRScheduler, ACompiledStepFollowsTheScheduleWithoutRecompiling) {
  manual_seed(5);
  nn::Linear eager_model(4, 3), compiled_model(4, 3);
  compiled_model.load_state_dict(eager_model.state_dict());
  SGD eager_opt(eager_model.parameters(), {.lr = 0.5});
  SGD compiled_opt(compiled_model.parameters(), {.lr = 0.5});
  ExponentialLR eager_sched(eager_opt, 0.7), compiled_sched(compiled_opt, 0.7);
  auto step = [](nn::Linear& m, SGD& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x).pow(2).mean();
    loss.backward();
    opt.step();
    return loss;
  };
  CompileOptions o;
  o.backend = std::string("aot_eager");
  o.name = "scheduled_step";
  auto compiled =
      compile([&](const Tensor& x) { return step(compiled_model, compiled_opt, x); }, o);
  // (SGD's first step and its second are graphs of their own: the first starts the momentum
  // buffers. The profiler watches from the third step on, while the lr changes every step.)
  std::optional<CompileProfiler> prof;
  for (int i = 0; i < 7; ++i) {
    if (i == 2) prof.emplace();
    Tensor x = randn({5, 4});
    EXPECT_EQ(step(eager_model, eager_opt, x).item<double>(), compiled(x).item<double>());
    eager_sched.step();
    compiled_sched.step();
  }
  auto pe = eager_model.parameters(), pc = compiled_model.parameters();
  for (size_t k = 0; k < pe.size(); ++k)
    EXPECT_EQ(pe[k].to_vector<float>(), pc[k].to_vector<float>());
  const auto reasons = prof->stats()["scheduled_step"].recompile_reasons;
  EXPECT_TRUE(reasons.empty()) << reasons.size()
                               << " recompiles, the first: " << (reasons.empty() ? "" : reasons[0]);
}

}  // namespace
