// kiln::compile: capture, sync points, guards and recompiles, stances, mutation, training,
// threads; and one test per row of the reference table of fine-grained tracing APIs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "capture/test_utils.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::expect_equal;

// Counts graphs and ops that reach the backend (a user backend that runs the eager one).
struct Counting {
  std::shared_ptr<std::atomic<int>> graphs = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> ops = std::make_shared<std::atomic<int>>(0);
  CompileOptions options(bool fullgraph = false) const {
    CompileOptions o;
    o.backend = testing::eager_seeing([g = graphs, n = ops](const ir::Graph& graph) {
      ++*g;
      *n += static_cast<int>(graph.num_calls());
    });
    o.fullgraph = fullgraph;
    return o;
  }
};

Tensor toy_example(Tensor a, Tensor b) {
  Tensor x = a / (abs(a) + 1);
  std::printf("woo\n");  // plain C++: runs every call, never breaks the graph
  if (b.sum() < 0) b = b * -1;
  return x * b;
}

// ---- capture and sync points ----
TEST(Compile, ToyExampleMatchesEagerAndBreaksOnlyAtTheBranch) {
  manual_seed(0);
  Tensor a = randn({10}), b = full({10}, -0.5);  // b.sum() < 0: the branch is taken
  Counting c;
  auto f = compile(toy_example, c.options());
  expect_equal(f(a, b), toy_example(a, b));
  EXPECT_EQ(*c.graphs, 2);  // before and after the `if`
  ExplainOutput e = explain(toy_example, a, b);
  EXPECT_EQ(e.graph_count, 2);
  EXPECT_EQ(e.graph_break_count, 1);
  ASSERT_EQ(e.break_reasons.size(), 1u);
  EXPECT_NE(e.break_reasons[0].reason.find("bool(Tensor)"), std::string::npos);
  EXPECT_NE(e.break_reasons[0].loc.function.find("toy_example"), std::string::npos) << e.str();
  EXPECT_EQ(e.op_count, 7);  // abs, add, div, sum, lt | mul, mul
  EXPECT_NE(e.str().find("Kiln produced 2 graphs, with 1 graph break and 7 ops."),
            std::string::npos)
      << e.str();
  // What inductor makes of them: abs+add+div fused over [10], sum extern, lt over [] | the two
  // muls fused.
  EXPECT_EQ(e.kernels_per_graph, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(e.extern_calls_per_graph, (std::vector<int64_t>{1, 0}));
  EXPECT_NE(e.str().find("Inductor per graph (generated kernels + extern calls): 2 + 1, 1 + 0"),
            std::string::npos)
      << e.str();
}

TEST(Compile, ItemIsASyncPointWithTheUsersLine) {
  auto f = compile([](Tensor x) {
    Tensor y = x * 2;
    const double v = y.sum().item<double>();  // sync point
    return y + v;
  });
  Tensor x = arange(4, DType::Float32);
  expect_equal(f(x), x * 2 + 12.0);
  ExplainOutput e = explain([](Tensor x) { return (x * 2).sum().item<double>(); }, x);
  ASSERT_EQ(e.break_reasons.size(), 1u);
  EXPECT_NE(e.break_reasons[0].reason.find("item()"), std::string::npos);
  EXPECT_NE(e.break_reasons[0].loc.file.find("compile_test.cpp"), std::string::npos);
}

TEST(Compile, DataDependentOpsBreakTheGraphAndRunEagerly) {
  auto f = compile([](Tensor x) { return nonzero(x * 1) + 0; });
  Tensor x = tensor({0.0, 1.0, 0.0, 2.0});
  expect_equal(f(x), nonzero(x) + 0);
  ExplainOutput e = explain([](Tensor x) { return nonzero(x * 1) + 0; }, x);
  ASSERT_EQ(e.graph_break_count, 1);
  EXPECT_NE(e.break_reasons[0].reason.find("'nonzero' is data-dependent"), std::string::npos);
}

TEST(Compile, ShapeErrorsThrowAtCaptureTime) {
  auto f = compile([](Tensor x) { return x + ones({3}); });
  EXPECT_THROW(f(ones({4})), ShapeError);
  expect_equal(f(ones({3})), ones({3}) * 2);  // the failed call left nothing behind
}

TEST(Compile, ConcreteTensorsUsedInsideBecomeInputsNotConstants) {
  Tensor w = ones({3});
  Counting c;
  auto f = compile([&](Tensor x) { return x * w; }, c.options());
  expect_equal(f(ones({3})), ones({3}));
  w.fill_(2.0);  // new values, same metadata: no recompile
  expect_equal(f(ones({3})), ones({3}) * 2);
  EXPECT_EQ(*c.graphs, 1);
}

TEST(Compile, NestedCompiledFunctionsInline) {
  Counting inner_c, outer_c;
  auto inner = compile([](Tensor x) { return x.exp(); }, inner_c.options());
  auto outer = compile([&](Tensor x) { return inner(x) + 1; }, outer_c.options());
  expect_equal(outer(ones({2})), ones({2}).exp() + 1);
  EXPECT_EQ(*inner_c.graphs, 0);
  EXPECT_EQ(*outer_c.graphs, 1);
  EXPECT_EQ(*outer_c.ops, 2);
}

// ---- guards and recompiles ----
TEST(Compile, RecompilesOnShapeDtypeAndConstantWithReasons) {
  std::vector<std::string> lines;
  set_log_sink([&](const std::string& l) { lines.push_back(l); });
  set_logs("recompiles");
  double k = 0.5;
  auto f = compile([&](Tensor x) { return x * k; }, CompileOptions{.name = "scale"});
  f(ones({2, 16}));
  f(ones({2, 16}));  // cached
  f(ones({2, 24}));
  f(ones({2, 24}, DType::Float64));
  k = 0.25;
  f(ones({2, 24}, DType::Float64));
  set_logs("");
  set_log_sink({});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("[kiln:recompiles] recompiling 'scale' graph 0: argument 0 (graph input "
                          "0): size of dim 1 changed 16 → 24"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find("argument 0 (graph input 0): dtype changed float32 → float64"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("constant at node"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("changed 0.5 → 0.25"), std::string::npos) << lines[2];
}

// Batches sliced out of one tensor differ only in their storage offset, which no guard checks
// (as torch's tensor guards): a training loop over `data.narrow(0, i, bs)` compiles once under
// every backend, forward and backward, and computes what eager does at every offset.
TEST(Compile, BatchesSlicedOutOfOneTensorShareOneGraphUnderEveryBackend) {
  const Tensor data = arange(0, 48).to(DType::Float32).reshape({12, 4}) * 0.1;
  auto forward = [](const Tensor& x, const Tensor& w) {
    return (tanh(matmul(x, w)) * x.narrow(1, 1, 2)).sum();
  };
  auto weights = [] {
    return (arange(0, 8).to(DType::Float32).reshape({4, 2}) * 0.2).requires_grad_();
  };
  for (const char* name : {"eager", "aot_eager", "inductor"})
    for (const bool backward_inside : {true, false}) {
      SCOPED_TRACE(detail::concat(name, backward_inside ? ", backward inside" : ""));
      // backward() inside the function is traced into its graph; outside, an AOT backend
      // compiles the graph as a forward and a backward.
      auto step = [&](const Tensor& x, const Tensor& w) {
        Tensor loss = forward(x, w);
        if (backward_inside) loss.backward();
        return loss;
      };
      auto compiles = std::make_shared<std::atomic<int>>(0);
      const Backend counted = lookup_backend(name).wrapped(
          [compiles](const ir::Graph& g, std::span<const TensorMeta> in, const Backend& compiler) {
            ++*compiles;
            return compiler(g, in);
          });
      std::vector<std::string> recompiles;
      set_log_sink([&](const std::string& l) { recompiles.push_back(l); });
      set_logs("recompiles");
      auto f = compile(step, {.backend = counted});
      Tensor w = weights(), we = weights();
      for (int64_t i = 0; i + 3 <= 12; i += 3) {
        const Tensor x = data.narrow(0, i, 3);
        ASSERT_EQ(x.storage_offset(), i * 4);
        w.set_grad(Tensor());
        we.set_grad(Tensor());
        Tensor got = f(x, w), want = forward(x, we);
        if (!backward_inside) got.backward();
        want.backward();
        expect_equal(got, want);
        expect_equal(w.grad(), we.grad());
      }
      set_logs("");
      set_log_sink({});
      EXPECT_TRUE(recompiles.empty()) << recompiles[0];
      // One graph, compiled at the first step only (and its backward, at the first backward).
      const bool pair = !backward_inside && std::string(name) != "eager";
      EXPECT_EQ(*compiles, pair ? 2 : 1);
    }
}

// A recompile reason names a changed input as the user knows it: its position among the call's
// arguments, a module parameter's name, or what else it is; the graph input number follows.
TEST(Compile, RecompileReasonsNameArgumentsParametersAndCapturedTensors) {
  struct Net : nn::Module {
    std::shared_ptr<nn::Linear> fc;
    Net() : Module("Net") { fc = register_module("fc", std::make_shared<nn::Linear>(4, 2)); }
  } net;
  Tensor captured = ones({2});
  std::vector<std::string> reasons;
  set_log_sink([&](const std::string& l) { reasons.push_back(l); });
  set_logs("recompiles");
  auto f = compile(
      [&](const Tensor& scale, const std::vector<Tensor>& xs) {
        return net.fc->forward(scale * xs[1]) + captured + xs[0].sum();
      },
      {.backend = std::string("eager")});
  const Tensor x = ones({3, 4});
  auto call = [&](const Tensor& first, const Tensor& second) {
    f(ones({4}), std::vector<Tensor>{first, second});
  };
  call(x, x);
  call(ones({5}), x);                    // a vector argument's element
  net.fc->weight.requires_grad_(false);  // a module's parameter
  call(ones({5}), x);
  captured = ones({1});  // a tensor the lambda captured
  call(ones({5}), x);
  const Tensor wide = ones({3, 8});
  call(ones({5}), wide.narrow(1, 0, 4));  // an argument that is a view: only strides change
  set_logs("");
  set_log_sink({});
  ASSERT_EQ(reasons.size(), 4u);
  // (Which graph input each is depends on the order the compiler evaluates the operands in.)
  auto expect_reason = [&](size_t k, const std::string& label, const std::string& change) {
    EXPECT_NE(reasons[k].find(": " + label + " (graph input "), std::string::npos) << reasons[k];
    EXPECT_NE(reasons[k].find("): " + change), std::string::npos) << reasons[k];
  };
  expect_reason(0, "argument 1[0]", "number of dims changed 2 → 1");
  expect_reason(1, "parameter 'fc.weight'", "requires_grad changed true → false");
  expect_reason(2, "a float32[1] tensor that is not an argument (captured or global)",
                "size of dim 0 changed 2 → 1");
  expect_reason(3, "argument 1[1]", "strides changed [4, 1] → [8, 1]");
}

// The nearest cached graph may number its inputs otherwise (inputs are numbered as first
// used): the reason names the new call's input at that position.
TEST(Compile, ARecompileReasonNamesTheNewCallsInputWhereNumberingDiffers) {
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& c, bool flip) {
    return flip ? exp(a) + b : addcmul(a, b, c);
  };
  auto f = compile(fn, {.backend = std::string("eager")});
  const std::vector<std::string> reasons = [&] {
    std::vector<std::string> lines;
    set_log_sink([&](const std::string& l) { lines.push_back(l); });
    set_logs("recompiles");
    f(ones({4}), ones({4}), ones({4}), false);
    f(ones({4}), ones({2, 4}), ones({4}), true);
    set_logs("");
    set_log_sink({});
    return lines;
  }();
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("argument 1 (graph input 1)"), std::string::npos) << reasons[0];
}

TEST(Compile, RandomOpsDoNotRecompileAndMatchEagerDraws) {
  Counting c;
  auto f = compile([](Tensor x) { return x + randn({4}); }, c.options());
  for (int i = 0; i < 3; ++i) {
    manual_seed(7 + i);
    Tensor got = f(zeros({4}));
    manual_seed(7 + i);
    expect_equal(got, zeros({4}) + randn({4}));
  }
  EXPECT_EQ(*c.graphs, 1);
}

TEST(Compile, CacheSizeLimitFallsBackToEagerWithOneWarning) {
  const int saved = compile_config().cache_size_limit;
  compile_config().cache_size_limit = 2;
  Counting c;
  CompileOptions exact = c.options();
  exact.dynamic = false;  // (automatic dynamic would serve every size from the second graph)
  auto f = compile([](Tensor x) { return x + 1; }, exact);
  for (int n = 1; n <= 5; ++n) expect_equal(f(zeros({n})), ones({n}));
  EXPECT_EQ(*c.graphs, 2);
  EXPECT_TRUE(f.state() != nullptr);
  compile_config().cache_size_limit = saved;
}

TEST(Compile, AFailedFirstCompileDoesNotPoisonTheCache) {
  auto fail = std::make_shared<bool>(true);
  CompileOptions o;
  o.backend = Backend([fail](const ir::Graph& g, std::span<const TensorMeta> in) {
    if (*fail) throw Error("backend failed on purpose");
    return lookup_backend("eager")(g, in);
  });
  auto f = compile([](Tensor x) { return x * 3; }, o);
  EXPECT_THROW(f(ones({2})), Error);
  *fail = false;
  expect_equal(f(ones({2})), ones({2}) * 3);
}

TEST(Compile, Stances) {
  Counting c;
  auto f = compile([](Tensor x) { return x - 1; }, c.options());
  {
    StanceGuard s(Stance::ForceEager);
    expect_equal(f(ones({2})), zeros({2}));
    EXPECT_EQ(*c.graphs, 0);
  }
  f(ones({2}));
  EXPECT_EQ(*c.graphs, 1);
  {
    StanceGuard s(Stance::EagerOnRecompile);
    expect_equal(f(ones({3})), zeros({3}));  // runs eagerly, compiles nothing
    EXPECT_EQ(*c.graphs, 1);
  }
  {
    StanceGuard s(Stance::FailOnRecompile);
    expect_equal(f(ones({2})), zeros({2}));  // cached: fine
    try {
      f(ones({5}));
      ADD_FAILURE() << "no RecompileError";
    } catch (const RecompileError& e) {
      EXPECT_NE(std::string(e.what()).find("size of dim 0 changed 2 → 5"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(stance(), Stance::Default);
}

TEST(Compile, FrozenRunModeUsesTheCacheAndNeverCompiles) {
  Counting c;
  auto f = compile([](Tensor x) { return x * x; }, c.options());
  f(ones({2}));
  auto frozen = kiln::run(f);
  expect_equal(frozen(ones({2}) * 3), ones({2}) * 9);
  expect_equal(frozen(ones({7}) * 2), ones({7}) * 4);  // a miss: eager, not compiled
  EXPECT_EQ(*c.graphs, 1);
}

TEST(Compile, FullgraphThrowsAtTheFirstBreakNamingTheLine) {
  auto f = compile(toy_example, Counting().options(/*fullgraph=*/true));
  try {
    f(ones({3}), ones({3}));
    ADD_FAILURE() << "no GraphBreakError";
  } catch (const GraphBreakError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fullgraph"), std::string::npos) << m;
    EXPECT_NE(m.find("bool(Tensor)"), std::string::npos) << m;
    EXPECT_NE(m.find("toy_example"), std::string::npos) << m;
  }
  // A function without breaks compiles as one graph.
  auto g = compile([](Tensor x) { return x.exp().sum(); }, Counting().options(true));
  expect_equal(g(ones({2})), ones({2}).exp().sum());
}

TEST(Compile, ReservedAndUnknownBackendsAreClearErrors) {
  EXPECT_THROW(register_backend("aot_eager", lookup_backend("eager")), Error);
  EXPECT_THROW(compile([](Tensor x) { return x; }, {.backend = std::string("nope")}), Error);
  auto names = list_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "eager"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "inductor"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "aot_eager"), names.end());
}

// Nonsense options are refused when the function is compiled, naming the field.
TEST(Compile, InvalidOptionsNameTheField) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no ValueError)";
  };
  EXPECT_NE(message([] {
              compile([](Tensor x) { return x; }, {.cache_size_limit = -1});
            }).find("CompileOptions::cache_size_limit = -1 is invalid"),
            std::string::npos);
  EXPECT_NE(message([] {
              compile([](Tensor x) { return x; }, {.name = "bad\nname"});
            }).find("CompileOptions::name contains control character 0xa"),
            std::string::npos);
  {
    const int saved = compile_config().cache_size_limit;
    compile_config().cache_size_limit = -3;
    EXPECT_NE(message([] {
                compile([](Tensor x) { return x; });
              }).find("compile_config().cache_size_limit = -3 is invalid"),
              std::string::npos);
    compile_config().cache_size_limit = saved;
  }
  // A per-function limit of 0 keeps the first graph only: a new shape runs eagerly.
  auto f = compile([](Tensor x) { return x * 2; }, {.cache_size_limit = 0});
  EXPECT_EQ(f(ones({2})).to_vector<float>(), std::vector<float>({2, 2}));
  EXPECT_EQ(f(ones({3})).to_vector<float>(), std::vector<float>({2, 2, 2}));
}

