// The inductor backend: fusion decisions, bitwise equality with eager, extern calls, the
// module cache and compiler errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "backends/inductor/cpp_compiler.h"
#include "backends/inductor/cpp_render.h"
#include "backends/inductor/kernel_grain.h"
#include "backends/inductor/lower.h"
#include "backends/inductor/lowering.h"
#include "backends/inductor/schedule.h"
#include "backends/inductor/step_profile.h"
#include "capture/retrace.h"
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

// The same for each of several outputs.
void expect_all_identical(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k)
    expect_identical(want[k], got[k], "output " + std::to_string(k));
}

// The graphs inductor compiled (as it lowers them), and the kernels of each.
struct Compiled {
  std::vector<inductor::Schedule> schedules;
  std::vector<ir::Graph> graphs;
  CompileOptions options() {
    CompileOptions o;
    o.backend = Backend([this](const ir::Graph& g, std::span<const TensorMeta> in) {
      inductor::LoweredGraph lowered = inductor::lower_graph(g);
      schedules.push_back(std::move(lowered.schedule));
      graphs.push_back(std::move(lowered.graph));
      return lookup_backend("inductor")(g, in);
    });
    return o;
  }
  // Extern steps calling `op` in every graph.
  size_t extern_calls_of(std::string_view op) const {
    size_t n = 0;
    for (size_t k = 0; k < schedules.size(); ++k)
      for (const auto& st : schedules[k].steps)
        n += st.kind == inductor::Step::Kind::Extern &&
             graphs[k].nodes[static_cast<size_t>(st.index)].op->name == op;
    return n;
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

// A chain long enough that one vector's dependent ops outrun the out-of-order window: its
// kernel computes 4 vectors side by side (vector_loop's group), a short chain 1 at a time; both
// equal to eager bit for bit at every length, the group's padded tail included.
Tensor long_chain(Tensor x, Tensor c) {
  for (int i = 0; i < 30; ++i) x = i % 3 == 0 ? x + c : i % 3 == 1 ? x * c : x.tanh();
  return x;
}
Tensor short_chain(Tensor x, Tensor c) { return (x + c).tanh() * c; }

TEST(Inductor, LongChainsComputeFourVectorsSideBySide) {
  manual_seed(0);
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 130, 1000, 4099}) {
    Tensor x = randn({n}), c = randn({n});
    Compiled longer, shorter;
    auto f = compile(long_chain, longer.options());
    auto g = compile(short_chain, shorter.options());
    expect_identical(long_chain(x, c), f(x, c), "long chain, n = " + std::to_string(n));
    expect_identical(short_chain(x, c), g(x, c), "short chain, n = " + std::to_string(n));
    ASSERT_EQ(longer.kernels(), 1u);
    // (One element: both inputs are read as one element, not loaded as blocks.)
    const std::string loaded = n == 1 ? "0" : "2";
    EXPECT_NE(inductor::render_cpp(longer.graphs[0], longer.schedules[0])
                  .find("inductor_rt::vector_loop<float, 1, " + loaded + ", 4>("),
              std::string::npos);
    EXPECT_NE(inductor::render_cpp(shorter.graphs[0], shorter.schedules[0])
                  .find("inductor_rt::vector_loop<float, 1, " + loaded + ">("),
              std::string::npos);
  }
  // Float64 too (8 lanes a vector), across the threads' chunks of a large input.
  Tensor x = randn({300001}, DType::Float64), c = randn({300001}, DType::Float64);
  expect_identical(long_chain(x, c), compile(long_chain)(x, c), "float64, 300001");
}

// A kernel has at most 64 operands and 256 ops: a chain whose intermediates nothing else reads
// is one kernel up to that length (W6's 100 ops); a chain returning many of its intermediates
// splits into kernels within the operand bound, each intermediate still eager's.
TEST(Inductor, ChainsSplitOnlyWhereTheirOutputsExceedTheOperandBound) {
  manual_seed(0);
  auto hundred_ops = [](Tensor x, Tensor c) {
    for (int i = 0; i < 150; ++i) x = i % 3 == 0 ? x + c : i % 3 == 1 ? x * c : x.tanh();
    return x;
  };
  Tensor x = randn({64}), c = randn({64});
  Compiled one;
  expect_identical(hundred_ops(x, c), compile(hundred_ops, one.options())(x, c), "150 ops");
  EXPECT_EQ(one.kernels(), 1u);
  auto six_hundred_ops = [](Tensor x, Tensor c) {  // at most 256 ops a kernel
    for (int i = 0; i < 600; ++i) x = i % 3 == 0 ? x + c : i % 3 == 1 ? x * c : x.tanh();
    return x;
  };
  Compiled three;
  expect_identical(six_hundred_ops(x, c), compile(six_hundred_ops, three.options())(x, c),
                   "600 ops");
  EXPECT_EQ(three.kernels(), 3u);
  auto every_third_returned = [](Tensor x, Tensor c) {
    std::vector<Tensor> kept;
    for (int i = 0; i < 240; ++i) {
      x = i % 3 == 0 ? x + c : i % 3 == 1 ? x * c : x.tanh();
      if (i % 3 == 2) kept.push_back(x);
    }
    return kept;
  };
  Compiled split;
  expect_all_identical(every_third_returned(x, c),
                       compile(every_third_returned, split.options())(x, c));
  EXPECT_GE(split.kernels(), 2u);  // 80 outputs: more than one kernel can write
}

// A bool mask read into float arithmetic (ReLU's derivative, with the bias gradient's column
// sum, as W4's backward has it): the mask's bytes converted in the kernel, equal to eager.
TEST(Inductor, BoolMasksCastInKernelsAsEagerCastsThem) {
  manual_seed(0);
  auto relu_backward = [](const Tensor& g, const Tensor& x) {
    const Tensor d = g * (x > 0);
    return std::vector<Tensor>{d, d.sum({0}), (g + 1) * (x < 0.5)};
  };
  for (const Shape& shape : {Shape{256, 512}, Shape{7, 33}, Shape{2048, 128}}) {
    Tensor g = randn(shape), x = randn(shape);
    expect_all_identical(relu_backward(g, x), compile(relu_backward)(g, x));
  }
  // The eager cast of a mask, read as bytes too.
  Tensor m = randn({1000}) > 0;
  Tensor f = m.to(DType::Float32);
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(f[i].item<float>(), m[i].item<bool>() ? 1.0f : 0.0f) << i;
}

// The position of each extern call and kernel in a graph's steps, as "E:<op>" / "K<n>".
std::vector<std::string> step_names(const Compiled& c, size_t graph = 0) {
  std::vector<std::string> out;
  for (const auto& st : c.schedules[graph].steps)
    out.push_back(
        st.kind == inductor::Step::Kind::Extern
            ? detail::concat("E:", c.graphs[graph].nodes[static_cast<size_t>(st.index)].op->name)
            : detail::concat("K", st.index));
  return out;
}

TEST(Inductor, PointwiseOpsFuseAcrossExternCallsTheyDoNotDependOn) {
  manual_seed(10);
  Tensor x = randn({16, 24}), a = randn({16, 8}), b = randn({8, 24});
  // Nothing reads u's kernel before the matmul, so the kernel moves after it and every
  // pointwise op joins it: one loop, run after the matmul (before, mm split it in two).
  auto fn = [](Tensor x, Tensor a, Tensor b) {
    Tensor u = x * 2;
    Tensor m = mm(a, b);
    Tensor v = tanh(u) + 1;
    return v * m + u;
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(x, a, b), f(x, a, b));
  EXPECT_EQ(step_names(c), (std::vector<std::string>{"E:mm", "K0"}));
  EXPECT_EQ(c.schedules[0].kernels[0].ops.size(), 5u);
}

TEST(Inductor, AConsumerJoinsAKernelAlreadyReadByAnExternWhenItsInputsAreReady) {
  manual_seed(11);
  Tensor x = randn({32, 40});
  // The max (over columns: an extern call) reads u, so u's kernel must run before it; exp(u) * 3
  // needs nothing the max makes, so it is computed in that same kernel (u is read once).
  // sigmoid(s) needs the max: after.
  auto fn = [](Tensor x) {
    Tensor u = x * 0.5 + 1;
    Tensor s = u.amax({0}, true);
    Tensor e = u.exp() * 3;
    return e * s.sigmoid();
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(x), f(x));
  ASSERT_EQ(c.schedules.size(), 1u);
  const auto steps = step_names(c);
  ASSERT_EQ(steps.size(),
            4u);  // K0 (mul, add, exp, mul), the max, sigmoid's kernel, the last mul's
  EXPECT_EQ(steps[0], "K0");
  EXPECT_EQ(steps[1], "E:amax");
  EXPECT_EQ(c.schedules[0].kernels[0].ops.size(), 4u);
}

TEST(Inductor, MatmulBiasAndActivationAreOneBlasCallAndOneEpilogue) {
  manual_seed(14);
  Tensor x = randn({8, 16, 32}), w = randn({24, 32}), b = randn({24});
  // The bias rides in the BLAS call (addmm, through linear) or in the kernel after the matrix
  // product; either way the activation is that kernel: one pass over the product's result.
  auto with_linear = [](Tensor x, Tensor w, Tensor b) { return gelu(linear(x, w, b)); };
  auto with_matmul = [](Tensor x, Tensor w, Tensor b) { return gelu(matmul(x, w.t()) + b); };
  for (auto* fn : {+with_linear, +with_matmul}) {
    Compiled c;
    auto f = compile(fn, c.options());
    expect_identical(fn(x, w, b), f(x, w, b));
    EXPECT_EQ(c.externs(), 1u);
    EXPECT_EQ(c.kernels(), 1u);
  }
}

