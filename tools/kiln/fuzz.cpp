// Program generation, execution and comparison for `kiln fuzz`.
#include "fuzz.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include "backends/inductor/cpp_compiler.h"

namespace kiln::fuzz {

namespace {

// Random choices from a seed; modulo instead of std::uniform_int_distribution so the programs
// are the same with every standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t below(int64_t n) { return static_cast<int64_t>(engine_() % static_cast<uint64_t>(n)); }

 private:
  std::mt19937_64 engine_;
};

using Apply = std::function<Tensor(const std::vector<Tensor>& args, const std::vector<int64_t>& p)>;
using ChooseParams = std::function<std::vector<int64_t>(const std::vector<Tensor>& args, Rng&)>;

struct OpSpec {
  std::string name;
  int arity;
  bool in_place;  // modifies its first argument (only intermediate values are chosen)
  Apply apply;
  ChooseParams params = [](const std::vector<Tensor>&, Rng&) { return std::vector<int64_t>{}; };
};

std::vector<int64_t> one_dim(const std::vector<Tensor>& a, Rng& rng) {
  return {a[0].dim() ? rng.below(a[0].dim()) : 0};
}

std::vector<int64_t> last_dim(const std::vector<Tensor>& a, Rng&) {
  return {a[0].dim() ? a[0].dim() - 1 : 0};
}

// The tensor parameters of a registered op whose schema has no others ("add(Tensor self,
// Tensor other)" → 2); 0 when it has attributes, optional tensors or lists.
int tensor_only_arity(const OpDef& op) {
  const std::string_view schema = op.schema;
  const size_t open = schema.find('('), close = schema.find(')');
  if (open == std::string_view::npos || close == std::string_view::npos) return 0;
  std::string_view params = schema.substr(open + 1, close - open - 1);
  int n = 0;
  while (!params.empty()) {
    const size_t comma = params.find(',');
    std::string_view p = params.substr(0, comma);
    while (!p.empty() && p.front() == ' ') p.remove_prefix(1);
    if (p.rfind("Tensor ", 0) != 0) return 0;
    ++n;
    if (comma == std::string_view::npos) break;
    params.remove_prefix(comma + 1);
  }
  return n;
}

// Every registered pointwise op taking only tensors (up to three) and differentiable: called
// through dispatch, as "op:<name>", on whatever values the program has (eager rejects
// mismatched shapes and dtypes, and the step is drawn again).
std::vector<OpSpec> registry_ops() {
  std::vector<OpSpec> out;
  for (const OpDef* op : all_ops()) {
    if (op->kind != OpKind::Pointwise || !op->derivative.fn) continue;
    const int arity = tensor_only_arity(*op);
    if (arity < 1 || arity > 3) continue;
    out.push_back({"op:" + std::string(op->name), arity, false,
                   [op](auto& a, auto&) { return dispatch1(*op, a, Attrs{}); }});
  }
  return out;
}

// Ops whose results are deterministic and comparable: data-dependent shapes are left out.
// (argmax is in: every backend must resolve ties as eager does, to the first.) Random ops are in:
// both runs start from the program's seed, and compiled code must draw what eager draws.
const std::vector<OpSpec>& ops() {
  static const std::vector<OpSpec> all = [] {
    std::vector<OpSpec> table = {
        {"add", 2, false, [](auto& a, auto&) { return a[0].add(a[1]); }},
        {"sub", 2, false, [](auto& a, auto&) { return a[0].sub(a[1]); }},
        {"mul", 2, false, [](auto& a, auto&) { return a[0].mul(a[1]); }},
        {"div", 2, false, [](auto& a, auto&) { return a[0].div(a[1].abs().exp()); }},
        {"neg", 1, false, [](auto& a, auto&) { return a[0].neg(); }},
        {"tanh", 1, false, [](auto& a, auto&) { return a[0].tanh(); }},
        {"sigmoid", 1, false, [](auto& a, auto&) { return a[0].sigmoid(); }},
        {"relu", 1, false, [](auto& a, auto&) { return a[0].relu(); }},
        {"exp", 1, false, [](auto& a, auto&) { return a[0].tanh().exp(); }},
        {"sum_dim", 1, false, [](auto& a, auto& p) { return a[0].sum({p[0]}, true); }, one_dim},
        {"mean_dim", 1, false, [](auto& a, auto& p) { return a[0].mean({p[0]}); }, one_dim},
        {"transpose", 1, false, [](auto& a, auto& p) { return a[0].transpose(p[0], p[1]); },
         [](const std::vector<Tensor>& a, Rng& rng) {
           int64_t d = std::max<int64_t>(a[0].dim(), 1);
           return std::vector<int64_t>{rng.below(d), rng.below(d)};
         }},
        {"narrow", 1, false, [](auto& a, auto& p) { return a[0].narrow(p[0], p[1], p[2]); },
         [](const std::vector<Tensor>& a, Rng& rng) {
           int64_t d = rng.below(std::max<int64_t>(a[0].dim(), 1));
           int64_t size = a[0].dim() ? a[0].sizes()[d] : 1;
           int64_t start = rng.below(size);
           return std::vector<int64_t>{d, start, 1 + rng.below(size - start)};
         }},
        {"flatten", 1, false, [](auto& a, auto&) { return a[0].reshape({-1}); }},
        {"expand", 1, false,
         [](auto& a, auto& p) {
           std::vector<int64_t> sizes(a[0].sizes().begin(), a[0].sizes().end());
           sizes.insert(sizes.begin(), p[0]);
           return a[0].expand(sizes);
         },
         [](const std::vector<Tensor>&, Rng& rng) {
           return std::vector<int64_t>{1 + rng.below(3)};
         }},
        {"add_", 2, true, [](auto& a, auto&) { return a[0].add_(a[1]); }},
        {"mul_scalar_", 1, true, [](auto& a, auto&) { return a[0].mul_(0.5); }},
        {"sub_", 2, true, [](auto& a, auto&) { return a[0].sub_(a[1], 0.5); }},
        {"copy_", 2, true, [](auto& a, auto&) { return a[0].copy_(a[1]); }},
        {"clamp_", 1, true, [](auto& a, auto&) { return a[0].clamp_(-0.5, 0.75); }},
        {"tanh_", 1, true,
         [](auto& a, auto&) {
           Tensor self = a[0];
           return tanh_(self);
         }},
        {"lerp_", 2, true,
         [](auto& a, auto&) {
           Tensor self = a[0];
           return lerp_(self, a[1], 0.25);
         }},
        {"matmul", 2, false, [](auto& a, auto&) { return a[0].matmul(a[1]); }},
        {"matmul_t", 2, false, [](auto& a, auto&) { return a[0].matmul(a[1].transpose(-1, -2)); }},
        {"softmax", 1, false, [](auto& a, auto& p) { return a[0].softmax(p[0]); }, one_dim},
        {"log_softmax", 1, false, [](auto& a, auto& p) { return a[0].log_softmax(p[0]); }, one_dim},
        {"layer_norm", 1, false,
         [](auto& a, auto&) { return layer_norm(a[0], {a[0].sizes().back()}); }, last_dim},
        {"gelu", 1, false, [](auto& a, auto&) { return gelu(a[0]); }},
        {"attention", 1, false,  // the fused kernel (q, k, v of one shape), causal or not
         [](auto& a, auto& p) {
           return scaled_dot_product_attention(a[0], a[0].tanh(), a[0] * 0.5, std::nullopt, 0.0,
                                               p[0] == 1);
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(2)}; }},
        {"amax_dim", 1, false, [](auto& a, auto& p) { return a[0].amax({p[0]}, true); }, one_dim},
        {"clamp", 1, false, [](auto& a, auto&) { return a[0].clamp(-0.5, 0.5); }},
        {"where", 2, false, [](auto& a, auto&) { return where(a[0] > 0, a[0], a[1]); }},
        {"pad", 1, false, [](auto& a, auto& p) { return pad(a[0], IntList(p), 0.5); },
         [](const std::vector<Tensor>& a, Rng& rng) {  // (a crop past the size is drawn again)
           std::vector<int64_t> amounts{rng.below(4) - 1, rng.below(3)};
           if (a[0].dim() >= 2) amounts.insert(amounts.end(), {rng.below(3) - 1, rng.below(2)});
           return amounts;
         }},
        {"flip", 1, false, [](auto& a, auto& p) { return flip(a[0], {p[0]}); }, one_dim},
        {"roll", 1, false, [](auto& a, auto& p) { return roll(a[0], {p[1] - 2}, {p[0]}); },
         [](const std::vector<Tensor>& a, Rng& rng) {
           return std::vector<int64_t>{a[0].dim() ? rng.below(a[0].dim()) : 0, rng.below(7)};
         }},
        {"rms_norm", 1, false, [](auto& a, auto&) { return rms_norm(a[0], {a[0].sizes().back()}); },
         last_dim},
        {"cat", 2, false,
         [](auto& a, auto& p) {
           return cat({a[0], a[1]}, p[0]);
         },
         one_dim},
        {"permute", 1, false,
         [](auto& a, auto&) {
           std::vector<int64_t> dims(static_cast<size_t>(a[0].dim()));
           for (size_t d = 0; d < dims.size(); ++d)
             dims[d] = a[0].dim() - 1 - static_cast<int64_t>(d);
           return a[0].permute(dims);
         }},
        {"unsqueeze", 1, false, [](auto& a, auto&) { return a[0].unsqueeze(0); }},
        {"dropout", 1, false, [](auto& a, auto&) { return dropout(a[0], 0.3, true); }},
        {"add_noise", 1, false, [](auto& a, auto&) { return a[0] + randn_like(a[0]) * 0.1; }},
        {"select_rows", 1, false,  // index_select and embedding: rows in reverse order
         [](auto& a, auto& p) {
           const Tensor x = a[0].dim() == 0 ? a[0].unsqueeze(0) : a[0];
           if (p[0] % 2 == 0) return index_select(x, 0, flip(arange(x.size(0)), {0}));
           const Tensor table = x.reshape({-1, x.size(-1)});
           return embedding(table, flip(arange(table.size(0)), {0}));
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(2)}; }},
        {"add_uniform", 1, false,
         [](auto& a, auto&) { return a[0] + rand(a[0].sizes(), a[0].dtype()) * 0.1; }},
        {"sum_leading", 1, false,  // over every dim but the last (a bias gradient)
         [](auto& a, auto&) {
           std::vector<int64_t> dims;
           for (int64_t d = 0; d + 1 < a[0].dim(); ++d) dims.push_back(d);
           return dims.empty() ? a[0].sum({}) : a[0].sum(dims);
         }},
        {"sum_rows_of_flattened", 1, false,  // a bias gradient: [B, T, C] seen as [B * T, C]
         [](auto& a, auto&) {
           const int64_t last = a[0].dim() ? a[0].size(-1) : 1;
           return a[0].reshape({-1, last}).sum({0}, true);
         }},
        {"max_last", 1, false,  // max(dim): the value where the index first reaches it
         [](auto& a, auto&) { return max(a[0], -1, true).first * 2; }},
        {"normalise_rows", 1, false,  // x / (||x||_2 + 1) along the last dim
         [](auto& a, auto&) { return a[0] / (norm(a[0], 2, {-1}, true) + 1); }},
        {"prod_last", 1, false,  // (tanh keeps the factors in [0.5, 1.5]: no overflow)
         [](auto& a, auto&) { return prod(a[0].tanh() * 0.5 + 1, {-1}, true); }},
        {"scale_by_argmax", 1, false,  // an index per row (eager's, ties included) as a factor
         [](auto& a, auto&) { return a[0] * (argmax(a[0], -1, true).to(a[0].dtype()) + 1); }},
        {"sum_all", 1, false, [](auto& a, auto&) { return a[0].sum(); }},
        {"mean_all_keepdim", 1, false, [](auto& a, auto&) { return a[0].mean({}, true); }},
        {"var_dim", 1, false,  // unbiased or not
         [](auto& a, auto& p) { return var(a[0], {p[0]}, p[1], true); },
         [](const std::vector<Tensor>& a, Rng& rng) {
           return std::vector<int64_t>{a[0].dim() ? rng.below(a[0].dim()) : 0, rng.below(2)};
         }},
        {"std_last", 1, false, [](auto& a, auto&) { return std(a[0] * 2 + 1, {-1}, 0); }},
        {"logsumexp_dim", 1, false, [](auto& a, auto& p) { return logsumexp(a[0], {p[0]}); },
         one_dim},
        {"cumsum_dim", 1, false, [](auto& a, auto& p) { return cumsum(a[0], p[0]); }, one_dim},
        {"sort_last", 1, false,  // the values in order, through argsort and gather
         [](auto& a, auto&) { return gather(a[0], -1, argsort(a[0], -1)); }},
        {"index_add_rows", 2, false,  // rows of the second added to the first's in reverse
         [](auto& a, auto&) {
           return index_add(a[0], 0, flip(arange(a[1].size(0)), {0}), a[1], 0.5);
         }},
        {"masked_fill", 1, false,
         [](auto& a, auto&) { return masked_fill(a[0], a[0] > 0.3, -1.0); }},
        {"log_sqrt_pow", 1, false,  // on values kept positive
         [](auto& a, auto& p) {
           const Tensor positive = a[0].abs() + 0.5;
           if (p[0] == 0) return positive.log();
           if (p[0] == 1) return positive.sqrt();
           return pow(positive, 1.5);
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(3)}; }},
        {"repeat", 1, false,
         [](auto& a, auto&) {
           std::vector<int64_t> times(static_cast<size_t>(std::max<int64_t>(a[0].dim(), 1)), 1);
           times.back() = 2;
           return repeat(a[0], times);
         }},
        {"tril_triu", 1, false,
         [](auto& a, auto& p) { return p[0] ? triu(a[0], p[1] - 1) : tril(a[0], p[1] - 1); },
         [](const std::vector<Tensor>&, Rng& rng) {
           return std::vector<int64_t>{rng.below(2), rng.below(3)};
         }},
        {"slice_step", 1, false,  // every second element along a dim: a strided view
         [](auto& a, auto& p) { return a[0].slice(p[0], 0, std::nullopt, 2); }, one_dim},
        {"squeeze", 1, false, [](auto& a, auto&) { return a[0].squeeze(); }},
        {"in_float64", 1, false,  // computed in double, rounded back
         [](auto& a, auto&) { return (a[0].to(DType::Float64).tanh() * 3).to(DType::Float32); }},
        {"mse_loss", 2, false, [](auto& a, auto&) { return mse_loss(a[0], a[1]); }},
        {"lerp_addcmul", 3, false,
         [](auto& a, auto& p) {
           return p[0] ? lerp(a[0], a[1], 0.25) : addcmul(a[0], a[1], a[2], 0.5);
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(2)}; }},
        {"min_argmin_dim", 1, false,
         [](auto& a, auto& p) {
           return min(a[0], p[0], true).first + argmin(a[0], p[0], true).to(a[0].dtype());
         },
         one_dim},
        {"detach", 1, false, [](auto& a, auto&) { return a[0].detach(); }},
        {"straight_through", 1, false,
         [](auto& a, auto&) { return a[0] + (a[0].tanh() - a[0]).detach(); }},
        {"gather_last", 1, false,  // each row in reverse order, through an index tensor
         [](auto& a, auto&) {
           return gather(a[0], -1, flip(arange(a[0].size(-1)), {0}).expand(a[0].sizes()));
         }},
        {"scatter_add_last", 2, false,  // the second's rows added into the first's, reversed
         [](auto& a, auto&) {
           return scatter_add(a[0], -1, flip(arange(a[1].size(-1)), {0}).expand(a[1].sizes()),
                              a[1]);
         }},
        {"cross_entropy", 1, false,  // the last dim as logits; targets equal to 0 ignored or not
         [](auto& a, auto& p) {
           const Tensor logits = a[0].reshape({-1, a[0].size(-1)});
           const Tensor target = arange(logits.size(0)) * 7 % logits.size(1);
           return cross_entropy(logits, target, p[0] == 1 ? 0 : -100);
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(2)}; }},
        {"linear_act", 2, false,  // x W^T + b, then relu or gelu: a product with an epilogue
         [](auto& a, auto& p) {
           const Tensor w = a[1].reshape({-1, a[0].size(-1)});
           // (a long flattened weight over a last dim of 1 would make an outer product of
           // gigabytes: kiln fuzz --seed 2700308 was killed for memory)
           if (w.size(0) > 256) throw ValueError("fuzz: linear_act's weight has too many rows");
           const Tensor y = linear(a[0], w, w.sum({1}) * 0.25);
           return p[0] == 1 ? gelu(y) : y.relu();
         },
         [](const std::vector<Tensor>&, Rng& rng) { return std::vector<int64_t>{rng.below(2)}; }},
        {"topk_last", 1, false,  // the k largest or smallest of each row (values)
         [](auto& a, auto& p) { return topk(a[0], p[0], -1, p[1] == 1).first; },
         [](const std::vector<Tensor>& a, Rng& rng) {
           const int64_t n = a[0].dim() ? a[0].sizes().back() : 1;
           return std::vector<int64_t>{1 + rng.below(n), rng.below(2)};
         }},
        {"diagonal", 1, false, [](auto& a, auto& p) { return a[0].diagonal(p[0], p[1], p[2]); },
         [](const std::vector<Tensor>& a, Rng& rng) {  // (equal dims are drawn again)
           const int64_t d = std::max<int64_t>(a[0].dim(), 1);
           return std::vector<int64_t>{rng.below(3) - 1, rng.below(d), rng.below(d)};
         }},
        {"windows", 1, false,  // overlapping pairs of the flattened value (as_strided)
         [](auto& a, auto&) {
           const Tensor f = a[0].reshape({-1});
           return f.as_strided({std::max<int64_t>(f.numel() - 1, 0), 2}, {1, 1});
         }},
        {"one_hot_argmax", 1, false,  // each row's largest element kept, the rest zeroed
         [](auto& a, auto&) {
           return a[0] * one_hot(argmax(a[0], -1), a[0].size(-1)).to(a[0].dtype());
         }},
        {"transposed_copy", 1, false,  // a reshape that must copy
         [](auto& a, auto&) { return a[0].transpose(0, -1).reshape({-1}); }},
        {"int_arith", 2, false,  // integer arithmetic on truncated values, then back to float
         [](auto& a, auto& p) {
           const DType dt = p[0] == 1 ? DType::Int64 : DType::Int32;
           const Tensor i = (a[0].detach() * 8).to(dt), j = (a[1].detach() * 8).to(dt);
           Tensor r;
           if (p[1] == 0) r = i * j + i - 3;
           if (p[1] == 1) r = floor_divide(i, j.abs() + 1);
           if (p[1] == 2) r = i % (j.abs() + 1) + (i > j).to(dt);
           if (p[1] == 3) r = bitwise_and(i, j) + i.sum({-1}, true);
           return r.to(a[0].dtype()) * 0.125 + a[0];
         },
         [](const std::vector<Tensor>&, Rng& rng) {
           return std::vector<int64_t>{rng.below(2), rng.below(4)};
         }},
        {"bool_logic", 2, false,  // comparisons combined as bools, as a factor
         [](auto& a, auto&) {
           const Tensor m = logical_and(a[0] > 0, !(a[1] < 0.5)) | (a[0] == a[1]);
           return a[0] * m.to(a[0].dtype()) + m.sum({-1}, true).to(a[0].dtype());
         }},
        {"masked_fill_", 1, true,
         [](auto& a, auto&) {
           Tensor self = a[0];
           return masked_fill_(self, self.detach() < -0.5, 0.25);
         }},
        {"scatter_add_", 2, true,
         [](auto& a, auto&) {
           Tensor self = a[0];
           return scatter_add_(self, -1, flip(arange(a[1].size(-1)), {0}).expand(a[1].sizes()),
                               a[1]);
         }},
    };
    for (OpSpec& spec : registry_ops()) table.push_back(std::move(spec));
    return table;
  }();
  return all;
}

