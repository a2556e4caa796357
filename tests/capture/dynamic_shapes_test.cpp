// Dynamic shapes (docs/dynamic_shapes.md): automatic dynamic on the first recompile, dynamic=true,
// mark_dynamic / maybe_mark_dynamic / mark_static, duck sizing, sizes 0 and 1, specialisation by
// control flow — each compiles a bounded number of graphs and computes what eager does.
#include <gtest/gtest.h>

#include <set>

#include "capture/test_utils.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::expect_equal;

// The graphs `name` compiled while `prof` lived.
int64_t graphs(const CompileProfiler& prof, const std::string& name) {
  const auto stats = prof.stats();
  const auto it = stats.find(name);
  return it == stats.end() ? 0 : it->second.graphs;
}

// Log lines of `topics` while `body` runs.
template <class F>
std::vector<std::string> logged(const std::string& topics, F&& body) {
  std::vector<std::string> lines;
  set_log_sink([&](const std::string& l) { lines.push_back(l); });
  set_logs(topics);
  body();
  set_logs("");
  set_log_sink({});
  return lines;
}

// Whether `body` throws a kiln::Error whose message contains `text` (a failure names what it
// threw instead).
template <class F>
bool throws_containing(F&& body, const std::string& text) {
  try {
    body();
  } catch (const Error& e) {
    if (std::string(e.what()).find(text) != std::string::npos) return true;
    ADD_FAILURE() << "the error says: " << e.what();
    return false;
  }
  ADD_FAILURE() << "no error";
  return false;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

// Every backend runs dynamic graphs: each test of this suite runs under each of them.
class DynamicShapes : public ::testing::TestWithParam<std::string> {
 protected:
  std::string name(const std::string& stem) const { return stem + "_" + GetParam(); }
  CompileOptions named(const std::string& stem) const {
    return {.backend = GetParam(), .name = name(stem)};
  }
};
INSTANTIATE_TEST_SUITE_P(Backends, DynamicShapes,
                         ::testing::Values("eager", "aot_eager", "inductor"),
                         [](const auto& info) { return info.param; });

// The sweep: 50 sequence lengths (2, primes, 15/16/17 around vector widths, up to
// attention scores of 2^20 elements) through a GPT block, forward and backward. Under every
// backend: two graphs (exact, then dynamic from the second length), or one when the length is
// marked dynamic; every loss and gradient bitwise eager's (generated code computes each element
// as the eager kernel does); and under inductor, one set of compiled modules for all lengths.
std::vector<int64_t> sweep_lengths() {
  std::vector<int64_t> lengths{8};
  for (int64_t t = 2; t <= 40; ++t)
    if (t != 8) lengths.push_back(t);
  for (int64_t t : {47, 53, 61, 64, 97, 127, 128, 129, 255, 256, 512}) lengths.push_back(t);
  return lengths;
}

TEST_P(DynamicShapes, ASweepOfSequenceLengthsThroughAGPTBlockCompilesTwoGraphs) {
  manual_seed(3);
  nn::GPTConfig config{
      .vocab_size = 23, .block_size = 512, .n_layer = 1, .n_head = 2, .n_embd = 16};
  nn::GPT model(config);
  auto step = [&](const Tensor& idx, const Tensor& targets) {
    Tensor loss = model.loss(idx, targets);
    loss.backward();
    return loss;
  };
  auto check = [&](auto& f, int64_t t, bool mark) {
    SCOPED_TRACE(t);
    const Tensor idx = randint(0, 23, {2, t});
    const Tensor targets = randint(0, 23, {2, t});
    if (mark) mark_dynamic(idx, 1), mark_dynamic(targets, 1);
    model.zero_grad();
    const Tensor got = f(idx, targets);
    std::vector<Tensor> got_grads;
    for (const Tensor& p : model.parameters()) got_grads.push_back(p.grad().clone());
    model.zero_grad();
    const Tensor want = step(idx, targets);
    expect_equal(got, want);
    size_t k = 0;
    for (const Tensor& p : model.parameters()) expect_equal(got_grads[k++], p.grad());
  };
  const std::vector<int64_t> lengths = sweep_lengths();
  ASSERT_EQ(lengths.size(), 50u);
  CompileProfiler prof;
  auto f = compile(step, named("gpt_step"));
  std::set<std::string> modules_first, modules;  // inductor's, by their logged paths
  auto module_paths = [](const std::vector<std::string>& lines) {
    std::set<std::string> paths;
    for (const std::string& l : lines)
      if (const size_t at = l.find("] inductor: "); at != std::string::npos)
        paths.insert(l.substr(at + 12, l.find(' ', at + 12) - at - 12));
    return paths;
  };
  // (The first two lengths compile the exact graph, then the dynamic one.)
  const std::vector<std::string> first = logged("recompiles,output_code", [&] {
    for (size_t i = 0; i < 2; ++i) check(f, lengths[i], false);
  });
  modules_first = module_paths(first);
  const std::vector<std::string> lines = logged("recompiles,output_code", [&] {
    for (size_t i = 2; i < lengths.size(); ++i) check(f, lengths[i], false);
  });
  std::vector<std::string> recompiles;
  for (const auto* log : {&first, &lines})
    for (const std::string& l : *log)
      if (l.find("] recompiling") != std::string::npos) recompiles.push_back(l);
  EXPECT_EQ(graphs(prof, name("gpt_step")), 2);
  ASSERT_EQ(recompiles.size(), 1u);
  EXPECT_TRUE(any_contains(recompiles,
                           "argument 0 (graph input 2): size of dim 1 changed 8 → 2; "
                           "dim 1 of argument 0 (graph input 2) is now dynamic (s0"))
      << recompiles[0];
  modules = module_paths(lines);
  for (const std::string& m : modules_first) modules.erase(m);
  EXPECT_TRUE(modules.empty()) << "a module besides the first two lengths': " << *modules.begin();
  // Marked dynamic: one graph from the first call.
  auto g = compile(step, named("gpt_marked"));
  const std::vector<std::string> marked = logged("recompiles", [&] {
    for (int64_t t : {9, 2, 16, 17, 31, 128}) check(g, t, true);
  });
  EXPECT_EQ(graphs(prof, name("gpt_marked")), 1) << (marked.empty() ? "" : marked[0]);
}

TEST_P(DynamicShapes, DuckSizingSharesASymbolUntilTheSizesDiffer) {
  CompileProfiler prof;
  auto f = compile(
      [](const Tensor& a, const Tensor& b) {
        return cat({a, b}, 0) * 2;
      },
      named("duck"));
  std::vector<std::string> guards;
  const std::vector<std::string> lines = logged("recompiles,guards", [&] {
    for (int64_t n : {5, 6, 9}) expect_equal(f(ones({n}), ones({n})), full({2 * n}, 2.0));
    expect_equal(f(ones({7}), ones({8})), full({15}, 2.0));  // Eq fails: one recompile
    expect_equal(f(ones({3}), ones({10})), full({13}, 2.0));
  });
  EXPECT_EQ(graphs(prof, name("duck")), 3);
  EXPECT_TRUE(any_contains(lines, "guard Eq(dim 0 of input 1, s0)"));
  EXPECT_TRUE(any_contains(lines, "the guard Eq(s0, ...) failed"));
  // An op that needs the sizes equal fails as eager does.
  auto add = compile([](const Tensor& a, const Tensor& b) { return a + b; }, named("add"));
  add(ones({5}), ones({5}));
  add(ones({6}), ones({6}));
  EXPECT_THROW(add(ones({5}), ones({6})), ShapeError);
}

TEST_P(DynamicShapes, SizesZeroAndOneAfterADynamicGraphCompileOneMoreGraphEach) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return sum(exp(x) * 3, {0}); };
  auto f = compile(fn, named("zero_one"));
  for (int64_t n : {4, 6, 1, 0, 9, 1, 0, 2}) {
    SCOPED_TRACE(n);
    const Tensor x = arange(0, n * 3).to(DType::Float32).reshape({n, 3}) * 0.1;
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, name("zero_one")), 4);  // exact at 4, dynamic from 6, then 1 and 0
}

