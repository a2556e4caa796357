// Every OpInfo sample, on every dtype, run through kiln::compile with the eager backend and with
// inductor, forward and backward, must match eager mode exactly: the eager backend runs the
// same kernels in the same order, and inductor's fused loops compute with the eager kernels'
// own functors (everything else it runs with the eager kernels), so both are bit for bit.
#include <cstring>

#include <mutex>

#include "backends/inductor/cpp_compiler.h"
#include "kiln/capture/compile.h"
#include "kiln/core/random.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

// A copy with the same sizes, strides and offset over new memory (clone() would make it
// contiguous): so that in-place samples start from the same values in both runs.
Tensor deep_copy(const Tensor& t) {
  if (t.impl()->is_wrapped_number()) return t;
  const auto& src = t.impl()->storage();
  auto storage = Storage::allocate(src->nbytes());
  if (src->nbytes()) std::memcpy(storage->data(), src->data(), src->nbytes());
  Tensor c(
      std::make_shared<TensorImpl>(storage, t.storage_offset(), t.sizes(), t.strides(), t.dtype()));
  if (t.requires_grad()) c.requires_grad_();
  return c;
}
std::vector<Tensor> deep_copy(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(deep_copy(t));
  return out;
}

// Bitwise equality of values (NaN equal to NaN), shape and dtype.
void expect_identical(const Tensor& eager, const Tensor& compiled, const std::string& ctx) {
  ASSERT_EQ(eager.defined(), compiled.defined()) << ctx;
  if (!eager.defined()) return;
  ASSERT_EQ(eager.dtype(), compiled.dtype()) << ctx;
  ASSERT_EQ(eager.sizes(), compiled.sizes()) << ctx;
  std::vector<double> a = eager.to_vector<double>(), b = compiled.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << ctx << ": element " << i << " differs";
  }
}

class CompiledConformance : public ::testing::TestWithParam<OpInfoCase> {};

// The outputs, and with `backward` the gradients of the sum of the floating outputs w.r.t.
// every floating input (computed inside the same function).
std::vector<Tensor> run_sample(const OpInfo& info, std::vector<Tensor> inputs, bool backward) {
  if (backward)
    for (Tensor& t : inputs)
      if (t.is_floating_point() && !t.impl()->is_wrapped_number()) t.requires_grad_();
  std::vector<Tensor> outs = info.fn(inputs);
  if (!backward) return outs;
  Tensor total;
  for (const Tensor& o : outs)
    if (o.requires_grad()) total = total.defined() ? total + o.sum() : o.sum();
  if (total.defined()) total.backward();
  for (const Tensor& t : inputs)
    if (t.requires_grad()) outs.push_back(t.grad());
  return outs;
}

// Runs every sample of one OpInfo case through kiln::compile with `backend` (twice: a compile,
// then a cache hit) and compares outputs and written inputs with eager, bit for bit.
void check_case(const OpInfoCase& c, const std::string& backend) {
  const OpInfo& info = opinfos()[c.info];
  const DType dt = c.dtype;
  const bool differentiable = info.differentiable && is_floating(dt);
  for (const Sample& s : info.samples(dt)) {
    for (bool backward : {false, true}) {
      if (backward && (!differentiable || s.no_gradcheck)) continue;
      const std::string ctx = info.name + " [" + std::string(dtype_name(dt)) + "] " + s.name +
                              (backward ? " (backward)" : "");
      std::vector<Tensor> eager_in = deep_copy(s.inputs);
      manual_seed(1234);
      std::vector<Tensor> want;
      try {
        want = run_sample(info, eager_in, backward);
      } catch (const Error&) {
        // An eagerly invalid sample (a derivative that is not implemented for it) must fail
        // the same way compiled.
        manual_seed(1234);
        std::vector<Tensor> compiled_in = deep_copy(s.inputs);
        auto f = kiln::compile([&] { return run_sample(info, compiled_in, backward); });
        EXPECT_THROW(f(), Error) << ctx;
        continue;
      }
      // Two calls of one compiled function: the first compiles (and the eager backend checks
      // every op's recorded metadata against a real run); the second is a cache hit that
      // replays the recorded graph and runs the kernels straight from the recorded metadata.
      int compiles = 0;
      const Backend real_backend = lookup_backend(backend);
      auto f = kiln::compile(
          [&](std::vector<Tensor> in) { return run_sample(info, std::move(in), backward); },
          CompileOptions{.backend =
                             Backend([&](const ir::Graph& g, std::span<const TensorMeta> infos) {
                               ++compiles;
                               // Every captured graph also survives its text form (the parser
                               // checks each call against its op's schema).
                               const ir::Graph back = ir::parse_graph(g.serialize());
                               EXPECT_TRUE(ir::structurally_equal(back, g)) << ctx << "\n" << g;
                               return real_backend(g, infos);
                             })});
      for (int call = 0; call < 2; ++call) {
        const std::string at = ctx + (call ? " (second call)" : "");
        std::vector<Tensor> compiled_in = deep_copy(s.inputs);
        const int compiles_before = compiles;
        manual_seed(1234);
        std::vector<Tensor> got;
        try {
          got = f(compiled_in);
        } catch (const std::exception& e) {
          ADD_FAILURE() << at << ": compiled run threw " << e.what();
          break;
        }
        if (call == 1) {
          EXPECT_EQ(compiles, compiles_before) << at << ": not a cache hit";
        }
        ASSERT_EQ(got.size(), want.size()) << at;
        for (size_t k = 0; k < got.size(); ++k)
          expect_identical(want[k], got[k], at + " output " + std::to_string(k));
        // In-place samples write their inputs: both runs must leave them equal too.
        for (size_t k = 0; k < eager_in.size(); ++k)
          expect_identical(eager_in[k], compiled_in[k], at + " input " + std::to_string(k));
      }
    }
  }
}