// ---- mutation ----
TEST(Compile, InPlaceWritesToInputsAreWrittenBackThroughViews) {
  auto body = [](Tensor p, Tensor g) {
    NoGradGuard no_grad;
    p.add_(g * 0.5);
    Tensor head = p.slice(0, 0, 2);
    head.mul_(2);  // through a view of a concrete tensor
    Tensor t = p.t();
    return (t * 1).sum() + head.sum();
  };
  Tensor p1 = arange(6, DType::Float32).view({3, 2}), p2 = p1.clone();
  Tensor g = ones({3, 2});
  Tensor want = body(p1, g);
  auto f = compile(body);
  Tensor got = f(p2, g);
  expect_equal(got, want);
  expect_equal(p2, p1);
}

TEST(Compile, InPlaceOnPendingViewsUpdatesTheBase) {
  auto body = [](Tensor x) {
    Tensor y = x * 1;  // pending
    Tensor row = y.select(0, 1);
    row.fill_(7);          // write through a pending view
    Tensor z = y.t() + 0;  // reads the base after the write
    return std::vector<Tensor>{y, z, row};
  };
  Tensor x = arange(6, DType::Float32).view({2, 3});
  auto want = body(x);
  auto got = compile(body)(x);
  for (size_t i = 0; i < want.size(); ++i) expect_equal(got[i], want[i]);
}