// mark_unbacked: sizes 0 and 1 run on the dynamic graph too (its guard is 0 <= s0), whatever
// the first call's size; code whose ops differ at such a size gets another graph, no error.
TEST_P(DynamicShapes, AnUnbackedDimRunsSizesZeroAndOneOnTheDynamicGraph) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return sum(exp(x) * 3, {0}) + x.sum(); };
  auto f = compile(fn, named("unbacked"));
  std::vector<std::string> guards;
  const auto lines = logged("guards,recompiles", [&] {
    for (int64_t n : {1, 4, 0, 6, 1, 9, 2}) {
      SCOPED_TRACE(n);
      Tensor x = arange(0, n * 3).to(DType::Float32).reshape({n, 3}) * 0.1;
      mark_unbacked(x, 0);
      expect_equal(f(x), fn(x));
    }
  });
  EXPECT_EQ(graphs(prof, name("unbacked")), 1) << ::testing::PrintToString(lines);
  EXPECT_TRUE(any_contains(lines, "0 <= s0  (s0: unbacked, dim 0 of input 0, 1 when compiled)"))
      << ::testing::PrintToString(lines);
  // A branch on the size: the size-1 side is another graph, not an error.
  auto branchy = [](const Tensor& x) { return x.size(0) == 1 ? exp(x) : sin(x); };
  auto b = compile(branchy, named("unbacked_branch"));
  for (int64_t n : {3, 1, 5, 1}) {
    Tensor x = randn({n, 2});
    mark_unbacked(x, 0);
    expect_equal(b(x), branchy(x));
  }
  EXPECT_EQ(graphs(prof, name("unbacked_branch")), 2);
}

