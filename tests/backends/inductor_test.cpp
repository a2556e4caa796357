// The inductor backend: fusion decisions, bitwise equality with eager, extern calls, the
// module cache and compiler errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/inductor/cpp_compiler.h"
#include "backends/inductor/schedule.h"
#include "kiln/kiln.h"

namespace kiln::testing {
namespace {

// Bitwise equality (NaN equal to NaN, -0 distinct from 0), dtype and shape.
void expect_identical(const Tensor& want, const Tensor& got, const std::string& what = "") {
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  ASSERT_EQ(want.sizes(), got.sizes()) << what;
  const Tensor a = want.contiguous(), b = got.contiguous();
  ASSERT_EQ(
      std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.numel() * a.element_size())), 0)
      << what << "\nwant " << want << "\ngot " << got;
}

// The graphs inductor compiled, and the kernels of each.
struct Compiled {
  std::vector<inductor::Schedule> schedules;
  CompileOptions options() {
    CompileOptions o;
    o.backend = Backend([this](const ir::Graph& g, std::span<const TensorMeta> in) {
      schedules.push_back(inductor::schedule_graph(g));
      return lookup_backend("inductor")(g, in);
    });
    return o;
  }
  size_t kernels() const {
    size_t n = 0;
    for (const auto& s : schedules) n += s.kernels.size();
    return n;
  }
  size_t externs() const {
    size_t n = 0;
    for (const auto& s : schedules)
      for (const auto& st : s.steps) n += st.kind == inductor::Step::Kind::Extern;
    return n;
  }
};

Tensor w1_chain(Tensor x, Tensor y) { return gelu((x * 2 + y).tanh() * x.exp()); }

TEST(Inductor, IsRegistered) {
  auto names = list_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "inductor"), names.end());
}

TEST(Inductor, PointwiseChainIsOneKernelAndBitwiseEqual) {
  manual_seed(0);
  Tensor x = randn({64, 130}), y = randn({130});  // y broadcast along dim 0
  Compiled c;
  auto f = compile(w1_chain, c.options());
  for (int call = 0; call < 2; ++call) expect_identical(w1_chain(x, y), f(x, y));
  ASSERT_EQ(c.schedules.size(), 1u);
  EXPECT_EQ(c.kernels(), 1u);
  EXPECT_EQ(c.externs(), 0u);
}

TEST(Inductor, LargeInputsRunOnThreadsAndStayEqual) {
  manual_seed(1);
  Tensor x = randn({1 << 20}), y = randn({1 << 20});
  auto f = compile(w1_chain, {.backend = std::string("inductor")});
  expect_identical(w1_chain(x, y), f(x, y));
}

TEST(Inductor, ViewsAreIndexArithmetic) {
  manual_seed(2);
  Tensor x = randn({33, 17});
  auto fn = [](Tensor a) { return (a.t() * 3).exp() + sin(a.t()); };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(x), f(x));
  EXPECT_EQ(c.kernels(), 1u);
  EXPECT_EQ(c.externs(), 0u);
  // A strided (non-contiguous) graph input is read in place as well.
  Tensor big = randn({40, 34});
  Tensor strided = big.slice(0, 3, 36).slice(1, 0, 34, 2);
  expect_identical(fn(strided), f(strided));
}

TEST(Inductor, MixedDtypesComparisonsAndConstants) {
  manual_seed(3);
  Tensor i = randint(-5, 5, {7, 9}, DType::Int64);
  Tensor x = randn({7, 9}, DType::Float64);
  auto fn = [](Tensor a, Tensor b) {
    Tensor s = a + b * 0.1;  // int64 + float64 → float64
    Tensor m = (s > 0.25);   // a predicate: bool
    return where(m, s.abs(), -s) + m.to(DType::Float64);
  };
  auto f = compile(fn, {.backend = std::string("inductor")});
  for (int call = 0; call < 2; ++call) expect_identical(fn(i, x), f(i, x));
}

TEST(Inductor, IntegerDivisionByZeroIsStillAnError) {
  Tensor a = arange(6, DType::Int64), b = zeros({6}, DType::Int64);
  auto f = compile([](Tensor x, Tensor y) { return floor_divide(x + 1, y); },
                   {.backend = std::string("inductor")});
  EXPECT_THROW(f(a, b), Error);
  Tensor ones6 = ones({6}, DType::Int64);
  expect_identical(floor_divide(a + 1, ones6), f(a, ones6));
}

