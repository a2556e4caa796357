// Replay: a call that repeats the graph its function ran last time is matched node by node
// against the cached graph instead of being recorded again. Whatever it finds, the result must
// be what recording from scratch would give: these tests change the graph at every place a
// replay can stop (a placeholder, a constant, an op, the outputs) and compare with eager.
#include <gtest/gtest.h>

#include <atomic>

#include "capture/state.h"
#include "capture/test_utils.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::counting;
using testing::expect_equal;

// Calls that were cache hits found by replay (not by recording and hashing) since `start`.
uint64_t replay_hits_since(uint64_t start) { return capture::tls_replay_hits - start; }

Tensor noisy_branch(Tensor x, bool double_it) {
  Tensor y = x + randn({4});  // a random op early in the graph: its seed/offset are per call
  return double_it ? y * 2 : y + 1;
}

TEST(Replay, ARandomOpInAReplayedPrefixDrawsThisCallsNumbersWhenTheGraphThenDiffers) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile(noisy_branch, counting(compiles));
  // true, false: the second call replays randn, then differs at the last op (a recompile);
  // true again: replays the `false` graph, differs, finds the `true` graph by hash.
  const bool pattern[] = {true, false, true, false, false};
  const uint64_t hits = capture::tls_replay_hits;
  for (int i = 0; i < 5; ++i) {
    manual_seed(100 + i);
    Tensor got = f(zeros({4}), pattern[i]);
    manual_seed(100 + i);
    expect_equal(got, noisy_branch(zeros({4}), pattern[i]));
  }
  EXPECT_EQ(*compiles, 2);
  // Calls 3-5 replay: the latest entry until it differs, then the other, which shares the
  // prefix (randn) and so takes over without re-recording.
  EXPECT_EQ(replay_hits_since(hits), 3u);
}

TEST(Replay, SameOpsReturningAnotherValueIsNotAHit) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile(
      [](Tensor x, bool first) {
        Tensor a = x + 1;
        Tensor b = x * 3;
        return first ? a : b;
      },
      counting(compiles));
  Tensor x = arange(4, DType::Float32);
  const uint64_t hits = capture::tls_replay_hits;
  for (int i = 0; i < 4; ++i) {
    expect_equal(f(x, true), x + 1);
    expect_equal(f(x, false), x * 3);
  }
  EXPECT_EQ(*compiles, 2);
  EXPECT_EQ(replay_hits_since(hits), 6u);  // all but the two compiling calls
}

TEST(Replay, AlternatingShapesAndConstantsHitTheirOwnEntries) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile([](Tensor x, double s) { return (x * s).tanh(); }, counting(compiles));
  const uint64_t hits = capture::tls_replay_hits;
  for (int i = 0; i < 3; ++i) {
    for (int64_t n : {3, 5}) {
      for (double s : {0.5, 2.0}) {
        Tensor x = arange(n, DType::Float32);
        expect_equal(f(x, s), (x * s).tanh());
      }
    }
  }
  EXPECT_EQ(*compiles, 4);  // (3 | 5) x (0.5 | 2.0), each compiled once
  // Every other call is found by replay among the recent entries, without re-recording.
  EXPECT_EQ(replay_hits_since(hits), 8u);
}

TEST(Replay, InputMetadataIsGuardedAtEveryPlaceholder) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile([](Tensor a, Tensor b) { return a * b + a; }, counting(compiles));
  Tensor a = ones({2, 3}), b = full({2, 3}, 2.0);
  expect_equal(f(a, b), a * b + a);
  expect_equal(f(a, b), a * b + a);
  EXPECT_EQ(*compiles, 1);
  // The second input changes dtype, then layout, then requires_grad: each is a new graph.
  Tensor b64 = full({2, 3}, 2.0, DType::Float64);
  expect_equal(f(a, b64), a * b64 + a);
  Tensor bt = full({3, 2}, 2.0).t();
  expect_equal(f(a, bt), a * bt + a);
  Tensor bg = full({2, 3}, 2.0).requires_grad_();
  Tensor got = f(a, bg);
  EXPECT_TRUE(got.requires_grad());
  expect_equal(got.detach(), (a * bg + a).detach());
  EXPECT_EQ(*compiles, 4);
}

TEST(Replay, RepeatedInPlaceUpdatesAccumulate) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  Tensor w = zeros({2, 2});
  auto step = compile(
      [&w](Tensor g) {
        w.add_(g, 0.5);
        w.narrow(0, 1, 1).mul_(2);  // a partial write through a view
      },
      counting(compiles));
  Tensor w_eager = zeros({2, 2});
  for (int i = 0; i < 4; ++i) {
    Tensor g = full({2, 2}, static_cast<double>(i + 1));
    step(g);
    w_eager.add_(g, 0.5);
    w_eager.narrow(0, 1, 1).mul_(2);
    expect_equal(w, w_eager);
  }
  EXPECT_EQ(*compiles, 1);
}

TEST(Replay, ResetMakesTheNextCallCompileAgain) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile([](Tensor x) { return x.exp() - 1; }, counting(compiles));
  Tensor x = arange(3, DType::Float32);
  f(x);
  f(x);
  EXPECT_EQ(*compiles, 1);
  kiln::reset();
  expect_equal(f(x), x.exp() - 1);
  EXPECT_EQ(*compiles, 2);
}

TEST(Replay, SegmentsAfterAGraphBreakReplayToo) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile(
      [](Tensor x) {
        Tensor y = sin(x);
        if (y.sum().item<double>() > 100) return y;  // a sync point: two segments
        return cos(y) * 2;
      },
      counting(compiles));
  Tensor x = arange(5, DType::Float32);
  const uint64_t hits = capture::tls_replay_hits;
  for (int i = 0; i < 3; ++i) expect_equal(f(x), cos(sin(x)) * 2);
  EXPECT_EQ(*compiles, 2);
  EXPECT_EQ(replay_hits_since(hits), 4u);  // both segments of calls 2 and 3
}

TEST(Replay, ABreakBeforeAnyOpKeepsReplaying) {
  auto compiles = std::make_shared<std::atomic<int>>(0);
  auto f = compile(
      [](Tensor x) {
        graph_break();  // an empty segment: nothing to run, and replay must go on after it
        return (x * 2).exp();
      },
      counting(compiles));
  Tensor x = arange(3, DType::Float32);
  f(x);
  const uint64_t hits = capture::tls_replay_hits;
  for (int i = 0; i < 2; ++i) expect_equal(f(x), (x * 2).exp());
  EXPECT_EQ(*compiles, 1);
  EXPECT_EQ(replay_hits_since(hits), 2u);
}

}  // namespace
}  // namespace kiln
