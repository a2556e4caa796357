// The graph IR: building, printing, hashing, serialisation round trips, passes, interpreter.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/ir/interpreter.h"
#include "kiln/ir/passes.h"
#include "kiln/kiln.h"

namespace kiln::ir {
namespace {

const OpDef& op(const char* name) { return *find_op(name); }

// %0 + %1, then exp, plus a dead mul and a duplicated exp.
Graph sample_graph() {
  Graph g;
  TensorMeta info{DType::Float32, {2, 3}, {3, 1}, 0, false};
  ValueRef a = g.add_placeholder(info);
  ValueRef b = g.add_placeholder(info);
  ValueRef s = g.add_call(op("add"), {a, b}, Attrs{Scalar(1)}, {info});
  ValueRef e1 = g.add_call(op("exp"), {s}, Attrs{}, {info});
  ValueRef e2 = g.add_call(op("exp"), {s}, Attrs{}, {info});
  g.add_call(op("mul"), {a, b}, Attrs{}, {info});  // dead
  ValueRef half = g.add_constant(Scalar(0.5), DType::Float64);
  ValueRef out = g.add_call(op("mul"), {e1, half}, Attrs{}, {info});
  ValueRef out2 = g.add_call(op("add"), {out, e2}, Attrs{Scalar(1)}, {info});
  g.outputs = {out2};
  return g;
}

TEST(Graph, PrintsOneLinePerNode) {
  std::string s = sample_graph().to_string();
  EXPECT_NE(s.find("graph(%0: f32[2, 3], %1: f32[2, 3]):"), std::string::npos) << s;
  EXPECT_NE(s.find("%2 = add(%0, %1, alpha=1) : f32[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("constant(0.5)"), std::string::npos) << s;
  EXPECT_NE(s.find("return (%8)"), std::string::npos) << s;
}

TEST(Graph, HashAndEqualityAreStructural) {
  Graph a = sample_graph(), b = sample_graph();
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_TRUE(structurally_equal(a, b));
  b.nodes[0].outputs[0].sizes = {2, 4};
  EXPECT_FALSE(structurally_equal(a, b));
  EXPECT_NE(a.hash(), b.hash());
  EXPECT_EQ(describe_difference(a, b), "input 0: size of dim 1 changed 3 → 4");
  Graph c = sample_graph();
  c.nodes[6].attrs = Attrs{Scalar(0.25), DType::Float64};
  EXPECT_EQ(describe_difference(a, c), "constant at node 6 changed 0.5 → 0.25");
}

TEST(Graph, SerialisationRoundTrips) {
  Graph g = sample_graph();
  g.nodes[0].outputs[0].requires_grad = true;
  Graph back = parse_graph(g.serialize());
  EXPECT_TRUE(structurally_equal(g, back));
  EXPECT_EQ(back.serialize(), g.serialize());
  // Random ops keep their runtime attributes.
  Graph r;
  r.add_call(op("normal"), {},
             Attrs{std::vector<int64_t>{3}, DType::Float32, 0.0, 1.0, int64_t{7}, int64_t{11}},
             {{DType::Float32, {3}, {1}, 0, false}});
  r.outputs = {{0, 0}};
  r.runtime_attrs = {{0, 4}, {0, 5}};
  Graph r2 = parse_graph(r.serialize());
  EXPECT_EQ(r2.runtime_attrs, r.runtime_attrs);
  EXPECT_EQ(r2.runtime_attr_values(), (std::vector<int64_t>{7, 11}));
}

// Outputs written back into an input are part of a graph's identity and of its text form: a
// graph that returns a value is not the graph that writes it into its input.
TEST(Graph, InputWritesAreStructuralAndSerialised) {
  Graph plain = sample_graph(), writes = sample_graph();
  writes.input_writes = {{0, 1}};
  EXPECT_FALSE(structurally_equal(plain, writes));
  EXPECT_NE(plain.hash(), writes.hash());
  EXPECT_EQ(describe_difference(plain, writes), "the graph writes different inputs in place");
  Graph back = parse_graph(writes.serialize());
  EXPECT_EQ(back.input_writes, writes.input_writes);
  EXPECT_TRUE(structurally_equal(writes, back));
  const std::string text = writes.serialize();
  const std::string bad_output = text.substr(0, text.find("input_write")) + "input_write 3 1\n";
  EXPECT_THROW(parse_graph(bad_output), Error);
  const std::string bad_input = text.substr(0, text.find("input_write")) + "input_write 0 9\n";
  EXPECT_THROW(parse_graph(bad_input), Error);
}

// AOT autograd records which call outputs require grad (they are part of the hash), so a repro
// of its graphs must keep them; text without them still parses, as outputs that do not.
TEST(Graph, SerialisationKeepsWhichCallOutputsRequireGrad) {
  Graph g = sample_graph();
  g.nodes[0].outputs[0].requires_grad = true;
  g.nodes[2].outputs[0].requires_grad = true;  // %2 = add(%0, %1)
  g.nodes[4].outputs[0].requires_grad = true;
  const std::string text = g.serialize();
  EXPECT_NE(text.find(" grad 1\n"), std::string::npos) << text;
  Graph back = parse_graph(text);
  EXPECT_TRUE(structurally_equal(g, back));
  EXPECT_EQ(back.hash(), g.hash());
  EXPECT_TRUE(back.nodes[2].outputs[0].requires_grad);
  EXPECT_FALSE(back.nodes[3].outputs[0].requires_grad);
  EXPECT_TRUE(back.nodes[4].outputs[0].requires_grad);
  EXPECT_EQ(back.serialize(), text);

  // max has two outputs (values, indices); only the values require grad: bit 0.
  Graph m;
  const TensorMeta x{DType::Float32, {2, 3}, {3, 1}, 0, true};
  const ValueRef in = m.add_placeholder(x);
  const ValueRef values =
      m.add_call(op("max_dim"), {in}, Attrs{int64_t{1}, false},
                 {{DType::Float32, {2}, {1}, 0, true}, {DType::Int64, {2}, {1}, 0, false}});
  m.outputs = {values, {values.node, 1}};
  Graph m2 = parse_graph(m.serialize());
  EXPECT_TRUE(m2.nodes[1].outputs[0].requires_grad);
  EXPECT_FALSE(m2.nodes[1].outputs[1].requires_grad);
  EXPECT_TRUE(structurally_equal(m, m2));

  const std::string input = "kiln-graph 1\ninput 3 1,2 1,1 0 1\n";
  const std::string call = "call neg 1 0:0 0 1 3 1,2 1,1 0";
  EXPECT_FALSE(parse_graph(input + call + "\noutput 1 1:0\n").nodes[1].outputs[0].requires_grad);
  EXPECT_TRUE(
      parse_graph(input + call + " grad 1\noutput 1 1:0\n").nodes[1].outputs[0].requires_grad);
  for (const char* bad : {" grad 2", " grad 0", " grad -1", " grad", " grad x", " grad 1 1"})
    EXPECT_THROW(parse_graph(input + call + bad + "\noutput 1 1:0\n"), Error) << bad;
}

TEST(Graph, ParseErrorsNameTheLine) {
  EXPECT_THROW(parse_graph(""), Error);
  EXPECT_THROW(parse_graph("kiln-graph 1\ncall no_such_op 0 0 0\noutput 0\n"), Error);
  EXPECT_THROW(parse_graph("kiln-graph 1\noutput 1 5:0\n"), Error);
  try {
    parse_graph("kiln-graph 1\ninput 3 1,2 1,1 0 0\ninput zz\n");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(Graph, ParseChecksEachCallAgainstItsOpsSchema) {
  const std::string input = "kiln-graph 1\ninput 3 1,2 1,1 0 0\n";
  auto error_of = [](const std::string& text) -> std::string {
    try {
      parse_graph(text);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // neg takes one tensor, no attributes; add takes two tensors and a Scalar alpha.
  const std::string two_inputs =
      error_of(input + "call neg 2 0:0 0:0 0 1 3 1,2 1,1 0\noutput 1 1:0\n");
  EXPECT_NE(two_inputs.find("line 3"), std::string::npos) << two_inputs;
  EXPECT_NE(two_inputs.find("neg takes 1 tensor inputs, not 2"), std::string::npos) << two_inputs;
  const std::string wrong_type =
      error_of(input + "call add 2 0:0 0:0 1 i1 1 3 1,2 1,1 0\noutput 1 1:0\n");
  EXPECT_NE(wrong_type.find("alpha"), std::string::npos) << wrong_type;
  const std::string missing =
      error_of(input + "call add 2 0:0 0:0 0 1 3 1,2 1,1 0\noutput 1 1:0\n");
  EXPECT_NE(missing.find("add takes 1 attributes, not 0"), std::string::npos) << missing;
  // The same call written correctly parses, and runs.
  Graph ok = parse_graph(input + "call add 2 0:0 0:0 1 sI1 1 3 1,2 1,1 0\noutput 1 1:0\n");
  std::vector<Tensor> in{ones({2})};
  EXPECT_EQ(interpret(ok, in)[0].to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Graph, DeadCodeAndCommonSubexpressions) {
  Graph g = sample_graph();
  Tensor x = ones({2, 3}), y = ones({2, 3}) * 2;
  std::vector<Tensor> in{x, y};
  std::vector<double> before = interpret(g, in)[0].to_vector<double>();
  EXPECT_EQ(eliminate_common_subexpressions(g), 1);  // the second exp
  EXPECT_EQ(eliminate_dead_code(g), 1);              // the unused mul
  EXPECT_EQ(g.num_calls(), 4);
  EXPECT_EQ(interpret(g, in)[0].to_vector<double>(), before);
  EXPECT_NEAR(before[0], std::exp(3.0) * 1.5, 1e-4);
}

TEST(Graph, InterpretChecksItsInputs) {
  Graph g = sample_graph();
  std::vector<Tensor> one{ones({2, 3})};
  EXPECT_THROW(interpret(g, one), Error);
}

TEST(Interpreter, ChecksRecordedMetadataOnItsFirstRunThenRunsKernelsDirectly) {
  Graph g = sample_graph();
  auto plan = std::make_shared<const Interpreter>(std::make_shared<const Graph>(g));
  std::vector<Tensor> in{ones({2, 3}), full({2, 3}, 2.0)};
  const std::vector<double> first = plan->run(in)[0].to_vector<double>();
  EXPECT_EQ(plan->run(in)[0].to_vector<double>(), first);  // the direct path: same numbers
  EXPECT_EQ(interpret(g, in)[0].to_vector<double>(), first);

  // A graph whose recorded metadata is wrong (a hand-edited dump, say) is refused, naming the
  // node, instead of having its kernel write past a too-small result.
  Graph bad = sample_graph();
  bad.nodes[2].outputs[0].sizes = {6};
  try {
    Interpreter(std::make_shared<const Graph>(bad)).run(in);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 2 (add)"), std::string::npos) << e.what();
  }
}

TEST(Graph, ViewLayoutsAreCheckedAgainstTheirInputs) {
  // permute of an expand ([4, 4] strides [0, 1]): strides [1, 0]. Recorded as if over a
  // contiguous input ([1, 4]), a backend addressing it by its record would read past the data.
  Graph g;
  ValueRef x = g.add_placeholder({DType::Float32, {4}, {1}, 0, false});
  ValueRef e = g.add_call(op("expand"), {x}, Attrs{std::vector<int64_t>{4, 4}},
                          {{DType::Float32, {4, 4}, {0, 1}, 0, false}});
  ValueRef p = g.add_call(op("permute"), {e}, Attrs{std::vector<int64_t>{1, 0}},
                          {{DType::Float32, {4, 4}, {1, 0}, 0, false}});
  g.outputs = {p};
  check_view_layouts(g, "the test graph");
  // Strides of a dim of size 1 address nothing: either is accepted.
  Graph unit;
  ValueRef y = unit.add_placeholder({DType::Float32, {4}, {1}, 0, false});
  ValueRef u = unit.add_call(op("unsqueeze"), {y}, Attrs{int64_t{0}},
                             {{DType::Float32, {1, 4}, {99, 1}, 0, false}});
  unit.outputs = {u};
  check_view_layouts(unit, "the test graph");

  g.nodes[2].outputs[0].strides = {1, 4};
  try {
    check_view_layouts(g, "the test graph");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the test graph: node %2 (permute) is recorded as [4, 4] strides [1, 4]"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("gives [4, 4] strides [1, 0]"), std::string::npos) << what;
  }
}

TEST(Interpreter, ChecksInputsAgainstThePlaceholdersOnEveryRun) {
  auto plan = std::make_shared<const Interpreter>(std::make_shared<const Graph>(sample_graph()));
  std::vector<Tensor> in{ones({2, 3}), ones({2, 3})};
  plan->run(in);
  std::vector<Tensor> wrong_shape{ones({3, 2}), ones({2, 3})};
  EXPECT_THROW(plan->run(wrong_shape), Error);
  std::vector<Tensor> wrong_dtype{ones({2, 3}, DType::Float64), ones({2, 3})};
  EXPECT_THROW(plan->run(wrong_dtype), Error);
}

// A graph input is guarded without its storage offset; an as_strided of it, recorded with an
// absolute offset, reads at the same place relative to the input wherever the input starts.
TEST(Interpreter, AsStridedOffsetsMoveWithTheirInputsStorageOffset) {
  auto graph_at = [](int64_t input_offset) {
    Graph g;
    const ValueRef x = g.add_placeholder({DType::Float32, {4}, {1}, input_offset, false});
    // Elements 1 and 3 of the input.
    const ValueRef v =
        g.add_call(op("as_strided"), {x},
                   Attrs{std::vector<int64_t>{2}, std::vector<int64_t>{2}, input_offset + 1},
                   {{DType::Float32, {2}, {2}, input_offset + 1, false}});
    g.outputs = {
        g.add_call(op("mul"), {v, v}, Attrs{}, {TensorMeta::contiguous(DType::Float32, {2})})};
    return g;
  };
  EXPECT_TRUE(same_guarded_meta({DType::Float32, {4}, {1}, 2, false},
                                {DType::Float32, {4}, {1}, 7, false}));
  EXPECT_FALSE(same_guarded_meta({DType::Float32, {4}, {1}, 2, false},
                                 {DType::Float32, {4}, {2}, 2, false}));
  const Graph g = graph_at(2);
  Graph moved = g;
  moved.nodes[0].outputs[0].storage_offset = 9;
  EXPECT_EQ(g.hash(), moved.hash());
  EXPECT_TRUE(structurally_equal(g, moved));
  const Tensor storage = arange(0, 10).to(DType::Float32);
  for (int64_t at : {0, 2, 5}) {
    SCOPED_TRACE(at);
    const Tensor input = storage.narrow(0, at, 4);
    const std::vector<Tensor> out = interpret(g, {&input, 1});
    ASSERT_EQ(out[0].numel(), 2);
    EXPECT_EQ(out[0][0].item<float>(), float((at + 1) * (at + 1)));
    EXPECT_EQ(out[0][1].item<float>(), float((at + 3) * (at + 3)));
  }
}

TEST(Interpreter, RejectsReadsOfValuesNoEarlierNodeMade) {
  Graph g;
  TensorMeta info{DType::Float32, {2}, {1}, 0, false};
  ValueRef a = g.add_placeholder(info);
  g.add_call(*find_op("neg"), {ValueRef{5, 0}}, Attrs{}, {info});
  g.outputs = {a};
  EXPECT_THROW(Interpreter{std::make_shared<const Graph>(g)}, Error);
}

}  // namespace
}  // namespace kiln::ir
