// The exact text form of a graph, for debug dumps and repros: one record per line,
//   kiln-graph 1
//   input <dtype> <sizes> <strides> <offset> <requires_grad>
//   constant <scalar> <dtype>
//   call <op> <n-inputs> <node:output>... <n-attrs> <attr>... <n-outputs> (<dtype> <sizes>
//   <strides> <offset>)... [grad <bits>]
//   output <n> <node:output>...
//   runtime <node> <attr>
//   input_write <output> <input>   (after the output line)
// A call's `grad <bits>` (bit k: output k requires grad) is written only when some bit is set;
// text written before it existed reads as outputs that do not require grad.
// Attributes are typed: n (none), i<int>, d<hex float>, b<0|1>, t<dtype>, s<dtype-letter><value>,
// v<n>,<e1>,..., q<length>:<bytes>.
#include <cstdint>
#include <cstring>
#include <sstream>
#include <variant>

#include "kiln/ir/graph.h"
#include "ops/schema.h"

namespace kiln::ir {

namespace {

std::string hex_double(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", d);
  return buf;
}

void write_shape(std::ostream& os, const Shape& s) {
  os << s.size();
  for (int64_t v : s) os << "," << v;
}

void write_scalar(std::ostream& os, const Scalar& s) {
  if (s.is_floating())
    os << "F" << hex_double(s.to_double());
  else if (s.is_bool())
    os << "B" << s.to_int();
  else
    os << "I" << s.to_int();
}

void write_attr(std::ostream& os, const AttrValue& v) {
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::monostate>) {
          os << "n";
        } else if constexpr (std::is_same_v<X, int64_t>) {
          os << "i" << x;
        } else if constexpr (std::is_same_v<X, double>) {
          os << "d" << hex_double(x);
        } else if constexpr (std::is_same_v<X, bool>) {
          os << "b" << (x ? 1 : 0);
        } else if constexpr (std::is_same_v<X, DType>) {
          os << "t" << static_cast<int>(x);
        } else if constexpr (std::is_same_v<X, Scalar>) {
          os << "s";
          write_scalar(os, x);
        } else if constexpr (std::is_same_v<X, std::vector<int64_t>>) {
          os << "v" << x.size();
          for (int64_t e : x) os << "," << e;
        } else {
          os << "q" << x.size() << ":" << x;
        }
      },
      v);
}

void write_info(std::ostream& os, const TensorMeta& t) {
  os << static_cast<int>(t.dtype) << " ";
  write_shape(os, t.sizes);
  os << " ";
  write_shape(os, t.strides);
  os << " " << t.storage_offset;
}

