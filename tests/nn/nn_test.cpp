// nn: module trees, initialisation, state dicts and checkpoints, the GPT model.
#include <gtest/gtest.h>
#include <limits>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiln/kiln.h"

namespace kiln::nn {
namespace {

bool near(const Tensor& a, const Tensor& b, double tol = 1e-5) {
  NoGradGuard no_grad;
  return a.sizes() == b.sizes() &&
         amax(abs(a.to(DType::Float64) - b.to(DType::Float64))).item<double>() <= tol;
}
bool same_values(const Tensor& a, const Tensor& b) { return near(a, b, 0.0); }

class TwoLayer : public UnaryModule {
 public:
  TwoLayer() : UnaryModule("TwoLayer") {
    fc1 = register_module("fc1", std::make_shared<Linear>(4, 8));
    fc2 = register_module("fc2", std::make_shared<Linear>(8, 2, false));
    scale = ones({2});
    register_buffer("scale", scale);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))) * scale; }
  std::shared_ptr<Linear> fc1, fc2;
  Tensor scale;
};

TEST(Module, NamesParametersAndBuffersInOrder) {
  TwoLayer m;
  std::vector<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight"}));
  EXPECT_EQ(m.num_parameters(), 8 * 4 + 8 + 2 * 8);
  ASSERT_EQ(m.named_buffers().size(), 1u);
  EXPECT_EQ(m.named_buffers()[0].first, "scale");
  EXPECT_EQ(m.state_dict().size(), 4u);
  for (const Tensor& p : m.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
}

TEST(Module, LinearInitIsPyTorchsUniformBound) {
  manual_seed(3);
  Linear l(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);
  EXPECT_LE(amax(abs(l.weight)).item<double>(), bound);
  EXPECT_GT(amax(abs(l.weight)).item<double>(), 0.9 * bound);  // fills the range
  EXPECT_LE(amax(abs(l.bias)).item<double>(), bound);
  EXPECT_EQ(l.weight.shape_str(), "[50, 100]");
}

TEST(Module, TrainEvalReachesChildren) {
  TwoLayer m;
  m.eval();
  EXPECT_FALSE(m.fc1->is_training());
  m.train();
  EXPECT_TRUE(m.fc2->is_training());
}

TEST(Module, DropoutOnlyInTraining) {
  Dropout d(0.5);
  Tensor x = ones({1000});
  Tensor y = d.forward(x);
  const double zeros_frac = sum(y == Scalar(0)).item<double>() / 1000.0;
  EXPECT_GT(zeros_frac, 0.4);
  EXPECT_LT(zeros_frac, 0.6);
  d.eval();
  EXPECT_TRUE(d.forward(x).is_same(x));
}

TEST(Module, ToDtypeConvertsParametersAndBuffers) {
  TwoLayer m;
  Tensor before = m.fc1->weight.clone();
  m.to(DType::Float64);
  EXPECT_EQ(m.fc1->weight.dtype(), DType::Float64);
  EXPECT_EQ(m.scale.dtype(), DType::Float64);
  EXPECT_TRUE(m.fc1->weight.requires_grad());
  EXPECT_TRUE(m.fc1->weight.is_leaf());
  EXPECT_TRUE(near(m.fc1->weight.to(DType::Float32), before));
  EXPECT_EQ(m.parameters()[0].dtype(), DType::Float64);  // the registry sees the new tensors
}

// Parameters kept in a std::vector that grows after registration (its elements move): the
// module keeps its own handles, so nothing it holds points into the vector's old memory (a
// use-after-free under ASan when it kept pointers to members).
class GrowingList : public Module {
 public:
  explicit GrowingList(int n) : Module("GrowingList") {
    for (int i = 0; i < n; ++i)
      weights.push_back(register_parameter(detail::concat("w", i), full({3}, double(i))));
  }
  std::vector<Tensor> weights;
};

TEST(Module, ParametersMayLiveInAVectorThatGrows) {
  GrowingList m(40);  // the vector reallocates several times while registering
  ASSERT_EQ(m.named_parameters().size(), 40u);
  for (int i = 0; i < 40; ++i) {
    const Tensor& w = m.weights[static_cast<size_t>(i)];
    EXPECT_TRUE(m.named_parameters()[static_cast<size_t>(i)].second.is_same(w));
    EXPECT_TRUE(w.requires_grad());
  }
  m.to(DType::Float64);
  EXPECT_EQ(m.weights[39].dtype(), DType::Float64);
  EXPECT_EQ(m.weights[39][0].item<double>(), 39.0);
  NamedTensorList state = m.state_dict();
  state[5].second = full({3}, -1.0, DType::Float64);
  m.load_state_dict(state);
  EXPECT_EQ(m.weights[5][2].item<double>(), -1.0);
}

// Module::to converts in place: a handle taken before (an optimizer's parameter list) sees the
// new dtype, and training goes on with it.
TEST(Module, ToDtypeIsSeenByHandlesTakenBefore) {
  TwoLayer m;
  std::vector<Tensor> params = m.parameters();
  m.to(DType::Float64);
  for (const Tensor& p : params) EXPECT_EQ(p.dtype(), DType::Float64);
  Tensor loss = m.forward(randn({3, 4}, DType::Float64)).sum();
  loss.backward();
  for (const Tensor& p : params) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::Float64);
  }
}

