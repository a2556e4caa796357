// Standalone repros (KILN_REPRO_AFTER / KILN_REPRO_LEVEL) and the minifier, driven by two
// test-only backends: one that crashes on sigmoid, one that computes tanh wrongly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include "capture/test_utils.h"
#include "kiln/ir/passes.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Compiles with the eager interpreter, but throws on any graph holding a sigmoid: a backend
// crash on one op.
CompiledGraph crash_on_sigmoid(const ir::Graph& g, std::span<const TensorMeta> in) {
  for (const ir::Node& n : g.nodes)
    if (n.op && n.op->name == "sigmoid") throw Error("test backend: cannot compile sigmoid");
  return lookup_backend("eager")(g, in);
}

// Runs the graph with tanh computed as sigmoid: a backend that miscomputes one op.
CompiledGraph wrong_tanh(const ir::Graph& g, std::span<const TensorMeta> in) {
  ir::Graph bad = g;
  for (ir::Node& n : bad.nodes)
    if (n.op && n.op->name == "tanh") n.op = find_op("sigmoid");
  return lookup_backend("eager")(bad, in);
}

void register_test_backends() {
  static bool done = [] {
    register_backend("test_crash_on_sigmoid", crash_on_sigmoid);
    register_backend("test_wrong_tanh", wrong_tanh);
    return true;
  }();
  (void)done;
}