const OpSpec& find(const std::string& name) {
  for (const OpSpec& s : ops())
    if (name == s.name) return s;
  throw Error("fuzz: unknown op '" + name + "'");
}

// `call` 0 is the program's own inputs; other calls draw other numbers of the same shapes.
// The calls a check makes, each with other numbers: the first captures and compiles, the second
// runs the cached code, the third passes its inputs in another layout (`in_other_layout`), which
// the guards must tell apart from the first's.
constexpr int kCalls = 3;
constexpr int kOtherLayoutCall = 2;

// The values of `t` in another layout of the same shape: dims stored in reverse order, every
// other element of a larger storage, starting at offset 1.
Tensor in_other_layout(const Tensor& t) {
  std::vector<int64_t> strides(static_cast<size_t>(t.dim()));
  int64_t step = 2;
  for (int64_t d = 0; d < t.dim(); ++d) {
    strides[static_cast<size_t>(d)] = step;
    step *= t.sizes()[d];
  }
  Tensor view = zeros({2 * t.numel() + 1}, t.dtype()).as_strided(t.sizes(), IntList(strides), 1);
  view.copy_(t);
  return view.detach();
}

Tensor make_input(const std::vector<int64_t>& shape, uint64_t seed, size_t index, int call) {
  Generator gen(seed * 131 + index + static_cast<uint64_t>(call) * 0x9E3779B97F4A7C15ull);
  Tensor t = randn(IntList(shape), kDefaultFloat, &gen);
  if (call == kOtherLayoutCall) t = in_other_layout(t);
  return index == kBufferInput ? t : t.requires_grad_();
}