TEST(Module, StateDictRoundTripsThroughSafetensors) {
  manual_seed(1);
  TwoLayer a;
  manual_seed(2);
  TwoLayer b;
  const std::string path =
      (std::filesystem::temp_directory_path() / "kiln_nn_state_test.safetensors").string();
  save_safetensors(path, a.state_dict());
  b.load_state_dict(load_safetensors(path).tensors);
  std::remove(path.c_str());
  Tensor x = randn({3, 4});
  EXPECT_TRUE(same_values(a.forward(x), b.forward(x)));
}

TEST(Module, LoadStateDictRejectsMismatchesWithoutChangingAnything) {
  TwoLayer m;
  Tensor before = m.fc1->weight.clone();
  auto state = m.state_dict();
  state[0].second = zeros({8, 4});
  state[1].second = zeros({7});  // wrong shape: nothing may be loaded
  try {
    m.load_state_dict(state);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("fc1.bias"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same_values(m.fc1->weight, before));

  auto missing = m.state_dict();
  missing.pop_back();
  EXPECT_THROW(m.load_state_dict(missing), Error);
  auto extra = m.state_dict();
  extra.emplace_back("fc3.weight", zeros({1}));
  EXPECT_THROW(m.load_state_dict(extra), Error);
  m.load_state_dict(missing, /*strict=*/false);  // non-strict: the rest loads
  auto wrong_dtype = m.state_dict();
  wrong_dtype[0].second = wrong_dtype[0].second.to(DType::Float64);
  EXPECT_THROW(m.load_state_dict(wrong_dtype), DTypeError);
}

TEST(Module, ZeroGradClearsGradients) {
  TwoLayer m;
  m.fc1->weight.set_grad(ones({8, 4}));
  m.zero_grad(false);
  EXPECT_EQ(sum(m.fc1->weight.grad()).item<double>(), 0.0);
  m.zero_grad();
  EXPECT_FALSE(m.fc1->weight.grad().defined());
}

TEST(Module, SequentialChains) {
  Sequential s;
  s.push_back(std::make_shared<Linear>(3, 5)).push_back(std::make_shared<ReLU>());
  s.push_back(std::make_shared<Linear>(5, 1));
  EXPECT_EQ(s.forward(ones({2, 3})).shape_str(), "[2, 1]");
  EXPECT_EQ(s.named_parameters()[2].first, "2.weight");
}

// Issue 15: a wrong input or bias shape is reported by Linear, with its features, not by the
// ops it is built from (addmm).
TEST(Module, LinearErrorsNameTheModule) {
  Linear lin(4, 3);
  auto message = [&](const Tensor& x) {
    try {
      lin.forward(x);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no ShapeError");
  };
  std::string what = message(ones({2, 5}));
  EXPECT_NE(what.find("Linear(in_features=4, out_features=3): input of shape [2, 5] has 5 "
                      "features, expected 4"),
            std::string::npos)
      << what;
  lin.bias = ones({4});
  what = message(ones({2, 4}));
  EXPECT_NE(what.find("Linear(in_features=4, out_features=3): bias has shape [4], expected [3]"),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find("addmm"), std::string::npos) << what;
  lin.bias = ones({3});
  EXPECT_EQ(lin.forward(ones({2, 4})).sizes(), Shape({2, 3}));
}

TEST(Module, LayersCheckArguments) {
  EXPECT_THROW(Linear(0, 3), ValueError);
  EXPECT_THROW(Dropout(1.5), ValueError);
  EXPECT_THROW(GELU("fast"), ValueError);
  EXPECT_THROW(CausalSelfAttention(10, 4), ValueError);
}

GPTConfig tiny() {
  GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

TEST(GPT, ShapesAndTiedHead) {
  manual_seed(0);
  GPT m(tiny());
  Tensor idx = randint(0, 11, {3, 8});
  EXPECT_EQ(m.forward(idx).shape_str(), "[3, 8, 11]");
  // Tied: the head is the token embedding, counted once.
  const int64_t C = 16, V = 11, T = 8;
  const int64_t per_block =
      2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C);
  EXPECT_EQ(m.num_parameters(), V * C + T * C + 2 * per_block + 2 * C);
  EXPECT_THROW(m.forward(randint(0, 11, {1, 9})), ShapeError);
}

TEST(GPT, CausalPrefixesDoNotSeeTheFuture) {
  manual_seed(0);
  GPT m(tiny());
  Tensor a = randint(0, 11, {1, 8});
  Tensor b = a.clone();
  b.select(1, 7).fill_(Scalar((a.select(1, 7).item<int64_t>() + 1) % 11));
  Tensor la = m.forward(a), lb = m.forward(b);
  EXPECT_TRUE(near(la.slice(1, 0, 7), lb.slice(1, 0, 7)));
  EXPECT_FALSE(near(la.slice(1, 7, 8), lb.slice(1, 7, 8)));
}

TEST(GPT, GenerateIsDeterministicForASeed) {
  manual_seed(0);
  GPT m(tiny());
  Tensor start = zeros({1, 1}, DType::Int64);
  Generator g1(5), g2(5);
  Tensor s1 = m.generate(start, 12, 1.0, &g1), s2 = m.generate(start, 12, 1.0, &g2);
  EXPECT_EQ(s1.shape_str(), "[1, 13]");
  EXPECT_TRUE(same_values(s1, s2));
  EXPECT_LT(amax(s1).item<int64_t>(), 11);
  EXPECT_GE(amin(s1).item<int64_t>(), 0);
}

// Sampling never runs on garbage: a temperature so small that logits / temperature overflows
// is greedy (the limit it tends to), not NaN; non-finite logits and temperatures are errors
// that say where they came from. Temperature 0 means greedy.
TEST(GPT, GenerateRefusesGarbageAndHandlesTinyTemperatures) {
  manual_seed(0);
  GPT m(tiny());
  Tensor start = zeros({2, 1}, DType::Int64);
  Generator g(3);
  Tensor greedy = m.generate(start, 8, 0.0, &g);
  EXPECT_TRUE(equal(m.generate(start, 8, 1e-300, &g), greedy));
  EXPECT_TRUE(equal(m.generate(start, 8, 1e-30, &g), greedy));
  for (double t : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()})
    EXPECT_THROW(m.generate(start, 1, t, &g), ValueError) << t;
  {
    NoGradGuard no_grad;
    m.ln_f->weight.fill_(std::nan(""));  // corrupt weights: NaN logits
  }
  for (double t : {0.0, 1.0}) {
    try {
      m.generate(start, 3, t, &g);
      ADD_FAILURE() << "sampled from NaN logits at temperature " << t;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("the model's logit at generation step 0 (sequence 0, "
                                           "class 0) is nan"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln::nn

namespace kiln::nn {
namespace {

double mean_of(const Tensor& t) { return mean(t.to(DType::Float64)).item<double>(); }
double std_of(const Tensor& t) { return std(t.to(DType::Float64)).item<double>(); }

TEST(Init, GainsAndFansArePyTorchs) {
  EXPECT_EQ(init::calculate_gain("linear"), 1.0);
  EXPECT_EQ(init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_EQ(init::calculate_gain("selu"), 0.75);
  EXPECT_THROW(init::calculate_gain("swish"), ValueError);
  EXPECT_EQ(init::fan_in_and_fan_out(empty({8, 3})), (std::pair<int64_t, int64_t>{3, 8}));
  // A conv weight [out, in, kh, kw]: the receptive field multiplies both.
  EXPECT_EQ(init::fan_in_and_fan_out(empty({16, 4, 3, 3})), (std::pair<int64_t, int64_t>{36, 144}));
  EXPECT_THROW(init::fan_in_and_fan_out(empty({5})), ValueError);
}

TEST(Init, DistributionsHaveTheirBoundsAndSpread) {
  manual_seed(11);
  Tensor w = empty({200, 300});
  init::xavier_uniform_(w);
  const double xb = std::sqrt(6.0 / 500);
  EXPECT_LE(amax(abs(w)).item<double>(), xb);
  EXPECT_GT(amax(abs(w)).item<double>(), 0.99 * xb);
  init::xavier_normal_(w, 2.0);
  EXPECT_NEAR(std_of(w), 2.0 * std::sqrt(2.0 / 500), 0.002);
  init::kaiming_uniform_(w, 0, "fan_in", "relu");
  const double kb = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(300.0);
  EXPECT_LE(amax(abs(w)).item<double>(), kb);
  EXPECT_GT(amax(abs(w)).item<double>(), 0.99 * kb);
  init::kaiming_normal_(w, 0, "fan_out", "relu");
  EXPECT_NEAR(std_of(w), std::sqrt(2.0) / std::sqrt(200.0), 0.002);
  EXPECT_NEAR(mean_of(w), 0.0, 0.002);
  init::constant_(w, 0.25);
  EXPECT_EQ(amin(w).item<double>(), 0.25);
  init::zeros_(w);
  EXPECT_EQ(amax(abs(w)).item<double>(), 0.0);
  Tensor sq = empty({3, 4});
  init::eye_(sq);
  EXPECT_EQ(sum(sq).item<double>(), 3.0);
  EXPECT_EQ(sq[1][1].item<double>(), 1.0);
  EXPECT_THROW(init::kaiming_uniform_(w, 0, "fan_sideways"), ValueError);
  Tensor ints = zeros({2, 2}, DType::Int64);
  EXPECT_THROW(init::xavier_uniform_(ints), DTypeError);
}

// The truncated normal's values lie in [a, b], with the truncated distribution's mean and
// spread: for N(0, 1) cut to [-1, 2], mean (phi(-1) - phi(2)) / Z and variance
// 1 + (-1 phi(-1) - 2 phi(2)) / Z - mean^2, Z = Phi(2) - Phi(-1).
TEST(Init, TruncNormalStaysInItsBoundsWithTheTruncatedMoments) {
  manual_seed(13);
  Tensor w = empty({400, 500});
  init::trunc_normal_(w, 0.0, 1.0, -1.0, 2.0);
  EXPECT_GE(amin(w).item<double>(), -1.0);
  EXPECT_LE(amax(w).item<double>(), 2.0);
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto Phi = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
  const double z = Phi(2) - Phi(-1), m = (phi(-1) - phi(2)) / z;
  const double var = 1 + (-1 * phi(-1) - 2 * phi(2)) / z - m * m;
  EXPECT_NEAR(mean_of(w), m, 0.005);
  EXPECT_NEAR(std_of(w), std::sqrt(var), 0.005);
  // Far in the tail: still inside the bounds.
  init::trunc_normal_(w, 0.0, 1.0, 4.0, 4.5);
  EXPECT_GE(amin(w).item<double>(), 4.0);
  EXPECT_LE(amax(w).item<double>(), 4.5);
  EXPECT_THROW(init::trunc_normal_(w, 0.0, 1.0, 1.0, 1.0), ValueError);
}

TEST(Init, OrthogonalRowsOrColumnsAreOrthonormal) {
  manual_seed(12);
  for (auto shape :
       {std::vector<int64_t>{6, 4}, std::vector<int64_t>{4, 6}, std::vector<int64_t>{5, 2, 3}}) {
    Tensor w = empty(shape, DType::Float64);
    init::orthogonal_(w, 1.5);
    Tensor m = w.reshape({shape[0], -1});
    // The smaller side's Gram matrix is gain^2 times the identity.
    Tensor g = m.size(0) >= m.size(1) ? matmul(m.transpose(0, 1), m) : matmul(m, m.transpose(0, 1));
    const int64_t k = g.size(0);
    EXPECT_LT(amax(abs(g - eye(k, k, DType::Float64) * 2.25)).item<double>(), 1e-12)
        << IntList(shape);
  }
}

// Initialising a module's parameters in place keeps them the module's (and leaves).
TEST(Init, InitialisesAModulesParametersInPlace) {
  Linear lin(8, 4);
  init::kaiming_normal_(lin.weight);
  init::zeros_(lin.bias);
  EXPECT_TRUE(lin.named_parameters()[0].second.is_same(lin.weight));
  EXPECT_TRUE(lin.weight.is_leaf());
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_EQ(amax(abs(lin.named_parameters()[1].second)).item<double>(), 0.0);
}

}  // namespace
}  // namespace kiln::nn

namespace kiln::nn {
namespace {

TEST(BatchNorm, TrainingUpdatesRunningStatsAndEvalUsesThem) {
  manual_seed(21);
  BatchNorm2d bn(3);
  std::vector<std::string> names;
  for (auto& [n, t] : bn.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"}));
  Tensor x = randn({4, 3, 5, 5}) * 2 + 1;
  Tensor y = bn.forward(x);
  // Per channel: mean 0, biased variance 1 (weight ones, bias zeros).
  EXPECT_LT(amax(abs(mean(y, {0, 2, 3}))).item<double>(), 1e-5);
  EXPECT_LT(amax(abs(var(y, {0, 2, 3}, 0) - 1)).item<double>(), 1e-3);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  Tensor expect_rm = mean(x, {0, 2, 3}) * 0.1;
  Tensor expect_rv = var(x, {0, 2, 3}, 1) * 0.1 + 0.9;  // the unbiased variance
  EXPECT_TRUE(near(bn.running_mean, expect_rm, 1e-6));
  EXPECT_TRUE(near(bn.running_var, expect_rv, 1e-5));
  bn.eval();
  Tensor z = bn.forward(x);
  EXPECT_TRUE(
      near(z, (x - expect_rm.reshape({1, 3, 1, 1})) / sqrt(expect_rv.reshape({1, 3, 1, 1}) + 1e-5),
           1e-5));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);  // eval does not count
  EXPECT_THROW(bn.forward(ones({4, 3})), ShapeError);    // 2d takes 4 dims
  BatchNorm1d bn1(3);
  EXPECT_EQ(bn1.forward(randn({5, 3})).sizes(), Shape({5, 3}));
  EXPECT_EQ(bn1.forward(randn({5, 3, 7})).sizes(), Shape({5, 3, 7}));
}

// Compiled, a training step through BatchNorm is one graph (the running-stat updates are
// captured as in-place writes) and gives eager's outputs, gradients and running stats.
TEST(BatchNorm, ACompiledTrainingStepIsOneGraphAndMatchesEager) {
  manual_seed(22);
  BatchNorm2d eager_bn(4), compiled_bn(4);
  auto step = [](BatchNorm2d& bn, const Tensor& x) {
    Tensor loss = (bn.forward(x) * x).sum();
    loss.backward();
    return loss;
  };
  CompileOptions o;
  o.backend = std::string("aot_eager");
  o.fullgraph = true;  // a graph break would throw
  auto compiled = compile([&](const Tensor& x) { return step(compiled_bn, x); }, o);
  for (int i = 0; i < 3; ++i) {
    Tensor x = randn({2, 4, 3, 3});
    EXPECT_TRUE(near(step(eager_bn, x), compiled(x), 1e-4));
  }
  EXPECT_TRUE(near(eager_bn.running_mean, compiled_bn.running_mean, 1e-6));
  EXPECT_TRUE(near(eager_bn.running_var, compiled_bn.running_var, 1e-6));
  EXPECT_TRUE(near(eager_bn.weight.grad(), compiled_bn.weight.grad(), 1e-4));
  EXPECT_EQ(compiled_bn.num_batches_tracked.item<int64_t>(), 3);
}

// momentum = None (std::nullopt): the running stats are the plain average of every batch's
// statistics so far (PyTorch's cumulative moving average), and compiled the changing factor
// 1 / num_batches_tracked is an input: one graph for every step.
TEST(BatchNorm, WithoutAMomentumTheRunningStatsAreCumulativeAverages) {
  manual_seed(24);
  BatchNorm1d eager_bn(3, 1e-5, std::nullopt), compiled_bn(3, 1e-5, std::nullopt);
  CompileProfiler prof;
  auto compiled = compile([&](const Tensor& x) { return compiled_bn.forward(x); },
                          {.backend = std::string("inductor"), .name = "cumulative_bn"});
  Tensor mean_sum = zeros({3}), var_sum = zeros({3});
  const int batches = 4;
  for (int b = 0; b < batches; ++b) {
    Tensor x = randn({6, 3}) * (b + 1) + b;
    mean_sum = mean_sum + mean(x, {0});
    var_sum = var_sum + var(x, {0}, 1);
    EXPECT_TRUE(near(eager_bn.forward(x), compiled(x), 1e-5));
  }
  // (The initial running_var of ones counts for nothing: the first factor is 1.)
  for (BatchNorm1d* bn : {&eager_bn, &compiled_bn}) {
    EXPECT_TRUE(near(bn->running_mean, mean_sum / batches, 1e-5)) << bn->running_mean;
    EXPECT_TRUE(near(bn->running_var, var_sum / batches, 1e-4)) << bn->running_var;
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), batches);
  }
  EXPECT_EQ(prof.stats()["cumulative_bn"].graphs, 1);
  EXPECT_THROW(BatchNorm2d(3, 1e-5, 1.5), ValueError);
}

TEST(GroupNorm, NormalisesEachGroupAndChecksItsArguments) {
  manual_seed(23);
  GroupNorm gn(2, 4);
  Tensor x = randn({3, 4, 5}) * 3;
  Tensor y = gn.forward(x).reshape({3, 2, 10});
  EXPECT_LT(amax(abs(mean(y, {2}))).item<double>(), 1e-5);
  EXPECT_THROW(GroupNorm(3, 4), ValueError);
}

TEST(Flatten, FlattensAndUnflattens) {
  Tensor x = randn({2, 3, 4, 5});
  EXPECT_EQ(Flatten().forward(x).sizes(), Shape({2, 60}));
  EXPECT_EQ(Flatten(0, 1).forward(x).sizes(), Shape({6, 4, 5}));
  EXPECT_EQ(Unflatten(1, {3, 20}).forward(Flatten().forward(x)).sizes(), Shape({2, 3, 20}));
}

}  // namespace
}  // namespace kiln::nn

namespace kiln::nn {
namespace {

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// Probabilities of exactly 0 and 1 (a saturated sigmoid) cost 100 per element, as in PyTorch,
// and get finite gradients.
TEST(Losses, BinaryCrossEntropyAtZeroAndOneHasFiniteGradients) {
  Tensor p = tensor({0.0, 1.0, 0.0, 1.0, 0.5}, DType::Float32).requires_grad_();
  Tensor t = tensor({0.0, 1.0, 1.0, 0.0, 1.0}, DType::Float32);
  Tensor loss = binary_cross_entropy(p, t, "none");
  const std::vector<float> values = loss.to_vector<float>();
  EXPECT_EQ(values[0], 0.0f);
  EXPECT_EQ(values[1], 0.0f);
  EXPECT_EQ(values[2], 100.0f);
  EXPECT_EQ(values[3], 100.0f);
  loss.sum().backward();
  EXPECT_TRUE(all_finite(p.grad())) << p.grad();
  // Outside [0, 1]: NaN, never a quiet number.
  EXPECT_TRUE(std::isnan(binary_cross_entropy(tensor({1.5}), tensor({1.0})).item<double>()));
}

TEST(Losses, KlDivAtAZeroTargetIsZeroWithAFiniteGradient) {
  Tensor input = tensor({-1.0, -2.0}, DType::Float64).requires_grad_();
  Tensor target = tensor({0.0, 0.5}, DType::Float64).requires_grad_();
  Tensor loss = kl_div(input, target, "none");
  EXPECT_EQ(loss.to_vector<double>()[0], 0.0);
  EXPECT_NEAR(loss.to_vector<double>()[1], 0.5 * (std::log(0.5) + 2.0), 1e-15);
  loss.sum().backward();
  EXPECT_TRUE(all_finite(input.grad()));
  EXPECT_TRUE(all_finite(target.grad()));
  // A negative target has no logarithm: NaN, as xlogy gives.
  EXPECT_TRUE(std::isnan(kl_div(tensor({-1.0}), tensor({-0.5}), "sum").item<double>()));
}

// A graph that saved a parameter before Module::to converted it fails at backward, as after an
// in-place write, instead of differentiating with the converted data.
TEST(Module, ToDtypeInvalidatesGraphsThatSavedTheOldData) {
  Linear lin(3, 2);
  Tensor y = (lin.weight * lin.weight).sum();
  lin.to(DType::Float64);
  EXPECT_THROW(y.backward(), Error);
}

// The layers of pytorch/examples' mnist network: conv, pool, relu, flatten, linear, trained one
// step eagerly and under each backend, with the same loss and gradients.
TEST(Conv2d, AnMnistStyleNetworkTrainsTheSameEagerlyAndCompiled) {
  auto make = [] {
    manual_seed(11);
    auto net = std::make_shared<nn::Sequential>();
    net->push_back(std::make_shared<nn::Conv2d>(1, 4, std::vector<int64_t>{3}))
        .push_back(std::make_shared<nn::ReLU>())
        .push_back(std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{2}))
        .push_back(std::make_shared<nn::Conv2d>(4, 6, std::vector<int64_t>{3},
                                                nn::Conv2dOptions{.padding = {1}, .groups = 2}))
        .push_back(std::make_shared<nn::AvgPool2d>(std::vector<int64_t>{2}))
        .push_back(std::make_shared<nn::Flatten>())
        .push_back(std::make_shared<nn::Linear>(6 * 3 * 3, 10));
    return net;
  };
  manual_seed(12);
  const Tensor images = randn({5, 1, 14, 14});
  const Tensor labels = randint(0, 10, {5});
  auto step = [&](nn::Sequential& net) {
    Tensor loss = cross_entropy(net.forward(images), labels);
    loss.backward();
    return loss;
  };
  auto want_net = make();
  const Tensor want = step(*want_net);
  EXPECT_EQ(want_net->forward(images).sizes(), (Shape{5, 10}));
  for (const char* backend : {"eager", "aot_eager", "inductor"}) {
    SCOPED_TRACE(backend);
    auto net = make();
    auto f = compile([&] { return step(*net); }, {.backend = std::string(backend)});
    const Tensor got = f();
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-6)) << got << " vs " << want;
    const auto params = net->parameters(), want_params = want_net->parameters();
    ASSERT_EQ(params.size(), want_params.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(allclose(params[i].grad(), want_params[i].grad(), 1e-4, 1e-6)) << i;
  }
}

// Conv1d/Conv3d, the pools of every rank and the adaptive pools as modules: shapes, PyTorch's
// initialisation bounds, Same padding, ceil_mode, global pooling; a 1-d and a 3-d network
// trained one step under inductor give eager's loss and gradients.
// padding_mode: the input padded with the mode, then a convolution that pads nothing — in
// float64 checked by hand for one output of each mode, and a "same" split for an even kernel.
TEST(ConvNd, PaddingModesPadTheInputAsTorchDoes) {
  manual_seed(17);
  const Tensor x = randn({1, 1, 5}, DType::Float64);
  for (const PadMode mode : {PadMode::Reflect, PadMode::Replicate, PadMode::Circular}) {
    Conv1d conv(1, 1, {3},
                {.padding = {2}, .bias = false, .dtype = DType::Float64, .padding_mode = mode});
    const Tensor y = conv.forward(x);
    EXPECT_EQ(y.sizes(), (Shape{1, 1, 7}));
    // Output 0 reads padded positions -2, -1, 0.
    const std::vector<double> xs = x.flatten().to_vector<double>(),
                              w = conv.weight.flatten().to_vector<double>();
    auto at = [&](int64_t p) {
      return mode == PadMode::Reflect     ? xs[static_cast<size_t>(std::abs(p))]
             : mode == PadMode::Replicate ? xs[0]
                                          : xs[static_cast<size_t>((p + 5) % 5)];
    };
    EXPECT_NEAR(y.flatten().to_vector<double>()[0], at(-2) * w[0] + at(-1) * w[1] + at(0) * w[2],
                1e-12);
    EXPECT_TRUE(allclose(y, conv1d(pad(x, {2, 2}, mode), conv.weight), 0, 0));
  }
  Conv2d same(1, 2, {2, 3}, {.named_padding = ConvPadding::Same, .padding_mode = PadMode::Reflect});
  const Tensor image = randn({1, 1, 4, 5});
  EXPECT_TRUE(allclose(same.forward(image),
                       conv2d(pad(image, {1, 1, 0, 1}, PadMode::Reflect), same.weight, same.bias),
                       0, 0));
}

TEST(ConvNd, OneAndThreeDimensionalLayersAndTheirPools) {
  manual_seed(13);
  Conv1d c1(2, 4, {3}, {.padding = {1}});
  EXPECT_EQ(c1.weight.sizes(), (Shape{4, 2, 3}));
  EXPECT_LE(amax(abs(c1.weight)).item<double>(), 1.0 / std::sqrt(6.0));
  EXPECT_EQ(c1.forward(randn({5, 2, 10})).sizes(), (Shape{5, 4, 10}));
  Conv3d c3(2, 3, {2, 3, 1}, {.stride = {1, 2, 1}, .bias = false});
  EXPECT_FALSE(c3.bias.defined());
  EXPECT_EQ(c3.forward(randn({2, 4, 5, 3})).sizes(), (Shape{3, 3, 2, 3}));  // unbatched
  Conv2d same(3, 2, {4, 3}, {.dilation = {1, 2}, .named_padding = ConvPadding::Same});
  EXPECT_EQ(same.forward(randn({1, 3, 7, 6})).sizes(), (Shape{1, 2, 7, 6}));
  EXPECT_EQ(MaxPool1d({2}, {}, {0}, {1}, /*ceil_mode=*/true).forward(randn({1, 2, 7})).sizes(),
            (Shape{1, 2, 4}));
  EXPECT_EQ(AvgPool3d({2}).forward(randn({1, 2, 4, 6, 5})).sizes(), (Shape{1, 2, 2, 3, 2}));
  const Tensor x = randn({2, 3, 5, 7});
  EXPECT_TRUE(allclose(AdaptiveAvgPool2d({1}).forward(x), mean(x, {2, 3}, true), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(AdaptiveMaxPool2d({1}).forward(x), amax(x, {2, 3}, true), 0, 0));
  // with indices: the global maximum's flat position in each [5, 7] plane
  auto [values, indices] = AdaptiveMaxPool2d({1}).forward_with_indices(x);
  EXPECT_TRUE(equal(values, amax(x, {2, 3}, true)));
  EXPECT_TRUE(equal(indices, argmax(x.flatten(2), 2, true).unsqueeze(3)));
  EXPECT_EQ(AdaptiveAvgPool1d({4}).forward(randn({3, 9})).sizes(), (Shape{3, 4}));
  EXPECT_THROW(Conv3d(2, 3, {2, 2}), ValueError);  // 1 or 3 kernel sizes
  // A transposed convolution undoes a strided one's shape; its bound is 1/sqrt(out/groups k k).
  ConvTranspose2d up(4, 6, {2}, {.stride = {2}, .groups = 2});
  EXPECT_EQ(up.weight.sizes(), (Shape{4, 3, 2, 2}));
  EXPECT_LE(amax(abs(up.weight)).item<double>(), 1.0 / std::sqrt(12.0));
  EXPECT_EQ(up.forward(randn({1, 4, 3, 5})).sizes(), (Shape{1, 6, 6, 10}));
  ConvTranspose1d up1(2, 2, {3}, {.stride = {2}, .padding = {1}, .output_padding = {1}});
  EXPECT_EQ(up1.forward(randn({2, 5})).sizes(), (Shape{2, 10}));
  // It is the gradient of the convolution with respect to its input.
  const Tensor w = randn({3, 2, 3}), g = randn({1, 3, 5});
  Tensor xin = randn({1, 2, 9}).requires_grad_();
  (conv1d(xin, w, {}, {2}, {1}) * g).sum().backward();
  EXPECT_TRUE(allclose(conv_transpose1d(g, w, {}, {2}, {1}, {0}), xin.grad(), 1e-5, 1e-6));

  auto net1 = [] {
    manual_seed(14);
    auto net = std::make_shared<Sequential>();
    net->push_back(std::make_shared<Conv1d>(2, 4, std::vector<int64_t>{3}))
        .push_back(std::make_shared<ReLU>())
        .push_back(std::make_shared<MaxPool1d>(std::vector<int64_t>{2}, std::vector<int64_t>{},
                                               std::vector<int64_t>{0}, std::vector<int64_t>{1},
                                               true))
        .push_back(std::make_shared<AdaptiveAvgPool1d>(std::vector<int64_t>{3}))
        .push_back(std::make_shared<Flatten>());
    return net;
  };
  auto net3 = [] {
    manual_seed(15);
    auto net = std::make_shared<Sequential>();
    net->push_back(std::make_shared<Conv3d>(1, 2, std::vector<int64_t>{2},
                                            ConvOptions{.named_padding = ConvPadding::Same}))
        .push_back(std::make_shared<AvgPool3d>(std::vector<int64_t>{2}))
        .push_back(std::make_shared<AdaptiveMaxPool3d>(std::vector<int64_t>{1, 2, 1}))
        .push_back(std::make_shared<Flatten>());
    return net;
  };
  const Tensor x1 = randn({3, 2, 11}), x3 = randn({2, 1, 4, 6, 4});
  for (const auto& [make, input] :
       {std::pair{std::function<std::shared_ptr<Sequential>()>(net1), x1},
        std::pair{std::function<std::shared_ptr<Sequential>()>(net3), x3}}) {
    auto eager = make(), compiled = make();
    auto step = [&input](Sequential& net) {
      Tensor loss = net.forward(input).pow(2).sum();
      loss.backward();
      return loss;
    };
    const Tensor want = step(*eager);
    auto f = compile([&] { return step(*compiled); }, {.backend = std::string("inductor")});
    EXPECT_TRUE(allclose(f(), want, 1e-5, 1e-6));
    const auto pe = eager->parameters(), pc = compiled->parameters();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_TRUE(allclose(pc[i].grad(), pe[i].grad(), 1e-4, 1e-6)) << i;
  }
}

TEST(Dropout2d, ZeroesWholeChannelsWhenTrainingOnly) {
  manual_seed(4);
  nn::Dropout2d drop(0.5);
  const Tensor x = ones({4, 8, 3, 3});
  const Tensor y = drop.forward(x);
  const std::vector<float> v = y.to_vector<float>();
  int zeroed = 0;
  for (int64_t ch = 0; ch < 32; ++ch) {
    const float first = v[static_cast<size_t>(ch * 9)];
    EXPECT_TRUE(first == 0.0f || first == 2.0f) << first;
    zeroed += first == 0.0f;
    for (int64_t k = 1; k < 9; ++k) EXPECT_EQ(v[static_cast<size_t>(ch * 9 + k)], first);
  }
  EXPECT_GT(zeroed, 4);
  EXPECT_LT(zeroed, 28);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).is_same(x));
  EXPECT_THROW(dropout2d(ones({4, 4}), 0.5), ShapeError);
}

TEST(InstanceNorm, NormalisesEachSamplesChannelOnItsOwn) {
  manual_seed(5);
  nn::InstanceNorm2d norm(3, 1e-5, 0.1, /*affine=*/true);
  const Tensor x = randn({2, 3, 4, 5}) * 3 + 1;
  const Tensor y = norm.forward(x);
  const Tensor m = mean(y, {2, 3}), v = var(y, {2, 3}, 0);
  EXPECT_TRUE(allclose(m, zeros({2, 3}), 1e-5, 1e-5)) << m;
  EXPECT_TRUE(allclose(v, ones({2, 3}), 1e-3, 1e-3)) << v;
  EXPECT_TRUE(allclose(norm.forward(x[0]), y[0], 1e-6, 1e-6));  // unbatched
  EXPECT_EQ(norm.named_parameters().size(), 2u);
  EXPECT_THROW(norm.forward(ones({2, 4, 4, 4})), ShapeError);
}

// track_running_stats: training moves the running stats towards the batch's average of the
// instances' means and unbiased variances (PyTorch's update); eval normalises by them. Compiled,
// the updates are in-place writes in the one graph.
TEST(InstanceNorm, RunningStatsAreTrackedAndUsedInEval) {
  manual_seed(6);
  nn::InstanceNorm1d eager(2, 1e-5, 0.2, false, /*track_running_stats=*/true);
  nn::InstanceNorm1d compiled_norm(2, 1e-5, 0.2, false, true);
  std::vector<std::string> names;
  for (auto& [n, t] : eager.state_dict()) names.push_back(n);
  EXPECT_EQ(names,
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  CompileProfiler prof;
  auto compiled = compile([&](const Tensor& x) { return compiled_norm.forward(x); },
                          {.backend = std::string("inductor"), .name = "instance_stats"});
  Tensor want_mean = zeros({2}), want_var = ones({2});
  for (int b = 0; b < 3; ++b) {
    const Tensor x = randn({4, 2, 7}) * (b + 2) - b;
    want_mean = want_mean * 0.8 + mean(mean(x, {2}), {0}) * 0.2;
    want_var = want_var * 0.8 + mean(var(x, {2}, 1), {0}) * 0.2;
    EXPECT_TRUE(allclose(eager.forward(x), compiled(x), 1e-5, 1e-5));
  }
  EXPECT_EQ(prof.stats()["instance_stats"].graphs, 1);
  for (nn::InstanceNorm1d* n : {&eager, &compiled_norm}) {
    EXPECT_TRUE(allclose(n->running_mean, want_mean, 1e-5, 1e-6)) << n->running_mean;
    EXPECT_TRUE(allclose(n->running_var, want_var, 1e-5, 1e-5)) << n->running_var;
  }
  eager.eval();
  const Tensor x = randn({3, 2, 5});
  const Tensor want = (x - want_mean.reshape({1, 2, 1})) / sqrt(want_var.reshape({1, 2, 1}) + 1e-5);
  EXPECT_TRUE(allclose(eager.forward(x), want, 1e-5, 1e-5));
  EXPECT_THROW(nn::InstanceNorm2d(2, 1e-5, 1.5), ValueError);
}

}  // namespace
}  // namespace kiln::nn
