// The minifier: delta debugging over a failing graph. Every candidate is a smaller graph built
// from the current one by `rebuild` (cut nodes become graph inputs holding their eager values,
// so an accuracy failure downstream still sees exact operands); a candidate is kept when it
// still fails the same way. The passes repeat until none of them shrinks the graph.
#include <algorithm>
#include <ostream>

#include "kiln/capture/repro.h"

namespace kiln::repro {

namespace {

struct Case {
  ir::Graph graph;
  std::vector<Tensor> inputs;
};

// Eager values of every node's outputs (empty for placeholders and constants' slots unused).
std::vector<std::vector<Tensor>> eager_values(const Case& c) {
  ir::Graph all = c.graph;
  all.outputs.clear();
  all.input_writes.clear();  // they name outputs by position
  for (size_t n = 0; n < all.nodes.size(); ++n)
    if (all.nodes[n].kind == ir::NodeKind::Call)
      for (size_t k = 0; k < all.nodes[n].outputs.size(); ++k)
        all.outputs.push_back({static_cast<int32_t>(n), static_cast<int32_t>(k)});
  std::vector<Tensor> flat = ir::interpret(all, c.inputs);
  std::vector<std::vector<Tensor>> values(all.nodes.size());
  for (size_t i = 0; i < all.outputs.size(); ++i) {
    const ir::ValueRef v = all.outputs[i];
    auto& slot = values[static_cast<size_t>(v.node)];
    slot.resize(all.nodes[static_cast<size_t>(v.node)].outputs.size());
    slot[static_cast<size_t>(v.output)] = flat[i].contiguous().clone();
  }
  return values;
}

// The graph keeping `c`'s nodes that `outputs` need, where each node in `cut` is replaced by
// new graph inputs holding its eager values; inputs nothing reads are dropped.
Case rebuild(const Case& c, const std::vector<std::vector<Tensor>>& values,
             const std::vector<bool>& cut, const std::vector<ir::ValueRef>& outputs) {
  const ir::Graph& g = c.graph;
  const size_t n = g.nodes.size();
  std::vector<bool> live(n, false);
  for (const ir::ValueRef& v : outputs) live[static_cast<size_t>(v.node)] = true;
  for (size_t i = n; i-- > 0;)
    if (live[i] && !cut[i])
      for (const ir::ValueRef& in : g.nodes[i].inputs) live[static_cast<size_t>(in.node)] = true;
  Case out;
  std::vector<std::vector<ir::ValueRef>> map(n);
  std::vector<int32_t> new_index(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (!live[i]) continue;
    const ir::Node& node = g.nodes[i];
    if (node.kind == ir::NodeKind::Placeholder) {
      map[i].push_back(out.graph.add_placeholder(node.outputs[0]));
      out.inputs.push_back(c.inputs[static_cast<size_t>(node.input_index)]);
    } else if (node.kind == ir::NodeKind::Constant) {
      map[i].push_back(out.graph.add_constant(node.attrs.scalar(0), node.attrs.dtype(1)));
    } else if (cut[i]) {
      for (size_t k = 0; k < node.outputs.size(); ++k) {
        // Laid out as recorded: the nodes after the cut were recorded over that layout.
        const Tensor value = laid_out_as(values[i][k], node.outputs[k]);
        map[i].push_back(out.graph.add_placeholder(TensorMeta::of(value)));
        out.inputs.push_back(value);
      }
    } else {
      std::vector<ir::ValueRef> ins;
      for (const ir::ValueRef& in : node.inputs)
        ins.push_back(map[static_cast<size_t>(in.node)][static_cast<size_t>(in.output)]);
      const ir::ValueRef first =
          out.graph.add_call(*node.op, std::move(ins), node.attrs, node.outputs, node.loc);
      new_index[i] = first.node;
      for (size_t k = 0; k < node.outputs.size(); ++k)
        map[i].push_back({first.node, static_cast<int32_t>(k)});
    }
  }
  for (const ir::ValueRef& v : outputs)
    out.graph.outputs.push_back(map[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)]);
  for (const ir::RuntimeAttr& r : g.runtime_attrs)
    if (new_index[static_cast<size_t>(r.node)] >= 0)
      out.graph.runtime_attrs.push_back({new_index[static_cast<size_t>(r.node)], r.attr});
  return out;
}

class Minifier {
 public:
  Minifier(const ReproCase& c, const Backend& backend, std::ostream* log)
      : backend_(backend), kind_(c.kind), tolerance_(c.tolerance), log_(log) {
    current_ = {c.graph, c.inputs};
  }

  // Whether `c` still fails as the original did (and is still a graph of ops).
  bool fails(const Case& c) {
    if (c.graph.num_calls() == 0 || c.graph.outputs.empty()) return false;
    ++checks_;
    const Failure f = check_backend(c.graph, c.inputs, backend_, tolerance_);
    if (f.failed && f.kind == kind_) last_message_ = f.message;
    return f.failed && f.kind == kind_;
  }