std::vector<Tensor> make_inputs(const Program& p, int call = 0) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < p.input_shapes.size(); ++i)
    inputs.push_back(make_input(p.input_shapes[i], p.seed, i, call));
  return inputs;
}

// Runs the steps on `inputs`; returns the values made by the steps that no later step reads
// (the program's outputs: what is only read inside the program may be fused away).
// Monte Carlo arithmetic, to measure rounding noise: a step's new floating-point value times
// 1 + e per element, e uniform in ±2^-22 (float32; ±2^-51 float64), about an ulp or two, in the
// forward pass only. Views
// and in-place results are left alone: later steps rely on what memory they share.
Tensor perturbed(const Tensor& value, const std::vector<Tensor>& args, Generator& noise) {
  if (!value.defined() || !value.is_floating_point()) return value;
  for (const Tensor& a : args)
    if (a.defined() && a.impl()->memory_id() == value.impl()->memory_id()) return value;
  const double e = std::ldexp(1.0, value.dtype() == DType::Float64 ? -51 : -22);
  // Added as a constant: a factor would scale the value's gradient too, and keep the exact
  // cancellations this is meant to disturb.
  return value + value.detach() * (rand(value.sizes(), value.dtype(), &noise) * (2 * e) - e);
}

// `noise`, when given, perturbs every step's value (`perturbed`).
std::vector<Tensor> run_steps(const std::vector<Step>& steps, std::vector<Tensor> values,
                              Generator* noise = nullptr) {
  const size_t first_output = values.size();
  std::vector<bool> read(first_output + steps.size(), false);
  for (const Step& s : steps)
    for (int i : s.args) read[static_cast<size_t>(i)] = true;
  for (const Step& s : steps) {
    if (s.op == "graph_break") {
      graph_break();
      continue;
    }
    std::vector<Tensor> args;
    for (int i : s.args) args.push_back(values[i]);
    Tensor value = find(s.op).apply(args, s.params);
    values.push_back(noise ? perturbed(value, args, *noise) : value);
  }
  std::vector<Tensor> outputs;
  for (size_t i = first_output; i < values.size(); ++i)
    if (!read[i]) outputs.push_back(values[i]);
  return outputs;
}

