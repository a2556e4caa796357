// Pure mode (CompileOptions::pure): a hit runs the cached graph without calling the function;
// the guards on arguments, captured tensors and other arguments send other calls to capture;
// functions that cannot be pure run every time, with one warning; the verification switch
// catches a function that broke the promise.
#include <gtest/gtest.h>

#include <atomic>

#include "capture/test_utils.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::expect_equal;

CompileOptions pure_options(int verify_every = 0) {
  CompileOptions o;
  o.pure = true;
  o.pure_verify_every = verify_every;
  return o;
}

Tensor chain(const Tensor& x) { return tanh(x * 2 + 1) - x; }

TEST(PureMode, HitsRunTheGraphWithoutCallingTheFunction) {
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        return chain(x);
      },
      pure_options());
  for (int i = 0; i < 5; ++i) {
    Tensor x = randn({3, 4});  // new values every call: pure mode guards metadata, not values
    expect_equal(f(x), chain(x));
  }
  EXPECT_EQ(calls, 1);
}

TEST(PureMode, NewShapesDtypesAndOtherArgumentsCapture) {
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x, double scale, int64_t dim) {
        ++calls;
        return sum(x * scale, {dim});
      },
      pure_options());
  Tensor a = randn({3, 4}), b = randn({5}), c = randn({3, 4}, DType::Float64);
  expect_equal(f(a, 2.0, 1), sum(a * 2.0, {1}));
  expect_equal(f(a, 2.0, 1), sum(a * 2.0, {1}));
  EXPECT_EQ(calls, 1);
  expect_equal(f(a, 3.0, 1), sum(a * 3.0, {1}));  // another value of a number argument
  expect_equal(f(a, 3.0, 0), sum(a * 3.0, {0}));
  expect_equal(f(b, 3.0, 0), sum(b * 3.0, {0}));  // another shape
  expect_equal(f(c, 3.0, 0), sum(c * 3.0, {0}));  // another dtype
  EXPECT_EQ(calls, 5);
  expect_equal(f(a, 2.0, 1), sum(a * 2.0, {1}));  // each earlier call's plan still runs
  expect_equal(f(b, 3.0, 0), sum(b * 3.0, {0}));
  EXPECT_EQ(calls, 5);
  // A non-contiguous argument has other strides: captured anew, then a hit.
  Tensor t = randn({4, 3}).t();
  expect_equal(f(t, 2.0, 1), sum(t * 2.0, {1}));
  expect_equal(f(t, 2.0, 1), sum(t * 2.0, {1}));
  EXPECT_EQ(calls, 6);
}

TEST(PureMode, CapturedTensorsAreReadAtEachCall) {
  int calls = 0;
  Tensor w = randn({4});
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        return x * w + 1;
      },
      pure_options());
  Tensor x = randn({2, 4});
  expect_equal(f(x), x * w + 1);
  {
    NoGradGuard no_grad;
    w.mul_(3);  // the captured tensor's values change, its metadata does not
  }
  expect_equal(f(x), x * w + 1);
  EXPECT_EQ(calls, 1);
}

TEST(PureMode, ViewsOfArgumentsAndViewsAsResults) {
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        Tensor y = x.t() * 2;  // x.t() is a view of a concrete tensor: a graph input of its own
        return std::make_tuple(y.slice(0, 1, 3), y, y.view({-1}));
      },
      pure_options());
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({3, 4});
    auto [a, b, c] = f(x);
    Tensor y = x.t() * 2;
    expect_equal(a, y.slice(0, 1, 3));
    expect_equal(b, y);
    expect_equal(c, y.view({-1}));
  }
  EXPECT_EQ(calls, 1);
  // A slice of a larger tensor as the argument: the same metadata but for the offset.
  Tensor big = randn({4, 4});
  Tensor x = big.slice(0, 1, 4).slice(1, 0, 4);
  auto [a, b, c] = f(x);
  expect_equal(b, x.t() * 2);
}

TEST(PureMode, VectorAndPairResultsAndVoid) {
  int calls = 0;
  auto vec = compile(
      [&](const std::vector<Tensor>& xs) {
        ++calls;
        std::vector<Tensor> out;
        for (const Tensor& x : xs) out.push_back(exp(x));
        return out;
      },
      pure_options());
  for (int i = 0; i < 3; ++i) {
    std::vector<Tensor> xs{randn({2}), randn({3})};
    std::vector<Tensor> out = vec(xs);
    ASSERT_EQ(out.size(), 2u);
    expect_equal(out[0], exp(xs[0]));
    expect_equal(out[1], exp(xs[1]));
  }
  EXPECT_EQ(calls, 1);
  std::vector<Tensor> three{randn({2}), randn({3}), randn({1})};
  EXPECT_EQ(vec(three).size(), 3u);  // another vector length: captured anew
  EXPECT_EQ(calls, 2);

  auto pair = compile([](const Tensor& x) { return std::make_pair(x + 1, x - 1); }, pure_options());
  Tensor x = randn({4});
  auto [p, q] = pair(x);
  auto [p2, q2] = pair(x);
  expect_equal(p2, x + 1);
  expect_equal(q2, x - 1);
}

