// The graph IR: an SSA list of nodes (placeholders, op calls, constants) with outputs, as
// captured by kiln::compile and handed to a backend. Printable (one line per node, like an FX
// graph listing), structurally hashable and comparable, interpretable with the eager kernels,
// and serialisable to a text form that parses back. The passes (DCE, CSE) live in passes.h.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::ir {

// Where in the user's code a node or a graph break came from ("" when unknown).
struct SourceLoc {
  std::string file;
  int line = 0;
  std::string function;
  bool known() const { return !file.empty() || !function.empty(); }
  std::string str() const;  // "file.cpp:12 in toy_example"
};

// One output of one node.
struct ValueRef {
  int32_t node = -1;
  int32_t output = 0;
  friend bool operator==(const ValueRef&, const ValueRef&) = default;
};

enum class NodeKind : uint8_t {
  Placeholder,  // graph input i (a concrete tensor of the caller)
  Constant,     // a C++ number used as a tensor operand (`x * 2`): a 0-d wrapped number
  Call,         // an op call
};

struct Node {
  NodeKind kind = NodeKind::Call;
  const OpDef* op = nullptr;     // Call only
  std::vector<ValueRef> inputs;  // Call only
  Attrs attrs;                   // Call: the op's attributes; Constant: {Scalar value, DType}
  int32_t input_index = -1;      // Placeholder only: which graph input
  std::vector<TensorMeta> outputs;
  SourceLoc loc;  // empty when unknown
};

// Attributes whose values are supplied per run rather than baked into the graph: the Philox
// seed and offset of random ops, which change on every call but must not cause a recompile.
struct RuntimeAttr {
  int32_t node;
  int32_t attr;
  friend bool operator==(const RuntimeAttr&, const RuntimeAttr&) = default;
};

// An output that the caller stores into an input after the call: a tensor the captured code
// wrote in place (an optimizer's parameter update) whose graph input is the flat, contiguous
// whole of its memory. A backend may compute the output directly in that input's memory and
// return the input itself, which saves the copy; one that does not returns a fresh tensor.
struct InputWrite {
  int32_t output;
  int32_t input;
  friend bool operator==(const InputWrite&, const InputWrite&) = default;
};

class Graph {
 public:
  std::vector<Node> nodes;
  std::vector<ValueRef> outputs;
  std::vector<RuntimeAttr> runtime_attrs;
  std::vector<InputWrite> input_writes;  // part of the graph's identity (hash, equality)

  int32_t num_inputs() const { return num_inputs_; }
  ValueRef add_placeholder(const TensorMeta& info);
  ValueRef add_constant(const Scalar& value, DType dtype);
  // Appends a call node; returns a reference to its first output.
  ValueRef add_call(const OpDef& op, std::vector<ValueRef> inputs, Attrs attrs,
                    std::vector<TensorMeta> outputs, SourceLoc loc = {});
  const TensorMeta& info(ValueRef v) const { return nodes[v.node].outputs[v.output]; }
  // Number of op-call nodes (what explain reports as ops).
  int64_t num_calls() const;

  // Structural hash: ops, attributes (runtime attributes excluded), wiring, input metadata and
  // constant values. Equal graphs hash equally; see structurally_equal.
  uint64_t hash() const;
  // The values of the runtime attributes in this graph, in runtime_attrs order.
  std::vector<int64_t> runtime_attr_values() const;

  // Readable listing, one line per node, like an FX graph's.
  std::string to_string() const;
  // Exact text form (every attribute typed, floats bit-exact); parse_graph reads it back.
  std::string serialize() const;

 private:
  int32_t num_inputs_ = 0;
};

bool structurally_equal(const Graph& a, const Graph& b);
// What a cache hit requires of a graph input: the same dtype, sizes, strides and requires_grad.
// Not its storage offset (torch's tensor guards do not check it either): compiled code reads an
// input from its own data pointer, so a loop over `data.narrow(0, i, bs)` reuses one graph.
// An as_strided node's absolute offset moves with its input's (as_strided_attrs_at).
bool same_guarded_meta(const TensorMeta& a, const TensorMeta& b);
// The first difference between two graphs in words ("input 0: size of dim 1 changed 16 → 24",
// "constant at node 7 changed 0.5 → 0.25"), "" when structurally equal. `old_graph` is the
// cached one.
// `input_label(i)` names graph input i in the words (default: "input i"); the capture names what
// the user knows it as ("argument 1", "parameter 'fc1.weight'").
std::string describe_difference(
    const Graph& old_graph, const Graph& new_graph,
    const std::function<std::string(int32_t input)>& input_label = nullptr);
std::ostream& operator<<(std::ostream& os, const Graph& g);
// Reads serialize()'s form back; throws kiln::Error naming the line on malformed input or an
// unknown op.
Graph parse_graph(const std::string& text);

// The 0-d wrapped-number tensor a Constant node stands for.
Tensor constant_value(const Node& constant);

// Runs the graph with the eager kernels (no autograd recording, no capture): `inputs` are the
// placeholders' tensors, `runtime_values` the runtime attributes' values (runtime_attr_values()
// order; empty means the values baked into the graph). Returns the outputs.
std::vector<Tensor> interpret(const Graph& g, std::span<const Tensor> inputs,
                              std::span<const int64_t> runtime_values = {});

}  // namespace kiln::ir