// The random state every run of a program starts from (its random ops draw the same numbers).
void seed_for(uint64_t program_seed) { manual_seed(program_seed * 7919 + 17); }

// The whole program as one function: outputs, then backward of the sum of all outputs.
std::vector<Tensor> run_program(const std::vector<Step>& steps, const std::vector<Tensor>& inputs,
                                Generator* noise = nullptr) {
  std::vector<Tensor> outs = run_steps(steps, inputs, noise);
  Tensor total = scalar_tensor(0.0);
  for (const Tensor& o : outs) total = total.add(o.sum());
  total.backward();
  for (Tensor& o : outs) o = o.detach();
  return outs;
}

// Outputs, the gradients of the inputs that require grad, then the buffer's values after the
// call (in-place steps write it).
std::vector<Tensor> results(const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> all = outs;
  for (size_t i = 0; i < kBufferInput; ++i) all.push_back(inputs[i].grad());
  all.push_back(inputs[kBufferInput].detach());
  return all;
}

std::vector<int64_t> random_shape(Rng& rng) {
  // Sometimes more elements than one thread's share (kParallelGrain): kernels split across
  // threads, column sums with per-thread partials, rows handed out in chunks.
  if (rng.below(8) == 0) {
    if (rng.below(2) == 0) return {300 + rng.below(600), 40 + rng.below(80)};
    return {2 + rng.below(3), 100 + rng.below(200), 40 + rng.below(40)};
  }
  std::vector<int64_t> shape(1 + rng.below(3));
  for (int64_t& d : shape) d = 1 + rng.below(4);
  // Sometimes rows as long as the kernels that fold columns need (schedule.h's kMinColumns).
  if (rng.below(3) == 0) shape.back() = 32 + rng.below(48);
  return shape;
}