// Sets the repro variables for one test and a fresh repro folder; restores them after.
class ReproEnv {
 public:
  ReproEnv(const char* after, const char* level) {
    dir_ = fs::temp_directory_path() /
           ("kiln_repro_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    set("KILN_REPRO_AFTER", after);
    set("KILN_REPRO_LEVEL", level);
    set("KILN_REPRO_DIR", dir_.c_str());
  }
  ~ReproEnv() {
    ::unsetenv("KILN_REPRO_AFTER");
    ::unsetenv("KILN_REPRO_LEVEL");
    ::unsetenv("KILN_REPRO_DIR");
    fs::remove_all(dir_);
  }
  // The repro folders written so far.
  std::vector<fs::path> repros() const {
    std::vector<fs::path> out;
    if (fs::exists(dir_))
      for (const auto& e : fs::directory_iterator(dir_))
        if (e.is_directory()) out.push_back(e.path());
    return out;
  }

 private:
  static void set(const char* name, const char* value) {
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  fs::path dir_;
  static inline int counter_ = 0;
};

bool has_op(const ir::Graph& g, std::string_view name) {
  for (const ir::Node& n : g.nodes)
    if (n.op && n.op->name == name) return true;
  return false;
}

// A chain of `n` pointwise ops with `special` (an op name) at position `at`, and a side branch
// every tenth op so the graph is not a plain line.
Tensor long_chain(Tensor x, int n, int at, const std::string& special) {
  Tensor side = x * 0.5;
  for (int i = 1; i < n; ++i) {
    if (i == at)
      x = special == "sigmoid" ? x.sigmoid() : x.tanh();
    else if (i % 10 == 0)
      x = x + side;
    else
      x = x * 0.9 + 0.01;
  }
  return x;
}

TEST(Repro, BackendCrashWritesARunnableRepro) {
  register_test_backends();
  ReproEnv env("capture", "1");
  auto f = compile([](Tensor x) { return (x * 2).sigmoid() + 1; },
                   CompileOptions{.backend = "test_crash_on_sigmoid"});
  EXPECT_THROW(f(ones({3, 4})), Error);
  auto repros = env.repros();
  ASSERT_EQ(repros.size(), 1u);
  for (const char* file : {"graph.txt", "inputs.safetensors", "repro.txt", "failure.txt",
                           "repro.cpp", "CMakeLists.txt"})
    EXPECT_TRUE(fs::exists(repros[0] / file)) << file;
  EXPECT_FALSE(fs::exists(repros[0] / "minified")) << "level 1 does not minify";
  repro::ReproCase c = repro::load_repro(repros[0].string());
  EXPECT_EQ(c.backend, "test_crash_on_sigmoid");
  EXPECT_EQ(c.kind, repro::FailureKind::BackendError);
  EXPECT_TRUE(has_op(c.graph, "sigmoid"));
  EXPECT_NE(c.message.find("cannot compile sigmoid"), std::string::npos);
  std::ostringstream out;
  EXPECT_EQ(repro::run_repro(repros[0].string(), out), 1) << out.str();
  EXPECT_NE(out.str().find("REPRODUCED"), std::string::npos);
}

TEST(Repro, NoReproWhenTheBackendWorksOrTheHookIsOff) {
  register_test_backends();
  {
    ReproEnv env("capture", "3");
    auto f = compile([](Tensor x) { return x.sigmoid() * 3; }, CompileOptions{.backend = "eager"});
    EXPECT_NO_THROW(f(ones({4})));
    EXPECT_TRUE(env.repros().empty());
  }
  ReproEnv env(nullptr, nullptr);
  auto f = compile([](Tensor x) { return x.sigmoid(); },
                   CompileOptions{.backend = "test_crash_on_sigmoid"});
  EXPECT_THROW(f(ones({4})), Error);
  EXPECT_TRUE(env.repros().empty());
}

TEST(Repro, Level2MinifiesTheCrash) {
  register_test_backends();
  ReproEnv env("capture", "2");
  auto f = compile([](Tensor x) { return long_chain(x, 30, 17, "sigmoid"); },
                   CompileOptions{.backend = "test_crash_on_sigmoid"});
  EXPECT_THROW(f(ones({5})), Error);
  auto repros = env.repros();
  ASSERT_EQ(repros.size(), 1u);
  repro::ReproCase small = repro::load_repro((repros[0] / "minified").string());
  EXPECT_EQ(small.graph.num_calls(), 1);
  EXPECT_TRUE(has_op(small.graph, "sigmoid"));
}

TEST(Repro, Level3CatchesAnAccuracyFailureAndLevel4MinifiesIt) {
  register_test_backends();
  for (const char* level : {"3", "4"}) {
    ReproEnv env("capture", level);
    auto f = compile([](Tensor x) { return long_chain(x, 20, 8, "tanh"); },
                     CompileOptions{.backend = "test_wrong_tanh"});
    try {
      f(full({6}, 0.3));
      ADD_FAILURE() << "level " << level << ": the miscomputation went unnoticed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("disagrees with eager"), std::string::npos) << e.what();
    }
    auto repros = env.repros();
    ASSERT_EQ(repros.size(), 1u);
    repro::ReproCase c = repro::load_repro(repros[0].string());
    EXPECT_EQ(c.kind, repro::FailureKind::Accuracy);
    std::ostringstream out;
    EXPECT_EQ(repro::run_repro(repros[0].string(), out), 1) << out.str();
    EXPECT_EQ(fs::exists(repros[0] / "minified"), std::string(level) == "4");
  }
}

TEST(Repro, Level1And2DoNotCheckAccuracy) {
  register_test_backends();
  ReproEnv env("capture", "2");
  auto f = compile([](Tensor x) { return x.tanh(); }, CompileOptions{.backend = "test_wrong_tanh"});
  EXPECT_NO_THROW(f(ones({3})));
  EXPECT_TRUE(env.repros().empty());
}

TEST(Repro, BadSettingsAreClearErrors) {
  {
    ReproEnv env("aot", "1");
    try {
      compile([](Tensor x) { return x + 1; }, CompileOptions{.backend = "eager"});
      ADD_FAILURE() << "KILN_REPRO_AFTER=aot with a non-AOT backend was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("aot_autograd"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(
        compile([](Tensor x) { return x + 1; }, CompileOptions{.backend = "aot_eager"}));
  }
  {
    ReproEnv env("capture", "7");
    EXPECT_THROW(compile([](Tensor x) { return x + 1; }), ValueError);
  }
  {
    ReproEnv env("after_everything", "1");
    EXPECT_THROW(compile([](Tensor x) { return x + 1; }), ValueError);
  }
  EXPECT_THROW(repro::load_repro("/nonexistent/kiln_repro"), Error);
}

// Captures `fn` on `x` and returns the graph as the backend receives it.
ir::Graph capture_graph(const std::function<Tensor(Tensor)>& fn, const Tensor& x) {
  auto graph = std::make_shared<std::optional<ir::Graph>>();
  CompileOptions o;
  o.backend = testing::eager_seeing([graph](const ir::Graph& g) { *graph = g; });
  auto f = compile(fn, o);
  f(x);
  return graph->value();
}

TEST(Minify, Shrinks100NodeCrashToTheOffendingNode) {
  register_test_backends();
  const Tensor x = full({4, 3}, 0.25);
  repro::ReproCase c;
  c.graph = capture_graph([](Tensor t) { return long_chain(t, 100, 63, "sigmoid"); }, x);
  ASSERT_GE(c.graph.num_calls(), 100);
  c.inputs = {x};
  c.backend = "test_crash_on_sigmoid";
  c.kind = repro::FailureKind::BackendError;
  repro::MinifyResult r = repro::minify(c, lookup_backend(c.backend));
  EXPECT_EQ(r.ops_before, c.graph.num_calls());
  EXPECT_EQ(r.ops_after, 1);
  EXPECT_TRUE(has_op(r.minimal.graph, "sigmoid"));
  EXPECT_EQ(r.minimal.inputs.size(), 1u);
}

TEST(Minify, Shrinks100NodeAccuracyFailureToTheOffendingNode) {
  register_test_backends();
  const Tensor x = full({8}, 0.5);
  repro::ReproCase c;
  c.graph = capture_graph([](Tensor t) { return long_chain(t, 100, 90, "tanh"); }, x);
  c.inputs = {x};
  c.backend = "test_wrong_tanh";
  c.kind = repro::FailureKind::Accuracy;
  repro::MinifyResult r = repro::minify(c, lookup_backend(c.backend));
  EXPECT_EQ(r.ops_after, 1);
  EXPECT_TRUE(has_op(r.minimal.graph, "tanh"));
  // The minimal case still fails after a round trip through its folder.
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_minify_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string folder = repro::write_repro(r.minimal, dir.string());
  std::ostringstream out;
  EXPECT_EQ(repro::run_repro(folder, out), 1) << out.str();
  fs::remove_all(dir);
}

TEST(Minify, ACutValueKeepsItsRecordedLayoutThroughTheRepro) {
  // The nodes after a cut were recorded over the cut value's layout (here a broadcast, strides
  // [0, 1], then its transpose): the new input must have it, in the minimal case and after a
  // round trip through the repro folder (saved contiguous), or a backend that addresses views
  // by their record would read other elements than the original graph did.
  register_test_backends();
  const Tensor x = tensor({0.1, 0.2, 0.3, 0.4});
  repro::ReproCase c;
  c.graph = capture_graph(
      [](Tensor t) {
        Tensor e = (t * 2).exp().unsqueeze(0).expand({4, 4});
        return tanh(e.t()) * 3;
      },
      x);
  c.inputs = {x};
  c.backend = "test_wrong_tanh";
  c.kind = repro::FailureKind::Accuracy;
  repro::MinifyResult r = repro::minify(c, lookup_backend(c.backend));
  ASSERT_TRUE(has_op(r.minimal.graph, "tanh"));
  ir::check_view_layouts(r.minimal.graph, "the minimal graph");
  ASSERT_EQ(r.minimal.inputs.size(), 1u);  // the transpose, cut: tanh's operand
  EXPECT_EQ(r.minimal.inputs[0].strides(), Shape({1, 0})) << r.minimal.graph;
  auto expect_inputs_as_recorded = [](const repro::ReproCase& m) {
    for (const ir::Node& n : m.graph.nodes)
      if (n.kind == ir::NodeKind::Placeholder) {
        const Tensor& in = m.inputs[static_cast<size_t>(n.input_index)];
        EXPECT_EQ(in.sizes(), n.outputs[0].sizes);
        EXPECT_EQ(in.strides(), n.outputs[0].strides) << m.graph;
      }
  };
  expect_inputs_as_recorded(r.minimal);
  const fs::path dir =
      fs::temp_directory_path() / ("kiln_minify_layout_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const repro::ReproCase loaded = repro::load_repro(repro::write_repro(r.minimal, dir.string()));
  expect_inputs_as_recorded(loaded);
  const std::vector<Tensor> want = ir::interpret(r.minimal.graph, r.minimal.inputs);
  const std::vector<Tensor> got = ir::interpret(loaded.graph, loaded.inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(equal(want[k], got[k]));
  fs::remove_all(dir);
}

TEST(Minify, RefusesACaseThatDoesNotFail) {
  register_test_backends();
  const Tensor x = ones({3});
  repro::ReproCase c;
  c.graph = capture_graph([](Tensor t) { return t * 2 + 1; }, x);
  c.inputs = {x};
  c.backend = "test_crash_on_sigmoid";
  EXPECT_THROW(repro::minify(c, lookup_backend(c.backend)), Error);
}

}  // namespace
}  // namespace kiln
