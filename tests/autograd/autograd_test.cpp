// Autograd as a user sees it: leaves and their grad(), backward and kiln::grad (explicit
// gradients, retain_graph, create_graph and higher orders, allow_unused), grad modes and
// InferenceMode, detach, the version counter and in-place ops (rebase history, leaves, views),
// broadcasting and dtype promotion, hooks, retain_grad, custom Functions, graph shapes (diamond,
// long chain), threads, and leaves freed before backward. Expected values are exact or derived
// in closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::vector<double> vals(const Tensor& t) {
  return t.to(DType::Float64).contiguous().to_vector<double>();
}

#define EXPECT_VALS(t, ...)                                                      \
  do {                                                                           \
    const std::vector<double> expected_ = __VA_ARGS__;                           \
    const std::vector<double> got_ = vals(t);                                    \
    ASSERT_EQ(got_.size(), expected_.size());                                    \
    for (size_t i_ = 0; i_ < got_.size(); ++i_)                                  \
      EXPECT_NEAR(got_[i_], expected_[i_], 1e-5 * (1 + std::abs(expected_[i_]))) \
          << "element " << i_;                                                   \
  } while (0)

// Runs f, expecting it to throw E with a message containing every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

Tensor leaf(std::initializer_list<double> v, DType dt = DType::Float32) {
  Tensor t = tensor(v, dt);
  t.requires_grad_();
  return t;
}

// ---------------------------------------------------------------- leaves and backward
TEST(Autograd, LeafGradAccumulatesOverTwoBackwardCalls) {
  Tensor x = leaf({1, 2, 3});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  (x * x).sum().backward();
  EXPECT_VALS(x.grad(), {2, 4, 6});
  (x * 3).sum().backward();
  EXPECT_VALS(x.grad(), {5, 7, 9});
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  EXPECT_FALSE(x.grad().requires_grad());
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  (x * 3).sum().backward();
  EXPECT_VALS(x.grad(), {3, 3, 3});
}

// A Linear layer passes its weight to the product as w.t(): the product's derivative then
// computes the weight's gradient already in the weight's layout, and AccumulateGrad keeps that
// tensor as .grad instead of copying it (a copy per parameter per step otherwise).
TEST(Autograd, TheGradientOfATransposedWeightReachesGradWithoutACopy) {
  manual_seed(3);
  const Tensor x = randn({6, 4}, DType::Float64);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias);
    Tensor w = randn({5, 4}, DType::Float64).requires_grad_();
    Tensor b = randn({5}, DType::Float64).requires_grad_();
    const void* arrived = nullptr;
    w.register_hook([&](const Tensor& g) {
      arrived = g.data_ptr();
      return Tensor();
    });
    Tensor y = with_bias ? linear(x, w, b) : linear(x, w);
    const Tensor g = randn({6, 5}, DType::Float64);
    y.backward(g);
    EXPECT_EQ(w.grad().data_ptr(), arrived);
    EXPECT_TRUE(w.grad().is_contiguous());
    EXPECT_TRUE(allclose(w.grad(), matmul(g.t(), x), 1e-12, 1e-12));
  }
  // The other operand transposed, and neither: the same values as the textbook formulas.
  Tensor a = randn({4, 3}, DType::Float64).requires_grad_();
  Tensor c = randn({4, 2}, DType::Float64).requires_grad_();
  const Tensor g = randn({3, 2}, DType::Float64);
  mm(a.t(), c).backward(g);
  EXPECT_TRUE(allclose(a.grad(), matmul(c, g.t()), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(c.grad(), matmul(a, g), 1e-12, 1e-12));
}

TEST(Autograd, GradFnNamesAndLeafness) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  EXPECT_FALSE(y.is_leaf());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "MulBackward");
  EXPECT_EQ(x.exp().grad_fn()->name(), "ExpBackward");
  Tensor c = tensor({1.0, 2.0});
  EXPECT_TRUE(c.is_leaf());
  EXPECT_FALSE((c * 2).requires_grad());
  EXPECT_FALSE((c * 2).grad_fn());
}

TEST(Autograd, BackwardWithExplicitGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x;
  y.backward(tensor({1.0, 0.5, 2.0}));
  EXPECT_VALS(x.grad(), {2, 2, 12});
  // A float64 gradient for a float32 output is accepted and cast.
  Tensor x2 = leaf({1, 2});
  (x2 * 2).backward(tensor({1.0, 1.0}, DType::Float64));
  EXPECT_EQ(x2.grad().dtype(), DType::Float32);
  EXPECT_VALS(x2.grad(), {2, 2});
  // The free function over several outputs.
  Tensor x3 = leaf({1, 2});
  backward({x3 * 2, x3 * x3}, {tensor({1.0, 1.0}), tensor({1.0, 10.0})});
  EXPECT_VALS(x3.grad(), {4, 42});
}

TEST(Autograd, BackwardErrors) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2;
  expect_error<Error>([&] { y.backward(); }, {"one-element", "[3]"});
  expect_error<ShapeError>([&] { y.backward(tensor({1.0, 2.0})); }, {"[2]", "[3]"});
  Tensor c = tensor({1.0, 2.0});
  expect_error<Error>([&] { c.sum().backward(); }, {"does not require grad"});
  expect_error<ValueError>(
      [&] {
        backward({y}, {tensor({1.0}), tensor({1.0})});
      },
      {"grad_outputs"});
}

TEST(Autograd, BackwardOnALeafItself) {
  Tensor x = leaf({4});
  x.backward();
  EXPECT_VALS(x.grad(), {1});
}

// ---------------------------------------------------------------- retain_graph
TEST(Autograd, SecondBackwardWithoutRetainGraphIsAnError) {
  Tensor x = leaf({1, 2});
  Tensor z = (x * x).sum();
  z.backward();
  EXPECT_VALS(x.grad(), {2, 4});
  expect_error<Error>([&] { z.backward(); }, {"MulBackward", "retain_graph"});
  // exp saves its output rather than its input: same error.
  Tensor e = x.exp().sum();
  e.backward();
  expect_error<Error>([&] { e.backward(); }, {"retain_graph"});
}

