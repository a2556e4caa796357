// Schemas (kiln/ops/schema.h): the grammar every op and public function states its arguments
// in, which the Python package builds signatures from; and the registry of public functions.
#include <gtest/gtest.h>

#include <set>

#include "kiln/kiln.h"
#include "kiln/ops/function.h"
#include "kiln/ops/schema.h"

namespace kiln {
namespace {

using Type = SchemaParam::Type;

TEST(Schema, ParsesTypesDefaultsAndKeywordOnlyParameters) {
  const Schema s = parse_schema(
      "t",
      "f(Tensor self, int[] dim=[0, -1], bool keepdim=False, *, ScalarType? dtype=None, "
      "str mode=\"a, b\", float eps=1e-05, Scalar alpha=2, int[2] k=3, Tensor? w=None) -> "
      "(Tensor values, Tensor indices)");
  EXPECT_EQ(s.name, "f");
  ASSERT_EQ(s.params.size(), 9u);
  EXPECT_EQ(s.params[0].type, Type::Tensor);
  EXPECT_FALSE(s.params[0].has_default);
  EXPECT_EQ(std::get<std::vector<int64_t>>(s.params[1].default_value),
            (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(std::get<bool>(s.params[2].default_value), false);
  EXPECT_FALSE(s.params[2].keyword_only);
  EXPECT_TRUE(s.params[3].keyword_only && s.params[3].optional && s.params[3].has_default);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(s.params[3].default_value));
  EXPECT_EQ(std::get<std::string>(s.params[4].default_value), "a, b");
  EXPECT_DOUBLE_EQ(std::get<double>(s.params[5].default_value), 1e-5);
  EXPECT_EQ(std::get<int64_t>(s.params[6].default_value), 2);
  EXPECT_EQ(s.params[7].type, Type::Ints);  // int[2] is int[]
  EXPECT_EQ(std::get<std::vector<int64_t>>(s.params[7].default_value), (std::vector<int64_t>{3}));
  EXPECT_TRUE(s.params[8].is_tensor() && s.params[8].optional);
  EXPECT_EQ(s.returns, (std::vector<std::string_view>{"values", "indices"}));
  EXPECT_TRUE(parse_schema("t", "g(Tensor[] xs) -> Tensor[]").returns_list);
  EXPECT_TRUE(parse_schema("t", "h(Tensor a, Tensor b) -> bool").returns_number);
}

TEST(Schema, RejectsWhatItCannotReadNamingTheSchema) {
  const auto fails = [](const char* text, const char* why) {
    try {
      parse_schema("my_op", text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("my_op"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  fails("f(Tensor self, bool keepdim=3) -> Tensor", "does not fit its type");
  fails("f(Tensor self, int dim=None) -> Tensor", "does not fit its type");  // not optional
  fails("f(Tensor self, complex z) -> Tensor", "unknown type 'complex'");
  fails("f(Tensor self, int) -> Tensor", "no name");
  fails("f Tensor self -> Tensor", "no parameter list");
  fails("f(Tensor self) -> Str", "a return of type");
}

TEST(Schema, EveryRegisteredOpAndFunctionParsesAndDefaultsFitTheirTypes) {
  for (const OpDef* op : all_ops()) {
    if (op->schema.empty()) continue;
    EXPECT_NO_THROW(parse_schema(op->name, op->schema)) << op->schema;
  }
  std::set<std::pair<std::string, std::string>> names;
  for (const FunctionDef* f : all_functions()) {
    const Schema s = parse_schema("function", f->schema);
    names.emplace(std::string(f->module), std::string(s.name));
    EXPECT_FALSE(f->doc.empty()) << f->schema;
  }
  EXPECT_THROW(
      register_function({.schema = "reshape(Tensor self, int[] shape) -> Tensor",
                         .doc = "again",
                         .call = [](const FunctionArgs&) -> FunctionResult { return {}; }}),
      Error);
  EXPECT_GT(names.size(), 60u);
}

TEST(Functions, RegisteredFunctionsRunWithTheirArguments) {
  // The first form of `name`, or the form whose schema starts with `name` when it has a '('.
  const auto find = [](std::string_view module, std::string_view name) -> const FunctionDef& {
    for (const FunctionDef* f : all_functions())
      if (f->module == module &&
          (name.find('(') != std::string_view::npos ? f->schema.starts_with(name)
                                                    : parse_schema("f", f->schema).name == name))
        return *f;
    throw Error("no function " + std::string(name));
  };
  const Tensor x = arange(6, DType::Float32);
  using V = FunctionArgs::Value;
  const FunctionResult r =
      find("", "reshape").call(FunctionArgs({V(x), V(std::vector<int64_t>{2, -1})}));
  EXPECT_EQ(std::get<Tensor>(r).shape(), (Shape{2, 3}));
  const FunctionResult m = find("", "max(Tensor self, int dim")
                               .call(FunctionArgs({V(x.reshape({2, 3})), V(int64_t{1}), V(false)}));
  const auto& values = std::get<std::vector<Tensor>>(m);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].to_vector<float>(), (std::vector<float>{2, 5}));
  const FunctionResult all = find("", "max").call(FunctionArgs({V(x)}));
  EXPECT_EQ(std::get<Tensor>(all).item<float>(), 5.0f);
  // A name's forms come in the order they were registered: max(x), max(x, dim), max(x, other).
  std::vector<std::string_view> forms;
  for (const FunctionDef* f : all_functions())
    if (f->module.empty() && parse_schema("f", f->schema).name == "max") forms.push_back(f->schema);
  ASSERT_EQ(forms.size(), 3u);
  EXPECT_TRUE(forms[1].starts_with("max(Tensor self, int dim")) << forms[1];
  EXPECT_TRUE(forms[2].starts_with("max(Tensor self, Tensor other")) << forms[2];
  const FunctionResult same = find("", "equal").call(FunctionArgs({V(x), V(x.clone())}));
  EXPECT_TRUE(std::get<Scalar>(same).to<bool>());
  EXPECT_THROW(find("nn.functional", "cross_entropy")
                   .call(FunctionArgs({V(randn({2, 3})), V(tensor({0, 1})), V(ones({3})),
                                       V(int64_t{-100}), V(std::string("mean")), V(0.0)})),
               NotImplementedError);
}

}  // namespace
}  // namespace kiln