// dynamic = true (docs/dynamic_shapes.md): every sample of a case (their sizes differ) through
// one compiled function, twice over, forward and with the backward inside: the first sample
// compiles a dynamic graph (inductor: code that takes its sizes per call), a sample of the same
// structure at other sizes runs on an instance of it, and every result must be eager's, bit for
// bit. `backend` "collect" gathers inductor's sources (build_inductor_modules_once).
void check_case_dynamic(const OpInfoCase& c, const Backend& backend, bool compare = true) {
  const OpInfo& info = opinfos()[c.info];
  const DType dt = c.dtype;
  const bool differentiable = info.differentiable && is_floating(dt);
  for (bool backward : {false, true}) {
    if (backward && !differentiable) continue;
    CompileOptions options{.backend = backend};
    options.dynamic = true;
    options.cache_size_limit = 1000;  // (a case's samples of other structures: graphs of their own)
    auto f = kiln::compile(
        [&](std::vector<Tensor> in) { return run_sample(info, std::move(in), backward); }, options);
    for (int round = 0; round < 2; ++round)
      for (const Sample& s : info.samples(dt)) {
        if (backward && s.no_gradcheck) continue;
        const std::string ctx = info.name + " [" + std::string(dtype_name(dt)) + "] " + s.name +
                                (backward ? " (backward)" : "") + " dynamic, round " +
                                std::to_string(round);
        std::vector<Tensor> eager_in = deep_copy(s.inputs), compiled_in = deep_copy(s.inputs);
        std::vector<Tensor> want, got;
        manual_seed(1234);
        try {
          want = run_sample(info, eager_in, backward);
        } catch (const Error&) {
          manual_seed(1234);
          if (compare) EXPECT_THROW(f(compiled_in), Error) << ctx;
          continue;
        }
        manual_seed(1234);
        try {
          got = f(compiled_in);
        } catch (const std::exception& e) {
          if (compare) ADD_FAILURE() << ctx << ": compiled run threw " << e.what();
          continue;
        }
        if (!compare) continue;
        ASSERT_EQ(got.size(), want.size()) << ctx;
        for (size_t k = 0; k < got.size(); ++k)
          expect_identical(want[k], got[k], ctx + " output " + std::to_string(k));
        for (size_t k = 0; k < eager_in.size(); ++k)
          expect_identical(eager_in[k], compiled_in[k], ctx + " input " + std::to_string(k));
      }
  }
}

// Model-style AOT autograd: the op compiled (forward), the loss and backward() outside, as
// torch users write `torch.compile(model)`. Gradients must equal eager's, and a second call
// must compile neither half again.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& outs, const std::vector<Tensor>& in) {
  Tensor total;
  for (const Tensor& o : outs)
    if (o.requires_grad()) total = total.defined() ? total + o.sum() : o.sum();
  if (total.defined()) total.backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : in)
    if (t.requires_grad()) grads.push_back(t.grad());
  return grads;
}

