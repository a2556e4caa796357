// Philox 4x32-10 against the Random123 known-answer vectors, Kiln's random ops against the
// independent implementation of docs/random.md, determinism, offsets, generator independence,
// and statistical sanity with bounds no correct generator can miss (beyond 6.5 sigma, i.e. a
// chance below 1e-10 per check).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "core/philox_reference.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace pr = testing::philox_ref;

struct Kat {
  std::array<uint32_t, 4> ctr;
  std::array<uint32_t, 2> key;
  std::array<uint32_t, 4> out;
};
// Random123's kat_vectors, "philox4x32 10" lines: counter, key, expected output.
const Kat kKats[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, KnownAnswerVectors) {
  for (const Kat& k : kKats) {
    EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.out);
    pr::Words w = pr::philox4x32({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    EXPECT_EQ((std::array<uint32_t, 4>{w.w[0], w.w[1], w.w[2], w.w[3]}), k.out) << "test reference";
  }
}

TEST(Philox, AgreesWithTheReferenceOnManyInputs) {
  uint32_t s = 12345;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (int i = 0; i < 2000; ++i) {
    std::array<uint32_t, 4> c = {next(), next(), next(), next()};
    std::array<uint32_t, 2> k = {next(), next()};
    pr::Words w = pr::philox4x32({{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
    ASSERT_EQ(philox4x32_10(c, k), (std::array<uint32_t, 4>{w.w[0], w.w[1], w.w[2], w.w[3]}));
  }
}

TEST(Random, BitExactAgainstTheDocumentedMapping) {
  const uint64_t seed = 0xDEADBEEFCAFEULL;
  Generator g(seed);
  g.set_offset(5);
  Tensor u = rand({1000}, DType::Float64, &g);
  Tensor n = randn({1000}, DType::Float32, &g);
  Tensor r = randint(-50, 50, {1000}, DType::Int64, &g);
  Tensor b = bernoulli({1000}, 0.25, DType::Float64, &g);
  const auto uv = u.to_vector<double>();
  const auto nv = n.to_vector<float>();
  const auto rv = r.to_vector<int64_t>();
  const auto bv = b.to_vector<double>();
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(uv[i], pr::uniform(seed, 5, i, true, 0, 1)) << i;
    ASSERT_EQ(static_cast<double>(nv[i]), pr::normal(seed, 1005, i, false, 0, 1)) << i;
    ASSERT_EQ(rv[i], pr::randint(seed, 2005, i, -50, 50)) << i;
    ASSERT_EQ(bv[i], pr::bernoulli(seed, 3005, i, 0.25)) << i;
  }
  EXPECT_EQ(g.offset(), 4005u);
}

TEST(Random, ManualSeedIsDeterministic) {
  manual_seed(2024);
  Tensor a = rand({64});
  Tensor b = randn({3, 7}, DType::Float64);
  manual_seed(2024);
  EXPECT_EQ(rand({64}).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(randn({3, 7}, DType::Float64).to_vector<double>(), b.to_vector<double>());
  EXPECT_EQ(default_generator().seed(), 2024u);
  EXPECT_EQ(default_generator().offset(), 64u + 21u);
  manual_seed(2025);
  EXPECT_NE(rand({64}).to_vector<float>(), a.to_vector<float>());
}

TEST(Random, OffsetsAdvanceByTheNumberOfElements) {
  Generator g(1);
  EXPECT_EQ(g.offset(), 0u);
  rand({3, 4}, DType::Float32, &g);
  EXPECT_EQ(g.offset(), 12u);
  randn({}, DType::Float32, &g);  // a 0-d tensor is one element
  EXPECT_EQ(g.offset(), 13u);
  rand({0, 5}, DType::Float32, &g);  // nothing drawn
  EXPECT_EQ(g.offset(), 13u);
  Tensor t = empty({2, 5}, DType::Float64);
  normal_(t, 0, 1, &g);
  EXPECT_EQ(g.offset(), 23u);
  bernoulli(full({7}, 0.5), &g);
  EXPECT_EQ(g.offset(), 30u);
  // Consecutive draws are the halves of one bigger draw.
  Generator h(9), whole(9);
  Tensor first = rand({10}, DType::Float64, &h), second = rand({10}, DType::Float64, &h);
  Tensor both = rand({20}, DType::Float64, &whole);
  std::vector<double> joined = first.to_vector<double>();
  for (double v : second.to_vector<double>()) joined.push_back(v);
  EXPECT_EQ(joined, both.to_vector<double>());
  // set_offset replays.
  h.set_offset(10);
  EXPECT_EQ(rand({10}, DType::Float64, &h).to_vector<double>(), second.to_vector<double>());
  EXPECT_EQ(h.advance(5), 20u);
  EXPECT_EQ(h.offset(), 25u);
}

TEST(Random, GeneratorsAreIndependent) {
  manual_seed(77);
  Generator a(77), b(77);
  Tensor from_a = rand({16}, DType::Float32, &a);
  EXPECT_EQ(default_generator().offset(), 0u) << "a private generator leaves the default alone";
  EXPECT_EQ(b.offset(), 0u);
  EXPECT_EQ(rand({16}, DType::Float32, &b).to_vector<float>(), from_a.to_vector<float>());
  EXPECT_EQ(rand({16}).to_vector<float>(), from_a.to_vector<float>()) << "same seed, same stream";
  Generator c(78);
  EXPECT_NE(rand({16}, DType::Float32, &c).to_vector<float>(), from_a.to_vector<float>());
  a.manual_seed(5);
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(b.offset(), 16u);
}

TEST(Random, ConcurrentDrawsReserveDisjointCounters) {
  Generator g(3);
  constexpr int kThreads = 4, kDraws = 200;
  std::vector<std::vector<uint64_t>> firsts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDraws; ++i) firsts[t].push_back(g.advance(10));
    });
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& f : firsts) all.insert(all.end(), f.begin(), f.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], 10 * i);
  EXPECT_EQ(g.offset(), 10u * kThreads * kDraws);
}

