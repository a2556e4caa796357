#include "workloads.h"

#include <optional>
#include <variant>

#include "kiln/kiln.h"

namespace kiln::bench {

namespace {

// W1: y = gelu(x*a + b) * sigmoid(x) + 0.5*x on 16M float32 elements (a, b scalars).
std::function<void()> w1() {
  auto x = std::make_shared<Tensor>(randn({16 * 1024 * 1024}));
  return [x] {
    const double a = 1.5, b = 0.25;
    Tensor y = gelu(*x * a + b) * sigmoid(*x) + 0.5 * *x;
    (void)y;
  };
}

// W1g: eager gelu alone on W1's input: the yardstick of W1's fused loop (which computes gelu's
// erf and a sigmoid per element), `kiln bench --pair W1g,W1i`.
std::function<void()> w1_gelu_alone() {
  auto x = std::make_shared<Tensor>(randn({16 * 1024 * 1024}));
  return [x] {
    Tensor y = gelu(*x);
    (void)y;
  };
}

// W2: softmax over the last dim of [4096, 1024].
std::function<void()> w2() {
  auto x = std::make_shared<Tensor>(randn({4096, 1024}));
  return [x] { Tensor y = softmax(*x, -1); };
}

// W3: layer_norm over the last dim of [8192, 1024] with weight and bias.
std::function<void()> w3() {
  auto x = std::make_shared<Tensor>(randn({8192, 1024}));
  auto w = std::make_shared<Tensor>(randn({1024}));
  auto b = std::make_shared<Tensor>(randn({1024}));
  return [x, w, b] { Tensor y = layer_norm(*x, {1024}, *w, *b); };
}

// W6: a chain of 100 small pointwise ops (alternating add, mul, tanh) on a [64] tensor.
std::function<void()> w6() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  return [x, c] {
    Tensor y = *x;
    for (int i = 0; i < 100; ++i) {
      switch (i % 3) {
        case 0:
          y = y + *c;
          break;
        case 1:
          y = y * *c;
          break;
        default:
          y = tanh(y);
          break;
      }
    }
  };
}

// W6c: W6 through kiln::compile with the eager backend. The graph is cached after the first
// call, so (W6c - W6) / 100 is the per-op cost of capture + guard + lookup + interpretation.
std::function<void()> w6_compiled() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  auto chain = [c](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 100; ++i) y = i % 3 == 0 ? y + *c : i % 3 == 1 ? y * *c : tanh(y);
    return y;
  };
  auto compiled = std::make_shared<decltype(compile(chain))>(
      compile(chain, CompileOptions{.backend = std::string("eager"), .name = "W6c"}));
  return [x, compiled] { (*compiled)(*x); };
}

// W6s / W6sc: one add on [64], eager and compiled: with W6/W6c they split the capture overhead
// into a per-call part and a per-op part (`kiln bench` prints the split).
std::function<void()> w6_single() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  return [x, c] { Tensor y = *x + *c; };
}
std::function<void()> w6_single_compiled() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  auto one = [c](const Tensor& x) { return x + *c; };
  auto compiled = std::make_shared<decltype(compile(one))>(
      compile(one, CompileOptions{.backend = std::string("eager"), .name = "W6sc"}));
  return [x, compiled] { (*compiled)(*x); };
}

// A backend (by name or as a callable) for a W4/W5 step's model; "" for none: eager mode.
using ModelBackend = std::variant<std::string, Backend>;
bool is_eager(const ModelBackend& b) {
  const auto* name = std::get_if<std::string>(&b);
  return name && name->empty();
}
// AOT autograd with inductor compiling both halves.
ModelBackend aot_inductor() { return aot_autograd(lookup_backend("inductor")); }