TEST(Inductor, ExternOpsRunBetweenKernels) {
  manual_seed(4);
  Tensor x = randn({16, 32}), w = randn({32, 8});
  auto fn = [](Tensor a, Tensor b) { return (matmul(a.exp(), b) + 1).relu().sum({1}); };
  Compiled c;
  auto f = compile(fn, c.options());
  for (int call = 0; call < 2; ++call) expect_identical(fn(x, w), f(x, w));
  EXPECT_GE(c.externs(), 2u);  // matmul, sum
  EXPECT_EQ(c.kernels(), 2u);  // exp; add + relu
}

TEST(Inductor, RandomOpsDrawWhatEagerDraws) {
  auto fn = [](Tensor a) { return (a + randn({8, 8})).sigmoid(); };
  Tensor x = randn({8, 8});
  auto f = compile(fn, {.backend = std::string("inductor")});
  for (int call = 0; call < 3; ++call) {
    manual_seed(10 + call);
    Tensor want = fn(x);
    manual_seed(10 + call);
    expect_identical(want, f(x), "call " + std::to_string(call));
  }
}

TEST(Inductor, InPlaceUpdatesAreWrittenBack) {
  manual_seed(5);
  Tensor p = randn({300}), g = randn({300});
  Tensor p2 = p.clone();
  auto fn = [](Tensor param, Tensor grad) {
    param.mul_(0.9).add_(grad.tanh() * -0.01);
    return param.sum();
  };
  auto f = compile(fn, {.backend = std::string("inductor")});
  Tensor want = fn(p2, g);
  Tensor got = f(p, g);
  expect_identical(want, got);
  expect_identical(p2, p);
}

TEST(Inductor, TrainingStepMatchesEager) {
  manual_seed(6);
  Tensor x = randn({32, 16}), target = randn({32, 4});
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Linear>(16, 4);
  };
  auto eager_model = make(), compiled_model = make();
  auto step = [](nn::Linear& m, const Tensor& in, const Tensor& t) {
    Tensor loss = ((m.forward(in).tanh() - t) * (m.forward(in).tanh() - t)).mean();
    loss.backward();
    return loss;
  };
  auto f = compile([&](Tensor in, Tensor t) { return step(*compiled_model, in, t); },
                   {.backend = std::string("inductor")});
  for (int it = 0; it < 2; ++it) {
    expect_identical(step(*eager_model, x, target), f(x, target));
    auto pe = eager_model->parameters(), pc = compiled_model->parameters();
    for (size_t k = 0; k < pe.size(); ++k) expect_identical(pe[k].grad(), pc[k].grad());
    for (auto& p : eager_model->parameters()) p.set_grad(Tensor());
    for (auto& p : compiled_model->parameters()) p.set_grad(Tensor());
  }
}

TEST(InductorCache, ModulesAreCachedOnDiskAndRebuiltWhenCorrupt) {
  const std::string src =
      "extern \"C\" int kiln_cache_probe() { return " + std::to_string(::getpid()) + "; }\n";
  inductor::CompileStats first, second;
  auto m = inductor::compile_module(src, &first);
  EXPECT_FALSE(first.cache_hit);
  const std::string path = m->path();
  ASSERT_TRUE(std::filesystem::exists(path));
  EXPECT_EQ(std::filesystem::path(path).parent_path().parent_path().string(),
            inductor::cache_dir());
  auto probe = reinterpret_cast<int (*)()>(m->symbol("kiln_cache_probe"));
  EXPECT_EQ(probe(), ::getpid());
  auto again = inductor::compile_module(src, &second);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(again.get(), m.get());
  EXPECT_THROW(m->symbol("no_such_symbol"), Error);

  // Another process (here: the same one, having forgotten its modules) finds it on disk.
  m.reset();
  again.reset();
  inductor::forget_loaded_modules();
  inductor::CompileStats third;
  auto from_disk = inductor::compile_module(src, &third);
  EXPECT_TRUE(third.cache_hit);
  EXPECT_EQ(third.cxx_seconds, 0);
  from_disk.reset();

  // A corrupt entry (a killed writer of an older version, a full disk) is rebuilt.
  inductor::forget_loaded_modules();
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << "not an ELF file"; }
  inductor::CompileStats fourth;
  auto rebuilt = inductor::compile_module(src, &fourth);
  EXPECT_FALSE(fourth.cache_hit);
  EXPECT_EQ(reinterpret_cast<int (*)()>(rebuilt->symbol("kiln_cache_probe"))(), ::getpid());
}

TEST(InductorCache, CompilerErrorsAreClear) {
  try {
    inductor::compile_module("this is not C++;\n", nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("compiling the generated code failed"), std::string::npos) << m;
    EXPECT_NE(m.find("error"), std::string::npos) << m;  // the compiler's own message
  }
}

}  // namespace
}  // namespace kiln::testing
