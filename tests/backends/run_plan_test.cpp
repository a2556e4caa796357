// The inductor backend's run plan (run_plan.h) on graphs given as text: slots, when they die,
// donated buffers and in-place writes. No C++ compiler is involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backends/inductor/run_plan.h"
#include "backends/inductor/schedule.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

struct Planned {
  ir::Graph graph;
  inductor::Schedule schedule;
  inductor::RunPlan plan;
};

// (Heap-allocated: the plan points into the graph.)
std::unique_ptr<Planned> plan(const std::string& text) {
  auto p = std::make_unique<Planned>();
  p->graph = ir::parse_graph(text);
  p->schedule = inductor::schedule_graph(p->graph);
  p->plan = inductor::make_run_plan(p->graph, p->schedule, inductor::cpp_renderer());
  return p;
}

bool released_after(const inductor::RunPlan& plan, size_t step, size_t slot) {
  const auto& dead = plan.release_after.at(step);
  return std::find(dead.begin(), dead.end(), slot) != dead.end();
}

// exp(matmul(x, w)): the product is an extern call, the exp a kernel that may write its result
// into the product's buffer, which dies there.
constexpr const char* kMatmulThenExp = R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
input 3 2,8,8 2,8,1 0 0
call matmul 2 0:0 1:0 0 1 3 2,4,8 2,8,1 0
call exp 1 2:0 0 1 3 2,4,8 2,8,1 0
output 1 3:0
)";

TEST(RunPlan, SlotsAreForValuesBetweenStepsAndDieAfterTheirLastReader) {
  const auto p = plan(kMatmulThenExp);
  const inductor::RunPlan& rp = p->plan;
  ASSERT_EQ(p->schedule.steps.size(), 2u);
  EXPECT_EQ(rp.num_slots, 4u);
  EXPECT_EQ(rp.placeholders.size(), 2u);
  // The inputs die after the matmul, the product after the kernel; the result lives on.
  EXPECT_TRUE(released_after(rp, 0, rp.slot({0, 0})));
  EXPECT_TRUE(released_after(rp, 0, rp.slot({1, 0})));
  EXPECT_TRUE(released_after(rp, 1, rp.slot({2, 0})));
  EXPECT_FALSE(released_after(rp, 1, rp.slot({3, 0})));
  ASSERT_EQ(rp.kernel_shapes.size(), 1u);
  EXPECT_EQ(rp.kernel_shapes[0][0], 32);  // its elements
}

TEST(RunPlan, AKernelOutputTakesTheBufferOfAnIntermediateThatDiesThere) {
  const auto p = plan(kMatmulThenExp);
  ASSERT_EQ(p->plan.donor_slot.size(), 1u);
  EXPECT_EQ(p->plan.donor_slot[0][0], static_cast<int64_t>(p->plan.slot({2, 0})));
  // A graph input is never donated (its memory is the caller's).
  const auto q = plan(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
call exp 1 0:0 0 1 3 2,4,8 2,8,1 0
output 1 1:0
)");
  EXPECT_EQ(q->plan.donor_slot[0][0], -1);
}

TEST(RunPlan, AnOutputWrittenBackIntoAnInputIsComputedInItsMemory) {
  // x.exp_(): the graph returns exp(x) and Kiln writes it back into input 0.
  const auto p = plan(R"(kiln-graph 1
input 3 2,4,8 2,8,1 0 0
input 3 2,4,8 2,8,1 0 0
call exp 1 0:0 0 1 3 2,4,8 2,8,1 0
call mul 2 2:0 1:0 0 1 3 2,4,8 2,8,1 0
output 1 3:0
input_write 0 0
)");
  ASSERT_EQ(p->plan.in_place.size(), 1u);
  const auto& write = p->plan.in_place[0][0];
  ASSERT_TRUE(write.has_value());
  EXPECT_EQ(write->input, 0);
  // Input 1 is read by the kernel only where it writes: it may be the same memory, if it
  // starts where input 0 does.
  EXPECT_EQ(write->same_place_inputs, (std::vector<int32_t>{1}));
  EXPECT_TRUE(write->late_inputs.empty());
  Tensor a = randn({4, 8}), b = randn({4, 8});
  EXPECT_TRUE(inductor::RunPlan::can_write_in_place(*write, std::vector<Tensor>{a, b}));
  EXPECT_TRUE(inductor::RunPlan::can_write_in_place(*write, std::vector<Tensor>{a, a}));
  // The same memory elsewhere (shifted by a row): no.
  Tensor big = randn({5, 8});
  EXPECT_FALSE(inductor::RunPlan::can_write_in_place(
      *write, std::vector<Tensor>{big.slice(0, 0, 4), big.slice(0, 1, 5)}));
}

}  // namespace
}  // namespace kiln