TEST(Autograd, RetainGraphAllowsASecondBackwardThatAccumulates) {
  Tensor x = leaf({1, 2});
  Tensor z = (x * x).sum();
  z.backward({}, /*retain_graph=*/true);
  EXPECT_VALS(x.grad(), {2, 4});
  z.backward({}, true);
  EXPECT_VALS(x.grad(), {4, 8});
  z.backward();  // last one frees the graph
  EXPECT_VALS(x.grad(), {6, 12});
  expect_error<Error>([&] { z.backward(); }, {"retain_graph"});
  // kiln::grad frees the graph too unless told to keep it.
  Tensor w = (x * x).sum();
  EXPECT_VALS(grad({w}, {x}, {}, true)[0], {2, 4});
  EXPECT_VALS(grad({w}, {x})[0], {2, 4});
  expect_error<Error>([&] { grad({w}, {x}); }, {"retain_graph"});
}

// ---------------------------------------------------------------- create_graph, higher order
TEST(Autograd, HigherOrderGradientsOfCube) {
  Tensor x = leaf({2.0, -1.0}, DType::Float64);
  Tensor y = (x * x * x).sum();
  Tensor g1 = grad({y}, {x}, {}, {}, /*create_graph=*/true)[0];
  EXPECT_VALS(g1, {12, 3});  // 3x^2
  EXPECT_TRUE(g1.requires_grad());
  Tensor g2 = grad({g1.sum()}, {x}, {}, {}, true)[0];
  EXPECT_VALS(g2, {12, -6});  // 6x
  Tensor g3 = grad({g2.sum()}, {x}, {}, {}, true)[0];
  EXPECT_VALS(g3, {6, 6});
  // The third derivative is a constant: it has no history left (as in PyTorch, differentiating
  // it again is then an error).
  EXPECT_FALSE(g3.requires_grad());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, HigherOrderUnaryMath) {
  Tensor x = leaf({0.5, -0.3}, DType::Float64);
  Tensor g = grad({x.exp().sum()}, {x}, {}, {}, true)[0];
  Tensor gg = grad({g.sum()}, {x})[0];
  EXPECT_VALS(gg, {std::exp(0.5), std::exp(-0.3)});
  // tanh'' = -2 tanh (1 - tanh^2)
  Tensor x2 = leaf({0.5, -0.3}, DType::Float64);
  Tensor h = grad({x2.tanh().sum()}, {x2}, {}, {}, true)[0];
  Tensor hh = grad({h.sum()}, {x2})[0];
  auto d2 = [](double v) {
    double t = std::tanh(v);
    return -2 * t * (1 - t * t);
  };
  EXPECT_VALS(hh, {d2(0.5), d2(-0.3)});
  // log'' = -1/x^2
  Tensor x3 = leaf({2.0, 4.0}, DType::Float64);
  Tensor l = grad({x3.log().sum()}, {x3}, {}, {}, true)[0];
  EXPECT_VALS(grad({l.sum()}, {x3})[0], {-0.25, -1.0 / 16});
}

TEST(Autograd, BackwardWithCreateGraphGivesDifferentiableGrad) {
  Tensor x = leaf({3.0}, DType::Float64);
  (x * x * x).backward({}, {}, /*create_graph=*/true);
  EXPECT_VALS(x.grad(), {27});
  ASSERT_TRUE(x.grad().requires_grad());
  Tensor g = x.grad();
  x.set_grad(Tensor());
  g.backward();
  EXPECT_VALS(x.grad(), {18});  // 6x
}

TEST(Autograd, MixedPartialDerivatives) {
  Tensor a = leaf({2.0}, DType::Float64), b = leaf({5.0}, DType::Float64);
  Tensor f = a * a * b;  // df/da = 2ab, d2f/dadb = 2a
  Tensor da = grad({f}, {a}, {}, {}, true)[0];
  EXPECT_VALS(da, {20});
  auto second = grad({da}, {a, b});
  EXPECT_VALS(second[0], {10});  // 2b
  EXPECT_VALS(second[1], {4});   // 2a
}

// ---------------------------------------------------------------- kiln::grad
TEST(Autograd, GradDoesNotTouchDotGrad) {
  Tensor x = leaf({1, 2}), w = leaf({3, 4});
  Tensor y = (x * w).sum();
  auto g = grad({y}, {x, w});
  EXPECT_VALS(g[0], {3, 4});
  EXPECT_VALS(g[1], {1, 2});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());
}

TEST(Autograd, GradWithRespectToANonLeaf) {
  Tensor x = leaf({1, 2});
  Tensor h = x * 3;
  Tensor y = (h * h).sum();
  auto g = grad({y}, {h, x});
  EXPECT_VALS(g[0], {6, 12});   // 2h
  EXPECT_VALS(g[1], {18, 36});  // 2h * 3
  EXPECT_FALSE(h.grad().defined());
}

TEST(Autograd, GradAllowUnused) {
  Tensor x = leaf({1, 2}), unused = leaf({5});
  Tensor y = (x * 2).sum();
  expect_error<Error>([&] { grad({y}, {x, unused}, {}, true); }, {"allow_unused", "input 1"});
  auto g = grad({y}, {x, unused}, {}, {}, false, /*allow_unused=*/true);
  EXPECT_VALS(g[0], {2, 2});
  EXPECT_FALSE(g[1].defined());
  Tensor c = tensor({1.0});
  expect_error<Error>([&] { grad({(x * 2).sum()}, {c}); }, {"does not require grad"});
}

TEST(Autograd, GradRunsLeafHooksButDoesNotAccumulate) {
  Tensor x = leaf({1, 2});
  x.register_hook([](const Tensor& g) { return g * 10; });
  EXPECT_VALS(grad({(x * 3).sum()}, {x})[0], {30, 30});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GradOfANonLeafDoesNotRunOrFreeTheNodesBelowIt) {
  Tensor x = leaf({1, 2});
  Tensor h = x * x;
  Tensor y = (h * 3).sum();
  EXPECT_VALS(grad({y}, {h})[0], {3, 3});
  // h's node (MulBackward, with saved tensors) was not needed, so it was neither run nor freed.
  h.sum().backward();
  EXPECT_VALS(x.grad(), {2, 4});
}