// A shape broadcasting with `base`: some leading dims dropped, some dims 1.
std::vector<int64_t> broadcastable(const std::vector<int64_t>& base, Rng& rng) {
  std::vector<int64_t> shape(base.begin() + rng.below(static_cast<int64_t>(base.size())),
                             base.end());
  for (int64_t& d : shape)
    if (rng.below(3) == 0) d = 1;
  return shape;
}

// Tries one random call on the current values; false when eager mode rejects it.
bool try_step(Rng& rng, size_t num_inputs, std::vector<Tensor>& values, std::vector<Step>& steps) {
  if (rng.below(10) == 0) {
    steps.push_back({"graph_break", {}, {}});
    return true;
  }
  const OpSpec& spec = ops()[rng.below(static_cast<int64_t>(ops().size()))];
  Step step{spec.name, {}, {}};
  std::vector<Tensor> args;
  for (int i = 0; i < spec.arity; ++i) {
    int64_t idx = rng.below(static_cast<int64_t>(values.size()));
    // What an in-place step writes: the buffer, or a value the program made (a view of the
    // buffer among them); an input that requires grad cannot be written.
    if (spec.in_place && i == 0) {
      const auto made = static_cast<int64_t>(values.size() - num_inputs);
      const int64_t pick = rng.below(made + 1);
      idx = pick == made ? static_cast<int64_t>(kBufferInput) : int64_t(num_inputs) + pick;
    }
    step.args.push_back(static_cast<int>(idx));
    args.push_back(values[idx]);
  }
  step.params = spec.params(args, rng);
  try {
    values.push_back(spec.apply(args, step.params));
  } catch (const Error&) {
    return false;  // shapes that do not broadcast, a view of a view that cannot be in place...
  }
  steps.push_back(step);
  return true;
}