TEST_P(DynamicShapes, ViewsAndReshapesTakeTheirSizesFromEachCall) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1);
    Tensor y = x.reshape({b, t, 2, -1}).transpose(1, 2).flatten(0, 1);  // [b*2, t, c/2]
    Tensor z = y.narrow(1, 1, t - 1) + y.narrow(1, 0, 1).expand({b * 2, t - 1, x.size(2) / 2});
    return sum(z.view({b, -1}), {1}) + arange(0, b).to(DType::Float32);
  };
  auto f = compile(fn, named("views"));
  for (int64_t t : {3, 5, 8, 13, 4}) {  // (t = 2 expands to t - 1 = 1: sizes 0 and 1 specialise)
    SCOPED_TRACE(t);
    const Tensor x = randn({2, t, 6});
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, name("views")), 2);
  // Another rank is another graph.
  const Tensor x4 = randn({2, 3, 6, 1}).reshape({2, 3, 6});
  expect_equal(f(x4), fn(x4));
  EXPECT_THROW(f(randn({2, 3})), Error);  // (eager's error: reshape of a 2-d tensor to 4 dims)
}

// A [1, t] window of a longer row keeps the row's stride along its dim of size 1, which is never
// stepped along: a sliding window (kiln sample's context) stays on the dynamic graph.
TEST_P(DynamicShapes, TheStrideOfADimOfSizeOneIsNotGuarded) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return softmax(x * 2, -1) + x.size(1); };
  auto f = compile(fn, named("window"));
  const Tensor row = randn({1, 40});
  for (const Tensor& x : {randn({1, 5}), randn({1, 6}), row.narrow(1, 10, 7), row.narrow(1, 2, 9)})
    expect_equal(f(x), fn(x));
  EXPECT_EQ(graphs(prof, name("window")), 2);
}