TEST(Autograd, GradWithGradOutputs) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x;
  auto g = grad({y}, {x}, {tensor({1.0, 0.0, -1.0})});
  EXPECT_VALS(g[0], {2, 0, -6});
}

// ---------------------------------------------------------------- grad modes
TEST(Autograd, NoGradEnableGradNesting) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(y.grad_fn());
    {
      EnableGradGuard enable;
      EXPECT_TRUE(is_grad_enabled());
      Tensor z = x * 2;
      EXPECT_TRUE(z.requires_grad());
      {
        NoGradGuard again;
        EXPECT_FALSE((x * 2).requires_grad());
      }
      EXPECT_TRUE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  set_grad_enabled(false);
  EXPECT_FALSE((x * 2).requires_grad());
  set_grad_enabled(true);
  EXPECT_TRUE((x * 2).requires_grad());
  {
    AutoGradMode mode(false);
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
}

TEST(Autograd, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool other_thread_enabled = false;
  std::thread t([&] { other_thread_enabled = is_grad_enabled(); });
  t.join();
  EXPECT_TRUE(other_thread_enabled);
  EXPECT_FALSE(is_grad_enabled());
}

TEST(Autograd, InPlaceOnLeafUnderNoGradIsAllowed) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard no_grad;
    x.mul_(2);
  }
  EXPECT_VALS(x, {2, 4});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  (x * x).sum().backward();
  EXPECT_VALS(x.grad(), {4, 8});
}

TEST(Autograd, InferenceMode) {
  Tensor x = leaf({1, 2});
  Tensor made_inside, computed_inside;
  {
    InferenceMode guard;
    EXPECT_TRUE(is_inference_mode_enabled());
    EXPECT_FALSE(is_grad_enabled());
    made_inside = ones({2});
    computed_inside = x * 2;
    EXPECT_FALSE(computed_inside.requires_grad());
    computed_inside.mul_(3);  // in place inside the scope is fine
  }
  EXPECT_FALSE(is_inference_mode_enabled());
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_VALS(computed_inside, {6, 12});
  EXPECT_TRUE(computed_inside.impl()->is_inference());
  // Cannot be saved for backward (mul saves both inputs).
  expect_error<Error>([&] { (void)(x * computed_inside); }, {"InferenceMode", "saved"});
  expect_error<Error>([&] { (void)(x * made_inside); }, {"InferenceMode"});
  // Used where nothing is saved, it is fine.
  Tensor y = (x + computed_inside).sum();
  y.backward();
  EXPECT_VALS(x.grad(), {1, 1});
  // No in-place changes outside the scope.
  expect_error<Error>([&] { computed_inside.mul_(2); }, {"InferenceMode"});
  expect_error<Error>([&] { made_inside.fill_(2); }, {"InferenceMode"});
  // A clone made outside is a normal tensor.
  Tensor c = computed_inside.clone();
  c.mul_(2);
  EXPECT_VALS(c, {12, 24});
  EXPECT_VALS(x * c, {12, 48});
}

TEST(Autograd, BackwardInsideInferenceModeThenOutside) {
  Tensor x = leaf({1, 2});
  {
    Tensor y = (x * x).sum();
    InferenceMode guard;
    y.backward();
  }
  EXPECT_VALS(x.grad(), {2, 4});
  (x * x).sum().backward();  // accumulating outside into a grad made inside
  EXPECT_VALS(x.grad(), {4, 8});
}

TEST(Autograd, InferenceModeFalseIsANoOpScope) {
  {
    InferenceMode off(false);
    EXPECT_FALSE(is_inference_mode_enabled());
    EXPECT_TRUE(is_grad_enabled());
  }
  {
    InferenceMode on;
    {
      InferenceMode off(false);
      EXPECT_FALSE(is_inference_mode_enabled());
      EXPECT_FALSE(ones({1}).impl()->is_inference());
    }
    EXPECT_TRUE(is_inference_mode_enabled());
  }
  EXPECT_FALSE(is_inference_mode_enabled());
  EXPECT_TRUE(is_grad_enabled());
}

// ---------------------------------------------------------------- detach, requires_grad_
TEST(Autograd, Detach) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.data_ptr(), y.data_ptr());  // shares storage
  // Gradient stops at the detached tensor.
  Tensor z = (d * x).sum();
  z.backward();
  EXPECT_VALS(x.grad(), {3, 6});
  // Changing the detached tensor in place bumps the shared version counter.
  Tensor x2 = leaf({1, 2});
  Tensor e = x2.exp();
  const uint64_t v = e.version();
  e.detach().mul_(2);
  EXPECT_EQ(e.version(), v + 1);
  expect_error<Error>([&] { e.sum().backward(); }, {"ExpBackward", "modified by an in-place"});
}

TEST(Autograd, RequiresGradOnlyForFloatingTensors) {
  Tensor i = tensor({1, 2, 3});
  EXPECT_EQ(i.dtype(), DType::Int64);
  expect_error<DTypeError>([&] { i.requires_grad_(); }, {"requires_grad_", "floating"});
  Tensor b = zeros({2}, DType::Bool);
  expect_error<DTypeError>([&] { b.requires_grad_(); }, {"floating"});
  i.requires_grad_(false);  // turning it off is always fine
  EXPECT_FALSE(i.requires_grad());
  Tensor f = tensor({1.0}, DType::Float64);
  EXPECT_TRUE(f.requires_grad_().requires_grad());
  // Only leaves' flags can be cleared (a non-leaf's follows its history; detach() instead).
  Tensor nl = f * 2;
  expect_error<Error>([&] { nl.requires_grad_(false); }, {"leaf", "detach"});
  EXPECT_TRUE(nl.requires_grad());
  EXPECT_NO_THROW(nl.requires_grad_(true));
  f.requires_grad_(false);
  EXPECT_FALSE(f.requires_grad());
  // Integer results of ops on float tensors that require grad do not require grad.
  Tensor x = leaf({1.5, 2.5});
  EXPECT_FALSE(x.to(DType::Int32).requires_grad());
}