TEST(Compile, AsStridedOnPendingTensorsIsBoundsCheckedAndUsesAbsoluteOffsets) {
  auto oob = compile([](Tensor x) { return (x * 2).as_strided({10}, {1}, 0); });
  EXPECT_THROW(oob(ones({4})), IndexError);
  auto body = [](Tensor x) {
    Tensor y = x * 1;  // pending [4, 4]
    Tensor z = y.select(1, 1);
    z.add_(1);  // a partial write through a view
    return z.as_strided({2}, {4}, 5) + 0;
  };
  Tensor x = arange(16, DType::Float32).view({4, 4});
  expect_equal(compile(body)(x), body(x));
}

TEST(Compile, FreshWrittenTensorsEachCallDoNotRecompile) {
  Counting c;
  auto f = compile(
      [](Tensor a, Tensor b, Tensor x) {
        a.add_(x);
        b.mul_(x);
        return a + b;
      },
      c.options());
  for (int i = 0; i < 12; ++i) {
    Tensor a = ones({3}), b = ones({3}) * 2;
    expect_equal(f(a, b, ones({3}) * 3), ones({3}) * 10);
    expect_equal(a, ones({3}) * 4);
  }
  EXPECT_EQ(*c.graphs, 1);
}

// ---- training ----
TEST(Compile, BackwardInsideAndOutsideTheCompiledFunctionMatchEager) {
  manual_seed(3);
  Tensor w1 = randn({3, 4}).requires_grad_(), w2 = w1.detach().clone().requires_grad_();
  Tensor x = randn({2, 3});
  auto loss_of = [](const Tensor& w, const Tensor& x) { return matmul(x, w).tanh().sum(); };
  loss_of(w1, x).backward();
  Counting c;
  auto f = compile(
      [&](Tensor x) {
        Tensor l = loss_of(w2, x);
        l.backward();
        return l;
      },
      c.options());
  f(x);
  expect_equal(w2.grad(), w1.grad());
  EXPECT_EQ(*c.graphs, 1);  // forward and backward in one graph
  // Outputs that require grad stay differentiable outside.
  auto g = compile([&](Tensor x) { return loss_of(w2, x); });
  w1.set_grad({});
  w2.set_grad({});
  loss_of(w1, x).backward();
  g(x).backward();
  expect_equal(w2.grad(), w1.grad());
}