// ---- statistics over 100k draws ----
constexpr int64_t kN = 100000;

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size());
  return m;
}

TEST(RandomStatistics, Uniform) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Generator g(11);
    const auto v = rand({kN}, dt, &g).to_vector<double>();
    for (double x : v) ASSERT_TRUE(x >= 0 && x < 1) << x;
    const Moments m = moments(v);
    // sd of the mean: sqrt(1/12 / N) = 0.00091; of the variance: sqrt((1/80 - 1/144) / N) =
    // 0.00024.
    EXPECT_NEAR(m.mean, 0.5, 0.006);
    EXPECT_NEAR(m.var, 1.0 / 12, 0.0016);
    const auto w = [&] {
      Tensor t = empty({kN}, dt);
      uniform_(t, -3, 5, &g);
      return t.to_vector<double>();
    }();
    for (double x : w) ASSERT_TRUE(x >= -3 && x < 5) << x;
    EXPECT_NEAR(moments(w).mean, 1.0, 8 * 0.006);
  }
}

TEST(RandomStatistics, Normal) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Generator g(12);
    const auto v = randn({kN}, dt, &g).to_vector<double>();
    const Moments m = moments(v);
    // sd of the mean: 1/sqrt(N) = 0.0032; of the variance: sqrt(2/N) = 0.0045.
    EXPECT_NEAR(m.mean, 0.0, 0.021);
    EXPECT_NEAR(m.var, 1.0, 0.03);
    int64_t within = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      within += std::fabs(x) < 1;
    }
    // P(|z| < 1) = 0.6827; sd of the fraction sqrt(p(1-p)/N) = 0.0015.
    EXPECT_NEAR(static_cast<double>(within) / kN, 0.6827, 0.0097);
    Tensor t = empty({kN}, dt);
    normal_(t, 10, 0.5, &g);
    const Moments s = moments(t.to_vector<double>());
    EXPECT_NEAR(s.mean, 10, 0.5 * 0.021);
    EXPECT_NEAR(s.var, 0.25, 0.25 * 0.03);
  }
}

TEST(RandomStatistics, RandintAndBernoulli) {
  Generator g(13);
  const auto v = randint(-3, 7, {kN}, DType::Int64, &g).to_vector<int64_t>();
  std::vector<int64_t> counts(10, 0);
  for (int64_t x : v) {
    ASSERT_TRUE(x >= -3 && x < 7) << x;
    ++counts[x + 3];
  }
  // Each bucket: mean N/10 = 10000, sd sqrt(N * 0.1 * 0.9) = 95.
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), 10000, 620);
  const auto b = bernoulli({kN}, 0.3, DType::Float32, &g).to_vector<double>();
  const Moments m = moments(b);
  for (double x : b) ASSERT_TRUE(x == 0 || x == 1);
  // sd of the mean sqrt(0.21 / N) = 0.00145.
  EXPECT_NEAR(m.mean, 0.3, 0.0095);
  EXPECT_EQ(moments(bernoulli({1000}, 0.0, DType::Float32, &g).to_vector<double>()).mean, 0.0);
  EXPECT_EQ(moments(bernoulli({1000}, 1.0, DType::Float32, &g).to_vector<double>()).mean, 1.0);
}

}  // namespace
}  // namespace kiln