// One attempt; empty steps when the program is not valid end to end (backward included).
Program attempt(uint64_t seed, uint64_t attempt_seed, int ops_per_program) {
  Rng rng(attempt_seed);
  Program p;
  p.seed = seed;
  std::vector<int64_t> base = random_shape(rng);
  p.input_shapes = {base, broadcastable(base, rng), random_shape(rng), base};
  std::vector<Tensor> values = make_inputs(p);
  seed_for(seed);
  for (int tries = 0;
       static_cast<int>(p.steps.size()) < ops_per_program && tries < 20 * ops_per_program; ++tries)
    try_step(rng, p.input_shapes.size(), values, p.steps);
  try {
    seed_for(seed);
    run_program(p.steps, make_inputs(p));
  } catch (const Error&) {
    p.steps.clear();  // e.g. an in-place op overwrote a value backward needs
  }
  return p;
}

// How far a float32 value may be from the float64 one by rounding alone, per element.
struct Noise {
  std::vector<double> reference;  // the float64 run's values
  std::vector<double> spread;     // the largest float32 error of the perturbed runs (or empty)
};

// Whether `compiled` matches `eager` elementwise. Where it does not by the fixed tolerance, a
// float64 run of the program (`noise`, when given) arbitrates, as torch's accuracy checker
// does: float32 rounding differs between a fused and an unfused evaluation, and cancellation
// (x / x, a - a) amplifies it; the compiled value passes when it is no further from the float64
// value than a few times eager's own float32 error, or than the perturbed runs' error.
bool close(const Tensor& eager, const Tensor& compiled, const Noise* noise, std::string& why) {
  if (eager.defined() != compiled.defined()) return why = "one side undefined", false;
  if (!eager.defined()) return true;
  if (eager.sizes() != compiled.sizes() || eager.dtype() != compiled.dtype())
    return why = "shape or dtype differs", false;
  std::vector<double> a = eager.to_vector<double>(), b = compiled.to_vector<double>();
  const std::vector<double>* r =
      noise && noise->reference.size() == a.size() ? &noise->reference : nullptr;
  const bool spread = r && noise->spread.size() == a.size();
  auto within = [](double x, double y, double slack) {
    return std::abs(x - y) <= 1e-5 + 1e-4 * std::abs(x) + slack;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;  // also ±inf
    if (within(a[i], b[i], 0)) continue;
    // Arbitrate only finite values, and only noise, capped at 1% (a branch flipped between
    // float32 and float64, at a relu or a clamp, is not noise).
    if (r && std::isfinite(a[i]) && std::isfinite((*r)[i])) {
      const double error = std::max(std::abs(a[i] - (*r)[i]), spread ? noise->spread[i] : 0.0);
      if (within((*r)[i], b[i], std::min(3 * error, 1e-2 * (1 + std::abs((*r)[i]))))) continue;
    }
    std::ostringstream os;
    os << "element " << i << ": eager " << a[i] << ", compiled " << b[i];
    if (r) os << ", float64 " << (*r)[i];
    if (spread) os << " (perturbed float32 runs within " << noise->spread[i] << " of it)";
    return why = os.str(), false;
  }
  return true;
}