// ---------------------------------------------------------------- version counter, in place
TEST(Autograd, VersionCounter) {
  Tensor t = tensor({1.0, 2.0});
  const uint64_t v0 = t.version();
  t.mul_(2);
  EXPECT_EQ(t.version(), v0 + 1);
  t.add_(1);
  EXPECT_EQ(t.version(), v0 + 2);
  (void)(t * 2);
  EXPECT_EQ(t.version(), v0 + 2);
}

TEST(Autograd, ModifyingASavedOutputIsDetected) {
  Tensor x = leaf({1, 2});
  Tensor y = x.exp();
  y.mul_(2);
  expect_error<Error>([&] { y.sum().backward(); },
                      {"ExpBackward", "in-place", "version 1", "expected version 0"});
}

TEST(Autograd, ModifyingASavedInputIsDetected) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 1.0;  // non-leaf
  Tensor w = tensor({3.0, 4.0});
  Tensor y = a * w;  // MulBackward saves a and w
  w.add_(1);
  expect_error<Error>([&] { y.sum().backward(); }, {"MulBackward", "input", "version"});
}

TEST(Autograd, InPlaceOnNonLeafRebasesHistory) {
  Tensor x = leaf({1, 2, 3}), y = leaf({4, 5, 6});
  Tensor a = x.clone();
  a.mul_(y);
  EXPECT_FALSE(a.is_leaf());
  EXPECT_EQ(a.grad_fn()->name(), "MulBackward");
  EXPECT_VALS(a, {4, 10, 18});
  a.sum().backward();
  EXPECT_VALS(x.grad(), {4, 5, 6});
  EXPECT_VALS(y.grad(), {1, 2, 3});
}

TEST(Autograd, InPlaceSquareOfItself) {
  Tensor x = leaf({1, 2, 3});
  Tensor a = x.clone();
  a.mul_(a);  // a = a * a, with the old a saved
  a.sum().backward();
  EXPECT_VALS(x.grad(), {2, 4, 6});
}

TEST(Autograd, InPlaceChain) {
  Tensor x = leaf({0.5, 1.0}, DType::Float64);
  Tensor a = x.clone();
  exp_(a);
  a.mul_(3);
  a.add_(x);  // a = 3 exp(x) + x
  a.sum().backward();
  EXPECT_VALS(x.grad(), {3 * std::exp(0.5) + 1, 3 * std::exp(1.0) + 1});
}

TEST(Autograd, InPlaceThenFurtherUse) {
  Tensor x = leaf({1, 2});
  Tensor b = x * 2;
  b.add_(1);  // b = 2x + 1
  Tensor c = (b * b).sum();
  c.backward();
  EXPECT_VALS(x.grad(), {12, 20});  // 2b * 2
}

TEST(Autograd, InPlaceIntoATensorThatDoesNotRequireGrad) {
  Tensor x = leaf({1, 2});
  Tensor a = zeros({2});
  a.add_(x * x);
  EXPECT_TRUE(a.requires_grad());
  EXPECT_FALSE(a.is_leaf());
  a.sum().backward();
  EXPECT_VALS(x.grad(), {2, 4});
  // Overwriting with something that needs no grad drops the history.
  Tensor b = x * 2;
  {
    Tensor src = tensor({7.0, 8.0}, DType::Float32);
    b.copy_(src);
  }
  Tensor z = (b * x).sum();
  x.set_grad(Tensor());
  z.backward();
  EXPECT_VALS(x.grad(), {7, 8});
}

TEST(Autograd, InPlaceUnaryOnNonLeafWithSavedOutput) {
  Tensor x = leaf({0.2, -0.4}, DType::Float64);
  Tensor a = x * 1.0;
  sigmoid_(a);
  a.sum().backward();
  auto ds = [](double v) {
    double s = 1 / (1 + std::exp(-v));
    return s * (1 - s);
  };
  EXPECT_VALS(x.grad(), {ds(0.2), ds(-0.4)});
}

TEST(Autograd, InPlaceOnLeafRequiringGradIsAnError) {
  Tensor x = leaf({1, 2});
  expect_error<Error>([&] { x.mul_(2); }, {"leaf", "requires grad", "NoGradGuard"});
  expect_error<Error>([&] { exp_(x); }, {"leaf"});
  EXPECT_VALS(x, {1, 2});  // unchanged
  EXPECT_EQ(x.version(), 0u);
}

TEST(Autograd, InPlaceDTypeMismatchIsAnErrorWhileRecording) {
  Tensor x = leaf({1.5, 2.5});
  Tensor i = zeros({2}, DType::Int64);
  expect_error<DTypeError>([&] { i.add_(x); }, {"can't be cast"});
  EXPECT_FALSE(i.requires_grad());
  EXPECT_VALS(i, {0, 0});
  // Same without recording.
  Tensor c = tensor({1.5, 2.5});
  expect_error<DTypeError>([&] { i.add_(c); }, {"can't be cast"});
}

TEST(Autograd, InPlaceShapeMismatchIsAnErrorWhileRecording) {
  Tensor x = leaf({1, 2});
  Tensor a = zeros({2});
  Tensor big = zeros({3, 2});
  expect_error<ShapeError>([&] { a.add_(big * x); }, {"in-place"});
  EXPECT_FALSE(a.requires_grad());
}

// PyTorch's CopySlices: writing in place into a view of a tensor that is part of a graph
// rebases the base's history, so gradients flow through the write to both.
TEST(Autograd, InPlaceOnASliceOfANonLeafRebasesTheBase) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = x * 1.0;
  Tensor v = y.slice(0, 0, 2);
  v.mul_(2);
  EXPECT_VALS(y.detach(), {2, 4, 3, 4});
  ASSERT_TRUE(y.grad_fn());
  (y * tensor({1.0, 10.0, 100.0, 1000.0})).sum().backward();
  // d/dx: the first two elements were doubled.
  EXPECT_VALS(x.grad(), {2, 20, 100, 1000});
}