// More tensors than a hit keeps on the stack (8 arguments, 8 graph inputs, 8 slots), and results
// that are the graph's outputs as they are (returned as the graph's list) or not (a view of one:
// rebuilt).
TEST(PureMode, ManyTensorsAndResultsInAnyOrder) {
  int calls = 0;
  auto reference = [](const std::vector<Tensor>& xs, bool view) {
    Tensor total = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) total = total + xs[i] * static_cast<double>(i);
    Tensor twice = total * 2;
    return std::vector<Tensor>{total, view ? twice.view({5, 1}) : twice};
  };
  for (bool view : {false, true}) {
    auto f = compile(
        [&](const std::vector<Tensor>& xs) {
          ++calls;
          return reference(xs, view);
        },
        pure_options());
    for (int i = 0; i < 3; ++i) {
      std::vector<Tensor> xs;
      for (int k = 0; k < 12; ++k) xs.push_back(randn({5}));
      const std::vector<Tensor> got = f(xs), want = reference(xs, view);
      ASSERT_EQ(got.size(), 2u);
      expect_equal(got[0], want[0]);
      expect_equal(got[1], want[1]);
    }
  }
  EXPECT_EQ(calls, 2);  // one capture per function; the other calls were hits
}

TEST(PureMode, FunctionsThatCannotBePureRunEveryTimeWithOneWarning) {
  struct Case {
    const char* what;
    std::function<Tensor(const Tensor&)> fn;
  };
  Tensor state = zeros({4});
  const std::vector<Case> cases{
      {"graph break",
       [](const Tensor& x) {
         Tensor y = x + 1;
         graph_break();
         return y * 2;
       }},
      {"writes into a tensor in place",
       [&](const Tensor& x) {
         state.add_(x);
         return x * 2;
       }},
      {"draws random numbers", [](const Tensor& x) { return x + rand_like(x); }},
      {"is not computed by the graph", [](const Tensor& x) { return x; }},
  };
  for (const Case& c : cases) {
    int calls = 0;
    auto f = compile(
        [&](const Tensor& x) {
          ++calls;
          return c.fn(x);
        },
        pure_options());
    Tensor x = ones({4});
    ::testing::internal::CaptureStderr();
    for (int i = 0; i < 3; ++i) (void)f(x);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(calls, 3) << c.what;
    EXPECT_NE(err.find("is compiled with pure=true, but"), std::string::npos) << c.what << err;
    EXPECT_EQ(err.find("warning", err.find("warning") + 1), std::string::npos)
        << "warned more than once: " << err;
  }
  EXPECT_EQ(state.to_vector<float>(), std::vector<float>(4, 3.0f));  // each call's write landed
}

TEST(PureMode, GradientsRunThroughCapture) {
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        return sum(x * x);
      },
      pure_options());
  Tensor x = randn({3}).requires_grad_();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 2; ++i) {
    x.set_grad(Tensor());
    f(x).backward();
    expect_equal(x.grad(), x.detach() * 2);
  }
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("requires grad"), std::string::npos);
  EXPECT_EQ(calls, 2);
  {
    NoGradGuard no_grad;  // without recording, the same function can skip the call
    expect_equal(f(x), sum(x * x));
    expect_equal(f(x), sum(x * x));
  }
  EXPECT_EQ(calls, 3);
}

// The contract's other side: without verification, a function that reads something other
// than its arguments gets the answer of the graph it was captured with.
TEST(PureMode, ABrokenPromiseRunsTheCapturedGraph) {
  double scale = 2.0;  // read by the function but not an argument
  auto f = compile([&](const Tensor& x) { return x * scale; }, pure_options());
  Tensor x = randn({4});
  expect_equal(f(x), x * 2.0);
  scale = 5.0;
  expect_equal(f(x), x * 2.0);  // a hit: the function is not called, so 5.0 is never read
}

TEST(PureMode, VerificationThrowsWhenTheGraphDiffers) {
  double scale = 2.0;
  auto f = compile([&](const Tensor& x) { return x * scale; }, pure_options(/*verify_every=*/2));
  Tensor x = randn({4});
  (void)f(x);  // captured: the plan
  (void)f(x);  // hit 1: skips the function
  scale = 5.0;
  try {
    (void)f(x);  // hit 2: verified, the function is called and captures another graph
    ADD_FAILURE() << "an impure function passed verification";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pure_verify_every = 2"), std::string::npos) << what;
    EXPECT_NE(what.find("not pure"), std::string::npos) << what;
    EXPECT_NE(what.find("graph differs"), std::string::npos) << what;
  }
  // A pure function passes every verification.
  int calls = 0;
  auto g = compile(
      [&](const Tensor& y) {
        ++calls;
        return y * 2.0;
      },
      pure_options(/*verify_every=*/1));
  for (int i = 0; i < 3; ++i) expect_equal(g(x), x * 2.0);
  EXPECT_EQ(calls, 3);  // every hit is verified, so every call runs the function
}

TEST(PureMode, StancesNestingAndResetStillApply) {
  int calls = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++calls;
        return x + 1;
      },
      pure_options());
  Tensor x = randn({2});
  (void)f(x);
  (void)f(x);
  EXPECT_EQ(calls, 1);
  {
    StanceGuard eager(Stance::ForceEager);
    expect_equal(f(x), x + 1);
  }
  EXPECT_EQ(calls, 2);
  auto outer = compile([&](const Tensor& y) { return f(y) * 2; });  // inlined into outer's graph
  expect_equal(outer(x), (x + 1) * 2);
  EXPECT_EQ(calls, 3);
  reset();
  (void)f(x);  // the plan went with the cache
  EXPECT_EQ(calls, 4);
  (void)f(x);
  EXPECT_EQ(calls, 4);
}

TEST(PureMode, OptionsAreValidated) {
  CompileOptions o = pure_options();
  o.pure_verify_every = -1;
  EXPECT_THROW(compile([](const Tensor& x) { return x; }, o), ValueError);
}

}  // namespace
}  // namespace kiln