// What arbitrates a call's float32 differences, per result (outputs first, as `expected`), or
// empty where float64 cannot: randn_like draws other numbers in float64 (dropout's masks are the
// same), and some programs need float32. Eager's own float32 error can understate the noise:
// where cancellation leaves a small difference of large terms, eager's order may cancel them
// exactly (x/d * (1/c) against (x * (1/c))/d) while any other order is off by a rounding step of
// the terms. So the program also runs twice in float32 with every step's value perturbed by an
// ulp or two (Monte Carlo arithmetic), and the largest error of those runs counts as noise too.
std::vector<Noise> float64_noise(const Program& program, int call) {
  for (const Step& s : program.steps)
    if (s.op == "add_noise") return {};
  std::vector<Noise> noise;
  try {
    std::vector<Tensor> inputs;
    for (const Tensor& t : make_inputs(program, call))
      inputs.push_back(t.detach().to(DType::Float64).requires_grad_(t.requires_grad()));
    seed_for(program.seed);
    for (const Tensor& r : results(run_program(program.steps, inputs), inputs))
      noise.push_back({r.defined() ? r.to_vector<double>() : std::vector<double>{}, {}});
    for (uint64_t run = 1; run <= 2; ++run) {
      Generator perturbation(program.seed * 31 + run);
      const std::vector<Tensor> inputs32 = make_inputs(program, call);
      seed_for(program.seed);
      const std::vector<Tensor> values =
          results(run_program(program.steps, inputs32, &perturbation), inputs32);
      for (size_t j = 0; j < noise.size(); ++j) {
        const std::vector<double>& r = noise[j].reference;
        if (!values[j].defined() || values[j].numel() != static_cast<int64_t>(r.size())) continue;
        const std::vector<double> a = values[j].to_vector<double>();
        std::vector<double>& spread = noise[j].spread;
        spread.resize(a.size(), 0.0);
        for (size_t i = 0; i < a.size(); ++i)
          if (std::isfinite(a[i]) && std::isfinite(r[i]))
            spread[i] = std::max(spread[i], std::abs(a[i] - r[i]));
      }
    }
  } catch (const Error&) {
    // what was measured before a run failed still arbitrates
  }
  return noise;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os.str() + "]";
}

}  // namespace

Program generate(uint64_t seed, int ops_per_program) {
  // A deterministic sequence of attempts: the first valid one is the program.
  for (uint64_t k = 0;; ++k) {
    Program p = attempt(seed, seed * 1000003 + k, ops_per_program);
    if (!p.steps.empty()) return p;
  }
}

std::string Program::text() const {
  std::ostringstream os;
  os << "# seed " << seed << "\n";
  std::vector<Tensor> values = make_inputs(*this);
  seed_for(seed);
  for (size_t i = 0; i < values.size(); ++i)
    os << "v" << i << " = input float32 " << shape_text(input_shapes[i])
       << (i == kBufferInput ? " (no grad; in-place steps may write it)\n" : " requires_grad\n");
  for (const Step& s : steps) {
    if (s.op == "graph_break") {
      os << "graph_break()\n";
      continue;
    }
    std::vector<Tensor> args;
    for (int i : s.args) args.push_back(values[i]);
    values.push_back(find(s.op).apply(args, s.params));
    os << "v" << values.size() - 1 << " = " << s.op << "(";
    for (size_t i = 0; i < s.args.size(); ++i) os << (i ? ", " : "") << "v" << s.args[i];
    for (int64_t p : s.params) os << ", " << p;
    std::vector<int64_t> sizes(values.back().sizes().begin(), values.back().sizes().end());
    os << ") -> " << dtype_info(values.back().dtype()).name << " " << shape_text(sizes) << "\n";
  }
  os << "backward(sum of all sums)\n";
  return os.str();
}

namespace {

// The steps a check runs: in pure mode without graph breaks (a break is not pure).
std::vector<Step> steps_for(const Program& program, CheckMode mode) {
  std::vector<Step> steps;
  for (const Step& s : program.steps)
    if (!mode.pure || s.op != "graph_break") steps.push_back(s);
  return steps;
}

// Whether pure mode can skip the function: no random draws and no in-place writes.
bool can_be_pure(const Program& program) {
  for (const Step& s : program.steps) {
    if (s.op == "graph_break") continue;  // left out in pure mode
    if (s.op == "dropout" || s.op == "add_noise" || s.op == "add_uniform" || find(s.op).in_place)
      return false;
  }
  return true;
}

std::vector<Tensor> inputs_for(const Program& program, int call, CheckMode mode) {
  std::vector<Tensor> inputs = make_inputs(program, call);
  if (mode.pure)
    for (Tensor& t : inputs) t = t.detach();
  return inputs;
}

// The program as the function that is compiled: the forward steps in pure mode, else forward
// and backward (run_program). `invocations`, when given, counts the calls that reach it.
auto function_for(const std::vector<Step>& steps, CheckMode mode, int* invocations = nullptr) {
  return [&steps, mode, invocations](std::vector<Tensor> in) {
    if (invocations) ++*invocations;
    return mode.pure ? run_steps(steps, std::move(in)) : run_program(steps, in);
  };
}

// A call's results: the outputs, then (unless pure) the inputs' gradients.
template <typename F>
std::vector<Tensor> call_results(F&& f, const Program& program, const std::vector<Tensor>& inputs,
                                 CheckMode mode) {
  seed_for(program.seed);
  std::vector<Tensor> outs = f(inputs);
  return mode.pure ? outs : results(outs, inputs);
}

// What entry i of a call's `size` results is: outputs, then (unless pure) the gradients and the
// buffer's values.
std::string result_name(size_t i, size_t size, CheckMode mode) {
  const size_t tail = mode.pure ? 0 : kBufferInput + 1;
  if (i < size - tail) return "output " + std::to_string(i);
  const size_t k = i - (size - tail);
  return k < kBufferInput ? "gradient of v" + std::to_string(k)
                          : "v" + std::to_string(kBufferInput) + " after the call";
}

// Where `actual` (a compiled call's results) differs from `expected` (eager's), or empty; a
// float64 run of the same call arbitrates rounding noise.
std::string difference(const Program& program, int call, CheckMode mode,
                       const std::vector<Tensor>& expected, const std::vector<Tensor>& actual) {
  std::vector<Noise> noise;
  bool have_noise = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    std::string why;
    if (close(expected[i], actual[i], nullptr, why)) continue;
    if (!have_noise) {
      noise = float64_noise(program, call);
      have_noise = true;
    }
    if (i < noise.size() && close(expected[i], actual[i], &noise[i], why)) continue;
    return result_name(i, expected.size(), mode) + ": " + why;
  }
  return {};
}