TEST(Inductor, IndependentLoopsOverOneInputShareAKernel) {
  manual_seed(12);
  Tensor x = randn({64, 33}), w = randn({33, 33});
  // Two chains over x separated by a matmul of w: both read x, so they share one loop.
  auto fn = [](Tensor x, Tensor w) {
    Tensor p = (x * 3).tanh();
    Tensor m = mm(w, w);
    Tensor q = x.exp() - 1;
    return std::vector<Tensor>{p, m, q};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_all_identical(fn(x, w), f(x, w));
  EXPECT_EQ(c.kernels(), 1u);
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

// ---- pads and cats read through windows ----

// The pads and cats in a graph's steps that ran as extern calls.
size_t pad_and_cat_externs(const Compiled& c) {
  return c.extern_calls_of("pad") + c.extern_calls_of("cat");
}

TEST(Inductor, PadsSummedAreOneKernelReadingThroughWindows) {
  manual_seed(21);
  // A training step's q/k/v gradient: three [B, T, H, D] gradients (permuted views of matmul
  // results) padded into their slots of a [B, T, 3, H, D] tensor and summed.
  Tensor q = randn({4, 3, 16, 8}), k = randn({4, 3, 16, 8}), v = randn({4, 3, 16, 8});
  auto fn = [](Tensor q, Tensor k, Tensor v) {
    auto slot = [](Tensor g, int64_t before, int64_t after) {
      return pad(g.permute({0, 2, 1, 3}).unsqueeze(2), {0, 0, 0, 0, before, after}, 0);
    };
    return (slot(q, 0, 2) + slot(k, 1, 1) + slot(v, 2, 0)).view({4, 16, 72});
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(q, k, v), f(q, k, v));
  EXPECT_EQ(c.kernels(), 1u);
  EXPECT_EQ(c.externs(), 0u);
  const inductor::Kernel& kernel = c.schedules[0].kernels[0];
  ASSERT_EQ(kernel.inputs.size(), 3u);
  for (const inductor::KernelInput& in : kernel.inputs) EXPECT_TRUE(in.windowed());
  const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
  EXPECT_NE(source.find("= pad as index arithmetic"), std::string::npos) << source;
  // (Its innermost range, a head's 8 elements, is short: the kernel walks the runs itself.)
  EXPECT_NE(source.find("short_run_loop"), std::string::npos) << source;
}

TEST(Inductor, ShortInnermostRangesRunInTheKernelsOwnLoop) {
  manual_seed(24);
  // Runs of one head's D elements: pads read through windows along an outer dim, an input
  // transposed along the run (gathered), one broadcast along it, a tril computed from each
  // element's index, and sizes large enough to split the runs across threads mid-odometer. A
  // long innermost range keeps the shared block loop.
  auto fn = [](Tensor q, Tensor kt, Tensor v, Tensor scale) {
    auto slot = [](Tensor g, int64_t before, int64_t after) {
      return pad(g.permute({0, 2, 1, 3}).unsqueeze(2), {0, 0, 0, 0, before, after}, 0);
    };
    Tensor k = kt.transpose(-1, -2);
    Tensor sum = slot(q, 0, 2) + slot(k, 1, 1) + slot(v, 2, 0) * scale;
    return std::vector<Tensor>{sum, tril(sum.exp())};
  };
  for (auto [b, d, loop] :
       {std::tuple{3, 8, "short_run_loop"}, std::tuple{64, 32, "short_run_loop"},
        std::tuple{2, 300, "window_loop"}}) {
    SCOPED_TRACE(detail::concat("B ", b, ", D ", d));
    const int64_t t = 17, h = 3;
    Tensor q = randn({b, h, t, d}), kt = randn({b, h, d, t}), v = randn({b, h, t, d});
    Tensor scale = randn({b, t, 1, h, 1});
    Compiled c;
    auto f = compile(fn, c.options());
    expect_all_identical(fn(q, kt, v, scale), f(q, kt, v, scale));
    const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
    EXPECT_NE(source.find(loop), std::string::npos) << source;
  }
}

TEST(Inductor, InputsBroadcastAlongTheRunAreReadAsOneElementPerBlock) {
  manual_seed(25);
  // A batch norm's per-channel affine and ReLU: scale and shift are broadcast along each
  // channel's H x W run, so the kernel reads one element of each per block (no filled block).
  // Long runs (the shared block loop, several blocks per run and threads splitting mid-run),
  // short runs (short_run_loop), a one-element tensor broadcast everywhere, and a bias broadcast
  // along an outer dim only (read as a block): all bitwise equal to eager. Runs under 32
  // elements go to the shared loop, whose blocks then span several runs: there the broadcast
  // inputs are filled run by run, not read as one element.
  auto affine = [](Tensor x, Tensor scale, Tensor shift, Tensor one) {
    return relu(x * scale + shift) * one;
  };
  // (5 x 7 x 3001 and 1001 x 7 x 7 elements: two threads' shares meet mid-run.)
  for (auto [n, hw, loop, one_element] :
       {std::tuple{2, 1100, "block_loop", 3u}, std::tuple{5, 3001, "block_loop", 3u},
        std::tuple{8, 200, "short_run_loop", 3u}, std::tuple{8, 49, "short_run_loop", 3u},
        std::tuple{1001, 7, "block_loop", 0u}, std::tuple{8, 3, "block_loop", 0u}}) {
    SCOPED_TRACE(detail::concat("N ", n, ", H x W ", hw));
    const int64_t ch = 7;
    Tensor x = randn({n, ch, hw}), scale = randn({ch, 1}), shift = randn({ch, 1});
    Tensor one = randn({1});
    Compiled c;
    auto f = compile(affine, c.options());
    expect_identical(affine(x, scale, shift, one), f(x, scale, shift, one));
    ASSERT_EQ(c.kernels(), 1u);
    const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
    EXPECT_NE(source.find(loop), std::string::npos) << source;
    size_t scalars = 0;
    for (size_t at = 0; (at = source.find("// broadcast along the block", at)) != std::string::npos;
         ++at)
      ++scalars;
    EXPECT_EQ(scalars, one_element) << source;  // scale, shift, one
    // A dynamic graph's kernel learns its strides per call: it fills blocks as before.
    const std::string varying = inductor::render_cpp(c.graphs[0], c.schedules[0], true);
    EXPECT_EQ(varying.find("broadcast along the block"), std::string::npos) << varying;
  }
  auto bias = [](Tensor x, Tensor b) { return (x + b).tanh(); };
  Tensor x = randn({300, 40}), b = randn({40});
  Compiled c;
  auto f = compile(bias, c.options());
  expect_identical(bias(x, b), f(x, b));
  const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
  EXPECT_EQ(source.find("broadcast along the block"), std::string::npos) << source;
}

TEST(Inductor, PadsCropFillAndCrossThreadChunksAsEagerDoes) {
  manual_seed(22);
  // Padding and cropping on several dims, the innermost among them (runs split at the window's
  // edges), a fill value, integer and bool tensors, and one large enough for several threads,
  // whose chunks start inside windows.
  auto fn = [](Tensor x, Tensor i, Tensor b) {
    Tensor px = pad(x, {3, -2, -1, 2}, 1.5);           // last dim: 3 before, 2 cropped; dim -2 too
    Tensor pi = pad(i, {1, 1}, -7) * 3;                // int64
    Tensor pb = logical_not(pad(b, {0, 0, 2, 0}, 1));  // bool, filled with true
    return std::vector<Tensor>{px.exp() * 2, pi, pb};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  for (int64_t rows : {5, 700}) {
    Tensor x = randn({rows, 301}), i = randint(-50, 50, {rows, 9}), b = randn({rows, 4}) > 0;
    expect_all_identical(fn(x, i, b), f(x, i, b));
  }
  EXPECT_EQ(pad_and_cat_externs(c), 0u);
}

TEST(Inductor, CatsAreReadPieceByPiece) {
  manual_seed(23);
  // Along the last dim (pieces of different widths, one a transposed view) and along dim 0.
  auto fn = [](Tensor a, Tensor b, Tensor m) {
    Tensor rows = cat({a, b.t(), a * 2}, -1);  // [6, 5 + 3 + 5]
    Tensor stacked = cat({m, m.exp()}, 0);     // [2 * 6, 13]
    return tanh(rows) + stacked.slice(0, 0, 6) * stacked.slice(0, 6, 12);
  };
  Tensor a = randn({6, 5}), b = randn({3, 6}), m = randn({6, 13});
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(a, b, m), f(a, b, m));
  // `a * 2` is a kernel's output the first cat reads; the second cat is read through views,
  // so it is stored (an extern call).
  EXPECT_EQ(c.extern_calls_of("cat"), 1u);
}

TEST(Inductor, FlipsAndRollsAreIndexArithmetic) {
  manual_seed(25);
  // A flip is the input read with negated strides (the innermost dim among them); a roll is two
  // pieces per rolled dim, each the input shifted into a window. Rolls by a negative amount, by
  // more than the size, along two dims; a strided input; large enough for several threads.
  auto fn = [](Tensor x, Tensor y) {
    Tensor a = flip(x, {0, 1}) * 2 + y;
    Tensor b = roll(x, {3, -1}, {1, 0}).exp() - roll(y, {1001}, {1});
    Tensor c = flip(x.t(), {-1}) + roll(x.t(), {2}, {0});
    return std::vector<Tensor>{a, b, c};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  for (int64_t rows : {7, 600}) {
    Tensor x = randn({rows, 130}), y = randn({rows, 130});
    expect_all_identical(fn(x, y), f(x, y));
  }
  EXPECT_EQ(c.extern_calls_of("flip") + c.extern_calls_of("roll"), 0u);
}

TEST(Inductor, RepeatsAreReadCopyByCopy) {
  manual_seed(34);
  // A repeat of at most 8 copies (as many repeats as its input has dims) is one windowed piece
  // per copy, along one dim or several, of a strided input too; large enough for several
  // threads. More copies stay an extern call.
  auto fn = [](Tensor x, Tensor b) {
    return std::vector<Tensor>{repeat(x, {2, 3}) * 2 + 1, repeat(x.t(), {1, 2}).exp(),
                               repeat(b, {4, 1}) - x};
  };
  auto many = [](Tensor, Tensor b) { return repeat(b, {9, 1}) * 2; };
  for (int64_t cols : {5, 9000}) {
    Tensor x = randn({4, cols}), b = randn({1, cols});
    Compiled c, c2;
    auto f = compile(fn, c.options());
    auto g = compile(many, c2.options());
    expect_all_identical(fn(x, b), f(x, b));
    expect_identical(many(x, b), g(x, b));
    EXPECT_EQ(c.extern_calls_of("repeat"), 0u);
    EXPECT_EQ(c2.extern_calls_of("repeat"), 1u);
  }
}

TEST(Inductor, TrilAndTriuArePointwiseWithAnIndexCondition) {
  manual_seed(35);
  // Each element is its input's or zero by its row and column (from its flat index): below,
  // on and above the diagonal, batched, transposed, bool; large enough for several threads.
  auto fn = [](Tensor x, Tensor y) {
    return std::vector<Tensor>{tril(x * 2, -1) + y, triu(x.transpose(1, 2), 2).exp(),
                               logical_and(tril(gt(x, wrap_scalar(0)), 5), gt(y, wrap_scalar(0)))};
  };
  for (const Shape& shape : {Shape{3, 7, 9}, Shape{4, 300, 300}}) {
    Tensor x = randn(shape), y = randn(shape);
    Compiled c;
    auto f = compile(fn, c.options());
    expect_all_identical(fn(x, y), f(x, y));
    EXPECT_EQ(c.externs(), 0u);
  }
}

TEST(Inductor, EmbeddingsAndIndexSelectsAreIndirectLoads) {
  manual_seed(36);
  // A token and a position embedding summed, an index_select of a transposed table by int32
  // indices, a gather: kernels loading the table rows the indices pick (no extern call, nothing
  // stored between the lookup and the add), bitwise eager's.
  auto embed = [](Tensor w, Tensor pe, Tensor idx) {
    return embedding(w, idx) * 2 + embedding(pe, arange(idx.size(-1)));
  };
  auto pick = [](Tensor x, Tensor idx) { return index_select(x.t(), 1, idx).exp() + 1; };
  auto take = [](Tensor x, Tensor idx) { return gather(x, 0, idx) * x.narrow(0, 0, 3); };
  Tensor w = randn({96, 128}), pe = randn({64, 128}), x = randn({40, 50});
  Tensor idx = randint(0, 96, {32, 64}), idx32 = randint(0, 50, {7}, DType::Int32);
  Compiled c, c2;
  auto f = compile(embed, c.options());
  auto g = compile(pick, c2.options());
  expect_identical(embed(w, pe, idx), f(w, pe, idx));
  expect_identical(pick(x, idx32), g(x, idx32));
  Compiled c3;
  auto h = compile(take, c3.options());
  Tensor rows = randint(0, 40, {3, 50});
  expect_identical(take(x, rows), h(x, rows));
  // Rows of 300 (not short runs): blocks of the loop start and end inside table rows.
  Tensor wide = randn({10, 300}), few = randint(0, 10, {4, 5});
  expect_identical(embed(wide, wide, few), f(wide, wide, few));
  EXPECT_EQ(c3.externs(), 0u);
  EXPECT_EQ(c.extern_calls_of("embedding"), 0u);
  EXPECT_EQ(c2.externs(), 0u);
  EXPECT_EQ(c2.kernels(), 1u);
  // An index out of range: eager's error, before the kernel writes anything.
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const IndexError& e) {
      return std::string(e.what());
    }
    return std::string("no IndexError");
  };
  Tensor bad = tensor(std::vector<int64_t>{3, 96, 1}, {1, 3});
  const std::string want = message([&] { embed(w, pe.narrow(0, 0, 3), bad); });
  EXPECT_NE(want.find("index 96 is out of bounds"), std::string::npos) << want;
  EXPECT_EQ(message([&] { f(w, pe.narrow(0, 0, 3), bad); }), want);
  // Rows of no elements: nothing is read, so nothing is checked (as in eager).
  Tensor empty_rows = randn({4, 0});
  auto select = [](Tensor x, Tensor idx) { return index_select(x, 0, idx) + 1; };
  Compiled c4;
  auto s = compile(select, c4.options());
  expect_identical(select(empty_rows, bad.view({-1})), s(empty_rows, bad.view({-1})));
}

TEST(Inductor, KernelsStayWithinTheLoopsOperandLimit) {
  manual_seed(26);
  // Nine 8-piece cats summed: one kernel would read 72 inputs, more than the block loop takes
  // (64 operands); the chain splits into kernels that fit.
  std::vector<Tensor> pieces;
  for (int i = 0; i < 72; ++i) pieces.push_back(randn({2, 5}));
  auto fn = [](std::vector<Tensor> p) {
    Tensor total;
    for (size_t c = 0; c < 9; ++c) {
      Tensor joined = cat(std::vector<Tensor>(p.begin() + 8 * c, p.begin() + 8 * c + 8), 0);
      total = c == 0 ? joined * 1.5 : total + joined;
    }
    return total;
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(pieces), f(pieces));
  EXPECT_GE(c.kernels(), 2u);
  EXPECT_EQ(c.extern_calls_of("cat"), 0u);
  for (const inductor::Kernel& k : c.schedules[0].kernels)
    EXPECT_LE(k.inputs.size() + k.outputs.size(), 64u);
}

TEST(Inductor, PadsTheGraphReturnsOrNonPointwiseOpsReadAreExternCalls) {
  manual_seed(24);
  Tensor x = randn({8, 12}), w = randn({14, 5});
  auto fn = [](Tensor x, Tensor w) {
    Tensor p = pad(x, {1, 1}, 0);                   // returned
    Tensor s = softmax(pad(x, {0, 2}, 0) * 2, -1);  // read by a pointwise op, then a row op
    Tensor m = mm(pad(x.exp(), {1, 1}, 0), w);      // read by a matrix product
    return std::vector<Tensor>{p, s, m};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_all_identical(fn(x, w), f(x, w));
  EXPECT_EQ(c.extern_calls_of("pad"), 2u);
}

// ---- row kernels: softmax and log_softmax with their prologue and epilogue ----

TEST(Inductor, SoftmaxWithItsPrologueAndEpilogueIsOneKernelAndBitwiseEqual) {
  manual_seed(20);
  // The attention pattern: scale, mask, softmax, then a pointwise use; rows of 37 (a vector
  // tail) and 1,000 (several blocks), a mask broadcast over the leading dims.
  for (int64_t cols : {37, 1000}) {
    Tensor x = randn({2, 3, 5, cols}), mask = rand({5, cols}) > 0.7;
    auto fn = [](Tensor x, Tensor mask) {
      Tensor att = masked_fill(x * 0.125, mask, -1e9);
      return softmax(att, -1) * 2 + 1;
    };
    Compiled c;
    auto f = compile(fn, c.options());
    for (int call = 0; call < 2; ++call) expect_identical(fn(x, mask), f(x, mask));
    ASSERT_EQ(c.schedules.size(), 1u);
    EXPECT_EQ(c.kernels(), 1u);
    EXPECT_EQ(c.externs(), 0u) << "cols " << cols;
    EXPECT_GT(c.schedules[0].kernels[0].row_size, 0);
  }
}

TEST(Inductor, RowKernelsReadStridedRowsAndMixDtypes) {
  manual_seed(21);
  // log_softmax over a transposed input (rows gathered), in float64, then an op mixing in a
  // float32 tensor; and one over a row broadcast from a [R, 1] tensor.
  Tensor x = randn({33, 20}, DType::Float64), y = randn({20, 33}), b = randn({20, 1});
  auto fn = [](Tensor x, Tensor y, Tensor b) {
    Tensor l = log_softmax(x.t() + 1, 1);
    Tensor s = softmax(b.expand({20, 33}) * y, -1);
    return std::vector<Tensor>{l * y, s};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  for (int call = 0; call < 2; ++call) {
    expect_all_identical(fn(x, y, b), f(x, y, b));
  }
  EXPECT_EQ(c.externs(), 0u);
  EXPECT_EQ(c.extern_calls_of("log_softmax"), 0u);
}

TEST(Inductor, RowReductionsFuseWithWhatTheyReadAndWhatReadsThem) {
  manual_seed(24);
  // softmax's backward, g - y * sum(g * y): one kernel; and layer_norm written out by hand
  // (mean, centre, variance, rsqrt: per-row values read back along the row): one kernel.
  Tensor y = softmax(randn({6, 4, 50}), -1), g = randn({6, 4, 50});
  Tensor x = randn({24, 300}), w = randn({300});
  auto softmax_backward = [](Tensor y, Tensor g) {
    Tensor gy = g * y;
    return gy - y * gy.sum({-1}, true);
  };
  auto layer_norm = [](Tensor x, Tensor w) {
    Tensor centred = x - x.mean({-1}, true);
    Tensor rstd = rsqrt((centred * centred).mean({1}, true) + 1e-5);
    return std::vector<Tensor>{centred * rstd * w, rstd};
  };
  Compiled c;
  auto f = compile(softmax_backward, c.options());
  for (int call = 0; call < 2; ++call) expect_identical(softmax_backward(y, g), f(y, g));
  EXPECT_EQ(c.kernels(), 1u);
  EXPECT_EQ(c.externs(), 0u);
  Compiled c2;
  auto h = compile(layer_norm, c2.options());
  for (int call = 0; call < 2; ++call) {
    expect_all_identical(layer_norm(x, w), h(x, w));
  }
  EXPECT_EQ(c2.kernels(), 1u);
  EXPECT_EQ(c2.externs(), 0u);
  // Runs of pointwise ops between the row ops compute on registers (centred * rstd * w: a
  // per-row value broadcast, no row buffer for the product).
  const std::string source = inductor::render_cpp(c2.graphs[0], c2.schedules[0]);
  EXPECT_NE(source.find("mul, mul (on registers)"), std::string::npos) << source;
  // A sum without keepdim is a per-row output too; float64, a row read from a graph input, and
  // per-row ops converting a float32 per-row input (one conversion each).
  Tensor d = randn({7, 33}, DType::Float64), e = randn({7, 1});
  auto sums = [](Tensor d, Tensor e) {
    Tensor m = (d * 2).mean({-1}, true);
    return std::vector<Tensor>{d.sum({1}), (m * e) - (m + e)};
  };
  Compiled c3;
  auto k = compile(sums, c3.options());
  expect_all_identical(sums(d, e), k(d, e));
  EXPECT_EQ(c3.externs(), 0u);
  // Register runs on either side of a row op reading the same constants and per-row value
  // (found by the fuzzer: each run declared them under one name, which did not compile).
  auto runs = [](Tensor x) {
    Tensor a = x * 2 + 1;
    Tensor m = a.mean({-1}, true);
    Tensor s = softmax((a - m) * 2 + 1, -1);
    return (s - m) * 2 + 1;
  };
  Compiled c4;
  auto r = compile(runs, c4.options());
  expect_identical(runs(x), r(x));
  EXPECT_EQ(c4.kernels(), 1u);
  EXPECT_EQ(c4.externs(), 0u);
}

TEST(Inductor, RowMaxAndMinFuseAsEagerFoldsThem) {
  manual_seed(32);
  // A softmax written out (subtract the row's max for stability): one row kernel. Rows with
  // NaN, infinities and both zeros check that the fold is eager's (which of -0 and 0 wins
  // depends on the order).
  auto stable_softmax = [](Tensor x) {
    Tensor e = (x - x.amax({-1}, true)).exp();
    return e / e.sum({-1}, true);
  };
  auto spread = [](Tensor x) {
    return std::vector<Tensor>{x.amax({1}) - x.amin({1}), x.amin({-1}, true) * x};
  };
  std::vector<float> values = randn({9, 40}).to_vector<float>();
  values[2 * 40 + 3] = std::nanf("");
  values[4 * 40] = std::numeric_limits<float>::infinity();
  values[5 * 40 + 7] = -std::numeric_limits<float>::infinity();
  Tensor x = tensor(values, {9, 40});
  Tensor zeros_row = tensor({0.0, -0.0, 0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0}).unsqueeze(0);
  Tensor z = cat({zeros_row, zeros_row.neg()}, 0);
  Compiled c;
  auto f = compile(stable_softmax, c.options());
  expect_identical(stable_softmax(x), f(x));
  EXPECT_EQ(c.kernels(), 1u);
  EXPECT_EQ(c.externs(), 0u);
  Compiled c2;
  auto g = compile(spread, c2.options());
  expect_all_identical(spread(x), g(x));
  expect_all_identical(spread(z), g(z));
  EXPECT_EQ(c2.extern_calls_of("amax") + c2.extern_calls_of("amin"), 0u);
  // var (two passes, as eager's) and std = sqrt(var), with the correction and without.
  auto standardise = [](Tensor x) {
    return std::vector<Tensor>{(x - x.mean({-1}, true)) / kiln::std(x, {-1}, 1, true),
                               var(x, {1}, 0) * 2};
  };
  Compiled c3;
  auto h = compile(standardise, c3.options());
  Tensor d = randn({7, 300}, DType::Float64) * 3 + 100;  // far from 0: cancellation shows
  expect_all_identical(standardise(x), h(x));
  expect_all_identical(standardise(d), h(d));
  EXPECT_EQ(c3.extern_calls_of("var"), 0u);
}

TEST(Inductor, RowProductsExtremesNormsAndLogSumExpsAreRowReductions) {
  // prod folds a row as eager's does (in double); argmax and argmin (and max(dim), min(dim))
  // give where the row's extreme first occurs (the first NaN, the first of equal zeros), one index
  // per row, which pointwise ops of the same kernel then read: compared with the labels, and
  // converted.
  auto accuracy_and_more = [](Tensor x, Tensor labels) {
    Tensor scaled = x * 0.25 + 1;
    return std::vector<Tensor>{prod(scaled, {-1}), eq(argmax(scaled, -1, true), labels),
                               argmin(x, -1, true).to(x.dtype()) + x.sum({-1}, true), argmax(x, 1)};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_info(dtype).name);
    std::vector<double> values = randn({9, 40}, DType::Float64).to_vector<double>();
    values[2 * 40 + 3] = std::nan("");
    values[2 * 40 + 30] = std::nan("");
    values[4 * 40 + 5] = std::numeric_limits<double>::infinity();
    values[4 * 40 + 25] = std::numeric_limits<double>::infinity();
    for (int c = 0; c < 40; ++c) values[6 * 40 + c] = c % 3 == 1 ? 0.0 : -0.0;
    Tensor x = tensor(values, {9, 40}).to(dtype);
    std::vector<int64_t> label_values = argmax(x * 0.25 + 1, -1).to_vector<int64_t>();
    label_values[0] = label_values[1] = 7;  // (where those rows' argmax is not 7: a miss)
    Tensor labels = tensor(label_values, {9, 1});
    Compiled c;
    auto f = compile(accuracy_and_more, c.options());
    expect_all_identical(accuracy_and_more(x, labels), f(x, labels));
    EXPECT_EQ(c.kernels(), 1u);
    EXPECT_EQ(c.externs(), 0u);
    // max(dim) and min(dim): the value and where it first occurs, both per row.
    auto extremes = [](Tensor x) {
      auto [top, at] = max(x * 2, -1, true);
      auto [bottom, where] = min(x, 1);
      return std::vector<Tensor>{top - x, at, bottom, where * 3};
    };
    Compiled c2;
    auto g = compile(extremes, c2.options());
    expect_all_identical(extremes(x), g(x));
    EXPECT_EQ(c2.extern_calls_of("max_dim") + c2.extern_calls_of("min_dim"), 0u);
  }
  // logsumexp (the row's max, then the sum of exps, as eager's two passes), read by the ops
  // after it: a log_softmax written out. Rows of -inf and with +inf check the unshifted cases.
  auto log_probabilities = [](Tensor x) { return x * 2 - logsumexp(x * 2, {-1}, true); };
  std::vector<float> rows = randn({5, 70}).to_vector<float>();
  for (int c = 0; c < 70; ++c) rows[70 + c] = -std::numeric_limits<float>::infinity();
  rows[3 * 70 + 9] = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = tensor(rows, {5, 70}).to(dtype);
    Compiled c;
    auto f = compile(log_probabilities, c.options());
    expect_identical(log_probabilities(x), f(x));
    EXPECT_EQ(c.kernels(), 1u);
    EXPECT_EQ(c.externs(), 0u);
  }
  // 2-, 1- and inf-norms of rows (x / ||x||: a normalisation), as eager folds them; other p
  // are the eager kernel's.
  auto normalised = [](Tensor x) {
    return std::vector<Tensor>{x / norm(x, 2, {-1}, true), norm(x * 3, 1, {-1}),
                               norm(x, std::numeric_limits<double>::infinity(), {-1}),
                               norm(x, -std::numeric_limits<double>::infinity(), {-1}) + 1,
                               norm(x, 3, {-1})};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = nan_to_num(tensor(rows, {5, 70}).to(dtype), 0, 50, -50);
    Compiled c;
    auto f = compile(normalised, c.options());
    expect_all_identical(normalised(x), f(x));
    EXPECT_EQ(c.extern_calls_of("norm"), 1u);  // p = 3
  }
  // Over all elements, or along another dim: the eager kernels, as extern calls.
  auto elsewhere = [](Tensor x) {
    return std::vector<Tensor>{argmax(x), argmin(x, 0), prod(x, {0})};
  };
  Tensor x = randn({6, 10});
  Compiled c;
  auto g = compile(elsewhere, c.options());
  expect_all_identical(elsewhere(x), g(x));
  EXPECT_EQ(c.extern_calls_of("argmax") + c.extern_calls_of("argmin") + c.extern_calls_of("prod"),
            3u);
}

TEST(Inductor, ColumnSumsFoldAsEagerWithTheirPrologue) {
  manual_seed(33);
  // A bias's and a normalisation weight's gradients (sums over every dim but the last) and a
  // column mean: one kernel folding all three, nothing stored between the multiply and its sum,
  // bitwise equal to eager whichever way eager splits the work: one thread (small), threads
  // over chunks of rows with partial sums merged (few columns), threads over blocks of columns
  // (many columns), and with one thread. (float32 is summed in double: only float64 shows
  // where the rows were split.)
  auto gradients = [](Tensor g, Tensor x) {
    return std::vector<Tensor>{g.sum({0, 1}), (g * x).sum({1, 0}), (x + 1).mean({0, 1}, true)};
  };
  struct Case {
    Shape shape;
    DType dtype;
  };
  const std::vector<Case> cases = {{{4, 8, 64}, DType::Float32},
                                   {{64, 100, 96}, DType::Float32},
                                   {{2, 10, 5000}, DType::Float32},
                                   {{16, 50, 64}, DType::Float64},
                                   {{2, 10, 5000}, DType::Float64}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(::testing::PrintToString(cs.shape));
    Tensor g = randn(cs.shape, cs.dtype);
    std::vector<float> values = (randn(cs.shape) * 100).to_vector<float>();
    values[0] = std::nanf("");
    values[7] = std::numeric_limits<float>::infinity();
    values[14] = -0.0f;
    Tensor x = tensor(values, cs.shape).to(cs.dtype);
    Compiled c;
    auto f = compile(gradients, c.options());
    expect_all_identical(gradients(g, x), f(g, x));
    EXPECT_EQ(c.kernels(), 1u);
    EXPECT_EQ(c.externs(), 0u);
    const int threads = get_num_threads();
    set_num_threads(1);
    expect_all_identical(gradients(g, x), f(g, x));
    set_num_threads(threads);
  }
  // What reads a column sum runs after its kernel, even when the sum has the kernel's shape (one
  // row); a sum eager does not fold by columns (a transposed input) stays an extern call.
  auto centred = [](Tensor x) { return x - x.sum({0}, true); };
  Compiled c;
  auto f = compile(centred, c.options());
  for (const Shape& shape : {Shape{1, 40}, Shape{300, 40}}) {
    Tensor x = randn(shape);
    expect_identical(centred(x), f(x));
  }
  EXPECT_EQ(c.externs(), 0u);
  auto transposed = [](Tensor x) { return x.t().sum({0}) * 2; };
  Compiled c2;
  auto h = compile(transposed, c2.options());
  Tensor y = randn({40, 300});
  expect_identical(transposed(y), h(y));
  EXPECT_EQ(c2.extern_calls_of("sum"), 1u);
}

TEST(Inductor, ColumnKernelsFoldBatchesOfRowsLaidOutAnyWay) {
  manual_seed(34);
  // A column kernel folds several rows per pass over its accumulators: whatever the rows'
  // layout (outer dims that do not merge into one, an operand broadcast along the row and
  // gathered into a row buffer, a folded value computed into a row buffer), however many rows
  // are left for the last batch, every sum is eager's, bit for bit.
  auto sums = [](Tensor g, Tensor scale) {
    Tensor permuted = g.transpose(0, 1);  // [b, a, c]: rows a fixed stride apart no longer
    return std::vector<Tensor>{(permuted * scale.transpose(0, 1)).sum({0, 1}),
                               (g.exp() - 1).sum({0, 1}, true)};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t rows : {3, 13, 301}) {
      SCOPED_TRACE(std::string(dtype_info(dtype).name) + " rows=" + std::to_string(rows));
      Tensor g = randn({rows, 7, 72}, dtype), scale = randn({rows, 7, 1}, dtype);
      Compiled c;
      auto f = compile(sums, c.options());
      expect_all_identical(sums(g, scale), f(g, scale));
      EXPECT_EQ(c.extern_calls_of("sum"), 0u);
      const int threads = get_num_threads();
      set_num_threads(1);
      expect_all_identical(sums(g, scale), f(g, scale));
      set_num_threads(threads);
    }
  }
}