// The module a W4/W5 step trains, and its forward as the step calls it: the module itself, or
// (`model_backend` set) the module compiled with that backend, as torch users write
// `model = torch.compile(model)`, with the loss, backward() and the optimizer outside.
template <class M>
std::function<Tensor(const Tensor&)> forward_of(std::shared_ptr<M> model,
                                                const ModelBackend& model_backend,
                                                const char* name) {
  if (is_eager(model_backend)) return [model](const Tensor& x) { return model->forward(x); };
  auto fn = [model](const Tensor& x) { return model->forward(x); };
  auto compiled = std::make_shared<decltype(compile(fn))>(
      compile(fn, CompileOptions{.backend = model_backend, .name = name}));
  return [compiled](const Tensor& x) { return (*compiled)(x); };
}

// W4: one MLP training step: batch 256, 784-512-512-10 with ReLU, cross-entropy, backward,
// SGD (lr 0.01). W4m: the model compiled (see forward_of).
std::function<void()> w4(const ModelBackend& model_backend = "", const char* name = "W4") {
  manual_seed(4);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(784, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 10));
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01});
  auto x = std::make_shared<Tensor>(randn({256, 784}));
  auto y = std::make_shared<Tensor>(randint(0, 10, {256}));
  auto forward = forward_of(model, model_backend, name);
  auto step = [forward, opt, x, y] {
    opt->zero_grad();
    Tensor loss = cross_entropy(forward(*x), *y);
    loss.backward();
    opt->step();
  };
  if (!is_eager(model_backend)) step();  // compiles both halves outside the timed calls
  return step;
}

// W5: one GPT-2-style block training step: B=8, T=128, C=256, 4 heads, causal attention
// (matmul + masked softmax), LayerNorm, GELU MLP (4x), MSE loss against a random target,
// backward, AdamW. W5m: the block compiled (see forward_of).
std::function<void()> w5(const ModelBackend& model_backend = "", const char* name = "W5") {
  manual_seed(5);
  auto block = std::make_shared<nn::Block>(256, 4);
  auto opt = std::make_shared<optim::AdamW>(block->parameters(), optim::AdamWOptions{});
  auto x = std::make_shared<Tensor>(randn({8, 128, 256}));
  auto target = std::make_shared<Tensor>(randn({8, 128, 256}));
  auto forward = forward_of(block, model_backend, name);
  auto step = [forward, opt, x, target] {
    opt->zero_grad();
    Tensor loss = mse_loss(forward(*x), *target);
    loss.backward();
    opt->step();
  };
  if (!is_eager(model_backend)) step();
  return step;
}

// The step to time: `step` itself (backend ""), or `step` through kiln::compile with `backend`,
// called once here so that the timed calls are cache hits.
template <class Step>
std::function<void()> with_backend(Step step, const std::string& backend, const char* name,
                                   std::optional<bool> dynamic = std::nullopt) {
  if (backend.empty()) return [step] { step(); };
  auto compiled = std::make_shared<decltype(compile(step))>(
      compile(step, CompileOptions{.backend = backend, .dynamic = dynamic, .name = name}));
  (*compiled)();
  return [compiled] { (*compiled)(); };
}

// W7: the demo's char-GPT training step (`kiln train`'s model): vocab 96, 4 layers, 128 wide,
// 4 heads, block 64, batch 32; cross-entropy, backward, gradient clipping (the tensor form, so
// that a compiled step is one graph), AdamW. `backend` empty: eager mode.
std::function<void()> w7_step(const std::string& backend, const char* name,
                              std::optional<bool> dynamic = std::nullopt) {
  manual_seed(7);
  nn::GPTConfig config;
  config.vocab_size = 96;
  config.block_size = 64;
  auto model = std::make_shared<nn::GPT>(config);
  auto opt = std::make_shared<optim::AdamW>(model->parameters(),
                                            optim::AdamWOptions{.lr = 3e-3, .weight_decay = 0.1});
  auto x = std::make_shared<Tensor>(randint(0, 96, {32, 64}));
  auto y = std::make_shared<Tensor>(randint(0, 96, {32, 64}));
  auto step = [model, opt, x, y] {
    opt->zero_grad();
    Tensor loss = model->loss(*x, *y);
    loss.backward();
    optim::clip_grad_norm_tensor_(model->parameters(), 1.0);
    opt->step();
    return loss;
  };
  return with_backend(step, backend, name, dynamic);
}