TEST(Compile, WholeTrainingStepIsOneGraphAndMatchesEager) {
  manual_seed(5);
  nn::Linear eager_model(4, 3), compiled_model(4, 3);
  compiled_model.load_state_dict(eager_model.state_dict());
  optim::AdamW eager_opt(eager_model.parameters(), optim::AdamWOptions{.lr = 0.01});
  optim::AdamW compiled_opt(compiled_model.parameters(), optim::AdamWOptions{.lr = 0.01});
  auto step = [](nn::Linear& m, optim::AdamW& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x).pow(2).mean();
    loss.backward();
    opt.step();
    return loss;
  };
  Counting c;
  auto compiled_step =
      compile([&](const Tensor& x) { return step(compiled_model, compiled_opt, x); }, c.options());
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({5, 4});
    expect_equal(compiled_step(x), step(eager_model, eager_opt, x));
  }
  auto pe = eager_model.parameters(), pc = compiled_model.parameters();
  for (size_t i = 0; i < pe.size(); ++i) expect_equal(pc[i], pe[i]);
  // One graph for every step: forward, backward and the AdamW update. The first step's
  // optimizer state is made before its graph runs (read as an input, as every later step reads
  // it), and the step count and bias corrections are graph inputs, not constants.
  EXPECT_EQ(*c.graphs, 1);
}