TEST(Autograd, InPlaceOnAViewOfATensorWithoutGradTakesTheWrittenValuesHistory) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor base = zeros({4});
  Tensor bv = base.slice(0, 1, 3);
  bv.add_(x.slice(0, 0, 2) * 3);
  EXPECT_VALS(base.detach(), {0, 3, 6, 0});
  EXPECT_TRUE(base.requires_grad());
  base.sum().backward();
  EXPECT_VALS(x.grad(), {3, 3, 0, 0});
}

TEST(Autograd, InPlaceThroughChainedViewsAndTheViewsOwnGradient) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  Tensor y = x * 2.0;  // (exp would save its output, and eager rejects writing into it)
  Tensor m = y.view({2, 3});
  Tensor col = m.select(1, 0);  // a view of a view: elements 0 and 3
  col.mul_(col);                // squares them
  EXPECT_VALS(y.detach(), {4, 4, 6, 64, 10, 12});
  y.sum().backward();
  // d/dx of (2x)^2 is 8x for the squared elements, 2 for the others.
  EXPECT_VALS(x.grad(), {8, 2, 2, 32, 2, 2});
  // The view's own history is the written region of the new base.
  Tensor x2 = leaf({1, 2, 3});
  Tensor y2 = x2 * 2.0;
  Tensor v2 = y2.slice(0, 1, 3);
  v2.add_(1);
  (v2 * 5).sum().backward();
  EXPECT_VALS(x2.grad(), {0, 10, 10});
}

// The other direction (PyTorch regenerates a view's grad_fn): a view taken before its base,
// or another view of it, was written in place sees the written values, and its gradient flows
// through the write.
TEST(Autograd, AViewTakenBeforeItsBaseWasWrittenInPlaceFollowsTheWrite) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = x.neg();
  Tensor flat = y.reshape({-1});  // a view of y
  y.mul_(0.5);
  EXPECT_VALS(flat.detach(), {-0.5, -1, -1.5, -2});
  flat.sum().backward();
  EXPECT_VALS(x.grad(), {-0.5, -0.5, -0.5, -0.5});  // not -1: flat is y after the write
}

TEST(Autograd, AWriteIntoOneViewReachesTheGradientOfAnOverlappingView) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = x * 1.0;
  Tensor a = y.slice(0, 0, 2), b = y.slice(0, 1, 3);
  a.mul_(3);  // elements 0 and 1; b holds elements 1 and 2
  EXPECT_VALS(b.detach(), {6, 3});
  (b * tensor({1.0, 10.0})).sum().backward();
  EXPECT_VALS(x.grad(), {0, 3, 10, 0});
}

TEST(Autograd, AViewOfATensorThatGainsHistoryInPlaceGainsItToo) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor base = zeros({4});
  Tensor v = base.slice(0, 1, 3);  // taken while base has no history
  base.add_(x * 2);
  EXPECT_VALS(v.detach(), {4, 6});
  (v * v).sum().backward();  // d/dx of (2x)^2 = 8x, for elements 1 and 2
  EXPECT_VALS(x.grad(), {0, 16, 24, 0});
}

TEST(Autograd, InPlaceOnAViewOfALeafThatRequiresGradIsAnError) {
  Tensor x = leaf({1, 2, 3, 4});
  expect_error<Error>([&] { x.slice(0, 0, 2).mul_(2); }, {"mul", "leaf"});
  // Without recording, in-place on views works as usual.
  {
    NoGradGuard no_grad;
    x.slice(0, 0, 2).mul_(2);
  }
  EXPECT_VALS(x.detach(), {2, 4, 3, 4});
}

// ---------------------------------------------------------------- broadcasting and dtypes
TEST(Autograd, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor x = leaf({1, 2, 3});  // [3]
  Tensor w = tensor({1.0, 2.0, 3.0, 10.0, 20.0, 30.0}).reshape({2, 3});
  (x * w).sum().backward();
  EXPECT_EQ(x.grad().sizes(), Shape({3}));
  EXPECT_VALS(x.grad(), {11, 22, 33});

  Tensor c = tensor({1.0, 2.0}).reshape({2, 1});
  c.requires_grad_();
  (c * w).sum().backward();
  EXPECT_EQ(c.grad().sizes(), Shape({2, 1}));
  EXPECT_VALS(c.grad(), {6, 60});

  Tensor s = tensor({2.0}).reshape({});
  s.requires_grad_();
  (w / s).sum().backward();
  EXPECT_EQ(s.grad().dim(), 0);
  EXPECT_VALS(s.grad(), {-66.0 / 4});
  // Both sides broadcast: [2,1] + [3] -> [2,3]
  Tensor a = tensor({1.0, 2.0}).reshape({2, 1});
  a.requires_grad_();
  Tensor b = leaf({1, 2, 3});
  (a + b).sum().backward();
  EXPECT_VALS(a.grad(), {3, 3});
  EXPECT_VALS(b.grad(), {2, 2, 2});
}

TEST(Autograd, DTypePromotionGradHasTheLeafsDType) {
  Tensor x = leaf({1, 2}, DType::Float32);
  Tensor w = tensor({0.5, 0.25}, DType::Float64);
  Tensor y = x * w;
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  EXPECT_VALS(x.grad(), {0.5, 0.25});
  // kiln::grad too.
  Tensor g = grad({(x * w).sum()}, {x})[0];
  EXPECT_EQ(g.dtype(), DType::Float32);
  // Through a cast.
  Tensor x2 = leaf({1, 2}, DType::Float64);
  (x2.to(DType::Float32) * 3).sum().backward();
  EXPECT_EQ(x2.grad().dtype(), DType::Float64);
  EXPECT_VALS(x2.grad(), {3, 3});
}

// ---------------------------------------------------------------- hooks
TEST(Autograd, HookOnLeafModifiesGradient) {
  Tensor x = leaf({1, 2});
  int calls = 0;
  size_t h = x.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 10;
  });
  (x * 3).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_VALS(x.grad(), {30, 30});
  x.remove_hook(h);
  (x * 3).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_VALS(x.grad(), {33, 33});
}