TEST(Inductor, ColumnSumsOfAFlattenedValueFoldInTheKernelComputingIt) {
  // A linear layer's bias gradient sums the [B * T, C] view of a [B, T, C] gradient over its
  // rows: read as the value itself over its leading dims, the sum (and a mean) fold columns in
  // the kernel computing the gradient, while the view stays what the matrix product reads.
  auto bias_and_weight_grads = [](Tensor x, Tensor w) {
    Tensor g = (x * 2).tanh();
    Tensor rows = g.view({-1, g.size(-1)});
    return std::vector<Tensor>{rows.sum({0}, true), rows.mean({0}), matmul(rows.t(), w)};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t t : {5, 300}) {  // (300: rows split across threads)
      SCOPED_TRACE(std::string(dtype_info(dtype).name) + " T=" + std::to_string(t));
      Tensor x = randn({4, t, 40}, dtype), w = randn({4 * t, 3}, dtype);
      Compiled c;
      auto f = compile(bias_and_weight_grads, c.options());
      expect_all_identical(bias_and_weight_grads(x, w), f(x, w));
      EXPECT_EQ(c.kernels(), 1u);
      EXPECT_EQ(c.extern_calls_of("sum") + c.extern_calls_of("mean"), 0u);
    }
  }
  // A view that does not flatten leading dims (the last dim changes) is summed as it is: a
  // column kernel of its own over the stored value.
  auto regrouped = [](Tensor x) { return (x * 2).tanh().view({-1, 32}).sum({0}); };
  Tensor x = randn({4, 6, 64});
  Compiled c;
  auto f = compile(regrouped, c.options());
  expect_identical(regrouped(x), f(x));
  EXPECT_EQ(c.kernels(), 2u);
  EXPECT_EQ(c.extern_calls_of("sum"), 0u);
  // A sum listing no dims reduces every dim, also of a flattening whose last dim is the whole
  // value (found by `kiln fuzz`: it was taken for a sum over no dims and failed to compile).
  auto summed_whole = [](Tensor x) {
    Tensor flat = (x * 2).view({-1});
    return std::vector<Tensor>{flat.sum(), flat.mean({}, true)};
  };
  for (const Shape& shape : {Shape{1, 1, 5}, Shape{1, 300}}) {
    Tensor y = randn(shape);
    auto g = compile(summed_whole, c.options());
    expect_all_identical(summed_whole(y), g(y));
  }
}