TEST(Compile, AnOptimizerStepRecordsOneUpdateNodePerParameter) {
  manual_seed(9);
  nn::Linear model(4, 3);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.5});
  for (Tensor p : model.parameters()) p.set_grad(ones(p.sizes()));
  opt.step();  // creates the state, so the captured step below reads and writes it
  std::map<std::string, int> ops;
  int placeholders = 0;
  CompileOptions o;
  o.backend = testing::eager_seeing([&](const ir::Graph& graph) {
    for (const ir::Node& n : graph.nodes) {
      if (n.kind == ir::NodeKind::Call) ++ops[std::string(n.op->name)];
      if (n.kind == ir::NodeKind::Placeholder) ++placeholders;
    }
  });
  compile([&] { opt.step(); }, o)();
  // One fused update per parameter (weight and bias); their state written back in place.
  EXPECT_EQ(ops["adam_update"], 2);
  EXPECT_EQ(ops.size(), 1u) << "only adam_update nodes are expected";
  // Parameters, gradients and two states each (8 inputs; the 6 written ones also enter as their
  // storage, which the write-back targets: 6 more), plus the hyper-parameters shared by both
  // parameters (8 distinct values): one graph input per value, not per parameter (that would
  // be 16).
  EXPECT_EQ(placeholders, 8 + 6 + 8);
}

TEST(Compile, SgdWithMomentumStepMatchesEager) {
  manual_seed(8);
  nn::Linear eager_model(3, 2), compiled_model(3, 2);
  compiled_model.load_state_dict(eager_model.state_dict());
  optim::SGDOptions o{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  optim::SGD eager_opt(eager_model.parameters(), o), compiled_opt(compiled_model.parameters(), o);
  auto step = [](nn::Linear& m, optim::SGD& opt, const Tensor& x) {
    opt.zero_grad();
    Tensor loss = m.forward(x).tanh().sum();
    loss.backward();
    opt.step();
    return loss;
  };
  auto compiled_step =
      compile([&](const Tensor& x) { return step(compiled_model, compiled_opt, x); });
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({4, 3});
    expect_equal(compiled_step(x), step(eager_model, eager_opt, x));
  }
  auto pe = eager_model.parameters(), pc = compiled_model.parameters();
  for (size_t i = 0; i < pe.size(); ++i) expect_equal(pc[i], pe[i]);
}

TEST(Compile, ForwardBackwardAndAnUpdateWrittenInOpsAreOneGraph) {
  manual_seed(6);
  Tensor w_eager = randn({4, 3}).requires_grad_();
  Tensor w_comp = w_eager.detach().clone().requires_grad_();
  auto step = [](Tensor& w, const Tensor& x) {
    w.set_grad({});
    Tensor loss = matmul(x, w).tanh().pow(2).mean();
    loss.backward();
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
    return loss;
  };
  Counting c;
  auto compiled_step = compile([&](const Tensor& x) { return step(w_comp, x); }, c.options());
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({5, 4});
    expect_equal(compiled_step(x), step(w_eager, x));
    expect_equal(w_comp, w_eager);
  }
  EXPECT_EQ(*c.graphs, 1);
}

// ---- threads ----
// A compiled call's results are tensors the tracer made on the calling thread (their memory
// recycled per thread): they outlive that thread, and are used and freed on another.
TEST(Compile, ResultsOutliveTheThreadThatCapturedThem) {
  auto f = compile([](const Tensor& x) { return std::vector<Tensor>{x * 2, (x + 1).tanh()}; });
  std::vector<Tensor> kept;
  for (int round = 0; round < 3; ++round) {
    std::thread worker([&] {
      for (int i = 0; i < 50; ++i) {
        std::vector<Tensor> out = f(full({4}, static_cast<double>(i), DType::Float64));
        if (i % 10 == 0) kept.insert(kept.end(), out.begin(), out.end());
      }
    });
    worker.join();
  }
  ASSERT_EQ(kept.size(), 30u);
  for (size_t k = 0; k < kept.size(); k += 2) {
    const double i = static_cast<double>(k / 2 % 5 * 10);
    EXPECT_EQ(kept[k].to_vector<double>(), std::vector<double>(4, 2 * i)) << k;
    EXPECT_NEAR(kept[k + 1].to_vector<double>()[0], std::tanh(i + 1), 1e-12) << k;
  }
  kept.clear();  // freed on this thread
  std::vector<Tensor> again = f(full({4}, 1.0, DType::Float64));
  EXPECT_EQ(again[0].to_vector<double>(), std::vector<double>(4, 2.0));
}