// Data-dependent sizes (nonzero, masked_select): the op is a graph break ("data-dependent"), and
// the graph after it, whose sizes follow the count, turns dynamic on the second count: a sweep of
// counts compiles a bounded number of graphs, not one per count.
TEST_P(DynamicShapes, ADataDependentCountBreaksTheGraphAndTheRestTurnsDynamic) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) {
    const Tensor y = x * 2 + 1;
    const Tensor picked = masked_select(y, y > 1.5);
    const Tensor rows = index_select(x, 0, nonzero(x > 0.5).view({-1}));
    return softmax(picked * 3, 0).sum() + exp(rows).sum() * picked.size(0);
  };
  auto f = compile(fn, named("data_dependent"));
  std::set<int64_t> counts;
  for (int seed = 0; seed < 12; ++seed) {
    SCOPED_TRACE(seed);
    manual_seed(static_cast<uint64_t>(seed));
    const Tensor x = randn({64});
    counts.insert(masked_select(x, x * 2 + 1 > 1.5).size(0));
    expect_equal(f(x), fn(x));
  }
  EXPECT_GE(counts.size(), 4u);  // the sweep did vary the count
  // Per call: the graph before the first break, the one between the two data-dependent ops (both
  // of x's fixed size: one graph each), and the one after them: exact once, then dynamic in each
  // count the first time that count changes (at most two recompiles) — 5 at most, whatever the
  // number of calls.
  EXPECT_LE(graphs(prof, name("data_dependent")), 5);
  const ExplainOutput e = explain(fn, randn({64}));
  ASSERT_FALSE(e.break_reasons.empty());
  EXPECT_NE(e.break_reasons[0].reason.find("is data-dependent"), std::string::npos)
      << e.break_reasons[0].reason;
}

TEST_P(DynamicShapes, ABranchOnASizeGivesEachSideItsOwnGraph) {
  CompileProfiler prof;
  const int branch_line = __LINE__ + 1;
  auto fn = [](const Tensor& x) { return x.size(0) > 4 ? exp(x) : sin(x); };
  const std::string at_branch = "at " + std::string(__FILE__) + ":" + std::to_string(branch_line);
  auto f = compile(fn, named("branch"));
  for (int64_t n : {3, 5, 6, 2, 7, 4, 9}) {
    SCOPED_TRACE(n);
    const Tensor x = randn({n});
    expect_equal(f(x), fn(x));
  }
  // 3 (sin), 5 (exp: another graph), 6 (exp, dynamic), 2 (sin, dynamic).
  EXPECT_EQ(graphs(prof, name("branch")), 4);
  // The recompile at 5 says why: the ops differ where the size changed.
  auto g = compile(fn, named("branch_reason"));
  const std::vector<std::string> lines = logged("recompiles,dynamic", [&] {
    for (int64_t n : {3, 5}) {
      const Tensor x = randn({n});
      expect_equal(g(x), fn(x));
    }
  });
  // ... and where: the user's line of the first op that differs.
  EXPECT_TRUE(any_contains(lines,
                           "the ops differ where the sizes changed (node 1 is exp where the "
                           "cached graph has sin, " +
                               at_branch))
      << (lines.empty() ? "" : lines[0]);
  EXPECT_TRUE(any_contains(lines, "): code that branches or loops on a size specialises it"));
  // A dim marked with mark_dynamic must not be specialised: an error naming it and the op.
  auto h = compile(fn, named("branch_marked"));
  Tensor small = randn({3}), large = randn({5});
  mark_dynamic(small, 0);
  mark_dynamic(large, 0);
  expect_equal(h(small), fn(small));
  EXPECT_TRUE(throws_containing([&] { h(large); },
                                "kiln::mark_dynamic: dim 0 of argument 0 (graph input 0) is marked "
                                "dynamic, but '" +
                                    name("branch_marked") +
                                    "' specialises it: its ops differ where the size changed "
                                    "(node 1 is exp where the cached graph has sin, " +
                                    at_branch));
}

