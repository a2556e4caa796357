// The inductor backend's lowering driver: a captured graph through the backend's graph rewrites
// (graph_rewrites.h), decompositions, CSE and DCE, then the scheduler (schedule.h). The backend,
// explain()'s counts and the tests that pre-compile its modules all lower through here, so
// what they see is what runs.
#pragma once

#include <cstdint>

#include "backends/inductor/schedule.h"
#include "kiln/ir/graph.h"

namespace kiln::inductor {

// What the backend generates code for: the captured graph with the ops generated code computes
// through their decomposition replaced by it (see decomposed_in_generated_code), and its
// schedule. The backend and the tests that pre-compile its modules both lower through here.
struct LoweredGraph {
  ir::Graph graph;
  Schedule schedule;
};
LoweredGraph lower_graph(const ir::Graph& captured);

// What inductor makes of a captured graph, in numbers (explain(), CompileProfiler): lowered as
// the backend lowers it; nothing is compiled.
struct ScheduleSummary {
  int64_t kernels = 0;       // generated loops
  int64_t extern_calls = 0;  // ops run by their eager kernels
};
ScheduleSummary summarize(const ir::Graph& captured);
// The numbers of a schedule already made.
ScheduleSummary summary_of(const Schedule& schedule);

}  // namespace kiln::inductor