TEST(Inductor, DropoutAndRandAreDrawnInsideKernelsAsEagerDrawsThem) {
  // dropout (a bernoulli mask of a constant probability, scaled, times x) and rand: drawn in
  // the kernel that uses them with eager's Philox mapping, so each call gives eager's numbers
  // for the same generator state, and the generator moves on as in eager.
  auto dropped = [](Tensor x) { return dropout(x * 2, 0.3) + 1; };
  auto noisy = [](Tensor x) { return x + rand(x.sizes(), x.dtype()) * 0.1; };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_info(dtype).name);
    Tensor x = randn({37, 300}, dtype);
    int which = 0;
    for (auto* fn : {+dropped, +noisy}) {
      SCOPED_TRACE(which++);
      Compiled c;
      auto f = compile(fn, c.options());
      for (uint64_t seed : {7u, 8u}) {
        manual_seed(seed);
        const Tensor want = fn(x), want_next = fn(x);
        manual_seed(seed);
        const Tensor got = f(x), got_next = f(x);
        expect_identical(want, got);
        expect_identical(want_next, got_next);
      }
      EXPECT_EQ(c.kernels(), 1u);
      EXPECT_EQ(c.externs(), 0u);
    }
  }
  // A mask drawn before a row op: its own kernel (a row kernel does not draw), and the softmax,
  // alone, eager's kernel. Probabilities given as a tensor are checked by the eager kernel,
  // element by element: an extern call.
  auto masked_softmax = [](Tensor x) { return softmax(x * bernoulli(x.sizes(), 0.5), -1); };
  auto from_tensor = [](Tensor x) { return bernoulli(sigmoid(x)) * x; };
  Tensor x = randn({16, 64});
  Compiled c, c2;
  auto f = compile(masked_softmax, c.options());
  auto g = compile(from_tensor, c2.options());
  manual_seed(3);
  const Tensor want = masked_softmax(x), want2 = from_tensor(x);
  manual_seed(3);
  expect_identical(want, f(x));
  expect_identical(want2, g(x));
  EXPECT_EQ(c.externs(), 1u);
  EXPECT_EQ(c.extern_calls_of("softmax"), 1u);
  EXPECT_EQ(c2.extern_calls_of("bernoulli"), 1u);
}