TEST_P(DynamicShapes, DynamicTrueMakesEveryInputDimASymbolButModelState) {
  CompileProfiler prof;
  nn::Linear lin(4, 3);
  auto fn = [&](const Tensor& x) { return relu(lin.forward(x)); };
  CompileOptions options = named("all_dynamic");
  options.dynamic = true;
  auto f = compile(fn, options);
  const std::vector<std::string> lines = logged("dynamic", [&] {
    for (int64_t b : {2, 5, 9, 16}) {
      const Tensor x = randn({b, 4});
      expect_equal(f(x), fn(x));
    }
  });
  EXPECT_EQ(graphs(prof, name("all_dynamic")), 1);
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(
      any_contains(lines, "dim 0 of argument 0 (graph input 1) is now dynamic (s0, 2 here)"))
      << lines[0];
  EXPECT_FALSE(any_contains(lines, "parameter 'weight'"));  // (parameters keep their sizes)
}

TEST_P(DynamicShapes, MarkedDimsAreSymbolsFromTheFirstCall) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return softmax(x * 2, -1); };
  auto f = compile(fn, named("marked"));
  for (int64_t n : {6, 7, 12}) {
    Tensor x = randn({3, n});
    mark_dynamic(x, 1);
    mark_dynamic(x, -1);  // (the same dim)
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, name("marked")), 1);
  // A view taken inside the function carries the marks to its dims of the same size.
  auto transposed = [](const Tensor& x) { return softmax(x.transpose(0, 1) * 2, 0); };
  auto t = compile(transposed, named("marked_view"));
  for (int64_t n : {6, 7, 12}) {
    Tensor x = randn({3, n});
    mark_dynamic(x, 1);
    expect_equal(t(x), transposed(x));
  }
  EXPECT_EQ(graphs(prof, name("marked_view")), 1);
  // A marked dim that cannot be dynamic: an error naming it.
  Tensor one = randn({3, 1});
  mark_dynamic(one, 1);
  EXPECT_TRUE(throws_containing([&] { compile(fn, named("marked_one"))(one); },
                                "dim 1 of argument 0 (graph input 0) is marked dynamic, but its "
                                "size is 1"));
  Tensor x = randn({3, 5});
  EXPECT_THROW(mark_dynamic(x, 2), IndexError);
  // maybe_mark_dynamic never errors: exact where it cannot be dynamic.
  Tensor y = randn({3, 5});
  maybe_mark_dynamic(y, 1);
  expect_equal(compile(fn, {.backend = std::string("aot_eager")})(y), fn(y));
  // mark_static keeps a dim exact under dynamic=true.
  CompileProfiler prof2;
  CompileOptions all = named("static_dim");
  all.dynamic = true;
  auto g = compile(fn, all);
  for (int64_t n : {4, 5}) {
    Tensor z = randn({n, 6});
    mark_static(z, 0);
    expect_equal(g(z), fn(z));
  }
  EXPECT_EQ(graphs(prof2, name("static_dim")), 2);
}

// A number computed from a size (a mean's 1 / n) or that changes between calls is read from
// each call's graph once the graph is dynamic, as its sizes are.
TEST_P(DynamicShapes, NumbersThatChangeAreReadFromEachCall) {
  CompileProfiler prof;
  double k = 0.5;
  auto fn = [&](const Tensor& x) { return x * k + mean(x); };
  auto f = compile(fn, named("numbers"));
  for (int64_t n : {3, 4, 5, 6}) {
    k += 0.25;
    const Tensor x = randn({n});
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, name("numbers")), 2);
}

// A slice of a registered buffer (a causal mask cut to the sequence length) follows the length;
// the buffer itself, and a parameter, stay static (marking one dynamic is an error saying so).
TEST_P(DynamicShapes, SlicesOfModelStateAreDynamicTheStateItselfIsNot) {
  struct Masked : nn::Module {
    Tensor mask;
    Masked() : Module("Masked") { mask = register_buffer("mask", tril(ones({32, 32}))); }
  } m;
  CompileProfiler prof;
  auto fn = [&](const Tensor& x) {
    const int64_t t = x.size(0);
    return x * m.mask.narrow(0, 0, t).narrow(1, 0, t);
  };
  auto f = compile(fn, named("masked"));
  for (int64_t t : {4, 7, 9, 16, 3}) {
    const Tensor x = randn({t, t});
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, name("masked")), 2);
  nn::Linear lin(3, 2);
  mark_dynamic(lin.weight, 0);
  EXPECT_TRUE(throws_containing(
      [&] {
        compile([&](const Tensor& x) { return lin.forward(x); }, named("param"))(ones({4, 3}));
      },
      "is marked dynamic, but it is parameter 'weight', whose sizes stay static"));
}

