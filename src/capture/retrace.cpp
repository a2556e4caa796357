// Tracing below the frontend, and the decomposition pass built on it (see retrace.h).
#include "capture/retrace.h"

#include "capture/tracer.h"
#include "ir/graph_rebuild.h"
#include "ops/op_utils.h"

namespace kiln::ops {
extern const OpDef& to_copy_op;
}  // namespace kiln::ops

namespace kiln::capture {

namespace {

std::shared_ptr<detail::CompiledState> retrace_state() {
  static auto st = [] {
    CompileOptions o;
    o.name = "re-trace";
    // Not the default backend: metadata-only runs must not record gradients AOT-style (autograd
    // records formulas and allow_in_graph functions as it does eagerly).
    o.backend = std::string("eager");
    return detail::make_compiled_state(o, std::source_location::current());
  }();
  return st;
}

// Whether a view op in `sub` reads placeholder `index` directly: its recorded layout assumed a
// contiguous input.
bool views_placeholder(const ir::Graph& sub, int32_t index) {
  for (const ir::Node& n : sub.nodes) {
    if (n.kind != ir::NodeKind::Call || n.op->kind != OpKind::View) continue;
    const ir::Node& in = sub.nodes[static_cast<size_t>(n.inputs[0].node)];
    if (in.kind == ir::NodeKind::Placeholder && in.input_index == index) return true;
  }
  return false;
}

}  // namespace

MetadataOnlyRun::MetadataOnlyRun(const std::string& who)
    : tracer_(std::make_unique<Tracer>(retrace_state(), false)) {
  tracer_->set_metadata_only(who);
  frames().push_back({tracer_.get(), false});
  intercept_ = std::make_unique<InterceptorScope>(tracer_.get());
  no_grad_ = std::make_unique<AutoGradMode>(false);
}

MetadataOnlyRun::~MetadataOnlyRun() {
  no_grad_.reset();
  intercept_.reset();
  tracer_->abandon("metadata-only run");
  frames().pop_back();
}

Tensor MetadataOnlyRun::symbolic_input(const TensorMeta& meta) {
  return tracer_->symbolic_input(meta);
}
void MetadataOnlyRun::adopt_graph(const ir::Graph& g) { tracer_->adopt_graph(g); }
Tensor MetadataOnlyRun::value_tensor(ir::ValueRef v) { return tracer_->value_tensor(v); }
ir::Graph MetadataOnlyRun::take_graph(std::span<const Tensor> results) {
  return tracer_->take_graph(results);
}

ir::Graph trace_graph(std::span<const TensorMeta> inputs, const TracedFn& fn,
                      const std::string& who) {
  MetadataOnlyRun run(who);
  std::vector<Tensor> symbolic;
  for (const TensorMeta& m : inputs) symbolic.push_back(run.symbolic_input(m));
  const std::vector<Tensor> results = fn(symbolic);
  return run.take_graph(results);
}

ir::Graph decompose_graph(const ir::Graph& g,
                          const std::function<bool(const ir::Node&)>& decompose) {
  ir::GraphRebuild rebuild(g);
  ir::Graph& out = rebuild.out();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.kind != ir::NodeKind::Call || !decompose(n)) {
      rebuild.copy(i);
      continue;
    }
    KILN_CHECK(n.op->has_decomposition(n.attrs), Error, "internal error: '", n.op->name,
               "' has no decomposition for these attributes");
    const std::vector<ir::ValueRef> ins = rebuild.mapped_inputs(n);
    // Re-trace the decomposition on stand-ins for the node's inputs.
    std::vector<TensorMeta> metas;
    for (ir::ValueRef v : n.inputs) metas.push_back(g.info(v));
    const size_t num_outputs = n.outputs.size();
    ir::Graph sub = trace_graph(
        metas,
        [&](std::span<const Tensor> symbolic) {
          const OpCall call{*n.op, symbolic, n.attrs};
          std::array<Tensor, kMaxOpOutputs> results;
          n.op->decomposition(call, std::span<Tensor>(results.data(), num_outputs));
          return std::vector<Tensor>(results.begin(), results.begin() + num_outputs);
        },
        detail::concat("the decomposition of '", n.op->name, "'"));
    // Splice it in: its placeholders are the node's (mapped) inputs.
    std::vector<ir::ValueRef> sub_value(sub.nodes.size());  // each sub node's first output
    auto spliced = [&](ir::ValueRef v) {
      const ir::ValueRef first = sub_value[static_cast<size_t>(v.node)];
      return ir::ValueRef{first.node, first.output + v.output};
    };
    for (size_t j = 0; j < sub.nodes.size(); ++j) {
      const ir::Node& s = sub.nodes[j];
      if (s.kind == ir::NodeKind::Placeholder) {
        ir::ValueRef in = ins[static_cast<size_t>(s.input_index)];
        // A view in the decomposition was traced over a contiguous stand-in: give it one.
        if (!ops::is_contiguous_layout(out.info(in)) && views_placeholder(sub, s.input_index)) {
          const TensorMeta& m = out.info(in);
          in = out.add_call(ops::to_copy_op, {in}, Attrs{m.dtype},
                            {TensorMeta::contiguous(m.dtype, m.sizes)}, n.loc);
        }
        sub_value[j] = in;
      } else if (s.kind == ir::NodeKind::Constant) {
        sub_value[j] = out.add_constant(s.attrs.scalar(0), s.attrs.dtype(1));
      } else {
        std::vector<ir::ValueRef> sub_ins;
        for (ir::ValueRef v : s.inputs) sub_ins.push_back(spliced(v));
        sub_value[j] = out.add_call(*s.op, std::move(sub_ins), s.attrs, s.outputs, n.loc);
      }
    }
    std::vector<ir::ValueRef> values;
    for (size_t k = 0; k < num_outputs; ++k) {
      const ir::ValueRef v = spliced(sub.outputs[k]);
      const TensorMeta& got = out.info(v);
      KILN_CHECK(got.dtype == n.outputs[k].dtype && got.sizes == n.outputs[k].sizes, Error,
                 "the decomposition of '", n.op->name, "' returns output ", k, " as ", got.dtype,
                 " ", IntList(got.sizes), " but the op's is ", n.outputs[k].dtype, " ",
                 IntList(n.outputs[k].sizes));
      values.push_back(v);
    }
    rebuild.replace(i, std::move(values));
  }
  return rebuild.finish();
}

}  // namespace kiln::capture