TEST(Autograd, HookOnNonLeafModifiesUpstreamGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  Tensor seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return Tensor();  // observe only
  });
  size_t h = y.register_hook([](const Tensor& g) { return g * 2; });
  (y * y).sum().backward({}, true);
  EXPECT_VALS(seen, {6, 12});       // 2y
  EXPECT_VALS(x.grad(), {36, 72});  // 2y * 2 * 3
  y.remove_hook(h);
  x.set_grad(Tensor());
  Tensor z = (y * 1.0).sum();
  z.backward();
  EXPECT_VALS(x.grad(), {3, 3});
}

TEST(Autograd, HooksRunInRegistrationOrderAndChain) {
  Tensor x = leaf({1});
  x.register_hook([](const Tensor& g) { return g + 1; });
  x.register_hook([](const Tensor& g) { return g * 10; });
  (x * 2).sum().backward();
  EXPECT_VALS(x.grad(), {30});
}

TEST(Autograd, HookMustKeepShapeAndDType) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  size_t h = y.register_hook([](const Tensor& g) { return g.sum(); });
  expect_error<ShapeError>([&] { y.sum().backward({}, true); }, {"hook", "MulBackward", "[2]"});
  y.remove_hook(h);
  x.register_hook([](const Tensor& g) { return g.to(DType::Float64); });
  expect_error<DTypeError>([&] { y.sum().backward(); }, {"hook", "leaf", "float64"});
}

TEST(Autograd, RegisterHookNeedsRequiresGrad) {
  Tensor c = tensor({1.0});
  expect_error<Error>([&] { c.register_hook([](const Tensor& g) { return g; }); },
                      {"does not require grad"});
}

TEST(Autograd, RetainGrad) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  EXPECT_FALSE(y.retains_grad());
  y.retain_grad();
  EXPECT_TRUE(y.retains_grad());
  Tensor z = (y * y).sum();
  z.backward({}, true);
  EXPECT_VALS(y.grad(), {6, 12});
  EXPECT_FALSE(y.grad().requires_grad());
  z.backward();
  EXPECT_VALS(y.grad(), {12, 24});
  EXPECT_VALS(x.grad(), {36, 72});
  // Non-leaves without retain_grad keep no grad; leaves do not "retain" (they always keep).
  Tensor w = x * 2;
  (w * 1.0).sum().backward();
  EXPECT_FALSE(w.grad().defined());
  x.retain_grad();
  EXPECT_FALSE(x.retains_grad());
}

TEST(Autograd, RetainGradFollowsInPlaceChanges) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  y.retain_grad();
  y.mul_(3);  // .grad is the gradient of the new value of y
  (y * y).sum().backward();
  EXPECT_VALS(y.grad(), {12, 24});  // 2y, y = 6x
  EXPECT_VALS(x.grad(), {72, 144});
}

TEST(Autograd, RetainGradSeesHookModifiedGradient) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  y.retain_grad();
  y.register_hook([](const Tensor& g) { return g * 2; });
  y.sum().backward();
  // As in PyTorch, .grad of a retained non-leaf is the gradient after its hooks.
  EXPECT_VALS(y.grad(), {2, 2});
  EXPECT_VALS(x.grad(), {6, 6});
}

// ---------------------------------------------------------------- custom functions
struct Square : autograd::Function<Square> {
  static Tensor forward(autograd::FunctionContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(autograd::FunctionContext* ctx, std::vector<Tensor> grads) {
    Tensor x = ctx->get_saved_variables()[0];
    return {grads[0] * 2 * x};
  }
};

// y = x * c + b with a non-tensor argument, saving its output.
struct ScaleShift : autograd::Function<ScaleShift> {
  static Tensor forward(autograd::FunctionContext* ctx, const Tensor& x, double c,
                        const Tensor& b) {
    ctx->saved_data["c"] = c;
    ctx->saved_data["needs"] = std::vector<bool>{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                                 ctx->needs_input_grad(2)};
    return x * c + b;
  }
  static std::vector<Tensor> backward(autograd::FunctionContext* ctx, std::vector<Tensor> grads) {
    const double c = std::any_cast<double>(ctx->saved_data["c"]);
    Tensor gx = ctx->needs_input_grad(0) ? grads[0] * c : Tensor();
    Tensor gb = ctx->needs_input_grad(2) ? grads[0] : Tensor();
    return {gx, Tensor(), gb};
  }
};

struct WrongCount : autograd::Function<WrongCount> {
  static Tensor forward(autograd::FunctionContext*, const Tensor& x) { return x * 2; }
  static std::vector<Tensor> backward(autograd::FunctionContext*, std::vector<Tensor> grads) {
    return {grads[0], grads[0], grads[0]};
  }
};

// Two outputs; the backward of exp saved as an output.
struct ExpAndDouble : autograd::Function<ExpAndDouble> {
  static std::vector<Tensor> forward(autograd::FunctionContext* ctx, const Tensor& x) {
    Tensor e = x.exp();
    ctx->save_for_backward({e});
    return {e, x * 2};
  }
  static std::vector<Tensor> backward(autograd::FunctionContext* ctx, std::vector<Tensor> grads) {
    Tensor e = ctx->get_saved_variables()[0];
    return {grads[0] * e + grads[1] * 2};
  }
};

// The full example of docs/autograd.md.
struct ClampedExp : autograd::Function<ClampedExp> {
  static Tensor forward(autograd::FunctionContext* ctx, const Tensor& x, double limit,
                        const Tensor& scale) {
    Tensor y = kiln::exp(kiln::clamp(x, std::nullopt, limit)) * scale;
    ctx->save_for_backward({x, scale, y});
    ctx->saved_data["limit"] = limit;
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionContext* ctx, std::vector<Tensor> grads) {
    auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &scale = saved[1], &y = saved[2];
    const double limit = std::any_cast<double>(ctx->saved_data["limit"]);
    Tensor gx, gscale;
    if (ctx->needs_input_grad(0)) gx = grads[0] * y * (x < limit).to(y.dtype());
    if (ctx->needs_input_grad(2)) gscale = grads[0] * y / scale;
    return {gx, Tensor(), gscale};
  }
};

TEST(AutogradFunction, GuideExampleWithBroadcastGradient) {
  Tensor x = leaf({0.0, 1.0, 5.0});
  Tensor scale = leaf({2.0});
  Tensor y = ClampedExp::apply(x, 3.0, scale);
  const double e = std::exp(1.0);
  EXPECT_VALS(y, {2, 2 * e, 2 * std::exp(3.0)});
  y.sum().backward();
  EXPECT_VALS(x.grad(), {2, 2 * e, 0});
  EXPECT_EQ(scale.grad().sizes(), Shape({1}));
  EXPECT_VALS(scale.grad(), {1 + e + std::exp(3.0)});
}

struct BadShape : autograd::Function<BadShape> {
  static Tensor forward(autograd::FunctionContext*, const Tensor& x) { return x * 2; }
  static std::vector<Tensor> backward(autograd::FunctionContext*, std::vector<Tensor> grads) {
    return {grads[0].sum()};
  }
};

TEST(AutogradFunction, GradientOfAnIncompatibleShapeIsAnError) {
  Tensor x = leaf({1, 2});
  expect_error<ShapeError>([&] { BadShape::apply(x).sum().backward(); },
                           {"BadShape", "shape []", "tensor argument 0"});
}

TEST(AutogradFunction, SquareForwardBackward) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = Square::apply(x);
  EXPECT_VALS(y, {1, 4, 9});
  ASSERT_TRUE(y.grad_fn());
  EXPECT_NE(y.grad_fn()->name().find("Square"), std::string::npos);
  y.sum().backward();
  EXPECT_VALS(x.grad(), {2, 4, 6});
}