// Pure mode runs a plan's graph at the sizes it learnt: its graphs stay exact.
TEST(DynamicShapesEager, PureModeGraphsStayExact) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return tanh(x) * 2; };
  auto f = compile(fn, {.backend = std::string("eager"), .name = "pure_sizes", .pure = true});
  for (int64_t n : {3, 4, 5, 4, 3}) {
    const Tensor x = randn({n});
    expect_equal(f(x), fn(x));
  }
  EXPECT_EQ(graphs(prof, "pure_sizes"), 3);
  CompileOptions both{.backend = std::string("eager"), .pure = true};
  both.dynamic = true;
  EXPECT_THROW(compile(fn, both), ValueError);
}

// compile_config().dynamic (KILN_DYNAMIC_SHAPES): the dynamic= of every function compiled
// without its own — false: each size its own graph; true: one graph from the first call; a
// function's own setting and pure mode win.
TEST(DynamicShapesEager, TheProgramWideSettingAppliesToFunctionsWithoutTheirOwn) {
  CompileProfiler prof;
  auto fn = [](const Tensor& x) { return sin(x) + 1; };
  struct Restore {  // (an ASSERT included)
    std::optional<bool> saved = compile_config().dynamic;
    ~Restore() { compile_config().dynamic = saved; }
  } restore;
  const auto sweep = [&](const std::string& name, CompileOptions options) {
    options.backend = std::string("eager");
    options.name = name;
    auto f = compile(fn, options);
    for (int64_t n : {3, 4, 5, 6}) {
      const Tensor x = randn({n});
      expect_equal(f(x), fn(x));
    }
    return graphs(prof, name);
  };
  compile_config().dynamic = false;
  EXPECT_EQ(sweep("config_static", {}), 4);
  CompileOptions own_dynamic;
  own_dynamic.dynamic = true;
  EXPECT_EQ(sweep("config_static_own_dynamic", own_dynamic), 1);
  // A mark the program-wide false refuses: the error says where the false came from.
  auto marked = compile(fn, {.backend = std::string("eager"), .name = "config_static_marked"});
  Tensor x = randn({5});
  mark_dynamic(x, 0);
  EXPECT_TRUE(throws_containing([&] { marked(x); }, "(the program-wide setting"));
  compile_config().dynamic = true;
  EXPECT_EQ(sweep("config_dynamic", {}), 1);
  EXPECT_EQ(sweep("config_dynamic_pure", {.pure = true}), 4);  // (exact graphs, no error)
  compile_config().dynamic = std::nullopt;
  EXPECT_EQ(sweep("config_automatic", {}), 2);  // exact, then dynamic from the second size
}

TEST_P(DynamicShapes, ABatchSizeSweepOfATrainingStepGivesEagersGradients) {
  manual_seed(5);
  nn::Linear a(6, 8), b(8, 2);
  auto step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = mse_loss(b.forward(tanh(a.forward(x))), y);
    loss.backward();
    return loss;
  };
  CompileProfiler prof;
  auto f = compile(step, named("train_step"));
  for (int64_t batch : {8, 8, 5, 32, 7, 2}) {
    SCOPED_TRACE(batch);
    const Tensor x = randn({batch, 6}), y = randn({batch, 2});
    a.zero_grad();
    b.zero_grad();
    const Tensor got = f(x, y);
    const Tensor ga = a.weight.grad().clone(), gb = b.weight.grad().clone();
    a.zero_grad();
    b.zero_grad();
    expect_equal(got, step(x, y));
    expect_equal(ga, a.weight.grad());
    expect_equal(gb, b.weight.grad());
  }
  EXPECT_EQ(graphs(prof, name("train_step")), 2);
}

}  // namespace
}  // namespace kiln
