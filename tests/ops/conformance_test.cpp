// Runs every OpInfo: each sample on each supported dtype against the float64 reference, every
// invalid-input case, and checks that every registered op is covered by some OpInfo.
#include <bit>
#include <cmath>
#include <set>

#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

class Conformance : public ::testing::TestWithParam<OpInfoCase> {};

TEST_P(Conformance, MatchesReference) {
  const OpInfo& info = opinfos()[GetParam().info];
  const DType dt = GetParam().dtype;
  const bool f32 = dt == DType::Float32;
  for (const Sample& s : info.samples(dt)) {
    std::string ctx = info.name + " [" + std::string(dtype_name(dt)) + "] " + s.name;
    std::vector<Ref> refs;
    for (const Tensor& t : s.inputs) refs.push_back(Ref::of(t));
    std::vector<Tensor> got;
    try {
      got = info.fn(s.inputs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << ctx << ": threw " << e.what();
      continue;
    }
    std::vector<Ref> want = info.ref(refs);
    ASSERT_EQ(got.size(), want.size()) << ctx;
    for (size_t k = 0; k < got.size(); ++k) {
      // Results computed in float32 are compared at float32 tolerance whatever their dtype.
      bool loose = f32 || want[k].dtype == DType::Float32;
      expect_matches(got[k], want[k], loose ? info.rtol32 : info.rtol64,
                     loose ? info.atol32 : info.atol64, ctx + " output " + std::to_string(k));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Conformance, ::testing::ValuesIn(all_opinfo_cases()),
                         opinfo_case_name);

// Runs each op that has a decomposition as its decomposition (written in Kiln ops, run
// eagerly here) instead of its kernel.
class RunDecompositions final : public DispatchInterceptor {
 public:
  bool intercept(const OpDef& op, std::span<const Tensor> inputs, const Attrs& attrs,
                 std::span<Tensor, kMaxOpOutputs> outputs, int& num_outputs) override {
    if (!op.has_decomposition(attrs)) {
      declined += op.decomposition != nullptr;  // a decomposition that does not cover the call
      return false;
    }
    ++decomposed;
    const OpCall call{op, inputs, attrs};
    std::array<TensorMeta, kMaxOpOutputs> metas;
    const int n = op.meta(call, metas);
    std::array<Tensor, kMaxOpOutputs> results;
    op.decomposition(call, std::span<Tensor>(results.data(), static_cast<size_t>(n)));
    for (int i = 0; i < n; ++i) {
      Tensor& out = outputs[static_cast<size_t>(i)];
      const Tensor& r = results[static_cast<size_t>(i)];
      EXPECT_EQ(r.sizes(), metas[i].sizes) << op.name << " output " << i;
      EXPECT_EQ(r.dtype(), metas[i].dtype) << op.name << " output " << i;
      if (out.defined())
        out.copy_(r);
      else
        out = r;
    }
    num_outputs = n;
    return true;
  }
  int decomposed = 0, declined = 0;
};

bool covers_a_decomposition(const OpInfo& info) {
  for (const std::string& name : info.covers)
    if (const OpDef* op = find_op(name); op && op->decomposition) return true;
  return false;
}

// An op's decomposition computes what its kernel computes: bit for bit for pointwise ops (the
// optimizing backend may run either), within the OpInfo's tolerance otherwise.
class Decomposition : public ::testing::TestWithParam<OpInfoCase> {};

TEST_P(Decomposition, MatchesTheKernel) {
  const OpInfo& info = opinfos()[GetParam().info];
  if (!covers_a_decomposition(info)) GTEST_SKIP() << "no op with a decomposition";
  bool pointwise = true;
  for (const std::string& name : info.covers)
    if (const OpDef* op = find_op(name); op && op->decomposition)
      pointwise = pointwise && op->kind == OpKind::Pointwise;
  const DType dt = GetParam().dtype;
  for (const Sample& s : info.samples(dt)) {
    const std::string ctx = info.name + " [" + std::string(dtype_name(dt)) + "] " + s.name;
    const std::vector<Tensor> want = info.fn(s.inputs);
    RunDecompositions decompose;
    std::vector<Tensor> got;
    {
      InterceptorScope scope(&decompose);
      got = info.fn(s.inputs);
    }
    EXPECT_GT(decompose.decomposed + decompose.declined, 0) << ctx;
    ASSERT_EQ(got.size(), want.size()) << ctx;
    for (size_t k = 0; k < got.size(); ++k) {
      const std::string out_ctx = ctx + " output " + std::to_string(k);
      if (!pointwise) {
        const bool f32 = dt == DType::Float32;
        expect_matches(got[k], Ref::of(want[k]), f32 ? info.rtol32 : info.rtol64,
                       f32 ? info.atol32 : info.atol64, out_ctx);
        continue;
      }
      ASSERT_EQ(got[k].sizes(), want[k].sizes()) << out_ctx;
      const std::vector<double> a = want[k].to_vector<double>(), b = got[k].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(a[i]) && std::isnan(b[i])) continue;
        ASSERT_EQ(std::bit_cast<uint64_t>(a[i]), std::bit_cast<uint64_t>(b[i]))
            << out_ctx << ": element " << i << " differs (" << a[i] << " vs " << b[i] << ")";
      }
    }
  }
}

std::vector<OpInfoCase> decomposition_cases() {
  std::vector<OpInfoCase> cases;
  for (const OpInfoCase& c : all_opinfo_cases())
    if (covers_a_decomposition(opinfos()[c.info])) cases.push_back(c);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Ops, Decomposition, ::testing::ValuesIn(decomposition_cases()),
                         opinfo_case_name);

class ConformanceErrors : public ::testing::TestWithParam<size_t> {};

TEST_P(ConformanceErrors, InvalidInputsThrowClearErrors) {
  const OpInfo& info = opinfos()[GetParam()];
  ASSERT_FALSE(info.errors.empty()) << info.name << " has no invalid-input case";
  for (const ErrorCase& e : info.errors) {
    SCOPED_TRACE(info.name + ": " + e.name);
    e.check();
  }
}

std::vector<size_t> all_infos() {
  std::vector<size_t> v;
  for (size_t i = 0; i < opinfos().size(); ++i) v.push_back(i);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Ops, ConformanceErrors, ::testing::ValuesIn(all_infos()),
                         [](const ::testing::TestParamInfo<size_t>& p) {
                           std::string n = opinfos()[p.param].name;
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(ConformanceCoverage, EveryRegisteredOpHasAnOpInfo) {
  std::set<std::string> covered;
  for (const OpInfo& info : opinfos())
    for (const std::string& c : info.covers) covered.insert(c);
  for (const OpDef* op : all_ops())
    EXPECT_TRUE(covered.count(std::string(op->name)))
        << "op '" << op->name << "' is registered but no OpInfo covers it";
}

}  // namespace
}  // namespace kiln::testing