// A cursor over one line, throwing a kiln::Error that names the line on any malformed field.
struct Reader {
  std::string line;
  size_t pos = 0;
  int lineno;
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(detail::concat("parse_graph: line ", lineno, ": ", what, " in '", line, "'"));
  }
  bool at_end() {
    while (pos < line.size() && line[pos] == ' ') ++pos;
    return pos >= line.size();
  }
  std::string word() {
    if (at_end()) fail("unexpected end of line");
    size_t start = pos;
    while (pos < line.size() && line[pos] != ' ') ++pos;
    return line.substr(start, pos - start);
  }
  int64_t integer(std::string_view s) const {
    try {
      size_t used = 0;
      int64_t v = std::stoll(std::string(s), &used);
      if (used != s.size()) fail("bad integer '" + std::string(s) + "'");
      return v;
    } catch (const std::logic_error&) {
      fail("bad integer '" + std::string(s) + "'");
    }
  }
  int64_t integer() { return integer(word()); }
  // A node, output or attribute index: must fit an int32 (a larger one would wrap around).
  int32_t index(std::string_view s) const {
    const int64_t v = integer(s);
    if (v < INT32_MIN || v > INT32_MAX) fail("index " + std::string(s) + " out of range");
    return static_cast<int32_t>(v);
  }
  // A count of items still to come on this line (each needs at least one character).
  size_t count() {
    const int64_t n = integer();
    if (n < 0 || static_cast<size_t>(n) > line.size()) fail("bad count " + std::to_string(n));
    return static_cast<size_t>(n);
  }
  double real(std::string_view s) const {
    char* end = nullptr;
    std::string str(s);
    double v = std::strtod(str.c_str(), &end);
    if (str.empty() || end != str.c_str() + str.size()) fail("bad number '" + str + "'");
    return v;
  }
  DType dtype(int64_t v) const {
    if (v < 0 || v >= kNumDTypes) fail("bad dtype " + std::to_string(v));
    return static_cast<DType>(v);
  }
  std::vector<int64_t> list(std::string_view s) const {
    std::vector<int64_t> out;
    size_t comma = s.find(',');
    int64_t n = integer(s.substr(0, comma));
    if (n < 0 || static_cast<size_t>(n) > s.size()) fail("bad list length");
    while (comma != std::string_view::npos) {
      size_t next = s.find(',', comma + 1);
      out.push_back(integer(s.substr(
          comma + 1, next == std::string_view::npos ? std::string_view::npos : next - comma - 1)));
      comma = next;
    }
    if (static_cast<int64_t>(out.size()) != n) fail("list length does not match its elements");
    return out;
  }
  Shape shape() { return Shape(list(word())); }
  Scalar scalar(std::string_view s) const {
    if (s.empty()) fail("empty scalar");
    std::string_view v = s.substr(1);
    switch (s[0]) {
      case 'F':
        return Scalar(real(v));
      case 'B':
        return Scalar(integer(v) != 0);
      case 'I':
        return Scalar(integer(v));
    }
    fail("bad scalar '" + std::string(s) + "'");
  }
  AttrValue attr() {
    if (at_end()) fail("missing attribute");
    const char tag = line[pos++];
    if (tag == 'q') {  // length-prefixed: may contain spaces
      size_t colon = line.find(':', pos);
      if (colon == std::string::npos) fail("bad string attribute");
      int64_t len = integer(std::string_view(line).substr(pos, colon - pos));
      if (len < 0 || colon + 1 + static_cast<size_t>(len) > line.size())
        fail("string attribute runs past the line");
      pos = colon + 1 + static_cast<size_t>(len);
      return line.substr(colon + 1, static_cast<size_t>(len));
    }
    if (tag == 'n') {  // a bare tag: the next word is the next field, not its value
      if (pos < line.size() && line[pos] != ' ') fail("bad 'none' attribute");
      return std::monostate{};
    }
    std::string w = word();
    switch (tag) {
      case 'i':
        return integer(w);
      case 'd':
        return real(w);
      case 'b':
        return integer(w) != 0;
      case 't':
        return dtype(integer(w));
      case 's':
        return scalar(w);
      case 'v':
        return list(w);
    }
    fail(std::string("unknown attribute tag '") + tag + "'");
  }
  TensorMeta info() {
    TensorMeta t;
    t.dtype = dtype(integer());
    t.sizes = shape();
    t.strides = shape();
    t.storage_offset = integer();
    if (t.sizes.size() != t.strides.size()) fail("sizes and strides differ in length");
    return t;
  }
  // The optional `grad <bits>` after a call's outputs: which of them require grad.
  void grad_bits(std::vector<TensorMeta>& outs) {
    const size_t start = pos;
    if (at_end() || word() != "grad") {
      pos = start;
      return;
    }
    const int64_t bits = integer();
    if (bits <= 0 || (outs.size() < 63 && bits >> outs.size() != 0))
      fail("bad grad bits " + std::to_string(bits) + " for " + std::to_string(outs.size()) +
           " outputs");
    for (size_t k = 0; k < outs.size() && k < 63; ++k) outs[k].requires_grad = (bits >> k) & 1;
  }
  ValueRef ref(int32_t num_nodes) {
    std::string w = word();
    size_t colon = w.find(':');
    if (colon == std::string::npos) fail("bad value reference '" + w + "'");
    ValueRef v{index(std::string_view(w).substr(0, colon)),
               index(std::string_view(w).substr(colon + 1))};
    if (v.node < 0 || v.node >= num_nodes || v.output < 0)
      fail("reference to a node not defined before it: " + w);
    return v;
  }
};

}  // namespace

std::string Graph::serialize() const {
  std::ostringstream os;
  os << "kiln-graph 1\n";
  for (const Node& n : nodes) {
    switch (n.kind) {
      case NodeKind::Placeholder:
        os << "input ";
        write_info(os, n.outputs[0]);
        os << " " << (n.outputs[0].requires_grad ? 1 : 0) << "\n";
        break;
      case NodeKind::Constant:
        os << "constant ";
        write_scalar(os, n.attrs.scalar(0));
        os << " " << static_cast<int>(n.attrs.dtype(1)) << "\n";
        break;
      case NodeKind::Call:
        os << "call " << n.op->name << " " << n.inputs.size();
        for (ValueRef v : n.inputs) os << " " << v.node << ":" << v.output;
        os << " " << n.attrs.size();
        for (size_t k = 0; k < n.attrs.size(); ++k) {
          os << " ";
          write_attr(os, n.attrs[k]);
        }
        os << " " << n.outputs.size();
        uint64_t grad_bits = 0;
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          os << " ";
          write_info(os, n.outputs[k]);
          if (n.outputs[k].requires_grad && k < 63) grad_bits |= uint64_t{1} << k;
        }
        if (grad_bits != 0) os << " grad " << grad_bits;
        os << "\n";
        break;
    }
  }
  os << "output " << outputs.size();
  for (ValueRef v : outputs) os << " " << v.node << ":" << v.output;
  os << "\n";
  for (const RuntimeAttr& r : runtime_attrs) os << "runtime " << r.node << " " << r.attr << "\n";
  for (const InputWrite& w : input_writes)
    os << "input_write " << w.output << " " << w.input << "\n";
  return os.str();
}

