// Tracing below the frontend: a function of tensors traced on metadata-only tensors into a
// graph, with no data touched and nothing run. Backends use it to apply decompositions (each
// op that has one is replaced by the ops its decomposition calls), and AOT autograd to trace
// joint graphs.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/autograd/autograd.h"
#include "kiln/ir/graph.h"

namespace kiln::capture {

class Tracer;

// A metadata-only run for the scope's life: ops dispatched on this thread record into
// tracer()'s graph (no data touched, autograd recording off), and errors name `who`.
// trace_graph is built on it; AOT autograd uses it to extend a forward graph with its backward.
class MetadataOnlyRun {
 public:
  explicit MetadataOnlyRun(const std::string& who);
  ~MetadataOnlyRun();
  MetadataOnlyRun(const MetadataOnlyRun&) = delete;
  MetadataOnlyRun& operator=(const MetadataOnlyRun&) = delete;
  // A new graph input of `meta`'s dtype and sizes, as a pending tensor to compute with.
  Tensor symbolic_input(const TensorMeta& meta);
  // Extending a graph (AOT autograd's joint graph): the run's graph starts as a copy of `g`
  // without its outputs, and value_tensor(v) is a pending tensor holding g's value v.
  void adopt_graph(const ir::Graph& g);
  Tensor value_tensor(ir::ValueRef v);
  // The graph recorded, with `results` as its outputs.
  ir::Graph take_graph(std::span<const Tensor> results);

 private:
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<InterceptorScope> intercept_;
  std::unique_ptr<AutoGradMode> no_grad_;
};

// The graph of the ops `fn` calls on placeholders with `inputs`' dtypes and sizes (traced as
// contiguous tensors); its outputs are fn's results. `who` names the function in errors: fn
// must be functional in its inputs (no in-place writes to them), read no concrete tensor
// (create values through ops) and call no random op and no sync point (item(), printing).
using TracedFn = std::function<std::vector<Tensor>(std::span<const Tensor> inputs)>;
ir::Graph trace_graph(std::span<const TensorMeta> inputs, const TracedFn& fn,
                      const std::string& who);

// `g` with every call node for which `decompose(node)` holds (its op must have a
// decomposition) replaced by the ops of its decomposition, re-traced. Placeholders, their
// order and the outputs' metadata are unchanged; so are random ops' runtime attributes.
ir::Graph decompose_graph(const ir::Graph& g,
                          const std::function<bool(const ir::Node&)>& decompose);

}  // namespace kiln::capture
