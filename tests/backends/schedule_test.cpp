// The inductor scheduler on graphs given as text (ir::parse_graph): which ops share a kernel,
// which run as extern calls, and why an op did not fuse. No C++ compiler is involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/inductor/schedule.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

struct Scheduled {
  inductor::Schedule schedule;
  std::vector<std::string> decisions;
  int64_t externs() const {
    return std::count_if(schedule.steps.begin(), schedule.steps.end(), [](const inductor::Step& s) {
      return s.kind == inductor::Step::Kind::Extern;
    });
  }
  bool decided(const std::string& line) const {
    return std::find(decisions.begin(), decisions.end(), line) != decisions.end();
  }
  std::string all() const {
    std::string out;
    for (const std::string& d : decisions) out += d + "\n";
    return out;
  }
};

Scheduled schedule(const std::string& text) {
  Scheduled s;
  s.schedule = inductor::schedule_graph(ir::parse_graph(text), &s.decisions);
  return s;
}

// Members of kernel k, by node.
std::vector<int32_t> members(const inductor::Schedule& s, size_t k) {
  std::vector<int32_t> nodes;
  for (const inductor::KernelOp& op : s.kernels.at(k).ops)
    if (op.output == 0) nodes.push_back(op.node);
  return nodes;
}

TEST(Scheduler, APointwiseChainIsOneKernelThatWritesOnlyWhatIsReturned) {
  // exp(x) * x over [4, 8].
  const Scheduled s = schedule(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
call exp 1 0:0 0 1 3 2,4,8 2,8,1 0
call mul 2 1:0 0:0 0 1 3 2,4,8 2,8,1 0
output 1 2:0
)");
  ASSERT_EQ(s.schedule.kernels.size(), 1u);
  EXPECT_EQ(s.externs(), 0);
  EXPECT_EQ(members(s.schedule, 0), (std::vector<int32_t>{1, 2}));
  ASSERT_EQ(s.schedule.kernels[0].outputs.size(), 1u);
  EXPECT_EQ(s.schedule.kernels[0].outputs[0].value.node, 2);
  EXPECT_TRUE(s.schedule.fused_away[1]);
  EXPECT_TRUE(s.decided("%1 (exp) starts kernel_0 over [4, 8]")) << s.all();
  EXPECT_TRUE(s.decided("fused %2 (mul) into kernel_0 (reads its result)")) << s.all();
}

TEST(Scheduler, AnOpOverAnotherIterationSpaceStartsAKernelAndSaysWhy) {
  // exp(x) over [4, 8] and exp(y) over [8]: nothing shared, two loops.
  const Scheduled s = schedule(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
input 3 1,8 1,1 0 0
call exp 1 0:0 0 1 3 2,4,8 2,8,1 0
call exp 1 1:0 0 1 3 1,8 1,1 0
output 2 2:0 3:0
)");
  ASSERT_EQ(s.schedule.kernels.size(), 2u);
  EXPECT_TRUE(
      s.decided("cannot fuse %3 (exp) into kernel_0: it iterates over [8], the kernel over [4, 8]"))
      << s.all();
  EXPECT_TRUE(s.decided("%3 (exp) starts kernel_1 over [8]")) << s.all();
}

TEST(Scheduler, AColumnReductionsResultIsReadByTheNextKernel) {
  // s = sum(exp(x), dim 0) over a [64, 32] x (a column reduction), then exp(x) * s: the product
  // reads s, which is complete only when the reduction's kernel ends.
  const Scheduled s = schedule(R"(kiln-graph 1
input 3 2,64,32 2,32,1 0 0
call exp 1 0:0 0 1 3 2,64,32 2,32,1 0
call sum 1 1:0 3 v1,0 b0 n 1 3 1,32 1,1 0
call mul 2 1:0 2:0 0 1 3 2,64,32 2,32,1 0
output 1 3:0
)");
  ASSERT_EQ(s.schedule.kernels.size(), 2u);
  EXPECT_EQ(members(s.schedule, 0), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(members(s.schedule, 1), (std::vector<int32_t>{3}));
  EXPECT_TRUE(s.schedule.kernels[0].folds_columns());
  // exp(x) is read by the second kernel, so the first writes it as well as the sum.
  EXPECT_EQ(s.schedule.kernels[0].outputs.size(), 2u);
  EXPECT_TRUE(
      s.decided("cannot fuse %3 (mul) into kernel_0: it reads column reduction %2, "
                "whose result is complete only when the kernel ends"))
      << s.all();
}

TEST(Scheduler, OpsWithoutAGeneratedBodyAreExternCalls) {
  // matmul(x, w) then exp: the product is an extern call, the exp a kernel after it.
  const Scheduled s = schedule(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
input 3 2,8,3 2,3,1 0 0
call matmul 2 0:0 1:0 0 1 3 2,4,3 2,3,1 0
call exp 1 2:0 0 1 3 2,4,3 2,3,1 0
output 1 3:0
)");
  ASSERT_EQ(s.schedule.kernels.size(), 1u);
  ASSERT_EQ(s.schedule.steps.size(), 2u);
  EXPECT_EQ(s.schedule.steps[0].kind, inductor::Step::Kind::Extern);
  EXPECT_EQ(s.schedule.steps[0].index, 2);
  EXPECT_EQ(s.schedule.steps[1].kind, inductor::Step::Kind::Kernel);
}

TEST(Scheduler, DecisionsGoToTheFusionLogTopic) {
  std::vector<std::string> lines;
  set_log_sink([&](const std::string& line) { lines.push_back(line); });
  set_logs("fusion");
  inductor::schedule_graph(ir::parse_graph(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
call exp 1 0:0 0 1 3 2,4,8 2,8,1 0
output 1 1:0
)"));
  set_logs("");
  set_log_sink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "[kiln:fusion] %1 (exp) starts kernel_0 over [4, 8]");
}

}  // namespace
}  // namespace kiln
