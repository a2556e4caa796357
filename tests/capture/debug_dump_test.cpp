// Debug dumps (kiln::set_debug_dir, KILN_DEBUG_DIR): the run folder, its index, the graph
// files (which must parse back to the compiled graph), the backends' outputs, and failing soft.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "capture/test_utils.h"
#include "kiln/kiln.h"
#include "test_files.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_equal;
using testing::read_text;

// A fresh folder per test, removed afterwards; dumping is switched off again on the way out.
class DebugDump : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::fresh_test_folder("kiln-debug-dump-test"); }
  void TearDown() override {
    set_debug_dir("");
    fs::remove_all(root_);
  }
  fs::path root_;
};

std::vector<std::string> index_lines(const fs::path& run) {
  std::vector<std::string> lines;
  std::ifstream f(run / "index.jsonl");
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> events(const std::vector<std::string>& lines, const std::string& kind) {
  std::vector<std::string> out;
  for (const std::string& l : lines)
    if (l.rfind("{\"event\":\"" + kind + "\"", 0) == 0) out.push_back(l);
  return out;
}

// A string field of one index line (the values the tests read have no escapes).
std::string field(const std::string& line, const std::string& key) {
  const std::string start = "\"" + key + "\":";
  const size_t at = line.find(start);
  if (at == std::string::npos) return "";
  size_t begin = at + start.size();
  if (line[begin] == '"') {
    const size_t end = line.find('"', begin + 1);
    return line.substr(begin + 1, end - begin - 1);
  }
  const size_t end = line.find_first_of(",}", begin);
  return line.substr(begin, end - begin);
}

// Keeps the graphs its backend is handed (then runs them with "eager").
struct KeepGraphs {
  std::shared_ptr<std::vector<ir::Graph>> graphs = std::make_shared<std::vector<ir::Graph>>();
  CompileOptions options(const std::string& name) const {
    CompileOptions o;
    o.backend = testing::eager_seeing([keep = graphs](const ir::Graph& g) { keep->push_back(g); });
    o.name = name;
    return o;
  }
};

int g_break_line = 0;
Tensor with_break(Tensor x) {
  Tensor y = (x * 2).exp();
  g_break_line = __LINE__ + 1;
  graph_break();
  return y.sum() + 1;
}

TEST_F(DebugDump, BreakAndRecompileAreIndexedAndGraphsParseBack) {
  set_debug_dir(root_.string());
  const fs::path run = debug_run_dir();
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(run.parent_path(), root_);
  EXPECT_EQ(run.filename().string().rfind("run-", 0), 0u) << run;

  KeepGraphs kept;
  auto f = compile(with_break, kept.options("with_break"));
  for (int64_t n : {10, 10, 12}) {  // 12: graph 0 and graph 1 recompile
    Tensor x = randn({n});
    expect_equal(f(x), with_break(x));  // dumping never changes results
  }
  ASSERT_EQ(kept.graphs->size(), 4u);

  const std::vector<std::string> lines = index_lines(run);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(field(lines[0], "event"), "run");
  EXPECT_EQ(field(lines[0], "pid"), std::to_string(::getpid()));

  const auto functions = events(lines, "function");
  ASSERT_EQ(functions.size(), 1u);
  EXPECT_EQ(field(functions[0], "name"), "with_break");
  const std::string fn_id = field(functions[0], "function");

  // Three calls reach the break; the index lists it once, with the user's line.
  const auto breaks = events(lines, "break");
  ASSERT_EQ(breaks.size(), 1u) << read_text(run / "index.jsonl");
  EXPECT_EQ(field(breaks[0], "reason"), "graph_break() was called");
  EXPECT_EQ(field(breaks[0], "after_graph"), "0");
  EXPECT_EQ(field(breaks[0], "file"), __FILE__);
  EXPECT_EQ(field(breaks[0], "line"), std::to_string(g_break_line));
  EXPECT_EQ(field(breaks[0], "function"), fn_id);

  const auto recompiles = events(lines, "recompile");
  ASSERT_EQ(recompiles.size(), 2u);
  EXPECT_EQ(field(recompiles[0], "graph"), "0");
  EXPECT_EQ(field(recompiles[0], "reason"),
            "argument 0 (graph input 0): size of dim 0 changed 10 → 12; dim 0 of argument 0 "
            "(graph input 0) is now dynamic (s0, 12 here)");
  EXPECT_EQ(field(recompiles[1], "graph"), "1");

  // One "graph" line per compiled graph, in compile order, with files that exist.
  const auto graphs = events(lines, "graph");
  ASSERT_EQ(graphs.size(), 4u);
  const std::pair<const char*, const char*> position_version[] = {
      {"0", "0"}, {"1", "0"}, {"0", "1"}, {"1", "1"}};
  for (size_t i = 0; i < graphs.size(); ++i) {
    SCOPED_TRACE(graphs[i]);
    EXPECT_EQ(field(graphs[i], "graph"), position_version[i].first);
    EXPECT_EQ(field(graphs[i], "version"), position_version[i].second);
    // The text form parses back to exactly the graph the backend compiled.
    const ir::Graph parsed = ir::parse_graph(read_text(run / field(graphs[i], "graph_file")));
    EXPECT_TRUE(ir::structurally_equal(parsed, (*kept.graphs)[i]));
    EXPECT_EQ(parsed.serialize(), (*kept.graphs)[i].serialize());
    EXPECT_EQ(read_text(run / field(graphs[i], "listing_file")), (*kept.graphs)[i].to_string());
    EXPECT_EQ(field(graphs[i], "ops"), std::to_string((*kept.graphs)[i].num_calls()));
    const std::string guards = read_text(run / field(graphs[i], "guards_file"));
    EXPECT_NE(guards.find(i < 2 ? "shape [10]" : "shape [12]"), std::string::npos) << guards;
    const std::string dot = read_text(run / field(graphs[i], "dot_file"));
    EXPECT_EQ(dot.rfind("digraph", 0), 0u);
    // The callable wraps "eager", whose plan is the backend's output here.
    EXPECT_EQ(field(graphs[i], "code_kind"), "eager_plan.txt");
    const std::string plan = read_text(run / field(graphs[i], "code_file"));
    EXPECT_NE(plan.find("eager interpreter plan"), std::string::npos) << plan;
    EXPECT_FALSE(field(graphs[i], "seconds_backend_compile").empty());
  }
  EXPECT_NE(read_text(run / "compile_times.txt").find("backend_compile"), std::string::npos);
}

TEST_F(DebugDump, InductorWritesItsGeneratedSource) {
  std::vector<std::string> logged;
  set_log_sink([&](const std::string& line) { logged.push_back(line); });
  set_logs("output_code");
  set_debug_dir(root_.string());
  auto f = compile([](Tensor x) { return (x * 3).tanh() + 1; },
                   {.backend = std::string("inductor"), .name = "fused"});
  Tensor x = randn({64});
  Tensor y = f(x);
  set_logs("");
  set_log_sink({});
  expect_equal(y, (x * 3).tanh() + 1);

  const fs::path run = debug_run_dir();
  const auto graphs = events(index_lines(run), "graph");
  ASSERT_EQ(graphs.size(), 1u);
  EXPECT_EQ(field(events(index_lines(run), "function")[0], "backend"), "inductor");
  EXPECT_EQ(field(graphs[0], "code_kind"), "inductor.cpp");
  const std::string source = read_text(run / field(graphs[0], "code_file"));
  EXPECT_NE(source.find("tanh"), std::string::npos) << source;
  // The same text the output_code log shows, and the module it was compiled into.
  ASSERT_EQ(logged.size(), 1u);
  std::string body = source;
  while (!body.empty() && body.back() == '\n') body.pop_back();  // a log line has no final newline
  EXPECT_NE(logged[0].find(body), std::string::npos);
  const std::string module = field(graphs[0], "code_module");
  EXPECT_TRUE(fs::exists(module)) << module;
  EXPECT_NE(logged[0].find(module), std::string::npos);
  // A build-tree Kiln compiles generated code against its source tree's runtime headers.
  EXPECT_NE(logged[0].find("(headers from " KILN_TEST_SOURCE_DIR "/src)"), std::string::npos)
      << logged[0].substr(0, 300);
  EXPECT_FALSE(field(graphs[0], "seconds_inductor_codegen").empty()) << graphs[0];
}

TEST_F(DebugDump, TrainingWritesAotAutogradsGraphsAndTheirCode) {
  // A training step through inductor compiles AOT autograd's forward and backward when the
  // call first needs them, and, since `v` is alive but gets no gradient, a backward without
  // its tangent: each is written with its generated code.
  set_debug_dir(root_.string());
  auto step = [](Tensor x, Tensor w) {
    Tensor v = (x * w).tanh();
    Tensor s = (v * 3).sum();
    graph_break();
    Tensor loss = s * 2;
    loss.backward();
    return loss;
  };
  auto f = compile(step, {.backend = std::string("inductor"), .name = "train_step"});
  Tensor x = randn({16}), w = randn({16}).requires_grad_();
  Tensor xe = x.clone(), we = w.detach().clone().requires_grad_();
  expect_equal(f(x, w), step(xe, we));
  expect_equal(w.grad(), we.grad());

  const fs::path run = debug_run_dir();
  const auto aot = events(index_lines(run), "aot_graph");
  std::map<std::string, std::string> by_part;
  for (const std::string& line : aot)
    if (field(line, "graph") == "0") by_part[field(line, "part")] = line;
  ASSERT_TRUE(by_part.count("forward") && by_part.count("backward") &&
              by_part.count("backward_partial"))
      << ::testing::PrintToString(aot);
  for (const auto& [part, line] : by_part) {
    const ir::Graph g = ir::parse_graph(read_text(run / field(line, "graph_file")));
    EXPECT_EQ(field(line, "ops"), std::to_string(g.num_calls())) << line;
    EXPECT_TRUE(fs::exists(run / field(line, "listing_file"))) << line;
    EXPECT_EQ(field(line, "code_kind"), "inductor.cpp") << line;
    EXPECT_TRUE(fs::exists(run / field(line, "code_file"))) << line;
    EXPECT_FALSE(field(line, "seconds_inductor_codegen").empty()) << line;
  }
  // The partial backward names the tangent that did not arrive: v's (the graph's outputs that
  // require grad are v and s, in that order).
  EXPECT_EQ(field(by_part["backward_partial"], "missing_tangents"), "0")
      << by_part["backward_partial"];
  EXPECT_EQ(field(by_part["forward"], "number"), "0");
}

TEST_F(DebugDump, InductorWithNothingToFuseWritesItsExternSchedule) {
  set_debug_dir(root_.string());
  auto f = compile([](Tensor a, Tensor b) { return matmul(a, b); },
                   {.backend = std::string("inductor"), .name = "only_matmul"});
  Tensor a = randn({3, 4}), b = randn({4, 2});
  expect_equal(f(a, b), matmul(a, b));
  const fs::path run = debug_run_dir();
  const auto graphs = events(index_lines(run), "graph");
  ASSERT_EQ(graphs.size(), 1u);
  EXPECT_EQ(field(graphs[0], "code_kind"), "inductor_schedule.txt");
  const std::string schedule = read_text(run / field(graphs[0], "code_file"));
  EXPECT_NE(schedule.find("extern %2 matmul"), std::string::npos) << schedule;
}

TEST_F(DebugDump, ABackendErrorWritesTheGraphThatFailed) {
  set_debug_dir(root_.string());
  CompileOptions o;
  o.name = "broken";
  o.backend = Backend([](const ir::Graph&, std::span<const TensorMeta>) -> CompiledGraph {
    throw Error("test backend: cannot compile this");
  });
  auto f = compile([](Tensor x) { return (x + 1).exp(); }, o);
  EXPECT_THROW(f(ones({2})), Error);
  const fs::path run = debug_run_dir();
  const auto errors = events(index_lines(run), "compile_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(field(errors[0], "error"), "test backend: cannot compile this");
  EXPECT_EQ(field(errors[0], "graph"), "0");
  const ir::Graph g = ir::parse_graph(read_text(run / field(errors[0], "graph_file")));
  EXPECT_EQ(g.num_calls(), 2);  // add, exp: a repro of what the backend was given
  EXPECT_TRUE(events(index_lines(run), "graph").empty());
}

TEST_F(DebugDump, UnwritableFolderWarnsOnceAndChangesNothing) {
  // A regular file where the folder should be: creating the run folder fails.
  const fs::path blocker = root_ / "not-a-folder";
  std::ofstream(blocker) << "x";
  std::stringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  set_debug_dir((blocker / "dumps").string());
  auto f = compile(with_break, {.name = "unwritable"});
  Tensor x = randn({5});
  Tensor y = f(x);
  std::cerr.rdbuf(old);
  expect_equal(y, with_break(x));
  EXPECT_EQ(debug_run_dir(), "");
  const std::string text = captured.str();
  EXPECT_NE(text.find("[kiln] warning: debug dump failed"), std::string::npos) << text;
  EXPECT_EQ(text.find("warning"), text.rfind("warning")) << "one warning only:\n" << text;
}

TEST_F(DebugDump, FolderRemovedMidRunWarnsOnceAndStops) {
  set_debug_dir(root_.string());
  const fs::path run = debug_run_dir();
  auto f = compile([](Tensor x) { return x + 1; }, {.name = "first"});
  f(ones({2}));
  fs::remove_all(run);
  std::ofstream(run) << "now a file";  // nothing can be written below it any more
  std::stringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  auto g = compile(with_break, {.name = "second"});
  Tensor x = randn({3});
  Tensor y = g(x);
  g(randn({4}));  // more events: no more warnings
  std::cerr.rdbuf(old);
  expect_equal(y, with_break(x));
  EXPECT_EQ(debug_run_dir(), "");
  const std::string text = captured.str();
  EXPECT_NE(text.find("debug dumps are off"), std::string::npos) << text;
  EXPECT_EQ(text.find("warning"), text.rfind("warning")) << text;
}

TEST_F(DebugDump, EmptyPathStopsDumpingAndNamesAreEscaped) {
  set_debug_dir(root_.string());
  const fs::path run = debug_run_dir();
  auto f = compile([](Tensor x) { return x * 2; }, {.name = "say \"hi\"\\now"});
  f(ones({2}));
  const auto functions = events(index_lines(run), "function");
  ASSERT_EQ(functions.size(), 1u);
  EXPECT_NE(functions[0].find(R"("name":"say \"hi\"\\now")"), std::string::npos) << functions[0];
  EXPECT_EQ(field(functions[0], "folder").find('"'), std::string::npos);

  set_debug_dir("");
  EXPECT_EQ(debug_run_dir(), "");
  const size_t before = index_lines(run).size();
  auto g = compile([](Tensor x) { return x - 2; }, {.name = "after"});
  g(ones({2}));
  EXPECT_EQ(index_lines(run).size(), before);
}

TEST_F(DebugDump, CacheLimitIsIndexed) {
  set_debug_dir(root_.string());
  std::stringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  auto f = compile([](Tensor x) { return x * 2; }, {.name = "limited", .cache_size_limit = 1});
  for (int64_t n : {2, 3, 4}) f(ones({n}));  // 3 is a miss past the limit
  std::cerr.rdbuf(old);
  const auto lines = index_lines(debug_run_dir());
  const auto limits = events(lines, "cache_limit");
  ASSERT_EQ(limits.size(), 1u) << captured.str();
  EXPECT_EQ(field(limits[0], "limit"), "1");
  EXPECT_EQ(field(limits[0], "graph"), "0");
  EXPECT_EQ(field(limits[0], "reason"), "argument 0 (graph input 0): size of dim 0 changed 2 → 3");
  EXPECT_EQ(events(lines, "graph").size(), 1u);  // later calls ran eagerly
}

TEST_F(DebugDump, EachCallStartsANewRunFolder) {
  set_debug_dir(root_.string());
  const std::string first = debug_run_dir();
  set_debug_dir(root_.string());
  const std::string second = debug_run_dir();
  EXPECT_NE(first, second);
  EXPECT_TRUE(fs::is_directory(first));
  EXPECT_TRUE(fs::is_directory(second));
}

}  // namespace
}  // namespace kiln
