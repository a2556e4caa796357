// Dynamic shapes, the graph side: sites, generalisation into symbols (duck sizing, sizes 0
// and 1 static, marked dims), and binding a captured graph to a dynamic one (src/ir).
#include <gtest/gtest.h>

#include "capture/test_utils.h"
#include "ir/symbolic_sizes.h"
#include "kiln/kiln.h"

namespace kiln::ir {
namespace {

// The graph `fn` captures when called with `args`.
template <class F, class... Args>
Graph captured(F fn, const Args&... args) {
  Graph graph;
  auto f = compile(fn, {.backend = testing::eager_seeing([&](const Graph& g) { graph = g; })});
  f(args...);
  return graph;
}

bool contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

TEST(SymbolicSizes, ASizeThatChangedBetweenTwoCallsIsASymbolTheOthersStayStatic) {
  auto fn = [](const Tensor& x) { return sum(x * 2, {1}); };
  const Graph a = captured(fn, ones({4, 16})), b = captured(fn, ones({4, 24}));
  EXPECT_FALSE(structurally_equal(a, b));
  ASSERT_TRUE(equal_but_sizes(a, b));
  EXPECT_EQ(hash_but_sizes(a), hash_but_sizes(b));
  const Graph* obs[] = {&b, &a};
  const std::optional<SymbolicSizes> s = generalize(obs);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->num_symbols(), 1u);  // dim 1 of x, x's stride 0 and the product's dim 1: one s0
  EXPECT_EQ(s->hints[0], 24);
  const std::vector<SizeSite> sites = size_sites(b);
  EXPECT_EQ(describe_site(b, sites[s->first_site[0]]), "dim 1 of input 0");
  std::string why;
  const std::optional<std::vector<int64_t>> bound =
      bind_sizes(b, *s, captured(fn, ones({4, 40})), &why);
  ASSERT_TRUE(bound) << why;
  EXPECT_EQ(*bound, std::vector<int64_t>{40});
  EXPECT_FALSE(bind_sizes(b, *s, captured(fn, ones({4, 1})), &why));
  EXPECT_NE(why.find("dim 1 of input 0 is 1: the guard 2 <= s0 failed"), std::string::npos) << why;
  EXPECT_FALSE(bind_sizes(b, *s, captured(fn, ones({5, 40})), &why));
  EXPECT_NE(why.find("dim 0 of input 0 changed 4 → 5 (static in the dynamic graph)"),
            std::string::npos)
      << why;
  // Another structure is no instance.
  EXPECT_FALSE(bind_sizes(
      b, *s, captured([](const Tensor& x) { return sum(x * 2, {0}); }, ones({4, 40})), &why));
  EXPECT_FALSE(why.empty());
}

TEST(SymbolicSizes, EqualSizesShareASymbolAndTheGuardsSaySo) {
  auto fn = [](const Tensor& a, const Tensor& b) { return cat({a, b}, 0) * 3; };
  const Graph g5 = captured(fn, ones({5}), ones({5})), g6 = captured(fn, ones({6}), ones({6}));
  const Graph* obs[] = {&g6, &g5};
  const std::optional<SymbolicSizes> s = generalize(obs);
  ASSERT_TRUE(s);
  const std::vector<std::string> guards = symbolic_guard_lines(g6, *s);
  EXPECT_TRUE(contains(guards, "2 <= s0  (s0: dim 0 of input 0, 6 when compiled)")) << guards[0];
  EXPECT_TRUE(contains(guards, "Eq(dim 0 of input 1, s0)"));
  std::string why;
  EXPECT_TRUE(bind_sizes(g6, *s, captured(fn, ones({9}), ones({9})), &why)) << why;
  EXPECT_FALSE(bind_sizes(g6, *s, captured(fn, ones({7}), ones({8})), &why));
  EXPECT_NE(why.find("dim 0 of input 1 is 8 but dim 0 of input 0 is 7"), std::string::npos) << why;
  // Two observations in which they differ give each its own symbol, and the cat's size a third.
  const Graph g78 = captured(fn, ones({7}), ones({8}));
  const Graph* apart[] = {&g78, &g6};
  const std::optional<SymbolicSizes> t = generalize(apart);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->num_symbols(), 3u);
  EXPECT_TRUE(bind_sizes(g78, *t, captured(fn, ones({3}), ones({11})), &why)) << why;
}

TEST(SymbolicSizes, AMarkedDimReachesTheSizesItsValueFlowsToFromOneCall) {
  auto fn = [](const Tensor& x) { return sum(x.reshape({x.size(0), 2, -1}), {2}); };
  const Graph g = captured(fn, ones({6, 8}));
  const std::pair<int32_t, int32_t> marked[] = {{0, 0}};
  const Graph* obs[] = {&g};
  const std::optional<SymbolicSizes> s = generalize(obs, marked);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->num_symbols(), 1u);
  std::string why;
  // The reshape target's first element follows dim 0; -1, 2 and the summed dim stay.
  EXPECT_TRUE(bind_sizes(g, *s, captured(fn, ones({10, 8})), &why)) << why;
  EXPECT_FALSE(bind_sizes(g, *s, captured(fn, ones({10, 12})), &why));
  // Nothing marked, one observation: nothing is dynamic.
  EXPECT_FALSE(generalize(obs));
}

TEST(SymbolicSizes, SizesZeroAndOneAreNeverSymbols) {
  auto fn = [](const Tensor& x) { return x + 1; };
  const Graph one = captured(fn, ones({1, 3})), five = captured(fn, ones({5, 3}));
  const Graph* from_one[] = {&one, &five};
  EXPECT_FALSE(generalize(from_one));  // at the hint the changed size is 1: it specialises
  const Graph* from_five[] = {&five, &one};
  const std::optional<SymbolicSizes> s = generalize(from_five);
  ASSERT_TRUE(s);
  std::string why;
  EXPECT_FALSE(bind_sizes(five, *s, captured(fn, ones({0, 3})), &why));
  EXPECT_NE(why.find("the guard 2 <= s0 failed"), std::string::npos) << why;
}

}  // namespace
}  // namespace kiln::ir
