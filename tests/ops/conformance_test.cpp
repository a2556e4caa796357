// Runs every OpInfo: each sample on each supported dtype against the float64 reference, every
// invalid-input case, and checks that every registered op is covered by some OpInfo.
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