// W8: the dynamic-shapes sweep: W7's model (batch 8) trained, forward and backward, at 50
// sequence lengths 2..51 in turn, each batch a slice of one [8, 64] tensor (as a text loader
// cuts them). `mode`: "" eager; "i" through a kiln::compile made for the sweep (inductor,
// automatic dynamic: the exact graph, the dynamic one, then instances at each new length);
// "s" the same with dynamic = false (a graph per length until cache_size_limit, then eager);
// "w" one kiln::compile made in setup, so each timed sweep hits the graphs of the first.
std::function<void()> w8_sweep(const std::string& mode) {
  manual_seed(8);
  nn::GPTConfig config;
  config.vocab_size = 96;
  config.block_size = 64;
  auto model = std::make_shared<nn::GPT>(config);
  auto x = std::make_shared<Tensor>(randint(0, 96, {8, 64}));
  auto y = std::make_shared<Tensor>(randint(0, 96, {8, 64}));
  auto step = [model](const Tensor& idx, const Tensor& targets) {
    model->zero_grad();
    Tensor loss = model->loss(idx, targets);
    loss.backward();
    return loss;
  };
  using Compiled = decltype(compile(step));
  auto sweep = [x, y](const std::function<Tensor(const Tensor&, const Tensor&)>& run) {
    for (int64_t t = 2; t <= 51; ++t) run(x->narrow(1, 0, t), y->narrow(1, 0, t));
  };
  if (mode.empty()) return [sweep, step] { sweep(step); };
  auto fresh = [step, mode] {
    CompileOptions options{.backend = std::string("inductor"), .name = "W8" + mode};
    if (mode == "s") options.dynamic = false;
    return std::make_shared<Compiled>(compile(step, options));
  };
  if (mode == "w") {
    auto compiled = fresh();
    sweep([compiled](const Tensor& a, const Tensor& b) { return (*compiled)(a, b); });
    return [sweep, compiled] {
      sweep([compiled](const Tensor& a, const Tensor& b) { return (*compiled)(a, b); });
    };
  }
  auto run_fresh = [sweep, fresh] {
    auto compiled = fresh();
    sweep([compiled](const Tensor& a, const Tensor& b) { return (*compiled)(a, b); });
  };
  run_fresh();  // (the system compiler runs here, once: the timed sweeps find its modules)
  return run_fresh;
}

// A1: one W7 layer's attention core, forward and backward, in isolation: the qkv projection's
// output [32, 64, 384] split into q, k, v of 4 heads of 32 (views, as CausalSelfAttention
// does), causal scaled_dot_product_attention, then the gradient of sum(y * g) back to the
// projection. Besides its batched products, it holds the kernels that dominated W7's generated
// code: the causal (masked) softmax forward and backward, and the q/k/v gradients written into
// one [32, 64, 3, 4, 32] gradient (three pads summed, one of them read transposed).
std::function<void()> attention_core(const std::string& backend, const char* name) {
  manual_seed(11);
  auto h = std::make_shared<Tensor>(randn({32, 64, 384}));
  h->requires_grad_();
  auto g = std::make_shared<Tensor>(randn({32, 64, 128}));
  auto step = [h, g] {
    h->set_grad(Tensor());
    Tensor parts = h->view({32, 64, 3, 4, 32});
    Tensor q = parts.select(2, 0).transpose(1, 2);
    Tensor k = parts.select(2, 1).transpose(1, 2);
    Tensor v = parts.select(2, 2).transpose(1, 2);
    Tensor y = scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true);
    Tensor loss = (y.transpose(1, 2).reshape({32, 64, 128}) * *g).sum();
    loss.backward();
    return loss;
  };
  return with_backend(step, backend, name);
}