// `program` with every input dim of 2 or more grown by `by` (CheckMode::dynamic).
Program grown(const Program& program, int64_t by) {
  Program g = program;
  for (std::vector<int64_t>& shape : g.input_shapes)
    for (int64_t& d : shape)
      if (d >= 2) d += by;
  return g;
}
constexpr int64_t kGrowths = 3;

}  // namespace

void collect_inductor_sources(const Program& program, std::vector<std::string>& sources,
                              CheckMode mode) {
  const Backend collect = inductor::source_collecting_backend(sources);
  const std::vector<Step> steps = steps_for(program, mode);
  auto fn = kiln::compile(function_for(steps, mode), CompileOptions{.backend = collect});
  for (int call : {0, kOtherLayoutCall}) {  // the layouts the check's calls compile for
    try {
      seed_for(program.seed);
      fn(inputs_for(program, call, mode));
    } catch (const Error&) {
      // a program the collecting run cannot finish is checked (and reported) all the same
    }
  }
  for (int64_t by = 1; mode.dynamic && by <= kGrowths; ++by) {
    try {
      seed_for(program.seed);
      fn(inputs_for(grown(program, by), 0, mode));
    } catch (const Error&) {
      break;  // (as the check: no larger sizes once eager rejects one)
    }
  }
}

Check check(const Program& program, const std::string& backend, CheckMode mode) {
  if (mode.pure && !can_be_pure(program)) return {Verdict::kSkipped, "random or in-place steps"};
  // Calls with other numbers (kCalls): the first compiles, the second runs the cached code (the
  // path of every later call in a training loop; in pure mode, without calling the function),
  // the third has its inputs in another layout. The first call's results must still hold after
  // the last: a buffer handed out again would overwrite them.
  int calls = kCalls;
  const std::vector<Step> steps = steps_for(program, mode);
  auto eager = function_for(steps, mode);
  std::vector<std::vector<Tensor>> expected, actual;
  for (int call = 0; call < calls; ++call) {
    const std::vector<Tensor> inputs = inputs_for(program, call, mode);
    try {
      expected.push_back(call_results(eager, program, inputs, mode));
    } catch (const Error&) {
      // Eager mode rejects the program in this call's layout (an in-place write with gradients
      // into a view of a non-contiguous tensor is NotImplementedError): the check stops before
      // it. The first call's layout is the one the program was generated in.
      if (call == 0) throw;
      calls = call;
      break;
    }
    // A result over an input's memory is not computed by a graph: pure mode calls the function
    // for such programs (and says so once per function), as without pure mode.
    for (const Tensor& out : expected.back())
      for (const Tensor& in : inputs)
        if (mode.pure && out.impl()->memory_id() == in.impl()->memory_id())
          return {Verdict::kSkipped, "a result is a view of an input"};
  }
  CompileOptions options;
  options.backend = backend;
  options.pure = mode.pure;
  int invocations = 0;
  auto fn = kiln::compile(function_for(steps, mode, &invocations), options);
  for (int call = 0; call < calls; ++call) {
    const std::string which = call == 0 ? "" : "call " + std::to_string(call + 1) + ": ";
    try {
      actual.push_back(call_results(fn, program, inputs_for(program, call, mode), mode));
    } catch (const Error& e) {
      return {Verdict::kError, which + e.what()};
    }
    if (std::string why = difference(program, call, mode, expected[call], actual[call]);
        !why.empty())
      return {Verdict::kMismatch, which + why};
  }
  if (std::string why = difference(program, 0, mode, expected[0], actual[0]); !why.empty())
    return {Verdict::kMismatch, "the first call's results changed in later calls: " + why};
  // Dynamic shapes: the same function at other sizes (those eager accepts).
  Check passed;
  for (int64_t by = 1; mode.dynamic && by <= kGrowths; ++by) {
    const Program at = grown(program, by);
    std::vector<Tensor> want;
    try {
      want = call_results(eager, at, inputs_for(at, 0, mode), mode);
    } catch (const Error&) {
      break;  // the program's steps do not fit these sizes (a fixed narrow, a matmul)
    }
    const std::string which = "sizes grown by " + std::to_string(by) + ": ";
    std::vector<Tensor> got;
    try {
      got = call_results(fn, at, inputs_for(at, 0, mode), mode);
    } catch (const Error& e) {
      return {Verdict::kError, which + e.what()};
    }
    if (std::string why = difference(at, 0, mode, want, got); !why.empty())
      return {Verdict::kMismatch, which + why};
    ++passed.sizes_checked;
  }
  // Pure mode's later calls are meant to skip the function; say when they did not.
  if (mode.pure && invocations == calls) passed.detail = "the function ran on every call";
  return passed;
}

}  // namespace kiln::fuzz