TEST(Inductor, NormalAndRandintAreDrawnInsideKernelsAsEagerDrawsThem) {
  // randn (Box-Muller through libm's log, cos and sqrt, as in eager), normal_ with a mean and a
  // std, and randint over a range: drawn in the kernels that use them, eager's numbers for the
  // same generator state.
  auto jitter = [](Tensor x) { return x + randn(x.sizes(), x.dtype()) * 0.5; };
  auto shifted = [](Tensor x) {
    Tensor noise = empty(x.sizes(), x.dtype());
    normal_(noise, 3.0, 2.0);
    return x * noise;
  };
  auto tokens = [](Tensor x) {
    return std::vector<Tensor>{randint(-5, 1000, x.sizes()) * 2,
                               x + randint(0, 7, x.sizes(), DType::Int32)};
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    SCOPED_TRACE(dtype_info(dtype).name);
    Tensor x = randn({37, 300}, dtype);
    for (auto* fn : {+jitter, +shifted}) {
      Compiled c;
      auto f = compile(fn, c.options());
      manual_seed(11);
      const Tensor want = fn(x), want_next = fn(x);
      manual_seed(11);
      expect_identical(want, f(x));
      expect_identical(want_next, f(x));
      EXPECT_EQ(c.externs(), 0u);
    }
    Compiled c;
    auto f = compile(tokens, c.options());
    manual_seed(12);
    const auto want = tokens(x);
    manual_seed(12);
    expect_all_identical(want, f(x));
    EXPECT_EQ(c.externs(), 0u);
  }
}

TEST(Inductor, LayerNormAndRmsNormAreRowOpsWithTheirPrologueAndEpilogue) {
  manual_seed(31);
  // A transformer block's residual add, normalisation and activation: one row kernel, bitwise
  // equal to eager (the eager kernel's own row function), with and without weight and bias.
  Tensor x = randn({6, 10, 96}), r = randn({6, 10, 96}), w = randn({96}), b = randn({96});
  auto with_both = [](Tensor x, Tensor r, Tensor w, Tensor b) {
    return gelu(layer_norm(x + r, {96}, w, b)) * 2;
  };
  auto bias_only = [](Tensor x, Tensor r, Tensor, Tensor b) {
    return layer_norm(x * r, {96}, std::nullopt, b, 1e-3).exp();
  };
  auto plain = [](Tensor x, Tensor r, Tensor, Tensor) { return layer_norm(x - r, {96}) + 1; };
  auto rms = [](Tensor x, Tensor r, Tensor w, Tensor) { return rms_norm(x + r, {96}, w) * x; };
  int which = 0;
  for (auto* fn : {+with_both, +bias_only, +plain, +rms}) {
    SCOPED_TRACE(which++);
    Compiled c;
    auto f = compile(fn, c.options());
    expect_identical(fn(x, r, w, b), f(x, r, w, b));
    EXPECT_EQ(c.kernels(), 1u);
    EXPECT_EQ(c.externs(), 0u);
  }
  // In training, the statistics are saved for the backward: per-row outputs of the kernel; the
  // backward's own kernels read them. Float64, and rows read through a transpose.
  Tensor xd = randn({12, 40}, DType::Float64).requires_grad_(), wd = randn({12}, DType::Float64);
  auto train = [](Tensor x, Tensor w) {
    Tensor y = layer_norm(x.t() * 3, {12}, w, std::nullopt);
    Tensor loss = (y * y).sum();
    loss.backward();
    return loss;
  };
  Compiled c;
  auto f = compile(train, c.options());
  Tensor want = train(xd, wd), want_grad = xd.grad();
  xd.set_grad(Tensor());
  expect_identical(want, f(xd, wd));
  expect_identical(want_grad, xd.grad());
  EXPECT_EQ(c.extern_calls_of("layer_norm"), 0u);
  // Normalised over more than the last dim: an extern call.
  Compiled c2;
  auto two_dims = [](Tensor x) { return layer_norm(x, {10, 96}) * 2; };
  auto g = compile(two_dims, c2.options());
  expect_identical(two_dims(x), g(x));
  EXPECT_EQ(c2.extern_calls_of("layer_norm"), 1u);
}

TEST(Inductor, SoftmaxNotAlongTheLastDimOrOverLongRowsIsAnExternCall) {
  manual_seed(22);
  Tensor x = randn({40, 30}), wide = randn({2, inductor::kMaxRowElements + 1});
  auto fn = [](Tensor x, Tensor wide) {
    return std::vector<Tensor>{softmax(x * 2, 0), softmax(wide, -1)};
  };
  Compiled c;
  auto f = compile(fn, c.options());
  expect_all_identical(fn(x, wide), f(x, wide));
  EXPECT_EQ(c.extern_calls_of("softmax"), 2u);
}

// A softmax or log_softmax fused with nothing runs as eager's kernel (a generated loop would
// call the same row function, with overhead): no kernel, nothing compiled. With a prologue it
// is a row kernel.
TEST(Inductor, ASoftmaxAloneIsEagersKernel) {
  manual_seed(24);
  Tensor x = randn({64, 100});
  for (const char* op : {"softmax", "log_softmax"}) {
    auto alone = [op](Tensor x) {
      return std::string(op) == "softmax" ? softmax(x, -1) : log_softmax(x, -1);
    };
    Compiled c;
    auto f = compile(alone, c.options());
    expect_identical(alone(x), f(x));
    EXPECT_EQ(c.kernels(), 0u) << op;
    EXPECT_EQ(c.extern_calls_of(op), 1u) << op;
  }
  // (Two row ops reading one input share a kernel: neither is alone.)
  auto both = [](Tensor x) { return std::vector<Tensor>{softmax(x, -1), log_softmax(x, -1)}; };
  Compiled c1;
  auto h = compile(both, c1.options());
  expect_all_identical(both(x), h(x));
  EXPECT_EQ(c1.kernels(), 1u);
  auto fused = [](Tensor x) { return softmax(x * 2, -1); };
  Compiled c2;
  auto g = compile(fused, c2.options());
  expect_identical(fused(x), g(x));
  EXPECT_EQ(c2.kernels(), 1u);
  EXPECT_EQ(c2.externs(), 0u);
}