// ---- the same workloads through kiln::compile with the code-generating backend ----
// The first call (made here, in setup) compiles, so the timed calls are cache hits; compile
// time is reported apart by `kiln bench` from compile_times().
// `dynamic`: every input dim a symbol (CompileOptions::dynamic = true): the kernels are the ones
// a dynamic graph runs for every size (W1d–W3d, W7d against W1i–W3i, W7i).
CompileOptions inductor_options(const char* name, bool dynamic = false) {
  CompileOptions options{.backend = std::string("inductor"), .name = name};
  if (dynamic) options.dynamic = true;
  return options;
}

std::function<void()> w1_inductor(bool dynamic = false) {
  auto x = std::make_shared<Tensor>(randn({16 * 1024 * 1024}));
  auto chain = [](const Tensor& x) { return gelu(x * 1.5 + 0.25) * sigmoid(x) + 0.5 * x; };
  auto compiled = std::make_shared<decltype(compile(chain))>(
      compile(chain, inductor_options(dynamic ? "W1d" : "W1i", dynamic)));
  (*compiled)(*x);
  return [x, compiled] { (*compiled)(*x); };
}

// W7g: the matrix products of one W7 step alone (eager matmul, as the step runs them): each
// Linear's forward, input gradient and weight gradient, and attention's batched products.
// What the rest of a W7 step costs is W7 (or W7i) minus this. bench/w7_gemms.py times the
// same products in PyTorch. W7gl / W7ga: only the Linear products (src/ops/sgemm.h or OpenBLAS)
// / only attention's (linalg's small-product kernel), as `w7_gemms.py --products
// linear|attention`.
enum class W7Products { All, Linear, Attention };
std::function<void()> w7_gemms(W7Products which = W7Products::All) {
  struct Linear {
    int64_t in, out, count;
  };
  const int64_t tokens = 32 * 64;
  std::vector<std::function<void()>> products;
  for (Linear l : {Linear{128, 384, 4}, Linear{128, 128, 4}, Linear{128, 512, 4},
                   Linear{512, 128, 4}, Linear{128, 96, 1}}) {
    if (which == W7Products::Attention) break;
    auto x = std::make_shared<Tensor>(randn({tokens, l.in}));
    auto w = std::make_shared<Tensor>(randn({l.out, l.in}));
    auto g = std::make_shared<Tensor>(randn({tokens, l.out}));
    for (int64_t k = 0; k < l.count; ++k) {
      products.push_back([x, w] { Tensor y = matmul(*x, w->t()); });
      products.push_back([g, w] { Tensor y = matmul(*g, *w); });
      products.push_back([g, x] { Tensor y = matmul(g->t(), *x); });
    }
  }
  // Per layer: scores q kᵀ, weights @ v; backward: two products of each shape.
  auto q = std::make_shared<Tensor>(randn({128, 64, 32}));
  auto a = std::make_shared<Tensor>(randn({128, 64, 64}));
  for (int layer = 0; layer < (which == W7Products::Linear ? 0 : 4); ++layer) {
    products.push_back([q] { Tensor y = matmul(*q, q->transpose(1, 2)); });
    products.push_back([a, q] { Tensor y = matmul(*a, *q); });
    for (int k = 0; k < 2; ++k) {
      products.push_back([a, q] { Tensor y = matmul(a->transpose(1, 2), *q); });
      products.push_back([a, q] { Tensor y = matmul(*a, *q); });
    }
  }
  return [products] {
    for (const auto& p : products) p();
  };
}

