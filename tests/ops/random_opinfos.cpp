// Conformance OpInfos for the random ops (uniform, normal, randint, bernoulli): the values must
// equal, bit for bit, the mapping of docs/random.md as re-implemented independently in
// tests/core/philox_reference.h. Each sample's input only carries the shape and dtype to draw.
#include <cmath>
#include <limits>

#include "core/philox_reference.h"
#include "ops/opinfo.h"

namespace kiln::testing {
namespace {

namespace pr = philox_ref;

// Shapes to draw: 0-d, empty, a vector tail, 2-d, and one large enough for the threaded path.
std::vector<Sample> shapes(DType dt) {
  return {{"0-d", {zeros({}, dt)}},
          {"empty [0, 3]", {zeros({0, 3}, dt)}},
          {"[7]", {zeros({7}, dt)}},
          {"[3, 5]", {zeros({3, 5}, dt)}},
          {"[2, 3, 4]", {zeros({2, 3, 4}, dt)}},
          {"large [120, 130] (threaded)", {zeros({120, 130}, dt)}}};
}

// Generator states: a small one, and one whose seed uses both key words and whose counters cross
// the 2^32 boundary (both counter words).
struct State {
  const char* name;
  uint64_t seed, offset;
};
const State kStates[] = {
    {"seed 0", 0, 0},
    {"seed 1234", 1234, 17},
    {"high seed, offset near 2^32", 0x9E3779B97F4A7C15ULL, (uint64_t{1} << 32) - 100},
    {"offset near 2^64", 42, ~uint64_t{0} - 50}};

// Expected values of a draw: element i of the flattened result.
Ref expected(const Ref& shape_of, DType dt, const std::function<double(uint64_t)>& value) {
  Ref r = Ref::zeros(shape_of.sizes, dt);
  for (int64_t i = 0; i < r.numel(); ++i) r.v[i] = value(static_cast<uint64_t>(i));
  return r;
}
int64_t numel(const Ref& r) { return r.numel(); }

// A zero tensor of `sizes` stored with its dims reversed (non-contiguous for 2+ dims).
Tensor transposed_zeros(const Shape& sizes, DType dt) {
  const std::vector<int64_t> sz = sizes.vec();
  std::vector<int64_t> rev(sz.rbegin(), sz.rend()), perm;
  for (int64_t d = static_cast<int64_t>(rev.size()) - 1; d >= 0; --d) perm.push_back(d);
  return zeros(rev, dt).permute(perm);
}

// Every random OpInfo compares exactly.
void exact(OpInfo& info) { info.rtol32 = info.atol32 = info.rtol64 = info.atol64 = 0; }

const bool kUniformRegistered = [] {
  for (const State& st : kStates) {
    OpInfo info;
    info.name = std::string("uniform_") + st.name;
    info.covers = {"uniform"};
    info.dtypes = kFloatDTypes;
    info.samples = shapes;
    exact(info);
    const uint64_t seed = st.seed, offset = st.offset;
    info.fn = [=](const std::vector<Tensor>& in) {
      Generator g(seed);
      g.set_offset(offset);
      const Shape sizes = in[0].sizes();
      const DType dt = in[0].dtype();
      const uint64_t n = static_cast<uint64_t>(in[0].numel() == 0 ? 0 : in[0].numel());
      Tensor a = rand(sizes, dt, &g);
      EXPECT_EQ(g.offset(), offset + n) << "a draw of n elements advances the offset by n";
      Tensor b = rand_like(in[0], &g);
      // uniform_ into a transposed tensor: element i is in logical row-major order.
      Tensor c = transposed_zeros(sizes, dt);
      Tensor& cr = uniform_(c, -2.5, 3.0, &g);
      EXPECT_TRUE(cr.is_same(c));
      Tensor d = empty(sizes, dt);
      uniform_(d, 5.0, 5.0, &g);  // from == to: every value is `from`
      Tensor e = empty(sizes, dt);
      uniform_(e, -1e-3, 1e-3, &g);
      EXPECT_EQ(g.offset(), offset + 5 * n);
      return std::vector<Tensor>{a, b, c, d, e};
    };
    info.ref = [=](const std::vector<Ref>& in) {
      const DType dt = in[0].dtype;
      const bool dbl = dt == DType::Float64;
      const uint64_t n = static_cast<uint64_t>(numel(in[0]));
      auto draw = [&](uint64_t k, double from, double to) {
        return expected(in[0], dt, [&](uint64_t i) {
          return pr::uniform(seed, offset + k * n, i, dbl, from, to);
        });
      };
      return std::vector<Ref>{draw(0, 0, 1), draw(1, 0, 1), draw(2, -2.5, 3.0), draw(3, 5.0, 5.0),
                              draw(4, -1e-3, 1e-3)};
    };
    info.errors.push_back(expect_error<ValueError>("from > to", "from <= to", [] {
      Tensor t = empty({3});
      uniform_(t, 1.0, 0.0);
    }));
    info.errors.push_back(
        expect_error<DTypeError>("int dtype", "floating", [] { rand({3}, DType::Int64); }));
    info.errors.push_back(
        expect_error<ValueError>("negative size", "non-negative", [] { rand({-1}); }));
    info.errors.push_back(expect_error<ValueError>("into an expanded tensor", "expanded", [] {
      Tensor t = zeros({1}).expand({4});
      uniform_(t);
    }));
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

const bool kNormalRegistered = [] {
  for (const State& st : kStates) {
    OpInfo info;
    info.name = std::string("normal_") + st.name;
    info.covers = {"normal"};
    info.dtypes = kFloatDTypes;
    info.samples = shapes;
    exact(info);
    const uint64_t seed = st.seed, offset = st.offset;
    info.fn = [=](const std::vector<Tensor>& in) {
      Generator g(seed);
      g.set_offset(offset);
      Tensor a = randn(in[0].sizes(), in[0].dtype(), &g);
      Tensor b = randn_like(in[0], &g);
      Tensor c = transposed_zeros(in[0].sizes(), in[0].dtype());
      Tensor& cr = normal_(c, 3.0, 0.25, &g);
      EXPECT_TRUE(cr.is_same(c));
      Tensor d = empty(in[0].sizes(), in[0].dtype());
      normal_(d, -1.5, 0.0, &g);  // std 0: every value is the mean
      return std::vector<Tensor>{a, b, c, d};
    };
    info.ref = [=](const std::vector<Ref>& in) {
      const DType dt = in[0].dtype;
      const bool dbl = dt == DType::Float64;
      const uint64_t n = static_cast<uint64_t>(numel(in[0]));
      auto draw = [&](uint64_t k, double mean, double sd) {
        return expected(in[0], dt, [&](uint64_t i) {
          return pr::normal(seed, offset + k * n, i, dbl, mean, sd);
        });
      };
      return std::vector<Ref>{draw(0, 0, 1), draw(1, 0, 1), draw(2, 3.0, 0.25), draw(3, -1.5, 0.0)};
    };
    info.errors.push_back(expect_error<ValueError>("negative std", "non-negative", [] {
      Tensor t = empty({3});
      normal_(t, 0.0, -1.0);
    }));
    info.errors.push_back(
        expect_error<DTypeError>("int dtype", "floating", [] { randn({3}, DType::Int32); }));
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

const bool kRandintRegistered = [] {
  for (const State& st : kStates) {
    OpInfo info;
    info.name = std::string("randint_") + st.name;
    info.covers = {"randint"};
    info.dtypes = kNumericDTypes;
    info.samples = shapes;
    exact(info);
    const uint64_t seed = st.seed, offset = st.offset;
    info.fn = [=](const std::vector<Tensor>& in) {
      Generator g(seed);
      g.set_offset(offset);
      const DType dt = in[0].dtype();
      std::vector<Tensor> out = {randint(-7, 13, in[0].sizes(), dt, &g),
                                 randint(0, 1, in[0].sizes(), dt, &g),
                                 randint(-2147483648LL, 2147483647LL, in[0].sizes(), dt, &g)};
      if (dt != DType::Int32) {
        // The full int64 span (high - low overflows int64 but not as unsigned).
        out.push_back(randint(std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), in[0].sizes(), dt, &g));
      }
      return out;
    };
    info.ref = [=](const std::vector<Ref>& in) {
      const DType dt = in[0].dtype;
      const uint64_t n = static_cast<uint64_t>(numel(in[0]));
      auto draw = [&](uint64_t k, int64_t lo, int64_t hi) {
        return expected(in[0], dt, [&](uint64_t i) {
          const int64_t v = pr::randint(seed, offset + k * n, i, lo, hi);
          // The conversion to a floating dtype rounds (exactly as a C++ cast does).
          return dt == DType::Float32 ? static_cast<double>(static_cast<float>(v))
                                      : static_cast<double>(v);
        });
      };
      std::vector<Ref> out = {draw(0, -7, 13), draw(1, 0, 1), draw(2, -2147483648LL, 2147483647LL)};
      if (dt != DType::Int32)
        out.push_back(
            draw(3, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
      return out;
    };
    info.errors.push_back(
        expect_error<ValueError>("low == high", "low < high", [] { randint(3, 3, {2}); }));
    info.errors.push_back(
        expect_error<DTypeError>("bool dtype", "bool", [] { randint(0, 2, {2}, DType::Bool); }));
    info.errors.push_back(expect_error<ValueError>("range beyond int32", "out of the range", [] {
      randint(0, int64_t{1} << 40, {2}, DType::Int32);
    }));
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

const bool kBernoulliRegistered = [] {
  for (const State& st : kStates) {
    OpInfo info;
    info.name = std::string("bernoulli_") + st.name;
    info.covers = {"bernoulli"};
    info.dtypes = kFloatDTypes;
    // Probabilities in [0, 1], including both ends, in several layouts.
    info.samples = [](DType dt) {
      return std::vector<Sample>{
          {"0-d", {make_tensor_for_test({}, dt, 0, 1)}},
          {"empty", {make_tensor_for_test({0}, dt, 0, 1)}},
          {"[4, 6]", {make_tensor_for_test({4, 6}, dt, 0, 1)}},
          {"transposed [6, 9]", {make_tensor_for_test({6, 9}, dt, 0, 1, Layout::Transposed)}},
          {"ends", {tensor(std::vector<double>{0, 1, 0, 1, 0.5, 1e-300}).to(dt)}},
          {"large", {make_tensor_for_test({100, 100}, dt, 0, 1)}},
      };
    };
    exact(info);
    const uint64_t seed = st.seed, offset = st.offset;
    info.fn = [=](const std::vector<Tensor>& in) {
      Generator g(seed);
      g.set_offset(offset);
      Tensor a = bernoulli(in[0], &g);
      Tensor b = bernoulli(in[0].sizes(), 0.3, in[0].dtype(), &g);
      return std::vector<Tensor>{a, b};
    };
    info.ref = [=](const std::vector<Ref>& in) {
      const uint64_t n = static_cast<uint64_t>(numel(in[0]));
      const double p03 = cast_to(0.3, in[0].dtype);
      Ref a = expected(in[0], in[0].dtype,
                       [&](uint64_t i) { return pr::bernoulli(seed, offset, i, in[0].v[i]); });
      Ref b = expected(in[0], in[0].dtype,
                       [&](uint64_t i) { return pr::bernoulli(seed, offset + n, i, p03); });
      return std::vector<Ref>{a, b};
    };
    info.errors.push_back(
        expect_error<ValueError>("p > 1", "[0, 1]", [] { bernoulli(full({2}, 1.5)); }));
    info.errors.push_back(expect_error<ValueError>(
        "NaN p", "[0, 1]", [] { bernoulli(full({2}, std::numeric_limits<double>::quiet_NaN())); }));
    info.errors.push_back(
        expect_error<ValueError>("scalar p < 0", "[0, 1]", [] { bernoulli({2}, -0.5); }));
    info.errors.push_back(
        expect_error<DTypeError>("int p", "floating", [] { bernoulli(ones({2}, DType::Int64)); }));
    RegisterOpInfo{std::move(info)};
  }
  return true;
}();

}  // namespace
}  // namespace kiln::testing