TEST(Inductor, LargeSoftmaxRowsRunOnThreadsAndStream) {
  manual_seed(23);
  // 8 MiB of output: rows split across threads, softmax's streaming stores.
  Tensor x = randn({4096, 512});
  auto fn = [](Tensor x) { return softmax(x - 1, -1); };
  Compiled c;
  auto f = compile(fn, c.options());
  for (int call = 0; call < 2; ++call) expect_identical(fn(x), f(x));
  EXPECT_EQ(c.kernels(), 1u);
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

// A kernel whose ops all compute in one floating dtype keeps every intermediate in registers
// (one vector loop; no block per op) and stays bitwise equal to eager, tail lanes included.
TEST(Inductor, FloatChainsComputeOnRegistersAndStayBitwiseEqual) {
  manual_seed(4);
  auto fn = [](Tensor a, Tensor b) {
    Tensor g = gelu(a * 1.5 + b);
    return std::vector<Tensor>{g, (g * a.exp()).sigmoid() - 0.25 * b, erf(a) / (b * b + 1)};
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = randn({37, 131}, dt), y = randn({131}, dt);  // odd rows: a padded tail per block
    Compiled c;
    auto f = compile(fn, c.options());
    for (int call = 0; call < 2; ++call) expect_all_identical(fn(x, y), f(x, y));
    ASSERT_EQ(c.schedules.size(), 1u);
    const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
    EXPECT_NE(source.find("inductor_rt::vector_loop<"), std::string::npos) << source;
    EXPECT_EQ(source.find("vec::map<"), std::string::npos) << source;
  }
  // Mixed dtypes (a cast, a predicate) compute op by op over blocks, as before.
  Tensor i = randint(-5, 5, {7, 9}, DType::Int64);
  Compiled c;
  auto mixed = [](Tensor a) {
    return where(a > 0, a.to(DType::Float32) * 0.5, a.to(DType::Float32));
  };
  auto f = compile(mixed, c.options());
  expect_identical(mixed(i), f(i));
  ASSERT_EQ(c.kernels(), 1u);
  const std::string source = inductor::render_cpp(c.graphs[0], c.schedules[0]);
  EXPECT_EQ(source.find("vector_loop<"), std::string::npos) << source;
  // where's condition (gt's bool block) reaches its functor as a bool (read as bytes, which
  // the compiler vectorises), not as a float converted back.
  const std::string bool_block = "alignas(64) bool ";
  const size_t at = source.find(bool_block);
  ASSERT_NE(at, std::string::npos) << source;
  const size_t name_at = at + bool_block.size();
  const std::string name = source.substr(name_at, source.find('[', name_at) - name_at);
  EXPECT_NE(source.find("(reinterpret_cast<const uint8_t*>(" + name + ")[j] != 0)"),
            std::string::npos)
      << source;
  EXPECT_EQ(source.find(name + "_as_float32"), std::string::npos) << source;
}

// gelu is computed through its decomposition, so its erf and the one its derivative's formula
// computes (in a training step, in the same kernel) are one erf; bitwise equal to eager either
// way, and the tanh form (a fused multiply-add no op expresses) stays itself.
TEST(Inductor, GeluSharesItsErfWithItsDerivative) {
  manual_seed(15);
  auto fn = [](Tensor x) {
    const Tensor phi = (erf(x * 0.7071067811865476) + 1) * 0.5;  // as gelu's derivative writes it
    return std::vector<Tensor>{gelu(x), phi, gelu(x * 2, "tanh")};
  };
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor x = randn({33, 70}, dt);
    Compiled c;
    auto f = compile(fn, c.options());
    for (int call = 0; call < 2; ++call) expect_all_identical(fn(x), f(x));
    ASSERT_EQ(c.graphs.size(), 1u);
    int erfs = 0, gelus = 0;
    for (const ir::Node& n : c.graphs[0].nodes) {
      erfs += n.op && n.op->name == "erf";
      gelus += n.op && n.op->name == "gelu";
    }
    EXPECT_EQ(erfs, 1);
    EXPECT_EQ(gelus, 1);  // the tanh form
  }
}

// KILN_INDUCTOR_PROFILE: each compiled graph reports its run time, its time per kind of step
// and its slowest steps.
TEST(Inductor, StepProfileReportsWhereAGraphsTimeGoes) {
  inductor::set_step_profiling(true);
  auto fn = [](Tensor a, Tensor b) { return (mm(a, b) * 2).relu(); };
  auto f = compile(fn, {.backend = std::string("inductor"), .name = "profiled_fn"});
  Tensor x = randn({64, 32}), w = randn({32, 16});
  for (int call = 0; call < 3; ++call) expect_identical(fn(x, w), f(x, w));
  inductor::set_step_profiling(false);
  const std::string report = inductor::step_profile_report();
  const size_t at = report.find("kiln inductor profile: 'profiled_fn'");
  ASSERT_NE(at, std::string::npos) << report;
  const std::string mine = report.substr(at, report.find("kiln inductor profile", at + 1) - at);
  EXPECT_NE(mine.find("(1 kernels, 1 extern calls), 3 runs"), std::string::npos) << mine;
  EXPECT_NE(mine.find("generated kernels (1)"), std::string::npos) << mine;
  EXPECT_NE(mine.find("extern mm (1)"), std::string::npos) << mine;
  EXPECT_NE(mine.find("1: kernel_0: mul, relu (2 ops) over [64, 16]"), std::string::npos) << mine;
  EXPECT_NE(mine.find("0: extern mm %"), std::string::npos) << mine;
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
  auto fn = [](Tensor a, Tensor b) { return (matmul(a.exp(), b) + 1).relu().sum({0}); };
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

// Kernels computing the same thing (here: one chain on two shapes) share one compiled body.
TEST(Inductor, SavedTensorsMayDifferFromTheirMetadataInStridesOfSizeOneDims) {
  // Found by `kiln fuzz --seed 620388 --backend inductor`: the compiled backward takes a view
  // saved by the forward (an expand adding a dim of size 1), whose stride along that dim is
  // not the one AOT autograd's metadata recorded. It addresses the same memory: accepted.
  auto fn = [](Tensor v0, Tensor v1, Tensor v2) {
    Tensor v3 = v1 / v2;
    Tensor v5 = v3.expand({1, 1, 3});
    Tensor v7 = v5 + v1;
    v5.add_(v3);
    Tensor loss = relu(v3).sum() + log(v0).sum() + v7.sum() + v5.sum();
    loss.backward();
    return loss;
  };
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    std::vector<Tensor> in{rand({2, 3, 1}) + 0.5, randn({1, 1}), randn({3})};
    for (Tensor& t : in) t.requires_grad_();
    return in;
  };
  auto want = make(1), got = make(1);
  auto f = compile(fn, {.backend = std::string("inductor")});
  expect_identical(fn(want[0], want[1], want[2]), f(got[0], got[1], got[2]));
  for (size_t k = 0; k < want.size(); ++k) expect_identical(want[k].grad(), got[k].grad());
}

// A training step of two inputs (randn of shapes a and b, seeded, requiring grad) run eagerly
// and through inductor: the same result and the same gradients.
void expect_step_identical(const std::function<Tensor(Tensor, Tensor)>& fn, uint64_t seed, Shape a,
                           Shape b) {
  auto make = [&] {
    manual_seed(seed);
    std::vector<Tensor> in{randn(a), randn(b)};
    for (Tensor& t : in) t.requires_grad_();
    return in;
  };
  auto want = make(), got = make();
  auto f = compile(fn, {.backend = std::string("inductor")});
  expect_identical(fn(want[0], want[1]), f(got[0], got[1]));
  for (size_t k = 0; k < want.size(); ++k) expect_identical(want[k].grad(), got[k].grad());
}

TEST(Inductor, EmptyTensorsAreAcceptedWhateverTheirStrides) {
  // Found by `kiln fuzz --seed 30227 --ops-per-program 8`: an empty pad result's gradient
  // reached the compiled backward with strides [0, 0] where the graph recorded [6, 1]. An empty
  // tensor addresses no memory: accepted.
  auto fn = [](Tensor v0, Tensor v1) {
    Tensor v3 = where(v0 > 0, v0, v0);
    Tensor v4 = tanh(v1);
    graph_break();
    Tensor v6 = v4.unsqueeze(0);
    Tensor v7 = pad(v3.unsqueeze(0), {1, 1, -1, 0}, 0.5);  // [0, 6]
    graph_break();
    Tensor v8 = v1 / v4.abs().exp();
    Tensor loss = v6.sum() + v7.sum() + v8.sum();
    loss.backward();
    return loss;
  };
  expect_step_identical(fn, 3, {4}, {4});
}

TEST(Inductor, SavedSlicesOfIntermediatesReachTheBackward) {
  // Found by `kiln fuzz --seed 20062 --ops-per-program 12`: a training graph saved a slice of
  // an intermediate for softmax's backward; inductor returned it as a view into its buffer
  // (strides [128, 32, 1]) where the backward graph takes saved values contiguous ([72, 18,
  // 1]), and the backward failed. Saved values that are not contiguous are now copied.
  auto fn = [](Tensor x, Tensor y) {
    Tensor s = softmax((x * 2).unsqueeze(0).narrow(2, 3, 18), 1).sum();
    Tensor t = (roll(y, {1}, {1}).t().narrow(0, 1, 5) * 3).exp().sum();
    graph_break();
    Tensor loss = s + t;
    loss.backward();
    return loss;
  };
  expect_step_identical(fn, 25, {4, 32}, {6, 7});
}

TEST(Inductor, GradientsPassedOnKeepTheirLayout) {
  // Found by `kiln fuzz --seed 21195 --ops-per-program 12`: v4 and v8 stay alive across the
  // break but receive no gradient, so the backward ran without their tangents. The sum `v8's
  // tangent + the broadcast gradient of s` then passed on its one part, an expand (strides
  // [0, 1]), where the graph's later permute was recorded over the sum's contiguous result:
  // inductor addressed the gradient as [1, 4] and read past it. A part passed on must have the
  // sum's layout; otherwise it is copied into it.
  auto fn = [](Tensor x, Tensor y) {
    Tensor v4 = y - x;
    Tensor v8 = x.matmul(v4.transpose(-1, -2));
    Tensor s = v8.sum({0});
    graph_break();
    Tensor total = scalar_tensor(0.0).add(s.sum());
    total.backward();
    return total;
  };
  expect_step_identical(fn, 21195, {4, 4}, {4});
}

TEST(Inductor, ALeafGradientIsNotCopiedOutOfItsKernelsBuffer) {
  // A graph that traces its own backward ends a leaf's gradient with autograd's copy (its
  // memory could be shared, as far as autograd knows); here nothing else reads the buffer, so
  // the gradient is that buffer, and the values are eager's.
  auto fn = [](Tensor x, Tensor w) {
    Tensor loss = ((x * w).tanh() * x).sum();
    loss.backward();
    return loss;
  };
  manual_seed(8);
  Tensor x = randn({64, 32}), w = randn({64, 32}).requires_grad_();
  Tensor we = w.detach().clone().requires_grad_();
  Compiled c;
  auto f = compile(fn, c.options());
  expect_identical(fn(x, we), f(x, w));
  expect_identical(we.grad(), w.grad());
  ASSERT_EQ(c.graphs.size(), 1u);
  for (const ir::Node& n : c.graphs[0].nodes)
    EXPECT_FALSE(n.op && n.op->name == "to_copy") << c.graphs[0];
}