// W2i / W3i: W2 and W3 through kiln::compile (inductor): softmax as a generated row kernel,
// layer_norm as an extern call to its eager kernel.
std::function<void()> w2_inductor(bool dynamic = false) {
  auto x = std::make_shared<Tensor>(randn({4096, 1024}));
  auto fn = [](const Tensor& x) { return softmax(x, -1); };
  auto compiled = std::make_shared<decltype(compile(fn))>(
      compile(fn, inductor_options(dynamic ? "W2d" : "W2i", dynamic)));
  (*compiled)(*x);
  return [x, compiled] { (*compiled)(*x); };
}
std::function<void()> w3_inductor(bool dynamic = false) {
  auto x = std::make_shared<Tensor>(randn({8192, 1024}));
  auto w = std::make_shared<Tensor>(randn({1024}));
  auto b = std::make_shared<Tensor>(randn({1024}));
  auto fn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return layer_norm(x, {1024}, w, b);
  };
  auto compiled = std::make_shared<decltype(compile(fn))>(
      compile(fn, inductor_options(dynamic ? "W3d" : "W3i", dynamic)));
  (*compiled)(*x, *w, *b);
  return [x, w, b, compiled] { (*compiled)(*x, *w, *b); };
}

// W6i / W6p: W6 under inductor, captured each call or (pure mode) not: a pure hit checks the
// guards and runs the compiled graph without calling the function.
std::function<void()> w6_inductor(bool pure, bool dynamic = false) {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  auto chain = [c](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < 100; ++i) y = i % 3 == 0 ? y + *c : i % 3 == 1 ? y * *c : tanh(y);
    return y;
  };
  CompileOptions options = inductor_options(pure ? "W6p" : dynamic ? "W6d" : "W6i", dynamic);
  options.pure = pure;
  auto compiled = std::make_shared<decltype(compile(chain))>(compile(chain, options));
  (*compiled)(*x);
  return [x, compiled] { (*compiled)(*x); };
}
// W6sp: one add on [64] under inductor in pure mode: the per-call floor of a pure hit (guards,
// the compiled graph's call, one output allocation), which W6p adds its kernel's arithmetic to.
std::function<void()> w6_single_pure() {
  auto x = std::make_shared<Tensor>(randn({64}));
  auto c = std::make_shared<Tensor>(randn({64}));
  auto one = [c](const Tensor& x) { return x + *c; };
  CompileOptions options = inductor_options("W6sp");
  options.pure = true;
  auto compiled = std::make_shared<decltype(compile(one))>(compile(one, options));
  (*compiled)(*x);
  return [x, compiled] { (*compiled)(*x); };
}

// A training step (zero_grad, forward, loss, backward, optimizer step) compiled whole.
template <class Step>
std::function<void()> compiled_step(Step step, const char* name) {
  auto compiled = std::make_shared<decltype(compile(step))>(compile(step, inductor_options(name)));
  (*compiled)();
  return [compiled] { (*compiled)(); };
}

// W10: pytorch/examples' mnist network's training step on a batch of 64 [1, 28, 28] images:
// conv 1->32 (3x3), relu, conv 32->64 (3x3), relu, max_pool 2, dropout 0.25, flatten, linear
// 9216->128, relu, dropout 0.5, linear 128->10, log_softmax, nll_loss, Adadelta (lr 1).
// W10i: the step through kiln::compile (inductor).
std::function<Tensor()> mnist_step() {
  manual_seed(10);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Conv2d>(1, 32, std::vector<int64_t>{3}))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Conv2d>(32, 64, std::vector<int64_t>{3}))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{2}))
      .push_back(std::make_shared<nn::Dropout>(0.25))
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(9216, 128))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Dropout>(0.5))
      .push_back(std::make_shared<nn::Linear>(128, 10));
  auto opt = std::make_shared<optim::Adadelta>(net->parameters(), optim::AdadeltaOptions{});
  auto x = std::make_shared<Tensor>(randn({64, 1, 28, 28}));
  auto y = std::make_shared<Tensor>(randint(0, 10, {64}));
  return [net, opt, x, y] {
    opt->zero_grad();
    Tensor loss = nll_loss(log_softmax(net->forward(*x), 1), *y);
    loss.backward();
    opt->step();
    return loss;
  };
}