TEST(AutogradFunction, WithoutRecordingItIsAPlainCall) {
  Tensor c = tensor({1.0, 2.0});
  Tensor y = Square::apply(c);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_VALS(y, {1, 4});
  Tensor x = leaf({3});
  NoGradGuard no_grad;
  EXPECT_FALSE(Square::apply(x).requires_grad());
}

TEST(AutogradFunction, NonTensorArgsAndNeedsInputGrad) {
  Tensor x = leaf({1, 2});
  Tensor b = tensor({10.0, 20.0});  // no grad needed
  Tensor y = ScaleShift::apply(x, 3.0, b);
  EXPECT_VALS(y, {13, 26});
  auto* node = dynamic_cast<autograd::detail::CustomFunctionNode*>(y.grad_fn().get());
  ASSERT_NE(node, nullptr);
  auto needs = std::any_cast<std::vector<bool>>(node->ctx.saved_data["needs"]);
  EXPECT_EQ(needs, (std::vector<bool>{true, false, false}));
  y.sum().backward();
  EXPECT_VALS(x.grad(), {3, 3});
  // Both tensors require grad.
  Tensor x2 = leaf({1, 2}), b2 = leaf({0, 0});
  ScaleShift::apply(x2, -2.0, b2).sum().backward();
  EXPECT_VALS(x2.grad(), {-2, -2});
  EXPECT_VALS(b2.grad(), {1, 1});
}

TEST(AutogradFunction, WrongNumberOfGradientsIsAnError) {
  Tensor x = leaf({1, 2});
  Tensor y = WrongCount::apply(x);
  expect_error<Error>([&] { y.sum().backward(); }, {"returned 3 gradients", "expected 1"});
}

TEST(AutogradFunction, UsedTwiceInAGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = Square::apply(Square::apply(x));  // x^4
  y.sum().backward();
  EXPECT_VALS(x.grad(), {4, 32});
  Tensor x2 = leaf({1, 2});
  (Square::apply(x2) + Square::apply(x2 * 2)).sum().backward();  // x^2 + 4x^2
  EXPECT_VALS(x2.grad(), {10, 20});
}

TEST(AutogradFunction, MultipleOutputsAndSavedOutputs) {
  Tensor x = leaf({0.0, 1.0}, DType::Float64);
  auto outs = ExpAndDouble::apply(x);
  ASSERT_EQ(outs.size(), 2u);
  (outs[0].sum() + outs[1].sum() * 3).backward();
  EXPECT_VALS(x.grad(), {1 + 6, std::exp(1.0) + 6});
  // Only one output used: the other's gradient arrives as zeros.
  Tensor x2 = leaf({0.0, 1.0}, DType::Float64);
  ExpAndDouble::apply(x2)[1].sum().backward();
  EXPECT_VALS(x2.grad(), {2, 2});
}

TEST(AutogradFunction, SecondBackwardWithoutRetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = Square::apply(x).sum();
  y.backward();
  expect_error<Error>([&] { y.backward(); }, {"retain_graph"});
  Tensor z = Square::apply(x).sum();
  z.backward({}, true);
  z.backward();
  EXPECT_VALS(x.grad(), {6, 12});
}

TEST(AutogradFunction, SavedInputModifiedIsDetected) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 1.0;
  Tensor y = Square::apply(a);
  a.mul_(2);
  expect_error<Error>([&] { y.sum().backward(); }, {"version"});
}

TEST(AutogradFunction, DoubleBackwardThroughCustomFunction) {
  Tensor x = leaf({3.0}, DType::Float64);
  Tensor y = Square::apply(x);
  Tensor g = grad({y}, {x}, {}, {}, true)[0];
  EXPECT_VALS(g, {6});
  EXPECT_VALS(grad({g}, {x})[0], {2});
}

// ---------------------------------------------------------------- graph shapes
TEST(AutogradGraph, Diamond) {
  Tensor x = leaf({0.5, 1.0}, DType::Float64);
  Tensor y = x.exp();
  Tensor z = y * y + y;  // e^{2x} + e^x
  z.sum().backward();
  EXPECT_VALS(x.grad(), {2 * std::exp(1.0) + std::exp(0.5), 2 * std::exp(2.0) + std::exp(1.0)});
  // x used directly twice in one op.
  Tensor x2 = leaf({3});
  (x2 * x2).backward();
  EXPECT_VALS(x2.grad(), {6});
  (x2 + x2).backward();
  EXPECT_VALS(x2.grad(), {8});
}