void check_case_aot(const OpInfoCase& c) {
  const OpInfo& info = opinfos()[c.info];
  const DType dt = c.dtype;
  // Differentiable as the gradient checks define it: flagged, or its op has a derivative.
  const OpDef* op = info.covers.empty() ? nullptr : find_op(info.covers[0]);
  const bool differentiable = info.differentiable || (op && op->derivative.fn);
  if (!differentiable || !is_floating(dt) || !info.no_gradcheck.empty())
    GTEST_SKIP() << "no gradients to check";
  for (const Sample& s : info.samples(dt)) {
    if (s.no_gradcheck) continue;
    const std::string ctx = info.name + " [" + std::string(dtype_name(dt)) + "] " + s.name;
    auto with_grad = [](std::vector<Tensor> in) {
      for (Tensor& t : in)
        if (t.is_floating_point() && !t.impl()->is_wrapped_number()) t.requires_grad_();
      return in;
    };
    std::vector<Tensor> eager_in = with_grad(deep_copy(s.inputs));
    std::vector<Tensor> want, want_grads;
    manual_seed(1234);
    try {
      want = info.fn(eager_in);
      want_grads = gradients_of(want, eager_in);
    } catch (const Error&) {
      continue;  // eagerly invalid (checked under the other backends)
    }
    int forward_compiles = 0, backward_compiles = 0;
    const Backend eager = lookup_backend("eager");
    auto counted = [&](int& n) {
      return Backend([&n, eager](const ir::Graph& g, std::span<const TensorMeta> infos) {
        ++n;
        return eager(g, infos);
      });
    };
    auto f = kiln::compile([&](std::vector<Tensor> in) { return info.fn(in); },
                           CompileOptions{.backend = aot_autograd(counted(forward_compiles),
                                                                  counted(backward_compiles))});
    for (int call = 0; call < 2; ++call) {
      const std::string at = ctx + (call ? " (second call)" : "");
      const int fw_before = forward_compiles, bw_before = backward_compiles;
      std::vector<Tensor> compiled_in = with_grad(deep_copy(s.inputs));
      manual_seed(1234);
      std::vector<Tensor> got, got_grads;
      try {
        got = f(compiled_in);
        got_grads = gradients_of(got, compiled_in);
      } catch (const std::exception& e) {
        ADD_FAILURE() << at << ": threw " << e.what();
        break;
      }
      if (call == 1) {
        EXPECT_EQ(forward_compiles, fw_before) << at << ": forward not a cache hit";
        EXPECT_EQ(backward_compiles, bw_before) << at << ": backward not a cache hit";
      }
      ASSERT_EQ(got.size(), want.size()) << at;
      for (size_t k = 0; k < got.size(); ++k)
        expect_identical(want[k], got[k], at + " output " + std::to_string(k));
      ASSERT_EQ(got_grads.size(), want_grads.size()) << at;
      for (size_t k = 0; k < got_grads.size(); ++k)
        expect_identical(want_grads[k], got_grads[k], at + " gradient " + std::to_string(k));
    }
  }
}

// Under inductor, the graphs of the whole suite are captured and rendered first (a pass with
// the eager backend), and their modules built in a few compiler runs: one process start and
// header parse per graph would take many minutes. The tests then find every module in memory.
void build_inductor_modules_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> sources;
    const Backend collect = inductor::source_collecting_backend(sources);
    for (const OpInfoCase& c : all_opinfo_cases()) {
      const OpInfo& info = opinfos()[c.info];
      const bool differentiable = info.differentiable && is_floating(c.dtype);
      for (const Sample& s : info.samples(c.dtype))
        for (bool backward : {false, true}) {
          if (backward && (!differentiable || s.no_gradcheck)) continue;
          try {
            auto f = kiln::compile(
                [&](std::vector<Tensor> in) { return run_sample(info, std::move(in), backward); },
                CompileOptions{.backend = collect});
            manual_seed(1234);
            f(deep_copy(s.inputs));
          } catch (const std::exception&) {
            // an invalid sample: the test checks that it fails the same way
          }
        }
      check_case_dynamic(c, collect, /*compare=*/false);
    }
    inductor::compile_modules_batched(sources, 2);
  });
}

TEST_P(CompiledConformance, EagerBackendMatchesEager) { check_case(GetParam(), "eager"); }

TEST_P(CompiledConformance, AotEagerGradientsMatchEager) { check_case_aot(GetParam()); }

TEST_P(CompiledConformance, InductorMatchesEager) {
  build_inductor_modules_once();
  check_case(GetParam(), "inductor");
}

TEST_P(CompiledConformance, DynamicGraphsMatchEager) {
  check_case_dynamic(GetParam(), lookup_backend("aot_eager"));
  build_inductor_modules_once();
  check_case_dynamic(GetParam(), lookup_backend("inductor"));
}

INSTANTIATE_TEST_SUITE_P(Ops, CompiledConformance, ::testing::ValuesIn(all_opinfo_cases()),
                         opinfo_case_name);

}  // namespace
}  // namespace kiln::testing