TEST(Inductor, IdenticalKernelsAreCompiledOnce) {
  auto chain = [](const Tensor& t) { return (t * 2 + 1).tanh(); };
  auto fn = [&](Tensor a, Tensor b) { return chain(a).sum() + chain(b).sum(); };
  Compiled c;
  auto f = compile(fn, c.options());
  Tensor x = randn({8, 8}), y = randn({5});
  expect_identical(fn(x, y), f(x, y));
  ASSERT_EQ(c.schedules.size(), 1u);
  ASSERT_GE(c.kernels(), 2u);
  const std::string src = inductor::render_cpp(c.graphs[0], c.schedules[0]);
  EXPECT_NE(src.find("(the same code as kernel_0)"), std::string::npos) << src;
}

// The optimizers' fused update ops have no pointwise functor: inductor computes them through
// their decompositions, fused into one generated loop per parameter, bitwise equal to eager.
TEST(Inductor, OptimizerUpdatesFuseThroughTheirDecompositions) {
  for (const bool adam : {true, false}) {
    manual_seed(6);
    nn::Linear eager_model(16, 8), compiled_model(16, 8);
    compiled_model.load_state_dict(eager_model.state_dict());
    std::unique_ptr<optim::Optimizer> eager_opt, compiled_opt;
    if (adam) {
      const optim::AdamWOptions o{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true};
      eager_opt = std::make_unique<optim::AdamW>(eager_model.parameters(), o);
      compiled_opt = std::make_unique<optim::AdamW>(compiled_model.parameters(), o);
    } else {
      const optim::SGDOptions o{
          .lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
      eager_opt = std::make_unique<optim::SGD>(eager_model.parameters(), o);
      compiled_opt = std::make_unique<optim::SGD>(compiled_model.parameters(), o);
    }
    auto step = [](nn::Linear& m, optim::Optimizer& opt, const Tensor& x) {
      opt.zero_grad();
      Tensor loss = m.forward(x).tanh().pow(2).mean();
      loss.backward();
      opt.step();
      return loss;
    };
    Compiled c;
    auto f = compile([&](const Tensor& x) { return step(compiled_model, *compiled_opt, x); },
                     c.options());
    for (int i = 0; i < 3; ++i) {
      Tensor x = randn({5, 16});
      expect_identical(step(eager_model, *eager_opt, x), f(x));
    }
    auto pe = eager_model.parameters(), pc = compiled_model.parameters();
    for (size_t k = 0; k < pe.size(); ++k) expect_identical(pe[k], pc[k], "parameter");
    EXPECT_EQ(c.extern_calls_of(adam ? "adam_update" : "sgd_update"), 0u);
    EXPECT_GT(c.kernels(), 0u);
  }
}

TEST(Retrace, AFunctionIsTracedIntoAGraphWithoutRunningIt) {
  const TensorMeta x(DType::Float32, Shape{4, 3}), y(DType::Float32, Shape{3});
  const TensorMeta ins[] = {x, y};
  ir::Graph g = capture::trace_graph(
      ins, [](std::span<const Tensor> in) { return std::vector<Tensor>{(in[0] + in[1]).exp()}; },
      "test function");
  EXPECT_EQ(g.num_inputs(), 2);
  EXPECT_EQ(g.num_calls(), 2);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.info(g.outputs[0]).sizes, (Shape{4, 3}));
  Tensor a = randn({4, 3}), b = randn({3});
  const Tensor args[] = {a, b};
  expect_identical((a + b).exp(), ir::interpret(g, args)[0]);
}

TEST(Retrace, WhatATracedFunctionMayNotDoIsAClearError) {
  const TensorMeta x(DType::Float32, Shape{3});
  const TensorMeta ins[] = {x};
  Tensor concrete = ones({3});
  try {
    capture::trace_graph(
        ins, [&](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + concrete}; },
        "the decomposition of 'test'");
    ADD_FAILURE() << "no error";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("the decomposition of 'test': reads a concrete tensor"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      capture::trace_graph(
          ins, [](std::span<const Tensor> in) { return std::vector<Tensor>{in[0] + randn({3})}; },
          "random"),
      NotImplementedError);
  EXPECT_THROW(capture::trace_graph(
                   ins, [](std::span<const Tensor> in) { return std::vector<Tensor>{Tensor()}; },
                   "undefined result"),
               Error);
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

TEST(InductorCache, ARelativeCacheDirWorksForBatchedCompiles) {
  const char* old = std::getenv("KILN_CACHE_DIR");
  const std::string saved = old ? old : "";
  const std::filesystem::path rel =
      std::filesystem::path("kiln-relative-cache-test") / std::to_string(::getpid());
  ::setenv("KILN_CACHE_DIR", rel.c_str(), 1);
  const std::string dir = inductor::cache_dir();
  EXPECT_TRUE(std::filesystem::path(dir).is_absolute()) << dir;
  EXPECT_EQ(dir, (std::filesystem::current_path() / rel).lexically_normal().string());
  // Batched sources #include each other by path: with a relative folder the compiler looked
  // them up next to the batch file and the whole batch failed.
  std::vector<std::string> sources;
  for (int k = 0; k < 2; ++k)
    sources.push_back("extern \"C\" int kiln_relative_probe_" + std::to_string(k) + "() { return " +
                      std::to_string(::getpid() + k) + "; }\n");
  inductor::compile_modules_batched(sources);
  for (int k = 0; k < 2; ++k) {
    inductor::CompileStats stats;
    auto m = inductor::compile_module(sources[static_cast<size_t>(k)], &stats);
    EXPECT_TRUE(stats.cache_hit) << "module " << k << " was not built by the batch";
    auto probe = reinterpret_cast<int (*)()>(m->symbol("kiln_relative_probe_" + std::to_string(k)));
    EXPECT_EQ(probe(), ::getpid() + k);
  }
  if (old)
    ::setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("KILN_CACHE_DIR");
  std::filesystem::remove_all(rel.parent_path());
}

// A module with many distinct kernel bodies compiles as several objects at once, linked into
// one library that holds every kernel and computes what eager does.
TEST(InductorCache, LargeModulesCompileInPartsAtOnce) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor a = matmul(tanh(x * 2 + 1), w);   // each chain between extern calls: a kernel
    Tensor b = softmax(sigmoid(a) - a, -1);  // a row kernel, with exp(b) * 3
    Tensor c = matmul(exp(b) * 3, w);
    Tensor d = cumsum(relu(c) + 0.5, -1);
    Tensor e = matmul(sqrt(abs(d)) / 2, w);
    Tensor h = matmul(cos(e) + 2, w);
    return std::vector<Tensor>{neg(e) * e, log(abs(e - 1) + 1), sin(h) * 0.5};
  };
  Tensor x = randn({6, 8}), w = randn({8, 8});
  Compiled c;
  auto f = compile(fn, c.options());
  (void)f(x, w);
  ASSERT_EQ(c.schedules.size(), 1u);
  const std::string src = inductor::render_cpp(c.graphs[0], c.schedules[0]);
  ASSERT_NE(src.find("// distinct kernel bodies: 6"), std::string::npos) << src;

  // Drop the module built above (in memory and on disk) and build it again in two parts.
  std::string path = inductor::compile_module(src, nullptr)->path();
  inductor::forget_loaded_modules();
  std::filesystem::remove(path);
  const char* old = std::getenv("KILN_COMPILE_JOBS");
  const std::string saved = old ? old : "";
  ::setenv("KILN_COMPILE_JOBS", "2", 1);
  inductor::CompileStats stats;
  auto m = inductor::compile_module(src, &stats);
  EXPECT_FALSE(stats.cache_hit);
  EXPECT_EQ(stats.parts, 2);
  for (const inductor::Kernel& k : c.schedules[0].kernels) EXPECT_NE(m->kernel(k.name), nullptr);
  ::setenv("KILN_COMPILE_JOBS", "0", 1);
  EXPECT_THROW(inductor::compile_jobs(), ValueError);
  if (old)
    ::setenv("KILN_COMPILE_JOBS", saved.c_str(), 1);
  else
    ::unsetenv("KILN_COMPILE_JOBS");

  // A new compiled function loads that library from disk and computes what eager computes.
  m.reset();
  inductor::forget_loaded_modules();
  auto g = compile(fn, {.backend = std::string("inductor")});
  expect_all_identical(fn(x, w), g(x, w));
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

// ---- memory ----

TEST(InductorMemory, KernelsWriteIntoTheBuffersOfInputsThatDieThere) {
  manual_seed(12);
  const int64_t n = 1024;  // 4 MiB a matrix: large blocks, counted whole by the allocator
  Tensor x = randn({n, n}), w = randn({n, n});
  // mm is an extern call; its result dies at the fused kernel, which writes over it.
  auto fn = [](Tensor a, Tensor b) { return (a.matmul(b) * 0.5).tanh(); };
  const Tensor want = fn(x, w);
  auto f = compile(fn, {.name = "donation"});
  expect_identical(want, f(x, w));  // the first run checks the extern results' metadata
  const int64_t matrix = n * n * 4;
  reset_peak_memory_stats();
  const int64_t before = memory_stats().allocated;
  Tensor got = f(x, w);
  const int64_t peak = memory_stats().peak_allocated - before;
  expect_identical(want, got);
  EXPECT_EQ(peak, matrix) << "peak " << double(peak) / double(matrix) << " matrices";

  // A kernel that reads its input at other elements too (through a transpose) must not.
  auto twice = [](Tensor a, Tensor b) {
    Tensor h = a.matmul(b);
    return h + h.t();
  };
  auto g = compile(twice);
  for (int call = 0; call < 2; ++call) expect_identical(twice(x, w), g(x, w));

  // Nor one whose column sum reads it: a column kernel folds a batch of rows after the batch's
  // other ops wrote theirs (found by `kiln fuzz`: the sum of zeros came out as the product).
  auto summed_and_scaled = [](Tensor a, Tensor b) {
    Tensor z = zeros(a.sizes());
    Tensor columns = z.sum({0}, true);
    return std::vector<Tensor>{columns, (a + z) * b * -0.5};
  };
  for (const Shape& shape : {Shape{3, 38}, Shape{600, 40}}) {
    Tensor a = randn(shape), b = randn(shape);
    auto h = compile(summed_and_scaled);
    for (int call = 0; call < 2; ++call) expect_all_identical(summed_and_scaled(a, b), h(a, b));
  }
}