Graph parse_graph(const std::string& text) {
  Graph g;
  std::istringstream is(text);
  std::string line;
  int lineno = 0;
  bool header = false, has_output = false;
  while (std::getline(is, line)) {
    ++lineno;
    Reader r{line, 0, lineno};
    if (r.at_end()) continue;
    const std::string kind = r.word();
    const auto num_nodes = static_cast<int32_t>(g.nodes.size());
    auto check_output = [&](ValueRef v) {
      if (static_cast<size_t>(v.output) >= g.nodes[v.node].outputs.size())
        r.fail("node " + std::to_string(v.node) + " has no output " + std::to_string(v.output));
      return v;
    };
    if (!header) {
      if (kind != "kiln-graph" || r.integer() != 1) r.fail("expected the header 'kiln-graph 1'");
      header = true;
    } else if (kind == "input") {
      TensorMeta t = r.info();
      t.requires_grad = r.integer() != 0;
      g.add_placeholder(t);
    } else if (kind == "constant") {
      Scalar s = r.scalar(r.word());
      g.add_constant(s, r.dtype(r.integer()));
    } else if (kind == "call") {
      std::string name = r.word();
      const OpDef* op = find_op(name);
      if (!op) r.fail("unknown op '" + name + "'");
      std::vector<ValueRef> ins(r.count());
      for (ValueRef& v : ins) v = check_output(r.ref(num_nodes));
      Attrs attrs;
      const int64_t na = r.integer();
      if (na < 0 || na > static_cast<int64_t>(Attrs::kMax)) r.fail("bad attribute count");
      for (int64_t k = 0; k < na; ++k) attrs.push_back(r.attr());
      if (const std::string why = schema_mismatch(*op, ins.size(), attrs); !why.empty())
        r.fail(why);
      std::vector<TensorMeta> outs(r.count());
      for (TensorMeta& t : outs) t = r.info();
      r.grad_bits(outs);
      g.add_call(*op, std::move(ins), std::move(attrs), std::move(outs));
    } else if (kind == "output") {
      g.outputs.resize(r.count());
      for (ValueRef& v : g.outputs) v = check_output(r.ref(num_nodes));
      has_output = true;
    } else if (kind == "runtime") {
      const int32_t node = r.index(r.word());
      const int32_t attr = r.index(r.word());
      RuntimeAttr ra{node, attr};
      if (ra.node < 0 || ra.node >= num_nodes ||
          ra.attr >= static_cast<int32_t>(g.nodes[ra.node].attrs.size()) || ra.attr < 0)
        r.fail("runtime attribute out of range");
      // Runtime values are integers (a seed, an offset): Graph::runtime_attr_values reads them so.
      if (!std::holds_alternative<int64_t>(g.nodes[ra.node].attrs[static_cast<size_t>(ra.attr)]))
        r.fail("runtime attribute is not an integer attribute");
      g.runtime_attrs.push_back(ra);
    } else if (kind == "input_write") {
      const int32_t output = r.index(r.word());
      const int32_t input = r.index(r.word());
      if (!has_output || output < 0 || output >= static_cast<int32_t>(g.outputs.size()))
        r.fail("input_write: no such output (the output line comes first)");
      if (input < 0 || input >= g.num_inputs()) r.fail("input_write: no such input");
      g.input_writes.push_back({output, input});
    } else {
      r.fail("unknown record '" + kind + "'");
    }
    if (!r.at_end()) r.fail("trailing text");
  }
  KILN_CHECK(header, Error, "parse_graph: empty input (expected the header 'kiln-graph 1')");
  KILN_CHECK(has_output, Error, "parse_graph: the graph has no 'output' line");
  return g;
}

}  // namespace kiln::ir
