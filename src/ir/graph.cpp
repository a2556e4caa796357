// The graph IR: building, the structural hash and equality the capture cache uses, recompile
// reasons, and the printed listing. (The text form is serialize.cpp, the interpreter
// interpreter.cpp, the passes passes.cpp.)
#include "kiln/ir/graph.h"

#include <bit>
#include <sstream>

#include "ir/attr_utils.h"
#include "ir/compare.h"
#include "ir/hashing.h"

namespace kiln::ir {

std::string SourceLoc::str() const {
  std::ostringstream os;
  if (!file.empty()) os << file << ":" << line;
  if (!function.empty()) os << (file.empty() ? "" : " ") << "in " << function;
  return os.str();
}

// ---- building ----
ValueRef Graph::add_placeholder(const TensorMeta& info) {
  Node n;
  n.kind = NodeKind::Placeholder;
  n.input_index = num_inputs_++;
  n.outputs.push_back(info);
  nodes.push_back(std::move(n));
  return {static_cast<int32_t>(nodes.size() - 1), 0};
}

ValueRef Graph::add_constant(const Scalar& value, DType dtype) {
  Node n;
  n.kind = NodeKind::Constant;
  n.attrs = Attrs{value, dtype};
  n.outputs.push_back({dtype, {}, {}, 0, false});
  nodes.push_back(std::move(n));
  return {static_cast<int32_t>(nodes.size() - 1), 0};
}

ValueRef Graph::add_call(const OpDef& op, std::vector<ValueRef> inputs, Attrs attrs,
                         std::vector<TensorMeta> outputs, SourceLoc loc) {
  Node n;
  n.kind = NodeKind::Call;
  n.op = &op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.outputs = std::move(outputs);
  n.loc = std::move(loc);
  nodes.push_back(std::move(n));
  return {static_cast<int32_t>(nodes.size() - 1), 0};
}

int64_t Graph::num_calls() const {
  int64_t n = 0;
  for (const Node& node : nodes) n += node.kind == NodeKind::Call;
  return n;
}

std::vector<int64_t> Graph::runtime_attr_values() const {
  std::vector<int64_t> out;
  out.reserve(runtime_attrs.size());
  for (const RuntimeAttr& r : runtime_attrs) out.push_back(nodes[r.node].attrs.i(r.attr));
  return out;
}

// ---- hashing and equality ----
namespace {}  // namespace

uint64_t grad_bits(const Node& n) {
  uint64_t bits = 0;
  for (size_t k = 0; k < n.outputs.size() && k < 64; ++k)
    if (n.outputs[k].requires_grad) bits |= uint64_t{1} << k;
  return bits;
}

bool is_runtime_attr(const Graph& g, size_t node, size_t attr) {
  for (const RuntimeAttr& r : g.runtime_attrs)
    if (r.node == static_cast<int32_t>(node) && r.attr == static_cast<int32_t>(attr)) return true;
  return false;
}

uint64_t Graph::hash() const {
  Hasher h;
  h.add(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    h.add(static_cast<uint64_t>(n.kind));
    // By name, not by address: the hash must mean the same in every process (disk caches).
    if (n.op) h.add_bytes(n.op->name);
    h.add(n.inputs.size());
    for (ValueRef v : n.inputs) h.add((static_cast<uint64_t>(v.node) << 8) ^ v.output);
    for (size_t k = 0; k < n.attrs.size(); ++k)
      if (runtime_attrs.empty() || !is_runtime_attr(*this, i, k)) h.add(n.attrs[k]);
    // Op outputs follow from inputs and attributes; only placeholders carry guarded metadata,
    // and calls whether their outputs require grad (AOT autograd records it; grad mode).
    if (n.kind == NodeKind::Placeholder) h.add_guarded(n.outputs[0]);
    if (n.kind == NodeKind::Call) h.add(grad_bits(n));
  }
  h.add(outputs.size());
  for (ValueRef v : outputs) h.add((static_cast<uint64_t>(v.node) << 8) ^ v.output);
  if (!input_writes.empty()) h.add(input_writes.size());
  for (const InputWrite& w : input_writes)
    h.add((static_cast<uint64_t>(w.output) << 32) ^ static_cast<uint32_t>(w.input));
  return h.h;
}

bool same_node_at(const Graph& a, const Graph& b, size_t i) {
  const Node& x = a.nodes[i];
  const Node& y = b.nodes[i];
  if (x.kind != y.kind || x.op != y.op || x.inputs != y.inputs || x.attrs.size() != y.attrs.size())
    return false;
  for (size_t k = 0; k < x.attrs.size(); ++k)
    if (!is_runtime_attr(a, i, k) && !same_attr(x.attrs[k], y.attrs[k])) return false;
  if (x.kind == NodeKind::Call) return grad_bits(x) == grad_bits(y);
  return x.kind != NodeKind::Placeholder || same_guarded_meta(x.outputs[0], y.outputs[0]);
}

bool same_guarded_meta(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.sizes == b.sizes && a.strides == b.strides &&
         a.requires_grad == b.requires_grad;
}

bool structurally_equal(const Graph& a, const Graph& b) {
  if (a.nodes.size() != b.nodes.size() || a.outputs != b.outputs ||
      a.runtime_attrs != b.runtime_attrs || a.input_writes != b.input_writes)
    return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (!same_node_at(a, b, i)) return false;
  return true;
}

namespace {
std::string short_dtype(DType d) {
  switch (d) {
    case DType::Bool:
      return "b8";
    case DType::Int32:
      return "i32";
    case DType::Int64:
      return "i64";
    case DType::Float32:
      return "f32";
    case DType::Float64:
      return "f64";
  }
  return "?";
}

std::string describe_input_change(const std::string& label, const TensorMeta& a,
                                  const TensorMeta& b) {
  std::ostringstream os;
  os << label << ": ";
  if (a.dtype != b.dtype) {
    os << "dtype changed " << a.dtype << " → " << b.dtype;
  } else if (a.sizes.size() != b.sizes.size()) {
    os << "number of dims changed " << a.sizes.size() << " → " << b.sizes.size() << " (shape "
       << IntList(a.sizes) << " → " << IntList(b.sizes) << ")";
  } else if (a.sizes != b.sizes) {
    for (size_t d = 0; d < a.sizes.size(); ++d)
      if (a.sizes[d] != b.sizes[d]) {
        os << "size of dim " << d << " changed " << a.sizes[d] << " → " << b.sizes[d];
        break;
      }
  } else if (a.strides != b.strides) {
    os << "strides changed " << IntList(a.strides) << " → " << IntList(b.strides);
  } else {
    os << "requires_grad changed " << (a.requires_grad ? "true" : "false") << " → "
       << (b.requires_grad ? "true" : "false");
  }
  return os.str();
}

std::string node_label(const Node& n, size_t i) {
  std::ostringstream os;
  os << "node " << i << " (" << (n.op ? std::string(n.op->name) : "constant") << ")";
  return os.str();
}
}  // namespace

std::string describe_difference(const Graph& a, const Graph& b,
                                const std::function<std::string(int32_t)>& input_label) {
  std::ostringstream os;
  // Inputs first: they are what users change most, and what guards compare.
  for (size_t i = 0; i < a.nodes.size() && i < b.nodes.size(); ++i) {
    const Node& x = a.nodes[i];
    const Node& y = b.nodes[i];
    if (x.kind == NodeKind::Placeholder && y.kind == NodeKind::Placeholder &&
        !same_guarded_meta(x.outputs[0], y.outputs[0]))
      return describe_input_change(
          input_label ? input_label(y.input_index) : detail::concat("input ", y.input_index),
          x.outputs[0], y.outputs[0]);
  }
  for (size_t i = 0; i < a.nodes.size() && i < b.nodes.size(); ++i) {
    const Node& x = a.nodes[i];
    const Node& y = b.nodes[i];
    if (x.kind != y.kind || x.op != y.op) {
      os << "node " << i << " changed from " << (x.op ? x.op->name : "a non-op node") << " to "
         << (y.op ? y.op->name : "a non-op node");
      return os.str();
    }
    if (x.kind == NodeKind::Constant && !same_attr(x.attrs[0], y.attrs[0])) {
      os << "constant at node " << i << " changed " << x.attrs[0] << " → " << y.attrs[0];
      return os.str();
    }
    if (x.inputs != y.inputs) return node_label(y, i) + " takes different inputs";
    for (size_t k = 0; k < x.attrs.size() && k < y.attrs.size(); ++k) {
      if (is_runtime_attr(a, i, k) || same_attr(x.attrs[k], y.attrs[k])) continue;
      std::string name = x.op && k < x.op->attr_names.size() ? std::string(x.op->attr_names[k])
                                                             : detail::concat("#", k);
      os << "constant " << name << " of " << node_label(y, i) << " changed " << x.attrs[k] << " → "
         << y.attrs[k];
      return os.str();
    }
  }
  if (a.nodes.size() != b.nodes.size()) {
    os << "the graph has " << b.num_calls() << " ops where the cached one has " << a.num_calls();
    return os.str();
  }
  if (a.outputs != b.outputs) return "the graph returns different values";
  if (a.input_writes != b.input_writes) return "the graph writes different inputs in place";
  if (!structurally_equal(a, b)) return "the graph differs";
  return "";
}

// ---- printing ----
namespace {
std::string info_str(const TensorMeta& t) {
  std::ostringstream os;
  os << short_dtype(t.dtype) << IntList(t.sizes);
  return os.str();
}
std::string ref_str(ValueRef v) {
  // (detail::concat, not "%" + std::string: GCC 12 warns -Wrestrict, falsely, inside that +.)
  return v.output ? detail::concat("%", v.node, ".", v.output) : detail::concat("%", v.node);
}
}  // namespace

std::string Graph::to_string() const {
  std::ostringstream os;
  os << "graph(";
  bool first = true;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind != NodeKind::Placeholder) continue;
    os << (first ? "" : ", ") << "%" << i << ": " << info_str(n.outputs[0]);
    const TensorMeta& t = n.outputs[0];
    if (t.strides != contiguous_strides(t.sizes) || t.storage_offset)
      os << " strides=" << IntList(t.strides) << (t.storage_offset ? " offset=" : "")
         << (t.storage_offset ? std::to_string(t.storage_offset) : "");
    if (t.requires_grad) os << " requires_grad";
    first = false;
  }
  os << "):\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.kind == NodeKind::Placeholder) continue;
    std::ostringstream line;
    line << "  %" << i;
    for (size_t k = 1; k < n.outputs.size(); ++k) line << ", %" << i << "." << k;
    if (n.kind == NodeKind::Constant) {
      line << " = constant(" << n.attrs[0] << ") : " << short_dtype(n.attrs.dtype(1));
    } else {
      line << " = " << n.op->name << "(";
      for (size_t k = 0; k < n.inputs.size(); ++k) line << (k ? ", " : "") << ref_str(n.inputs[k]);
      for (size_t k = 0; k < n.attrs.size(); ++k) {
        line << (n.inputs.empty() && k == 0 ? "" : ", ");
        if (k < n.op->attr_names.size()) line << n.op->attr_names[k] << "=";
        line << n.attrs[k];
      }
      line << ") : ";
      for (size_t k = 0; k < n.outputs.size(); ++k)
        line << (k ? ", " : "") << info_str(n.outputs[k]);
    }
    std::string s = line.str();
    if (n.loc.known())
      s += std::string(s.size() < 60 ? 60 - s.size() : 1, ' ') + "# " + n.loc.str();
    os << s << "\n";
  }
  os << "  return (";
  for (size_t k = 0; k < outputs.size(); ++k) os << (k ? ", " : "") << ref_str(outputs[k]);
  os << ")\n";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Graph& g) { return os << g.to_string(); }

}  // namespace kiln::ir
