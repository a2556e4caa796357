#include "backends/inductor/lower.h"

#include <chrono>

#include "backends/inductor/graph_rewrites.h"
#include "capture/retrace.h"
#include "core/clock.h"
#include "diagnostics/diagnostics.h"
#include "kiln/ir/passes.h"

namespace kiln::inductor {

namespace {
// The lowering pipeline; `timed`: its phases are added to the compile times (the backend), or
// not (explain's counts).
LoweredGraph lower(const ir::Graph& captured, bool timed) {
  using Clock = std::chrono::steady_clock;
  auto phase_done = [&](const char* phase, Clock::time_point& t) {
    if (timed) diagnostics::add_compile_time(phase, detail::seconds_since(t));
    t = Clock::now();
  };
  LoweredGraph out;
  auto t = Clock::now();
  // Kernels address views through their recorded layouts: a wrong one is an error here, never
  // a wrong read (checked as handed over, and after inductor's own rewrites).
  ir::check_view_layouts(captured, "the graph handed to inductor");
  out.graph = capture::decompose_graph(captured, decomposed_in_generated_code);
  read_column_reductions_through_flattening(out.graph);
  elide_copies_of_unshared_values(out.graph);
  // What decompositions share with the rest of the graph (gelu's erf with its derivative's)
  // is computed once.
  ir::eliminate_common_subexpressions(out.graph);
  ir::eliminate_dead_code(out.graph);
  ir::check_view_layouts(out.graph, "inductor's lowered graph");
  phase_done("inductor_decompose", t);
  out.schedule = schedule_graph(out.graph);
  phase_done("inductor_schedule", t);
  return out;
}
}  // namespace

LoweredGraph lower_graph(const ir::Graph& captured) { return lower(captured, /*timed=*/true); }

ScheduleSummary summarize(const ir::Graph& captured) {
  // The backend's own lowering (CSE and DCE included), so the counts are what runs.
  return summary_of(lower(captured, /*timed=*/false).schedule);
}

ScheduleSummary summary_of(const Schedule& schedule) {
  ScheduleSummary out;
  out.kernels = static_cast<int64_t>(schedule.kernels.size());
  for (const Step& st : schedule.steps) out.extern_calls += st.kind == Step::Kind::Extern;
  return out;
}

}  // namespace kiln::inductor