TEST(AutogradGraph, SharedSubgraphFeedsTwoOutputs) {
  Tensor x = leaf({2});
  Tensor h = x * x;
  backward({h * 3, h.exp().log()});  // 3x^2 + x^2
  EXPECT_VALS(x.grad(), {16});
}

TEST(AutogradGraph, LongChainDoesNotOverflowTheStack) {
  auto start = std::chrono::steady_clock::now();
  Tensor x = leaf({1.0}, DType::Float64);
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y * 1.0 + 0.0;
  y.backward();
  EXPECT_VALS(x.grad(), {1});
  // Dropping a long graph without running backward must not recurse either.
  {
    Tensor z = x;
    for (int i = 0; i < 100000; ++i) z = z + 1.0;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0);
}

TEST(AutogradGraph, VeryDeepGraphsAreReleasedIteratively) {
  // Dropping (or running backward through) a graph far deeper than the stack could recurse.
  bool ok = false;
  std::thread t([&] {
    Tensor x = leaf({1.0});
    {
      Tensor z = x;
      for (int i = 0; i < 300000; ++i) z = z + 1.0;  // edges only
    }
    {
      Tensor z = x;
      for (int i = 0; i < 300000; ++i) z = z * 1.0;  // each node also saves its input
      z.backward();
    }
    ok = x.grad().defined() && x.grad().item<float>() == 1.0f;
  });
  t.join();
  EXPECT_TRUE(ok);
}

TEST(AutogradGraph, EmptyTensors) {
  Tensor x = zeros({0});
  x.requires_grad_();
  (x * 2).sum().backward();
  EXPECT_EQ(x.grad().sizes(), Shape({0}));
}

TEST(AutogradGraph, LongChainInAThread) {
  // Threads have smaller stacks than the main thread on some systems.
  bool ok = false;
  std::thread t([&] {
    Tensor x = leaf({1.0});
    Tensor y = x;
    for (int i = 0; i < 20000; ++i) y = y.tanh() * 1.0;
    y.backward();
    ok = x.grad().defined();
  });
  t.join();
  EXPECT_TRUE(ok);
}

TEST(AutogradGraph, FourThreadsBackpropagateIndependentGraphs) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int it = 0; it < 50; ++it) {
        Tensor x = tensor({1.0 + k, 2.0 + k}, DType::Float64);
        x.requires_grad_();
        Tensor h = x.exp();
        Tensor y = (h * x + x * x).sum();  // d/dx = e^x (1 + x) + 2x
        if (it % 2 == 0) {
          y.backward();
        } else {
          x.set_grad(grad({y}, {x})[0]);
        }
        std::vector<double> g = x.grad().to_vector<double>();
        for (int i = 0; i < 2; ++i) {
          double v = 1.0 + k + i;
          double want = std::exp(v) * (1 + v) + 2 * v;
          if (std::abs(g[i] - want) > 1e-9 * want) failures++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(AutogradGraph, LeafFreedBeforeBackward) {
  Tensor y;
  {
    Tensor x = leaf({1, 2});
    y = (x + 1.0).exp();  // add saves nothing, exp saves its output: x is not kept alive
  }
  y.sum().backward();  // the accumulator finds no leaf and does nothing
  SUCCEED();
  // The same with another live leaf in the graph.
  Tensor w = leaf({1, 1});
  Tensor z;
  {
    Tensor x = leaf({5, 6});
    z = (x + w).sum();
  }
  z.backward();
  EXPECT_VALS(w.grad(), {1, 1});
}

// ---------------------------------------------------------------- post-accumulate hooks, callbacks
TEST(Autograd, PostAccumulateGradHooksSeeTheSummedGradientAndCallbacksRunAtTheEnd) {
  Tensor w = leaf({1, 2});
  Tensor b = leaf({3});
  std::vector<std::string> events;
  const size_t hw = w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    // Once per backward, after both uses' gradients were summed into grad().
    events.push_back("w " + std::to_string(t.grad().data_ptr<float>()[0]));
    autograd::queue_callback(
        [&] { events.push_back("end, b.grad " + std::to_string(b.grad().data_ptr<float>()[0])); });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("b"); });
  ((w * 2).sum() + (w * 3).sum() + b.sum()).backward();
  ASSERT_EQ(events.size(), 3u);
  // w's hook once (its two uses summed first), b's once, in the engine's order; the
  // callback last, after every leaf's accumulation.
  std::vector<std::string> hooks(events.begin(), events.begin() + 2);
  std::sort(hooks.begin(), hooks.end());
  EXPECT_EQ(hooks, (std::vector<std::string>{"b", "w 5.000000"}));
  EXPECT_EQ(events[2], "end, b.grad 1.000000");
  w.remove_hook(hw);
  events.clear();
  (w * b.sum()).sum().backward();
  EXPECT_EQ(events, std::vector<std::string>{"b"});
  expect_error<Error>([&] { autograd::queue_callback([] {}); }, {"no backward pass is running"});
  expect_error<Error>([&] { (w * 2).register_post_accumulate_grad_hook([](const Tensor&) {}); },
                      {"not a leaf"});
}

// ---------------------------------------------------------------- ops without a derivative
TEST(Autograd, OpWithoutDerivativeThrowsAtBackwardNamingTheOp) {
  static const OpDef& op = [] {
    OpDef d = *find_op("exp");
    d.name = "autograd_test_no_derivative";
    d.schema = "autograd_test_no_derivative(Tensor self) -> Tensor";
    d.derivative = {};
    return std::ref(register_op(std::move(d)));
  }();
  Tensor x = leaf({1, 2});
  const Tensor in[] = {x};
  Tensor y = dispatch1(op, in, Attrs{});  // recording itself is fine
  EXPECT_TRUE(y.requires_grad());
  expect_error<NotImplementedError>([&] { y.sum().backward(); },
                                    {"autograd_test_no_derivative", "not implemented"});
}

}  // namespace
}  // namespace kiln