TEST(Compile, EightThreadsShareOneCompiledFunction) {
  Counting c;
  auto f = compile([](Tensor x) { return (x * 2).exp().sum(); }, c.options());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Tensor x = ones({t % 2 + 1}) * 0.1;
        Tensor want = (x * 2).exp().sum();
        if (f(x).item<double>() != want.item<double>()) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, 0);
  EXPECT_LE(*c.graphs, 8);  // two shapes; a race may compile a shape more than once
  EXPECT_GE(*c.graphs, 2);
}

// A graph runs only on its own thread. Another thread reading a parameter that a running
// compiled function has written in place sees the memory as it is (the old values); reading a
// tensor that function has not computed yet is an error.
TEST(Compile, OtherThreadsNeverRunAThreadsGraph) {
  Tensor w = zeros({3});
  Tensor escaped;
  std::atomic<int> stage{0};
  std::vector<double> seen;
  bool pending_read_failed = false, pending_view_failed = false, second_writer_failed = false;
  std::thread reader([&] {
    while (stage.load() != 1) std::this_thread::yield();
    seen = w.to_vector<double>();  // the recorded add_ has not run
    try {
      (void)escaped.to_vector<double>();
    } catch (const Error& e) {
      pending_read_failed = std::string(e.what()).find("another thread") != std::string::npos;
    }
    try {
      (void)escaped.detach();
    } catch (const Error& e) {
      pending_view_failed = std::string(e.what()).find("another thread") != std::string::npos;
    }
    // A second thread's compiled function writing the same tensor meanwhile: refused.
    auto other = compile([&] { w.mul_(3); });
    try {
      other();
    } catch (const Error& e) {
      second_writer_failed = std::string(e.what()).find("another thread") != std::string::npos;
    }
    stage = 2;
  });
  auto step = compile([&](Tensor g) {
    w.add_(g);
    escaped = w * 2;
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    return w.sum();
  });
  Tensor total = step(ones({3}));
  reader.join();
  EXPECT_EQ(seen, (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(pending_read_failed);
  EXPECT_TRUE(pending_view_failed);
  EXPECT_TRUE(second_writer_failed);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{1, 1, 1}));
  EXPECT_EQ(escaped.to_vector<double>(), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(total.item<double>(), 3);
}

// ---- the reference table of fine-grained tracing APIs, one test per row ----
TEST(FineGrained, DisableRunsTheFunctionAndEverythingItCallsEagerly) {
  Counting inner_c;
  auto inner = compile([](Tensor x) { return x + 1; }, inner_c.options());
  std::vector<bool> compiling;
  auto a_fn = disable([&](Tensor x) {
    compiling.push_back(is_compiling());
    return inner(x * 2);
  });
  Counting c;
  auto fn = compile([&](Tensor x) { return a_fn(x.exp()) - 1; }, c.options());
  Tensor x = ones({2});
  expect_equal(fn(x), (x.exp() * 2 + 1) - 1);
  EXPECT_EQ(compiling, std::vector<bool>{false});
  EXPECT_EQ(*inner_c.graphs, 0);  // recursive: the compiled function inside ran eagerly
  EXPECT_EQ(*c.graphs, 2);        // before and after the disabled call
  ExplainOutput e = explain([&](Tensor x) { return a_fn(x.exp()) - 1; }, x);
  ASSERT_EQ(e.graph_break_count, 1);
  EXPECT_NE(e.break_reasons[0].reason.find("kiln::disable"), std::string::npos);
}

TEST(FineGrained, DisableNonRecursiveLetsCompiledCalleesCompile) {
  Counting inner_c;
  auto inner = compile([](Tensor x) { return x + 1; }, inner_c.options());
  auto a_fn = disable([&](Tensor x) { return inner(x * 2); }, {.recursive = false});
  auto fn = compile([&](Tensor x) { return a_fn(x) * 3; });
  expect_equal(fn(ones({2})), (ones({2}) * 2 + 1) * 3);
  EXPECT_EQ(*inner_c.graphs, 1);
  // The scoped form.
  auto g = compile([&](Tensor x) {
    DisableGuard off;
    EXPECT_FALSE(is_compiling());
    return x + 1;
  });
  expect_equal(g(ones({1})), ones({1}) * 2);
}

TEST(FineGrained, DisallowInGraphBreaksAndRunsTheOpEagerly) {
  auto body = [](Tensor x) { return x.exp().relu() + 1; };
  disallow_in_graph("relu");
  ExplainOutput e = explain(body, ones({3}));
  allow_in_graph("relu");
  ASSERT_EQ(e.graph_break_count, 1);
  EXPECT_NE(e.break_reasons[0].reason.find("'relu' is marked disallow_in_graph"),
            std::string::npos);
  expect_equal(compile(body)(ones({3})), body(ones({3})));
  EXPECT_EQ(explain(body, ones({3})).graph_break_count, 0);  // allow_in_graph undid it
  EXPECT_THROW(disallow_in_graph("no_such_op"), Error);
}

TEST(FineGrained, AllowInGraphRecordsOneNodeAndBackendsCanRunIt) {
  static std::vector<std::pair<bool, bool>> seen;  // (is_compiling, is_dynamo_compiling)
  auto my_fn = allow_in_graph("test.double_exp", [](Tensor x, double k) {
    seen.emplace_back(is_compiling(), is_dynamo_compiling());
    return (x * k).exp();
  });
  Tensor x = ones({2}) * 0.5;
  expect_equal(my_fn(x, 2.0), (x * 2.0).exp());  // outside capture: just calls it
  auto body = [&](Tensor x) { return my_fn(x + 1, 3.0) + 1; };
  seen.clear();
  ExplainOutput e = explain(body, x);
  ASSERT_EQ(e.graphs.size(), 1u);
  EXPECT_EQ(e.op_count, 3);  // add, the allowed function as one node, add
  // The frontend does not look inside: its metadata run is tracing below the frontend.
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), std::make_pair(true, false));
  EXPECT_NE(e.graphs[0].to_string().find("allow_in_graph.test.double_exp"), std::string::npos);
  expect_equal(compile(body)(x), body(x));
  // Gradients flow through it (its derivative re-runs it under autograd).
  Tensor w = x.detach().clone().requires_grad_();
  Tensor w2 = x.detach().clone().requires_grad_();
  compile([&](Tensor) {
    Tensor l = my_fn(w, 3.0).sum();
    l.backward();
    return l;
  })(x);
  (w2 * 3.0).exp().sum().backward();
  EXPECT_NEAR((w.grad() - w2.grad()).abs().sum().item<double>(), 0.0, 1e-6);
}