// W9: a ResNet-18 (torchvision's: 7x7 stem, max pool, four stages of two basic blocks, 64 to
// 512 channels, global average pool, linear to 1000 classes; batch norm in training mode)
// forward, backward and SGD step (lr 0.01, momentum 0.9) on a batch of 16 [3, 64, 64] images.
// W9i: the step through kiln::compile (inductor).
class BasicBlock final : public nn::UnaryModule {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) : UnaryModule("BasicBlock") {
    conv1 = register_module("conv1", conv(in, out, 3, stride, 1));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", conv(out, out, 3, 1, 1));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      down = register_module("downsample_conv", conv(in, out, 1, stride, 0));
      down_bn = register_module("downsample_bn", std::make_shared<nn::BatchNorm2d>(out));
    }
  }
  static std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride,
                                          int64_t padding) {
    return std::make_shared<nn::Conv2d>(
        in, out, std::vector<int64_t>{k},
        nn::ConvOptions{.stride = {stride}, .padding = {padding}, .bias = false});
  }
  Tensor forward(const Tensor& x) override {
    const Tensor y = bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(x)))));
    return relu(y + (down ? down_bn->forward(down->forward(x)) : x));
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2, down;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, down_bn;
};
std::function<Tensor()> resnet18_step() {
  manual_seed(9);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(BasicBlock::conv(3, 64, 7, 2, 3))
      .push_back(std::make_shared<nn::BatchNorm2d>(64))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::MaxPool2d>(std::vector<int64_t>{3}, std::vector<int64_t>{2},
                                                 std::vector<int64_t>{1}));
  int64_t channels = 64;
  for (const int64_t width : {64, 128, 256, 512}) {
    net->push_back(std::make_shared<BasicBlock>(channels, width, width == 64 ? 1 : 2))
        .push_back(std::make_shared<BasicBlock>(width, width, 1));
    channels = width;
  }
  net->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(std::vector<int64_t>{1}))
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Linear>(512, 1000));
  auto opt = std::make_shared<optim::SGD>(net->parameters(),
                                          optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  auto x = std::make_shared<Tensor>(randn({16, 3, 64, 64}));
  auto y = std::make_shared<Tensor>(randint(0, 1000, {16}));
  return [net, opt, x, y] {
    opt->zero_grad();
    Tensor loss = cross_entropy(net->forward(*x), *y);
    loss.backward();
    opt->step();
    return loss;
  };
}

// W11: pytorch/examples' word_language_model step, small: embedding 10000->200, a 2-layer LSTM
// of 200 over 35 steps of a batch of 20, linear 200->10000, cross-entropy, gradients clipped to
// norm 0.25, SGD (lr 20). W11i: the step through kiln::compile (inductor).
std::function<Tensor()> lstm_lm_step() {
  manual_seed(11);
  auto embed = std::make_shared<nn::Embedding>(10000, 200);
  auto lstm = std::make_shared<nn::LSTM>(200, 200, nn::RNNOptions{.num_layers = 2});
  auto head = std::make_shared<nn::Linear>(200, 10000);
  std::vector<Tensor> params = embed->parameters();
  for (const nn::Module* m :
       {static_cast<const nn::Module*>(lstm.get()), static_cast<const nn::Module*>(head.get())})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  auto opt = std::make_shared<optim::SGD>(params, optim::SGDOptions{.lr = 20});
  auto tokens = std::make_shared<Tensor>(randint(0, 10000, {35, 20}));
  auto targets = std::make_shared<Tensor>(randint(0, 10000, {35, 20}));
  return [embed, lstm, head, opt, params, tokens, targets] {
    opt->zero_grad();
    auto [out, state] = lstm->forward(embed->forward(*tokens));
    Tensor loss = cross_entropy(head->forward(out).reshape({-1, 10000}), targets->reshape({-1}));
    loss.backward();
    optim::clip_grad_norm_tensor_(params, 0.25);
    opt->step();
    return loss;
  };
}

