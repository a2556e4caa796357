// Kiln's own float32 product (src/ops/sgemm.h) against a float64 reference: every layout,
// tails of the 6-row tile (64 columns with AVX-512, 16 with AVX2) and of the 128-long sum
// blocks, alpha/beta, padded row strides, both thread splits, and calls from inside a parallel
// region. Skipped where the host has neither (OpenBLAS computes every product there). Also
// built for AVX2 (kiln_kernels_avx2_tests) on AVX-512 hosts.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kiln/kiln.h"
#include "ops/sgemm.h"

namespace {

struct Case {
  int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha, beta;
  int64_t pad = 3;    // extra floats per row of a, b and c
  bool bias = false;  // beta scales a row bias instead of c
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c, bias;
};

// op(a)(i, p), op(b)(p, j) as stored with the case's layout.
float at_a(const Case& s, const Operands& o, int64_t i, int64_t p) {
  return s.trans_a ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
}
float at_b(const Case& s, const Operands& o, int64_t p, int64_t j) {
  return s.trans_b ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j];
}

Operands make_operands(const Case& s, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Operands o;
  o.lda = (s.trans_a ? s.m : s.k) + s.pad;
  o.ldb = (s.trans_b ? s.k : s.n) + s.pad;
  o.ldc = s.n + s.pad;
  o.a.resize((s.trans_a ? s.k : s.m) * o.lda);
  o.b.resize((s.trans_b ? s.n : s.k) * o.ldb);
  o.c.resize(s.m * o.ldc);
  for (float& x : o.a) x = dist(rng);
  for (float& x : o.b) x = dist(rng);
  // c is not read when beta == 0 or a bias replaces it: fill it with NaN so that any read shows.
  const bool c_unread = s.beta == 0.0f || s.bias;
  for (float& x : o.c) x = c_unread ? std::numeric_limits<float>::quiet_NaN() : dist(rng);
  if (s.bias) {
    o.bias.resize(s.n);
    for (float& x : o.bias) x = dist(rng);
  }
  return o;
}

void run(const Case& s, Operands& o) {
  kiln::ops::own_sgemm(s.trans_a, s.trans_b, s.m, s.n, s.k, s.alpha, o.a.data(), o.lda, o.b.data(),
                       o.ldb, s.beta, o.c.data(), o.ldc, s.bias ? o.bias.data() : nullptr);
}

// Compares with the float64 product; the bound is float32 summation error over k terms.
void expect_matches_reference(const Case& s, unsigned seed) {
  Operands o = make_operands(s, seed);
  const std::vector<float> before = o.c;
  run(s, o);
  const double eps = std::numeric_limits<float>::epsilon();
  int64_t bad = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double term = double(at_a(s, o, i, p)) * at_b(s, o, p, j);
        sum += term;
        magnitude += std::abs(term);
      }
      const double old = s.beta == 0.0f ? 0.0 : s.bias ? o.bias[j] : before[i * o.ldc + j];
      const double want = s.alpha * sum + s.beta * old;
      const double bound =
          (s.k + 4) * eps * (std::abs(s.alpha) * magnitude + std::abs(s.beta * old));
      const double got = o.c[i * o.ldc + j];
      if (!(std::abs(got - want) <= bound) && bad++ < 5)
        ADD_FAILURE() << "c(" << i << ", " << j << ") = " << got << ", want " << want << " (bound "
                      << bound << ") for m=" << s.m << " n=" << s.n << " k=" << s.k
                      << " trans_a=" << s.trans_a << " trans_b=" << s.trans_b
                      << " alpha=" << s.alpha << " beta=" << s.beta << " bias=" << s.bias;
    }
    // The padding past each row of c is never written.
    for (int64_t j = s.n; j < o.ldc; ++j)
      if (!(std::isnan(before[i * o.ldc + j]) && std::isnan(o.c[i * o.ldc + j])) &&
          before[i * o.ldc + j] != o.c[i * o.ldc + j] && bad++ < 5)
        ADD_FAILURE() << "padding c(" << i << ", " << j << ") was written";
  }
  EXPECT_EQ(bad, 0);
}

class OwnSgemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kiln::ops::own_sgemm_applies(false, false, 2048, 128, 128))
      GTEST_SKIP() << "no AVX2 on this host (or KILN_SGEMM=openblas): OpenBLAS computes floats";
    threads_ = omp_get_max_threads();
  }
  void TearDown() override {
    if (threads_) omp_set_num_threads(threads_);
  }
  int threads_ = 0;
};

TEST_F(OwnSgemm, MatchesFloat64OnEveryLayoutAndTail) {
  // (m, n, k): whole tiles, row tails 1..5, fewer rows than one tile, column tails (16, 17, 47,
  // 100) and fewer columns than one vector (4, 10), sums shorter than, equal to and longer than
  // one 128 block, and as short as 4.
  const int64_t shapes[][3] = {{48, 32, 16},  {49, 17, 255},  {59, 47, 256},  {61, 100, 257},
                               {96, 96, 600}, {50, 16, 31},   {130, 64, 513}, {72, 33, 128},
                               {4, 40, 300},  {130, 10, 300}, {200, 4, 64},   {130, 100, 4},
                               {5, 33, 10}};
  unsigned seed = 1;
  for (const auto& shape : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.5f, -0.25f}})
        expect_matches_reference(
            {shape[0], shape[1], shape[2], (layout & 1) != 0, (layout & 2) != 0, alpha, beta},
            seed++);
}

TEST_F(OwnSgemm, ARowBiasReplacesC) {
  unsigned seed = 100;
  for (const auto& shape : {std::array<int64_t, 3>{130, 100, 257}, {48, 17, 64}})
    for (int layout = 0; layout < 4; ++layout)
      expect_matches_reference({shape[0], shape[1], shape[2], (layout & 1) != 0, (layout & 2) != 0,
                                0.5f, -2.0f, 3, true},
                               seed++);
}