  void run() {
    KILN_CHECK(fails(current_), Error, "minify: the case does not fail on its backend (expected a ",
               failure_kind_name(kind_), " failure); nothing to minify");
    message_ = last_message_;
    for (bool changed = true; changed;) {
      changed = truncate_suffix();
      changed = cut_nodes() || changed;
      changed = drop_outputs() || changed;
    }
  }

  const Case& result() const { return current_; }
  int64_t checks() const { return checks_; }
  const std::string& message() const { return message_; }

 private:
  bool accept_if_fails(Case candidate, const char* what) {
    if (candidate.graph.num_calls() >= current_.graph.num_calls() &&
        candidate.graph.outputs.size() >= current_.graph.outputs.size() &&
        candidate.inputs.size() >= current_.inputs.size())
      return false;  // not smaller: would loop forever
    if (!fails(candidate)) return false;
    if (log_)
      *log_ << "minify: " << what << ": " << current_.graph.num_calls() << " -> "
            << candidate.graph.num_calls() << " ops\n";
    current_ = std::move(candidate);
    message_ = last_message_;
    return true;
  }

  std::vector<size_t> call_nodes() const {
    std::vector<size_t> calls;
    for (size_t i = 0; i < current_.graph.nodes.size(); ++i)
      if (current_.graph.nodes[i].kind == ir::NodeKind::Call) calls.push_back(i);
    return calls;
  }

  // The graph ending after node `last`: its outputs are the values defined up to `last` that
  // later nodes or the graph's outputs read.
  Case prefix(size_t last, const std::vector<std::vector<Tensor>>& values) const {
    const ir::Graph& g = current_.graph;
    std::vector<ir::ValueRef> outs;
    auto add = [&](ir::ValueRef v) {
      if (static_cast<size_t>(v.node) <= last && g.nodes[v.node].kind == ir::NodeKind::Call &&
          std::find(outs.begin(), outs.end(), v) == outs.end())
        outs.push_back(v);
    };
    for (size_t i = last + 1; i < g.nodes.size(); ++i)
      for (const ir::ValueRef& in : g.nodes[i].inputs) add(in);
    for (const ir::ValueRef& v : g.outputs) add(v);
    return rebuild(current_, values, std::vector<bool>(g.nodes.size(), false), outs);
  }

  // Binary search for the shortest failing prefix (a failure upstream usually survives cutting
  // everything after it).
  bool truncate_suffix() {
    const std::vector<size_t> calls = call_nodes();
    if (calls.size() < 2) return false;
    const auto values = eager_values(current_);
    size_t lo = 0, hi = calls.size() - 1;  // the prefix ending at calls[hi] is the whole graph
    std::optional<Case> best;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      Case candidate = prefix(calls[mid], values);
      if (candidate.graph.num_calls() > 0 && fails(candidate)) {
        hi = mid;
        best = std::move(candidate);
      } else {
        lo = mid + 1;
      }
    }
    return best && accept_if_fails(std::move(*best), "truncate after the failure");
  }

  // Delta debugging: replace runs of nodes (halves, quarters, ... single nodes) by inputs.
  bool cut_nodes() {
    bool any = false;
    for (size_t chunk = std::max<size_t>(call_nodes().size() / 2, 1);; chunk /= 2) {
      for (size_t start = 0;;) {
        const std::vector<size_t> calls = call_nodes();
        if (start >= calls.size()) break;
        const auto values = eager_values(current_);
        std::vector<bool> cut(current_.graph.nodes.size(), false);
        for (size_t k = start; k < std::min(start + chunk, calls.size()); ++k) cut[calls[k]] = true;
        if (accept_if_fails(rebuild(current_, values, cut, current_.graph.outputs),
                            "replace nodes by inputs")) {
          any = true;  // the same start now names the nodes after the removed ones
        } else {
          start += chunk;
        }
      }
      if (chunk == 1) break;
    }
    return any;
  }

  // Drop outputs one at a time (their producers go with them when nothing else reads them).
  bool drop_outputs() {
    bool any = false;
    for (size_t i = 0; i < current_.graph.outputs.size() && current_.graph.outputs.size() > 1;) {
      std::vector<ir::ValueRef> outs = current_.graph.outputs;
      outs.erase(outs.begin() + static_cast<std::ptrdiff_t>(i));
      const auto values = eager_values(current_);
      if (accept_if_fails(rebuild(current_, values,
                                  std::vector<bool>(current_.graph.nodes.size(), false), outs),
                          "drop an output"))
        any = true;
      else
        ++i;
    }
    return any;
  }

  Backend backend_;
  FailureKind kind_;
  double tolerance_;
  std::ostream* log_;
  Case current_;
  int64_t checks_ = 0;
  std::string last_message_, message_;
};

}  // namespace

MinifyResult minify(const ReproCase& c, const Backend& backend, std::ostream* log) {
  Minifier m(c, backend, log);
  m.run();
  MinifyResult r;
  r.minimal = c;
  r.minimal.graph = m.result().graph;
  r.minimal.inputs = m.result().inputs;
  r.minimal.message = m.message();
  r.ops_before = c.graph.num_calls();
  r.ops_after = r.minimal.graph.num_calls();
  r.checks = m.checks();
  return r;
}

}  // namespace kiln::repro
