// kiln report: the page made from a real debug run (every section, graphs drawn as inline SVG,
// text escaped), a missing Graphviz, a folder that is not a run, and the index line parser.
// tests/tools/report_browser.sh loads such a page in headless Chromium.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "core/subprocess.h"
#include "kiln/kiln.h"
#include "report.h"
#include "test_files.h"
#include "tools/test_utils.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

using kiln::testing::read_text;
using testing::Result;
using testing::run;

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool dot_installed() { return !kiln::detail::find_executable("dot").empty(); }

// A debug run with a break (at a known line of this file), a recompile, and a function whose
// name is markup: the page must show it as text.
class Report : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = kiln::testing::fresh_test_folder("kiln-report-test");
    set_debug_dir(root_.string());
    run_dir_ = debug_run_dir();
    auto f = kiln::compile(
        [](Tensor x) {
          Tensor y = x.exp() * 2;
          graph_break();  // REPORT-TEST-BREAK
          return y.sum();
        },
        {.name = "<script>alert(\"x\")</script>"});
    f(ones({3}));
    f(ones({5}));  // both graphs recompile
    // A name with ".." (its folder is f2-a..b): still inside the run. Limit 0: the second
    // shape sends it to eager mode.
    auto g = kiln::compile([](Tensor x) { return x + 1; }, {.name = "a..b", .cache_size_limit = 0});
    std::stringstream quiet;
    std::streambuf* old = std::cerr.rdbuf(quiet.rdbuf());
    g(ones({2}));
    g(ones({4}));
    std::cerr.rdbuf(old);
    // A backend that throws: the page shows the error and the graph.
    CompileOptions broken;
    broken.name = "broken";
    broken.backend = Backend([](const ir::Graph&, std::span<const TensorMeta>) -> CompiledGraph {
      throw Error("test backend <refuses>");
    });
    EXPECT_THROW(kiln::compile([](Tensor x) { return x.neg(); }, broken)(ones({2})), Error);
    set_debug_dir("");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  fs::path run_dir_;
};

