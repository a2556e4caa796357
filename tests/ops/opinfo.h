// The conformance suite's data: one OpInfo per public op (or op variant), holding sample
// inputs per dtype, the Kiln call, a float64 reference, tolerances and invalid-input cases.
// Drivers (conformance_test.cpp; later autograd and every backend) run the same samples.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ops/reference.h"

namespace kiln::testing {

struct Sample {
  std::string name;  // what the sample exercises: "broadcast [3,1] x [4]"
  std::vector<Tensor> inputs;
  // The sample sits on a kink of the function (ties in a max, sort or topk), where finite
  // differences do not give the derivative: the gradient checks leave it out.
  bool no_gradcheck = false;
};

// An invalid call: `check` runs it and asserts the error type and message.
struct ErrorCase {
  std::string name;
  std::function<void()> check;
};

struct OpInfo {
  std::string name;                 // unique: "add", "add_scalar", "sum_dims"
  std::vector<std::string> covers;  // OpDef names exercised (for the coverage test)
  std::vector<DType> dtypes;        // dtypes it supports
  std::function<std::vector<Sample>(DType)> samples;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  std::function<std::vector<Ref>(const std::vector<Ref>&)> ref;
  double rtol32 = 1e-5, atol32 = 1e-5;    // float32 tolerances
  double rtol64 = 1e-10, atol64 = 1e-10;  // float64 tolerances
  std::vector<ErrorCase> errors;
  // Gradient checks (gradcheck_test.cpp): first derivatives against finite differences in
  // float64 on every sample, and second derivatives too when second_order.
  bool differentiable = false;
  bool second_order = false;
  double grad_atol = 1e-5, grad_rtol = 1e-3;
  // Non-empty: why this OpInfo is left out of the gradient checks (printed as a skip).
  std::string no_gradcheck;
  // The last this-many inputs are parameters carried as (float64) tensors, e.g. dims or pad
  // amounts: never differentiated.
  int trailing_params = 0;
  // When set, the gradient checks use these samples instead of `samples` (e.g. to keep finite
  // differences away from an op's discontinuities).
  std::function<std::vector<Sample>(DType)> grad_samples;
};

// The registry all OpInfo files add to at static-initialisation time.
std::vector<OpInfo>& opinfos();
struct RegisterOpInfo {
  explicit RegisterOpInfo(OpInfo info) { opinfos().push_back(std::move(info)); }
};
#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
#define KILN_OPINFO(...) \
  static ::kiln::testing::RegisterOpInfo KILN_CONCAT(kiln_opinfo_, __LINE__)(__VA_ARGS__)

// One (OpInfo, dtype) pair: the parameter of the drivers that run every OpInfo on every
// dtype it supports (conformance, compiled conformance).
struct OpInfoCase {
  size_t info;
  DType dtype;
};
// Names the case in test output (gtest would otherwise print its raw bytes).
void PrintTo(const OpInfoCase& c, std::ostream* os);
std::vector<OpInfoCase> all_opinfo_cases();
std::string opinfo_case_name(const ::testing::TestParamInfo<OpInfoCase>& p);

// ---- sample helpers ----
enum class Layout { Contiguous, Transposed, Strided };

// Deterministic values in [lo, hi] (floats), rounded to integers for integer dtypes, random
// for bool; `layout` makes the same values non-contiguous.
Tensor make_tensor_for_test(std::vector<int64_t> sizes, DType dtype, double lo = -5, double hi = 5,
                            Layout layout = Layout::Contiguous, uint32_t seed = 0);

inline const std::vector<DType> kAllDTypes = {DType::Bool, DType::Int32, DType::Int64,
                                              DType::Float32, DType::Float64};
inline const std::vector<DType> kNumericDTypes = {DType::Int32, DType::Int64, DType::Float32,
                                                  DType::Float64};
inline const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64};

// Standard unary samples: 0-d, empty, 1-d with a vector tail, 2-d, transposed, strided 3-d,
// and a larger tensor that goes through the threaded path.
std::vector<Sample> unary_samples(DType dt, double lo = -5, double hi = 5);
// Standard binary samples: same shapes, broadcasting both ways, 0-d and C++-number operands,
// zero-size, non-contiguous operands.
std::vector<Sample> binary_samples(DType dt, double lo = -5, double hi = 5, double lo2 = -5,
                                   double hi2 = 5);

// Error-case builder: runs `call`, expects exception type E whose message contains `needle`.
template <typename E, typename F>
ErrorCase expect_error(std::string name, std::string needle, F call) {
  return {name, [=] {
            try {
              call();
            } catch (const E& e) {
              EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
                  << "message was: " << e.what();
              return;
            } catch (const std::exception& e) {
              ADD_FAILURE() << "wrong exception type; message: " << e.what();
              return;
            }
            ADD_FAILURE() << "no exception thrown";
          }};
}

// Compares a Kiln result against a reference (shape, dtype, values within tolerance; NaN
// matches NaN, infinities must match exactly).
void expect_matches(const Tensor& got, const Ref& want, double rtol, double atol,
                    const std::string& context);

// The dtype PyTorch's type promotion gives for these operands (written independently of
// Kiln's result_type, from the table in docs/dtypes.md).
DType expected_result_type(const std::vector<Ref>& ins);
// Same, but integer/bool results become float32 (true division, exp, ...).
DType expected_float_result_type(const std::vector<Ref>& ins);

}  // namespace kiln::testing