struct NotAGraphValue {};
TEST(FineGrained, AllowInGraphRefusesValuesThatAreNotTensorsOrNumbers) {
  EXPECT_THROW(allow_in_graph("test.bad_arg", [](Tensor x, NotAGraphValue) { return x; }), Error);
  EXPECT_THROW(allow_in_graph("test.bad_result", [](Tensor) { return std::string("no"); }), Error);
  auto ok = allow_in_graph("test.unique", [](Tensor x) { return x; });
  expect_equal(ok(ones({1})), ones({1}));
  EXPECT_THROW(allow_in_graph("test.unique", [](Tensor x) { return x; }), ValueError);
}

TEST(FineGrained, AllowInGraphTakesListsOfNumbers) {
  auto weighted = allow_in_graph("test.weighted_sum",
                                 [](Tensor x, std::vector<int64_t> dims, std::vector<double> w) {
                                   Tensor out = x.sum(dims) * w[0];
                                   for (size_t i = 1; i < w.size(); ++i) out = out + w[i];
                                   return out;
                                 });
  Counting c;
  auto f =
      compile([&](Tensor x, std::vector<double> w) { return weighted(x, {0}, w); }, c.options());
  Tensor x = arange(6, DType::Float64).reshape({2, 3}).requires_grad_();
  const std::vector<double> w{0.1, 0.25};  // not exact in binary: must cross bit for bit
  Tensor got = f(x, w);
  expect_equal(got.detach(), x.detach().sum({0}) * 0.1 + 0.25);
  got.sum().backward();
  expect_equal(x.grad(), full({2, 3}, 0.1, DType::Float64));
  EXPECT_EQ(*c.graphs, 1);
  f(x, w);
  EXPECT_EQ(*c.graphs, 1);
  f(x, std::vector<double>{0.5, 0.25});  // a list is a constant: a new value recompiles
  EXPECT_EQ(*c.graphs, 2);
  // Numbers are node attributes: more than 7 are refused when the function is wrapped.
  EXPECT_THROW(allow_in_graph("test.too_many",
                              [](Tensor x, int, int, int, int, int, int, int, int) { return x; }),
               Error);
}

TEST(FineGrained, GraphBreakSplitsTheGraph) {
  Counting c;
  auto f = compile(
      [](Tensor x) {
        Tensor y = x + 1;
        graph_break();
        return y * 2;
      },
      c.options());
  expect_equal(f(ones({2})), ones({2}) * 4);
  EXPECT_EQ(*c.graphs, 2);
  graph_break();  // outside capture: nothing happens
}

TEST(FineGrained, IsCompilingAndIsDynamoCompiling) {
  EXPECT_FALSE(is_compiling());
  EXPECT_FALSE(is_dynamo_compiling());
  bool during = false, dynamo = false, in_backend = false, in_backend_dynamo = true;
  bool running = false, running_dynamo = true;
  CompileOptions o;
  o.backend = Backend([&](const ir::Graph& g, std::span<const TensorMeta> in) {
    in_backend = is_compiling();
    in_backend_dynamo = is_dynamo_compiling();
    CompiledGraph run = lookup_backend("eager")(g, in);
    return CompiledGraph([&, run](std::span<const Tensor> inputs, std::span<const int64_t> rt) {
      running = is_compiling();  // the graph executes as part of kiln::compile
      running_dynamo = is_dynamo_compiling();
      return run(inputs, rt);
    });
  });
  auto f = compile(
      [&](Tensor x) {
        during = is_compiling();
        dynamo = is_dynamo_compiling();
        return x + 1;
      },
      o);
  f(ones({1}));
  EXPECT_TRUE(during);
  EXPECT_TRUE(dynamo);
  EXPECT_TRUE(in_backend);
  EXPECT_FALSE(in_backend_dynamo);
  EXPECT_TRUE(running);
  EXPECT_FALSE(running_dynamo);
  EXPECT_FALSE(is_compiling());
}