TEST_F(Report, PageHasEverySectionGraphsAsSvgAndEscapedText) {
  const fs::path page = root_ / "report.html";
  Result r = run({"report", run_dir_.string(), "-o", page.string()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_NE(r.out.find("wrote " + page.string()), std::string::npos) << r.out;
  const std::string html = read_text(page);
  for (const char* id :
       {"id=\"summary\"", "id=\"functions\"", "id=\"breaks\"", "id=\"recompiles\"", "id=\"graphs\"",
        "id=\"compile-times\"", "id=\"graph-f", "class=\"break\"", "class=\"recompile\""})
    EXPECT_NE(html.find(id), std::string::npos) << id;
  // 2 graphs, each recompiled, and a..b's one graph.
  EXPECT_EQ(occurrences(html, "<article class=\"graph\""), 5u);
  EXPECT_EQ(occurrences(html, "<tr class=\"recompile\""), 2u);
  EXPECT_EQ(occurrences(html, "<tr class=\"cache-limit\""), 1u);
  EXPECT_NE(html.find("hit cache_size_limit (0)"), std::string::npos);
  EXPECT_EQ(html.find(": missing</p>"), std::string::npos);  // a..b's files were found too
  EXPECT_NE(html.find("id=\"compile-errors\""), std::string::npos);
  EXPECT_NE(html.find("test backend &lt;refuses&gt;"), std::string::npos);
  EXPECT_NE(html.find("neg(%0)"), std::string::npos);  // the failed graph's listing
  EXPECT_EQ(occurrences(html, "<tr class=\"break\""), 1u);
  // The break names this file's line and shows its text.
  EXPECT_NE(html.find("graph_break();  // REPORT-TEST-BREAK"), std::string::npos);
  EXPECT_NE(html.find("size of dim 0 changed 3 → 5"), std::string::npos);
  // Markup in names is text; no script, no network.
  EXPECT_NE(html.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));  // SVG namespaces only
  EXPECT_EQ(html.find("https://"), std::string::npos);
  if (dot_installed()) {
    EXPECT_EQ(occurrences(html, "<svg"), 5u);
    EXPECT_EQ(html.find("<?xml"), std::string::npos);
    EXPECT_EQ(html.find("dot-missing"), std::string::npos);
  } else {
    EXPECT_NE(html.find("dot-missing"), std::string::npos);
  }
}

TEST_F(Report, MissingGraphvizIsANoteNotAFailure) {
  const fs::path page = root_ / "report.html";
  Result r = run({"report", run_dir_.string(), "--out", page.string(), "--dot",
                  (root_ / "no-such-dot").string()});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const std::string html = read_text(page);
  EXPECT_EQ(occurrences(html, "<svg"), 0u);
  EXPECT_EQ(occurrences(html, "class=\"note dot-missing\""), 5u);
  EXPECT_NE(html.find("apt-get install graphviz"), std::string::npos);
  // Listings instead (and one for the graph that failed to compile).
  EXPECT_EQ(occurrences(html, "<details class=\"listing\" open>"), 6u);
  EXPECT_EQ(html.find(": missing</p>"), std::string::npos);  // every file found
}

TEST_F(Report, BadRunFoldersAndArgumentsAreReported) {
  Result r = run({"report", root_.string(), "-o", (root_ / "x.html").string()});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_NE(r.err.find("is not a debug run folder (no readable index.jsonl)"), std::string::npos)
      << r.err;
  r = run({"report", (root_ / "missing").string()});
  EXPECT_EQ(r.status, kExitError);
  EXPECT_NE(r.err.find("is not a folder"), std::string::npos) << r.err;
  r = run({"report"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_NE(r.err.find("missing RUN_DIR"), std::string::npos) << r.err;
  r = run({"report", "a", "b"});
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_NE(r.err.find("unexpected argument 'b'"), std::string::npos) << r.err;
  r = run({"report", "--help"});
  EXPECT_EQ(r.status, kExitOk);
  EXPECT_NE(r.out.find("usage: kiln report RUN_DIR [options]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-o, --out FILE"), std::string::npos) << r.out;
}

TEST_F(Report, ATruncatedIndexLineIsShownAsAProblem) {
  std::ofstream(run_dir_ / "index.jsonl", std::ios::app) << "{\"event\":\"graph\",\"na";
  const fs::path page = root_ / "report.html";
  ASSERT_EQ(run({"report", run_dir_.string(), "-o", page.string()}).status, kExitOk);
  const std::string html = read_text(page);
  EXPECT_NE(html.find("class=\"note error\""), std::string::npos);
  EXPECT_EQ(occurrences(html, "<article class=\"graph\""), 5u);  // the good lines still count
}

TEST(ReportAot, TrainingShowsAotAutogradsForwardAndBackward) {
  const fs::path root = kiln::testing::fresh_test_folder("kiln-report-aot-test");
  set_debug_dir(root.string());
  const fs::path run_dir = debug_run_dir();
  auto step = kiln::compile(
      [](Tensor w) {
        Tensor loss = (w * w).sum();
        graph_break();  // graph 0 then runs with AOT autograd (a backward in a graph is traced)
        loss.backward();
        return loss;
      },
      {.backend = std::string("aot_eager"), .name = "train"});
  step(ones({3}).requires_grad_());
  set_debug_dir("");
  const fs::path page = root / "report.html";
  ASSERT_EQ(run({"report", run_dir.string(), "-o", page.string()}).status, kExitOk);
  const std::string html = read_text(page);
  // The captured graphs, then AOT autograd's forward and backward of the first, with code.
  EXPECT_EQ(occurrences(html, "<article class=\"graph\""), 2u);
  EXPECT_EQ(occurrences(html, "<article class=\"graph aot\""), 2u);
  EXPECT_NE(html.find("id=\"aot-f"), std::string::npos);
  EXPECT_NE(html.find("graph 0, AOT autograd&#39;s forward 0"), std::string::npos);
  EXPECT_NE(html.find("graph 0, AOT autograd&#39;s backward 0"), std::string::npos);
  EXPECT_NE(html.find("<b>2</b> AOT autograd graphs"), std::string::npos);
  EXPECT_NE(html.find("Backend output (eager_plan.txt)"), std::string::npos);
  EXPECT_EQ(html.find(": missing</p>"), std::string::npos);  // every file found
  fs::remove_all(root);
}

TEST(ReportIndex, ParsesEscapesAndRejectsMalformedLines) {
  report::Event e = report::parse_event(
      R"({"event":"break","reason":"a \"q\" \\ b\nc \u00e9 →","line":12,"x":-1.5e-06})");
  EXPECT_EQ(e["event"], "break");
  EXPECT_EQ(e["reason"], "a \"q\" \\ b\nc \xc3\xa9 →");
  EXPECT_EQ(e["line"], "12");
  EXPECT_EQ(e["x"], "-1.5e-06");
  for (const char* bad :
       {"", "{", "{\"a\":}", "{\"a\":\"b\"", "{\"a\":\"\\q\"}", "[1]", "{\"a\":1} trailing",
        "{\"a\":1,\"a\":2}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":tru}", "{\"a\":[1]}"})
    EXPECT_THROW(report::parse_event(bad), kiln::Error) << bad;
  EXPECT_EQ(report::html_escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
}

}  // namespace
}  // namespace kiln::cli