// Wraps inductor and records, per run, which outputs the graph writes back into an input were
// returned in that input's own memory (computed in place).
struct InPlaceProbe {
  std::vector<int> in_place, written;  // per run
  CompileOptions options() {
    CompileOptions o;
    o.backend = Backend([this](const ir::Graph& g, std::span<const TensorMeta> metas) {
      CompiledGraph run = lookup_backend("inductor")(g, metas);
      return CompiledGraph([this, run, writes = g.input_writes](std::span<const Tensor> in,
                                                                std::span<const int64_t> rt) {
        std::vector<Tensor> out = run(in, rt);
        int n = 0;
        for (const ir::InputWrite& w : writes)
          n += out[static_cast<size_t>(w.output)].impl()->storage_if_concrete() ==
               in[static_cast<size_t>(w.input)].impl()->storage_if_concrete();
        in_place.push_back(n);
        written.push_back(static_cast<int>(writes.size()));
        return out;
      });
    });
    return o;
  }
};

// A tensor written in place (an optimizer step) is computed in its own memory: no fresh buffer,
// no copy back after the graph.
TEST(InductorMemory, InPlaceWritesAreComputedInTheTensorsOwnMemory) {
  manual_seed(13);
  Tensor p = randn({64, 48}), m = zeros({64, 48}), g = randn({64, 48});
  Tensor p2 = p.clone(), m2 = m.clone();
  auto step = [](Tensor param, Tensor avg, Tensor grad) {
    avg.mul_(0.9).add_(grad * 0.1);
    param.sub_(avg * 0.01);
    return param.sum();
  };
  InPlaceProbe probe;
  auto f = compile(step, probe.options());
  for (int call = 0; call < 3; ++call) {
    expect_identical(step(p2, m2, g), f(p, m, g));
    expect_identical(p2, p);
    expect_identical(m2, m);
  }
  ASSERT_EQ(probe.written.size(), 3u);
  EXPECT_EQ(probe.written[2], 2);   // param and avg
  EXPECT_EQ(probe.in_place[2], 2);  // both computed where they live
}

// Reads of the old value (an extern call on another argument over the same memory, before the
// write in program order) and of the new one see what eager sees, whether the second argument
// is the first one's memory or not. (Today's schedule runs that extern before the writing
// kernel; the per-call check of the arguments' memory, can_write_in_place, guards a schedule
// that would not, and this test does not force one.)
TEST(InductorMemory, InPlaceWritesWaitForEveryReaderOfTheOldValue) {
  manual_seed(14);
  Tensor w = randn({48, 16});
  auto aliased = [](Tensor param, Tensor same, Tensor weight) {
    Tensor q = mm(same, weight);  // the old value
    param.mul_(2.0);
    return q + mm(same, weight);  // the new value
  };
  InPlaceProbe probe;
  auto f = compile(aliased, probe.options());
  for (int call = 0; call < 3; ++call) {
    Tensor p = randn({32, 48}), p2 = p.clone();
    // The second argument is the first one's memory (calls 0, 2) or other memory (call 1).
    Tensor same = call == 1 ? p.clone() : p.view({32, 48});
    Tensor same2 = call == 1 ? same.clone() : p2.view({32, 48});
    expect_identical(aliased(p2, same2, w), f(p, same, w));
    expect_identical(p2, p);
  }
}

TEST(InductorMemory, ABufferSomeoneElseHoldsIsNotOverwritten) {
  manual_seed(13);
  Tensor x = randn({64, 64});
  Tensor kept;
  // The extern result `m` is also returned, so the kernel after it must write elsewhere.
  auto fn = [](Tensor a) {
    Tensor m = a.matmul(a);
    return std::vector<Tensor>{m, (m * 2).exp()};
  };
  auto f = compile(fn);
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> want = fn(x), got = f(x);
    expect_identical(want[0], got[0]);
    expect_identical(want[1], got[1]);
  }
}

// ---- mode "max-autotune" ----

TEST(InductorAutotune, ModesAreCheckedWhenCompiling) {
  auto fn = [](Tensor a) { return a * 2; };
  EXPECT_THROW(compile(fn, {.mode = "fastest"}), ValueError);
  EXPECT_THROW(compile(fn, {.backend = std::string("eager"), .mode = "max-autotune"}), ValueError);
  EXPECT_THROW(compile(fn, {.backend = Backend(lookup_backend("eager")), .mode = "max-autotune"}),
               ValueError);
  EXPECT_NO_THROW(compile(fn, {.mode = "default"}));
  EXPECT_NO_THROW(compile(fn, {.mode = "max-autotune"}));  // the default backend is inductor
}

// Log lines of the tuning (topic output_code) while `body` runs.
template <class F>
std::vector<std::string> tuning_lines(F&& body) {
  std::vector<std::string> lines;
  set_logs("output_code");
  set_log_sink([&](const std::string& line) {
    if (line.find("max-autotune") != std::string::npos) lines.push_back(line);
  });
  body();
  set_log_sink({});
  set_logs("");
  return lines;
}

TEST(InductorAutotune, LargeKernelsAreTimedOnceAndTheChoiceIsKeptOnDisk) {
  const int threads = get_num_threads();
  set_num_threads(2);
  manual_seed(11);
  Tensor x = randn({1 << 16}), y = randn({1 << 16});
  Tensor small = randn({64});
  const Tensor want = w1_chain(x, y);
  // Start untuned (only the autotune tests write .tune files in the suite's shared cache).
  const std::filesystem::path modules = std::filesystem::path(inductor::cache_dir()) / "inductor";
  std::filesystem::create_directories(modules);
  for (const auto& entry : std::filesystem::directory_iterator(modules))
    if (entry.path().extension() == ".tune") std::filesystem::remove(entry.path());
  auto first = tuning_lines([&] {
    kiln::reset();
    auto f = compile(w1_chain, {.mode = "max-autotune", .name = "tuned"});
    expect_identical(want, f(x, y));
    expect_identical(want, f(x, y));  // tuned once: the second call times nothing
    expect_identical(w1_chain(small, small), f(small, small));  // too small to tune
  });
  ASSERT_EQ(first.size(), 1u);
  EXPECT_NE(first[0].find("(65536 elements): one thread"), std::string::npos) << first[0];
  EXPECT_GT(compile_times()["inductor_autotune"], 0.0);

  // The choice is in <module>.tune, where another process (here: this one, its compiled
  // functions reset) finds it and times nothing.
  std::string tune_file;
  for (const auto& entry : std::filesystem::directory_iterator(modules))
    if (entry.path().extension() == ".tune") {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find("2 65536 kernel_0 ") != std::string::npos) tune_file = entry.path();
    }
  ASSERT_FALSE(tune_file.empty()) << "no .tune file in " << inductor::cache_dir();
  auto again = tuning_lines([&] {
    kiln::reset();
    auto f = compile(w1_chain, {.mode = "max-autotune"});
    expect_identical(want, f(x, y));
  });
  EXPECT_TRUE(again.empty()) << again[0];

  // A damaged file is ignored and rewritten.
  { std::ofstream(tune_file, std::ios::trunc) << "2 65536 kernel_0 garbage\n\x01"; }
  auto retuned = tuning_lines([&] {
    kiln::reset();
    auto f = compile(w1_chain, {.mode = "max-autotune"});
    expect_identical(want, f(x, y));
  });
  EXPECT_EQ(retuned.size(), 1u);
  std::ifstream in(tune_file);
  std::string line;
  std::getline(in, line);
  EXPECT_TRUE(line == "2 65536 kernel_0 1" ||
              line == "2 65536 kernel_0 " + std::to_string(inductor::kGrainSerial))
      << line;
  set_num_threads(threads);
}

TEST(InductorAutotune, RowKernelsAreTimedBothWaysAndStayEqual) {
  const int threads = get_num_threads();
  set_num_threads(2);
  manual_seed(12);
  // A row kernel (softmax's backward) over 256 rows: timed on one thread and on two, each run
  // writing fresh outputs, and bitwise equal to eager whichever way it then runs.
  Tensor y = softmax(randn({256, 256}), -1), g = randn({256, 256});
  auto softmax_backward = [](Tensor y, Tensor g) {
    Tensor gy = g * y;
    return gy - y * gy.sum({-1}, true);
  };
  const Tensor want = softmax_backward(y, g);
  auto lines = tuning_lines([&] {
    kiln::reset();
    auto f = compile(softmax_backward, {.mode = "max-autotune", .name = "tuned_rows"});
    expect_identical(want, f(y, g));
    expect_identical(want, f(y, g));
  });
  ASSERT_GE(lines.size(), 1u);
  EXPECT_NE(lines[0].find("(65536 elements): one thread"), std::string::npos) << lines[0];
  set_num_threads(threads);
}

}  // namespace
}  // namespace kiln::testing

namespace kiln {
namespace {
// The lowering table (src/backends/inductor/lowering.cpp) is the one place the backend names
// ops: each entry is a registered op of the kind its lowering expects.
TEST(InductorLowering, EveryEntryIsARegisteredOpOfTheKindItsLoweringExpects) {
  const auto entries = inductor::all_lowerings();
  ASSERT_GE(entries.size(), 40u);
  for (const auto& [op, lowering] : entries) {
    ASSERT_NE(op, nullptr);
    ASSERT_EQ(inductor::lowering_of(op), lowering) << op->name;
    const OpKind kind = op->kind;
    std::visit(
        [&](const auto& l) {
          using L = std::decay_t<decltype(l)>;
          if constexpr (std::is_same_v<L, inductor::PointwiseLowering>) {
            EXPECT_EQ(kind, OpKind::Pointwise) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::RowFoldLowering>) {
            EXPECT_TRUE(kind == OpKind::Reduction && l.fold) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::DrawLowering>) {
            EXPECT_EQ(kind, OpKind::Random) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::WindowLowering> ||
                               std::is_same_v<L, inductor::TriangleLowering>) {
            EXPECT_EQ(kind, OpKind::Layout) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::IndirectLoadLowering>) {
            EXPECT_EQ(kind, OpKind::Indexing) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::SoftmaxLowering> ||
                               std::is_same_v<L, inductor::RowNormLowering>) {
            EXPECT_EQ(kind, OpKind::Composite) << op->name;
          } else if constexpr (std::is_same_v<L, inductor::ViewLowering>) {
            EXPECT_EQ(kind, OpKind::View) << op->name;
          }
        },
        *lowering);
  }
  // An op with no entry has none (a pointwise op then fuses with its functor as it is).
  EXPECT_EQ(inductor::lowering_of(find_op("add")), nullptr);
}
}  // namespace
}  // namespace kiln