// ---- seeing what happened ----
TEST(Debug, CompileProfilerReportsGraphsRecompilesAndOps) {
  CompileProfiler prof;
  auto f = compile([](Tensor x) { return x.exp() + 1; }, CompileOptions{.name = "prof_fn"});
  f(ones({2}));
  f(ones({3}));
  auto stats = prof.stats();
  ASSERT_TRUE(stats.count("prof_fn"));
  EXPECT_EQ(stats["prof_fn"].graphs, 2);
  ASSERT_EQ(stats["prof_fn"].recompile_reasons.size(), 1u);
  EXPECT_NE(stats["prof_fn"].recompile_reasons[0].find("size of dim 0 changed 2 → 3"),
            std::string::npos);
  EXPECT_EQ(stats["prof_fn"].ops_per_graph, (std::vector<int64_t>{2, 2}));
  // The default backend, inductor, fused each graph's two ops into one loop.
  EXPECT_EQ(stats["prof_fn"].kernels_per_graph, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(stats["prof_fn"].extern_calls_per_graph, (std::vector<int64_t>{0, 0}));
  EXPECT_NE(prof.report().find("prof_fn: 2 graphs"), std::string::npos) << prof.report();
  EXPECT_NE(prof.report().find("inductor kernels + extern calls per graph: 1+0 1+0"),
            std::string::npos)
      << prof.report();
  EXPECT_GT(compile_times().count("backend_compile"), 0u);
  // The reference FAQ's form: the profiler as the (observation-only) backend.
  auto g = compile([](Tensor x) { return x * 2; },
                   CompileOptions{.backend = prof.backend(), .name = "prof_backend"});
  expect_equal(g(ones({2})), full({2}, 2.0));
  EXPECT_EQ(prof.stats()["prof_backend"].graphs, 1);
  EXPECT_TRUE(prof.stats()["prof_backend"].kernels_per_graph.empty());  // not inductor's
}

// stop() ends the recording (Python's `with` block); what was recorded stays, and destroying a
// stopped profiler leaves the other observers' registration intact.
TEST(Debug, AStoppedCompileProfilerKeepsItsRecordAndRecordsNoMore) {
  CompileProfiler outer;
  {
    CompileProfiler prof;
    auto f = compile([](Tensor x) { return x + 1; },
                     CompileOptions{.backend = "eager", .name = "stopped_fn"});
    f(ones({2}));
    prof.stop();
    prof.stop();  // twice is once
    f(ones({3}));
    EXPECT_EQ(prof.stats()["stopped_fn"].graphs, 1);
    EXPECT_TRUE(prof.stats()["stopped_fn"].recompile_reasons.empty());
  }
  auto g = compile([](Tensor x) { return x * 3; },
                   CompileOptions{.backend = "eager", .name = "after_stop"});
  g(ones({2}));
  EXPECT_EQ(outer.stats()["stopped_fn"].graphs, 2);
  EXPECT_EQ(outer.stats()["after_stop"].graphs, 1);
}

// compile_times(): a phase's parts (inductor's, inside backend_compile) are listed under it and
// not counted twice; "total" is the wall time spent in outermost phases, never more than the
// caller waited.
TEST(Debug, CompileTimesNestPhasesAndTheirTotalIsTimeSpentCompiling) {
  reset();
  const auto start = std::chrono::steady_clock::now();
  auto f = compile([](Tensor x) { return (sin(x) * 2).sum(); },
                   CompileOptions{.backend = "inductor", .name = "timed"});
  Tensor x = randn({8}).requires_grad_();
  f(x).backward();
  f(x.detach());
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::map<std::string, double> t = compile_times();
  const std::string table = compile_times_str();
  ASSERT_GT(t["backend_compile"], 0.0) << table;
  ASSERT_GT(t["inductor_codegen"], 0.0) << table;
  EXPECT_LE(t["total"], waited) << table;
  // One thread: the outermost phases follow each other, and add up to the total.
  double outermost = 0;
  for (const char* phase : {"passes", "aot_autograd", "backend_compile"}) outermost += t[phase];
  EXPECT_NEAR(t["total"], outermost, 1e-6) << table;
  double parts = 0;
  for (const char* phase : {"inductor_decompose", "inductor_schedule", "inductor_codegen",
                            "inductor_cxx", "inductor_load"})
    parts += t[phase];
  EXPECT_LE(parts, t["backend_compile"]) << table;
  EXPECT_NE(table.find("\n  backend_compile "), std::string::npos) << table;
  EXPECT_NE(table.find("\n    inductor_decompose  "), std::string::npos) << table;
  // (Each name is followed by at least two spaces: none runs into its number.)
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line)) {
    const size_t name_end = line.find_first_of(' ', line.find_first_not_of(' '));
    EXPECT_EQ(line.compare(name_end, 2, "  "), 0) << line;
  }
}

TEST(Debug, LogsByTopic) {
  std::vector<std::string> lines;
  set_log_sink([&](const std::string& l) { lines.push_back(l); });
  set_logs("graph_breaks,graphs,guards");
  compile(toy_example, CompileOptions{.name = "logged"})(ones({2}), ones({2}));
  set_logs("");
  set_log_sink({});
  int breaks = 0, graphs = 0, guards = 0;
  for (const auto& l : lines) {
    breaks += l.rfind("[kiln:graph_breaks] logged: graph break", 0) == 0;
    graphs += l.rfind("[kiln:graphs] logged: graph with", 0) == 0;
    guards += l.rfind("[kiln:guards] logged: guard input ", 0) == 0;
  }
  EXPECT_EQ(breaks, 1);
  EXPECT_EQ(graphs, 2);
  EXPECT_EQ(guards, 4);  // (a, b) before the branch, (x, b) after it
  EXPECT_THROW(set_logs("bogus"), ValueError);
}

}  // namespace
}  // namespace kiln