std::function<void()> w4_inductor() {
  manual_seed(4);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(784, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 512))
      .push_back(std::make_shared<nn::ReLU>())
      .push_back(std::make_shared<nn::Linear>(512, 10));
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01});
  auto x = std::make_shared<Tensor>(randn({256, 784}));
  auto y = std::make_shared<Tensor>(randint(0, 10, {256}));
  return compiled_step(
      [model, opt, x, y] {
        opt->zero_grad();
        Tensor loss = cross_entropy(model->forward(*x), *y);
        loss.backward();
        opt->step();
        return loss;
      },
      "W4i");
}

std::function<void()> w5_inductor() {
  manual_seed(5);
  auto block = std::make_shared<nn::Block>(256, 4);
  auto opt = std::make_shared<optim::AdamW>(block->parameters(), optim::AdamWOptions{});
  auto x = std::make_shared<Tensor>(randn({8, 128, 256}));
  auto target = std::make_shared<Tensor>(randn({8, 128, 256}));
  return compiled_step(
      [block, opt, x, target] {
        opt->zero_grad();
        Tensor loss = mse_loss(block->forward(*x), *target);
        loss.backward();
        opt->step();
        return loss;
      },
      "W5i");
}

}  // namespace

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"W1", "pointwise chain gelu(x*a+b)*sigmoid(x)+0.5*x, 16M float32", "141-188 ms", w1},
      {"W1g", "gelu alone on W1's input (eager): the yardstick of W1i", "n/a", w1_gelu_alone},
      {"W2", "softmax over the last dim of [4096, 1024]", "1.9-2.1 ms", w2},
      {"W3", "layer_norm over the last dim of [8192, 1024], weight+bias", "13-14 ms", w3},
      {"W4", "MLP training step 784-512-512-10, batch 256, SGD", "10.3-10.8 ms",
       [] { return w4(); }},
      {"W5", "GPT-2 block training step B8 T128 C256 4 heads, AdamW", "115-125 ms",
       [] { return w5(); }},
      {"W4m", "W4 with the model compiled (aot_eager), loss/backward/step outside", "n/a",
       [] { return w4("aot_eager", "W4m"); }},
      {"W5m", "W5 with the block compiled (aot_eager), loss/backward/step outside", "n/a",
       [] { return w5("aot_eager", "W5m"); }},
      {"W4mi", "W4m with aot_autograd(inductor): forward and backward generated", "n/a",
       [] { return w4(aot_inductor(), "W4mi"); }},
      {"W5mi", "W5m with aot_autograd(inductor): forward and backward generated", "n/a",
       [] { return w5(aot_inductor(), "W5mi"); }},
      {"W6", "100 small pointwise ops (add/mul/tanh) on [64]", "224 us", w6},
      {"W6c", "W6 through kiln::compile (eager backend, cached graph)", "n/a", w6_compiled},
      {"W6s", "one add on [64]", "n/a", w6_single},
      {"W6sc", "W6s through kiln::compile (eager backend, cached graph)", "n/a",
       w6_single_compiled},
      {"W1i", "W1 through kiln::compile (inductor)", "n/a", [] { return w1_inductor(); }},
      {"W2i", "W2 through kiln::compile (inductor)", "n/a", [] { return w2_inductor(); }},
      {"W3i", "W3 through kiln::compile (inductor)", "n/a", [] { return w3_inductor(); }},
      {"W1d", "W1i with dynamic = true (the kernels of a dynamic graph)", "n/a",
       [] { return w1_inductor(true); }},
      {"W2d", "W2i with dynamic = true", "n/a", [] { return w2_inductor(true); }},
      {"W3d", "W3i with dynamic = true", "n/a", [] { return w3_inductor(true); }},
      {"W4i", "W4's whole step through kiln::compile (inductor)", "n/a", w4_inductor},
      {"W9", "ResNet-18 training step, batch 16 x [3, 64, 64], SGD with momentum", "n/a",
       [] {
         auto step = resnet18_step();
         return std::function<void()>([step] { step(); });
       }},
      {"W9i", "W9 through kiln::compile (inductor)", "n/a",
       [] { return compiled_step(resnet18_step(), "W9i"); }},
      {"W10", "mnist CNN training step (pytorch/examples), batch 64, Adadelta", "n/a",
       [] {
         auto step = mnist_step();
         return std::function<void()>([step] { step(); });
       }},
      {"W10i", "W10 through kiln::compile (inductor)", "n/a",
       [] { return compiled_step(mnist_step(), "W10i"); }},
      {"W11", "2-layer LSTM language-model step (200 wide, 35 x 20 tokens, vocab 10k), SGD", "n/a",
       [] {
         auto step = lstm_lm_step();
         return std::function<void()>([step] { step(); });
       }},
      {"W11i", "W11 through kiln::compile (inductor)", "n/a",
       [] { return compiled_step(lstm_lm_step(), "W11i"); }},
      {"W5i", "W5's whole step through kiln::compile (inductor)", "n/a", w5_inductor},
      {"W6i", "W6 through kiln::compile (inductor)", "n/a", [] { return w6_inductor(false); }},
      {"W6p", "W6 through kiln::compile (inductor, pure mode)", "n/a",
       [] { return w6_inductor(true); }},
      {"W6d", "W6i with dynamic = true (a dynamic entry's guards each call)", "n/a",
       [] { return w6_inductor(false, true); }},
      {"W6sp", "W6s through kiln::compile (inductor, pure mode)", "n/a", w6_single_pure},
      {"W7", "char-GPT training step (kiln train's model) V96 L4 C128 H4 T64 B32, AdamW", "n/a",
       [] { return w7_step("", "W7"); }},
      {"W7g", "W7's matrix products alone (forward and backward shapes)", "n/a",
       [] { return w7_gemms(); }},
      {"W7gl", "W7g's Linear products alone (Kiln's sgemm where it applies, else OpenBLAS)", "n/a",
       [] { return w7_gemms(W7Products::Linear); }},
      {"W7ga", "W7g's attention products alone (batched, Kiln's small-product kernel)", "n/a",
       [] { return w7_gemms(W7Products::Attention); }},
      {"W7c", "W7's whole step through kiln::compile (eager backend)", "n/a",
       [] { return w7_step("eager", "W7c"); }},
      {"W7i", "W7's whole step through kiln::compile (inductor)", "n/a",
       [] { return w7_step("inductor", "W7i"); }},
      {"W7d", "W7i with dynamic = true", "n/a", [] { return w7_step("inductor", "W7d", true); }},
      {"W8", "W7's model (batch 8) forward+backward at 50 lengths 2..51 in turn, eager", "n/a",
       [] { return w8_sweep(""); }},
      {"W8i", "W8 through a fresh kiln::compile per sweep (inductor, automatic dynamic)", "n/a",
       [] { return w8_sweep("i"); }},
      {"W8s", "W8i with dynamic = false (a graph per length, eager past cache_size_limit)", "n/a",
       [] { return w8_sweep("s"); }},
      {"W8w", "W8 through one kiln::compile warmed in setup (every length a cache hit)", "n/a",
       [] { return w8_sweep("w"); }},
      {"A1", "W7's attention core fwd+bwd: qkv [32,64,384] split, causal SDPA, 4 heads of 32",
       "n/a", [] { return attention_core("", "A1"); }},
      {"A1i", "A1 through kiln::compile (inductor)", "n/a",
       [] { return attention_core("inductor", "A1i"); }},
  };
  return all;
}

}  // namespace kiln::bench