TEST_F(OwnSgemm, RowsAWholePageApart) {
  // a's rows 4 KiB apart (lda = 1024 floats), read in place.
  for (bool trans_b : {false, true})
    expect_matches_reference({64, 40, 300, false, trans_b, 1.0f, 0.0f, 1024 - 300}, 7);
}

TEST_F(OwnSgemm, ResultsDoNotDependOnTheThreadCount) {
  // Rows split (many tiles), columns split (5 tiles of rows, 2 strips of columns: the columns
  // balance better), rows split unevenly (the same with a transposed a, whose packing every
  // thread would repeat) and columns split with a transposed a (16 strips against 11 tiles),
  // each against one thread, bit for bit.
  for (const Case& s :
       {Case{300, 96, 700, false, true, 1.0f, 0.0f}, Case{60, 64, 2048, false, false, 1.0f, 1.0f},
        Case{60, 64, 2048, true, false, 1.0f, 1.0f}, Case{128, 128, 600, true, true, 1.0f, 0.0f}}) {
    omp_set_num_threads(1);
    Operands one = make_operands(s, 11);
    run(s, one);
    omp_set_num_threads(2);
    Operands two = make_operands(s, 11);
    run(s, two);
    EXPECT_EQ(0, std::memcmp(one.c.data(), two.c.data(), one.c.size() * sizeof(float)))
        << "m=" << s.m << " n=" << s.n << " k=" << s.k;
    expect_matches_reference(s, 11);
  }
}

TEST_F(OwnSgemm, InsideAParallelRegionEachCallRunsOnItsThread) {
  const Case s{64, 48, 200, true, true, 1.0f, 0.0f};
  std::vector<Operands> per_thread(2, make_operands(s, 5));
  Operands alone = make_operands(s, 5);
  run(s, alone);
#pragma omp parallel for num_threads(2)
  for (int t = 0; t < 2; ++t) run(s, per_thread[t]);
  for (const Operands& o : per_thread)
    EXPECT_EQ(0, std::memcmp(o.c.data(), alone.c.data(), o.c.size() * sizeof(float)));
}

#ifndef KILN_TEST_AVX2_BUILD  // (matmul is the library's, built for this host)
TEST_F(OwnSgemm, LinearThroughMatmulMatchesFloat64) {
  // The products of a Linear layer as kiln::linear and its backward issue them (folded batch,
  // transposed weight, transposed activations), checked against float64 matmul.
  auto x = kiln::randn({4, 80, 70});
  auto w = kiln::randn({160, 70});
  auto g = kiln::randn({4, 80, 160});
  ASSERT_TRUE(kiln::ops::own_sgemm_applies(false, true, 320, 160, 70) &&
              kiln::ops::own_sgemm_applies(false, false, 320, 70, 160) &&
              kiln::ops::own_sgemm_applies(true, false, 160, 70, 320));
  const auto x64 = x.to(kiln::DType::Float64), w64 = w.to(kiln::DType::Float64),
             g64 = g.to(kiln::DType::Float64);
  const std::pair<kiln::Tensor, kiln::Tensor> products[] = {
      {kiln::matmul(x, w.t()), kiln::matmul(x64, w64.t())},
      {kiln::matmul(g, w), kiln::matmul(g64, w64)},
      {kiln::matmul(g.reshape({320, 160}).t(), x.reshape({320, 70})),
       kiln::matmul(g64.reshape({320, 160}).t(), x64.reshape({320, 70}))}};
  for (const auto& [got, want] : products)
    EXPECT_TRUE(kiln::allclose(got.to(kiln::DType::Float64), want, 1e-4, 1e-3));
  // Linear with a bias: addmm adds it as the tiles are stored.
  auto bias = kiln::randn({160});
  EXPECT_TRUE(kiln::allclose(kiln::linear(x, w, bias).to(kiln::DType::Float64),
                             kiln::linear(x64, w64, bias.to(kiln::DType::Float64)), 1e-4, 1e-3));
  EXPECT_TRUE(kiln::allclose(
      kiln::addmm(bias, x.reshape({320, 70}), w.t(), 0.5, -2.0).to(kiln::DType::Float64),
      kiln::addmm(bias.to(kiln::DType::Float64), x64.reshape({320, 70}), w64.t(), 0.5, -2.0), 1e-4,
      1e-3));
}
#endif

// Where each build sends a product: a Linear layer's forward over 2048 tokens everywhere; a
// weight gradient (transposed a) and wide, long products only with AVX-512 (with AVX2,
// OpenBLAS's Haswell kernels measured as fast or faster there).
TEST_F(OwnSgemm, TheShapeRuleOfEachBuild) {
  EXPECT_TRUE(kiln::ops::own_sgemm_applies(false, true, 2048, 128, 128));
  EXPECT_TRUE(kiln::ops::own_sgemm_applies(false, true, 2048, 512, 128));
  EXPECT_FALSE(kiln::ops::own_sgemm_applies(false, false, 2048, 8, 128));  // < 16 columns
#ifdef KILN_TEST_AVX2_BUILD
  EXPECT_FALSE(kiln::ops::own_sgemm_applies(true, false, 512, 128, 2048));
  EXPECT_FALSE(kiln::ops::own_sgemm_applies(false, false, 2048, 512, 512));
  EXPECT_FALSE(kiln::ops::own_sgemm_applies(false, false, 512, 128, 512));
#else
  EXPECT_TRUE(kiln::ops::own_sgemm_applies(true, false, 512, 128, 2048));
  EXPECT_TRUE(kiln::ops::own_sgemm_applies(false, false, 2048, 512, 512));
#endif
}

}  // namespace
