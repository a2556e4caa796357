// The graph interpreter: a flat slot table planned once, kernels called directly once the
// graph's recorded metadata has been checked against a real run.
#include "kiln/ir/interpreter.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "ir/attr_utils.h"
#include "kiln/autograd/autograd.h"
#include "kiln/ops/pointwise.h"
#include "ops/op_utils.h"
#include "ops/schema.h"

namespace kiln::ir {

Interpreter::Interpreter(std::shared_ptr<const Graph> graph) : graph_(std::move(graph)) {
  const Graph& g = *graph_;
  const auto num_nodes = static_cast<int32_t>(g.nodes.size());
  slot_of_.resize(g.nodes.size());
  for (int32_t i = 0; i < num_nodes; ++i) {
    slot_of_[static_cast<size_t>(i)] = num_slots_;
    num_slots_ += static_cast<int32_t>(g.nodes[static_cast<size_t>(i)].outputs.size());
  }
  auto slot = [&](ValueRef v, const char* who) {
    KILN_CHECK(
        v.node >= 0 && v.node < num_nodes && v.output >= 0 &&
            static_cast<size_t>(v.output) < g.nodes[static_cast<size_t>(v.node)].outputs.size(),
        Error, "interpret: ", who, " reads %", v.node, ".", v.output, ", which no node produced");
    return slot_of_[static_cast<size_t>(v.node)] + v.output;
  };
  // The last step reading each slot; graph outputs live to the end.
  std::vector<int32_t> last_reader(static_cast<size_t>(num_slots_), -1);
  uint32_t runtime = 0;
  for (int32_t i = 0; i < num_nodes; ++i) {
    const Node& n = g.nodes[static_cast<size_t>(i)];
    Step s{i,
           slot_of_[static_cast<size_t>(i)],
           static_cast<uint32_t>(input_slots_.size()),
           0,
           runtime,
           runtime,
           0,
           0};
    if (n.kind == NodeKind::Call) {
      KILN_CHECK(n.op, Error, "interpret: node ", i, " calls no op");
      const std::string why = schema_mismatch(*n.op, n.inputs.size(), n.attrs);
      KILN_CHECK(why.empty(), Error, "interpret: node ", i, ": ", why);
    }
    for (ValueRef v : n.inputs) {
      KILN_CHECK(v.node < i, Error, "interpret: node ", i, " (", n.op ? n.op->name : "?",
                 ") reads %", v.node, ".", v.output, ", which no earlier node produced");
      const int32_t sl = slot(v, "a node");
      input_slots_.push_back(sl);
      last_reader[static_cast<size_t>(sl)] = static_cast<int32_t>(steps_.size());
    }
    s.inputs_end = static_cast<uint32_t>(input_slots_.size());
    while (runtime < g.runtime_attrs.size() && g.runtime_attrs[runtime].node == i) ++runtime;
    s.runtime_end = runtime;
    steps_.push_back(s);
  }
  KILN_CHECK(runtime == g.runtime_attrs.size(), Error,
             "interpret: the graph's runtime attributes are not in node order");
  for (ValueRef v : g.outputs) last_reader[static_cast<size_t>(slot(v, "the graph's return"))] = -2;
  // Release lists, grouped by step.
  std::vector<std::vector<int32_t>> dead(steps_.size());
  for (int32_t sl = 0; sl < num_slots_; ++sl)
    if (last_reader[static_cast<size_t>(sl)] >= 0)
      dead[static_cast<size_t>(last_reader[static_cast<size_t>(sl)])].push_back(sl);
  for (size_t k = 0; k < steps_.size(); ++k) {
    steps_[k].release_begin = static_cast<uint32_t>(release_.size());
    release_.insert(release_.end(), dead[k].begin(), dead[k].end());
    steps_[k].release_end = static_cast<uint32_t>(release_.size());
  }
}

namespace {
// Whether an op's results can be allocated from recorded metadata and its kernel called
// directly (views build their result, opaque ops allocate their own).
bool direct_kernel(const OpDef& op) {
  return op.kind != OpKind::View && op.kind != OpKind::Opaque && op.kind != OpKind::DataDependent;
}
}  // namespace

std::vector<Tensor> Interpreter::run(std::span<const Tensor> inputs,
                                     std::span<const int64_t> runtime_values) const {
  const Graph& g = *graph_;
  KILN_CHECK(inputs.size() == static_cast<size_t>(g.num_inputs()), Error,
             "interpret: the graph takes ", g.num_inputs(), " inputs, got ", inputs.size());
  KILN_CHECK(runtime_values.empty() || runtime_values.size() == g.runtime_attrs.size(), Error,
             "interpret: the graph has ", g.runtime_attrs.size(), " runtime attributes, got ",
             runtime_values.size(), " values");
  // Eager kernels only: no capture of these calls, no autograd recording (autograd was
  // recorded around the graph when it was captured).
  InterceptorScope no_interceptor(nullptr);
  AutoGradMode no_grad(false);
  const bool verified = verified_.load(std::memory_order_acquire);
  std::vector<Tensor> slots(static_cast<size_t>(num_slots_));
  std::vector<Tensor> ins;  // one node's inputs, reused
  for (const Step& s : steps_) {
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    Tensor* out = &slots[static_cast<size_t>(s.first_slot)];
    switch (n.kind) {
      case NodeKind::Placeholder: {
        const Tensor& t = inputs[static_cast<size_t>(n.input_index)];
        const TensorMeta& want = n.outputs[0];
        KILN_CHECK(t.defined() && t.dtype() == want.dtype && t.sizes() == want.sizes, Error,
                   "interpret: input ", n.input_index, " is ",
                   t.defined() ? detail::concat(t.dtype(), t.shape_str()) : "undefined",
                   " but the graph was built for ", want.dtype, IntList(want.sizes));
        *out = t;
        break;
      }
      case NodeKind::Constant:
        *out = constant_value(n);
        break;
      case NodeKind::Call: {
        ins.clear();
        for (uint32_t k = s.inputs_begin; k < s.inputs_end; ++k)
          ins.push_back(slots[static_cast<size_t>(input_slots_[k])]);
        // Runtime attributes take this run's values.
        const Attrs* attrs = &n.attrs;
        Attrs patched;
        if (!runtime_values.empty() && s.runtime_begin != s.runtime_end) {
          patched = n.attrs;
          for (uint32_t r = s.runtime_begin; r < s.runtime_end; ++r)
            patched =
                with_attr(patched, static_cast<size_t>(g.runtime_attrs[r].attr), runtime_values[r]);
          attrs = &patched;
        }
        if (as_strided_attrs_at(g, n, ins, patched)) attrs = &patched;
        const auto m = static_cast<int>(n.outputs.size());
        if (verified && direct_kernel(*n.op)) {
          run_kernel_fresh(OpCall{*n.op, ins, *attrs}, n.outputs,
                           std::span<Tensor>(out, static_cast<size_t>(m)));
        } else {
          std::array<Tensor, kMaxOpOutputs> results;
          const int got = dispatch_no_autograd(*n.op, ins, *attrs, results);
          KILN_CHECK(got == m, Error, "interpret: node ", s.node, " (", n.op->name, ") made ", got,
                     " outputs but the graph records ", m);
          for (int k = 0; k < m; ++k) {
            const TensorMeta& want = n.outputs[static_cast<size_t>(k)];
            const Tensor& r = results[static_cast<size_t>(k)];
            KILN_CHECK(r.dtype() == want.dtype && r.sizes() == want.sizes, Error,
                       "interpret: node ", s.node, " (", n.op->name, ") output ", k, " is ",
                       r.dtype(), r.shape_str(), " but the graph records ", want.dtype,
                       IntList(want.sizes));
            out[k] = std::move(results[static_cast<size_t>(k)]);
          }
        }
        ins.clear();  // so that the release below frees what this node read
        break;
      }
    }
    for (uint32_t k = s.release_begin; k < s.release_end; ++k)
      slots[static_cast<size_t>(release_[k])] = Tensor();
  }
  if (!verified) verified_.store(true, std::memory_order_release);
  std::vector<Tensor> result;
  result.reserve(g.outputs.size());
  for (ValueRef v : g.outputs)
    result.push_back(slots[static_cast<size_t>(slot_of_[static_cast<size_t>(v.node)] + v.output)]);
  return result;
}

Tensor constant_value(const Node& constant) {
  Tensor t = wrap_scalar(constant.attrs.scalar(0));
  if (t.dtype() != constant.attrs.dtype(1)) t = ops::cast(t, constant.attrs.dtype(1));
  t.impl()->set_wrapped_number(true);
  return t;
}

std::string Interpreter::describe_plan() const {
  const Graph& g = *graph_;
  std::ostringstream os;
  os << "eager interpreter plan: " << steps_.size() << " steps over " << num_slots_
     << " value slots; each slot is released after its last reader.\n"
     << "The first run dispatches every op and checks results against the graph's metadata;\n"
     << "later runs allocate results from that metadata and call 'direct' kernels straight.\n";
  for (size_t k = 0; k < steps_.size(); ++k) {
    const Step& s = steps_[k];
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    os << "step " << k << ": %" << s.node << " ";
    switch (n.kind) {
      case NodeKind::Placeholder:
        os << "input " << n.input_index;
        break;
      case NodeKind::Constant:
        os << "constant " << n.attrs.scalar(0);
        break;
      case NodeKind::Call: {
        os << n.op->name << "(";
        for (uint32_t i = s.inputs_begin; i < s.inputs_end; ++i)
          os << (i == s.inputs_begin ? "" : ", ") << "slot " << input_slots_[i];
        os << ") " << (direct_kernel(*n.op) ? "direct" : "dispatched");
        break;
      }
    }
    os << " -> slot" << (n.outputs.size() > 1 ? "s " : " ") << s.first_slot;
    if (n.outputs.size() > 1)
      os << ".." << s.first_slot + static_cast<int32_t>(n.outputs.size()) - 1;
    if (s.release_begin != s.release_end) {
      os << "; release";
      for (uint32_t i = s.release_begin; i < s.release_end; ++i) os << " " << release_[i];
    }
    os << "\n";
  }
  os << "return";
  for (ValueRef v : g.outputs) os << " slot " << slot_of_[static_cast<size_t>(v.node)] + v.output;
  os << "\n";
  return os.str();
}

std::vector<Tensor> interpret(const Graph& g, std::span<const Tensor> inputs,
                              std::span<const int64_t> runtime_values) {
  // A one-off run: the interpreter borrows the graph (an owner-less shared_ptr).
  return Interpreter(std::shared_ptr<const Graph>(std::shared_ptr<const Graph>(), &g))
      .run(inputs, runtime_values);
}

}  // namespace kiln::ir
